//! The pipeline's stages by name, and the time each took: what the pipeline records and the
//! metrics, the decision log and the trace export read. Below both (it imports nothing of the
//! gateway), so telemetry never needs the pipeline.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// The stages, named as in docs/design.md, in order. Also the `stage` label of latency metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// 1: bounded body read.
    Body,
    /// 2: Content-Digest.
    Digest,
    /// 3–5: signature parse, key resolution (directory), Ed25519 verify. Its refusals are
    /// this stage's, but for those of [`Stage::Key`].
    Signature,
    /// 4: no key for the signature (directory, keyid). Judged on its own, timed within
    /// [`Stage::Signature`].
    Key,
    /// 6: replay check.
    Replay,
    /// 7: OAuth bearer token.
    Token,
    /// Decision 9: `Mcp-Session-Id` bound to its owner (check, and binding on the response).
    Session,
    /// 8: JSON-RPC parse.
    Mcp,
    /// After 8: the tool catalog (pins), for `tools/call`.
    Catalog,
    /// 9: Rego policy.
    Policy,
    /// After 9: the idempotency journal, for calls the decision names.
    Idempotency,
    /// 10: quotas and rate limits.
    Quota,
    /// Human approval (judged within the policy stage's time).
    Approval,
    /// Before 11: the backend's own credential (`upstream.auth`, token exchange).
    UpstreamAuth,
    /// 11: time to upstream response headers.
    Upstream,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 15] = [
        Stage::Body,
        Stage::Digest,
        Stage::Signature,
        Stage::Key,
        Stage::Replay,
        Stage::Token,
        Stage::Session,
        Stage::Mcp,
        Stage::Catalog,
        Stage::Policy,
        Stage::Idempotency,
        Stage::Quota,
        Stage::Approval,
        Stage::UpstreamAuth,
        Stage::Upstream,
    ];

    /// The name in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Body => "body",
            Stage::Digest => "digest",
            Stage::Signature => "signature",
            Stage::Key => "key",
            Stage::Replay => "replay",
            Stage::Token => "token",
            Stage::Session => "session",
            Stage::Mcp => "mcp",
            Stage::Catalog => "catalog",
            Stage::Policy => "policy",
            Stage::Idempotency => "idempotency",
            Stage::Quota => "quota",
            Stage::Approval => "approval",
            Stage::UpstreamAuth => "upstream_auth",
            Stage::Upstream => "upstream",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Time spent in each stage that ran, in pipeline order.
#[derive(Debug, Clone, Default)]
pub struct StageTimings {
    entries: Vec<(Stage, Duration)>,
}

impl StageTimings {
    /// Records `elapsed` for `stage` (added to it if the stage ran before).
    pub fn record(&mut self, stage: Stage, elapsed: Duration) {
        match self.entries.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, d)) => *d += elapsed,
            None => self.entries.push((stage, elapsed)),
        }
    }

    /// The recorded stages in the order they ran.
    pub fn iter(&self) -> impl Iterator<Item = (Stage, Duration)> + '_ {
        self.entries.iter().copied()
    }

    /// Runs `f` as `stage`, recording its duration.
    pub(crate) fn timed<T>(&mut self, stage: Stage, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = stage_span(stage).in_scope(f);
        self.record(stage, start.elapsed());
        out
    }

    /// Awaits `f` as `stage`, recording its duration (added to earlier time in that stage).
    pub(crate) async fn timed_async<T>(&mut self, stage: Stage, f: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = tracing::Instrument::instrument(f, stage_span(stage)).await;
        self.record(stage, start.elapsed());
        out
    }
}

/// The span of one pipeline stage (a child of the request span; exported when OTLP is on).
/// TRACE level under its own target: the stderr log never wants it, so with OTLP off it is
/// disabled at the callsite and costs nothing; the OTLP layer enables the target explicitly.
pub fn stage_span(stage: Stage) -> tracing::Span {
    tracing::span!(target: STAGE_SPAN_TARGET, tracing::Level::TRACE, "stage", otel.name = stage.as_str(), stage = stage.as_str())
}

/// The target of [`stage_span`]s.
pub const STAGE_SPAN_TARGET: &str = "portcullis::stage";
