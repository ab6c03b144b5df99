#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::config::HumanDuration;
use crate::signature::test_support::{case, config, ed25519_signing_key, edit_header, inbound, inbound_from, mcp_post, raw_signatures};
use crate::signature::{AgentForm, AgentKind, BaseError, SignatureError, SignatureVerifier};
use portcullis_wire::signature::signer::{Nonce, Signer};
use portcullis_wire::UnixTime;

const NOW: u64 = 1_784_980_800;
const AGENT: &str = "https://agent.example";
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","arguments":{"location":"Seattle, WA"}}}"#;

fn default_verifier() -> SignatureVerifier {
    SignatureVerifier::new(&crate::config::Signatures::try_from(raw_signatures()).unwrap())
}

fn signer() -> Signer {
    Signer::new(ed25519_signing_key(), AGENT).unwrap()
}

/// A default-profile MCP POST signed at `signed_at`, seen by the gateway at `NOW`.
fn signed(signer: &Signer, signed_at: u64) -> crate::inbound::Inbound {
    let mut req = mcp_post(BODY);
    signer.sign_request(&mut req, UnixTime(Duration::from_secs(signed_at))).unwrap();
    inbound_from(req, NOW)
}

fn prepare_err(v: &SignatureVerifier, req: &crate::inbound::Inbound) -> SignatureError {
    v.prepare(req).unwrap_err()
}

#[test]
fn signed_mcp_post_prepares_and_verifies() {
    let req = signed(&signer(), NOW);
    let pending = default_verifier().prepare(&req).unwrap().unwrap();
    assert_eq!(pending.keyid(), "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U");
    assert_eq!(pending.alg(), Some("ed25519"));
    assert_eq!(pending.created(), NOW as i64);
    assert_eq!(pending.expires(), NOW as i64 + 60);
    assert_eq!(pending.label(), "sig1");
    assert!(pending.nonce().is_some());
    let agent = pending.agent().unwrap();
    assert_eq!((agent.origin().as_str(), agent.kind(), agent.form()), (AGENT, AgentKind::Directory, &AgentForm::Dictionary { key: "sig1".into() }));
    let verified = pending.verify(&ed25519_signing_key().verifying_key(), AGENT).unwrap();
    assert_eq!((verified.keyid(), verified.agent(), verified.tag()), ("poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U", AGENT, "web-bot-auth"));
    assert_eq!(verified.signature_bytes().len(), 64);
    assert_eq!(verified.expires() - verified.created(), 60);
}

#[test]
fn unsigned_request_is_none() {
    assert!(default_verifier().prepare(&inbound_from(mcp_post(BODY), NOW)).unwrap().is_none());
}

fn vector_verifier(components: &[&str]) -> SignatureVerifier {
    SignatureVerifier::new(&crate::config::Signatures::try_from(config(components, 4_000_000_000)).unwrap())
}

#[test]
fn draft_ed25519_vectors_verify_through_prepare() {
    let key = ed25519_signing_key().verifying_key();
    for (id, form) in [("wba-ed25519-dict", AgentForm::Dictionary { key: "agent2".into() }), ("wba-ed25519-legacy", AgentForm::Legacy)] {
        let c = case("web-bot-auth.json", id);
        let req = inbound(c["message"].as_str().unwrap(), 1_735_689_600, true);
        let pending = vector_verifier(&["@authority", "signature-agent"]).prepare(&req).unwrap().unwrap();
        assert_eq!(pending.agent().unwrap().form(), &form, "{id}");
        assert_eq!(pending.signature_base(), c["signature_base"].as_str().unwrap().as_bytes(), "{id}");
        pending.verify(&key, "https://signature-agent.test").unwrap();
    }
}

#[test]
fn constructed_mcp_vector_verifies_with_default_components() {
    let c = case("web-bot-auth.json", "constructed-mcp-post-ed25519");
    let req = inbound(c["message"].as_str().unwrap(), 1_735_689_700, true);
    let pending = vector_verifier(&["@method", "@authority", "@path", "content-digest", "signature-agent"]).prepare(&req).unwrap().unwrap();
    pending.verify(&ed25519_signing_key().verifying_key(), "https://signature-agent.test").unwrap();
}

