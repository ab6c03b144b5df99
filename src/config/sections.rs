//! The validated sections every stage is built from. Each `from_raw` checks every field of its
//! section once, names each bad one by its dotted path, and yields settings a stage uses as
//! they are — durations, URLs, enums, decoded keys, paths resolved against the config's
//! folder — so no stage parses or re-checks configuration text. What needs I/O (reading a CA
//! file, compiling the policy) is left to the stage constructors, which name the field too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use portcullis_wire::signature::{ed25519_thumbprint, verifying_key_from_jwk, Component};
use url::Url;

use super::raw::{PolicyEvaluator, RawOAuth, RawPolicy, RawSignatures, RawState};
use super::FieldError;

/// What a section needs to know about the rest of the file.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The folder relative paths are resolved against.
    pub base_dir: &'a Path,
    /// `listen.public_url`, when it is valid: the default `@authority` and token audience.
    pub public_url: Option<&'a Url>,
}

impl Context<'static> {
    /// No public URL, paths relative to the working directory (a section on its own).
    pub fn bare() -> Context<'static> {
        Context { base_dir: Path::new("."), public_url: None }
    }
}

/// Collects the errors of one section.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(FieldError::new(field, reason));
    }

    fn positive(&mut self, field: &str, d: Duration) {
        if d.is_zero() {
            self.push(field, "must be greater than zero");
        }
    }

    fn at_least_one<T: PartialEq + From<u8>>(&mut self, field: &str, n: T, what: &str) {
        if n == T::from(0) {
            self.push(field, format!("must be at least 1{what}"));
        }
    }

    fn finish<T>(self, value: T) -> Result<T, Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self.0)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [signatures]
// ---------------------------------------------------------------------------------------------

/// Validated `[signatures]` (stages 2–6).
#[derive(Debug, Clone)]
pub struct Signatures {
    /// Refuse requests without a valid signature.
    pub required: bool,
    /// The `tag` of the signature to verify (a valid sf-string).
    pub tag: String,
    /// The components every signature must cover, in configured order, without repeats; at
    /// least `signature-agent` and `@authority` or `@target-uri`.
    pub components: Vec<Component>,
    /// Longest accepted lifetime `expires - created` (at least 1 s).
    pub max_age: Duration,
    /// Tolerated clock difference with signers.
    pub clock_skew: Duration,
    /// Accept the legacy sf-string `Signature-Agent` form.
    pub accept_legacy_agent: bool,
    /// Refuse signatures without `nonce`.
    pub require_nonce: bool,
    /// The gateway's own authorities, normalized (lowercase host, default port dropped): the
    /// listed ones, else `listen.public_url`'s. Never empty.
    pub authority: Vec<String>,
    /// Key directory resolution (stage 4).
    pub directory: Directory,
}

/// The key-resolution part of `[signatures]`.
#[derive(Debug, Clone)]
pub struct Directory {
    /// Origins whose key directories may be fetched, normalized (`https://host[:port]`).
    pub trusted_agents: Vec<String>,
    /// Static keys, each with the origin it speaks for.
    pub keys: Vec<StaticKey>,
    /// Extra PEM trust root for directory fetches, resolved against the config's folder.
    pub ca: Option<PathBuf>,
    /// Accept `Signature-Agent` members with `type=jwks_uri`.
    pub accept_jwks_uri: bool,
    /// Wall-clock limit on one fetch.
    pub timeout: Duration,
    /// Shortest time a fetched directory is kept (at least 1 s).
    pub min_ttl: Duration,
    /// Longest time a fetched directory is kept (at least `min_ttl`).
    pub max_ttl: Duration,
    /// Least time between two fetches of an origin's keys caused by an unknown keyid.
    pub refetch_interval: Duration,
    /// Most fetches per trusted origin per minute (at least 1).
    pub fetch_budget: u32,
    /// Most fetches per minute over all origins (at least 1).
    pub fetch_budget_global: u32,
}

/// One `[[signatures.keys]]` entry, decoded.
#[derive(Debug, Clone)]
pub struct StaticKey {
    /// The origin the key speaks for, normalized.
    pub agent: String,
    /// The Ed25519 public key.
    pub key: VerifyingKey,
    /// Its RFC 7638 thumbprint: the `keyid` signatures name it by.
    pub keyid: String,
}

