//! Upstream credentials (`[upstream.auth]`): the backend gets a credential of its own, never the
//! user's token, and only with a request the identity and token stages vouched for. Proven with
//! the real gateway, a recording upstream and (token exchange) a real HTTPS issuer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::Duration;

use common::{client, config_without_policy, temp_path, wait_for_decision_lines, Gateway, Upstream};

const BAD_DIGEST: &str = "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"; // digest of the empty body

/// A gateway in front of `upstream` with `auth` as its `[upstream.auth]`, its decision log in
/// `log`.
async fn gateway(upstream: &Upstream, auth: &str, mode: portcullis::config::Mode, log: &std::path::Path) -> Gateway {
    let mut cfg = config_without_policy(&upstream.url(), &format!("[upstream.auth]\n{auth}\n"));
    cfg.mode = mode.into();
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.to_owned());
    Gateway::start(cfg).await
}

async fn post(gw: &Gateway, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client().post(gw.url("/mcp")).body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn static_from_the_environment_replaces_the_clients_authorization() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"static\"\nvalue_env = \"CARGO_PKG_NAME\"", portcullis::config::Mode::Enforce, &log).await;
    let resp = post(&gw, &[("authorization", "Bearer the-users-token"), ("dpop", "proof")]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    let expected = format!("Bearer {}", std::env::var("CARGO_PKG_NAME").unwrap());
    assert_eq!(seen[0].headers.get_all("authorization").iter().collect::<Vec<_>>(), [expected.as_str()], "only the gateway's credential");
    assert!(seen[0].headers.get("dpop").is_none());
    let lines = wait_for_decision_lines(&log, 1).await;
    assert_eq!(lines[0]["upstream_auth"], "static");
    assert!(lines[0]["upstream_auth_cached"].is_null());
    assert!(lines[0]["latency_us"]["upstream_auth"].is_u64(), "{}", lines[0]);
    assert!(!std::fs::read_to_string(&log).unwrap().contains(&expected), "the secret is never logged");
    gw.shutdown().await;
}

#[tokio::test]
async fn static_from_a_file_sets_its_own_header_and_follows_the_file() {
    let upstream = Upstream::start().await;
    let (dir, log) = temp_path("decisions.log");
    let secret = dir.path().join("api-key");
    std::fs::write(&secret, "key-one\n").unwrap();
    let auth = format!("kind = \"static\"\nheader = \"X-Api-Key\"\nvalue_file = {secret:?}");
    let gw = gateway(&upstream, &auth, portcullis::config::Mode::Enforce, &log).await;
    let resp = post(&gw, &[("x-api-key", "client-chosen"), ("authorization", "Bearer the-users-token")]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen[0].headers.get_all("x-api-key").iter().collect::<Vec<_>>(), ["key-one"], "no prefix, newline dropped, the client's copy removed");
    assert!(seen[0].headers.get("authorization").is_none(), "the user's token never goes on");

    // Rotation: written to a temp file and renamed over the old one, as secret managers do.
    std::fs::write(dir.path().join("next"), "key-two-longer\r\n").unwrap();
    std::fs::rename(dir.path().join("next"), &secret).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert_eq!(post(&gw, &[]).await.status(), 200);
        let last = upstream.seen().pop().unwrap();
        if last.headers["x-api-key"] == "key-two-longer" {
            break;
        }
        assert_eq!(last.headers["x-api-key"], "key-one", "the old value until the new one is read");
        assert!(tokio::time::Instant::now() < deadline, "the rotated file was never read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file replaced by an empty one keeps the last good value.
    std::fs::write(&secret, "").unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(post(&gw, &[]).await.status(), 200);
    assert_eq!(upstream.seen().pop().unwrap().headers["x-api-key"], "key-two-longer");
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_forwards_a_request_with_identity_findings_without_the_credential() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"static\"\nvalue_env = \"CARGO_PKG_NAME\"", portcullis::config::Mode::Monitor, &log).await;
    // A Content-Digest that does not match: an identity-group finding.
    let resp = post(&gw, &[("content-digest", BAD_DIGEST)]).await;
    assert_eq!(resp.status(), 200, "monitor mode forwards");
    let resp = post(&gw, &[]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].headers.get("authorization").is_none(), "never a secret on a request the gateway could not vouch for");
    assert!(seen[1].headers.get("authorization").is_some(), "a clean request gets it");
    let lines = wait_for_decision_lines(&log, 2).await;
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["upstream_auth"].as_str()), (Some("would_deny"), Some("none")));
    assert_eq!((lines[1]["outcome"].as_str(), lines[1]["upstream_auth"].as_str()), (Some("allow"), Some("static")));
    gw.shutdown().await;
}

#[tokio::test]
async fn none_removes_the_token_and_says_so_without_timing_a_stage() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"none\"", portcullis::config::Mode::Enforce, &log).await;
    assert_eq!(post(&gw, &[("authorization", "Bearer the-users-token")]).await.status(), 200);
    assert!(upstream.seen()[0].headers.get("authorization").is_none());
    let lines = wait_for_decision_lines(&log, 1).await;
    assert_eq!(lines[0]["upstream_auth"], "none");
    assert!(lines[0]["latency_us"].get("upstream_auth").is_none(), "{}", lines[0]);
    gw.shutdown().await;
}