#[test]
fn accept_signature_lists_required_components_and_tag() {
    assert_eq!(
        default_verifier().accept_signature(),
        r#"sig1=("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1");tag="web-bot-auth""#
    );
}

#[test]
fn content_digest_not_required_without_body() {
    let s = signer();
    let mut req = http::Request::builder().method("GET").uri("/mcp").header("host", "mcp.example.com").body(Vec::new()).unwrap();
    s.sign_request(&mut req, UnixTime(Duration::from_secs(NOW))).unwrap();
    assert!(!req.headers().contains_key("content-digest"));
    let pending = default_verifier().prepare(&inbound_from(req, NOW)).unwrap().unwrap();
    pending.verify(&s.verifying_key(), AGENT).unwrap();
}

#[test]
fn clock_skew_is_tolerated_both_ways() {
    let v = default_verifier();
    assert!(v.prepare(&signed(&signer(), NOW + 25)).is_ok());
    assert!(v.prepare(&signed(&signer(), NOW - 60 - 25)).is_ok());
}

// --- one test per SignatureError variant ---

#[test]
fn required_but_unsigned_is_missing() {
    assert_eq!(default_verifier().prepare_required(&inbound_from(mcp_post(BODY), NOW)).unwrap_err(), SignatureError::Missing);
}

#[test]
fn half_signed_or_inconsistent_fields_are_malformed() {
    let mut req = signed(&signer(), NOW);
    req.head.headers.remove("signature");
    assert!(matches!(prepare_err(&default_verifier(), &req), SignatureError::Malformed(m) if m.contains("without Signature")));
    let mut req = signed(&signer(), NOW);
    req.head.headers.insert("signature", "sig1=:AAAA:".parse().unwrap());
    assert!(matches!(prepare_err(&default_verifier(), &req), SignatureError::Malformed(m) if m.contains("64")));
    let mut req = signed(&signer(), NOW);
    let expires = format!("expires={}", NOW + 60);
    edit_header(&mut req, "signature-input", &expires, &format!("expires={}", NOW));
    assert!(matches!(prepare_err(&default_verifier(), &req), SignatureError::Malformed(m) if m.contains("expires")));
}

#[test]
fn other_tag_is_no_tagged_signature() {
    let req = signed(&signer().with_tag("other"), NOW);
    assert_eq!(prepare_err(&default_verifier(), &req), SignatureError::NoTaggedSignature("web-bot-auth".into()));
}

#[test]
fn uncovered_required_component_is_named() {
    let v = default_verifier();
    let req = signed(&signer().with_components(&["@authority", "@path", "content-digest", "signature-agent"]), NOW);
    assert_eq!(prepare_err(&v, &req), SignatureError::MissingComponent("@method".into()));
    let req = signed(&signer().with_components(&["@method", "@authority", "@path", "signature-agent"]), NOW);
    assert_eq!(prepare_err(&v, &req), SignatureError::MissingComponent("content-digest".into()));
    let req = signed(&signer().with_components(&["@method", "@path", "content-digest", "signature-agent"]), NOW);
    assert_eq!(prepare_err(&v, &req), SignatureError::MissingComponent("@authority or @target-uri".into()));
    let req = signed(&signer().with_components(&["@method", "@authority", "@path", "content-digest"]), NOW);
    assert_eq!(prepare_err(&v, &req), SignatureError::MissingComponent("signature-agent".into()));
}

