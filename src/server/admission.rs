//! Admission control: the client request path as a tower [`Service`] stack around the
//! per-request handler ([`Shared::handle`]):
//!
//! ```text
//! Timeout(limits.request_timeout) → handler
//! ```
//!
//! - **In flight** (`limits.max_in_flight`, taken in the handler: `Shared::slots`) is a request
//!   from the end of its body read until the handler returns its response head: every stage
//!   and the wait for the backend's headers. The body read is not counted: a slow upload is
//!   bounded by `limits.body_timeout` and `limits.max_body_in_flight`, and counting it would
//!   let a few dozen HTTP/2 connections of stalled uploads (100 streams each) hold every slot
//!   and have everyone else shed. A streamed response body (SSE) is not counted either: it
//!   costs a connection, not a handler, and `limits.max_connections` and
//!   `limits.idle_timeout` bound those. The slots are shared by every connection.
//! - **Shedding**: with every slot taken, a new request is answered at once with 503
//!   `overloaded` and `Retry-After: 1` ([`Denial::Shed`]) rather than queued: a queue would
//!   hold its connection and memory while the backlog it waits behind only grows. It is counted
//!   (`portcullis_requests_total{error="overloaded"}`) and logged like any refusal, in both modes
//!   (a resource bound, not a decision).
//! - **Timeout**: a handler that has not produced a response head within
//!   `limits.request_timeout` of admission is dropped wherever it is (the backend request
//!   included) and the client gets 504 `request_timeout` ([`Denial::RequestTimeout`]).
//! - **Heads** (`limits.max_header_bytes_in_flight`): a request's head (its target, and each
//!   field's name and value plus 32 bytes, as HTTP/2 counts a header list) is reserved on
//!   arrival and held until its response head is sent, over all connections. hyper bounds one
//!   head (`limits.max_header_bytes`) and the streams of one connection; this bounds their sum
//!   over every connection, which streams waiting on stalled bodies or a slow backend would
//!   otherwise hold up to `max_connections` × `max_streams_per_connection` × `max_header_bytes`.
//!   A head that does not fit is refused at once, unread: 503 `overloaded`, `Retry-After: 1`
//!   ([`Denial::HeadsOverloaded`]), counted in `portcullis_bounds_reached_total`.
//!
//! Not behind the stack: the RFC 9728 document (a static answer from memory, cheaper than the
//! refusal that would replace it, and what a client that was just refused with 401 needs next)
//! and the admin listener (its own port and tasks).
//!
//! The whole stack runs in the request's own task, so a client that goes away does not cancel
//! its request half-way: the slot stays taken until the handler is done, and the decision-log
//! line is written.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;
use tower::timeout::{error::Elapsed, Timeout};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tracing::{info_span, warn};

use super::handle::{Arrived, Logged, Trail};
use super::{with_request_id, Shared};
use crate::decision::{self, Denial, ResponseBody};
use crate::inbound::Peer;

/// The handler as the innermost service: always ready, never fails.
#[derive(Clone)]
struct Handler {
    shared: Arc<Shared>,
    peer: Peer,
    is_tls: bool,
    /// The arrival [`Admission::serve`] recorded for the one request this copy of the stack
    /// serves (handed over here rather than in the request's extensions, whose first entry
    /// allocates a map); `None` for a request that did not come through it.
    arrived: Option<Arrived>,
}

impl Service<Request<Incoming>> for Handler {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<ResponseBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let arrived = self.arrived.take().unwrap_or_else(Arrived::now);
        in_place(|| self.shared.clone().handle(req, self.peer.clone(), self.is_tls, arrived).map(Ok))
    }
}

/// The future `make` returns, made in a fresh allocation: `Box::pin(future)` builds it on the
/// stack and copies it over (for a request's ~11 KB future, an 11 KB memcpy per request). With
/// the allocation made first, the compiler builds the future straight into it.
fn in_place<F: Future + Send + 'static>(make: impl FnOnce() -> F) -> BoxFuture<'static, F::Output> {
    let slot = Box::new_uninit();
    let boxed: Box<F> = Box::write(slot, make());
    Box::into_pin(boxed)
}

type Stack = Timeout<Handler>;

