//! Rollout: monitor mode judges every stage (each would-deny is a finding in the decision log,
//! the tool is known whenever the body parses) and `[mode]` enforces stage group by stage group.
//! Real HTTPS key directory, real HTTPS token issuer, real backend, real gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::PathBuf;

use common::directory::KeyDirectory;
use common::issuer::Issuer;
use common::pki::TestCa;
use common::policy::{rego, tool_call, PolicyDir};
use common::{client, decision_lines, Gateway, Upstream};
use ed25519_dalek::SigningKey;
use portcullis::config::Config;
use portcullis::signature::Signer;
use portcullis_wire::UnixTime;
use serde_json::Value;

const AUD: &str = "https://mcp.example.com/mcp";
const POLICY: &str = r#"default decision := {"allow": true}
decision := {"allow": false, "reason": "payments_blocked", "rule": "no_payments"} if input.mcp.tool == "payments.send""#;

struct Setup {
    _ca: TestCa,
    _dir: tempfile::TempDir,
    _policy: PolicyDir,
    _directory: KeyDirectory,
    issuer: Issuer,
    upstream: Upstream,
    gw: Gateway,
    log: PathBuf,
    trusted: Signer,
    stranger: Signer,
}

impl Setup {
    /// `mode` is the `mode` setting as TOML: `"monitor"` or a table of groups.
    async fn start(mode: &str) -> Setup {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let upstream = Upstream::start().await;
        let key = SigningKey::from_bytes(&rand::random());
        let directory = KeyDirectory::start(&ca, &[key.verifying_key()]).await;
        let policy = PolicyDir::new(&rego(POLICY));
        let (dir, log) = common::temp_path("decisions.log");
        let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), ""))
            .set("mode", common::toml_edit::value(mode))
            .set("log.decisions", log.display().to_string())
            .text()
            + &format!(
                "\n[signatures]\nrequired = true\ntrusted_agents = [{origin:?}]\ndirectory_ca = {ca_path:?}\n[oauth]\nrequired = true\nissuer = \"{iss}\"\nissuer_ca = {ca_path:?}\nscopes_supported = [\"mcp:tools\"]\n{policy}",
                origin = directory.origin(),
                ca_path = ca.ca_path(),
                iss = issuer.url(),
                policy = policy.toml(),
            );
        let gw = Gateway::start(Config::parse(&text, "rollout test", std::path::Path::new(".")).unwrap()).await;
        let trusted = Signer::new(key, directory.origin()).unwrap();
        let stranger = Signer::new(SigningKey::from_bytes(&rand::random()), "https://unknown-agent.example").unwrap();
        Setup { _ca: ca, _dir: dir, _policy: policy, _directory: directory, issuer, upstream, gw, log, trusted, stranger }
    }

    fn token(&self) -> String {
        self.issuer.rsa.sign(&self.issuer.claims(AUD))
    }

    /// Builds a request (signed by `signer` when given, with `token` when given).
    fn request(&self, body: &str, signer: Option<&Signer>, token: Option<&str>) -> http::HeaderMap {
        let mut req =
            http::Request::builder().method("POST").uri(self.gw.url("/mcp")).header("content-type", "application/json").body(body.as_bytes().to_vec()).unwrap();
        if let Some(t) = token {
            req.headers_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        if let Some(s) = signer {
            s.sign_request(&mut req, UnixTime::now()).unwrap();
        }
        req.into_parts().0.headers
    }

    async fn send_headers(&self, body: &str, headers: http::HeaderMap) -> u16 {
        client().post(self.gw.url("/mcp")).headers(headers).body(body.to_owned()).send().await.unwrap().status().as_u16()
    }

    async fn send(&self, body: &str, signer: Option<&Signer>, token: Option<&str>) -> u16 {
        self.send_headers(body, self.request(body, signer, token)).await
    }

    async fn lines(self) -> (Vec<Value>, usize) {
        let forwarded = self.upstream.seen().len();
        self.gw.shutdown().await;
        (decision_lines(&self.log), forwarded)
    }
}