#[test]
fn absent_profile_parameter_is_named() {
    for (param, from) in [("expires", format!(";expires={}", NOW + 60)), ("created", format!(";created={NOW}")), ("tag", ";tag=\"web-bot-auth\"".to_owned())] {
        let mut req = signed(&signer(), NOW);
        edit_header(&mut req, "signature-input", &from, "");
        let v = if param == "tag" {
            SignatureVerifier::new(&crate::config::Signatures::try_from(crate::config::RawSignatures { tag: "x".into(), ..raw_signatures() }).unwrap())
        } else {
            default_verifier()
        };
        let err = prepare_err(&v, &req);
        if param == "tag" {
            assert_eq!(err, SignatureError::NoTaggedSignature("x".into()));
        } else {
            assert_eq!(err, SignatureError::MissingParameter(param));
        }
    }
    let mut req = signed(&signer(), NOW);
    let kid = ";keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\"";
    edit_header(&mut req, "signature-input", kid, "");
    assert_eq!(prepare_err(&default_verifier(), &req), SignatureError::MissingParameter("keyid"));
}

#[test]
fn old_signature_is_expired() {
    let err = prepare_err(&default_verifier(), &signed(&signer(), NOW - 60 - 31));
    assert_eq!(err, SignatureError::Expired { expires: (NOW - 31) as i64, now: NOW });
}

#[test]
fn future_signature_is_not_yet_valid() {
    let err = prepare_err(&default_verifier(), &signed(&signer(), NOW + 31));
    assert_eq!(err, SignatureError::NotYetValid { created: (NOW + 31) as i64, now: NOW });
}

#[test]
fn long_lived_signature_is_refused() {
    let err = prepare_err(&default_verifier(), &signed(&signer().with_lifetime(Duration::from_secs(301)), NOW));
    assert_eq!(err, SignatureError::LifetimeTooLong { lifetime: 301, max_age: 300 });
}

#[test]
fn hmac_or_rsa_alg_is_unsupported() {
    for alg in ["hmac-sha256", "rsa-pss-sha512"] {
        let mut req = signed(&signer(), NOW);
        edit_header(&mut req, "signature-input", "alg=\"ed25519\"", &format!("alg=\"{alg}\""));
        assert_eq!(prepare_err(&default_verifier(), &req), SignatureError::UnsupportedAlgorithm(alg.into()));
    }
}

#[test]
fn nonce_required_when_configured() {
    let v = SignatureVerifier::new(&crate::config::Signatures::try_from(crate::config::RawSignatures { require_nonce: true, ..raw_signatures() }).unwrap());
    assert_eq!(prepare_err(&v, &signed(&signer().with_nonce(Nonce::None), NOW)), SignatureError::NonceRequired);
    assert!(v.prepare(&signed(&signer(), NOW)).is_ok());
}

#[test]
fn legacy_agent_refused_when_configured() {
    let c = case("web-bot-auth.json", "wba-ed25519-legacy");
    let req = inbound(c["message"].as_str().unwrap(), 1_735_689_600, true);
    let cfg = crate::config::RawSignatures { accept_legacy_agent: false, ..config(&["@authority", "signature-agent"], 3600) };
    assert_eq!(SignatureVerifier::new(&crate::config::Signatures::try_from(cfg).unwrap()).prepare(&req).unwrap_err(), SignatureError::LegacyAgentRefused);
}

#[test]
fn non_origin_directory_agent_is_unusable() {
    let req = signed(&Signer::new(ed25519_signing_key(), "https://agent.example/keys").unwrap(), NOW);
    assert!(matches!(prepare_err(&default_verifier(), &req), SignatureError::UnusableAgent(m) if m.contains("origin")));
}

#[test]
fn whole_dictionary_covered_is_unusable() {
    let req = signed(&signer(), NOW);
    let mut req = req;
    edit_header(&mut req, "signature-input", "\"signature-agent\";key=\"sig1\"", "\"signature-agent\"");
    assert!(matches!(prepare_err(&default_verifier(), &req), SignatureError::UnusableAgent(_)));
}

#[test]
fn covered_field_removed_is_base_error() {
    let mut req = signed(&signer(), NOW);
    req.head.headers.remove("content-digest");
    assert_eq!(prepare_err(&default_verifier(), &req), SignatureError::Base(BaseError::MissingField("content-digest".into())));
}

