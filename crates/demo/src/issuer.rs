//! A real OAuth authorization server on 127.0.0.1 over HTTPS (test CA from `pki`): RFC 8414
//! metadata, a JWKS with RSA, EC P-256 and Ed25519 keys (rotatable), RFC 7662 introspection,
//! an OpenID Connect login (authorization endpoint that logs in a chosen user, or offers a
//! page of users to log in as, token endpoint checking PKCE and issuing ID tokens with `nonce`
//! and `auth_time`), and counters of what the gateway fetched. The demo's token issuer is one
//! of these.

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

/// One authorization code the login endpoint issued.
struct Grant {
    client_id: String,
    redirect_uri: String,
    nonce: String,
    challenge: String,
    sub: String,
    auth_time: u64,
}

#[derive(Default)]
struct State {
    /// Who is logged in at the issuer (sub, auth_time); `None`: nobody.
    login: Option<(String, u64)>,
    /// Users the login page offers when nobody is logged in ([`Issuer::offer_logins`]).
    offered: Vec<String>,
    grants: HashMap<String, Grant>,
    authorize_requests: Vec<Vec<(String, String)>>,
    published: Vec<SigningKey>,
    jwks_fetches: usize,
    metadata_fetches: usize,
    introspection: HashMap<String, Value>,
    introspection_calls: usize,
    padding: usize,
    /// The forms of the token-exchange requests that authenticated as [`CLIENT_ID`].
    exchanges: Vec<HashMap<String, String>>,
    /// Every token-exchange answer is this (status, body) when set.
    exchange_answer: Option<(u16, Value)>,
    /// Token-exchange answers wait this long.
    exchange_delay: std::time::Duration,
    /// Keys whose actor tokens (RFC 8693 `actor_token`) are trusted.
    actor_keys: Vec<Value>,
    /// Keys [`CLIENT_ID`] may authenticate with (`private_key_jwt`, RFC 7523).
    client_keys: Vec<Value>,
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

    /// Logs `sub` in at the issuer, authenticated at `auth_time` (unix seconds): the next
    /// authorization request is answered for this user without a form (`prompt=login`
    /// re-authenticates, setting `auth_time` to now).
    pub fn log_in_as(&self, sub: &str, auth_time: u64) {
        self.state.lock().unwrap().login = Some((sub.to_owned(), auth_time));
    }

    /// When nobody is logged in ([`Issuer::log_in_as`]), the authorization endpoint answers
    /// with a page of these users instead of `login_required`: each is a link that logs the
    /// visitor in as that user for this one authorization (the demo's people, in a browser).
    pub fn offer_logins(&self, subs: &[&str]) {
        self.state.lock().unwrap().offered = subs.iter().map(|s| (*s).to_owned()).collect();
    }

    /// The query parameters of every authorization request so far.
    pub fn authorize_requests(&self) -> Vec<Vec<(String, String)>> {
        self.state.lock().unwrap().authorize_requests.clone()
    }

    /// The form of every token exchange that authenticated as [`CLIENT_ID`], in order.
    pub fn exchanges(&self) -> Vec<HashMap<String, String>> {
        self.state.lock().unwrap().exchanges.clone()
    }

    /// Answers every token exchange with `status` and `body` (an error, a malformed answer);
    /// `None`: exchanges are answered normally again.
    pub fn answer_exchanges_with(&self, answer: Option<(u16, Value)>) {
        self.state.lock().unwrap().exchange_answer = answer;
    }

    /// Makes token exchanges wait `delay` before they are answered (concurrent first calls).
    pub fn delay_exchanges(&self, delay: std::time::Duration) {
        self.state.lock().unwrap().exchange_delay = delay;
    }

    /// Trusts actor tokens signed by the public JWKs of `jwks` (a JWK Set, e.g. the gateway's
    /// `/.well-known/jwks.json`).
    pub fn trust_actor_keys(&self, jwks: &Value) {
        self.state.lock().unwrap().actor_keys = jwks["keys"].as_array().cloned().unwrap_or_default();
    }

    /// Lets [`CLIENT_ID`] authenticate with assertions signed by the public JWKs of `jwks`
    /// (`private_key_jwt`, RFC 7523 §2.2) besides its secret.
    pub fn trust_client_keys(&self, jwks: &Value) {
        self.state.lock().unwrap().client_keys = jwks["keys"].as_array().cloned().unwrap_or_default();
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

    /// `claims(audience)` bound to the key of thumbprint `jkt` (`cnf.jkt`, RFC 9449 §6.1): a
    /// DPoP-bound token.
    pub fn bound_claims(&self, audience: &str, jkt: &str) -> Value {
        self.claims_with(audience, json!({"cnf": {"jkt": jkt}}))
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
                            "token_endpoint": format!("{origin}/token"), "authorization_endpoint": format!("{origin}/authorize"),
                            "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"],
                            "authorization_response_iss_parameter_supported": true});
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
        (Method::GET, "/authorize") => authorize(&req, &state, &origin),
        (Method::POST, "/token") => {
            let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let is_exchange = url::form_urlencoded::parse(&body).any(|(k, v)| k == "grant_type" && v == TOKEN_EXCHANGE);
            if is_exchange {
                let delay = state.lock().unwrap().exchange_delay;
                tokio::time::sleep(delay).await;
                return exchange(&body, auth.as_deref(), &state, &origin);
            }
            token(&body, auth.as_deref(), &state, &origin)
        }
        _ => json_response(StatusCode::NOT_FOUND, json!({"error": "not_found"}), None),
    }
}

