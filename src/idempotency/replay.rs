//! Sending a recorded answer again, as the retrying request's own: the JSON-RPC response's `id`
//! becomes this request's id; in an SSE stream, progress notifications that named the first
//! request's `progressToken` name this request's (or are dropped when it asked for none), and
//! SSE event ids (which belong to the first stream's resumption) are dropped. Everything else
//! is sent as recorded, with `Idempotent-Replayed: true`.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::value::RawValue;
use serde_json::Value;

use super::ResponseBody;
use crate::state::journal::RecordedAnswer;

/// The replay marker header.
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The recorded `answer` as the answer to a request with `id` and `progress_token`.
pub(super) fn response(answer: &RecordedAnswer, id: Option<&Value>, progress_token: Option<&Value>) -> Response<ResponseBody> {
    let is_sse = answer.content_type.as_deref().is_some_and(|c| c.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
    let ids = Ids { recorded: answer.id.as_deref(), now: id.map(Value::to_string), recorded_token: answer.progress_token.as_deref(), token: progress_token };
    let body =
        if is_sse { rewrite_sse(&answer.body, &ids) } else { rewrite_message(&answer.body, &ids).map(Bytes::from).unwrap_or_else(|| answer.body.clone()) };
    let mut resp = Response::new(http_body_util::Full::new(body).map_err(|never| match never {}).boxed());
    *resp.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    if let Some(ct) = answer.content_type.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(CONTENT_TYPE, ct);
    }
    h.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

struct Ids<'a> {
    /// The first request's id and progress token, as JSON text.
    recorded: Option<&'a str>,
    now: Option<String>,
    recorded_token: Option<&'a str>,
    token: Option<&'a Value>,
}

/// One JSON-RPC message with its `id` (a response to the first request) or its progress token
/// (a progress notification for it) rewritten. Members other than those keep their exact
/// text. `None`: not a JSON object, or nothing to rewrite. `Some(None)` in [`rewrite_event`]
/// terms means "drop": see there.
fn rewrite_message(text: &[u8], ids: &Ids<'_>) -> Option<String> {
    let mut msg: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(text).ok()?;
    let is_response = msg.contains_key("result") || msg.contains_key("error");
    let id_matches = same_json(msg.get("id").map(|v| v.get()), ids.recorded);
    if !(is_response && id_matches) {
        return None;
    }
    let new_id = RawValue::from_string(ids.now.clone().unwrap_or_else(|| "null".to_owned())).ok()?;
    msg.insert("id".to_owned(), new_id);
    serde_json::to_string(&msg).ok()
}

/// Two JSON texts compared as values (numbers by value: `7` and `7.0`), so a recorded id matches
/// however the backend spelled it. Two absent texts are the same.
pub(super) fn same_json(a: Option<&str>, b: Option<&str>) -> bool {
    let parse = |t: Option<&str>| t.map(|t| serde_json::from_str::<Value>(t).ok());
    match (parse(a), parse(b)) {
        (Some(Some(Value::Number(x))), Some(Some(Value::Number(y)))) => x == y || x.as_f64() == y.as_f64(),
        (x, y) => x == y,
    }
}

/// What to do with a progress notification of the first request: `Some(text)` rewritten,
/// `None` dropped. Other messages: `Some` unchanged (the caller keeps the original text).
fn rewrite_progress(msg: &Value, ids: &Ids<'_>) -> Option<Option<String>> {
    if msg.get("method").and_then(Value::as_str) != Some("notifications/progress") {
        return None;
    }
    let token = msg.pointer("/params/progressToken")?.to_string();
    if ids.recorded_token.is_none() || !same_json(Some(&token), ids.recorded_token) {
        return None;
    }
    Some(ids.token.map(|t| {
        let mut m = msg.clone();
        m["params"]["progressToken"] = t.clone();
        m.to_string()
    }))
}

/// The data of each SSE event that holds a JSON value, in order.
pub(super) fn sse_messages(body: &[u8]) -> Vec<Value> {
    events(body).into_iter().filter_map(|e| serde_json::from_str(&e.data?).ok()).collect()
}

struct Event {
    /// `event:` lines, kept.
    fields: Vec<String>,
    data: Option<String>,
}