impl Signatures {
    /// Checks every field of `[signatures]`.
    pub fn from_raw(raw: RawSignatures, ctx: Context<'_>) -> Result<Signatures, Vec<FieldError>> {
        let mut errs = Errors::default();
        if raw.tag.is_empty() || sfv::StringRef::from_str(&raw.tag).is_err() {
            errs.push("signatures.tag", "must be a non-empty string of printable ASCII");
        }
        let mut components: Vec<Component> = Vec::new();
        for c in &raw.components {
            match Component::parse(c) {
                None => errs.push("signatures.components", format!("{c:?} is not a request derived component or a lowercase field name")),
                Some(c) if !components.contains(&c) => components.push(c),
                Some(_) => {}
            }
        }
        let has = |c: Component| components.contains(&c);
        if !components.iter().any(Component::is_signature_agent) || !(has(Component::Authority) || has(Component::TargetUri)) {
            errs.push("signatures.components", "must include \"signature-agent\" and \"@authority\" or \"@target-uri\" (Web Bot Auth profile minimum)");
        }
        if raw.max_age.0.as_secs() == 0 {
            errs.push("signatures.max_age", "must be at least 1s");
        }
        // `@authority` is the gateway's own: the listed names, else public_url's (decision 3).
        let scheme = ctx.public_url.map_or("https", Url::scheme);
        let mut authority = Vec::new();
        for (i, a) in raw.authority.iter().enumerate() {
            match portcullis_wire::target::normalize(a, scheme) {
                Some(n) if !authority.contains(&n) => authority.push(n),
                Some(_) => {}
                None => errs.push(format!("signatures.authority[{i}]"), format!("{a:?} is not a host[:port]")),
            }
        }
        if raw.authority.is_empty() {
            authority.extend(ctx.public_url.and_then(portcullis_wire::target::url_authority));
            if authority.is_empty() {
                errs.push("signatures.authority", "names no authority (the default is listen.public_url's)");
            }
        }
        let directory = Directory::from_raw(&raw, ctx, &mut errs);
        errs.finish(Signatures {
            required: raw.required,
            tag: raw.tag,
            components,
            max_age: raw.max_age.0,
            clock_skew: raw.clock_skew.0,
            accept_legacy_agent: raw.accept_legacy_agent,
            require_nonce: raw.require_nonce,
            authority,
            directory,
        })
    }

    /// Whether a body must be bound by a covered `Content-Digest` (stage 2 runs).
    pub fn requires_digest(&self) -> bool {
        self.required && self.components.iter().any(Component::is_content_digest)
    }
}

impl TryFrom<RawSignatures> for Signatures {
    type Error = Vec<FieldError>;

    /// The section alone: no public URL (so `authority` must be listed), paths relative to the
    /// working directory.
    fn try_from(raw: RawSignatures) -> Result<Self, Self::Error> {
        Signatures::from_raw(raw, Context::bare())
    }
}

impl Directory {
    fn from_raw(raw: &RawSignatures, ctx: Context<'_>, errs: &mut Errors) -> Directory {
        let mut trusted_agents = Vec::new();
        for (i, a) in raw.trusted_agents.iter().enumerate() {
            match normalize_origin(a) {
                Ok(o) if !trusted_agents.contains(&o) => trusted_agents.push(o),
                Ok(_) => {}
                Err(reason) => errs.push(format!("signatures.trusted_agents[{i}]"), reason),
            }
        }
        let mut keys: Vec<StaticKey> = Vec::new();
        for (i, k) in raw.keys.iter().enumerate() {
            let agent = normalize_origin(&k.agent).map_err(|reason| errs.push(format!("signatures.keys[{i}].agent"), reason));
            let key = verifying_key_from_jwk(&k.jwk).map_err(|e| errs.push(format!("signatures.keys[{i}].jwk"), e.to_string()));
            if let (Ok(agent), Ok(key)) = (agent, key) {
                let keyid = ed25519_thumbprint(&key);
                if keys.iter().any(|k| k.keyid == keyid) {
                    errs.push(format!("signatures.keys[{i}].jwk"), format!("key {keyid} is listed twice"));
                } else {
                    keys.push(StaticKey { agent, key, keyid });
                }
            }
        }
        let (min_ttl, max_ttl) = (raw.directory_min_ttl.0, raw.directory_max_ttl.0);
        errs.positive("signatures.directory_timeout", raw.directory_timeout.0);
        if min_ttl < Duration::from_secs(1) {
            errs.push("signatures.directory_min_ttl", "must be at least 1s");
        }
        if max_ttl < min_ttl {
            errs.push("signatures.directory_max_ttl", "must not be less than signatures.directory_min_ttl");
        }
        errs.positive("signatures.directory_refetch_interval", raw.directory_refetch_interval.0);
        errs.at_least_one("signatures.directory_fetch_budget", raw.directory_fetch_budget, " (fetches per origin per minute)");
        errs.at_least_one("signatures.directory_fetch_budget_global", raw.directory_fetch_budget_global, " (fetches per minute)");
        Directory {
            trusted_agents,
            keys,
            ca: raw.directory_ca.as_ref().map(|p| ctx.base_dir.join(p)),
            accept_jwks_uri: raw.accept_jwks_uri,
            timeout: raw.directory_timeout.0,
            min_ttl,
            max_ttl,
            refetch_interval: raw.directory_refetch_interval.0,
            fetch_budget: raw.directory_fetch_budget,
            fetch_budget_global: raw.directory_fetch_budget_global,
        }
    }
}

