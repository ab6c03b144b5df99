use super::*;
use http::HeaderValue;
use serde_json::json;

fn post(body: Value) -> Result<McpRequest, McpError> {
    parse(&Method::POST, &HeaderMap::new(), &Bytes::from(body.to_string()))
}

fn with_headers(pairs: &[(&'static str, &str)], body: Value) -> Result<McpRequest, McpError> {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).expect("header"));
    }
    parse(&Method::POST, &h, &Bytes::from(body.to_string()))
}

fn call(tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {"amount": 5}}})
}

#[test]
fn tools_call_yields_method_id_tool_and_arguments() {
    let req = post(call("payments.send")).expect("parsed");
    let m = &req.messages[0];
    assert_eq!((m.kind, m.method.as_deref(), m.id.clone()), (MessageKind::Request, Some("tools/call"), Some(json!(7))));
    assert_eq!(m.tool.as_deref(), Some("payments.send"));
    assert_eq!(m.arguments.as_ref().expect("args")["amount"], 5);
    assert!(!req.is_batch);
}

#[test]
fn resources_read_and_prompts_get_yield_their_names() {
    let r = post(json!({"jsonrpc": "2.0", "id": "a", "method": "resources/read", "params": {"uri": "file:///x"}})).expect("parsed");
    assert_eq!(r.messages[0].uri.as_deref(), Some("file:///x"));
    let p = post(json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "greet"}})).expect("parsed");
    assert_eq!(p.messages[0].prompt.as_deref(), Some("greet"));
    assert_eq!(p.messages[0].name(), Some("greet"));
}

#[test]
fn notifications_and_responses_are_messages_too() {
    let n = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("parsed");
    assert_eq!(n.messages[0].kind, MessageKind::Notification);
    let r = post(json!({"jsonrpc": "2.0", "id": 3, "result": {}})).expect("parsed");
    assert_eq!((r.messages[0].kind, r.messages[0].method.clone()), (MessageKind::Response, None));
}

#[test]
fn batch_is_parsed_element_by_element() {
    let req = post(json!([call("a"), {"jsonrpc": "2.0", "method": "notifications/x"}])).expect("parsed");
    assert!(req.is_batch);
    assert_eq!(req.messages.len(), 2);
    assert_eq!(req.first_tool(), Some("a"));
}

#[test]
fn batch_over_the_bound_is_refused_naming_size_and_limit() {
    let body = |n: usize| Bytes::from(Value::Array((0..n).map(|_| json!({"jsonrpc": "2.0", "method": "ping"})).collect()).to_string());
    let ok = parse_bounded(&Method::POST, &HeaderMap::new(), &body(3), 3).expect("at the bound");
    assert_eq!((ok.messages.len(), ok.body_len), (3, body(3).len()));
    let e = parse_bounded(&Method::POST, &HeaderMap::new(), &body(4), 3).expect_err("over the bound");
    assert_eq!(e, McpError::BatchTooLarge { size: 4, limit: 3 });
    assert_eq!((e.jsonrpc_code(), e.code(), e.jsonrpc_message(), e.id()), (-32600, "batch_too_large", "Invalid Request", Value::Null));
    assert_eq!(e.to_string(), "batch of 4 messages exceeds limits.max_batch = 3");
    let e = parse(&Method::POST, &HeaderMap::new(), &body(DEFAULT_MAX_BATCH + 1)).expect_err("the default bound");
    assert_eq!(e, McpError::BatchTooLarge { size: 101, limit: 100 });
}

#[test]
fn non_json_is_a_parse_error_with_null_id() {
    let e = parse(&Method::POST, &HeaderMap::new(), &Bytes::from_static(b"not json")).expect_err("refused");
    assert!(matches!(e, McpError::NotJson(_)));
    assert_eq!((e.jsonrpc_code(), e.code(), e.id()), (-32700, "parse_error", Value::Null));
    let e = parse(&Method::POST, &HeaderMap::new(), &Bytes::new()).expect_err("empty POST body refused");
    assert_eq!(e.jsonrpc_code(), -32700);
}

