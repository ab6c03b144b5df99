//! The tool catalog (docs/catalog.md): the gateway's own view of the backend's tools, fetched
//! by the gateway itself (`fetch`) and checked against the operator's pins (`pins`).
//!
//! It decides, for each `tools/call`, whether the tool's current definition is one the
//! operator pinned (403 `tool_definition_changed` when it drifted, 403 `tool_not_pinned` for a
//! tool without a pin when `tools.unpinned = "deny"`), and gives policy what the gateway knows
//! of the tool (`input.mcp.tool_definition`: digest, pinned, annotations) — trusted because the
//! gateway fetched it, unlike anything the agent says.
//!
//! The catalog is fetched at start, every `tools.refresh`, and when a call names a tool it does
//! not know (at most once per `tools.refresh`). A failed fetch keeps the last good catalog and
//! marks it stale (`/readyz`, `portcullis_catalog_stale`). Before any fetch succeeded, a call
//! the catalog must vouch for (`tools.unpinned = "deny"`, or a pinned tool) is refused with
//! 503 `catalog_unavailable`: fail closed. Digests, pin states and policy views are computed
//! once per fetch; a request only looks them up.

pub mod fetch;
pub mod filter;
pub mod pins;
pub mod schema;
pub mod tooling;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Map, Value};

use crate::config::{FieldError, Tools, Unpinned, Upstream};
use fetch::{FetchError, Fetched, Fetcher};
use pins::Pins;
use portcullis_wire::mcp::McpRequest;

/// Why the catalog refused a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CatalogError {
    /// No catalog has been fetched yet, and this call needs one (fail closed).
    #[error("the gateway has not yet been able to read the MCP server's tool list; retry shortly")]
    Unavailable,
    /// The tool's current definition is not the pinned one (or a pinned tool is gone).
    #[error("the tool's definition changed since it was pinned (tools.pins); an operator must review it and pin it again")]
    DefinitionChanged,
    /// The tool has no pin and `tools.unpinned = "deny"`.
    #[error("the tool is not pinned (tools.pins) and unpinned tools are refused")]
    NotPinned,
    /// The MCP server does not list the tool and `tools.unpinned = "deny"`.
    #[error("the MCP server does not list this tool, so it cannot be pinned")]
    NotListed,
    /// `tools.validate_arguments` and the tool's `inputSchema` cannot be compiled (unknown
    /// dialect, external `$ref`, invalid schema).
    #[error("the tool's inputSchema cannot be used to check arguments: {0}")]
    SchemaUnsupported(String),
    /// The arguments fail the tool's `inputSchema`: answered as a tool execution error the
    /// model can correct (HTTP 200, `isError: true`); the backend gets nothing.
    #[error("invalid arguments: {}: {problem}", if pointer.is_empty() { "(the arguments)" } else { pointer.as_str() })]
    InvalidArguments {
        /// The call's JSON-RPC id.
        id: Value,
        /// RFC 6901 pointer into the arguments.
        pointer: String,
        /// What is wrong; never the value.
        problem: String,
    },
    /// An `Mcp-Param-*` header disagrees with the arguments (MCP 2026-07-28): a -32020
    /// refusal of the MCP stage.
    #[error("{reason}")]
    HeaderMismatch {
        /// The call's JSON-RPC id.
        id: Option<Value>,
        /// Which header and how; never a value.
        reason: String,
    },
}

impl CatalogError {
    /// The `error` code clients, logs and metrics see.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            CatalogError::Unavailable => "catalog_unavailable",
            CatalogError::DefinitionChanged => "tool_definition_changed",
            CatalogError::NotPinned | CatalogError::NotListed => "tool_not_pinned",
            CatalogError::SchemaUnsupported(_) => "tool_schema_unsupported",
            CatalogError::InvalidArguments { .. } => "invalid_arguments",
            CatalogError::HeaderMismatch { .. } => "header_mismatch",
        }
    }

    /// The HTTP status of the refusal.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            CatalogError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            CatalogError::DefinitionChanged | CatalogError::NotPinned | CatalogError::NotListed | CatalogError::SchemaUnsupported(_) => StatusCode::FORBIDDEN,
            // MCP: input validation errors are tool execution errors, not protocol errors.
            CatalogError::InvalidArguments { .. } => StatusCode::OK,
            CatalogError::HeaderMismatch { .. } => StatusCode::BAD_REQUEST,
        }
    }
}

