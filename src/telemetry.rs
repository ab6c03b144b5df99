//! Telemetry: tracing setup, Prometheus metrics, and the decision log (docs/design.md
//! "Decision log").
//!
//! Metric labels come from small fixed sets (outcome, status, `Denial::code()`, stage name),
//! never from keyids, subjects, tools or paths, so cardinality stays bounded. The decision log
//! is one JSON object per request and never holds token values, signature values, request
//! bodies or tool arguments: [`DecisionRecord`] has no field that could carry them.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::config::DecisionSink;
use crate::stage::{Stage, StageTimings};

/// Like the diagnostic log of [`crate::otel::init_tracing`], but through the test harness's capture, so a failing test prints the
/// gateway's logs and a passing one stays quiet.
pub fn init_test_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().with_target(false).fmt_fields(LogFields).try_init();
}

/// The log's field formatter: the same text as tracing-subscriber's default (`name=value`,
/// separated by spaces, the message bare), written straight to the line when colours are off.
///
/// The default paints every field name through `nu_ansi_term` even with colours off, which
/// was a third of the cost of opening each request's span (its three fields are formatted
/// when it opens): ~2,000 of the pass-through's ~70,000 instructions per request. With colours
/// on, and for the message and error fields (whose escaping of control sequences stays the
/// default's), the default formatter does the work.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogFields;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for LogFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        if writer.has_ansi_escapes() {
            return tracing_subscriber::fmt::format::DefaultFields::new().format_fields(writer, fields);
        }
        let mut visitor = PlainVisitor { writer, is_empty: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// [`LogFields`]'s visitor for a writer without colours.
struct PlainVisitor<'writer> {
    writer: tracing_subscriber::fmt::format::Writer<'writer>,
    is_empty: bool,
    result: std::fmt::Result,
}

impl PlainVisitor<'_> {
    /// The default formatter's visitor, for one field of the kinds it escapes.
    fn by_default(&mut self, record: impl FnOnce(&mut tracing_subscriber::fmt::format::DefaultVisitor<'_>)) {
        use tracing_subscriber::field::VisitOutput;
        let mut default = tracing_subscriber::fmt::format::DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut default);
        self.result = default.finish();
        self.is_empty = false;
    }
}

impl tracing::field::Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.by_default(|v| v.record_str(field, value));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &tracing::field::Field, value: &(dyn std::error::Error + 'static)) {
        self.by_default(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        if name == "message" {
            return self.by_default(|v| v.record_debug(field, value));
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let pad = if std::mem::take(&mut self.is_empty) { "" } else { " " };
        // Only the value goes through the formatting machinery; the rest is copied.
        self.result = (|| {
            self.writer.write_str(pad)?;
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            write!(self.writer, "{value:?}")
        })();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    outcome: &'static str,
    status: u16,
    error: &'static str,
    /// The MCP server (`-` for a request that matched none): names from the config, so the
    /// label's values are bounded.
    server: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
    server: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingLabels {
    stage: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: &'static str,
}

/// Label of the key directory fetch counter: `ok`, or the failure kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// `ok`, `unreachable`, `bad_status`, `bad_media_type`, `too_large`, `malformed`.
    pub result: &'static str,
}

/// Label of the fetch-budget refusal counter: which budget was exhausted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    /// `origin` (`signatures.directory_fetch_budget`) or `global`.
    pub budget: &'static str,
}

/// Counters of key resolution (stage 4): directory fetches by result, and requests refused
/// because a fetch budget was exhausted. Made by the resolver, registered by
/// [`Metrics::register_identity`].
#[derive(Clone, Debug, Default)]
pub struct DirectoryMetrics {
    /// Fetches by result.
    pub fetches: Family<FetchLabels, Counter>,
    /// Fetches refused by an exhausted budget (nothing was sent).
    pub budget_exhausted: Family<BudgetLabels, Counter>,
}

/// The gateway's Prometheus metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    findings: Family<FindingLabels, Counter>,
    stage_seconds: Family<StageLabels, Histogram>,
    /// Each stage's series of `stage_seconds`, looked up once: the family's lookup hashes the
    /// label set under a lock, several times per request otherwise. Filled on first use, so a
    /// stage that never ran still has no series.
    /// The stage histograms of requests that matched no server.
    stage_series: StageSeries,
    request_seconds: Histogram,
    upstream_errors: Family<ErrorLabels, Counter>,
    in_flight: Gauge,
    admitted: Gauge,
    bounds: Family<BoundLabels, Counter>,
}

