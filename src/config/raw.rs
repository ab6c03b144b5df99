//! The TOML file as written: [`RawConfig`] and one struct per section, with the defaults that let
//! a file stay short. `deny_unknown_fields` on every struct makes an unknown key an error that
//! names it; it cannot be combined with `flatten`, so no section flattens.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::units::{ByteSize, HumanDuration};
use super::RawMode;

// ---------------------------------------------------------------------------------------------
// Raw configuration: mirrors the TOML file. Defaults live here so the file can stay short.
// ---------------------------------------------------------------------------------------------

/// The TOML file as written. See docs/configuration.md.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `enforce` (default) or `monitor`, or a `[mode]` table with one per stage group.
    #[serde(default)]
    pub mode: RawMode,
    /// `[listen]`
    pub listen: RawListen,
    /// `[upstream]`: the single-server form's backend.
    pub upstream: Option<RawUpstream>,
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
    /// `[idempotency]`
    #[serde(default)]
    pub idempotency: RawIdempotency,
    /// `[tools]`: the single-server form's catalog.
    pub tools: Option<RawTools>,
    /// `[approvals]`
    #[serde(default)]
    pub approvals: RawApprovals,
    /// `[mcp]`
    #[serde(default)]
    pub mcp: RawMcp,
    /// `[[servers]]`: the MCP servers behind the gateway (docs/many-servers.md).
    #[serde(default)]
    pub servers: Vec<RawServer>,
}

/// A string or a list of strings.
fn string_or_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a string or a list of strings")]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
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
#[serde(default, deny_unknown_fields)]
pub struct RawUpstream {
    /// The MCP backend; the inbound path and query are appended to its path.
    pub url: String,
    /// Time allowed to open a TCP connection to the backend (then 502).
    pub connect_timeout: HumanDuration,
    /// Time allowed until the backend's response headers arrive (then 504). Response bodies
    /// (SSE streams) are not limited in time.
    pub response_timeout: HumanDuration,
    /// Idle pooled connections kept per backend host.
    pub pool_max_idle: usize,
    /// How long an idle pooled connection is kept. Keep it below the backend's own keep-alive
    /// timeout (Node.js and uvicorn: 5 s), or a request may be written to a closing socket.
    pub pool_idle_timeout: HumanDuration,
    /// Paths forwarded besides the MCP endpoint (`listen.public_url`'s path), each exactly as
    /// written; any other path is refused with 404 before any stage.
    pub extra_paths: Vec<String>,
    /// `/readyz` also opens a TCP connection to the backend (within `connect_timeout`, at most
    /// 1 s) and answers 503 while it cannot. Off by default in the single-server form: one
    /// unreachable backend then takes every replica out of rotation, which is what you want
    /// only if nothing else serves; on by default in the `[[servers]]` form.
    pub health_check: Option<bool>,
    /// Requests decided or waiting for this backend at once (`[[servers]]`: default
    /// `limits.max_in_flight` / number of servers, at least 16, reserved for it).
    pub max_in_flight: Option<usize>,
    /// Open event streams to this backend at once (default 256).
    pub max_streams: Option<usize>,
    /// `https://` upstreams: the CA certificates (PEM) that replace the web PKI roots.
    pub ca: Option<PathBuf>,
    /// `https://` upstreams: the client certificate chain (PEM) for mutual TLS, with
    /// `client_key`; both re-read when they change.
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// `[upstream.auth]`: the backend's own credential (docs/upstream-credentials.md).
    pub auth: Option<RawUpstreamAuth>,
}

