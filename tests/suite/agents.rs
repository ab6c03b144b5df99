//! The example agents of examples/agents/, on the official MCP SDKs (Python `mcp`, TypeScript
//! `@modelcontextprotocol/sdk`), against a real gateway in enforce mode: `portcullis keygen`
//! writes the key, an HTTPS server publishes the directory it wrote, a real issuer signs a
//! token bound to that key (DPoP), and the example backend answers. Every request the SDK
//! sends (initialize, notifications/initialized, the GET stream, tools/list, tools/call,
//! DELETE) must be verified, as the decision log says; refusals, `Retry-After` and a person's
//! approval must reach the agent's user.
//!
//! scripts/test.sh installs the SDKs, pinned, under target/agents and names them in
//! `PORTCULLIS_AGENTS_PYTHON` (the venv's python) and `PORTCULLIS_AGENTS_NODE` (the folder
//! holding node_modules). Without them the tests say they were skipped; in CI they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::backend::Backend;
use common::issuer::{unix_now, Issuer};
use common::pki::{HttpsServer, TestCa};
use common::Gateway;
use portcullis::config::Config;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");
/// The gateway's public URL: what tokens name as audience and DPoP proofs as `htu`.
const PUBLIC_URL: &str = "https://mcp.example.com/mcp";
const USER: &str = "user-1842";
/// (HTTP method, MCP method) of what an SDK sends in a session that lists the tools and calls
/// one: its own initialize, initialized notification, GET stream and DELETE, and the two calls.
const SDK_REQUESTS: [(&str, &str); 6] =
    [("POST", "initialize"), ("POST", "notifications/initialized"), ("POST", "tools/list"), ("POST", "tools/call"), ("GET", ""), ("DELETE", "")];
/// Longest an agent run may take.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Payments wait for a person's approval; `tools/list` and `files.read` share a quota of one
/// call per 3 s, so a run that lists the tools and then reads a file is told to wait.
const POLICY: &str = r#"package portcullis
import rego.v1
default decision := {"allow": true}
decision := {"allow": true, "approval": {"message": "Send the payment?"}} if input.mcp.tool == "payments.send"
decision := {"allow": true, "quotas": [{"key": "list-and-read", "limit": 1, "per": "3s"}]} if input.mcp.method == "tools/list"
decision := {"allow": true, "quotas": [{"key": "list-and-read", "limit": 1, "per": "3s"}]} if input.mcp.tool == "files.read"
"#;

#[derive(Debug, Clone, Copy)]
enum Sdk {
    Python,
    TypeScript,
}

impl Sdk {
    /// The command that runs this SDK's example agent, or `None` (saying so) where
    /// scripts/test.sh has not installed the SDK, except in CI, which must run it.
    fn command(self) -> Option<Agent> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let (var, what) = match self {
            Sdk::Python => ("PORTCULLIS_AGENTS_PYTHON", "the venv python with the mcp SDK"),
            Sdk::TypeScript => ("PORTCULLIS_AGENTS_NODE", "the folder whose node_modules hold @modelcontextprotocol/sdk"),
        };
        let Some(installed) = std::env::var_os(var).map(PathBuf::from) else {
            assert!(std::env::var_os("CI").is_none(), "CI runs the {self:?} agent test: scripts/test.sh installs the SDK and sets {var}");
            println!("SKIPPED the {self:?} agent test: run scripts/test.sh, which installs the SDK and sets {var}");
            return None;
        };
        match self {
            Sdk::Python => {
                assert!(installed.is_file(), "{var} = {} is not {what}; run scripts/test.sh", installed.display());
                let mut cmd = tokio::process::Command::new(installed);
                cmd.arg(root.join("examples/agents/python/agent.py"));
                Some(Agent { cmd, _copy: None })
            }
            Sdk::TypeScript => {
                let tsx = installed.join("node_modules/tsx/dist/cli.mjs");
                assert!(tsx.is_file(), "{var} = {} is not {what} (no tsx); run scripts/test.sh", installed.display());
                // The agent file is used as a user would: copied next to the installed packages.
                let copy = tempfile::Builder::new().prefix("agent-").suffix(".ts").tempfile_in(&installed).unwrap();
                std::fs::copy(root.join("examples/agents/typescript/agent.ts"), copy.path()).unwrap();
                let mut cmd = tokio::process::Command::new("node");
                cmd.arg(tsx).arg(copy.path());
                Some(Agent { cmd, _copy: Some(copy) })
            }
        }
    }
}

/// An agent command, and the copy of the agent file it runs (removed when dropped).
struct Agent {
    cmd: tokio::process::Command,
    _copy: Option<tempfile::NamedTempFile>,
}

/// keygen → directory over HTTPS → gateway (enforce; signatures, token and DPoP required;
/// [`POLICY`]; approvals) → example backend.
struct World {
    gateway: Gateway,
    backend: Backend,
    directory: HttpsServer,
    issuer: Issuer,
    ca: TestCa,
    keys: tempfile::TempDir,
    keyid: String,
    _policy: common::policy::PolicyDir,
    log: PathBuf,
}

