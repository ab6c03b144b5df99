//! The issuer's HTTP side (pipeline stage 7): bounded HTTPS fetches and RFC 8414 metadata
//! discovery (`jwks_uri`; the endpoints the login and token exchange use).
//!
//! Every fetch goes through `tls::outbound_client` (HTTPS only, no redirects, `issuer_ca` as
//! an extra root), with `oauth.fetch_timeout` on the whole exchange and [`MAX_DOCUMENT`] on the
//! body. The metadata document is trusted only when its `issuer` is identical to the configured
//! issuer (RFC 8414 §3.3). A failure is an error naming the issuer: the stage fails closed.

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value};
use url::Url;

use super::TokenError;

/// Largest metadata, JWKS or introspection document read.
pub(crate) const MAX_DOCUMENT: usize = 256 * 1024;

/// A fetched document and its `Cache-Control`.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// The body, at most [`MAX_DOCUMENT`] bytes.
    pub(crate) body: Bytes,
    /// The `Cache-Control` header, if any.
    pub(crate) cache_control: Option<String>,
}

/// Why a fetch failed; turned into [`TokenError::IssuerUnavailable`] by the caller.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// No answer: connection refused, TLS failure, timeout.
    Unreachable(String),
    /// An answer that is not a usable document (status, size).
    Refused(String),
}

impl FetchError {
    pub(crate) fn reason(&self) -> &str {
        match self {
            FetchError::Unreachable(r) | FetchError::Refused(r) => r,
        }
    }
}

/// The HTTPS client for one issuer.
#[derive(Debug, Clone)]
pub(crate) struct IssuerClient {
    client: reqwest::Client,
    /// The configured issuer identifier.
    pub(crate) issuer: String,
}

impl IssuerClient {
    /// `client` comes from `tls::outbound_client("oauth.issuer_ca", ..)`.
    pub(crate) fn new(client: reqwest::Client, issuer: String) -> Self {
        IssuerClient { client, issuer }
    }

    /// The error for a failed fetch of `what`, naming the issuer.
    pub(crate) fn unavailable(&self, what: &str, reason: impl Into<String>) -> TokenError {
        TokenError::IssuerUnavailable { issuer: self.issuer.clone(), reason: format!("{what}: {}", reason.into()) }
    }

    /// GETs `url` and returns a 200 body within [`MAX_DOCUMENT`].
    pub(crate) async fn get(&self, url: &Url) -> Result<Fetched, FetchError> {
        let req = self.client.get(url.clone()).header(http::header::ACCEPT, "application/json");
        read(req, url).await
    }

    /// POSTs a form to `url` with HTTP Basic client credentials (RFC 7662 §2.1).
    pub(crate) async fn post_form(&self, url: &Url, user: &str, password: &str, form: &[(&str, &str)]) -> Result<Fetched, FetchError> {
        let req = self.client.post(url.clone()).header(http::header::ACCEPT, "application/json").basic_auth(user, Some(password)).form(form);
        read(req, url).await
    }

    /// POSTs a form to `url` as a public client (the client id is in the form).
    pub(crate) async fn post_form_public(&self, url: &Url, form: &[(&str, &str)]) -> Result<Fetched, FetchError> {
        let req = self.client.post(url.clone()).header(http::header::ACCEPT, "application/json").form(form);
        read(req, url).await
    }

    /// RFC 8414 discovery: the first metadata URL that answers 200 whose `issuer` matches gives
    /// `jwks_uri`. Candidates that answer with an error status are skipped; an unreachable
    /// issuer stops the search.
    pub(crate) async fn discover_jwks_uri(&self) -> Result<Url, TokenError> {
        let issuer = Url::parse(&self.issuer).map_err(|e| self.unavailable("issuer", e.to_string()))?;
        let mut tried = Vec::new();
        for url in metadata_urls(&issuer) {
            match self.get(&url).await {
                Ok(doc) => return self.jwks_uri_from(&url, &doc.body),
                Err(FetchError::Unreachable(r)) => return Err(self.unavailable(&format!("metadata {url}"), r)),
                Err(e @ FetchError::Refused(_)) => tried.push(format!("{url} ({})", e.reason())),
            }
        }
        Err(self.unavailable("metadata", format!("no authorization server metadata found: {}", tried.join(", "))))
    }