/// `[upstream.auth]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawUpstreamAuth {
    /// `none` (default), `forward`, `static` or `token_exchange`.
    pub kind: Option<String>,
    /// `static`: the header set (default `Authorization`).
    pub header: Option<String>,
    /// `static`: the environment variable holding the value.
    pub value_env: Option<String>,
    /// `static`: the file holding the value (re-read when it changes).
    pub value_file: Option<PathBuf>,
    /// `static`: put before the value (default `"Bearer "` for `Authorization`, else `""`).
    pub prefix: Option<String>,
    /// `token_exchange`: the token endpoint (default: the issuer metadata's `token_endpoint`).
    pub token_endpoint: Option<String>,
    /// `token_exchange`: the gateway's client id at the issuer.
    pub client_id: Option<String>,
    /// `token_exchange`: the environment variable holding the client secret.
    pub client_secret_env: Option<String>,
    /// `token_exchange`: the file holding the client secret.
    pub client_secret_file: Option<PathBuf>,
    /// `token_exchange`: the Ed25519 private JWK of `private_key_jwt` client authentication.
    pub client_key_file: Option<PathBuf>,
    /// `token_exchange`: the `audience` asked for.
    pub audience: Option<String>,
    /// `token_exchange`: the `resource` asked for (RFC 8707).
    pub resource: Option<String>,
    /// `token_exchange`: the `scope` asked for.
    pub scope: Option<String>,
    /// `token_exchange`: exchange DPoP-bound (`cnf`) subject tokens too.
    pub exchange_bound_tokens: bool,
    /// `token_exchange`: time allowed for one exchange (default 5s).
    pub timeout: Option<HumanDuration>,
    /// `token_exchange`: most exchanges per second (default 50); past it 503.
    pub max_per_second: Option<u32>,
    /// `token_exchange`: most issued tokens cached for one caller (default 100).
    pub max_cached_per_caller: Option<u64>,
    /// `token_exchange`: send the verified agent as an `actor_token` the gateway signs.
    pub actor: bool,
    /// `token_exchange`: the Ed25519 private JWK that signs actor tokens.
    pub actor_key_file: Option<PathBuf>,
    /// `token_exchange`: the previous actor key, published beside it during a rotation.
    pub actor_key_previous_file: Option<PathBuf>,
}

impl Default for RawUpstream {
    /// `url` has no default: an empty one is refused by validation ("is required").
    fn default() -> Self {
        RawUpstream {
            url: String::new(),
            connect_timeout: HumanDuration(Duration::from_secs(5)),
            response_timeout: HumanDuration(Duration::from_secs(30)),
            pool_max_idle: 64,
            pool_idle_timeout: HumanDuration(Duration::from_secs(4)),
            extra_paths: Vec::new(),
            health_check: None,
            max_in_flight: None,
            max_streams: None,
            ca: None,
            client_cert: None,
            client_key: None,
            auth: None,
        }
    }
}

