//! Stage 1: the whole request body, bounded per request (`limits.max_body`,
//! `limits.body_timeout`) and over all requests (`limits.max_body_in_flight`).
//!
//! Without the global bound, each stalled upload holds up to `max_body` until its
//! `body_timeout`, and nothing limits their sum but connections × streams × `max_body`. The
//! [`BodyBudget`] counts the bytes every request holds, as they arrive: a budget is spent by
//! bytes actually sent, not by a `Content-Length` a client merely declares (which would let a
//! few heads with no body lock everyone out). A body that no longer fits is refused at once
//! (503 `overloaded`, `Retry-After`) rather than queued: waiting would hold the connection and
//! the bytes already read. A request without a body holds nothing and is never refused for
//! this.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::decision::Denial;

/// Bytes the gateway may hold at once, over all requests: request bodies
/// (`limits.max_body_in_flight`), request heads (`limits.max_header_bytes_in_flight`).
#[derive(Debug)]
pub(crate) struct BodyBudget {
    capacity: u64,
    held: AtomicU64,
}

impl BodyBudget {
    /// A budget of `capacity` bytes (`limits.max_body_in_flight`).
    pub(crate) fn new(capacity: u64) -> Arc<BodyBudget> {
        Arc::new(BodyBudget { capacity, held: AtomicU64::new(0) })
    }

    /// An empty reservation, to grow as a body arrives.
    pub(crate) fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation { budget: self.clone(), bytes: 0 }
    }

    /// Bytes held now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

/// Bytes of a [`BodyBudget`] held by one request; released when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: u64,
}

impl Reservation {
    /// Grows the reservation to `total` bytes; `false` (and unchanged) if that does not fit.
    pub(crate) fn grow_to(&mut self, total: u64) -> bool {
        let Some(more) = total.checked_sub(self.bytes).filter(|m| *m > 0) else { return true };
        let capacity = self.budget.capacity;
        let grown = self.budget.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| held.checked_add(more).filter(|h| *h <= capacity));
        if grown.is_ok() {
            self.bytes = total;
        }
        grown.is_ok()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reads the whole body of a request with head `head`: at most `max_body` bytes, within
/// `timeout`, each byte reserved in `budget`. The reservation is returned with the body so the
/// caller holds it as long as it holds the bytes.
pub(crate) async fn read(
    head: &http::request::Parts,
    body: Incoming,
    max_body: u64,
    timeout: Duration,
    budget: &Arc<BodyBudget>,
) -> Result<(Bytes, Reservation), Denial> {
    let declared = head.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body) {
        return Err(Denial::BodyTooLarge { limit: max_body });
    }
    let mut reservation = budget.reservation();
    let collect = async {
        let mut body = body;
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut total = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                tracing::debug!(error = %e, "Request body unreadable");
                Denial::BodyUnreadable(e.to_string())
            })?;
            // Trailers carry nothing the stages read.
            let Ok(data) = frame.into_data() else { continue };
            total += data.len() as u64;
            if total > max_body {
                return Err(Denial::BodyTooLarge { limit: max_body });
            }
            if !reservation.grow_to(total) {
                return Err(Denial::Overloaded);
            }
            chunks.push(data);
        }
        Ok(concat(chunks, total))
    };
    match tokio::time::timeout(timeout, collect).await {
        Err(_) => Err(Denial::BodyTimeout { after: timeout }),
        Ok(Err(denial)) => Err(denial),
        Ok(Ok(bytes)) => Ok((bytes, reservation)),
    }
}

/// One buffer from the body's chunks; no copy when it came in one.
fn concat(mut chunks: Vec<Bytes>, total: u64) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut buf = BytesMut::with_capacity(total as usize);
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_within_the_budget_and_are_released_when_dropped() {
        let budget = BodyBudget::new(100);
        let (mut a, mut b) = (budget.reservation(), budget.reservation());
        assert!(a.grow_to(60), "fits");
        assert!(!b.grow_to(41), "60 + 41 > 100");
        assert!(b.grow_to(40), "exactly fills it");
        assert_eq!(budget.held(), 100);
        assert!(budget.reservation().grow_to(0), "a request without a body is never refused");
        drop(b);
        assert!(a.grow_to(90), "growing within the budget");
        assert!(!a.grow_to(101), "growing past it");
        assert_eq!(budget.held(), 90, "a failed growth holds nothing more");
        assert!(a.grow_to(50), "shrinking is a no-op");
        drop(a);
        assert_eq!(budget.held(), 0);
    }
}
