//! Configuration: TOML → [`RawConfig`] (serde, mirrors the file) → [`Config`] (validated).
//!
//! Loaded once at start. Every key is listed in PRODUCT.md "Configuration"; unknown keys are an
//! error that names the key (serde's `deny_unknown_fields`, which cannot be combined with
//! `flatten`, so no section flattens). Validation checks every field before failing and the
//! error names each bad field by its dotted path. `portcullis check` runs exactly this code
//! plus the stage constructors (keys, policy, TLS material).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

/// The configuration used when no `--config` is given (see README "Embedded defaults").
pub const EMBEDDED_DEFAULT: &str = include_str!("default_config.toml");

/// Whether refusals are sent (`enforce`) or only logged as `would_deny` (`monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refuse what the pipeline denies.
    Enforce,
    /// Decide and log everything the same way, but forward every request.
    Monitor,
}

impl Mode {
    /// The name used in the config and the decision log.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Monitor => "monitor",
        }
    }
}

/// A config that failed to load or validate. The message names the file and every bad field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named by `--config`.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type.
    #[error("{origin}: {message}")]
    Syntax {
        /// The file, or "embedded default config".
        origin: String,
        /// The TOML parser's message, which names the key and the line.
        message: String,
    },
    /// One or more fields failed validation.
    #[error("{origin}: invalid configuration:\n{}", .errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file, or "embedded default config".
        origin: String,
        /// Each bad field with the reason.
        errors: Vec<FieldError>,
    },
}

/// One invalid field: its dotted path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the key, e.g. `limits.max_body`.
    pub field: String,
    /// What is wrong, in words a user can act on.
    pub reason: String,
}

impl FieldError {
    /// A new error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError { field: field.into(), reason: reason.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// A duration written with a unit (`"300s"`, `"5m"`, `"24h"`, `"250ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map(HumanDuration).map_err(serde::de::Error::custom)
    }
}

/// Parses a duration string with a unit. A bare number is refused: `300` could mean seconds or
/// milliseconds, and guessing wrong would silently change a security window.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("duration {s:?} has no unit; write e.g. \"{t}s\""));
    }
    humantime::parse_duration(t).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A size: a byte count (`1048576`) or a string with a unit (`"1MiB"`, `"64KiB"`, `"1MB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Int(u64),
            Str(String),
        }
        match Either::deserialize(d)? {
            Either::Int(n) => Ok(ByteSize(n)),
            Either::Str(s) => parse_size(&s).map(ByteSize).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `"1MiB"`, `"64 KiB"`, `"1MB"`, `"512"`, `"512B"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}: expected a number with an optional unit"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("invalid size {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("invalid size {s:?}: too large"))
}

// ---------------------------------------------------------------------------------------------
// Raw configuration: mirrors the TOML file. Defaults live here so the file can stay short.
// ---------------------------------------------------------------------------------------------

/// The TOML file as written. See PRODUCT.md "Configuration".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `enforce` (default) or `monitor`.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// `[listen]`
    pub listen: RawListen,
    /// `[upstream]`
    pub upstream: RawUpstream,
    /// `[limits]`
    #[serde(default)]
    pub limits: RawLimits,
    /// `[signatures]`
    #[serde(default)]
    pub signatures: RawSignatures,
    /// `[oauth]`
    #[serde(default)]
    pub oauth: RawOAuth,
    /// `[policy]`
    #[serde(default)]
    pub policy: RawPolicy,
    /// `[state]`
    #[serde(default)]
    pub state: RawState,
    /// `[admin]`
    #[serde(default)]
    pub admin: RawAdmin,
    /// `[log]`
    #[serde(default)]
    pub log: RawLog,
}

fn default_mode() -> Mode {
    Mode::Enforce
}

/// `[listen]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    /// Socket address to accept client connections on.
    pub addr: String,
    /// The public URL of the protected MCP endpoint: token audience and PRM `resource`.
    pub public_url: String,
    /// PEM certificate chain; with `tls_key`, the listener speaks TLS (rustls).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