/// `[limits]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body accepted; larger → 413 before any parsing.
    pub max_body: ByteSize,
    /// Largest request head (request line + headers) accepted on HTTP/1.1 and HTTP/2.
    pub max_header_bytes: ByteSize,
    /// Most header lines accepted on an HTTP/1.1 request.
    pub max_headers: usize,
    /// Time a client has from connecting to the end of its first request head (TLS handshake,
    /// protocol detection, the HTTP/2 preface), and to send each later HTTP/1.1 request head
    /// (slow-loris guard).
    pub header_timeout: HumanDuration,
    /// A connection with no request in flight for this long is closed: HTTP/2 with no open
    /// stream, HTTP/1.1 between requests.
    pub idle_timeout: HumanDuration,
    /// Time a client has to send the whole body once the head arrived.
    pub body_timeout: HumanDuration,
    /// Time in-flight requests get to finish after SIGTERM / ctrl-c.
    pub shutdown_grace: HumanDuration,
    /// Most client connections open at once; more wait in the accept queue.
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams per client connection.
    pub max_streams_per_connection: u32,
    /// Request body bytes held at once, over all requests; past it → 503 `overloaded`.
    pub max_body_in_flight: ByteSize,
    /// Most messages in one JSON-RPC batch; more → 400 before policy runs.
    pub max_batch: usize,
    /// Most open sessions one caller (user, else agent, else client address) holds; a new
    /// session over it → 429 `caller_limit_exceeded`. Unset: 100, or `state.max_sessions` if
    /// that is smaller.
    pub max_sessions_per_caller: Option<usize>,
    /// Most bytes of a backend answer the gateway reads to rewrite it (`tools.filter_list`);
    /// a larger one is withheld, never passed unfiltered.
    pub max_inspected_response: ByteSize,
    /// Most client requests handled at once over all connections, from arrival until the
    /// response head; past it → 503 `overloaded` at once. Absent: sized for the machine
    /// ([`default_max_in_flight`]).
    pub max_in_flight: Option<usize>,
    /// Longest time from a request's admission to its response head (a streamed body is not
    /// bounded); past it → 504 `request_timeout`.
    pub request_timeout: HumanDuration,
    /// Request head bytes (each field's name and value plus 32, and the target) held at once by
    /// requests being handled, over all connections; past it → 503 `overloaded`.
    pub max_header_bytes_in_flight: ByteSize,
    /// Most connections open at once on the admin listener; past it a new one is closed at once.
    pub max_admin_connections: usize,
    /// A response the client stops reading (its bytes waiting for the client to take them) for
    /// this long has its connection closed and the backend's answer released.
    pub write_timeout: HumanDuration,
    /// Longest time the policy may spend on one request, over all its evaluations (a batch is
    /// one per message); past it → 403 `policy_error`.
    pub policy_budget: HumanDuration,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_body: ByteSize(1 << 20),
            max_header_bytes: ByteSize(64 << 10),
            max_headers: 100,
            header_timeout: HumanDuration(Duration::from_secs(10)),
            idle_timeout: HumanDuration(Duration::from_secs(60)),
            body_timeout: HumanDuration(Duration::from_secs(30)),
            shutdown_grace: HumanDuration(Duration::from_secs(10)),
            max_connections: 10_000,
            max_streams_per_connection: 100,
            // 64 bodies of the default `max_body`: far above what MCP traffic holds at once (requests are
            // a few KiB and read in microseconds), small enough that a flood of stalled uploads cannot
            // push the gateway out of memory.
            max_body_in_flight: ByteSize(64 << 20),
            // The MCP reference server's own bound.
            max_batch: portcullis_wire::mcp::DEFAULT_MAX_BATCH,
            max_sessions_per_caller: None,
            max_inspected_response: ByteSize(1 << 20),
            max_in_flight: None,
            // `body_timeout` plus `upstream.response_timeout` at their defaults, so those report their
            // own, more precise errors first; this one catches what nothing else bounds (the queue for a
            // heavy policy evaluation, a stage waiting on several fetches in turn).
            request_timeout: HumanDuration(Duration::from_secs(60)),
            // 512 heads of the default `max_header_bytes`; typical heads are a few hundred bytes to
            // a few KiB, so this is thousands of ordinary requests in flight.
            max_header_bytes_in_flight: ByteSize(32 << 20),
            max_admin_connections: 64,
            write_timeout: HumanDuration(Duration::from_secs(30)),
            // Four times one evaluation's own bound: a batch of ordinary calls takes milliseconds.
            policy_budget: HumanDuration(Duration::from_secs(1)),
        }
    }
}

/// `limits.max_in_flight` when not set: 1024 requests per core the process may use
/// (`std::thread::available_parallelism`, which honours CPU affinity and cgroup quotas), at
/// least 4096. A signed request costs ~100 µs of CPU, so a core decides ~10k a second; by
/// Little's law 1024 in flight per core keeps it busy while the backend answers within
/// ~100 ms. The floor spares small machines from shedding only because the backend is slow;
/// at ~20 KiB per request waiting on the backend it costs ~80 MiB when full.
pub fn default_max_in_flight() -> usize {
    const IN_FLIGHT_PER_CORE: usize = 1024;
    const MIN_IN_FLIGHT: usize = 4096;
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    cores.saturating_mul(IN_FLIGHT_PER_CORE).max(MIN_IN_FLIGHT)
}

