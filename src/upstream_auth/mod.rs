//! Upstream credentials (docs/upstream-credentials.md): the backend gets a credential of its
//! own, never the user's token unless `forward` says so.
//!
//! One [`UpstreamCredentials`] per backend, built from its `[upstream.auth]` and held by the
//! forwarder (`proxy::Upstream`); the forward phase asks it for the request's [`Credential`]
//! before sending. A credential is attached only to a request the identity and token stages
//! found nothing wrong with: a monitored request with such findings goes on without one, so no
//! secret ever rides on a request the gateway could not vouch for.
//!
//! Trusts: the verified evidence of the pipeline, the secret files it reads, and (token
//! exchange) the issuer's token endpoint over the `oauth.issuer_ca` trust roots.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use tracing::warn;

use crate::config::{self, FieldError, Group, SecretSource};
use crate::denial::Denial;
use crate::evidence::Evidence;
use crate::finding::Finding;
use portcullis_wire::UnixTime;

mod actor;
mod exchange;
mod issued;

pub use actor::JWKS_PATH;
pub use exchange::ExchangeMetrics;

/// What the forwarder does with the request's credentials.
#[derive(Debug, Clone, Default)]
pub enum Attach {
    /// Removes the inbound `Authorization` and `DPoP`, adds nothing.
    #[default]
    Nothing,
    /// Passes the verified inbound `Authorization` (and its `DPoP` proof) on.
    Forward,
    /// Removes the inbound `Authorization`, `DPoP` and any field of this name, then sets it.
    Header(HeaderName, HeaderValue),
}

/// The credential one request goes upstream with, and what the decision log says of it.
#[derive(Debug, Clone, Default)]
pub struct Credential {
    /// What the forwarder does.
    pub attach: Attach,
    /// The decision log's `upstream_auth`: the kind of credential attached (`none` when none).
    pub kind: &'static str,
    /// The decision log's `upstream_auth_cached` (token exchange only).
    pub cached: Option<bool>,
}

impl Credential {
    /// No credential: the inbound token is removed, nothing is added.
    pub fn none() -> Credential {
        Credential { attach: Attach::Nothing, kind: "none", cached: None }
    }
}

/// Why no credential could be had; the forward phase turns it into a refusal.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CredentialError {
    /// The issuer refused this delegation (its OAuth `error` code, never its description).
    #[error("the issuer refused the token exchange: {0}")]
    Refused(String),
    /// The credential could not be had: what failed, for the operator's log.
    #[error("{0}")]
    Unavailable(String),
}

impl From<CredentialError> for Denial {
    fn from(e: CredentialError) -> Denial {
        match e {
            CredentialError::Refused(error) => Denial::DelegationRefused { error },
            CredentialError::Unavailable(_) => Denial::UpstreamCredentialsUnavailable,
        }
    }
}

/// The credential source of one backend.
pub struct UpstreamCredentials {
    source: Source,
}

enum Source {
    None,
    Forward,
    Static(StaticHeader),
    Exchange(Box<exchange::Exchanger>),
}

impl std::fmt::Debug for UpstreamCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCredentials").field("kind", &self.kind()).finish_non_exhaustive()
    }
}

impl UpstreamCredentials {
    /// The source `cfg` describes; a token exchange happens at `oauth`'s issuer, and actor
    /// tokens name `origin` (the gateway's public origin) as their issuer. Fails naming the key
    /// when a secret or key cannot be used.
    pub fn new(cfg: &config::UpstreamAuth, oauth: &config::OAuth, origin: &str) -> Result<UpstreamCredentials, FieldError> {
        let source = match cfg {
            config::UpstreamAuth::None => Source::None,
            config::UpstreamAuth::Forward => Source::Forward,
            config::UpstreamAuth::Static(s) => Source::Static(StaticHeader::new(s)?),
            config::UpstreamAuth::TokenExchange(x) => Source::Exchange(Box::new(exchange::Exchanger::new(x, oauth, origin)?)),
        };
        Ok(UpstreamCredentials { source })
    }

    /// No credential: today's default (`kind = "none"`).
    #[cfg(test)]
    pub(crate) fn none() -> UpstreamCredentials {
        UpstreamCredentials { source: Source::None }
    }

