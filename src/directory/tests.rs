use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use ed25519_dalek::SigningKey;

use super::fetch::{parse_max_age, Fetched, ParseError};
use super::*;
use crate::config::{normalize_origin, HumanDuration, RawSignatures, RawStaticKey, Signatures};
use crate::signature::ed25519_public_jwk;
use portcullis_wire::signature::ed25519_thumbprint;
use portcullis_wire::signature::parse::parse_signature_agent;

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

/// A directory that serves whatever the test put in it at every URL, counting fetches and
/// recording the URLs asked for.
#[derive(Default)]
struct FakeDirectory {
    doc: Mutex<Option<FakeAnswer>>,
    fetches: AtomicUsize,
    urls: Mutex<Vec<String>>,
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

    fn urls(&self) -> Vec<String> {
        self.urls.lock().expect("lock").clone()
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
        self.urls.lock().expect("lock").push(url.to_owned());
        let doc = self.doc.lock().expect("lock").clone().expect("test set a document");
        let (keys, max_age) = doc?;
        let body = serde_json::json!({ "keys": keys }).to_string();
        let keys = parse_key_set(body.as_bytes()).map_err(|e| DirectoryError::Malformed { url: url.into(), reason: format!("{e:?}") })?;
        Ok(Fetched { keys, max_age: max_age.map(Duration::from_secs) })
    }
}

const WELL_KNOWN_URL: &str = "https://agent.example/.well-known/http-message-signatures-directory";

/// A resolver over `dir` trusting [`ORIGIN`] with `cfg`'s settings (defaults otherwise).
fn resolver_with(dir: Arc<FakeDirectory>, cfg: RawSignatures) -> KeyResolver {
    let trusted_agents = if cfg.trusted_agents.is_empty() { vec![ORIGIN.into()] } else { cfg.trusted_agents };
    let cfg = Signatures::try_from(RawSignatures { trusted_agents, authority: vec!["mcp.example.com".into()], ..cfg }).expect("valid settings");
    let d = &cfg.directory;
    KeyResolver::with_fetcher(static_keys(d), d.trusted_agents.iter().cloned().collect(), dir, Settings::from(d))
}

fn resolver(dir: Arc<FakeDirectory>, statics: Vec<RawStaticKey>) -> KeyResolver {
    resolver_with(dir, RawSignatures { keys: statics, ..RawSignatures::default() })
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
    assert_eq!(err, DirectoryError::UntrustedOrigin);
    assert!(!err.to_string().contains("evil"), "the client's origin is not echoed: {err}");
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
    assert_eq!(r.metrics().fetches.get_or_create(&FetchLabels { result: "ok" }).get(), 1);
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

    // max-age=1 is honoured (directory_min_ttl defaults to 1 s); no-store counts as the minimum.
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(1));
    r.resolve(Some(&a), &kid(1), at(T0 + 1200)).await.expect("refetch");
    r.resolve(Some(&a), &kid(1), at(T0 + 1200)).await.expect("fresh within the second");
    assert_eq!(dir.count(), 3);
    r.resolve(Some(&a), &kid(1), at(T0 + 1201)).await.expect("refetch after 1 s");
    assert_eq!(dir.count(), 4);
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(0));
    r.resolve(Some(&a), &kid(1), at(T0 + 1202)).await.expect("refetch");
    r.resolve(Some(&a), &kid(1), at(T0 + 1203)).await.expect("held for min_ttl, then refetched");
    assert_eq!(dir.count(), 6);

    // A day is cut to the 1 h maximum; no max-age at all is kept 60 s.
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(86_400));
    r.resolve(Some(&a), &kid(1), at(T0 + 2000)).await.expect("refetch");
    r.resolve(Some(&a), &kid(1), at(T0 + 2000 + 3599)).await.expect("fresh");
    assert_eq!(dir.count(), 7);
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    r.resolve(Some(&a), &kid(1), at(T0 + 2000 + 3600)).await.expect("refetch after max_ttl");
    r.resolve(Some(&a), &kid(1), at(T0 + 2000 + 3600 + 59)).await.expect("fresh for the default 60 s");
    assert_eq!(dir.count(), 8);
    r.resolve(Some(&a), &kid(1), at(T0 + 2000 + 3600 + 60)).await.expect("refetch");
    assert_eq!(dir.count(), 9);
}

