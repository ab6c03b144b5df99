//! Where a policy evaluation runs. A single small message is evaluated in place: it takes
//! microseconds and moving it would cost more than it saves. A batch or a large body can take
//! milliseconds to seconds (one evaluation per message, each converting and walking its
//! arguments), and on an async worker that would stall every other connection on that worker:
//! health probes, the RFC 9728 document, small requests.
//!
//! So a heavy request first waits for a [`Turn`], asynchronously: at most one heavy
//! evaluation per core runs at once and the rest queue (in arrival order) without holding a
//! thread. With its turn, it is evaluated with `tokio::task::block_in_place`, which hands the
//! worker's other tasks to another thread first. A heavy evaluation without a turn (a caller
//! that skipped [`Lane::turn`]) still leaves the workers, just without the bound.
//!
//! The same lane serves the other work whose cost grows with the body: the Content-Digest hash
//! (stage 2) and the JSON-RPC parse (stage 8) of a body of [`INLINE_MAX_BODY`] or more. Each
//! piece of work done off the workers is counted (`portcullis_offloaded_total{work}`).

use std::future::Future;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request with more messages than this is evaluated off the async workers.
pub(crate) const INLINE_MAX_MESSAGES: usize = 1;
/// A request whose body is at least this large is evaluated off the async workers: converting
/// its arguments for the policy costs in proportion to its size.
pub(crate) const INLINE_MAX_BODY: usize = 16 << 10;

/// Whether a request of `messages` messages and a body of `body_len` bytes is heavy.
pub(crate) fn is_heavy(messages: usize, body_len: usize) -> bool {
    messages > INLINE_MAX_MESSAGES || body_len >= INLINE_MAX_BODY
}

/// The bounded set of heavy evaluations running at once.
#[derive(Debug)]
pub(crate) struct Lane {
    slots: Arc<Semaphore>,
    offloaded: Family<WorkLabels, Counter>,
}

/// Label of `portcullis_offloaded_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WorkLabels {
    /// `digest`, `mcp` or `policy`.
    work: &'static str,
}

/// A heavy request's turn to be evaluated; the next one queued goes when it is dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    _permit: OwnedSemaphorePermit,
}

impl Lane {
    /// A lane as wide as the machine (or its CPU quota) has cores.
    pub(crate) fn new() -> Lane {
        Lane::with_slots(std::thread::available_parallelism().map(usize::from).unwrap_or(1))
    }

    fn with_slots(slots: usize) -> Lane {
        Lane { slots: Arc::new(Semaphore::new(slots.max(1))), offloaded: Family::default() }
    }

    /// `portcullis_offloaded_total{work}`: pieces of work run off the async workers.
    pub(crate) fn offloaded(&self) -> &Family<WorkLabels, Counter> {
        &self.offloaded
    }

    /// [`Lane::run`], counting `work` when it runs off the workers.
    pub(crate) fn run_counted<T>(&self, work: &'static str, heavy: bool, evaluate: impl FnOnce() -> T) -> T {
        if heavy && on_multi_thread_runtime() {
            self.offloaded.get_or_create(&WorkLabels { work }).inc();
        }
        Lane::run(heavy, evaluate)
    }

    /// Waits for a turn if `heavy`; `None` at once otherwise.
    pub(crate) fn turn(&self, heavy: bool) -> impl Future<Output = Option<Turn>> + 'static {
        let slots = self.slots.clone();
        async move {
            if heavy {
                // The semaphore is never closed.
                slots.acquire_owned().await.ok().map(|p| Turn { _permit: p })
            } else {
                None
            }
        }
    }

    /// Runs `evaluate`: in place when not `heavy` or when there is no multi-threaded runtime to
    /// step off (tests' current-thread runtime, benchmarks, the CLI), else off the async
    /// workers.
    pub(crate) fn run<T>(heavy: bool, evaluate: impl FnOnce() -> T) -> T {
        if heavy && on_multi_thread_runtime() {
            tokio::task::block_in_place(evaluate)
        } else {
            evaluate()
        }
    }
}

fn on_multi_thread_runtime() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heavy_evaluations_take_turns_and_light_ones_do_not_wait() {
        let lane = Arc::new(Lane::with_slots(2));
        let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let (lane, running, peak) = (lane.clone(), running.clone(), peak.clone());
            tasks.spawn(async move {
                let _turn = lane.turn(true).await.expect("a heavy request gets a turn");
                Lane::run(true, || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            });
        }
        // While heavy ones hold both turns, a light one is neither queued nor blocked.
        assert!(lane.turn(false).await.is_none());
        assert_eq!(Lane::run(false, || 7), 7);
        while tasks.join_next().await.is_some() {}
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        assert_eq!(lane.slots.available_permits(), 2);
    }

    #[test]
    fn one_small_message_is_light_and_batches_or_large_bodies_are_heavy() {
        assert!(!is_heavy(1, 200));
        assert!(!is_heavy(0, 0));
        assert!(is_heavy(2, 200));
        assert!(is_heavy(1, INLINE_MAX_BODY));
        // Outside a multi-threaded runtime a heavy evaluation runs in place.
        assert_eq!(Lane::run(true, || 7), 7);
    }
}