/// `[upstream]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// The MCP backend; the inbound path and query are appended to its path.
    pub url: String,
    /// Time allowed to open a TCP connection to the backend (then 502).
    #[serde(default = "d_connect_timeout")]
    pub connect_timeout: HumanDuration,
    /// Time allowed until the backend's response headers arrive (then 504). Response bodies
    /// (SSE streams) are not limited in time.
    #[serde(default = "d_response_timeout")]
    pub response_timeout: HumanDuration,
    /// Idle pooled connections kept per backend host.
    #[serde(default = "d_pool_idle")]
    pub pool_max_idle: usize,
    /// How long an idle pooled connection is kept. Keep it below the backend's own keep-alive
    /// timeout (Node.js and uvicorn: 5 s), or a request may be written to a closing socket.
    #[serde(default = "d_pool_idle_timeout")]
    pub pool_idle_timeout: HumanDuration,
}

fn d_connect_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}
fn d_response_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn d_pool_idle() -> usize {
    64
}
fn d_pool_idle_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(4))
}

/// `[limits]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body accepted; larger → 413 before any parsing.
    #[serde(default = "d_max_body")]
    pub max_body: ByteSize,
    /// Largest request head (request line + headers) accepted on HTTP/1.1 and HTTP/2.
    #[serde(default = "d_max_header_bytes")]
    pub max_header_bytes: ByteSize,
    /// Most header lines accepted on an HTTP/1.1 request.
    #[serde(default = "d_max_headers")]
    pub max_headers: usize,
    /// Time a client has to send the request head (slow-loris guard).
    #[serde(default = "d_header_timeout")]
    pub header_timeout: HumanDuration,
    /// Time a client has to send the whole body once the head arrived.
    #[serde(default = "d_body_timeout")]
    pub body_timeout: HumanDuration,
    /// Time in-flight requests get to finish after SIGTERM / ctrl-c.
    #[serde(default = "d_shutdown_grace")]
    pub shutdown_grace: HumanDuration,
    /// Most client connections open at once; more wait in the accept queue.
    #[serde(default = "d_max_connections")]
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams per client connection.
    #[serde(default = "d_max_streams")]
    pub max_streams_per_connection: u32,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_body: d_max_body(),
            max_header_bytes: d_max_header_bytes(),
            max_headers: d_max_headers(),
            header_timeout: d_header_timeout(),
            body_timeout: d_body_timeout(),
            shutdown_grace: d_shutdown_grace(),
            max_connections: d_max_connections(),
            max_streams_per_connection: d_max_streams(),
        }
    }
}

fn d_max_body() -> ByteSize {
    ByteSize(1 << 20)
}
fn d_max_header_bytes() -> ByteSize {
    ByteSize(64 << 10)
}
fn d_max_headers() -> usize {
    100
}
fn d_header_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn d_body_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn d_shutdown_grace() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn d_max_connections() -> usize {
    10_000
}
fn d_max_streams() -> u32 {
    100
}

/// `[signatures]` (stages 2–6).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignatures {
    /// Refuse requests without a valid signature.
    #[serde(default = "d_true")]
    pub required: bool,
    /// The `tag` parameter of the signature to verify.
    #[serde(default = "d_tag")]
    pub tag: String,
    /// Components every signature must cover (`content-digest` only when there is a body).
    #[serde(default = "d_components")]
    pub components: Vec<String>,
    /// Longest accepted lifetime `expires - created`.
    #[serde(default = "d_max_age")]
    pub max_age: HumanDuration,
    /// Tolerated clock difference with signers.
    #[serde(default = "d_skew")]
    pub clock_skew: HumanDuration,
    /// Origins whose key directories may be fetched; empty = none.
    #[serde(default)]
    pub trusted_agents: Vec<String>,
    /// Extra PEM trust root for directory fetches.
    pub directory_ca: Option<PathBuf>,
    /// Accept the legacy sf-string `Signature-Agent` form (logged).
    #[serde(default = "d_true")]
    pub accept_legacy_agent: bool,
    /// Refuse signatures without `nonce`.
    #[serde(default)]
    pub require_nonce: bool,
    /// The `@authority` agents sign, when a TLS terminator rewrites `Host`.
    pub authority: Option<String>,
    /// Static keys: no directory fetch.
    #[serde(default)]
    pub keys: Vec<RawStaticKey>,
    /// Wall-clock limit on one key directory fetch (connect, TLS, headers and body).
    #[serde(default = "d_directory_timeout")]
    pub directory_timeout: HumanDuration,
    /// Shortest time a fetched directory is kept, whatever its `Cache-Control` says; also the
    /// least time between two fetches of one directory (no fetch storm on unknown keyids).
    #[serde(default = "d_directory_min_ttl")]
    pub directory_min_ttl: HumanDuration,
    /// Longest time a fetched directory is kept before it is fetched again (bounds how long a
    /// key removed from the directory still works).
    #[serde(default = "d_directory_max_ttl")]
    pub directory_max_ttl: HumanDuration,
}

