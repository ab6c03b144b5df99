//! RFC 9728 protected-resource metadata, at the root and path-suffixed well-known URIs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::{client, config, Gateway, Upstream};

#[tokio::test]
async fn metadata_is_served_at_both_well_known_paths_without_reaching_upstream() {
    let upstream = Upstream::start().await;
    let extra = "[oauth]\nrequired = false\nissuer = \"https://auth.example.com\"\nscopes_supported = [\"mcp:tools\", \"files:read\"]\n";
    let gw = Gateway::start(config(&upstream.url(), extra)).await;
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let resp = client().get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let doc: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(doc["resource"], "https://mcp.example.com/mcp");
        assert_eq!(doc["authorization_servers"], serde_json::json!(["https://auth.example.com"]));
        assert_eq!(doc["scopes_supported"], serde_json::json!(["mcp:tools", "files:read"]));
        assert_eq!(doc["bearer_methods_supported"], serde_json::json!(["header"]));
    }
    let head = client().head(gw.url("/.well-known/oauth-protected-resource")).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["access-control-allow-origin"], "*", "browser-based MCP clients can read it");
    let post = client().post(gw.url("/.well-known/oauth-protected-resource")).send().await.unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET, HEAD");
    assert_eq!(post.headers()["cache-control"], "no-store");
    assert_eq!(post.json::<serde_json::Value>().await.unwrap()["error"], "method_not_allowed");
    assert!(upstream.seen().is_empty(), "metadata is answered by the gateway itself");
    gw.shutdown().await;
}
