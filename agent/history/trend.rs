//! Conntrack growth: a bounded history of recent readings and a robust linear
//! fit over the last few minutes, giving a growth rate and a time-to-exhaustion.
//!
//! The fit is Theil–Sen: the slope is the median of the slopes between every
//! pair of readings, so one spike (a burst of short flows, a reading taken
//! mid-flush) moves a few of the pairwise slopes, not the median. The level now
//! is the median of the residuals, projected to the newest reading, for the same
//! reason. Pure: the caller gives the times (monotonic seconds).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// `derived.conntrack.trend`: how fast the table grows and when it fills.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackTrend {
    /// Fitted growth of the entry count, in entries per second (negative when shrinking).
    pub slope_per_second: f64,
    /// Seconds until the fitted entry count reaches the table's limit at this
    /// rate; None when the table is not growing (slope ≤ 0) or has no limit.
    /// 0 when the fitted level is already at the limit.
    pub seconds_to_full: Option<f64>,
    /// Time covered by the readings of the fit (oldest to newest), in seconds.
    pub window_seconds: f64,
    /// Readings in the fit.
    pub points: usize,
    /// The fitted entry count at the newest reading: where the time to full starts from.
    #[serde(default)]
    pub entries_fitted: f64,
}

/// At most this many readings enter one fit (evenly thinned beyond it):
/// Theil–Sen costs n²/2 slopes, and 240 readings is 28 680 of them.
const MAX_FIT_POINTS: usize = 240;

/// Fewer readings than this give no trend: a slope from 2–4 points is noise.
pub const MIN_POINTS: usize = 5;

/// The last readings of (time, entries, max), bounded in time and count.
#[derive(Debug, Clone)]
pub struct TrendHistory {
    /// Readings older than this (seconds) are dropped.
    span: f64,
    /// Hard cap on readings kept: fixed memory whatever the probe interval.
    capacity: usize,
    /// The fit uses the readings of the last `window` seconds.
    window: f64,
    readings: VecDeque<Reading>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    t: f64,
    entries: u64,
    max: u64,
}

impl TrendHistory {
    /// `window_seconds`: the fit's window; `span_seconds`: how long readings are
    /// kept (at least the window); `capacity`: the most readings kept.
    pub fn new(window_seconds: f64, span_seconds: f64, capacity: usize) -> Self {
        TrendHistory {
            span: span_seconds.max(window_seconds),
            capacity: capacity.max(MIN_POINTS),
            window: window_seconds,
            readings: VecDeque::new(),
        }
    }

    /// Readings kept now.
    pub fn len(&self) -> usize {
        self.readings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.readings.is_empty()
    }

    /// Adds a reading at `now` (monotonic seconds) and returns the trend over the
    /// window, or None while there are too few readings or they cover less than
    /// half the window (right after start: no alarm from a few seconds of data).
    pub fn push(&mut self, now: f64, entries: u64, max: u64) -> Option<ConntrackTrend> {
        // A clock that went backwards would break the fit: start over.
        if self.readings.back().is_some_and(|r| r.t > now) {
            self.readings.clear();
        }
        self.readings.push_back(Reading { t: now, entries, max });
        while self.readings.front().is_some_and(|r| r.t < now - self.span) || self.readings.len() > self.capacity {
            self.readings.pop_front();
        }
        let recent: Vec<Reading> = self
            .readings
            .iter()
            .filter(|r| r.t >= now - self.window)
            .copied()
            .collect();
        let covered = recent.last()?.t - recent.first()?.t;
        if recent.len() < MIN_POINTS || covered < self.window / 2.0 {
            return None;
        }
        let points: Vec<(f64, f64)> = thin(&recent, MAX_FIT_POINTS)
            .iter()
            .map(|r| (r.t, r.entries as f64))
            .collect();
        let (slope, level) = theil_sen(&points)?;
        Some(ConntrackTrend {
            slope_per_second: round(slope),
            seconds_to_full: seconds_to_full(slope, level, max),
            window_seconds: round(covered),
            points: points.len(),
            entries_fitted: round(level),
        })
    }
}

/// Keeps at most `n` readings, evenly spaced by index, always the first and the last.
fn thin(r: &[Reading], n: usize) -> Vec<Reading> {
    if r.len() <= n {
        return r.to_vec();
    }
    (0..n).map(|i| r[i * (r.len() - 1) / (n - 1)]).collect()
}

