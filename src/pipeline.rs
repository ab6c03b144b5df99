//! The pipeline: runs the stages of docs/design.md "The pipeline" in order, and judges each.
//!
//! This is the only place a [`Permit`] or a [`Refusal`] is made: both carry the [`Evidence`]
//! the stages verified, privately, and `decision::apply_mode` turns them into the only thing
//! the proxy forwards. Stages never see the mode: they return their own error, which converts
//! into a [`Denial`], and a [`Judge`] notes it as a finding. In enforce mode the first finding
//! decides and nothing after it runs (no JSON is parsed before the identity stages pass); for a
//! stage group in monitor mode judging goes on, each later stage on what was verified (policy
//! sees `agent.verified = false` for a failed signature), so the decision log lists every
//! stage that would refuse the request.
//! Stage 1 (bounded body read) happens in `server`, before an [`Inbound`] exists; stage 11
//! (forwarding) happens in `proxy`, after the mode is applied.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

use crate::catalog::Catalog;
use crate::config::{Config, ConfigError, FieldError};
use crate::config::{Group, Modes};
use crate::denial::Denial;
use crate::directory::{KeyResolver, ResolvedKey};
use crate::evidence::{Evidence, PolicyTrace};
use crate::finding::{Finding, Judge, Judged};
use crate::inbound::Inbound;
use crate::oauth::{Binding, Presented, TokenVerifier};
use crate::policy::{AgentView, CatalogView, Policy, PolicyError, PolicyInput, RequestView, TokenView};
use crate::quota::{QuotaError, QuotaSpec, Quotas};
use crate::replay::ReplayGuard;
use crate::session::{self, SessionGuard};
use crate::signature::{PendingSignature, SignatureError, SignatureVerifier, VerifiedSignature};
use crate::stage::{stage_span, Stage, StageTimings};
use crate::state::admit::Admission;
use crate::state::Stores;
use crate::telemetry::DirectoryMetrics;
use portcullis_wire::digest::DigestCheck;
use portcullis_wire::mcp::{self, McpRequest};

/// The header a client resumes an event stream with (WHATWG HTML §9.2; MCP Streamable HTTP).
const LAST_EVENT_ID: &str = "last-event-id";

/// The result of running the pipeline on one request.
pub type Decision = Result<Permit, Refusal>;

/// Proof that every configured stage passed, carrying what they verified. Its field is
/// private: only [`check`] makes one, and only `decision::apply_mode` turns it into a forward.
#[derive(Debug)]
pub struct Permit {
    evidence: Evidence,
}

impl Permit {
    /// What the stages verified.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// The evidence, once the request is done.
    pub fn into_evidence(self) -> Evidence {
        self.evidence
    }
}

/// The stages' refusals with what the stages verified (in monitor mode the request is
/// forwarded with exactly that identity). Only [`check`] makes one.
#[derive(Debug)]
pub struct Refusal {
    denial: Denial,
    findings: Vec<Finding>,
    evidence: Evidence,
}

impl Refusal {
    /// The refusal that decides: the first from a stage group in enforce mode, else the first
    /// finding. Its code and reason are the decision log's `error` and `reason`.
    pub fn denial(&self) -> &Denial {
        &self.denial
    }

    /// Every refusal found, in pipeline order.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// Whether a finding comes from a stage group `modes` enforces: then the request is refused.
    pub fn is_enforced(&self, modes: &Modes) -> bool {
        self.findings.iter().any(|f| f.is_enforced(modes))
    }

    /// What was verified before the refusal.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// The parts, once the request is done.
    pub fn into_parts(self) -> (Denial, Vec<Finding>, Evidence) {
        (self.denial, self.findings, self.evidence)
    }
}

#[cfg(test)]
impl Permit {
    /// A permit for tests of what happens after the pipeline.
    pub(crate) fn for_test(evidence: Evidence) -> Permit {
        Permit { evidence }
    }
}

#[cfg(test)]
impl Refusal {
    /// A refusal for tests of what happens after the pipeline.
    pub(crate) fn for_test(denial: Denial) -> Refusal {
        Refusal { findings: vec![Finding::of(&denial)], denial, evidence: Evidence::default() }
    }
}

