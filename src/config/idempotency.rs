//! `[idempotency]`: the journal of exactly-once calls (docs/design.md "Exactly-once tool calls").
//!
//! The raw section mirrors the file; [`Idempotency::from_raw`] checks every field and settles
//! the one default that depends on another field (`max_entries_per_caller`).

use std::time::Duration;

use super::{FieldError, RawIdempotency};

/// The default of `idempotency.max_entries_per_caller` (or `max_entries`, if that is smaller).
const DEFAULT_ENTRIES_PER_CALLER: usize = 1_000;

/// Validated `[idempotency]`.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// Keep the journal. Off, a decision that requires a key is refused (403), and an optional
    /// key is ignored.
    pub enabled: bool,
    /// How long a recorded answer is replayed for its key (non-zero).
    pub ttl: Duration,
    /// Largest answer recorded, in bytes (at least 1).
    pub max_response: u64,
    /// How long a call may run before its reservation lapses (non-zero).
    pub in_flight_ttl: Duration,
    /// Most journal entries the memory store holds (at least 1).
    pub max_entries: usize,
    /// Most live journal entries one caller holds, in any store: between 1 and `max_entries`.
    pub max_entries_per_caller: usize,
    /// Most bytes of recorded answers the memory store holds (at least `max_response`).
    pub max_bytes: u64,
}

impl Idempotency {
    /// Checks every field of `[idempotency]`.
    pub fn from_raw(raw: RawIdempotency) -> Result<Idempotency, Vec<FieldError>> {
        let mut errs = Vec::new();
        let mut must = |field: &str, is_bad: bool, why: &str| {
            if is_bad {
                errs.push(FieldError::new(field, why));
            }
        };
        must("idempotency.ttl", raw.ttl.0.is_zero(), "must be greater than zero");
        must("idempotency.in_flight_ttl", raw.in_flight_ttl.0.is_zero(), "must be greater than zero");
        must("idempotency.max_response", raw.max_response.0 == 0, "must be at least 1 byte");
        must("idempotency.max_entries", raw.max_entries == 0, "must be at least 1");
        must(
            "idempotency.max_entries_per_caller",
            raw.max_entries_per_caller.is_some_and(|n| n == 0 || n > raw.max_entries),
            "must be between 1 and idempotency.max_entries (one caller must not be able to fill the journal)",
        );
        must("idempotency.max_bytes", raw.max_bytes.0 < raw.max_response.0, "must be at least idempotency.max_response");
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Idempotency {
            enabled: raw.enabled,
            ttl: raw.ttl.0,
            max_response: raw.max_response.0,
            in_flight_ttl: raw.in_flight_ttl.0,
            max_entries: raw.max_entries,
            max_entries_per_caller: raw.max_entries_per_caller.unwrap_or_else(|| raw.max_entries.min(DEFAULT_ENTRIES_PER_CALLER)).max(1),
            max_bytes: raw.max_bytes.0,
        })
    }
}

impl TryFrom<RawIdempotency> for Idempotency {
    type Error = Vec<FieldError>;

    fn try_from(raw: RawIdempotency) -> Result<Self, Self::Error> {
        Idempotency::from_raw(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ByteSize, HumanDuration};

    #[test]
    fn the_defaults_are_valid_and_bound_each_caller_to_a_thousand_entries() {
        let cfg = Idempotency::from_raw(RawIdempotency::default()).expect("defaults are valid");
        assert_eq!(cfg.max_entries_per_caller, 1_000);
        assert_eq!(cfg.ttl, Duration::from_secs(24 * 3600));
        let small = Idempotency::from_raw(RawIdempotency { max_entries: 10, ..RawIdempotency::default() }).expect("valid");
        assert_eq!(small.max_entries_per_caller, 10, "never more than the journal holds");
    }

    #[test]
    fn every_bad_field_is_named() {
        let raw = RawIdempotency {
            ttl: HumanDuration(Duration::ZERO),
            in_flight_ttl: HumanDuration(Duration::ZERO),
            max_response: ByteSize(0),
            max_entries: 0,
            max_entries_per_caller: Some(5),
            max_bytes: ByteSize(0),
            ..RawIdempotency::default()
        };
        let fields: Vec<String> = Idempotency::from_raw(raw).expect_err("invalid").into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["idempotency.ttl", "idempotency.in_flight_ttl", "idempotency.max_response", "idempotency.max_entries", "idempotency.max_entries_per_caller",]
        );
        let raw = RawIdempotency { max_response: ByteSize(2 << 20), max_bytes: ByteSize(1 << 20), ..RawIdempotency::default() };
        let errs = Idempotency::from_raw(raw).expect_err("invalid");
        assert_eq!(errs[0].to_string(), "idempotency.max_bytes: must be at least idempotency.max_response");
    }
}
