//! Rego policy (pipeline stage 9): decides whether the action may happen, which scopes the
//! user's token must hold and which quotas to spend, by evaluating `policy.query` with regorus.
//!
//! The policy set is compiled once at start (a compile error names file and line and the
//! gateway does not start) and swapped atomically on reload (file change or SIGHUP): a request
//! evaluates either the old set or the new one, never a half-loaded one; a reload that fails
//! keeps the old set and is reported in the log, `/metrics` and `/readyz`. Each evaluation
//! clones the prepared engine (evaluation needs `&mut`; the clone shares the compiled modules).
//!
//! Tool arguments are attacker-controlled input to the policy, so its time is bounded: each
//! evaluation by 250 ms, and all of one request's evaluations (one per message of a batch)
//! together by `limits.policy_budget`; past either the request is refused (`policy_error`, the
//! budget named in the reason) and the gateway serves on.
//!
//! It trusts its input: the agent and token views come from stages that verified them, the
//! MCP view from the parser. It trusts nothing in the policy's answer: the decision is parsed
//! strictly, and an evaluation error or malformed decision is a refusal (`policy_error`).

pub mod input;
pub mod load;
mod reload;
mod rvm;
mod schedule;
pub mod tooling;
pub mod verdict;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use regorus::{Engine, Value};

pub use input::{server_value, AgentView, CatalogView, PolicyInput, RequestView, TokenView};
pub use load::{LoadError, Source};
pub use portcullis_wire::rego_value::ConvertError;
pub(crate) use reload::ReloadTrigger;
pub use verdict::PolicyVerdict;

use portcullis_wire::mcp::McpRequest;
pub(crate) use schedule::Turn;

use crate::config::{PolicyEvaluator, PolicySettings};

/// Why the policy stage refused a request. Both are operator problems: the client sees
/// 403 `agent_access_denied` with reason `policy_error`; the details go to the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Evaluating `policy.query` raised an error (a failing builtin, conflicting rule values).
    #[error("policy {version}: evaluation failed: {reason}")]
    Evaluation {
        /// The policy set's version.
        version: String,
        /// regorus's message.
        reason: String,
    },
    /// The input could not be converted (token claims nested too deep; arguments too deep are
    /// the client's error, refused at the MCP parse): refused, since an input the policy
    /// cannot see must not be decided on.
    #[error("policy {version}: input not convertible: {reason}")]
    Input {
        /// The policy set's version.
        version: String,
        /// What could not be converted (never the value itself).
        reason: String,
    },
    /// The decision is undefined or does not follow the decision contract.
    #[error("policy {version}: {reason}")]
    MalformedDecision {
        /// The policy set's version.
        version: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The request's evaluations took `limits.policy_budget` and were stopped: an input (a
    /// batch, large arguments) that costs the policy that much is refused, not decided.
    #[error("policy {version}: stopped after {budget:?} (limits.policy_budget) with {decided} of {messages} messages decided")]
    OverBudget {
        /// The policy set's version.
        version: String,
        /// `limits.policy_budget`.
        budget: Duration,
        /// Messages decided (allowed) before the budget was spent.
        decided: usize,
        /// Messages in the request.
        messages: usize,
    },
}

impl PolicyError {
    /// The policy set that failed.
    pub(crate) fn version(&self) -> &str {
        match self {
            PolicyError::Evaluation { version, .. }
            | PolicyError::Input { version, .. }
            | PolicyError::MalformedDecision { version, .. }
            | PolicyError::OverBudget { version, .. } => version,
        }
    }
}

/// The decision for one request, with the policy version that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The merged verdict (a batch is refused if any element is).
    pub verdict: PolicyVerdict,
    /// The policy set's version (a short hash of its sources).
    pub version: String,
}

/// A compiled, prepared policy set.
#[derive(Debug)]
pub(crate) struct Loaded {
    engine: Engine,
    rvm: Option<rvm::RvmProgram>,
    version: String,
}

/// Reload health for `/metrics` and `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct PolicyHealth {
    /// `portcullis_policy_reload_errors_total`.
    pub reload_errors: Counter,
    /// `portcullis_policy_last_reload_ok`: 1 when the last (re)load succeeded.
    pub last_reload_ok: Gauge,
    last_error: Arc<Mutex<Option<String>>>,
}

impl PolicyHealth {
    /// The last reload's error, if the last reload failed.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    fn record(&self, result: Result<(), &LoadError>) {
        if let Ok(mut slot) = self.last_error.lock() {
            *slot = result.err().map(ToString::to_string);
        }
        match result {
            Ok(()) => {
                self.last_reload_ok.set(1);
            }
            Err(_) => {
                self.reload_errors.inc();
                self.last_reload_ok.set(0);
            }
        }
    }
}