/// What the stages need of the MCP server a request is for (`servers::Server::scope`): one
/// value, handed to every stage, so each decides for the server the request was routed to.
#[derive(Clone, Copy)]
pub struct ServerScope<'a> {
    /// Its name (`default` in the single-server form).
    pub name: &'static str,
    /// Its mode.
    pub mode: Modes,
    /// The audience its tokens must name.
    pub audience: &'a str,
    /// Its tool catalog.
    pub catalog: Option<&'a Arc<Catalog>>,
    /// `input.server`.
    pub input: &'a regorus::Value,
    /// `[[servers]]`: quotas are counted per server.
    pub is_many: bool,
}

/// Every stage, built once from the config at start.
#[derive(Debug)]
pub struct Stages {
    digest: DigestCheck,
    is_signature_required: bool,
    signature: SignatureVerifier,
    directory: KeyResolver,
    replay: ReplayGuard,
    /// The replay and quota stores `state.store` chose.
    stores: Stores,
    /// Stage 7; `None` when `[oauth]` names no issuer and tokens are not required.
    token: Option<TokenVerifier>,
    /// Decision 9: session ids bound to their owner.
    sessions: SessionGuard,
    /// Stage 9 (public for the admin endpoints: reload health, version).
    pub policy: Policy,
    /// `policy.enabled`: whether stages 8–10 run.
    is_policy_enabled: bool,
    /// `limits.max_batch`, for stage 8.
    max_batch: usize,
    /// `mcp.versions`, for stage 8.
    versions: Vec<String>,
    quotas: Quotas,
    /// The idempotency journal.
    idempotency: crate::idempotency::Idempotency,
    /// Human approval (public for the approval pages the server serves).
    pub approvals: crate::approval::Approvals,
    /// Whether stage 6 may defer the replay records to the admission point, to write them in
    /// the same Redis round trip as the quotas (`state::admit`): a single Redis server and the
    /// policy on; it does for a server whose identity and policy groups enforce.
    defers_replay: bool,
}

impl Stages {
    /// Builds every stage from its own config section. Fails naming each bad field.
    pub fn build(config: &Config) -> Result<Stages, ConfigError> {
        let sig = &config.signatures;
        let mut errors = Vec::new();
        let directory = KeyResolver::new(&sig.directory).map_err(|e| errors.push(e));
        // Without an issuer and without `required`, there is no user authority to check: the
        // stage is off and the inbound `Authorization` is only stripped (proxy).
        let stores = Stores::from_config(&config.state, &config.idempotency).map_err(|e| errors.push(e));
        let token = if config.oauth.is_enabled() {
            // A proof's `htu` may name any authority the gateway answers to (decision 3).
            let mut oauth = config.oauth.clone();
            // `[[servers]]`: each request names its server's resource (`check_for`).
            if config.servers.iter().any(|s| s.form == crate::config::Form::Many) {
                oauth.audience = String::new();
            }
            if let Some(dpop) = &mut oauth.dpop {
                let scheme = config.listen.public_url.scheme();
                dpop.origins.extend(sig.authority.iter().map(|a| format!("{scheme}://{a}")));
            }
            let verifier = TokenVerifier::new(&oauth).map_err(|e| errors.push(e)).ok();
            // Proofs' `jti`s in the replay store: with Redis, each proof is used once across instances.
            verifier.map(|v| match &stores {
                Ok(s) => v.with_proof_store(s.replay.clone()),
                Err(()) => v,
            })
        } else {
            None
        };
        let policy = Policy::new(&config.policy)
            .map(|p| p.with_budget(config.limits.policy_budget))
            .map_err(|e| errors.push(FieldError::new("policy.paths", e.to_string())));
        let approvals = match &stores {
            Ok(s) => crate::approval::Approvals::new(&config.approvals, &config.oauth, s.approval.clone()).map_err(|e| errors.push(e)),
            Err(()) => Err(()),
        };
        let (Ok(directory), Ok(stores), Ok(policy), Ok(approvals), true) = (directory, stores, policy, approvals, errors.is_empty()) else {
            return Err(ConfigError::Invalid { origin: config.origin.clone(), errors });
        };
        Ok(Stages {
            digest: DigestCheck::new(sig.requires_digest()),
            is_signature_required: sig.required,
            signature: SignatureVerifier::new(sig),
            directory,
            replay: ReplayGuard::new(sig.clock_skew, stores.replay.clone()),
            token,
            sessions: SessionGuard::new(stores.session.clone(), config.state.session_ttl, config.limits.max_sessions_per_caller),
            policy,
            is_policy_enabled: config.policy.enabled,
            max_batch: config.limits.max_batch,
            versions: config.mcp.versions.clone(),
            quotas: Quotas::new(stores.quota.clone()),
            idempotency: crate::idempotency::Idempotency::new(&config.idempotency, &stores),
            approvals,
            defers_replay: stores.admit.is_some() && config.policy.enabled,
            stores,
        })
    }