/// `[signatures]` (stages 2–6).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawSignatures {
    /// Refuse requests without a valid signature.
    pub required: bool,
    /// The `tag` parameter of the signature to verify.
    pub tag: String,
    /// Components every signature must cover (`content-digest` only when there is a body).
    pub components: Vec<String>,
    /// Longest accepted lifetime `expires - created`.
    pub max_age: HumanDuration,
    /// Tolerated clock difference with signers.
    pub clock_skew: HumanDuration,
    /// Origins whose key directories may be fetched; empty = none.
    pub trusted_agents: Vec<String>,
    /// Extra PEM trust root for directory fetches.
    pub directory_ca: Option<PathBuf>,
    /// Accept the legacy sf-string `Signature-Agent` form (logged).
    pub accept_legacy_agent: bool,
    /// Accept `Signature-Agent` members with `type=jwks_uri`: a key set at any path of a trusted
    /// origin, whose keys then speak for that full URL (never for the bare origin).
    pub accept_jwks_uri: bool,
    /// Refuse signatures without `nonce`.
    pub require_nonce: bool,
    /// The `@authority` values a signature may cover: this gateway's own names (a string or a
    /// list). Empty (the default): the authority of `listen.public_url`. A signature over any
    /// other authority is refused, so one captured on another service does not verify here.
    #[serde(deserialize_with = "string_or_list")]
    pub authority: Vec<String>,
    /// Static keys: no directory fetch.
    pub keys: Vec<RawStaticKey>,
    /// Wall-clock limit on one key directory fetch (connect, TLS, headers and body).
    pub directory_timeout: HumanDuration,
    /// Shortest time a fetched directory is kept, whatever its `Cache-Control` says (docs/design.md
    /// decision 7: `max-age` is honoured down to 1 s).
    pub directory_min_ttl: HumanDuration,
    /// Longest time a fetched directory is kept before it is fetched again (bounds how long a
    /// key removed from the directory still works).
    pub directory_max_ttl: HumanDuration,
    /// Least time between two fetches of an origin's keys caused by an unknown keyid (forged
    /// keyids cannot cause a fetch storm); also how long a failed fetch is remembered (at most
    /// 5 minutes).
    pub directory_refetch_interval: HumanDuration,
    /// Most key directory fetches per trusted origin per minute, whatever URLs or keyids the
    /// requests name; beyond it a request that needs a fetch is refused.
    pub directory_fetch_budget: u32,
    /// Most key directory fetches per minute over all origins.
    pub directory_fetch_budget_global: u32,
}

