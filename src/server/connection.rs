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
//!
//! A client that stops reading an answer: hyper stops asking the response body for more once
//! the socket (HTTP/1.1) or the stream's flow-control window (HTTP/2) is full, so the body, and
//! the backend connection it streams from, would be held for as long as the client lets the
//! connection live. So a response body that handed a frame out and has not been asked for the
//! next one for `limits.write_timeout`, while nothing else on the connection progressed
//! either, has its connection dropped (no graceful close: the client is not reading it).
//! An answer that ended but is still being flushed holds no body; the idle timer closes it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};
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
    /// `limits.write_timeout`.
    pub(crate) write: Duration,
}

impl Deadlines {
    /// The deadlines for a connection accepted at `accepted`.
    pub(crate) fn new(limits: &Limits, accepted: Instant) -> Deadlines {
        Deadlines { first_request: accepted + limits.header_timeout, idle: limits.idle_timeout, write: limits.write_timeout }
    }
}

/// Why a connection is being closed by the gateway.
enum Close {
    Idle,
    Shutdown,
    WriteStalled,
}

/// Serves HTTP on `io` until the peer closes, a deadline in `deadlines` passes (the
/// connection is closed) or `stop` turns true (graceful close; the caller bounds how long that
/// may take). `respond` answers each request. A close for `limits.write_timeout` is counted in
/// `write_timeouts`.
pub(crate) async fn serve<I, F, Fut>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    peer: SocketAddr,
    deadlines: Deadlines,
    mut stop: watch::Receiver<bool>,
    respond: F,
    write_timeouts: Counter,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let activity = Activity::new(deadlines.idle);
    let counter = activity.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        // Counted from here, synchronously with hyper handing the request over.
        let in_flight = counter.start();
        let answer = respond(req);
        async move { Ok::<_, Infallible>(in_flight.until_body_end(answer.await)) }
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let closers = async {
        tokio::select! {
            () = activity.idle(deadlines.first_request) => Close::Idle,
            () = activity.write_stalled(deadlines.write) => Close::WriteStalled,
            _ = stop.wait_for(|stopping| *stopping) => Close::Shutdown,
        }
    };
    let why = tokio::select! {
        biased;
        res = conn.as_mut() => return finished(res, peer),
        why = OnWake::new(closers) => why,
    };
    if let Close::WriteStalled = why {
        // Dropping the connection drops the response bodies and the backend answers they read.
        write_timeouts.inc();
        static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
        if let Some(held) = THROTTLE.admit() {
            tracing::warn!(
                peer = %peer,
                after = ?deadlines.write,
                similar_held_back = held,
                "Closed a connection whose client stopped reading its answer (limits.write_timeout; each one is counted in portcullis_bounds_reached_total)"
            );
        }
        return;
    }
    conn.as_mut().graceful_shutdown();
    match why {
        // The accept loop aborts what outlives `limits.shutdown_grace`.
        Close::Shutdown | Close::WriteStalled => finished(conn.await, peer),
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

/// A future polled only when it asked to be woken itself, not every time the task it shares
/// is: hyper wakes a connection's task several times per request, and the idle timer and the
/// shutdown signal beside it had nothing new to say on any of those (polling them cost ~1,700
/// instructions per request).
struct OnWake<F> {
    future: Pin<Box<F>>,
    flag: Arc<WakeFlag>,
    /// `flag` as a waker, made once.
    waker: std::task::Waker,
}

struct WakeFlag {
    woken: std::sync::atomic::AtomicBool,
    task: futures_util::task::AtomicWaker,
}

impl std::task::Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.task.wake();
    }
}

impl<F: Future> OnWake<F> {
    fn new(future: F) -> OnWake<F> {
        // Woken to begin with: the first poll starts the future.
        let flag = Arc::new(WakeFlag { woken: std::sync::atomic::AtomicBool::new(true), task: futures_util::task::AtomicWaker::new() });
        OnWake { future: Box::pin(future), waker: std::task::Waker::from(flag.clone()), flag }
    }
}

impl<F: Future> Future for OnWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read: a wake in between is seen now or wakes the task.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::SeqCst) {
            return Poll::Pending;
        }
        this.future.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

fn finished<E: std::fmt::Display>(res: Result<(), E>, peer: SocketAddr) {
    if let Err(e) = res {
        tracing::debug!(peer = %peer, error = %e, "Connection ended with an error");
    }
}

/// How many requests of one connection are in flight, and when the last one ended: read by
/// the idle timer when it fires. A request costs two atomic updates and a clock read, and wakes
/// the timer only when it ends before the moment the timer is armed for (the first request,
/// while the timer still waits for `limits.header_timeout`); otherwise the timer, on waking,
/// finds the later end and sleeps on until `limits.idle_timeout` after it.
#[derive(Clone)]
struct Activity(Arc<ActivityState>);

struct ActivityState {
    in_flight: AtomicUsize,
    /// 1 + when a request last ended, in ns after `since`; 0 before any request ended.
    last_end: AtomicU64,
    /// When the idle timer is armed for, in ns after `since`.
    armed: AtomicU64,
    /// `limits.idle_timeout`.
    idle: Duration,
    since: Instant,
    /// Woken when the count falls to zero.
    ended: Notify,
    /// Woken when a request ended before the moment the timer is armed for.
    rearm: Notify,
    /// Response bodies that handed a frame out and have not been asked for the next one.
    waiting: AtomicUsize,
    /// Bumped every time a response body is asked for a frame: the connection is writing.
    progress: AtomicU64,
    /// Whether the write watchdog is timing a wait (then a new waiting body need not wake it).
    write_armed: AtomicBool,
    /// Woken when a body starts waiting while the watchdog is not timing.
    write_wait: Notify,
}

