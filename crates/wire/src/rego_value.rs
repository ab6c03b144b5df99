//! JSON → policy value, total and literal: every JSON object key stays a string key, every
//! number stays a number, and nothing the sender wrote is read as an instruction.
//!
//! regorus's own `Deserialize` impl reads an object whose first key is
//! `$serde_json::private::Number` as a big-number marker: `{"$serde_json::private::Number":
//! "x", "to": "mallory"}` became *undefined* and `{"$serde_json::private::Number": "5", …}`
//! the number 5, so every rule over `input.mcp.arguments` stopped firing while the backend,
//! which ignores the unknown key, ran the call. This conversion walks the parsed
//! `serde_json::Value` itself and has no such reading. It can fail only on nesting deeper
//! than [`MAX_DEPTH`], and a failure is an error the caller must turn into a refusal — never
//! an undefined value, which a rule like `deny if input.mcp.arguments.amount > 100` would
//! silently skip. [`check_depth`] asks the same question without converting, so the MCP
//! parse can refuse what the client sent too deep as the client's error (decision 15) before
//! the policy stage, where only the policy's own failures are left.

use std::collections::BTreeMap;

use regorus::Value;

/// Deepest nesting converted. Tool arguments and token claims have no business being deeper;
/// serde_json itself stops parsing at 128.
pub const MAX_DEPTH: usize = 64;

/// Why a JSON value could not become a policy value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConvertError {
    /// Objects or arrays nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl std::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConvertError::TooDeep => write!(f, "JSON nested deeper than {MAX_DEPTH} levels"),
        }
    }
}

impl std::error::Error for ConvertError {}

/// A JSON object as a policy object, converted straight from the parsed body (no clone of it
/// first: tool arguments can be most of a large body).
pub fn json_object(map: &serde_json::Map<String, serde_json::Value>) -> Result<Value, ConvertError> {
    object(map, 1)
}

/// Any JSON value as a policy value.
pub fn json_value(v: &serde_json::Value) -> Result<Value, ConvertError> {
    value(v, 0)
}

/// Whether [`json_value`] (and [`json_object`] on an object's members) would stay within
/// [`MAX_DEPTH`], counted the same way: the outermost object or array is level 1.
pub fn check_depth(v: &serde_json::Value) -> Result<(), ConvertError> {
    within(v, 0)
}

/// [`check_depth`] for an object held as its members (the parsed `tools/call` arguments).
pub fn check_object_depth(map: &serde_json::Map<String, serde_json::Value>) -> Result<(), ConvertError> {
    map.values().try_for_each(|v| within(v, 1))
}

fn within(v: &serde_json::Value, depth: usize) -> Result<(), ConvertError> {
    use serde_json::Value as J;
    match v {
        J::Array(items) => {
            let depth = deeper(depth)?;
            items.iter().try_for_each(|i| within(i, depth))
        }
        J::Object(map) => {
            let depth = deeper(depth)?;
            map.values().try_for_each(|i| within(i, depth))
        }
        J::Null | J::Bool(_) | J::Number(_) | J::String(_) => Ok(()),
    }
}

fn value(v: &serde_json::Value, depth: usize) -> Result<Value, ConvertError> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::from(*b),
        J::Number(n) => number(n),
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => {
            let depth = deeper(depth)?;
            Value::from(items.iter().map(|i| value(i, depth)).collect::<Result<Vec<_>, _>>()?)
        }
        J::Object(map) => object(map, deeper(depth)?)?,
    })
}

fn object(map: &serde_json::Map<String, serde_json::Value>, depth: usize) -> Result<Value, ConvertError> {
    if depth > MAX_DEPTH {
        return Err(ConvertError::TooDeep);
    }
    let mut out = BTreeMap::new();
    for (k, v) in map {
        out.insert(Value::from(k.as_str()), value(v, depth)?);
    }
    Ok(Value::from(out))
}

fn deeper(depth: usize) -> Result<usize, ConvertError> {
    let d = depth + 1;
    if d > MAX_DEPTH {
        Err(ConvertError::TooDeep)
    } else {
        Ok(d)
    }
}