    /// `Accept-Signature` value for agent-credential refusals (RFC 9421 §5.1).
    pub fn accept_signature(&self) -> &str {
        self.signature.accept_signature()
    }

    /// The identity stages' counters (directory fetches by result, replay hits) to register.
    pub fn identity_counters(&self) -> (DirectoryMetrics, Counter) {
        (self.directory.metrics(), self.replay.hit_counter())
    }

    /// The legacy `Signature-Agent` counter, to register with the metrics.
    pub fn legacy_agent_counter(&self) -> Counter {
        self.signature.legacy_agent_counter()
    }

    /// The shared store's error counter, when `state.store` is Redis.
    pub fn state_errors(&self) -> Option<Counter> {
        self.stores.redis.as_ref().map(|r| r.error_counter())
    }

    /// Whether the shared state store answers (`/readyz` detail). `Ok` for the memory store.
    pub async fn state_check(&self) -> Result<(), crate::state::StoreError> {
        match &self.stores.redis {
            Some(r) => r.ping().await,
            None => Ok(()),
        }
    }

    /// The idempotency journal's counters, to register with the metrics.
    pub fn idempotency_metrics(&self) -> &crate::idempotency::IdempotencyMetrics {
        self.idempotency.metrics()
    }

    /// The token stage's counters, to register with the metrics.
    pub fn token_metrics(&self) -> Option<&crate::telemetry::TokenMetrics> {
        self.token.as_ref().map(TokenVerifier::metrics)
    }
}

/// Runs stages 2–10 of docs/design.md in order and judges each (see the module docs). The
/// decision carries what was verified and, when a stage refused, every finding; `timings` gets
/// each stage's latency.
pub async fn check(req: &Inbound, stages: &Stages, server: &ServerScope<'_>, timings: &mut StageTimings) -> Decision {
    let mut seen = Evidence::default();
    let mut judge = Judge::new(server.mode);
    let outcome = run(req, stages, server, &mut seen, timings, &mut judge).await;
    match judge.finish(outcome) {
        None => Ok(Permit { evidence: seen }),
        Some(Judged { decisive, findings }) => Err(Refusal { denial: decisive, findings, evidence: seen }),
    }
}

/// The stages in order. A refusal is noted by `judge`, which stops the run (`?`) when the
/// stage's group is in enforce mode; otherwise the next stages run without what failed.
async fn run(
    req: &Inbound,
    stages: &Stages,
    server: &ServerScope<'_>,
    seen: &mut Evidence,
    timings: &mut StageTimings,
    judge: &mut Judge,
) -> Result<(), Denial> {
    let mut deferred = None;
    run_stages(req, stages, server, seen, timings, judge, &mut deferred).await?;
    // A request that got this far without reaching the admission point (policy off, or an
    // early return) still records its signature before it is forwarded.
    if let Some(keys) = deferred.take() {
        judge.judge(Stage::Replay, timings.timed_async(Stage::Replay, stages.replay.check_keys(&keys)).await)?;
    }
    Ok(())
}

