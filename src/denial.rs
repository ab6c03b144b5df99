//! Refusals: one [`Denial`] variant per cause, its `error` code, HTTP status and reason text
//! (docs/design.md "Refusals"), and the conversions from each stage's error. Stages and
//! the pipeline depend on this module; `decision` maps a denial to a response.

use std::time::Duration;

use http::StatusCode;

use crate::approval::{ApprovalError, Link};
use crate::catalog::CatalogError;
use crate::directory::DirectoryError;
use crate::idempotency::IdempotencyError;
use crate::oauth::TokenError;
use crate::policy::PolicyError;
use crate::quota::QuotaError;
use crate::replay::ReplayError;
use crate::session::SessionError;
use crate::signature::SignatureError;
use portcullis_wire::digest::DigestError;
use portcullis_wire::mcp::McpError;

/// Why a request was refused. One variant per cause; [`Denial::code`] gives the `error` code of
/// the table in docs/design.md "Refusals".
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
    /// The gateway is already handling `limits.max_in_flight` requests: this one is shed,
    /// unread, before any stage; the client may retry shortly. Also `overloaded`.
    #[error(
        "the gateway is handling as many requests for this server as it may (limits.max_in_flight, or the server's upstream.max_in_flight); retry shortly"
    )]
    Shed,
    /// The server already has `upstream.max_streams` event streams open: the backend's new
    /// stream is closed and the client may retry shortly. Also `overloaded`.
    #[error("this server has as many open event streams as it may (upstream.max_streams); retry shortly")]
    StreamsFull,
    /// The heads of the requests being handled already add up to
    /// `limits.max_header_bytes_in_flight`: this one is refused unread. Also `overloaded`.
    #[error("the gateway is holding as many request head bytes as it may (limits.max_header_bytes_in_flight); retry shortly")]
    HeadsOverloaded,
    /// The request was not answered within `limits.request_timeout` of its admission; its
    /// handling was stopped wherever it was (possibly after it was forwarded).
    #[error("the gateway did not finish handling the request within {after:?} (limits.request_timeout)")]
    RequestTimeout {
        /// The configured limit.
        after: Duration,
    },
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
    /// The DPoP proof that came with a DPoP-bound token is invalid (RFC 9449 §4.3): missing,
    /// malformed, wrong `typ` or `alg`, a private or unusable key, a bad signature, made for
    /// another method, URL or token, outside its window, already used, or not by the agent's
    /// key where `oauth.require_agent_key_binding` asks for it (stage 7).
    #[error("invalid DPoP proof: {0}")]
    InvalidDpopProof(portcullis_wire::dpop::DpopError),
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
    /// The policy allowed the call once a person approves it, and a link was issued (or the
    /// pending one is still live). A protocol answer, not a failure: HTTP 200 with the MCP
    /// shape of the client's version; the decision log's outcome is `approval_required`.
    #[error("{}", .0.message)]
    ApprovalRequired(Box<Link>),
    /// Approval was asked where it cannot be carried (another method, a batch, approvals off),
    /// or, in monitor mode, would have been asked.
    #[error("{0}")]
    HumanApprovalRequired(String),
    /// The person asked to approve the call denied it.
    #[error("the person asked to approve this call denied it")]
    ApprovalDenied,
    /// The call needs approval but no verified user can be asked.
    #[error("this call needs a person's approval, but the request carries no verified user to ask")]
    ApprovalUnavailable,
    /// The call needs approval but is larger than the page shows whole (`approvals.max_shown`,
    /// decision 13): no link. Also `approval_unavailable`, reason `call_too_large_to_show`.
    #[error("{0}")]
    CallTooLargeToShow(crate::approval::shown::TooLarge),
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
    /// A request resuming a stream (`Last-Event-ID`) without a session (decision 11): a stream
    /// is resumed only in a session bound to its caller, so an event id alone replays nothing.
    #[error("Last-Event-ID resumes a stream only within a session: send the Mcp-Session-Id of the session that opened it")]
    ResumeWithoutSession,
    /// The backend issued a session id already bound to another identity (decision 9): its
    /// answer is withheld.
    #[error("{0}")]
    SessionConflict(SessionError),
    /// The idempotency journal refused the call: no or malformed `Idempotency-Key` where one
    /// is required (400), the key's call still in flight (409), the key used for another call
    /// (422).
    #[error("{0}")]
    Idempotency(IdempotencyError),
    /// The tool catalog refused the call: the tool's definition drifted from its pin, it has no
    /// pin where one is required, or there is no catalog yet to vouch for it (docs/catalog.md).
    #[error("{0}")]
    Catalog(CatalogError),
    /// A per-caller bound on a shared store (decision 13): this caller holds as many entries as
    /// it may (idempotency entries, open sessions, pending approvals); everyone else is
    /// unaffected. A resource bound, not a decision: it holds in monitor mode too.
    #[error("this caller holds as many {what} as it may ({setting}); retry after {}s", retry_after_secs(*.retry_after))]
    CallerLimitExceeded {
        /// What the caller holds too many of.
        what: &'static str,
        /// The setting that bounds it.
        setting: &'static str,
        /// When the caller's first entry leaves.
        retry_after: Duration,
    },
    /// The shared state store (replay cache, sessions, quotas) cannot be reached; fail closed.
    #[error("state store unavailable: {reason}")]
    StateUnavailable {
        /// What failed, naming the store.
        reason: String,
    },
    /// The issuer refused to exchange this request's token for the backend's
    /// (`upstream.auth.kind = "token_exchange"`); `error` is its OAuth error code alone, never
    /// its description.
    #[error("{error}")]
    DelegationRefused {
        /// The OAuth `error` code (`invalid_grant`, `access_denied` …), or the gateway's own
        /// reason for not asking.
        error: String,
    },
    /// No credential for the backend could be had (`upstream.auth`): the issuer is unreachable,
    /// slow, refuses the gateway's own client or answers something unusable. Never forwarded
    /// without it.
    #[error("no credential for the MCP server could be obtained; retry shortly")]
    UpstreamCredentialsUnavailable,
    /// The path is neither the MCP endpoint nor one of `upstream.extra_paths` (before any stage).
    #[error("no MCP endpoint at this path")]
    NotFound,
    /// The request's authority cannot be read one way only (before any stage).
    #[error("{0}")]
    BadTarget(#[from] portcullis_wire::target::TargetError),
}