/// An agent origin as the gateway names it: `https://host[:port]`, lowercase, default port
/// dropped. Anything with a path, query or credentials is refused.
pub fn normalize_origin(s: &str) -> Result<String, String> {
    let u = Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if u.scheme() != "https" {
        return Err(format!("{s:?} must be an https origin"));
    }
    if u.path() != "/" || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(format!("{s:?} must be an origin (scheme://host[:port]) without path, query or credentials"));
    }
    Ok(u.origin().ascii_serialization())
}

// ---------------------------------------------------------------------------------------------
// [oauth]
// ---------------------------------------------------------------------------------------------

/// Validated `[oauth]` (stage 7).
#[derive(Debug, Clone)]
pub struct OAuth {
    /// Refuse requests without a valid bearer token.
    pub required: bool,
    /// The issuer (`iss`) tokens must carry, exactly as written (an https URL; `iss` is
    /// compared byte for byte, RFC 9068 §4). Set whenever the stage runs.
    pub issuer: Option<String>,
    /// JWKS URL; `None`: from the issuer's metadata.
    pub jwks_url: Option<Url>,
    /// The audience tokens must contain (`listen.public_url` unless set).
    pub audience: String,
    /// Extra PEM trust root for issuer fetches, resolved against the config's folder.
    pub issuer_ca: Option<PathBuf>,
    /// Scopes listed in the protected-resource metadata and the 401 challenge (RFC 6749 §3.3
    /// scope tokens).
    pub scopes_supported: Vec<String>,
    /// Tolerated clock difference with the issuer (at most 5 minutes).
    pub clock_skew: Duration,
    /// Time allowed for one issuer fetch.
    pub fetch_timeout: Duration,
    /// Verified tokens kept; 0 = no cache.
    pub token_cache_size: u64,
    /// Least time between two JWKS refetches caused by an unknown `kid`.
    pub jwks_refetch_interval: Duration,
    /// Most such refetches per minute (at least 1).
    pub jwks_refetch_budget: u32,
    /// RFC 7662 introspection for opaque tokens.
    pub introspection: Option<Introspection>,
    /// RFC 9449 DPoP: `None` when `oauth.dpop` is off.
    pub dpop: Option<Dpop>,
    /// Refuse tokens without `cnf` (bearer tokens).
    pub require_sender_constrained: bool,
}

/// Validated DPoP settings (`oauth.dpop = true`).
#[derive(Debug, Clone)]
pub struct Dpop {
    /// How long after its `iat` a proof is accepted (plus `oauth.clock_skew`).
    pub max_age: Duration,
    /// Only proofs made with the key of the request's HTTP Message Signature.
    pub require_agent_key_binding: bool,
    /// The origins (`scheme://authority`) a proof's `htu` may name: `listen.public_url`'s.
    /// The gateway adds `signatures.authority` (same scheme) when it builds the stage.
    pub origins: Vec<String>,
}

/// Validated `[oauth.introspection]`.
#[derive(Debug, Clone)]
pub struct Introspection {
    /// The endpoint (https).
    pub url: Url,
    /// The gateway's client id at the issuer.
    pub client_id: String,
    /// The client secret; never logged.
    pub client_secret: secrecy::SecretString,
}