/// The admission-controlled request path of one client connection. Cloned per request.
#[derive(Clone)]
pub(crate) struct Admission {
    /// The handler behind the stack (`get_ref`, `into_inner`).
    stack: Stack,
}

impl Admission {
    /// The path for requests from `peer`.
    pub(crate) fn new(shared: &Arc<Shared>, peer: SocketAddr, is_tls: bool) -> Admission {
        let handler = Handler { shared: shared.clone(), peer: Peer::from(peer), is_tls, arrived: None };
        Admission { stack: ServiceBuilder::new().timeout(shared.config.limits.request_timeout).service(handler) }
    }

    /// Answers `req`: through the stack, or straight from the handler for the RFC 9728
    /// document.
    pub(crate) async fn serve(self, req: Request<Incoming>) -> Response<ResponseBody> {
        let shared = self.stack.get_ref().shared.clone();
        if shared.is_document(req.uri().path()) {
            return self.stack.into_inner().oneshot(req).await.unwrap_or_else(|never| match never {});
        }
        let arrival = Arrival { arrived: Arrived::now(), method: req.method().clone(), uri: req.uri().clone() };
        // Held until the response head is returned: the request's head is in memory until then.
        let mut head = shared.head_budget.reservation();
        if !head.grow_to(head_bytes(&req)) {
            shared.metrics.bound_reached("max_header_bytes_in_flight");
            static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
            if let Some(held) = THROTTLE.admit() {
                warn!(
                    limit = shared.config.limits.max_header_bytes_in_flight,
                    similar_held_back = held,
                    "Request refused: the heads of the requests in flight fill limits.max_header_bytes_in_flight (each one is counted in portcullis_bounds_reached_total)"
                );
            }
            return refuse(&shared, &arrival, Ok(Denial::HeadsOverloaded));
        }
        let mut stack = self.stack;
        stack.get_mut().arrived = Some(arrival.arrived.clone());
        match stack.oneshot(req).await {
            Ok(resp) => resp,
            Err(e) => refuse(&shared, &arrival, unadmitted(e, shared.config.limits.request_timeout)),
        }
    }
}

/// The bytes `req`'s head holds, as HTTP/2 counts a header list (RFC 9113 §6.5.2: each field's
/// name and value plus 32), and its target.
fn head_bytes(req: &Request<Incoming>) -> u64 {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len()) + req.uri().authority().map_or(0, |a| a.as_str().len());
    let fields: usize = req.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 32).sum();
    (target + fields) as u64
}

/// What is known of a request that the stack refused: it was never read further.
struct Arrival {
    arrived: Arrived,
    method: Method,
    uri: Uri,
}

/// The refusal for an error of the stack.
fn unadmitted(e: BoxError, timeout: Duration) -> Result<Denial, BoxError> {
    if e.is::<Elapsed>() {
        Ok(Denial::RequestTimeout { after: timeout })
    } else {
        Err(e)
    }
}

/// Answers, logs and counts a request the stack refused, as the handler does every refusal.
/// The decision-log line has no stage fields (`agent`, `sub`, `tool`, …): the request was shed
/// unread, or its handling was dropped with what it had learnt.
fn refuse(shared: &Shared, arrival: &Arrival, denial: Result<Denial, BoxError>) -> Response<ResponseBody> {
    let Arrival { arrived: Arrived { id, at, wall }, method, uri } = arrival;
    let span = info_span!("request", request_id = %id, method = %method, path = %uri.path());
    let _entered = span.enter();
    let denial = match denial {
        Ok(d) => d,
        // The handler never fails and the layers make no other error.
        Err(e) => {
            tracing::error!(error = %e, "Request handler failed");
            return with_request_id(decision::respond_upstream(&decision::UpstreamError::Failed("request handler failed".into()), id), id);
        }
    };
    if let Denial::RequestTimeout { after } = &denial {
        warn!(after = ?after, "Request not answered within limits.request_timeout; stopped");
    }
    // The server the path names, for the log and the metrics (the request was never routed).
    let servers = shared.servers.load();
    let server = servers.find(uri.path()).map(|s| &**s);
    let answered = shared.refuse(&denial, id, server);
    let logged = Logged { server, request_id: id, method: method.as_str(), path: uri.path(), wall: *wall, at: *at };
    shared.record(Trail::refused(&denial), answered, &logged)
}