/// Label of `portcullis_bounds_reached_total`: the `[limits]` key whose bound was reached.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    limit: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("portcullis");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "Requests by outcome (allow, deny, would_deny), status and error code", requests.clone());
        let findings = Family::<FindingLabels, Counter>::default();
        registry.register(
            "findings",
            "Refusals found per stage and error code (monitor mode counts every stage that would refuse a request)",
            findings.clone(),
        );
        let stage_seconds = Family::<StageLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_005, 2.0, 22)));
        registry.register("stage_duration_seconds", "Time spent in each pipeline stage", stage_seconds.clone());
        let request_seconds = Histogram::new(exponential_buckets(0.000_01, 2.0, 22));
        registry.register("request_duration_seconds", "Time from request arrival to response headers", request_seconds.clone());
        let upstream_errors = Family::<ErrorLabels, Counter>::default();
        registry.register("upstream_errors", "Failed forwards by error code", upstream_errors.clone());
        let in_flight = Gauge::default();
        registry.register("in_flight_requests", "Requests being handled now (body read included)", in_flight.clone());
        let admitted = Gauge::default();
        registry.register("admitted_requests", "Requests holding a limits.max_in_flight slot (after the body read, until the response head)", admitted.clone());
        let bounds = Family::<BoundLabels, Counter>::default();
        registry.register(
            "bounds_reached",
            "Work refused or connections closed because a [limits] bound was reached, by key (max_header_bytes_in_flight, max_admin_connections, write_timeout)",
            bounds.clone(),
        );
        Metrics { registry, requests, findings, stage_seconds, stage_series: Default::default(), request_seconds, upstream_errors, in_flight, admitted, bounds }
    }

    /// Counts one finished request and its per-stage latencies; `series` are its server's stage
    /// histograms (`None`: it matched no server).
    pub(crate) fn observe(&self, r: &DecisionRecord<'_>, timings: &StageTimings, total: Duration, series: Option<&StageSeries>) {
        self.requests.get_or_create(&RequestLabels { outcome: r.outcome, status: r.status, error: r.error.unwrap_or(""), server: r.server }).inc();
        let series = series.unwrap_or(&self.stage_series);
        for f in &r.findings {
            self.findings.get_or_create(&FindingLabels { stage: f.stage, error: f.error }).inc();
        }
        for (stage, d) in timings.iter() {
            series[stage as usize]
                .get_or_init(|| self.stage_seconds.get_or_create(&StageLabels { stage: stage.as_str(), server: r.server }).clone())
                .observe(d.as_secs_f64());
        }
        self.request_seconds.observe(total.as_secs_f64());
    }

    /// Registers the identity stages' counters: directory fetches by result, fetches refused by
    /// an exhausted budget, and signatures refused as replays.
    pub(crate) fn register_identity(&mut self, directory: DirectoryMetrics, replay_hits: Counter) {
        self.registry.register("directory_fetches", "Key directory fetches by result", directory.fetches);
        self.registry.register(
            "directory_fetch_budget_exhausted",
            "Requests refused because a key directory fetch budget (origin or global) was exhausted",
            directory.budget_exhausted,
        );
        self.registry.register("replay_hits", "Signatures refused because they were already used", replay_hits);
    }

    /// Registers `portcullis_legacy_signature_agent_total`: verified-or-not requests naming their
    /// agent with the legacy sf-string `Signature-Agent` (the diagnostic log says it once per
    /// origin).
    pub(crate) fn register_legacy_agents(&mut self, legacy: Counter) {
        self.registry.register("legacy_signature_agent", "Signatures naming their agent with the legacy sf-string Signature-Agent", legacy);
    }

    /// Registers the shared state store's error counter (`portcullis_state_store_errors_total`).
    pub(crate) fn register_state(&mut self, errors: Counter) {
        self.registry.register("state_store_errors", "Shared state store commands that failed or timed out (requests were refused)", errors);
    }

    /// Registers the policy reload health: `portcullis_policy_reload_errors_total` and
    /// `portcullis_policy_last_reload_ok`.
    pub(crate) fn register_policy_health(&mut self, reload_errors: Counter, last_reload_ok: Gauge) {
        self.registry.register("policy_reload_errors", "Policy reloads that failed (the previous policy stayed in use)", reload_errors);
        self.registry.register("policy_last_reload_ok", "1 if the last policy (re)load succeeded, else 0", last_reload_ok);
    }

    /// Registers `portcullis_idempotency_total` (the idempotency journal's results).
    pub(crate) fn register_idempotency(&mut self, m: &crate::idempotency::IdempotencyMetrics) {
        self.registry.register("idempotency", "Idempotency journal results (first, replayed, in_flight, reused, recorded, released, ...)", m.results.clone());
    }

    /// Lets a stage register its own metrics (stages below telemetry in the module graph).
    pub(crate) fn register_with(&mut self, register: impl FnOnce(&mut Registry)) {
        register(&mut self.registry);
    }

    /// Registers the decision log's `portcullis_decision_log_dropped_total`.
    pub(crate) fn register_decision_log(&mut self, dropped: Counter) {
        self.registry.register("decision_log_dropped", "Decision log lines dropped because the sink did not keep up (queue full)", dropped);
    }

    /// Counts one refusal or close because the `[limits]` bound `limit` was reached.
    pub(crate) fn bound_reached(&self, limit: &'static str) {
        self.bounds.get_or_create(&BoundLabels { limit }).inc();
    }

    /// The counter [`Metrics::bound_reached`] increments for `limit`, for code that counts
    /// without the registry at hand (a connection's write timeout).
    pub(crate) fn bound_counter(&self, limit: &'static str) -> Counter {
        self.bounds.get_or_create(&BoundLabels { limit }).clone()
    }

    /// Counts a failed forward.
    pub(crate) fn upstream_error(&self, code: &'static str) {
        self.upstream_errors.get_or_create(&ErrorLabels { error: code }).inc();
    }

    /// The failed-forward counter of event streams cut by `tools.filter_list` before an event it
    /// could not inspect (`upstream_answer_uninspectable`): counted as the stream passes, after
    /// the request's own record was written.
    pub(crate) fn uninspectable_cuts(&self) -> prometheus_client::metrics::counter::Counter {
        self.upstream_errors.get_or_create(&ErrorLabels { error: "upstream_answer_uninspectable" }).clone()
    }

    /// Tracks requests in flight; the guard decrements on drop.
    pub(crate) fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Tracks requests holding an admission slot; the guard decrements on drop.
    pub(crate) fn admitted(&self) -> InFlight {
        self.admitted.inc();
        InFlight(self.admitted.clone())
    }

    /// The Prometheus text exposition.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BindingLabels {
    binding: &'static str,
}

