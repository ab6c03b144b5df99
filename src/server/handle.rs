//! One request, by phase: **route** (metadata document, approval page, or the gateway) →
//! **admit** (path and authority, bounded body, an in-flight slot) → **decide** (the pipeline,
//! then the mode) → **forward** (upstream, list filter, journal, session binding) → **record**
//! (one decision-log line and the metrics).
//!
//! Each phase is a function with a typed input and output. What the decision log will say is
//! gathered in one [`Trail`] as the phases run and written once, by [`Shared::record`]; a phase
//! that answers the client returns an [`Answered`].

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::{Request, Response};
use hyper::body::Incoming;
use tracing::{info, info_span, warn, Instrument};

use super::{body, monitor_notice, with_request_id, Shared};
use crate::decision::{self, Denial, Forward, Outcome, ResponseBody, UpstreamError, Verdict};
use crate::evidence::Evidence;
use crate::finding::Finding;
use crate::inbound::{Inbound, Peer};
use crate::pipeline::{self, Refusal};
use crate::servers::Server;
use crate::stage::{stage_span, Stage, StageTimings};
use crate::telemetry::{rfc3339, DecisionRecord};
use portcullis_wire::UnixTime;

/// What the decision log says about one request, gathered as the phases run and written once
/// ([`Shared::record`]). Every phase adds what it learnt; none writes a log line.
#[derive(Default)]
pub(super) struct Trail {
    /// Time per stage, in pipeline order.
    pub(super) timings: StageTimings,
    /// What the stages verified (empty until the pipeline ran).
    pub(super) seen: Evidence,
    /// Every refusal found: the pipeline's, or the one before it, or the session binding's.
    pub(super) findings: Vec<Finding>,
    /// The journal's word on this call (`first` / `replayed` / `in_flight` / `reused` …).
    pub(super) idempotency: Option<&'static str>,
    /// Why forwarding failed, when it did.
    pub(super) upstream_error: Option<UpstreamError>,
    /// The credential the backend got (`upstream_auth`), and whether it came from the cache.
    upstream_auth: (Option<&'static str>, Option<bool>),
    /// The agent `Signature-Agent` named, verified or not (read only for a decision log).
    claimed_agent: Option<String>,
    /// Whether the request carried a signature at all.
    signed: bool,
}

impl Trail {
    /// The trail of a request with headers `headers`: what the log says of it before any stage.
    fn begin(headers: &http::HeaderMap, logged: bool) -> Trail {
        // Only the decision log reads it: no second parse of Signature-Agent without one.
        let claimed_agent = if logged { crate::telemetry::claimed_agent(headers) } else { None };
        Trail { claimed_agent, signed: crate::telemetry::is_signed(headers), ..Trail::default() }
    }

