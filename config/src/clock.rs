//! The node's wall clock and human-friendly durations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use murmur_protocol::Millis;

/// Now, as the protocol wants it.
#[must_use]
pub fn now() -> Millis {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

/// Parses `90s`, `15m`, `12h`, `30d`, `2w` (or a plain number of seconds).
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 =
        number.parse().with_context(|| format!("`{text}` is not a duration such as 30d, 12h or 90s"))?;
    let secs_per_unit = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => bail!("`{text}` has unknown unit `{unit}` (use s, m, h, d or w)"),
    };
    let secs = n.checked_mul(secs_per_unit).with_context(|| format!("`{text}` is too long"))?;
    if secs == 0 {
        bail!("duration `{text}` must be positive");
    }
    Ok(Duration::from_secs(secs))
}

/// Parses an RFC 3339 UTC timestamp (`2026-11-30T15:00:00Z`, optional fraction) or `now`.
pub fn parse_instant(text: &str) -> anyhow::Result<Millis> {
    if text == "now" {
        return Ok(now());
    }
    let bad = || anyhow::anyhow!("`{text}` is not a UTC time such as 2026-11-30T15:00:00Z");
    let body = text.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = body.split_once('T').ok_or_else(bad)?;
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let mut date_parts = date.splitn(3, '-');
    let (year, month, day) = (
        num(date_parts.next().ok_or_else(bad)?)?,
        num(date_parts.next().ok_or_else(bad)?)?,
        num(date_parts.next().ok_or_else(bad)?)?,
    );
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut time_parts = hms.splitn(3, ':');
    let (hour, minute, second) = (
        num(time_parts.next().ok_or_else(bad)?)?,
        num(time_parts.next().ok_or_else(bad)?)?,
        num(time_parts.next().ok_or_else(bad)?)?,
    );
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let millis = num(&format!("{:0<3}", &fraction[..fraction.len().min(3)]))?;
    let days = days_from_civil(year, month, day);
    Ok(Millis(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + millis))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5y").unwrap_err().to_string().contains("unknown unit"));
        assert!(parse_duration("d").is_err());
    }

    #[test]
    fn instants_round_trip_with_rfc3339() {
        for ms in [0, 951_782_400_123, 1_796_050_800_000] {
            assert_eq!(parse_instant(&Millis(ms).to_rfc3339()).unwrap(), Millis(ms));
        }
        assert_eq!(parse_instant("2026-11-30T15:00:00Z").unwrap(), Millis(1_796_050_800_000));
        assert!(parse_instant("2026-13-01T00:00:00Z").is_err());
        assert!(parse_instant("yesterday").is_err());
    }
}
