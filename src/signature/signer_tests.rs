#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::signature::test_support::{case, ed25519_signing_key, inbound_from};
use crate::signature::{SignatureError, SignatureVerifier};
use portcullis_wire::UnixTime;

#[test]
fn reproduces_the_constructed_mcp_vector_exactly() {
    let c = case("web-bot-auth.json", "constructed-mcp-post-ed25519");
    let nonce = "rb5JHEc6PzSp9xX2qvBIM7NsIiOAK33Tt6JkYYthclyPozzsB39XDX1R2pZPOkw4jwy1bulzsTrdHH+IZP/mmA==";
    let signer = Signer::new(ed25519_signing_key(), "https://signature-agent.test")
        .unwrap()
        .with_lifetime(Duration::from_secs(4_889_289_600 - 1_735_689_600))
        .with_nonce(Nonce::Fixed(nonce.to_owned()));
    let mut req = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "mcp.example.com")
        .header("content-type", "application/json")
        .body(c["body"].as_str().unwrap().as_bytes().to_vec())
        .unwrap();
    signer.sign_request(&mut req, UnixTime(Duration::from_secs(1_735_689_600))).unwrap();
    let h = |n: &str| req.headers().get(n).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h("content-digest"), c["content_digest"].as_str().unwrap());
    assert_eq!(h("signature-agent"), c["signature_agent"].as_str().unwrap());
    assert_eq!(h("signature-input"), c["signature_input"].as_str().unwrap());
    assert_eq!(h("signature"), c["signature"].as_str().unwrap());
}

#[test]
fn non_https_agent_is_invalid() {
    assert_eq!(Signer::new(ed25519_signing_key(), "http://agent.example").unwrap_err(), SignError::InvalidAgent("http://agent.example".into()));
}

#[test]
fn unprintable_tag_is_invalid_setting() {
    let signer = Signer::new(ed25519_signing_key(), "https://agent.example").unwrap().with_tag("caf\u{e9}");
    let mut req = http::Request::builder().uri("https://mcp.example.com/mcp").body(Vec::new()).unwrap();
    assert_eq!(signer.sign_request(&mut req, UnixTime(Duration::from_secs(1))), Err(SignError::InvalidSetting("tag")));
}

#[test]
fn request_without_authority_is_base_error() {
    let signer = Signer::new(ed25519_signing_key(), "https://agent.example").unwrap();
    let mut req = http::Request::builder().uri("/mcp").body(Vec::new()).unwrap();
    assert!(matches!(signer.sign_request(&mut req, UnixTime(Duration::from_secs(1))), Err(SignError::Base(_))));
}

// --- properties: sign-then-verify round trips; any covered mutation breaks verification ---

const NOW: u64 = 1_784_980_800;

/// The default profile plus `x-covered`, for a gateway whose own authority is `authority`.
fn verifier(authority: &str) -> SignatureVerifier {
    let cfg = crate::config::RawSignatures {
        components: ["@method", "@authority", "@path", "content-digest", "signature-agent", "x-covered"].map(String::from).to_vec(),
        authority: vec![authority.to_owned()],
        ..Default::default()
    };
    SignatureVerifier::new(&crate::config::Signatures::try_from(cfg).unwrap())
}

fn sign(method: &str, authority: &str, path: &str, covered: &str, body: &[u8]) -> crate::inbound::Inbound {
    let signer = Signer::new(ed25519_signing_key(), "https://agent.example").unwrap().with_components(&[
        "@method",
        "@authority",
        "@path",
        "content-digest",
        "signature-agent",
        "x-covered",
    ]);
    let mut req = http::Request::builder().method(method).uri(path).header("host", authority).header("x-covered", covered).body(body.to_vec()).unwrap();
    signer.sign_request(&mut req, UnixTime(Duration::from_secs(NOW))).unwrap();
    inbound_from(req, NOW)
}

/// Verifies `req` as the gateway would: the authority derived from the request as it arrives
/// (after any mutation), at a gateway that calls that authority its own, so only the base can
/// tell a mutated authority apart.
fn outcome(mut req: crate::inbound::Inbound) -> Result<(), SignatureError> {
    req.authority = portcullis_wire::target::authority(&req.head, req.is_tls).expect("an authority");
    let pending = verifier(&req.authority).prepare(&req)?.ok_or(SignatureError::Missing)?;
    pending.verify(&ed25519_signing_key().verifying_key(), "https://agent.example").map(|_| ())
}

#[derive(Debug, Clone)]
enum Mutation {
    Method,
    Path(String),
    Authority(String),
    Covered(String),
    ContentDigest,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Method),
        "/[a-z0-9]{1,8}".prop_map(Mutation::Path),
        "[a-z]{1,8}\\.test".prop_map(Mutation::Authority),
        "[ -~]{0,16}".prop_map(Mutation::Covered),
        Just(Mutation::ContentDigest),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn sign_then_verify_round_trips(
        method in prop_oneof![Just("GET"), Just("POST"), Just("DELETE")],
        authority in "[a-z]{1,10}\\.example(:[0-9]{2,4})?",
        path in "/[a-zA-Z0-9._~%-]{0,20}",
        covered in "[!-~]([ -~]{0,30}[!-~])?",
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        prop_assert_eq!(outcome(sign(method, &authority, &path, &covered, &body)), Ok(()));
    }

    #[test]
    fn any_covered_mutation_fails_verification(
        path in "/[a-z0-9]{0,12}",
        covered in "[a-z0-9]{1,12}",
        body in proptest::collection::vec(any::<u8>(), 1..100),
        m in mutation(),
    ) {
        let mut req = sign("POST", "mcp.example.com", &path, &covered, &body);
        match &m {
            Mutation::Method => req.head.method = http::Method::PUT,
            Mutation::Path(p) => {
                prop_assume!(*p != path);
                req.head.uri = p.parse().unwrap();
            }
            Mutation::Authority(a) => {
                prop_assume!(a != "mcp.example.com");
                req.head.headers.insert("host", a.parse().unwrap());
            }
            Mutation::Covered(v) => {
                prop_assume!(v.trim() != covered);
                req.head.headers.insert("x-covered", v.parse().unwrap());
            }
            Mutation::ContentDigest => {
                req.head.headers.insert("content-digest", "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:".parse().unwrap());
            }
        }
        prop_assert!(outcome(req).is_err(), "{:?} still verified", m);
    }
}
