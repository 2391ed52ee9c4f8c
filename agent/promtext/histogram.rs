//! Classic (bucketed) Prometheus histograms read from a parsed exposition: [`histogram`] sums a
//! family over its label sets, [`quantile`] is PromQL's `histogram_quantile`, and [`delta`] gives
//! the observations between two reads, as `rate()` would.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::exposition::{parse_float, Exposition, MetricType, Sample};
use super::limits::{clip, short_name, MAX_MESSAGE_BYTES};
use crate::parse::ParseError;

/// A classic (bucketed) histogram, summed over every label set other than `le`.
///
/// Units are the metric's own, e.g. seconds for a `…_seconds` family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Cumulative buckets `(le, count)`: upper bound (inclusive) and number of observations
    /// `<= le`, sorted by `le`; the last bound is `+Inf`. In JSON a bucket is `[le, count]`
    /// with non-finite numbers written as the strings `"+Inf"`, `"-Inf"`, `"NaN"`.
    #[serde(with = "bucket_serde")]
    pub buckets: Vec<(f64, f64)>,
    /// Number of observations (`_count`); equals the `+Inf` bucket.
    #[serde(with = "float_serde")]
    pub count: f64,
    /// Sum of observations (`_sum`), in the metric's unit.
    #[serde(with = "float_serde")]
    pub sum: f64,
}

impl Histogram {
    /// `histogram_quantile(q, …)` over these buckets; see [`quantile`].
    pub fn quantile(&self, q: f64) -> Option<f64> {
        quantile(q, &self.buckets)
    }

    /// Mean observation (`sum / count`), or `None` when there are no observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// Why a histogram family could not be turned into a [`Histogram`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistogramError {
    #[error("{family}: metric family has type {found}, not histogram")]
    NotAHistogram { family: String, found: MetricType },
    #[error("line {line}: {family}{series}: bucket le={le:?} is not a number")]
    BadLe {
        family: String,
        series: String,
        line: usize,
        le: String,
    },
    #[error("line {line}: {family}{series}: duplicate series")]
    DuplicateSeries {
        family: String,
        series: String,
        line: usize,
    },
    #[error("line {line}: {family}{series}: _count or _sum without any _bucket")]
    MissingBuckets {
        family: String,
        series: String,
        line: usize,
    },
    #[error("line {line}: {family}{series}: no le=\"+Inf\" bucket")]
    MissingInfBucket {
        family: String,
        series: String,
        line: usize,
    },
    #[error("line {line}: {family}{series}: bucket le={le} has count {count}, below {previous_count} of the bucket before it (le={previous_le}); buckets must not decrease")]
    NotMonotonic {
        family: String,
        series: String,
        line: usize,
        le: f64,
        count: f64,
        previous_le: f64,
        previous_count: f64,
    },
    #[error("line {line}: {family}{series}: no _count sample")]
    MissingCount {
        family: String,
        series: String,
        line: usize,
    },
    #[error("line {line}: {family}{series}: no _sum sample")]
    MissingSum {
        family: String,
        series: String,
        line: usize,
    },
    #[error("line {line}: {family}{series}: _count is {count} but the +Inf bucket is {inf_bucket}")]
    CountMismatch {
        family: String,
        series: String,
        line: usize,
        count: f64,
        inf_bucket: f64,
    },
    #[error("line {line}: {family}{series}: bucket bounds differ from those of {other_series}, so the label sets cannot be summed")]
    LayoutMismatch {
        family: String,
        series: String,
        other_series: String,
        line: usize,
    },
}

impl HistogramError {
    /// The 1-based input line the error is about, or 0 for the family as a whole.
    pub fn line(&self) -> usize {
        match self {
            HistogramError::NotAHistogram { .. } => 0,
            HistogramError::BadLe { line, .. }
            | HistogramError::DuplicateSeries { line, .. }
            | HistogramError::MissingBuckets { line, .. }
            | HistogramError::MissingInfBucket { line, .. }
            | HistogramError::NotMonotonic { line, .. }
            | HistogramError::MissingCount { line, .. }
            | HistogramError::MissingSum { line, .. }
            | HistogramError::CountMismatch { line, .. }
            | HistogramError::LayoutMismatch { line, .. } => *line,
        }
    }

