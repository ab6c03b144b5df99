//! The MCP servers behind the gateway, at run time: one [`Server`] per configured server
//! (`[[servers]]`, or the single-server form's `default`), and the [`Table`] the route phase
//! looks a request's path up in.
//!
//! A server is a value handed to every phase of a request: its mode, its token audience, its
//! catalog, its upstream pool and credential, its in-flight bound. A request holds its server's
//! `Arc` from routing to its log line, so a reload (`SIGHUP`) that replaces the table never
//! changes the server a request is decided and forwarded under.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;

use crate::catalog::Catalog;
use crate::challenge::Challenge;
use crate::config::{self, Config, ConfigError, FieldError, Form, METADATA_PATH};
use crate::proxy::Upstream;
use crate::upstream_auth::UpstreamCredentials;

/// One MCP server behind the gateway.
pub struct Server {
    /// Its validated settings.
    pub(crate) config: config::Server,
    /// Its name, kept for the life of the process: a metric label value.
    pub(crate) name: &'static str,
    /// Its backend: pool, timeouts, credential.
    pub(crate) upstream: Upstream,
    /// Its tool catalog (`tools.catalog = "fetch"`).
    pub(crate) catalog: Option<Arc<Catalog>>,
    /// What its 401s and 403s point to.
    pub(crate) challenge: Challenge,
    /// Its RFC 9728 document.
    metadata: Bytes,
    /// `max_in_flight`: its requests being decided or waiting for its backend.
    pub(crate) slots: Arc<Semaphore>,
    /// `upstream.max_streams`: its open event streams (held by the response body until the
    /// stream ends), counted apart from in-flight requests.
    pub(crate) streams: Arc<Semaphore>,
    /// `input.server` (built once; the policy reads a shared reference).
    pub(crate) input: regorus::Value,
    /// The latency histograms of its stages, by stage: found once, then observed without a
    /// lookup.
    stage_series: crate::telemetry::StageSeries,
    /// Cancelled when a reload removed or changed this server and `limits.shutdown_grace` has
    /// passed: its open event streams end then.
    pub(crate) retired: tokio_util::sync::CancellationToken,
    /// What [`Table::build`] compares to keep a server unchanged across a reload.
    fingerprint: String,
    /// The catalog's refresh task: stops when the server is dropped (removed by a reload and
    /// no request holds it any more).
    _refresher: Option<AbortOnDrop>,
    /// `upstream.health_check`: the last connect probe's result (a probe every
    /// [`HEALTH_EVERY`], from start), and its task.
    health: Arc<std::sync::Mutex<Option<Result<(), String>>>>,
    _prober: Option<AbortOnDrop>,
}

