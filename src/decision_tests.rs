use super::*;
use crate::config::Mode;
use crate::directory::DirectoryError;
use crate::evidence::Evidence;
use crate::oauth::TokenError;
use crate::policy::PolicyError;
use crate::quota::QuotaError;
use crate::replay::ReplayError;
use crate::session::SessionError;
use crate::signature::SignatureError;
use http_body_util::BodyExt;
use portcullis_wire::digest::DigestError;
use portcullis_wire::mcp::McpError;

fn challenge() -> Challenge {
    Challenge {
        resource_metadata: "https://mcp.example.com/.well-known/oauth-protected-resource".into(),
        scope: "mcp:tools files:read".into(),
        accept_signature: r#"sig1=("@method" "@authority" "@path" "signature-agent";key="sig1");tag="web-bot-auth""#.into(),
        dpop_algs: String::new(),
    }
}

fn dpop_challenge() -> Challenge {
    Challenge { dpop_algs: portcullis_wire::dpop::ACCEPTED_ALGS.into(), ..challenge() }
}

#[tokio::test]
async fn with_dpop_on_oauth_required_offers_both_schemes() {
    let resp = respond(&Denial::OAuthRequired, "r", &dpop_challenge());
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="mcp:tools files:read", DPoP algs="ES256 EdDSA Ed25519 RS256 PS256""#
    );
}

#[tokio::test]
async fn an_invalid_proof_has_the_dpop_challenge_and_its_own_code() {
    use portcullis_wire::dpop::DpopError;
    let resp = respond(&Denial::from(TokenError::Dpop(DpopError::WrongUri)), "r", &dpop_challenge());
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()[CACHE_CONTROL], "no-store");
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"DPoP error="invalid_dpop_proof", error_description="invalid DPoP proof: htu does not match the request", algs="ES256 EdDSA Ed25519 RS256 PS256""#
    );
    assert_eq!(body_json(resp).await["error"], "invalid_dpop_proof");
    // RFC 9449 Figure 16: a proof by another key than the token's is the DPoP challenge's invalid_token.
    let resp = respond(&Denial::from(TokenError::KeyBindingMismatch), "r", &dpop_challenge());
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"DPoP error="invalid_token", error_description="DPoP proof key does not match the token's cnf.jkt", algs="ES256 EdDSA Ed25519 RS256 PS256""#
    );
    // RFC 9449 Figure 18: a bad Bearer token has the error on the Bearer challenge, DPoP offered.
    let resp = respond(&Denial::from(TokenError::BoundTokenAsBearer), "r", &dpop_challenge());
    let v = resp.headers()[WWW_AUTHENTICATE].to_str().expect("ascii").to_owned();
    assert!(v.starts_with(r#"Bearer error="invalid_token", error_description="token is bound to a key"#), "{v}");
    assert!(v.ends_with(r#", DPoP algs="ES256 EdDSA Ed25519 RS256 PS256""#), "{v}");
}

async fn body_json(resp: Response<ResponseBody>) -> serde_json::Value {
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).expect("json body")
}

#[test]
fn monitor_mode_forwards_denials_and_enforce_refuses_them() {
    let (monitor, enforce) = (Modes::uniform(Mode::Monitor), Modes::uniform(Mode::Enforce));
    let v = apply_mode(&monitor, Err(Refusal::for_test(Denial::ReplayedSignature)));
    assert!(matches!(&v, Verdict::Forward(f) if matches!(f.monitored(), Some(Denial::ReplayedSignature)) && f.findings().len() == 1));
    let v = apply_mode(&enforce, Err(Refusal::for_test(Denial::ReplayedSignature)));
    assert!(matches!(&v, Verdict::Refuse(r) if matches!(r.denial(), Denial::ReplayedSignature)));
    let v = apply_mode(&enforce, Ok(Permit::for_test(Evidence::default())));
    assert!(matches!(&v, Verdict::Forward(f) if f.monitored().is_none() && f.findings().is_empty()));
}

#[test]
fn a_finding_is_refused_only_when_its_stage_group_enforces() {
    let identity_enforced = Modes::uniform(Mode::Monitor).with(Group::Identity, Mode::Enforce);
    let v = apply_mode(&identity_enforced, Err(Refusal::for_test(Denial::ReplayedSignature)));
    assert!(matches!(&v, Verdict::Refuse(_)), "replay is an identity finding");
    let v = apply_mode(&identity_enforced, Err(Refusal::for_test(Denial::AccessDenied { reason: "tool_not_allowed".into() })));
    assert!(matches!(&v, Verdict::Forward(f) if f.monitored().is_some()), "a policy finding is only logged");
}

#[test]
fn an_answer_refused_after_the_fact_is_withheld_only_in_enforce_mode() {
    let finding = Finding::new(crate::stage::Stage::Mcp, &Denial::ReplayedSignature);
    assert!(withholds(&Modes::uniform(Mode::Enforce), &finding));
    assert!(!withholds(&Modes::uniform(Mode::Monitor), &finding));
}

#[tokio::test]
async fn oauth_required_has_the_mcp_challenge() {
    let resp = respond(&Denial::OAuthRequired, "rid-1", &challenge());
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()[CACHE_CONTROL], "no-store");
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="mcp:tools files:read""#
    );
    let body = body_json(resp).await;
    assert_eq!(body["error"], "oauth_required");
    assert_eq!(body["request_id"], "rid-1");
}

