use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use ed25519_dalek::SigningKey;

use super::fetch::{parse_max_age, Fetched, ParseError};
use super::*;
use crate::config::{HumanDuration, RawStaticKey};
use crate::signature::ed25519_public_jwk;
use crate::signature::parse::parse_signature_agent;

const ORIGIN: &str = "https://agent.example";
const T0: u64 = 1_800_000_000;

fn at(secs: u64) -> UnixTime {
    UnixTime(Duration::from_secs(secs))
}

fn key(n: u8) -> VerifyingKey {
    SigningKey::from_bytes(&[n; 32]).verifying_key()
}

fn kid(n: u8) -> String {
    ed25519_thumbprint(&key(n))
}

fn agent(header: &str) -> AgentRef {
    let mut members = parse_signature_agent(header).expect("parses");
    members.remove(0).agent.expect("usable agent")
}

/// The keys and `max-age` a fake directory serves, or the error its fetch fails with.
type FakeAnswer = Result<(Vec<serde_json::Value>, Option<u64>), DirectoryError>;

/// A directory that serves whatever the test put in it, counting fetches.
#[derive(Default)]
struct FakeDirectory {
    doc: Mutex<Option<FakeAnswer>>,
    fetches: AtomicUsize,
}

impl FakeDirectory {
    fn serve(&self, keys: Vec<serde_json::Value>, max_age: Option<u64>) {
        *self.doc.lock().expect("lock") = Some(Ok((keys, max_age)));
    }

    fn fail(&self, e: DirectoryError) {
        *self.doc.lock().expect("lock") = Some(Err(e));
    }