/// How often a server whose `upstream.health_check` is on probes its backend.
const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl Server {
    /// Builds `s` (one of `config.servers`); `accept_signature` is what its agent-credential
    /// refusals offer (`pipeline::Stages::accept_signature`). Nothing is fetched yet;
    /// [`Server::start`] starts the catalog's refreshes.
    pub fn build(config: &Config, s: &config::Server, accept_signature: &str) -> Result<Server, ConfigError> {
        let s = &s.of_single_form(config);
        let invalid = |e: FieldError| {
            let field = match s.form {
                Form::Single => e.field,
                Form::Many => format!("servers[{}].{}", s.name, e.field),
            };
            ConfigError::Invalid { origin: config.origin.clone(), errors: vec![FieldError::new(field, e.reason)] }
        };
        let origin = config.listen.public_url.origin().ascii_serialization();
        let credentials = UpstreamCredentials::new(&s.upstream.auth, &config.oauth, &origin).map_err(invalid)?;
        let catalog = if s.tools.is_enabled() { Some(Arc::new(Catalog::new(&s.tools, &s.upstream, &s.endpoint).map_err(invalid)?)) } else { None };
        // A server that names no scopes of its own lists `oauth.scopes_supported`.
        let scopes = if s.form == Form::Single || s.scopes_supported.is_empty() { &config.oauth.scopes_supported } else { &s.scopes_supported };
        let challenge = Challenge {
            resource_metadata: s.resource_metadata_url(),
            scope: scopes.join(" "),
            accept_signature: accept_signature.to_owned(),
            dpop_algs: if config.oauth.dpop.is_some() { portcullis_wire::dpop::ACCEPTED_ALGS.to_owned() } else { String::new() },
        };
        let resource = s.resource.as_str().trim_end_matches('/').to_owned();
        let input = crate::policy::server_value(&s.name, &s.path, &resource);
        Ok(Server {
            name: intern(&s.name),
            upstream: Upstream::new(s, credentials).map_err(|e| invalid(tls_field(e)))?,
            metadata: metadata_document(config, &resource, scopes),
            catalog,
            challenge,
            slots: Arc::new(Semaphore::new(s.max_in_flight)),
            streams: Arc::new(Semaphore::new(s.upstream.max_streams)),
            input,
            stage_series: Default::default(),
            retired: tokio_util::sync::CancellationToken::new(),
            // A default in-flight bound (a share of the global one) moves when servers are added
            // or removed: that alone does not make a server changed (it keeps its bound).
            fingerprint: {
                let set = if s.upstream.max_in_flight.is_some() { s.max_in_flight } else { 0 };
                format!("{:?}|{:?}|{:?}", config::Server { max_in_flight: set, ..s.clone() }, config.oauth, config.signatures.components)
            },
            config: s.clone(),
            _refresher: None,
            health: Arc::default(),
            _prober: None,
        })
    }

    /// Starts fetching its catalog now and every `tools.refresh` (inside the runtime).
    fn start(mut self) -> Server {
        self._refresher = self.catalog.as_ref().map(|c| AbortOnDrop(c.spawn_refresher()));
        if self.config.upstream.health_check {
            let (upstream, health) = (self.config.upstream.clone(), self.health.clone());
            self._prober = Some(AbortOnDrop(tokio::spawn(async move {
                loop {
                    let result = probe(&upstream).await;
                    *health.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
                    tokio::time::sleep(HEALTH_EVERY).await;
                }
            })));
        }
        self
    }

    /// Whether its backend accepts connections (`upstream.health_check`): the last probe's
    /// result, or a probe now when none has finished yet. `None`: not checked.
    pub(crate) async fn upstream_health(&self) -> Option<Result<(), String>> {
        if !self.config.upstream.health_check {
            return None;
        }
        let last = self.health.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match last {
            Some(result) => Some(result),
            None => Some(probe(&self.config.upstream).await),
        }
    }

    /// Its RFC 9728 metadata paths: the path-suffixed one, and (single-server form, or a
    /// server at `/`) the root one.
    fn metadata_paths(&self) -> Vec<String> {
        let suffix = self.config.path.trim_end_matches('/');
        let mut paths = Vec::new();
        if self.config.form == Form::Single || suffix.is_empty() {
            paths.push(METADATA_PATH.to_owned());
        }
        if !suffix.is_empty() {
            paths.push(format!("{METADATA_PATH}{suffix}"));
        }
        paths
    }

    /// What the stages need of it, for one request.
    pub fn scope(&self) -> crate::pipeline::ServerScope<'_> {
        crate::pipeline::ServerScope {
            name: self.name,
            mode: self.config.mode,
            audience: &self.config.audience,
            catalog: self.catalog.as_ref(),
            input: &self.input,
            is_many: self.config.form == Form::Many,
        }
    }

    /// Its RFC 9728 document.
    pub(crate) fn metadata(&self) -> Bytes {
        self.metadata.clone()
    }

    /// Its backend's credential source.
    pub(crate) fn credentials(&self) -> &UpstreamCredentials {
        self.upstream.credentials()
    }

    /// The latency histogram of `stage` for this server.
    pub(crate) fn stage_series(&self) -> &crate::telemetry::StageSeries {
        &self.stage_series
    }

    /// Registers its own counters with `metrics`, labelled `server`: its catalog's and its
    /// token exchanges'.
    pub(crate) fn register(&self, metrics: &mut crate::telemetry::Metrics) {
        metrics.register_with(|registry| {
            let sub = registry.sub_registry_with_label(("server".into(), self.name.into()));
            if let Some(catalog) = &self.catalog {
                let m = catalog.metrics();
                sub.register("catalog_refreshes", "Tool catalog fetches by result (ok, error)", m.refreshes.clone());
                sub.register("catalog_stale", "1 while there is no tool catalog or its last fetch failed (the last good one stays in use)", m.stale.clone());
                sub.register("catalog_tools", "Tools in the catalog in use", m.tools.clone());
                sub.register("catalog_drift", "Tool definitions seen drifting from their pin, once per change", m.drift.clone());
            }
            if let Some(m) = self.credentials().exchange_metrics() {
                sub.register(
                    "upstream_token_exchanges",
                    "Token exchanges for the backend's credential (upstream.auth), by result: issued, cached, refused, unavailable, over_budget",
                    m.exchanges.clone(),
                );
            }
        });
    }
}

