//! The demo's two HTTPS services: the agent's key directory (Web Bot Auth) and an OAuth
//! authorization server that publishes RFC 8414 metadata and a JWKS, and mints EdDSA access
//! tokens (RFC 9068) for the demo user.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::pkcs8::EncodePrivateKey;
use ed25519_dalek::SigningKey;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::pki::{bind_local, serve_https, DemoCa, PkiError};
use crate::decision::{full, ResponseBody};
use crate::signature::ed25519_public_jwk;
use portcullis_client::keys::{directory_document, DIRECTORY_MEDIA_TYPE};

/// The kid of the issuer's signing key.
const ISSUER_KID: &str = "demo-issuer-1";
/// The user the demo's tokens speak for.
pub const DEMO_USER: &str = "demo-user";
/// Scopes the demo's tokens grant: every shipped policy's requirement.
pub const DEMO_SCOPES: &str = "tools:read tools:write payments:write";

/// Why a demo service could not start or mint a token.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No local port could be bound.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(#[from] std::io::Error),
    /// The TLS setup failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The issuer's key could not be encoded or a token signed.
    #[error("cannot mint a demo token: {0}")]
    Token(String),
}

/// A running HTTPS service; stops when dropped.
#[derive(Debug)]
pub struct Service {
    /// `https://127.0.0.1:<port>`.
    pub origin: String,
    task: JoinHandle<()>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn json_response(status: StatusCode, content_type: &'static str, body: String) -> Response<ResponseBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    resp
}

/// Starts the agent's key directory, publishing `key` at the well-known path.
pub async fn start_directory(ca: &DemoCa, key: &SigningKey) -> Result<Service, ServiceError> {
    let (listener, origin) = bind_local().await?;
    let doc: Arc<str> = directory_document(&[key]).to_string().into();
    let task = serve_https(listener, ca.server_config()?, move |req: Request<Incoming>| {
        let doc = doc.clone();
        async move {
            if req.uri().path() == "/.well-known/http-message-signatures-directory" {
                json_response(StatusCode::OK, DIRECTORY_MEDIA_TYPE, doc.to_string())
            } else {
                json_response(StatusCode::NOT_FOUND, "application/json", r#"{"error":"not_found"}"#.to_owned())
            }
        }
    });
    Ok(Service { origin, task })
}

/// The demo's OAuth authorization server.
#[derive(Debug)]
pub struct Issuer {
    /// The running service; its origin is the issuer identifier.
    pub service: Service,
    encoding: EncodingKey,
}

impl Issuer {
    /// Starts an issuer with a fresh Ed25519 key.
    pub async fn start(ca: &DemoCa) -> Result<Issuer, ServiceError> {
        let key = SigningKey::from_bytes(&rand::random());
        let der = key.to_pkcs8_der().map_err(|e| ServiceError::Token(e.to_string()))?;
        let encoding = EncodingKey::from_ed_der(der.as_bytes());
        let mut jwk = ed25519_public_jwk(&key.verifying_key());
        jwk["kid"] = Value::from(ISSUER_KID);
        jwk["alg"] = Value::from("EdDSA");
        let jwks: Arc<str> = json!({ "keys": [jwk] }).to_string().into();
        let (listener, origin) = bind_local().await?;
        let o = origin.clone();
        let task = serve_https(listener, ca.server_config()?, move |req: Request<Incoming>| {
            let (jwks, origin) = (jwks.clone(), o.clone());
            async move {
                match req.uri().path() {
                    "/.well-known/oauth-authorization-server" => {
                        let md = json!({"issuer": origin, "jwks_uri": format!("{origin}/jwks"), "response_types_supported": ["code"],
                                        "token_endpoint": format!("{origin}/token")});
                        json_response(StatusCode::OK, "application/json", md.to_string())
                    }
                    "/jwks" => json_response(StatusCode::OK, "application/json", jwks.to_string()),
                    _ => json_response(StatusCode::NOT_FOUND, "application/json", r#"{"error":"not_found"}"#.to_owned()),
                }
            }
        });
        Ok(Issuer { service: Service { origin, task }, encoding })
    }

    /// The issuer identifier.
    pub fn url(&self) -> &str {
        &self.service.origin
    }

    /// An access token (`typ` at+jwt, EdDSA) for [`DEMO_USER`] with [`DEMO_SCOPES`], valid
    /// for `lifetime_secs`, whose audience is `audience`.
    pub fn mint(&self, audience: &str, lifetime_secs: u64) -> Result<String, ServiceError> {
        self.mint_for(audience, DEMO_USER, lifetime_secs)
    }

    /// Like [`Issuer::mint`], for subject `sub`.
    pub fn mint_for(&self, audience: &str, sub: &str, lifetime_secs: u64) -> Result<String, ServiceError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let claims = json!({"iss": self.url(), "sub": sub, "aud": [audience], "iat": now, "nbf": now, "exp": now + lifetime_secs,
                            "client_id": "portcullis-demo-agent", "jti": uuid::Uuid::new_v4().to_string(), "scope": DEMO_SCOPES});
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some("at+jwt".to_owned());
        header.kid = Some(ISSUER_KID.to_owned());
        jsonwebtoken::encode(&header, &claims, &self.encoding).map_err(|e| ServiceError::Token(e.to_string()))
    }
}
