//! Human approval of risky calls (docs/approvals.md): a policy decision that allows a call
//! `"approval": {"message": …}` makes the call wait until the user who delegated approves this
//! exact call on the gateway's own page, after logging in at `oauth.issuer`.
//!
//! The stage ([`Approvals::check`]) runs after the policy allowed and before quotas are spent.
//! Each approval is bound to (token `sub`, agent id, call digest); the agent gets a link (a
//! 32-byte random code that carries no credential) in the MCP shape its protocol version
//! expects, and the retry of the same call, once approved, is forwarded exactly once
//! (`state::approval`). The pages live in [`page`], what they show of a call in [`shown`]
//! (all of it, or no approval: decision 13), the OpenID Connect login in `oauth`.

pub mod mrtr;
pub mod page;
pub(crate) mod seal;
pub mod shown;

use std::sync::Arc;

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::Value;

use crate::call_digest::CallDigest;
use crate::config::{self, FieldError};
use crate::oauth::relying_party::RelyingParty;
use crate::policy::verdict::ApprovalAsk;
use crate::state::approval::{ApprovalRecord, ApprovalStore, Ask, BindingKey};
use crate::state::caller::{CallerBound, CallerKey};
use crate::state::StoreError;
use portcullis_wire::mcp::McpRequest;
use portcullis_wire::UnixTime;
use seal::Seal;

/// The methods an approval can be asked on (MRTR's three; elsewhere the call is refused).
pub(crate) const APPROVABLE: [&str; 3] = ["tools/call", "resources/read", "prompts/get"];

/// JSON-RPC `-32042` URLElicitationRequiredError (MCP 2025-11-25).
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;

/// An approved call that this request consumed: the decision log's `approval_id` and
/// `approved_by`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalUse {
    /// The approval's id.
    pub id: String,
    /// The approver's `sub`.
    pub approved_by: String,
    /// The body to forward instead of the client's: an MCP 2026-07-28 retry without the
    /// gateway's `requestState` and `inputResponses` entry.
    pub forward_body: Option<Bytes>,
}

/// A link the agent must show its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The approval's id (`elicitationId`).
    pub id: String,
    /// The page's URL.
    pub url: String,
    /// The policy's message.
    pub message: String,
    /// The JSON-RPC id of the call, echoed in the answer.
    pub jsonrpc_id: Value,
    /// How the client's protocol version carries it.
    pub shape: Shape,
}

/// The answer's MCP shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// MCP 2025-11-25 and earlier: JSON-RPC `-32042` URLElicitationRequiredError.
    Elicitation,
    /// MCP 2026-07-28: an `input_required` result carrying this sealed `requestState`.
    InputRequired(String),
    /// MCP 2026-07-28 without URL elicitation declared: HTTP 400, `-32021`.
    MissingCapability,
}

impl Link {
    /// HTTP 200 for the protocol answers (real MCP clients read them), 400 for `-32021`.
    pub(crate) fn status(&self) -> http::StatusCode {
        match self.shape {
            Shape::MissingCapability => http::StatusCode::BAD_REQUEST,
            Shape::Elicitation | Shape::InputRequired(_) => http::StatusCode::OK,
        }
    }

    /// The JSON-RPC answer in the client's shape.
    pub(crate) fn answer(&self, request_id: &str) -> Value {
        match &self.shape {
            Shape::Elicitation => self.elicitation(request_id),
            Shape::InputRequired(state) => mrtr::input_required(&self.jsonrpc_id, &self.url, &self.message, state),
            Shape::MissingCapability => mrtr::missing_capability(&self.jsonrpc_id, &self.url, request_id),
        }
    }

    /// The MCP 2025-11-25 answer: a JSON-RPC `-32042` error listing the URL elicitation.
    fn elicitation(&self, request_id: &str) -> Value {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.jsonrpc_id,
            "error": {
                "code": URL_ELICITATION_REQUIRED,
                "message": "This request requires approval.",
                "data": {
                    "elicitations": [{"mode": "url", "elicitationId": self.id, "url": self.url, "message": self.message}],
                    "request_id": request_id,
                },
            },
        })
    }
}

/// Why a call that needs approval is not forwarded (now).
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// A link was issued (or the pending one is still live): a protocol answer, HTTP 200.
    #[error("a person must approve this call: {}", .0.message)]
    Required(Box<Link>),
    /// Approval cannot be asked here: another method, a batch, approvals off (403
    /// `human_approval_required`); in monitor mode every call that needs approval.
    #[error("{0}")]
    NotPossible(String),
    /// No verified user to ask (403 `approval_unavailable`).
    #[error("this call needs a person's approval, but the request carries no verified user to ask")]
    Unavailable,
    /// The call is larger than the page may show (`approvals.max_shown`): a person cannot be
    /// asked to approve what they cannot see whole (403 `approval_unavailable`, reason
    /// `call_too_large_to_show`).
    #[error(transparent)]
    TooLargeToShow(shown::TooLarge),
    /// The person denied this call (403 `approval_denied`).
    #[error("the person asked to approve this call denied it")]
    Denied,
    /// The caller already has `approvals.max_pending_per_caller` links awaiting a person
    /// (429 `caller_limit_exceeded`, decision 13).
    #[error("this caller has as many approvals pending as it may")]
    CallerLimit {
        /// When the caller's first pending link expires.
        retry_after: std::time::Duration,
    },
    /// The approval store could not answer (503, fail closed).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Counters: links issued, decisions on the page, approvals consumed.
