//! Decision 13 through the real gateway (issue 33, item 5): no caller can use up a store others
//! share. One token (or one client address) floods the idempotency journal, the session store
//! or the approval store as an attacker would; it gets 429 `caller_limit_exceeded` with
//! `Retry-After` once it holds its share, and every other caller's exactly-once calls,
//! sessions and approvals go on. The bounds hold in monitor mode too, and across instances
//! sharing Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::Path;

use common::issuer::Issuer;
use common::pki::TestCa;
use common::redis::RedisServer;
use common::{client, Gateway, Upstream, INITIALIZE};
use portcullis::config::Config;
use serde_json::{json, Value};

/// The authority of the test config's `listen.public_url`.
const AUTHORITY: &str = "mcp.example.com";
const AUD: &str = "https://mcp.example.com/mcp";

/// `payments.send` is exactly-once (a key is required); `payments.approve` waits for a person.
const POLICY: &str = r#"package portcullis
import rego.v1
default decision := {"allow": true}
decision := {"allow": true, "idempotency": {"required": true}} if input.mcp.tool == "payments.send"
decision := {"allow": true, "approval": {"message": "Send it?"}} if input.mcp.tool == "payments.approve"
"#;

/// Small global bounds, so the flood the issue describes (one token, `max_entries = 6`) fits in
/// a test; each caller may hold half of each.
const BOUNDS: &str = "[idempotency]\nmax_entries = 6\nmax_entries_per_caller = 3\n\
                      [limits]\nmax_sessions_per_caller = 2\n";

/// An issuer, a backend and the approval key around one or more gateways.
struct World {
    ca: TestCa,
    issuer: Issuer,
    upstream: Upstream,
    policy: common::policy::PolicyDir,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let upstream = Upstream::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state.key"), [7u8; 32]).unwrap();
        World { ca, issuer, upstream, policy: common::policy::PolicyDir::new(POLICY), dir }
    }

    /// Tokens optional (verified when sent), no signatures, approvals on, [`BOUNDS`], in
    /// `mode`, with `state` lines in `[state]`.
    fn config(&self, mode: &str, state: &str) -> Config {
        self.config_logging(mode, state, None)
    }

    /// [`World::config`], with decision-log lines written to `log`.
    fn config_logging(&self, mode: &str, state: &str, log: Option<&Path>) -> Config {
        let extra = format!(
            "{policy}\n{BOUNDS}[signatures]\nrequired = false\n\
             [oauth]\nrequired = false\nissuer = {iss:?}\nissuer_ca = {ca:?}\n\
             [approvals]\nenabled = true\nclient_id = \"portcullis\"\nttl = \"5m\"\nmax_pending_per_caller = 2\nstate_key_file = {key:?}\n\
             [state]\nmax_sessions = 6\ncommand_timeout = \"1s\"\nconnect_timeout = \"1s\"\n{state}\n",
            policy = self.policy.toml(),
            iss = self.issuer.url(),
            ca = self.ca.ca_path(),
            key = self.dir.path().join("state.key"),
        );
        let mut edit = common::TomlEdit::of(&common::config_toml(&self.upstream.url(), &extra)).set("mode", mode);
        if let Some(log) = log {
            edit = edit.set("log.decisions", log.display().to_string());
        }
        let text = edit.text();
        Config::parse(&text, "caller limits test", Path::new(".")).unwrap()
    }

    /// An access token for user `sub`.
    fn token(&self, sub: &str) -> String {
        self.issuer.rsa.sign(&self.issuer.claims_with(AUD, json!({"sub": sub, "jti": uuid::Uuid::new_v4().to_string()})))
    }

    /// How many `payments.send` calls carrying `marker` reached the backend.
    fn executed(&self, marker: &str) -> usize {
        self.upstream.seen().iter().filter(|s| String::from_utf8_lossy(&s.body).contains(marker)).count()
    }
}

/// `POST /mcp` with `body`, as the holder of `token` (none: a caller with no verified identity).
async fn post(gw: &Gateway, token: Option<&str>, headers: &[(&str, &str)], body: &str) -> reqwest::Response {
    let mut req = client().post(gw.url("/mcp")).header("host", AUTHORITY).header("content-type", "application/json").body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

/// An exactly-once payment with `Idempotency-Key: "key"`, marked so the backend's copy can be found.
async fn pay(gw: &Gateway, token: &str, key: &str) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "payments.send", "arguments": {"marker": format!("pay-{key}")}}});
    post(gw, Some(token), &[("idempotency-key", &format!("\"{key}\""))], &body.to_string()).await
}

