//! Configuration: TOML → [`RawConfig`] (serde, mirrors the file) → [`Config`] (validated).
//!
//! Loaded once at start. Every key is listed in docs/configuration.md; unknown keys are an
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

mod approvals;
mod idempotency;
mod modes;
mod raw;
mod sections;
mod servers;
mod tools;
mod units;
mod upstream_auth;

pub use approvals::{Approvals, MIN_STATE_KEY};
pub use idempotency::Idempotency;
pub use modes::{Group, Modes, RawMode};
pub use portcullis_wire::time::parse_duration;
pub use raw::*;
pub use sections::{normalize_origin, Context, Directory, Dpop, Introspection, OAuth, PolicySettings, Signatures, StateSettings, StaticKey, Store};
pub use servers::{Form, Server, DEFAULT_SERVER, METADATA_PATH};
pub use tools::{CatalogProtocol, CatalogSource, McpSettings, Tools, Unpinned};
pub use units::{parse_size, ByteSize, HumanDuration};
pub use upstream_auth::{read_secret_file, trim_newline, ActorKeys, ClientAuth, SecretSource, StaticAuth, TokenExchange, UpstreamAuth, MAX_CACHED};

/// The configuration used when no `--config` is given (see README "Embedded defaults").
pub const EMBEDDED_DEFAULT: &str = include_str!("../default_config.toml");

/// The largest `limits.max_in_flight` accepted: far above what one process serves, low enough
/// that a typo is caught rather than turning the limit off.
pub const MAX_IN_FLIGHT: usize = 1_000_000;

/// Whether refusals are sent (`enforce`) or only logged as `would_deny` (`monitor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refuse what the pipeline denies (the default).
    #[default]
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

// ---------------------------------------------------------------------------------------------
// Validated configuration.
// ---------------------------------------------------------------------------------------------

