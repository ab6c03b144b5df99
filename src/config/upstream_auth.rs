//! `[upstream.auth]`: which credential the backend gets (docs/upstream-credentials.md). Checked
//! here once; the credential source (`upstream_auth`) is built from the validated value, one per
//! backend, so a second backend is a second value, not a second global.
//!
//! Secrets never come from the config text: `value_env` / `client_secret_env` are read here,
//! at start (the one place the process environment is read), `value_file` /
//! `client_secret_file` are read here to refuse a missing or empty one, and by the credential
//! source again whenever the file changes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;
use url::Url;

use super::raw::RawUpstreamAuth;
use super::FieldError;

/// Validated `[upstream.auth]`: what the backend gets besides the request.
#[derive(Debug, Clone, Default)]
pub enum UpstreamAuth {
    /// The inbound `Authorization` and `DPoP` are removed, nothing is added (MCP: no token
    /// passthrough).
    #[default]
    None,
    /// The verified inbound token is passed through (`oauth.forward_token`).
    Forward,
    /// One header from a secret.
    Static(StaticAuth),
    /// RFC 8693 token exchange at the user's issuer.
    TokenExchange(Box<TokenExchange>),
}

impl UpstreamAuth {
    /// The name in the config and the decision log's `upstream_auth`.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamAuth::None => "none",
            UpstreamAuth::Forward => "forward",
            UpstreamAuth::Static(_) => "static",
            UpstreamAuth::TokenExchange(_) => "token_exchange",
        }
    }
}

/// Where a secret comes from.
#[derive(Debug, Clone)]
pub enum SecretSource {
    /// Read from the environment at start.
    Value(SecretString),
    /// Read from this file (resolved against the config's folder), and again when it changes.
    File {
        /// The file.
        path: PathBuf,
        /// Its content at start, without one trailing newline.
        first: SecretString,
        /// The dotted key that named it, for messages.
        field: &'static str,
    },
}

/// `kind = "static"`.
#[derive(Debug, Clone)]
pub struct StaticAuth {
    /// The header set (a valid field name, lower case).
    pub header: String,
    /// The value after `prefix`.
    pub value: SecretSource,
    /// Put before the value.
    pub prefix: String,
}

/// Issued tokens cached at most, for all callers together.
pub const MAX_CACHED: u64 = 10_000;
/// `upstream.auth.max_cached_per_caller` when not set.
const DEFAULT_CACHED_PER_CALLER: u64 = 100;

/// `kind = "token_exchange"`.
#[derive(Debug, Clone)]
pub struct TokenExchange {
    /// `None`: the issuer metadata's `token_endpoint`.
    pub token_endpoint: Option<Url>,
    /// The gateway's client id.
    pub client_id: String,
    /// How the gateway authenticates as that client.
    pub client_auth: ClientAuth,
    /// `audience` asked for.
    pub audience: Option<String>,
    /// `resource` asked for.
    pub resource: Option<String>,
    /// `scope` asked for.
    pub scope: Option<String>,
    /// Exchange DPoP-bound subject tokens too.
    pub exchange_bound_tokens: bool,
    /// Time allowed for one exchange.
    pub timeout: Duration,
    /// `actor = true`: the keys that sign actor tokens.
    pub actor: Option<ActorKeys>,
    /// Most exchanges per second.
    pub max_per_second: u32,
    /// Most issued tokens cached for one caller (docs/design.md decision 13); past it, that
    /// caller's new tokens are exchanged but not kept.
    pub max_cached_per_caller: u64,
}

/// How the gateway authenticates at the token endpoint.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// `client_secret_basic`: the secret from `client_secret_env` / `client_secret_file`.
    Secret(SecretSource),
    /// `private_key_jwt` (RFC 7523): assertions signed with this Ed25519 private JWK
    /// (`client_key_file`, resolved against the config's folder).
    KeyJwt(PathBuf),
}

/// `actor = true`: the actor key files (private Ed25519 JWKs), resolved against the config's
/// folder; read by the credential source.
#[derive(Debug, Clone)]
pub struct ActorKeys {
    /// `actor_key_file`: signs actor tokens.
    pub current: PathBuf,
    /// `actor_key_previous_file`: only published, during a rotation.
    pub previous: Option<PathBuf>,
}

/// Drops one trailing LF or CRLF (a file written by `echo` or an editor).
pub fn trim_newline(s: &str) -> &str {
    s.strip_suffix("\r\n").or_else(|| s.strip_suffix('\n')).unwrap_or(s)
}

/// Reads the secret of a `*_file` key: its content without one trailing newline; missing,
/// unreadable, not UTF-8 or empty is an error naming `field`.
pub fn read_secret_file(field: &str, path: &Path) -> Result<SecretString, FieldError> {
    let text = std::fs::read_to_string(path).map_err(|e| FieldError::new(field, format!("cannot read {}: {e}", path.display())))?;
    let value = trim_newline(&text);
    if value.is_empty() {
        return Err(FieldError::new(field, format!("{} is empty", path.display())));
    }
    Ok(SecretString::from(value.to_owned()))
}

