//! Time for brains: ticks (ms since the Unix epoch), strftime formatting and cron specs.
//! Pure functions of the time they are given.
//!
//! Cron specs are croner's: 5 fields (`minute hour day-of-month month day-of-week`), 6
//! with a leading seconds field, 7 with a trailing year; lists, ranges, steps, `L`, `W`,
//! `#`, names (`MON`, `JAN`) and the aliases `@yearly`, `@monthly`, `@weekly`, `@daily`,
//! `@hourly`. Times are UTC.

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Utc};

/// `ts` (ms since the epoch) formatted with strftime-style `format`, in UTC.
pub fn format(ts: u64, format: &str) -> Result<String, String> {
    let time = utc(ts)?;
    let items: Vec<Item<'_>> = StrftimeItems::new(format).collect();
    if items.iter().any(|item| matches!(item, Item::Error)) {
        return Err(format!("`{format}` is not a strftime format (see docs/src/brains.md)"));
    }
    Ok(time.format_with_items(items.into_iter()).to_string())
}

/// The first fire of cron `spec` strictly after `after_ms`.
pub fn next_cron(spec: &str, after_ms: u64) -> Result<u64, String> {
    let cron: croner::Cron = spec.parse().map_err(|e| format!("`{spec}` is not a cron spec: {e}"))?;
    let after = utc(after_ms)?;
    let next = cron.find_next_occurrence(&after, false).map_err(|e| format!("`{spec}` never fires: {e}"))?;
    u64::try_from(next.timestamp_millis()).map_err(|_| format!("`{spec}` fires before the epoch"))
}

fn utc(ts: u64) -> Result<DateTime<Utc>, String> {
    i64::try_from(ts)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(|| format!("{ts} is out of the range of dates"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-02T06:33:43.250Z
    const T: u64 = 1_796_193_223_250;

    #[test]
    fn strftime_formats_in_utc_and_refuses_bad_formats() {
        assert_eq!(format(T, "%Y-%m-%dT%H:%M:%S").unwrap(), "2026-12-02T06:33:43");
        assert_eq!(format(T, "%A %e %B").unwrap(), "Wednesday  2 December");
        assert!(format(T, "%Q").is_err());
        assert!(format(u64::MAX, "%Y").is_err());
    }

    #[test]
    fn cron_specs_fire_after_the_given_time_with_or_without_seconds() {
        // Every minute: the next whole minute.
        assert_eq!(next_cron("* * * * *", T).unwrap(), 1_796_193_240_000);
        // Every 5 seconds (a seconds field): the next multiple of 5 s.
        assert_eq!(next_cron("*/5 * * * * *", T).unwrap(), 1_796_193_225_000);
        // Strictly after: from a fire, the next one.
        assert_eq!(next_cron("*/5 * * * * *", 1_796_193_225_000).unwrap(), 1_796_193_230_000);
        assert_eq!(next_cron("@daily", T).unwrap(), 1_796_256_000_000);
        assert!(next_cron("not cron", T).unwrap_err().contains("not a cron spec"));
        assert!(next_cron("61 * * * *", T).is_err());
    }
}
