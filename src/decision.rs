//! Decisions: the one type every request ends in, the one place modes apply, and the one
//! mapping from outcomes to HTTP (docs/design.md "Refusals").
//!
//! `pipeline::check` returns a [`Decision`]. [`apply_mode`] is the only function that makes a
//! [`Forward`] (the proxy forwards nothing else), so no stage can know or care about the mode.
//! [`respond`] and [`respond_upstream`] are the only places that choose a status code for a
//! refusal; every refusal carries `Cache-Control: no-store` and a JSON body with `request_id`.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};

pub use crate::challenge::{quote, Challenge};
use crate::config::{Group, Modes};
pub use crate::denial::{retry_after_secs, Denial};
use crate::evidence::Evidence;
use crate::finding::Finding;
use crate::oauth::TokenError;
use crate::pipeline::{Decision, Permit, Refusal};

/// The body type of every response the gateway sends (refusals and streamed upstream bodies).
pub type ResponseBody = BoxBody<Bytes, hyper::Error>;

/// A request the proxy may forward, with the evidence its identity headers are made from.
/// Only [`apply_mode`] makes one (its fields are private to this module), from a
/// [`pipeline::Decision`](crate::pipeline::Decision) that only `pipeline::check` makes: a
/// forward without a decision does not compile.
#[derive(Debug)]
pub struct Forward {
    kind: ForwardKind,
}

#[derive(Debug)]
enum ForwardKind {
    /// Every stage passed.
    Permitted(Permit),
    /// Monitor mode: this refusal would have been sent in enforce mode.
    Monitored(Refusal),
}

impl Forward {
    /// What the stages verified: only this names the agent and user upstream.
    pub fn evidence(&self) -> &Evidence {
        match &self.kind {
            ForwardKind::Permitted(p) => p.evidence(),
            ForwardKind::Monitored(r) => r.evidence(),
        }
    }

    /// The refusal monitor mode let through, if any (the first finding).
    pub fn monitored(&self) -> Option<&Denial> {
        match &self.kind {
            ForwardKind::Permitted(_) => None,
            ForwardKind::Monitored(r) => Some(r.denial()),
        }
    }

    /// Every refusal monitor mode let through, in pipeline order.
    pub fn findings(&self) -> &[Finding] {
        match &self.kind {
            ForwardKind::Permitted(_) => &[],
            ForwardKind::Monitored(r) => r.findings(),
        }
    }

    /// The evidence, once forwarding is done (for the decision log).
    pub fn into_evidence(self) -> Evidence {
        match self.kind {
            ForwardKind::Permitted(p) => p.into_evidence(),
            ForwardKind::Monitored(r) => r.into_parts().2,
        }
    }
}

/// What happens to the request after the mode is applied.
#[derive(Debug)]
pub enum Verdict {
    /// Send it upstream.
    Forward(Forward),
    /// Answer with this refusal.
    Refuse(Refusal),
    /// Answer the call in the protocol, on the backend's behalf: an approval link (the call
    /// waits for a person) or a tool execution error (arguments the tool's schema refuses).
    /// Not a refusal of the request (HTTP 200); the backend is not called.
    Respond(Refusal),
    /// The journal holds this call's answer and the policy group enforces: answer from it;
    /// the backend is not called. (With findings only from groups in monitor mode, this is
    /// a monitored forward answered from the journal: never a second execution.)
    Replay(Forward),
}

/// The only place the mode decides a request's fate: refused when a finding comes from a
/// stage group in enforce mode (the refusal is the first such finding, `pipeline` stopped
/// there); forwarded as `would_deny` when every finding comes from a group in monitor mode.
pub fn apply_mode(modes: &Modes, decision: Decision) -> Verdict {
    let forward = match decision {
        Err(refusal) if refusal.is_enforced(modes) && refusal.denial().is_protocol_answer() => return Verdict::Respond(refusal),
        Err(refusal) if refusal.is_enforced(modes) => return Verdict::Refuse(refusal),
        Err(refusal) => Forward { kind: ForwardKind::Monitored(refusal) },
        Ok(permit) => Forward { kind: ForwardKind::Permitted(permit) },
    };
    // Monitor mode forwards a call it would have answered from the journal (`would_replay`).
    if modes.is_enforcing(Group::Policy) && forward.evidence().idempotency.as_ref().is_some_and(crate::idempotency::Claim::is_replay) {
        return Verdict::Replay(forward);
    }
    Verdict::Forward(forward)
}

