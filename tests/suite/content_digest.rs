//! Stage 2 through the real gateway: every Content-Digest refusal says which digests the
//! gateway accepts (`Want-Content-Digest`, RFC 9530 §4; docs/design.md decision 8) — a digest
//! that does not match the body included — and nothing reaches the upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::{Gateway, Upstream};
use ed25519_dalek::SigningKey;
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis_wire::UnixTime;

const AGENT: &str = "https://static.example";
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

/// A gateway requiring signatures, with one static agent key (no directory needed).
async fn start(key: &SigningKey) -> (Upstream, Gateway) {
    let upstream = Upstream::start().await;
    let x = ed25519_public_jwk(&key.verifying_key())["x"].as_str().unwrap().to_owned();
    let extra = format!(
        "[signatures]\nrequired = true\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {x:?} }}\n[oauth]\nrequired = false\n"
    );
    let gateway = Gateway::start(common::config(&upstream.url(), &extra)).await;
    (upstream, gateway)
}

/// A POST to the MCP endpoint signed by `key` over `BODY` (Content-Digest covered), whose
/// headers and body `edit` may then change, as a middlebox or an attacker would.
async fn send_signed(gw: &Gateway, key: &SigningKey, edit: impl FnOnce(&mut http::HeaderMap, &mut Vec<u8>)) -> reqwest::Response {
    let mut req =
        http::Request::builder().method("POST").uri(gw.url("/mcp")).header("content-type", "application/json").body(BODY.as_bytes().to_vec()).unwrap();
    Signer::new(key.clone(), AGENT).unwrap().sign_request(&mut req, UnixTime::now()).unwrap();
    let (mut parts, mut body) = req.into_parts();
    edit(&mut parts.headers, &mut body);
    common::client().post(gw.url("/mcp")).headers(parts.headers).body(body).send().await.unwrap()
}

/// 401 `invalid_agent_credentials` with `Want-Content-Digest` and a reason containing `reason`.
async fn assert_digest_refused(resp: reqwest::Response, reason: &str) {
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert_eq!(
        resp.headers().get("want-content-digest").map(|v| v.to_str().unwrap().to_owned()).as_deref(),
        Some("sha-256=10, sha-512=5"),
        "a Content-Digest refusal says which digests are accepted ({reason})"
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_credentials", "{body}");
    assert!(body["reason"].as_str().unwrap().contains(reason), "reason {:?} lacks {reason:?}", body["reason"]);
}

#[tokio::test]
async fn a_body_changed_after_signing_is_refused_with_want_content_digest() {
    let key = SigningKey::from_bytes(&rand::random());
    let (upstream, gw) = start(&key).await;
    let resp = send_signed(&gw, &key, |_, body| *body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#.to_vec()).await;
    assert_digest_refused(resp, "does not match the request body").await;
    assert!(upstream.seen().is_empty(), "the upstream got nothing");
    gw.shutdown().await;
}

#[tokio::test]
async fn every_other_digest_refusal_carries_want_content_digest_too() {
    let key = SigningKey::from_bytes(&rand::random());
    let (upstream, gw) = start(&key).await;
    let cases: [(&str, Option<&str>); 3] = [
        ("Content-Digest is required", None),
        ("Content-Digest is malformed", Some("sha-256=:not base64!:")),
        ("no supported algorithm", Some("md5=:Sd/dVLAcvNLSq16eXua5uQ==:")),
    ];
    for (reason, field) in cases {
        let resp = send_signed(&gw, &key, |headers, _| match field {
            Some(v) => {
                headers.insert("content-digest", v.parse().unwrap());
            }
            None => {
                headers.remove("content-digest");
            }
        })
        .await;
        assert_digest_refused(resp, reason).await;
    }
    assert!(upstream.seen().is_empty(), "the upstream got nothing");
    gw.shutdown().await;
}