/// Counters of the token stage (stage 7): verified-token cache hits and misses, JWKS fetches by
/// result. Made by the stage, registered by [`Metrics::register_token`].
#[derive(Clone, Debug, Default)]
pub struct TokenMetrics {
    cache: Family<ResultLabels, Counter>,
    jwks_fetches: Family<ResultLabels, Counter>,
    jwks_budget_exhausted: Counter,
    bindings: Family<BindingLabels, Counter>,
}

impl TokenMetrics {
    /// Counts one token-cache lookup.
    pub(crate) fn token_cache(&self, is_hit: bool) {
        self.cache.get_or_create(&ResultLabels { result: if is_hit { "hit" } else { "miss" } }).inc();
    }

    /// Counts one opaque token refused from the inactive-token cache (no introspection call).
    pub(crate) fn token_cache_inactive_hit(&self) {
        self.cache.get_or_create(&ResultLabels { result: "inactive_hit" }).inc();
    }

    /// Counts one JWKS fetch; `result` is `ok` or `error`.
    pub(crate) fn jwks_fetch(&self, result: &'static str) {
        self.jwks_fetches.get_or_create(&ResultLabels { result }).inc();
    }

    /// How many JWKS fetches ended with `result` (`ok` or `error`).
    #[cfg(test)]
    pub(crate) fn jwks_fetches_count(&self, result: &'static str) -> u64 {
        self.jwks_fetches.get_or_create(&ResultLabels { result }).get()
    }