/// The decision log's `idempotency` for this verdict (`None` for calls without the journal).
pub fn idempotency_log(verdict: &Verdict) -> Option<&'static str> {
    use crate::idempotency::log_value;
    match verdict {
        Verdict::Replay(f) => log_value(f.evidence().idempotency.as_ref(), true, None),
        Verdict::Forward(f) => log_value(f.evidence().idempotency.as_ref(), false, f.monitored().map(Denial::code)),
        Verdict::Refuse(r) | Verdict::Respond(r) => log_value(None, false, Some(r.denial().code())),
    }
}

/// Whether calls are refused while there is no tool catalog yet (`/readyz` says not ready
/// meanwhile): `tools.unpinned = "deny"` with the policy group, which the catalog belongs to,
/// enforcing.
pub fn is_catalog_required(modes: &Modes, unpinned: crate::config::Unpinned) -> bool {
    unpinned == crate::config::Unpinned::Deny && modes.is_enforcing(Group::Policy)
}

/// Whether `tools/list` answers are filtered (`tools.filter_list`): when the policy group, which
/// the catalog belongs to, enforces. In monitor mode they pass whole.
pub fn filters_lists(modes: &Modes) -> bool {
    modes.is_enforcing(Group::Policy)
}

/// Whether what a refusal found on the response side (a session binding that cannot be made)
/// withholds an answer already on its way: in enforce mode it does, in monitor mode the answer
/// is passed on and the refusal logged as would-deny (the mode of the finding's stage group).
pub fn withholds(modes: &Modes, finding: &Finding) -> bool {
    finding.is_enforced(modes)
}

/// The decision-log `outcome` of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Forwarded, every stage passed.
    Allow,
    /// Refused.
    Deny,
    /// Forwarded in monitor mode although a stage refused it.
    WouldDeny,
    /// Answered with an approval link: the call waits for a person.
    ApprovalRequired,
}

impl Outcome {
    /// The outcome of a call answered in the protocol ([`Verdict::Respond`]): an approval link
    /// waits for a person; a tool execution error is the gateway's `deny` of that call.
    pub fn of_protocol_answer(denial: &Denial) -> Outcome {
        match denial {
            Denial::ApprovalRequired(_) => Outcome::ApprovalRequired,
            _ => Outcome::Deny,
        }
    }
}

impl Outcome {
    /// The name used in the log and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::WouldDeny => "would_deny",
            Outcome::ApprovalRequired => "approval_required",
        }
    }
}

/// `Want-Content-Digest` on stage-2 refusals: sha-256 preferred, sha-512 accepted.
pub const WANT_CONTENT_DIGEST: &str = "sha-256=10, sha-512=5";

