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
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tracing::{info, info_span, warn, Instrument};

pub mod admin;
mod admission;
mod body;
pub(crate) mod connection;

use crate::config::{Config, ConfigError};
use crate::decision::{self, Answer, Challenge, Denial, Outcome, ResponseBody, Verdict};
use crate::evidence::Evidence;
use crate::finding::{Finding, FindingStage};
use crate::inbound::Inbound;
use crate::pipeline::{self, Stages};
use crate::policy::ReloadTrigger;
use crate::proxy::Upstream;
use crate::stage::{stage_span, Stage, StageTimings};
use crate::telemetry::{rfc3339, DecisionLog, DecisionRecord, Metrics};
use crate::tls;
use admission::Admission;
use body::BodyBudget;
use portcullis_wire::UnixTime;

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
    pub(crate) config: Config,
    pub(crate) stages: Stages,
    upstream: Upstream,
    pub(crate) metrics: Metrics,
    log: DecisionLog,
    challenge: Challenge,
    prm: Bytes,
    prm_paths: Vec<String>,
    /// The paths forwarded (the MCP endpoint and `upstream.extra_paths`).
    routes: portcullis_wire::target::Routes,
    body_budget: Arc<BodyBudget>,
    /// `limits.max_header_bytes_in_flight`: the heads of the requests being handled.
    head_budget: Arc<BodyBudget>,
    /// `limits.max_in_flight`: requests being decided or waiting for the backend's answer,
    /// over all connections. Taken once the body is read (admission).
    slots: Arc<Semaphore>,
    pub(crate) is_shutting_down: AtomicBool,
}

/// A running gateway. Dropping it does not stop it; call [`Running::shutdown`].
#[derive(Debug)]
pub struct Running {
    /// Where the gateway accepts client connections.
    pub addr: SocketAddr,
    /// Where the admin listener accepts connections, if configured.
    pub admin_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    policy_reload: ReloadTrigger,
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