    /// Counts one unknown-`kid` refetch refused by `oauth.jwks_refetch_budget`.
    pub(crate) fn jwks_budget_exhausted(&self) {
        self.jwks_budget_exhausted.inc();
    }

    /// Counts one accepted token by how it is bound to its request (`none`, `dpop`, `agent_key`).
    pub(crate) fn binding(&self, binding: &'static str) {
        self.bindings.get_or_create(&BindingLabels { binding }).inc();
    }

    /// How many unknown-`kid` refetches the budget refused.
    #[cfg(test)]
    pub(crate) fn jwks_budget_exhausted_count(&self) -> u64 {
        self.jwks_budget_exhausted.get()
    }
}

impl Metrics {
    /// Registers the token stage's counters.
    pub(crate) fn register_token(&mut self, m: &TokenMetrics) {
        self.registry.register("token_cache_lookups", "Verified-token cache lookups by result (hit, miss; inactive_hit: an opaque token introspection called inactive moments ago, refused without asking again)", m.cache.clone());
        self.registry.register("jwks_fetches", "Issuer JWKS fetches by result (ok, error)", m.jwks_fetches.clone());
        self.registry.register(
            "jwks_refetch_budget_exhausted",
            "Tokens refused because an unknown-kid JWKS refetch would exceed oauth.jwks_refetch_budget",
            m.jwks_budget_exhausted.clone(),
        );
        self.registry.register("token_bindings", "Accepted tokens by binding to their request (none, dpop, agent_key)", m.bindings.clone());
    }
}

/// One histogram per stage, found once in the family and then observed without a lookup (one
/// set per server, and one for requests that matched none).
pub(crate) type StageSeries = [std::sync::OnceLock<Histogram>; Stage::ALL.len()];

/// Decrements the in-flight gauge when dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One entry of the decision log's `findings`: a stage that refused (or would refuse) the
/// request, with the `error` code and `reason` it gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingLine {
    /// `body`, `digest`, `signature`, `key`, `replay`, `token`, `mcp`, `policy`, `quota`,
    /// `catalog`, `approval` or `idempotency`.
    pub stage: &'static str,
    /// The refusal code.
    pub error: &'static str,
    /// The refusal reason.
    pub reason: String,
}

