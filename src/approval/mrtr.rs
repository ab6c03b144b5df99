//! MCP 2026-07-28 (multi round-trip requests): the `input_required` answer with an
//! `elicitation/create` URL request and the gateway's own `requestState`, the `-32021` answer
//! for a client that did not declare URL elicitation, and the retry: the gateway's state is
//! verified (HMAC, bound to sub, agent, call digest and expiry) and removed, with its
//! `inputResponses` entry, before the call is forwarded. A `requestState` that is not the
//! gateway's (an upstream's) is passed through untouched.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::seal::{Purpose, Seal};

/// The `inputRequests` key of the gateway's approval (the `portcullis_` prefix keeps it apart
/// from an upstream's keys).
pub(crate) const INPUT_KEY: &str = "portcullis_approval";

/// Prefix of the gateway's `requestState`: a state with it must verify, others are not ours.
const STATE_PREFIX: &str = "pcs1.";

/// JSON-RPC `-32021` MissingRequiredClientCapabilityError.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;

/// What the gateway's `requestState` binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// The token's `sub`.
    pub sub: String,
    /// The agent id.
    pub agent: String,
    /// The call digest (hex).
    pub digest: String,
    /// The approval's id.
    pub id: String,
    /// Unix seconds after which it is refused.
    pub exp: u64,
}

/// What a retry's `requestState` is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Echoed {
    /// None sent.
    None,
    /// Not the gateway's: left as it is.
    Foreign,
    /// The gateway's, verified.
    Ours(State),
    /// Carries the gateway's prefix but does not verify: refused.
    Invalid,
}

/// Whether the request speaks MCP 2026-07-28 or later (header, else `_meta`).
pub(crate) fn is_mrtr(header_version: Option<&str>, meta_version: Option<&str>) -> bool {
    header_version.or(meta_version).is_some_and(|v| v >= portcullis_wire::mcp::STATELESS_VERSION)
}

/// Whether the request declares URL elicitation
/// (`_meta["io.modelcontextprotocol/clientCapabilities"].elicitation.url`).
pub(crate) fn declares_url_elicitation(params: &Value) -> bool {
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"].get("url").is_some()
}

/// Seals `state` as a `requestState`.
pub(crate) fn seal_state(seal: &Seal, state: &State) -> String {
    format!("{STATE_PREFIX}{}", seal.seal(Purpose::RequestState, &serde_json::to_vec(state).unwrap_or_default()))
}

/// Reads the retry's `params.requestState`.
pub(crate) fn echoed(seal: &Seal, params: &Value) -> Echoed {
    let Some(sent) = params.get("requestState") else { return Echoed::None };
    let Some(sealed) = sent.as_str().and_then(|s| s.strip_prefix(STATE_PREFIX)) else { return Echoed::Foreign };
    match seal.open(Purpose::RequestState, sealed).and_then(|b| serde_json::from_slice::<State>(&b).ok()) {
        Some(state) => Echoed::Ours(state),
        None => Echoed::Invalid,
    }
}

/// The body to forward: `params.requestState` and `params.inputResponses.portcullis_approval`
/// removed (and `inputResponses` itself when nothing else is left in it).
pub(crate) fn stripped(mut msg: Value) -> Option<Bytes> {
    let params = msg.get_mut("params")?.as_object_mut()?;
    params.remove("requestState");
    if let Some(Value::Object(responses)) = params.get_mut("inputResponses") {
        responses.remove(INPUT_KEY);
        if responses.is_empty() {
            params.remove("inputResponses");
        }
    }
    serde_json::to_vec(&msg).ok().map(Bytes::from)
}

/// The `input_required` result.
pub(crate) fn input_required(id: &Value, url: &str, message: &str, state: &str) -> Value {
    let mut requests = Map::new();
    requests.insert(INPUT_KEY.to_owned(), serde_json::json!({"method": "elicitation/create", "params": {"mode": "url", "message": message, "url": url}}));
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"resultType": "input_required", "inputRequests": requests, "requestState": state},
    })
}

/// The `-32021` error for a client without URL elicitation, with the link in `data`.
pub(crate) fn missing_capability(id: &Value, url: &str, request_id: &str) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": MISSING_CAPABILITY,
            "message": "Approval requires URL elicitation",
            "data": {"requiredCapabilities": {"elicitation": {"url": {}}}, "approval_url": url, "request_id": request_id},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State { sub: "u".into(), agent: "a".into(), digest: "d".into(), id: "i".into(), exp: 10 }
    }

    #[test]
    fn the_gateways_state_verifies_others_pass_and_tampered_ones_fail() {
        let seal = Seal::new(None);
        let s = seal_state(&seal, &state());
        assert_eq!(echoed(&seal, &serde_json::json!({"requestState": s})), Echoed::Ours(state()));
        assert_eq!(echoed(&seal, &serde_json::json!({"requestState": "upstream-blob"})), Echoed::Foreign);
        assert_eq!(echoed(&seal, &serde_json::json!({})), Echoed::None);
        let mut t = s.clone();
        let last = t.pop().map_or('A', |c| if c == 'A' { 'B' } else { 'A' });
        t.push(last);
        assert_eq!(echoed(&seal, &serde_json::json!({"requestState": t})), Echoed::Invalid);
    }

    #[test]
    fn stripping_removes_only_the_gateways_members() {
        let msg = serde_json::json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "t", "arguments": {"a": 1}, "requestState": "x",
                       "inputResponses": {"portcullis_approval": {"action": "accept"}, "upstream_q": {"action": "accept"}}}});
        let out: Value = serde_json::from_slice(&stripped(msg).expect("object")).expect("json");
        assert_eq!(out["params"], serde_json::json!({"name": "t", "arguments": {"a": 1}, "inputResponses": {"upstream_q": {"action": "accept"}}}));
        let only: Value = serde_json::from_slice(
            &stripped(serde_json::json!({"params": {"requestState": "x", "inputResponses": {"portcullis_approval": {}}}})).expect("object"),
        )
        .expect("json");
        assert_eq!(only["params"], serde_json::json!({}));
    }
}
