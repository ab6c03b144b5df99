//! The approval pages on the public listener, outside the agent pipeline (docs/approvals.md).
//!
//! `GET {path}/{code}` checks, in order: (1) the code is live, else the same 404 for unknown,
//! expired, used, denied and superseded codes; (2) someone is logged in, else OpenID Connect
//! login at `oauth.issuer` (authorization code + PKCE + nonce + state); (3) the login's `sub`
//! is the record's, else "made for another account" and an `approval_wrong_user` event;
//! (4) the login is younger than `approvals.max_login_age`, else log in again
//! (`prompt=login`); (5) only then the whole call, every invisible character shown as an
//! escape ([`crate::visible`]) and everything HTML-escaped, with Approve / Deny (POST with a
//! CSRF token). `GET {path}/callback` finishes a login. Nothing here redirects anywhere but
//! the issuer's authorization endpoint (from its metadata) and the gateway's own pages.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::seal::{self, Purpose};
use super::Approvals;
use crate::state::approval::{ApprovalRecord, Choice};
use portcullis_wire::UnixTime;

/// The approver's session cookie.
const SESSION_COOKIE: &str = "portcullis_approver";
/// The login-in-progress cookie.
const LOGIN_COOKIE: &str = "portcullis_login";
/// How long a login may take at the issuer.
const LOGIN_TTL: u64 = 600;
/// Largest form body read.
const MAX_FORM: usize = 4 * 1024;
/// Time allowed to send the form body.
const FORM_TIMEOUT: Duration = Duration::from_secs(10);
/// Every page's Content-Security-Policy: nothing loads, nothing frames the page.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'";

/// The response body type (the gateway's `ResponseBody`).
pub(crate) type PageBody = BoxBody<Bytes, hyper::Error>;

/// Something the decision log must record about a page visit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageEvent {
    /// Someone other than the user who delegated opened the link (`approval_wrong_user`).
    WrongUser {
        /// The approval's id.
        approval_id: String,
        /// Who logged in.
        login_sub: String,
        /// The MCP server the call is for.
        server: String,
    },
    /// The person decided (`approval_approved` / `approval_denied`).
    Decided {
        /// The approval's id.
        approval_id: String,
        /// Approve or deny.
        choice: Choice,
        /// The approver.
        by: String,
        /// The MCP server the call is for.
        server: String,
    },
}

#[derive(Serialize, Deserialize)]
struct Session {
    iss: String,
    sub: String,
    auth_time: Option<u64>,
    exp: u64,
}

#[derive(Serialize, Deserialize)]
struct LoginState {
    state: String,
    nonce: String,
    verifier: String,
    code: String,
    exp: u64,
    step_up: bool,
}