/// The shared, swappable state: what a reload replaces.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    current: Arc<ArcSwap<Loaded>>,
    source: Source,
    query: String,
    evaluator: PolicyEvaluator,
    health: PolicyHealth,
}

impl Slot {
    /// Reads, compiles and prepares the set, then swaps it in. On error the old set stays.
    pub(crate) fn reload(&self) -> Result<String, LoadError> {
        let result = compile(&self.source, &self.query, self.evaluator);
        self.health.record(result.as_ref().map(|_| ()));
        let loaded = result?;
        let version = loaded.version.clone();
        self.current.store(Arc::new(loaded));
        Ok(version)
    }
}

/// Reads and compiles `source`, and evaluates `query` once on an empty input so a query that
/// names no rule fails here, and the engine is prepared before it is shared.
pub(crate) fn compile(source: &Source, query: &str, evaluator: PolicyEvaluator) -> Result<Loaded, LoadError> {
    let set = load::SourceSet::read(source, false)?;
    let mut engine = set.compile()?;
    // The first evaluation prepares the engine (slow in a debug build on a busy machine): it
    // is the operator's own policy on an empty input, so it runs without the request limit.
    engine.set_input(Value::new_object());
    engine.eval_rule(query.to_owned()).map_err(|e| LoadError::Compile(format!("policy.query {query:?}: {e}")))?;
    // Tool arguments are attacker-controlled input to the policy: a policy that iterates
    // over them must not hold a request thread for long. Over the limit → policy_error.
    engine.set_execution_timer_config(EVALUATION_TIME_LIMIT);
    let paths = match source {
        Source::Paths(p) => p.as_slice(),
        _ => &[],
    };
    let rvm = match evaluator.for_paths(paths) {
        PolicyEvaluator::Interpreter | PolicyEvaluator::Auto => None,
        PolicyEvaluator::Rvm => Some(rvm::RvmProgram::compile(&mut engine.clone(), query)?),
    };
    Ok(Loaded { engine, rvm, version: set.version() })
}

/// `limits.policy_budget` when the policy is built without one ([`Policy::with_budget`]).
const DEFAULT_BUDGET: Duration = Duration::from_secs(1);

/// Wall-clock bound on one evaluation, checked by regorus every 64 work units.
pub(crate) const EVALUATION_TIME_LIMIT: regorus::utils::limits::ExecutionTimerConfig = regorus::utils::limits::ExecutionTimerConfig {
    limit: std::time::Duration::from_millis(250),
    check_interval: match std::num::NonZeroU32::new(64) {
        Some(n) => n,
        None => std::num::NonZeroU32::MIN,
    },
};

/// The policy stage.
#[derive(Debug)]
pub struct Policy {
    slot: Slot,
    watch: bool,
    /// Where large evaluations run (see `schedule`).
    lane: schedule::Lane,
    /// `limits.policy_budget`: time for all of one request's evaluations.
    budget: Duration,
}

impl Policy {
    /// Compiles the policy named by `[policy]` (empty `paths` = the bundled example policies).
    pub fn new(cfg: &PolicySettings) -> Result<Policy, LoadError> {
        let source = Source::from_config(cfg);
        let loaded = compile(&source, &cfg.query, cfg.evaluator)?;
        let health = PolicyHealth::default();
        health.last_reload_ok.set(1);
        let slot = Slot { current: Arc::new(ArcSwap::from_pointee(loaded)), source, query: cfg.query.clone(), evaluator: cfg.evaluator, health };
        Ok(Policy { slot, watch: cfg.watch, lane: schedule::Lane::new(), budget: DEFAULT_BUDGET })
    }

    /// Bounds the time all of one request's evaluations may take together (`limits.policy_budget`;
    /// each evaluation is also bounded by 250 ms on its own).
    pub(crate) fn with_budget(mut self, budget: Duration) -> Policy {
        self.budget = budget;
        self
    }

    /// Reload health, for metrics and readiness.
    pub(crate) fn health(&self) -> &PolicyHealth {
        &self.slot.health
    }

    /// The version of the set now in use.
    pub(crate) fn version(&self) -> String {
        self.slot.current.load().version.clone()
    }

    /// Recompiles now (what SIGHUP does). On error the old set stays in use.
    #[cfg(test)]
    pub(crate) fn reload(&self) -> Result<String, LoadError> {
        self.slot.reload()
    }

    /// Starts the reload task (file watching when `policy.watch` and the set is on disk, and
    /// SIGHUP). Must run inside a tokio runtime; the task ends when the handle is dropped.
    pub(crate) fn spawn_reloader(&self) -> reload::ReloadTask {
        reload::spawn(self.slot.clone(), self.watch)
    }