impl Default for RawSignatures {
    fn default() -> Self {
        RawSignatures {
            required: true,
            tag: d_tag(),
            components: d_components(),
            max_age: d_max_age(),
            clock_skew: d_skew(),
            trusted_agents: Vec::new(),
            directory_ca: None,
            accept_legacy_agent: true,
            require_nonce: false,
            authority: None,
            keys: Vec::new(),
            directory_timeout: d_directory_timeout(),
            directory_min_ttl: d_directory_min_ttl(),
            directory_max_ttl: d_directory_max_ttl(),
        }
    }
}

/// One `[[signatures.keys]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStaticKey {
    /// The agent identity this key speaks for (an origin).
    pub agent: String,
    /// The public JWK.
    pub jwk: serde_json::Value,
}

fn d_true() -> bool {
    true
}
fn d_tag() -> String {
    "web-bot-auth".to_owned()
}
fn d_components() -> Vec<String> {
    ["@method", "@authority", "@path", "content-digest", "signature-agent"].map(String::from).to_vec()
}
fn d_max_age() -> HumanDuration {
    HumanDuration(Duration::from_secs(300))
}
fn d_skew() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn d_directory_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}
fn d_directory_min_ttl() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}
fn d_directory_max_ttl() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}

/// `[oauth]` (stage 7).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    /// Refuse requests without a valid bearer token.
    #[serde(default = "d_true")]
    pub required: bool,
    /// The issuer (`iss`) tokens must carry.
    pub issuer: Option<String>,
    /// JWKS URL; default: from the issuer's metadata.
    pub jwks_url: Option<String>,
    /// Audience tokens must contain; default: `listen.public_url`.
    pub audience: Option<String>,
    /// Extra PEM trust root for issuer fetches.
    pub issuer_ca: Option<PathBuf>,
    /// Pass the inbound `Authorization` header upstream.
    #[serde(default)]
    pub forward_token: bool,
    /// Scopes listed in the protected-resource metadata and the 401 challenge.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Tolerated clock difference with the issuer for `exp`, `nbf` and `iat`.
    #[serde(default = "d_skew")]
    pub clock_skew: HumanDuration,
    /// Time allowed for one issuer fetch (metadata, JWKS, introspection).
    #[serde(default = "d_fetch_timeout")]
    pub fetch_timeout: HumanDuration,
    /// Verified tokens kept (by SHA-256 of the token) until their `exp`; 0 = no cache.
    #[serde(default = "d_token_cache_size")]
    pub token_cache_size: u64,
    /// Least time between two JWKS refetches caused by an unknown `kid` (forged kids cannot
    /// cause a fetch storm).
    #[serde(default = "d_jwks_refetch_interval")]
    pub jwks_refetch_interval: HumanDuration,
    /// `[oauth.introspection]`: RFC 7662 introspection for opaque (non-JWT) tokens.
    pub introspection: Option<RawIntrospection>,
}

impl Default for RawOAuth {
    fn default() -> Self {
        RawOAuth {
            required: true,
            issuer: None,
            jwks_url: None,
            audience: None,
            issuer_ca: None,
            forward_token: false,
            scopes_supported: Vec::new(),
            clock_skew: d_skew(),
            fetch_timeout: d_fetch_timeout(),
            token_cache_size: d_token_cache_size(),
            jwks_refetch_interval: d_jwks_refetch_interval(),
            introspection: None,
        }
    }
}

fn d_fetch_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}
fn d_token_cache_size() -> u64 {
    10_000
}
fn d_jwks_refetch_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

