use std::sync::Mutex as StdMutex;

use super::*;
use crate::state::session::contract::roomy;

/// A clock the test moves by hand.
fn manual_clock() -> (Clock, Arc<StdMutex<Instant>>) {
    let t = Arc::new(StdMutex::new(Instant::now()));
    let t2 = t.clone();
    (Arc::new(move || *t2.lock().unwrap_or_else(|p| p.into_inner())), t)
}

fn advance(t: &StdMutex<Instant>, by: Duration) {
    *t.lock().unwrap_or_else(|p| p.into_inner()) += by;
}

const TTL: Duration = Duration::from_secs(60);

fn owner(sub: &str) -> OwnerKey {
    OwnerKey::of(None, Some("https://issuer.example"), Some(sub))
}

#[tokio::test]
async fn memory_store_meets_the_session_contract() {
    contract::every_case_but_expiry(Arc::new(MemorySessionStore::new(1000))).await;
    let (clock, t) = manual_clock();
    let store = MemorySessionStore::with_clock(10, clock);
    contract::a_binding_expires_after_ttl_without_use(&store, Duration::from_secs(30), |d| {
        advance(&t, d);
        std::future::ready(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_has_one_winner_among_binds_on_threads() {
    contract::concurrent_binds_have_exactly_one_winner(Arc::new(MemorySessionStore::new(1000)), 200).await;
}

#[tokio::test]
async fn another_owners_use_does_not_keep_a_session_alive() {
    let (clock, t) = manual_clock();
    let store = MemorySessionStore::with_clock(10, clock);
    let s = SessionKey::of(b"s");
    store.bind(&s, &owner("alice"), &roomy(), TTL).await.expect("room");
    advance(&t, Duration::from_secs(50));
    assert_eq!(store.verify(&s, &owner("mallory"), TTL).await.expect("answers"), Binding::Other);
    advance(&t, Duration::from_secs(20));
    assert_eq!(store.verify(&s, &owner("alice"), TTL).await.expect("answers"), Binding::Unbound, "expired 60 s after the owner's last use");
}

#[tokio::test]
async fn full_store_refuses_new_sessions_and_keeps_live_ones() {
    let (clock, _t) = manual_clock();
    let store = MemorySessionStore::with_clock(2, clock);
    for s in [b"a", b"b"] {
        assert_eq!(store.bind(&SessionKey::of(s), &owner("alice"), &roomy(), TTL).await.expect("room"), Binding::Owner);
    }
    let err = store.bind(&SessionKey::of(b"c"), &owner("alice"), &roomy(), TTL).await.expect_err("full");
    assert!(err.to_string().contains("state.max_sessions"), "{err}");
    assert_eq!(store.verify(&SessionKey::of(b"a"), &owner("alice"), TTL).await.expect("answers"), Binding::Owner);
    assert_eq!(
        store.bind(&SessionKey::of(b"a"), &owner("alice"), &roomy(), TTL).await.expect("existing binding"),
        Binding::Owner,
        "a bound session rebinds when full"
    );
    assert_eq!(store.len(), 2);
}

#[tokio::test]
async fn full_store_makes_room_by_sweeping_expired_and_ended_sessions() {
    let (clock, t) = manual_clock();
    let store = MemorySessionStore::with_clock(2, clock);
    store.bind(&SessionKey::of(b"short"), &owner("alice"), &roomy(), Duration::from_secs(1)).await.expect("room");
    store.bind(&SessionKey::of(b"long"), &owner("alice"), &roomy(), TTL).await.expect("room");
    advance(&t, Duration::from_secs(2));
    assert_eq!(store.bind(&SessionKey::of(b"new"), &owner("bob"), &roomy(), TTL).await.expect("expired binding swept"), Binding::Owner);
    assert!(store.unbind(&SessionKey::of(b"long"), &owner("alice")).await.expect("answers"));
    assert_eq!(store.bind(&SessionKey::of(b"newer"), &owner("bob"), &roomy(), TTL).await.expect("ended session made room"), Binding::Owner);
    assert_eq!(store.len(), 2);
}

#[tokio::test]
async fn expired_bindings_are_swept_as_the_map_grows() {
    let (clock, t) = manual_clock();
    let store = MemorySessionStore::with_clock(1_000_000, clock);
    for i in 0..5_000u32 {
        store.bind(&SessionKey::of(&i.to_be_bytes()), &owner("a"), &roomy(), Duration::from_secs(1)).await.expect("room");
    }
    advance(&t, Duration::from_secs(5));
    for i in 5_000..10_000u32 {
        store.bind(&SessionKey::of(&i.to_be_bytes()), &owner("a"), &roomy(), TTL).await.expect("room");
    }
    assert!(store.len() < 10_000, "expired bindings were swept while binding: {}", store.len());
}

#[test]
fn owner_keys_never_confuse_one_identity_with_another() {
    let agent_only = OwnerKey::of(Some("a"), None, None);
    assert_ne!(agent_only, OwnerKey::of(None, None, Some("a")), "agent a is not user a");
    assert_ne!(agent_only, OwnerKey::of(None, Some("a"), None));
    assert_ne!(OwnerKey::of(None, None, None), OwnerKey::of(Some(""), None, None), "anonymous is not an empty agent id");
    assert_ne!(OwnerKey::of(Some("ab"), Some("c"), None), OwnerKey::of(Some("a"), Some("bc"), None), "parts are length-prefixed");
    assert_ne!(OwnerKey::of(None, Some("https://one.example"), Some("u")), OwnerKey::of(None, Some("https://two.example"), Some("u")), "sub is per issuer");
    assert_eq!(OwnerKey::of(Some("a"), Some("i"), Some("u")), OwnerKey::of(Some("a"), Some("i"), Some("u")));
}

#[test]
fn only_a_short_hash_of_a_session_id_is_ever_printed() {
    let key = SessionKey::of(b"secret-session-id");
    let prefix = key.log_prefix();
    assert_eq!(prefix.len(), 12);
    assert!(prefix.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(!format!("{key:?}").contains("secret"));
    assert!(!key.encoded().contains("secret"));
}
