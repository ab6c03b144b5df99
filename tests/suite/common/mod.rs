//! Test harness: the real gateway on 127.0.0.1:0, its config and decision-log helpers. The
//! world around it (upstream, test CA, key directory, issuer, Redis) is the
//! `portcullis-test-support` crate's, re-exported here under the names the tests use.
#![allow(dead_code, clippy::unwrap_used)]

pub mod policy;
pub mod toml_edit;

pub use portcullis_test_support::upstream::{Upstream, TEST_PATHS};
pub use portcullis_test_support::{backend, browser, directory, issuer, keys, logs, pki, redis};
pub use toml_edit::TomlEdit;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use portcullis::config::Config;
use portcullis::server::{self, Running};
use tokio::net::TcpListener;

/// Initialise tracing so a failing test prints the gateway's logs.
pub fn trace_init() {
    portcullis::telemetry::init_test_tracing("portcullis=debug,warn");
}

/// Every log line written on this test's thread (where the in-process gateway's tasks run), at
/// every level, span opens and closes included, until the guard is dropped: for tests that no
/// line quotes a secret.
pub fn capture_every_log_line() -> (logs::Lines, tracing::subscriber::DefaultGuard) {
    let lines = logs::Lines::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::NEW | tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    (lines, tracing::subscriber::set_default(subscriber))
}

/// A gateway config in front of `upstream_url`, with the given extra TOML appended.
pub fn config_toml(upstream_url: &str, extra: &str) -> String {
    format!(
        r#"
mode = "enforce"
[listen]
addr = "127.0.0.1:0"
public_url = "https://mcp.example.com/mcp"
[upstream]
url = "{upstream_url}"
connect_timeout = "1s"
response_timeout = "1s"
{TEST_PATHS}
[admin]
addr = "127.0.0.1:0"
[log]
decisions = "off"
level = "debug"
{extra}
"#
    )
}

/// Parses a config (the signature and token stages off unless `extra` turns them on).
pub fn config(upstream_url: &str, extra: &str) -> Config {
    let mut text = config_toml(upstream_url, extra);
    if !extra.contains("[signatures]") {
        text.push_str("\n[signatures]\nrequired = false\n");
    }
    if !extra.contains("[oauth]") {
        text.push_str("\n[oauth]\nrequired = false\n");
    }

    Config::parse(&text, "test config", std::path::Path::new(".")).unwrap()
}

/// Like [`config`], with stages 8–10 (MCP parse, policy, quotas) off: for tests of the proxy
/// itself, whose bodies need not be JSON-RPC.
pub fn config_without_policy(upstream_url: &str, extra: &str) -> Config {
    config(upstream_url, &format!("{extra}\n[policy]\nenabled = false\n"))
}

/// A running gateway started through the library entry point.
pub struct Gateway {
    pub running: Option<Running>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
}

impl Gateway {
    /// Starts `config` on a fresh 127.0.0.1 port. Tests address the gateway there, so that
    /// authority is listed as its own (`signatures.authority`) beside the configured ones.
    pub async fn start(mut config: Config) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        config.signatures.authority.push(listener.local_addr().unwrap().to_string());
        Gateway::start_on(config, listener).await
    }

    /// Starts `config` as written: its `signatures.authority` is exactly what it says.
    pub async fn start_exact(config: Config) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Gateway::start_on(config, listener).await
    }

    async fn start_on(config: Config, listener: TcpListener) -> Gateway {
        trace_init();
        let running = server::start_on(config, listener).await.unwrap();
        let addr = running.addr;
        let admin = running.admin_addr.unwrap();
        Gateway { running: Some(running), addr, admin }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// A plain HTTP client (no redirects, no proxies).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A temp file path inside a fresh temp dir (kept alive by the returned guard).
pub fn temp_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    (dir, p)
}

/// Reads the decision log lines written to `path` as JSON values. Complete once the gateway
/// has shut down (shutdown writes every queued line); while it runs, use
/// [`wait_for_decision_lines`].
pub fn decision_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The decision log lines in `path` once there are at least `n`, while the gateway runs: a
/// line is queued before the response is sent and written by the log's writer thread moments
/// later. Fails the test if they do not appear within 10 s.
pub async fn wait_for_decision_lines(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = decision_lines(path);
        if lines.len() >= n {
            return lines;
        }
        assert!(tokio::time::Instant::now() < deadline, "expected {n} decision-log lines in {} within 10 s, found {}: {lines:?}", path.display(), lines.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends raw bytes on a fresh connection and returns what the server answered (until it closes
/// the connection or `wait` passes).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An address nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// An MCP `initialize` request body.
pub const INITIALIZE: &str =
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}"#;

/// Opens an MCP session through `gw` (unsigned, no token) and returns the id the upstream
/// issued.
pub async fn initialize(gw: &Gateway) -> String {
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(INITIALIZE).send().await.unwrap();
    assert_eq!(resp.status(), 200, "initialize");
    resp.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// The gateway's Prometheus text.
pub async fn metrics(gw: &Gateway) -> String {
    client().get(gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap()
}