/// The stages in order. With `stages.defers_replay` (one Redis server, identity and policy enforcing),
/// stage 6 only computes the signature's replay records (`deferred`); they are written at the
/// admission point after the decision, in the same round trip as the quotas when the decision
/// needs neither an approval nor the journal, else on their own just before those. Nothing is
/// forwarded or reserved before they are written, and a replayed copy spends nothing.
async fn run_stages(
    req: &Inbound,
    stages: &Stages,
    server: &ServerScope<'_>,
    seen: &mut Evidence,
    timings: &mut StageTimings,
    judge: &mut Judge,
    deferred: &mut Option<crate::state::admit::ReplayKeys>,
) -> Result<(), Denial> {
    // A large body is hashed off the async workers (the wait for a turn is in the stage's time).
    let hashes = req.head.headers.contains_key(portcullis_wire::digest::CONTENT_DIGEST);
    let digest = timings
        .timed_async(
            Stage::Digest,
            stages.policy.off_workers("digest", if hashes { req.body.len() } else { 0 }, || stages.digest.verify(&req.head.headers, &req.body)),
        )
        .await;
    judge.judge(Stage::Digest, digest)?;
    // Stages 3–5 (signature, key, signature): the finding names the one that refused.
    let resolved = judge.judge_any(timings.timed_async(Stage::Signature, resolve_signature(req, stages)).await)?.flatten();
    let verified = match resolved {
        Some((pending, key)) => {
            // Outside the stage's time: the wait shows in the request's.
            yield_before_long_section().await;
            judge.judge_any(timings.timed(Stage::Signature, || pending.verify(key.key(), key.agent())).map_err(Denial::from))?
        }
        None => None,
    };
    if let Some(agent) = verified {
        // Stage 6. In monitor mode a replayed copy is noted, not recorded again (the store keeps
        // the first use), and it must not carry the identity upstream. A copy whose body does
        // not match its digest (a finding already, in monitor mode) is not recorded either: a
        // tampered copy that arrives first must not turn the real request into a replay.
        let fresh = if judge.has_found(Group::Identity) {
            None
        } else if stages.defers_replay && server.mode.is_enforcing(Group::Identity) && server.mode.is_enforcing(Group::Policy) {
            *deferred = Some(stages.replay.keys(&agent, req.now));
            Some(())
        } else {
            judge.judge(Stage::Replay, timings.timed_async(Stage::Replay, stages.replay.check_once(&agent, req.now)).await)?
        };
        // Only a complete identity names the agent: a signature over a body that does not match
        // its digest, or a replayed one, is not this agent's request.
        if fresh.is_some() && !judge.has_found(Group::Identity) {
            seen.agent = Some(agent);
        }
    }
    if let Some(verifier) = &stages.token {
        // The agent's key, when stages 3–6 verified it: a DPoP proof by that key binds the
        // token to this agent (`agent_key`).
        let presented = Presented {
            method: req.head.method.as_str(),
            path: req.head.uri.path(),
            headers: &req.head.headers,
            body: &req.body,
            now: req.now,
            agent_key: seen.agent.as_ref().map(VerifiedSignature::key),
        };
        let token = timings
            .timed_async(Stage::Token, async {
                verifier.check_query(&req.head.uri)?;
                verifier.check_for(&presented, Some(server.audience)).await
            })
            .await;
        if let Some(authenticated) = judge.judge(Stage::Token, token)?.flatten() {
            seen.token = Some(authenticated.token);
            seen.binding = Some(authenticated.binding);
        }
    }
    // Decision 11: a stream is resumed (`Last-Event-ID`) only within a session, which the next
    // check binds to this caller: an event id alone must not replay another caller's events.
    if req.head.headers.contains_key(LAST_EVENT_ID) && !req.head.headers.contains_key(portcullis_wire::mcp::SESSION_ID_HEADER) {
        judge.judge(Stage::Session, Err::<(), _>(Denial::ResumeWithoutSession))?;
    }
    // Decision 9: once the identity is verified, a session is only its owner's. Without a
    // verified identity (monitor mode) the owner is unknown: that is already a finding.
    if req.head.headers.contains_key(portcullis_wire::mcp::SESSION_ID_HEADER) && !judge.has_found(Group::Identity) && !judge.has_found(Group::Token) {
        let owner = session::owner(seen);
        judge.judge(Stage::Session, timings.timed_async(Stage::Session, stages.sessions.check(&req.head.headers, &owner, server.name)).await)?;
    }
    if !stages.is_policy_enabled {
        return Ok(());
    }
    // Stage 8: JSON only now, after the identity stages passed on the raw bytes (or, for a
    // group in monitor mode, were judged: the body is forwarded anyway).
    // A large body is parsed off the async workers, like its policy evaluation.
    let parsing = stages.policy.off_workers("mcp", req.body.len(), || mcp::parse_bounded(&req.head.method, &req.head.headers, &req.body, stages.max_batch));
    let parsed = timings.timed_async(Stage::Mcp, parsing).await;
    let Some(parsed) = judge.judge(Stage::Mcp, parsed)? else { return Ok(()) };
    // A protocol version outside mcp.versions is a finding of its own: in monitor mode the
    // log still names the method and tool the body asks for.
    let version = mcp::check_version(&parsed, &stages.versions);
    seen.mcp = Some(parsed);
    judge.judge(Stage::Mcp, version)?;
    // The tool catalog, before policy: policy reads what the gateway knows of the tool.
    if let (Some(catalog), Some(mcp)) = (server.catalog, &seen.mcp) {
        let looked = timings.timed_async(Stage::Catalog, catalog.check(mcp, &req.head.headers)).await;
        let verdict = looked.verdict();
        seen.tool_definitions = looked.definitions;
        // An Mcp-Param-* header that disagrees with the arguments is the MCP stage's finding.
        let stage = if matches!(verdict, Err(crate::catalog::CatalogError::HeaderMismatch { .. })) { Stage::Mcp } else { Stage::Catalog };
        judge.judge(stage, verdict)?;
    }
    let authorized = {
        yield_before_long_section().await;
        // A batch or a large body is decided off the async workers, one per core at a time;
        // it waits for its turn here (policy::Policy::turn).
        let _turn = timings.timed_async(Stage::Policy, stages.policy.turn(seen.mcp.as_ref())).await;
        authorize(req, stages, server, seen, timings)
    };
    // A denial wins: the quotas and journal a denied call names are not used.
    let Some((mut quotas, key_use, approval)) = judge.judge(Stage::Policy, authorized)? else { return Ok(()) };
    // Section F: a quota counts per server unless it says `"scope": "global"` (the single
    // server's keys are as they always were).
    if server.is_many {
        for q in quotas.iter_mut().filter(|q| !q.global) {
            // The unit separator keeps a server's buckets apart from every global key.
            q.key = format!("{}\u{1f}{}", server.name, q.key);
        }
    }
    // The admission point of a deferred replay check (see `run_stages`).
    if let Some(keys) = deferred.take() {
        if let (Some(admit), None, None) = (&stages.stores.admit, &approval, &key_use) {
            let admitted = timings.timed_async(Stage::Replay, admit.admit(&keys, &quotas, req.now)).await;
            return match admitted {
                Ok(Admission::Admitted) => Ok(()),
                Ok(Admission::Replayed) => judge.judge(Stage::Replay, Err::<(), _>(stages.replay.replayed())).map(|_| ()),
                Ok(Admission::Exhausted { index, retry_after }) => {
                    let key = quotas.get(index).map(|q| q.key.clone()).unwrap_or_default();
                    seen.quota_exhausted = Some(key.clone());
                    judge.judge(Stage::Quota, Err::<(), _>(QuotaError::Exhausted { key, retry_after })).map(|_| ())
                }
                Err(e) => judge.judge(Stage::Replay, Err::<(), _>(crate::replay::ReplayError::Store(e))).map(|_| ()),
            };
        }
        judge.judge(Stage::Replay, timings.timed_async(Stage::Replay, stages.replay.check_keys(&keys)).await)?;
    }
    // An allowed call that needs a person's approval waits for it: nothing is spent until the
    // approved retry is forwarded. In monitor mode no link is issued (a finding, forwarded).
    if let Some(ask) = approval {
        let none = McpRequest::default();
        let call = crate::approval::CallView {
            mcp: seen.mcp.as_ref().unwrap_or(&none),
            body: &req.body,
            sub: seen.token.as_ref().and_then(|t| t.sub()),
            agent: seen.agent.as_ref().map(|a| a.agent()),
            keyid: seen.agent.as_ref().map(|a| a.keyid()),
            caller: seen.caller(req.peer.addr.ip()),
            server: server.name,
        };
        let checked = stages.approvals.check(call, &ask, server.mode.is_enforcing(Group::Policy), req.now).await;
        seen.approval = judge.judge(Stage::Approval, checked)?;
    }
    if let Some(key_use) = key_use {
        let caller = crate::idempotency::Caller {
            sub: seen.token.as_ref().and_then(|t| t.sub()),
            agent: seen.agent.as_ref().map(|a| a.agent()),
            key: seen.caller(req.peer.addr.ip()),
        };
        let claimed = stages.idempotency.claim(req, server.name, caller, seen.mcp.as_ref(), key_use);
        let Some(claim) = judge.judge(Stage::Idempotency, timings.timed_async(Stage::Idempotency, claimed).await)? else { return Ok(()) };
        seen.idempotency = claim;
        // A replayed answer spends no quota: the call is not executed again.
        if seen.idempotency.as_ref().is_some_and(crate::idempotency::Claim::is_replay) {
            return Ok(());
        }
    }
    let spent = timings.timed_async(Stage::Quota, stages.quotas.spend(&quotas, req.now)).await;
    if let Err(QuotaError::Exhausted { key, .. }) = &spent {
        seen.quota_exhausted = Some(key.clone());
    }
    judge.judge(Stage::Quota, spent)?;
    Ok(())
}

