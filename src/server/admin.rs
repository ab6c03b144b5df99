//! The admin listener: `/healthz` (the process serves), `/readyz` (it should get traffic),
//! `/metrics` (Prometheus text). Kept off the client-facing port so it is never exposed with it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::connection::{self, Deadlines};
use super::Shared;
use crate::decision::{full, json_response, ResponseBody};

/// Serves admin requests until `stop` flips. At most `limits.max_admin_connections` are open
/// at once: past it a new connection is closed as soon as it is accepted (a probe fails at once
/// rather than waiting), counted and logged.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let builder = Arc::new(connection::builder(&shared.config.limits));
    let permits = Arc::new(tokio::sync::Semaphore::new(shared.config.limits.max_admin_connections));
    let write_timeouts = shared.metrics.bound_counter("write_timeout");
    loop {
        let (stream, peer) = tokio::select! {
            res = listener.accept() => match res {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "Admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            shared.metrics.bound_reached("max_admin_connections");
            static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
            if let Some(held) = THROTTLE.admit() {
                tracing::warn!(
                    peer = %peer,
                    limit = shared.config.limits.max_admin_connections,
                    similar_held_back = held,
                    "Admin connection closed: limits.max_admin_connections are open (each one is counted in portcullis_bounds_reached_total)"
                );
            }
            continue;
        };
        let (shared, builder, stop, write_timeouts) = (shared.clone(), builder.clone(), stop.clone(), write_timeouts.clone());
        // The same deadlines as client connections: a silent or idle probe connection is
        // closed, never kept.
        let deadlines = Deadlines::new(&shared.config.limits, tokio::time::Instant::now());
        tokio::spawn(async move {
            let _permit = permit;
            let respond = move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move { route(&shared, &req).await }
            };
            connection::serve(&builder, stream, peer, deadlines, stop, respond, write_timeouts).await;
        });
    }
}

async fn route(shared: &Shared, req: &Request<Incoming>) -> Response<ResponseBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return json_response(StatusCode::METHOD_NOT_ALLOWED, &serde_json::json!({"error": "method_not_allowed"}), Vec::new());
    }
    match req.uri().path() {
        "/healthz" => json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}), Vec::new()),
        "/readyz" => {
            let shutting_down = shared.is_shutting_down.load(Ordering::SeqCst);
            let status = if shutting_down { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
            // The shared store is reported, not gating: every replica shares it, so taking them
            // all out of rotation would turn clear 503 `state_unavailable` refusals into
            // connection errors.
            let state = match shared.stages.state_check().await {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("unavailable: {e}"),
            };
            let health = shared.stages.policy.health();
            // A failed reload keeps the previous policy serving, so it does not make the
            // gateway unready; the detail says what failed.
            let policy = match health.last_error() {
                None => serde_json::json!({"status": "ok", "version": shared.stages.policy.version()}),
                Some(e) => serde_json::json!({"status": "reload_failed", "version": shared.stages.policy.version(), "error": e}),
            };
            // `/readyz?server=NAME` judges one server; without it, every server must be ready.
            let table = shared.servers.load();
            let asked = req.uri().query().and_then(|q| url::form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "server").map(|(_, v)| v.into_owned()));
            let judged: Vec<_> = match &asked {
                Some(name) => match table.named(name) {
                    Some(s) => vec![s.clone()],
                    None => {
                        let reason = format!("no server is named {name:?}");
                        return json_response(StatusCode::NOT_FOUND, &serde_json::json!({"error": "not_found", "reason": reason}), Vec::new());
                    }
                },
                None => table.all().to_vec(),
            };
            // Probed at once: one slow backend does not slow the answer by the number of servers.
            let states = futures_util::future::join_all(judged.iter().map(|s| server_state(s))).await;
            let all_ready = states.iter().all(|(ready, _)| *ready);
            let status = if all_ready { status } else { StatusCode::SERVICE_UNAVAILABLE };
            let modes = &shared.config.mode;
            let mode: serde_json::Map<String, serde_json::Value> =
                crate::config::Group::ALL.iter().map(|g| (g.as_str().to_owned(), modes.of(*g).as_str().into())).collect();
            let servers: serde_json::Map<String, serde_json::Value> =
                judged.iter().zip(&states).map(|(s, (_, detail))| (s.config.name.clone(), detail.clone())).collect();
            // The single-server form's checks, where they always were.
            let first = states.first().map(|(_, d)| d.clone()).unwrap_or_default();
            let body = serde_json::json!({
                "ready": !shutting_down && all_ready,
                "mode": mode,
                "checks": {
                    "listener": if shutting_down { "shutting_down" } else { "ok" },
                    "state": state,
                    "policy": policy,
                    "upstream": first["upstream"],
                    "catalog": first["catalog"],
                },
                "servers": servers,
            });
            json_response(status, &body, Vec::new())
        }
        "/metrics" => {
            let mut resp = Response::new(full(shared.metrics.encode()));
            resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"));
            resp.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        _ => json_response(StatusCode::NOT_FOUND, &serde_json::json!({"error": "not_found", "reason": "admin paths: /healthz /readyz /metrics"}), Vec::new()),
    }
}

/// Whether `server` is ready, and its `/readyz` detail: `upstream` (probed when its
/// `health_check` is on), `catalog`, `mode`, `ready`.
async fn server_state(server: &crate::servers::Server) -> (bool, serde_json::Value) {
    let c = &server.config;
    let upstream = server.upstream_health().await;
    let upstream_down = upstream.as_ref().is_some_and(Result::is_err);
    // A stale catalog keeps serving; only one that calls are refused for want of is unready.
    let is_required = crate::decision::is_catalog_required(&server.config.mode, c.tools.unpinned);
    let catalog = server.catalog.as_ref().map(|cat| cat.readiness(is_required));
    let catalog_down = catalog.as_ref().is_some_and(|c| !c.is_ready);
    let upstream = match upstream {
        None => "not_checked".to_owned(),
        Some(Ok(())) => "ok".to_owned(),
        Some(Err(e)) => format!("unreachable: {e}"),
    };
    let ready = !upstream_down && !catalog_down;
    let detail = serde_json::json!({
        "ready": ready,
        "path": c.path,
        "mode": server.config.mode.describe(),
        "upstream": upstream,
        "catalog": catalog.map_or_else(|| serde_json::json!("not_configured"), |c| c.detail),
    });
    (ready, detail)
}

/// Probes `url` (plain HTTP, the admin listener) and succeeds on a 200 answer. Used by
/// `portcullis healthcheck`, so container images need no curl.
pub fn probe(url: &str, timeout: std::time::Duration) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = reqwest::Client::builder().timeout(timeout).no_proxy().build().map_err(|e| e.to_string())?;
        let resp = client.get(url).send().await.map_err(|e| format!("{url}: {}", portcullis_wire::error_chain(&e)))?;
        if resp.status() == StatusCode::OK {
            Ok(())
        } else {
            Err(format!("{url} answered {}", resp.status()))
        }
    })
}
