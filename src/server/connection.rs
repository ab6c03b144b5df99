//! One client connection's life: a deadline for every phase, the idle watchdog, and closing.
//!
//! What hyper 1 and hyper-util 0.1 enforce by themselves, and what they leave open:
//! - Until hyper-util's `auto` builder has read enough bytes to choose HTTP/1.1 or HTTP/2 (up
//!   to the 24-byte HTTP/2 preface) there is no timer at all: a socket that sends nothing, or
//!   23 bytes of the preface, would hold its `limits.max_connections` permit forever.
//! - HTTP/1.1: `header_read_timeout` runs from the moment hyper waits for a request head,
//!   also on a kept-alive connection right after a response, until the head is complete; it
//!   is a deadline, not reset by each byte. It bounds slow heads and idle keep-alive alike.
//! - HTTP/2: no preface, header or idle timer. Keep-alive pings only find peers that stopped
//!   answering; a live peer with no open stream keeps its connection forever.
//!
//! So every connection gets, here: its first request head complete within
//! `limits.header_timeout` of the accept (TLS handshake, protocol detection and the HTTP/2
//! preface included), and afterwards a close once no request has been in flight for
//! `limits.idle_timeout`. A request is in flight from the moment hyper hands it over until
//! its response body has been sent or dropped, so a long SSE stream keeps its connection.
//! Closing is graceful (HTTP/2 GOAWAY, HTTP/1.1 close); a peer that does not let it finish
//! within [`CLOSE_GRACE`] is dropped, unless a request is in flight by then.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Limits;
use crate::decision::ResponseBody;

/// How long a connection closed for idleness may take to finish closing (HTTP/2: the peer
/// acknowledging GOAWAY) before it is dropped. Nothing is in flight on it, so dropping loses
/// nothing; the wait only spares well-behaved clients a reset.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// HTTP/1.1 and HTTP/2 settings from `[limits]`: head size and count, head timeout, streams per
/// connection (each may hold a body of up to `max_body`, within `max_body_in_flight` over
/// all), and HTTP/2 keep-alive so dead peers are noticed.
pub(crate) fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(limits.max_header_bytes).max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32)
        .max_concurrent_streams(limits.max_streams_per_connection)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// When a connection must have shown activity.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    /// The first request head must be complete by then (accept + `limits.header_timeout`).
    pub(crate) first_request: Instant,
    /// `limits.idle_timeout`.
    pub(crate) idle: Duration,
}

impl Deadlines {
    /// The deadlines for a connection accepted at `accepted`.
    pub(crate) fn new(limits: &Limits, accepted: Instant) -> Deadlines {
        Deadlines { first_request: accepted + limits.header_timeout, idle: limits.idle_timeout }
    }
}

/// Why a connection is being closed by the gateway.
enum Close {
    Idle,
    Shutdown,
}

/// Serves HTTP on `io` until the peer closes, a deadline in `deadlines` passes (the
/// connection is closed) or `stop` turns true (graceful close; the caller bounds how long that
/// may take). `respond` answers each request.
pub(crate) async fn serve<I, F, Fut>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    peer: SocketAddr,
    deadlines: Deadlines,
    mut stop: watch::Receiver<bool>,
    respond: F,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let activity = Activity::new();
    let counter = activity.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        // Counted from here, synchronously with hyper handing the request over.
        let in_flight = counter.start();
        let answer = respond(req);
        async move { Ok::<_, Infallible>(in_flight.until_body_end(answer.await)) }
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let why = tokio::select! {
        res = conn.as_mut() => return finished(res, peer),
        () = activity.idle(deadlines) => Close::Idle,
        _ = stop.wait_for(|stopping| *stopping) => Close::Shutdown,
    };
    conn.as_mut().graceful_shutdown();
    match why {
        // The accept loop aborts what outlives `limits.shutdown_grace`.
        Close::Shutdown => finished(conn.await, peer),
        Close::Idle => {
            tracing::debug!(peer = %peer, "Closing a connection without a request in flight");
            let dropped = async {
                tokio::time::sleep(CLOSE_GRACE).await;
                activity.wait_until_idle().await;
            };
            tokio::select! {
                res = conn.as_mut() => finished(res, peer),
                () = dropped => tracing::debug!(peer = %peer, "Dropped a connection that did not finish closing"),
            }
        }
    }
}

fn finished<E: std::fmt::Display>(res: Result<(), E>, peer: SocketAddr) {
    if let Err(e) = res {
        tracing::debug!(peer = %peer, error = %e, "Connection ended with an error");
    }
}

/// How many requests of one connection are in flight, watched by the idle timer.
#[derive(Clone)]
struct Activity(Arc<watch::Sender<usize>>);

impl Activity {
    fn new() -> Activity {
        Activity(Arc::new(watch::Sender::new(0)))
    }

    fn start(&self) -> InFlight {
        self.0.send_modify(|n| *n += 1);
        InFlight(self.0.clone())
    }

    /// Resolves when the connection has had no request in flight for too long: before the
    /// first request, at `deadlines.first_request`; later, `deadlines.idle` after the last
    /// request finished.
    async fn idle(&self, deadlines: Deadlines) {
        let mut count = self.0.subscribe();
        let mut deadline = deadlines.first_request;
        loop {
            if *count.borrow_and_update() != 0 {
                // `self` holds the sender, so the channel cannot close under us.
                let _ = count.wait_for(|n| *n == 0).await;
                deadline = Instant::now() + deadlines.idle;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return,
                changed = count.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    deadline = Instant::now() + deadlines.idle;
                }
            }
        }
    }

    async fn wait_until_idle(&self) {
        let _ = self.0.subscribe().wait_for(|n| *n == 0).await;
    }
}

/// One request in flight; dropping it ends it.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    /// Keeps the request in flight until `resp`'s body is finished or dropped.
    fn until_body_end(self, resp: Response<ResponseBody>) -> Response<ResponseBody> {
        resp.map(|inner| Tracked { inner, _in_flight: self }.boxed())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that holds its request's [`InFlight`] until hyper drops it.
struct Tracked {
    inner: ResponseBody,
    _in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
