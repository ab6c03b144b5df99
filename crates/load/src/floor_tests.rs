//! The floor proxy over real HTTP on 127.0.0.1: a request the bench's signer signed is
//! forwarded once; a bad signature, a changed body and a replay are 401 and never reach the
//! upstream. Then [`Floor::check`]'s own refusals, each by name.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ed25519_dalek::SigningKey;
use http::HeaderMap;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use portcullis::signature::{Nonce, Signer};
use portcullis_wire::UnixTime;

use super::{serve, Floor, Refusal};

/// An upstream that answers 200 and counts what reached it.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let counted = counted.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok")))) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (addr, hits)
}

/// The floor in front of a counting upstream, trusting `key`; returns its address.
async fn floor_for(key: &SigningKey) -> (String, Arc<AtomicUsize>) {
    let (backend, hits) = upstream().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, backend, Arc::new(Floor::new(key.verifying_key(), &addr))));
    (addr, hits)
}

fn signer(key: &SigningKey) -> Signer {
    Signer::new(key.clone(), crate::AGENT).unwrap().with_nonce(Nonce::Random)
}

/// POSTs `body` with `headers` to `http://{addr}{path}`: status and answer body.
async fn send(addr: &str, path: &str, headers: HeaderMap, body: &'static [u8]) -> (u16, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client.request(crate::post(format!("http://{addr}{path}").parse().unwrap(), headers, Bytes::from_static(body))).await.unwrap();
    let status = resp.status().as_u16();
    (status, String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned())
}

const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"weather.get"}}"#;

#[tokio::test]
async fn signed_request_is_forwarded_once_and_its_replay_is_401() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let (addr, hits) = floor_for(&key).await;
    let headers = crate::head(Some(&signer(&key)), &addr, "/mcp", &Bytes::from_static(BODY), None, UnixTime::now());

    assert_eq!(send(&addr, "/mcp", headers.clone(), BODY).await, (200, "ok".to_owned()));
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    assert_eq!(send(&addr, "/mcp", headers, BODY).await, (401, "replayed nonce".to_owned()));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the replay reached the upstream");
}

#[tokio::test]
async fn bad_signature_is_401_and_not_forwarded() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let (addr, hits) = floor_for(&key).await;
    // Signed for /mcp, sent to /tools: @path differs, so the base does.
    let headers = crate::head(Some(&signer(&key)), &addr, "/mcp", &Bytes::from_static(BODY), None, UnixTime::now());
    assert_eq!(send(&addr, "/tools", headers, BODY).await, (401, "bad signature".to_owned()));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn changed_body_is_401_and_not_forwarded() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let (addr, hits) = floor_for(&key).await;
    let headers = crate::head(Some(&signer(&key)), &addr, "/mcp", &Bytes::from_static(BODY), None, UnixTime::now());
    let other: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"payments.send"}}"#;
    assert_eq!(send(&addr, "/mcp", headers, other).await, (401, "Content-Digest does not match the body".to_owned()));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn unsigned_request_is_401_and_not_forwarded() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let (addr, hits) = floor_for(&key).await;
    let headers = crate::head(None, &addr, "/mcp", &Bytes::from_static(BODY), None, UnixTime::now());
    assert_eq!(send(&addr, "/mcp", headers, BODY).await.0, 401);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// The parts of a request to `authority`, signed by `key` at `signed_at` (seconds).
fn parts(key: &SigningKey, authority: &str, signed_at: u64) -> http::request::Parts {
    let mut parts = http::Request::builder().method("POST").uri(format!("http://{authority}/mcp")).body(()).unwrap().into_parts().0;
    signer(key).sign_parts(&mut parts, BODY, UnixTime(std::time::Duration::from_secs(signed_at))).unwrap();
    parts
}

#[test]
fn check_names_each_refusal() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let floor = Floor::new(key.verifying_key(), "127.0.0.1:8080");
    let now = 1_800_000_000;
    let good = parts(&key, "127.0.0.1:8080", now);
    assert_eq!(floor.check(&good, BODY, now), Ok(()));
    assert_eq!(floor.check(&good, BODY, now), Err(Refusal::Replayed));
    // 60 s lifetime, 30 s skew: 91 s later it has expired.
    assert_eq!(floor.check(&parts(&key, "127.0.0.1:8080", now), BODY, now + 91), Err(Refusal::Stale));
    assert_eq!(floor.check(&parts(&key, "127.0.0.1:9090", now), BODY, now), Err(Refusal::ForeignAuthority));
    let other = SigningKey::from_bytes(&[8; 32]);
    assert_eq!(floor.check(&parts(&other, "127.0.0.1:8080", now), BODY, now), Err(Refusal::UnknownKey));
    let mut flipped = parts(&key, "127.0.0.1:8080", now);
    flipped.method = http::Method::PUT;
    assert_eq!(floor.check(&flipped, BODY, now), Err(Refusal::BadSignature));
}