impl Activity {
    fn new(idle: Duration) -> Activity {
        Activity(Arc::new(ActivityState {
            in_flight: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            armed: AtomicU64::new(u64::MAX),
            idle,
            since: Instant::now(),
            ended: Notify::new(),
            rearm: Notify::new(),
            waiting: AtomicUsize::new(0),
            progress: AtomicU64::new(0),
            write_armed: AtomicBool::new(false),
            write_wait: Notify::new(),
        }))
    }

    /// Resolves when a response body has waited `timeout` for the client to take its last frame
    /// while no body of the connection was asked for anything (the client stopped reading).
    async fn write_stalled(&self, timeout: Duration) {
        let state = &self.0;
        loop {
            let waited = state.write_wait.notified();
            tokio::pin!(waited);
            waited.as_mut().enable();
            state.write_armed.store(false, Ordering::SeqCst);
            if state.waiting.load(Ordering::SeqCst) == 0 {
                waited.await;
            }
            state.write_armed.store(true, Ordering::SeqCst);
            let before = state.progress.load(Ordering::SeqCst);
            tokio::time::sleep(timeout).await;
            if state.waiting.load(Ordering::SeqCst) > 0 && state.progress.load(Ordering::SeqCst) == before {
                return;
            }
        }
    }

    fn start(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.0.clone())
    }

    /// Resolves when the connection has had no request in flight for too long: before the
    /// first request, at `first_request`; later, `limits.idle_timeout` after the last request
    /// finished.
    async fn idle(&self, first_request: Instant) {
        let state = &self.0;
        let mut wake_at = first_request;
        loop {
            state.armed.store(nanos_since(state.since, wake_at), Ordering::SeqCst);
            tokio::select! {
                () = tokio::time::sleep_until(wake_at) => {}
                () = state.rearm.notified() => {}
            }
            self.wait_until_idle().await;
            let due = match state.last_end.load(Ordering::SeqCst) {
                0 => first_request,
                ns => state.since + Duration::from_nanos(ns - 1) + state.idle,
            };
            if due <= Instant::now() {
                return;
            }
            wake_at = due;
        }
    }

    async fn wait_until_idle(&self) {
        loop {
            let ended = self.0.ended.notified();
            tokio::pin!(ended);
            // Registered before the check, so a request ending in between is not missed.
            ended.as_mut().enable();
            if self.0.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// `at` as ns after `since` (0 if before it).
fn nanos_since(since: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(since).as_nanos()).unwrap_or(u64::MAX - 1)
}

/// One request in flight; dropping it ends it.
struct InFlight(Arc<ActivityState>);

impl InFlight {
    /// Keeps the request in flight until `resp`'s body is finished or dropped.
    fn until_body_end(self, resp: Response<ResponseBody>) -> Response<ResponseBody> {
        resp.map(|inner| Tracked { inner, is_waiting: false, in_flight: self }.boxed())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let state = &self.0;
        // Stamped before the count falls, so the timer never finds the connection idle with an
        // older end; the latest stamp wins when requests end together.
        let ns = nanos_since(state.since, Instant::now());
        state.last_end.fetch_max(ns + 1, Ordering::SeqCst);
        if state.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            state.ended.notify_waiters();
        }
        // The timer sleeps past the moment this connection could now be closed: wake it (a
        // stored permit if it is not waiting yet).
        let due = ns.saturating_add(u64::try_from(state.idle.as_nanos()).unwrap_or(u64::MAX));
        if due < state.armed.load(Ordering::SeqCst) {
            state.rearm.notify_one();
        }
    }
}

/// A response body that holds its request's [`InFlight`] until hyper drops it, and tells the
/// write watchdog when it waits for the client to take a frame.
struct Tracked {
    inner: ResponseBody,
    /// A frame was handed out and the next one not asked for yet.
    is_waiting: bool,
    in_flight: InFlight,
}

impl Tracked {
    fn stop_waiting(&mut self) {
        if std::mem::take(&mut self.is_waiting) {
            self.in_flight.0.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        this.stop_waiting();
        this.in_flight.0.progress.fetch_add(1, Ordering::Relaxed);
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        // A last frame is not waited on: hyper may never ask again.
        if matches!(polled, Poll::Ready(Some(Ok(_)))) && !this.inner.is_end_stream() {
            this.is_waiting = true;
            let state = &this.in_flight.0;
            if state.waiting.fetch_add(1, Ordering::SeqCst) == 0 && !state.write_armed.load(Ordering::SeqCst) {
                state.write_wait.notify_one();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// Counts its polls; stays pending, keeping the last waker it was given.
    struct Probe {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<std::task::Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn on_wake_polls_its_future_only_after_its_own_wake() {
        let (polls, waker) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
        let mut closers = OnWake::new(Probe { polls: polls.clone(), waker: waker.clone() });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // The task is polled many times (hyper's wake-ups); the future only the first time.
        for _ in 0..5 {
            assert!(Pin::new(&mut closers).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // Its own wake (a timer firing, the shutdown signal) gets it polled once more.
        waker.lock().unwrap().take().unwrap().wake();
        for _ in 0..3 {
            assert!(Pin::new(&mut closers).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
