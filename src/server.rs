//! The server edge: listeners, rustls, hyper, admission control, the bounded body read (stage
//! 1), the request span, and graceful shutdown.
//!
//! Each connection: deadlines for every phase and an idle timeout (`connection`). Each request:
//! the RFC 9728 document is served at once; any other request is admitted within
//! `limits.max_in_flight` or shed, and bounded by `limits.request_timeout` (`admission`); then
//! read the clock once, read the body whole within `limits.max_body`, `limits.body_timeout`
//! and `limits.max_body_in_flight` (`body`), run the pipeline, apply the mode, then forward or
//! refuse; finally one decision-log line and the metrics.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

pub mod admin;
mod admission;
mod body;
pub(crate) mod connection;
mod handle;

use crate::config::{Config, ConfigError};
use crate::decision::{self, Challenge, ResponseBody};
use crate::pipeline::Stages;
use crate::policy::ReloadTrigger;
use crate::servers::{AbortOnDrop, Table};
use crate::telemetry::{DecisionLog, Metrics};
use crate::tls;
use admission::Admission;
use body::BodyBudget;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration or a stage built from it is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// TLS material could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The decision log could not be opened.
    #[error("cannot open decision log {path}: {source}")]
    DecisionLog {
        /// The configured target.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// State shared by every connection.
pub(crate) struct Shared {
    /// The config the gateway started with: what cannot change live (listen, limits, state,
    /// the stages' sections). The servers are in `servers`.
    pub(crate) config: Config,
    pub(crate) stages: Stages,
    /// The MCP servers and where each path goes; replaced whole by a reload. A request holds
    /// its server from routing to its log line.
    pub(crate) servers: arc_swap::ArcSwap<Table>,
    pub(crate) metrics: Metrics,
    log: DecisionLog,
    /// The refusal headers of a request that matched no server (never a 401).
    fallback_challenge: Challenge,
    body_budget: Arc<BodyBudget>,
    /// `limits.max_header_bytes_in_flight`: the heads of the requests being handled.
    head_budget: Arc<BodyBudget>,
    /// Held while a reload replaces the table.
    reloading: tokio::sync::Mutex<()>,
    /// Config reloads by result (`applied`, `rejected`).
    reloads: prometheus_client::metrics::family::Family<ReloadLabels, prometheus_client::metrics::counter::Counter>,
    pub(crate) is_shutting_down: AtomicBool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    result: &'static str,
}

/// A running gateway. Dropping it does not stop it; call [`Running::shutdown`].
pub struct Running {
    /// Where the gateway accepts client connections.
    pub addr: SocketAddr,
    /// Where the admin listener accepts connections, if configured.
    pub admin_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    policy_reload: ReloadTrigger,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("addr", &self.addr).field("admin_addr", &self.admin_addr).finish_non_exhaustive()
    }
}

impl Running {
    /// Stops accepting, lets in-flight requests finish (bounded by `limits.shutdown_grace`),
    /// and returns when every connection is closed and their decision-log lines are written.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Asks this gateway to recompile its policy, as SIGHUP does (but for this gateway alone,
    /// not every gateway in the process). The reload runs in the background; a failed one
    /// keeps the previous policy and shows on `/metrics` and `/readyz`.
    pub fn reload_policy(&self) {
        self.policy_reload.reload();
    }

    /// Re-reads the config file and applies its servers, as SIGHUP does (with the policy):
    /// `Err` names why the file was refused whole (the running config stays).
    pub async fn reload_config(&self) -> Result<(), String> {
        self.shared.reload().await
    }

    /// Waits until `signal` resolves, then shuts down gracefully.
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        info!("Shutting down: finishing in-flight requests");
        self.shutdown().await;
    }
}

/// Builds every stage, binds the listeners and starts serving. Returns once bound, so the
/// addresses are known (port 0 picks a free port).
pub async fn start(config: Config) -> Result<Running, StartError> {
    let listener = TcpListener::bind(config.listen.addr).await.map_err(|source| StartError::Bind { what: "listen.addr", addr: config.listen.addr, source })?;
    start_on(config, listener).await
}