/// One secret from `{key}_env` or `{key}_file` (exactly one of them).
fn secret(env_field: &'static str, file_field: &'static str, env: Option<&str>, file: Option<&Path>, base_dir: &Path) -> Result<SecretSource, FieldError> {
    match (env, file) {
        (Some(_), Some(_)) => Err(FieldError::new(env_field, format!("set {env_field} or {file_field}, not both"))),
        (None, None) => Err(FieldError::new(env_field, format!("is required (or {file_field}): the secret never comes from the config text"))),
        (Some(var), None) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(SecretSource::Value(SecretString::from(v))),
            Ok(_) => Err(FieldError::new(env_field, format!("the environment variable {var} is empty"))),
            Err(_) => Err(FieldError::new(env_field, format!("the environment variable {var} is not set (or not UTF-8)"))),
        },
        (None, Some(p)) => {
            let path = base_dir.join(p);
            let first = read_secret_file(file_field, &path)?;
            Ok(SecretSource::File { path, first, field: file_field })
        }
    }
}

/// Checks `[upstream.auth]` with what it depends on: `oauth.forward_token` (the old spelling of
/// `kind = "forward"`) and `oauth.required`.
pub fn from_raw(raw: Option<RawUpstreamAuth>, forward_token: bool, oauth_required: bool, base_dir: &Path) -> Result<UpstreamAuth, Vec<FieldError>> {
    let raw = raw.unwrap_or_default();
    let mut errs = Vec::new();
    let kind = match (raw.kind.as_deref(), forward_token) {
        (None, false) => "none",
        (None, true) | (Some("forward"), _) => "forward",
        (Some(k @ ("none" | "static" | "token_exchange")), false) => k,
        (Some(k @ ("none" | "static" | "token_exchange")), true) => {
            errs.push(FieldError::new(
                "oauth.forward_token",
                format!("is the old spelling of upstream.auth.kind = \"forward\", but upstream.auth.kind = {k:?}: remove one"),
            ));
            k
        }
        (Some(other), _) => {
            return Err(vec![FieldError::new("upstream.auth.kind", format!("{other:?} is not one of \"none\", \"static\", \"token_exchange\", \"forward\""))]);
        }
    };
    let misplaced = |errs: &mut Vec<FieldError>, keys: &[(&str, bool)]| {
        for (key, set) in keys {
            if *set {
                errs.push(FieldError::new(format!("upstream.auth.{key}"), format!("has no meaning with kind = {kind:?}")));
            }
        }
    };
    let static_keys =
        [("header", raw.header.is_some()), ("value_env", raw.value_env.is_some()), ("value_file", raw.value_file.is_some()), ("prefix", raw.prefix.is_some())];
    let exchange_keys = [
        ("token_endpoint", raw.token_endpoint.is_some()),
        ("client_id", raw.client_id.is_some()),
        ("client_secret_env", raw.client_secret_env.is_some()),
        ("client_secret_file", raw.client_secret_file.is_some()),
        ("client_key_file", raw.client_key_file.is_some()),
        ("audience", raw.audience.is_some()),
        ("resource", raw.resource.is_some()),
        ("scope", raw.scope.is_some()),
        ("exchange_bound_tokens", raw.exchange_bound_tokens),
        ("timeout", raw.timeout.is_some()),
        ("max_per_second", raw.max_per_second.is_some()),
        ("max_cached_per_caller", raw.max_cached_per_caller.is_some()),
        ("actor", raw.actor),
        ("actor_key_file", raw.actor_key_file.is_some()),
        ("actor_key_previous_file", raw.actor_key_previous_file.is_some()),
    ];
    if matches!(kind, "forward" | "token_exchange") && !oauth_required {
        errs.push(FieldError::new(
            "upstream.auth.kind",
            format!("{kind:?} needs oauth.required = true (only a verified user token is passed on or exchanged)"),
        ));
    }
    let auth = match kind {
        "none" | "forward" => {
            misplaced(&mut errs, &static_keys);
            misplaced(&mut errs, &exchange_keys);
            if kind == "none" {
                UpstreamAuth::None
            } else {
                UpstreamAuth::Forward
            }
        }
        "static" => {
            misplaced(&mut errs, &exchange_keys);
            let header = raw.header.as_deref().unwrap_or("authorization").to_ascii_lowercase();
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                errs.push(FieldError::new("upstream.auth.header", format!("{header:?} is not a valid header name")));
            }
            let prefix = raw.prefix.clone().unwrap_or_else(|| if header == "authorization" { "Bearer ".to_owned() } else { String::new() });
            match secret("upstream.auth.value_env", "upstream.auth.value_file", raw.value_env.as_deref(), raw.value_file.as_deref(), base_dir) {
                Ok(value) => UpstreamAuth::Static(StaticAuth { header, value, prefix }),
                Err(e) => {
                    errs.push(e);
                    UpstreamAuth::None
                }
            }
        }
        _ => {
            misplaced(&mut errs, &static_keys);
            token_exchange(&raw, base_dir, &mut errs).map_or(UpstreamAuth::None, |x| UpstreamAuth::TokenExchange(Box::new(x)))
        }
    };
    if errs.is_empty() {
        Ok(auth)
    } else {
        Err(errs)
    }
}

