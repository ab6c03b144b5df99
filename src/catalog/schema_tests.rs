use super::*;
use http::{HeaderMap, HeaderValue};
use serde_json::json;

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn tool(schema: Value) -> Map<String, Value> {
    object(json!({"name": "t", "inputSchema": schema}))
}

fn args(v: Value) -> Map<String, Value> {
    object(v)
}

#[test]
fn wrong_types_missing_required_and_extra_properties_name_the_pointer_never_the_value() {
    let schema = ArgumentSchema::compile(&tool(json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}, "opts": {"type": "object", "properties": {"unit": {"enum": ["C", "F"]}}}},
        "required": ["city"],
        "additionalProperties": false,
    })));
    assert_eq!(schema.unsupported(), None);
    assert_eq!(schema.check(Some(&args(json!({"city": "Paris", "days": 3})))), Ok(()));
    let wrong = schema.check(Some(&args(json!({"city": "zqsecret", "days": "zqsecret-days"})))).expect_err("wrong type");
    assert_eq!(wrong, Invalid { pointer: "/days".to_owned(), problem: "must be of type integer".to_owned() });
    let missing = schema.check(Some(&args(json!({"days": 1})))).expect_err("missing");
    assert_eq!((missing.pointer.as_str(), missing.problem.as_str()), ("", "missing required property \"city\""));
    let extra = schema.check(Some(&args(json!({"city": "x", "zqsecret": 1})))).expect_err("extra");
    assert!(extra.problem.contains("additionalProperties") && !extra.problem.contains("zqsecret"), "{extra:?}");
    let big = schema.check(Some(&args(json!({"city": "x", "days": 99})))).expect_err("too big");
    assert_eq!(big.problem, "must be at most 7");
    let nested = schema.check(Some(&args(json!({"city": "x", "opts": {"unit": "K"}})))).expect_err("enum");
    assert_eq!(nested.pointer, "/opts/unit");
    assert!(schema.check(None).is_err(), "absent arguments are an empty object, missing city");
}

#[test]
fn dialects_are_honoured_and_unsupported_ones_refused() {
    // draft-07: `items` as an array means tuple validation, which 2020-12 spells prefixItems.
    let d7 = ArgumentSchema::compile(&tool(
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"p": {"items": [{"type": "string"}]}}}),
    ));
    assert_eq!(d7.unsupported(), None);
    assert!(d7.check(Some(&args(json!({"p": [1]})))).is_err());
    for bad in [
        json!({"$schema": "https://example.com/my-dialect", "type": "object"}),
        json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}),
        json!({"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}),
        json!({"type": 12}),
    ] {
        let s = ArgumentSchema::compile(&tool(bad.clone()));
        assert!(s.unsupported().is_some(), "{bad}");
    }
    assert!(ArgumentSchema::compile(&object(json!({"name": "t"}))).unsupported().is_some(), "no inputSchema");
    let local = ArgumentSchema::compile(&tool(json!({"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}})));
    assert_eq!(local.unsupported(), None);
    assert!(local.check(Some(&args(json!({"a": "x"})))).is_err());
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).expect("header"));
    }
    h
}

#[test]
fn parameter_headers_must_agree_with_the_arguments() {
    let t = tool(json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "limit": {"type": "integer", "x-mcp-header": "Limit"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "ratio": {"type": "number", "x-mcp-header": "Ratio"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string", "x-mcp-header": "Inner"}}}},
        "nested": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
    }}));
    let params = header_params(&t);
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 4, "number and items-reached declarations are not used: {names:?}");
    let a = args(json!({"region": "Hello, 世界", "limit": 42, "dry": true, "nested": {"zone": "z1"}}));
    let ok =
        headers(&[("mcp-param-region", "=?base64?SGVsbG8sIOS4lueVjA==?="), ("mcp-param-limit", "42.0"), ("mcp-param-dry", "true"), ("mcp-param-zone", "z1")]);
    assert_eq!(check_headers(&params, &ok, Some(&a)), Ok(()));
    let mut wrong = ok.clone();
    wrong.insert("mcp-param-limit", HeaderValue::from_static("43"));
    assert_eq!(check_headers(&params, &wrong, Some(&a)), Err("Mcp-Param-Limit header does not match the arguments".to_owned()));
    let mut missing = ok.clone();
    missing.remove("mcp-param-zone");
    assert!(check_headers(&params, &missing, Some(&a)).expect_err("missing").contains("Mcp-Param-Zone header is required"));
    let no_args = args(json!({}));
    assert!(check_headers(&params, &headers(&[("mcp-param-dry", "false")]), Some(&no_args)).is_err(), "a header without its argument");
    assert_eq!(check_headers(&params, &HeaderMap::new(), Some(&no_args)), Ok(()));
    let only_region = args(json!({"region": "x"}));
    let err = check_headers(&params, &headers(&[("mcp-param-region", "=?base64?!!?=")]), Some(&only_region)).expect_err("bad base64");
    assert_eq!(err, "Mcp-Param-Region header has invalid =?base64?…?= encoding");
}

#[test]
fn a_header_name_used_twice_is_not_used() {
    let t = tool(
        json!({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}, "c": {"type": "string", "x-mcp-header": "bad name"}}}),
    );
    assert!(header_params(&t).is_empty());
}
