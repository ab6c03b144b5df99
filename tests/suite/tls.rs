//! TLS termination with rustls: a certificate from a CA made in the test.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::pki::TestCa;
use common::{Gateway, Upstream};

#[tokio::test]
async fn gateway_terminates_tls_with_the_configured_certificate() {
    let upstream = Upstream::start().await;
    let ca = TestCa::new();
    let (cert, key) = ca.write_leaf();
    let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), ""))
        .add("listen.tls_cert", cert.display().to_string())
        .add("listen.tls_key", key.display().to_string())
        .text()
        + "\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n";
    let cfg = portcullis::config::Config::parse(&text, "tls test", std::path::Path::new(".")).unwrap();
    let gw = Gateway::start(cfg).await;

    let resp = ca.client().post(format!("https://127.0.0.1:{}/mcp", gw.addr.port())).body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-forwarded-proto"], "https");

    // A client that does not trust the test CA cannot complete the handshake.
    let err = common::client().get(format!("https://127.0.0.1:{}/mcp", gw.addr.port())).send().await.unwrap_err();
    assert!(err.is_connect() || err.is_request(), "{err:?}");
    // Plain HTTP to a TLS port is not served either.
    assert!(common::client().get(gw.url("/mcp")).send().await.is_err());
    assert_eq!(upstream.seen().len(), 1, "nothing else reached the upstream");
    gw.shutdown().await;
}
