//! Time as the protocol sees it: a number the driver passes in.
//!
//! The protocol never reads a clock. `murnode` passes wall-clock time; the simulator
//! passes its virtual clock. Durations are plain `u64` milliseconds named `*_ms`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An instant: milliseconds since the Unix epoch, as the driver's clock reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// The instant `ms` milliseconds later, saturating at the end of time.
    #[must_use]
    pub const fn plus(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    /// The instant `ms` milliseconds earlier, saturating at the epoch.
    #[must_use]
    pub const fn minus(self, ms: u64) -> Self {
        Self(self.0.saturating_sub(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub const fn since(self, earlier: Self) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl Millis {
    /// The instant as an RFC 3339 UTC timestamp with millisecond precision, for messages
    /// meant for people (`2026-11-30T15:00:00.000Z`).
    #[must_use]
    pub fn to_rfc3339(self) -> String {
        let secs = self.0 / 1000;
        let (days, day_secs) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            day_secs / 3600,
            day_secs / 60 % 60,
            day_secs % 60,
            self.0 % 1000
        )
    }
}

/// Converts days since 1970-01-01 to a proleptic Gregorian (year, month, day), using
/// Howard Hinnant's era-based algorithm (exact for every `u64` day count we can meet).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(Millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Millis(951_782_400_123).to_rfc3339(), "2000-02-29T00:00:00.123Z");
        assert_eq!(Millis(1_796_050_800_000).to_rfc3339(), "2026-11-30T15:00:00.000Z");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Millis(u64::MAX).plus(1), Millis(u64::MAX));
        assert_eq!(Millis(1).minus(2), Millis(0));
        assert_eq!(Millis(1).since(Millis(5)), 0);
    }
}