/// [`start`] on a listener the caller bound (instead of `listen.addr`): the caller knows the
/// port before the config is final, e.g. to list `127.0.0.1:<port>` in `signatures.authority`.
pub async fn start_on(config: Config, listener: TcpListener) -> Result<Running, StartError> {
    let stages = Stages::build(&config)?;
    let (table, _) = Table::build(&config, stages.accept_signature(), None)?;
    let mut metrics = Metrics::new();
    metrics.register_policy_health(stages.policy.health().reload_errors.clone(), stages.policy.health().last_reload_ok.clone());
    let policy_reloader = stages.policy.spawn_reloader();
    let policy_reload = policy_reloader.trigger();
    let tls = config.listen.tls.as_ref().map(tls::acceptor).transpose()?;
    let log = DecisionLog::open(&config.log.decisions).map_err(|source| StartError::DecisionLog { path: format!("{:?}", config.log.decisions), source })?;
    metrics.register_decision_log(log.dropped());
    let addr = listener.local_addr().map_err(|source| StartError::Bind { what: "listen.addr", addr: config.listen.addr, source })?;
    let admin_listener = match config.admin {
        Some(a) => Some(TcpListener::bind(a).await.map_err(|source| StartError::Bind { what: "admin.addr", addr: a, source })?),
        None => None,
    };
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());

    let (directory_fetches, replay_hits) = stages.identity_counters();
    metrics.register_identity(directory_fetches, replay_hits);
    metrics.register_legacy_agents(stages.legacy_agent_counter());
    if let Some(m) = stages.token_metrics() {
        metrics.register_token(m);
    }
    metrics.register_idempotency(stages.idempotency_metrics());
    // Each server's own counters, labelled with its name (the servers present at start; one a
    // reload adds is counted in the decision log and request metrics, not here).
    for server in table.all() {
        server.register(&mut metrics);
    }
    let reloads = prometheus_client::metrics::family::Family::<ReloadLabels, prometheus_client::metrics::counter::Counter>::default();
    metrics
        .register_with(|r| r.register("config_reloads", "Config reloads (SIGHUP) by result: applied, rejected (the running config stayed)", reloads.clone()));
    metrics.register_with(|r| stages.approvals.metrics().register(r));
    metrics.register_with(|r| stages.policy.register_metrics(r));
    if let Some(errors) = stages.state_errors() {
        metrics.register_state(errors);
    }
    let shared = Arc::new(Shared {
        fallback_challenge: Challenge {
            resource_metadata: config.resource_metadata_url(),
            scope: String::new(),
            accept_signature: stages.accept_signature().to_owned(),
            dpop_algs: String::new(),
        },
        servers: arc_swap::ArcSwap::from_pointee(table),
        stages,
        metrics,
        log,
        body_budget: BodyBudget::new(config.limits.max_body_in_flight),
        head_budget: BodyBudget::new(config.limits.max_header_bytes_in_flight),
        reloads,
        reloading: tokio::sync::Mutex::new(()),
        is_shutting_down: AtomicBool::new(false),
        config,
    });
    // Before the startup line: a SIGHUP sent the moment it is printed is not missed.
    let reloader = spawn_config_reloader(&shared);
    let (stop, stop_rx) = watch::channel(false);
    // The admin listener outlives the drain, so probes see /readyz answer 503 meanwhile.
    let (admin_stop, admin_stop_rx) = watch::channel(false);
    info!(
        addr = %addr,
        tls = tls.is_some(),
        mode = %shared.config.mode.describe(),
        servers = shared.config.servers.len(),
        max_in_flight = shared.config.limits.max_in_flight,
        "Portcullis listening"
    );
    for server in shared.servers.load().all() {
        let c = &server.config;
        info!(server = %c.name, path = %c.path, upstream = %c.endpoint, mode = %server.config.mode.describe(), max_in_flight = c.max_in_flight, "Serving MCP server");
    }
    if let Some(a) = admin_addr {
        info!(addr = %a, "Admin listener on /healthz /readyz /metrics");
    }
    for w in shared.config.warnings() {
        warn!(field = %w.field, "Configuration warning: {}", w.reason);
    }
    // Before the first request is accepted: a backend that is not running is named now, not by
    // the first 502; a running one keeps this connection for the first request.
    for server in shared.servers.load().all() {
        if let Err(error) = server.upstream.warm().await {
            warn!(
                server = %server.config.name,
                upstream = %server.config.upstream.url,
                error = %error,
                "The upstream MCP server does not accept connections: until it does, every request the gateway would forward to it is answered 502 upstream_unavailable (start the backend, e.g. `portcullis example-backend`, or set upstream.url)"
            );
        }
    }
    let admin_task = admin_listener.map(|l| tokio::spawn(admin::serve(l, shared.clone(), admin_stop_rx)));
    let task_shared = shared.clone();
    let task = tokio::spawn(async move {
        let shared = task_shared;
        // Reloads stop with the gateway; catalog fetches with their servers.
        let _reloader = policy_reloader;
        let _config_reloader = reloader;
        accept_loop(listener, tls, shared.clone(), stop_rx).await;
        let _ = admin_stop.send(true);
        if let Some(t) = admin_task {
            let _ = t.await;
        }
        // The drained requests' lines are queued: write them before reporting the stop.
        shared.log.flush().await;
    });
    Ok(Running { addr, admin_addr, stop, task, policy_reload, shared })
}