/// docs/design.md decision 7: a key removed from a directory that says `max-age=1` stops
/// verifying one second after the last fetch, not after a 60 s floor.
#[tokio::test]
async fn key_removed_from_a_max_age_1_directory_stops_resolving_after_a_second() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1)), ed25519_public_jwk(&key(2))], Some(1));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("listed");
    dir.serve(vec![ed25519_public_jwk(&key(2))], Some(1));
    let err = r.resolve(Some(&a), &kid(1), at(T0 + 1)).await.expect_err("revoked within max-age");
    assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    r.resolve(Some(&a), &kid(2), at(T0 + 1)).await.expect("the remaining key works");
    assert_eq!(dir.count(), 2);
}

#[tokio::test]
async fn unknown_keyids_refetch_once_per_refetch_interval_per_origin_even_when_fresh() {
    let dir = Arc::new(FakeDirectory::default());
    let r = resolver_with(dir.clone(), RawSignatures { directory_refetch_interval: HumanDuration(Duration::from_secs(30)), ..RawSignatures::default() });
    let a = agent(r#"sig1="https://agent.example""#);
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(3600));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    // A key added to the directory: found by one refetch once the interval has passed.
    dir.serve(vec![ed25519_public_jwk(&key(1)), ed25519_public_jwk(&key(2))], Some(3600));
    let err = r.resolve(Some(&a), &kid(2), at(T0 + 29)).await.expect_err("within the interval after the cold fetch");
    assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    assert_eq!(dir.count(), 1);
    r.resolve(Some(&a), &kid(2), at(T0 + 30)).await.expect("one refetch found the new key");
    assert_eq!(dir.count(), 2);
    // A request timed before that refetch (requests race) does not refetch again.
    let err = r.resolve(Some(&a), &kid(3), at(T0 + 20)).await.expect_err("unknown");
    assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    assert_eq!(dir.count(), 2);
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
    assert_eq!(r.metrics().fetches.get_or_create(&FetchLabels { result: "unreachable" }).get(), 1);
    r.resolve(Some(&a), &kid(1), at(T0 + 62)).await.expect("still kept");
    assert_eq!(dir.count(), 2, "no new attempt for directory_refetch_interval after a failure");
    r.resolve(Some(&a), &kid(1), at(T0 + 61 + 60)).await.expect("still kept");
    assert_eq!(dir.count(), 3);
}

#[tokio::test]
async fn a_failed_first_fetch_is_remembered_at_most_five_minutes() {
    let dir = Arc::new(FakeDirectory::default());
    let r = resolver_with(dir.clone(), RawSignatures { directory_refetch_interval: HumanDuration(Duration::from_secs(3600)), ..RawSignatures::default() });
    let a = agent(r#"sig1="https://agent.example""#);
    dir.fail(DirectoryError::BadStatus { url: "u".into(), status: 503 });
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect_err("down");
    r.resolve(Some(&a), &kid(1), at(T0 + 299)).await.expect_err("remembered");
    assert_eq!(dir.count(), 1);
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    r.resolve(Some(&a), &kid(1), at(T0 + 300)).await.expect("forgotten after 5 minutes, fetched again");
    assert_eq!(dir.count(), 2);
}

#[tokio::test]
async fn never_fetched_directory_refuses_with_the_fetch_error_and_backs_off() {
    let (dir, r, a) = setup();
    dir.fail(DirectoryError::BadStatus { url: "u".into(), status: 503 });
    let err = r.resolve(Some(&a), &kid(1), at(T0)).await.expect_err("down");
    assert!(matches!(err, DirectoryError::BadStatus { status: 503, .. }), "{err:?}");
    let err = r.resolve(Some(&a), &kid(1), at(T0 + 10)).await.expect_err("still down");
    assert!(matches!(err, DirectoryError::BadStatus { .. }), "{err:?}");
    assert_eq!(dir.count(), 1, "no retry before directory_refetch_interval");
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    r.resolve(Some(&a), &kid(1), at(T0 + 60)).await.expect("recovered");
    assert_eq!(dir.count(), 2);
}

#[tokio::test]
async fn forged_keyid_storm_fetches_at_most_once_per_refetch_interval() {
    let (dir, r, a) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(3600));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    for i in 0..200u64 {
        let forged = format!("forged-{i}");
        let err = r.resolve(Some(&a), &forged, at(T0 + i / 4)).await.expect_err("unknown");
        assert!(matches!(err, DirectoryError::UnknownKeyId { .. }), "{err:?}");
    }
    assert_eq!(dir.count(), 1, "the storm within the refetch interval caused no fetch");
    let _ = r.resolve(Some(&a), "forged-late", at(T0 + 60)).await;
    assert_eq!(dir.count(), 2, "one refetch once the interval passed (a key may have been added)");
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
    assert_eq!(err, DirectoryError::UntrustedOrigin);
    assert_eq!(dir.count(), 0);
}

