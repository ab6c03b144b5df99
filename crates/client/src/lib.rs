//! The agent side, for Rust agents and the `portcullis request` CLI: sign each request freshly
//! (Content-Digest, Signature-Input, Signature, Signature-Agent) with an Ed25519 key, attach
//! an OAuth token (bearer, or DPoP-bound with [`Agent::with_dpop`]: each request then carries
//! a DPoP proof made with the same Ed25519 key, so one key proves both the agent and its
//! right to the token), and send it with reqwest.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_client::{load_private_jwk, tool_call, Agent};
//!
//! let key = load_private_jwk(std::path::Path::new("keys/agent.jwk"))?;
//! let agent = Agent::new(key, "https://agent.example")?.with_token("eyJ…");
//! let resp = agent.post_json("https://mcp.example.com/mcp", &tool_call(1, "weather.get", serde_json::json!({"city": "Paris"}))).await?;
//! println!("{} {}", resp.status(), resp.text().await?);
//! # Ok(()) }
//! ```
//!
//! Every call signs anew (fresh `created`, random nonce), so a retried request is not a
//! replay. `@authority` is signed from the URL, which is also what reqwest sends as `Host`:
//! the gateway derives the authority the same way (unless `signatures.authority` pins it).

pub mod cli;
pub mod keys;

use std::time::Duration;

use ed25519_dalek::SigningKey;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, Method};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

pub use keys::{directory_document, keygen, load_private_jwk, private_jwk, GeneratedKey, KeyError};

use portcullis_wire::dpop;
use portcullis_wire::signature::{SignError, Signer};
use portcullis_wire::UnixTime;

/// Why a request could not be built, signed or sent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not an absolute http(s) URL.
    #[error("invalid request URL {0:?}")]
    InvalidUrl(String),
    /// A header name or value is not valid HTTP.
    #[error("invalid header {0:?}")]
    InvalidHeader(String),
    /// Signing failed (bad agent URL, tag, component, or a covered header is missing).
    #[error("cannot sign the request: {0}")]
    Sign(#[from] SignError),
    /// The HTTP client could not be built (e.g. an unreadable CA file).
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// The request could not be sent or its answer read.
    #[error("request to {url} failed: {}", portcullis_wire::error_chain(source))]
    Send {
        /// Where it went.
        url: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
}

/// A signed request ready to send, and the signature base that was signed.
#[derive(Debug)]
pub struct SignedRequest {
    /// The request, with the signature headers (and `Authorization` when a token is set).
    pub request: http::Request<Vec<u8>>,
    /// The RFC 9421 signature base (no secrets).
    pub signature_base: String,
}

/// A Web Bot Auth agent: a signer, an optional bearer token, and an HTTP client.
#[derive(Clone)]
pub struct Agent {
    signer: Signer,
    token: Option<SecretString>,
    http: reqwest::Client,
    dpop: Option<Htu>,
}

/// What a DPoP proof's `htu` names.
#[derive(Debug, Clone)]
enum Htu {
    /// The request's own URL, without query and fragment.
    RequestUrl,
    /// The gateway's public URL, when it is reached at another address.
    Fixed(String),
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("keyid", &self.signer.keyid()).field("token", &self.token.as_ref().map(|_| "[redacted]")).finish()
    }
}

impl Agent {
    /// An agent signing with `key` as `agent_url` (the https origin of its key directory), with
    /// the gateway's default coverage and tag `web-bot-auth`, no token, and a client without
    /// proxies or redirects.
    pub fn new(key: SigningKey, agent_url: &str) -> Result<Agent, ClientError> {
        Ok(Agent::from_signer(Signer::new(key, agent_url)?))
    }

    /// An agent around a configured [`Signer`] (tag, components, lifetime, nonce).
    pub fn from_signer(signer: Signer) -> Agent {
        let http = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(30)).build();
        Agent { signer, token: None, http: http.unwrap_or_default(), dpop: None }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Agent {
        self.token = Some(SecretString::from(token.into()));
        self
    }

    /// Sends the token as `Authorization: DPoP <token>` with a fresh DPoP proof (RFC 9449,
    /// `alg` EdDSA) made with the agent's signing key: for a token bound to that key
    /// (`cnf.jkt` = the agent's keyid). The proof's `htu` is the request URL.
    pub fn with_dpop(mut self) -> Agent {
        self.dpop = Some(Htu::RequestUrl);
        self
    }