/// How a tool's current definition stands against the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PinState {
    /// Pinned, and the definition is the pinned one.
    Pinned,
    /// Pinned, but the definition changed: the pinned digest.
    Changed(String),
    /// Not in the pins.
    Unpinned,
}

/// One tool of the catalog, with everything a request needs precomputed.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The `Tool` object as the server sent it.
    pub definition: Arc<Map<String, Value>>,
    /// `sha256:` + hex of its JCS form.
    pub digest: String,
    /// Against the pins of the fetch that read it.
    pub pin: PinState,
    /// `input.mcp.tool_definition`.
    pub policy_view: regorus::Value,
    /// The compiled `inputSchema` (`tools.validate_arguments`).
    pub schema: Option<Arc<schema::ArgumentSchema>>,
    /// Its `x-mcp-header` parameters.
    pub header_params: Vec<schema::HeaderParam>,
}

/// One fetch's catalog.
#[derive(Debug)]
pub(crate) struct Snapshot {
    tools: HashMap<String, Entry>,
    /// Tool names in the server's order.
    order: Vec<String>,
    /// The protocol version the server spoke.
    pub protocol: String,
    fetched: Instant,
}

impl Snapshot {
    /// The tool called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Entry> {
        self.tools.get(name)
    }

    /// Every tool, in the server's order: name, definition, digest.
    pub(crate) fn tools(&self) -> impl Iterator<Item = (&str, &Map<String, Value>, &str)> {
        self.order.iter().filter_map(|n| self.tools.get(n).map(|e| (n.as_str(), e.definition.as_ref(), e.digest.as_str())))
    }

    /// How many tools.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

/// What the catalog says about one request's tool calls.
#[derive(Debug, Default)]
pub struct Looked {
    /// `input.mcp.tool_definition` of each called tool the catalog knows, by name.
    pub definitions: Vec<(String, regorus::Value)>,
    /// The first refusal, if any.
    pub refusal: Option<CatalogError>,
}

impl Looked {
    /// The refusal as a stage result.
    pub(crate) fn verdict(&self) -> Result<(), CatalogError> {
        self.refusal.clone().map_or(Ok(()), Err)
    }
}

/// Metric labels of `portcullis_catalog_refreshes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefreshLabels {
    /// `ok` or `error`.
    pub result: &'static str,
}

/// The catalog's metrics.
#[derive(Debug, Clone, Default)]
pub struct CatalogMetrics {
    /// `portcullis_catalog_refreshes_total{result}`.
    pub refreshes: Family<RefreshLabels, Counter>,
    /// `portcullis_catalog_stale`: 1 while there is no catalog or the last fetch failed.
    pub stale: Gauge,
    /// `portcullis_catalog_tools`: tools in the catalog in use.
    pub tools: Gauge,
    /// `portcullis_catalog_drift_total`: tool definitions seen drifting from their pin (once
    /// per change).
    pub drift: Counter,
}

/// What `/readyz` says about the catalog.
#[derive(Debug, Clone)]
pub struct Readiness {
    /// False only when calls are being refused for want of any catalog.
    pub is_ready: bool,
    /// The `/readyz` detail.
    pub detail: Value,
}

/// The state a fetch replaces.
#[derive(Debug, Default)]
struct Current {
    snapshot: Option<Arc<Snapshot>>,
    pins: Arc<Pins>,
    last_error: Option<String>,
}

/// The catalog stage, built once from `[tools]`.
#[derive(Debug)]
pub struct Catalog {
    fetcher: Fetcher,
    refresh: Duration,
    unpinned: Unpinned,
    validate_arguments: bool,
    /// `tools.filter_list`.
    pub filter_list: bool,
    pins_path: Option<PathBuf>,
    current: ArcSwap<Current>,
    /// One fetch at a time; the time of the last fetch caused by an unknown tool.
    unknown_fetch: tokio::sync::Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
    /// Tool → the drifted digest already logged, so drift is logged once per change.
    drift_logged: Mutex<HashMap<String, String>>,
    metrics: CatalogMetrics,
}