    /// As a [`ParseError`] about `source_name`, at [`HistogramError::line`].
    pub fn into_parse_error(self, source_name: &str) -> ParseError {
        let line = self.line();
        let text = self.to_string();
        // The line is carried by ParseError itself; drop our "line N: " prefix.
        let message = match text.split_once(": ") {
            Some((prefix, rest)) if prefix.starts_with("line ") => rest.to_string(),
            _ => text,
        };
        ParseError::new(source_name, line, clip(message, MAX_MESSAGE_BYTES))
    }
}

/// Longest label set an error shows, in bytes.
const MAX_SERIES_BYTES: usize = 200;

/// Renders a label set (without `le`) as `{a="b",…}`, for error messages: values escaped,
/// names and the whole cut to bounds.
fn series_name(key: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (n, v)) in key.iter().enumerate() {
        if out.len() > MAX_SERIES_BYTES {
            break;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(&short_name(n));
        out.push('=');
        out.push_str(&clip(format!("{v:?}"), MAX_SERIES_BYTES));
    }
    out = clip(out, MAX_SERIES_BYTES);
    out.push('}');
    out
}

/// A sample's label set without `le`, sorted: the key its series is summed under.
fn series_key(sample: &Sample) -> Vec<(String, String)> {
    let mut key: Vec<(String, String)> = sample.labels.iter().filter(|(n, _)| n != "le").cloned().collect();
    key.sort();
    key
}

#[derive(Default)]
struct SeriesAcc {
    /// `(le, count, line)` as read.
    buckets: Vec<(f64, f64, usize)>,
    count: Option<f64>,
    sum: Option<f64>,
    first_line: usize,
    last_line: usize,
}

/// The histogram family `name` of `expo`, summed over every label set other than `le` (as
/// `sum by (le) (…)` would), or `None` when the family is absent or has no samples.
///
/// Each label set is validated on its own first: it must have a `+Inf` bucket, buckets that
/// never decrease, a `_count` equal to the `+Inf` bucket and a `_sum`; all label sets must
/// share the same bucket bounds. Any violation is a [`HistogramError`].
pub fn histogram(expo: &Exposition, name: &str) -> Result<Option<Histogram>, HistogramError> {
    let Some(family) = expo.family(name) else {
        return Ok(None);
    };
    if family.metric_type != MetricType::Histogram {
        return Err(HistogramError::NotAHistogram {
            family: short_name(name).into_owned(),
            found: family.metric_type,
        });
    }
    if family.samples.is_empty() {
        return Ok(None);
    }
    let mut series: BTreeMap<Vec<(String, String)>, SeriesAcc> = BTreeMap::new();
    for sample in &family.samples {
        let Some(suffix) = sample.name.strip_prefix(name) else {
            continue;
        };
        // The series' text is rendered only for an error.
        let series_text = || series_name(&series_key(sample));
        let acc = series.entry(series_key(sample)).or_default();
        if acc.first_line == 0 {
            acc.first_line = sample.line;
        }
        acc.last_line = acc.last_line.max(sample.line);
        match suffix {
            "_bucket" => {
                let le_text = sample.label("le").unwrap_or("");
                let le = match parse_float(le_text) {
                    Some(v) if !v.is_nan() => v,
                    _ => {
                        return Err(HistogramError::BadLe {
                            family: short_name(name).into_owned(),
                            series: series_text(),
                            line: sample.line,
                            le: clip(le_text.to_string(), 64),
                        });
                    }
                };
                acc.buckets.push((le, sample.value, sample.line));
            }
            "_count" | "_sum" => {
                let slot = if suffix == "_count" {
                    &mut acc.count
                } else {
                    &mut acc.sum
                };
                let previous = slot.replace(sample.value);
                if previous.is_some() {
                    return Err(HistogramError::DuplicateSeries {
                        family: short_name(name).into_owned(),
                        series: series_text(),
                        line: sample.line,
                    });
                }
            }
            _ => {}
        }
    }

    let mut total: Option<(Histogram, String)> = None;
    for (key, mut acc) in series {
        let series = series_name(&key);
        let err_family = || short_name(name).into_owned();
        if acc.buckets.is_empty() {
            return Err(HistogramError::MissingBuckets {
                family: err_family(),
                series,
                line: acc.first_line,
            });
        }
        acc.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(w) = acc.buckets.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(HistogramError::DuplicateSeries {
                family: err_family(),
                series,
                line: w[1].2,
            });
        }
        let (last_le, inf_bucket, _) = *acc.buckets.last().expect("non-empty");
        if last_le != f64::INFINITY {
            return Err(HistogramError::MissingInfBucket {
                family: err_family(),
                series,
                line: acc.last_line,
            });
        }
        let (mut previous_le, mut previous_count) = (f64::NEG_INFINITY, 0.0);
        for &(le, count, line) in &acc.buckets {
            if count.is_nan() || count < previous_count {
                return Err(HistogramError::NotMonotonic {
                    family: err_family(),
                    series,
                    line,
                    le,
                    count,
                    previous_le,
                    previous_count,
                });
            }
            (previous_le, previous_count) = (le, count);
        }
        let Some(count) = acc.count else {
            return Err(HistogramError::MissingCount {
                family: err_family(),
                series,
                line: acc.last_line,
            });
        };
        if count != inf_bucket {
            return Err(HistogramError::CountMismatch {
                family: err_family(),
                series,
                line: acc.last_line,
                count,
                inf_bucket,
            });
        }
        let Some(sum) = acc.sum else {
            return Err(HistogramError::MissingSum {
                family: err_family(),
                series,
                line: acc.last_line,
            });
        };
        match &mut total {
            None => {
                let buckets = acc.buckets.iter().map(|&(le, c, _)| (le, c)).collect();
                total = Some((Histogram { buckets, count, sum }, series));
            }
            Some((h, first_series)) => {
                let same_layout =
                    h.buckets.len() == acc.buckets.len() && h.buckets.iter().zip(&acc.buckets).all(|(a, b)| a.0 == b.0);
                if !same_layout {
                    return Err(HistogramError::LayoutMismatch {
                        family: err_family(),
                        series,
                        other_series: first_series.clone(),
                        line: acc.first_line,
                    });
                }
                for (t, b) in h.buckets.iter_mut().zip(&acc.buckets) {
                    t.1 += b.1;
                }
                h.count += count;
                h.sum += sum;
            }
        }
    }
    Ok(total.map(|(h, _)| h))
}

