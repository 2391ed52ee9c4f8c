//! How durations are written on the command line and in the environment, and read.

use std::time::Duration;

/// How durations are written, for errors and `--help`.
pub const DURATION_SYNTAX: &str =
    "a duration like 500ms, 30s, 5m, 1h or 1m30s (units h, m, s, ms, largest first; a bare number is seconds)";

/// Parses `500ms`, `5s`, `2m`, `1h`, compounds largest unit first (`1m30s`, `1h15m`), and a
/// bare number, which is seconds (`60` = `60s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("{s:?}: expected {DURATION_SYNTAX}");
    let is_num = |c: char| c.is_ascii_digit() || c == '.';
    let (mut secs, mut rest, mut last_rank) = (0.0_f64, t, 0_u8);
    if t.is_empty() {
        return Err(bad());
    }
    if let Some(positive) = t.strip_prefix('-') {
        return Err(format!(
            "{s:?}: a duration cannot be negative; expected {DURATION_SYNTAX}, like {positive}"
        ));
    }
    while !rest.is_empty() {
        let split = rest.find(|c: char| !is_num(c)).unwrap_or(rest.len());
        let (num, after) = rest.split_at(split);
        let n: f64 = num.parse().map_err(|_| bad())?;
        let end = after.find(is_num).unwrap_or(after.len());
        let (unit, next) = after.split_at(end);
        // Rank: units must come largest first, each once (1h30m, not 30m1h or 1m1m).
        let (per_unit, rank) = match unit {
            "h" => (3600.0, 1),
            "m" => (60.0, 2),
            "s" => (1.0, 3),
            "ms" => (0.001, 4),
            // A bare number alone is seconds; inside a compound a unit is required.
            "" if rest.len() == t.len() => (1.0, 3),
            "" => return Err(format!("{s:?}: {num:?} has no unit; expected {DURATION_SYNTAX}")),
            _ => return Err(format!("{s:?}: unknown unit {unit:?}; expected {DURATION_SYNTAX}")),
        };
        if rank <= last_rank {
            return Err(format!("{s:?}: units must come largest first, each once (like 1h30m)"));
        }
        last_rank = rank;
        secs += n * per_unit;
        rest = next;
    }
    if !(0.001..=86_400.0 * 7.0).contains(&secs) {
        return Err(format!("{s:?}: must be between 1ms and 7 days"));
    }
    Ok(Duration::from_secs_f64(secs))
}
