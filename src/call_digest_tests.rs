#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};

use super::*;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/rfc8785-jcs.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn jcs(input: &str) -> String {
    String::from_utf8(canonical(&parse_i_json(input.as_bytes()).unwrap()).unwrap()).unwrap()
}

#[test]
fn rfc8785_documents_and_sort_order_canonicalize_as_published() {
    let v = vectors();
    let cases = v["documents"].as_array().unwrap().iter().chain(v["sorting"].as_array().unwrap());
    let mut n = 0;
    for case in cases {
        if let Some(order) = case["expected_name_order"].as_array() {
            // §3.2.3: names sort as UTF-16 code units, a shorter prefix first.
            let names: Vec<&str> = order.iter().map(|n| n.as_str().unwrap()).collect();
            let mut reversed: serde_json::Map<String, Value> = serde_json::Map::new();
            for n in names.iter().rev() {
                reversed.insert((*n).to_owned(), json!(1));
            }
            let want = format!("{{{}}}", names.iter().map(|n| format!("\"{n}\":1")).collect::<Vec<_>>().join(","));
            assert_eq!(String::from_utf8(canonical(&Value::Object(reversed)).unwrap()).unwrap(), want);
            n += 1;
            continue;
        }
        assert_eq!(jcs(case["input"].as_str().unwrap()), case["canonical"].as_str().unwrap(), "{}", case["id"]);
        if let Some(hex) = case["canonical_utf8_hex"].as_str() {
            let bytes = canonical(&parse_i_json(case["input"].as_str().unwrap().as_bytes()).unwrap()).unwrap();
            let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{}", case["id"]);
        }
        n += 1;
    }
    assert_eq!(n, 5);
}

#[test]
fn rfc8785_appendix_b_numbers_format_as_ecmascript() {
    let v = vectors();
    let mut checked = 0;
    for case in v["numbers"]["cases"].as_array().unwrap() {
        let bits = u64::from_str_radix(case["ieee754_hex"].as_str().unwrap(), 16).unwrap();
        let x = f64::from_bits(bits);
        if case["error"].as_bool().unwrap() {
            assert!(!x.is_finite(), "{case}");
            assert!(serde_json::Number::from_f64(x).is_none(), "NaN and Infinity are not JSON");
            continue;
        }
        let got = String::from_utf8(canonical(&json!(x)).unwrap()).unwrap();
        assert_eq!(got, case["expected"].as_str().unwrap(), "{case}");
        checked += 1;
    }
    assert!(checked >= 22, "{checked}");
}

#[test]
fn rfc8785_error_cases_are_refused() {
    for case in vectors()["errors"].as_array().unwrap() {
        assert!(parse_i_json(case["input"].as_str().unwrap().as_bytes()).is_err(), "{}", case["id"]);
    }
}

#[test]
fn portcullis_call_digests_match_the_constructed_vectors() {
    for case in vectors()["portcullis"]["cases"].as_array().unwrap() {
        if case["error"] == json!(true) {
            assert_eq!(
                CallDigest::of_value(&parse_i_json(case["input"].as_str().unwrap().as_bytes()).unwrap()),
                Err(CallDigestError::UnsafeInteger),
                "{}",
                case["id"]
            );
            continue;
        }
        let input = parse_i_json(case["input"].as_str().unwrap().as_bytes()).unwrap();
        assert_eq!(String::from_utf8(canonical(&input).unwrap()).unwrap(), case["canonical"].as_str().unwrap(), "{}", case["id"]);
        let want = case["sha256"].as_str().unwrap().strip_prefix("sha256:").unwrap();
        assert_eq!(CallDigest::of_value(&input).unwrap().hex(), want, "{}", case["id"]);
    }
}

#[test]
fn a_tools_call_body_digests_to_the_published_call_digest_however_spelled() {
    let want = "4e494dc2f07f4d5c2a69f976018e08af32c5d997693ad7b067b8c731ee39b9d0";
    let a = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"payments.send","arguments":{"amount":500}}}"#;
    let b = br#"{ "params": {"arguments": {"amount": 5.0E2}, "name": "payments.send", "_meta": {"progressToken": "p1"}}, "method": "tools/call", "id": "x", "jsonrpc": "2.0" }"#;
    let (a, b) = (CallDigest::of_body(a).unwrap(), CallDigest::of_body(b).unwrap());
    assert_eq!(a.digest.hex(), want);
    assert_eq!(b.digest, a.digest, "id, _meta and spelling are not part of the call");
    assert_eq!((a.id, b.id), (Some(json!(7)), Some(json!("x"))));
    assert_eq!((a.progress_token, b.progress_token), (None, Some(json!("p1"))));
}