#[derive(Debug, Clone, Default)]
pub struct ApprovalMetrics {
    /// `portcullis_approval_links_issued_total`.
    pub links_issued: Counter,
    /// `portcullis_approval_decisions_total{decision}`: approve, deny, wrong_user, expired.
    pub decisions: Family<Vec<(String, String)>, Counter>,
    /// `portcullis_approval_consumptions_total`.
    pub consumptions: Counter,
}

impl ApprovalMetrics {
    /// Registers the counters.
    pub(crate) fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register("approval_links_issued", "Approval links issued to agents", self.links_issued.clone());
        registry.register("approval_decisions", "Approval page outcomes (approve, deny, wrong_user, expired)", self.decisions.clone());
        registry.register("approval_consumptions", "Approved calls forwarded (each approval once)", self.consumptions.clone());
    }

    fn decision(&self, what: &str) {
        self.decisions.get_or_create(&vec![("decision".to_owned(), what.to_owned())]).inc();
    }
}

/// What the stage needs to know about the call.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    /// The parsed request.
    pub mcp: &'a McpRequest,
    /// The raw body (the call digest is computed from it).
    pub body: &'a Bytes,
    /// The verified token's `sub`.
    pub sub: Option<&'a str>,
    /// The verified agent id.
    pub agent: Option<&'a str>,
    /// The verified keyid.
    pub keyid: Option<&'a str>,
    /// Whom a new pending link counts against (decision 13).
    pub caller: CallerKey,
    /// The MCP server the call is for: an approval on one server is never used on another.
    pub server: &'static str,
}