impl Default for RawSignatures {
    fn default() -> Self {
        RawSignatures {
            required: true,
            tag: "web-bot-auth".to_owned(),
            components: ["@method", "@authority", "@path", "content-digest", "signature-agent"].map(String::from).to_vec(),
            max_age: HumanDuration(Duration::from_secs(300)),
            clock_skew: HumanDuration(Duration::from_secs(30)),
            trusted_agents: Vec::new(),
            directory_ca: None,
            accept_legacy_agent: true,
            accept_jwks_uri: false,
            require_nonce: false,
            authority: Vec::new(),
            keys: Vec::new(),
            directory_timeout: HumanDuration(Duration::from_secs(5)),
            directory_min_ttl: HumanDuration(Duration::from_secs(1)),
            directory_max_ttl: HumanDuration(Duration::from_secs(3600)),
            directory_refetch_interval: HumanDuration(Duration::from_secs(60)),
            // Twice what one origin's directory can need (a refresh per second at `max-age=1`, plus an
            // unknown-keyid refetch per interval), so only a flood of URLs or keyids reaches it.
            directory_fetch_budget: 120,
            directory_fetch_budget_global: 1200,
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

/// `[oauth]` (stage 7).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawOAuth {
    /// Refuse requests without a valid bearer token.
    pub required: bool,
    /// The issuer (`iss`) tokens must carry.
    pub issuer: Option<String>,
    /// JWKS URL; default: from the issuer's metadata.
    pub jwks_url: Option<String>,
    /// Audience tokens must contain; default: `listen.public_url`.
    pub audience: Option<String>,
    /// Extra PEM trust root for issuer fetches.
    pub issuer_ca: Option<PathBuf>,
    /// Pass the inbound `Authorization` header upstream: the old spelling of
    /// `upstream.auth.kind = "forward"`.
    pub forward_token: bool,
    /// Scopes listed in the protected-resource metadata and the 401 challenge.
    pub scopes_supported: Vec<String>,
    /// Tolerated clock difference with the issuer for `exp`, `nbf` and `iat`.
    pub clock_skew: HumanDuration,
    /// Time allowed for one issuer fetch (metadata, JWKS, introspection).
    pub fetch_timeout: HumanDuration,
    /// Verified tokens kept (by SHA-256 of the token) until their `exp`; 0 = no cache.
    pub token_cache_size: u64,
    /// Least time between two JWKS refetches caused by an unknown `kid` (forged kids cannot
    /// cause a fetch storm).
    pub jwks_refetch_interval: HumanDuration,
    /// Most JWKS refetches caused by unknown `kid`s per minute, whatever the interval allows;
    /// beyond it such a token is refused without a fetch.
    pub jwks_refetch_budget: u32,
    /// `[oauth.introspection]`: RFC 7662 introspection for opaque (non-JWT) tokens.
    pub introspection: Option<RawIntrospection>,
    /// Accept `Authorization: DPoP <token>` with a `DPoP` proof (RFC 9449).
    pub dpop: bool,
    /// How long after its `iat` a DPoP proof is accepted (plus `clock_skew`).
    pub dpop_max_age: HumanDuration,
    /// Refuse tokens that are not sender-constrained (no `cnf`).
    pub require_sender_constrained: bool,
    /// Refuse DPoP proofs made with any key but the one of the request's HTTP Message Signature.
    pub require_agent_key_binding: bool,
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
            clock_skew: HumanDuration(Duration::from_secs(30)),
            fetch_timeout: HumanDuration(Duration::from_secs(5)),
            token_cache_size: 10_000,
            jwks_refetch_interval: HumanDuration(Duration::from_secs(30)),
            jwks_refetch_budget: 10,
            introspection: None,
            dpop: false,
            dpop_max_age: HumanDuration(Duration::from_secs(300)),
            require_sender_constrained: false,
            require_agent_key_binding: false,
        }
    }
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
#[serde(default, deny_unknown_fields)]
pub struct RawPolicy {
    /// Run stages 8–10 (MCP parse, policy, quotas). `false` leaves an identity-only gateway
    /// (signatures and tokens still checked) that forwards bodies it never parses.
    pub enabled: bool,
    /// Files or folders of `.rego` (and `data.json`); empty = the bundled example policy.
    pub paths: Vec<PathBuf>,
    /// The rule whose value is the decision.
    pub query: String,
    /// Recompile when a file under `paths` changes (SIGHUP always reloads).
    pub watch: bool,
    /// How decisions are evaluated: `auto` (default), `rvm` (bytecode) or `interpreter`.
    pub evaluator: PolicyEvaluator,
}

/// `policy.evaluator`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyEvaluator {
    /// The bytecode for the bundled policy set (the differential test proves it decides those
    /// as the interpreter does), the interpreter for any other set (it decides exactly as
    /// `portcullis policy test` does).
    #[default]
    Auto,
    /// regorus's tree-walking interpreter, the one `portcullis policy test` uses.
    Interpreter,
    /// regorus's RVM bytecode: 3–4× faster, but regorus 0.14's RVM decides some rules
    /// differently from the interpreter (a rule body goes on past a lookup of a missing key):
    /// only for policy sets tested under both.
    Rvm,
}

impl PolicyEvaluator {
    /// The evaluator that runs a policy set: `Auto` chooses by whether the set is the bundled
    /// one (`paths` empty).
    pub fn for_paths(self, paths: &[PathBuf]) -> PolicyEvaluator {
        match self {
            PolicyEvaluator::Auto if paths.is_empty() => PolicyEvaluator::Rvm,
            PolicyEvaluator::Auto => PolicyEvaluator::Interpreter,
            chosen => chosen,
        }
    }
}

impl Default for RawPolicy {
    fn default() -> Self {
        RawPolicy { enabled: true, paths: Vec::new(), query: "data.portcullis.decision".to_owned(), watch: true, evaluator: PolicyEvaluator::Auto }
    }
}