    /// RFC 8414 discovery of the whole metadata document: the first candidate URL that answers
    /// 200, which must name this issuer byte for byte (§3.3; OIDC Discovery §4.3). Candidates
    /// that answer with an error status are skipped; an unreachable issuer stops the search.
    pub(crate) async fn metadata(&self) -> Result<Metadata, TokenError> {
        let issuer = Url::parse(&self.issuer).map_err(|e| self.unavailable("issuer", e.to_string()))?;
        let mut tried = Vec::new();
        for url in metadata_urls(&issuer) {
            let doc = match self.get(&url).await {
                Ok(doc) => doc,
                Err(FetchError::Unreachable(r)) => return Err(self.unavailable(&format!("metadata {url}"), r)),
                Err(e @ FetchError::Refused(_)) => {
                    tried.push(format!("{url} ({})", e.reason()));
                    continue;
                }
            };
            let fields: Map<String, Value> = serde_json::from_slice(&doc.body).map_err(|e| self.unavailable(&format!("metadata {url}"), e.to_string()))?;
            if fields.get("issuer").and_then(Value::as_str) != Some(self.issuer.as_str()) {
                return Err(self.unavailable(&format!("metadata {url}"), "its issuer is not oauth.issuer"));
            }
            return Ok(Metadata { url, fields });
        }
        Err(self.unavailable("metadata", format!("no authorization server metadata found: {}", tried.join(", "))))
    }

    fn jwks_uri_from(&self, url: &Url, body: &[u8]) -> Result<Url, TokenError> {
        portcullis_wire::issuer_documents::jwks_uri_of(&self.issuer, body).map_err(|reason| self.unavailable(&format!("metadata {url}"), reason))
    }
}

/// The issuer's metadata document, and the URL it was found at.
#[derive(Debug)]
pub(crate) struct Metadata {
    url: Url,
    fields: Map<String, Value>,
}

impl Metadata {
    /// The https endpoint the document names under `name` (`token_endpoint`, …); the error
    /// names the issuer through `client`.
    pub(crate) fn endpoint(&self, client: &IssuerClient, name: &str) -> Result<Url, TokenError> {
        let url = &self.url;
        let u = self.fields.get(name).and_then(Value::as_str).ok_or_else(|| client.unavailable(&format!("metadata {url}"), format!("no {name}")))?;
        match Url::parse(u) {
            Ok(u) if u.scheme() == "https" => Ok(u),
            _ => Err(client.unavailable(&format!("metadata {url}"), format!("{name} is not an https URL"))),
        }
    }
}

async fn read(req: reqwest::RequestBuilder, url: &Url) -> Result<Fetched, FetchError> {
    let mut resp = req.send().await.map_err(|e| FetchError::Unreachable(crate::telemetry::error_chain(&e)))?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(FetchError::Refused(format!("HTTP {}", resp.status().as_u16())));
    }
    if resp.content_length().is_some_and(|n| n > MAX_DOCUMENT as u64) {
        return Err(FetchError::Refused(format!("{url} is larger than {MAX_DOCUMENT} bytes")));
    }
    let cache_control = resp.headers().get(http::header::CACHE_CONTROL).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| FetchError::Unreachable(crate::telemetry::error_chain(&e)))? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(FetchError::Refused(format!("{url} is larger than {MAX_DOCUMENT} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched { body: body.freeze(), cache_control })
}

/// RFC 8414 §3.1 well-known URLs, with the path-insertion rules of the MCP Authorization
/// spec's discovery section: `oauth-authorization-server` then `openid-configuration`
/// inserted after the host, and for an issuer with a path also OIDC's appended form
/// (`<issuer>/.well-known/openid-configuration`).
pub(crate) fn metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let origin = issuer.origin().ascii_serialization();
    let mut out = vec![format!("{origin}/.well-known/oauth-authorization-server{path}"), format!("{origin}/.well-known/openid-configuration{path}")];
    if !path.is_empty() {
        out.push(format!("{origin}{path}/.well-known/openid-configuration"));
    }
    out.iter().filter_map(|u| Url::parse(u).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_without_path_tries_both_well_known_documents() {
        let urls: Vec<String> = metadata_urls(&Url::parse("https://auth.example.com").expect("url")).iter().map(Url::to_string).collect();
        assert_eq!(urls, ["https://auth.example.com/.well-known/oauth-authorization-server", "https://auth.example.com/.well-known/openid-configuration"]);
    }

    #[test]
    fn issuer_with_path_inserts_then_appends() {
        let urls: Vec<String> = metadata_urls(&Url::parse("https://auth.example.com/tenant1").expect("url")).iter().map(Url::to_string).collect();
        assert_eq!(
            urls,
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn metadata_for_another_issuer_is_refused() {
        let client = IssuerClient::new(reqwest::Client::new(), "https://auth.example.com".into());
        let url = Url::parse("https://auth.example.com/.well-known/oauth-authorization-server").expect("url");
        let err = client.jwks_uri_from(&url, br#"{"issuer":"https://evil.example","jwks_uri":"https://evil.example/jwks"}"#).expect_err("mismatch");
        assert!(matches!(err, TokenError::IssuerUnavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("https://auth.example.com"), "{err}");
        let ok = client.jwks_uri_from(&url, br#"{"issuer":"https://auth.example.com","jwks_uri":"https://auth.example.com/jwks"}"#).expect("match");
        assert_eq!(ok.as_str(), "https://auth.example.com/jwks");
    }
}
