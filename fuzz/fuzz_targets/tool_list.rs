//! The MCP server's `tools/list` answers the gateway's catalog client reads (untrusted bytes
//! from the backend). Input: optional leading `name: value` header lines (`content-type` picks
//! JSON or an event stream), then the body. A bare JSON body is a valid input.
//! Invariants: splitting an event stream loses and invents no byte (the events and the rest
//! are the input, in order), with or without the end of the stream; a JSON answer is refused as
//! not JSON exactly when serde_json refuses it; an accepted page's tools are objects with a
//! non-empty string `name`, kept whole, and for a JSON answer they are exactly the `tools` of
//! the response with the request's id; an answer that has such a well-formed response is
//! accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::sse;
use portcullis_wire::tool_list::{self, AnswerError};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let (headers, body) = portcullis_fuzz::split_headers(data);
    for is_end in [false, true] {
        let (events, rest) = sse::split(body, is_end);
        let joined: Vec<u8> = events.iter().flat_map(|e| e.iter().copied()).chain(rest.iter().copied()).collect();
        assert_eq!(joined, body, "split lost or invented bytes");
        for e in &events {
            let _ = sse::fields(e);
        }
    }
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
    let id = json!(1);
    let answer = tool_list::parse_tools_answer(content_type, body, &id);
    if let Ok(page) = &answer {
        for tool in &page.tools {
            assert!(tool.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()), "a tool without a name");
        }
    }
    if tool_list::is_event_stream(content_type) {
        return;
    }
    let doc: Result<Value, _> = serde_json::from_slice(body);
    match (&doc, &answer) {
        (Err(_), Err(AnswerError::NotJson(_))) => {}
        (Err(_), other) => panic!("accepted a body serde_json refuses: {other:?}"),
        (Ok(_), Err(AnswerError::NotJson(e))) => panic!("refused JSON as not JSON: {e}"),
        (Ok(doc), _) => check_json(doc, &answer),
    }
});

/// A JSON answer against an independent reading of it.
fn check_json(doc: &Value, answer: &Result<tool_list::ToolsPage, AnswerError>) {
    let ours = |m: &Value| m.get("id") == Some(&json!(1)) && m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some());
    let response = match doc {
        Value::Array(items) => items.iter().find(|m| m.is_object() && ours(m)),
        m if m.is_object() && ours(m) => Some(m),
        _ => None,
    };
    let Some(response) = response else {
        assert_eq!(answer.as_ref().err(), Some(&AnswerError::NoResponse));
        return;
    };
    let tools = response.get("result").and_then(|r| r.get("tools")).and_then(Value::as_array);
    let cursor_ok = response.get("result").and_then(|r| r.get("nextCursor")).is_none_or(|c| c.is_string() || c.is_null());
    let well_formed = response.get("error").is_none()
        && cursor_ok
        && tools.is_some_and(|t| t.iter().all(|t| t.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty())));
    match answer {
        Ok(page) => {
            let tools = tools.expect("accepted a result without tools");
            assert_eq!(page.tools.iter().map(|t| Value::Object(t.clone())).collect::<Vec<_>>(), *tools, "tools not kept whole");
        }
        Err(e) => assert!(!well_formed, "refused a well-formed answer: {e:?}"),
    }
}