#[tokio::test]
async fn insufficient_scope_lists_every_required_scope() {
    let resp = respond(&Denial::InsufficientScope { required: vec!["payments:write".into(), "files:read".into()] }, "r", &challenge());
    assert_eq!(resp.status(), 403);
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"Bearer error="insufficient_scope", scope="payments:write files:read", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#
    );
    assert_eq!(body_json(resp).await["error"], "insufficient_scope");
}

#[tokio::test]
async fn rate_limit_rounds_retry_after_up() {
    let resp = respond(&Denial::RateLimited { retry_after: Duration::from_millis(1500) }, "r", &challenge());
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()[RETRY_AFTER], "2");
    assert_eq!(body_json(resp).await["error"], "rate_limit_exceeded");
}

#[tokio::test]
async fn digest_refusal_asks_for_a_digest() {
    let resp = respond(&Denial::Digest(DigestError::Missing), "r", &challenge());
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["want-content-digest"], "sha-256=10, sha-512=5");
    let body = body_json(resp).await;
    assert_eq!(body["error"], "invalid_agent_credentials");
    assert!(body["reason"].as_str().expect("reason").contains("Content-Digest"));
    // Every stage-2 refusal asks, a digest that does not match included (docs/design.md decision 8).
    for e in [DigestError::Mismatch { algorithm: "sha-256" }, DigestError::Malformed("x".into()), DigestError::NoSupportedAlgorithm] {
        let resp = respond(&Denial::Digest(e.clone()), "r", &challenge());
        assert_eq!(resp.headers()["want-content-digest"], "sha-256=10, sha-512=5", "{e:?}");
    }
}

#[tokio::test]
async fn policy_reason_is_the_refusal_reason() {
    let resp = respond(&Denial::AccessDenied { reason: "human_approval_required".into() }, "r", &challenge());
    assert_eq!(resp.status(), 403);
    let body = body_json(resp).await;
    assert_eq!(body["error"], "agent_access_denied");
    assert_eq!(body["reason"], "human_approval_required");
}