/// `[oauth.introspection]` (RFC 7662), used for tokens that are not JWTs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection {
    /// The introspection endpoint (HTTPS).
    pub url: String,
    /// The gateway's client id at the issuer (HTTP Basic, RFC 7662 §2.1).
    pub client_id: String,
    /// The client secret; never logged (`Debug` prints it redacted).
    #[serde(deserialize_with = "secret_string")]
    pub client_secret: secrecy::SecretString,
}

fn secret_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<secrecy::SecretString, D::Error> {
    String::deserialize(d).map(secrecy::SecretString::from)
}

/// `[policy]` (stages 9–10).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// Run stages 8–10 (MCP parse, policy, quotas). `false` leaves an identity-only gateway
    /// (signatures and tokens still checked) that forwards bodies it never parses.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Files or folders of `.rego` (and `data.json`); empty = the bundled example policy.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// The rule whose value is the decision.
    #[serde(default = "d_query")]
    pub query: String,
    /// Recompile when a file under `paths` changes (SIGHUP always reloads).
    #[serde(default = "d_true")]
    pub watch: bool,
    /// How decisions are evaluated: `interpreter` (default) or `rvm` (bytecode, faster).
    #[serde(default)]
    pub evaluator: PolicyEvaluator,
}

/// `policy.evaluator`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyEvaluator {
    /// regorus's tree-walking interpreter, the one `portcullis policy test` uses.
    #[default]
    Interpreter,
    /// regorus's RVM bytecode.
    Rvm,
}

impl Default for RawPolicy {
    fn default() -> Self {
        RawPolicy { enabled: true, paths: Vec::new(), query: d_query(), watch: true, evaluator: PolicyEvaluator::Interpreter }
    }
}

fn d_query() -> String {
    "data.portcullis.decision".to_owned()
}

/// `[state]` (replay cache, quotas).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    /// `memory` or `redis://host:port/db` (`rediss://` for TLS).
    #[serde(default = "d_store")]
    pub store: String,
    /// Prefix of every Redis key, so several gateways can share one Redis.
    #[serde(default = "d_prefix")]
    pub prefix: String,
    /// Time allowed to (re)connect to Redis.
    #[serde(default = "d_store_connect_timeout")]
    pub connect_timeout: HumanDuration,
    /// Time allowed for one Redis command; slower answers count as unavailable.
    #[serde(default = "d_store_command_timeout")]
    pub command_timeout: HumanDuration,
    /// PEM trust root for a `rediss://` store (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// Most live replay records the memory store holds; when full, new signatures are refused
    /// (fail closed) rather than forgetting live records.
    #[serde(default = "d_max_replay_entries")]
    pub max_replay_entries: usize,
    /// Most quota buckets the memory store holds; beyond it new keys fail closed (503).
    #[serde(default = "d_max_quota_keys")]
    pub max_quota_keys: usize,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            store: d_store(),
            prefix: d_prefix(),
            connect_timeout: d_store_connect_timeout(),
            command_timeout: d_store_command_timeout(),
            ca: None,
            max_replay_entries: d_max_replay_entries(),
            max_quota_keys: d_max_quota_keys(),
        }
    }
}

fn d_prefix() -> String {
    "portcullis:".to_owned()
}
fn d_store_connect_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(2))
}
fn d_store_command_timeout() -> HumanDuration {
    HumanDuration(Duration::from_millis(250))
}

fn d_max_quota_keys() -> usize {
    100_000
}

fn d_store() -> String {
    "memory".to_owned()
}
fn d_max_replay_entries() -> usize {
    1_000_000
}

/// `[admin]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Socket address for `/healthz`, `/readyz`, `/metrics`; absent = no admin listener.
    pub addr: Option<String>,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin { addr: Some("127.0.0.1:9090".to_owned()) }
    }
}

/// `[log]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// Where decision-log lines go: `stdout`, `stderr`, `off`, or a file path (appended).
    #[serde(default = "d_decisions")]
    pub decisions: String,
    /// Diagnostic log filter (tracing `EnvFilter` syntax); `RUST_LOG` overrides it.
    #[serde(default = "d_level")]
    pub level: String,
    /// OTLP/HTTP traces URL (e.g. `http://collector:4318/v1/traces`); absent = no tracing export.
    pub otlp_endpoint: Option<String>,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog { decisions: d_decisions(), level: d_level(), otlp_endpoint: None }
    }
}