/// Go's `sort.Search(n, f)`: the smallest `i` in `[0, n)` with `f(i)`, or `n`, by bisection
/// (so the result matches Go's even for a predicate that is not monotonic).
fn go_sort_search(n: usize, f: impl Fn(usize) -> bool) -> usize {
    let (mut i, mut j) = (0, n);
    while i < j {
        let h = i + (j - i) / 2;
        if !f(h) {
            i = h + 1;
        } else {
            j = h;
        }
    }
    i
}

/// Prometheus's `histogram_quantile(q, …)` for classic histograms, mirroring
/// `bucketQuantile` in prometheus `promql/quantile.go`.
///
/// `buckets` are cumulative `(le, count)` pairs in any order. Rules, as in Prometheus:
/// `q < 0` → `-Inf`; `q > 1` → `+Inf`; buckets with equal bounds are summed; counts that
/// differ by a relative 1e-12 are treated as equal and decreasing counts are raised to the
/// running maximum; the value is interpolated linearly inside the bucket where the rank
/// `q × count` falls, with a lower bound of 0 for the lowest bucket when its bound is `> 0`
/// (when it is `<= 0`, that bound is returned); a rank in the `+Inf` bucket returns the
/// highest finite bound.
///
/// Returns `None` wherever Prometheus returns NaN: `q` is NaN, no buckets, the highest bound
/// is not `+Inf`, fewer than 2 distinct bounds, zero observations, or `0/0` interpolation (e.g.
/// `q = 0` when the lowest bucket with a positive bound is empty).
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if q.is_nan() {
        return None;
    }
    if q < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Some(f64::INFINITY);
    }
    if buckets.is_empty() {
        return None;
    }
    let mut b: Vec<(f64, f64)> = buckets.to_vec();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if b[b.len() - 1].0 != f64::INFINITY {
        return None;
    }
    // coalesceBuckets
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(b.len());
    for (le, count) in b {
        match merged.last_mut() {
            Some(last) if last.0 == le => last.1 += count,
            _ => merged.push((le, count)),
        }
    }
    let mut b = merged;
    // correctPrecisionErrors(buckets, 1e-12)
    let mut prev = b[0].1;
    for bucket in b.iter_mut().skip(1) {
        let curr = bucket.1;
        let delta = (curr - prev).abs();
        if delta == 0.0 {
            continue;
        }
        if delta / curr <= 1e-12 {
            bucket.1 = prev;
        } else {
            prev = curr;
        }
    }
    // ensureMonotonic
    let mut max = b[0].1;
    for bucket in b.iter_mut().skip(1) {
        if bucket.1 > max {
            max = bucket.1;
        } else if bucket.1 < max {
            bucket.1 = max;
        }
    }
    if b.len() < 2 {
        return None;
    }
    let observations = b[b.len() - 1].1;
    if observations == 0.0 {
        return None;
    }
    let mut rank = q * observations;
    let i = go_sort_search(b.len() - 1, |i| b[i].1 >= rank);
    let result = if i == b.len() - 1 {
        b[b.len() - 2].0
    } else if i == 0 && b[0].0 <= 0.0 {
        b[0].0
    } else {
        let mut bucket_start = 0.0;
        let bucket_end = b[i].0;
        let mut count = b[i].1;
        if i > 0 {
            bucket_start = b[i - 1].0;
            count -= b[i - 1].1;
            rank -= b[i - 1].1;
        }
        bucket_start + (bucket_end - bucket_start) * (rank / count)
    };
    (!result.is_nan()).then_some(result)
}