impl Approvals {
    /// Answers one request for an approval page. `now` is the request's clock reading.
    pub(crate) async fn page<B>(&self, req: Request<B>, now: UnixTime) -> (Response<PageBody>, Option<PageEvent>)
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let rest = req.uri().path().strip_prefix(self.settings.path.as_str()).and_then(|r| r.strip_prefix('/')).unwrap_or("").to_owned();
        match (req.method().clone(), rest.as_str()) {
            (Method::GET, "callback") => (self.callback(&req, now).await, None),
            (Method::GET | Method::HEAD, code) if is_code(code) => self.show(&req, code, now).await,
            (Method::POST, code) if is_code(code) => self.decide(req, &rest, now).await,
            _ => (not_found(), None),
        }
    }

    /// Checks 1–4; `Ok` carries the live record and the session cookie's value.
    async fn gate<B>(&self, req: &Request<B>, code: &str, now: UnixTime) -> Result<(ApprovalRecord, String), (Response<PageBody>, Option<PageEvent>)> {
        let record = match self.store.pending(code, now).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                self.metrics.decision("expired");
                return Err((not_found(), None));
            }
            Err(e) => {
                tracing::warn!(error = %e, "Approval store unavailable for the approval page");
                return Err((
                    page(StatusCode::SERVICE_UNAVAILABLE, "Try again shortly", "<p>The gateway cannot reach its approval records right now.</p>"),
                    None,
                ));
            }
        };
        let cookie = cookie(req, SESSION_COOKIE);
        let session = cookie.as_deref().and_then(|c| self.seal.open(Purpose::Session, c)).and_then(|b| serde_json::from_slice::<Session>(&b).ok());
        let issuer = self.login.as_ref().map(|l| l.issuer()).unwrap_or("");
        let Some(session) = session.filter(|s| s.exp > now.secs() && s.iss == issuer) else {
            return Err((self.start_login(code, false, now).await, None));
        };
        if session.sub != record.sub {
            self.metrics.decision("wrong_user");
            let body =
                "<p>This link was made for another account.</p><p>Nothing was approved or denied. Ask the person who started the request to open it.</p>";
            return Err((
                page(StatusCode::FORBIDDEN, "Another account", body),
                Some(PageEvent::WrongUser { approval_id: record.id, login_sub: session.sub, server: record.server }),
            ));
        }
        if !self.is_fresh(session.auth_time, now) {
            return Err((self.start_login(code, true, now).await, None));
        }
        Ok((record, cookie.unwrap_or_default()))
    }

    fn is_fresh(&self, auth_time: Option<u64>, now: UnixTime) -> bool {
        auth_time.is_some_and(|t| now.secs().saturating_sub(t) <= self.settings.max_login_age.as_secs())
    }

    async fn show<B>(&self, req: &Request<B>, code: &str, now: UnixTime) -> (Response<PageBody>, Option<PageEvent>) {
        let (record, session) = match self.gate(req, code, now).await {
            Ok(ok) => ok,
            Err(refused) => return refused,
        };
        let csrf = self.seal.token(Purpose::Csrf, &[&session, code]);
        // Every field, not only the arguments: the policy's message may quote them.
        let e = |s: &str| html_escape::encode_text(&crate::visible::escaped(s)).into_owned();
        let a = |s: &str| html_escape::encode_double_quoted_attribute(s).into_owned();
        let body = format!(
            "<p class=\"msg\">{message}</p>\
             <dl><dt>Server</dt><dd>{server}</dd><dt>Agent</dt><dd>{agent}</dd><dt>Key</dt><dd>{keyid}</dd><dt>Call</dt><dd>{method} <b>{target}</b></dd>\
             <dt>Arguments</dt><dd><pre>{args}</pre></dd><dt>Expires</dt><dd>{expires}</dd></dl>\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button name=\"decision\" value=\"approve\" class=\"ok\">Approve</button> \
             <button name=\"decision\" value=\"deny\">Deny</button></form>",
            message = e(&record.message),
            server = e(&record.server),
            agent = e(if record.agent.is_empty() { "(unsigned)" } else { &record.agent }),
            keyid = e(if record.keyid.is_empty() { "-" } else { &record.keyid }),
            method = e(&record.method),
            target = e(&record.target),
            args = e(&record.arguments),
            expires = e(&rfc3339(record.expires)),
            action = a(&format!("{}/{code}", self.settings.path)),
            csrf = a(&csrf),
        );
        (page(StatusCode::OK, "Approve this call?", &body), None)
    }

    async fn decide<B>(&self, req: Request<B>, code: &str, now: UnixTime) -> (Response<PageBody>, Option<PageEvent>)
    where
        B: http_body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (record, session) = match self.gate(&req, code, now).await {
            Ok(ok) => ok,
            Err(refused) => return refused,
        };
        let form = match tokio::time::timeout(FORM_TIMEOUT, Limited::new(req.into_body(), MAX_FORM).collect()).await {
            Ok(Ok(b)) => b.to_bytes(),
            _ => return (page(StatusCode::BAD_REQUEST, "Not understood", "<p>The form could not be read.</p>"), None),
        };
        let field = |name: &str| url::form_urlencoded::parse(&form).find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        let csrf_ok = field("csrf").is_some_and(|t| self.seal.check_token(Purpose::Csrf, &[&session, code], &t));
        if !csrf_ok {
            return (page(StatusCode::FORBIDDEN, "Form expired", "<p>This form is no longer valid. Open the link again.</p>"), None);
        }
        let choice = match field("decision").as_deref() {
            Some("approve") => Choice::Approve,
            Some("deny") => Choice::Deny,
            _ => return (page(StatusCode::BAD_REQUEST, "Not understood", "<p>Choose Approve or Deny.</p>"), None),
        };
        match self.store.decide(code, choice, &record.sub, now).await {
            Ok(true) => {}
            Ok(false) => {
                self.metrics.decision("expired");
                return (not_found(), None);
            }
            Err(e) => {
                tracing::warn!(error = %e, "Approval store unavailable for a decision");
                return (page(StatusCode::SERVICE_UNAVAILABLE, "Try again shortly", "<p>The decision was not recorded. Try again shortly.</p>"), None);
            }
        }
        let (name, title, text) = match choice {
            Choice::Approve => ("approve", "Approved", "<p>Approved. Return to your agent: it can now retry the call, once.</p>"),
            Choice::Deny => ("deny", "Denied", "<p>Denied. The call will not be made. Return to your agent.</p>"),
        };
        self.metrics.decision(name);
        (page(StatusCode::OK, title, text), Some(PageEvent::Decided { approval_id: record.id, choice, by: record.sub, server: record.server }))
    }

    /// Redirects to the issuer's authorization endpoint with a fresh state, nonce and PKCE
    /// verifier, kept in a sealed cookie. `step_up`: the login is too old (`prompt=login`).
    async fn start_login(&self, code: &str, step_up: bool, now: UnixTime) -> Response<PageBody> {
        let Some(login) = &self.login else { return not_found() };
        let endpoints = match login.endpoints().await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "Approval login unavailable: issuer metadata");
                return page(StatusCode::SERVICE_UNAVAILABLE, "Login unavailable", "<p>The login service cannot be reached right now. Try again shortly.</p>");
            }
        };
        let state = LoginState {
            state: seal::random_text::<32>(),
            nonce: seal::random_text::<32>(),
            verifier: seal::random_text::<32>(),
            code: code.to_owned(),
            exp: now.secs() + LOGIN_TTL,
            step_up,
        };
        let challenge = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, Sha256::digest(state.verifier.as_bytes()));
        let mut url = endpoints.authorization.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("scope", "openid")
                .append_pair("client_id", login.client_id())
                .append_pair("redirect_uri", &self.settings.redirect_uri())
                .append_pair("state", &state.state)
                .append_pair("nonce", &state.nonce)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("max_age", &self.settings.max_login_age.as_secs().to_string());
            if step_up {
                q.append_pair("prompt", "login");
            }
        }
        let sealed = self.seal.seal(Purpose::Login, &serde_json::to_vec(&state).unwrap_or_default());
        let mut resp = redirect(url.as_str());
        self.set_cookie(&mut resp, LOGIN_COOKIE, &sealed, LOGIN_TTL);
        resp
    }

    /// `GET {path}/callback`: checks `state` against the browser's login cookie, redeems the
    /// code, validates the ID token, sets the session and goes back to the link.
    async fn callback<B>(&self, req: &Request<B>, now: UnixTime) -> Response<PageBody> {
        let Some(login) = &self.login else { return not_found() };
        let query = req.uri().query().unwrap_or("");
        let param = |name: &str| url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        let pending = cookie(req, LOGIN_COOKIE)
            .and_then(|c| self.seal.open(Purpose::Login, &c))
            .and_then(|b| serde_json::from_slice::<LoginState>(&b).ok())
            .filter(|s| s.exp > now.secs());
        let failed = |why: &str| {
            let mut r = page(StatusCode::BAD_REQUEST, "Login failed", &format!("<p>{}</p><p>Open the approval link again.</p>", html_escape::encode_text(why)));
            self.set_cookie(&mut r, LOGIN_COOKIE, "", 0);
            r
        };
        let Some(pending) = pending else { return failed("This login was not started here, or took too long.") };
        let state_ok = param("state").is_some_and(|s| {
            s.len() == pending.state.len() && aws_lc_rs::constant_time::verify_slices_are_equal(s.as_bytes(), pending.state.as_bytes()).is_ok()
        });
        if !state_ok {
            return failed("The login answer does not belong to this browser.");
        }
        // RFC 9207: when the issuer names itself, it must be ours.
        if param("iss").is_some_and(|iss| iss != login.issuer()) {
            return failed("The login answer came from another issuer.");
        }
        if param("error").is_some() {
            return failed("The identity provider did not log you in.");
        }
        let Some(auth_code) = param("code") else { return failed("The identity provider sent no authorization code.") };
        let who = match login.redeem(&auth_code, &pending.verifier, &self.settings.redirect_uri(), &pending.nonce, now).await {
            Ok(who) => who,
            Err(e) => {
                tracing::warn!(error = %e, "Approval login refused");
                return failed("The identity provider's answer could not be verified.");
            }
        };
        // A login too old for the page is asked again with `prompt=login` (check 4); if the
        // issuer answers that too with an old login, stop here rather than loop.
        if pending.step_up && !self.is_fresh(who.auth_time, now) {
            return failed("The identity provider did not confirm a recent login.");
        }
        let session = Session { iss: who.iss, sub: who.sub, auth_time: who.auth_time, exp: now.secs() + self.settings.ttl.as_secs() };
        let mut resp = redirect(&format!("{}/{}", self.settings.path, pending.code));
        self.set_cookie(
            &mut resp,
            SESSION_COOKIE,
            &self.seal.seal(Purpose::Session, &serde_json::to_vec(&session).unwrap_or_default()),
            self.settings.ttl.as_secs(),
        );
        self.set_cookie(&mut resp, LOGIN_COOKIE, "", 0);
        resp
    }

    fn set_cookie(&self, resp: &mut Response<PageBody>, name: &str, value: &str, max_age: u64) {
        let v = format!("{name}={value}; Path={}; Max-Age={max_age}; HttpOnly; Secure; SameSite=Lax", self.settings.path);
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
}