#[tokio::test]
async fn jwks_uri_agents_are_refused_by_default_without_a_fetch() {
    let (dir, r, _) = setup();
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    let upload = agent(r#"sig1="https://agent.example/uploads/keys.json";type=jwks_uri"#);
    let err = r.resolve(Some(&upload), &kid(1), at(T0)).await.expect_err("refused");
    assert_eq!(err, DirectoryError::JwksUriRefused);
    assert!(err.to_string().contains("signatures.accept_jwks_uri"), "{err}");
    assert_eq!(dir.count(), 0);
}

#[tokio::test]
async fn accepted_jwks_uri_keys_speak_for_their_full_url_never_the_origin() {
    let dir = Arc::new(FakeDirectory::default());
    let stat = RawStaticKey { agent: ORIGIN.into(), jwk: ed25519_public_jwk(&key(7)) };
    let r = resolver_with(dir.clone(), RawSignatures { accept_jwks_uri: true, keys: vec![stat], ..RawSignatures::default() });
    dir.serve(vec![ed25519_public_jwk(&key(1)), ed25519_public_jwk(&key(7))], None);
    let upload = agent(r#"sig1="https://agent.example/uploads/keys.json?v=2#k";type=jwks_uri"#);
    let k = r.resolve(Some(&upload), &kid(1), at(T0)).await.expect("accepted");
    assert_eq!(k.agent(), "https://agent.example/uploads/keys.json");
    assert_eq!(dir.urls(), ["https://agent.example/uploads/keys.json"]);
    // The origin's static key does not speak for a jwks_uri agent: its key set does.
    let k = r.resolve(Some(&upload), &kid(7), at(T0)).await.expect("from the key set");
    assert_eq!(k.agent(), "https://agent.example/uploads/keys.json");
    // Naming the well-known path as a jwks_uri fills its own slot, never the directory's.
    let as_jwks = agent(r#"sig1="https://agent.example/.well-known/http-message-signatures-directory";type=jwks_uri"#);
    assert_eq!(r.resolve(Some(&as_jwks), &kid(1), at(T0)).await.expect("key set").agent(), WELL_KNOWN_URL);
    let origin = agent(r#"sig1="https://agent.example""#);
    assert_eq!(r.resolve(Some(&origin), &kid(1), at(T0)).await.expect("directory").agent(), ORIGIN);
    assert_eq!(dir.count(), 3, "the directory was fetched as a directory, not taken from the jwks_uri slot");
    // Still only under a trusted origin.
    let stranger = agent(r#"sig1="https://evil.example/keys.json";type=jwks_uri"#);
    assert_eq!(r.resolve(Some(&stranger), &kid(1), at(T0)).await.expect_err("untrusted"), DirectoryError::UntrustedOrigin);
    assert_eq!(dir.count(), 3);
}

#[tokio::test]
async fn fetches_for_many_urls_stop_at_the_origin_budget_and_are_counted() {
    let dir = Arc::new(FakeDirectory::default());
    let r = resolver_with(dir.clone(), RawSignatures { accept_jwks_uri: true, directory_fetch_budget: 5, ..RawSignatures::default() });
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    let mut refused = 0;
    for i in 0..40 {
        let a = agent(&format!(r#"sig1="https://agent.example/uploads/{i}.json";type=jwks_uri"#));
        match r.resolve(Some(&a), &format!("forged-{i}"), at(T0)).await {
            Err(DirectoryError::FetchBudgetExhausted(b)) => {
                assert_eq!(b, "signatures.directory_fetch_budget, per origin");
                refused += 1;
            }
            Err(DirectoryError::UnknownKeyId { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(dir.count(), 5, "40 URLs, 5 fetches");
    assert_eq!(refused, 35);
    assert_eq!(r.metrics().budget_exhausted.get_or_create(&crate::telemetry::BudgetLabels { budget: "origin" }).get(), 35);
    // The budget refills at 5 per minute: one fetch every 12 s.
    let a = agent(r#"sig1="https://agent.example/uploads/late.json";type=jwks_uri"#);
    assert!(matches!(r.resolve(Some(&a), "x", at(T0 + 11)).await, Err(DirectoryError::FetchBudgetExhausted(_))));
    assert!(matches!(r.resolve(Some(&a), "x", at(T0 + 12)).await, Err(DirectoryError::UnknownKeyId { .. })));
    assert_eq!(dir.count(), 6);
}

#[tokio::test]
async fn the_global_budget_bounds_fetches_over_all_origins() {
    let dir = Arc::new(FakeDirectory::default());
    let origins: Vec<String> = (0..4).map(|i| format!("https://agent{i}.example")).collect();
    let r = resolver_with(dir.clone(), RawSignatures { trusted_agents: origins.clone(), directory_fetch_budget_global: 3, ..RawSignatures::default() });
    dir.serve(vec![ed25519_public_jwk(&key(1))], None);
    let mut outcomes = Vec::new();
    for o in &origins {
        outcomes.push(r.resolve(Some(&agent(&format!("sig1=\"{o}\""))), &kid(1), at(T0)).await.map(|k| k.agent().to_owned()));
    }
    assert_eq!(dir.count(), 3);
    assert_eq!(outcomes[3], Err(DirectoryError::FetchBudgetExhausted("signatures.directory_fetch_budget_global")));
    assert_eq!(r.metrics().budget_exhausted.get_or_create(&crate::telemetry::BudgetLabels { budget: "global" }).get(), 1);
}

#[tokio::test]
async fn a_stale_directory_is_not_used_when_the_budget_refuses_its_refresh() {
    let dir = Arc::new(FakeDirectory::default());
    let r = resolver_with(dir.clone(), RawSignatures { directory_fetch_budget: 1, ..RawSignatures::default() });
    let a = agent(r#"sig1="https://agent.example""#);
    dir.serve(vec![ed25519_public_jwk(&key(1))], Some(1));
    r.resolve(Some(&a), &kid(1), at(T0)).await.expect("cold");
    // Fail closed: past max-age the key may have been revoked, and the budget forbids asking.
    let err = r.resolve(Some(&a), &kid(1), at(T0 + 1)).await.expect_err("budget");
    assert!(matches!(err, DirectoryError::FetchBudgetExhausted(_)), "{err:?}");
    r.resolve(Some(&a), &kid(1), at(T0 + 60)).await.expect("refilled: refreshed");
    assert_eq!(dir.count(), 2);
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
        directory_refetch_interval: HumanDuration(Duration::ZERO),
        directory_fetch_budget: 0,
        directory_fetch_budget_global: 0,
        ..RawSignatures::default()
    };
    let errors = Signatures::try_from(RawSignatures { authority: vec!["mcp.example.com".into()], ..cfg }).expect_err("invalid");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    for f in [
        "signatures.trusted_agents[0]",
        "signatures.trusted_agents[1]",
        "signatures.keys[0].jwk",
        "signatures.directory_max_ttl",
        "signatures.directory_timeout",
        "signatures.directory_refetch_interval",
        "signatures.directory_fetch_budget",
        "signatures.directory_fetch_budget_global",
    ] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    // The CA file is read when the resolver is built, and named the same way.
    let ok = Signatures::try_from(RawSignatures {
        authority: vec!["mcp.example.com".into()],
        directory_ca: Some("/nonexistent/ca.pem".into()),
        ..RawSignatures::default()
    })
    .expect("valid settings");
    assert_eq!(KeyResolver::new(&ok.directory).expect_err("unreadable CA").field, "signatures.directory_ca");
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
