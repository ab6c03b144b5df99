//! The agent side end to end: `portcullis keygen` writes a key pair, an HTTPS server publishes
//! the directory file it wrote, and requests signed by `portcullis_client` and by
//! `portcullis request` pass a real gateway (signatures required) to the example backend.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;

use bytes::Bytes;
use common::backend::Backend;
use common::pki::{HttpsServer, TestCa};
use common::Gateway;
use http_body_util::{BodyExt, Full};
use portcullis::config::Config;
use portcullis_client::{load_private_jwk, tool_call, Agent};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// Serves `root` as a web root (only the well-known directory path is asked for).
pub(crate) async fn serve_dir(ca: &TestCa, root: PathBuf) -> HttpsServer {
    HttpsServer::start(ca, move |req: http::Request<hyper::body::Incoming>| {
        let file = root.join(req.uri().path().trim_start_matches('/'));
        async move {
            match std::fs::read(&file) {
                Ok(bytes) => http::Response::builder()
                    .header("content-type", "application/http-message-signatures-directory+json")
                    .body(Full::new(Bytes::from(bytes)).boxed())
                    .unwrap(),
                Err(_) => http::Response::builder().status(404).body(Full::new(Bytes::new()).boxed()).unwrap(),
            }
        }
    })
    .await
}

struct World {
    gateway: Gateway,
    backend: Backend,
    directory: HttpsServer,
    keys: tempfile::TempDir,
    keyid: String,
    tls: bool,
    ca: TestCa,
}

impl World {
    /// keygen → directory → gateway (enforce, signatures required, bundled policy) → backend;
    /// with `tls`, the gateway terminates TLS with a certificate from the same test CA.
    async fn start_with(tls: bool) -> World {
        let keys = tempfile::tempdir().unwrap();
        let out = run(&["keygen", "--out", keys.path().to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let keyid = stdout.lines().find_map(|l| l.strip_prefix("keyid:")).unwrap().trim().to_owned();
        let ca = TestCa::new();
        let directory = serve_dir(&ca, keys.path().to_owned()).await;
        let backend = Backend::start("127.0.0.1:0".parse::<SocketAddr>().unwrap()).await.unwrap();
        let mut edit = common::TomlEdit::of(&common::config_toml(&format!("http://{}", backend.addr), ""));
        if tls {
            let (cert, key) = ca.write_leaf();
            edit = edit.add("listen.tls_cert", cert.display().to_string()).add("listen.tls_key", key.display().to_string());
        }
        let text = edit.text()
            + &format!(
                "\n[signatures]\nrequired = true\ntrusted_agents = [{origin:?}]\ndirectory_ca = {ca_path:?}\n[oauth]\nrequired = false\n",
                origin = directory.origin(),
                ca_path = ca.ca_path(),
            );
        let gateway = Gateway::start(Config::parse(&text, "client test", Path::new(".")).unwrap()).await;
        World { gateway, backend, directory, keys, keyid, tls, ca }
    }

    async fn start() -> World {
        World::start_with(false).await
    }

    /// The gateway's MCP endpoint (https when it terminates TLS).
    fn mcp_url(&self) -> String {
        if self.tls {
            format!("https://127.0.0.1:{}/mcp", self.gateway.addr.port())
        } else {
            self.gateway.url("/mcp")
        }
    }

    fn key_path(&self) -> PathBuf {
        self.keys.path().join("agent.jwk")
    }

    /// `portcullis request --key … --agent … <extra> URL`.
    async fn request(&self, extra: &[&str]) -> Output {
        let mut args = vec!["request".to_owned(), "--key".to_owned(), self.key_path().display().to_string(), "--agent".to_owned(), self.directory.origin()];
        args.extend(extra.iter().map(|s| s.to_string()));
        if self.tls {
            args.extend(["--ca".to_owned(), self.ca.ca_path().display().to_string()]);
        }
        args.push(self.mcp_url());
        tokio::process::Command::new(BIN).args(&args).output().await.unwrap()
    }
}

fn run(args: &[&str]) -> Output {
    std::process::Command::new(BIN).args(args).output().unwrap()
}

#[tokio::test]
async fn keygen_writes_a_private_jwk_0600_and_a_directory_publishing_its_keyid() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["keygen", "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let keyid = stdout.lines().find_map(|l| l.strip_prefix("keyid:")).unwrap().trim().to_owned();

    let private: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("agent.jwk")).unwrap()).unwrap();
    assert!(!stdout.contains(private["d"].as_str().unwrap()), "the private key is never printed");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(dir.path().join("agent.jwk")).unwrap().permissions().mode() & 0o777, 0o600);

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join(".well-known/http-message-signatures-directory")).unwrap()).unwrap();
    let published = &doc["keys"][0];
    assert_eq!(doc["keys"].as_array().unwrap().len(), 1);
    assert_eq!(published["kid"], keyid.as_str());
    assert_eq!(published["x"], private["x"]);
    assert!(published.get("d").is_none(), "the directory holds no private material");
    assert_eq!(portcullis_wire::signature::jwk_thumbprint(published).unwrap(), keyid);
    assert_eq!(Agent::new(load_private_jwk(&dir.path().join("agent.jwk")).unwrap(), "https://agent.example").unwrap().keyid(), keyid);

    let again = run(&["keygen", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("refusing to overwrite"));
}

