//! Per-request cost of the shared-state stores: the memory replay, quota and idempotency-journal
//! stores against Redis (a real redis-server on loopback, one round trip per check) and against a
//! real three-master Redis Cluster on loopback (`redis-cluster`: the same one round trip, to the
//! key's master). Run with redis-server installed (scripts/test.sh installs it).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::quota::QuotaSpec;
use portcullis::state::admit::{AdmitStore, ReplayKeys};
use portcullis::state::caller::{CallerBound, CallerKey};
use portcullis::state::journal::{JournalStore, MemoryJournalStore, RecordedAnswer, Ticket};
use portcullis::state::quota::{MemoryQuotaStore, QuotaStore};
use portcullis::state::redis::{RedisSettings, RedisStore};
use portcullis::state::replay::{MemoryReplayStore, ReplayStore};
use portcullis_test_support::redis as redis_server;
use portcullis_wire::UnixTime;

fn stores(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store_at = |url: String| {
        RedisStore::new(RedisSettings {
            url,
            prefix: "bench:".into(),
            connect_timeout: Duration::from_secs(1),
            command_timeout: Duration::from_secs(1),
            ca_pem: None,
        })
        .unwrap()
    };
    let server = redis_server::RedisServer::start();
    let redis = store_at(server.url());
    let cluster_servers = redis_server::RedisCluster::start();
    let cluster = store_at(cluster_servers.url());
    let memory = MemoryReplayStore::new(10_000_000);
    let memory_quota_for_admit = MemoryQuotaStore::new(1_000_000);
    let n = AtomicU64::new(0);
    let mut g = c.benchmark_group("replay_first_use");
    for (name, store) in [("memory", &memory as &dyn ReplayStore), ("redis", &redis as &dyn ReplayStore), ("redis-cluster", &cluster as &dyn ReplayStore)] {
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let key = format!("sig:{}", n.fetch_add(1, Ordering::Relaxed));
                async move { black_box(store.first_use(&key, Duration::from_secs(5)).await.unwrap()) }
            })
        });
    }
    g.finish();

    // A signature with a nonce writes two records: one script, one round trip on Redis.
    let mut g = c.benchmark_group("replay_signature_and_nonce");
    for (name, store) in [("memory", &memory as &dyn ReplayStore), ("redis", &redis as &dyn ReplayStore), ("redis-cluster", &cluster as &dyn ReplayStore)] {
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let (sig, nonce) = (format!("sig:{{n{i}}}:k:s"), format!("nonce:{{n{i}}}:k"));
                async move { black_box(store.first_use_then(&sig, Some(&nonce), Duration::from_secs(5)).await.unwrap()) }
            })
        });
    }
    g.finish();

    // A signed request with a nonce and one quota: stage 6 then stage 10 (two round trips on
    // Redis), against the one admission script (`state::admit`, a single Redis server).
    let mut g = c.benchmark_group("signed_request_with_a_quota");
    let quota = QuotaSpec { key: "admit".into(), cost: 1, limit: u64::MAX / 2, per: Duration::from_secs(60), global: false };
    for (name, store) in [("memory-two-steps", &memory as &dyn ReplayStore), ("redis-two-round-trips", &redis as &dyn ReplayStore)] {
        let quotas: &dyn QuotaStore = if name.starts_with("memory") { &memory_quota_for_admit } else { &redis };
        let quota = &quota;
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let (sig, nonce) = (format!("sig:{{a{i}}}:k:s"), format!("nonce:{{a{i}}}:k"));
                async move {
                    black_box(store.first_use_then(&sig, Some(&nonce), Duration::from_secs(5)).await.unwrap());
                    black_box(quotas.spend(&quota.key, quota.cost, quota.limit, quota.per, UnixTime::now()).await.unwrap())
                }
            })
        });
    }
    let quota = &quota;
    g.bench_function("redis-one-round-trip", |b| {
        b.to_async(&rt).iter(|| {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let keys = ReplayKeys { first: format!("sig:{{b{i}}}:k:s"), then: Some(format!("nonce:{{b{i}}}:k")), ttl: Duration::from_secs(5) };
            let redis = &redis;
            async move { black_box(redis.admit(&keys, std::slice::from_ref(quota), UnixTime::now()).await.unwrap()) }
        })
    });
    g.finish();

    let memory_quota = MemoryQuotaStore::new(1_000_000);
    let mut g = c.benchmark_group("quota_spend");
    for (name, store) in [("memory", &memory_quota as &dyn QuotaStore), ("redis", &redis as &dyn QuotaStore), ("redis-cluster", &cluster as &dyn QuotaStore)] {
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let key = format!("q:{}", n.fetch_add(1, Ordering::Relaxed) % 1000);
                async move { black_box(store.spend(&key, 1, u64::MAX / 2, Duration::from_secs(60), UnixTime::now()).await.unwrap()) }
            })
        });
    }
    g.finish();

    // An idempotent call costs two round trips: reserve before forwarding, record after.
    let memory_journal = MemoryJournalStore::new(10_000_000, 64 << 30);
    let answer = RecordedAnswer {
        status: 200,
        content_type: Some("application/json".into()),
        body: bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"payment #1"}]}}"#),
        id: Some("1".into()),
        progress_token: None,
    };
    let mut g = c.benchmark_group("journal_reserve_then_record");
    for (name, store) in
        [("memory", &memory_journal as &dyn JournalStore), ("redis", &redis as &dyn JournalStore), ("redis-cluster", &cluster as &dyn JournalStore)]
    {
        let answer = &answer;
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed);
                // 64 callers, each far below its bound: the count is paid for, never hit.
                let bound = CallerBound::new(CallerKey::agent(&format!("bench-{}", i % 64)), usize::MAX);
                let ticket = Ticket { key: format!("j:{i}"), fingerprint: [7; 32], token: "t".into(), bound };
                async move {
                    black_box(store.reserve(&ticket, Duration::from_secs(60)).await.unwrap());
                    black_box(store.complete(&ticket, answer, Duration::from_secs(5)).await.unwrap())
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, stores);
criterion_main!(benches);
