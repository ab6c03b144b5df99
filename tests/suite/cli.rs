//! The binary: `check` validates and names what is wrong; `run` serves and shuts down
//! gracefully on SIGTERM, finishing in-flight requests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::toml_edit::value;
use common::{client, config_toml, TomlEdit, Upstream};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let p = dir.path().join("portcullis.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn base_config(upstream: &str) -> String {
    config_toml(upstream, "[signatures]\nrequired = false\n[oauth]\nrequired = false\n")
}

#[test]
fn check_accepts_a_valid_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &base_config("http://127.0.0.1:3001"));
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration is valid"));
}

#[test]
fn check_without_config_validates_the_embedded_default() {
    let out = Command::new(BIN).arg("check").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("embedded default config"));
    let printed = Command::new(BIN).arg("default-config").output().unwrap();
    assert!(String::from_utf8_lossy(&printed.stdout).contains("mode = \"monitor\""));
}

#[test]
fn check_names_an_unknown_key_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &(base_config("http://127.0.0.1:3001") + "\n[state]\nstroe = \"memory\"\n"));
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stroe") && err.contains("portcullis.toml"), "{err}");
}

#[test]
fn check_names_every_invalid_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = TomlEdit::of(&base_config("ftp://127.0.0.1:3001")).set("upstream.connect_timeout", "0s").text();
    let path = write_config(&dir, &text);
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("upstream.url") && err.contains("upstream.connect_timeout"), "{err}");
}

/// A `[mode]` table: `check` shows each group's mode, and names a group or mode it does not know.
#[test]
fn check_shows_the_mode_of_each_group_and_names_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let staged = TomlEdit::of(&base_config("http://127.0.0.1:3001")).set("mode", value("{ default = \"monitor\", identity = \"enforce\" }"));
    let path = write_config(&dir, &staged.text());
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("identity=enforce token=monitor policy=monitor default=monitor"), "{stdout}");
    for (bad, value, named) in [("mode.identiy", "enforce", "identiy"), ("mode.policy", "block", "\"block\" is not a mode")] {
        let path = write_config(&dir, &staged.clone().remove("mode.identity").add(bad, value).text());
        let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(named), "{bad}: {err}");
    }
}

#[test]
fn missing_config_file_is_named() {
    let out = Command::new(BIN).args(["run", "--config", "/nonexistent/portcullis.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/portcullis.toml"));
}

#[test]
fn start_without_a_running_backend_warns_that_the_upstream_refuses_connections() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &base_config(&format!("http://127.0.0.1:{port}")));
    let mut child = Command::new(BIN).args(["run", "--config"]).arg(&path).stderr(Stdio::piped()).env("RUST_LOG", "info").spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = String::new();
    let warning = loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) else { break None };
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("does not accept connections") {
            break Some(line);
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let warning = warning.unwrap_or_else(|| panic!("no warning about the upstream within 10 s:\n{seen}"));
    assert!(warning.contains("WARN") && warning.contains(&format!("127.0.0.1:{port}")) && warning.contains("502 upstream_unavailable"), "{warning}");
}

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_then_exits() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = TomlEdit::of(&base_config(&upstream.url())).set("upstream.response_timeout", "10s").set("log.decisions", "stdout").text();
    let path = write_config(&dir, &text);
    let mut child =
        Command::new(BIN).args(["run", "--config"]).arg(&path).stdout(Stdio::piped()).stderr(Stdio::piped()).env("RUST_LOG", "info").spawn().unwrap();

    // Learn the bound port from the startup log line.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("startup line");
        if let Some(rest) = line.split("Portcullis listening addr=").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };

    let in_flight = tokio::spawn({
        let url = format!("http://{addr}/delay?ms=1500");
        async move { client().get(url).send().await }
    });
    // SIGTERM only once the request is in flight: the upstream has it (and answers in 1.5 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !upstream.seen().iter().any(|s| s.path_and_query == "/delay?ms=1500") {
        assert!(std::time::Instant::now() < deadline, "the request did not reach the upstream within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());

    let resp = in_flight.await.unwrap().expect("in-flight request completes");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "done after delay");

    let exit = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    assert!(exit.status.success(), "exit status {:?}", exit.status);
    let stdout = String::from_utf8_lossy(&exit.stdout);
    assert!(
        stdout.lines().any(|l| l.contains("\"path\":\"/delay\"") && l.contains("\"status\":200")),
        "decision log line written for the drained request: {stdout}"
    );
    assert!(client().get(format!("http://{addr}/mcp")).send().await.is_err(), "no longer accepting");
}

#[tokio::test]
async fn healthcheck_succeeds_against_a_live_admin_listener_and_fails_otherwise() {
    let upstream = Upstream::start().await;
    let gw = common::Gateway::start(common::config(&upstream.url(), "")).await;
    let url = gw.admin_url("/healthz");
    let ok = tokio::task::spawn_blocking(move || Command::new(BIN).args(["healthcheck", "--url", &url]).output().unwrap()).await.unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let closed = common::closed_port().await;
    let bad = Command::new(BIN).args(["healthcheck", "--timeout", "1s", "--url", &format!("http://{closed}/healthz")]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unhealthy"));
    gw.shutdown().await;
}
