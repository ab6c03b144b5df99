//! MCP parse of a POST (untrusted body and transport headers). Input: optional leading
//! `name: value` lines, each an HTTP header (`mcp-method`, `mcp-name`, `mcp-protocol-version`,
//! `mcp-session-id`, or any other valid name; values may hold any byte but CR, LF and NUL),
//! then the body: everything from the first line that is not such a header line, a blank line
//! being an optional separator. A bare JSON body is thus a valid input as it is.
//! Invariants: the body is refused as not JSON exactly when serde_json refuses it; an accepted
//! request has one message per batch element, each with the kind its fields imply and only the
//! fields its method carries; the `Mcp-Method`/`Mcp-Name` headers that were sent agree with
//! every message, and the ones a 2026-07-28 request needs are there; every refusal serializes
//! to the JSON-RPC error object the gateway sends, with a short parse-error text.
#![no_main]

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use portcullis_wire::mcp::{self, McpError, McpMessage, McpRequest, MessageKind};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (headers, body) = portcullis_fuzz::split_headers(data);
    let body = Bytes::copy_from_slice(body);
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    match mcp::parse(&Method::POST, &headers, &body) {
        Ok(req) => check_accepted(&headers, &parsed.expect("accepted a body serde_json refuses"), &req),
        Err(e) => {
            assert_eq!(matches!(e, McpError::NotJson(_)), parsed.is_err(), "{e:?}");
            check_refusal(&e);
        }
    }
});

fn check_accepted(headers: &HeaderMap, doc: &Value, req: &McpRequest) {
    let elements = match doc {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    assert!(!elements.is_empty(), "a POST always has at least one message");
    assert_eq!(req.is_batch, doc.is_array());
    assert_eq!(req.messages.len(), elements.len());
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(req.session, text(mcp::SESSION_ID));
    assert_eq!(req.protocol_version, text(mcp::PROTOCOL_VERSION));
    assert_eq!(req.first_method(), req.messages[0].method.as_deref());
    assert_eq!(req.first_tool(), req.messages[0].tool.as_deref());
    // On success both headers, when sent, were decodable.
    let method_h = headers.get(mcp::METHOD_HEADER).map(|v| decoded(v).expect("accepted an undecodable Mcp-Method"));
    let name_h = headers.get(mcp::NAME_HEADER).map(|v| decoded(v).expect("accepted an undecodable Mcp-Name"));
    let requires = req.protocol_version.as_deref().is_some_and(|v| v >= mcp::STATELESS_VERSION);
    for (m, element) in req.messages.iter().zip(elements) {
        check_message(m, element);
        if let Some(h) = &method_h {
            assert_eq!(m.method.as_deref(), Some(h.as_str()), "Mcp-Method disagrees with the body");
        }
        if let Some(h) = &name_h {
            assert_eq!(m.name(), Some(h.as_str()), "Mcp-Name disagrees with the body");
        }
        if requires && m.method.is_some() {
            assert!(method_h.is_some(), "{} requires Mcp-Method", mcp::STATELESS_VERSION);
        }
        if requires && matches!(m.method.as_deref(), Some("tools/call" | "resources/read" | "prompts/get")) {
            assert!(name_h.is_some(), "{} requires Mcp-Name for {:?}", mcp::STATELESS_VERSION, m.method);
        }
        if let (Some(h), Some(b)) = (&req.protocol_version, &m.meta_version) {
            assert_eq!(h, b, "MCP-Protocol-Version disagrees with params._meta");
        }
    }
}

/// One message against the JSON element it came from.
fn check_message(m: &McpMessage, element: &Value) {
    let obj = element.as_object().expect("accepted a message that is not an object");
    assert_eq!(obj.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
    assert_eq!(m.method.as_deref(), obj.get("method").and_then(Value::as_str));
    assert!(m.id.as_ref().is_none_or(|id| id.is_string() || id.is_number()), "id {:?}", m.id);
    assert_eq!(m.id.as_ref(), obj.get("id").filter(|id| !id.is_null()));
    match m.kind {
        MessageKind::Request => assert!(m.method.is_some() && m.id.is_some()),
        MessageKind::Notification => assert!(m.method.is_some() && m.id.is_none()),
        MessageKind::Response => assert!(m.method.is_none() && m.id.is_some() && (obj.contains_key("result") || obj.contains_key("error"))),
    }
    let method = m.method.as_deref();
    assert!(m.tool.is_none() || method == Some("tools/call"));
    assert!(m.arguments.is_none() || method == Some("tools/call"));
    assert!(m.uri.is_none() || method == Some("resources/read"));
    assert!(m.prompt.is_none() || method == Some("prompts/get"));
    assert!([&m.tool, &m.uri, &m.prompt].iter().filter(|f| f.is_some()).count() <= 1);
}

/// `mcp::decoded_header`'s rule, written again: `=?base64?…?=` wraps UTF-8 in base64.
fn decoded(v: &HeaderValue) -> Option<String> {
    let text = v.to_str().ok()?;
    let Some(inner) = text.strip_prefix("=?base64?").and_then(|t| t.strip_suffix("?=")) else {
        return Some(text.to_owned());
    };
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(inner).ok()?).ok()
}

/// The refusal as `decision::respond` sends it (a JSON-RPC error object) must serialize and
/// read back the same.
fn check_refusal(e: &McpError) {
    let expected = match e {
        McpError::NotJson(reason) => {
            // serde_json's position message, never the body.
            assert!(reason.len() < 120, "{reason:?}");
            (-32700, "parse_error", "Parse error")
        }
        McpError::InvalidRequest { .. } | McpError::TooDeep { .. } => (-32600, "invalid_request", "Invalid Request"),
        McpError::BatchTooLarge { .. } => (-32600, "batch_too_large", "Invalid Request"),
        McpError::HeaderMismatch { .. } => (-32020, "header_mismatch", "Header mismatch"),
        McpError::UnsupportedVersion { .. } => (-32022, "unsupported_protocol_version", "Unsupported protocol version"),
    };
    assert_eq!((e.jsonrpc_code(), e.code(), e.jsonrpc_message()), expected);
    let id = e.id();
    assert!(id.is_null() || id.is_string() || id.is_number(), "{id:?}");
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": e.jsonrpc_code(),
            "message": e.jsonrpc_message(),
            "data": {"error": e.code(), "reason": e.to_string(), "request_id": "r"},
        },
    });
    let bytes = serde_json::to_vec(&body).expect("error response serializes");
    let back: Value = serde_json::from_slice(&bytes).expect("error response reads back");
    assert_eq!(back, body);
}
