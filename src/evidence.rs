//! What the stages verified about one request: the policy input, the identity headers sent
//! upstream, the session owner and the decision log are built from this, and from nothing a
//! client can set directly. Only the pipeline fills it; a `Permit` or `Refusal` carries it.

use portcullis_wire::mcp::McpRequest;

use crate::oauth::{Binding, VerifiedToken};
use crate::signature::VerifiedSignature;
use crate::state::caller::CallerKey;

/// What the stages verified so far: the policy input, the identity headers sent upstream and
/// the decision log are built from this, and from nothing a client can set directly.
#[derive(Debug, Default)]
pub struct Evidence {
    /// Stages 3–6 result: the verified, first-use signature and the agent it speaks for.
    /// `None` when the request was unsigned and signatures are optional, or a stage 2–6
    /// refused (in monitor mode such a request is forwarded without identity).
    pub agent: Option<VerifiedSignature>,
    /// Stage 7 result: the verified bearer token (the user), when one was sent.
    pub token: Option<VerifiedToken>,
    /// Stage 7: how the token is bound to this request (set with `token`).
    pub binding: Option<Binding>,
    /// Stage 8 result: the parsed JSON-RPC message(s). Tool arguments are never logged.
    pub mcp: Option<McpRequest>,
    /// The tool catalog: `input.mcp.tool_definition` of each called tool it knows, by name.
    pub tool_definitions: Vec<(String, regorus::Value)>,
    /// Stage 9: which policy version decided and the rule it named.
    pub policy: Option<PolicyTrace>,
    /// Stage 10: the bucket that was exhausted, when one was.
    pub quota_exhausted: Option<String>,
    /// The idempotency journal's claim: this call's reservation, or the answer to replay.
    pub idempotency: Option<crate::idempotency::Claim>,
    /// The approval this request consumed, when the policy asked for one.
    pub approval: Option<crate::approval::ApprovalUse>,
}

impl Evidence {
    /// Whom per-caller bounds count this request against (decision 13), from what was verified
    /// only: the user (the token's issuer and `sub`), else the agent, else the client address
    /// `peer` (one bucket per address for callers with no verified identity).
    pub(crate) fn caller(&self, peer: std::net::IpAddr) -> CallerKey {
        if let Some(user) = self.token.as_ref().and_then(|t| t.user_key()) {
            return *user;
        }
        match &self.agent {
            Some(a) => CallerKey::agent(a.agent()),
            None => CallerKey::address(peer),
        }
    }
}

/// What the decision log says about the policy decision.
#[derive(Debug, Clone, Default)]
pub struct PolicyTrace {
    /// The rule(s) the decision named (`rule`), or `policy_error`.
    pub rule: Option<String>,
    /// The policy set's version.
    pub version: String,
    /// The decision's `upstream_scopes` (for a batch, the scopes every message's decision
    /// allows): what the backend's exchanged token may have for this call.
    pub upstream_scopes: Option<Vec<String>>,
}