#[test]
fn every_denial_has_a_code_and_status() {
    let all = [
        Denial::BodyTooLarge { limit: 1 },
        Denial::BodyTimeout { after: Duration::from_secs(1) },
        Denial::BodyUnreadable("reset".into()),
        Denial::Overloaded,
        Denial::Shed,
        Denial::HeadsOverloaded,
        Denial::RequestTimeout { after: Duration::from_secs(60) },
        Denial::Digest(DigestError::Missing),
        Denial::Signature(SignatureError::Missing),
        Denial::KeyResolution(DirectoryError::NoAgent { keyid: "k".into() }),
        Denial::ReplayedSignature,
        Denial::OAuthRequired,
        Denial::InvalidToken(TokenError::BadSignature),
        Denial::InvalidRequest(TokenError::TokenInQuery),
        Denial::IssuerUnavailable(TokenError::IssuerUnavailable { issuer: "https://auth.example.com".into(), reason: "down".into() }),
        Denial::InsufficientScope { required: vec![] },
        Denial::AccessDenied { reason: "x".into() },
        Denial::RateLimited { retry_after: Duration::ZERO },
        Denial::StateUnavailable { reason: "redis down".into() },
        Denial::SessionNotFound(SessionError::NotFound),
        Denial::SessionConflict(SessionError::Conflict),
        Denial::Mcp(McpError::NotJson("eof".into())),
        Denial::Mcp(McpError::InvalidRequest { id: None, reason: "x".into() }),
        Denial::Mcp(McpError::BatchTooLarge { size: 101, limit: 100 }),
        Denial::Mcp(McpError::HeaderMismatch { id: None, reason: "x".into() }),
        Denial::Mcp(McpError::TooDeep { id: None, what: "arguments" }),
        Denial::Policy(PolicyError::Evaluation { version: "v".into(), reason: "x".into() }),
        Denial::CallTooLargeToShow(crate::approval::shown::TooLarge { size: 70_000, limit: 65_536 }),
    ];
    let expected = [
        (413, "body_too_large"),
        (408, "body_timeout"),
        (400, "body_unreadable"),
        (503, "overloaded"),
        (503, "overloaded"),
        (503, "overloaded"),
        (504, "request_timeout"),
        (401, "invalid_agent_credentials"),
        (401, "invalid_agent_credentials"),
        (401, "invalid_agent_credentials"),
        (401, "replayed_signature"),
        (401, "oauth_required"),
        (401, "invalid_token"),
        (400, "invalid_request"),
        (503, "issuer_unavailable"),
        (403, "insufficient_scope"),
        (403, "agent_access_denied"),
        (429, "rate_limit_exceeded"),
        (503, "state_unavailable"),
        (404, "session_not_found"),
        (502, "session_conflict"),
        (400, "parse_error"),
        (400, "invalid_request"),
        (400, "batch_too_large"),
        (400, "header_mismatch"),
        (400, "invalid_request"),
        (403, "agent_access_denied"),
        (403, "approval_unavailable"),
    ];
    assert_eq!(all.len(), expected.len());
    for (d, (status, code)) in all.iter().zip(expected) {
        assert_eq!((d.status().as_u16(), d.code()), (status, code), "{d:?}");
    }
    // Decision 13 names the reason; the sizes stay in the diagnostic text.
    assert_eq!(all[all.len() - 1].reason(), "call_too_large_to_show");
}