/// Decision 9, on the backend's response head (before it is passed on): binds a new
/// `Mcp-Session-Id` to the identity `seen` verified, or removes an ended session's binding.
pub async fn settle_session(
    stages: &Stages,
    exchange: &session::Exchange,
    status: http::StatusCode,
    headers: &http::HeaderMap,
    seen: &Evidence,
    timings: &mut StageTimings,
) -> Result<(), Denial> {
    if !exchange.needs_settling(status, headers) {
        return Ok(());
    }
    let owner = session::owner(seen);
    let caller = seen.caller(exchange.peer());
    Ok(timings.timed_async(Stage::Session, stages.sessions.settle(exchange, status, headers, &owner, caller)).await?)
}

/// What [`list_filter`] needs of a request, kept past its forwarding (which takes the request).
#[derive(Debug)]
pub struct ListingAsk {
    method: http::Method,
    path: String,
    host: String,
    now: portcullis_wire::UnixTime,
    /// The request holds `tools/list`: its JSON answer is read too.
    is_listing: bool,
}

impl ListingAsk {
    /// `Some` when lists are filtered (`tools.filter_list`): every answer the client can read
    /// may carry one.
    pub fn of(server: &ServerScope<'_>, req: &Inbound, seen: &Evidence) -> Option<ListingAsk> {
        server.catalog.filter(|c| c.filter_list)?;
        let is_listing = seen.mcp.as_ref().is_some_and(|m| m.messages.iter().any(|m| m.method.as_deref() == Some("tools/list")));
        Some(ListingAsk { method: req.head.method.clone(), path: req.head.uri.path().to_owned(), host: req.authority.clone(), now: req.now, is_listing })
    }