impl Catalog {
    /// Builds the catalog from `[tools]`; reads the pins file now, so `portcullis check` names
    /// a missing or malformed one. Nothing is fetched until [`Catalog::refresh`].
    pub fn new(tools: &Tools, upstream: &Upstream, endpoint: &url::Url) -> Result<Catalog, FieldError> {
        let fetcher = Fetcher::new(upstream, endpoint, tools).map_err(|e| FieldError::new("tools.catalog", e))?;
        let pins = match &tools.pins {
            Some(path) => Pins::load(path).map_err(|e| FieldError::new("tools.pins", e.to_string()))?,
            None => Pins::default(),
        };
        let metrics = CatalogMetrics::default();
        metrics.stale.set(1);
        Ok(Catalog {
            fetcher,
            refresh: tools.refresh,
            unpinned: tools.unpinned,
            validate_arguments: tools.validate_arguments,
            filter_list: tools.filter_list,
            pins_path: tools.pins.clone(),
            current: ArcSwap::from_pointee(Current { snapshot: None, pins: Arc::new(pins), last_error: None }),
            unknown_fetch: tokio::sync::Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            drift_logged: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// The catalog's metrics, to register.
    pub(crate) fn metrics(&self) -> &CatalogMetrics {
        &self.metrics
    }

    /// The catalog in use, if one was ever fetched.
    pub(crate) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.current.load().snapshot.clone()
    }

    /// Fetches the catalog and swaps it in; re-reads the pins file first (a pins file that
    /// cannot be read keeps the previous pins). A failed fetch keeps the last good catalog.
    pub async fn refresh(&self) -> Result<(), FetchError> {
        let _one = self.refreshing.lock().await;
        let pins = self.reload_pins();
        let fetched = self.fetcher.fetch().await;
        let old = self.current.load_full();
        match fetched.and_then(|f| self.build(f, &pins)) {
            Ok(snapshot) => {
                self.metrics.refreshes.get_or_create(&RefreshLabels { result: "ok" }).inc();
                self.metrics.stale.set(0);
                self.metrics.tools.set(snapshot.len() as i64);
                self.note_drift(&snapshot);
                self.current.store(Arc::new(Current { snapshot: Some(Arc::new(snapshot)), pins, last_error: None }));
                Ok(())
            }
            Err(e) => {
                self.metrics.refreshes.get_or_create(&RefreshLabels { result: "error" }).inc();
                self.metrics.stale.set(1);
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    tracing::warn!(error = %e, endpoint = %self.fetcher.endpoint(), similar_held_back = held, "Tool catalog fetch failed; the last good catalog stays in use");
                }
                self.current.store(Arc::new(Current { snapshot: old.snapshot.clone(), pins, last_error: Some(e.to_string()) }));
                Err(e)
            }
        }
    }

    /// The pins file, read again; the previous pins when it cannot be read.
    fn reload_pins(&self) -> Arc<Pins> {
        let previous = self.current.load().pins.clone();
        let Some(path) = &self.pins_path else { return previous };
        match Pins::load(path) {
            Ok(p) if p == *previous => previous,
            Ok(p) => {
                tracing::info!(pins = p.len(), file = %path.display(), "Tool pins reloaded");
                Arc::new(p)
            }
            Err(e) => {
                tracing::warn!(error = %e, "Tool pins could not be read again; the previous pins stay in use");
                previous
            }
        }
    }

    /// Digests every tool, compares it with the pins and prepares its policy view.
    fn build(&self, fetched: Fetched, pins: &Pins) -> Result<Snapshot, FetchError> {
        let mut tools = HashMap::with_capacity(fetched.tools.len());
        let mut order = Vec::with_capacity(fetched.tools.len());
        for def in fetched.tools {
            let name = def.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let digest = pins::digest(&def).map_err(|reason| FetchError::Answer {
                method: "tools/list",
                error: portcullis_wire::tool_list::AnswerError::Malformed(format!("a tool cannot be digested: {reason}")),
            })?;
            let pin = match pins.get(&name) {
                None => PinState::Unpinned,
                Some(p) if p == digest => PinState::Pinned,
                Some(p) => PinState::Changed(p.to_owned()),
            };
            let policy_view = policy_view(&def, &digest, pin == PinState::Pinned);
            // Compiled once per fetch, never per call.
            let schema = self.validate_arguments.then(|| Arc::new(schema::ArgumentSchema::compile(&def)));
            let header_params = schema::header_params(&def);
            order.push(name.clone());
            tools.insert(name, Entry { definition: Arc::new(def), digest, pin, policy_view, schema, header_params });
        }
        Ok(Snapshot { tools, order, protocol: fetched.protocol, fetched: Instant::now() })
    }

    /// Logs each drifted tool once per change, with both digests, and counts it.
    fn note_drift(&self, snapshot: &Snapshot) {
        let Ok(mut logged) = self.drift_logged.lock() else { return };
        for (name, entry) in &snapshot.tools {
            let PinState::Changed(pinned) = &entry.pin else {
                logged.remove(name);
                continue;
            };
            if logged.get(name) == Some(&entry.digest) {
                continue;
            }
            logged.insert(name.clone(), entry.digest.clone());
            self.metrics.drift.inc();
            tracing::warn!(tool = %name, pinned = %pinned, current = %entry.digest, "Tool definition drifted from its pin; calls to it are refused (tool_definition_changed) until it is pinned again");
        }
    }

    /// Fetches again for a call naming a tool the catalog does not know, at most once per
    /// `tools.refresh` (a caller naming made-up tools cannot cause a fetch storm). Concurrent
    /// callers wait for the one fetch.
    async fn refresh_for_unknown(&self) {
        let mut last = self.unknown_fetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.refresh) {
            return;
        }
        *last = Some(Instant::now());
        let _ = self.refresh().await;
    }