/// A link code: 32 random bytes, base64url without padding.
fn is_code(s: &str) -> bool {
    s.len() == 43 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn cookie<B>(req: &Request<B>, name: &str) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, v)| *k == name && !v.is_empty())
        .map(|(_, v)| v.to_owned())
}

fn rfc3339(unix: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix)).to_string()
}

fn body(text: String) -> PageBody {
    Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed()
}

fn secured(mut resp: Response<PageBody>) -> Response<PageBody> {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // The link's code must not leak to the issuer (or anyone) through Referer.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

fn redirect(location: &str) -> Response<PageBody> {
    let mut resp = Response::new(body(String::new()));
    *resp.status_mut() = StatusCode::FOUND;
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    secured(resp)
}

/// The same page for every code that is not live.
fn not_found() -> Response<PageBody> {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This approval link is not valid: it may have expired, been used or been replaced.</p><p>Return to your agent.</p>",
    )
}

/// A complete page: plain HTML, inline style only, readable on a phone. `content` is HTML the
/// caller escaped.
fn page(status: StatusCode, title: &str, content: &str) -> Response<PageBody> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · Portcullis</title><style>\
         body{{font:16px/1.5 system-ui,sans-serif;margin:0;padding:1rem;color:#1a1a1a;background:#f6f6f4}}\
         main{{max-width:36rem;margin:0 auto;background:#fff;border:1px solid #ddd;border-radius:8px;padding:1rem 1.25rem}}\
         h1{{font-size:1.3rem;margin:.2rem 0 1rem}} .msg{{font-size:1.1rem;font-weight:600}}\
         dt{{font-weight:600;margin-top:.6rem}} dd{{margin:0;overflow-wrap:anywhere}}\
         pre{{white-space:pre-wrap;overflow-wrap:anywhere;background:#f1f1ee;padding:.5rem;border-radius:4px;max-height:20rem;overflow:auto}}\
         button{{font-size:1rem;padding:.6rem 1.2rem;margin:1rem .5rem 0 0;border-radius:6px;border:1px solid #888;background:#fff}}\
         button.ok{{background:#1f6f3f;color:#fff;border-color:#1f6f3f}}</style></head>\
         <body><main><h1>{t}</h1>{content}</main></body></html>",
        t = html_escape::encode_text(title),
    );
    let mut resp = Response::new(body(html));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    secured(resp)
}