    /// Whether the answer with `status` and `headers` is read: a successful event stream
    /// (whatever the request), or the successful answer to a request holding `tools/list`.
    pub fn reads(&self, status: http::StatusCode, headers: &http::HeaderMap) -> bool {
        let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        status.is_success() && (self.is_listing || portcullis_wire::tool_list::is_event_stream(content_type))
    }
}

/// Filtered lists (`tools.filter_list`, docs/catalog.md): for every answer the client can read
/// — the answer to a request holding `tools/list` (alone or in a batch), and every event stream
/// whatever opened it (a POST, a resumed or standalone GET: decision 11, a stream may replay a
/// list answered earlier) — the tools this caller could call: those the pins let through, each
/// allowed by the policy asked as if the caller called it (`input.mcp.listing = true`, no
/// arguments; an approval or quota in that decision does not hide it, missing scopes do).
/// Worked out only for an answer [`ListingAsk::reads`] (the policy is asked once per catalogued
/// tool). Without a catalog nothing is shown: the gateway cannot vouch for any tool; nor for a
/// tool the catalog does not know.
pub fn list_filter(
    stages: &Stages,
    server: &ServerScope<'_>,
    ask: &ListingAsk,
    seen: &Evidence,
    max_inspected: usize,
) -> Option<crate::catalog::filter::ListFilter> {
    let catalog = server.catalog.filter(|c| c.filter_list)?;
    let no_messages = McpRequest::default();
    let mcp = seen.mcp.as_ref().unwrap_or(&no_messages);
    let listing = mcp.messages.iter().find(|m| m.method.as_deref() == Some("tools/list"));
    let is_listing = ask.is_listing;
    let hide_all = crate::catalog::filter::ListFilter { visible: std::collections::HashMap::new(), max_inspected, is_listing, cuts: None };
    // Claims the policy cannot be given: nothing can be shown (fail closed).
    let Ok(claims) = seen.token.as_ref().map(|t| t.policy_claims()).transpose() else { return Some(hide_all) };
    let agent = seen.agent.as_ref().map(|a| AgentView { id: a.agent(), keyid: a.keyid(), tag: a.tag() });
    let binding = seen.binding.unwrap_or(Binding::None).as_str();
    let token = seen.token.as_ref().zip(claims.as_ref()).map(|(t, claims)| TokenView {
        iss: t.iss(),
        sub: t.sub().unwrap_or(""),
        aud: t.aud(),
        scopes: t.scopes(),
        binding,
        claims,
    });
    let request = RequestView { method: ask.method.as_str(), path: &ask.path, host: &ask.host };
    let mut visible = std::collections::HashMap::new();
    for (name, digest, view) in catalog.callable_tools() {
        let call = mcp::McpMessage {
            kind: mcp::MessageKind::Request,
            method: Some("tools/call".to_owned()),
            id: None,
            tool: Some(name.clone()),
            arguments: None,
            uri: None,
            prompt: None,
            meta_version: None,
            client_info: listing.and_then(|m| m.client_info.clone()),
        };
        let asked = McpRequest { messages: vec![call], session: mcp.session.clone(), protocol_version: mcp.protocol_version.clone(), ..McpRequest::default() };
        let definitions = [(name, view)];
        let input = PolicyInput {
            request,
            server: server.input,
            agent,
            token,
            mcp: &asked,
            catalog: CatalogView { definitions: &definitions, is_listing: true },
            now: ask.now,
        };
        let allowed = stages.policy.decide(&input).is_ok_and(|d| d.verdict.allow && check_scopes(&d.verdict.required_scopes, token.as_ref()).is_ok());
        if allowed {
            let [(name, _)] = definitions;
            visible.insert(name, digest);
        }
    }
    Some(crate::catalog::filter::ListFilter { visible, max_inspected, is_listing, cuts: None })
}