/// The validated configuration every stage is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Enforce or monitor, per stage group.
    pub mode: Modes,
    /// Client-facing listener.
    pub listen: Listen,
    /// The MCP backend.
    pub upstream: Upstream,
    /// Size and time limits on client input.
    pub limits: Limits,
    /// Agent identity settings (stages 2–6).
    pub signatures: Signatures,
    /// User authority settings (stage 7).
    pub oauth: OAuth,
    /// Policy settings (stages 8–10).
    pub policy: PolicySettings,
    /// Shared state.
    pub state: StateSettings,
    /// The idempotency journal.
    pub idempotency: Idempotency,
    /// The tool catalog.
    pub tools: Tools,
    /// Human approval links.
    pub approvals: Approvals,
    /// The MCP servers behind the gateway, in config order: `[[servers]]`, or the one server
    /// `default` made of `[upstream]` and `[tools]` (then `upstream`, `tools` and `mode` above
    /// are its own; in the `[[servers]]` form they are the first server's).
    pub servers: Vec<Server>,
    /// MCP protocol versions accepted.
    pub mcp: McpSettings,
    /// Admin listener address.
    pub admin: Option<SocketAddr>,
    /// Decision log target.
    pub log: Log,
    /// Where the config came from (file path or "embedded default config"), for messages.
    pub origin: String,
    /// The file it was read from ([`Config::load`]): what a reload (SIGHUP) reads again.
    pub file: Option<PathBuf>,
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
    /// Paths forwarded besides the MCP endpoint (canonical, checked).
    pub extra_paths: Vec<String>,
    /// `/readyz` probes the backend (TCP connect).
    pub health_check: bool,
    /// Requests decided or waiting for this backend at once, when set.
    pub max_in_flight: Option<usize>,
    /// Open event streams to this backend at once.
    pub max_streams: usize,
    /// `https://` upstreams: the CA file that replaces the web PKI roots.
    pub ca: Option<PathBuf>,
    /// `https://` upstreams: the client certificate and key files (mutual TLS).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The backend's own credential (`[upstream.auth]`).
    pub auth: UpstreamAuth,
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
    /// Time from connect to the first request head, and to receive each HTTP/1.1 head.
    pub header_timeout: Duration,
    /// Time a connection may stay without a request in flight.
    pub idle_timeout: Duration,
    /// Time to receive the body.
    pub body_timeout: Duration,
    /// Drain time on shutdown.
    pub shutdown_grace: Duration,
    /// Open client connections bound.
    pub max_connections: usize,
    /// HTTP/2 streams per connection bound.
    pub max_streams_per_connection: u32,
    /// Request body bytes held at once, over all requests.
    pub max_body_in_flight: u64,
    /// Messages per JSON-RPC batch bound.
    pub max_batch: usize,
    /// Open sessions per caller bound.
    pub max_sessions_per_caller: usize,
    /// Bytes of a backend answer read to rewrite it.
    pub max_inspected_response: usize,
    /// Client requests handled at once, over all connections (set, or sized for the machine).
    pub max_in_flight: usize,
    /// Time from a request's admission to its response head.
    pub request_timeout: Duration,
    /// Request head bytes held at once, over all requests.
    pub max_header_bytes_in_flight: u64,
    /// Open admin connections bound.
    pub max_admin_connections: usize,
    /// Time a response may wait for the client to read it.
    pub write_timeout: Duration,
    /// Policy time per request, over all its evaluations.
    pub policy_budget: Duration,
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
        let config = Config::parse(&text, &path.display().to_string(), &base)?;
        Ok(Config { file: Some(path.to_owned()), ..config })
    }

    /// `servers` (from a reloaded file) as this running config would have made them: each
    /// `[[servers]]` resource and audience from the running `listen.public_url`, and the
    /// default in-flight bound from the running `limits.max_in_flight`.
    pub fn rebase(&self, servers: Vec<Server>) -> Vec<Server> {
        let n = servers.len().max(1);
        servers
            .into_iter()
            .map(|mut s| {
                if s.form == Form::Many {
                    // A path that validated always makes a URL on an origin; if one did not,
                    // the server would keep the resource the file's origin gave it.
                    let _ = s.place_at(&self.listen.public_url);
                    if s.upstream.max_in_flight.is_none() {
                        s.max_in_flight = servers::default_in_flight(self.limits.max_in_flight, n);
                    }
                }
                s
            })
            .collect()
    }

    /// The sections of `fresh` that differ from this running config but cannot change live
    /// (a reload applies the servers, their modes and the policy files; these keep their
    /// running value until a restart).
    pub fn frozen_changes(&self, fresh: &Config) -> Vec<&'static str> {
        let pairs: [(&'static str, String, String); 11] = [
            ("listen", format!("{:?}", self.listen), format!("{:?}", fresh.listen)),
            ("limits", format!("{:?}", self.limits), format!("{:?}", fresh.limits)),
            ("signatures", format!("{:?}", self.signatures), format!("{:?}", fresh.signatures)),
            ("oauth", format!("{:?}", self.oauth), format!("{:?}", fresh.oauth)),
            ("policy", format!("{:?}", self.policy), format!("{:?}", fresh.policy)),
            ("state", format!("{:?}", self.state), format!("{:?}", fresh.state)),
            ("idempotency", format!("{:?}", self.idempotency), format!("{:?}", fresh.idempotency)),
            ("approvals", format!("{:?}", self.approvals), format!("{:?}", fresh.approvals)),
            ("mcp", format!("{:?}", self.mcp), format!("{:?}", fresh.mcp)),
            ("admin", format!("{:?}", self.admin), format!("{:?}", fresh.admin)),
            ("log", format!("{:?}", self.log), format!("{:?}", fresh.log)),
        ];
        pairs.into_iter().filter(|(_, a, b)| a != b).map(|(name, _, _)| name).collect()
    }

    /// Settings that are valid but cannot do what they say, each named like a [`FieldError`]:
    /// `portcullis check` prints them and the gateway logs them at start, and both go on.
    pub fn warnings(&self) -> Vec<FieldError> {
        let mut out = Vec::new();
        for server in self.servers.iter().map(|s| s.of_single_form(self)).filter(|s| matches!(s.upstream.auth, UpstreamAuth::Forward)) {
            let field = match server.form {
                Form::Single => "upstream.auth.kind".to_owned(),
                Form::Many => format!("servers[{}].upstream.auth.kind", server.name),
            };
            out.push(FieldError::new(
                field,
                "\"forward\" (or oauth.forward_token = true) passes the user's token to the backend: the MCP specification forbids token passthrough; prefer \"token_exchange\"",
            ));
        }
        if self.policy.evaluator == PolicyEvaluator::Rvm && !self.policy.paths.is_empty() {
            out.push(FieldError::new(
                "policy.evaluator",
                "\"rvm\" runs your policy on regorus's bytecode, which decides some rules differently from `portcullis policy test` (a rule body goes on past a lookup of a missing key, e.g. `role := roles[input.agent.id]`); leave it at \"auto\" unless the policy is tested under both",
            ));
        }
        let limits = &self.limits;
        if limits.body_timeout > limits.request_timeout {
            let (body, request) = (humantime::format_duration(limits.body_timeout), humantime::format_duration(limits.request_timeout));
            out.push(FieldError::new(
                "limits.body_timeout",
                format!("{body} is longer than limits.request_timeout ({request}), which bounds the whole request, body included: it would never fire"),
            ));
        }
        out
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
        let admin = raw.admin.addr.as_ref().map(|a| a.parse::<SocketAddr>().map_err(|e| format!("{a:?} is not a socket address (host:port): {e}"))).transpose();
        let decisions = match raw.log.decisions.as_str() {
            "stdout" => DecisionSink::Stdout,
            "stderr" => DecisionSink::Stderr,
            "off" => DecisionSink::Off,
            p => DecisionSink::File(base_dir.join(p)),
        };

        check("listen.addr", listen_addr.as_ref().map(|_| ()).map_err(Clone::clone));
        check("listen.public_url", public_url.as_ref().map(|_| ()).map_err(Clone::clone));
        if let Err(missing) = &tls {
            check(missing, Err("tls_cert and tls_key must be set together".to_owned()));
        }
        // The single-server form's backend, checked here so `portcullis check` lists its
        // errors where it always did; `[[servers]]` are checked once the sections they read are.
        let is_many = !raw.servers.is_empty();
        let (forward_token, oauth_required, approvals_path) = (raw.oauth.forward_token, raw.oauth.required, raw.approvals.path.clone());
        let single_upstream = if is_many {
            for (section, present) in [("upstream", raw.upstream.is_some()), ("tools", raw.tools.is_some())] {
                if present {
                    check(
                        section,
                        Err(format!(
                            "[{section}] and [[servers]] cannot be used together: move [{section}] into the [[servers]] table of the server it belongs to"
                        )),
                    );
                }
            }
            None
        } else {
            let shared = servers::Shared {
                ctx: Context { base_dir, public_url: public_url.as_ref().ok() },
                mode: None,
                forward_token,
                oauth_required,
                approvals_path: &approvals_path,
                global_in_flight: 0,
            };
            let raw_upstream = raw.upstream.clone().unwrap_or_default();
            let mut found_errs = Vec::new();
            let found = servers::upstream(raw_upstream, false, &shared, &mut found_errs, "upstream");
            if raw.upstream.is_none() {
                found_errs.retain(|e| e.field != "upstream.url");
                check(
                    "upstream",
                    Err("is required: the MCP backend ([upstream] url = \"http://127.0.0.1:3001\"), or one [[servers]] table per backend".into()),
                );
            }
            for e in found_errs {
                check(&e.field, Err(e.reason));
            }
            found
        };
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
        check("limits.idle_timeout", nonzero(raw.limits.idle_timeout.0));
        check(
            "limits.max_body_in_flight",
            if raw.limits.max_body_in_flight.0 < raw.limits.max_body.0 {
                Err(format!("must be at least limits.max_body ({} bytes), so one largest body fits", raw.limits.max_body.0))
            } else {
                Ok(())
            },
        );
        check("limits.max_batch", if !(1..=10_000).contains(&raw.limits.max_batch) { Err("must be between 1 and 10000".into()) } else { Ok(()) });
        check(
            "limits.max_sessions_per_caller",
            if raw.limits.max_sessions_per_caller.is_some_and(|n| !(1..=raw.state.max_sessions.max(1)).contains(&n)) {
                Err("must be between 1 and state.max_sessions (one caller must not be able to hold every session)".into())
            } else {
                Ok(())
            },
        );
        check(
            "limits.max_inspected_response",
            if !(1024..=256 << 20).contains(&raw.limits.max_inspected_response.0) { Err("must be between 1KiB and 256MiB".into()) } else { Ok(()) },
        );
        check("limits.body_timeout", nonzero(raw.limits.body_timeout.0));
        check(
            "limits.max_in_flight",
            if raw.limits.max_in_flight.is_some_and(|n| !(1..=MAX_IN_FLIGHT).contains(&n)) {
                Err(format!("must be between 1 and {MAX_IN_FLIGHT}"))
            } else {
                Ok(())
            },
        );
        check("limits.request_timeout", nonzero(raw.limits.request_timeout.0));
        check(
            "limits.max_header_bytes_in_flight",
            if raw.limits.max_header_bytes_in_flight.0 < raw.limits.max_header_bytes.0 {
                Err(format!("must be at least limits.max_header_bytes ({} bytes), so one largest head fits", raw.limits.max_header_bytes.0))
            } else {
                Ok(())
            },
        );
        check(
            "limits.max_admin_connections",
            if !(1..=10_000).contains(&raw.limits.max_admin_connections) { Err("must be between 1 and 10000".into()) } else { Ok(()) },
        );
        check("limits.write_timeout", nonzero(raw.limits.write_timeout.0));
        check(
            "limits.policy_budget",
            if raw.limits.policy_budget.0.is_zero() || raw.limits.policy_budget.0 > Duration::from_secs(60) {
                Err("must be between 1ms and 60s".into())
            } else {
                Ok(())
            },
        );
        check("admin.addr", admin.as_ref().map(|_| ()).map_err(Clone::clone));
        // Here, not with the sections below: `portcullis check` lists the errors in this order.
        let idempotency = Idempotency::from_raw(raw.idempotency).map_err(|e| e.into_iter().for_each(|f| check(&f.field, Err(f.reason))));
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

        let ctx = Context { base_dir, public_url: public_url.as_ref().ok() };
        let signatures = Signatures::from_raw(raw.signatures, ctx).map_err(|e| errs.extend(e));
        let audience_set = raw.oauth.audience.is_some();
        let oauth = OAuth::from_raw(raw.oauth, ctx).map_err(|e| errs.extend(e));
        let policy = PolicySettings::from_raw(raw.policy, ctx).map_err(|e| errs.extend(e));
        let sessions_per_caller = raw.limits.max_sessions_per_caller.unwrap_or_else(|| raw.state.max_sessions.min(100)).max(1);
        let state = StateSettings::from_raw(raw.state, ctx).map_err(|e| errs.extend(e));
        let mode = Modes::try_from(raw.mode).map_err(|e| errs.extend(e));
        let tools = if is_many { Ok(None) } else { Tools::from_raw(raw.tools.clone().unwrap_or_default(), ctx).map(Some).map_err(|e| errs.extend(e)) };
        let approvals = Approvals::from_raw(
            raw.approvals,
            base_dir,
            public_url.as_ref().ok(),
            oauth.as_ref().is_ok_and(|o| o.issuer.is_some()),
            state.as_ref().is_ok_and(|s| matches!(s.store, Store::Redis(_))),
        )
        .map_err(|e| errs.extend(e));

        let mcp = McpSettings::from_raw(raw.mcp).map_err(|e| errs.extend(e));
        let global_in_flight = raw.limits.max_in_flight.unwrap_or_else(default_max_in_flight);
        let servers = match (&single_upstream, &tools, &public_url, &oauth, &mode) {
            (Some(upstream), Ok(Some(tools)), Ok(public_url), Ok(oauth), Ok(mode)) => {
                vec![Server::single(
                    public_url,
                    &oauth.audience,
                    upstream.clone(),
                    tools.clone(),
                    *mode,
                    &oauth.scopes_supported,
                    upstream.max_in_flight.unwrap_or(global_in_flight),
                )]
            }
            _ if is_many => {
                if let Ok(u) = &public_url {
                    if !matches!(u.path(), "" | "/") {
                        errs.push(FieldError::new(
                            "listen.public_url",
                            "with [[servers]], the public URL is the gateway's origin only: each server's path is its own",
                        ));
                    }
                }
                if audience_set {
                    errs.push(FieldError::new(
                        "oauth.audience",
                        "with [[servers]], each server's tokens must name its own resource (public origin + its path): remove oauth.audience",
                    ));
                }
                if let Ok(sig) = &signatures {
                    use portcullis_wire::signature::Component;
                    if !sig.components.iter().any(|c| matches!(c, Component::Path | Component::TargetUri)) {
                        errs.push(FieldError::new(
                            "signatures.components",
                            "with [[servers]], signatures must cover \"@path\", so a signature made for one server never verifies on another",
                        ));
                    }
                }
                let shared = servers::Shared {
                    ctx: Context { base_dir, public_url: public_url.as_ref().ok() },
                    mode: mode.as_ref().ok().copied(),
                    forward_token,
                    oauth_required,
                    approvals_path: &approvals_path,
                    global_in_flight,
                };
                servers::many(raw.servers, &shared, &mut errs)
            }
            _ => Vec::new(),
        };
        // A filtered list shows what the policy allows: without a policy it could only show
        // everything (a filter that filters nothing) or nothing.
        if let Ok(policy) = &policy {
            for s in servers.iter().filter(|s| s.tools.filter_list && !policy.enabled) {
                let field = if is_many { format!("servers[{}].tools.filter_list", s.name) } else { "tools.filter_list".to_owned() };
                errs.push(FieldError::new(field, "needs policy.enabled = true (the list shows the tools the policy lets this caller call)"));
            }
        }

        match (listen_addr, public_url, tls, servers.first().cloned(), admin, signatures, oauth, policy, state, idempotency, mode, approvals, mcp) {
            (
                Ok(addr),
                Ok(public_url),
                Ok(tls),
                Some(first),
                Ok(admin),
                Ok(signatures),
                Ok(oauth),
                Ok(policy),
                Ok(state),
                Ok(idempotency),
                Ok(mode),
                Ok(approvals),
                Ok(mcp),
            ) if errs.is_empty() => Ok(Config {
                mode,
                listen: Listen { addr, public_url, tls },
                upstream: first.upstream,
                tools: first.tools,
                servers,
                limits: Limits {
                    max_body: raw.limits.max_body.0,
                    max_header_bytes: raw.limits.max_header_bytes.0 as usize,
                    max_headers: raw.limits.max_headers,
                    header_timeout: raw.limits.header_timeout.0,
                    idle_timeout: raw.limits.idle_timeout.0,
                    body_timeout: raw.limits.body_timeout.0,
                    shutdown_grace: raw.limits.shutdown_grace.0,
                    max_connections: raw.limits.max_connections,
                    max_streams_per_connection: raw.limits.max_streams_per_connection,
                    max_body_in_flight: raw.limits.max_body_in_flight.0,
                    max_batch: raw.limits.max_batch,
                    max_sessions_per_caller: sessions_per_caller,
                    max_inspected_response: raw.limits.max_inspected_response.0 as usize,
                    max_in_flight: raw.limits.max_in_flight.unwrap_or_else(default_max_in_flight),
                    request_timeout: raw.limits.request_timeout.0,
                    max_header_bytes_in_flight: raw.limits.max_header_bytes_in_flight.0,
                    max_admin_connections: raw.limits.max_admin_connections,
                    write_timeout: raw.limits.write_timeout.0,
                    policy_budget: raw.limits.policy_budget.0,
                },
                signatures,
                oauth,
                policy,
                state,
                idempotency,
                approvals,
                mcp,
                admin,
                log: Log { decisions, level: raw.log.level, otlp_endpoint: raw.log.otlp_endpoint },
                origin: origin.to_owned(),
                file: None,
                base_dir: base_dir.to_owned(),
            }),
            _ => Err(ConfigError::Invalid { origin: origin.to_owned(), errors: errs }),
        }
    }

    /// The RFC 9728 metadata URL for the resource: `<origin>/.well-known/oauth-protected-resource`.
    pub fn resource_metadata_url(&self) -> String {
        let u = &self.listen.public_url;
        format!("{}{METADATA_PATH}", u.origin().ascii_serialization())
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    /// Validates a parsed file whose relative paths are relative to the working directory.
    fn try_from(raw: RawConfig) -> Result<Config, ConfigError> {
        Config::validate(raw, "configuration", Path::new("."))
    }
}

/// Whether `s` is one RFC 6749 §3.3 scope token: `1*( %x21 / %x23-5B / %x5D-7E )`.
pub fn is_scope_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
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
mod tests;