    /// The trail of a request refused before its headers were looked at (admission).
    pub(super) fn refused(denial: &Denial) -> Trail {
        Trail { findings: vec![Finding::of(denial)], ..Trail::default() }
    }
}

/// A phase's answer to the client: the response, the decision log's `outcome`, and the refusal
/// its `error`/`reason` quote.
pub(super) struct Answered {
    pub(super) outcome: Outcome,
    pub(super) summary: Option<(&'static str, String)>,
    pub(super) resp: Response<ResponseBody>,
}

/// The request line as the decision log names it, and its clock readings.
pub(super) struct Logged<'a> {
    /// The server its path chose (`None`: none, logged as `-`).
    pub(super) server: Option<&'a Server>,
    pub(super) request_id: &'a str,
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    /// The wall clock at arrival (the log's `time`).
    pub(super) wall: SystemTime,
    /// The monotonic clock at arrival (`total_us`).
    pub(super) at: Instant,
}

/// The id of a request and its arrival, read on arrival so that a refusal made here and the
/// handler's own logs name the same request, and the handler reads no clock again for them.
#[derive(Debug, Clone)]
pub(crate) struct Arrived {
    pub(crate) id: String,
    pub(crate) at: Instant,
    pub(crate) wall: SystemTime,
}

impl Arrived {
    /// The arrival of a request now, with a new id (UUIDv7).
    pub(super) fn now() -> Arrived {
        Arrived { id: new_request_id(), at: Instant::now(), wall: SystemTime::now() }
    }
}

fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Where a request goes (the route phase).
enum Route {
    /// The RFC 9728 document, answered at once.
    Metadata(Response<ResponseBody>),
    /// An approval page: a person's browser, not an agent; outside the pipeline.
    ApprovalPage,
    /// Everything else: the gateway's phases, for the server its path names (`None`: no
    /// server serves it, refused 404 by admission).
    Gateway(Option<Arc<Server>>),
}

/// A request whose path, authority and body were accepted and that holds an in-flight slot
/// (the admit phase's output). The slot is held until it is answered; the body's reservation
/// until it is answered or forwarded.
struct Admitted {
    inbound: Inbound,
    _slot: (tokio::sync::OwnedSemaphorePermit, crate::telemetry::InFlight),
    reservation: body::Reservation,
}

impl Shared {
    /// One client request, from arrival to its decision-log line.
    ///
    /// An `async fn` on purpose: calling it only stores its arguments, so the admission handler
    /// can build its ~11 KB future straight into the future's allocation (`in_place`); any work
    /// done before the future exists would make the compiler build it on the stack and copy it.
    pub(super) async fn handle(self: std::sync::Arc<Self>, req: Request<Incoming>, peer: Peer, is_tls: bool, arrived: Arrived) -> Response<ResponseBody> {
        // The clocks as admission read them: every stage works from these readings.
        let Arrived { id: request_id, at, wall } = arrived;
        let route = self.route(&req);
        // An approval link's path holds its code, a bearer secret: the span (which every log
        // line inside it quotes) names the page, never the code.
        let span_path = if matches!(route, Route::ApprovalPage) { self.stages.approvals.redacted_path() } else { req.uri().path() };
        let span = info_span!("request", request_id = %request_id, method = %req.method(), path = %span_path);
        let _in_flight = self.metrics.in_flight();
        async move {
            let server = match route {
                Route::Metadata(resp) => return with_request_id(resp, &request_id),
                Route::ApprovalPage => {
                    // Boxed: the pages' futures are large and rare; inline they would swell every request's.
                    let (resp, event) = Box::pin(self.stages.approvals.page(req, UnixTime::at(wall))).await;
                    if let Some(event) = event {
                        self.log_approval_event(&event, wall, &request_id);
                    }
                    return with_request_id(resp, &request_id);
                }
                Route::Gateway(server) => server,
            };
            let method = req.method().clone();
            let path = req.uri().path().to_owned();
            let mut trail = Trail::begin(req.headers(), self.log.is_on());
            let answered = match self.admit(server.as_deref(), req, peer, is_tls, UnixTime::at(wall), &request_id, &mut trail).await {
                // Stage 1 is a resource bound, not a decision: a body the gateway refused to
                // hold (or never fully received) cannot be forwarded, so it is refused in both
                // modes and never reaches `apply_mode`. Likewise a path or authority the
                // backend could read otherwise than the gateway.
                Err(denial) => {
                    trail.findings.push(Finding::of(&denial));
                    self.refuse(&denial, &request_id, server.as_deref())
                }
                Ok((admitted, server)) => {
                    let Admitted { inbound, _slot, reservation } = admitted;
                    match self.decide(server, &inbound, &mut trail).await {
                        Verdict::Replay(fwd) => self.replay(fwd, &mut trail, &request_id),
                        Verdict::Refuse(refusal) => self.refused(server, refusal, &mut trail, &request_id),
                        Verdict::Respond(answer) => self.respond(server, answer, &mut trail, &request_id),
                        Verdict::Forward(fwd) => {
                            // The body goes to the backend now: it no longer counts against
                            // limits.max_body_in_flight, so a backend that is slow to answer
                            // cannot hold every other server's bodies out (section F isolation).
                            drop(reservation);
                            self.forward(server, inbound, fwd, &mut trail).await
                        }
                    }
                }
            };
            let logged = Logged { server: server.as_deref(), request_id: &request_id, method: method.as_str(), path: &path, wall, at };
            self.record(trail, answered, &logged)
        }
        .instrument(span)
        .await
    }

    /// Route: the metadata document, an approval page, or a request for the gateway.
    fn route(&self, req: &Request<Incoming>) -> Route {
        if let Some(resp) = self.well_known(req) {
            return Route::Metadata(resp);
        }
        if self.stages.approvals.serves(req.uri().path()) {
            return Route::ApprovalPage;
        }
        Route::Gateway(self.servers.load().find(req.uri().path()).cloned())
    }

