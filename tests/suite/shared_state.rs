//! Several instances, one truth: two gateways sharing one real Redis refuse each other's
//! replays, fail closed with 503 when Redis is down, and recover when it is back.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::redis::RedisServer;
use common::{client, Gateway, Upstream};
use ed25519_dalek::SigningKey;
use portcullis::config::Config;
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis_wire::UnixTime;

const AGENT: &str = "https://agent.example";
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

struct Pair {
    upstream: Upstream,
    a: Gateway,
    b: Gateway,
    signer: Signer,
}

fn config(upstream: &str, redis: &str, key: &SigningKey, mode: &str) -> Config {
    config_with(upstream, redis, key, mode, "")
}

/// `config` with `extra` (e.g. a `[policy]` section) given to the gateway's config.
fn config_with(upstream: &str, redis: &str, key: &SigningKey, mode: &str, extra: &str) -> Config {
    let jwk = ed25519_public_jwk(&key.verifying_key());
    let text = common::TomlEdit::of(&common::config_toml(upstream, extra)).set("mode", mode).text()
        + &format!(
            "\n[signatures]\nrequired = true\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n[oauth]\nrequired = false\n[state]\nstore = {redis:?}\ncommand_timeout = \"300ms\"\nconnect_timeout = \"300ms\"\n",
            jwk["x"].as_str().unwrap()
        );
    Config::parse(&text, "shared state test", Path::new(".")).unwrap()
}

impl Pair {
    async fn start(redis: &RedisServer, mode: &str) -> Pair {
        Pair::start_on(&redis.url(), mode, "").await
    }

    /// Two instances on the store at `url` (a server or a cluster), `extra` added to their
    /// config.
    async fn start_on(url: &str, mode: &str, extra: &str) -> Pair {
        let upstream = Upstream::start().await;
        let key = SigningKey::from_bytes(&rand::random());
        let a = Gateway::start(config_with(&upstream.url(), url, &key, mode, extra)).await;
        let b = Gateway::start(config_with(&upstream.url(), url, &key, mode, extra)).await;
        Pair { upstream, a, b, signer: Signer::new(key, AGENT).unwrap() }
    }

    /// A request signed now for the public name both instances serve (`mcp.example.com`,
    /// `listen.public_url`'s, as behind a load balancer), sent to `gw` with that `Host`.
    fn signed_for(&self, gw: &Gateway) -> reqwest::RequestBuilder {
        let mut req = http::Request::builder().method("POST").uri("http://mcp.example.com/mcp").body(BODY.as_bytes().to_vec()).unwrap();
        self.signer.sign_request(&mut req, UnixTime::now()).unwrap();
        let (parts, body) = req.into_parts();
        client().post(gw.url("/mcp")).headers(parts.headers).header("host", "mcp.example.com").body(body)
    }
}

/// Re-sends the exact headers (the covered `Host` among them) and body to `gw`.
fn replay_to(gw: &Gateway, original: &reqwest::Request) -> reqwest::RequestBuilder {
    let headers = original.headers().clone();
    let body = original.body().and_then(|b| b.as_bytes()).unwrap().to_vec();
    client().post(gw.url("/mcp")).headers(headers).body(body)
}

#[tokio::test]
async fn a_signature_accepted_by_one_instance_is_refused_by_the_other() {
    let redis = RedisServer::start();
    let p = Pair::start(&redis, "enforce").await;
    let req = p.signed_for(&p.a).build().unwrap();
    let copy = replay_to(&p.b, &req);
    assert_eq!(client().execute(req).await.unwrap().status(), 200);
    let resp = copy.send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["error"], "replayed_signature");
    assert_eq!(p.upstream.seen().len(), 1, "only the first use was forwarded");
}

#[tokio::test]
async fn fifty_concurrent_copies_over_two_instances_are_forwarded_exactly_once() {
    let redis = RedisServer::start();
    let p = Pair::start(&redis, "enforce").await;
    let original = p.signed_for(&p.a).build().unwrap();
    let sends: Vec<_> = (0..50).map(|i| replay_to(if i % 2 == 0 { &p.a } else { &p.b }, &original).send()).collect();
    let statuses: Vec<u16> = futures_util::future::join_all(sends).await.into_iter().map(|r| r.unwrap().status().as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 49, "{statuses:?}");
    assert_eq!(p.upstream.seen().len(), 1);
}