/// The observations made between two reads of the same histogram: bucket-wise
/// `newer − older`, as `rate()`/`increase()` would see them, so that
/// `quantile(0.99, &delta(..)?.buckets)` equals `histogram_quantile(0.99, rate(...))` over that
/// window.
///
/// `None` when the bucket bounds differ, or when any bucket count or `_count` went down (the
/// counters were reset: the exporting process restarted). A restart that already made more
/// observations than before is not detectable here; compare `process_start_time_seconds` for that.
pub fn delta(newer: &Histogram, older: &Histogram) -> Option<Histogram> {
    if newer.buckets.len() != older.buckets.len() {
        return None;
    }
    let mut buckets = Vec::with_capacity(newer.buckets.len());
    for (n, o) in newer.buckets.iter().zip(&older.buckets) {
        if n.0 != o.0 {
            return None;
        }
        let d = n.1 - o.1;
        if d.is_nan() || d < 0.0 {
            return None;
        }
        buckets.push((n.0, d));
    }
    let count = newer.count - older.count;
    if count.is_nan() || count < 0.0 {
        return None;
    }
    Some(Histogram {
        buckets,
        count,
        sum: newer.sum - older.sum,
    })
}

// ---------------------------------------------------------------------------------------------
// serde helpers: JSON has no NaN/Inf, so non-finite floats travel as strings.
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum FloatRepr {
    Num(f64),
    Text(String),
}

impl FloatRepr {
    fn from_f64(v: f64) -> FloatRepr {
        if v.is_finite() {
            FloatRepr::Num(v)
        } else if v.is_nan() {
            FloatRepr::Text("NaN".to_string())
        } else if v > 0.0 {
            FloatRepr::Text("+Inf".to_string())
        } else {
            FloatRepr::Text("-Inf".to_string())
        }
    }

    fn into_f64<E: serde::de::Error>(self) -> Result<f64, E> {
        match self {
            FloatRepr::Num(v) => Ok(v),
            FloatRepr::Text(t) => match t.as_str() {
                "+Inf" => Ok(f64::INFINITY),
                "-Inf" => Ok(f64::NEG_INFINITY),
                "NaN" => Ok(f64::NAN),
                _ => Err(E::custom(format!(
                    "expected a number, \"+Inf\", \"-Inf\" or \"NaN\", found {t:?}"
                ))),
            },
        }
    }
}

mod float_serde {
    use super::FloatRepr;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        FloatRepr::from_f64(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        FloatRepr::deserialize(d)?.into_f64()
    }
}