/// Builds the refusal response for `denial`. Pure: no logging, no metrics.
pub fn respond(denial: &Denial, request_id: &str, challenge: &Challenge) -> Response<ResponseBody> {
    let mut headers: Vec<(HeaderName, String)> = Vec::new();
    match denial {
        // RFC 9530 §4, docs/design.md decision 8: every stage-2 refusal says which digests are
        // accepted — a digest that does not match too, so the client learns what to send.
        Denial::Digest(_) => {
            headers.push((HeaderName::from_static("want-content-digest"), WANT_CONTENT_DIGEST.to_owned()));
        }
        Denial::OAuthRequired => {
            let mut v = format!("Bearer resource_metadata=\"{}\"", quote(&challenge.resource_metadata));
            if !challenge.scope.is_empty() {
                v.push_str(&format!(", scope=\"{}\"", quote(&challenge.scope)));
            }
            v.push_str(&challenge.dpop_offer());
            headers.push((WWW_AUTHENTICATE, v));
        }
        // RFC 9449 §7.1: the proof, or the binding of a DPoP-scheme token, failed: the error is
        // the DPoP challenge's (Figure 16 for the binding).
        Denial::InvalidDpopProof(_) | Denial::InvalidToken(TokenError::KeyBindingMismatch | TokenError::NotDpopBound) => {
            let description = match denial {
                Denial::InvalidToken(e) => e.to_string(),
                other => other.reason(),
            };
            headers.push((
                WWW_AUTHENTICATE,
                format!(
                    "DPoP error=\"{}\", error_description=\"{}\", algs=\"{}\"",
                    denial.code(),
                    quote(&description),
                    quote(if challenge.dpop_algs.is_empty() { portcullis_wire::dpop::ACCEPTED_ALGS } else { &challenge.dpop_algs })
                ),
            ));
        }
        // RFC 6750 §3.1 with MCP's `resource_metadata`; one line, every value quoted.
        Denial::InvalidToken(e) | Denial::InvalidRequest(e) => {
            let code = denial.code();
            headers.push((
                WWW_AUTHENTICATE,
                format!(
                    "Bearer error=\"{code}\", error_description=\"{}\", resource_metadata=\"{}\"{}",
                    quote(&e.to_string()),
                    quote(&challenge.resource_metadata),
                    challenge.dpop_offer()
                ),
            ));
        }
        Denial::InsufficientScope { required } => {
            headers.push((
                WWW_AUTHENTICATE,
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
                    quote(&required.join(" ")),
                    quote(&challenge.resource_metadata)
                ),
            ));
        }
        // RFC 9421 §5.1: say which signature would be accepted.
        Denial::Signature(_) | Denial::KeyResolution(_) if !challenge.accept_signature.is_empty() => {
            headers.push((HeaderName::from_static("accept-signature"), challenge.accept_signature.clone()));
        }
        Denial::RateLimited { retry_after } | Denial::CallerLimitExceeded { retry_after, .. } => {
            headers.push((RETRY_AFTER, retry_after_secs(*retry_after).to_string()))
        }
        Denial::StateUnavailable { .. } | Denial::IssuerUnavailable(_) | Denial::Overloaded | Denial::Shed | Denial::StreamsFull | Denial::HeadsOverloaded => {
            headers.push((RETRY_AFTER, "1".to_owned()))
        }
        // An issuer outage is rarely over in a second.
        Denial::UpstreamCredentialsUnavailable => headers.push((RETRY_AFTER, "5".to_owned())),
        // draft-ietf-httpapi-idempotency-key-header §2.7: a 409 may be retried as it is.
        Denial::Idempotency(crate::idempotency::IdempotencyError::InFlight) => headers.push((RETRY_AFTER, "1".to_owned())),
        Denial::Idempotency(_) => {}
        // A catalog can come back with the next fetch (tools.refresh).
        Denial::Catalog(crate::catalog::CatalogError::Unavailable) => headers.push((RETRY_AFTER, "1".to_owned())),
        Denial::Catalog(_) => {}
        Denial::ApprovalRequired(_)
        | Denial::HumanApprovalRequired(_)
        | Denial::ApprovalDenied
        | Denial::ApprovalUnavailable
        | Denial::CallTooLargeToShow(_) => {}
        Denial::BodyTooLarge { .. }
        | Denial::BodyTimeout { .. }
        | Denial::BodyUnreadable(_)
        // No `Retry-After`: the request may have been forwarded, so a retry is not known safe.
        | Denial::RequestTimeout { .. }
        | Denial::Signature(_)
        | Denial::KeyResolution(_)
        | Denial::ReplayedSignature
        | Denial::SessionNotFound(_)
        | Denial::ResumeWithoutSession
        | Denial::SessionConflict(_)
        | Denial::Mcp(_)
        | Denial::Policy(_)
        | Denial::AccessDenied { .. }
        | Denial::DelegationRefused { .. }
        | Denial::NotFound
        | Denial::BadTarget(_) => {}
    }
    let body = match denial {
        // A JSON-RPC client expects a JSON-RPC error object (JSON-RPC 2.0 §5.1, MCP -32020).
        Denial::Mcp(e) => {
            let mut data = serde_json::json!({"error": denial.code(), "reason": denial.reason(), "request_id": request_id});
            // MCP 2026-07-28 -32022: what the gateway accepts and what was asked.
            if let portcullis_wire::mcp::McpError::UnsupportedVersion { requested, supported, .. } = e {
                data["supported"] = serde_json::json!(supported);
                data["requested"] = serde_json::json!(requested);
            }
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": e.id(),
                "error": {"code": e.jsonrpc_code(), "message": e.jsonrpc_message(), "data": data},
            })
        }
        // RFC 8785 consequences for the journal: arguments it cannot fingerprint are the
        // JSON-RPC "Invalid params" of the call.
        Denial::Idempotency(crate::idempotency::IdempotencyError::InvalidCall { id, .. }) => serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": -32602,
                "message": "Invalid params",
                "data": {"error": denial.code(), "reason": denial.reason(), "request_id": request_id},
            },
        }),
        // MCP URL elicitation (2025-11-25): the client shows the link and retries the call.
        Denial::ApprovalRequired(link) => link.answer(request_id),
        // MCP: arguments that fail the inputSchema are a tool execution error the model can
        // correct, with the call's id; the backend executed nothing.
        Denial::Catalog(crate::catalog::CatalogError::InvalidArguments { id, .. }) => serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {"isError": true, "content": [{"type": "text", "text": denial.reason()}]},
        }),
        _ => serde_json::json!({
            "error": denial.code(),
            "reason": denial.reason(),
            "request_id": request_id,
        }),
    };
    json_response(denial.status(), &body, headers)
}