#[tokio::test]
async fn redis_down_refuses_with_503_and_service_resumes_when_it_is_back() {
    let mut redis = RedisServer::start();
    let p = Pair::start(&redis, "enforce").await;
    assert_eq!(p.signed_for(&p.a).send().await.unwrap().status(), 200);

    redis.stop();
    let resp = p.signed_for(&p.b).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "state_unavailable");
    assert!(body["reason"].as_str().unwrap().contains(&format!("127.0.0.1:{}", redis.port)), "{body}");
    assert_eq!(p.upstream.seen().len(), 1, "nothing forwarded while the replay store is down");
    assert!(common::metrics(&p.b).await.contains("portcullis_state_store_errors_total 1"), "store errors are counted");
    let ready: serde_json::Value = client().get(p.b.admin_url("/readyz")).send().await.unwrap().json().await.unwrap();
    assert!(ready["checks"]["state"].as_str().unwrap().starts_with("unavailable"), "{ready}");

    redis.restart();
    let mut recovered = false;
    for _ in 0..50 {
        if p.signed_for(&p.b).send().await.unwrap().status() == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "service resumes without a restart");
}

/// Scale-out: two instances on a real three-master Redis Cluster share replay records, and a
/// master that stops turns into 503 `state_unavailable` (never a pass) until it is back.
#[tokio::test]
async fn two_instances_on_a_redis_cluster_share_replays_and_survive_a_node_restart() {
    let mut cluster = common::redis::RedisCluster::start();
    let p = Pair::start_on(&cluster.url(), "enforce", "").await;
    // Many signatures, so their replay records land on every master.
    for _ in 0..12 {
        let req = p.signed_for(&p.a).build().unwrap();
        let copy = replay_to(&p.b, &req);
        assert_eq!(client().execute(req).await.unwrap().status(), 200);
        let resp = copy.send().await.unwrap();
        assert_eq!(resp.status(), 401, "B refuses what A accepted");
        assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["error"], "replayed_signature");
    }
    assert_eq!(p.upstream.seen().len(), 12);

    cluster.nodes[2].stop();
    let mut unavailable = 0;
    for _ in 0..20 {
        let resp = p.signed_for(&p.b).send().await.unwrap();
        match resp.status().as_u16() {
            200 => {}
            503 => {
                let body: serde_json::Value = resp.json().await.unwrap();
                assert_eq!(body["error"], "state_unavailable", "{body}");
                unavailable += 1;
            }
            other => panic!("unexpected status {other} while a master is down"),
        }
    }
    assert!(unavailable > 0, "requests whose records live on the stopped master are refused");
    let forwarded = p.upstream.seen().len();
    assert_eq!(forwarded, 12 + 20 - unavailable, "a refused request is not forwarded");

    cluster.nodes[2].restart();
    cluster.wait_until_ok();
    let mut recovered = 0;
    for _ in 0..100 {
        if p.signed_for(&p.a).send().await.unwrap().status() == 200 {
            recovered += 1;
            if recovered == 10 {
                break;
            }
        } else {
            recovered = 0;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(recovered, 10, "service resumes without a gateway restart");
}

#[tokio::test]
async fn redis_down_in_monitor_mode_forwards_and_logs_would_deny() {
    let mut redis = RedisServer::start();
    let p = Pair::start(&redis, "monitor").await;
    redis.stop();
    let resp = p.signed_for(&p.a).send().await.unwrap();
    assert_eq!(resp.status(), 200, "monitor mode forwards");
    let seen = p.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("x-portcullis-agent").is_none(), "no identity without the replay check");
    let metrics = common::metrics(&p.a).await;
    assert!(metrics.contains(r#"portcullis_requests_total{outcome="would_deny",status="200",error="state_unavailable",server="default"} 1"#), "{metrics}");
}

#[tokio::test]
async fn a_quota_spent_on_one_instance_is_spent_on_the_other() {
    use common::policy::{rego, tool_call, PolicyDir};
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true, "quotas": [{"key": "shared-calls", "limit": 3, "per": "1h"}]}"#));
    let extra = format!("{}\n[state]\nstore = {:?}\n", p.toml(), redis.url());
    let a = Gateway::start(common::config(&upstream.url(), &extra)).await;
    let b = Gateway::start(common::config(&upstream.url(), &extra)).await;
    let call = |gw: &Gateway| client().post(gw.url("/mcp")).body(tool_call(1, "search", serde_json::json!({}))).send();
    for gw in [&a, &b, &a] {
        assert_eq!(call(gw).await.unwrap().status(), 200);
    }
    let refused = call(&b).await.unwrap();
    assert_eq!(refused.status(), 429, "the fourth call is over the shared limit, whichever instance gets it");
    assert_eq!(refused.headers()["retry-after"], "1200");
    assert_eq!(upstream.seen().len(), 3);
}

#[tokio::test]
async fn rediss_store_with_a_private_ca_shares_replays() {
    let ca = common::pki::TestCa::new();
    let (cert, key) = ca.write_leaf();
    let redis = RedisServer::start_tls(&cert, &key);
    let upstream = Upstream::start().await;
    let key = SigningKey::from_bytes(&rand::random());
    let with_ca = |c: Config| {
        let mut c = c;
        c.state.ca = Some(ca.ca_path());
        c
    };
    let a = Gateway::start(with_ca(config(&upstream.url(), &redis.url(), &key, "enforce"))).await;
    let b = Gateway::start(with_ca(config(&upstream.url(), &redis.url(), &key, "enforce"))).await;
    let p = Pair { upstream, a, b, signer: Signer::new(key, AGENT).unwrap() };
    let req = p.signed_for(&p.a).build().unwrap();
    let copy = replay_to(&p.b, &req);
    assert_eq!(client().execute(req).await.unwrap().status(), 200);
    assert_eq!(copy.send().await.unwrap().status(), 401, "the replay record went through TLS to the shared Redis");
}

/// `INFO commandstats` of the Redis at `port`: calls per command (commands run by scripts
/// included under their own names).
fn command_calls(port: u16) -> std::collections::HashMap<String, u64> {
    let out = std::process::Command::new("redis-cli").args(["-p", &port.to_string(), "info", "commandstats"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// A signed request with a quota costs one Redis command (one round trip): its replay records
/// and its quota are one script. The answers are those of the two stages in turn: a replayed
/// copy is 401 and spends nothing; the quota counts across both instances.
#[tokio::test]
async fn a_signed_request_with_a_quota_is_one_redis_round_trip() {
    use common::policy::{rego, PolicyDir};
    let redis = RedisServer::start();
    let policy = PolicyDir::new(&rego(r#"decision := {"allow": true, "quotas": [{"key": "signed-calls", "limit": 6, "per": "1h"}]}"#));
    let p = Pair::start_on(&redis.url(), "enforce", &policy.toml()).await;

    // The first request through each instance opens its connection and loads the script;
    // count from then on.
    assert_eq!(p.signed_for(&p.a).send().await.unwrap().status(), 200);
    assert_eq!(p.signed_for(&p.b).send().await.unwrap().status(), 200);
    let before = command_calls(redis.port);
    assert_eq!(p.signed_for(&p.b).send().await.unwrap().status(), 200);
    assert_eq!(p.signed_for(&p.a).send().await.unwrap().status(), 200);
    let after = command_calls(redis.port);
    let delta = |cmd: &str| after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0);
    // Each request is one EVALSHA (the SETs and GETs the script runs inside Redis are counted
    // apart); nothing else was sent but this test's own INFO.
    assert_eq!(delta("evalsha"), 2, "one script per signed request with a quota: {after:?}");
    let others: Vec<_> = after.keys().filter(|c| !["evalsha", "info", "set", "get"].contains(&c.as_str()) && delta(c) > 0).collect();
    assert!(others.is_empty(), "no other command: {others:?}");

    // A replayed copy: 401, and the quota is not spent by it (two units are left, one after
    // the original).
    let req = p.signed_for(&p.a).build().unwrap();
    let copy = replay_to(&p.b, &req);
    assert_eq!(client().execute(req).await.unwrap().status(), 200);
    let replayed = copy.send().await.unwrap();
    assert_eq!(replayed.status(), 401);
    assert_eq!(replayed.json::<serde_json::Value>().await.unwrap()["error"], "replayed_signature");
    let fourth = p.signed_for(&p.b).send().await.unwrap();
    assert_eq!(fourth.status(), 200, "the replayed copy spent nothing");
    let fifth = p.signed_for(&p.a).send().await.unwrap();
    assert_eq!(fifth.status(), 429, "6 per hour across both instances");
    assert!(fifth.headers().contains_key("retry-after"));
    assert_eq!(p.upstream.seen().len(), 6);
    // The refused request's signature was recorded all the same: its copy is a replay.
    let refused = p.signed_for(&p.a).build().unwrap();
    let copy = replay_to(&p.a, &refused);
    assert_eq!(client().execute(refused).await.unwrap().status(), 429);
    assert_eq!(copy.send().await.unwrap().status(), 401);
}
