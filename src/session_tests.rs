use http::HeaderValue;
use portcullis_wire::mcp::SESSION_ID;

use super::*;
use crate::state::session::MemorySessionStore;

const TTL: Duration = Duration::from_secs(60);

fn guard() -> SessionGuard {
    SessionGuard::new(Arc::new(MemorySessionStore::new(100)), TTL, 100)
}

fn with_session(values: &[&[u8]]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(SESSION_ID, HeaderValue::from_bytes(v).expect("header value"));
    }
    h
}

fn request(method: Method, session: Option<&str>) -> Exchange {
    let mut b = http::Request::builder().method(method).uri("/mcp");
    if let Some(s) = session {
        b = b.header(SESSION_ID, s);
    }
    Exchange::of(&b.body(()).expect("request").into_parts().0, std::net::Ipv4Addr::LOCALHOST.into(), "default")
}

fn alice() -> OwnerKey {
    OwnerKey::of(Some("https://agent.example"), Some("https://issuer.example"), Some("alice"))
}

fn mallory() -> OwnerKey {
    OwnerKey::of(Some("https://agent.example"), Some("https://issuer.example"), Some("mallory"))
}

#[tokio::test]
async fn a_session_issued_to_one_identity_is_refused_to_another() {
    let g = guard();
    let init = request(Method::POST, None);
    let answer = with_session(&[b"s-1"]);
    assert!(init.needs_settling(StatusCode::OK, &answer));
    g.settle(&init, StatusCode::OK, &answer, &alice(), CallerKey::agent("alice")).await.expect("bound");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "default").await, Ok(()));
    assert_eq!(g.check(&with_session(&[b"s-1"]), &mallory(), "default").await, Err(SessionError::NotFound));
    assert_eq!(g.check(&with_session(&[b"s-2"]), &alice(), "default").await, Err(SessionError::NotFound), "never issued");
    assert_eq!(g.check(&HeaderMap::new(), &mallory(), "default").await, Ok(()), "no session, nothing to check");
}

#[tokio::test]
async fn malformed_session_headers_name_no_session() {
    let g = guard();
    g.settle(&request(Method::POST, None), StatusCode::OK, &with_session(&[b"s-1"]), &alice(), CallerKey::agent("alice")).await.expect("bound");
    for bad in [&[&b"s-1"[..], b"s-1"][..], &[b""], &[b"s 1"], &[b"s-\xe9"]] {
        assert_eq!(g.check(&with_session(bad), &alice(), "default").await, Err(SessionError::Malformed), "{bad:?}");
    }
}

#[tokio::test]
async fn only_successful_answers_bind_and_echoes_need_no_work() {
    let g = guard();
    let init = request(Method::POST, None);
    let answer = with_session(&[b"s-err"]);
    assert!(!init.needs_settling(StatusCode::BAD_REQUEST, &answer));
    g.settle(&init, StatusCode::BAD_REQUEST, &answer, &alice(), CallerKey::agent("alice")).await.expect("nothing to do");
    assert_eq!(g.check(&answer, &alice(), "default").await, Err(SessionError::NotFound), "an error answer binds nothing");
    assert!(!init.needs_settling(StatusCode::OK, &HeaderMap::new()));
    g.settle(&init, StatusCode::OK, &with_session(&[b"s-ok"]), &alice(), CallerKey::agent("alice")).await.expect("bound");
    assert!(!request(Method::POST, Some("s-ok")).needs_settling(StatusCode::OK, &with_session(&[b"s-ok"])), "an echo is not a new id");
}

