//! Stage 9 through the real gateway: allow, deny with reason, scopes, policy errors, hot
#![allow(clippy::unwrap_used)]
//! reload (good and bad), monitor mode.
use crate::common;

use common::policy::{config_logging, eventually, rego, tool_call, PolicyDir};
use common::{client, config, Gateway, Upstream};
use serde_json::{json, Value};

async fn call(gw: &Gateway, tool: &str) -> reqwest::Response {
    client().post(gw.url("/mcp")).header("content-type", "application/json").body(tool_call(1, tool, json!({"n": 1}))).send().await.unwrap()
}

async fn refusal(resp: reqwest::Response) -> (u16, String, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    (status, body["error"].as_str().unwrap_or_default().to_owned(), body["reason"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn bundled_policy_allows_a_read_tool_for_an_unsigned_agent() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    assert_eq!(call(&gw, "search").await.status(), 200);
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn policy_denial_is_403_with_the_policy_reason_and_rule_in_the_log() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(config_logging(&upstream.url(), "", "enforce", &log)).await;
    let resp = call(&gw, "files.write").await;
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert_eq!(refusal(resp).await, (403, "agent_access_denied".into(), "tool_not_allowed".into()));
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
    let line = &common::decision_lines(&log)[0];
    assert_eq!((line["outcome"].as_str(), line["rule"].as_str(), line["tool"].as_str()), (Some("deny"), Some("tool_allow_list"), Some("files.write")));
}

#[tokio::test]
async fn required_scope_without_a_token_is_401_oauth_required() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true, "required_scopes": ["files:read"]}"#));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    let resp = call(&gw, "anything").await;
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer resource_metadata="), "{challenge}");
    assert_eq!(refusal(resp).await.0, 401);
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn malformed_decision_is_403_policy_error_never_an_allow() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": "true"}"#));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    assert_eq!(refusal(call(&gw, "search").await).await, (403, "agent_access_denied".into(), "policy_error".into()));
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn evaluation_error_is_403_policy_error() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": 10 / (input.mcp.arguments.n - 1) > 0}"#));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    assert_eq!(refusal(call(&gw, "search").await).await, (403, "agent_access_denied".into(), "policy_error".into()));
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn policy_that_does_not_compile_stops_the_gateway_from_starting() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new("package portcullis\nimport rego.v1\n\ndecision := {\"allow\": }\n");
    let err = portcullis::server::start(config(&upstream.url(), &p.toml())).await.expect_err("must not start");
    let msg = err.to_string();
    assert!(msg.contains("policy.paths") && msg.contains("policy.rego:4"), "{msg}");
}