mod token_exchange {
    //! `kind = "token_exchange"` against the test issuer's RFC 8693 grant.
    use super::*;
    use common::issuer::{self, Issuer};
    use common::pki::TestCa;
    use serde_json::{json, Value};

    const AUD: &str = "https://mcp.example.com/mcp";
    const BACKEND: &str = "https://weather.internal";

    struct Setup {
        _ca: TestCa,
        issuer: Issuer,
        upstream: Upstream,
        gw: Gateway,
        _dir: tempfile::TempDir,
        log: std::path::PathBuf,
    }

    impl Setup {
        /// A gateway whose `[upstream.auth]` exchanges at a fresh issuer; `auth_extra` is added to
        /// `[upstream.auth]`, `mode` is the whole `mode` line.
        async fn start(mode: &str, auth_extra: &str) -> Setup {
            Setup::start_with(mode, "", auth_extra).await
        }

        /// [`Setup::start`] with `oauth_extra` added to `[oauth]`.
        async fn start_with(mode: &str, oauth_extra: &str, auth_extra: &str) -> Setup {
            Setup::start_full(mode, "", oauth_extra, auth_extra).await
        }

        /// A gateway authenticating with `client` (instead of the client secret file).
        async fn start_with_client(mode: &str, client: &str) -> Setup {
            Setup::start_inner(mode, "", "", "", client).await
        }

        /// [`Setup::start_with`] with `sig_extra` added to `[signatures]` (`[[signatures.keys]]`).
        async fn start_full(mode: &str, sig_extra: &str, oauth_extra: &str, auth_extra: &str) -> Setup {
            Setup::start_inner(mode, sig_extra, oauth_extra, auth_extra, "").await
        }

        /// `client`: the client authentication keys; empty: `client_secret_file`.
        async fn start_inner(mode: &str, sig_extra: &str, oauth_extra: &str, auth_extra: &str, client: &str) -> Setup {
            let ca = TestCa::new();
            let issuer = Issuer::start(&ca).await;
            let upstream = Upstream::start().await;
            let (dir, log) = temp_path("decisions.log");
            let secret = dir.path().join("client-secret");
            std::fs::write(&secret, format!("{}\n", issuer::CLIENT_SECRET)).unwrap();
            let client = if client.is_empty() { format!("client_secret_file = {secret:?}") } else { client.to_owned() };
            // The default scope unless the test sets its own.
            let scope = if auth_extra.lines().any(|l| l.starts_with("scope =")) { "" } else { "scope = \"weather:read\"" };
            let extra = format!(
                "[signatures]\nrequired = false\n{sig_extra}\n[oauth]\nrequired = true\nissuer = \"{}\"\nissuer_ca = {:?}\n{oauth_extra}\n\
                 [upstream.auth]\nkind = \"token_exchange\"\nclient_id = \"{}\"\n{client}\naudience = \"{BACKEND}\"\n{scope}\n{auth_extra}\n",
                issuer.url(),
                ca.ca_path(),
                issuer::CLIENT_ID,
            );
            let text = common::config_toml(&upstream.url(), &extra)
                .replace("mode = \"enforce\"", mode)
                .replace("decisions = \"off\"", &format!("decisions = {log:?}"));
            let gw = Gateway::start(portcullis::config::Config::parse(&text, "token exchange test", std::path::Path::new(".")).unwrap()).await;
            Setup { _ca: ca, issuer, upstream, gw, _dir: dir, log }
        }

        fn user_token(&self) -> String {
            self.issuer.rsa.sign(&self.issuer.claims(AUD))
        }

        async fn call(&self, token: &str) -> reqwest::Response {
            client()
                .post(self.gw.url("/mcp"))
                .header("content-type", "application/json")
                .bearer_auth(token)
                .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
                .send()
                .await
                .unwrap()
        }
    }