/// Why forwarding failed after the request was allowed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made (refused, unreachable, connect timeout).
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    /// The backend did not send response headers within `upstream.response_timeout`.
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// The backend broke the HTTP exchange.
    #[error("upstream failed: {0}")]
    Failed(String),
    /// An answer the gateway must rewrite (`tools.filter_list`) could not be read within
    /// `limits.max_inspected_response`, or not as a client reads it: withheld rather than
    /// passed unfiltered.
    #[error("upstream answer withheld: {0}")]
    Uninspectable(String),
    /// The backend answered 401 or 403 to a request that carried the credential the gateway
    /// attached (`upstream.auth`): an operator's problem (a revoked or misconfigured
    /// credential), never the client's; the backend's challenge is not passed on.
    #[error("the backend refused the credential the gateway attached (HTTP {0})")]
    CredentialsRejected(u16),
}

impl UpstreamError {
    /// The `error` code in the body, logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable(_) => "upstream_unavailable",
            UpstreamError::Timeout(_) => "upstream_timeout",
            UpstreamError::Failed(_) => "upstream_failed",
            UpstreamError::Uninspectable(_) => "upstream_answer_uninspectable",
            UpstreamError::CredentialsRejected(_) => "upstream_credentials_rejected",
        }
    }

    /// The `reason` clients see: what failed, without the gateway's internal error chain
    /// (that goes to the diagnostic log and the decision log).
    pub fn public_reason(&self) -> String {
        match self {
            UpstreamError::Unreachable(_) => "the MCP server could not be reached".to_owned(),
            UpstreamError::Timeout(d) => format!("the MCP server did not answer within {d:?}"),
            UpstreamError::Failed(_) => "the MCP server broke off the exchange".to_owned(),
            UpstreamError::Uninspectable(_) => {
                "the MCP server's answer could not be inspected to filter its tool list for this caller (larger than limits.max_inspected_response, or not JSON as a client reads it)".to_owned()
            }
            UpstreamError::CredentialsRejected(_) => "the MCP server refused the gateway's own credential for it; the operator has been told".to_owned(),
        }
    }

    /// 502 or 504.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Unreachable(_) | UpstreamError::Failed(_) | UpstreamError::Uninspectable(_) | UpstreamError::CredentialsRejected(_) => {
                StatusCode::BAD_GATEWAY
            }
            UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// The 502/504 response for a failed forward.
pub fn respond_upstream(err: &UpstreamError, request_id: &str) -> Response<ResponseBody> {
    let body = serde_json::json!({"error": err.code(), "reason": err.public_reason(), "request_id": request_id});
    json_response(err.status(), &body, Vec::new())
}

/// A JSON response with `Cache-Control: no-store`.
pub fn json_response(status: StatusCode, body: &serde_json::Value, headers: Vec<(HeaderName, String)>) -> Response<ResponseBody> {
    let bytes = Bytes::from(body.to_string());
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for (name, value) in headers {
        // Values are built from config and fixed text with `quote`; a value that still is not a
        // valid header is dropped rather than sent broken.
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.append(name, v);
        }
    }
    resp
}

/// A complete body.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