/// `[state]` (replay cache, quotas).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawState {
    /// `memory`, `redis://host:port/db` (`rediss://` for TLS) or a Redis Cluster's seed nodes,
    /// `redis+cluster://host:port,host:port` (`rediss+cluster://` for TLS).
    pub store: String,
    /// Prefix of every Redis key, so several gateways can share one Redis.
    pub prefix: String,
    /// Time allowed to (re)connect to Redis.
    pub connect_timeout: HumanDuration,
    /// Time allowed for one Redis command; slower answers count as unavailable.
    pub command_timeout: HumanDuration,
    /// PEM trust root for a `rediss://` store (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// Most live replay records the memory store holds; when full, new signatures are refused
    /// (fail closed) rather than forgetting live records.
    pub max_replay_entries: usize,
    /// Most quota buckets the memory store holds; beyond it new keys fail closed (503).
    pub max_quota_keys: usize,
    /// How long an `Mcp-Session-Id` binding lives without being used; each use restarts it.
    pub session_ttl: HumanDuration,
    /// Most session bindings the memory store holds; when full, new sessions fail closed (503).
    pub max_sessions: usize,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            store: "memory".to_owned(),
            prefix: "portcullis:".to_owned(),
            connect_timeout: HumanDuration(Duration::from_secs(2)),
            command_timeout: HumanDuration(Duration::from_millis(250)),
            ca: None,
            max_replay_entries: 4_000_000,
            max_quota_keys: 100_000,
            session_ttl: HumanDuration(Duration::from_secs(24 * 3600)),
            max_sessions: 100_000,
        }
    }
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
#[serde(default, deny_unknown_fields)]
pub struct RawLog {
    /// Where decision-log lines go: `stdout`, `stderr`, `off`, or a file path (appended).
    pub decisions: String,
    /// Diagnostic log filter (tracing `EnvFilter` syntax); `RUST_LOG` overrides it.
    pub level: String,
    /// OTLP/HTTP traces URL (e.g. `http://collector:4318/v1/traces`); absent = no tracing export.
    pub otlp_endpoint: Option<String>,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog { decisions: "stdout".to_owned(), level: "info".to_owned(), otlp_endpoint: None }
    }
}

/// `[idempotency]` (the journal of exactly-once calls, docs/design.md "Exactly-once tool calls").
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawIdempotency {
    /// Keep the journal. Off, a decision that requires a key is refused (403), and an optional
    /// key is ignored.
    pub enabled: bool,
    /// How long a recorded answer is replayed for its key.
    pub ttl: HumanDuration,
    /// Largest answer recorded (a JSON body, or a whole SSE stream); larger ones are passed on
    /// unrecorded and their key released.
    pub max_response: ByteSize,
    /// How long a call may run before its reservation lapses (a gateway that died mid-call
    /// leaves one behind); a retry after that is forwarded again.
    pub in_flight_ttl: HumanDuration,
    /// Most journal entries the memory store holds; when full, new keys fail closed (503).
    pub max_entries: usize,
    /// Most live journal entries one caller (user, else agent, else client address) holds, in
    /// any store; past it that caller's new keys get 429 `caller_limit_exceeded`. Unset:
    /// 1,000, or `max_entries` if that is smaller ([`super::Idempotency`]).
    pub max_entries_per_caller: Option<usize>,
    /// Most bytes of recorded answers the memory store holds; an answer that does not fit is
    /// passed on unrecorded.
    pub max_bytes: ByteSize,
}

impl Default for RawIdempotency {
    fn default() -> Self {
        RawIdempotency {
            enabled: true,
            ttl: HumanDuration(Duration::from_secs(24 * 3600)),
            max_response: ByteSize(1 << 20),
            in_flight_ttl: HumanDuration(Duration::from_secs(300)),
            max_entries: 100_000,
            max_entries_per_caller: None,
            max_bytes: ByteSize(256 << 20),
        }
    }
}

/// `[tools]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawTools {
    /// `off` or `fetch`.
    pub catalog: super::CatalogSource,
    /// How often the catalog is fetched again.
    pub refresh: HumanDuration,
    /// The pins file (`{"tools": {NAME: "sha256:HEX"}}`), relative to the config's folder.
    pub pins: Option<PathBuf>,
    /// `allow` or `deny` calls to tools the pins do not name.
    pub unpinned: super::Unpinned,
    /// Rewrite `tools/list` answers so they hold only the tools this caller may call.
    pub filter_list: bool,
    /// Validate `tools/call` arguments against the tool's `inputSchema`.
    pub validate_arguments: bool,
    /// `auto`, `2025-11-25` or `2026-07-28`.
    pub protocol: super::CatalogProtocol,
    /// Time allowed for one whole fetch of the catalog (every request and page).
    pub timeout: HumanDuration,
    /// Most tools the catalog holds; a longer list is a failed fetch.
    pub max_tools: usize,
    /// Most bytes of `tools/list` answers read in one fetch, over all pages.
    pub max_bytes: ByteSize,
    /// Most `tools/list` pages read in one fetch.
    pub max_pages: usize,
}