fn d_decisions() -> String {
    "stdout".to_owned()
}
fn d_level() -> String {
    "info".to_owned()
}

// ---------------------------------------------------------------------------------------------
// Validated configuration.
// ---------------------------------------------------------------------------------------------

/// The validated configuration every stage is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Enforce or monitor.
    pub mode: Mode,
    /// Client-facing listener.
    pub listen: Listen,
    /// The MCP backend.
    pub upstream: Upstream,
    /// Size and time limits on client input.
    pub limits: Limits,
    /// Agent identity settings (stages 2–6), as written; the identity stage validates keys.
    pub signatures: RawSignatures,
    /// User authority settings (stage 7).
    pub oauth: OAuth,
    /// Policy settings (stages 9–10).
    pub policy: RawPolicy,
    /// Shared state.
    pub state: RawState,
    /// Admin listener address.
    pub admin: Option<SocketAddr>,
    /// Decision log target.
    pub log: Log,
    /// Where the config came from (file path or "embedded default config"), for messages.
    pub origin: String,
    /// The folder relative paths in the config are resolved against.
    pub base_dir: PathBuf,
}

/// Validated `[listen]`.
#[derive(Debug, Clone)]
pub struct Listen {
    /// Where to accept connections.
    pub addr: SocketAddr,
    /// The protected resource URL (no fragment).
    pub public_url: Url,
    /// Certificate and key paths, when TLS is on.
    pub tls: Option<TlsFiles>,
}

/// Paths of the PEM certificate chain and private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// Validated `[upstream]`.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Backend base URL (http).
    pub url: Url,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Time to response headers.
    pub response_timeout: Duration,
    /// Idle pooled connections kept.
    pub pool_max_idle: usize,
    /// Idle pooled connection lifetime.
    pub pool_idle_timeout: Duration,
}

/// Validated `[limits]`.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Body bound in bytes.
    pub max_body: u64,
    /// Request head bound in bytes.
    pub max_header_bytes: usize,
    /// Header line count bound.
    pub max_headers: usize,
    /// Time to receive the head.
    pub header_timeout: Duration,
    /// Time to receive the body.
    pub body_timeout: Duration,
    /// Drain time on shutdown.
    pub shutdown_grace: Duration,
    /// Open client connections bound.
    pub max_connections: usize,
    /// HTTP/2 streams per connection bound.
    pub max_streams_per_connection: u32,
}

/// Validated `[oauth]` basics; the token stage validates the rest.
#[derive(Debug, Clone)]
pub struct OAuth {
    /// The section as written.
    pub raw: RawOAuth,
    /// The audience tokens must contain (defaults to `listen.public_url`).
    pub audience: String,
}

/// Where decision-log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionSink {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// Not written (metrics still count).
    Off,
    /// Appended to this file.
    File(PathBuf),
}

/// Validated `[log]`.
#[derive(Debug, Clone)]
pub struct Log {
    /// Decision log target.
    pub decisions: DecisionSink,
    /// Diagnostic filter.
    pub level: String,
    /// Where spans are exported (OTLP/HTTP protobuf), when set.
    pub otlp_endpoint: Option<String>,
}