/// A TLS error as the config error naming its `upstream.*` key.
fn tls_field(e: crate::tls::TlsError) -> FieldError {
    let field = match &e {
        crate::tls::TlsError::Read { field, .. } | crate::tls::TlsError::Invalid { field, .. } => *field,
        _ => "upstream.url",
    };
    FieldError::new(field, e.to_string())
}

/// Every server, and where each path goes. Replaced whole by a reload.
pub(crate) struct Table {
    servers: Vec<Arc<Server>>,
    /// Each served path (a server's path and its extra paths) → its server: one hash lookup
    /// whatever the number of servers.
    by_path: HashMap<String, usize>,
    /// Each RFC 9728 document's path → its server.
    by_metadata: HashMap<String, usize>,
}

impl Table {
    /// Builds every server of `config`. `keep` are the servers of the running table: one whose
    /// settings did not change is kept as it is (its pool, catalog and streams go on).
    pub(crate) fn build(config: &Config, accept_signature: &str, keep: Option<&Table>) -> Result<(Table, Changes), ConfigError> {
        let mut servers = Vec::new();
        let mut changes = Changes::default();
        for s in &config.servers {
            let fresh = Server::build(config, s, accept_signature)?;
            let kept = keep.and_then(|t| t.servers.iter().find(|o| o.config.name == s.name));
            match kept {
                Some(old) if old.fingerprint == fresh.fingerprint => {
                    changes.unchanged.push(s.name.clone());
                    servers.push(old.clone());
                }
                Some(_) => {
                    changes.changed.push(s.name.clone());
                    servers.push(Arc::new(fresh.start()));
                }
                None => {
                    if keep.is_some() {
                        changes.added.push(s.name.clone());
                    }
                    servers.push(Arc::new(fresh.start()));
                }
            }
        }
        if let Some(old) = keep {
            changes.removed = old.servers.iter().filter(|o| !config.servers.iter().any(|s| s.name == o.config.name)).map(|o| o.config.name.clone()).collect();
        }
        let mut by_path = HashMap::new();
        let mut by_metadata = HashMap::new();
        for (i, s) in servers.iter().enumerate() {
            for p in s.config.paths() {
                by_path.entry(p.to_owned()).or_insert(i);
            }
            for p in s.metadata_paths() {
                by_metadata.entry(p).or_insert(i);
            }
        }
        Ok((Table { servers, by_path, by_metadata }, changes))
    }

    /// The server serving `path` (the request target's path, as sent), if any: each server's
    /// path and extra paths are matched byte for byte. A case or slash variant, a dot segment or
    /// a percent-encoded character is another path, refused with 404 before any stage: many
    /// backends route `/MCP` or `/mcp/` to the `/mcp` handler while a policy written for `/mcp`
    /// would not see it as such.
    pub(crate) fn find(&self, path: &str) -> Option<&Arc<Server>> {
        self.by_path.get(path).map(|&i| &self.servers[i])
    }

    /// The server whose RFC 9728 document is at `path`, if any.
    pub(crate) fn metadata_at(&self, path: &str) -> Option<&Arc<Server>> {
        self.by_metadata.get(path).map(|&i| &self.servers[i])
    }

    /// Every server, in config order.
    pub(crate) fn all(&self) -> &[Arc<Server>] {
        &self.servers
    }

