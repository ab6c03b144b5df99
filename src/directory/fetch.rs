//! Fetching and parsing one key directory (Web Bot Auth "Key Distribution and
//! Discovery", "Directory Format", "SSRF").
//!
//! HTTPS only, no redirects, status exactly 200, the directory media type, a size cap checked
//! while reading, a key-count cap, and a wall-clock timeout over the whole exchange. Parsing
//! (`document.rs`) drops malformed JWKs (WBA: SHOULD) and computes each usable key's thumbprint.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};

use super::DirectoryError;
use crate::signature::AgentKind;
use crate::tls;
pub(crate) use portcullis_wire::key_directory::parse_max_age;
pub use portcullis_wire::key_directory::{parse_key_set, DirectoryKey, KeySet, ParseError, MAX_DIRECTORY_KEYS};

/// Path of a directory under its origin (WBA "Key Distribution and Discovery").
pub(crate) const WELL_KNOWN_PATH: &str = "/.well-known/http-message-signatures-directory";
/// Media type a directory is served with at the well-known URI [MUST].
pub(crate) const DIRECTORY_MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// Media types accepted for a `type=jwks_uri` agent (RFC 7517 §8.5.1, or plain JSON).
const JWKS_MEDIA_TYPES: [&str; 3] = ["application/jwk-set+json", "application/json", DIRECTORY_MEDIA_TYPE];
/// Largest directory document read (WBA "SSRF": size cap after decoding).
pub(crate) const MAX_DIRECTORY_BYTES: usize = 64 << 10;

/// A fetched document: its keys and its `Cache-Control: max-age`.
pub(crate) struct Fetched {
    pub(crate) keys: KeySet,
    pub(crate) max_age: Option<Duration>,
}

/// Gets one directory document. The HTTP implementation is [`HttpFetch`]; unit tests use a fake.
#[async_trait]
pub(crate) trait Fetch: Send + Sync {
    /// Fetches and parses the document at `url`.
    async fn fetch(&self, url: &str, kind: AgentKind) -> Result<Fetched, DirectoryError>;
}

/// Fetches directories with the outbound HTTPS client (`tls::outbound_client`).
pub(crate) struct HttpFetch {
    client: reqwest::Client,
    timeout: Duration,
}

impl HttpFetch {
    pub(crate) fn new(extra_ca: Option<&Path>, timeout: Duration) -> Result<Self, tls::TlsError> {
        Ok(HttpFetch { client: tls::outbound_client("signatures.directory_ca", extra_ca, timeout)?, timeout })
    }

    async fn get(&self, url: &str, kind: AgentKind) -> Result<Fetched, DirectoryError> {
        let source = source_name(url, kind);
        // `without_url`: a jwks_uri's path is the client's; errors name the source instead.
        let unreachable = |e: reqwest::Error| DirectoryError::Unreachable { url: source.clone(), reason: crate::telemetry::error_chain(&e.without_url()) };
        let mut resp = self.client.get(url).header(ACCEPT, DIRECTORY_MEDIA_TYPE).send().await.map_err(unreachable)?;
        // WBA -02: exactly 200; a redirect is a discovery failure, never followed.
        if resp.status().as_u16() != 200 {
            return Err(DirectoryError::BadStatus { url: source.clone(), status: resp.status().as_u16() });
        }
        let content_type: String = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().chars().take(64).collect();
        let media_type = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        let accepted = match kind {
            AgentKind::Directory => media_type == DIRECTORY_MEDIA_TYPE,
            AgentKind::JwksUri | AgentKind::Cimd => JWKS_MEDIA_TYPES.contains(&media_type.as_str()),
        };
        if !accepted {
            return Err(DirectoryError::BadMediaType { url: source.clone(), content_type });
        }
        let too_large = || DirectoryError::TooLarge { url: source.clone(), limit: MAX_DIRECTORY_BYTES };
        let declared = resp.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_DIRECTORY_BYTES as u64) {
            return Err(too_large());
        }
        let max_age = resp.headers().get_all(CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).find_map(parse_max_age);
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > MAX_DIRECTORY_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let keys = parse_key_set(&body).map_err(|e| match e {
            ParseError::TooManyKeys => DirectoryError::TooManyKeys { url: source.clone(), limit: MAX_DIRECTORY_KEYS },
            ParseError::Malformed(reason) => DirectoryError::Malformed { url: source.clone(), reason },
        })?;
        Ok(Fetched { keys, max_age })
    }
}

#[async_trait]
impl Fetch for HttpFetch {
    async fn fetch(&self, url: &str, kind: AgentKind) -> Result<Fetched, DirectoryError> {
        // The client's own timeout covers each exchange; this bounds the whole fetch,
        // body included, however slowly the directory trickles bytes.
        match tokio::time::timeout(self.timeout, self.get(url, kind)).await {
            Ok(r) => r,
            Err(_) => Err(DirectoryError::Unreachable { url: source_name(url, kind), reason: format!("no complete answer within {:?}", self.timeout) }),
        }
    }
}

/// How refusals and logs name the key source at `url`: a directory by its URL (a trusted
/// origin and the well-known path), a `jwks_uri` key set by its origin only, since its path
/// and query are the client's text.
pub(crate) fn source_name(url: &str, kind: AgentKind) -> String {
    match kind {
        AgentKind::Directory => url.to_owned(),
        AgentKind::JwksUri | AgentKind::Cimd => {
            let origin = url::Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
            format!("{origin} ({} key set)", kind.as_str())
        }
    }
}
