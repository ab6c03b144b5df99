//! `DPoP` field → DPoP proof parse and signature check (RFC 9449 §4.3 checks 1–7, untrusted
//! bytes), and `htu` normalisation. Input: one `DPoP` value per `\n`-separated line (invalid
//! header values are skipped); the whole input, when UTF-8, is also parsed as a proof on its own
//! and normalised as a URI. A bare proof JWT is thus a valid input.
//! Invariants: a proof is the only `DPoP` value; `parse` accepts only a proof of at most
//! `MAX_PROOF_LEN` bytes in three segments whose header has `typ` `dpop+jwt`, an accepted
//! `alg`, no `crit`, and a public `jwk` (no private member) whose RFC 7638 thumbprint is the
//! proof's `jkt`, and whose claims have a `jti` of at most `MAX_JTI_LEN` bytes; a refusal's
//! text is short whatever the input (it quotes no more than a registered name); normalising a
//! normalised URI changes nothing.
#![no_main]

use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use portcullis_wire::dpop::{self, DpopError, MAX_JTI_LEN, MAX_PROOF_LEN};
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check_parse(text);
        if let Some(once) = dpop::normalise_htu(text) {
            assert_eq!(dpop::normalise_htu(&once).as_deref(), Some(once.as_str()), "{text:?}");
            assert!(!once.contains('?') && !once.contains('#'), "{once:?} kept a query or fragment");
        }
    }
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(line) {
            headers.append(dpop::DPOP, v);
        }
    }
    match dpop::proof_header(&headers) {
        Ok(None) => assert!(headers.is_empty()),
        Ok(Some(proof)) => {
            assert_eq!(headers.get_all(dpop::DPOP).iter().count(), 1, "a proof from a repeated DPoP field");
            check_parse(proof);
        }
        Err(e) => assert!(matches!(e, DpopError::MalformedHeader(_)), "{e:?}"),
    }
});

fn check_parse(text: &str) {
    let segments: Vec<&str> = text.split('.').collect();
    let proof = match dpop::parse(text) {
        Ok(p) => p,
        Err(e) => {
            if text.len() > MAX_PROOF_LEN {
                assert_eq!(e, DpopError::TooLong);
            } else if segments.len() != 3 {
                assert_eq!(e, DpopError::NotCompact, "{} segments", segments.len());
            }
            // Refusals quote at most registered typ/alg names, so their length does not grow
            // with the input (src/oauth/refusal_text_tests.rs checks that no run of it appears).
            let message = e.to_string();
            assert!(!message.is_empty() && message.len() <= 200, "{message:?}");
            return;
        }
    };
    assert!(text.len() <= MAX_PROOF_LEN);
    assert_eq!(segments.len(), 3, "parse accepted {} segments", segments.len());
    let part = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).expect("accepted a part that is not base64url");
    let header: Map<String, Value> = serde_json::from_slice(&part(segments[0])).expect("accepted a header that is not an object");
    let typ = header.get("typ").and_then(Value::as_str).expect("accepted a proof without typ").to_ascii_lowercase();
    assert!(typ == "dpop+jwt" || typ == "application/dpop+jwt", "{typ:?}");
    assert_eq!(header.get("alg").and_then(Value::as_str), Some(proof.alg().as_str()));
    assert!(!header.contains_key("crit"), "accepted crit");
    let jwk = header.get("jwk").and_then(Value::as_object).expect("accepted a proof without a jwk object");
    for private in ["d", "p", "q", "dp", "dq", "qi", "oth", "k"] {
        assert!(!jwk.contains_key(private), "accepted a jwk with {private}");
    }
    let jkt = portcullis_wire::signature::jwk_thumbprint(&Value::Object(jwk.clone())).expect("accepted a jwk without a thumbprint");
    assert_eq!(proof.jkt(), jkt);
    assert!(!proof.jti().is_empty() && proof.jti().len() <= MAX_JTI_LEN);
}