fn token_exchange(raw: &RawUpstreamAuth, base_dir: &Path, errs: &mut Vec<FieldError>) -> Option<TokenExchange> {
    let token_endpoint = raw.token_endpoint.as_deref().and_then(|u| match Url::parse(u) {
        Ok(url) if url.scheme() == "https" && url.host_str().is_some() && url.fragment().is_none() => Some(url),
        _ => {
            errs.push(FieldError::new("upstream.auth.token_endpoint", format!("{u:?} must be an https URL without a fragment")));
            None
        }
    });
    let client_id = raw.client_id.clone().filter(|c| !c.is_empty());
    if client_id.is_none() {
        errs.push(FieldError::new("upstream.auth.client_id", "is required with kind = \"token_exchange\" (the gateway's client at the issuer)"));
    }
    let client_auth = match &raw.client_key_file {
        Some(key) if raw.client_secret_env.is_none() && raw.client_secret_file.is_none() => Some(ClientAuth::KeyJwt(base_dir.join(key))),
        Some(_) => {
            errs.push(FieldError::new("upstream.auth.client_key_file", "set client_key_file or client_secret_env / client_secret_file, not both"));
            None
        }
        None => secret(
            "upstream.auth.client_secret_env",
            "upstream.auth.client_secret_file",
            raw.client_secret_env.as_deref(),
            raw.client_secret_file.as_deref(),
            base_dir,
        )
        .map_err(|e| errs.push(e))
        .ok()
        .map(ClientAuth::Secret),
    };
    if raw.audience.is_none() && raw.resource.is_none() {
        errs.push(FieldError::new(
            "upstream.auth.audience",
            "audience or resource is required with kind = \"token_exchange\" (the backend the issued token is for)",
        ));
    }
    if let Some(r) = &raw.resource {
        if Url::parse(r).map_or(true, |u| u.fragment().is_some()) {
            errs.push(FieldError::new("upstream.auth.resource", format!("{r:?} must be an absolute URI without a fragment (RFC 8707 §2)")));
        }
    }
    if let Some(scope) = &raw.scope {
        // RFC 6749 §3.3: space-separated scope tokens.
        if !scope.split(' ').all(super::is_scope_token) {
            errs.push(FieldError::new("upstream.auth.scope", format!("{scope:?} is not a space-separated list of scope tokens (RFC 6749 §3.3)")));
        }
    }
    let timeout = raw.timeout.as_ref().map_or(Duration::from_secs(5), |t| t.0);
    if timeout.is_zero() || timeout > Duration::from_secs(60) {
        errs.push(FieldError::new("upstream.auth.timeout", "must be more than 0s and at most 60s"));
    }
    let actor = match (raw.actor, &raw.actor_key_file) {
        (true, Some(current)) => Some(ActorKeys { current: base_dir.join(current), previous: raw.actor_key_previous_file.as_ref().map(|p| base_dir.join(p)) }),
        (true, None) => {
            errs.push(FieldError::new("upstream.auth.actor_key_file", "is required with actor = true (the key that signs actor tokens)"));
            None
        }
        (false, _) => {
            for (key, set) in [("actor_key_file", raw.actor_key_file.is_some()), ("actor_key_previous_file", raw.actor_key_previous_file.is_some())] {
                if set {
                    errs.push(FieldError::new(format!("upstream.auth.{key}"), "has no meaning without actor = true"));
                }
            }
            None
        }
    };
    // One key, one job: a leaked actor token key must not also authenticate the client.
    if let (Some(ActorKeys { current, .. }), Some(ClientAuth::KeyJwt(client))) = (&actor, &client_auth) {
        let same = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
        if same(current.as_path()) == same(client.as_path()) {
            errs.push(FieldError::new(
                "upstream.auth.actor_key_file",
                "must not be the client key (upstream.auth.client_key_file): one key signs actor tokens, another authenticates the client",
            ));
        }
    }
    let max_per_second = raw.max_per_second.unwrap_or(50);
    if !(1..=100_000).contains(&max_per_second) {
        errs.push(FieldError::new("upstream.auth.max_per_second", "must be between 1 and 100000"));
    }
    let max_cached_per_caller = raw.max_cached_per_caller.unwrap_or(DEFAULT_CACHED_PER_CALLER);
    if !(1..=MAX_CACHED).contains(&max_cached_per_caller) {
        errs.push(FieldError::new("upstream.auth.max_cached_per_caller", format!("must be between 1 and {MAX_CACHED} (the cache's global bound)")));
    }
    Some(TokenExchange {
        token_endpoint,
        client_id: client_id?,
        client_auth: client_auth?,
        audience: raw.audience.clone(),
        resource: raw.resource.clone(),
        scope: raw.scope.clone(),
        exchange_bound_tokens: raw.exchange_bound_tokens,
        timeout,
        actor,
        max_per_second,
        max_cached_per_caller,
    })
}

#[cfg(test)]
#[path = "upstream_auth_tests.rs"]
mod tests;
