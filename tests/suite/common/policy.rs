//! Helpers for policy tests: a policy folder the test can rewrite (hot reload), JSON-RPC
//! bodies, and configs with a decision-log file.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use portcullis::config::Config;

/// A temporary folder holding `policy.rego`.
pub struct PolicyDir {
    pub dir: tempfile::TempDir,
}

impl PolicyDir {
    pub fn new(rego: &str) -> PolicyDir {
        let p = PolicyDir { dir: tempfile::tempdir().unwrap() };
        p.write(rego);
        p
    }

    /// Replaces `policy.rego` atomically (write then rename), as deploy tools do.
    pub fn write(&self, rego: &str) {
        let tmp = self.dir.path().join(".policy.rego.tmp");
        std::fs::write(&tmp, rego).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("policy.rego")).unwrap();
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// The `[policy]` section naming this folder.
    pub fn toml(&self) -> String {
        format!("[policy]\npaths = [{:?}]\n", self.dir.path())
    }
}

/// A policy module in package `portcullis` with `body` appended.
pub fn rego(body: &str) -> String {
    format!("package portcullis\nimport rego.v1\n{body}\n")
}

/// A JSON-RPC `tools/call` body.
pub fn tool_call(id: u64, tool: &str, arguments: serde_json::Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string()
}

/// A config like `common::config`, writing decision-log lines to `log`, in `mode`.
pub fn config_logging(upstream_url: &str, extra: &str, mode: &str, log: &Path) -> Config {
    let text = super::TomlEdit::of(&super::config_toml(upstream_url, extra)).set("mode", mode).set("log.decisions", log.display().to_string()).text()
        + "\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n";
    Config::parse(&text, "test config", Path::new(".")).unwrap()
}

/// Polls `f` every 50 ms for up to 5 s (file-watch latency), returning its last value.
pub async fn eventually<F, Fut>(mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