    /// Admit: the path and the authority, read once (docs/design.md decisions 3 and 9), then the
    /// bounded body, then an in-flight slot. A request for another path, or one whose authority
    /// reads two ways, is refused before its body is read; one that finds no slot is shed.
    // The request and where it came from, its arrival, and what it chose: each is one phase's
    // input, and a struct for them would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    async fn admit<'s>(
        &self,
        server: Option<&'s Server>,
        req: Request<Incoming>,
        peer: Peer,
        is_tls: bool,
        now: UnixTime,
        request_id: &str,
        trail: &mut Trail,
    ) -> Result<(Admitted, &'s Server), Denial> {
        let (head, body) = req.into_parts();
        let authority = match server {
            Some(_) => portcullis_wire::target::authority(&head, is_tls).map_err(Denial::from),
            None => Err(Denial::NotFound),
        };
        let read_started = Instant::now();
        let limits = &self.config.limits;
        let read = match &authority {
            Ok(_) => Some(body::read(&head, body, limits.max_body, limits.body_timeout, &self.body_budget).instrument(stage_span(Stage::Body)).await),
            Err(_) => None,
        };
        trail.timings.record(Stage::Body, read_started.elapsed());
        let authority = authority?;
        let server = server.expect("a server was found once the authority is read");
        // Some: the authority was read, so was the body.
        let (body, reservation) = read.expect("the body is read once the authority is")?;
        // Admission (the server's max_in_flight): a slot is taken only once the body is read,
        // so slow uploads, bounded by body_timeout and max_body_in_flight, cannot hold every
        // slot; without one the request is shed at once. Each server has its own: one whose
        // backend is slow fills only its own.
        let slot = server.slots.clone().try_acquire_owned().map_err(|_| Denial::Shed)?;
        let inbound = Inbound { head, body, now, peer, is_tls, request_id: request_id.to_owned(), authority };
        Ok((Admitted { inbound, _slot: (slot, self.metrics.admitted()), reservation }, server))
    }

    /// Decide: the pipeline's decision, then the mode ([`decision::apply_mode`], the only
    /// place a mode applies).
    async fn decide(&self, server: &Server, inbound: &Inbound, trail: &mut Trail) -> Verdict {
        let decision = pipeline::check(inbound, &self.stages, &server.scope(), &mut trail.timings).await;
        let verdict = decision::apply_mode(&server.config.mode, decision);
        trail.idempotency = decision::idempotency_log(&verdict);
        verdict
    }

    /// A refusal the mode kept: its response.
    fn refused(&self, server: &Server, refusal: Refusal, trail: &mut Trail, request_id: &str) -> Answered {
        let (denial, found, evidence) = refusal.into_parts();
        trail.seen = evidence;
        trail.findings = found;
        self.refuse(&denial, request_id, Some(server))
    }

    /// A call the gateway answers in the protocol (an approval link, a tool execution error):
    /// its JSON-RPC answer; logged like a refusal, with its own outcome.
    fn respond(&self, server: &Server, answer: Refusal, trail: &mut Trail, request_id: &str) -> Answered {
        let outcome = Outcome::of_protocol_answer(answer.denial());
        Answered { outcome, ..self.refused(server, answer, trail, request_id) }
    }

    /// A call the journal already answered: that answer, and the backend is not called.
    fn replay(&self, fwd: Forward, trail: &mut Trail, request_id: &str) -> Answered {
        trail.findings = fwd.findings().to_vec();
        let (outcome, summary) = forward_summary(&fwd);
        trail.seen = fwd.into_evidence();
        let resp = crate::idempotency::replay_response(trail.seen.idempotency.as_ref())
            .unwrap_or_else(|| decision::respond_upstream(&UpstreamError::Failed("no recorded answer".into()), request_id));
        Answered { outcome, summary, resp }
    }