/// One decision-log line. Every field is metadata; there is deliberately no field for a
/// credential, a body or tool arguments.
#[derive(Debug, Serialize)]
pub(crate) struct DecisionRecord<'a> {
    /// RFC 3339 time of arrival.
    pub time: String,
    /// The request id (also in the refusal body and `x-request-id`).
    pub request_id: &'a str,
    /// The MCP server the request was for (`default` in the single-server form; `-` when its
    /// path matched no server).
    pub server: &'static str,
    /// `enforce` or `monitor`, or `staged` when stage groups differ (see `enforcing`).
    pub mode: &'static str,
    /// The stage groups in enforce mode (`identity`, `token`, `policy`, `default`).
    pub enforcing: Vec<&'static str>,
    /// `allow`, `deny` or `would_deny`.
    pub outcome: &'static str,
    /// Status sent to the client.
    pub status: u16,
    /// What the client was answered: the refusal code, or the upstream error code when
    /// forwarding failed; else (monitor mode) the would-be refusal code.
    pub error: Option<&'static str>,
    /// The reason text that goes with `error`.
    pub reason: Option<String>,
    /// Every refusal found, in pipeline order; the first decides `error`/`reason` (in staged
    /// mode, the first from an enforcing group when the request was refused).
    pub findings: Vec<FindingLine>,
    /// The upstream failure code when forwarding failed (also when a monitored denial was
    /// forwarded and then failed upstream).
    pub upstream_error: Option<&'static str>,
    /// HTTP method.
    pub method: &'a str,
    /// Request path (no query: queries are not logged).
    pub path: &'a str,
    /// The verified agent identity (its directory origin), when a signature was verified.
    pub agent: Option<&'a str>,
    /// The agent the request's `Signature-Agent` header named, verified or not (the first
    /// usable member: a directory's origin, else the URL). Not a secret: it is what an
    /// unverified agent claimed to be, and the rollout report lists those that never verify.
    pub claimed_agent: Option<String>,
    /// Whether the request carried a signature (`Signature-Input` or `Signature`), verified or
    /// not: the report tells unsigned requests from signed ones that failed.
    pub signed: bool,
    /// The verified signature's keyid.
    pub keyid: Option<&'a str>,
    /// The verified token's `sub`.
    pub sub: Option<&'a str>,
    /// How the verified token is bound to the request: `none`, `dpop`, `agent_key`.
    pub binding: Option<&'static str>,
    /// The JSON-RPC method, when the body was parsed.
    pub mcp_method: Option<&'a str>,
    /// The tool name of a `tools/call`.
    pub tool: Option<&'a str>,
    /// The rule(s) the policy decision named (or `policy_error`).
    pub rule: Option<&'a str>,
    /// The version of the policy set that decided (a short hash of its sources).
    pub policy: Option<&'a str>,
    /// The quota bucket that was exhausted, when one was.
    pub quota: Option<&'a str>,
    /// The idempotency journal: `first`, `replayed`, `would_replay`, `in_flight`, `reused`;
    /// `null` for calls that do not use it.
    pub idempotency: Option<&'static str>,
    /// The approval this request consumed (`allow`), or the approval an approval-page event
    /// is about.
    pub approval_id: Option<&'a str>,
    /// The approver's `sub`, when an approval was consumed or given.
    pub approved_by: Option<&'a str>,
    /// The credential the backend got (`none`, `static`, `token_exchange`, `forward`), for a
    /// request that was forwarded or was refused for want of one.
    pub upstream_auth: Option<&'static str>,
    /// Whether a token-exchange credential came from the cache.
    pub upstream_auth_cached: Option<bool>,
    /// Microseconds per stage, in pipeline order.
    pub latency_us: StageMicros,
    /// Microseconds from arrival to response headers.
    pub total_us: u64,
}

impl<'a> DecisionRecord<'a> {
    /// The record of one answered request before anything else is known of it: who answered
    /// it how (`mode`, `outcome`, `status`), every other field empty for the caller to fill
    /// (`time` too: only a decision log needs it formatted). The one place every field is
    /// named, so a new field is one edit here.
    pub(crate) fn new(
        modes: &crate::config::Modes,
        server: &'static str,
        request_id: &'a str,
        method: &'a str,
        path: &'a str,
        outcome: &'static str,
        status: u16,
    ) -> Self {
        DecisionRecord {
            time: String::new(),
            request_id,
            server,
            mode: modes.as_str(),
            enforcing: modes.enforcing(),
            outcome,
            status,
            error: None,
            reason: None,
            findings: Vec::new(),
            upstream_error: None,
            method,
            path,
            agent: None,
            claimed_agent: None,
            signed: false,
            keyid: None,
            sub: None,
            binding: None,
            mcp_method: None,
            tool: None,
            rule: None,
            policy: None,
            quota: None,
            idempotency: None,
            approval_id: None,
            approved_by: None,
            upstream_auth: None,
            upstream_auth_cached: None,
            latency_us: Default::default(),
            total_us: 0,
        }
    }
}

impl<'a> DecisionRecord<'a> {
    /// Fills the per-stage latencies.
    pub(crate) fn with_timings(mut self, timings: &StageTimings) -> Self {
        self.latency_us = StageMicros(timings.iter().map(|(stage, d)| (stage, u64::try_from(d.as_micros()).unwrap_or(u64::MAX))).collect());
        self
    }
}