impl Default for RawTools {
    fn default() -> Self {
        RawTools {
            catalog: super::CatalogSource::Off,
            refresh: HumanDuration(Duration::from_secs(60)),
            pins: None,
            unpinned: super::Unpinned::Allow,
            filter_list: false,
            validate_arguments: false,
            protocol: super::CatalogProtocol::Auto,
            timeout: HumanDuration(Duration::from_secs(10)),
            max_tools: 1000,
            max_bytes: ByteSize(4 << 20),
            max_pages: 100,
        }
    }
}

/// `[approvals]` (human approval links, docs/approvals.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawApprovals {
    /// Serve approval links. Off, a decision that asks for approval is refused (403
    /// `human_approval_required`).
    pub enabled: bool,
    /// Where the approval pages live on the public listener (`{path}/{code}`, `{path}/callback`).
    pub path: String,
    /// How long a link stays usable.
    pub ttl: HumanDuration,
    /// The approver's login may be at most this old (OIDC `auth_time`), else they log in again.
    pub max_login_age: HumanDuration,
    /// Most links one caller (user) may have awaiting a person; one more → 429
    /// `caller_limit_exceeded`.
    pub max_pending_per_caller: usize,
    /// The gateway's OpenID Connect client id at `oauth.issuer`.
    pub client_id: String,
    /// A file holding the client secret; without it the gateway is a public client (PKCE only).
    pub client_secret_file: Option<PathBuf>,
    /// A file holding at least 32 bytes of key for cookies, CSRF tokens and `requestState`;
    /// without it a key is generated at start (one instance only).
    pub state_key_file: Option<PathBuf>,
    /// The largest call (tool name and arguments, as compact JSON) the page shows; the page
    /// shows every call whole, so a larger one gets no approval (403 `approval_unavailable`,
    /// `call_too_large_to_show`).
    pub max_shown: ByteSize,
}

impl Default for RawApprovals {
    fn default() -> Self {
        RawApprovals {
            enabled: false,
            path: "/portcullis/approvals".to_owned(),
            ttl: HumanDuration(Duration::from_secs(30 * 60)),
            max_login_age: HumanDuration(Duration::from_secs(15 * 60)),
            max_pending_per_caller: 20,
            client_id: "portcullis".to_owned(),
            client_secret_file: None,
            state_key_file: None,
            max_shown: ByteSize(64 << 10),
        }
    }
}

/// `[mcp]`: which MCP protocol versions clients may speak.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcp {
    /// Protocol versions accepted in `MCP-Protocol-Version` (or `_meta`); another → 400 -32022.
    pub versions: Vec<String>,
}

impl Default for RawMcp {
    fn default() -> Self {
        RawMcp { versions: portcullis_wire::mcp::PUBLISHED_VERSIONS.map(String::from).to_vec() }
    }
}

/// `[[servers]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `[a-z0-9][a-z0-9-]{0,31}`, unique.
    pub name: String,
    /// Its MCP endpoint on the gateway, matched exactly.
    pub path: String,
    /// The backend: `{ url = "http://10.0.0.5:3001/mcp" }` and today's `[upstream]` keys.
    pub upstream: RawUpstream,
    /// The scopes its metadata document lists and its 401s ask for.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Overrides the top-level `mode` for this server.
    pub mode: Option<RawMode>,
    /// More exact paths forwarded to this backend (beside `upstream.extra_paths`).
    #[serde(default)]
    pub extra_paths: Vec<String>,
    /// Send the gateway's `x-portcullis-*` identity headers to this backend (default: true for
    /// `http://` upstreams).
    pub identity_headers: Option<bool>,
    /// `[servers.tools]`: section B for this server.
    pub tools: Option<RawTools>,
}
