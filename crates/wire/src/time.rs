//! The one clock reading a request carries: stages never read the clock themselves, so a test
//! can put a request at any instant and every stage sees the same one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnixTime(pub Duration);

impl UnixTime {
    /// Reads the system clock (only the server edge and the agent side call this).
    pub fn now() -> UnixTime {
        UnixTime::at(SystemTime::now())
    }

    /// `wall` (a reading already taken) since the epoch; the epoch itself for an earlier one.
    pub fn at(wall: SystemTime) -> UnixTime {
        UnixTime(wall.duration_since(UNIX_EPOCH).unwrap_or_default())
    }

    /// Whole seconds since the epoch.
    pub fn secs(self) -> u64 {
        self.0.as_secs()
    }
}

/// Parses a duration string with a unit. A bare number is refused: `300` could mean seconds or
/// milliseconds, and guessing wrong would silently change a security window.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("duration {s:?} has no unit; write e.g. \"{t}s\""));
    }
    humantime::parse_duration(t).map_err(|e| format!("invalid duration {s:?}: {e}"))
}