async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let builder = Arc::new(connection::builder(&shared.config.limits));
    // Bounds open client connections; past it, new ones wait in the kernel's accept queue.
    // Every phase of a connection has a deadline (`connection`), so a permit is always given
    // back.
    let permits = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    let write_timeouts = shared.metrics.bound_counter("write_timeout");
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => tokio::select! {
                    res = listener.accept() => res.map(|s| (s, permit)),
                    _ = stop.changed() => break,
                },
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let ((stream, peer), permit) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and similar: back off briefly instead of spinning.
                warn!(error = %e, "Accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let deadlines = connection::Deadlines::new(&shared.config.limits, tokio::time::Instant::now());
        let (shared, builder, stop, tls, write_timeouts) = (shared.clone(), builder.clone(), stop.clone(), tls.clone(), write_timeouts.clone());
        connections.spawn(async move {
            let _permit = permit;
            let respond = move |is_tls: bool| {
                let admission = Admission::new(&shared, peer, is_tls);
                move |req: Request<Incoming>| {
                    // Each request runs in its own task, so a client that goes away mid-request
                    // does not cancel it half-way: it keeps its slot, the pipeline finishes and
                    // the decision-log line is written.
                    let handling = tokio::spawn(admission.clone().serve(req));
                    async move {
                        match handling.await {
                            Ok(resp) => resp,
                            Err(e) => {
                                tracing::error!(error = %e, "Request handler failed");
                                decision::respond_upstream(&decision::UpstreamError::Failed("request handler failed".into()), "")
                            }
                        }
                    }
                }
            };
            match tls {
                None => connection::serve(&builder, stream, peer, deadlines, stop, respond(false), write_timeouts).await,
                // The handshake counts against the time to the first request head.
                Some(acceptor) => match tokio::time::timeout_at(deadlines.first_request, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => connection::serve(&builder, tls_stream, peer, deadlines, stop, respond(true), write_timeouts).await,
                    Ok(Err(e)) => tracing::debug!(peer = %peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(peer = %peer, "TLS handshake timed out"),
                },
            }
        });
    }
    drop(listener);
    shared.is_shutting_down.store(true, Ordering::SeqCst);
    // `stop` is true now: every connection closes gracefully (HTTP/2 GOAWAY, HTTP/1.1 after the
    // current exchange).
    let grace = shared.config.limits.shutdown_grace;
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        warn!(grace = ?grace, open = connections.len(), "Shutdown grace period over; closing remaining connections");
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

impl Shared {
    /// RFC 9728 protected-resource metadata: each server's at the well-known path suffixed
    /// with its path (§3.1), the single server's also at the root; and the actor keys.
    fn well_known(&self, req: &Request<Incoming>) -> Option<Response<ResponseBody>> {
        let path = req.uri().path();
        if !path.starts_with("/.well-known/") {
            return None;
        }
        let table = self.servers.load();
        // The actor keys (`upstream.auth.actor`), for the issuer to trust the actor tokens.
        let doc = if path == crate::upstream_auth::JWKS_PATH { actor_jwks(&table)? } else { table.metadata_at(path)?.metadata() };
        let mut resp = if req.method() == Method::GET || req.method() == Method::HEAD {
            let mut r = Response::new(decision::full(doc));
            r.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
            r
        } else {
            let body = serde_json::json!({"error": "method_not_allowed", "reason": "protected-resource metadata is read with GET"});
            decision::json_response(StatusCode::METHOD_NOT_ALLOWED, &body, vec![(http::header::ALLOW, "GET, HEAD".to_owned())])
        };
        resp.headers_mut().insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        Some(resp)
    }

    /// Whether `path` is one of the gateway's own documents (answered before admission).
    pub(crate) fn is_document(&self, path: &str) -> bool {
        path.starts_with("/.well-known/") && (path == crate::upstream_auth::JWKS_PATH || self.servers.load().metadata_at(path).is_some())
    }

    /// Re-reads the config file and applies its servers (SIGHUP). A file that does not
    /// validate is refused whole; sections that cannot change live keep their running value
    /// and are named in the log.
    pub(crate) async fn reload(&self) -> Result<(), String> {
        let result = self.try_reload().await;
        let label = if result.is_ok() { "applied" } else { "rejected" };
        self.reloads.get_or_create(&ReloadLabels { result: label }).inc();
        if let Err(e) = &result {
            warn!(error = %e, "Config reload refused; the running config stays");
        }
        result
    }

    async fn try_reload(&self) -> Result<(), String> {
        let path = self.config.file.clone().ok_or("the gateway runs on the embedded default config: there is no file to reload")?;
        let fresh = tokio::task::spawn_blocking(move || Config::load(&path)).await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let frozen = self.config.frozen_changes(&fresh);
        for section in &frozen {
            warn!(section = %section, "Config reload: this setting cannot change live; it keeps its running value until a restart");
        }
        // The servers (and the modes and single-server sections they are made of) from the new
        // file; everything the running stages were built from stays as it is, so a server's
        // documents and challenges match the checks that run.
        let running_form = self.config.servers.first().map(|s| s.form);
        if fresh.servers.first().map(|s| s.form) != running_form {
            return Err("the file changes between [upstream] and [[servers]]: the token audiences and signature checks of the other form are set at start, so this needs a restart".to_owned());
        }
        // Each server's resource and default in-flight bound from the running listen and
        // limits (which did not change), not the file's.
        let servers = self.config.rebase(fresh.servers);
        let merged = Config { servers, mode: fresh.mode, upstream: fresh.upstream, tools: fresh.tools, ..self.config.clone() };
        // One reload at a time: two at once could each replace the table and retire nothing.
        let _one = self.reloading.lock().await;
        let current = self.servers.load_full();
        let (table, changes) = Table::build(&merged, self.stages.accept_signature(), Some(&current)).map_err(|e| e.to_string())?;
        for server in table.all() {
            if changes.added.contains(&server.config.name) || changes.changed.contains(&server.config.name) {
                let _ = server.upstream.warm().await;
            }
        }
        self.servers.store(Arc::new(table));
        // A removed or changed server's open streams end once limits.shutdown_grace has passed
        // (its requests in flight finish on it meanwhile).
        let retired = current.retired_by(&changes);
        if !retired.is_empty() {
            let grace = self.config.limits.shutdown_grace;
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                for server in retired {
                    server.retired.cancel();
                }
            });
        }
        info!(added = ?changes.added, removed = ?changes.removed, changed = ?changes.changed, unchanged = ?changes.unchanged, "Config reloaded");
        Ok(())
    }
}

