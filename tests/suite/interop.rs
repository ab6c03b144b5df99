//! Interop with an independent implementation: Cloudflare's `web-bot-auth` crate (0.7) signs a
//! request that our verifier accepts, and verifies a request our signer produced.
//!
//! `web-bot-auth` takes component values from its caller, so values are written out literally
//! here (not computed by our code); it builds the base, serializes `Signature-Input`, and parses
//! our fields itself. Tampering checks prove each direction can fail.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use indexmap::IndexMap;
use portcullis::config::RawSignatures;
use portcullis::inbound::Inbound;
use portcullis::signature::{SignatureVerifier, Signer};
use portcullis_wire::UnixTime;
use web_bot_auth::components::{CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters, HTTPFieldParametersSet};
use web_bot_auth::keyring::{Algorithm, KeyRing};
use web_bot_auth::message_signatures::{MessageSigner, SignedMessage, UnsignedMessage};
use web_bot_auth::{SignatureAgentLink, WebBotAuthVerifier};

const AGENT: &str = "https://agent.example";
const BODY: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"q":"rust"}}}"#;
/// sha-256 of BODY, computed independently with Python hashlib.
const BODY_DIGEST: &str = "sha-256=:JfQ1d582hbBS/rkI+fUzdhtwr8Ndg1px90KGVGOBKkw=:";

fn key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[42; 32])
}

fn http_field(name: &str, params: Vec<HTTPFieldParameters>) -> CoveredComponent {
    CoveredComponent::HTTP(HTTPField { name: name.to_owned(), parameters: HTTPFieldParametersSet(params) })
}

/// The request web-bot-auth signs, with the values its signer is told the components have.
struct TheirRequest {
    signature_input: String,
    signature: String,
}

impl UnsignedMessage for TheirRequest {
    fn fetch_components_to_cover(&self) -> IndexMap<CoveredComponent, String> {
        IndexMap::from_iter([
            (CoveredComponent::Derived(DerivedComponent::Method { req: false }), "POST".to_owned()),
            (CoveredComponent::Derived(DerivedComponent::Authority { req: false }), "mcp.example.com".to_owned()),
            (CoveredComponent::Derived(DerivedComponent::Path { req: false }), "/mcp".to_owned()),
            (http_field("content-digest", vec![]), BODY_DIGEST.to_owned()),
            (http_field("signature-agent", vec![HTTPFieldParameters::Key("agent1".to_owned())]), format!("\"{AGENT}\"")),
        ])
    }

    fn register_header_contents(&mut self, signature_input: String, signature: String) {
        self.signature_input = format!("sig1={signature_input}");
        self.signature = format!("sig1={signature}");
    }
}

fn inbound(head: http::request::Parts, body: &str, now: u64) -> Inbound {
    Inbound::new(head, Bytes::from(body.to_owned()), UnixTime(Duration::from_secs(now)), ([127, 0, 0, 1], 1).into(), true, "interop".into()).unwrap()
}

/// The default profile at a gateway whose own authority is the one `req` is addressed to.
fn verifier(req: &Inbound) -> SignatureVerifier {
    SignatureVerifier::new(
        &portcullis::config::Signatures::try_from(RawSignatures { authority: vec![req.authority.clone()], ..RawSignatures::default() }).unwrap(),
    )
}

fn their_signed_request() -> Inbound {
    let mut msg = TheirRequest { signature_input: String::new(), signature: String::new() };
    let signer =
        MessageSigner { keyid: portcullis::signature::ed25519_thumbprint(&key().verifying_key()), nonce: "interop-nonce-1".into(), tag: "web-bot-auth".into() };
    signer.generate_signature_headers_content(&mut msg, Duration::from_secs(60), Algorithm::Ed25519, &key().to_bytes()).unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "mcp.example.com")
        .header("content-type", "application/json")
        .header("content-digest", BODY_DIGEST)
        .header("signature-agent", format!("agent1=\"{AGENT}\""))
        .header("signature-input", &msg.signature_input)
        .header("signature", &msg.signature)
        .body(())
        .unwrap();
    // web-bot-auth reads the wall clock for `created`; so does this check, once.
    inbound(req.into_parts().0, BODY, UnixTime::now().secs())
}