/// The events an SSE stream dispatches, read as a client reads them (`portcullis_wire::sse`:
/// a leading BOM dropped, bytes that are not UTF-8 read as U+FFFD, an unterminated last event
/// dropped). Comments, `id` and `retry` are dropped; blocks that carry neither data nor a type
/// are left out.
fn events(body: &[u8]) -> Vec<Event> {
    let mut reader = portcullis_wire::sse::Reader::new();
    reader
        .push(body, true)
        .iter()
        .map(|raw| portcullis_wire::sse::fields(raw))
        .filter(|f| f.data.is_some() || f.event.is_some())
        .map(|f| Event { fields: f.event.iter().map(|e| format!("event: {e}")).collect(), data: f.data })
        .collect()
}

fn rewrite_sse(body: &[u8], ids: &Ids<'_>) -> Bytes {
    let mut out = String::with_capacity(body.len());
    for ev in events(body) {
        let data = match ev.data.as_deref() {
            Some(d) => match serde_json::from_str::<Value>(d) {
                Ok(v) => match rewrite_progress(&v, ids) {
                    Some(None) => continue,
                    Some(Some(rewritten)) => Some(rewritten),
                    None => Some(rewrite_message(d.as_bytes(), ids).unwrap_or_else(|| d.to_owned())),
                },
                Err(_) => Some(d.to_owned()),
            },
            None => None,
        };
        for f in &ev.fields {
            out.push_str(f);
            out.push('\n');
        }
        if let Some(d) = data {
            for line in d.split('\n') {
                out.push_str("data: ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http_body_util::BodyExt;
    use serde_json::json;

    use super::*;

    fn answer(content_type: &str, body: &str, token: Option<&str>) -> RecordedAnswer {
        RecordedAnswer {
            status: 200,
            content_type: Some(content_type.into()),
            body: Bytes::from(body.to_owned()),
            id: Some("7".into()),
            progress_token: token.map(str::to_owned),
        }
    }

    async fn text(resp: Response<ResponseBody>) -> String {
        String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_json_answer_gets_the_new_id_and_keeps_its_result_text() {
        let a = answer("application/json", r#"{"jsonrpc":"2.0","id":7,"result":{"amount":5.0E2,"ok":true}}"#, None);
        let resp = response(&a, Some(&json!("retry-1")), None);
        assert_eq!(resp.headers()[REPLAYED_HEADER], "true");
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
        let body = text(resp).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], "retry-1");
        assert!(body.contains(r#"{"amount":5.0E2,"ok":true}"#), "the result is sent byte for byte: {body}");
    }

    #[tokio::test]
    async fn an_sse_answer_rewrites_the_response_and_the_first_requests_progress() {
        let stream =
            "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p1\",\"progress\":1}}\n\n\
                      : keep-alive\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\"}}\n\n\
                      id: 2\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"paid\":true}}\r\n\r\n";
        let a = answer("text/event-stream", stream, Some("\"p1\""));
        let body = text(response(&a, Some(&json!(8)), Some(&json!("p2")))).await;
        let msgs = sse_messages(body.as_bytes());
        assert_eq!(msgs.len(), 3, "{body}");
        assert_eq!(msgs[0]["params"]["progressToken"], "p2");
        assert_eq!(msgs[1]["method"], "notifications/message");
        assert_eq!(msgs[2], json!({"jsonrpc": "2.0", "id": 8, "result": {"paid": true}}));
        assert!(!body.contains("id: "), "event ids of the first stream are dropped: {body}");
        assert!(body.starts_with("event: message\n"), "{body}");
        // Without a progress token of its own, the retry gets no progress for the first's.
        let body = text(response(&a, Some(&json!(9)), None)).await;
        assert_eq!(sse_messages(body.as_bytes()).len(), 2, "{body}");
    }

    #[test]
    fn only_the_response_to_the_recorded_id_is_rewritten() {
        let ids = Ids { recorded: Some("7"), now: Some("8".into()), recorded_token: None, token: None };
        assert!(rewrite_message(br#"{"jsonrpc":"2.0","id":6,"result":{}}"#, &ids).is_none());
        assert!(rewrite_message(br#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}"#, &ids).is_none());
        assert!(rewrite_message(b"not json", &ids).is_none());
        let v: Value = serde_json::from_str(&rewrite_message(br#"{"jsonrpc":"2.0","id":7.0,"error":{"code":1}}"#, &ids).unwrap()).unwrap();
        assert_eq!(v["id"], 8);
    }
}