/// OIDC Core §3.1.2: logs the chosen user in and redirects back with a code, `state` and `iss`.
fn authorize(req: &Request<Incoming>, state: &Arc<Mutex<State>>, origin: &str) -> Response<Body> {
    let q: Vec<(String, String)> = url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()).into_owned().collect();
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
    let mut s = state.lock().unwrap();
    s.authorize_requests.push(q.clone());
    if get("response_type") != "code" || get("code_challenge_method") != "S256" || get("scope").split(' ').all(|x| x != "openid") {
        return json_response(StatusCode::BAD_REQUEST, json!({"error": "invalid_request"}), None);
    }
    let chosen = get(LOGIN_AS);
    let (sub, auth_time) = if s.offered.contains(&chosen) {
        // Chosen on the login page: logged in for this authorization only.
        (chosen, unix_now())
    } else if let Some((sub, mut auth_time)) = s.login.clone() {
        if get("prompt") == "login" {
            auth_time = unix_now();
            s.login = Some((sub.clone(), auth_time));
        }
        (sub, auth_time)
    } else if !s.offered.is_empty() {
        return login_page(&q, &s.offered);
    } else {
        return json_response(StatusCode::UNAUTHORIZED, json!({"error": "login_required"}), None);
    };
    let code = uuid::Uuid::new_v4().simple().to_string();
    let redirect_uri = get("redirect_uri");
    s.grants.insert(
        code.clone(),
        Grant { client_id: get("client_id"), redirect_uri: redirect_uri.clone(), nonce: get("nonce"), challenge: get("code_challenge"), sub, auth_time },
    );
    let mut back = url::Url::parse(&redirect_uri).unwrap();
    back.query_pairs_mut().append_pair("code", &code).append_pair("state", &get("state")).append_pair("iss", origin);
    Response::builder().status(StatusCode::FOUND).header("location", back.as_str()).body(full("")).unwrap()
}

/// The query parameter the login page's links add: the user chosen.
pub const LOGIN_AS: &str = "login_as";

/// The page a person sees at the authorization endpoint when nobody is logged in: one link per
/// offered user, each the same authorization request with [`LOGIN_AS`] added.
fn login_page(query: &[(String, String)], offered: &[String]) -> Response<Body> {
    let mut links = String::new();
    for sub in offered {
        let mut pairs = url::form_urlencoded::Serializer::new(String::new());
        pairs.extend_pairs(query.iter().filter(|(k, _)| k != LOGIN_AS));
        pairs.append_pair(LOGIN_AS, sub);
        let href = format!("/authorize?{}", pairs.finish());
        links.push_str(&format!(
            "<li><a href=\"{}\">Log in as <b>{}</b></a></li>",
            html_escape::encode_double_quoted_attribute(&href),
            html_escape::encode_text(sub)
        ));
    }
    let page = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Demo issuer: log in</title></head><body>\
         <h1>Log in to the demo issuer</h1><p>This issuer exists only for <code>portcullis demo</code>: choose who you are.</p><ul>{links}</ul></body></html>"
    );
    Response::builder().status(StatusCode::OK).header("content-type", "text/html; charset=utf-8").header("cache-control", "no-store").body(full(page)).unwrap()
}

/// RFC 6749 §4.1.3 with PKCE (RFC 7636 §4.6): one use per code, an RS256 ID token.
fn token(body: &[u8], auth: Option<&str>, state: &Arc<Mutex<State>>, origin: &str) -> Response<Body> {
    let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let mut s = state.lock().unwrap();
    let Some(grant) = s.grants.remove(&get("code")) else {
        return json_response(StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}), None);
    };
    let client_id = match auth.and_then(|a| a.strip_prefix("Basic ")) {
        Some(b) => {
            let decoded = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).unwrap_or_default();
            let text = String::from_utf8(decoded).unwrap_or_default();
            text.split_once(':')
                .map(|(id, _)| url::form_urlencoded::parse(id.as_bytes()).map(|(k, v)| format!("{k}{v}")).collect::<String>())
                .unwrap_or_default()
        }
        None => get("client_id"),
    };
    let challenge = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, get("code_verifier").as_bytes()),
    );
    if get("grant_type") != "authorization_code" || get("redirect_uri") != grant.redirect_uri || client_id != grant.client_id || challenge != grant.challenge {
        return json_response(StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}), None);
    }
    let now = unix_now();
    let claims = json!({"iss": origin, "sub": grant.sub, "aud": grant.client_id, "exp": now + 300, "iat": now,
                        "nonce": grant.nonce, "auth_time": grant.auth_time});
    let rsa = s.published.iter().find(|k| k.kid == "rsa-1").cloned();
    drop(s);
    let Some(rsa) = rsa else { return json_response(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "no key"}), None) };
    let mut header = jsonwebtoken::Header::new(rsa.alg);
    header.kid = Some(rsa.kid.clone());
    json_response(StatusCode::OK, json!({"access_token": "opaque", "token_type": "Bearer", "id_token": rsa.sign_with(&header, &claims)}), Some("no-store"))
}

