//! The Redis connection under the shared stores: atomic first use, fail closed when Redis is
//! down, recovery without a restart when it comes back.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::Duration;

use common::redis::RedisServer;
use portcullis::state::redis::{RedisSettings, RedisStore};
use portcullis::state::StoreError;

fn store(url: String) -> RedisStore {
    RedisStore::new(RedisSettings {
        url,
        prefix: "test:".into(),
        connect_timeout: Duration::from_millis(500),
        command_timeout: Duration::from_millis(500),
        ca_pem: None,
    })
    .unwrap()
}

#[tokio::test]
async fn set_once_is_true_exactly_once_across_connections() {
    let server = RedisServer::start();
    let (a, b) = (store(server.url()), store(server.url()));
    let key = a.key("replay", "k1");
    let mut tasks = Vec::new();
    for i in 0..50 {
        let s = if i % 2 == 0 { &a } else { &b };
        tasks.push(s.set_once(&key, Duration::from_secs(10)));
    }
    let results = futures_util::future::join_all(tasks).await;
    let firsts = results.iter().filter(|r| matches!(r, Ok(true))).count();
    assert_eq!(firsts, 1, "{results:?}");
    assert!(results.iter().all(|r| r.is_ok()));
}

#[tokio::test]
async fn keys_expire_with_their_ttl() {
    let server = RedisServer::start();
    let s = store(server.url());
    let key = s.key("replay", "short");
    assert_eq!(s.set_once(&key, Duration::from_millis(100)).await, Ok(true));
    assert_eq!(s.set_once(&key, Duration::from_millis(100)).await, Ok(false));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.set_once(&key, Duration::from_millis(100)).await, Ok(true), "expired key can be used again");
}

#[tokio::test]
async fn redis_down_is_an_error_naming_the_store_and_recovery_needs_no_restart() {
    let mut server = RedisServer::start();
    let s = store(server.url());
    assert_eq!(s.ping().await, Ok(()));
    server.stop();
    let err = s.set_once(&s.key("replay", "x"), Duration::from_secs(1)).await.unwrap_err();
    let StoreError::Unavailable { store, .. } = &err;
    assert!(store.contains(&server.port.to_string()), "{err}");
    server.restart();
    let mut recovered = false;
    for _ in 0..50 {
        if s.set_once(&s.key("replay", "y"), Duration::from_secs(1)).await == Ok(true) {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the store reconnects by itself once Redis is back");
}

#[tokio::test]
async fn redis_never_started_is_an_error_not_a_hang() {
    let port = common::closed_port().await.port();
    let s = store(format!("redis://127.0.0.1:{port}"));
    let started = std::time::Instant::now();
    assert!(s.set_once("k", Duration::from_secs(1)).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));
}