#[test]
fn quoting_escapes_and_strips_controls() {
    assert_eq!(quote(r#"a"b\c"#), r#"a\"b\\c"#);
    assert_eq!(quote("x\r\ny"), "xy");
}

#[tokio::test]
async fn agent_credential_refusals_carry_accept_signature() {
    for denial in [Denial::Signature(SignatureError::Missing), Denial::KeyResolution(DirectoryError::UntrustedOrigin)] {
        let resp = respond(&denial, "r", &challenge());
        assert_eq!(resp.status(), 401);
        assert_eq!(resp.headers()["accept-signature"], challenge().accept_signature.as_str());
        assert_eq!(resp.headers()[CACHE_CONTROL], "no-store");
        assert_eq!(body_json(resp).await["error"], "invalid_agent_credentials");
    }
    let resp = respond(&Denial::ReplayedSignature, "r", &challenge());
    assert!(resp.headers().get("accept-signature").is_none());
    assert_eq!(body_json(resp).await["error"], "replayed_signature");
}

#[test]
fn session_errors_map_to_not_found_conflict_or_state_unavailable() {
    for e in [SessionError::NotFound, SessionError::Malformed] {
        let d = Denial::from(e);
        assert_eq!((d.status().as_u16(), d.code()), (404, "session_not_found"));
    }
    let d = Denial::from(SessionError::Conflict);
    assert_eq!((d.status().as_u16(), d.code()), (502, "session_conflict"));
    let d = Denial::from(SessionError::Store(crate::state::StoreError::Unavailable { store: "redis://x".into(), reason: "down".into() }));
    assert_eq!((d.status().as_u16(), d.code()), (503, "state_unavailable"));
    assert!(d.reason().contains("redis://x"), "{}", d.reason());
}

#[test]
fn replay_errors_map_to_replayed_or_state_unavailable() {
    assert!(matches!(Denial::from(ReplayError::Replayed), Denial::ReplayedSignature));
    let d = Denial::from(ReplayError::Store(crate::state::StoreError::Unavailable { store: "redis://x".into(), reason: "down".into() }));
    assert_eq!((d.status().as_u16(), d.code()), (503, "state_unavailable"));
    assert!(d.reason().contains("redis://x"), "{}", d.reason());
}

#[tokio::test]
async fn invalid_token_has_a_one_line_quoted_challenge() {
    let resp = respond(&Denial::from(TokenError::KeyMismatch { kid: "k\"1\r\n".into(), alg: "EdDSA".into() }), "r", &challenge());
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()[WWW_AUTHENTICATE],
        r#"Bearer error="invalid_token", error_description="issuer key \"k\\\"1\\r\\n\" cannot verify EdDSA", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#
    );
    assert_eq!(body_json(resp).await["error"], "invalid_token");
}

#[tokio::test]
async fn malformed_authorization_is_400_invalid_request() {
    let resp = respond(&Denial::from(TokenError::MalformedHeader("scheme is not Bearer")), "r", &challenge());
    assert_eq!(resp.status(), 400);
    let v = resp.headers()[WWW_AUTHENTICATE].to_str().expect("ascii").to_owned();
    assert!(v.starts_with(r#"Bearer error="invalid_request", error_description="Authorization header is malformed: scheme is not Bearer""#), "{v}");
    assert_eq!(body_json(resp).await["error"], "invalid_request");
}

#[test]
fn token_errors_map_to_the_mcp_refusals() {
    assert!(matches!(Denial::from(TokenError::Missing), Denial::OAuthRequired));
    assert!(matches!(Denial::from(TokenError::TokenInQuery), Denial::InvalidRequest(_)));
    assert!(matches!(Denial::from(TokenError::Expired { exp: 1 }), Denial::InvalidToken(_)));
    assert!(matches!(Denial::from(TokenError::Inactive), Denial::InvalidToken(_)));
    assert!(matches!(Denial::from(TokenError::BoundTokenAsBearer), Denial::InvalidToken(_)));
    assert!(matches!(Denial::from(TokenError::NotSenderConstrained), Denial::InvalidToken(_)));
    let proof = Denial::from(TokenError::Dpop(portcullis_wire::dpop::DpopError::Replayed));
    assert_eq!((proof.status().as_u16(), proof.code()), (401, "invalid_dpop_proof"));
    assert_eq!(crate::stage::Stage::of(&proof), crate::stage::Stage::Token);
    let store = Denial::from(TokenError::ProofStore(crate::state::StoreError::Unavailable { store: "redis://x".into(), reason: "down".into() }));
    assert_eq!((store.status().as_u16(), store.code()), (503, "state_unavailable"));
    let down = Denial::from(TokenError::IssuerUnavailable { issuer: "https://auth.example.com".into(), reason: "JWKS: HTTP 500".into() });
    assert_eq!(down.status(), 503);
    assert!(down.reason().contains("https://auth.example.com"), "{}", down.reason());
}

#[tokio::test]
async fn mcp_refusal_is_a_json_rpc_error_object() {
    let denial = Denial::Mcp(McpError::HeaderMismatch { id: Some(serde_json::json!(7)), reason: "Mcp-Method header differs".into() });
    let resp = respond(&denial, "rid-9", &challenge());
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()[CACHE_CONTROL], "no-store");
    let body = body_json(resp).await;
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32020);
    assert_eq!(body["error"]["data"]["error"], "header_mismatch");
    assert_eq!(body["error"]["data"]["request_id"], "rid-9");
    let body = body_json(respond(&Denial::Mcp(McpError::NotJson("eof".into())), "r", &challenge())).await;
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone(), body["error"]["message"].clone()),
        (serde_json::Value::Null, (-32700).into(), "Parse error".into())
    );
}