mod bucket_serde {
    use super::FloatRepr;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[(f64, f64)], s: S) -> Result<S::Ok, S::Error> {
        let reprs: Vec<(FloatRepr, FloatRepr)> = v
            .iter()
            .map(|&(le, c)| (FloatRepr::from_f64(le), FloatRepr::from_f64(c)))
            .collect();
        reprs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
        let reprs: Vec<(FloatRepr, FloatRepr)> = Vec::deserialize(d)?;
        reprs
            .into_iter()
            .map(|(le, c)| Ok((le.into_f64()?, c.into_f64()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promtext::parse_exposition;

    const V1_21: &str =
        include_str!("../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");

    // kube-proxy's family names, spelled out: promtext does not depend on probe/.
    const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
    const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn parse(text: &str) -> Result<Exposition, ParseError> {
        parse_exposition("test", text)
    }

    // --- histograms --------------------------------------------------------------------------

    #[test]
    fn v1_21_sync_histogram_exact() {
        let expo = parse_exposition("v1.21.1", V1_21).unwrap();
        let h = histogram(&expo, SYNC_DURATION).unwrap().unwrap();
        assert_eq!(h.count, 23.0);
        assert_eq!(h.sum, 9.3710718);
        assert_eq!(h.buckets.len(), 16);
        assert_eq!(h.buckets[0], (0.001, 0.0));
        assert_eq!(h.buckets[6], (0.064, 6.0));
        assert_eq!(h.buckets[14], (16.384, 23.0));
        assert_eq!(h.buckets[15], (f64::INFINITY, 23.0));
        // By hand: rank 0.99*23 = 22.77 falls in (1.024, 2.048] holding 23-20 = 3:
        // 1.024 + 1.024 * (22.77-20)/3 = 1.969493333...
        assert!(close(h.quantile(0.99).unwrap(), 1.024 + 1.024 * 2.77 / 3.0));
        assert!(close(h.quantile(0.99).unwrap(), 1.969_493_333_333_333));
        // p50: rank 11.5 in (0.256, 0.512] holding 18-7 = 11: 0.256 + 0.256*4.5/11.
        assert!(close(h.quantile(0.5).unwrap(), 0.256 + 0.256 * 4.5 / 11.0));
        assert!(close(h.mean().unwrap(), 9.3710718 / 23.0));
    }

    #[test]
    fn v1_21_network_programming_histogram() {
        let expo = parse_exposition("v1.21.1", V1_21).unwrap();
        let h = histogram(&expo, NETWORK_PROGRAMMING).unwrap().unwrap();
        assert_eq!(h.count, 8.0);
        assert_eq!(h.sum, 33.3351237);
        assert_eq!(h.buckets.len(), 82); // 0, 0.25, 0.5, 1..=59, 60..=115 by 5, 120..=300 by 30, +Inf
        assert_eq!(h.buckets[0], (0.0, 0.0));
        // rank 7.92 in (16, 17] holding 1: 16.92.
        assert!(close(h.quantile(0.99).unwrap(), 16.92));
        // rank 4 in (1, 2] holding 5: 1 + 4/5.
        assert!(close(h.quantile(0.5).unwrap(), 1.8));
    }

    #[test]
    fn histogram_sums_label_sets_other_than_le() {
        let text = r#"# TYPE h histogram
h_bucket{ip_family="IPv4",le="0.1"} 1
h_bucket{ip_family="IPv4",le="1"} 3
h_bucket{ip_family="IPv4",le="+Inf"} 4
h_sum{ip_family="IPv4"} 2.5
h_count{ip_family="IPv4"} 4
h_bucket{le="0.1",ip_family="IPv6"} 2
h_bucket{le="1",ip_family="IPv6"} 2
h_bucket{le="+Inf",ip_family="IPv6"} 5
h_sum{ip_family="IPv6"} 10
h_count{ip_family="IPv6"} 5
"#;
        let h = histogram(&parse(text).unwrap(), "h").unwrap().unwrap();
        assert_eq!(h.buckets, vec![(0.1, 3.0), (1.0, 5.0), (f64::INFINITY, 9.0)]);
        assert_eq!(h.count, 9.0);
        assert_eq!(h.sum, 12.5);
    }

    #[test]
    fn histogram_absent_or_empty_is_none_and_wrong_type_is_error() {
        let expo = parse("# TYPE h histogram\n# TYPE g gauge\ng 1\n").unwrap();
        assert_eq!(histogram(&expo, "h").unwrap(), None);
        assert_eq!(histogram(&expo, "missing").unwrap(), None);
        assert!(matches!(
            histogram(&expo, "g"),
            Err(HistogramError::NotAHistogram { .. })
        ));
    }

    fn hist_err(body: &str) -> HistogramError {
        let text = format!("# TYPE h histogram\n{body}");
        histogram(&parse(&text).unwrap(), "h").unwrap_err()
    }

    #[test]
    fn histogram_validation_errors() {
        let e = hist_err("h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n");
        assert!(matches!(e, HistogramError::MissingInfBucket { .. }), "{e}");
        let e = hist_err("h_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 4\nh_bucket{le=\"+Inf\"} 5\nh_sum 1\nh_count 5\n");
        match &e {
            HistogramError::NotMonotonic {
                le,
                count,
                previous_le,
                previous_count,
                line,
                ..
            } => {
                assert_eq!(
                    (*le, *count, *previous_le, *previous_count, *line),
                    (2.0, 4.0, 1.0, 5.0, 3)
                );
            }
            other => panic!("{other}"),
        }
        let e = hist_err("h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n");
        assert!(
            matches!(e, HistogramError::CountMismatch { count, inf_bucket, .. } if count == 3.0 && inf_bucket == 2.0)
        );
        let e = hist_err("h_bucket{le=\"+Inf\"} 2\nh_sum 1\n");
        assert!(matches!(e, HistogramError::MissingCount { .. }), "{e}");
        let e = hist_err("h_bucket{le=\"+Inf\"} 2\nh_count 2\n");
        assert!(matches!(e, HistogramError::MissingSum { .. }), "{e}");
        let e = hist_err("h_sum 1\nh_count 2\n");
        assert!(matches!(e, HistogramError::MissingBuckets { .. }), "{e}");
        let e =
            hist_err("h_bucket{le=\"0.2\"} 1\nh_bucket{le=\"2e-1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n");
        assert!(matches!(e, HistogramError::DuplicateSeries { line: 3, .. }), "{e}");
        let e = hist_err(
            "h_bucket{a=\"x\",le=\"1\"} 1\nh_bucket{a=\"x\",le=\"+Inf\"} 1\nh_sum{a=\"x\"} 1\nh_count{a=\"x\"} 1\n\
             h_bucket{a=\"y\",le=\"2\"} 1\nh_bucket{a=\"y\",le=\"+Inf\"} 1\nh_sum{a=\"y\"} 1\nh_count{a=\"y\"} 1\n",
        );
        assert!(matches!(e, HistogramError::LayoutMismatch { .. }), "{e}");
        let e = hist_err("h_bucket{le=\"1\"} -1\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
        assert!(matches!(e, HistogramError::NotMonotonic { .. }), "{e}");
    }

    #[test]
    fn histogram_error_becomes_parse_error_with_line() {
        let e = hist_err("h_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\nh_sum 1\nh_count 4\n").into_parse_error("src");
        assert_eq!(e.source_name, "src");
        assert_eq!(e.line, 3);
        assert!(e.message.starts_with("h{}: bucket le=inf has count 4"), "{}", e.message);
    }

    // --- quantile: cases mirrored from prometheus promql/promqltest/testdata/histograms.test ---

    /// testhistogram at 50m (value 10× the per-5m increment).
    fn testhistogram_positive() -> Vec<(f64, f64)> {
        vec![(0.1, 50.0), (0.2, 70.0), (1.0, 110.0), (f64::INFINITY, 120.0)]
    }

    fn testhistogram_negative() -> Vec<(f64, f64)> {
        vec![(-0.2, 10.0), (-0.1, 20.0), (0.3, 20.0), (f64::INFINITY, 30.0)]
    }

    #[test]
    fn quantile_prometheus_testhistogram() {
        let p = testhistogram_positive();
        let n = testhistogram_negative();
        let cases = [
            (0.0, 0.0, -0.2),
            (1.0, 1.0, 0.3),
            (0.2, 0.048, -0.2),
            (0.5, 0.15, -0.15),
            (0.8, 0.72, 0.3),
        ];
        for (q, want_p, want_n) in cases {
            assert!(close(quantile(q, &p).unwrap(), want_p), "q={q} positive");
            assert!(close(quantile(q, &n).unwrap(), want_n), "q={q} negative");
        }
        assert_eq!(quantile(-0.1, &p), Some(f64::NEG_INFINITY));
        assert_eq!(quantile(1.01, &p), Some(f64::INFINITY));
        assert_eq!(quantile(f64::NAN, &p), None);
    }

    #[test]
    fn quantile_prometheus_testhistogram2_and_3() {
        let h2 = [(0.0, 0.0), (2.0, 1.0), (4.0, 2.0), (6.0, 3.0), (f64::INFINITY, 3.0)];
        assert!(close(quantile(1.0 / 6.0, &h2).unwrap(), 1.0));
        assert!(close(quantile(0.5, &h2).unwrap(), 3.0));
        assert!(close(quantile(5.0 / 6.0, &h2).unwrap(), 5.0));
        // testhistogram3 (positive), unsorted input on purpose.
        let h3 = [
            (1.0, 110.0),
            (0.0, 0.0),
            (f64::INFINITY, 110.0),
            (0.1, 50.0),
            (0.2, 70.0),
        ];
        for (q, want) in [(0.0, 0.0), (0.25, 0.055), (0.5, 0.125), (0.75, 0.45), (1.0, 1.0)] {
            assert!(close(quantile(q, &h3).unwrap(), want), "q={q}");
        }
        let h3n = [
            (-0.25, 0.0),
            (-0.2, 10.0),
            (-0.1, 20.0),
            (0.3, 20.0),
            (f64::INFINITY, 20.0),
        ];
        for (q, want) in [(0.0, -0.25), (0.25, -0.225), (0.5, -0.2), (0.75, -0.15), (1.0, -0.1)] {
            assert!(close(quantile(q, &h3n).unwrap(), want), "q={q}");
        }
    }

    #[test]
    fn quantile_prometheus_aggregated_request_duration() {
        // sum(rate(request_duration_seconds_bucket[10m])) by (le), scaled (quantile is scale-free).
        let agg = [(0.1, 100.0), (0.2, 190.0), (f64::INFINITY, 250.0)];
        assert!(close(quantile(0.3, &agg).unwrap(), 0.075));
        assert!((quantile(0.5, &agg).unwrap() - 0.127_777_777_777_777_8).abs() < 1e-12);
        let rates: Vec<(f64, f64)> = agg.iter().map(|&(le, c)| (le, c / 600.0)).collect();
        assert!(close(quantile(0.3, &rates).unwrap(), 0.075));
        // by (le, job): job1 = ins1+ins2 = [30, 80, 100], job2 = [70, 110, 150].
        let job1 = [(0.1, 30.0), (0.2, 80.0), (f64::INFINITY, 100.0)];
        let job2 = [(0.1, 70.0), (0.2, 110.0), (f64::INFINITY, 150.0)];
        assert!(close(quantile(0.3, &job1).unwrap(), 0.1));
        assert!(close(quantile(0.3, &job2).unwrap(), 0.064_285_714_285_714_3));
        assert!(close(quantile(0.5, &job1).unwrap(), 0.14));
        assert!(close(quantile(0.5, &job2).unwrap(), 0.1125));
    }

    #[test]
    fn quantile_special_cases() {
        // Mixed le representations are coalesced (testdata "mixed"): 0.2 three times.
        let mixed = [
            (0.1, 10.0),
            (0.2, 10.0),
            (0.2, 10.0),
            (0.2, 10.0),
            (f64::INFINITY, 40.0),
        ];
        // Coalesced: (0.1,10) (0.2,30) (+Inf,40); q=0.5 → rank 20 in (0.1,0.2] → 0.15.
        assert!(close(quantile(0.5, &mixed).unwrap(), 0.15));
        assert_eq!(quantile(0.5, &[]), None);
        assert_eq!(quantile(0.5, &[(f64::INFINITY, 5.0)]), None); // fewer than 2 buckets
        assert_eq!(quantile(0.5, &[(1.0, 1.0), (2.0, 2.0)]), None); // no +Inf
        assert_eq!(quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None); // no observations
                                                                              // q=0 with an empty lowest bucket whose bound is > 0: 0/0 in Prometheus → NaN → None.
        assert_eq!(quantile(0.0, &[(1.0, 0.0), (f64::INFINITY, 5.0)]), None);
        // Rank in +Inf bucket returns the highest finite bound.
        assert_eq!(
            quantile(0.99, &[(1.0, 1.0), (2.0, 1.0), (f64::INFINITY, 10.0)]),
            Some(2.0)
        );
        // Non-monotonic input is forced monotonic: (1,5) (2,3→5) (+Inf,10): q=0.4 → rank 4 → 0.8.
        assert!(close(
            quantile(0.4, &[(1.0, 5.0), (2.0, 3.0), (f64::INFINITY, 10.0)]).unwrap(),
            0.8
        ));
        // Precision errors below 1e-12 relative are ignored.
        let fuzzy = [(1.0, 10.0), (2.0, 10.0 + 1e-12), (f64::INFINITY, 20.0)];
        assert!(close(quantile(0.5, &fuzzy).unwrap(), 1.0));
    }

    // --- delta ---------------------------------------------------------------------------------

    fn h(buckets: &[(f64, f64)], sum: f64) -> Histogram {
        Histogram {
            buckets: buckets.to_vec(),
            count: buckets.last().unwrap().1,
            sum,
        }
    }

    #[test]
    fn delta_window_and_restart() {
        let older = h(&[(0.1, 5.0), (1.0, 7.0), (f64::INFINITY, 8.0)], 3.0);
        let newer = h(&[(0.1, 6.0), (1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
        let d = delta(&newer, &older).unwrap();
        assert_eq!(d.buckets, vec![(0.1, 1.0), (1.0, 3.0), (f64::INFINITY, 4.0)]);
        assert_eq!(d.count, 4.0);
        assert_eq!(d.sum, 4.5);
        // rank 0.5*4 = 2 in (0.1, 1] holding 2: 0.1 + 0.9 * 1/2.
        assert!(close(d.quantile(0.5).unwrap(), 0.55));
        // Unchanged: zero observations in the window, no quantile.
        let same = delta(&newer, &newer).unwrap();
        assert_eq!(same.count, 0.0);
        assert_eq!(same.quantile(0.99), None);
        // Restart: counters went backwards.
        assert_eq!(delta(&older, &newer), None);
        let restarted = h(&[(0.1, 0.0), (1.0, 1.0), (f64::INFINITY, 9.0)], 1.0);
        assert_eq!(delta(&restarted, &older), None);
        // Different bucket layout.
        let other = h(&[(0.2, 6.0), (1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
        assert_eq!(delta(&other, &older), None);
        let shorter = h(&[(1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
        assert_eq!(delta(&shorter, &older), None);
    }

    #[test]
    fn histogram_json_round_trip_keeps_infinity() {
        let hist = h(&[(0.5, 1.0), (f64::INFINITY, 2.0)], 1.25);
        let json = serde_json::to_string(&hist).unwrap();
        assert_eq!(json, r#"{"buckets":[[0.5,1.0],["+Inf",2.0]],"count":2.0,"sum":1.25}"#);
        assert_eq!(serde_json::from_str::<Histogram>(&json).unwrap(), hist);
        let from_ints: Histogram = serde_json::from_str(r#"{"buckets":[[1,1],["+Inf",2]],"count":2,"sum":3}"#).unwrap();
        assert_eq!(from_ints.buckets[1], (f64::INFINITY, 2.0));
        assert!(serde_json::from_str::<Histogram>(r#"{"buckets":[["inf",1]],"count":1,"sum":0}"#).is_err());
    }

    // --- robustness: random buckets never panic quantile ----------------------------------------

    use crate::test_rng::Rng;

    #[test]
    fn random_buckets_never_panic_quantile() {
        let mut rng = Rng(7);
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e-300,
            1e300,
        ];
        for _ in 0..20_000 {
            let n = rng.below(6);
            let b: Vec<(f64, f64)> = (0..n)
                .map(|_| (specials[rng.below(specials.len())], specials[rng.below(specials.len())]))
                .collect();
            let q = [0.0, 0.5, 0.99, 1.0, -1.0, 2.0, f64::NAN][rng.below(7)];
            let _ = quantile(q, &b);
        }
    }
}