#[test]
fn wrong_key_or_tampered_request_is_bad_signature() {
    let other = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let pending = default_verifier().prepare(&signed(&signer(), NOW)).unwrap().unwrap();
    let err = pending.verify(&other, AGENT).unwrap_err();
    assert_eq!(err, SignatureError::BadSignature { keyid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U".into() });
    assert!(!err.to_string().contains(':'), "the reason must not echo signature bytes: {err}");
    let mut req = signed(&signer(), NOW);
    req.head.uri = "/other".parse().unwrap();
    let pending = default_verifier().prepare(&req).unwrap().unwrap();
    assert!(matches!(pending.verify(&ed25519_signing_key().verifying_key(), AGENT), Err(SignatureError::BadSignature { .. })));
}

// --- configuration ---

#[test]
fn config_below_profile_minimum_is_refused() {
    let errs = crate::config::Signatures::try_from(config(&["@method", "@path"], 300)).unwrap_err();
    assert!(errs.iter().any(|e| e.field == "signatures.components" && e.reason.contains("profile minimum")), "{errs:?}");
}

#[test]
fn bad_config_fields_are_all_named() {
    let cfg = crate::config::RawSignatures {
        tag: String::new(),
        components: vec!["@status".into(), "Content-Type".into(), "@authority".into(), "signature-agent".into()],
        max_age: HumanDuration(Duration::ZERO),
        authority: vec!["mcp.example.com/path".into()],
        ..Default::default()
    };
    let errs = crate::config::Signatures::try_from(cfg).unwrap_err();
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["signatures.tag", "signatures.components", "signatures.components", "signatures.max_age", "signatures.authority[0]"]);
}

#[test]
fn only_the_gateways_own_authorities_verify() {
    // Signed for mcp.example.com (Host): a gateway that is mcp.example.com verifies it...
    let req = signed(&signer(), NOW);
    assert_eq!(req.authority, "mcp.example.com");
    let own = crate::config::RawSignatures { authority: vec!["other.example".into(), "mcp.example.com".into()], ..Default::default() };
    let pending = SignatureVerifier::new(&crate::config::Signatures::try_from(own.clone()).unwrap()).prepare(&req).unwrap().unwrap();
    pending.verify(&ed25519_signing_key().verifying_key(), AGENT).unwrap();
    // ...another service trusting the same agent refuses it, by name, before any key is used.
    let elsewhere = crate::config::RawSignatures { authority: vec!["other.example".into()], ..Default::default() };
    assert_eq!(prepare_err(&SignatureVerifier::new(&crate::config::Signatures::try_from(elsewhere).unwrap()), &req), SignatureError::ForeignAuthority);
    // And the base is over the request's authority: one re-addressed to this gateway fails.
    let mut moved = signed(&signer(), NOW);
    moved.authority = "other.example".into();
    let pending = SignatureVerifier::new(&crate::config::Signatures::try_from(own.clone()).unwrap()).prepare(&moved).unwrap().unwrap();
    assert!(matches!(pending.verify(&ed25519_signing_key().verifying_key(), AGENT), Err(SignatureError::BadSignature { .. })));
}

#[test]
fn a_verifier_without_an_authority_is_a_config_error() {
    let errs = crate::config::Signatures::try_from(crate::config::RawSignatures::default()).unwrap_err();
    assert!(errs.iter().any(|e| e.field == "signatures.authority"), "{errs:?}");
}

#[test]
fn legacy_agent_uses_are_counted_every_time() {
    let c = case("web-bot-auth.json", "wba-ed25519-legacy");
    let verifier = vector_verifier(&["@authority", "signature-agent"]);
    for _ in 0..3 {
        let req = inbound(c["message"].as_str().unwrap(), 1_735_689_600, true);
        verifier.prepare(&req).unwrap().unwrap();
    }
    assert_eq!(verifier.legacy_agent_counter().get(), 3);
    assert_eq!(verifier.legacy.logged.lock().unwrap().len(), 1, "the log names the origin once");
}
