//! A real OAuth authorization server on 127.0.0.1 over HTTPS (test CA from `pki`): RFC 8414
//! metadata, a JWKS with RSA, EC P-256 and Ed25519 keys (rotatable), RFC 7662 introspection,
//! and counters of what the gateway fetched. The demo's token issuer is one of these.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::keys::{self, SigningKey};
use crate::pki::{self, HttpsServer, TestCa};
use crate::{full, Body, Error};

/// The client id the introspection endpoint accepts.
pub const CLIENT_ID: &str = "portcullis";
/// The client secret the introspection endpoint accepts.
pub const CLIENT_SECRET: &str = "s3cret:with/odd chars";

#[derive(Default)]
struct State {
    published: Vec<SigningKey>,
    jwks_fetches: usize,
    metadata_fetches: usize,
    introspection: HashMap<String, Value>,
    introspection_calls: usize,
    padding: usize,
}

/// The running issuer. Its identifier is [`Issuer::url`] (`https://127.0.0.1:<port>`).
pub struct Issuer {
    /// `rsa-1`, RS256.
    pub rsa: SigningKey,
    /// `ec-1`, ES256.
    pub ec: SigningKey,
    /// `ed-1`, EdDSA.
    pub ed: SigningKey,
    origin: String,
    state: Arc<Mutex<State>>,
    server: Option<HttpsServer>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer").field("origin", &self.origin).finish_non_exhaustive()
    }
}

impl Issuer {
    /// Starts the issuer publishing one key of each type; panics if it cannot.
    pub async fn start(ca: &TestCa) -> Issuer {
        Issuer::try_start(ca).await.expect("OAuth issuer on 127.0.0.1")
    }

    /// Starts the issuer publishing one key of each type.
    pub async fn try_start(ca: &TestCa) -> Result<Issuer, Error> {
        let (rsa, ec, ed) = (SigningKey::try_rsa("rsa-1")?, SigningKey::try_ec("ec-1")?, SigningKey::try_ed("ed-1")?);
        let state = Arc::new(Mutex::new(State { published: vec![rsa.clone(), ec.clone(), ed.clone()], ..State::default() }));
        let listener = pki::bind().await?;
        let origin = pki::origin(listener.local_addr()?);
        let (s, o) = (state.clone(), origin.clone());
        let server = HttpsServer::try_serve(listener, ca.try_server_config()?, move |req| handle(req, s.clone(), o.clone()))?;
        Ok(Issuer { rsa, ec, ed, origin, state, server: Some(server) })
    }

    /// The issuer identifier (`iss`, `oauth.issuer`).
    pub fn url(&self) -> String {
        self.origin.clone()
    }

    /// Stops serving (connections are refused from now on).
    pub fn stop(&mut self) {
        self.server = None;
    }

    /// Replaces the published keys (key rotation).
    pub fn publish(&self, keys: &[&SigningKey]) {
        self.state.lock().unwrap().published = keys.iter().map(|k| (*k).clone()).collect();
    }

    /// Pads the JWKS document with `bytes` of whitespace (size-bound tests).
    pub fn pad_jwks(&self, bytes: usize) {
        self.state.lock().unwrap().padding = bytes;
    }

    /// How many times the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.state.lock().unwrap().jwks_fetches
    }

    /// How many times a metadata document was fetched.
    pub fn metadata_fetches(&self) -> usize {
        self.state.lock().unwrap().metadata_fetches
    }

    /// How many introspection requests carried the right client credentials.
    pub fn introspection_calls(&self) -> usize {
        self.state.lock().unwrap().introspection_calls
    }

    /// Registers an opaque token and the introspection answer for it.
    pub fn register_opaque(&self, token: &str, answer: Value) {
        self.state.lock().unwrap().introspection.insert(token.to_owned(), answer);
    }

    /// Valid RFC 9068 claims for `audience`, issued now, for 5 minutes.
    pub fn claims(&self, audience: &str) -> Value {
        let now = unix_now();
        json!({"iss": self.origin, "sub": "user-1842", "aud": [audience], "exp": now + 300, "iat": now, "nbf": now,
               "client_id": "agent-app", "jti": format!("jti-{now}"), "scope": "mcp:tools files:read"})
    }

    /// `claims(audience)` with `changes` merged in.
    pub fn claims_with(&self, audience: &str, changes: Value) -> Value {
        let mut c = self.claims(audience);
        for (k, v) in changes.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }
}

/// Seconds since the epoch (the gateway reads the same clock).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

fn json_response(status: StatusCode, v: Value, cache_control: Option<&str>) -> Response<Body> {
    let mut b = Response::builder().status(status).header("content-type", "application/json");
    if let Some(cc) = cache_control {
        b = b.header("cache-control", cc);
    }
    b.body(full(v.to_string())).unwrap()
}

async fn handle(req: Request<Incoming>, state: Arc<Mutex<State>>, origin: String) -> Response<Body> {
    match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/.well-known/oauth-authorization-server") => {
            state.lock().unwrap().metadata_fetches += 1;
            let md = json!({"issuer": origin, "jwks_uri": format!("{origin}/jwks"), "introspection_endpoint": format!("{origin}/introspect"),
                            "token_endpoint": format!("{origin}/token"), "response_types_supported": ["code"]});
            json_response(StatusCode::OK, md, Some("max-age=3600"))
        }
        (Method::GET, "/jwks") => {
            let mut s = state.lock().unwrap();
            s.jwks_fetches += 1;
            let refs: Vec<&SigningKey> = s.published.iter().collect();
            if s.padding > 0 {
                let body = format!("{}{}", " ".repeat(s.padding), keys::jwks(&refs));
                return Response::builder().header("content-type", "application/json").body(full(body)).unwrap();
            }
            json_response(StatusCode::OK, keys::jwks(&refs), Some("public, max-age=3600"))
        }
        (Method::POST, "/introspect") => {
            let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let expected =
                format!("Basic {}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{}:{}", form(CLIENT_ID), form(CLIENT_SECRET))));
            if auth != expected {
                return json_response(StatusCode::UNAUTHORIZED, json!({"error": "invalid_client"}), None);
            }
            let token = url::form_urlencoded::parse(&body).find(|(k, _)| k == "token").map(|(_, v)| v.into_owned()).unwrap_or_default();
            let mut s = state.lock().unwrap();
            s.introspection_calls += 1;
            let answer = s.introspection.get(&token).cloned().unwrap_or_else(|| json!({"active": false}));
            json_response(StatusCode::OK, answer, None)
        }
        _ => json_response(StatusCode::NOT_FOUND, json!({"error": "not_found"}), None),
    }
}

fn form(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
