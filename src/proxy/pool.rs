//! The MCP backend's keep-alive connections: one HTTP/1.1 origin, so a stack of idle
//! connections and nothing to key them by.
//!
//! hyper-util's pooled client serves any number of origins: per request it hashes the
//! origin's (scheme, authority) key to check a connection out and again to put it back,
//! rewrites the target to origin-form and keeps the connection's metadata in the request's
//! extensions — ~6,500 of the pass-through's ~68,000 instructions per request. The gateway
//! has one origin, the backend, and builds the origin-form target itself.
//!
//! A connection goes back on the stack once its response has been read to the end (at once
//! when it came whole with its head); one whose response was dropped unfinished is closed,
//! as HTTP/1.1 requires. The newest idle connection is used first; one idle longer than
//! `upstream.pool_idle_timeout` is closed instead, before the backend closes it under a
//! request, and at most `upstream.pool_max_idle` are kept. A request that a reused
//! connection could not even start (the backend had closed it) goes on the next idle
//! connection or a new one, the closed one dropped (so at most `pool_max_idle` tries before a
//! new connection); one that was written is never sent twice.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

/// Why a request did not get its response head.
#[derive(Debug)]
pub(super) enum SendError {
    /// No connection could be made (refused, unreachable, name not resolved, timed out).
    Connect(String),
    /// The exchange failed after the connection was made.
    Exchange(hyper::Error),
}

/// Idle connections to the backend, newest last.
#[derive(Debug)]
pub(super) struct Pool {
    /// `host:port` of `upstream.url`.
    authority: String,
    /// `https://` upstreams: how the TLS connection is made.
    tls: Option<PoolTls>,
    connect_timeout: Duration,
    max_idle: usize,
    idle_timeout: Duration,
    idle: Mutex<VecDeque<Idle>>,
}

#[derive(Debug)]
struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

impl Pool {
    /// A pool for `authority` (`host:port`). With a runtime running, a task closes connections
    /// that stay idle past `idle_timeout`; it ends with the pool.
    pub(super) fn new(authority: String, tls: Option<PoolTls>, connect_timeout: Duration, max_idle: usize, idle_timeout: Duration) -> Arc<Pool> {
        let pool = Arc::new(Pool { authority, tls, connect_timeout, max_idle, idle_timeout, idle: Mutex::new(VecDeque::new()) });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&pool), idle_timeout));
        }
        pool
    }

    /// Sends `req` and returns its response head; the body streams on the same connection,
    /// which goes back to the pool when the body has been read to the end.
    pub(super) async fn send(self: &Arc<Self>, mut req: Request<Full<Bytes>>) -> Result<Response<PooledBody>, SendError> {
        loop {
            let (mut sender, reused) = match self.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            // A reused connection the backend closed meanwhile: try the next one.
            if let Err(e) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(SendError::Exchange(e));
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    let (head, body) = resp.into_parts();
                    let sender = if sender.is_ready() || body.is_end_stream() {
                        // Whole already (or the connection is free again): back at once.
                        self.put(sender);
                        None
                    } else {
                        Some(sender)
                    };
                    return Ok(Response::from_parts(head, PooledBody { body, sender, pool: Arc::downgrade(self) }));
                }
                Err(mut e) => match e.take_message() {
                    // Never written: the connection was closed under it. On the next one.
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(SendError::Exchange(e.into_error())),
                },
            }
        }
    }

    /// The newest idle connection young enough to use; older ones are closed.
    fn take(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().ok()?;
        let Idle { sender, since } = idle.pop_back()?;
        if since.elapsed() < self.idle_timeout {
            return Some(sender);
        }
        // The newest is too old, so is every other one.
        idle.clear();
        None
    }

    fn put(&self, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push_back(Idle { sender, since: Instant::now() });
            }
        }
    }

    /// Opens one connection and keeps it idle for the first request; says why when the backend
    /// cannot be reached.
    pub(super) async fn warm(&self) -> Result<(), String> {
        match self.connect().await {
            Ok(sender) => {
                self.put(sender);
                Ok(())
            }
            Err(SendError::Connect(reason)) => Err(reason),
            Err(SendError::Exchange(e)) => Err(e.to_string()),
        }
    }

    /// Closes the connections idle for `idle_timeout` or longer (the oldest are first).
    fn close_stale(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            while idle.front().is_some_and(|i| i.since.elapsed() >= self.idle_timeout) {
                idle.pop_front();
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, SendError> {
        let stream = match tokio::time::timeout(self.connect_timeout, tokio::net::TcpStream::connect(self.authority.as_str())).await {
            Err(_) => return Err(SendError::Connect(format!("tcp connect to {} timed out after {:?}", self.authority, self.connect_timeout))),
            Ok(Err(e)) => return Err(SendError::Connect(format!("tcp connect to {}: {e}", self.authority))),
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.tls else { return handshake(stream).await };
        // The TLS handshake counts against the connect timeout: a backend that accepts and
        // never answers is a connect failure, not a hung request.
        let connector = tls.connector();
        match tokio::time::timeout(self.connect_timeout, connector.connect(tls.name.clone(), stream)).await {
            Err(_) => Err(SendError::Connect(format!("TLS handshake with {} timed out after {:?}", self.authority, self.connect_timeout))),
            Ok(Err(e)) => Err(SendError::Connect(format!("TLS handshake with {}: {e}", self.authority))),
            Ok(Ok(stream)) => handshake(stream).await,
        }
    }
}

/// HTTP/1.1 over `io`; the connection is driven by its own task.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, SendError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io)).await.map_err(SendError::Exchange)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "Upstream connection closed with an error");
        }
    });
    Ok(sender)
}

/// The TLS side of an `https://` upstream: the name checked in its certificate (and sent as
/// SNI), and its client config.
#[derive(Debug)]
pub(super) struct PoolTls {
    name: rustls::pki_types::ServerName<'static>,
    config: crate::tls::UpstreamTls,
}

impl PoolTls {
    /// For the backend named `host`; fails naming the file that cannot be used.
    pub(super) fn new(
        host: &str,
        ca: Option<std::path::PathBuf>,
        client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    ) -> Result<PoolTls, crate::tls::TlsError> {
        let name = rustls::pki_types::ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
            .map_err(|e| crate::tls::TlsError::Client(format!("{host:?} is not a TLS server name: {e}")))?;
        Ok(PoolTls { name, config: crate::tls::UpstreamTls::new(ca, client)? })
    }

    /// The connector for a new connection (with the mutual-TLS pair as the files say now).
    fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.current().0)
    }
}

/// Closes the connections idle past `every`, every `every`, until the pool is gone.
async fn sweep(pool: Weak<Pool>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        pool.close_stale();
    }
}

/// A response body from the backend that hands its connection back to the pool once it has
/// been read to the end; dropped unfinished, it takes the connection with it.
#[derive(Debug)]
pub(super) struct PooledBody {
    body: Incoming,
    sender: Option<SendRequest<Full<Bytes>>>,
    pool: Weak<Pool>,
}

impl PooledBody {
    fn release(&mut self) {
        if let (Some(sender), Some(pool)) = (self.sender.take(), self.pool.upgrade()) {
            pool.put(sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        match &frame {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.release(),
            Poll::Ready(Some(Err(_))) => this.sender = None,
            _ => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.body.is_end_stream() {
            self.release();
        }
    }
}
