//! Budgets of outbound fetches that unauthenticated requests can cause (key directories here,
//! unknown-`kid` JWKS refetches in `oauth::jwks`).
//!
//! Keys are resolved before anything is verified, so every fetch a request causes is one an
//! attacker can ask for. Caching and refetch intervals bound the fetches per URL; a budget
//! bounds them per origin and in total, whatever URLs or keyids the requests name. A budget is
//! a token bucket on the requests' clock: `per_minute` fetches at once, refilled at
//! `per_minute` per 60 s. An exhausted budget refuses the request (fail closed); nothing is
//! fetched.

use std::sync::Mutex;
use std::time::Duration;

use portcullis_wire::UnixTime;

/// The window a budget is counted over.
const WINDOW: Duration = Duration::from_secs(60);

/// A token bucket of fetches: `per_minute` at once, refilled at `per_minute` per minute.
#[derive(Debug)]
pub(crate) struct FetchBudget {
    per_minute: u32,
    /// The window `per_minute` is counted over (a minute, or a second for [`Self::per_second`]).
    window: Duration,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    /// When `tokens` was last brought up to date; never moves backwards.
    updated: Option<UnixTime>,
}

impl FetchBudget {
    /// A full budget of `per_minute` fetches (at least 1).
    pub(crate) fn per_minute(per_minute: u32) -> FetchBudget {
        let per_minute = per_minute.max(1);
        FetchBudget { per_minute, window: WINDOW, state: Mutex::new(Bucket { tokens: f64::from(per_minute), updated: None }) }
    }

    /// A full budget of `per_second` fetches (at least 1), refilled at `per_second` per second
    /// (token exchanges, `upstream.auth.max_per_second`).
    pub fn per_second(per_second: u32) -> FetchBudget {
        FetchBudget { window: Duration::from_secs(1), ..FetchBudget::per_minute(per_second) }
    }

    /// Takes one fetch from the budget at `now`; `false` when it is exhausted.
    pub(crate) fn try_take(&self, now: UnixTime) -> bool {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut b, now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether one fetch could be taken at `now` (takes nothing).
    pub(crate) fn has_one(&self, now: UnixTime) -> bool {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut b, now);
        b.tokens >= 1.0
    }

    fn refill(&self, b: &mut Bucket, now: UnixTime) {
        let cap = f64::from(self.per_minute);
        match b.updated {
            // Requests are timed at arrival and handled concurrently: an earlier `now` after a
            // later one refills nothing (and does not move the clock back).
            Some(t) if now <= t => {}
            Some(t) => {
                let elapsed = (now.0 - t.0).as_secs_f64();
                b.tokens = (b.tokens + elapsed * cap / self.window.as_secs_f64()).min(cap);
                b.updated = Some(now);
            }
            None => b.updated = Some(now),
        }
    }
}

/// Takes one fetch from both budgets, or from neither: `Err` names the one that is exhausted
/// (`first`'s name or `second`'s).
pub(crate) fn take_both(first: (&FetchBudget, &'static str), second: (&FetchBudget, &'static str), now: UnixTime) -> Result<(), &'static str> {
    // Check the first, take the second, then take the first: an exhausted budget never spends
    // the other. If a racing caller emptied the first meanwhile, the second's fetch goes back.
    if !first.0.has_one(now) {
        return Err(first.1);
    }
    if !second.0.try_take(now) {
        return Err(second.1);
    }
    if !first.0.try_take(now) {
        second.0.give_back();
        return Err(first.1);
    }
    Ok(())
}

impl FetchBudget {
    /// Returns one fetch taken by [`FetchBudget::try_take`] that was not used.
    fn give_back(&self) {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        b.tokens = (b.tokens + 1.0).min(f64::from(self.per_minute));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> UnixTime {
        UnixTime(Duration::from_millis(1_800_000_000_000 + ms))
    }

    #[test]
    fn budget_allows_per_minute_at_once_then_refills_over_the_minute() {
        let b = FetchBudget::per_minute(3);
        assert!((0..3).all(|_| b.try_take(at(0))));
        assert!(!b.try_take(at(0)), "exhausted");
        assert!(!b.try_take(at(19_999)), "one fetch comes back every 20 s");
        assert!(b.try_take(at(20_000)));
        assert!(!b.try_take(at(20_000)));
        assert!((0..3).all(|_| b.try_take(at(20_000 + 600_000))), "refills up to the cap");
        assert!(!b.try_take(at(20_000 + 600_000)), "never above the cap");
    }

    #[test]
    fn an_earlier_clock_reading_refills_nothing() {
        let b = FetchBudget::per_minute(1);
        assert!(b.try_take(at(60_000)));
        assert!(!b.try_take(at(0)));
        assert!(!b.try_take(at(60_000)), "the earlier reading did not move the clock back");
        assert!(b.try_take(at(120_000)));
    }

    #[test]
    fn both_budgets_are_spent_together_or_not_at_all() {
        let (origin, global) = (FetchBudget::per_minute(2), FetchBudget::per_minute(1));
        assert_eq!(take_both((&origin, "origin"), (&global, "global"), at(0)), Ok(()));
        assert_eq!(take_both((&origin, "origin"), (&global, "global"), at(0)), Err("global"));
        assert!(origin.has_one(at(0)), "the origin budget was not spent by the refused fetch");
        let other = FetchBudget::per_minute(5);
        assert!(origin.try_take(at(0)));
        assert_eq!(take_both((&origin, "origin"), (&other, "global"), at(0)), Err("origin"));
        assert!((0..5).all(|_| other.try_take(at(0))), "the global budget was not spent either");
    }
}