#[test]
fn different_arguments_tools_or_methods_digest_differently() {
    let body = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let digests = [
        body("tools/call", json!({"name": "payments.send", "arguments": {"amount": 500}})),
        body("tools/call", json!({"name": "payments.send", "arguments": {"amount": 501}})),
        body("tools/call", json!({"name": "payments.refund", "arguments": {"amount": 500}})),
        body("prompts/get", json!({"name": "payments.send", "arguments": {"amount": 500}})),
        body("resources/read", json!({"uri": "file:///a"})),
        body("resources/read", json!({"uri": "file:///b"})),
        body("tools/list", json!({})),
    ]
    .map(|b| CallDigest::of_body(b.as_bytes()).unwrap().digest);
    for (i, a) in digests.iter().enumerate() {
        for b in &digests[i + 1..] {
            assert_ne!(a, b);
        }
    }
    let missing = CallDigest::of_body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#).unwrap();
    let empty = CallDigest::of_body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#).unwrap();
    assert_eq!(missing.digest, empty.digest, "no arguments and empty arguments are the same call");
}

#[test]
fn duplicate_names_unsafe_integers_and_batches_have_no_digest() {
    let dup = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"amount":1,"amount":2}}}"#;
    assert!(matches!(CallDigest::of_body(dup), Err(CallDigestError::NotIJson(r)) if r.contains("duplicate") && !r.contains("amount")));
    // 2^53 + 1 and 2^53 are one double: they would share a digest.
    let big = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"amount":9007199254740993}}}"#;
    assert_eq!(CallDigest::of_body(big), Err(CallDigestError::UnsafeInteger));
    let negative = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"amount":-9007199254740992}}}"#;
    assert_eq!(CallDigest::of_body(negative), Err(CallDigestError::UnsafeInteger));
    for past_u64 in ["18446744073709551616", "1e20", "-9.1e15"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"amount":{past_u64}}}}}}}"#);
        assert_eq!(CallDigest::of_body(body.as_bytes()), Err(CallDigestError::UnsafeInteger), "{past_u64}");
    }
    let edge = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"amount":9007199254740991}}}"#;
    assert!(CallDigest::of_body(edge).is_ok());
    assert_eq!(CallDigest::of_body(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#), Err(CallDigestError::NotACall));
    assert_eq!(CallDigest::of_body(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Err(CallDigestError::NotACall));
    assert!(matches!(CallDigest::of_body(b"{\"a\":1} trailing"), Err(CallDigestError::NotIJson(_))));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// JSON values within I-JSON: safe integers, finite doubles, any strings, nested.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(Value::from),
            (-9.0e15f64..9.0e15).prop_map(Value::from),
            (-1.0f64..1.0).prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The same members written in reverse order, recursively.
    fn reversed(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let members: Vec<String> = m.iter().rev().map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), reversed(v))).collect();
                format!("{{ {} }}", members.join(" , "))
            }
            Value::Array(items) => format!("[{}]", items.iter().map(reversed).collect::<Vec<_>>().join(",")),
            other => other.to_string(),
        }
    }

    proptest! {
        /// However a call's JSON is spelled (member order, whitespace), its digest is the same;
        /// and canonical JSON is a fixed point (parse it, canonicalize again: same bytes).
        #[test]
        fn the_digest_does_not_depend_on_spelling(args in json_value(), tool in "[a-z.]{1,12}") {
            let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
            let compact = CallDigest::of_body(call.to_string().as_bytes()).unwrap();
            let spelled = CallDigest::of_body(reversed(&call).as_bytes()).unwrap();
            prop_assert_eq!(compact.digest, spelled.digest);
            let canon = canonical(&call).unwrap();
            prop_assert_eq!(canonical(&parse_i_json(&canon).unwrap()).unwrap(), canon);
        }

        /// Untrusted bodies: never a panic.
        #[test]
        fn any_body_is_digested_or_refused(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = CallDigest::of_body(&body);
        }
    }
}

#[test]
fn a_call_to_another_server_is_another_call_and_the_single_servers_is_unchanged() {
    let call = CallDigest::of_body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#).expect("call").digest;
    assert_eq!(call.on_server(crate::config::DEFAULT_SERVER), call);
    assert_ne!(call.on_server("weather"), call);
    assert_ne!(call.on_server("weather"), call.on_server("payments"));
}