impl Config {
    /// Loads and validates a config file. Relative paths inside it are resolved against the
    /// file's folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&text, &path.display().to_string(), &base)
    }

    /// The embedded default config (README "Embedded defaults").
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::parse(EMBEDDED_DEFAULT, "embedded default config", Path::new("."))
    }

    /// Parses and validates TOML text. `origin` names it in errors.
    pub fn parse(text: &str, origin: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError::Syntax { origin: origin.to_owned(), message: e.to_string().trim_end().to_owned() })?;
        Config::validate(raw, origin, base_dir)
    }

    /// Validates every field and collects all problems before failing.
    pub fn validate(raw: RawConfig, origin: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut errs = Vec::new();
        let mut check = |field: &str, r: Result<(), String>| {
            if let Err(reason) = r {
                errs.push(FieldError::new(field, reason));
            }
        };

        let listen_addr = raw.listen.addr.parse::<SocketAddr>().map_err(|e| format!("{:?} is not a socket address (host:port): {e}", raw.listen.addr));
        let public_url = parse_url(&raw.listen.public_url, &["https", "http"]).and_then(|u| {
            if u.fragment().is_some() || u.query().is_some() {
                Err("the resource URL must not have a query or fragment (RFC 8707 §2)".to_owned())
            } else if !u.username().is_empty() || u.password().is_some() {
                Err("the resource URL must not carry user information".to_owned())
            } else {
                Ok(u)
            }
        });
        let tls = match (&raw.listen.tls_cert, &raw.listen.tls_key) {
            (Some(c), Some(k)) => Ok(Some(TlsFiles { cert: base_dir.join(c), key: base_dir.join(k) })),
            (None, None) => Ok(None),
            (Some(_), None) => Err("listen.tls_key"),
            (None, Some(_)) => Err("listen.tls_cert"),
        };
        let upstream_url = parse_url(&raw.upstream.url, &["http"]).and_then(|u| {
            if u.query().is_some() || u.fragment().is_some() {
                Err("the upstream URL must not have a query or fragment".to_owned())
            } else if !u.username().is_empty() || u.password().is_some() {
                Err("the upstream URL must not carry credentials (they would be logged and not sent)".to_owned())
            } else {
                Ok(u)
            }
        });
        let admin = raw.admin.addr.as_ref().map(|a| a.parse::<SocketAddr>().map_err(|e| format!("{a:?} is not a socket address (host:port): {e}"))).transpose();
        let decisions = match raw.log.decisions.as_str() {
            "stdout" => DecisionSink::Stdout,
            "stderr" => DecisionSink::Stderr,
            "off" => DecisionSink::Off,
            p => DecisionSink::File(base_dir.join(p)),
        };
        let audience = raw.oauth.audience.clone().unwrap_or_else(|| raw.listen.public_url.clone());

        check("listen.addr", listen_addr.as_ref().map(|_| ()).map_err(Clone::clone));
        check("listen.public_url", public_url.as_ref().map(|_| ()).map_err(Clone::clone));
        if let Err(missing) = &tls {
            check(missing, Err("tls_cert and tls_key must be set together".to_owned()));
        }
        check("upstream.url", upstream_url.as_ref().map(|_| ()).map_err(Clone::clone));
        check("upstream.connect_timeout", nonzero(raw.upstream.connect_timeout.0));
        check("upstream.response_timeout", nonzero(raw.upstream.response_timeout.0));
        check(
            "limits.max_body",
            if raw.limits.max_body.0 == 0 || raw.limits.max_body.0 > 256 << 20 { Err("must be between 1 byte and 256MiB".into()) } else { Ok(()) },
        );
        check("limits.shutdown_grace", nonzero(raw.limits.shutdown_grace.0));
        check("limits.max_connections", if raw.limits.max_connections == 0 { Err("must be at least 1".into()) } else { Ok(()) });
        check(
            "limits.max_streams_per_connection",
            if !(1..=10_000).contains(&raw.limits.max_streams_per_connection) { Err("must be between 1 and 10000".into()) } else { Ok(()) },
        );
        check("upstream.pool_idle_timeout", nonzero(raw.upstream.pool_idle_timeout.0));
        if let Some(issuer) = &raw.oauth.issuer {
            check("oauth.issuer", parse_url(issuer, &["https"]).map(|_| ()));
        }
        if let Some(jwks) = &raw.oauth.jwks_url {
            check("oauth.jwks_url", parse_url(jwks, &["https"]).map(|_| ()));
        }
        for scope in &raw.oauth.scopes_supported {
            // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
            let ok = !scope.is_empty() && scope.bytes().all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b));
            check("oauth.scopes_supported", if ok { Ok(()) } else { Err(format!("{scope:?} is not a valid scope token (RFC 6749 §3.3)")) });
        }
        check(
            "limits.max_header_bytes",
            if raw.limits.max_header_bytes.0 < 8192 || raw.limits.max_header_bytes.0 > 16 << 20 {
                Err("must be between 8KiB and 16MiB".into())
            } else {
                Ok(())
            },
        );
        check(
            "limits.max_headers",
            if raw.limits.max_headers < 16 || raw.limits.max_headers > 10_000 { Err("must be between 16 and 10000".into()) } else { Ok(()) },
        );
        check("limits.header_timeout", nonzero(raw.limits.header_timeout.0));
        check("limits.body_timeout", nonzero(raw.limits.body_timeout.0));
        check("admin.addr", admin.as_ref().map(|_| ()).map_err(Clone::clone));
        check("oauth.audience", parse_url(&audience, &["https", "http"]).map(|_| ()));
        check(
            "state.store",
            match raw.state.store.split_once("://") {
                None if raw.state.store == "memory" => Ok(()),
                Some(("redis" | "rediss", rest)) if !rest.is_empty() => Ok(()),
                _ => Err(format!("unsupported store {:?}: use \"memory\" or \"redis://host:port/db\" (\"rediss://\" for TLS)", raw.state.store)),
            },
        );
        check("state.connect_timeout", nonzero(raw.state.connect_timeout.0));
        check("state.command_timeout", nonzero(raw.state.command_timeout.0));
        check("state.max_replay_entries", if raw.state.max_replay_entries == 0 { Err("must be at least 1".into()) } else { Ok(()) });
        if let Some(endpoint) = &raw.log.otlp_endpoint {
            check(
                "log.otlp_endpoint",
                match url::Url::parse(endpoint) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
                    _ => Err(format!("{endpoint:?} is not an http(s) URL (e.g. \"http://collector:4318/v1/traces\")")),
                },
            );
        }
        check("log.level", tracing_subscriber::EnvFilter::try_new(&raw.log.level).map(|_| ()).map_err(|e| format!("invalid filter {:?}: {e}", raw.log.level)));
        if let (Ok(l), Ok(Some(a))) = (&listen_addr, &admin) {
            if l == a && l.port() != 0 {
                check("admin.addr", Err(format!("must differ from listen.addr ({l})")));
            }
        }

        match (listen_addr, public_url, tls, upstream_url, admin) {
            (Ok(addr), Ok(public_url), Ok(tls), Ok(url), Ok(admin)) if errs.is_empty() => Ok(Config {
                mode: raw.mode,
                listen: Listen { addr, public_url, tls },
                upstream: Upstream {
                    url,
                    connect_timeout: raw.upstream.connect_timeout.0,
                    response_timeout: raw.upstream.response_timeout.0,
                    pool_max_idle: raw.upstream.pool_max_idle,
                    pool_idle_timeout: raw.upstream.pool_idle_timeout.0,
                },
                limits: Limits {
                    max_body: raw.limits.max_body.0,
                    max_header_bytes: raw.limits.max_header_bytes.0 as usize,
                    max_headers: raw.limits.max_headers,
                    header_timeout: raw.limits.header_timeout.0,
                    body_timeout: raw.limits.body_timeout.0,
                    shutdown_grace: raw.limits.shutdown_grace.0,
                    max_connections: raw.limits.max_connections,
                    max_streams_per_connection: raw.limits.max_streams_per_connection,
                },
                signatures: raw.signatures,
                oauth: OAuth { raw: raw.oauth, audience },
                policy: raw.policy,
                state: RawState { ca: raw.state.ca.as_ref().map(|c| base_dir.join(c)), ..raw.state },
                admin,
                log: Log { decisions, level: raw.log.level, otlp_endpoint: raw.log.otlp_endpoint },
                origin: origin.to_owned(),
                base_dir: base_dir.to_owned(),
            }),
            _ => Err(ConfigError::Invalid { origin: origin.to_owned(), errors: errs }),
        }
    }

    /// The RFC 9728 metadata URL for the resource: `<origin>/.well-known/oauth-protected-resource`.
    pub fn resource_metadata_url(&self) -> String {
        let u = &self.listen.public_url;
        format!("{}/.well-known/oauth-protected-resource", u.origin().ascii_serialization())
    }
}

fn parse_url(s: &str, schemes: &[&str]) -> Result<Url, String> {
    let u = Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !schemes.contains(&u.scheme()) {
        return Err(format!("{s:?} must use {}", schemes.join(" or ")));
    }
    if u.host_str().is_none() {
        return Err(format!("{s:?} has no host"));
    }
    Ok(u)
}

fn nonzero(d: Duration) -> Result<(), String> {
    if d.is_zero() {
        Err("must be greater than zero".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