    fn count(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Fetch for FakeDirectory {
    async fn fetch(&self, url: &str, _kind: AgentKind) -> Result<Fetched, DirectoryError> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        // Let every concurrent caller reach the single-flight lock while this fetch is "on the wire".
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(url, "https://agent.example/.well-known/http-message-signatures-directory");
        let doc = self.doc.lock().expect("lock").clone().expect("test set a document");
        let (keys, max_age) = doc?;
        let body = serde_json::json!({ "keys": keys }).to_string();
        let keys = parse_key_set(body.as_bytes()).map_err(|e| DirectoryError::Malformed { url: url.into(), reason: format!("{e:?}") })?;
        Ok(Fetched { keys, max_age: max_age.map(Duration::from_secs) })
    }
}

fn resolver(dir: Arc<FakeDirectory>, statics: Vec<RawStaticKey>) -> KeyResolver {
    let cfg = RawSignatures { trusted_agents: vec![ORIGIN.into()], keys: statics, ..RawSignatures::default() };
    let mut errors = Vec::new();
    let trusted = trusted_origins(&cfg, &mut errors);
    let statics = static_keys(&cfg, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    KeyResolver::with_fetcher(statics, trusted, dir, Duration::from_secs(60), Duration::from_secs(3600))
}

fn setup() -> (Arc<FakeDirectory>, KeyResolver, AgentRef) {
    let dir = Arc::new(FakeDirectory::default());
    let r = resolver(dir.clone(), vec![]);
    (dir, r, agent(r#"sig1="https://agent.example""#))
}

#[tokio::test]
async fn directory_key_is_found_by_computed_thumbprint_not_kid() {
    let (dir, r, a) = setup();
    let mut jwk = ed25519_public_jwk(&key(1));
    jwk["kid"] = serde_json::json!("a-lying-kid");
    dir.serve(vec![jwk], None);
    let k = r.resolve(Some(&a), &kid(1), at(T0)).await.expect("resolves");
    assert_eq!(k.key(), &key(1));
    assert_eq!(k.agent(), "https://agent.example");
    let err = r.resolve(Some(&a), "a-lying-kid", at(T0)).await.expect_err("kid is not the keyid");
    assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
}

#[tokio::test]
async fn untrusted_origin_is_refused_without_a_fetch() {
    let (dir, r, _) = setup();
    let err = r.resolve(Some(&agent(r#"sig1="https://evil.example""#)), &kid(1), at(T0)).await.expect_err("untrusted");
    assert_eq!(err, DirectoryError::UntrustedOrigin { origin: "https://evil.example".into() });
    assert_eq!(dir.count(), 0);
}

#[tokio::test]
async fn cimd_agents_are_not_resolved() {
    let (dir, r, _) = setup();
    let err = r.resolve(Some(&agent(r#"sig1="https://agent.example/client.json";type=cimd"#)), &kid(1), at(T0)).await.expect_err("cimd");
    assert_eq!(err, DirectoryError::UnsupportedAgentType("cimd"));
    assert_eq!(dir.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_lookups_fetch_once() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    let r = Arc::new(r);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (r, a) = (r.clone(), a.clone());
            tokio::spawn(async move { r.resolve(Some(&a), &kid(1), at(T0)).await.is_ok() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.expect("task"));
    }
    assert_eq!(dir.count(), 1);
    assert_eq!(r.fetch_counter().get_or_create(&FetchLabels { result: "ok" }).get(), 1);
}

#[tokio::test]
async fn cache_honours_max_age_clamped_to_min_and_max_ttl() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(600));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    r.resolve(Some(&a), &kid(1), at(T0 + 599)).await.expect("fresh");
    assert_eq!(dir.count(), 1);
    r.resolve(Some(&a), &kid(1), at(T0 + 600)).await.expect("refetched");
    assert_eq!(dir.count(), 2);

    // max-age=1 is raised to the 60 s minimum; a day is cut to the 1 h maximum.
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(1));
    r.resolve(Some(&a), &kid(1), at(T0 + 1200)).await.expect("refetch");
    r.resolve(Some(&a), &kid(1), at(T0 + 1259)).await.expect("held for min_ttl");
    assert_eq!(dir.count(), 3);
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(86_400));
    r.resolve(Some(&a), &kid(1), at(T0 + 1260)).await.expect("refetch");
    r.resolve(Some(&a), &kid(1), at(T0 + 1260 + 3599)).await.expect("fresh");
    assert_eq!(dir.count(), 4);
    r.resolve(Some(&a), &kid(1), at(T0 + 1260 + 3600)).await.expect("refetch after max_ttl");
    assert_eq!(dir.count(), 5);
}

#[tokio::test]
async fn key_removed_from_refetched_directory_is_revoked() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1)), ed25519_public_jwk(&key(2))], None);
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("listed");
    dir.serve(vec![ed25519_public_jwk(&key(2))], None);
    r.resolve(Some(&a), &kid(1), at(T0 + 30)).await.expect("still cached");
    let err = r.resolve(Some(&a), &kid(1), at(T0 + 61)).await.expect_err("revoked");
    assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    r.resolve(Some(&a), &kid(2), at(T0 + 61)).await.expect("other key unaffected");
}

#[tokio::test]
async fn failed_refetch_keeps_cached_keys() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    dir.fail(DirectoryError::Unreachable { url: "u".into(), reason: "connection refused".into() });
    r.resolve(Some(&a), &kid(1), at(T0 + 61)).await.expect("failure is not evidence: key kept");
    assert_eq!(dir.count(), 2);
    assert_eq!(r.fetch_counter().get_or_create(&FetchLabels { result: "unreachable" }).get(), 1);
}

#[tokio::test]
async fn never_fetched_directory_refuses_with_the_fetch_error_and_backs_off() {
    let (dir, r, a) = setup();
    dir.fail(DirectoryError::BadStatus { url: "u".into(), status: 503 });
    let err = r.resolve(Some(&a), &kid(1), at(T0)).await.expect_err("down");
    assert!(matches!(err, DirectoryError::BadStatus { status: 503, .. }), "{err:?}");
    let err = r.resolve(Some(&a), &kid(1), at(T0 + 10)).await.expect_err("still down");
    assert!(matches!(err, DirectoryError::BadStatus { .. }), "{err:?}");
    assert_eq!(dir.count(), 1, "no retry before directory_min_ttl");
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    r.resolve(Some(&a), &kid(1), at(T0 + 60)).await.expect("recovered");
    assert_eq!(dir.count(), 2);
}

#[tokio::test]
async fn forged_keyid_storm_fetches_at_most_once_per_min_ttl() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(3600));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    for i in 0..200u64 {
        let forged = format!("forged-{i}");
        let err = r.resolve(Some(&a), &forged, at(T0 + i / 4)).await.expect_err("unknown");
        assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    }
    assert_eq!(dir.count(), 1, "the storm within min_ttl caused no fetch");
    let _ = r.resolve(Some(&a), "forged-late", at(T0 + 60)).await;
    assert_eq!(dir.count(), 2, "one refetch once min_ttl passed (a key may have been added)");
}

#[tokio::test]
async fn key_window_is_honoured() {
    let (dir, r, a) = setup();
    let mut early = ed25519_public_jwk(&key(1));
    early["nbf"] = serde_json::json!(T0 + 100);
    let mut late = ed25519_public_jwk(&key(2));
    late["exp"] = serde_json::json!(T0);
    dir.serve(vec![early, late], None);
    let err = r.resolve(Some(&a), &kid(1), at(T0)).await.expect_err("nbf");
    assert_eq!(err, DirectoryError::KeyNotYetValid { keyid: kid(1), nbf: T0 + 100 });
    let err = r.resolve(Some(&a), &kid(2), at(T0)).await.expect_err("exp");
    assert_eq!(err, DirectoryError::KeyExpired { keyid: kid(2), exp: T0 });
}