#[tokio::test]
async fn a_backend_reissuing_a_bound_id_to_someone_else_is_a_conflict() {
    let g = guard();
    let init = request(Method::POST, None);
    g.settle(&init, StatusCode::OK, &with_session(&[b"fixed"]), &alice(), CallerKey::agent("alice")).await.expect("bound");
    let err = g.settle(&init, StatusCode::OK, &with_session(&[b"fixed"]), &mallory(), CallerKey::agent("mallory")).await.expect_err("conflict");
    assert_eq!(err, SessionError::Conflict);
    assert_eq!(g.check(&with_session(&[b"fixed"]), &alice(), "default").await, Ok(()), "still the first owner's");
    g.settle(&init, StatusCode::OK, &with_session(&[b"fixed"]), &alice(), CallerKey::agent("alice")).await.expect("the owner again: no conflict");
}

#[tokio::test]
async fn the_owners_successful_delete_ends_the_binding() {
    let g = guard();
    g.settle(&request(Method::POST, None), StatusCode::OK, &with_session(&[b"s-1"]), &alice(), CallerKey::agent("alice")).await.expect("bound");
    let delete = request(Method::DELETE, Some("s-1"));
    assert!(!delete.needs_settling(StatusCode::METHOD_NOT_ALLOWED, &HeaderMap::new()), "405: the session goes on");
    g.settle(&delete, StatusCode::METHOD_NOT_ALLOWED, &HeaderMap::new(), &alice(), CallerKey::agent("alice")).await.expect("nothing");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "default").await, Ok(()));
    g.settle(&delete, StatusCode::OK, &HeaderMap::new(), &mallory(), CallerKey::agent("mallory")).await.expect("not mallory's to end");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "default").await, Ok(()));
    assert!(delete.needs_settling(StatusCode::OK, &HeaderMap::new()));
    g.settle(&delete, StatusCode::OK, &HeaderMap::new(), &alice(), CallerKey::agent("alice")).await.expect("ended");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "default").await, Err(SessionError::NotFound));
}

struct DownStore;

#[async_trait::async_trait]
impl SessionStore for DownStore {
    async fn bind(&self, _: &SessionKey, _: &OwnerKey, _: &CallerBound, _: Duration) -> Result<Binding, StoreError> {
        Err(StoreError::Unavailable { store: "test store".into(), reason: "connection refused".into() })
    }
    async fn verify(&self, _: &SessionKey, _: &OwnerKey, _: Duration) -> Result<Binding, StoreError> {
        Err(StoreError::Unavailable { store: "test store".into(), reason: "connection refused".into() })
    }
    async fn unbind(&self, _: &SessionKey, _: &OwnerKey) -> Result<bool, StoreError> {
        Err(StoreError::Unavailable { store: "test store".into(), reason: "connection refused".into() })
    }
}

#[tokio::test]
async fn an_unavailable_store_is_an_error_not_a_pass() {
    let g = SessionGuard::new(Arc::new(DownStore), TTL, 100);
    assert!(matches!(g.check(&with_session(&[b"s"]), &alice(), "default").await, Err(SessionError::Store(_))));
    let init = request(Method::POST, None);
    assert!(matches!(g.settle(&init, StatusCode::OK, &with_session(&[b"s"]), &alice(), CallerKey::agent("alice")).await, Err(SessionError::Store(_))));
    g.settle(&request(Method::DELETE, Some("s")), StatusCode::OK, &HeaderMap::new(), &alice(), CallerKey::agent("alice"))
        .await
        .expect("an unremovable binding only expires later");
}

#[tokio::test]
async fn a_session_opened_on_one_server_names_nothing_on_another() {
    let g = guard();
    let opened = Exchange::of(&http::Request::post("/weather/mcp").body(()).expect("request").into_parts().0, std::net::Ipv4Addr::LOCALHOST.into(), "weather");
    g.settle(&opened, StatusCode::OK, &with_session(&[b"s-1"]), &alice(), CallerKey::agent("alice")).await.expect("bound");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "weather").await, Ok(()));
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "payments").await, Err(SessionError::NotFound), "another server's session");
    assert_eq!(g.check(&with_session(&[b"s-1"]), &alice(), "default").await, Err(SessionError::NotFound));
}
