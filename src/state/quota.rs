//! Quota store: atomic counters with cost for the quotas a policy decision names (stage 10).