/// The decision log's `latency_us`: microseconds per stage that ran, a JSON object whose
/// members are in pipeline order (each stage once: [`StageTimings`] adds a stage that ran twice
/// to its first entry). Written straight from the stages, with no map of owned keys built for
/// each request.
#[derive(Debug, Default)]
pub(crate) struct StageMicros(Vec<(Stage, u64)>);

impl Serialize for StageMicros {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (stage, micros) in &self.0 {
            map.serialize_entry(stage.as_str(), micros)?;
        }
        map.end()
    }
}

/// The agent a request's `Signature-Agent` header claims, before (or without) verification:
/// the first usable member's directory origin or URL. `None` when the header is absent or does
/// not parse; the pipeline, not this, decides what that means.
pub(crate) fn claimed_agent(headers: &http::HeaderMap) -> Option<String> {
    use crate::signature::AgentKind;
    use portcullis_wire::signature::parse::{combined_field, parse_signature_agent};
    let field = combined_field(headers, portcullis_wire::signature::parse::SIGNATURE_AGENT).ok()??;
    parse_signature_agent(&field).ok()?.into_iter().find_map(|m| {
        let a = m.agent.ok()?;
        Some(if a.kind() == AgentKind::Directory { a.origin() } else { a.url().as_str().to_owned() })
    })
}

/// Whether the request carries a signature for anyone (`Signature-Input` or `Signature`),
/// whether or not it verifies: the decision log's `signed`.
pub(crate) fn is_signed(headers: &http::HeaderMap) -> bool {
    use portcullis_wire::signature::parse::{SIGNATURE_HEADER, SIGNATURE_INPUT_HEADER};
    headers.contains_key(SIGNATURE_INPUT_HEADER) || headers.contains_key(SIGNATURE_HEADER)
}

/// An error and its sources in one line, e.g. "client error (Connect): tcp connect error:
/// Connection refused (os error 111)": for logs and operator-facing reasons, never for bodies.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

/// RFC 3339 with milliseconds, UTC.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Lines the decision-log queue holds before new ones are dropped (and counted). At a few
/// hundred bytes a line this bounds the queue to a few MiB, and covers a sink that stalls for
/// a second at ~16k requests per second.
pub(crate) const DECISION_LOG_QUEUE: usize = 16_384;

/// How long a graceful shutdown waits for the queued lines to be written.
const FLUSH_LIMIT: Duration = Duration::from_secs(10);

/// Lines written in one `write` call at most (the writer batches what is queued).
const WRITE_BATCH: usize = 256 * 1024;

/// How long the writer lets lines gather after a write before it waits on the queue again. A
/// writer waiting on an empty queue is woken by the next line (a futex call by the request's
/// thread and a switch to the writer and back); under load that was once per request. Pausing
/// after each write, it is woken at most once per pause, and a line reaches the sink at most
/// this much later. Each write has a fixed cost besides its bytes (measured on a file: 2 ms
/// pauses, 455 writes a second at 3,000 requests per second, cost the writer 5.8 µs of CPU per
/// request; 10 ms pauses, 97 writes, 2.7 µs). At 16k requests per second a pause gathers some
/// 160 lines, a hundredth of [`DECISION_LOG_QUEUE`].
const WRITE_PAUSE: Duration = Duration::from_millis(10);

/// Where decision-log lines go. The request path never blocks on the sink: [`DecisionLog::write`]
/// serializes the record and hands the line to a bounded queue; one writer thread owns the sink
/// and writes whatever is queued in one `write` (so lines never interleave). When the queue is
/// full the line is dropped and counted in `portcullis_decision_log_dropped_total`.
#[derive(Debug)]
pub(crate) struct DecisionLog {
    /// `None`: `log.decisions = "off"`.
    queue: Option<SyncSender<Message>>,
    dropped: Counter,
}

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it is written.
    Flush(oneshot::Sender<()>),
}