    /// Forward: the backend's answer, filtered when it holds a list the caller sees in part,
    /// recorded in the journal for a first idempotent call, and its new session bound.
    async fn forward(&self, server: &Server, mut inbound: Inbound, fwd: Forward, trail: &mut Trail) -> Answered {
        trail.findings = fwd.findings().to_vec();
        let (mut outcome, mut summary) = forward_summary(&fwd);
        // A GET opens a long-lived stream (standalone or resumed): it needs one of its server's
        // `upstream.max_streams` before the backend is asked, so nothing is dropped after the
        // backend acted.
        let stream_permit = if inbound.head.method == http::Method::GET {
            match server.streams.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    self.metrics.bound_reached("max_streams");
                    trail.findings.push(Finding::of(&Denial::StreamsFull));
                    return self.refuse_unsent(server, fwd, &Denial::StreamsFull, trail, &inbound.request_id).await;
                }
            }
        } else {
            None
        };
        let attach = match self.credential(server, &inbound.head.headers, &fwd, inbound.now, trail).await {
            Ok(attach) => attach,
            Err(denial) => return self.refuse_unsent(server, fwd, &denial, trail, &inbound.request_id).await,
        };
        if let Some(f) = trail.findings.iter().find(|f| f.stage == Stage::UpstreamAuth) {
            outcome = Outcome::WouldDeny;
            summary = summary.or(Some((f.error, f.reason.clone())));
        }
        let exchange = crate::session::Exchange::of(&inbound.head, inbound.peer.addr.ip(), server.name);
        let listing = pipeline::ListingAsk::of(&server.scope(), &inbound, fwd.evidence());
        // A list the gateway rewrites must come uncompressed: a compressed one could not be
        // read, so it would be withheld.
        if listing.is_some() {
            inbound.head.headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        }
        let request_id = inbound.request_id.clone();
        let started = Instant::now();
        let result = server.upstream.forward(inbound, &fwd, &attach).instrument(stage_span(Stage::Upstream)).await;
        trail.timings.record(Stage::Upstream, started.elapsed());
        // Section F: a backend that refuses the credential the gateway attached is an operator's
        // problem; the client gets 502, never the backend's challenge (it would send the client
        // to the backend's issuer), and the credential is not used again.
        let result = match result {
            Ok(resp) if matches!(attach, crate::upstream_auth::Attach::Header(..)) && matches!(resp.status().as_u16(), 401 | 403) => {
                let status = resp.status().as_u16();
                drop(resp);
                server.credentials().forget(&attach);
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    warn!(server = %server.config.name, status, similar_held_back = held, "The backend refused the credential the gateway attached (upstream.auth): check the credential and the backend's configuration; clients get 502 upstream_credentials_rejected");
                }
                Err(UpstreamError::CredentialsRejected(status))
            }
            other => other,
        };
        // A standalone stream (GET) counts against its server's `upstream.max_streams` until it
        // ends; the permit was taken before anything was sent.
        let result = match (result, stream_permit) {
            (Ok(resp), Some(permit)) if is_event_stream(resp.headers()) => Ok(crate::servers::holding(server, resp, permit)),
            (other, _) => other,
        };
        let result = match (result, listing) {
            // The visible tools are worked out only for an answer that is read.
            (Ok(resp), Some(ask)) if ask.reads(resp.status(), resp.headers()) => {
                match pipeline::list_filter(&self.stages, &server.scope(), &ask, fwd.evidence(), self.config.limits.max_inspected_response) {
                    Some(f) => self.filter_list(server, resp, crate::catalog::filter::ListFilter { cuts: Some(self.metrics.uninspectable_cuts()), ..f }).await,
                    None => Ok(resp),
                }
            }
            (other, _) => other,
        };
        trail.seen = fwd.into_evidence();
        let resp = match result {
            // A first idempotent call: its answer is recorded as it streams.
            Ok(resp) => crate::idempotency::record(&mut trail.seen.idempotency, resp).await,
            Err(e) => {
                crate::idempotency::release(&mut trail.seen.idempotency).await;
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    warn!(error.code = e.code(), error = %e, server = %server.config.name, upstream = %server.config.upstream.url, similar_held_back = held, "Upstream request failed (each one is counted in portcullis_upstream_errors_total)");
                }
                self.metrics.upstream_error(e.code());
                let r = decision::respond_upstream(&e, &request_id);
                trail.upstream_error = Some(e);
                r
            }
        };
        self.settle_session(server, &exchange, trail, Answered { outcome, summary, resp }, &request_id).await
    }

    /// A request the mode let through but that is refused before anything was sent: what it
    /// verified goes to the log, and its journal reservation is released (the call was not made).
    async fn refuse_unsent(&self, server: &Server, fwd: Forward, denial: &Denial, trail: &mut Trail, request_id: &str) -> Answered {
        trail.seen = fwd.into_evidence();
        crate::idempotency::release(&mut trail.seen.idempotency).await;
        self.refuse(denial, request_id, Some(server))
    }

    /// The backend's credential for a request the mode let through (`upstream.auth`). One that
    /// cannot be had is a refusal of the `upstream_auth` stage: returned when the default group
    /// enforces, else a finding, and the request goes on without a credential.
    async fn credential(
        &self,
        server: &Server,
        headers: &http::HeaderMap,
        fwd: &Forward,
        now: UnixTime,
        trail: &mut Trail,
    ) -> Result<crate::upstream_auth::Attach, Denial> {
        let credentials = server.credentials();
        // `none` does nothing: no stage span, no time in the log.
        if credentials.kind() == "none" {
            trail.upstream_auth = (Some("none"), None);
            return Ok(crate::upstream_auth::Attach::Nothing);
        }
        let started = Instant::now();
        let got = credentials.credential(headers, fwd.evidence(), fwd.findings(), now).instrument(stage_span(Stage::UpstreamAuth)).await;
        trail.timings.record(Stage::UpstreamAuth, started.elapsed());
        let error = match got {
            Ok(c) => {
                trail.upstream_auth = (Some(c.kind), c.cached);
                return Ok(c.attach);
            }
            Err(e) => e,
        };
        if let crate::upstream_auth::CredentialError::Unavailable(reason) = &error {
            static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
            if let Some(held) = THROTTLE.admit() {
                warn!(error.code = "upstream_credentials_unavailable", error = %reason, similar_held_back = held, "No upstream credential could be obtained");
            }
        }
        let denial = Denial::from(error);
        let finding = Finding::new(Stage::UpstreamAuth, &denial);
        let withheld = decision::withholds(&server.config.mode, &finding);
        trail.findings.push(finding);
        if withheld {
            trail.upstream_auth = (Some(credentials.kind()), None);
            return Err(denial);
        }
        trail.upstream_auth = (Some("none"), None);
        Ok(crate::upstream_auth::Attach::Nothing)
    }

    /// Decision 9: binds a session id the backend just issued to the request's identity before
    /// the client sees it. A binding that cannot be made is a refusal like any other: the
    /// backend's answer is withheld in enforce mode, passed on and logged in monitor mode.
    async fn settle_session(&self, server: &Server, exchange: &crate::session::Exchange, trail: &mut Trail, sent: Answered, request_id: &str) -> Answered {
        let settled = pipeline::settle_session(&self.stages, exchange, sent.resp.status(), sent.resp.headers(), &trail.seen, &mut trail.timings).await;
        let Err(denial) = settled else { return sent };
        let finding = Finding::new(Stage::Session, &denial);
        let withheld = decision::withholds(&server.config.mode, &finding);
        trail.findings.push(finding);
        if withheld {
            return self.refuse(&denial, request_id, Some(server));
        }
        Answered { outcome: Outcome::WouldDeny, summary: sent.summary.or(Some((denial.code(), denial.reason()))), resp: sent.resp }
    }

    /// `tools.filter_list`: a `tools/list` answer (or any list in an event stream) loses the
    /// tools this caller could not call (the policy group enforcing); in monitor mode it passes
    /// whole and the count it would have lost is logged. An answer too large to inspect is
    /// withheld, never passed unfiltered.
    async fn filter_list(
        &self,
        server: &Server,
        resp: Response<ResponseBody>,
        filter: crate::catalog::filter::ListFilter,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        if !decision::filters_lists(&server.config.mode) {
            if filter.is_listing {
                let known = server.catalog.as_ref().and_then(|c| c.snapshot()).map_or(0, |s| s.len());
                info!(would_hide = known.saturating_sub(filter.visible.len()), "monitor mode: tools/list passed unfiltered");
            }
            return Ok(resp);
        }
        crate::catalog::filter::rewrite(resp, filter).await.map_err(|e| UpstreamError::Uninspectable(e.to_string()))
    }

    /// The refusal response for `denial`, with its log summary (the decision log and the
    /// metrics say it; no diagnostic line per refusal).
    pub(super) fn refuse(&self, denial: &Denial, request_id: &str, server: Option<&Server>) -> Answered {
        tracing::debug!(error.code = denial.code(), "Request refused");
        let challenge = server.map_or(&self.fallback_challenge, |s| &s.challenge);
        Answered { outcome: Outcome::Deny, summary: Some((denial.code(), denial.reason())), resp: decision::respond(denial, request_id, challenge) }
    }

    /// Record: the request's one decision-log line and its metrics, from its trail and its
    /// answer; the response goes out with its `x-request-id`.
    pub(super) fn record(&self, trail: Trail, answered: Answered, req: &Logged<'_>) -> Response<ResponseBody> {
        let Trail { timings, seen, findings, idempotency, upstream_error, upstream_auth, claimed_agent, signed } = trail;
        let Answered { outcome, summary, resp } = answered;
        let mode = req.server.map_or(&self.config.mode, |s| &s.config.mode);
        if matches!(outcome, Outcome::WouldDeny) {
            monitor_notice(mode, &self.config.log.decisions);
        }
        let total = req.at.elapsed();
        // Without a decision log only the metrics read the record: no timestamp to format.
        let logged = self.log.is_on();
        let record = DecisionRecord {
            time: if logged { rfc3339(req.wall) } else { String::new() },
            // What the client was answered: a failed forward's error, even where a monitored
            // refusal was forwarded (that refusal stays the first of `findings`), so a 502 is
            // never blamed on a stage that blocked nothing.
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
            upstream_auth: upstream_auth.0,
            upstream_auth_cached: upstream_auth.1,
            total_us: total.as_micros() as u64,
            ..DecisionRecord::new(mode, req.server.map_or("-", |s| s.name), req.request_id, req.method, req.path, outcome.as_str(), resp.status().as_u16())
        };
        let record = if logged { record.with_timings(&timings) } else { record };
        self.metrics.observe(&record, &timings, total, req.server.map(Server::stage_series));
        self.log.write(&record);
        with_request_id(resp, req.request_id)
    }

    /// The decision-log line for something that happened on an approval page: a wrong user
    /// (`approval_wrong_user`) or a decision (`approval_approved` / `approval_denied`).
    fn log_approval_event(&self, event: &crate::approval::page::PageEvent, wall: SystemTime, request_id: &str) {
        use crate::approval::page::PageEvent;
        use crate::state::approval::Choice;
        let (outcome, status, id, sub, server) = match event {
            PageEvent::WrongUser { approval_id, login_sub, server } => ("approval_wrong_user", 403, approval_id, login_sub, server),
            PageEvent::Decided { approval_id, choice: Choice::Approve, by, server } => ("approval_approved", 200, approval_id, by, server),
            PageEvent::Decided { approval_id, choice: Choice::Deny, by, server } => ("approval_denied", 200, approval_id, by, server),
        };
        // The server the approved call is for (a name from the config; an approval stored before
        // a reload removed its server still names it).
        // Looked up in the running table (never interned from the store: a stored name this
        // config does not have is logged as `-`).
        let table = self.servers.load();
        let server = table.named(server).map_or("-", |s| s.name);
        let record = DecisionRecord {
            time: rfc3339(wall),
            sub: Some(sub.as_str()),
            approval_id: Some(id.as_str()),
            approved_by: matches!(event, PageEvent::Decided { choice: Choice::Approve, .. }).then_some(sub.as_str()),
            ..DecisionRecord::new(&self.config.mode, server, request_id, "POST", &self.config.approvals.path, outcome, status)
        };
        self.log.write(&record);
    }
}

/// The outcome and the decision log's `error`/`reason` of a forwarded request.
fn forward_summary(fwd: &Forward) -> (Outcome, Option<(&'static str, String)>) {
    match fwd.monitored() {
        None => (Outcome::Allow, None),
        Some(d) => (Outcome::WouldDeny, Some((d.code(), d.reason()))),
    }
}

/// Whether an answer with `headers` is an event stream.
fn is_event_stream(headers: &http::HeaderMap) -> bool {
    portcullis_wire::tool_list::is_event_stream(headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()))
}