/// serde_json (without `arbitrary_precision`) holds an `i64`, a `u64` or a finite `f64`.
fn number(n: &serde_json::Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::from(i)
    } else if let Some(u) = n.as_u64() {
        Value::from(u)
    } else {
        // A parsed JSON number is always finite; `From<f64>` would map a non-finite one to
        // null, never to undefined.
        Value::from(n.as_f64().unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> Value {
        json_object(v.as_object().expect("an object")).expect("converts")
    }

    #[test]
    fn the_big_number_marker_is_an_ordinary_key() {
        // regorus's deserializer made the first undefined and the second the number 5.
        for marker in [json!("not a number"), json!("5")] {
            let v = obj(json!({"$serde_json::private::Number": marker.clone(), "to": "mallory", "amount": 500}));
            assert_eq!(v["to"], Value::from("mallory"));
            assert_eq!(v["amount"], Value::from(500u64));
            assert_eq!(v["$serde_json::private::Number"], Value::from(marker.as_str().expect("a string")));
        }
        let nested = json_value(&json!({"a": [{"$serde_json::private::Number": "1", "b": true}]})).expect("converts");
        assert_eq!(nested["a"][0]["b"], Value::from(true));
    }

    #[test]
    fn values_keep_their_json_types() {
        let v = obj(json!({"n": null, "t": true, "i": -3, "u": u64::MAX, "f": 1.5, "s": "x", "a": [1, "2"], "o": {}}));
        assert_eq!(v["n"], Value::Null);
        assert_eq!(v["t"], Value::from(true));
        assert_eq!(v["i"], Value::from(-3i64));
        assert_eq!(v["u"], Value::from(u64::MAX));
        assert_eq!(v["f"], Value::from(1.5f64));
        assert_eq!(v["s"], Value::from("x"));
        assert_eq!(v["a"], Value::from(vec![Value::from(1u64), Value::from("2")]));
        assert_eq!(v["o"], Value::new_object());
    }

    #[test]
    fn nesting_past_the_limit_is_an_error_not_undefined() {
        let mut deep = json!(1);
        for _ in 0..MAX_DEPTH {
            deep = json!([deep]);
        }
        assert!(json_value(&deep).is_ok(), "{MAX_DEPTH} levels convert");
        assert_eq!(json_value(&json!([deep])), Err(ConvertError::TooDeep));
        let mut deep_obj = json!({});
        for _ in 0..MAX_DEPTH {
            deep_obj = json!({ "k": deep_obj });
        }
        assert_eq!(json_object(deep_obj.as_object().expect("object")), Err(ConvertError::TooDeep));
    }

    #[test]
    fn check_depth_agrees_with_the_conversion_at_the_limit() {
        for levels in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
            let (mut arrays, mut objects, mut mixed) = (json!(1), json!("x"), json!(null));
            for i in 0..levels {
                arrays = json!([arrays]);
                objects = json!({ "k": objects });
                mixed = if i % 2 == 0 { json!([0, mixed]) } else { json!({"a": 1, "b": mixed}) };
            }
            for v in [&arrays, &objects, &mixed] {
                assert_eq!(check_depth(v), json_value(v).map(|_| ()), "{levels} levels");
                assert_eq!(check_depth(v).is_ok(), levels <= MAX_DEPTH, "{levels} levels");
            }
            let map = objects.as_object().expect("object");
            assert_eq!(check_object_depth(map), json_object(map).map(|_| ()), "{levels} levels");
        }
    }

    /// Arbitrary JSON whose keys include the big-number marker and other serde internals.
    fn arb_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let key = prop_oneof![Just("$serde_json::private::Number".to_owned()), Just("$__toml_private_datetime".to_owned()), "[a-z$:_]{0,12}"];
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            (-1e300f64..1e300).prop_map(serde_json::Value::from),
            "[0-9a-z.$ ]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(6, 64, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Back to JSON, the regorus way (its `Serialize` impl has no markers).
    fn round_trip(v: &Value) -> serde_json::Value {
        serde_json::to_value(v).expect("serializes")
    }

    /// Equal as JSON documents, numbers compared by value (regorus may print `1e10` as an
    /// integer, and a float's last digit differently).
    fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        use serde_json::Value as J;
        match (a, b) {
            (J::Number(x), J::Number(y)) => {
                // regorus keeps f64 but prints the last digit its own way.
                let (a, b) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                x == y || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
            }
            (J::Array(x), J::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
            (J::Object(x), J::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w))),
            _ => a == b,
        }
    }

    proptest::proptest! {
        #[test]
        fn every_key_and_value_survives(doc in arb_json()) {
            proptest::prop_assert!(check_depth(&doc).is_ok());
            let converted = json_value(&doc).expect("shallow enough");
            let back = round_trip(&converted);
            proptest::prop_assert!(same(&back, &doc), "{back} != {doc}");
        }
    }
}