#[test]
fn json_that_is_not_json_rpc_is_an_invalid_request() {
    for (body, id) in [
        (json!({"hello": "world"}), Value::Null),
        (json!({"jsonrpc": "1.0", "id": 4, "method": "x"}), json!(4)),
        (json!({"jsonrpc": "2.0", "id": 5}), json!(5)),
        (json!({"jsonrpc": "2.0", "id": 6, "method": 1}), json!(6)),
        (json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "t", "arguments": [1]}}), json!(8)),
        (json!({"jsonrpc": "2.0", "id": {"x": 1}, "method": "m"}), Value::Null),
        (json!([]), Value::Null),
        (json!([1]), Value::Null),
        (json!(42), Value::Null),
    ] {
        let e = post(body.clone()).expect_err("refused");
        assert!(matches!(e, McpError::InvalidRequest { .. }), "{body}: {e:?}");
        assert_eq!((e.jsonrpc_code(), e.id()), (-32600, id), "{body}");
    }
}

#[test]
fn arguments_deeper_than_the_policy_input_holds_are_the_clients_invalid_request() {
    let nested = |levels: usize| {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "k": v });
        }
        v
    };
    let limit = crate::rego_value::MAX_DEPTH;
    // The arguments object itself is level 1, as the policy input counts it.
    let call = |args: Value| json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "t", "arguments": args}});
    let at = post(call(nested(limit))).expect("at the limit");
    assert!(crate::rego_value::json_object(at.messages[0].arguments.as_ref().expect("arguments")).is_ok());
    let e = post(call(nested(limit + 1))).expect_err("past the limit");
    assert_eq!(e, McpError::TooDeep { id: Some(json!(9)), what: "arguments" });
    assert_eq!((e.jsonrpc_code(), e.code(), e.jsonrpc_message(), e.id()), (-32600, "invalid_request", "Invalid Request", json!(9)));
    assert_eq!(e.to_string(), "arguments nested deeper than 64 levels (the policy input's limit)");
    // In a batch, the element that is too deep names its own id.
    let e = post(json!([call(json!({})), {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "t", "arguments": nested(limit + 1)}}]))
        .expect_err("past the limit");
    assert_eq!(e.id(), json!("b"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": nested(limit + 1)}});
    assert_eq!(post(init).expect_err("past the limit"), McpError::TooDeep { id: Some(json!(1)), what: "clientInfo" });
}

#[test]
fn get_and_delete_without_body_are_not_parsed() {
    let mut h = HeaderMap::new();
    h.insert(SESSION_ID, HeaderValue::from_static("s-1"));
    h.insert(PROTOCOL_VERSION, HeaderValue::from_static("2025-11-25"));
    for m in [Method::GET, Method::DELETE] {
        let req = parse(&m, &h, &Bytes::new()).expect("no body is fine");
        assert!(req.messages.is_empty());
        assert_eq!((req.session.as_deref(), req.protocol_version.as_deref()), (Some("s-1"), Some("2025-11-25")));
    }
}

#[test]
fn matching_stateless_headers_pass_and_base64_values_are_decoded() {
    let name = base64::engine::general_purpose::STANDARD.encode("paiement.envoyé");
    let req =
        with_headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD_HEADER, "tools/call"), (NAME_HEADER, &format!("=?base64?{name}?="))], call("paiement.envoyé"))
            .expect("headers agree");
    assert_eq!(req.messages[0].tool.as_deref(), Some("paiement.envoyé"));
}

#[test]
fn header_disagreeing_with_body_is_header_mismatch_and_policy_would_see_the_body() {
    let e = with_headers(&[(METHOD_HEADER, "tools/list")], call("a")).expect_err("mismatch");
    assert_eq!((e.jsonrpc_code(), e.code(), e.id()), (-32020, "header_mismatch", json!(7)));
    let e = with_headers(&[(METHOD_HEADER, "tools/call"), (NAME_HEADER, "harmless")], call("payments.send")).expect_err("mismatch");
    assert!(e.to_string().contains("Mcp-Name"), "{e}");
    let e = with_headers(&[(NAME_HEADER, "=?base64?!!!?=")], call("a")).expect_err("bad encoding");
    assert!(matches!(e, McpError::HeaderMismatch { .. }));
    let e = with_headers(&[(METHOD_HEADER, "tools/call")], json!({"jsonrpc": "2.0", "id": 1, "result": {}})).expect_err("response");
    assert!(matches!(e, McpError::HeaderMismatch { .. }));
}