/// Theil–Sen fit of (t, y): (slope, fitted y at the last t). None with fewer than 2
/// distinct times.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut slopes = Vec::with_capacity(points.len() * points.len().saturating_sub(1) / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if b.0 != a.0 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    let slope = median(&mut slopes)?;
    let t_last = points.last()?.0;
    // Intercept at t_last: median of each point's residual projected there.
    let mut levels: Vec<f64> = points.iter().map(|(t, y)| y + slope * (t_last - t)).collect();
    let level = median(&mut levels)?;
    Some((slope, level))
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Time until `level` grows to `max` at `slope` per second.
fn seconds_to_full(slope: f64, level: f64, max: u64) -> Option<f64> {
    if slope <= 0.0 || max == 0 {
        return None;
    }
    Some(round(((max as f64 - level) / slope).max(0.0)))
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history fed every `step` seconds from `f(t)`; returns the last trend.
    fn feed(h: &mut TrendHistory, from: f64, to: f64, step: f64, f: impl Fn(f64) -> u64) -> Option<ConntrackTrend> {
        let mut last = None;
        let mut t = from;
        while t <= to {
            last = h.push(t, f(t), 100_000);
            t += step;
        }
        last
    }

    #[test]
    fn steady_growth_gives_the_time_to_full() {
        // 10 entries/s from 40 000, readings every 5 s for 15 min, limit 100 000.
        let mut h = TrendHistory::new(900.0, 3600.0, 720);
        let tr = feed(&mut h, 0.0, 900.0, 5.0, |t| 40_000 + (10.0 * t) as u64).unwrap();
        assert!((tr.slope_per_second - 10.0).abs() < 1e-9, "{tr:?}");
        // At t = 900: 49 000 entries, 51 000 to go at 10/s.
        assert_eq!(tr.seconds_to_full, Some(5100.0));
        assert_eq!(tr.points, 181);
        assert_eq!(tr.window_seconds, 900.0);
    }

    #[test]
    fn one_spike_is_ignored() {
        let mut h = TrendHistory::new(600.0, 3600.0, 720);
        let steady = |t: f64| 50_000 + (2.0 * t) as u64;
        feed(&mut h, 0.0, 595.0, 5.0, steady);
        // The newest reading jumps to 99 000 (a burst, or a bad read): no alarm.
        let tr = h.push(600.0, 99_000, 100_000).unwrap();
        assert!((tr.slope_per_second - 2.0).abs() < 0.01, "{tr:?}");
        let ttf = tr.seconds_to_full.unwrap();
        assert!((ttf - (100_000.0 - 51_200.0) / 2.0).abs() < 50.0, "{tr:?}");
        // A spike in the middle of the window, too.
        let mut h = TrendHistory::new(600.0, 3600.0, 720);
        let tr = feed(&mut h, 0.0, 600.0, 5.0, |t| if t == 300.0 { 99_000 } else { steady(t) }).unwrap();
        assert!((tr.slope_per_second - 2.0).abs() < 0.01, "{tr:?}");
    }

    #[test]
    fn flat_or_shrinking_has_no_time_to_full() {
        let mut h = TrendHistory::new(600.0, 3600.0, 720);
        let tr = feed(&mut h, 0.0, 600.0, 5.0, |_| 70_000).unwrap();
        assert_eq!((tr.slope_per_second, tr.seconds_to_full), (0.0, None));
        let mut h = TrendHistory::new(600.0, 3600.0, 720);
        let tr = feed(&mut h, 0.0, 600.0, 5.0, |t| 90_000 - (5.0 * t) as u64).unwrap();
        assert!(tr.slope_per_second < 0.0);
        assert_eq!(tr.seconds_to_full, None);
    }

    #[test]
    fn too_little_history_gives_no_trend() {
        let mut h = TrendHistory::new(600.0, 3600.0, 720);
        // Four readings, then enough readings but only over 2 minutes of a 10-minute window.
        assert!(feed(&mut h, 0.0, 15.0, 5.0, |t| (1000.0 * t) as u64).is_none());
        assert!(feed(&mut h, 20.0, 120.0, 5.0, |t| (1000.0 * t) as u64).is_none());
        assert!(feed(&mut h, 125.0, 300.0, 5.0, |t| (1000.0 * t) as u64).is_some());
    }

    #[test]
    fn already_full_is_zero_and_memory_is_bounded() {
        let mut h = TrendHistory::new(60.0, 120.0, 50);
        let tr = feed(&mut h, 0.0, 60.0, 1.0, |t| 99_990 + t as u64).unwrap();
        assert_eq!(tr.seconds_to_full, Some(0.0));
        feed(&mut h, 61.0, 10_000.0, 1.0, |_| 1);
        assert_eq!(h.len(), 50, "capacity caps the readings");
        let mut h = TrendHistory::new(60.0, 120.0, 10_000);
        feed(&mut h, 0.0, 10_000.0, 1.0, |_| 1);
        assert!(h.len() <= 121, "span caps the readings: {}", h.len());
    }

    #[test]
    fn thinning_keeps_the_ends_and_the_fit() {
        let mut h = TrendHistory::new(3600.0, 3600.0, 10_000);
        let tr = feed(&mut h, 0.0, 3600.0, 1.0, |t| (3.0 * t) as u64).unwrap();
        assert_eq!(tr.points, MAX_FIT_POINTS);
        assert_eq!(tr.window_seconds, 3600.0);
        assert!((tr.slope_per_second - 3.0).abs() < 1e-6, "{tr:?}");
    }
}
