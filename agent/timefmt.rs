//! Wall-clock helpers: RFC 3339 rendering without pulling in a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, as a float (Prometheus' timestamp unit).
pub fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Renders a Unix time as RFC 3339 in UTC with millisecond precision, e.g. `2026-11-29T22:05:13.120Z`.
pub fn rfc3339(unix: f64) -> String {
    let total_ms = (unix * 1000.0).round() as i64;
    let ms = total_ms.rem_euclid(1000);
    let secs = total_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// A span for a sentence: `45 seconds`, `5 minutes`, `2 hours`, `3 days`
/// (rounded to the unit; a minute or an hour from 90 seconds or 90 minutes on).
pub fn human_duration(seconds: f64) -> String {
    let s = seconds.max(0.0);
    let (n, unit) = if s < 90.0 {
        (s, "second")
    } else if s < 90.0 * 60.0 {
        (s / 60.0, "minute")
    } else if s < 48.0 * 3600.0 {
        (s / 3600.0, "hour")
    } else {
        (s / 86_400.0, "day")
    };
    let n = n.round() as u64;
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1795990513.12 +%FT%T.%3NZ`
        assert_eq!(rfc3339(1_795_990_513.12), "2026-11-29T22:15:13.120Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(-1.0), "1969-12-31T23:59:59.000Z");
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(1.0), "1 second");
        assert_eq!(human_duration(45.2), "45 seconds");
        assert_eq!(human_duration(300.0), "5 minutes");
        assert_eq!(human_duration(304.9), "5 minutes");
        assert_eq!(human_duration(3600.0), "60 minutes");
        assert_eq!(human_duration(5400.0), "2 hours");
        assert_eq!(human_duration(3.0 * 86_400.0), "3 days");
    }
}