impl DecisionLog {
    /// Opens the sink (a file is created if missing and appended to) and starts its writer
    /// thread, with a queue of [`DECISION_LOG_QUEUE`] lines.
    pub(crate) fn open(sink: &DecisionSink) -> io::Result<DecisionLog> {
        let out: Box<dyn Write + Send> = match sink {
            DecisionSink::Off => return Ok(DecisionLog { queue: None, dropped: Counter::default() }),
            DecisionSink::Stdout => Box::new(io::stdout()),
            DecisionSink::Stderr => Box::new(io::stderr()),
            DecisionSink::File(p) => Box::new(OpenOptions::new().create(true).append(true).open(p)?),
        };
        Self::with_writer(out, DECISION_LOG_QUEUE)
    }

    /// A log writing to `out` through a queue of `capacity` lines (at least 1).
    fn with_writer(out: Box<dyn Write + Send>, capacity: usize) -> io::Result<DecisionLog> {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
        std::thread::Builder::new().name("decision-log".to_owned()).spawn(move || write_queued(&rx, out))?;
        Ok(DecisionLog { queue: Some(tx), dropped: Counter::default() })
    }

    /// Whether records are written anywhere (`log.decisions` is not `"off"`).
    pub(crate) fn is_on(&self) -> bool {
        self.queue.is_some()
    }

    /// `portcullis_decision_log_dropped_total`, for the metrics registry.
    pub(crate) fn dropped(&self) -> Counter {
        self.dropped.clone()
    }

    /// Queues one record as a JSON line. Never blocks and never fails the request: a line that
    /// does not fit in the queue is dropped, counted, and reported on the diagnostic log (the
    /// first time, then every 10,000th).
    pub(crate) fn write(&self, record: &DecisionRecord<'_>) {
        let Some(queue) = &self.queue else { return };
        let mut line = match serde_json::to_vec(record) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "Cannot encode decision record");
                return;
            }
        };
        line.push(b'\n');
        if let Err(e) = queue.try_send(Message::Line(line)) {
            let before = self.dropped.inc();
            if before.is_multiple_of(10_000) {
                let why = if matches!(e, TrySendError::Full(_)) { "the sink is not keeping up" } else { "the writer stopped" };
                tracing::warn!(dropped = before + 1, "Decision log line dropped: {why} (counted in portcullis_decision_log_dropped_total)");
            }
        }
    }

    /// Waits until every line queued so far is written (at most 10 s: a sink that is stuck
    /// must not hold up a shutdown forever). Never blocks a runtime thread.
    pub(crate) async fn flush(&self) {
        let Some(queue) = &self.queue else { return };
        let (ack, written) = oneshot::channel();
        let deadline = tokio::time::Instant::now() + FLUSH_LIMIT;
        let mut message = Message::Flush(ack);
        loop {
            match queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if tokio::time::Instant::now() < deadline => {
                    message = m;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(_) => {
                    tracing::warn!("Decision log not flushed: the writer is not draining its queue");
                    return;
                }
            }
        }
        if tokio::time::timeout_at(deadline, written).await.is_err() {
            tracing::warn!("Decision log not flushed within {FLUSH_LIMIT:?}");
        }
    }
}

/// The writer thread: waits for a line, takes whatever else is queued (up to [`WRITE_BATCH`]
/// bytes), writes it in one call, answers flushes, then pauses [`WRITE_PAUSE`] before it waits
/// again. Ends when every sender is gone and the queue is drained.
fn write_queued(rx: &Receiver<Message>, mut out: Box<dyn Write + Send>) {
    let mut batch = Vec::with_capacity(64 * 1024);
    let mut flushed = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => batch.extend_from_slice(&line),
                Message::Flush(ack) => flushed.push(ack),
            }
            if batch.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            if let Err(e) = out.write_all(&batch).and_then(|()| out.flush()) {
                tracing::error!(error = %e, "Cannot write decision log lines");
            }
            batch.clear();
        }
        for ack in flushed.drain(..) {
            let _ = ack.send(());
        }
        std::thread::sleep(WRITE_PAUSE);
    }
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
