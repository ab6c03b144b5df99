//! Units in the config file: durations with a unit (`"300s"`) and sizes (`1048576`, `"1MiB"`).

use std::time::Duration;

use portcullis_wire::time::parse_duration;
use serde::Deserialize;

/// A duration written with a unit (`"300s"`, `"5m"`, `"24h"`, `"250ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map(HumanDuration).map_err(serde::de::Error::custom)
    }
}

/// A size: a byte count (`1048576`) or a string with a unit (`"1MiB"`, `"64KiB"`, `"1MB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Int(u64),
            Str(String),
        }
        match Either::deserialize(d)? {
            Either::Int(n) => Ok(ByteSize(n)),
            Either::Str(s) => parse_size(&s).map(ByteSize).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `"1MiB"`, `"64 KiB"`, `"1MB"`, `"512"`, `"512B"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}: expected a number with an optional unit"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("invalid size {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("invalid size {s:?}: too large"))
}