/// 429 `caller_limit_exceeded` naming `setting`, with a `Retry-After` of at least one second
/// and at most `at_most` seconds, and no session id.
async fn assert_caller_limit(resp: reqwest::Response, setting: &str, at_most: u64) {
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=at_most).contains(&retry), "Retry-After {retry}");
    assert!(resp.headers().get("mcp-session-id").is_none(), "a refused session is not handed out");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "caller_limit_exceeded");
    assert!(body["reason"].as_str().unwrap().contains(setting), "{body}");
}

/// One token sends ten payments with fresh keys: three run (its share), seven are refused with
/// 429; on `gw2` (another instance, when given) too. Another user's exactly-once call still runs
/// once and is replayed, and the flooding token's own entries still answer it.
async fn flood_the_journal(w: &World, gw: &Gateway, gw2: &Gateway) {
    let mallory = w.token("mallory");
    let mut statuses = Vec::new();
    for i in 0..10 {
        let resp = pay(if i % 2 == 0 { gw } else { gw2 }, &mallory, &format!("flood-{i}")).await;
        statuses.push(resp.status().as_u16());
        if resp.status() == 429 {
            // The recorded answers live 24 h: the first leaves then.
            assert_caller_limit(resp, "idempotency.max_entries_per_caller", 24 * 3600).await;
        }
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "its share, no more: {statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 7, "{statuses:?}");
    assert_eq!((0..10).map(|i| w.executed(&format!("\"pay-flood-{i}\""))).sum::<usize>(), 3, "refused calls never reach the backend");
    let bob = w.token("bob");
    let first = pay(gw2, &bob, "bob-1").await;
    assert_eq!(first.status(), 200, "another user's exactly-once call runs");
    let retry = pay(gw, &bob, "bob-1").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true", "and is replayed, not run again");
    assert_eq!(w.executed("\"pay-bob-1\""), 1);
    let own = statuses.iter().position(|s| *s == 200).unwrap();
    let again = pay(gw, &mallory, &format!("flood-{own}")).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true", "the flooding caller's own entries still answer it");
}

#[tokio::test]
async fn one_token_cannot_fill_the_idempotency_journal_for_everyone() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "")).await;
    flood_the_journal(&w, &gw, &gw).await;
    gw.shutdown().await;
}

/// `initialize` as `token`.
async fn initialize(gw: &Gateway, token: Option<&str>) -> reqwest::Response {
    post(gw, token, &[], INITIALIZE).await
}

/// One token opens sessions until refused: two are bound (its share of six), the rest get 429
/// with no session id; another user and an anonymous client still open sessions; ending one
/// of the token's sessions frees its slot.
async fn flood_the_sessions(w: &World, gw: &Gateway, gw2: &Gateway) {
    let mallory = w.token("mallory");
    let mut opened = Vec::new();
    for i in 0..5 {
        let resp = initialize(if i % 2 == 0 { gw } else { gw2 }, Some(&mallory)).await;
        if resp.status() == 200 {
            opened.push(resp.headers()["mcp-session-id"].to_str().unwrap().to_owned());
        } else {
            assert_caller_limit(resp, "limits.max_sessions_per_caller", 24 * 3600 * 5 / 4).await;
        }
    }
    assert_eq!(opened.len(), 2, "its share of sessions, no more");
    let bob = w.token("bob");
    let resp = initialize(gw2, Some(&bob)).await;
    assert_eq!(resp.status(), 200, "another user opens a session");
    let session = resp.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_eq!(post(gw, Some(&bob), &[("mcp-session-id", &session)], list).await.status(), 200, "and uses it");
    assert_eq!(initialize(gw, None).await.status(), 200, "a client with no credentials has its own bucket (its address)");
    let ended = client().delete(gw.url("/mcp")).header("host", AUTHORITY).header("mcp-session-id", &opened[0]).bearer_auth(&mallory).send().await.unwrap();
    assert_eq!(ended.status(), 200);
    assert_eq!(initialize(gw2, Some(&mallory)).await.status(), 200, "an ended session frees its slot");
}

#[tokio::test]
async fn one_token_cannot_hold_every_session() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "")).await;
    flood_the_sessions(&w, &gw, &gw).await;
    // Callers with no verified identity share one bucket per address: two, then 429.
    assert_eq!(initialize(&gw, None).await.status(), 200);
    assert_caller_limit(initialize(&gw, None).await, "limits.max_sessions_per_caller", 24 * 3600 * 5 / 4).await;
    gw.shutdown().await;
}