    /// The server named `name`.
    pub(crate) fn named(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.config.name == name)
    }

    /// The servers of this table that `next` removed or changed: the ones to retire.
    pub(crate) fn retired_by(&self, changes: &Changes) -> Vec<Arc<Server>> {
        self.servers.iter().filter(|s| changes.removed.contains(&s.config.name) || changes.changed.contains(&s.config.name)).cloned().collect()
    }
}

/// What a reload did, by server name.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    pub(crate) changed: Vec<String>,
    pub(crate) unchanged: Vec<String>,
}

/// The RFC 9728 document of the resource `resource`.
fn metadata_document(config: &Config, resource: &str, scopes: &[String]) -> Bytes {
    let oauth = &config.oauth;
    let mut doc = serde_json::json!({
        "resource": resource,
        "authorization_servers": oauth.issuer.iter().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
    });
    if !scopes.is_empty() {
        doc["scopes_supported"] = serde_json::json!(scopes);
    }
    // RFC 9728 §2: the proof algorithms accepted; tokens need not be DPoP-bound unless
    // `oauth.require_sender_constrained` says so.
    if oauth.dpop.is_some() {
        doc["dpop_signing_alg_values_supported"] = serde_json::json!(portcullis_wire::dpop::ACCEPTED_ALGS.split(' ').collect::<Vec<_>>());
        doc["dpop_bound_access_tokens_required"] = serde_json::json!(oauth.require_sender_constrained);
    }
    Bytes::from(doc.to_string())
}

/// `name` for the life of the process (a metric label must be `'static`). Each distinct name is
/// kept once, so reloads do not grow it beyond the names ever configured.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

pin_project_lite::pin_project! {
    /// A response body that holds one of its server's stream permits until it ends or is
    /// dropped (the client went away); it ends early when a reload retires its server.
    struct Holding {
        #[pin]
        inner: http_body_util::combinators::BoxBody<Bytes, hyper::Error>,
        #[pin]
        retired: tokio_util::sync::WaitForCancellationFutureOwned,
        permit: tokio::sync::OwnedSemaphorePermit,
    }
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        if std::future::Future::poll(this.retired, cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// `resp` (an event stream of `server`) holding `permit` for as long as its body is read.
pub(crate) fn holding(
    server: &Server,
    resp: http::Response<http_body_util::combinators::BoxBody<Bytes, hyper::Error>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> http::Response<http_body_util::combinators::BoxBody<Bytes, hyper::Error>> {
    use http_body_util::BodyExt;
    let retired = server.retired.clone().cancelled_owned();
    resp.map(|inner| Holding { inner, retired, permit }.boxed())
}

/// Opens (and closes) a TCP connection to the backend's host and port, within its
/// `connect_timeout` but at most 1 s. The error names the address and the cause.
async fn probe(upstream: &config::Upstream) -> Result<(), String> {
    let host = upstream.url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = upstream.url.port_or_known_default().unwrap_or(80);
    let limit = upstream.connect_timeout.min(std::time::Duration::from_secs(1));
    match tokio::time::timeout(limit, tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("{host}:{port}: {e}")),
        Err(_) => Err(format!("{host}:{port}: no connection within {limit:?}")),
    }
}

/// A background task that ends when its owner is dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Table {
        let config = Config::parse(text, "test", std::path::Path::new(".")).expect("valid");
        Table::build(&config, "", None).expect("builds").0
    }

    #[tokio::test]
    async fn only_each_servers_path_and_listed_paths_are_served_byte_for_byte() {
        let single = table(
            "[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://mcp.example.com/mcp\"\n[upstream]\nurl = \"http://127.0.0.1:9\"\nextra_paths = [\"/sse\"]\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n",
        );
        for served in ["/mcp", "/sse"] {
            assert!(single.find(served).is_some(), "{served}");
        }
        for refused in ["/MCP", "/mcp/", "/mcp/.", "/./mcp", "//mcp", "/%6dcp", "/mcp%2F", "/", "/sse/x"] {
            assert!(single.find(refused).is_none(), "{refused}");
        }
        let root = table(
            "[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://mcp.example.com\"\n[upstream]\nurl = \"http://127.0.0.1:9\"\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n",
        );
        assert!(root.find("/").is_some());
    }
}