impl Denial {
    /// The `error` code clients, logs and metrics see. No `_` arm: a new variant must choose.
    pub fn code(&self) -> &'static str {
        match self {
            Denial::BodyTooLarge { .. } => "body_too_large",
            Denial::BodyTimeout { .. } => "body_timeout",
            Denial::BodyUnreadable(_) => "body_unreadable",
            Denial::Overloaded | Denial::Shed | Denial::StreamsFull | Denial::HeadsOverloaded => "overloaded",
            Denial::RequestTimeout { .. } => "request_timeout",
            Denial::Digest(_) | Denial::Signature(_) | Denial::KeyResolution(_) => "invalid_agent_credentials",
            Denial::ReplayedSignature => "replayed_signature",
            Denial::OAuthRequired => "oauth_required",
            Denial::InvalidToken(_) => "invalid_token",
            Denial::InvalidDpopProof(_) => "invalid_dpop_proof",
            Denial::InvalidRequest(_) => "invalid_request",
            Denial::IssuerUnavailable(_) => "issuer_unavailable",
            Denial::Mcp(e) => e.code(),
            Denial::Policy(_) => "agent_access_denied",
            Denial::InsufficientScope { .. } => "insufficient_scope",
            Denial::AccessDenied { .. } => "agent_access_denied",
            Denial::ApprovalRequired(_) => "approval_required",
            Denial::HumanApprovalRequired(_) => "human_approval_required",
            Denial::ApprovalDenied => "approval_denied",
            Denial::ApprovalUnavailable | Denial::CallTooLargeToShow(_) => "approval_unavailable",
            Denial::RateLimited { .. } => "rate_limit_exceeded",
            Denial::SessionNotFound(_) => "session_not_found",
            Denial::ResumeWithoutSession => "invalid_request",
            Denial::SessionConflict(_) => "session_conflict",
            Denial::Idempotency(e) => e.code(),
            Denial::Catalog(e) => e.code(),
            Denial::StateUnavailable { .. } => "state_unavailable",
            Denial::CallerLimitExceeded { .. } => "caller_limit_exceeded",
            Denial::DelegationRefused { .. } => "delegation_refused",
            Denial::UpstreamCredentialsUnavailable => "upstream_credentials_unavailable",
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
            | Denial::InvalidToken(_)
            | Denial::InvalidDpopProof(_) => StatusCode::UNAUTHORIZED,
            Denial::InsufficientScope { .. }
            | Denial::AccessDenied { .. }
            | Denial::Policy(_)
            | Denial::HumanApprovalRequired(_)
            | Denial::ApprovalDenied
            | Denial::ApprovalUnavailable
            | Denial::CallTooLargeToShow(_)
            | Denial::DelegationRefused { .. } => StatusCode::FORBIDDEN,
            // MCP URL elicitation: the answer is a JSON-RPC message real clients must read
            // (200; 400 for -32021, as MCP 2026-07-28 requires).
            Denial::ApprovalRequired(link) => link.status(),
            Denial::RateLimited { .. } | Denial::CallerLimitExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Denial::SessionNotFound(_) => StatusCode::NOT_FOUND,
            Denial::ResumeWithoutSession => StatusCode::BAD_REQUEST,
            Denial::SessionConflict(_) => StatusCode::BAD_GATEWAY,
            Denial::Idempotency(e) => e.status(),
            Denial::Catalog(e) => e.status(),
            Denial::StateUnavailable { .. }
            | Denial::IssuerUnavailable(_)
            | Denial::Overloaded
            | Denial::Shed
            | Denial::StreamsFull
            | Denial::HeadsOverloaded
            | Denial::UpstreamCredentialsUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            // The gateway, acting as a gateway, gave up waiting (RFC 9110 §15.6.5); as with
            // `upstream_timeout`, the backend may have acted on the request.
            Denial::RequestTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
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
            // The budget is no secret of the policy's, and the caller can act on it.
            Denial::Policy(PolicyError::OverBudget { budget, .. }) => {
                format!("policy_error: the policy did not decide within {budget:?} (limits.policy_budget); send fewer or smaller messages")
            }
            Denial::Policy(_) => "policy_error".to_owned(),
            // A stable code, as decision 13 names it; the sizes are in the diagnostic text.
            Denial::CallTooLargeToShow(_) => "call_too_large_to_show".to_owned(),
            other => other.to_string(),
        }
    }

    /// Whether this is a protocol answer rather than a refusal: an approval link (MCP URL
    /// elicitation) or a tool execution error (arguments the tool's input schema refuses),
    /// both HTTP 200 answers in JSON-RPC that a client reads as the call's result.
    pub fn is_protocol_answer(&self) -> bool {
        matches!(self, Denial::ApprovalRequired(_) | Denial::Catalog(crate::catalog::CatalogError::InvalidArguments { .. }))
    }

    /// Whether this refusal is a resource bound rather than a decision: refused whatever the
    /// mode of its stage group (decision 13), since passing it on would fill a shared store.
    pub fn is_resource_bound(&self) -> bool {
        matches!(self, Denial::CallerLimitExceeded { .. })
    }
}