/// A `payments.approve` call as `token` with `n` as its argument (each `n` is another call).
async fn ask_approval(gw: &Gateway, token: &str, n: u64) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "payments.approve", "arguments": {"n": n}}});
    post(gw, Some(token), &[], &body.to_string()).await
}

async fn link_issued(resp: reqwest::Response) -> bool {
    resp.status() == 200 && resp.json::<Value>().await.unwrap()["error"]["code"] == -32042
}

#[tokio::test]
async fn one_user_cannot_queue_every_approval() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "")).await;
    let mallory = w.token("mallory");
    assert!(link_issued(ask_approval(&gw, &mallory, 1).await).await);
    assert!(link_issued(ask_approval(&gw, &mallory, 2).await).await);
    // Links live 5 minutes: the first pending one leaves by then.
    assert_caller_limit(ask_approval(&gw, &mallory, 3).await, "approvals.max_pending_per_caller", 300).await;
    assert!(link_issued(ask_approval(&gw, &mallory, 1).await).await, "a pending call still gets its link");
    assert!(link_issued(ask_approval(&gw, &w.token("bob"), 3).await).await, "another user still gets a link");
    gw.shutdown().await;
}

#[tokio::test]
async fn the_bounds_hold_in_monitor_mode() {
    let w = World::new().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(w.config_logging("monitor", "", Some(&log))).await;
    let mallory = w.token("mallory");
    for i in 0..3 {
        assert_eq!(pay(&gw, &mallory, &format!("mon-{i}")).await.status(), 200);
    }
    assert_caller_limit(pay(&gw, &mallory, "mon-3").await, "idempotency.max_entries_per_caller", 24 * 3600).await;
    assert_eq!(w.executed("\"pay-mon-3\""), 0, "refused, not forwarded as would-deny");
    for _ in 0..2 {
        assert_eq!(initialize(&gw, Some(&mallory)).await.status(), 200);
    }
    assert_caller_limit(initialize(&gw, Some(&mallory)).await, "limits.max_sessions_per_caller", 24 * 3600 * 5 / 4).await;
    assert_eq!(pay(&gw, &w.token("bob"), "mon-bob").await.status(), 200, "other callers are unaffected");
    // 3 payments, the refused one, 2 sessions, the refused one, bob's payment.
    let lines = common::wait_for_decision_lines(&log, 8).await;
    let refused: Vec<(Value, Value)> =
        lines.iter().filter(|l| l["error"] == "caller_limit_exceeded").map(|l| (l["outcome"].clone(), l["status"].clone())).collect();
    assert_eq!(refused, vec![(json!("deny"), json!(429)); 2], "logged as refused, not would_deny: {lines:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn two_instances_on_redis_share_each_callers_bound() {
    let redis = RedisServer::start();
    let w = World::new().await;
    let state = format!("store = {:?}\nprefix = \"bounds-{}:\"\n", redis.url(), uuid::Uuid::new_v4().simple());
    let (a, b) = (Gateway::start(w.config("enforce", &state)).await, Gateway::start(w.config("enforce", &state)).await);
    flood_the_journal(&w, &a, &b).await;
    flood_the_sessions(&w, &a, &b).await;
    let mallory = w.token("mallory");
    assert!(link_issued(ask_approval(&a, &mallory, 1).await).await);
    assert!(link_issued(ask_approval(&b, &mallory, 2).await).await);
    assert_caller_limit(ask_approval(&a, &mallory, 3).await, "approvals.max_pending_per_caller", 300).await;
    assert!(link_issued(ask_approval(&b, &w.token("bob"), 3).await).await);
    a.shutdown().await;
    b.shutdown().await;
}

#[test]
fn per_caller_bounds_are_checked_like_their_neighbours() {
    let bad = common::config_toml(
        "http://127.0.0.1:1",
        "[idempotency]\nmax_entries = 10\nmax_entries_per_caller = 11\n[limits]\nmax_sessions_per_caller = 0\n[approvals]\nmax_pending_per_caller = 0\n",
    );
    let err = Config::parse(&bad, "bad bounds", Path::new(".")).unwrap_err().to_string();
    for field in ["idempotency.max_entries_per_caller", "limits.max_sessions_per_caller", "approvals.max_pending_per_caller"] {
        assert!(err.contains(field), "{field} not named: {err}");
    }
}