    /// The configured kind (`none`, `forward`, `static`, `token_exchange`).
    pub fn kind(&self) -> &'static str {
        match &self.source {
            Source::None => "none",
            Source::Forward => "forward",
            Source::Static(_) => "static",
            Source::Exchange(_) => "token_exchange",
        }
    }

    /// The JWK Set of the actor keys (`actor = true`), served at [`JWKS_PATH`].
    pub fn actor_jwks(&self) -> Option<&str> {
        match &self.source {
            Source::Exchange(x) => x.actor.as_ref().map(|a| a.jwks()),
            Source::None | Source::Forward | Source::Static(_) => None,
        }
    }

    /// The token exchange counters, when this source exchanges tokens.
    pub fn exchange_metrics(&self) -> Option<&ExchangeMetrics> {
        match &self.source {
            Source::Exchange(x) => Some(&x.metrics),
            Source::None | Source::Forward | Source::Static(_) => None,
        }
    }

    /// Forgets the credential `attach` carried, after the backend refused it (401/403): the
    /// next request gets a new one (an exchanged token is exchanged again; a static value is
    /// read again from its file, when it has one).
    pub fn forget(&self, attach: &Attach) {
        if let (Source::Exchange(x), Attach::Header(_, value)) = (&self.source, attach) {
            x.forget(value);
        }
    }

    /// The credential for a request the mode let through with `seen` and `findings`: none
    /// unless the identity and token stages found nothing.
    /// `headers` are the inbound request's (the subject token of an exchange); `now` is the
    /// request's arrival.
    pub async fn credential(&self, headers: &HeaderMap, seen: &Evidence, findings: &[Finding], now: UnixTime) -> Result<Credential, CredentialError> {
        if matches!(self.source, Source::None) || !is_vouched_for(findings) {
            return Ok(Credential::none());
        }
        match &self.source {
            Source::None => Ok(Credential::none()),
            // Only a token the gateway verified goes on (MCP: no token passthrough otherwise).
            Source::Forward if seen.token.is_some() => Ok(Credential { attach: Attach::Forward, kind: "forward", cached: None }),
            Source::Forward => Ok(Credential::none()),
            Source::Static(s) => Ok(Credential { attach: s.attach()?, kind: "static", cached: None }),
            Source::Exchange(x) => {
                let Some(token) = &seen.token else { return Ok(Credential::none()) };
                let narrowed = seen.policy.as_ref().and_then(|p| p.upstream_scopes.as_deref());
                let (value, cached) = x.credential(token, headers, seen.agent.as_ref().map(|a| a.agent()), narrowed, now).await?;
                Ok(Credential { attach: Attach::Header(http::header::AUTHORIZATION, value), kind: "token_exchange", cached: Some(cached) })
            }
        }
    }
}

/// Whether the identity and token stage groups found nothing: only then does a credential go
/// with the request (monitor mode forwards the rest without one).
fn is_vouched_for(findings: &[Finding]) -> bool {
    !findings.iter().any(|f| matches!(f.stage.group(), Group::Identity | Group::Token))
}

/// `kind = "static"`: one header from an environment variable (read at start) or a file (read
/// again when its modification time or length changes, checked at most once per
/// [`RECHECK`]).
struct StaticHeader {
    name: HeaderName,
    prefix: String,
    value: StaticValue,
}

enum StaticValue {
    Fixed(HeaderValue),
    File { path: PathBuf, field: &'static str, current: Mutex<FileValue> },
}

struct FileValue {
    value: HeaderValue,
    stamp: Option<(SystemTime, u64)>,
    checked: Instant,
}

/// How often a `value_file` is looked at for a change.
const RECHECK: Duration = Duration::from_millis(500);

impl StaticHeader {
    fn new(cfg: &config::StaticAuth) -> Result<StaticHeader, FieldError> {
        let name = HeaderName::from_bytes(cfg.header.as_bytes()).map_err(|_| FieldError::new("upstream.auth.header", "not a valid header name"))?;
        let value = match &cfg.value {
            SecretSource::Value(v) => StaticValue::Fixed(header_value("upstream.auth.value_env", &cfg.prefix, v)?),
            SecretSource::File { path, first, field } => StaticValue::File {
                path: path.clone(),
                field,
                current: Mutex::new(FileValue { value: header_value(field, &cfg.prefix, first)?, stamp: stamp(path), checked: Instant::now() }),
            },
        };
        Ok(StaticHeader { name, prefix: cfg.prefix.clone(), value })
    }

    fn attach(&self) -> Result<Attach, CredentialError> {
        let value = match &self.value {
            StaticValue::Fixed(v) => v.clone(),
            StaticValue::File { path, field, current } => {
                let mut cur = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if cur.checked.elapsed() >= RECHECK {
                    cur.checked = Instant::now();
                    let now = stamp(path);
                    if now != cur.stamp {
                        // A file being replaced may be missing or empty for a moment: the last
                        // good value stays until a usable one is there.
                        match config::read_secret_file(field, path).and_then(|v| header_value(field, &self.prefix, &v)) {
                            Ok(v) => {
                                cur.value = v;
                                cur.stamp = now;
                            }
                            Err(e) => warn!(field = %e.field, "Static upstream credential not reloaded, the previous value stays: {}", e.reason),
                        }
                    }
                }
                cur.value.clone()
            }
        };
        Ok(Attach::Header(self.name.clone(), value))
    }
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// `prefix` + the secret as a header value, marked sensitive (HTTP/2 never indexes it).
fn header_value(field: &str, prefix: &str, secret: &SecretString) -> Result<HeaderValue, FieldError> {
    let mut v = HeaderValue::from_str(&format!("{prefix}{}", secret.expose_secret()))
        .map_err(|_| FieldError::new(field, "the secret is not a valid header value (control characters or non-ASCII)"))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Applies `attach` to the outgoing `headers` (the inbound token fields were already removed
/// unless it is [`Attach::Forward`]).
pub fn apply(attach: &Attach, headers: &mut HeaderMap) {
    if let Attach::Header(name, value) = attach {
        headers.insert(name.clone(), value.clone());
    }
}