impl From<ApprovalError> for Denial {
    fn from(e: ApprovalError) -> Denial {
        match e {
            ApprovalError::Required(link) => Denial::ApprovalRequired(link),
            ApprovalError::NotPossible(reason) => Denial::HumanApprovalRequired(reason),
            ApprovalError::Unavailable => Denial::ApprovalUnavailable,
            ApprovalError::TooLargeToShow(e) => Denial::CallTooLargeToShow(e),
            ApprovalError::Denied => Denial::ApprovalDenied,
            ApprovalError::CallerLimit { retry_after } => {
                Denial::CallerLimitExceeded { what: "pending approvals", setting: "approvals.max_pending_per_caller", retry_after }
            }
            // Fail closed, naming the store: no approval is vouched for without a record.
            ApprovalError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
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

impl From<IdempotencyError> for Denial {
    fn from(e: IdempotencyError) -> Denial {
        match e {
            // Fail closed, naming the store: never a second execution for want of a record.
            IdempotencyError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
            IdempotencyError::CallerLimit { retry_after } => {
                Denial::CallerLimitExceeded { what: "idempotency entries", setting: "idempotency.max_entries_per_caller", retry_after }
            }
            other => Denial::Idempotency(other),
        }
    }
}

impl From<SessionError> for Denial {
    fn from(e: SessionError) -> Denial {
        match e {
            SessionError::NotFound | SessionError::Malformed => Denial::SessionNotFound(e),
            SessionError::Conflict => Denial::SessionConflict(e),
            SessionError::CallerLimit { retry_after } => {
                Denial::CallerLimitExceeded { what: "open sessions", setting: "limits.max_sessions_per_caller", retry_after }
            }
            // Fail closed, naming the store: no session is vouched for without a record.
            SessionError::Store(e) => Denial::StateUnavailable { reason: e.to_string() },
        }
    }
}

impl From<TokenError> for Denial {
    /// Which refusal a token error is (MCP Authorization: error handling). No `_` arm: a new variant must choose.
    fn from(e: TokenError) -> Denial {
        match e {
            TokenError::Missing => Denial::OAuthRequired,
            TokenError::MalformedHeader(_) | TokenError::TokenInQuery => Denial::InvalidRequest(e),
            TokenError::IssuerUnavailable { .. } => Denial::IssuerUnavailable(e),
            TokenError::Dpop(proof) => Denial::InvalidDpopProof(proof),
            // Fail closed, naming the store: no proof is accepted without a record of its jti.
            TokenError::ProofStore(e) => Denial::StateUnavailable { reason: e.to_string() },
            TokenError::Malformed(_)
            | TokenError::WrongType { .. }
            | TokenError::UnsupportedAlgorithm { .. }
            | TokenError::CriticalHeader
            | TokenError::UnknownKeyId
            | TokenError::RefetchBudgetExhausted
            | TokenError::KeyMismatch { .. }
            | TokenError::BadSignature
            | TokenError::MissingClaim { .. }
            | TokenError::InvalidClaim { .. }
            | TokenError::WrongIssuer
            | TokenError::WrongAudience { .. }
            | TokenError::Expired { .. }
            | TokenError::NotYetValid { .. }
            | TokenError::IssuedInFuture { .. }
            | TokenError::Inactive
            | TokenError::BoundTokenAsBearer
            | TokenError::NotSenderConstrained
            | TokenError::NotDpopBound
            | TokenError::KeyBindingMismatch
            | TokenError::UnsupportedConfirmation => Denial::InvalidToken(e),
        }
    }
}

impl From<CatalogError> for Denial {
    fn from(e: CatalogError) -> Denial {
        match e {
            // An Mcp-Param-* header that disagrees with the arguments is the MCP stage's -32020.
            CatalogError::HeaderMismatch { id, reason } => Denial::Mcp(McpError::HeaderMismatch { id, reason }),
            other => Denial::Catalog(other),
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
