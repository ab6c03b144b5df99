//! An MCP server's answers to the gateway's own catalog requests (`initialize`,
//! `server/discover`, `tools/list`), read without trusting them: the body is JSON
//! (`application/json`) or an event stream (`text/event-stream`) whose `message` events carry
//! JSON-RPC messages, the response is the one with the request's id, and each `tools/list`
//! page is a list of `Tool` objects with a string `name`, plus an optional `nextCursor`
//! (MCP `server/tools`, `server/utilities/pagination`).
//!
//! Every `Tool` is kept whole, exactly as the server sent it: the gateway pins every member
//! (PRODUCT.md §B), including ones this version does not know.

use serde_json::{Map, Value};

use crate::sse;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// The body (or an event's data) is not the JSON it should be. `reason` is the parser's
    /// position message; the body is never quoted.
    #[error("answer is not JSON: {0}")]
    NotJson(String),
    /// No JSON-RPC response with the request's id in the answer.
    #[error("the answer holds no JSON-RPC response to the request")]
    NoResponse,
    /// The server answered with a JSON-RPC error.
    #[error("the server answered with JSON-RPC error {code}")]
    Rpc {
        /// The error's code.
        code: i64,
    },
    /// The response does not have the shape the method's result must have.
    #[error("malformed result: {0}")]
    Malformed(String),
}

/// One `tools/list` page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolsPage {
    /// Each `Tool` object, whole, in the server's order.
    pub tools: Vec<Map<String, Value>>,
    /// `nextCursor`: the next page's cursor; `None` at the end.
    pub next_cursor: Option<String>,
}

/// The media type of a `Content-Type` value, lowercased, without parameters.
pub fn media_type(content_type: Option<&str>) -> String {
    content_type.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Whether a `Content-Type` value is an event stream.
pub fn is_event_stream(content_type: Option<&str>) -> bool {
    media_type(content_type) == "text/event-stream"
}

/// The JSON-RPC response with `id` in an answer body, parsed by `parse` (the gateway reads it
/// as I-JSON): the body itself for JSON (or the element of a batch with that id), or the data
/// of the first event that is such a response for an event stream, read as a client reads it
/// ([`sse`]). Other events (notifications, requests to the client) are skipped, as are events
/// without data (the priming event a 2025-11-25 server opens its streams with) and events of
/// another type (clients do not read them as JSON-RPC); a `message` event whose data is not
/// JSON is an error.
pub fn find_response(
    content_type: Option<&str>,
    body: &[u8],
    id: &Value,
    parse: impl Fn(&[u8]) -> Result<Value, String>,
) -> Result<Map<String, Value>, AnswerError> {
    if is_event_stream(content_type) {
        for event in sse::dispatched(body) {
            let Some(data) = event.message().filter(|_| event.is_message()) else { continue };
            let doc = parse(data.as_bytes()).map_err(AnswerError::NotJson)?;
            if let Some(found) = response_in(doc, id) {
                return Ok(found);
            }
        }
        return Err(AnswerError::NoResponse);
    }
    let doc = parse(body).map_err(AnswerError::NotJson)?;
    response_in(doc, id).ok_or(AnswerError::NoResponse)
}

/// [`find_response`] with serde_json as the parser.
pub fn find_response_json(content_type: Option<&str>, body: &[u8], id: &Value) -> Result<Map<String, Value>, AnswerError> {
    find_response(content_type, body, id, |b| serde_json::from_slice(b).map_err(|e| e.to_string()))
}

/// The response with `id` in a message or batch.
fn response_in(doc: Value, id: &Value) -> Option<Map<String, Value>> {
    let is_ours = |m: &Map<String, Value>| m.get("id") == Some(id) && (m.contains_key("result") || m.contains_key("error")) && !m.contains_key("method");
    match doc {
        Value::Object(m) if is_ours(&m) => Some(m),
        Value::Array(items) => items.into_iter().find_map(|v| match v {
            Value::Object(m) if is_ours(&m) => Some(m),
            _ => None,
        }),
        _ => None,
    }
}

/// The `result` object of a response, or its JSON-RPC error.
pub fn result_of(mut response: Map<String, Value>) -> Result<Map<String, Value>, AnswerError> {
    if let Some(error) = response.get("error") {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        return Err(AnswerError::Rpc { code });
    }
    match response.remove("result") {
        Some(Value::Object(r)) => Ok(r),
        _ => Err(AnswerError::Malformed("result is not an object".to_owned())),
    }
}

/// Reads one `tools/list` result: `tools` must be an array of objects, each with a non-empty
/// string `name`; `nextCursor`, when present and not null, a string.
pub fn tools_page(mut result: Map<String, Value>) -> Result<ToolsPage, AnswerError> {
    let next_cursor = match result.remove("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c),
        Some(_) => return Err(AnswerError::Malformed("nextCursor is not a string".to_owned())),
    };
    let Some(Value::Array(items)) = result.remove("tools") else {
        return Err(AnswerError::Malformed("tools is not an array".to_owned()));
    };
    let mut tools = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(tool) = item else {
            return Err(AnswerError::Malformed(format!("tools[{i}] is not an object")));
        };
        if tool.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(AnswerError::Malformed(format!("tools[{i}] has no name")));
        }
        tools.push(tool);
    }
    Ok(ToolsPage { tools, next_cursor })
}

