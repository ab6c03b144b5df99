//! Graceful shutdown through the library entry point: readiness drops first, held streams get
//! the grace period and no more.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::{Duration, Instant};

use common::{client, config_without_policy, Gateway, Upstream};

#[tokio::test]
async fn readiness_fails_during_drain_and_open_streams_are_cut_after_the_grace_period() {
    let upstream = Upstream::start().await;
    let mut gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nshutdown_grace = \"1s\"\n")).await;
    let mut sse = client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(&sse.chunk().await.unwrap().unwrap()[..], b"id: 1\ndata: event 1\n\n");

    let admin = gw.admin_url("/readyz");
    let running = gw.running.take().unwrap();
    let started = Instant::now();
    let shutdown = tokio::spawn(running.shutdown());
    // While the SSE stream holds the drain open, readiness answers 503.
    let mut saw_unready = false;
    for _ in 0..40 {
        if let Ok(r) = client().get(&admin).send().await {
            if r.status() == 503 {
                assert_eq!(r.json::<serde_json::Value>().await.unwrap()["ready"], false);
                saw_unready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_unready, "/readyz reports the drain");
    tokio::time::timeout(Duration::from_secs(5), shutdown).await.expect("shutdown is bounded by the grace period").unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "{took:?}");
    // The held stream was closed, not left dangling.
    let rest = tokio::time::timeout(Duration::from_secs(2), sse.chunk()).await.expect("stream ends");
    assert!(!matches!(rest, Ok(Some(_))), "{rest:?}");
}
