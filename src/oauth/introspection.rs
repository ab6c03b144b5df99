//! Opaque tokens (pipeline stage 7, optional): RFC 7662 token introspection with the
//! gateway's client credentials (`[oauth.introspection]`).
//!
//! Used only for tokens that are not JWTs. The issuer's answer is trusted for what it says
//! (`active`, `aud`, `exp`, `scope`, `sub`, `client_id`); the same claim checks as for JWTs
//! then apply (audience must contain this resource, time window, `iss` if present). The client
//! secret is a `SecretString`: it is exposed only to build the request and never logged. An
//! endpoint that cannot be reached is an error naming it (fail closed).

use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};
use url::Url;

use super::issuer::{FetchError, IssuerClient};
use super::token::{self, Profile, Rules};
use super::{TokenError, VerifiedToken};
use portcullis_wire::UnixTime;

/// The introspection client.
pub(crate) struct Introspector {
    client: IssuerClient,
    url: Url,
    client_id: String,
    client_secret: SecretString,
}

impl std::fmt::Debug for Introspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspector").field("url", &self.url).field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

impl Introspector {
    /// A client for `url` authenticating as `client_id`.
    pub(crate) fn new(client: IssuerClient, url: Url, client_id: String, client_secret: SecretString) -> Introspector {
        Introspector { client, url, client_id, client_secret }
    }

    /// Asks the issuer about `token` (RFC 7662 §2.1) and checks the answer.
    pub(crate) async fn introspect(&self, token: &str, rules: &Rules, now: UnixTime) -> Result<VerifiedToken, TokenError> {
        // RFC 6749 §2.3.1: client id and secret are form-urlencoded before Basic encoding.
        let user: String = url::form_urlencoded::byte_serialize(self.client_id.as_bytes()).collect();
        let password: String = url::form_urlencoded::byte_serialize(self.client_secret.expose_secret().as_bytes()).collect();
        let what = format!("introspection {}", self.url);
        let doc = self.client.post_form(&self.url, &user, &password, &[("token", token), ("token_type_hint", "access_token")]).await.map_err(|e| match e {
            FetchError::Unreachable(r) | FetchError::Refused(r) => self.client.unavailable(&what, r),
        })?;
        let answer: Map<String, Value> = serde_json::from_slice(&doc.body)
            .map_err(|e| self.client.unavailable(&what, format!("not an introspection response: {}", portcullis_wire::jose::json_error_text(&e))))?;
        check_answer(answer, rules, now)
    }
}

/// RFC 7662 §2.2: `active` is required and only `true` means the token may be used.
pub(crate) fn check_answer(answer: Map<String, Value>, rules: &Rules, now: UnixTime) -> Result<VerifiedToken, TokenError> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(TokenError::Inactive);
    }
    token::validate_claims(answer, rules, now, Profile::Introspection)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules { issuer: "https://auth.example.com".into(), audience: "https://mcp.example.com/mcp".into(), skew_secs: 30 }
    }

    fn answer(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn active_answer_gives_identity_and_scopes() {
        let a = answer(serde_json::json!({"active": true, "sub": "u1", "aud": "https://mcp.example.com/mcp", "exp": 2000, "scope": "a b", "client_id": "c"}));
        let t = check_answer(a, &rules(), UnixTime(std::time::Duration::from_secs(1000))).expect("active");
        assert_eq!(t.sub(), Some("u1"));
        assert_eq!(t.scopes(), ["a", "b"]);
        assert_eq!(t.client_id(), Some("c"));
    }

    #[test]
    fn inactive_or_missing_active_is_refused() {
        let now = UnixTime(std::time::Duration::from_secs(1000));
        assert!(matches!(check_answer(answer(serde_json::json!({"active": false})), &rules(), now), Err(TokenError::Inactive)));
        assert!(matches!(check_answer(answer(serde_json::json!({"sub": "u"})), &rules(), now), Err(TokenError::Inactive)));
    }

    #[test]
    fn active_answer_for_another_resource_is_refused() {
        let a = answer(serde_json::json!({"active": true, "aud": "https://other.example/mcp", "exp": 2000}));
        let err = check_answer(a, &rules(), UnixTime(std::time::Duration::from_secs(1000))).expect_err("wrong aud");
        assert!(matches!(err, TokenError::WrongAudience { .. }), "{err:?}");
    }
}