/// A whole `tools/list` answer body, read with serde_json: the page of the response with `id`.
pub fn parse_tools_answer(content_type: Option<&str>, body: &[u8], id: &Value) -> Result<ToolsPage, AnswerError> {
    tools_page(result_of(find_response_json(content_type, body, id)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}, "_meta": {"x": 1}})
    }

    #[test]
    fn json_answer_yields_every_tool_whole_and_the_cursor() {
        let body = json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": [tool("a"), tool("b")], "nextCursor": "p2"}}).to_string();
        let page = parse_tools_answer(Some("application/json; charset=utf-8"), body.as_bytes(), &json!(3)).expect("page");
        assert_eq!(page.tools.len(), 2);
        assert_eq!(Value::Object(page.tools[1].clone()), tool("b"), "members the gateway does not know are kept");
        assert_eq!(page.next_cursor.as_deref(), Some("p2"));
    }

    #[test]
    fn event_stream_answer_skips_other_events_and_other_ids() {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}).to_string();
        let other = json!({"jsonrpc": "2.0", "id": 9, "result": {"tools": []}}).to_string();
        let ours = json!({"jsonrpc": "2.0", "id": "l1", "result": {"tools": [tool("x")]}}).to_string();
        let body = format!(": hi\n\n{}event: ping\ndata: {{}}\n\n{}{}", sse::message_event(&note), sse::message_event(&other), sse::message_event(&ours));
        let page = parse_tools_answer(Some("text/event-stream"), body.as_bytes(), &json!("l1")).expect("page");
        assert_eq!(page.tools.len(), 1);
        assert_eq!(page.next_cursor, None);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let id = json!(1);
        assert!(matches!(parse_tools_answer(None, b"{", &id), Err(AnswerError::NotJson(_))));
        assert_eq!(parse_tools_answer(None, br#"{"jsonrpc":"2.0","id":2,"result":{}}"#, &id), Err(AnswerError::NoResponse));
        let err = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}}).to_string();
        assert_eq!(parse_tools_answer(None, err.as_bytes(), &id), Err(AnswerError::Rpc { code: -32601 }));
        let nameless = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"title": "x"}]}}).to_string();
        assert!(matches!(parse_tools_answer(None, nameless.as_bytes(), &id), Err(AnswerError::Malformed(r)) if r.contains("tools[0]")));
        let cursor = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "nextCursor": 5}}).to_string();
        assert!(matches!(parse_tools_answer(None, cursor.as_bytes(), &id), Err(AnswerError::Malformed(_))));
        assert_eq!(parse_tools_answer(Some("text/event-stream"), b"data: 1\n\n", &id), Err(AnswerError::NoResponse));
    }

    #[test]
    fn a_priming_event_is_skipped_and_unreadable_data_is_an_error() {
        let ours = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [tool("x")]}}).to_string();
        let primed = format!("\u{FEFF}id: 0\ndata:\n\n{}", sse::message_event(&ours));
        let page = parse_tools_answer(Some("text/event-stream"), primed.as_bytes(), &json!(1)).expect("page");
        assert_eq!(page.tools.len(), 1);
        // A lone surrogate, NaN, nesting deeper than the parser's limit: not read, not skipped.
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        for bad in [r#"{"jsonrpc":"2.0","id":2,"result":{"x":"\ud83d"}}"#, "NaN", deep.as_str()] {
            let body = format!("id: 0\ndata:\n\n{}{}", sse::message_event(bad), sse::message_event(&ours));
            let got = parse_tools_answer(Some("text/event-stream"), body.as_bytes(), &json!(1));
            assert!(matches!(got, Err(AnswerError::NotJson(_))), "{bad:.20}: {got:?}");
        }
    }

    #[test]
    fn empty_string_cursor_is_a_cursor() {
        let body = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "nextCursor": ""}}).to_string();
        assert_eq!(parse_tools_answer(None, body.as_bytes(), &json!(1)).expect("page").next_cursor.as_deref(), Some(""));
    }
}
