//! JSON → policy value (`portcullis_wire::rego_value`) over arbitrary bytes read as JSON: the MCP
//! body, its tool arguments and the token claims all reach Rego through it. Input: any bytes;
//! those that serde_json reads as JSON are converted whole (`json_value`) and, when an object,
//! as an object (`json_object`).
//! Invariants: the conversion never panics and fails only with `TooDeep`, exactly when arrays
//! and objects nest deeper than `MAX_DEPTH`; on success the value has the same shape as the
//! JSON: every object key present as a string key mapped to its converted value (no key read
//! as a marker, e.g. `$serde_json::private::Number`), no other key, arrays of the same length
//! and order, strings, booleans and null as they were, every number the same number, and no
//! `Undefined` anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::rego_value::{json_object, json_value, ConvertError, MAX_DEPTH};
use regorus::Value;
use serde_json::Value as J;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<J>(data) else { return };
    let too_deep = depth(&doc) > MAX_DEPTH;
    match json_value(&doc) {
        Ok(v) => {
            assert!(!too_deep, "converted {} levels", depth(&doc));
            same(&doc, &v);
        }
        Err(e) => {
            assert_eq!(e, ConvertError::TooDeep);
            assert!(too_deep, "refused {} levels", depth(&doc));
            assert!(!e.to_string().is_empty());
        }
    }
    if let J::Object(map) = &doc {
        match json_object(map) {
            Ok(v) => same(&doc, &v),
            Err(e) => assert!(e == ConvertError::TooDeep && too_deep),
        }
    }
});

/// Levels of arrays and objects: a scalar is 0, `[]` and `{}` are 1.
fn depth(v: &J) -> usize {
    match v {
        J::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        J::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn same(json: &J, value: &Value) {
    match (json, value) {
        (J::Null, Value::Null) => {}
        (J::Bool(a), Value::Bool(b)) => assert_eq!(a, b),
        (J::String(a), Value::String(b)) => assert_eq!(a.as_str(), &**b),
        (J::Number(n), Value::Number(m)) => {
            if let Some(i) = n.as_i64() {
                assert_eq!(m.as_i64(), Some(i), "{n}");
            } else if let Some(u) = n.as_u64() {
                assert_eq!(m.as_u64(), Some(u), "{n}");
            } else {
                assert_eq!(m.as_f64(), n.as_f64(), "{n}");
            }
        }
        (J::Array(items), Value::Array(out)) => {
            assert_eq!(items.len(), out.len());
            items.iter().zip(out.iter()).for_each(|(j, v)| same(j, v));
        }
        (J::Object(map), Value::Object(out)) => {
            assert_eq!(map.len(), out.len(), "keys added or lost");
            for (k, j) in map {
                let v = out.get(&Value::String(k.as_str().into())).unwrap_or_else(|| panic!("key {k:?} is not a string key of the result"));
                same(j, v);
            }
        }
        (j, v) => panic!("{j} became {v:?}"),
    }
}