    /// As [`Agent::with_dpop`], for a gateway reached at another address than its public URL
    /// (`listen.public_url`): proofs name `public_url` as their `htu`.
    pub fn with_dpop_public_url(mut self, public_url: impl Into<String>) -> Agent {
        self.dpop = Some(Htu::Fixed(public_url.into()));
        self
    }

    /// Uses this reqwest client (extra roots, proxies, timeouts).
    pub fn with_http_client(mut self, http: reqwest::Client) -> Agent {
        self.http = http;
        self
    }

    /// The `keyid` signatures carry.
    pub fn keyid(&self) -> &str {
        self.signer.keyid()
    }

    /// Builds and signs `method url` with `body` and extra `headers` (signed after they are
    /// set, so covered headers may come from them).
    pub fn sign(&self, method: Method, url: &str, headers: &HeaderMap, body: Vec<u8>) -> Result<SignedRequest, ClientError> {
        let uri: http::Uri = url.parse().map_err(|_| ClientError::InvalidUrl(url.to_owned()))?;
        if uri.authority().is_none() || !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(ClientError::InvalidUrl(url.to_owned()));
        }
        let mut req = http::Request::new(body);
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        for (name, value) in headers {
            req.headers_mut().append(name, value.clone());
        }
        if let Some(token) = &self.token {
            let scheme = if self.dpop.is_some() { "DPoP" } else { "Bearer" };
            let value =
                HeaderValue::from_str(&format!("{scheme} {}", token.expose_secret())).map_err(|_| ClientError::InvalidHeader("authorization".to_owned()))?;
            req.headers_mut().insert(AUTHORIZATION, value);
            if let Some(htu) = &self.dpop {
                let htu = match htu {
                    Htu::Fixed(u) => u.clone(),
                    // `sign` checked that the URL is absolute http(s).
                    Htu::RequestUrl => {
                        let uri = req.uri();
                        format!("{}://{}{}", uri.scheme_str().unwrap_or("https"), uri.authority().map_or("", |a| a.as_str()), uri.path())
                    }
                };
                let now = UnixTime::now().secs();
                let proof = dpop::ed25519_proof(self.signer.signing_key(), req.method().as_str(), &htu, token.expose_secret(), now);
                let value = HeaderValue::from_str(&proof).map_err(|_| ClientError::InvalidHeader("dpop".to_owned()))?;
                req.headers_mut().insert(dpop::DPOP, value);
            }
        }
        let (mut parts, body) = req.into_parts();
        let signature_base = self.signer.sign_parts_with_base(&mut parts, &body, UnixTime::now())?;
        Ok(SignedRequest { request: http::Request::from_parts(parts, body), signature_base })
    }

    /// Sends a request made by [`Agent::sign`].
    pub async fn send(&self, signed: SignedRequest) -> Result<reqwest::Response, ClientError> {
        let (parts, body) = signed.request.into_parts();
        let url = parts.uri.to_string();
        let send_err = |source| ClientError::Send { url: url.clone(), source };
        self.http.request(parts.method, url.as_str()).headers(parts.headers).body(body).send().await.map_err(send_err)
    }

    /// Signs and POSTs `body` as `application/json`.
    pub async fn post_json(&self, url: &str, body: &Value) -> Result<reqwest::Response, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let signed = self.sign(Method::POST, url, &headers, body.to_string().into_bytes())?;
        self.send(signed).await
    }

    /// Calls MCP tool `name` with `arguments` (a `tools/call` JSON-RPC request, id 1).
    pub async fn call_tool(&self, url: &str, name: &str, arguments: Value) -> Result<reqwest::Response, ClientError> {
        self.post_json(url, &tool_call(1, name, arguments)).await
    }
}

/// A JSON-RPC 2.0 request body: `{"jsonrpc":"2.0","id":id,"method":method,"params":params}`
/// (`params` left out when null).
pub fn jsonrpc_request(id: u64, method: &str, params: Value) -> Value {
    let mut body = serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method });
    if !params.is_null() {
        body["params"] = params;
    }
    body
}

/// The MCP `tools/call` request for tool `name` with `arguments`.
pub fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    jsonrpc_request(id, "tools/call", serde_json::json!({ "name": name, "arguments": arguments }))
}

/// Parses a curl-style `Name: value` header.
pub fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), ClientError> {
    let bad = || ClientError::InvalidHeader(line.to_owned());
    let (name, value) = line.split_once(':').ok_or_else(bad)?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
    let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
    Ok((name, value))
}
