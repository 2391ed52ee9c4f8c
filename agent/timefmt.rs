//! Wall-clock helpers without a date crate: rendering Unix times as RFC 3339 and spans as words,
//! and parsing the timestamps kube-proxy's `/healthz` reports (Go `time.Time.String()` or
//! RFC 3339) back into Unix times.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::parse::quote;

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

/// Serde for an optional Unix time written as RFC 3339 (`since` of a finding): readable in
/// JSON, read back exactly to the millisecond.
pub mod rfc3339_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&super::rfc3339(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| super::parse_timestamp(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
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

/// Removes Go's monotonic clock reading (` m=+1.23`, ` m=-0.5`) from a `time.Time.String()`.
pub(crate) fn strip_monotonic(text: &str) -> Result<&str, String> {
    let Some(pos) = text.rfind(" m=") else {
        return Ok(text);
    };
    let reading = &text[pos + 3..];
    let digits = reading.strip_prefix(['+', '-']).unwrap_or("");
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || !all_digits(frac) {
        return Err(format!("invalid monotonic clock suffix {}", quote(&text[pos + 1..])));
    }
    Ok(&text[..pos])
}

/// Parses a timestamp into Unix seconds (with fraction). Accepted forms, strictly:
///
/// * RFC 3339: `2024-06-16T13:10:38.185Z`, `…+02:00` (`T`/`Z` may be lowercase);
/// * Go `time.Time.String()`: `2024-06-16 13:10:38.185046097 +0000 UTC` (the zone
///   abbreviation is checked for shape but the numeric offset is what counts). Strip a
///   trailing ` m=+…` first with `strip_monotonic`.
///
/// Fractions beyond nanoseconds are truncated. Second 60 (leap second) is rejected, as Go does.
pub fn parse_timestamp(text: &str) -> Result<f64, String> {
    let (secs, nanos) = parse_timestamp_parts(text)?;
    Ok(secs as f64 + f64::from(nanos) / 1e9)
}

fn fixed_digits(s: &str, start: usize, n: usize) -> Option<u32> {
    let part = s.get(start..start + n)?;
    if part.bytes().all(|b| b.is_ascii_digit()) {
        part.parse().ok()
    } else {
        None
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
            if leap {
                29
            } else {
                28
            }
        }
    }
}

/// (Unix seconds, nanoseconds) of a timestamp in either accepted form.
pub(crate) fn parse_timestamp_parts(text: &str) -> Result<(i64, u32), String> {
    let bad = |what: &str| format!("invalid timestamp {}: {what}", quote(text));
    if !text.is_ascii() {
        return Err(bad("non-ASCII characters"));
    }
    let b = text.as_bytes();
    // YYYY-MM-DD?HH:MM:SS
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let year = fixed_digits(text, 0, 4).ok_or_else(|| bad("year"))?;
    let month = fixed_digits(text, 5, 2).ok_or_else(|| bad("month"))?;
    let day = fixed_digits(text, 8, 2).ok_or_else(|| bad("day"))?;
    let hour = fixed_digits(text, 11, 2).ok_or_else(|| bad("hour"))?;
    let minute = fixed_digits(text, 14, 2).ok_or_else(|| bad("minute"))?;
    let second = fixed_digits(text, 17, 2).ok_or_else(|| bad("second"))?;
    let year = i64::from(year);
    if !(1..=12).contains(&month) {
        return Err(bad("month out of range"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(bad("day out of range"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad("time of day out of range"));
    }
    let separator = b[10];
    let mut rest = &text[19..];
    let mut nanos: u32 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(bad("expected digits after '.'"));
        }
        let digits = &frac[..n];
        let kept = &digits[..n.min(9)];
        nanos = kept.parse::<u32>().map_err(|_| bad("fraction"))? * 10u32.pow(9 - kept.len() as u32);
        rest = &frac[n..];
    }
    let offset_seconds: i64 = match separator {
        b'T' | b't' => {
            // RFC 3339 zone: Z or ±HH:MM
            if rest == "Z" || rest == "z" {
                0
            } else {
                let rb = rest.as_bytes();
                if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                    return Err(bad("expected a zone 'Z' or '±HH:MM'"));
                }
                let oh = fixed_digits(rest, 1, 2).ok_or_else(|| bad("zone hour"))?;
                let om = fixed_digits(rest, 4, 2).ok_or_else(|| bad("zone minute"))?;
                if oh > 23 || om > 59 {
                    return Err(bad("zone offset out of range"));
                }
                let off = i64::from(oh * 3600 + om * 60);
                if rb[0] == b'-' {
                    -off
                } else {
                    off
                }
            }
        }
        b' ' => {
            // Go String(): " ±hhmm ABBR"
            let rb = rest.as_bytes();
            if rb.len() < 8 || rb[0] != b' ' || !matches!(rb[1], b'+' | b'-') || rb[6] != b' ' {
                return Err(bad("expected ' ±hhmm ZONE' after the time"));
            }
            let oh = fixed_digits(rest, 2, 2).ok_or_else(|| bad("zone hour"))?;
            let om = fixed_digits(rest, 4, 2).ok_or_else(|| bad("zone minute"))?;
            if oh > 23 || om > 59 {
                return Err(bad("zone offset out of range"));
            }
            let abbr = &rest[7..];
            if abbr.is_empty()
                || abbr.len() > 8
                || !abbr
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'-')
            {
                return Err(bad("invalid zone abbreviation"));
            }
            let off = i64::from(oh * 3600 + om * 60);
            if rb[1] == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return Err(bad("expected 'T' or ' ' between date and time")),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_seconds;
    Ok((secs, nanos))
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

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z").unwrap(), 0.0);
        assert_eq!(parse_timestamp("1970-01-01T00:00:00+00:00").unwrap(), 0.0);
        assert_eq!(parse_timestamp("1970-01-01t01:00:00+01:00").unwrap(), 0.0);
        assert_eq!(parse_timestamp("1969-12-31T23:59:59z").unwrap(), -1.0);
        assert_eq!(parse_timestamp("2000-03-01T00:00:00Z").unwrap(), 951_868_800.0);
        assert_eq!(parse_timestamp("2024-02-29T12:00:00.5Z").unwrap(), 1_709_208_000.5);
        assert!((parse_timestamp("2024-06-16T13:10:38.185046097Z").unwrap() - 1_718_543_438.185_046).abs() < 1e-6);
        assert_eq!(parse_timestamp("2024-06-16T08:40:38-04:30").unwrap(), 1_718_543_438.0);
        // More than 9 fractional digits: truncated.
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:01.1234567899Z").unwrap(),
            1.123_456_789
        );
        assert_eq!(
            parse_timestamp("2024-06-16 15:10:38.25 +0200 CEST").unwrap(),
            1_718_543_438.25
        );
        assert_eq!(
            parse_timestamp("2024-06-16 10:10:38 -0300 -03").unwrap(),
            1_718_543_438.0
        );
        assert_eq!(
            parse_timestamp("0001-01-01 00:00:00 +0000 UTC").unwrap(),
            -62_135_596_800.0
        );
        for bad in [
            "",
            "2024-06-16",
            "2024-06-16T13:10:38",       // no zone
            "2024-06-16T13:10:38+0200",  // RFC 3339 needs the colon
            "2024-06-16T13:10:38.Z",     // empty fraction
            "2024-13-01T00:00:00Z",      // month
            "2023-02-29T00:00:00Z",      // not a leap year
            "2024-06-31T00:00:00Z",      // day
            "2024-06-16T24:00:00Z",      // hour
            "2024-06-16T13:60:00Z",      // minute
            "2024-06-16T13:10:60Z",      // leap second
            "2024-06-16T13:10:38Zjunk",  // trailing
            "2024-06-16X13:10:38Z",      // separator
            "2024-06-16 13:10:38 +0000", // Go form without zone name
            "2024-06-16 13:10:38 +00:00 UTC",
            "+024-06-16T13:10:38Z",
            "2024-06-16T13:10:38+24:00",
            "２０２４-06-16T13:10:38Z",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad:?}");
        }
    }
}