    /// The stage: what the catalog says about each `tools/call` of `mcp` (`headers`: the
    /// request's, for `Mcp-Param-*`).
    pub async fn check(&self, mcp: &McpRequest, headers: &http::HeaderMap) -> Looked {
        let mut looked = Looked::default();
        let calls = || mcp.messages.iter().filter(|m| m.method.as_deref() == Some("tools/call")).filter_map(|m| m.tool.as_deref());
        let uses_headers = mcp.protocol_version.as_deref().is_some_and(|v| v >= portcullis_wire::mcp::STATELESS_VERSION);
        let current = self.current.load();
        let is_known = |c: &Current, tool: &str| c.snapshot.as_ref().is_some_and(|s| s.get(tool).is_some());
        let current = if calls().all(|t| is_known(&current, t)) {
            current
        } else {
            self.refresh_for_unknown().await;
            self.current.load()
        };
        for message in mcp.messages.iter().filter(|m| m.method.as_deref() == Some("tools/call")) {
            let Some(tool) = message.tool.as_deref() else { continue };
            let refusal = match current.snapshot.as_ref() {
                None if self.unpinned == Unpinned::Deny || current.pins.get(tool).is_some() => Some(CatalogError::Unavailable),
                None => None,
                Some(snapshot) => match snapshot.get(tool) {
                    // A pinned tool the server no longer lists changed as far as the pin goes.
                    None if current.pins.get(tool).is_some() => Some(CatalogError::DefinitionChanged),
                    None if self.unpinned == Unpinned::Deny => Some(CatalogError::NotListed),
                    None => None,
                    Some(entry) => {
                        looked.definitions.push((tool.to_owned(), entry.policy_view.clone()));
                        self.judge_call(entry, message, headers, uses_headers).err()
                    }
                },
            };
            if looked.refusal.is_none() {
                looked.refusal = refusal;
            }
        }
        looked
    }