#[tokio::test]
async fn static_keys_need_no_directory_and_stay_bound_to_their_agent() {
    let dir = Arc::new(FakeDirectory::default());
    let stat = RawStaticKey { agent: "https://Static.Example:443".into(), jwk: ed25519_public_jwk(&key(7)) };
    let r = resolver(dir.clone(), vec![stat]);
    let k = r.resolve(Some(&agent(r#"sig1="https://static.example""#)), &kid(7), at(T0)).await.expect("static");
    assert_eq!((k.key(), k.agent()), (&key(7), "https://static.example"));
    let k = r.resolve(None, &kid(7), at(T0)).await.expect("static without Signature-Agent");
    assert_eq!(k.agent(), "https://static.example");
    let err = r.resolve(None, &kid(8), at(T0)).await.expect_err("no agent");
    assert_eq!(err, DirectoryError::NoAgent { keyid: kid(8) });
    // Another agent naming the same keyid goes to its own (untrusted) directory.
    let err = r.resolve(Some(&agent(r#"sig1="https://other.example""#)), &kid(7), at(T0)).await.expect_err("not bound");
    assert!(matches!(err, DirectoryError::UntrustedOrigin { .. }));
    assert_eq!(dir.count(), 0);
}

#[test]
fn config_errors_name_each_field() {
    let cfg = RawSignatures {
        trusted_agents: vec!["http://agent.example".into(), "https://agent.example/path".into()],
        keys: vec![RawStaticKey { agent: "https://a.example".into(), jwk: serde_json::json!({"kty": "RSA"}) }],
        directory_ca: Some("/nonexistent/ca.pem".into()),
        directory_min_ttl: HumanDuration(Duration::from_secs(120)),
        directory_max_ttl: HumanDuration(Duration::from_secs(60)),
        directory_timeout: HumanDuration(Duration::ZERO),
        ..RawSignatures::default()
    };
    let errors = KeyResolver::new(&cfg, Path::new(".")).expect_err("invalid");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    for f in [
        "signatures.trusted_agents[0]",
        "signatures.trusted_agents[1]",
        "signatures.keys[0].jwk",
        "signatures.directory_ca",
        "signatures.directory_max_ttl",
        "signatures.directory_timeout",
    ] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
}

#[test]
fn key_set_drops_malformed_entries_and_caps_the_count() {
    let good = ed25519_public_jwk(&key(1));
    let body = serde_json::json!({"keys": [
        good,
        {"kty": "OKP", "crv": "Ed25519"},
        {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
        {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"},
        {"kty": "OKP", "crv": "Ed25519", "x": good["x"], "exp": "tomorrow"},
        "not an object",
    ]});
    let set = parse_key_set(body.to_string().as_bytes()).expect("parses");
    assert_eq!(set.len(), 1);
    assert!(set.contains_key(&kid(1)));
    let many = serde_json::json!({"keys": vec![good_jwk(); MAX_DIRECTORY_KEYS + 1]});
    assert_eq!(parse_key_set(many.to_string().as_bytes()), Err(ParseError::TooManyKeys));
    assert!(matches!(parse_key_set(b"{\"keys\": 5}"), Err(ParseError::Malformed(_))));
    assert!(matches!(parse_key_set(b"<html>"), Err(ParseError::Malformed(_))));
}

fn good_jwk() -> serde_json::Value {
    ed25519_public_jwk(&key(1))
}

#[test]
fn max_age_is_read_from_cache_control() {
    assert_eq!(parse_max_age("public, max-age=600"), Some(Duration::from_secs(600)));
    assert_eq!(parse_max_age("MAX-AGE=\"30\""), Some(Duration::from_secs(30)));
    assert_eq!(parse_max_age("max-age=60, no-store"), Some(Duration::ZERO));
    assert_eq!(parse_max_age("public"), None);
    assert_eq!(parse_max_age("max-age=soon"), None);
}

#[test]
fn origins_are_normalized() {
    assert_eq!(normalize_origin("https://Agent.Example:443").as_deref(), Ok("https://agent.example"));
    assert_eq!(normalize_origin("https://agent.example:8443/").as_deref(), Ok("https://agent.example:8443"));
    assert!(normalize_origin("https://agent.example/keys").is_err());
    assert!(normalize_origin("http://agent.example").is_err());
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Untrusted directory bytes: never a panic, never more keys than the cap, and every
        /// key is filed under its own computed thumbprint.
        #[test]
        fn any_directory_body_parses_to_thumbprint_keyed_usable_keys(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(set) = parse_key_set(&body) {
                prop_assert!(set.len() <= MAX_DIRECTORY_KEYS);
                for (id, k) in &set {
                    prop_assert_eq!(id, &ed25519_thumbprint(&k.key));
                }
            }
        }

        /// A JWKS mixing real keys with junk entries keeps exactly the real keys.
        #[test]
        fn junk_entries_never_hide_or_forge_keys(seeds in proptest::collection::btree_set(1u8..=255, 0..8), junk in proptest::collection::vec(".{0,16}", 0..8)) {
            let mut keys: Vec<serde_json::Value> = seeds.iter().map(|n| ed25519_public_jwk(&key(*n))).collect();
            keys.extend(junk.iter().map(|j| serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": j})));
            let set = parse_key_set(serde_json::json!({ "keys": keys }).to_string().as_bytes()).expect("valid JWKS");
            let want: std::collections::BTreeSet<String> = seeds.iter().map(|n| kid(*n)).collect();
            prop_assert_eq!(set.keys().cloned().collect::<std::collections::BTreeSet<_>>(), want);
        }

        /// Any Cache-Control value: never a panic.
        #[test]
        fn any_cache_control_value_is_handled(v in ".{0,64}") {
            let _ = parse_max_age(&v);
        }
    }
}