    /// Waits, without holding a thread, until a heavy request (a batch, or a body of 16KiB or
    /// more) may be evaluated: at most one per core at once. Resolves at once for a light
    /// one. Hold the turn while calling [`Policy::decide`].
    pub(crate) fn turn(&self, mcp: Option<&McpRequest>) -> impl Future<Output = Option<Turn>> + 'static {
        self.lane.turn(mcp.is_some_and(|m| schedule::is_heavy(m.messages.len(), m.body_len)))
    }

    /// Runs `work` (`what`: `digest`, `mcp`) on a body of `body_len` bytes: in place for a
    /// small body; for one of 16KiB or more, with a turn of the same lane as heavy policy
    /// evaluations and off the async workers, so hashing or parsing a few large bodies does
    /// not stall the other requests on their workers.
    pub(crate) async fn off_workers<T>(&self, what: &'static str, body_len: usize, work: impl FnOnce() -> T) -> T {
        let heavy = body_len >= schedule::INLINE_MAX_BODY;
        // Awaited only when heavy: a small body pays no turn at all.
        let _turn = if heavy { self.lane.turn(true).await } else { None };
        self.lane.run_counted(what, heavy, work)
    }

    /// Registers `portcullis_offloaded_total{work}` (work done off the async workers: `digest`,
    /// `mcp`, `policy`).
    pub(crate) fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "offloaded",
            "Work run off the async workers because its body was large or it was a batch (digest, mcp parse, policy)",
            self.lane.offloaded().clone(),
        );
    }

    /// Evaluates the policy for `input`: one evaluation per JSON-RPC message; the request is
    /// refused if any message is, else required scopes and quotas are the union of all. A
    /// heavy request (see [`Policy::turn`]) is evaluated off the async workers; the call
    /// returns when the decision is made either way.
    pub fn decide(&self, input: &PolicyInput<'_>) -> Result<Decided, PolicyError> {
        let heavy = schedule::is_heavy(input.mcp.messages.len(), input.mcp.body_len);
        self.lane.run_counted("policy", heavy, || self.decide_here(input))
    }

    fn decide_here(&self, input: &PolicyInput<'_>) -> Result<Decided, PolicyError> {
        let deadline = Instant::now() + self.budget;
        let loaded = self.slot.current.load();
        let version = &loaded.version;
        let mut merged: Option<PolicyVerdict> = None;
        let documents = input.documents().map_err(|e| PolicyError::Input { version: version.clone(), reason: e.to_string() })?;
        let messages = documents.len();
        let over_budget = |decided| PolicyError::OverBudget { version: version.clone(), budget: self.budget, decided, messages };
        for (decided, doc) in documents.into_iter().enumerate() {
            // Each evaluation gets what is left of the request's budget (at most its own bound).
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(over_budget(decided));
            }
            let v = match self.evaluate(&loaded, doc, left) {
                Err(PolicyError::Evaluation { .. }) if Instant::now() >= deadline => return Err(over_budget(decided)),
                other => other?,
            };
            if !v.allow {
                return Ok(Decided { verdict: v, version: version.clone() });
            }
            match &mut merged {
                None => merged = Some(v),
                Some(m) => {
                    for s in v.required_scopes {
                        if !m.required_scopes.contains(&s) {
                            m.required_scopes.push(s);
                        }
                    }
                    m.quotas.extend(v.quotas);
                    m.idempotency = m.idempotency.max(v.idempotency);
                    if m.approval.is_none() {
                        m.approval = v.approval;
                    }
                }
            }
        }
        let verdict = merged.ok_or_else(|| PolicyError::MalformedDecision { version: version.clone(), reason: "no input to decide on".to_owned() })?;
        Ok(Decided { verdict, version: version.clone() })
    }

    /// Evaluates one message's input, within `left` (and [`EVALUATION_TIME_LIMIT`]).
    fn evaluate(&self, loaded: &Loaded, doc: Value, left: Duration) -> Result<PolicyVerdict, PolicyError> {
        let version = &loaded.version;
        let limit = regorus::utils::limits::ExecutionTimerConfig { limit: left.min(EVALUATION_TIME_LIMIT.limit), ..EVALUATION_TIME_LIMIT };
        let value = match &loaded.rvm {
            Some(program) => program.eval(doc, limit),
            None => {
                // Evaluation needs `&mut`; the clone shares the compiled modules.
                let mut engine = loaded.engine.clone();
                engine.set_execution_timer_config(limit);
                engine.set_input(doc);
                engine.eval_rule(self.slot.query.clone()).map_err(|e| e.to_string())
            }
        };
        let value = value.map_err(|reason| PolicyError::Evaluation { version: version.to_owned(), reason })?;
        verdict::parse(&value).map_err(|reason| PolicyError::MalformedDecision { version: version.to_owned(), reason })
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
