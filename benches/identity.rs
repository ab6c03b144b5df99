//! Cost of the identity stages around signature verification: the memory replay store's
//! atomic check-and-record, and stages 2–6 as the pipeline runs them on a 1 KiB MCP POST
//! signed with a static key (digest, signature parse and checks, key resolution, Ed25519,
//! replay).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use portcullis::config::Config;
use portcullis::inbound::Inbound;
use portcullis::pipeline::{self, Stages};
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis::stage::StageTimings;
use portcullis::state::replay::{MemoryReplayStore, ReplayStore};
use portcullis_wire::UnixTime;

fn replay_store(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = MemoryReplayStore::new(10_000_000);
    let n = AtomicU64::new(0);
    let mut g = c.benchmark_group("replay_store");
    // Keys cycle through a million slots with a 1 ms lifetime: the steady state of a busy
    // gateway, where most inserts land on expired records.
    g.bench_function("first_use_new_key", |b| {
        b.to_async(&rt).iter(|| {
            let key = format!("sig:bench:{}", n.fetch_add(1, Ordering::Relaxed) % 1_000_000);
            let store = &store;
            async move { black_box(store.first_use(&key, Duration::from_millis(1)).await.unwrap()) }
        })
    });
    rt.block_on(store.first_use("sig:bench:replayed", Duration::from_secs(3600))).unwrap();
    g.bench_function("first_use_replayed_key", |b| {
        b.to_async(&rt).iter(|| async { assert!(!store.first_use(black_box("sig:bench:replayed"), Duration::from_secs(3600)).await.unwrap()) })
    });
    g.finish();
}

fn identity_stages(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let signer = Signer::new(ed25519_dalek::SigningKey::from_bytes(&[9; 32]), "https://agent.example").unwrap();
    let x = ed25519_public_jwk(&signer.verifying_key())["x"].as_str().unwrap().to_owned();
    let text = format!(
        r#"
[listen]
addr = "127.0.0.1:0"
public_url = "https://mcp.example.com/mcp"
[upstream]
url = "http://127.0.0.1:3001"
[signatures]
required = true
[[signatures.keys]]
agent = "https://agent.example"
jwk = {{ kty = "OKP", crv = "Ed25519", x = "{x}" }}
[oauth]
required = false
"#
    );
    let config = Config::parse(&text, "bench", Path::new(".")).unwrap();
    let stages = Stages::build(&config).unwrap();
    let server = portcullis::servers::Server::build(&config, &config.servers[0], stages.accept_signature()).unwrap();
    let body = format!(r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"payments.send","arguments":{{"memo":"{}"}}}}}}"#, "x".repeat(940));
    // Each iteration needs a fresh signature (the replay stage accepts each once); signing is
    // setup, not measured.
    let signed = || {
        let now = UnixTime::now();
        let mut req = http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "mcp.example.com")
            .header("content-type", "application/json")
            .body(body.clone().into_bytes())
            .unwrap();
        signer.sign_request(&mut req, now).unwrap();
        let (head, body) = req.into_parts();
        Inbound::new(head, Bytes::from(body), now, ([127, 0, 0, 1], 1).into(), true, "bench".into()).unwrap()
    };
    let mut g = c.benchmark_group("identity_1kib_mcp_post");
    g.bench_function("stages_2_to_6_static_key", |b| {
        b.to_async(&rt).iter_batched(
            signed,
            |req| {
                let stages = &stages;
                let server = &server;
                async move {
                    let mut timings = StageTimings::default();
                    let permit = pipeline::check(&req, stages, &server.scope(), &mut timings).await.unwrap();
                    black_box(permit.evidence().agent.is_some())
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, replay_store, identity_stages);
criterion_main!(benches);