    /// The claims of a JWT (no verification: the test issuer signed it).
    fn claims_of(jwt: &str) -> Value {
        let payload = jwt.split('.').nth(1).unwrap();
        serde_json::from_slice(&base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload).unwrap()).unwrap()
    }

    fn bearer(seen: &portcullis_test_support::upstream::Seen) -> String {
        seen.headers["authorization"].to_str().unwrap().strip_prefix("Bearer ").unwrap().to_owned()
    }

    #[tokio::test]
    async fn the_backend_gets_the_exchanged_token_never_the_users_and_the_second_call_is_cached() {
        let s = Setup::start("mode = \"enforce\"", "").await;
        let user = s.user_token();
        assert_eq!(s.call(&user).await.status(), 200);
        assert_eq!(s.call(&user).await.status(), 200);
        let seen = s.upstream.seen();
        assert_eq!(seen.len(), 2);
        let issued = bearer(&seen[0]);
        assert_ne!(issued, user, "never the user's token");
        assert_eq!(bearer(&seen[1]), issued, "the second call reuses the exchanged token");
        let claims = claims_of(&issued);
        assert_eq!((claims["aud"].as_str(), claims["sub"].as_str(), claims["scope"].as_str()), (Some(BACKEND), Some("user-1842"), Some("weather:read")));
        assert!(claims.get("act").is_none(), "no actor token without actor = true");

        let exchanges = s.issuer.exchanges();
        assert_eq!(exchanges.len(), 1, "one exchange for two calls");
        let form = &exchanges[0];
        assert_eq!(form["grant_type"], issuer::TOKEN_EXCHANGE);
        assert_eq!(form["subject_token"], user);
        assert_eq!(form["subject_token_type"], issuer::ACCESS_TOKEN_TYPE);
        assert_eq!(form["requested_token_type"], issuer::ACCESS_TOKEN_TYPE);
        assert_eq!((form["audience"].as_str(), form["scope"].as_str()), (BACKEND, "weather:read"));
        assert!(!form.contains_key("resource") && !form.contains_key("client_secret"), "{form:?}");

        let lines = wait_for_decision_lines(&s.log, 2).await;
        assert_eq!((lines[0]["upstream_auth"].as_str(), lines[0]["upstream_auth_cached"].as_bool()), (Some("token_exchange"), Some(false)));
        assert_eq!((lines[1]["upstream_auth"].as_str(), lines[1]["upstream_auth_cached"].as_bool()), (Some("token_exchange"), Some(true)));
        let text = std::fs::read_to_string(&s.log).unwrap();
        assert!(!text.contains(&issued) && !text.contains(&user), "no token in the decision log");
        let metrics = common::metrics(&s.gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"issued\"} 1"), "{metrics}");
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"cached\"} 1"), "{metrics}");
    }

    #[tokio::test]
    async fn concurrent_first_calls_share_one_exchange() {
        let s = Setup::start("mode = \"enforce\"", "").await;
        s.issuer.delay_exchanges(Duration::from_millis(300));
        let user = s.user_token();
        let calls = (0..8).map(|_| s.call(&user));
        for resp in futures_util::future::join_all(calls).await {
            assert_eq!(resp.status(), 200);
        }
        assert_eq!(s.issuer.exchanges().len(), 1, "one exchange in flight per key");
        let seen = s.upstream.seen();
        assert_eq!(seen.len(), 8);
        assert!(seen.iter().all(|r| bearer(r) == bearer(&seen[0])));
    }

    #[tokio::test]
    async fn a_refused_exchange_is_403_with_the_code_alone_and_nothing_is_forwarded() {
        let s = Setup::start("mode = \"enforce\"", "").await;
        for code in ["access_denied", "invalid_grant", "invalid_target", "invalid_scope", "invalid_request"] {
            s.issuer.answer_exchanges_with(Some((400, json!({"error": code, "error_description": "the user's secret detail"}))));
            let resp = s.call(&s.user_token()).await;
            assert_eq!(resp.status(), 403, "{code}");
            let text = resp.text().await.unwrap();
            assert!(!text.contains("secret detail"), "never the description: {text}");
            let body: Value = serde_json::from_str(&text).unwrap();
            assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("delegation_refused"), Some(code)));
        }
        assert!(s.upstream.seen().is_empty(), "the backend got nothing");
        let lines = wait_for_decision_lines(&s.log, 5).await;
        assert_eq!(
            (lines[0]["outcome"].as_str(), lines[0]["error"].as_str(), lines[0]["reason"].as_str()),
            (Some("deny"), Some("delegation_refused"), Some("access_denied"))
        );
        assert_eq!(lines[0]["findings"][0]["stage"], "upstream_auth");
        assert_eq!(lines[0]["upstream_auth"], "token_exchange");
        let metrics = common::metrics(&s.gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"refused\"} 5"), "{metrics}");
    }

    #[tokio::test]
    async fn the_gateways_own_client_refused_or_an_unusable_answer_is_503_and_nothing_is_forwarded() {
        let s = Setup::start("mode = \"enforce\"", "").await;
        for answer in [
            (401, json!({"error": "invalid_client"})),
            (400, json!({"error": "unauthorized_client"})),
            (400, json!({"error": "unsupported_grant_type"})),
            (503, json!({"error": "temporarily_unavailable"})),
            (500, json!({})),
            (200, json!({"access_token": "t", "issued_token_type": issuer::ACCESS_TOKEN_TYPE, "token_type": "N_A"})),
            (200, json!({"access_token": "t", "token_type": "Bearer"})),
            (200, json!({"issued_token_type": issuer::ACCESS_TOKEN_TYPE, "token_type": "Bearer"})),
        ] {
            s.issuer.answer_exchanges_with(Some(answer.clone()));
            let resp = s.call(&s.user_token()).await;
            assert_eq!(resp.status(), 503, "{answer:?}");
            assert_eq!(resp.headers()["retry-after"], "5");
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"], "upstream_credentials_unavailable", "{answer:?}");
        }
        assert!(s.upstream.seen().is_empty(), "the backend got nothing");
    }

    #[tokio::test]
    async fn an_unreachable_token_endpoint_is_503_with_retry_after_and_nothing_is_forwarded() {
        let closed = common::closed_port().await;
        let s = Setup::start("mode = \"enforce\"", &format!("token_endpoint = \"https://{closed}/token\"\ntimeout = \"1s\"")).await;
        let resp = s.call(&s.user_token()).await;
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "5");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "upstream_credentials_unavailable");
        assert!(s.upstream.seen().is_empty(), "the backend got nothing");
        assert!(s.issuer.exchanges().is_empty());
        let metrics = common::metrics(&s.gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"unavailable\"} 1"), "{metrics}");
    }

    #[tokio::test]
    async fn monitor_mode_forwards_a_refused_exchange_without_a_credential_and_logs_would_deny() {
        let s = Setup::start("mode = \"monitor\"", "").await;
        s.issuer.answer_exchanges_with(Some((400, json!({"error": "access_denied"}))));
        let resp = s.call(&s.user_token()).await;
        assert_eq!(resp.status(), 200, "monitor mode forwards");
        let seen = s.upstream.seen();
        assert_eq!(seen.len(), 1);
        assert!(seen[0].headers.get("authorization").is_none(), "without a credential, never the user's token");
        let lines = wait_for_decision_lines(&s.log, 1).await;
        assert_eq!((lines[0]["outcome"].as_str(), lines[0]["error"].as_str()), (Some("would_deny"), Some("delegation_refused")));
        assert_eq!(lines[0]["findings"][0]["stage"], "upstream_auth");
        assert_eq!(lines[0]["upstream_auth"], "none");
    }

    #[tokio::test]
    async fn exchanges_past_max_per_second_are_503_and_counted() {
        let s = Setup::start("mode = \"enforce\"", "max_per_second = 1").await;
        let first = s.issuer.rsa.sign(&s.issuer.claims_with(AUD, json!({"jti": "first"})));
        let second = s.issuer.rsa.sign(&s.issuer.claims_with(AUD, json!({"jti": "second"})));
        assert_eq!(s.call(&first).await.status(), 200);
        let resp = s.call(&second).await;
        assert_eq!(resp.status(), 503, "a second new token within the second");
        assert_eq!(resp.json::<Value>().await.unwrap()["error"], "upstream_credentials_unavailable");
        assert_eq!(s.call(&first).await.status(), 200, "a cached token costs no budget");
        assert_eq!(s.issuer.exchanges().len(), 1);
        assert_eq!(s.upstream.seen().len(), 2);
        let metrics = common::metrics(&s.gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"over_budget\"} 1"), "{metrics}");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(s.call(&second).await.status(), 200, "the budget refills");
    }

    #[tokio::test]
    async fn a_caller_at_its_share_of_the_cache_is_exchanged_for_but_not_cached_and_others_keep_theirs() {
        let s = Setup::start("mode = \"enforce\"", "max_cached_per_caller = 1").await;
        let token = |claims: Value| s.issuer.rsa.sign(&s.issuer.claims_with(AUD, claims));
        let (first, second) = (token(json!({"jti": "first"})), token(json!({"jti": "second"})));
        let other = token(json!({"sub": "user-7", "jti": "other"}));
        for t in [&first, &second, &second, &first, &other, &other] {
            assert_eq!(s.call(t).await.status(), 200, "over its bound a caller is not refused");
        }
        assert_eq!(s.issuer.exchanges().len(), 4, "first once, second each time (not kept), the other user once");
        let lines = wait_for_decision_lines(&s.log, 6).await;
        let cached: Vec<_> = lines.iter().map(|l| l["upstream_auth_cached"].as_bool().unwrap()).collect();
        assert_eq!(cached, [false, false, false, true, false, true]);
        let metrics = common::metrics(&s.gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"default\",result=\"issued\"} 4"), "{metrics}");
    }

    #[tokio::test]
    async fn a_callers_slot_comes_back_when_its_cached_token_expires() {
        let s = Setup::start("mode = \"enforce\"", "max_cached_per_caller = 1").await;
        let now = issuer::unix_now();
        // The first token lives 2 s: its exchanged token is cached no longer than that.
        let short = s.issuer.rsa.sign(&s.issuer.claims_with(AUD, json!({"jti": "short", "iat": now, "exp": now + 2})));
        let long = s.issuer.rsa.sign(&s.issuer.claims_with(AUD, json!({"jti": "long"})));
        assert_eq!(s.call(&short).await.status(), 200);
        assert_eq!(s.call(&long).await.status(), 200, "at its share: exchanged, not kept");
        tokio::time::sleep(Duration::from_millis(3200)).await;
        for _ in 0..2 {
            assert_eq!(s.call(&long).await.status(), 200);
        }
        let lines = wait_for_decision_lines(&s.log, 4).await;
        let cached: Vec<_> = lines.iter().map(|l| l["upstream_auth_cached"].as_bool().unwrap()).collect();
        assert_eq!(cached, [false, false, false, true], "the expired entry's slot went back: the long token is kept now");
    }

    #[tokio::test]
    async fn max_cached_per_caller_is_checked_at_start() {
        let upstream = Upstream::start().await;
        let text = common::config_toml(
            &upstream.url(),
            "[oauth]\nrequired = true\nissuer = \"https://issuer.example\"\n[upstream.auth]\nkind = \"token_exchange\"\nclient_id = \"c\"\nclient_secret_env = \"CARGO_PKG_NAME\"\nmax_cached_per_caller = 0\n",
        );
        let err = portcullis::config::Config::parse(&text, "t", std::path::Path::new(".")).unwrap_err().to_string();
        assert!(err.contains("upstream.auth.max_cached_per_caller"), "{err}");
    }

    #[tokio::test]
    async fn private_key_jwt_authenticates_the_gateway_with_an_assertion_for_the_issuer() {
        let keys = tempfile::tempdir().unwrap();
        let client_key = ed25519_dalek::SigningKey::from_bytes(&rand::random());
        let path = keys.path().join("client.jwk");
        std::fs::write(&path, portcullis_client::keys::private_jwk(&client_key).to_string()).unwrap();
        let s = Setup::start_with_client("mode = \"enforce\"", &format!("client_key_file = {path:?}")).await;
        assert_eq!(s.call(&s.user_token()).await.status(), 503, "a key the issuer does not know: invalid_client, the gateway's problem");
        s.issuer.trust_client_keys(&portcullis_client::keys::directory_document(&[&client_key]));
        assert_eq!(s.call(&s.user_token()).await.status(), 200);
        let forms = s.issuer.exchanges();
        let form = forms.last().unwrap();
        assert_eq!(form["client_assertion_type"], issuer::JWT_BEARER);
        let assertion = claims_of(&form["client_assertion"]);
        assert_eq!((assertion["iss"].as_str(), assertion["sub"].as_str()), (Some(issuer::CLIENT_ID), Some(issuer::CLIENT_ID)));
        assert_eq!(assertion["aud"].as_str(), Some(s.issuer.url().as_str()), "the issuer identifier, not the token endpoint");
        assert!(assertion["exp"].as_u64().unwrap() - assertion["iat"].as_u64().unwrap() <= 60);
        assert!(assertion["jti"].is_string());
    }

    #[tokio::test]
    async fn a_decisions_upstream_scopes_narrow_the_scope_asked_for_per_call() {
        let policy = common::policy::PolicyDir::new(&common::policy::rego(
            r#"decision := {"allow": true, "upstream_scopes": scopes}
scopes := ["weather:read"] if input.mcp.tool == "forecast"
scopes := ["weather:admin"] if input.mcp.tool == "reset""#,
        ));
        let s = Setup::start("mode = \"enforce\"", &format!("\n{}", policy.toml())).await;
        let call = |tool: &str| {
            client()
                .post(s.gw.url("/mcp"))
                .header("content-type", "application/json")
                .bearer_auth(s.user_token())
                .body(common::policy::tool_call(1, tool, json!({})))
                .send()
        };
        assert_eq!(call("forecast").await.unwrap().status(), 200);
        let forms = s.issuer.exchanges();
        assert_eq!(forms[0]["scope"], "weather:read", "narrowed from the configured weather:read");
        assert_eq!(claims_of(&bearer(&s.upstream.seen()[0]))["scope"], "weather:read");
        // Narrowed to a scope the configuration does not ask for: nothing to ask.
        let resp = call("reset").await.unwrap();
        assert_eq!(resp.status(), 403);
        let body: Value = resp.json().await.unwrap();
        assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("delegation_refused"), Some("no_upstream_scope")));
        assert_eq!(s.issuer.exchanges().len(), 1);
        assert_eq!(s.upstream.seen().len(), 1, "the refused call was not forwarded");
    }

    /// The policy of docs/upstream-credentials.md, run as written.
    #[tokio::test]
    async fn the_guides_policy_narrows_upstream_scopes_per_tool() {
        let guide = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/upstream-credentials.md")).unwrap();
        let blocks: Vec<&str> = guide.split("```rego\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
        assert_eq!(blocks.len(), 1, "one policy in the guide");
        let policy = common::policy::PolicyDir::new(blocks[0]);
        let s = Setup::start("mode = \"enforce\"", &format!("scope = \"weather:read alerts:read\"\n{}", policy.toml())).await;
        let user = s.user_token();
        let call = |tool: &str| {
            client()
                .post(s.gw.url("/mcp"))
                .header("content-type", "application/json")
                .bearer_auth(&user)
                .body(common::policy::tool_call(1, tool, json!({})))
                .send()
        };
        assert_eq!(call("forecast").await.unwrap().status(), 200);
        assert_eq!(call("alerts").await.unwrap().status(), 200);
        let scopes: Vec<_> = s.issuer.exchanges().iter().map(|f| f["scope"].clone()).collect();
        assert_eq!(scopes, ["weather:read", "weather:read alerts:read"]);
        let seen = s.upstream.seen();
        assert_eq!(claims_of(&bearer(&seen[1]))["scope"], "weather:read alerts:read");
        let resp = call("reset_station").await.unwrap();
        assert_eq!(resp.status(), 403);
        let body: Value = resp.json().await.unwrap();
        assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("delegation_refused"), Some("no_upstream_scope")));
        let resp = call("delete_everything").await.unwrap();
        assert_eq!(resp.status(), 403);
        assert_eq!(resp.json::<Value>().await.unwrap()["reason"], "tool_not_allowed");
        let ping = client()
            .post(s.gw.url("/mcp"))
            .header("content-type", "application/json")
            .bearer_auth(&user)
            .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(ping.status(), 200, "not a tool call: the read scope");
        assert_eq!(s.issuer.exchanges().len(), 2, "tools/list reuses the forecast's weather:read token");
        assert_eq!(s.upstream.seen().len(), 3);
    }

    /// `Authorization: DPoP` with a bound token and a fresh proof by `key`.
    async fn call_dpop(s: &Setup, key: &common::keys::SigningKey) -> reqwest::Response {
        let token = s.issuer.rsa.sign(&s.issuer.bound_claims(AUD, &key.thumbprint()));
        let proof = key.dpop_proof("POST", AUD, &token, issuer::unix_now());
        client()
            .post(s.gw.url("/mcp"))
            .header("authorization", format!("DPoP {token}"))
            .header("dpop", proof)
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .send()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_dpop_bound_subject_token_is_exchanged_only_with_exchange_bound_tokens() {
        let key = common::keys::SigningKey::ec("proof-key");
        let s = Setup::start_with("mode = \"enforce\"", "dpop = true", "").await;
        let resp = call_dpop(&s, &key).await;
        assert_eq!(resp.status(), 403);
        let body: Value = resp.json().await.unwrap();
        assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("delegation_refused"), Some("dpop_bound_subject_token")));
        assert!(s.issuer.exchanges().is_empty() && s.upstream.seen().is_empty(), "nothing exchanged, nothing forwarded");

        let s = Setup::start_with("mode = \"enforce\"", "dpop = true", "exchange_bound_tokens = true").await;
        assert_eq!(call_dpop(&s, &key).await.status(), 200);
        assert_eq!(s.issuer.exchanges().len(), 1);
        let seen = s.upstream.seen();
        assert!(seen[0].headers.get("dpop").is_none(), "the proof is for the gateway, not the backend");
        assert_eq!(claims_of(&bearer(&seen[0]))["aud"], BACKEND);
    }

    mod actor {
        //! `actor = true`: the issued token names the verified agent in `act`.
        use super::*;
        use ed25519_dalek::SigningKey;
        use portcullis::signature::{ed25519_public_jwk, Signer};

        const AGENT: &str = "https://agent.example";

        /// A token-exchange gateway with `actor = true`, a static agent key, and an issuer that
        /// trusts the actor keys the gateway publishes.
        async fn start(agent: &SigningKey) -> (Setup, tempfile::TempDir, Value) {
            start_with_client(agent, "").await
        }

        /// [`start`] authenticating the gateway with `client_auth` (empty: the client secret file).
        async fn start_with_client(agent: &SigningKey, client_auth: &str) -> (Setup, tempfile::TempDir, Value) {
            let keys = tempfile::tempdir().unwrap();
            let actor_key = SigningKey::from_bytes(&rand::random());
            let previous = SigningKey::from_bytes(&rand::random());
            for (name, key) in [("actor.jwk", &actor_key), ("previous.jwk", &previous)] {
                std::fs::write(keys.path().join(name), portcullis_client::keys::private_jwk(key).to_string()).unwrap();
            }
            let x = ed25519_public_jwk(&agent.verifying_key())["x"].as_str().unwrap().to_owned();
            let sig = format!("[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {x:?} }}");
            let auth =
                format!("actor = true\nactor_key_file = {:?}\nactor_key_previous_file = {:?}", keys.path().join("actor.jwk"), keys.path().join("previous.jwk"));
            let s = Setup::start_inner("mode = \"enforce\"", &sig, "", &auth, client_auth).await;
            let jwks: Value = client().get(s.gw.url("/.well-known/jwks.json")).send().await.unwrap().json().await.unwrap();
            s.issuer.trust_actor_keys(&jwks);
            let thumbprints = [&actor_key, &previous].map(|k| portcullis_wire::signature::ed25519_thumbprint(&k.verifying_key()));
            (s, keys, json!({"jwks": jwks, "kids": thumbprints}))
        }

        async fn signed_call(s: &Setup, agent: &SigningKey, token: &str) -> reqwest::Response {
            let mut req = http::Request::builder()
                .method("POST")
                .uri(s.gw.url("/mcp"))
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {token}"))
                .body(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec())
                .unwrap();
            Signer::new(agent.clone(), AGENT).unwrap().sign_request(&mut req, portcullis_wire::UnixTime::now()).unwrap();
            let (parts, body) = req.into_parts();
            client().post(s.gw.url("/mcp")).headers(parts.headers).body(body).send().await.unwrap()
        }

        #[tokio::test]
        async fn the_backends_token_names_the_agent_as_actor_and_the_actor_keys_are_published() {
            let agent = SigningKey::from_bytes(&rand::random());
            let (s, _keys, published) = start(&agent).await;
            let keys = published["jwks"]["keys"].as_array().unwrap();
            assert_eq!(keys.len(), 2, "the current and the previous key: {published}");
            assert!(keys.iter().all(|k| k.get("d").is_none()), "only public halves");
            assert_eq!(keys[0]["kid"], published["kids"][0], "kid is the RFC 7638 thumbprint");
            assert_eq!(keys[1]["kid"], published["kids"][1]);

            let resp = signed_call(&s, &agent, &s.user_token()).await;
            assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
            let seen = s.upstream.seen();
            let claims = claims_of(&bearer(&seen[0]));
            assert_eq!(claims["act"], json!({"sub": AGENT}), "who acted: the verified agent");
            assert_eq!(claims["sub"], "user-1842", "for whom: the user");
            let form = &s.issuer.exchanges()[0];
            assert_eq!(form["actor_token_type"], issuer::JWT_TOKEN_TYPE);
            let actor = claims_of(&form["actor_token"]);
            assert_eq!(
                (actor["iss"].as_str(), actor["aud"].as_str(), actor["client_id"].as_str()),
                (Some("https://mcp.example.com"), Some(s.issuer.url().as_str()), Some(issuer::CLIENT_ID))
            );
            assert!(actor["exp"].as_u64().unwrap() - actor["iat"].as_u64().unwrap() <= 60);
        }

        #[tokio::test]
        async fn without_a_verified_agent_nothing_is_exchanged_or_forwarded() {
            let agent = SigningKey::from_bytes(&rand::random());
            let (s, _keys, _) = start(&agent).await;
            let resp = s.call(&s.user_token()).await;
            assert_eq!(resp.status(), 403);
            let body: Value = resp.json().await.unwrap();
            assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("delegation_refused"), Some("no_verified_agent")));
            assert!(s.issuer.exchanges().is_empty() && s.upstream.seen().is_empty());
        }

        /// Every log line the gateway writes (all levels, span opens and closes) and every
        /// decision-log line, through static credentials, both client authentications with an
        /// actor, a refusal and an outage: none quotes a secret, a token or the issuer's words.
        #[tokio::test]
        async fn no_log_line_quotes_a_secret_a_token_or_the_issuers_description() {
            let (lines, _guard) = common::capture_every_log_line();
            let mut secrets: Vec<String> = vec![issuer::CLIENT_SECRET.to_owned()];
            let mut decision_logs = Vec::new();

            // Static, from the environment (a value cargo sets for the test run) and from a file.
            let env_secret = std::env::var("CARGO_PKG_DESCRIPTION").unwrap();
            let upstream = Upstream::start().await;
            let (dir, log) = temp_path("decisions.log");
            let gw = gateway(&upstream, "kind = \"static\"\nvalue_env = \"CARGO_PKG_DESCRIPTION\"", portcullis::config::Mode::Enforce, &log).await;
            assert_eq!(post(&gw, &[("authorization", "Bearer users-token-for-static-env")]).await.status(), 200);
            assert_eq!(upstream.seen()[0].headers["authorization"], format!("Bearer {env_secret}").as_str());
            wait_for_decision_lines(&log, 1).await;
            gw.shutdown().await;
            let file = dir.path().join("api-key");
            std::fs::write(&file, "file-secret-5b1f0c\n").unwrap();
            let log_file = dir.path().join("decisions-file.log");
            let gw = gateway(&upstream, &format!("kind = \"static\"\nvalue_file = {file:?}"), portcullis::config::Mode::Enforce, &log_file).await;
            assert_eq!(post(&gw, &[("authorization", "Bearer users-token-for-static-file")]).await.status(), 200);
            assert_eq!(upstream.seen()[1].headers["authorization"], "Bearer file-secret-5b1f0c");
            wait_for_decision_lines(&log_file, 1).await;
            gw.shutdown().await;
            secrets.extend([env_secret, "file-secret-5b1f0c".into(), "users-token-for-static-env".into(), "users-token-for-static-file".into()]);
            decision_logs.extend([log, log_file]);

            // client_secret_basic with an actor, then private_key_jwt with an actor.
            let agent = SigningKey::from_bytes(&rand::random());
            let (basic, _keys, _) = start(&agent).await;
            let client_key = ed25519_dalek::SigningKey::from_bytes(&rand::random());
            let path = _keys.path().join("client.jwk");
            std::fs::write(&path, portcullis_client::keys::private_jwk(&client_key).to_string()).unwrap();
            let (jwt, _keys2, _) = start_with_client(&agent, &format!("client_key_file = {path:?}")).await;
            jwt.issuer.trust_client_keys(&portcullis_client::keys::directory_document(&[&client_key]));
            for s in [&basic, &jwt] {
                let user = s.user_token();
                assert_eq!(signed_call(s, &agent, &user).await.status(), 200);
                assert_eq!(signed_call(s, &agent, &user).await.status(), 200, "cached");
                let seen = s.upstream.seen();
                assert!(claims_of(&bearer(&seen[0])).get("act").is_some());
                secrets.extend([user, bearer(&seen[0])]);
                for form in s.issuer.exchanges() {
                    secrets.extend(["actor_token", "client_assertion", "subject_token"].iter().filter_map(|k| form.get(*k).cloned()));
                }
                wait_for_decision_lines(&s.log, 2).await;
                decision_logs.push(s.log.clone());
            }
            assert!(jwt.issuer.exchanges()[0].contains_key("client_assertion"));

            // A refusal whose description carries a marker, and an issuer that cannot be reached.
            basic.issuer.answer_exchanges_with(Some((400, json!({"error": "access_denied", "error_description": "issuer-marker-7d2e9a"}))));
            let refused = basic.issuer.rsa.sign(&basic.issuer.claims_with(AUD, json!({"jti": "refused"})));
            assert_eq!(signed_call(&basic, &agent, &refused).await.status(), 403);
            secrets.extend([refused, "issuer-marker-7d2e9a".into()]);
            let closed = common::closed_port().await;
            let down = Setup::start("mode = \"enforce\"", &format!("token_endpoint = \"https://{closed}/token\"\ntimeout = \"1s\"")).await;
            let user = down.user_token();
            assert_eq!(down.call(&user).await.status(), 503);
            secrets.push(user);
            wait_for_decision_lines(&basic.log, 3).await;
            wait_for_decision_lines(&down.log, 1).await;
            decision_logs.push(down.log.clone());

            let mut text = lines.text();
            assert!(text.lines().count() > 20 && text.contains("portcullis::"), "the gateway's log was captured:\n{text}");
            for log in &decision_logs {
                text.push_str(&std::fs::read_to_string(log).unwrap());
            }
            for secret in &secrets {
                assert!(secret.len() >= 10, "a secret long enough not to match by chance: {secret}");
                assert!(!text.contains(secret.as_str()), "{secret} is in the log:\n{text}");
            }
        }
    }
}