/// RFC 8693 §2.1 `grant_type`.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 §3 access token type.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// RFC 7523 §2.2 `client_assertion_type`.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// RFC 8693 §3 JWT type (actor tokens).
pub const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The claims of `token` if one of `keys` (public JWKs) signed it and it has not expired.
fn verified_claims(token: &str, keys: &[Value], check_aud: Option<&str>) -> Option<Value> {
    let header = jsonwebtoken::decode_header(token).ok()?;
    keys.iter().find_map(|jwk| {
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk.clone()).ok()?;
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).ok()?;
        let mut v = jsonwebtoken::Validation::new(header.alg);
        match check_aud {
            Some(aud) => v.set_audience(&[aud]),
            None => v.validate_aud = false,
        }
        jsonwebtoken::decode::<Value>(token, &key, &v).ok().map(|d| d.claims)
    })
}

/// RFC 8693 §2: client authentication (HTTP Basic, RFC 6749 §2.3.1), the parameters, a
/// subject token this issuer signed, an actor token it trusts if one is sent. The issued token
/// is an RS256 JWT for the `audience` (else `resource`) asked, with the subject's `sub`, the
/// `scope` asked, and `act: {"sub": <actor's sub>}` when an actor token was verified.
fn exchange(body: &[u8], auth: Option<&str>, state: &Arc<Mutex<State>>, origin: &str) -> Response<Body> {
    let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let mut s = state.lock().unwrap();
    let authenticated = if form.get("client_assertion_type").is_some_and(|t| t == JWT_BEARER) {
        // RFC 7523 §3: iss = sub = the client, aud = this issuer, a signature by a key of its.
        verified_claims(&get("client_assertion"), &s.client_keys, Some(origin))
            .is_some_and(|c| c["iss"] == CLIENT_ID && c["sub"] == CLIENT_ID && form.get("client_id").is_none_or(|id| id == CLIENT_ID) && auth.is_none())
    } else {
        let expected = format!(
            "Basic {}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{}:{}", form_encode(CLIENT_ID), form_encode(CLIENT_SECRET)))
        );
        auth == Some(expected.as_str())
    };
    if !authenticated {
        return json_response(StatusCode::UNAUTHORIZED, json!({"error": "invalid_client"}), None);
    }
    s.exchanges.push(form.clone());
    if let Some((status, answer)) = s.exchange_answer.clone() {
        return json_response(StatusCode::from_u16(status).unwrap(), answer, Some("no-store"));
    }
    let refuse =
        |error: &str, description: &str| json_response(StatusCode::BAD_REQUEST, json!({"error": error, "error_description": description}), Some("no-store"));
    if get("subject_token_type") != ACCESS_TOKEN_TYPE || form.get("requested_token_type").is_some_and(|t| t != ACCESS_TOKEN_TYPE) {
        return refuse("invalid_request", "token types");
    }
    let published: Vec<Value> = s.published.iter().map(|k| k.jwk.clone()).collect();
    let Some(subject) = verified_claims(&get("subject_token"), &published, None).filter(|c| c["iss"] == origin) else {
        return refuse("invalid_grant", "subject token not issued here");
    };
    let audience = form.get("audience").or(form.get("resource")).cloned();
    let Some(audience) = audience else { return refuse("invalid_target", "no audience or resource") };
    let mut act = None;
    if let Some(actor) = form.get("actor_token") {
        if get("actor_token_type") != JWT_TOKEN_TYPE {
            return refuse("invalid_request", "actor token type");
        }
        let Some(claims) = verified_claims(actor, &s.actor_keys, Some(origin)) else { return refuse("invalid_request", "actor token not trusted") };
        act = Some(json!({"sub": claims["sub"]}));
    }
    let now = unix_now();
    let mut claims = json!({"iss": origin, "sub": subject["sub"], "aud": audience, "exp": now + 300, "iat": now, "client_id": CLIENT_ID,
                            "jti": uuid::Uuid::new_v4().to_string()});
    if let Some(scope) = form.get("scope") {
        claims["scope"] = json!(scope);
    }
    if let Some(act) = act {
        claims["act"] = act;
    }
    let rsa = s.published.iter().find(|k| k.kid == "rsa-1").cloned();
    drop(s);
    let Some(rsa) = rsa else { return json_response(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "server_error"}), None) };
    json_response(
        StatusCode::OK,
        json!({"access_token": rsa.sign(&claims), "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer", "expires_in": 300}),
        Some("no-store"),
    )
}

fn form_encode(s: &str) -> String {
    form(s)
}

fn form(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