impl OAuth {
    /// Checks every field of `[oauth]`.
    pub fn from_raw(raw: RawOAuth, ctx: Context<'_>) -> Result<OAuth, Vec<FieldError>> {
        let mut errs = Errors::default();
        let mut https = |field: &str, s: &str| https_url(s).map_err(|reason| errs.push(field, reason)).ok();
        let issuer = raw.issuer.as_deref().and_then(|i| https("oauth.issuer", i).map(|_| i.to_owned()));
        let jwks_url = raw.jwks_url.as_deref().and_then(|u| https("oauth.jwks_url", u));
        let introspection_url = raw.introspection.as_ref().and_then(|i| https("oauth.introspection.url", &i.url));
        if raw.issuer.is_none() && (raw.required || raw.introspection.is_some()) {
            errs.push("oauth.issuer", "required to verify bearer tokens (or set oauth.required = false)");
        }
        let audience = match (&raw.audience, ctx.public_url) {
            (Some(a), _) => a.clone(),
            (None, Some(u)) => u.as_str().to_owned(),
            (None, None) => String::new(),
        };
        if let Err(reason) = super::parse_url(&audience, &["https", "http"]) {
            errs.push("oauth.audience", reason);
        }
        for scope in &raw.scopes_supported {
            if !super::is_scope_token(scope) {
                errs.push("oauth.scopes_supported", format!("{scope:?} is not a valid scope token (RFC 6749 §3.3)"));
            }
        }
        if raw.clock_skew.0 > Duration::from_secs(300) {
            errs.push("oauth.clock_skew", "must be at most 5m");
        }
        errs.positive("oauth.fetch_timeout", raw.fetch_timeout.0);
        errs.at_least_one("oauth.jwks_refetch_budget", raw.jwks_refetch_budget, " (refetches per minute)");
        if raw.dpop_max_age.0.is_zero() || raw.dpop_max_age.0 > Duration::from_secs(3600) {
            errs.push("oauth.dpop_max_age", "must be more than 0s and at most 1h");
        }
        if raw.require_agent_key_binding && !raw.dpop {
            errs.push("oauth.require_agent_key_binding", "needs oauth.dpop = true (the agent's key is proven by a DPoP proof)");
        }
        if raw.require_sender_constrained && !raw.dpop {
            errs.push("oauth.require_sender_constrained", "needs oauth.dpop = true (DPoP is the sender constraint the gateway verifies)");
        }
        let dpop = raw.dpop.then(|| Dpop {
            max_age: raw.dpop_max_age.0,
            require_agent_key_binding: raw.require_agent_key_binding,
            origins: ctx.public_url.map(|u| u.origin().ascii_serialization()).into_iter().collect(),
        });
        let introspection = match (raw.introspection, introspection_url) {
            (Some(i), Some(url)) => Some(Introspection { url, client_id: i.client_id, client_secret: i.client_secret }),
            _ => None,
        };
        errs.finish(OAuth {
            required: raw.required,
            issuer,
            jwks_url,
            audience,
            issuer_ca: raw.issuer_ca.as_ref().map(|p| ctx.base_dir.join(p)),
            scopes_supported: raw.scopes_supported,
            clock_skew: raw.clock_skew.0,
            fetch_timeout: raw.fetch_timeout.0,
            token_cache_size: raw.token_cache_size,
            jwks_refetch_interval: raw.jwks_refetch_interval.0,
            jwks_refetch_budget: raw.jwks_refetch_budget,
            introspection,
            dpop,
            require_sender_constrained: raw.require_sender_constrained,
        })
    }

    /// Whether the token stage runs: a token is required, or an issuer or introspection is
    /// configured. Otherwise the inbound `Authorization` is only stripped.
    pub fn is_enabled(&self) -> bool {
        self.required || self.issuer.is_some() || self.introspection.is_some()
    }
}

/// An https URL without query or fragment (issuer, JWKS and introspection endpoints).
fn https_url(s: &str) -> Result<Url, String> {
    let u = Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if u.scheme() != "https" || u.host_str().is_none() {
        return Err(format!("{s:?} must be an https URL"));
    }
    if u.fragment().is_some() || u.query().is_some() {
        return Err(format!("{s:?} must not have a query or fragment"));
    }
    Ok(u)
}

impl TryFrom<RawOAuth> for OAuth {
    type Error = Vec<FieldError>;

    /// The section alone: no public URL (so `audience` must be set).
    fn try_from(raw: RawOAuth) -> Result<Self, Self::Error> {
        OAuth::from_raw(raw, Context::bare())
    }
}

// ---------------------------------------------------------------------------------------------
// [policy]
// ---------------------------------------------------------------------------------------------

/// Validated `[policy]` (stages 8–10).
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// Run stages 8–10.
    pub enabled: bool,
    /// Files or folders of `.rego` and data, resolved against the config's folder; empty = the
    /// bundled example policy.
    pub paths: Vec<PathBuf>,
    /// The rule whose value is the decision (`data.<package>.<rule>`).
    pub query: String,
    /// Recompile when a file under `paths` changes.
    pub watch: bool,
    /// How decisions are evaluated.
    pub evaluator: PolicyEvaluator,
}