/// Stages 3–4: parse and check the signature, resolve its key; the caller verifies it (stage
/// 5) with the key. `Ok(None)`: the request is unsigned and signatures are optional (it
/// continues with no agent).
async fn resolve_signature(req: &Inbound, stages: &Stages) -> Result<Option<(PendingSignature, ResolvedKey)>, Denial> {
    let pending = match stages.signature.prepare(req) {
        Ok(Some(pending)) => pending,
        Ok(None) if stages.is_signature_required => return Err(SignatureError::Missing.into()),
        // Signatures for another application (another `tag`) say nothing about this one:
        // with signatures optional, the request is treated as unsigned.
        Ok(None) | Err(SignatureError::NoTaggedSignature(_)) if !stages.is_signature_required => return Ok(None),
        Ok(None) => return Err(SignatureError::Missing.into()),
        Err(e) => return Err(e.into()),
    };
    let key = stages.directory.resolve(pending.agent(), pending.keyid(), req.now).await?;
    Ok(Some((pending, key)))
}

/// Called before each of a request's two long CPU sections, the Ed25519 verification and the
/// policy decision (tens of µs each, most of a signed request's CPU): gives the async worker
/// back to the scheduler once, so that it runs what is already ready first and polls the
/// sockets before the section runs. tokio polls its sockets only when its run queue is empty
/// (or every 61 tasks), so without this a burst of new requests is verified and decided in
/// one go while the answers the backend already sent for earlier requests wait. With it a
/// burst is taken stage by stage (every request's reads, then every verification, then every
/// decision), answers in between, and the same code and tables run back to back while they
/// are in the caches: on the load bench's full chain (one core, interleaved runs) the CPU per
/// signed request fell by ~16% and the p99 added at half the peak by about a quarter (README,
/// "Performance").
async fn yield_before_long_section() {
    tokio::task::yield_now().await;
}

/// Stage 9: the policy decision, then the scopes it requires. Returns the quotas to spend and
/// whether the call uses the idempotency journal.
type Authorized = (Vec<QuotaSpec>, Option<crate::policy::verdict::KeyUse>, Option<crate::policy::verdict::ApprovalAsk>);