/// Every server's actor keys (`upstream.auth.actor`) as one JWK set, each key once (by `kid`):
/// the issuer trusts the actor tokens of every server. `None` when no server signs any.
fn actor_jwks(table: &Table) -> Option<Bytes> {
    let mut keys: Vec<serde_json::Value> = Vec::new();
    for doc in table.all().iter().filter_map(|s| s.credentials().actor_jwks()) {
        let parsed: serde_json::Value = serde_json::from_str(doc).ok()?;
        for key in parsed["keys"].as_array().into_iter().flatten() {
            if !keys.iter().any(|k| k["kid"] == key["kid"]) {
                keys.push(key.clone());
            }
        }
    }
    (!keys.is_empty()).then(|| Bytes::from(serde_json::json!({ "keys": keys }).to_string()))
}

/// Reloads the config on SIGHUP (when it came from a file); ends with the gateway.
fn spawn_config_reloader(shared: &Arc<Shared>) -> Option<AbortOnDrop> {
    #[cfg(unix)]
    {
        shared.config.file.as_ref()?;
        let weak = Arc::downgrade(shared);
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()?;
        Some(AbortOnDrop(tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let Some(shared) = weak.upgrade() else { return };
                let _ = shared.reload().await;
            }
        })))
    }
    #[cfg(not(unix))]
    {
        let _ = shared;
        None
    }
}