impl PolicySettings {
    /// Checks every field of `[policy]`.
    pub fn from_raw(raw: RawPolicy, ctx: Context<'_>) -> Result<PolicySettings, Vec<FieldError>> {
        let mut errs = Errors::default();
        if !raw.query.starts_with("data.") || raw.query.len() <= "data.".len() {
            errs.push("policy.query", format!("{:?} is not a rule reference (e.g. \"data.portcullis.decision\")", raw.query));
        }
        errs.finish(PolicySettings {
            enabled: raw.enabled,
            paths: raw.paths.iter().map(|p| ctx.base_dir.join(p)).collect(),
            query: raw.query,
            watch: raw.watch,
            evaluator: raw.evaluator,
        })
    }
}

impl Default for PolicySettings {
    /// The bundled policy, as `[policy]`'s defaults say.
    fn default() -> Self {
        let raw = RawPolicy::default();
        PolicySettings { enabled: raw.enabled, paths: raw.paths, query: raw.query, watch: raw.watch, evaluator: raw.evaluator }
    }
}

impl TryFrom<RawPolicy> for PolicySettings {
    type Error = Vec<FieldError>;

    /// The section alone: paths relative to the working directory.
    fn try_from(raw: RawPolicy) -> Result<Self, Self::Error> {
        PolicySettings::from_raw(raw, Context::bare())
    }
}

// ---------------------------------------------------------------------------------------------
// [state]
// ---------------------------------------------------------------------------------------------

/// Where shared state lives (`state.store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// In-process, bounded stores (one gateway instance).
    Memory,
    /// A Redis server, `redis://host:port/db` or `rediss://…` (TLS), or a Redis Cluster,
    /// `redis+cluster://host:port,host:port` (seed nodes; `rediss+cluster://` for TLS); the URL
    /// as written.
    Redis(String),
}

impl Store {
    /// The Redis URL, for a Redis store.
    pub fn redis_url(&self) -> Option<&str> {
        match self {
            Store::Redis(url) => Some(url),
            Store::Memory => None,
        }
    }
}

/// Validated `[state]`.
#[derive(Debug, Clone)]
pub struct StateSettings {
    /// The store.
    pub store: Store,
    /// Prefix of every Redis key.
    pub prefix: String,
    /// Time allowed to (re)connect to Redis.
    pub connect_timeout: Duration,
    /// Time allowed for one Redis command.
    pub command_timeout: Duration,
    /// PEM trust root for a `rediss://` store, resolved against the config's folder.
    pub ca: Option<PathBuf>,
    /// Most live replay records the memory store holds.
    pub max_replay_entries: usize,
    /// Most quota buckets the memory store holds.
    pub max_quota_keys: usize,
    /// How long an unused `Mcp-Session-Id` binding lives.
    pub session_ttl: Duration,
    /// Most session bindings the memory store holds.
    pub max_sessions: usize,
}

impl StateSettings {
    /// Checks every field of `[state]`.
    pub fn from_raw(raw: RawState, ctx: Context<'_>) -> Result<StateSettings, Vec<FieldError>> {
        let mut errs = Errors::default();
        let store = match raw.store.split_once("://") {
            None if raw.store == "memory" => Store::Memory,
            Some(("redis" | "rediss" | "redis+cluster" | "rediss+cluster", rest)) if !rest.is_empty() => Store::Redis(raw.store.clone()),
            _ => {
                errs.push(
                    "state.store",
                    format!(
                        "unsupported store {:?}: use \"memory\", \"redis://host:port/db\" (\"rediss://\" for TLS) or a Redis Cluster's seed nodes, \"redis+cluster://host:port,host:port\" (\"rediss+cluster://\")",
                        raw.store
                    ),
                );
                Store::Memory
            }
        };
        errs.positive("state.connect_timeout", raw.connect_timeout.0);
        errs.positive("state.command_timeout", raw.command_timeout.0);
        errs.at_least_one("state.max_replay_entries", raw.max_replay_entries, "");
        errs.at_least_one("state.max_quota_keys", raw.max_quota_keys, "");
        errs.positive("state.session_ttl", raw.session_ttl.0);
        errs.at_least_one("state.max_sessions", raw.max_sessions, "");
        errs.finish(StateSettings {
            store,
            prefix: raw.prefix,
            connect_timeout: raw.connect_timeout.0,
            command_timeout: raw.command_timeout.0,
            ca: raw.ca.as_ref().map(|p| ctx.base_dir.join(p)),
            max_replay_entries: raw.max_replay_entries,
            max_quota_keys: raw.max_quota_keys,
            session_ttl: raw.session_ttl.0,
            max_sessions: raw.max_sessions,
        })
    }
}

impl TryFrom<RawState> for StateSettings {
    type Error = Vec<FieldError>;

    /// The section alone: paths relative to the working directory.
    fn try_from(raw: RawState) -> Result<Self, Self::Error> {
        StateSettings::from_raw(raw, Context::bare())
    }
}
