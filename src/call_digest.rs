//! The call digest (docs/design.md "Exactly-once tool calls"): SHA-256 over the RFC 8785 (JCS)
//! canonical JSON of what a call does — `{"method", "tool", "arguments"}` for `tools/call`,
//! `{"method", "uri"}` for `resources/read`, `{"method", "prompt", "arguments"}` for
//! `prompts/get`, `{"method", "params"}` for any other method.
//!
//! Two calls have the same digest exactly when they ask for the same thing, however their JSON
//! is spelled (member order, whitespace, `5.0E2` vs `500`). The idempotency journal uses it as
//! the request fingerprint; approvals bind to it.
//!
//! The body is read as I-JSON (RFC 7493, RFC 8785 §3.1) before it is hashed: duplicate member
//! names and numbers outside ±(2^53−1) are refused rather than hashed, because a parser
//! upstream may read a duplicate differently, and two different large integers can share one
//! double (`9007199254740993` and `9007199254740992` would get one digest). Canonicalization
//! is `serde_json_canonicalizer` (ECMAScript number formatting through `ryu-js`), checked
//! against every RFC 8785 vector in `tests/vectors/rfc8785-jcs.json`.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The largest integer a double holds exactly (RFC 8785 App. D, I-JSON §2.2).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// SHA-256 of the canonical call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CallDigest([u8; 32]);

impl fmt::Debug for CallDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallDigest({})", self.hex())
    }
}

/// Why a body has no call digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallDigestError {
    /// Not JSON, or not I-JSON: duplicate member names, lone surrogates, non-finite numbers.
    #[error("the call is not I-JSON (RFC 7493): {0}")]
    NotIJson(String),
    /// A number outside ±(2^53−1): it cannot be hashed without losing which number it was.
    #[error("the call holds a number outside ±(2^53-1); send it as a string")]
    UnsafeInteger,
    /// The body is not one JSON-RPC request (a batch, a response, or not an object).
    #[error("the body is not a single JSON-RPC request")]
    NotACall,
}

/// One JSON-RPC request as the digest and the idempotency journal read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// The digest of method, target and arguments.
    pub digest: CallDigest,
    /// The JSON-RPC id (`None` for a notification).
    pub id: Option<Value>,
    /// `params._meta.progressToken`, when the caller asked for progress notifications.
    pub progress_token: Option<Value>,
}

impl CallDigest {
    /// The digest as 64 lowercase hex digits.
    pub(crate) fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The digest of this call made to the MCP server `server` (section F: a call to one
    /// server is another call than the same one to another): the single-server form's
    /// (`default`) is this digest as it always was; another server's hashes its length-prefixed
    /// name before this digest's hex.
    pub(crate) fn on_server(self, server: &str) -> CallDigest {
        if server == crate::config::DEFAULT_SERVER {
            return self;
        }
        let mut h = Sha256::new();
        h.update((server.len() as u64).to_be_bytes());
        h.update(server.as_bytes());
        h.update(self.hex().as_bytes());
        CallDigest(h.finalize().into())
    }

    /// The 32 digest bytes.
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest of a JSON value already in call form (`{"method", "tool", "arguments"}`).
    /// Numbers beyond ±(2^53−1) are refused: they may not be the number the client wrote.
    pub(crate) fn of_value(call: &Value) -> Result<CallDigest, CallDigestError> {
        check_safe_numbers(call)?;
        Ok(CallDigest(Sha256::digest(canonical(call)?).into()))
    }

    /// Reads one JSON-RPC request body strictly (I-JSON) and digests what it asks for.
    pub(crate) fn of_body(body: &[u8]) -> Result<Call, CallDigestError> {
        let Value::Object(mut msg) = parse_i_json(body)? else { return Err(CallDigestError::NotACall) };
        let Some(Value::String(method)) = msg.remove("method") else { return Err(CallDigestError::NotACall) };
        let mut params = match msg.remove("params") {
            Some(Value::Object(p)) => p,
            None | Some(Value::Null) => Map::new(),
            Some(other) => {
                let mut m = Map::new();
                m.insert("params".to_owned(), other);
                return Ok(Call { digest: CallDigest::of_value(&call_form(&method, m))?, id: msg.remove("id"), progress_token: None });
            }
        };
        let progress_token = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
        let digest = CallDigest::of_value(&call_form(&method, std::mem::take(&mut params)))?;
        Ok(Call { digest, id: msg.remove("id"), progress_token })
    }
}

/// The object that is hashed for `method` with `params` (PRODUCT.md §A's call digest).
fn call_form(method: &str, mut params: Map<String, Value>) -> Value {
    let arguments = |p: &mut Map<String, Value>| match p.remove("arguments") {
        // A missing and an empty argument object ask for the same thing.
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a) => a,
    };
    let mut call = Map::new();
    call.insert("method".to_owned(), Value::from(method));
    match method {
        "tools/call" => {
            call.insert("tool".to_owned(), params.remove("name").unwrap_or(Value::Null));
            call.insert("arguments".to_owned(), arguments(&mut params));
        }
        "resources/read" => {
            call.insert("uri".to_owned(), params.remove("uri").unwrap_or(Value::Null));
        }
        "prompts/get" => {
            call.insert("prompt".to_owned(), params.remove("name").unwrap_or(Value::Null));
            call.insert("arguments".to_owned(), arguments(&mut params));
        }
        _ => {
            // `_meta` is transport metadata (progress tokens, protocol version), not the call.
            params.remove("_meta");
            call.insert("params".to_owned(), Value::Object(params));
        }
    }
    Value::Object(call)
}

/// RFC 8785 canonical UTF-8 bytes of `value` (numbers as the doubles they are).
pub(crate) fn canonical(value: &Value) -> Result<Vec<u8>, CallDigestError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| CallDigestError::NotIJson(e.to_string()))
}

/// Refuses numbers of magnitude over 2^53−1. For integers that is I-JSON's range; every double
/// that large is an integer too, and an integer literal past u64 is read as one, so the same
/// rule catches `18446744073709551616` and `1e20` alike: above 2^53 two different literals can
/// be one double, and so one digest.
fn check_safe_numbers(value: &Value) -> Result<(), CallDigestError> {
    match value {
        Value::Number(n) => {
            let safe = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() <= MAX_SAFE_INTEGER,
                (None, None) => n.as_f64().is_some_and(|f| f.is_finite() && f.abs() <= MAX_SAFE_INTEGER as f64),
            };
            if safe {
                Ok(())
            } else {
                Err(CallDigestError::UnsafeInteger)
            }
        }
        Value::Array(items) => items.iter().try_for_each(check_safe_numbers),
        Value::Object(members) => members.values().try_for_each(check_safe_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// Parses JSON text as I-JSON: like `serde_json::from_slice`, but a duplicate member name is
/// an error (serde_json would keep the last one silently).
pub(crate) fn parse_i_json(text: &[u8]) -> Result<Value, CallDigestError> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = Strict.deserialize(&mut de).map_err(|e| CallDigestError::NotIJson(e.to_string()))?;
    de.end().map_err(|e| CallDigestError::NotIJson(e.to_string()))?;
    Ok(value)
}

/// A `Value` deserializer that refuses duplicate member names.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            // The name is the client's own content: it is not quoted back.
            if members.contains_key(&name) {
                return Err(de::Error::custom("duplicate member name"));
            }
            let v = map.next_value_seed(Strict)?;
            members.insert(name, v);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
#[path = "call_digest_tests.rs"]
mod tests;
