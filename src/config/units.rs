//! Units in the config file: durations with a unit (`"300s"`) and sizes (`1048576`, `"1MiB"`).

use std::time::Duration;

use portcullis_wire::time::parse_duration;
use serde::Deserialize;

/// A duration written with a unit (`"300s"`, `"5m"`, `"24h"`, `"250ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration with a unit, e.g. \"5s\", \"250ms\", \"5m\" or \"24h\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<HumanDuration, E> {
                parse_duration(s).map(HumanDuration).map_err(E::custom)
            }
            // A bare number has no unit: say which one to add rather than "expected a string".
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!("{n} has no unit: write a duration with a unit, e.g. \"{n}s\" or \"{n}ms\"")))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<HumanDuration, E> {
                Err(E::custom(format!("{n} has no unit: write a duration with a unit, e.g. \"{n}s\" or \"{n}ms\"")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A size: a byte count (`1048576`) or a string with a unit (`"1MiB"`, `"64KiB"`, `"1MB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size: a byte count (1048576) or a number with a unit (\"1MiB\", \"64KiB\", \"1MB\")")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("{n} is negative: a size is a byte count (1048576) or a number with a unit (\"1MiB\")")))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ByteSize, E> {
                parse_size(s).map(ByteSize).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        #[allow(dead_code)]
        size: Option<ByteSize>,
        #[allow(dead_code)]
        timeout: Option<HumanDuration>,
    }

    fn error(text: &str) -> String {
        toml::from_str::<Doc>(text).expect_err("refused").to_string()
    }

    #[test]
    fn errors_name_the_expected_format() {
        let e = error("size = true");
        assert!(e.contains("expected a size: a byte count (1048576) or a number with a unit"), "{e}");
        assert!(!e.contains("untagged"), "{e}");
        let e = error("timeout = 5");
        assert!(e.contains("5 has no unit: write a duration with a unit, e.g. \"5s\""), "{e}");
        let e = error("timeout = true");
        assert!(e.contains("expected a duration with a unit, e.g. \"5s\""), "{e}");
        assert_eq!(toml::from_str::<Doc>("size = \"1KiB\"\ntimeout = \"2s\"").expect("valid").size, Some(ByteSize(1024)));
        assert_eq!(toml::from_str::<Doc>("size = 7").expect("valid").size, Some(ByteSize(7)));
    }
}
