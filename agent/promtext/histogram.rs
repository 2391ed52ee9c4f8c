//! Classic (bucketed) Prometheus histograms read from a parsed exposition: [`histogram`] sums a
//! family over its label sets, [`quantile`] is PromQL's `histogram_quantile`, and [`delta`] gives
//! the observations between two reads, as `rate()` would.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::exposition::{parse_float, Exposition, MetricFamily, MetricType, Sample};
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
    let mut total: Option<(Histogram, String)> = None;
    for (key, acc) in label_sets(family, name)? {
        let series = series_name(&key);
        let first_line = acc.first_line;
        let h = acc.validate(name, &series)?;
        match &mut total {
            None => total = Some((h, series)),
            Some((t, first_series)) => {
                let same_layout =
                    t.buckets.len() == h.buckets.len() && t.buckets.iter().zip(&h.buckets).all(|(a, b)| a.0 == b.0);
                if !same_layout {
                    return Err(HistogramError::LayoutMismatch {
                        family: short_name(name).into_owned(),
                        series,
                        other_series: first_series.clone(),
                        line: first_line,
                    });
                }
                for (t, b) in t.buckets.iter_mut().zip(&h.buckets) {
                    t.1 += b.1;
                }
                t.count += h.count;
                t.sum += h.sum;
            }
        }
    }
    Ok(total.map(|(h, _)| h))
}

/// The samples of the histogram family `name`, gathered by label set (without `le`);
/// a bucket whose `le` is not a number, or a second `_count` or `_sum`, is an error.
fn label_sets(family: &MetricFamily, name: &str) -> Result<BTreeMap<Vec<(String, String)>, SeriesAcc>, HistogramError> {
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
    Ok(series)
}

impl SeriesAcc {
    /// This label set's histogram, once it has buckets with distinct bounds ending in
    /// `+Inf` that never decrease, a `_count` equal to the `+Inf` bucket and a `_sum`.
    /// `name` is the family's, `series` the label set's text, both for errors.
    fn validate(mut self, name: &str, series: &str) -> Result<Histogram, HistogramError> {
        let err_family = || short_name(name).into_owned();
        let series = || series.to_string();
        if self.buckets.is_empty() {
            return Err(HistogramError::MissingBuckets {
                family: err_family(),
                series: series(),
                line: self.first_line,
            });
        }
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(w) = self.buckets.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(HistogramError::DuplicateSeries {
                family: err_family(),
                series: series(),
                line: w[1].2,
            });
        }
        let (last_le, inf_bucket, _) = *self.buckets.last().expect("non-empty");
        if last_le != f64::INFINITY {
            return Err(HistogramError::MissingInfBucket {
                family: err_family(),
                series: series(),
                line: self.last_line,
            });
        }
        let (mut previous_le, mut previous_count) = (f64::NEG_INFINITY, 0.0);
        for &(le, count, line) in &self.buckets {
            if count.is_nan() || count < previous_count {
                return Err(HistogramError::NotMonotonic {
                    family: err_family(),
                    series: series(),
                    line,
                    le,
                    count,
                    previous_le,
                    previous_count,
                });
            }
            (previous_le, previous_count) = (le, count);
        }
        let Some(count) = self.count else {
            return Err(HistogramError::MissingCount {
                family: err_family(),
                series: series(),
                line: self.last_line,
            });
        };
        if count != inf_bucket {
            return Err(HistogramError::CountMismatch {
                family: err_family(),
                series: series(),
                line: self.last_line,
                count,
                inf_bucket,
            });
        }
        let Some(sum) = self.sum else {
            return Err(HistogramError::MissingSum {
                family: err_family(),
                series: series(),
                line: self.last_line,
            });
        };
        let buckets = self.buckets.iter().map(|&(le, c, _)| (le, c)).collect();
        Ok(Histogram { buckets, count, sum })
    }
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
mod tests;
