//! A Web Bot Auth key directory on 127.0.0.1 over HTTPS (certificate from the test CA): serves
//! `/.well-known/http-message-signatures-directory`, counts fetches, can change its keys, its
//! answer (status, media type, body) and can go down. It can also serve other files at other
//! paths (an upload area of the same origin), and counts every request it receives. The demo's
//! agent key directory is one of these.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ed25519_dalek::VerifyingKey;
use http::{Request, Response};
use hyper::body::Incoming;
use portcullis_wire::signature::ed25519_public_jwk;

use crate::pki::{HttpsServer, TestCa};
use crate::{full, Body, Error};

/// The path agents publish their keys at.
pub const WELL_KNOWN: &str = "/.well-known/http-message-signatures-directory";
/// The media type a directory must use.
pub const MEDIA_TYPE: &str = portcullis_client::keys::DIRECTORY_MEDIA_TYPE;

/// What the directory answers instead of its keys.
#[derive(Debug, Clone)]
pub enum Misbehave {
    /// Serve the keys normally.
    No,
    /// Answer with this status and an empty body (a 302 carries a `Location`).
    Status(u16),
    /// Serve the keys with this `Content-Type`.
    MediaType(&'static str),
    /// Serve this body with the right media type.
    Body(String),
    /// Send nothing for 30 s (a directory slower than `directory_timeout`).
    Hang,
}

struct State {
    keys: Mutex<Vec<serde_json::Value>>,
    max_age: Mutex<Option<u64>>,
    misbehave: Mutex<Misbehave>,
    fetches: AtomicUsize,
    /// Other paths: (content type, body).
    files: Mutex<HashMap<String, (String, String)>>,
    requests: AtomicUsize,
}

/// A running key directory. Its origin is `https://127.0.0.1:<port>`.
pub struct KeyDirectory {
    server: Option<HttpsServer>,
    origin: String,
    state: Arc<State>,
}

impl std::fmt::Debug for KeyDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyDirectory").field("origin", &self.origin).finish_non_exhaustive()
    }
}

impl KeyDirectory {
    /// Starts a directory publishing `keys`; panics if it cannot.
    pub async fn start(ca: &TestCa, keys: &[VerifyingKey]) -> KeyDirectory {
        KeyDirectory::try_start(ca, keys).await.expect("key directory on 127.0.0.1")
    }

    /// Starts a directory publishing `keys`.
    pub async fn try_start(ca: &TestCa, keys: &[VerifyingKey]) -> Result<KeyDirectory, Error> {
        let state = Arc::new(State {
            keys: Mutex::new(keys.iter().map(ed25519_public_jwk).collect()),
            max_age: Mutex::new(None),
            misbehave: Mutex::new(Misbehave::No),
            fetches: AtomicUsize::new(0),
            files: Mutex::new(HashMap::new()),
            requests: AtomicUsize::new(0),
        });
        let s = state.clone();
        let server = HttpsServer::try_start(ca, move |req| serve(req, s.clone())).await?;
        let origin = server.origin();
        Ok(KeyDirectory { server: Some(server), origin, state })
    }

    /// `https://127.0.0.1:<port>`: the agent URL signers put in `Signature-Agent`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Requests received at the well-known path.
    pub fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    /// Requests received at any path (the well-known path, files, 404s).
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Serves `body` with `content_type` at `path` (e.g. a file someone uploaded).
    pub fn serve_file(&self, path: &str, content_type: &str, body: &str) {
        self.state.files.lock().unwrap().insert(path.to_owned(), (content_type.to_owned(), body.to_owned()));
    }

    /// Replaces the published keys.
    pub fn set_keys(&self, keys: &[VerifyingKey]) {
        *self.state.keys.lock().unwrap() = keys.iter().map(ed25519_public_jwk).collect();
    }

    /// Replaces the published JWKs verbatim (to add `nbf`/`exp` or broken entries).
    pub fn set_jwks(&self, jwks: Vec<serde_json::Value>) {
        *self.state.keys.lock().unwrap() = jwks;
    }

    /// Sends `Cache-Control: max-age=<secs>`.
    pub fn set_max_age(&self, secs: Option<u64>) {
        *self.state.max_age.lock().unwrap() = secs;
    }

    /// Changes how the directory answers.
    pub fn misbehave(&self, how: Misbehave) {
        *self.state.misbehave.lock().unwrap() = how;
    }

    /// Stops listening: later connections are refused.
    pub fn stop(&mut self) {
        self.server.take();
    }
}

async fn serve(req: Request<Incoming>, state: Arc<State>) -> Response<Body> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    if req.uri().path() != WELL_KNOWN {
        let file = state.files.lock().unwrap().get(req.uri().path()).cloned();
        return match file {
            Some((content_type, body)) => Response::builder().status(200).header("content-type", content_type).body(full(body)).unwrap(),
            None => Response::builder().status(404).body(full("")).unwrap(),
        };
    }
    state.fetches.fetch_add(1, Ordering::SeqCst);
    let jwks = serde_json::json!({ "keys": *state.keys.lock().unwrap() }).to_string();
    let max_age = *state.max_age.lock().unwrap();
    let how = state.misbehave.lock().unwrap().clone();
    let mut resp = Response::builder().status(200).header("content-type", MEDIA_TYPE);
    if let Some(secs) = max_age {
        resp = resp.header("cache-control", format!("max-age={secs}"));
    }
    match how {
        Misbehave::No => resp.body(full(jwks)).unwrap(),
        Misbehave::Status(code) => Response::builder().status(code).header("location", "https://127.0.0.1:1/elsewhere").body(full("")).unwrap(),
        Misbehave::MediaType(ct) => Response::builder().status(200).header("content-type", ct).body(full(jwks)).unwrap(),
        Misbehave::Body(b) => resp.body(full(b)).unwrap(),
        Misbehave::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            resp.body(full(jwks)).unwrap()
        }
    }
}
