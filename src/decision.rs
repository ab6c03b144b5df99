//! Decisions: the one type every request ends in, the one place modes apply, and the one
//! mapping from outcomes to HTTP (PRODUCT.md "Errors clients see").
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

use crate::config::Mode;
use crate::digest::DigestError;
use crate::directory::DirectoryError;
use crate::mcp::McpError;
use crate::oauth::TokenError;
use crate::policy::PolicyError;
use crate::quota::QuotaError;
use crate::replay::ReplayError;
use crate::session::SessionError;
use crate::signature::SignatureError;

/// The body type of every response the gateway sends (refusals and streamed upstream bodies).
pub type ResponseBody = BoxBody<Bytes, hyper::Error>;

/// The result of running the pipeline on one request.
pub type Decision = Result<Permit, Denial>;

/// Proof that every configured stage passed. Only `pipeline::check` makes one.
#[derive(Debug)]
pub struct Permit {
    _private: (),
}

impl Permit {
    /// Issued by the pipeline once the last stage passed.
    pub(crate) fn granted() -> Permit {
        Permit { _private: () }
    }
}

/// Why a request was refused. One variant per cause; [`Denial::code`] gives the `error` code of
/// PRODUCT.md's table.
#[derive(Debug, thiserror::Error)]
pub enum Denial {
    /// The body is larger than `limits.max_body` (stage 1). Raised before any parsing.
    #[error("request body exceeds the {limit}-byte limit")]
    BodyTooLarge {
        /// The configured limit in bytes.
        limit: u64,
    },
    /// The client did not send the whole body within `limits.body_timeout` (stage 1).
    #[error("request body not received within {after:?}")]
    BodyTimeout {
        /// The configured limit.
        after: Duration,
    },
    /// The body stream broke (client reset, malformed chunked encoding) (stage 1).
    #[error("request body could not be read: {0}")]
    BodyUnreadable(String),
    /// The gateway already holds `limits.max_body_in_flight` bytes of request bodies (stage 1):
    /// the body is not read, the client may retry shortly.
    #[error("the gateway is holding as many request bodies as it may (limits.max_body_in_flight); retry shortly")]
    Overloaded,
    /// `Content-Digest` missing where required, malformed, or not matching the body (stage 2).
    #[error("{0}")]
    Digest(#[from] DigestError),
    /// No signature where one is required, or the signature is malformed, outside its time
    /// window, does not cover what it must, or does not verify (stages 3 and 5).
    #[error("{0}")]
    Signature(#[from] SignatureError),
    /// No key could be resolved for the signature: untrusted or unreachable directory, unknown
    /// keyid, key outside its validity window (stage 4).
    #[error("{0}")]
    KeyResolution(#[from] DirectoryError),
    /// The signature was already accepted once (stage 6).
    #[error("signature was already used")]
    ReplayedSignature,
    /// No bearer token where one is required (stage 7).
    #[error("a bearer token is required")]
    OAuthRequired,
    /// The bearer token was judged and refused: malformed, wrong type or algorithm, unknown
    /// key, bad signature, wrong issuer or audience, outside its time window, inactive (stage 7).
    #[error("{0}")]
    InvalidToken(TokenError),
    /// The bearer-token request itself is malformed: `Authorization` not `Bearer <token68>`,
    /// or a token in the query string (stage 7; RFC 6750 §3.1 `invalid_request`).
    #[error("{0}")]
    InvalidRequest(TokenError),
    /// The issuer's metadata, JWKS or introspection endpoint cannot be used; fail closed
    /// (stage 7). The reason names the issuer.
    #[error("{0}")]
    IssuerUnavailable(TokenError),
    /// The body is not a JSON-RPC message, or the MCP headers disagree with it (stage 8).
    /// Answered with a JSON-RPC error object.
    #[error("{0}")]
    Mcp(#[from] McpError),
    /// The policy could not be evaluated or returned a malformed decision (stage 9): a
    /// refusal, never an allow. The client sees reason `policy_error`; details are logged.
    #[error("{0}")]
    Policy(#[from] PolicyError),
    /// The token lacks scopes the policy requires (stage 9).
    #[error("token lacks required scopes: {}", .required.join(" "))]
    InsufficientScope {
        /// Every scope the operation needs (sent all at once, MCP 2026-07-28).
        required: Vec<String>,
    },
    /// The policy denied the request; the reason is the policy's (stage 9).
    #[error("policy denied the request: {reason}")]
    AccessDenied {
        /// The policy's `reason`.
        reason: String,
    },
    /// A quota or rate limit the decision named is spent (stage 10).
    #[error("rate limit exceeded, retry after {}s", retry_after_secs(*.retry_after))]
    RateLimited {
        /// When the bucket will allow the request again.
        retry_after: Duration,
    },
    /// The request's `Mcp-Session-Id` names no session of its identity (unknown, ended, expired,
    /// another identity's) or is malformed (decision 9). 404, as MCP answers an unknown session.
    #[error("{0}")]
    SessionNotFound(SessionError),
    /// The backend issued a session id already bound to another identity (decision 9): its
    /// answer is withheld.
    #[error("{0}")]
    SessionConflict(SessionError),
    /// The shared state store (replay cache, sessions, quotas) cannot be reached; fail closed.
    #[error("state store unavailable: {reason}")]
    StateUnavailable {
        /// What failed, naming the store.
        reason: String,
    },
    /// The path is neither the MCP endpoint nor one of `upstream.extra_paths` (before any stage).
    #[error("no MCP endpoint at this path")]
    NotFound,
    /// The request's authority cannot be read one way only (before any stage).
    #[error("{0}")]
    BadTarget(#[from] crate::target::TargetError),
}

impl Denial {
    /// The `error` code clients, logs and metrics see. No `_` arm: a new variant must choose.
    pub fn code(&self) -> &'static str {
        match self {
            Denial::BodyTooLarge { .. } => "body_too_large",
            Denial::BodyTimeout { .. } => "body_timeout",
            Denial::BodyUnreadable(_) => "body_unreadable",
            Denial::Overloaded => "overloaded",
            Denial::Digest(_) | Denial::Signature(_) | Denial::KeyResolution(_) => "invalid_agent_credentials",
            Denial::ReplayedSignature => "replayed_signature",
            Denial::OAuthRequired => "oauth_required",
            Denial::InvalidToken(_) => "invalid_token",
            Denial::InvalidRequest(_) => "invalid_request",
            Denial::IssuerUnavailable(_) => "issuer_unavailable",
            Denial::Mcp(e) => e.code(),
            Denial::Policy(_) => "agent_access_denied",
            Denial::InsufficientScope { .. } => "insufficient_scope",
            Denial::AccessDenied { .. } => "agent_access_denied",
            Denial::RateLimited { .. } => "rate_limit_exceeded",
            Denial::SessionNotFound(_) => "session_not_found",
            Denial::SessionConflict(_) => "session_conflict",
            Denial::StateUnavailable { .. } => "state_unavailable",
            Denial::NotFound => "not_found",
            Denial::BadTarget(_) => "bad_request",
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Denial::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Denial::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Denial::BodyUnreadable(_) | Denial::Mcp(_) | Denial::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Denial::Digest(_)
            | Denial::Signature(_)
            | Denial::KeyResolution(_)
            | Denial::ReplayedSignature
            | Denial::OAuthRequired
            | Denial::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Denial::InsufficientScope { .. } | Denial::AccessDenied { .. } | Denial::Policy(_) => StatusCode::FORBIDDEN,
            Denial::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Denial::SessionNotFound(_) => StatusCode::NOT_FOUND,
            Denial::SessionConflict(_) => StatusCode::BAD_GATEWAY,
            Denial::StateUnavailable { .. } | Denial::IssuerUnavailable(_) | Denial::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Denial::NotFound => StatusCode::NOT_FOUND,
            Denial::BadTarget(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The `reason` text of the refusal body and the decision log. Never contains secrets:
    /// stage errors name what failed, not the credential.
    pub fn reason(&self) -> String {
        match self {
            Denial::AccessDenied { reason } => reason.clone(),
            // The I/O detail stays in the diagnostic log: it describes the gateway's insides.
            Denial::BodyUnreadable(_) => "request body could not be read (connection reset or invalid framing)".to_owned(),
            // The evaluation error is for the operator's log, not the client.
            Denial::Policy(_) => "policy_error".to_owned(),
            other => other.to_string(),
        }
    }
}

impl From<ReplayError> for Denial {
    fn from(e: ReplayError) -> Denial {
        match e {
            ReplayError::Replayed => Denial::ReplayedSignature,
            // Fail closed, naming the store: no claim of replay protection without a record.
            ReplayError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
        }
    }
}

impl From<SessionError> for Denial {
    fn from(e: SessionError) -> Denial {
        match e {
            SessionError::NotFound | SessionError::Malformed => Denial::SessionNotFound(e),
            SessionError::Conflict => Denial::SessionConflict(e),
            // Fail closed, naming the store: no session is vouched for without a record.
            SessionError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
        }
    }
}

impl From<TokenError> for Denial {
    /// Which refusal a token error is (spec/mcp-auth.md §3). No `_` arm: a new variant must choose.
    fn from(e: TokenError) -> Denial {
        match e {
            TokenError::Missing => Denial::OAuthRequired,
            TokenError::MalformedHeader(_) | TokenError::TokenInQuery => Denial::InvalidRequest(e),
            TokenError::IssuerUnavailable { .. } => Denial::IssuerUnavailable(e),
            TokenError::Malformed(_)
            | TokenError::WrongType { .. }
            | TokenError::UnsupportedAlgorithm { .. }
            | TokenError::CriticalHeader
            | TokenError::UnknownKeyId { .. }
            | TokenError::KeyMismatch { .. }
            | TokenError::BadSignature
            | TokenError::MissingClaim { .. }
            | TokenError::InvalidClaim { .. }
            | TokenError::WrongIssuer { .. }
            | TokenError::WrongAudience { .. }
            | TokenError::Expired { .. }
            | TokenError::NotYetValid { .. }
            | TokenError::IssuedInFuture { .. }
            | TokenError::Inactive => Denial::InvalidToken(e),
        }
    }
}

impl From<QuotaError> for Denial {
    fn from(e: QuotaError) -> Denial {
        match e {
            QuotaError::Exhausted { retry_after, .. } => Denial::RateLimited { retry_after },
            QuotaError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
        }
    }
}

/// Whole seconds for `Retry-After`, rounded up so a client never retries too early.
pub fn retry_after_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// A request the proxy may forward. Only [`apply_mode`] makes one.
#[derive(Debug)]
pub enum Forward {
    /// Every stage passed.
    Permitted(Permit),
    /// Monitor mode: this refusal would have been sent in enforce mode.
    Monitored(Denial),
}

/// What happens to the request after the mode is applied.
#[derive(Debug)]
pub enum Verdict {
    /// Send it upstream.
    Forward(Forward),
    /// Answer with this refusal.
    Refuse(Denial),
}

/// The only place the mode is consulted.
pub fn apply_mode(mode: Mode, decision: Decision) -> Verdict {
    match (decision, mode) {
        (Ok(permit), _) => Verdict::Forward(Forward::Permitted(permit)),
        (Err(denial), Mode::Enforce) => Verdict::Refuse(denial),
        (Err(denial), Mode::Monitor) => Verdict::Forward(Forward::Monitored(denial)),
    }
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
}

impl Outcome {
    /// The name used in the log and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::WouldDeny => "would_deny",
        }
    }
}

/// Facts about this gateway that refusals quote back to the client.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// RFC 9728 metadata URL for `resource_metadata=`.
    pub resource_metadata: String,
    /// Scopes to suggest on a 401 (`scope=`), space separated; empty = omitted.
    pub scope: String,
    /// `Accept-Signature` value (RFC 9421 §5.1) sent with agent-credential refusals; empty =
    /// omitted (signatures not configured).
    pub accept_signature: String,
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
            headers.push((WWW_AUTHENTICATE, v));
        }
        // RFC 6750 §3.1 with MCP's `resource_metadata`; one line, every value quoted.
        Denial::InvalidToken(e) | Denial::InvalidRequest(e) => {
            let code = denial.code();
            headers.push((
                WWW_AUTHENTICATE,
                format!(
                    "Bearer error=\"{code}\", error_description=\"{}\", resource_metadata=\"{}\"",
                    quote(&e.to_string()),
                    quote(&challenge.resource_metadata)
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
        Denial::RateLimited { retry_after } => headers.push((RETRY_AFTER, retry_after_secs(*retry_after).to_string())),
        Denial::StateUnavailable { .. } | Denial::IssuerUnavailable(_) | Denial::Overloaded => headers.push((RETRY_AFTER, "1".to_owned())),
        Denial::BodyTooLarge { .. }
        | Denial::BodyTimeout { .. }
        | Denial::BodyUnreadable(_)
        | Denial::Signature(_)
        | Denial::KeyResolution(_)
        | Denial::ReplayedSignature
        | Denial::SessionNotFound(_)
        | Denial::SessionConflict(_)
        | Denial::Mcp(_)
        | Denial::Policy(_)
        | Denial::AccessDenied { .. }
        | Denial::NotFound
        | Denial::BadTarget(_) => {}
    }
    let body = match denial {
        // A JSON-RPC client expects a JSON-RPC error object (JSON-RPC 2.0 §5.1, MCP -32020).
        Denial::Mcp(e) => serde_json::json!({
            "jsonrpc": "2.0",
            "id": e.id(),
            "error": {
                "code": e.jsonrpc_code(),
                "message": e.jsonrpc_message(),
                "data": {"error": denial.code(), "reason": denial.reason(), "request_id": request_id},
            },
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
}

impl UpstreamError {
    /// The `error` code in the body, logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable(_) => "upstream_unavailable",
            UpstreamError::Timeout(_) => "upstream_timeout",
            UpstreamError::Failed(_) => "upstream_failed",
        }
    }

    /// The `reason` clients see: what failed, without the gateway's internal error chain
    /// (that goes to the diagnostic log and the decision log).
    pub fn public_reason(&self) -> String {
        match self {
            UpstreamError::Unreachable(_) => "the MCP server could not be reached".to_owned(),
            UpstreamError::Timeout(d) => format!("the MCP server did not answer within {d:?}"),
            UpstreamError::Failed(_) => "the MCP server broke off the exchange".to_owned(),
        }
    }

    /// 502 or 504.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Unreachable(_) | UpstreamError::Failed(_) => StatusCode::BAD_GATEWAY,
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

/// Escapes `"` and `\` for an RFC 9110 quoted-string and drops control characters, so nothing
/// derived from config or request data can break the challenge (spec/mcp-auth.md §3).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || !c.is_ascii() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
