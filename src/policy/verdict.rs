//! The decision contract (docs/design.md "Policy contract"), parsed strictly: a decision that is
//! undefined, has a wrong type, an unknown field or a bad quota is an error, never an allow.

use std::time::Duration;

use serde::Deserialize;

use crate::config::parse_duration;
use crate::quota::QuotaSpec;

/// What the policy decided for one message (or, merged, for one request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// Whether the action may happen (before scopes and quotas).
    pub allow: bool,
    /// The policy's reason (the refusal's `reason`).
    pub reason: String,
    /// The rule(s) that produced the decision, as the policy names them.
    pub rule: Option<String>,
    /// Scopes the user's token must hold.
    pub required_scopes: Vec<String>,
    /// Scopes the backend's exchanged token may have for this call (`upstream.auth`): the
    /// requested scope is narrowed to them. `None`: not narrowed.
    pub upstream_scopes: Option<Vec<String>>,
    /// Buckets to spend.
    pub quotas: Vec<QuotaSpec>,
    /// Whether the call uses the idempotency journal (`"idempotency": {"required": …}`).
    pub idempotency: Option<KeyUse>,
    /// `"approval": {"message": …}` on an allowing decision: a person must approve this call
    /// first (docs/approvals.md). Ignored on a denial: a denial always wins.
    pub approval: Option<ApprovalAsk>,
}

/// What a decision's `approval` asks the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAsk {
    /// The text shown to the agent's user and on the approval page.
    pub message: String,
}

/// What a decision's `idempotency` says about the `Idempotency-Key` header. Ordered so that
/// merging a batch's decisions keeps the strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyUse {
    /// `"required": false`: a key, when sent, is honoured.
    Optional,
    /// `"required": true`: a call without a key is refused (400 `idempotency_key_required`).
    Required,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDecision {
    allow: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    required_scopes: Vec<String>,
    #[serde(default)]
    upstream_scopes: Option<Vec<String>>,
    #[serde(default)]
    quotas: Vec<RawQuota>,
    #[serde(default)]
    idempotency: Option<RawKeyUse>,
    #[serde(default)]
    approval: Option<RawApproval>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApproval {
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeyUse {
    #[serde(default)]
    required: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuota {
    key: String,
    #[serde(default = "one")]
    cost: u64,
    limit: u64,
    per: String,
    /// `"server"` (default: counted per server) or `"global"`.
    #[serde(default)]
    scope: Option<String>,
}

fn one() -> u64 {
    1
}

/// Parses the value of `policy.query`. `Err` says what is malformed (for the operator's log).
pub(crate) fn parse(value: &regorus::Value) -> Result<PolicyVerdict, String> {
    if *value == regorus::Value::Undefined {
        return Err("the decision is undefined for this input (no rule and no default produced it)".to_owned());
    }
    let json = serde_json::to_value(value).map_err(|e| format!("the decision cannot be read: {e}"))?;
    let raw: RawDecision = serde_json::from_value(json).map_err(|e| format!("malformed decision: {e}"))?;
    let mut quotas = Vec::with_capacity(raw.quotas.len());
    for (i, q) in raw.quotas.into_iter().enumerate() {
        if q.key.is_empty() {
            return Err(format!("quotas[{i}].key is empty"));
        }
        if q.limit == 0 {
            return Err(format!("quotas[{i}].limit must be at least 1"));
        }
        let per = parse_duration(&q.per).map_err(|e| format!("quotas[{i}].per: {e}"))?;
        if per == Duration::ZERO {
            return Err(format!("quotas[{i}].per must be greater than zero"));
        }
        let global = match q.scope.as_deref() {
            None | Some("server") => false,
            Some("global") => true,
            Some(other) => return Err(format!("quotas[{i}].scope must be \"server\" or \"global\", not {other:?}")),
        };
        quotas.push(QuotaSpec { key: q.key, cost: q.cost, limit: q.limit, per, global });
    }
    // RFC 6749 §3.3 scope tokens: they go into the exchange's `scope` as they are.
    for (i, scope) in raw.upstream_scopes.iter().flatten().enumerate() {
        if !crate::config::is_scope_token(scope) {
            return Err(format!("upstream_scopes[{i}] is not a scope token (RFC 6749 §3.3)"));
        }
    }
    let reason = raw.reason.unwrap_or_else(|| if raw.allow { "allowed".to_owned() } else { "denied_by_policy".to_owned() });
    let idempotency = raw.idempotency.map(|i| if i.required { KeyUse::Required } else { KeyUse::Optional });
    let approval = match raw.approval {
        Some(a) if a.message.trim().is_empty() => return Err("approval.message is empty".to_owned()),
        Some(a) if raw.allow => Some(ApprovalAsk { message: a.message }),
        // A denial always wins: there is nothing to approve.
        _ => None,
    };
    Ok(PolicyVerdict {
        allow: raw.allow,
        reason,
        rule: raw.rule,
        required_scopes: raw.required_scopes,
        upstream_scopes: raw.upstream_scopes,
        quotas,
        idempotency,
        approval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(json: serde_json::Value) -> Result<PolicyVerdict, String> {
        parse(&serde_json::from_value::<regorus::Value>(json).expect("value"))
    }

    #[test]
    fn upstream_scopes_are_scope_tokens_or_the_decision_is_malformed() {
        assert_eq!(decision(serde_json::json!({"allow": true})).unwrap().upstream_scopes, None);
        let v = decision(serde_json::json!({"allow": true, "upstream_scopes": ["weather:read"]})).unwrap();
        assert_eq!(v.upstream_scopes, Some(vec!["weather:read".to_owned()]));
        let err = decision(serde_json::json!({"allow": true, "upstream_scopes": ["two words"]})).err().unwrap();
        assert_eq!(err, "upstream_scopes[0] is not a scope token (RFC 6749 §3.3)");
    }
}