    /// One call to a known tool: its parameter headers (2026-07-28), its pin, its arguments.
    fn judge_call(&self, entry: &Entry, message: &portcullis_wire::mcp::McpMessage, headers: &http::HeaderMap, uses_headers: bool) -> Result<(), CatalogError> {
        if uses_headers {
            schema::check_headers(&entry.header_params, headers, message.arguments.as_ref())
                .map_err(|reason| CatalogError::HeaderMismatch { id: message.id.clone(), reason })?;
        }
        match entry.pin {
            PinState::Pinned => {}
            PinState::Changed(_) => return Err(CatalogError::DefinitionChanged),
            PinState::Unpinned if self.unpinned == Unpinned::Deny => return Err(CatalogError::NotPinned),
            PinState::Unpinned => {}
        }
        let Some(schema) = &entry.schema else { return Ok(()) };
        if let Some(why) = schema.unsupported() {
            return Err(CatalogError::SchemaUnsupported(why.to_owned()));
        }
        schema.check(message.arguments.as_ref()).map_err(|invalid| CatalogError::InvalidArguments {
            id: message.id.clone().unwrap_or(Value::Null),
            pointer: invalid.pointer,
            problem: invalid.problem,
        })
    }

    /// The tools the pins let a caller call (pinned and unchanged; or unpinned, where allowed),
    /// with their digests and policy views: what a filtered `tools/list` may show. Empty
    /// without a catalog.
    pub(crate) fn callable_tools(&self) -> Vec<(String, String, regorus::Value)> {
        let Some(snapshot) = self.snapshot() else { return Vec::new() };
        snapshot
            .tools()
            .filter_map(|(name, _, _)| snapshot.get(name).map(|e| (name, e)))
            .filter(|(_, e)| match e.pin {
                PinState::Pinned => true,
                PinState::Changed(_) => false,
                PinState::Unpinned => self.unpinned == Unpinned::Allow,
            })
            .map(|(name, e)| (name.to_owned(), e.digest.clone(), e.policy_view.clone()))
            .collect()
    }

    /// `/readyz`: `ok`, `stale` (the last fetch failed; the last good catalog is in use) or
    /// `unavailable` (never fetched). Not ready only while calls are refused for want of any
    /// catalog (`fails_closed`: `tools.unpinned = "deny"` and the policy group enforcing).
    pub(crate) fn readiness(&self, fails_closed: bool) -> Readiness {
        let current = self.current.load();
        let status = match (&current.snapshot, &current.last_error) {
            (None, _) => "unavailable",
            (Some(_), Some(_)) => "stale",
            (Some(_), None) => "ok",
        };
        let mut detail = serde_json::json!({"status": status, "pins": current.pins.len()});
        if let Some(s) = &current.snapshot {
            detail["tools"] = s.len().into();
            detail["protocol"] = s.protocol.clone().into();
            detail["age_s"] = s.fetched.elapsed().as_secs().into();
        }
        if let Some(e) = &current.last_error {
            detail["error"] = e.clone().into();
        }
        Readiness { is_ready: current.snapshot.is_some() || !fails_closed, detail }
    }

    /// Fetches now, then every `tools.refresh`, until the returned task is aborted.
    pub(crate) fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let catalog = self.clone();
        tokio::spawn(async move {
            loop {
                let _ = catalog.refresh().await;
                tokio::time::sleep(catalog.refresh).await;
            }
        })
    }
}

/// `input.mcp.tool_definition`: the digest, whether the definition is the pinned one, and the
/// annotations with MCP's defaults filled in (a tool that says nothing is destructive and
/// open-world, so "destructive needs approval" policies fail safe).
fn policy_view(def: &Map<String, Value>, digest: &str, is_pinned: bool) -> regorus::Value {
    let given = def.get("annotations").and_then(Value::as_object);
    let hint = |name: &str, default: bool| given.and_then(|a| a.get(name)).and_then(Value::as_bool).unwrap_or(default);
    let mut annotations = serde_json::json!({
        "readOnlyHint": hint("readOnlyHint", false),
        "destructiveHint": hint("destructiveHint", true),
        "idempotentHint": hint("idempotentHint", false),
        "openWorldHint": hint("openWorldHint", true),
    });
    if let Some(title) = given.and_then(|a| a.get("title")).and_then(Value::as_str) {
        annotations["title"] = title.into();
    }
    let view = serde_json::json!({"digest": digest, "pinned": is_pinned, "annotations": annotations});
    // Only booleans and strings: the conversion cannot fail.
    portcullis_wire::rego_value::json_value(&view).unwrap_or_else(|_| regorus::Value::new_object())
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