/// The approval stage and pages, built from `[approvals]`.
pub struct Approvals {
    settings: config::Approvals,
    store: Arc<dyn ApprovalStore>,
    seal: Seal,
    login: Option<RelyingParty>,
    metrics: ApprovalMetrics,
    /// `settings.path` + "/…", what logs name instead of a page's path.
    redacted: String,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Approvals {
    /// Builds the stage; the login is only built when approvals are enabled.
    pub(crate) fn new(settings: &config::Approvals, oauth: &config::OAuth, store: Arc<dyn ApprovalStore>) -> Result<Approvals, FieldError> {
        let login = if settings.enabled { Some(RelyingParty::new(oauth, &settings.client_id, settings.client_secret.clone())?) } else { None };
        let redacted = format!("{}/…", settings.path);
        Ok(Approvals { seal: Seal::new(settings.state_key.as_ref()), settings: settings.clone(), store, login, metrics: ApprovalMetrics::default(), redacted })
    }

    /// The counters, to register with the metrics.
    pub(crate) fn metrics(&self) -> &ApprovalMetrics {
        &self.metrics
    }

    /// What logs say for any path [`Self::serves`]: the pages' prefix, without the code.
    pub(crate) fn redacted_path(&self) -> &str {
        &self.redacted
    }

    /// Whether `path` is one of the approval pages'.
    pub(crate) fn serves(&self, path: &str) -> bool {
        self.settings.enabled && path.strip_prefix(self.settings.path.as_str()).is_some_and(|rest| rest.starts_with('/'))
    }

    /// For a call the policy allowed with `ask`: `Ok(Some)` when this request consumed an
    /// approval (forward it), otherwise why not. `issue_links` is false in monitor mode: no
    /// link, the call is forwarded with a `human_approval_required` finding.
    pub(crate) async fn check(&self, call: CallView<'_>, ask: &ApprovalAsk, issue_links: bool, now: UnixTime) -> Result<ApprovalUse, ApprovalError> {
        if !self.settings.enabled {
            return Err(ApprovalError::NotPossible("the policy requires a person's approval, and approvals are off ([approvals] enabled = false)".to_owned()));
        }
        let [msg] = call.mcp.messages.as_slice() else {
            return Err(ApprovalError::NotPossible("the policy requires a person's approval, which a batch cannot carry; send the call on its own".to_owned()));
        };
        let method = msg.method.as_deref().unwrap_or("");
        if !APPROVABLE.contains(&method) {
            return Err(ApprovalError::NotPossible(
                "the policy requires a person's approval, which only tools/call, resources/read and prompts/get can carry".to_owned(),
            ));
        }
        if !issue_links {
            return Err(ApprovalError::NotPossible("human_approval_required".to_owned()));
        }
        let Some(sub) = call.sub.filter(|s| !s.is_empty()) else { return Err(ApprovalError::Unavailable) };
        let digest = CallDigest::of_body(call.body).map_err(|e| ApprovalError::NotPossible(format!("the call cannot be bound to an approval: {e}")))?;
        // Section F: the call digest includes the server.
        let digest_hex = digest.digest.on_server(call.server).hex();
        let agent = call.agent.unwrap_or("");
        // The digest parsed the body strictly: this parse cannot fail where that one passed.
        let body: Value = serde_json::from_slice(call.body).unwrap_or(Value::Null);
        let params = &body["params"];
        let target = msg.name().unwrap_or("");
        let shown = shown::call(target, params, self.settings.max_shown).map_err(|e| {
            tracing::info!(call.bytes = e.size, approvals.max_shown = e.limit, "No approval offered: the call is too large to show whole");
            ApprovalError::TooLargeToShow(e)
        })?;
        let is_mrtr = mrtr::is_mrtr(call.mcp.protocol_version.as_deref(), msg.meta_version.as_deref());
        let echoed = if is_mrtr { mrtr::echoed(&self.seal, params) } else { mrtr::Echoed::None };
        match &echoed {
            mrtr::Echoed::Invalid => return Err(ApprovalError::NotPossible(STATE_REFUSED.to_owned())),
            mrtr::Echoed::Ours(st) if st.sub != sub || st.agent != agent || st.digest != digest_hex || st.exp <= now.secs() => {
                return Err(ApprovalError::NotPossible(STATE_REFUSED.to_owned()));
            }
            _ => {}
        }
        let binding = BindingKey::new(sub, agent, &digest_hex);
        let fresh = ApprovalRecord {
            id: uuid::Uuid::new_v4().to_string(),
            code: seal::random_text::<32>(),
            sub: sub.to_owned(),
            agent: agent.to_owned(),
            keyid: call.keyid.unwrap_or("").to_owned(),
            method: method.to_owned(),
            target: shown.target,
            arguments: shown.arguments,
            message: ask.message.clone(),
            expires: now.secs().saturating_add(self.settings.ttl.as_secs().max(1)),
            server: call.server.to_owned(),
        };
        let link = |r: &ApprovalRecord| {
            let shape = if !is_mrtr {
                Shape::Elicitation
            } else if mrtr::declares_url_elicitation(params) {
                let state = mrtr::State { sub: sub.to_owned(), agent: agent.to_owned(), digest: digest_hex.clone(), id: r.id.clone(), exp: r.expires };
                Shape::InputRequired(mrtr::seal_state(&self.seal, &state))
            } else {
                Shape::MissingCapability
            };
            let url = format!("{}/{}", self.settings.base_url(), r.code);
            Box::new(Link { id: r.id.clone(), url, message: r.message.clone(), jsonrpc_id: digest.id.clone().unwrap_or(Value::Null), shape })
        };
        let bound = CallerBound::new(call.caller, self.settings.max_pending_per_caller);
        match self.store.ask(&binding, &fresh, &bound, now).await? {
            Ask::Issued => {
                self.metrics.links_issued.inc();
                Err(ApprovalError::Required(link(&fresh)))
            }
            Ask::Pending(r) => Err(ApprovalError::Required(link(&r))),
            Ask::Approved { record, approved_by } => {
                self.metrics.consumptions.inc();
                let ours = matches!(echoed, mrtr::Echoed::Ours(_)) || params["inputResponses"].get(mrtr::INPUT_KEY).is_some();
                let forward_body = if is_mrtr && ours { mrtr::stripped(body.clone()) } else { None };
                Ok(ApprovalUse { id: record.id, approved_by, forward_body })
            }
            Ask::Denied(_) => Err(ApprovalError::Denied),
            Ask::CallerFull(full) => Err(ApprovalError::CallerLimit { retry_after: full.retry_after }),
        }
    }
}

/// Why a retry's `requestState` is refused (it carries the gateway's mark but is not valid
/// for this call now).
const STATE_REFUSED: &str = "the requestState is not one this gateway issued for this call and user, or it expired; retry the call without it";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2025_answer_is_a_url_elicitation_required_error() {
        let link = Link {
            id: "e1".into(),
            url: "https://mcp.example.com/portcullis/approvals/c".into(),
            message: "Send?".into(),
            jsonrpc_id: Value::from(42),
            shape: Shape::Elicitation,
        };
        let a = link.answer("req-1");
        assert_eq!(a["id"], 42);
        assert_eq!(a["error"]["code"], -32042);
        assert_eq!(a["error"]["data"]["elicitations"], serde_json::json!([{"mode": "url", "elicitationId": "e1", "url": link.url, "message": "Send?"}]));
    }

    #[test]
    fn policy_approval_is_parsed_and_a_denial_wins() {
        let parse = |s: &str| crate::policy::verdict::parse(&regorus::Value::from_json_str(s).expect("json"));
        let v = parse(r#"{"allow": true, "approval": {"message": "Send?"}}"#).expect("valid");
        assert_eq!(v.approval, Some(ApprovalAsk { message: "Send?".into() }));
        assert_eq!(parse(r#"{"allow": false, "approval": {"message": "Send?"}}"#).expect("valid").approval, None);
        assert!(parse(r#"{"allow": true, "approval": {"message": ""}}"#).is_err());
        assert!(parse(r#"{"allow": true, "approval": {"msg": "x"}}"#).is_err());
    }
}
