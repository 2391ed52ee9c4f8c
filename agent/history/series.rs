//! Series over time for the status page: a bounded ring of (time, value)
//! points per quantity, covering the history window at a resolution that
//! coarsens as it fills.
//!
//! Every reading is kept until the ring is full; then every other point goes
//! and the spacing between kept points doubles, so memory stays under the
//! capacity whatever the probe interval, the whole window stays covered, and
//! the newest reading is always the last point. Pure: the caller gives the
//! times. The ring keeps and thins its points on the monotonic clock (a wall clock step
//! neither empties nor stretches the window) and shows them on the wall clock of the
//! newest reading (Unix seconds: the points are drawn as times of day), so after a step
//! every point moves with it and stays as long ago as it was.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// One point: Unix time in seconds, value (in the series' unit).
pub type Point = [f64; 2];

/// At most this many points per series: one every 20 s over an hour.
pub const CAPACITY: usize = 180;

/// `derived.series`: what the status page draws, oldest point first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// conntrack entries / nf_conntrack_max at each conntrack reading (ratio, 0 to 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conntrack_fill: Vec<Point>,
    /// Where the conntrack trend leads from the newest reading: two points, the fitted
    /// fill now and the fill at the end of the horizon, or at the time the table is full
    /// (ratio 1) when that comes first. Empty without a trend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conntrack_fill_forecast: Vec<Point>,
    /// kube-proxy's sync duration p99 over the interval before each reading, in seconds
    /// (no point for an interval without a sync, or right after a restart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kube_proxy_sync_p99_seconds: Vec<Point>,
    /// Stale conntrack entries (NATed to an endpoint that is gone) at each conntrack_stale check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_entries: Vec<Point>,
}

impl Series {
    pub fn is_empty(&self) -> bool {
        *self == Series::default()
    }
}

/// The points of one series.
#[derive(Debug, Clone)]
pub struct Ring {
    /// Points older than this many seconds before the newest are dropped.
    span: f64,
    capacity: usize,
    /// The least time between two kept points, except the newest: 0 until the ring first fills.
    spacing: f64,
    /// Monotonic seconds, value.
    points: VecDeque<Point>,
    /// Wall clock minus monotonic clock at the newest reading: how the points are shown.
    wall_offset: f64,
}

impl Ring {
    pub fn new(span_seconds: f64, capacity: usize) -> Self {
        Ring {
            span: span_seconds,
            capacity: capacity.max(4),
            spacing: 0.0,
            points: VecDeque::new(),
            wall_offset: 0.0,
        }
    }

    /// Adds the value read at `now` (Unix seconds) = `mono` (monotonic seconds); non-finite
    /// values are not points.
    pub fn push(&mut self, now: f64, mono: f64, value: f64) {
        if !now.is_finite() || !mono.is_finite() || !value.is_finite() {
            return;
        }
        self.wall_offset = now - mono;
        let now = mono;
        // Monotonic time does not go back; were it given so, old points would be drawn in the future.
        if self.points.back().is_some_and(|p| p[0] > now) {
            self.points.clear();
            self.spacing = 0.0;
        }
        while self.points.front().is_some_and(|p| p[0] < now - self.span) {
            self.points.pop_front();
        }
        let n = self.points.len();
        // The newest point replaces the previous one while that one is too close to its own predecessor.
        if n >= 2 && self.points[n - 1][0] - self.points[n - 2][0] < self.spacing {
            self.points[n - 1] = [now, value];
        } else {
            self.points.push_back([now, value]);
        }
        if self.points.len() > self.capacity {
            self.thin();
        }
    }

    /// Keeps about half the points, evenly spaced in time, and the newest.
    fn thin(&mut self) {
        let (first, last) = (self.points[0][0], self.points[self.points.len() - 1][0]);
        let even = (last - first) / (self.capacity / 2) as f64;
        self.spacing = (self.spacing * 2.0).max(even);
        let newest = self.points.pop_back();
        let mut kept: VecDeque<Point> = VecDeque::with_capacity(self.capacity + 1);
        for p in self.points.drain(..) {
            if kept.back().is_none_or(|k| p[0] - k[0] >= self.spacing) {
                kept.push_back(p);
            }
        }
        kept.extend(newest);
        self.points = kept;
    }

    /// The points, oldest first; none before there are two (one reading is no line,
    /// and `check`, which reads once, derives nothing).
    pub fn points(&self) -> Vec<Point> {
        if self.points.len() < 2 {
            return Vec::new();
        }
        self.points.iter().map(|[t, v]| [t + self.wall_offset, *v]).collect()
    }

    /// Time covered, oldest point to newest, in seconds.
    pub fn covered(&self) -> f64 {
        match (self.points.front(), self.points.back()) {
            (Some(a), Some(b)) => b[0] - a[0],
            _ => 0.0,
        }
    }
}