#[test]
fn stateless_version_requires_the_headers() {
    let e = with_headers(&[(PROTOCOL_VERSION, "2026-07-28")], call("a")).expect_err("missing Mcp-Method");
    assert!(e.to_string().contains("required"), "{e}");
    let e = with_headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD_HEADER, "tools/call")], call("a")).expect_err("missing Mcp-Name");
    assert!(e.to_string().contains("Mcp-Name"), "{e}");
    // The older transport does not require them.
    with_headers(&[(PROTOCOL_VERSION, "2025-11-25")], call("a")).expect("sessions transport");
}

#[test]
fn protocol_version_header_must_match_params_meta() {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}});
    let e = with_headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD_HEADER, "tools/list")], body).expect_err("mismatch");
    assert!(e.to_string().contains("MCP-Protocol-Version"), "{e}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: a parse either fails with a JSON-RPC error code or yields at least one
        /// message, and never panics.
        #[test]
        fn arbitrary_bytes_are_parsed_or_refused_with_a_json_rpc_code(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            match parse(&Method::POST, &HeaderMap::new(), &Bytes::from(body)) {
                Ok(req) => prop_assert!(!req.messages.is_empty()),
                Err(e) => prop_assert!([-32700, -32600, -32020].contains(&e.jsonrpc_code())),
            }
        }

        /// Well-formed tools/call messages round-trip their tool name and id, in a batch or not.
        #[test]
        fn tool_calls_keep_name_and_id(tool in "[a-z][a-z0-9._]{0,20}", id in any::<i64>(), n in 1usize..4) {
            let one = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
            let body = if n == 1 { one.clone() } else { Value::Array(vec![one; n]) };
            let req = post(body).expect("valid");
            prop_assert_eq!(req.messages.len(), n);
            prop_assert_eq!(req.is_batch, n > 1);
            for m in &req.messages {
                prop_assert_eq!(m.tool.as_deref(), Some(tool.as_str()));
                prop_assert_eq!(m.id.clone(), Some(json!(id)));
            }
        }
    }
}

#[test]
fn a_mismatch_names_the_header_and_quotes_neither_value() {
    let long = "x".repeat(10_000);
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{long}","arguments":{{}}}}}}"#);
    let mut headers = HeaderMap::new();
    headers.insert("mcp-name", http::HeaderValue::from_static("search-the-private-index"));
    let err = parse(&Method::POST, &headers, &Bytes::from(body)).expect_err("names differ");
    let McpError::HeaderMismatch { reason, .. } = err else { panic!("{err:?}") };
    assert_eq!(reason, "Mcp-Name header does not match the body's name");
}

/// Found by fuzz/fuzz_targets/mcp_parse.rs: serde_json's default number parser may be one ulp
/// off, so a numeric id was read, and echoed in a refusal, as another number than the one the
/// client (JavaScript, Python: correctly rounded) holds: here the id JavaScript writes for the
/// double 3.333133333333233e46 came back as 3.3331333333332327e46.
#[test]
fn a_numeric_id_is_read_as_the_nearest_double() {
    let body = br#"{"jsonrpc":"2.0","id":3.333133333333233e46,"method":"tools/list"}"#;
    let req = parse(&Method::POST, &HeaderMap::new(), &Bytes::from_static(body)).expect("parsed");
    assert_eq!(req.messages[0].id, Some(json!(3.333133333333233e46)));
    let refused = parse(&Method::POST, &HeaderMap::new(), &Bytes::from_static(br#"{"jsonrpc":"1.0","id":3.333133333333233e46}"#));
    let echoed = serde_json::to_string(&refused.expect_err("not 2.0").id()).expect("serializes");
    // Read back as a correctly rounding client reads it.
    assert_eq!(echoed.parse::<f64>(), Ok(3.333133333333233e46), "{echoed}");
}