/// `(stage, error)` pairs.
type Findings = Vec<(String, String)>;

/// `(stage, error)` of each finding of a decision-log line.
fn findings(line: &Value) -> Vec<(String, String)> {
    line["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings array: {line}"))
        .iter()
        .map(|f| (f["stage"].as_str().unwrap().to_owned(), f["error"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

#[tokio::test]
async fn monitor_mode_judges_every_stage_and_logs_the_tool() {
    let s = Setup::start("\"monitor\"").await;
    let token = s.token();
    let weather = tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"}));
    let payments = tool_call(2, "payments.send", serde_json::json!({"amount": 5}));

    assert_eq!(s.send(&weather, None, Some(&token)).await, 200, "unsigned");
    assert_eq!(s.send(&payments, None, Some(&token)).await, 200, "unsigned and denied by policy");
    assert_eq!(s.send(&weather, Some(&s.stranger), Some(&token)).await, 200, "signed by an untrusted agent");
    let headers = s.request(&weather, Some(&s.trusted), Some(&token));
    assert_eq!(s.send_headers(&weather, headers.clone()).await, 200, "first use");
    assert_eq!(s.send_headers(&weather, headers).await, 200, "replayed");
    assert_eq!(s.send(&weather, Some(&s.trusted), None).await, 200, "no token");
    assert_eq!(s.send(&payments, Some(&s.trusted), Some(&token)).await, 200, "policy denies");
    let (lines, forwarded) = s.lines().await;
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(forwarded, 7, "monitor mode forwards everything");

    let expect: [(&str, &str, Findings); 7] = [
        ("would_deny", "weather.get", pairs(&[("signature", "invalid_agent_credentials")])),
        ("would_deny", "payments.send", pairs(&[("signature", "invalid_agent_credentials"), ("policy", "agent_access_denied")])),
        ("would_deny", "weather.get", pairs(&[("key", "invalid_agent_credentials")])),
        ("allow", "weather.get", vec![]),
        ("would_deny", "weather.get", pairs(&[("replay", "replayed_signature")])),
        ("would_deny", "weather.get", pairs(&[("token", "oauth_required")])),
        ("would_deny", "payments.send", pairs(&[("policy", "agent_access_denied")])),
    ];
    for (line, (outcome, tool, found)) in lines.iter().zip(expect) {
        assert_eq!(line["outcome"], outcome, "{line}");
        assert_eq!(line["tool"], tool, "the tool is logged whenever the body parses: {line}");
        assert_eq!(line["mcp_method"], "tools/call", "{line}");
        assert_eq!(findings(line), found, "{line}");
        assert_eq!(line["mode"], "monitor", "{line}");
        if let Some((_, first)) = found.first() {
            assert_eq!(line["error"], first.as_str(), "the first finding is the line's error: {line}");
        }
    }
    assert_eq!(lines[0]["signed"], false);
    assert_eq!(lines[2]["signed"], true, "signed, not verified");
    assert!(lines[2]["agent"].is_null() && lines[4]["agent"].is_null(), "neither an untrusted nor a replayed signature names the agent");
    assert!(lines[3]["agent"].is_string() && lines[6]["agent"].is_string());
    assert_eq!(lines[1]["rule"], "no_payments", "the policy ran for the unsigned call: {}", lines[1]);
}

/// A copy of a signed request whose body was changed on the way arrives first: in monitor mode
/// it is a digest finding, and it must not use up the real request's signature, which then
/// passes as a verified first use.
#[tokio::test]
async fn a_tampered_copy_does_not_use_up_the_real_signature_in_monitor_mode() {
    let s = Setup::start("\"monitor\"").await;
    let token = s.token();
    let weather = tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"}));
    let headers = s.request(&weather, Some(&s.trusted), Some(&token));
    let tampered = weather.replace("Oslo", "Rome");
    assert_eq!(s.send_headers(&tampered, headers.clone()).await, 200, "tampered copy: only logged");
    assert_eq!(s.send_headers(&weather, headers).await, 200, "the real request");
    let (lines, _) = s.lines().await;
    assert_eq!(findings(&lines[0]), pairs(&[("digest", "invalid_agent_credentials")]), "{}", lines[0]);
    assert!(lines[0]["agent"].is_null(), "{}", lines[0]);
    assert_eq!(lines[1]["outcome"], "allow", "the real request is not a replay: {}", lines[1]);
    assert!(lines[1]["agent"].is_string(), "{}", lines[1]);
}

#[tokio::test]
async fn identity_enforced_while_policies_are_watched() {
    let s = Setup::start("{ default = \"monitor\", identity = \"enforce\" }").await;
    let token = s.token();
    let payments = tool_call(2, "payments.send", serde_json::json!({"amount": 5}));
    assert_eq!(s.send(&payments, None, Some(&token)).await, 401, "unsigned: refused by the enforcing identity group");
    assert_eq!(s.send(&payments, Some(&s.trusted), Some(&token)).await, 200, "policy denial only logged");
    let (lines, forwarded) = s.lines().await;
    assert_eq!(forwarded, 1, "only the signed call reached the backend");
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["mode"].as_str()), (Some("deny"), Some("staged")), "{}", lines[0]);
    assert_eq!(lines[0]["enforcing"], serde_json::json!(["identity"]));
    assert_eq!(findings(&lines[0]), pairs(&[("signature", "invalid_agent_credentials")]), "enforcement stops at the first failure: {}", lines[0]);
    assert!(lines[0]["tool"].is_null(), "no JSON is parsed before an enforced identity passes: {}", lines[0]);
    assert_eq!(lines[1]["outcome"], "would_deny");
    assert_eq!(findings(&lines[1]), pairs(&[("policy", "agent_access_denied")]));
}

#[tokio::test]
async fn policies_enforced_while_identity_is_watched() {
    let s = Setup::start("{ default = \"monitor\", policy = \"enforce\" }").await;
    let token = s.token();
    let weather = tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"}));
    let payments = tool_call(2, "payments.send", serde_json::json!({"amount": 5}));
    assert_eq!(s.send(&weather, None, Some(&token)).await, 200, "unsigned: only logged");
    assert_eq!(s.send(&payments, None, Some(&token)).await, 403, "the policy group enforces");
    let (lines, forwarded) = s.lines().await;
    assert_eq!(forwarded, 1, "the denied payment never reached the backend");
    assert_eq!(lines[0]["outcome"], "would_deny");
    assert_eq!(findings(&lines[0]), pairs(&[("signature", "invalid_agent_credentials")]));
    assert_eq!(lines[1]["outcome"], "deny");
    assert_eq!(lines[1]["error"], "agent_access_denied", "the enforcing group's finding decides: {}", lines[1]);
    assert_eq!(
        findings(&lines[1]),
        pairs(&[("signature", "invalid_agent_credentials"), ("policy", "agent_access_denied")]),
        "the watched finding stays listed"
    );
}

/// What README "Embedded defaults" and `src/default_config.toml` promise: monitor mode, every
/// unsigned call is `would_deny` for its missing signature and forwarded; the bundled policy
/// still runs and adds its own finding for a tool outside the read-tool list.
#[tokio::test]
async fn the_embedded_defaults_do_what_the_readme_says() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let text = common::TomlEdit::of(portcullis::config::EMBEDDED_DEFAULT)
        .set("listen.addr", "127.0.0.1:0")
        .set("admin.addr", "127.0.0.1:0")
        .set("upstream.url", upstream.url())
        .set("log.decisions", log.display().to_string())
        .text();
    let gw = Gateway::start(Config::parse(&text, "embedded defaults", std::path::Path::new(".")).unwrap()).await;
    let send = |body: String| client().post(gw.url("/mcp")).header("content-type", "application/json").body(body).send();
    assert_eq!(send(tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"}))).await.unwrap().status(), 200);
    assert_eq!(send(tool_call(2, "shell.exec", serde_json::json!({"cmd": "ls"}))).await.unwrap().status(), 200);
    let forwarded = upstream.seen().len();
    gw.shutdown().await;
    assert_eq!(forwarded, 2, "monitor mode blocks nothing");
    let lines = decision_lines(&log);
    assert_eq!(lines[0]["outcome"], "would_deny", "{}", lines[0]);
    assert_eq!(findings(&lines[0]), pairs(&[("signature", "invalid_agent_credentials")]), "a read tool passes the policy: {}", lines[0]);
    assert_eq!(findings(&lines[1]), pairs(&[("signature", "invalid_agent_credentials"), ("policy", "agent_access_denied")]), "{}", lines[1]);
    assert_eq!(lines[1]["findings"][1]["reason"], "tool_not_allowed", "{}", lines[1]);
}

/// docs/quickstart.md's path, command by command, in a scratch directory: the embedded config,
/// a key from `portcullis keygen --static-key` appended to it, `portcullis check`, and a signed
/// call with `portcullis request` that the gateway attributes to that agent.
#[tokio::test]
async fn the_quick_start_works_with_keygen_and_request_alone() {
    use std::process::Command;
    let bin = env!("CARGO_BIN_EXE_portcullis");
    let upstream = Upstream::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(bin).args(args).current_dir(scratch.path()).output().unwrap();
        assert!(out.status.success(), "portcullis {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let mut text = run(&["default-config"]);
    text.push_str(&run(&["keygen", "--out", "agent", "--static-key", "https://quickstart-agent.example"]));
    // What the guide's `sed` does (so it must still match), plus the ports and backend of this test.
    assert!(text.contains("decisions = \"stdout\""), "the guide's sed no longer matches the default config");
    let text = common::TomlEdit::of(&text.replace("decisions = \"stdout\"", "decisions = \"decisions.log\""))
        .set("listen.addr", "127.0.0.1:0")
        .set("admin.addr", "127.0.0.1:0")
        .set("upstream.url", upstream.url())
        .text();
    std::fs::write(scratch.path().join("gw.toml"), &text).unwrap();
    assert!(run(&["check", "--config", "gw.toml"]).contains("configuration is valid (mode = monitor)"));
    let gw = Gateway::start(Config::parse(&text, "quick start", scratch.path()).unwrap()).await;
    // Off the runtime's thread: the gateway under test runs on it.
    let (url, cwd) = (gw.url("/mcp"), scratch.path().to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args([
                "request",
                "--key",
                "agent/agent.jwk",
                "--agent",
                "https://quickstart-agent.example",
                "--mcp",
                "tools/call",
                "--tool",
                "weather.get",
                "--args",
                r#"{"city":"Oslo"}"#,
            ])
            .arg(url)
            .current_dir(cwd)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("HTTP/1.1 200"), "{stdout}");
    let seen = upstream.seen();
    assert_eq!(
        seen[0].headers.get("x-portcullis-agent").and_then(|v| v.to_str().ok()),
        Some("https://quickstart-agent.example"),
        "the backend is told who called"
    );
    gw.shutdown().await;
    let lines = decision_lines(&scratch.path().join("decisions.log"));
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["agent"].as_str()), (Some("allow"), Some("https://quickstart-agent.example")), "{}", lines[0]);
}

/// With nothing listening, `request` and `healthcheck` say so ("connection refused"), not only
/// "error sending request".
#[tokio::test]
async fn nothing_listening_is_named_as_connection_refused() {
    use std::process::Command;
    let bin = env!("CARGO_BIN_EXE_portcullis");
    let closed = common::closed_port().await;
    let scratch = tempfile::tempdir().unwrap();
    assert!(Command::new(bin).args(["keygen", "--out", "agent"]).current_dir(scratch.path()).status().unwrap().success());
    let out = Command::new(bin)
        .args(["request", "--key", "agent/agent.jwk", "--agent", "https://a.example", "--mcp", "tools/list"])
        .arg(format!("http://{closed}/mcp"))
        .current_dir(scratch.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert_eq!(out.status.code(), Some(2), "no answer: {stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
    let out = Command::new(bin).args(["healthcheck", "--url"]).arg(format!("http://{closed}/healthz")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(!out.status.success());
    assert!(stderr.contains("connection refused"), "{stderr}");
}