fn authorize(req: &Inbound, stages: &Stages, server: &ServerScope<'_>, seen: &mut Evidence, timings: &mut StageTimings) -> Result<Authorized, Denial> {
    let started = Instant::now();
    let empty = McpRequest::default();
    let (decided, scopes) = stage_span(Stage::Policy).in_scope(|| {
        let agent = seen.agent.as_ref().map(|a| AgentView { id: a.agent(), keyid: a.keyid(), tag: a.tag() });
        let claims = match seen.token.as_ref().map(|t| t.policy_claims()).transpose() {
            Ok(c) => c,
            Err(e) => return (Err(PolicyError::Input { version: stages.policy.version(), reason: format!("token claims: {e}") }), Ok(())),
        };
        let binding = seen.binding.unwrap_or(Binding::None).as_str();
        let token = seen.token.as_ref().zip(claims).map(|(t, claims)| TokenView {
            iss: t.iss(),
            sub: t.sub().unwrap_or(""),
            aud: t.aud(),
            scopes: t.scopes(),
            binding,
            claims,
        });
        let request = RequestView { method: req.head.method.as_str(), path: req.head.uri.path(), host: &req.authority };
        let catalog = CatalogView { definitions: &seen.tool_definitions, is_listing: false };
        let input = PolicyInput { request, server: server.input, agent, token, mcp: seen.mcp.as_ref().unwrap_or(&empty), catalog, now: req.now };
        let decided = stages.policy.decide(&input);
        let scopes = decided.as_ref().map(|d| check_scopes(&d.verdict.required_scopes, token.as_ref())).unwrap_or(Ok(()));
        (decided, scopes)
    });
    timings.record(Stage::Policy, started.elapsed());
    let decided = match decided {
        Ok(d) => d,
        Err(e) => {
            static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
            if let Some(held) = THROTTLE.admit() {
                tracing::warn!(error = %e, similar_held_back = held, "Policy evaluation failed; refusing (each one is in the decision log as policy_error)");
            }
            seen.policy = Some(PolicyTrace { rule: Some("policy_error".to_owned()), version: e.version().to_owned(), upstream_scopes: None });
            return Err(e.into());
        }
    };
    // A batch is decided message by message: its exchanged token may have only what every
    // message's decision allows.
    let upstream_scopes = match (seen.policy.take().and_then(|p| p.upstream_scopes), decided.verdict.upstream_scopes.clone()) {
        (Some(before), Some(now)) => Some(before.into_iter().filter(|s| now.contains(s)).collect()),
        (before, now) => before.or(now),
    };
    seen.policy = Some(PolicyTrace { rule: decided.verdict.rule.clone(), version: decided.version, upstream_scopes });
    if !decided.verdict.allow {
        return Err(Denial::AccessDenied { reason: decided.verdict.reason });
    }
    scopes?;
    Ok((decided.verdict.quotas, decided.verdict.idempotency, decided.verdict.approval))
}

/// `required_scopes` against the token: no token at all → 401 `oauth_required`; missing
/// scopes → 403 `insufficient_scope` naming every scope the operation needs (MCP 2026-07-28:
/// clients union them).
fn check_scopes(required: &[String], token: Option<&TokenView<'_>>) -> Result<(), Denial> {
    if required.is_empty() {
        return Ok(());
    }
    let Some(token) = token else { return Err(Denial::OAuthRequired) };
    if required.iter().all(|r| token.scopes.contains(r)) {
        Ok(())
    } else {
        Err(Denial::InsufficientScope { required: required.to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_builds_with_signatures_required() {
        let config = Config::embedded_default().expect("embedded default validates");
        assert!(config.signatures.required, "monitor-mode default checks signatures");
        let stages = Stages::build(&config).expect("every stage builds");
        assert!(stages.accept_signature().contains("tag=\"web-bot-auth\""), "{}", stages.accept_signature());
    }

    #[test]
    fn bad_directory_settings_are_refused_naming_the_field() {
        let text = crate::config::EMBEDDED_DEFAULT.replace("[signatures]\n", "[signatures]\ntrusted_agents = [\"http://agent.example\"]\n");
        let err = Config::parse(&text, "test", std::path::Path::new(".")).expect_err("plain http directory").to_string();
        assert!(err.contains("signatures.trusted_agents[0]"), "{err}");
    }

    #[test]
    fn required_scopes_without_a_token_ask_for_one_and_missing_scopes_are_listed() {
        let required = vec!["payments:write".to_owned(), "tools:write".to_owned()];
        assert!(matches!(check_scopes(&required, None), Err(Denial::OAuthRequired)));
        let (aud, claims) = (Vec::new(), regorus::Value::new_object());
        let scopes = vec!["tools:write".to_owned()];
        let token = TokenView { iss: "i", sub: "s", aud: &aud, scopes: &scopes, binding: "none", claims: &claims };
        let err = check_scopes(&required, Some(&token)).expect_err("payments:write missing");
        assert!(matches!(err, Denial::InsufficientScope { required: r } if r == required));
        let scopes = required.clone();
        let token = TokenView { scopes: &scopes, ..token };
        assert!(check_scopes(&required, Some(&token)).is_ok());
        assert!(check_scopes(&[], None).is_ok());
    }
}