#[tokio::test]
async fn library_agent_call_passes_the_gateway_and_reaches_the_backend() {
    let w = World::start().await;
    let key = load_private_jwk(&w.key_path()).unwrap();
    let agent = Agent::new(key, &w.directory.origin()).unwrap();
    assert_eq!(agent.keyid(), w.keyid);

    let resp = agent.call_tool(&w.gateway.url("/mcp"), "weather.get", json!({"city": "Paris"})).await.unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("Paris"), "{v}");
    assert_eq!(v["result"]["_meta"]["received_identity"]["x-portcullis-agent"], w.directory.origin().as_str(), "{v}");

    // Each call signs afresh: the same call again is not a replay.
    let again = agent.call_tool(&w.gateway.url("/mcp"), "weather.get", json!({"city": "Paris"})).await.unwrap();
    assert_eq!(again.status(), 200);

    // The same body unsigned is refused.
    let unsigned = common::client().post(w.gateway.url("/mcp")).json(&tool_call(1, "weather.get", json!({"city": "Paris"}))).send().await.unwrap();
    assert_eq!(unsigned.status(), 401);
    w.gateway.shutdown().await;
    w.backend.stop();
}

#[tokio::test]
async fn request_cli_signs_an_mcp_tool_call_and_prints_the_answer() {
    let w = World::start().await;
    let out = w.request(&["-v", "--mcp", "tools/call", "--tool", "weather.get", "--args", r#"{"city":"Oslo"}"#, "--token", "not-a-real-token-123"]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("HTTP/1.1 200 OK\n"), "{stdout}");
    assert!(stdout.contains("content-type: application/json"), "{stdout}");
    assert!(stdout.contains("Oslo"), "{stdout}");
    // -v: the signature base, with @authority as the gateway derives it from Host.
    assert!(stderr.contains(&format!("\"@authority\": {}", w.gateway.addr)), "{stderr}");
    assert!(stderr.contains("\"@signature-params\": "), "{stderr}");
    assert!(stderr.contains(&format!("keyid=\"{}\"", w.keyid)), "{stderr}");
    assert!(stderr.contains("Bearer [redacted]") && !stderr.contains("not-a-real-token-123"), "the token is never printed: {stderr}");

    // --json @file with a custom tag the gateway does not accept: refused, exit 1, error printed.
    let body = w.keys.path().join("body.json");
    std::fs::write(&body, tool_call(7, "weather.get", json!({"city": "Rome"})).to_string()).unwrap();
    let refused = w.request(&["--json", &format!("@{}", body.display()), "--tag", "other-tag"]).await;
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with("HTTP/1.1 401"), "{stdout}");

    let ok = w.request(&["--json", &format!("@{}", body.display())]).await;
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success() && stdout.contains("Rome"), "{stdout}");
    w.gateway.shutdown().await;
    w.backend.stop();
}

#[test]
fn request_cli_names_a_missing_key_file() {
    let out = run(&["request", "--key", "/nonexistent/agent.jwk", "--agent", "https://agent.example", "http://127.0.0.1:1/mcp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/agent.jwk"));
}

#[tokio::test]
async fn request_cli_reaches_a_tls_gateway_trusting_the_given_ca() {
    let w = World::start_with(true).await;
    let out = w.request(&["-v", "--mcp", "tools/call", "--tool", "weather.get", "--args", r#"{"city":"Lima"}"#]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.lines().next().unwrap().ends_with(" 200 OK") && stdout.contains("Lima"), "{stdout}");
    assert!(stderr.contains(&format!("\"@authority\": 127.0.0.1:{}", w.gateway.addr.port())), "{stderr}");

    // A Host header that differs from the URL would not match the signed @authority: refused up front.
    let host = w.request(&["-H", "Host: mcp.example.com", "--mcp", "tools/list"]).await;
    assert_eq!(host.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&host.stderr).contains("@authority is signed from the URL"), "{}", String::from_utf8_lossy(&host.stderr));
    w.gateway.shutdown().await;
    w.backend.stop();
}