    let (prm, prm_paths) = protected_resource_metadata(&config);
    let (directory_fetches, replay_hits) = stages.identity_counters();
    metrics.register_identity(directory_fetches, replay_hits);
    metrics.register_legacy_agents(stages.legacy_agent_counter());
    if let Some(m) = stages.token_metrics() {
        metrics.register_token(m);
    }
    metrics.register_idempotency(stages.idempotency_metrics());
    if let Some(catalog) = &stages.catalog {
        metrics.register_catalog(catalog.metrics());
    }
    // Fetches the tool catalog now and every tools.refresh; stops with the gateway.
    let catalog_refresher = stages.catalog.as_ref().map(|c| AbortOnDrop(c.spawn_refresher()));
    metrics.register_with(|r| stages.approvals.metrics().register(r));
    metrics.register_with(|r| stages.policy.register_metrics(r));
    if let Some(errors) = stages.state_errors() {
        metrics.register_state(errors);
    }
    let shared = Arc::new(Shared {
        challenge: Challenge {
            resource_metadata: config.resource_metadata_url(),
            scope: config.oauth.scopes_supported.join(" "),
            accept_signature: stages.accept_signature().to_owned(),
            dpop_algs: if config.oauth.dpop.is_some() { portcullis_wire::dpop::ACCEPTED_ALGS.to_owned() } else { String::new() },
        },
        upstream: Upstream::new(&config.upstream, config.oauth.forward_token),
        stages,
        metrics,
        log,
        prm,
        prm_paths,
        routes: portcullis_wire::target::Routes::new(&config.listen.public_url, &config.upstream.extra_paths),
        body_budget: BodyBudget::new(config.limits.max_body_in_flight),
        head_budget: BodyBudget::new(config.limits.max_header_bytes_in_flight),
        slots: Arc::new(Semaphore::new(config.limits.max_in_flight)),
        is_shutting_down: AtomicBool::new(false),
        config,
    });
    let (stop, stop_rx) = watch::channel(false);
    // The admin listener outlives the drain, so probes see /readyz answer 503 meanwhile.
    let (admin_stop, admin_stop_rx) = watch::channel(false);
    info!(
        addr = %addr,
        tls = tls.is_some(),
        mode = %shared.config.mode.describe(),
        upstream = %shared.config.upstream.url,
        max_in_flight = shared.config.limits.max_in_flight,
        "Portcullis listening"
    );
    if let Some(a) = admin_addr {
        info!(addr = %a, "Admin listener on /healthz /readyz /metrics");
    }
    for w in shared.config.warnings() {
        warn!(field = %w.field, "Configuration warning: {}", w.reason);
    }
    // Before the first request is accepted: a backend that is not running is named now, not by
    // the first 502; a running one keeps this connection for the first request.
    if let Err(error) = shared.upstream.warm().await {
        warn!(
            upstream = %shared.config.upstream.url,
            error = %error,
            "The upstream MCP server does not accept connections: until it does, every request the gateway would forward is answered 502 upstream_unavailable (start the backend, e.g. `portcullis example-backend`, or set upstream.url)"
        );
    }
    let admin_task = admin_listener.map(|l| tokio::spawn(admin::serve(l, shared.clone(), admin_stop_rx)));
    let task = tokio::spawn(async move {
        // Reloads and catalog fetches stop with the gateway.
        let _reloader = policy_reloader;
        let _catalog_refresher = catalog_refresher;
        accept_loop(listener, tls, shared.clone(), stop_rx).await;
        let _ = admin_stop.send(true);
        if let Some(t) = admin_task {
            let _ = t.await;
        }
        // The drained requests' lines are queued: write them before reporting the stop.
        shared.log.flush().await;
    });
    Ok(Running { addr, admin_addr, stop, task, policy_reload })
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
    /// One client request, from arrival to its decision-log line.
    ///
    /// An `async fn` on purpose: calling it only stores its arguments, so the admission handler
    /// can build its ~11 KB future straight into the future's allocation (`in_place`); any work
    /// done before the future exists would make the compiler build it on the stack and copy it.
    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: crate::inbound::Peer, is_tls: bool, arrived: admission::Arrived) -> Response<ResponseBody> {
        // The clocks as admission read them: every stage works from these readings.
        let admission::Arrived { id: request_id, at: arrived, wall } = arrived;
        let now = UnixTime::at(wall);
        // An approval link's path holds its code, a bearer secret: the span (which every log
        // line inside it quotes) names the page, never the code.
        let is_approval_page = self.stages.approvals.serves(req.uri().path());
        let span_path = if is_approval_page { self.stages.approvals.redacted_path() } else { req.uri().path() };
        let span = info_span!("request", request_id = %request_id, method = %req.method(), path = %span_path);
        let _in_flight = self.metrics.in_flight();
        async move {
            if let Some(resp) = self.well_known(&req) {
                return with_request_id(resp, &request_id);
            }
            // The approval pages: a person's browser, not an agent; outside the pipeline.
            if is_approval_page {
                // Boxed: the pages' futures are large and rare; inline they would swell every request's.
                let (resp, event) = Box::pin(self.stages.approvals.page(req, now)).await;
                if let Some(event) = event {
                    self.log_approval_event(&event, wall, &request_id);
                }
                return with_request_id(resp, &request_id);
            }
            let method = req.method().clone();
            let path = req.uri().path().to_owned();
            let (head, body) = req.into_parts();
            // Only the decision log reads it: no second parse of Signature-Agent without one.
            let claimed_agent = if self.log.is_on() { crate::telemetry::claimed_agent(&head.headers) } else { None };
            let signed = crate::telemetry::is_signed(&head.headers);
            let mut timings = StageTimings::default();
            // What the stages verified, for the decision log (empty until the pipeline ran).
            let mut seen = Evidence::default();
            // The path and the authority, read once (docs/design.md decisions 3 and 9): a request
            // for another path, or one whose authority reads two ways, is refused before any
            // stage and before its body is read.
            let authority = if self.routes.serves(head.uri.path()) {
                portcullis_wire::target::authority(&head, is_tls).map_err(Denial::from)
            } else {
                Err(Denial::NotFound)
            };
            let read_started = Instant::now();
            let limits = &self.config.limits;
            let body = match &authority {
                Ok(_) => Some(body::read(&head, body, limits.max_body, limits.body_timeout, &self.body_budget).instrument(stage_span(Stage::Body)).await),
                Err(_) => None,
            };
            timings.record(Stage::Body, read_started.elapsed());
            // Held until the request is answered: the body is in memory until then.
            let (body, _reservation) = match body {
                Some(Ok((bytes, reservation))) => (Ok(bytes), Some(reservation)),
                Some(Err(denial)) => (Err(denial), None),
                None => (Ok(Bytes::new()), None),
            };

            let mut upstream_error = None;
            // The decision log's `idempotency` (first / replayed / in_flight / reused).
            let mut idempotency = None;
            // Admission (limits.max_in_flight): a slot is taken only once the body is read, so
            // slow uploads, bounded by body_timeout and max_body_in_flight, cannot hold every
            // slot; without one the request is shed at once.
            let admitted = authority.and_then(|a| Ok((a, body?))).and_then(|read| match self.slots.clone().try_acquire_owned() {
                Ok(slot) => Ok((read, (slot, self.metrics.admitted()))),
                Err(_) => Err(Denial::Shed),
            });
            // Every refusal found, for the decision log (the pipeline's, or the one before it).
            let mut findings: Vec<Finding> = Vec::new();
            let (outcome, summary, resp) = match admitted {
                // Stage 1 is a resource bound, not a decision: a body the gateway refused to
                // hold (or never fully received) cannot be forwarded, so it is refused in both
                // modes and never reaches `apply_mode`. Likewise a path or authority the
                // backend could read otherwise than the gateway.
                Err(denial) => {
                    findings.push(Finding::of(&denial));
                    self.refuse(&denial, &request_id)
                }
                Ok(((authority, body), _slot)) => {
                    let inbound = Inbound { head, body, now, peer, is_tls, request_id: request_id.clone(), authority };
                    let decision = pipeline::check(&inbound, &self.stages, &mut timings).await;
                    let verdict = decision::apply_mode(&self.config.mode, decision);
                    idempotency = decision::idempotency_log(&verdict);
                    match verdict {
                        Verdict::Replay(fwd) => {
                            findings = fwd.findings().to_vec();
                            let (outcome, summary) = forward_summary(&fwd);
                            seen = fwd.into_evidence();
                            let resp = crate::idempotency::replay_response(seen.idempotency.as_ref())
                                .unwrap_or_else(|| decision::respond_upstream(&decision::UpstreamError::Failed("no recorded answer".into()), &request_id));
                            (outcome, summary, resp)
                        }
                        Verdict::Refuse(refusal) => {
                            let (denial, found, evidence) = refusal.into_parts();
                            seen = evidence;
                            findings = found;
                            let (outcome, summary, resp) = self.refuse(&denial, &request_id);
                            // A link is a protocol answer: the call waits, it was not refused.
                            let outcome = if matches!(denial, Denial::ApprovalRequired(_)) { Outcome::ApprovalRequired } else { outcome };
                            (outcome, summary, resp)
                        }
                        Verdict::Forward(fwd) => {
                            findings = fwd.findings().to_vec();
                            let (outcome, summary) = forward_summary(&fwd);
                            let exchange = crate::session::Exchange::of(&inbound.head, inbound.peer.addr.ip());
                            let listing = pipeline::ListingAsk::of(&self.stages, &inbound, fwd.evidence());
                            // A list the gateway rewrites must come uncompressed: a compressed one
                            // could not be read, so it would be withheld.
                            let mut inbound = inbound;
                            if listing.is_some() {
                                inbound.head.headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
                            }
                            let started = Instant::now();
                            let result = self.upstream.forward(inbound, &fwd).instrument(stage_span(Stage::Upstream)).await;
                            timings.record(Stage::Upstream, started.elapsed());
                            let result = match (result, listing) {
                                // The visible tools are worked out only for an answer that is read.
                                (Ok(resp), Some(ask)) if ask.reads(resp.status(), resp.headers()) => {
                                    match pipeline::list_filter(&self.stages, &ask, fwd.evidence(), self.config.limits.max_inspected_response) {
                                        Some(f) => self.filter_list(resp, crate::catalog::filter::ListFilter { cuts: Some(self.metrics.uninspectable_cuts()), ..f }).await,
                                        None => Ok(resp),
                                    }
                                }
                                (other, _) => other,
                            };
                            seen = fwd.into_evidence();
                            let resp = match result {
                                // A first idempotent call: its answer is recorded as it streams.
                                Ok(resp) => crate::idempotency::record(&mut seen.idempotency, resp).await,
                                Err(e) => {
                                    crate::idempotency::release(&mut seen.idempotency).await;
                                    static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                                    if let Some(held) = THROTTLE.admit() {
                                        warn!(error.code = e.code(), error = %e, upstream = %self.config.upstream.url, similar_held_back = held, "Upstream request failed (each one is counted in portcullis_upstream_errors_total)");
                                    }
                                    self.metrics.upstream_error(e.code());
                                    let r = decision::respond_upstream(&e, &request_id);
                                    upstream_error = Some(e);
                                    r
                                }
                            };
                            self.settle_session(&exchange, &seen, &mut timings, (outcome, summary, resp), &request_id, &mut findings).await
                        }
                    }
                }
            };
            let status = resp.status().as_u16();
            if matches!(outcome, Outcome::WouldDeny) {
                monitor_notice(&self.config.mode, &self.config.log.decisions);
            }
            let total = arrived.elapsed();
            // Without a decision log only the metrics read the record: no timestamp to format.
            let logged = self.log.is_on();
            let record = DecisionRecord {
                time: if logged { rfc3339(wall) } else { String::new() },
                // What the client was answered: a failed forward's error, even where a monitored
                // refusal was forwarded (that refusal stays the first of `findings`), so a 502
                // is never blamed on a stage that blocked nothing.
                error: upstream_error.as_ref().map(|e| e.code()).or(summary.as_ref().map(|(c, _)| *c)),
                reason: upstream_error.as_ref().map(|e| e.to_string()).or(summary.map(|(_, r)| r)),
                findings: findings.iter().map(Finding::line).collect(),
                upstream_error: upstream_error.as_ref().map(|e| e.code()),
                agent: seen.agent.as_ref().map(|a| a.agent()),
                claimed_agent,
                signed,
                keyid: seen.agent.as_ref().map(|a| a.keyid()),
                sub: seen.token.as_ref().and_then(|t| t.sub()),
                binding: seen.binding.map(|b| b.as_str()),
                mcp_method: seen.mcp.as_ref().and_then(|m| m.first_method()),
                tool: seen.mcp.as_ref().and_then(|m| m.first_tool()),
                rule: seen.policy.as_ref().and_then(|p| p.rule.as_deref()),
                policy: seen.policy.as_ref().map(|p| p.version.as_str()),
                quota: seen.quota_exhausted.as_deref(),
                idempotency,
                approval_id: seen.approval.as_ref().map(|a| a.id.as_str()),
                approved_by: seen.approval.as_ref().map(|a| a.approved_by.as_str()),
                total_us: total.as_micros() as u64,
                ..DecisionRecord::new(&self.config.mode, &request_id, method.as_str(), &path, outcome.as_str(), status)
            };
            let record = if logged { record.with_timings(&timings) } else { record };
            self.metrics.observe(&record, &timings, total);
            self.log.write(&record);
            with_request_id(resp, &request_id)
        }
        .instrument(span)
        .await
    }

    /// The decision-log line for something that happened on an approval page: a wrong user
    /// (`approval_wrong_user`) or a decision (`approval_approved` / `approval_denied`).
    fn log_approval_event(&self, event: &crate::approval::page::PageEvent, wall: SystemTime, request_id: &str) {
        use crate::approval::page::PageEvent;
        use crate::state::approval::Choice;
        let (outcome, status, id, sub) = match event {
            PageEvent::WrongUser { approval_id, login_sub } => ("approval_wrong_user", 403, approval_id, login_sub),
            PageEvent::Decided { approval_id, choice: Choice::Approve, by } => ("approval_approved", 200, approval_id, by),
            PageEvent::Decided { approval_id, choice: Choice::Deny, by } => ("approval_denied", 200, approval_id, by),
        };
        let record = DecisionRecord {
            time: rfc3339(wall),
            sub: Some(sub.as_str()),
            approval_id: Some(id.as_str()),
            approved_by: matches!(event, PageEvent::Decided { choice: Choice::Approve, .. }).then_some(sub.as_str()),
            ..DecisionRecord::new(&self.config.mode, request_id, "POST", &self.config.approvals.path, outcome, status)
        };
        self.log.write(&record);
    }

    /// The refusal response for `denial`, with its log summary (the decision log and the
    /// metrics say it; no diagnostic line per refusal).
    fn refuse(&self, denial: &Denial, request_id: &str) -> (Outcome, Option<(&'static str, String)>, Response<ResponseBody>) {
        tracing::debug!(error.code = denial.code(), "Request refused");
        (Outcome::Deny, Some((denial.code(), denial.reason())), decision::respond(denial, request_id, &self.challenge))
    }

    /// `tools.filter_list`: a `tools/list` answer (or any list in an event stream) loses the tools this caller could not call
    /// (the policy group enforcing); in monitor mode it passes whole and the count it would have
    /// lost is logged. An answer too large to inspect is withheld, never passed unfiltered.
    async fn filter_list(
        &self,
        resp: Response<ResponseBody>,
        filter: crate::catalog::filter::ListFilter,
    ) -> Result<Response<ResponseBody>, decision::UpstreamError> {
        if !decision::filters_lists(&self.config.mode) {
            if filter.is_listing {
                let known = self.stages.catalog.as_ref().and_then(|c| c.snapshot()).map_or(0, |s| s.len());
                info!(would_hide = known.saturating_sub(filter.visible.len()), "monitor mode: tools/list passed unfiltered");
            }
            return Ok(resp);
        }
        crate::catalog::filter::rewrite(resp, filter).await.map_err(|e| decision::UpstreamError::Uninspectable(e.to_string()))
    }

    /// Decision 9: binds a session id the backend just issued to the request's identity before
    /// the client sees it. A binding that cannot be made is a refusal like any other: the
    /// backend's answer is withheld in enforce mode, passed on and logged in monitor mode.
    async fn settle_session(
        &self,
        exchange: &crate::session::Exchange,
        seen: &Evidence,
        timings: &mut StageTimings,
        sent: (Outcome, Option<(&'static str, String)>, Response<ResponseBody>),
        request_id: &str,
        findings: &mut Vec<Finding>,
    ) -> (Outcome, Option<(&'static str, String)>, Response<ResponseBody>) {
        let (outcome, summary, resp) = sent;
        let settled = pipeline::settle_session(&self.stages, exchange, resp.status(), resp.headers(), seen, timings).await;
        let Err(denial) = settled else { return (outcome, summary, resp) };
        let finding = Finding::new(FindingStage::Mcp, &denial);
        let answer = decision::apply_mode_to_answer(&self.config.mode, &finding, denial);
        findings.push(finding);
        match answer {
            Answer::Withhold(d) => self.refuse(&d, request_id),
            Answer::PassOn(d) => (Outcome::WouldDeny, summary.or(Some((d.code(), d.reason()))), resp),
        }
    }

    /// RFC 9728 protected-resource metadata, at the root well-known path and the
    /// path-suffixed form for `listen.public_url`'s path (MCP Authorization and RFC 9728 §3).
    fn well_known(&self, req: &Request<Incoming>) -> Option<Response<ResponseBody>> {
        let path = req.uri().path();
        if !self.prm_paths.iter().any(|p| p == path) {
            return None;
        }
        let mut resp = if req.method() == Method::GET || req.method() == Method::HEAD {
            let mut r = Response::new(decision::full(self.prm.clone()));
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

/// The outcome and the decision log's `error`/`reason` of a forwarded request.
fn forward_summary(fwd: &decision::Forward) -> (Outcome, Option<(&'static str, String)>) {
    match fwd.monitored() {
        None => (Outcome::Allow, None),
        Some(d) => (Outcome::WouldDeny, Some((d.code(), d.reason()))),
    }
}

fn with_request_id(mut resp: Response<ResponseBody>, request_id: &str) -> Response<ResponseBody> {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert(const { HeaderName::from_static("x-request-id") }, v);
    }
    resp
}

/// The RFC 9728 document and the paths it is served at.
fn protected_resource_metadata(config: &Config) -> (Bytes, Vec<String>) {
    let oauth = &config.oauth;
    let mut doc = serde_json::json!({
        "resource": config.listen.public_url.as_str().trim_end_matches('/'),
        "authorization_servers": oauth.issuer.iter().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
    });
    if !oauth.scopes_supported.is_empty() {
        doc["scopes_supported"] = serde_json::json!(oauth.scopes_supported);
    }
    // RFC 9728 §2: the proof algorithms accepted; tokens need not be DPoP-bound unless
    // `oauth.require_sender_constrained` says so.
    if oauth.dpop.is_some() {
        doc["dpop_signing_alg_values_supported"] = serde_json::json!(portcullis_wire::dpop::ACCEPTED_ALGS.split(' ').collect::<Vec<_>>());
        doc["dpop_bound_access_tokens_required"] = serde_json::json!(oauth.require_sender_constrained);
    }
    let root = "/.well-known/oauth-protected-resource".to_owned();
    let mut paths = vec![root.clone()];
    let rpath = config.listen.public_url.path().trim_end_matches('/');
    if !rpath.is_empty() {
        paths.push(format!("{root}{rpath}"));
    }
    (Bytes::from(doc.to_string()), paths)
}

/// Validates everything `start` would build, without binding: `portcullis check`.
pub fn check(config: &Config) -> Result<(), StartError> {
    Stages::build(config)?;
    if let Some(files) = &config.listen.tls {
        tls::acceptor(files)?;
    }
    Ok(())
}

/// A background task that ends when its owner is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