#[tokio::test]
async fn hot_reload_applies_a_good_policy_and_keeps_the_old_one_when_the_new_one_is_bad() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true}"#));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    assert_eq!(call(&gw, "search").await.status(), 200);

    p.write(&rego(r#"decision := {"allow": false, "reason": "maintenance_window"}"#));
    assert!(eventually(|| async { call(&gw, "search").await.status() == 403 }).await, "good policy was not reloaded");
    assert_eq!(refusal(call(&gw, "search").await).await.2, "maintenance_window");
    // Requests allowed while the reload was pending reached the upstream; none after it.
    let forwarded_before_reload = upstream.seen().len();

    p.write("package portcullis\nimport rego.v1\ndecision := {\n");
    let metrics_url = gw.admin_url("/metrics");
    let reported =
        eventually(|| async { client().get(&metrics_url).send().await.unwrap().text().await.unwrap().contains("portcullis_policy_reload_errors_total 1") })
            .await;
    assert!(reported, "failed reload not counted");
    let metrics = client().get(&metrics_url).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_policy_last_reload_ok 0"), "{metrics}");
    let ready: Value = client().get(gw.admin_url("/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["ready"], true, "the old policy still serves");
    assert_eq!(ready["checks"]["policy"]["status"], "reload_failed");
    assert!(ready["checks"]["policy"]["error"].as_str().unwrap().contains("policy.rego"), "{ready}");
    // Still the previous (good) policy.
    assert_eq!(refusal(call(&gw, "search").await).await.2, "maintenance_window");
    assert_eq!(upstream.seen().len(), forwarded_before_reload);
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_forwards_a_denied_call_and_logs_would_deny_with_reason_and_rule() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(config_logging(&upstream.url(), "", "monitor", &log)).await;
    assert_eq!(call(&gw, "files.write").await.status(), 200);
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
    let line = &common::decision_lines(&log)[0];
    assert_eq!(line["outcome"], "would_deny");
    assert_eq!((line["error"].as_str(), line["reason"].as_str()), (Some("agent_access_denied"), Some("tool_not_allowed")));
    assert_eq!(line["rule"], "tool_allow_list");
}

#[tokio::test]
async fn embedded_default_config_builds_with_the_bundled_policy() {
    // The default (monitor mode, no signatures, no tokens) must start: its policy compiles and
    // an unsigned read-tool call is allowed, a write-tool call would be denied (and forwarded).
    let cfg = portcullis::config::Config::embedded_default().unwrap();
    assert_eq!(cfg.mode.as_str(), "monitor");
    portcullis::server::check(&cfg).unwrap();
}

#[tokio::test]
async fn a_reload_request_reloads_that_gateway_alone_when_file_watching_is_off() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true}"#));
    let unwatched = format!("{}watch = false\n", p.toml());
    let gw = Gateway::start(config(&upstream.url(), &unwatched)).await;
    let other = Gateway::start(config(&upstream.url(), &unwatched)).await;
    p.write(&rego(r#"decision := {"allow": false, "reason": "reloaded_on_request"}"#));
    assert_eq!(call(&gw, "search").await.status(), 200, "not watching: the file change alone does nothing");

    // What SIGHUP does, for this gateway only (a signal would reach every gateway in the process).
    gw.running.as_ref().unwrap().reload_policy();
    assert!(eventually(|| async { call(&gw, "search").await.status() == 403 }).await, "the reload request did not reload");
    assert_eq!(refusal(call(&gw, "search").await).await.2, "reloaded_on_request");
    assert_eq!(call(&other, "search").await.status(), 200, "the other gateway kept its policy");
    gw.shutdown().await;
    other.shutdown().await;
}

/// The binary reloads on SIGHUP sent to its own PID (not to the test process, where every
/// gateway of every concurrent test would reload).
#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_policy_of_the_running_binary_when_file_watching_is_off() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true}"#));
    let text = common::config_toml(&upstream.url(), &format!("{}watch = false\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n", p.toml()));
    let gw = process::Binary::run(&text);
    let call = |tool: &'static str| client().post(gw.url("/mcp")).header("content-type", "application/json").body(tool_call(1, tool, json!({"n": 1}))).send();
    assert_eq!(call("search").await.unwrap().status(), 200);
    p.write(&rego(r#"decision := {"allow": false, "reason": "reloaded_by_sighup"}"#));
    assert_eq!(call("search").await.unwrap().status(), 200, "not watching: the file change alone does nothing");
    gw.signal("HUP");
    assert!(eventually(|| async { call("search").await.unwrap().status() == 403 }).await, "SIGHUP did not reload");
    assert_eq!(refusal(call("search").await.unwrap()).await.2, "reloaded_by_sighup");
    gw.signal("TERM");
    assert!(gw.wait().success(), "the binary exits cleanly after SIGTERM");
}

#[cfg(unix)]
mod process {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::{Duration, Instant};

    /// The gateway binary running a config, killed if the test fails before it stops.
    pub struct Binary {
        child: Child,
        addr: String,
        _dir: tempfile::TempDir,
    }

    impl Binary {
        /// Starts `portcullis run` and waits (at most 30 s) for its "listening" log line.
        pub fn run(config: &str) -> Binary {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("portcullis.toml");
            std::fs::write(&path, config).unwrap();
            let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
                .args(["run", "--config"])
                .arg(&path)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .env("RUST_LOG", "info")
                .spawn()
                .unwrap();
            let stderr = child.stderr.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            let mut gw = Binary { child, addr: String::new(), _dir: dir };
            let deadline = Instant::now() + Duration::from_secs(30);
            gw.addr = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let line = rx.recv_timeout(left).unwrap_or_else(|_| panic!("the gateway printed no \"Portcullis listening\" line within 30 s"));
                if let Some(rest) = line.split("Portcullis listening addr=").nth(1) {
                    break rest.split_whitespace().next().unwrap().to_owned();
                }
            };
            gw
        }

        pub fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }

        /// Sends `SIG<name>` to this child only.
        pub fn signal(&self, name: &str) {
            let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
            assert!(status.success(), "kill -{name} failed");
        }

        /// Waits (at most 30 s) for the child to exit.
        pub fn wait(mut self) -> ExitStatus {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return status;
                }
                assert!(Instant::now() < deadline, "the gateway did not exit within 30 s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    impl Drop for Binary {
        fn drop(&mut self) {
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

#[tokio::test]
async fn rvm_evaluator_allows_and_denies_like_the_interpreter() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "[policy]\nevaluator = \"rvm\"\n")).await;
    assert_eq!(call(&gw, "search").await.status(), 200);
    assert_eq!(refusal(call(&gw, "files.write").await).await, (403, "agent_access_denied".into(), "tool_not_allowed".into()));
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}