#[test]
fn body_digest_constant_is_right() {
    use base64::Engine;
    use sha2::Digest;
    let digest = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(BODY.as_bytes()));
    assert_eq!(BODY_DIGEST, format!("sha-256=:{digest}:"));
}

#[test]
fn web_bot_auth_signature_verifies_with_portcullis() {
    let req = their_signed_request();
    let pending = verifier(&req).prepare(&req).unwrap().unwrap();
    assert_eq!(pending.agent().unwrap().origin(), AGENT);
    assert_eq!(pending.nonce(), Some("interop-nonce-1"));
    let verified = pending.verify(&key().verifying_key(), AGENT).unwrap();
    assert_eq!(verified.keyid(), portcullis::signature::ed25519_thumbprint(&key().verifying_key()));
}

#[test]
fn web_bot_auth_signature_over_other_path_fails_with_portcullis() {
    let mut req = their_signed_request();
    req.head.uri = "/admin".parse().unwrap();
    let pending = verifier(&req).prepare(&req).unwrap().unwrap();
    assert!(pending.verify(&key().verifying_key(), AGENT).is_err());
}

/// Our signed request, as web-bot-auth looks it up: fields by name, derived values taken
/// straight from the request, the Signature-Agent member cut out by hand.
struct OurRequest(http::Request<Vec<u8>>);

impl SignedMessage for OurRequest {
    fn lookup_component(&self, name: &CoveredComponent) -> Vec<String> {
        let r = &self.0;
        let header = |n: &str| r.headers().get_all(n).iter().map(|v| v.to_str().unwrap().to_owned()).collect::<Vec<_>>();
        match name {
            CoveredComponent::HTTP(HTTPField { name, parameters }) => match parameters.0.as_slice() {
                [] => header(name),
                [HTTPFieldParameters::Key(k)] => {
                    header(name).iter().filter_map(|v| v.split_once('=').filter(|(key, _)| key == k).map(|(_, value)| value.to_owned())).collect()
                }
                _ => vec![],
            },
            CoveredComponent::Derived(DerivedComponent::Method { .. }) => vec![r.method().to_string()],
            CoveredComponent::Derived(DerivedComponent::Authority { .. }) => header("host"),
            CoveredComponent::Derived(DerivedComponent::Path { .. }) => vec![r.uri().path().to_owned()],
            CoveredComponent::Derived(_) => vec![],
        }
    }
}

fn our_signed_request() -> OurRequest {
    let signer = Signer::new(key(), AGENT).unwrap();
    let mut req = http::Request::builder().method("POST").uri("/mcp").header("host", "mcp.example.com").body(BODY.as_bytes().to_vec()).unwrap();
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    assert_eq!(req.headers()["content-digest"], BODY_DIGEST);
    OurRequest(req)
}

fn their_keyring() -> KeyRing {
    let mut ring = KeyRing::default();
    ring.import_raw(portcullis::signature::ed25519_thumbprint(&key().verifying_key()), Algorithm::Ed25519, key().verifying_key().to_bytes().to_vec());
    ring
}

#[test]
fn portcullis_signature_verifies_with_web_bot_auth() {
    let msg = our_signed_request();
    let verifier = WebBotAuthVerifier::parse(&msg).unwrap();
    assert_eq!(verifier.get_signature_agents(), &vec![SignatureAgentLink::External(AGENT.to_owned())]);
    let advisory = verifier.get_parsed_label().base.parameters.details.possibly_insecure(|_| false);
    assert_eq!(advisory.is_expired, Some(false));
    verifier.verify(&their_keyring(), None).unwrap();
}

#[test]
fn portcullis_signature_with_other_method_fails_with_web_bot_auth() {
    let mut msg = our_signed_request();
    *msg.0.method_mut() = http::Method::PUT;
    let verifier = WebBotAuthVerifier::parse(&msg).unwrap();
    assert!(verifier.verify(&their_keyring(), None).is_err());
}