/// Tells a newcomer what monitor mode is doing, on the first would-be refusal and then at most
/// once per [`crate::throttle::Throttle::INTERVAL`]: what is not blocked, how many requests
/// would have been, and how to see which. With some groups enforcing (`[mode]`), it names the
/// groups that only log: the others do refuse.
fn monitor_notice(modes: &crate::config::Modes, sink: &crate::config::DecisionSink) {
    static WOULD_DENY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
    let n = WOULD_DENY.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if THROTTLE.admit().is_none() {
        return;
    }
    info!(would_deny = n, "{}", monitor_notice_text(modes, sink, n));
}

/// The text of [`monitor_notice`].
fn monitor_notice_text(modes: &crate::config::Modes, sink: &crate::config::DecisionSink, n: u64) -> String {
    let how = match sink {
        crate::config::DecisionSink::File(path) => format!("run `portcullis report {}`", path.display()),
        crate::config::DecisionSink::Off => "turn on log.decisions and run `portcullis report FILE`".to_owned(),
        _ => "save the decision log (log.decisions) and run `portcullis report FILE`".to_owned(),
    };
    let watched: Vec<&str> = crate::config::Group::ALL.into_iter().filter(|g| !modes.is_enforcing(*g)).map(crate::config::Group::as_str).collect();
    let requests = if n == 1 { "request" } else { "requests" };
    if modes.enforcing().is_empty() {
        format!("monitor mode: nothing is blocked; {n} {requests} would have been refused so far — {how}")
    } else {
        format!(
            "staged mode: {} only log, {} refuse; {n} {requests} would have been refused so far by the groups that only log — {how}",
            watched.join(", "),
            modes.enforcing().join(", ")
        )
    }
}

/// `resp` with the request's id in `x-request-id`.
fn with_request_id(mut resp: Response<ResponseBody>, request_id: &str) -> Response<ResponseBody> {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert(const { HeaderName::from_static("x-request-id") }, v);
    }
    resp
}

/// Validates everything `start` would build, without binding: `portcullis check`.
pub fn check(config: &Config) -> Result<(), StartError> {
    let stages = Stages::build(config)?;
    for server in &config.servers {
        crate::servers::Server::build(config, server, stages.accept_signature())?;
    }
    if let Some(files) = &config.listen.tls {
        tls::acceptor(files)?;
    }
    Ok(())
}

/// Resolves on SIGTERM or ctrl-c (SIGINT). The handlers are installed when this is called,
/// not when the future is first polled: call it before the startup line is printed, so a
/// signal sent the moment the line is out is not lost (it would end the process unhandled).
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        let (term, int) = (signal(SignalKind::terminate()).ok(), signal(SignalKind::interrupt()).ok());
        let wait = |s: Option<Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        async move {
            tokio::select! {
                () = wait(term) => {},
                () = wait(int) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod notice_tests {
    use super::monitor_notice_text;
    use crate::config::{DecisionSink, Group, Mode, Modes};

    #[test]
    fn the_first_run_notice_says_what_is_blocked_in_each_mode() {
        let sink = DecisionSink::File("decisions.jsonl".into());
        let monitor = monitor_notice_text(&Modes::uniform(Mode::Monitor), &sink, 3);
        assert_eq!(monitor, "monitor mode: nothing is blocked; 3 requests would have been refused so far — run `portcullis report decisions.jsonl`");
        // Identity enforced: unknown agents are refused, so "nothing is blocked" would be false.
        let staged = monitor_notice_text(&Modes::uniform(Mode::Monitor).with(Group::Identity, Mode::Enforce), &sink, 2);
        assert!(!staged.contains("nothing is blocked"), "{staged}");
        assert!(staged.starts_with("staged mode: token, policy, default only log, identity refuse; 2 requests"), "{staged}");
    }
}