mod per_server {
    //! `[servers.upstream.auth]`: each backend behind one gateway gets its own credential — a
    //! token exchanged for its own audience, a static key, or nothing.
    use super::*;
    use common::issuer::{self, Issuer};
    use common::pki::TestCa;
    use serde_json::Value;

    fn claims_of(jwt: &str) -> Value {
        let payload = jwt.split('.').nth(1).unwrap();
        serde_json::from_slice(&base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn each_server_exchanges_for_its_own_audience_and_caches_apart() {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let (weather, payments, plain) = (Upstream::start().await, Upstream::start().await, Upstream::start().await);
        let (dir, log) = temp_path("decisions.log");
        let secret = dir.path().join("client-secret");
        std::fs::write(&secret, format!("{}\n", issuer::CLIENT_SECRET)).unwrap();
        let exchange = |audience: &str, scope: &str| {
            format!(
                "kind = \"token_exchange\"\nclient_id = \"{}\"\nclient_secret_file = {secret:?}\naudience = \"{audience}\"\nscope = \"{scope}\"\n",
                issuer::CLIENT_ID
            )
        };
        let text = format!(
            "mode = \"enforce\"\n[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://mcp.example.com\"\n[admin]\naddr = \"127.0.0.1:0\"\n[log]\ndecisions = {log:?}\n\
             [signatures]\nrequired = false\n[oauth]\nrequired = true\nissuer = \"{}\"\nissuer_ca = {:?}\n[policy]\nenabled = false\n\
             [[servers]]\nname = \"weather\"\npath = \"/weather/mcp\"\n[servers.upstream]\nurl = \"{}/mcp\"\n[servers.upstream.auth]\n{}\n\
             [[servers]]\nname = \"payments\"\npath = \"/payments/mcp\"\n[servers.upstream]\nurl = \"{}/mcp\"\n[servers.upstream.auth]\n{}\n\
             [[servers]]\nname = \"plain\"\npath = \"/plain/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n",
            issuer.url(),
            ca.ca_path(),
            weather.url(),
            exchange("https://weather.internal", "weather:read"),
            payments.url(),
            exchange("https://payments.internal", "payments:write"),
            plain.url(),
        );
        let gw = Gateway::start(portcullis::config::Config::parse(&text, "per-server exchange", std::path::Path::new(".")).unwrap()).await;
        let call = |path: &str, token: &str| {
            client().post(gw.url(path)).header("content-type", "application/json").bearer_auth(token).body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).send()
        };
        let token_for = |path: &str| issuer.rsa.sign(&issuer.claims(&format!("https://mcp.example.com{path}")));
        let (w, p, n) = (token_for("/weather/mcp"), token_for("/payments/mcp"), token_for("/plain/mcp"));
        for _ in 0..2 {
            assert_eq!(call("/weather/mcp", &w).await.unwrap().status(), 200);
            assert_eq!(call("/payments/mcp", &p).await.unwrap().status(), 200);
        }
        assert_eq!(call("/plain/mcp", &n).await.unwrap().status(), 200);
        let bearer = |u: &Upstream, i: usize| u.seen()[i].headers["authorization"].to_str().unwrap().strip_prefix("Bearer ").unwrap().to_owned();
        let (to_weather, to_payments) = (claims_of(&bearer(&weather, 0)), claims_of(&bearer(&payments, 0)));
        assert_eq!((to_weather["aud"].as_str(), to_weather["scope"].as_str()), (Some("https://weather.internal"), Some("weather:read")));
        assert_eq!((to_payments["aud"].as_str(), to_payments["scope"].as_str()), (Some("https://payments.internal"), Some("payments:write")));
        assert_eq!(bearer(&weather, 1), bearer(&weather, 0), "weather's second call is cached");
        assert_eq!(issuer.exchanges().len(), 2, "one exchange per server for two calls each");
        assert!(plain.seen()[0].headers.get("authorization").is_none(), "a server without upstream.auth gets no token at all");
        let lines = wait_for_decision_lines(&log, 5).await;
        let on = |server: &str| {
            lines.iter().filter(|l| l["server"] == server).map(|l| (l["upstream_auth"].clone(), l["upstream_auth_cached"].clone())).collect::<Vec<_>>()
        };
        assert_eq!(on("weather"), [(Value::from("token_exchange"), Value::from(false)), (Value::from("token_exchange"), Value::from(true))]);
        assert_eq!(on("plain"), [(Value::from("none"), Value::Null)]);
        let metrics = common::metrics(&gw).await;
        assert!(metrics.contains("portcullis_upstream_token_exchanges_total{server=\"payments\",result=\"issued\"} 1"), "{metrics}");
        gw.shutdown().await;
    }
}