impl World {
    async fn start() -> World {
        let keys = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(BIN).args(["keygen", "--out", keys.path().to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let keyid = String::from_utf8(out.stdout).unwrap().lines().find_map(|l| l.strip_prefix("keyid:")).unwrap().trim().to_owned();
        let ca = TestCa::new();
        let directory = crate::client::serve_dir(&ca, keys.path().to_owned()).await;
        let issuer = Issuer::start(&ca).await;
        let backend = Backend::start("127.0.0.1:0".parse::<SocketAddr>().unwrap()).await.unwrap();
        let token = issuer.rsa.sign(&issuer.bound_claims(PUBLIC_URL, &keyid));
        std::fs::write(keys.path().join("token"), token).unwrap();
        std::fs::write(keys.path().join("state.key"), [7u8; 32]).unwrap();
        let policy = common::policy::PolicyDir::new(POLICY);
        let log = keys.path().join("decisions.log");
        let extra = format!(
            "{policy}\n[signatures]\nrequired = true\ntrusted_agents = [{origin:?}]\ndirectory_ca = {ca_path:?}\n\
             [oauth]\nrequired = true\nissuer = {iss:?}\nissuer_ca = {ca_path:?}\ndpop = true\nrequire_agent_key_binding = true\n\
             [approvals]\nenabled = true\nclient_id = \"portcullis\"\nttl = \"5m\"\nmax_login_age = \"10m\"\nstate_key_file = {state_key:?}\n",
            policy = policy.toml(),
            origin = directory.origin(),
            ca_path = ca.ca_path(),
            iss = issuer.url(),
            state_key = keys.path().join("state.key"),
        );
        let text =
            common::TomlEdit::of(&common::config_toml(&format!("http://{}", backend.addr), &extra)).set("log.decisions", log.display().to_string()).text();
        let gateway = Gateway::start(Config::parse(&text, "agents test", Path::new(".")).unwrap()).await;
        World { gateway, backend, directory, issuer, ca, keys, keyid, _policy: policy, log }
    }

    /// The agent's arguments: the gateway, the key keygen wrote, its directory's origin, the
    /// bound token with DPoP proofs naming the public URL, then `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--url".into(),
            self.gateway.url("/mcp"),
            "--key".into(),
            self.keys.path().join("agent.jwk").display().to_string(),
            "--agent".into(),
            self.directory.origin(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn with_token(&self, extra: &[&str]) -> Vec<String> {
        let token_file = self.keys.path().join("token").display().to_string();
        let mut args = self.args(&["--token-file", &token_file, "--dpop", "--dpop-htu", PUBLIC_URL]);
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Every decision-log line, once the gateway has stopped (shutdown writes them all).
    async fn stop(self) -> Vec<Value> {
        self.gateway.shutdown().await;
        self.backend.stop();
        common::decision_lines(&self.log)
    }
}

/// What an agent run printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn run(sdk: Sdk, args: &[String]) -> Option<Run> {
    let mut agent = sdk.command()?;
    let out = tokio::time::timeout(RUN_LIMIT, agent.cmd.args(args).kill_on_drop(true).output()).await.expect("the agent finishes within 60 s").unwrap();
    Some(Run { ok: out.status.success(), stdout: String::from_utf8_lossy(&out.stdout).into(), stderr: String::from_utf8_lossy(&out.stderr).into() })
}

/// Every line is of a signed request whose agent and key were verified (the log names them
/// only then) and whose token's user was verified.
fn assert_verified(lines: &[Value], origin: &str, keyid: &str) {
    for l in lines {
        assert_eq!(l["signed"], true, "{l}");
        assert_eq!(l["agent"], origin, "{l}");
        assert_eq!(l["keyid"], keyid, "{l}");
        assert_eq!(l["sub"], USER, "{l}");
    }
}

/// (HTTP method, MCP method) of each line.
fn requests(lines: &[Value]) -> BTreeSet<(String, String)> {
    lines.iter().map(|l| (l["method"].as_str().unwrap_or("?").to_owned(), l["mcp_method"].as_str().unwrap_or("").to_owned())).collect()
}

async fn every_request_the_sdk_sends_is_verified(sdk: Sdk) {
    let w = World::start().await;
    let (origin, keyid) = (w.directory.origin(), w.keyid.clone());
    let Some(r) = run(sdk, &w.with_token(&["--tool", "weather.get", "--arguments", r#"{"city": "Paris"}"#])).await else { return };
    assert!(r.ok, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("tools: weather.get payments.send files.read"), "{}", r.stdout);
    assert!(r.stdout.contains("weather.get: Sunny in Paris"), "{}", r.stdout);
    let lines = w.stop().await;
    assert_verified(&lines, &origin, &keyid);
    for l in &lines {
        assert_eq!(l["findings"], serde_json::json!([]), "{l}");
        assert_eq!(l["outcome"], "allow", "{l}");
        assert_eq!(l["binding"], "agent_key", "the DPoP proof is by the signing key: {l}");
    }
    let seen = requests(&lines);
    for expected in SDK_REQUESTS {
        assert!(seen.contains(&(expected.0.to_owned(), expected.1.to_owned())), "{sdk:?} sent no {expected:?}: {seen:?}");
    }
}

#[tokio::test]
async fn python_agent_has_every_request_verified() {
    every_request_the_sdk_sends_is_verified(Sdk::Python).await;
}

#[tokio::test]
async fn typescript_agent_has_every_request_verified() {
    every_request_the_sdk_sends_is_verified(Sdk::TypeScript).await;
}

/// A refusal's error and reason are shown; an approval link is printed for the person, and the
/// call retried until approved; a 429's `Retry-After` is waited out and the call retried.
async fn the_gateways_answers_reach_the_user(sdk: Sdk) {
    let w = World::start().await;
    let (origin, keyid) = (w.directory.origin(), w.keyid.clone());

    // No token: the gateway's error and reason, and a failed run.
    let Some(r) = run(sdk, &w.args(&[])).await else { return };
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.stderr.contains("gateway refused POST /mcp: 401 oauth_required: "), "{}", r.stderr);

    // A payment waits for the person: the link is printed, the person approves, the retry passes.
    let args = w.with_token(&["--tool", "payments.send", "--arguments", r#"{"to": "ACME", "amount": 500}"#, "--approval-poll", "0.2"]);
    let mut agent = sdk.command().unwrap();
    let mut child = agent.cmd.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let link = tokio::time::timeout(RUN_LIMIT, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            said.push_str(&line);
            said.push('\n');
            if let Some(url) = line.trim().strip_prefix("open ") {
                return url.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("the agent ended without printing a link: {said}");
    })
    .await
    .expect("an approval link within 60 s");
    assert!(said.contains("APPROVAL NEEDED: Send the payment?"), "{said}");
    assert!(link.starts_with("https://mcp.example.com/portcullis/approvals/"), "{link}");

    w.issuer.log_in_as(USER, unix_now());
    let pem = std::fs::read(w.ca.ca_path()).unwrap();
    let mut browser = common::browser::Browser::trusting(&pem, "https://mcp.example.com", &format!("http://{}", w.gateway.addr)).unwrap();
    let page = browser.get(&link).await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = page.csrf().unwrap().to_owned();
    let done = browser.post_form(&link, &[("csrf", &csrf), ("decision", "approve")]).await.unwrap();
    assert_eq!(done.status, 200, "{}", done.body);

    let status = tokio::time::timeout(RUN_LIMIT, child.wait()).await.expect("the agent finishes after approval").unwrap();
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).await.unwrap();
    while let Some(line) = stderr.next_line().await.unwrap() {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(status.success(), "stdout: {stdout}\nstderr: {said}");
    assert!(stdout.contains("payments.send: Sent 500 USD to ACME"), "{stdout}");
    assert_eq!(said.matches("APPROVAL NEEDED").count(), 1, "the link is printed once: {said}");

    // tools/list spends the quota of 3 s, so the files.read right after it gets 429: the agent
    // waits as Retry-After says and the retry passes.
    let read = w.with_token(&["--tool", "files.read", "--arguments", r#"{"owner": "user-1842", "path": "notes.txt"}"#]);
    let r = run(sdk, &read).await.unwrap();
    assert!(r.ok && r.stdout.contains("files.read: Contents of notes.txt"), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("gateway refused POST /mcp: 429 rate_limit_exceeded: "), "{}", r.stderr);
    assert!(r.stderr.contains("retrying in "), "{}", r.stderr);

    let lines = w.stop().await;
    let signed: Vec<Value> = lines.iter().filter(|l| l["method"].is_string() && l["outcome"] != "approval_approved").cloned().collect();
    // The run without a token is verified as to the agent; it has no user.
    let (tokenless, with_token): (Vec<Value>, Vec<Value>) = signed.into_iter().partition(|l| l["error"] == "oauth_required");
    assert!(!tokenless.is_empty() && tokenless.iter().all(|l| l["agent"] == origin.as_str() && l["keyid"] == keyid.as_str()), "{tokenless:?}");
    assert_verified(&with_token, &origin, &keyid);
    assert!(with_token.iter().any(|l| l["outcome"] == "approval_required"), "{with_token:?}");
    assert!(with_token.iter().any(|l| l["approved_by"] == USER && l["tool"] == "payments.send" && l["outcome"] == "allow"), "{with_token:?}");
    assert!(with_token.iter().any(|l| l["error"] == "rate_limit_exceeded" && l["status"] == 429), "{with_token:?}");
}

#[tokio::test]
async fn python_agent_shows_refusals_honours_retry_after_and_waits_for_approval() {
    the_gateways_answers_reach_the_user(Sdk::Python).await;
}

#[tokio::test]
async fn typescript_agent_shows_refusals_honours_retry_after_and_waits_for_approval() {
    the_gateways_answers_reach_the_user(Sdk::TypeScript).await;
}