/// The forecast line of the conntrack fill: from the fitted `level` (entries) at `now`,
/// growing at `slope` entries per second, for `horizon` seconds or until `max`.
pub fn fill_forecast(now: f64, level: f64, slope: f64, max: u64, horizon: f64) -> Vec<Point> {
    if max == 0 || !level.is_finite() || !slope.is_finite() || horizon <= 0.0 {
        return Vec::new();
    }
    let max = max as f64;
    let start = (level / max).clamp(0.0, 1.0);
    let mut end_t = horizon;
    if slope > 0.0 {
        end_t = end_t.min(((max - level) / slope).max(0.0));
    }
    let end = ((level + slope * end_t) / max).clamp(0.0, 1.0);
    vec![[now, round(start)], [round(now + end_t), round(end)]]
}

fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_reading_until_full_then_thins_evenly() {
        let mut r = Ring::new(3600.0, 20);
        for t in 0..20 {
            r.push(t as f64, t as f64, t as f64);
        }
        assert_eq!(r.points().len(), 20, "every reading while there is room");
        // An hour of readings every 5 s: bounded, the window covered, the newest last.
        for t in 20..720 {
            r.push(5.0 * t as f64, 5.0 * t as f64, t as f64);
            assert!(r.points().len() <= 20, "{} points at t={t}", r.points().len());
        }
        let p = r.points();
        assert_eq!(*p.last().unwrap(), [3595.0, 719.0]);
        assert!(r.covered() >= 3000.0, "covered {}", r.covered());
        // Spacing is even but for the newest point: no gap over twice another.
        let gaps: Vec<f64> = p.windows(2).map(|w| w[1][0] - w[0][0]).collect();
        let (lo, hi) = gaps[..gaps.len() - 1]
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), g| (lo.min(*g), hi.max(*g)));
        assert!(hi <= 2.0 * lo + 1e-9, "{gaps:?}");
        // Values stay with their times.
        assert!(p.iter().all(|[t, v]| (*t == 5.0 * v) || *t < 100.0), "{p:?}");
    }

    #[test]
    fn old_points_leave_and_a_clock_set_back_starts_over() {
        let mut r = Ring::new(60.0, 100);
        for t in 0..100 {
            r.push(t as f64, t as f64, 1.0);
        }
        assert_eq!(r.points().first().unwrap()[0], 39.0, "only the last 60 s");
        r.push(10.0, 10.0, 2.0);
        assert!(r.points().is_empty(), "one point left: no line yet");
        r.push(11.0, 11.0, f64::NAN);
        r.push(12.0, 12.0, 3.0);
        assert_eq!(r.points(), vec![[10.0, 2.0], [12.0, 3.0]], "NaN is not a point");
    }

    /// An NTP step of the wall clock: the window stays the monotonic clock's (nothing leaves
    /// early, nothing stays late), and every point moves with the step, as long ago as it was.
    #[test]
    fn a_wall_clock_step_moves_the_points_not_the_window() {
        for step in [3600.0, -3600.0] {
            let mut r = Ring::new(60.0, 100);
            for t in 0..30 {
                r.push(1000.0 + t as f64, t as f64, t as f64);
            }
            r.push(1030.0 + step, 30.0, 30.0);
            let p = r.points();
            assert_eq!(p.len(), 31, "step {step}: every point still in the 60 s window");
            assert_eq!(p[0], [1000.0 + step, 0.0], "step {step}");
            assert_eq!(*p.last().unwrap(), [1030.0 + step, 30.0]);
            assert_eq!(r.covered(), 30.0);
            // Then 61 s on the monotonic clock: the first points leave, by that clock only.
            r.push(1061.0 + step, 61.0, 61.0);
            assert_eq!(r.points()[0], [1001.0 + step, 1.0], "step {step}");
        }
    }

    #[test]
    fn forecast_ends_at_full_or_the_horizon() {
        // 500 of 1000 entries growing 1/s: full in 500 s, within a 3600 s horizon.
        assert_eq!(
            fill_forecast(100.0, 500.0, 1.0, 1000, 3600.0),
            vec![[100.0, 0.5], [600.0, 1.0]]
        );
        // Slower: the line stops at the horizon, at 0.5 + 0.1 * 600 / 1000.
        assert_eq!(
            fill_forecast(100.0, 500.0, 0.1, 1000, 600.0),
            vec![[100.0, 0.5], [700.0, 0.56]]
        );
        // Shrinking: down to the horizon, never below 0.
        assert_eq!(
            fill_forecast(0.0, 500.0, -1.0, 1000, 900.0),
            vec![[0.0, 0.5], [900.0, 0.0]]
        );
        assert!(
            fill_forecast(0.0, 500.0, 1.0, 0, 900.0).is_empty(),
            "no limit, no forecast"
        );
    }
}