#[tokio::test]
async fn policy_error_is_an_access_denial_without_internals() {
    let denial = Denial::Policy(PolicyError::MalformedDecision { version: "abc".into(), reason: "missing field `allow`".into() });
    let resp = respond(&denial, "r", &challenge());
    assert_eq!(resp.status(), 403);
    let body = body_json(resp).await;
    assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("agent_access_denied"), Some("policy_error")));
}

#[test]
fn quota_errors_become_rate_limit_or_store_refusals() {
    let d: Denial = QuotaError::Exhausted { key: "k".into(), retry_after: Duration::from_secs(3) }.into();
    assert!(matches!(d, Denial::RateLimited { retry_after } if retry_after == Duration::from_secs(3)));
    let d: Denial = QuotaError::Store(crate::state::StoreError::Unavailable { store: "memory".into(), reason: "full".into() }).into();
    assert_eq!(d.code(), "state_unavailable");
}

#[tokio::test]
async fn a_caller_over_its_bound_is_429_with_retry_after_in_every_mode() {
    let errors: [Denial; 3] = [
        crate::idempotency::IdempotencyError::CallerLimit { retry_after: Duration::from_millis(1500) }.into(),
        SessionError::CallerLimit { retry_after: Duration::from_millis(1500) }.into(),
        crate::approval::ApprovalError::CallerLimit { retry_after: Duration::from_millis(1500) }.into(),
    ];
    for (d, setting) in errors.into_iter().zip(["idempotency.max_entries_per_caller", "limits.max_sessions_per_caller", "approvals.max_pending_per_caller"]) {
        assert!(d.reason().contains(setting) && d.reason().ends_with("retry after 2s"), "{}", d.reason());
        // A resource bound, not a decision: refused in monitor mode, and an answer withheld.
        let monitor = Modes::uniform(Mode::Monitor);
        let finding = crate::finding::Finding::of(&d);
        assert!(withholds(&monitor, &finding));
        let resp = respond(&d, "r", &challenge());
        assert!(matches!(apply_mode(&monitor, Err(Refusal::for_test(d))), Verdict::Refuse(_)), "{setting}");
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[RETRY_AFTER], "2");
        assert_eq!(body_json(resp).await["error"], "caller_limit_exceeded");
    }
}

#[test]
fn a_tool_execution_error_is_a_protocol_answer_in_enforce_mode_and_a_finding_in_monitor_mode() {
    let invalid = || {
        Denial::Catalog(crate::catalog::CatalogError::InvalidArguments { id: serde_json::json!(7), pointer: "/amount".into(), problem: "not a number".into() })
    };
    let v = apply_mode(&Modes::uniform(Mode::Enforce), Err(Refusal::for_test(invalid())));
    assert!(matches!(&v, Verdict::Respond(r) if r.denial().is_protocol_answer()), "{v:?}");
    assert_eq!(Outcome::of_protocol_answer(&invalid()), Outcome::Deny);
    let v = apply_mode(&Modes::uniform(Mode::Monitor), Err(Refusal::for_test(invalid())));
    assert!(matches!(&v, Verdict::Forward(f) if f.monitored().is_some()), "monitor mode forwards the call");
    let v = apply_mode(&Modes::uniform(Mode::Enforce), Err(Refusal::for_test(Denial::ReplayedSignature)));
    assert!(matches!(&v, Verdict::Refuse(_)), "a refusal is not a protocol answer");
}
