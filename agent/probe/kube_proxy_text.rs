//! Pure parsers for what kube-proxy serves over HTTP:
//!
//! * `/metrics` (port 10249): the Prometheus text exposition format 0.0.4, parsed by a small,
//!   strict parser of our own ([`parse_exposition`], [`parse_exposition_filtered`]); classic
//!   histograms ([`histogram`], [`quantile`], [`delta`]); and the few kube-proxy facts the agent
//!   needs ([`extract`] → [`KubeProxyMetrics`]).
//! * `/healthz` (port 10256): a small JSON body ([`parse_healthz`] → [`Healthz`]) whose
//!   timestamps are Go `time.Time.String()` values such as
//!   `2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918`; [`parse_timestamp`] reads
//!   those and RFC 3339 alike, without a date library.
//! * `/proxyMode` (port 10249): the bare mode string ([`parse_proxy_mode`] → [`ProxyMode`]).
//!
//! Nothing here does I/O. Every error names the input and the 1-based line.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::parse::{quote, ParseError};

// ---------------------------------------------------------------------------------------------
// Exposition format: data model
// ---------------------------------------------------------------------------------------------

/// The `# TYPE` of a metric family. A family without a `# TYPE` line is `Untyped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl MetricType {
    /// The keyword used in `# TYPE` lines.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Untyped => "untyped",
        }
    }

    fn from_keyword(word: &str) -> Option<MetricType> {
        match word {
            "counter" => Some(MetricType::Counter),
            "gauge" => Some(MetricType::Gauge),
            "histogram" => Some(MetricType::Histogram),
            "summary" => Some(MetricType::Summary),
            "untyped" => Some(MetricType::Untyped),
            _ => None,
        }
    }
}

impl fmt::Display for MetricType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name, e.g. `foo_bucket` in histogram family `foo`.
    pub name: String,
    /// Label pairs in input order, values unescaped. `le`/`quantile` stay here too.
    pub labels: Vec<(String, String)>,
    /// The value (may be NaN or ±Inf).
    pub value: f64,
    /// Optional timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
    /// 1-based line of the sample in the input.
    pub line: usize,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A metric family: the `# HELP`/`# TYPE` lines and the samples that belong to it
/// (for a histogram `foo`: `foo_bucket`, `foo_sum`, `foo_count`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    pub name: String,
    pub metric_type: MetricType,
    /// Unescaped `# HELP` text.
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

/// A parsed exposition: the kept families in input order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Exposition {
    pub families: Vec<MetricFamily>,
}

impl Exposition {
    /// The family named `name` (a histogram's base name, not `_bucket`).
    pub fn family(&self, name: &str) -> Option<&MetricFamily> {
        self.families.iter().find(|f| f.name == name)
    }
}

// ---------------------------------------------------------------------------------------------
// Exposition format: parser
// ---------------------------------------------------------------------------------------------

/// Parses a whole Prometheus text exposition (format 0.0.4), keeping every family.
///
/// Strict: any line that is not empty, a comment, a valid `# HELP`/`# TYPE` or a valid sample
/// is an error with its line number. Also errors: a second `# HELP`/`# TYPE` for a family, a
/// `# TYPE` after the family's samples, a family whose lines are split into several groups,
/// duplicate label names, a histogram `_bucket` without a numeric `le`, a summary quantile
/// without a numeric `quantile`, and carriage returns.
pub fn parse_exposition(source_name: &str, text: &str) -> Result<Exposition, ParseError> {
    parse_exposition_filtered(source_name, text, |_| true)
}

/// Like [`parse_exposition`], but keeps only the families for which `wanted(family_name)` is
/// true (`family_name` is the base name: `foo` for `foo_bucket`). Every line is still fully
/// validated; the others are checked without allocating their labels or samples. `wanted` is
/// called once per family.
pub fn parse_exposition_filtered<F>(source_name: &str, text: &str, wanted: F) -> Result<Exposition, ParseError>
where
    F: FnMut(&str) -> bool,
{
    let mut parser = Parser {
        source: source_name,
        fams: Vec::new(),
        index: HashMap::new(),
        current: None,
        wanted,
        expo: Exposition::default(),
    };
    let mut scratch: Vec<(&str, &str)> = Vec::new();
    for (i, raw_line) in text.split('\n').enumerate() {
        parser.line(i + 1, raw_line, &mut scratch)?;
    }
    Ok(parser.expo)
}

struct FamState {
    name: String,
    declared: Option<MetricType>,
    has_help: bool,
    has_samples: bool,
    first_line: usize,
    /// Index into `expo.families` when the family is kept.
    out: Option<usize>,
}

struct Parser<'s, F> {
    source: &'s str,
    fams: Vec<FamState>,
    index: HashMap<String, usize>,
    current: Option<usize>,
    wanted: F,
    expo: Exposition,
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn skip_blanks(s: &str) -> &str {
    s.trim_start_matches(is_blank)
}

/// Splits off the token up to the next blank.
fn split_token(s: &str) -> (&str, &str) {
    let end = s.find(is_blank).unwrap_or(s.len());
    s.split_at(end)
}

fn is_metric_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_metric_name_char(b: u8) -> bool {
    is_metric_name_start(b) || b.is_ascii_digit()
}

fn is_label_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_name_char(b: u8) -> bool {
    is_label_name_start(b) || b.is_ascii_digit()
}

/// Splits a leading `[a-zA-Z_:][a-zA-Z0-9_:]*`; the name is empty when there is none.
fn split_metric_name(s: &str) -> (&str, &str) {
    split_name(s, is_metric_name_start, is_metric_name_char)
}

/// Splits a leading `[a-zA-Z_][a-zA-Z0-9_]*`; the name is empty when there is none.
fn split_label_name(s: &str) -> (&str, &str) {
    split_name(s, is_label_name_start, is_label_name_char)
}

fn split_name(s: &str, start: fn(u8) -> bool, rest: fn(u8) -> bool) -> (&str, &str) {
    let bytes = s.as_bytes();
    if bytes.is_empty() || !start(bytes[0]) {
        return ("", s);
    }
    let end = bytes.iter().position(|&b| !rest(b)).unwrap_or(bytes.len());
    s.split_at(end)
}

/// Whether `s` is a whole valid metric name.
pub fn is_valid_metric_name(s: &str) -> bool {
    let (name, rest) = split_metric_name(s);
    !name.is_empty() && rest.is_empty()
}

/// Parses a sample value or bucket bound the way Go's `strconv.ParseFloat` does for the text
/// format: decimal floats with optional exponent, `NaN`, `+Inf`, `-Inf` (case-insensitive,
/// `Inf`/`Infinity`). Go's hexadecimal floats are not accepted (no exporter writes them).
pub fn parse_float(token: &str) -> Option<f64> {
    let unsigned = token.strip_prefix(['+', '-']).unwrap_or(token);
    if unsigned.eq_ignore_ascii_case("nan") && unsigned.len() != token.len() {
        return None; // Go rejects a signed NaN.
    }
    let ok_chars = unsigned.eq_ignore_ascii_case("nan")
        || unsigned.eq_ignore_ascii_case("inf")
        || unsigned.eq_ignore_ascii_case("infinity")
        || unsigned
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !ok_chars {
        return None;
    }
    token.parse::<f64>().ok()
}

/// Splits a quoted label value (the text after the opening `"`) into its raw, still escaped
/// content and the rest after the closing quote. Only `\\`, `\"` and `\n` are valid escapes.
fn split_quoted(s: &str) -> Result<(&str, &str), String> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => match bytes.get(i + 1) {
                Some(b'\\' | b'"' | b'n') => i += 2,
                Some(_) => {
                    let esc: String = s[i..].chars().take(2).collect();
                    return Err(format!(
                        "invalid escape sequence {} in label value (only \\\\, \\\" and \\n are allowed)",
                        quote(&esc)
                    ));
                }
                None => return Err("unterminated label value: missing closing '\"'".to_string()),
            },
            b'"' => return Ok((&s[..i], &s[i + 1..])),
            _ => i += 1,
        }
    }
    Err("unterminated label value: missing closing '\"'".to_string())
}

/// Unescapes a label value already validated by [`split_quoted`].
fn unescape_label_value(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other), // `\\` or `\"`
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Unescapes `# HELP` text: `\\` and `\n` are the only escapes.
fn unescape_help(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some(other) => {
                    return Err(format!(
                        "invalid escape sequence {} in HELP text (only \\\\ and \\n are allowed)",
                        quote(&format!("\\{other}"))
                    ))
                }
                None => return Err("HELP text ends with a lone backslash".to_string()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Parses the inside of a label set (after `{`) into `out`; returns the rest after `}`.
fn parse_label_set<'a>(mut s: &'a str, out: &mut Vec<(&'a str, &'a str)>) -> Result<&'a str, String> {
    s = skip_blanks(s);
    loop {
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let (name, rest) = split_label_name(s);
        if name.is_empty() {
            return Err(format!("expected a label name or '}}', found {}", quote(s)));
        }
        if name == "__name__" {
            return Err("label name \"__name__\" is reserved".to_string());
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("duplicate label name {}", quote(name)));
        }
        let rest = skip_blanks(rest);
        let rest = rest
            .strip_prefix('=')
            .ok_or_else(|| format!("expected '=' after label name {}, found {}", quote(name), quote(rest)))?;
        let rest = skip_blanks(rest);
        let rest = rest.strip_prefix('"').ok_or_else(|| {
            format!(
                "expected '\"' to open the value of label {}, found {}",
                quote(name),
                quote(rest)
            )
        })?;
        let (raw, rest) = split_quoted(rest)?;
        out.push((name, raw));
        let rest = skip_blanks(rest);
        if let Some(r) = rest.strip_prefix(',') {
            s = skip_blanks(r);
        } else if let Some(r) = rest.strip_prefix('}') {
            return Ok(r);
        } else {
            return Err(format!(
                "expected ',' or '}}' after a label value, found {}",
                quote(rest)
            ));
        }
    }
}

impl<F: FnMut(&str) -> bool> Parser<'_, F> {
    fn err(&self, line: usize, message: impl Into<String>) -> ParseError {
        ParseError::new(self.source, line, message)
    }

    fn line<'a>(
        &mut self,
        line_no: usize,
        raw: &'a str,
        scratch: &mut Vec<(&'a str, &'a str)>,
    ) -> Result<(), ParseError> {
        if raw.contains('\r') {
            return Err(self.err(line_no, "carriage return in line (CRLF line endings are not valid)"));
        }
        let line = raw.trim_matches(is_blank);
        if line.is_empty() {
            return Ok(());
        }
        if let Some(comment) = line.strip_prefix('#') {
            return self.comment(line_no, comment);
        }
        self.sample(line_no, line, scratch)
    }

    /// Makes `name` the current family, creating it if new. A family that appeared before and
    /// was interrupted by another one is an error: the format requires one group per family.
    fn enter(&mut self, name: &str, line: usize) -> Result<usize, ParseError> {
        if let Some(i) = self.current {
            if self.fams[i].name == name {
                return Ok(i);
            }
        }
        if let Some(&i) = self.index.get(name) {
            return Err(self.err(
                line,
                format!(
                    "lines of metric family {} are not grouped together: it already appeared at line {}",
                    quote(name),
                    self.fams[i].first_line
                ),
            ));
        }
        let out = if (self.wanted)(name) {
            self.expo.families.push(MetricFamily {
                name: name.to_string(),
                metric_type: MetricType::Untyped,
                help: None,
                samples: Vec::new(),
            });
            Some(self.expo.families.len() - 1)
        } else {
            None
        };
        let i = self.fams.len();
        self.fams.push(FamState {
            name: name.to_string(),
            declared: None,
            has_help: false,
            has_samples: false,
            first_line: line,
            out,
        });
        self.index.insert(name.to_string(), i);
        self.current = Some(i);
        Ok(i)
    }

    fn comment(&mut self, line_no: usize, comment: &str) -> Result<(), ParseError> {
        let (keyword, rest) = split_token(skip_blanks(comment));
        let is_help = keyword == "HELP";
        if !is_help && keyword != "TYPE" {
            return Ok(()); // an ordinary comment
        }
        let rest = skip_blanks(rest);
        let (name, after) = split_metric_name(rest);
        if name.is_empty() {
            return Err(self.err(
                line_no,
                format!("# {keyword}: expected a metric name, found {}", quote(rest)),
            ));
        }
        if !after.is_empty() && !after.starts_with(is_blank) {
            return Err(self.err(line_no, format!("# {keyword}: invalid metric name {}", quote(rest))));
        }
        let after = skip_blanks(after);
        if is_help {
            let help = unescape_help(after).map_err(|m| self.err(line_no, format!("# HELP {name}: {m}")))?;
            let i = self.enter(name, line_no)?;
            if self.fams[i].has_help {
                return Err(self.err(line_no, format!("second # HELP line for metric family {}", quote(name))));
            }
            self.fams[i].has_help = true;
            if let Some(o) = self.fams[i].out {
                self.expo.families[o].help = Some(help);
            }
        } else {
            let (word, trailing) = split_token(after);
            let metric_type = MetricType::from_keyword(word).ok_or_else(|| {
                self.err(
                    line_no,
                    format!(
                        "# TYPE {name}: expected counter, gauge, histogram, summary or untyped, found {}",
                        quote(word)
                    ),
                )
            })?;
            if !skip_blanks(trailing).is_empty() {
                return Err(self.err(
                    line_no,
                    format!(
                        "# TYPE {name}: unexpected text after the type: {}",
                        quote(skip_blanks(trailing))
                    ),
                ));
            }
            let i = self.enter(name, line_no)?;
            if self.fams[i].declared.is_some() {
                return Err(self.err(line_no, format!("second # TYPE line for metric family {}", quote(name))));
            }
            if self.fams[i].has_samples {
                return Err(self.err(
                    line_no,
                    format!("# TYPE line for metric family {} comes after its samples", quote(name)),
                ));
            }
            self.fams[i].declared = Some(metric_type);
            if let Some(o) = self.fams[i].out {
                self.expo.families[o].metric_type = metric_type;
            }
        }
        Ok(())
    }

    /// The family a sample named `sample_name` belongs to, and its declared type.
    fn resolve<'n>(&self, line_no: usize, sample_name: &'n str) -> Result<(&'n str, Option<MetricType>), ParseError> {
        if let Some(&i) = self.index.get(sample_name) {
            let declared = self.fams[i].declared;
            if declared == Some(MetricType::Histogram) {
                return Err(self.err(
                    line_no,
                    format!(
                        "sample {} in histogram family {} must be named with _bucket, _sum or _count",
                        quote(sample_name),
                        quote(sample_name)
                    ),
                ));
            }
            return Ok((sample_name, declared));
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = sample_name.strip_suffix(suffix) {
                if let Some(&i) = self.index.get(base) {
                    match self.fams[i].declared {
                        Some(MetricType::Histogram) => return Ok((base, Some(MetricType::Histogram))),
                        Some(MetricType::Summary) if suffix != "_bucket" => {
                            return Ok((base, Some(MetricType::Summary)))
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok((sample_name, None))
    }

    fn sample<'a>(
        &mut self,
        line_no: usize,
        line: &'a str,
        scratch: &mut Vec<(&'a str, &'a str)>,
    ) -> Result<(), ParseError> {
        let (name, rest) = split_metric_name(line);
        if name.is_empty() {
            return Err(self.err(
                line_no,
                format!(
                    "expected a metric name, a '#' comment or an empty line, found {}",
                    quote(line)
                ),
            ));
        }
        scratch.clear();
        let blank_after_name = rest.starts_with(is_blank);
        let mut rest = skip_blanks(rest);
        if let Some(r) = rest.strip_prefix('{') {
            rest = parse_label_set(r, scratch).map_err(|m| self.err(line_no, format!("{name}: {m}")))?;
            rest = skip_blanks(rest);
        } else if !blank_after_name && !rest.is_empty() {
            return Err(self.err(
                line_no,
                format!(
                    "unexpected character after metric name {}: {}",
                    quote(name),
                    quote(rest)
                ),
            ));
        }
        let (value_token, after_value) = split_token(rest);
        if value_token.is_empty() {
            return Err(self.err(line_no, format!("{name}: missing sample value")));
        }
        let value = parse_float(value_token)
            .ok_or_else(|| self.err(line_no, format!("{name}: invalid sample value {}", quote(value_token))))?;
        let after_value = skip_blanks(after_value);
        let timestamp_ms = if after_value.is_empty() {
            None
        } else {
            let (ts, trailing) = split_token(after_value);
            let ts = ts.parse::<i64>().map_err(|_| {
                self.err(
                    line_no,
                    format!(
                        "{name}: expected an integer timestamp in milliseconds, found {}",
                        quote(ts)
                    ),
                )
            })?;
            let trailing = skip_blanks(trailing);
            if !trailing.is_empty() {
                return Err(self.err(
                    line_no,
                    format!("{name}: unexpected text after the timestamp: {}", quote(trailing)),
                ));
            }
            Some(ts)
        };

        let (family, declared) = self.resolve(line_no, name)?;
        match declared {
            Some(MetricType::Histogram) if name.ends_with("_bucket") => {
                self.check_bound_label(line_no, name, scratch, "le")?;
            }
            Some(MetricType::Summary) if family == name => {
                self.check_bound_label(line_no, name, scratch, "quantile")?;
            }
            _ => {}
        }
        let i = self.enter(family, line_no)?;
        self.fams[i].has_samples = true;
        if let Some(o) = self.fams[i].out {
            let labels = scratch
                .iter()
                .map(|(n, v)| (n.to_string(), unescape_label_value(v).into_owned()))
                .collect();
            self.expo.families[o].samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
                timestamp_ms,
                line: line_no,
            });
        }
        Ok(())
    }

    fn check_bound_label(
        &self,
        line_no: usize,
        name: &str,
        labels: &[(&str, &str)],
        label: &str,
    ) -> Result<(), ParseError> {
        let raw = labels
            .iter()
            .find(|(n, _)| *n == label)
            .map(|(_, v)| *v)
            .ok_or_else(|| self.err(line_no, format!("{name}: missing the {label:?} label")))?;
        let value = unescape_label_value(raw);
        match parse_float(&value) {
            Some(v) if !v.is_nan() => Ok(()),
            _ => Err(self.err(
                line_no,
                format!("{name}: label {label:?} must be a number, found {}", quote(&value)),
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Histograms
// ---------------------------------------------------------------------------------------------

/// A classic (bucketed) histogram, summed over every label set other than `le`.
///
/// Units are the metric's own: seconds for every kube-proxy histogram [`extract`] returns.
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
        ParseError::new(source_name, line, message)
    }
}

/// Renders a label set (without `le`) as `{a="b",…}`, for error messages.
fn series_name(key: &[(String, String)]) -> String {
    let inner: Vec<String> = key.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
    format!("{{{}}}", inner.join(","))
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
            family: name.to_string(),
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
        let mut key: Vec<(String, String)> = sample.labels.iter().filter(|(n, _)| n != "le").cloned().collect();
        key.sort();
        let series_text = series_name(&key);
        let acc = series.entry(key).or_default();
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
                            family: name.to_string(),
                            series: series_text,
                            line: sample.line,
                            le: le_text.to_string(),
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
                        family: name.to_string(),
                        series: series_text,
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
        let err_family = || name.to_string();
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
/// counters were reset: kube-proxy restarted). A restart that already made more observations
/// than before is not detectable here; compare `process_start_time_seconds` for that.
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
// kube-proxy facts
// ---------------------------------------------------------------------------------------------

/// `kubeproxy_sync_proxy_rules_duration_seconds`: duration of each rules sync (histogram, s).
pub const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
/// v1.13 and older: `kubeproxy_sync_proxy_rules_latency_microseconds` (histogram, µs).
pub const SYNC_LATENCY_LEGACY_US: &str = "kubeproxy_sync_proxy_rules_latency_microseconds";
/// `kubeproxy_network_programming_duration_seconds` (histogram, s).
pub const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
/// Unix time (s) of the last successful sync (gauge; `ip_family` label since ~v1.30).
pub const LAST_SYNC_TIMESTAMP: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
/// Unix time (s) a sync was last queued (gauge).
pub const LAST_QUEUED_TIMESTAMP: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
/// Rules owned by kube-proxy per iptables table (gauge, label `table`).
pub const IPTABLES_TOTAL: &str = "kubeproxy_sync_proxy_rules_iptables_total";
/// iptables-restore failures (counter, iptables and ipvs modes).
pub const IPTABLES_RESTORE_FAILURES: &str = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
/// nftables transaction failures (counter, nftables mode, v1.29+).
pub const NFTABLES_SYNC_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
/// Endpoint changes not yet synced (gauge).
pub const ENDPOINT_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_endpoint_changes_pending";
/// Service changes not yet synced (gauge).
pub const SERVICE_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_service_changes_pending";
/// Process start, Unix time (s) (gauge, from client_golang's process collector).
pub const PROCESS_START_TIME: &str = "process_start_time_seconds";
/// Build info (gauge 1, labels `git_version`, or `gitVersion` before ~v1.14).
pub const BUILD_INFO: &str = "kubernetes_build_info";

const WANTED_FAMILIES: &[&str] = &[
    SYNC_DURATION,
    SYNC_LATENCY_LEGACY_US,
    NETWORK_PROGRAMMING,
    LAST_SYNC_TIMESTAMP,
    LAST_QUEUED_TIMESTAMP,
    IPTABLES_TOTAL,
    IPTABLES_RESTORE_FAILURES,
    NFTABLES_SYNC_FAILURES,
    ENDPOINT_CHANGES_PENDING,
    SERVICE_CHANGES_PENDING,
    PROCESS_START_TIME,
    BUILD_INFO,
];

/// What the agent reads from kube-proxy's `/metrics`. A field is `None` (or empty) when
/// kube-proxy does not export that metric (version or proxy mode). Series that newer versions
/// split by `ip_family` are combined as documented per field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KubeProxyMetrics {
    /// Rules-sync duration, seconds. From `kubeproxy_sync_proxy_rules_duration_seconds`, or
    /// when absent from v1.13's `kubeproxy_sync_proxy_rules_latency_microseconds` converted
    /// to seconds (bounds and sum ÷ 1e6). Summed over `ip_family`.
    pub sync_duration: Option<Histogram>,
    /// True when `sync_duration` came from the legacy microseconds histogram.
    pub sync_duration_legacy: bool,
    /// Network programming latency (service/endpoint change → rules synced), seconds.
    pub network_programming: Option<Histogram>,
    /// Unix time (s) of the last successful sync; the oldest over `ip_family` label sets.
    pub last_sync_timestamp_seconds: Option<f64>,
    /// Unix time (s) a sync was last queued; the newest over `ip_family` label sets.
    pub last_queued_timestamp_seconds: Option<f64>,
    /// Number of iptables rules owned by kube-proxy, per table (`filter`, `nat`, …), summed
    /// over `ip_family`. Empty outside iptables mode or before v1.21.
    pub iptables_rules: BTreeMap<String, f64>,
    /// Failed syncs since start (count): `…_iptables_restore_failures_total` plus
    /// `…_nftables_sync_failures_total`, summed over `ip_family`.
    pub sync_failures_total: Option<f64>,
    /// Endpoint changes received but not yet synced (count).
    pub endpoint_changes_pending: Option<f64>,
    /// Service changes received but not yet synced (count).
    pub service_changes_pending: Option<f64>,
    /// Unix time (s) the kube-proxy process started (restart detection for [`delta`]).
    pub process_start_time_seconds: Option<f64>,
    /// kube-proxy's `git_version`, e.g. `v1.21.1`.
    pub version: Option<String>,
}

#[derive(Clone, Copy)]
enum Combine {
    Sum,
    Min,
    Max,
}

/// The value of a counter/gauge/untyped family over all its label sets, combined.
fn scalar(expo: &Exposition, source_name: &str, name: &str, combine: Combine) -> Result<Option<f64>, ParseError> {
    let Some(family) = expo.family(name) else {
        return Ok(None);
    };
    if matches!(family.metric_type, MetricType::Histogram | MetricType::Summary) {
        return Err(ParseError::whole(
            source_name,
            format!("{name}: expected a counter or gauge, found a {}", family.metric_type),
        ));
    }
    let mut out: Option<f64> = None;
    for s in family.samples.iter().filter(|s| s.name == name) {
        out = Some(match (out, combine) {
            (None, _) => s.value,
            (Some(a), Combine::Sum) => a + s.value,
            (Some(a), Combine::Min) => a.min(s.value),
            (Some(a), Combine::Max) => a.max(s.value),
        });
    }
    Ok(out)
}

/// Parses kube-proxy's `/metrics` body and extracts [`KubeProxyMetrics`]. Only the families
/// listed in the field docs are kept in memory, but every line is validated.
pub fn extract(source_name: &str, text: &str) -> Result<KubeProxyMetrics, ParseError> {
    let expo = parse_exposition_filtered(source_name, text, |name| WANTED_FAMILIES.contains(&name))?;
    extract_from(source_name, &expo)
}

/// [`extract`] over an already parsed exposition.
pub fn extract_from(source_name: &str, expo: &Exposition) -> Result<KubeProxyMetrics, ParseError> {
    let hist = |name: &str| histogram(expo, name).map_err(|e| e.into_parse_error(source_name));

    let mut sync_duration = hist(SYNC_DURATION)?;
    let mut sync_duration_legacy = false;
    if sync_duration.is_none() {
        if let Some(mut h) = hist(SYNC_LATENCY_LEGACY_US)? {
            for b in &mut h.buckets {
                b.0 /= 1e6;
            }
            h.sum /= 1e6;
            sync_duration = Some(h);
            sync_duration_legacy = true;
        }
    }

    let mut iptables_rules = BTreeMap::new();
    if let Some(family) = expo.family(IPTABLES_TOTAL) {
        for s in family.samples.iter().filter(|s| s.name == IPTABLES_TOTAL) {
            let table = s.label("table").ok_or_else(|| {
                ParseError::new(
                    source_name,
                    s.line,
                    format!("{IPTABLES_TOTAL}: sample without a \"table\" label"),
                )
            })?;
            *iptables_rules.entry(table.to_string()).or_insert(0.0) += s.value;
        }
    }

    let iptables_failures = scalar(expo, source_name, IPTABLES_RESTORE_FAILURES, Combine::Sum)?;
    let nftables_failures = scalar(expo, source_name, NFTABLES_SYNC_FAILURES, Combine::Sum)?;
    let sync_failures_total = match (iptables_failures, nftables_failures) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    };

    let version = expo.family(BUILD_INFO).and_then(|f| {
        f.samples
            .iter()
            .find_map(|s| s.label("git_version").or_else(|| s.label("gitVersion")))
            .map(str::to_string)
    });

    Ok(KubeProxyMetrics {
        sync_duration,
        sync_duration_legacy,
        network_programming: hist(NETWORK_PROGRAMMING)?,
        last_sync_timestamp_seconds: scalar(expo, source_name, LAST_SYNC_TIMESTAMP, Combine::Min)?,
        last_queued_timestamp_seconds: scalar(expo, source_name, LAST_QUEUED_TIMESTAMP, Combine::Max)?,
        iptables_rules,
        sync_failures_total,
        endpoint_changes_pending: scalar(expo, source_name, ENDPOINT_CHANGES_PENDING, Combine::Sum)?,
        service_changes_pending: scalar(expo, source_name, SERVICE_CHANGES_PENDING, Combine::Sum)?,
        process_start_time_seconds: scalar(expo, source_name, PROCESS_START_TIME, Combine::Max)?,
        version,
    })
}

// ---------------------------------------------------------------------------------------------
// /healthz
// ---------------------------------------------------------------------------------------------

/// The name [`parse_healthz`] gives its input in errors.
pub const HEALTHZ_SOURCE: &str = "kube-proxy /healthz";
/// The name [`parse_proxy_mode`] gives its input in errors.
pub const PROXY_MODE_SOURCE: &str = "kube-proxy /proxyMode";

/// kube-proxy's `/healthz` body, e.g.
/// `{"lastUpdated": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.92","currentTime": "…", "nodeEligible": true}`.
///
/// The timestamps are Go `time.Time.String()` values (RFC 3339 is accepted too), kept as text
/// with Go's monotonic-clock suffix ` m=±…` removed; [`parse_healthz`] has checked they parse.
/// Note that a healthy kube-proxy (HTTP 200) reports `lastUpdated == currentTime`; only an
/// unhealthy one (HTTP 503) reports its real last update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Healthz {
    pub last_updated: String,
    pub current_time: String,
    /// `nodeEligible` (v1.28+): false when the node is being deleted or tainted
    /// `ToBeDeletedByClusterAutoscaler`. `None` on older versions.
    pub node_eligible: Option<bool>,
}

impl Healthz {
    /// See [`healthz_staleness_seconds`].
    pub fn staleness_seconds(&self) -> Result<Option<f64>, ParseError> {
        healthz_staleness_seconds(self)
    }
}

#[derive(Deserialize)]
struct RawHealthz {
    #[serde(rename = "lastUpdated")]
    last_updated: String,
    #[serde(rename = "currentTime")]
    current_time: String,
    #[serde(rename = "nodeEligible", default)]
    node_eligible: Option<bool>,
}

/// Removes Go's monotonic clock reading (` m=+1.23`, ` m=-0.5`) from a `time.Time.String()`.
fn strip_monotonic(text: &str) -> Result<&str, String> {
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

/// Parses kube-proxy's `/healthz` JSON body.
pub fn parse_healthz(body: &str) -> Result<Healthz, ParseError> {
    let raw: RawHealthz = serde_json::from_str(body)
        .map_err(|e| ParseError::new(HEALTHZ_SOURCE, e.line(), format!("invalid /healthz JSON: {e}")))?;
    let clean = |field: &str, value: &str| -> Result<String, ParseError> {
        let text = strip_monotonic(value).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 1, format!("{field}: {m}")))?;
        parse_timestamp(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 1, format!("{field}: {m}")))?;
        Ok(text.to_string())
    };
    Ok(Healthz {
        last_updated: clean("lastUpdated", &raw.last_updated)?,
        current_time: clean("currentTime", &raw.current_time)?,
        node_eligible: raw.node_eligible,
    })
}

/// `currentTime − lastUpdated` in seconds, computed without losing nanoseconds. `None` when
/// `lastUpdated` is Go's zero time (`0001-01-01 00:00:00 +0000 UTC`: kube-proxy never synced).
pub fn healthz_staleness_seconds(h: &Healthz) -> Result<Option<f64>, ParseError> {
    let parse = |field: &str, text: &str| {
        let text = strip_monotonic(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 0, format!("{field}: {m}")))?;
        parse_timestamp_parts(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 0, format!("{field}: {m}")))
    };
    let last = parse("lastUpdated", &h.last_updated)?;
    let now = parse("currentTime", &h.current_time)?;
    if last == GO_ZERO_TIME {
        return Ok(None);
    }
    let secs = (now.0 - last.0) as f64;
    let nanos = f64::from(now.1) - f64::from(last.1);
    Ok(Some(secs + nanos / 1e9))
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as (Unix seconds, nanoseconds).
const GO_ZERO_TIME: (i64, u32) = (-62_135_596_800, 0);

/// Parses a timestamp into Unix seconds (with fraction). Accepted forms, strictly:
///
/// * RFC 3339: `2024-06-16T13:10:38.185Z`, `…+02:00` (`T`/`Z` may be lowercase);
/// * Go `time.Time.String()`: `2024-06-16 13:10:38.185046097 +0000 UTC` (the zone
///   abbreviation is checked for shape but the numeric offset is what counts). Strip a
///   trailing ` m=+…` first (see [`Healthz`]).
///
/// Fractions beyond nanoseconds are truncated. Second 60 (leap second) is rejected, as Go does.
pub fn parse_timestamp(text: &str) -> Result<f64, String> {
    let (secs, nanos) = parse_timestamp_parts(text)?;
    Ok(secs as f64 + f64::from(nanos) / 1e9)
}

/// Like [`parse_timestamp`], but only the RFC 3339 form.
pub fn parse_rfc3339(text: &str) -> Result<f64, String> {
    if text.len() > 10 && text.as_bytes()[10] == b' ' {
        return Err(format!(
            "not an RFC 3339 timestamp (expected 'T' after the date): {}",
            quote(text)
        ));
    }
    parse_timestamp(text)
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
fn parse_timestamp_parts(text: &str) -> Result<(i64, u32), String> {
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

// ---------------------------------------------------------------------------------------------
// /proxyMode
// ---------------------------------------------------------------------------------------------

/// kube-proxy's mode, as `/proxyMode` prints it. Serialized as the lowercase mode string
/// (`"iptables"`, `"ipvs"`, `"nftables"`, `"kernelspace"`, or the text of `Other`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ProxyMode {
    Iptables,
    Ipvs,
    Nftables,
    /// Windows' kernelspace (HNS) mode.
    KernelSpace,
    /// Anything else (e.g. the removed `userspace`), as printed.
    Other(String),
}

impl ProxyMode {
    pub fn as_str(&self) -> &str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Nftables => "nftables",
            ProxyMode::KernelSpace => "kernelspace",
            ProxyMode::Other(s) => s,
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for ProxyMode {
    fn from(s: String) -> Self {
        match s.as_str() {
            "iptables" => ProxyMode::Iptables,
            "ipvs" => ProxyMode::Ipvs,
            "nftables" => ProxyMode::Nftables,
            "kernelspace" => ProxyMode::KernelSpace,
            _ => ProxyMode::Other(s),
        }
    }
}

impl From<ProxyMode> for String {
    fn from(m: ProxyMode) -> Self {
        match m {
            ProxyMode::Other(s) => s,
            other => other.as_str().to_string(),
        }
    }
}

/// Parses the `/proxyMode` body: one word (surrounding whitespace trimmed) of
/// `[A-Za-z0-9_.-]`, at most 64 characters. Anything else (an HTML error page, `404 page not
/// found`) is an error.
pub fn parse_proxy_mode(body: &str) -> Result<ProxyMode, ParseError> {
    let word = body.trim();
    if word.is_empty() {
        return Err(ParseError::whole(
            PROXY_MODE_SOURCE,
            "empty body, expected a proxy mode",
        ));
    }
    let valid = word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        return Err(ParseError::new(
            PROXY_MODE_SOURCE,
            1,
            format!("expected a single proxy mode word, found {}", quote(word)),
        ));
    }
    Ok(ProxyMode::from(word.to_string()))
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

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    const V1_21: &str =
        include_str!("../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");
    const V1_13: &str = include_str!("../../tests/fixtures/kube-proxy/v1.13.4-netdata-go.d-plugin-testdata.prom");
    const HEALTHZ_PRE_128: &str =
        include_str!("../../tests/fixtures/kube-proxy/pre-1.28-no-nodeEligible-cilium-pr11733.json");
    const HEALTHZ_V130: &str =
        include_str!("../../tests/fixtures/kube-proxy/v1.30-kind-nodeEligible-raesene-2024-06-16.json");
    const HEALTHZ_APISERVER: &str =
        include_str!("../../tests/fixtures/kube-proxy/kind-via-apiserver-proxy-raesene-2025-01-18.json");
    const MODE_IPTABLES: &str = include_str!("../../tests/fixtures/kube-proxy/iptables.txt");
    const MODE_IPVS: &str = include_str!("../../tests/fixtures/kube-proxy/ipvs.txt");

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn parse(text: &str) -> Result<Exposition, ParseError> {
        parse_exposition("test", text)
    }

    fn err_line(text: &str) -> usize {
        match parse(text) {
            Ok(e) => panic!("expected an error for {text:?}, got {e:?}"),
            Err(e) => e.line,
        }
    }

    // --- exposition parser -------------------------------------------------------------------

    #[test]
    fn invalid_name_with_multibyte_text_is_an_error_not_a_panic() {
        // Found by fuzz/kube_proxy_metrics: the message sliced the line at byte 80,
        // inside a multi-byte character (here U+FFFD, what lossy decoding makes of bad bytes).
        let text = format!("# HELP a{}\n", "\u{fffd}".repeat(30));
        assert_eq!(err_line(&text), 1);
        let text = format!("# TYPE a{} counter\n", "é".repeat(60));
        assert_eq!(err_line(&text), 1);
    }

    #[test]
    fn v1_21_fixture_parses_whole() {
        let expo = parse_exposition("v1.21.1", V1_21).unwrap();
        let sync = expo.family(SYNC_DURATION).unwrap();
        assert_eq!(sync.metric_type, MetricType::Histogram);
        assert_eq!(sync.help.as_deref(), Some("[ALPHA] SyncProxyRules latency in seconds"));
        assert_eq!(sync.samples.len(), 15 + 1 + 2);
        let rules = expo.family(IPTABLES_TOTAL).unwrap();
        assert_eq!(rules.samples[1].label("table"), Some("nat"));
        assert_eq!(rules.samples[1].value, 6.0);
        assert_eq!(rules.samples[1].line, 215);
        // rest_client metrics carry URL labels with `{`, `}`, `/`, `:`.
        assert!(expo.family("rest_client_requests_total").is_some());
    }

    #[test]
    fn v1_13_fixture_parses_whole_with_summaries() {
        let expo = parse_exposition("v1.13.4", V1_13).unwrap();
        let summary = expo.family("http_request_duration_microseconds").unwrap();
        assert_eq!(summary.metric_type, MetricType::Summary);
        assert!(summary.samples.iter().any(|s| s.label("quantile") == Some("0.99")));
        assert!(summary
            .samples
            .iter()
            .any(|s| s.name == "http_request_duration_microseconds_count"));
    }

    #[test]
    fn filtered_keeps_only_wanted_families_but_validates_all() {
        let mut asked = Vec::new();
        let expo = parse_exposition_filtered("v1.21.1", V1_21, |n| {
            asked.push(n.to_string());
            n == SYNC_DURATION
        })
        .unwrap();
        assert_eq!(expo.families.len(), 1);
        assert_eq!(expo.families[0].name, SYNC_DURATION);
        // Called once per family, with base names.
        assert!(asked.iter().any(|n| n == NETWORK_PROGRAMMING));
        assert!(!asked.iter().any(|n| n.ends_with("_bucket")));
        let mut sorted = asked.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), asked.len());

        let bad = "# TYPE a gauge\na 1\nb{x=\"1\" 2\n";
        let e = parse_exposition_filtered("t", bad, |n| n == "a").unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn help_escapes() {
        let expo = parse("# HELP m a\\\\b\\nc \"q\" {x}\n# TYPE m gauge\nm 1\n").unwrap();
        assert_eq!(expo.families[0].help.as_deref(), Some("a\\b\nc \"q\" {x}"));
        let expo = parse("# HELP m\nm 1\n").unwrap();
        assert_eq!(expo.families[0].help.as_deref(), Some(""));
        assert_eq!(err_line("# HELP m bad \\t escape\n"), 1);
        assert_eq!(err_line("\n# HELP m trailing \\"), 2);
    }

    #[test]
    fn label_value_escapes_and_special_characters() {
        let text = r#"# TYPE m counter
m{a="q\"uote",b="back\\slash",c="new\nline",d="} , = # x",e="{}"} 1
m{ a = "x" , } 2
m{} 3
m{a="ünï€ode"}4
"#;
        let expo = parse(text).unwrap();
        let s = &expo.families[0].samples;
        assert_eq!(s[0].label("a"), Some("q\"uote"));
        assert_eq!(s[0].label("b"), Some("back\\slash"));
        assert_eq!(s[0].label("c"), Some("new\nline"));
        assert_eq!(s[0].label("d"), Some("} , = # x"));
        assert_eq!(s[0].label("e"), Some("{}"));
        assert_eq!(s[1].labels, vec![("a".to_string(), "x".to_string())]);
        assert_eq!(s[2].labels, vec![]);
        assert_eq!(s[3].label("a"), Some("ünï€ode"));
        assert_eq!(s[3].value, 4.0);
    }

    #[test]
    fn values_and_timestamps() {
        let text = "a NaN\nb +Inf\nc -Inf 123\nd 1.5e-3\ne -2E+2 -5\nf .5\ng 7 1395066363000\n";
        let expo = parse(text).unwrap();
        let v = |n: &str| expo.family(n).unwrap().samples[0].value;
        assert!(v("a").is_nan());
        assert_eq!(v("b"), f64::INFINITY);
        assert_eq!(v("c"), f64::NEG_INFINITY);
        assert_eq!(v("d"), 0.0015);
        assert_eq!(v("e"), -200.0);
        assert_eq!(v("f"), 0.5);
        assert_eq!(expo.family("c").unwrap().samples[0].timestamp_ms, Some(123));
        assert_eq!(expo.family("e").unwrap().samples[0].timestamp_ms, Some(-5));
        assert_eq!(
            expo.family("g").unwrap().samples[0].timestamp_ms,
            Some(1_395_066_363_000)
        );
        assert_eq!(expo.family("a").unwrap().metric_type, MetricType::Untyped);
    }

    #[test]
    fn comments_blank_lines_and_whitespace() {
        let text = "\n  # just a comment\n#HELP x h\n# TYPE x gauge\n\t x  { l = \"v\" }\t2\t \n# trailing comment\n";
        let expo = parse(text).unwrap();
        let f = expo.family("x").unwrap();
        assert_eq!(f.help.as_deref(), Some("h"));
        assert_eq!(f.samples[0].value, 2.0);
        assert_eq!(f.samples[0].line, 5);
        assert!(parse("").unwrap().families.is_empty());
    }

    #[test]
    fn malformed_lines_are_errors_with_line_numbers() {
        let cases: &[(&str, usize)] = &[
            ("a 1\nb\n", 2),                         // missing value
            ("a one\n", 1),                          // bad value
            ("a 1 2 3\n", 1),                        // trailing text
            ("a 1 1.5\n", 1),                        // non-integer timestamp
            ("a{b=\"c\" 1\n", 1),                    // unterminated label set
            ("a{b=\"c} 1\n", 1),                     // unterminated value
            ("a{b=c} 1\n", 1),                       // unquoted value
            ("a{b=\"\\t\"} 1\n", 1),                 // invalid escape
            ("a{,} 1\n", 1),                         // lone comma
            ("a{b=\"1\",,} 1\n", 1),                 // double comma
            ("a{b=\"1\" c=\"2\"} 1\n", 1),           // missing comma
            ("a{b=\"1\",b=\"2\"} 1\n", 1),           // duplicate label
            ("a{__name__=\"x\"} 1\n", 1),            // reserved label
            ("a{1b=\"x\"} 1\n", 1),                  // bad label name
            ("a-b 1\n", 1),                          // bad metric name
            ("1a 1\n", 1),                           // bad metric name
            ("a 1\r\n", 1),                          // CRLF
            ("# TYPE a gauges\n", 1),                // bad type
            ("# TYPE a\n", 1),                       // missing type
            ("# TYPE a gauge extra\n", 1),           // trailing text
            ("# TYPE\n", 1),                         // missing name
            ("# HELP 1a x\n", 1),                    // bad name
            ("# TYPE a gauge\n# TYPE a gauge\n", 2), // second TYPE
            ("# HELP a x\n# HELP a y\n", 2),         // second HELP
            ("a 1\n# TYPE a gauge\n", 2),            // TYPE after samples
            ("a 1\nb 1\na 2\n", 3),                  // not grouped
            ("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nx 1\nh_count 1\n", 5),
            ("# TYPE h histogram\nh_bucket 1\n", 2), // bucket without le
            ("# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", 2),
            ("# TYPE h histogram\nh_bucket{le=\"NaN\"} 1\n", 2),
            ("# TYPE h histogram\nh 1\n", 2), // bare histogram sample
            ("# TYPE s summary\ns 1\n", 2),   // quantile missing
            ("a 1 -\n", 1),
            ("a +nan\n", 1), // Go rejects a signed NaN
            ("a 0x10\n", 1),
            ("a 1_000\n", 1),
            ("{a=\"b\"} 1\n", 1), // no metric name
        ];
        for (text, line) in cases {
            assert_eq!(err_line(text), *line, "input {text:?}");
        }
    }

    #[test]
    fn error_message_names_source_and_quotes_input() {
        let e = parse_exposition("http://127.0.0.1:10249/metrics", "ok 1\nbad{x=\"1\"\n").unwrap_err();
        assert_eq!(e.source_name, "http://127.0.0.1:10249/metrics");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("bad"), "{}", e.message);
    }

    #[test]
    fn histogram_and_summary_suffixes_resolve_to_the_family() {
        let text = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 2\ns_count 3\ns_bucket 4\n";
        let expo = parse(text).unwrap();
        assert_eq!(expo.family("h").unwrap().samples.len(), 3);
        assert_eq!(expo.family("s").unwrap().samples.len(), 3);
        // A summary has no _bucket: that is an untyped family of its own.
        assert_eq!(expo.family("s_bucket").unwrap().metric_type, MetricType::Untyped);
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

    #[test]
    fn extract_reports_histogram_errors_as_parse_errors() {
        let text = format!(
            "# TYPE {SYNC_DURATION} histogram\n{SYNC_DURATION}_bucket{{le=\"1\"}} 1\n{SYNC_DURATION}_sum 1\n{SYNC_DURATION}_count 1\n"
        );
        let e = extract("m", &text).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.message.contains("+Inf"), "{}", e.message);
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

    // --- extract -------------------------------------------------------------------------------

    #[test]
    fn extract_v1_21() {
        let m = extract("v1.21.1", V1_21).unwrap();
        let sync = m.sync_duration.as_ref().unwrap();
        assert!(!m.sync_duration_legacy);
        assert_eq!((sync.count, sync.sum), (23.0, 9.3710718));
        assert_eq!(m.network_programming.as_ref().unwrap().count, 8.0);
        assert_eq!(m.last_sync_timestamp_seconds, Some(1.641_503_918_313_382_4e9));
        assert_eq!(m.last_queued_timestamp_seconds, Some(1.641_498_517_907_028_2e9));
        let rules: Vec<(&str, f64)> = m.iptables_rules.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(rules, vec![("filter", 5.0), ("nat", 6.0)]);
        assert_eq!(m.sync_failures_total, Some(0.0));
        assert_eq!(m.endpoint_changes_pending, Some(0.0));
        assert_eq!(m.service_changes_pending, Some(0.0));
        assert_eq!(m.process_start_time_seconds, Some(1.641_495_795_1e9));
        assert_eq!(m.version.as_deref(), Some("v1.21.1"));
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<KubeProxyMetrics>(&json).unwrap(), m);
    }

    #[test]
    fn extract_v1_13_converts_legacy_microseconds() {
        let m = extract("v1.13.4", V1_13).unwrap();
        assert!(m.sync_duration_legacy);
        let sync = m.sync_duration.unwrap();
        assert_eq!(sync.count, 2669.0);
        assert!(close(sync.sum, 62.885705));
        assert_eq!(sync.buckets[0], (0.001, 1.0));
        assert_eq!(sync.buckets[14], (16.384, 2669.0));
        assert_eq!(sync.buckets[15], (f64::INFINITY, 2669.0));
        // rank 0.99*2669 = 2642.31 in (0.032, 0.064] holding 2660-2534 = 126:
        // 0.032 + 0.032 * 108.31/126 = 0.059507301...
        assert!(close(sync.quantile(0.99).unwrap(), 0.032 + 0.032 * 108.31 / 126.0));
        assert_eq!(m.network_programming, None);
        assert_eq!(m.last_sync_timestamp_seconds, None);
        assert!(m.iptables_rules.is_empty());
        assert_eq!(m.sync_failures_total, None);
        assert_eq!(m.version.as_deref(), Some("v1.13.4"));
        assert_eq!(m.process_start_time_seconds, Some(1.553_010_380_9e9));
    }

    #[test]
    fn extract_newer_ip_family_and_nftables() {
        let text = r#"# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1000.5
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 990
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 995
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 999
# TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter
kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 2
kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv6"} 1
# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"} 10
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv6",table="nat"} 7
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="filter"} 3
# TYPE unrelated_histogram histogram
unrelated_histogram_bucket{le="1"} 5
unrelated_histogram_bucket{le="+Inf"} 2
unrelated_histogram_sum 0
unrelated_histogram_count 9
"#;
        let m = extract("t", text).unwrap();
        assert_eq!(m.last_sync_timestamp_seconds, Some(990.0));
        assert_eq!(m.last_queued_timestamp_seconds, Some(999.0));
        assert_eq!(m.sync_failures_total, Some(3.0));
        assert_eq!(m.iptables_rules.get("nat"), Some(&17.0));
        assert_eq!(m.iptables_rules.get("filter"), Some(&3.0));
        assert_eq!(m.sync_duration, None);
    }

    #[test]
    fn extract_errors() {
        let e = extract(
            "t",
            "# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge\nkubeproxy_sync_proxy_rules_iptables_total 3\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        let e = extract("t", "# TYPE kubeproxy_sync_proxy_rules_service_changes_pending summary\nkubeproxy_sync_proxy_rules_service_changes_pending_sum 3\n")
            .unwrap_err();
        assert!(e.message.contains("expected a counter or gauge"), "{e}");
        // Malformed lines in unwanted families still fail.
        let e = extract("t", "go_goroutines 1\ngo_threads x\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    // --- /healthz --------------------------------------------------------------------------------

    #[test]
    fn healthz_fixtures() {
        let h = parse_healthz(HEALTHZ_PRE_128).unwrap();
        assert_eq!(h.last_updated, "2020-06-03 23:59:53.688063083 +0000 UTC");
        assert_eq!(h.current_time, "2020-06-03 23:59:53.688063083 +0000 UTC");
        assert_eq!(h.node_eligible, None);
        assert_eq!(h.staleness_seconds().unwrap(), Some(0.0));

        let h = parse_healthz(HEALTHZ_V130).unwrap();
        assert_eq!(h.last_updated, "2024-06-16 13:10:38.185046097 +0000 UTC");
        assert_eq!(h.node_eligible, Some(true));
        assert!((parse_timestamp(&h.current_time).unwrap() - 1_718_543_438.185_046).abs() < 1e-6);

        let h = parse_healthz(HEALTHZ_APISERVER).unwrap();
        assert_eq!(h.current_time, "2025-01-18 07:58:53.413049689 +0000 UTC");
        assert_eq!(h.node_eligible, Some(true));
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<Healthz>(&json).unwrap(), h);
    }

    #[test]
    fn healthz_unhealthy_staleness_and_zero_time() {
        let body = r#"{"lastUpdated": "2024-06-16 13:10:08.5 +0000 UTC m=+10.0","currentTime": "2024-06-16 13:10:38.185046097 +0000 UTC m=+40.1", "nodeEligible": false}"#;
        let h = parse_healthz(body).unwrap();
        assert_eq!(h.node_eligible, Some(false));
        let s = h.staleness_seconds().unwrap().unwrap();
        assert!((s - 29.685_046_097).abs() < 1e-9, "{s}");
        let never = r#"{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2024-06-16 13:10:38 +0000 UTC", "nodeEligible": true}"#;
        assert_eq!(parse_healthz(never).unwrap().staleness_seconds().unwrap(), None);
        // RFC 3339 is accepted too.
        let rfc = r#"{"lastUpdated": "2024-06-16T15:10:00+02:00","currentTime": "2024-06-16T13:10:30.25Z"}"#;
        assert_eq!(parse_healthz(rfc).unwrap().staleness_seconds().unwrap(), Some(30.25));
    }

    #[test]
    fn healthz_errors() {
        assert!(parse_healthz("").is_err());
        assert!(parse_healthz("ok").is_err());
        assert!(parse_healthz(r#"{"lastUpdated": "x","currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#).is_err());
        assert!(parse_healthz(r#"{"currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#).is_err());
        assert!(parse_healthz(
            r#"{"lastUpdated": "2024-06-16 13:10:38 +0000 UTC m=+x","currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#
        )
        .is_err());
        let e = parse_healthz("{\n\"lastUpdated\": 5}").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.line), (HEALTHZ_SOURCE, 2));
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z").unwrap(), 0.0);
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00+00:00").unwrap(), 0.0);
        assert_eq!(parse_rfc3339("1970-01-01t01:00:00+01:00").unwrap(), 0.0);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59z").unwrap(), -1.0);
        assert_eq!(parse_rfc3339("2000-03-01T00:00:00Z").unwrap(), 951_868_800.0);
        assert_eq!(parse_rfc3339("2024-02-29T12:00:00.5Z").unwrap(), 1_709_208_000.5);
        assert!((parse_rfc3339("2024-06-16T13:10:38.185046097Z").unwrap() - 1_718_543_438.185_046).abs() < 1e-6);
        assert_eq!(parse_rfc3339("2024-06-16T08:40:38-04:30").unwrap(), 1_718_543_438.0);
        // More than 9 fractional digits: truncated.
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.1234567899Z").unwrap(), 1.123_456_789);
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
        assert!(parse_rfc3339("2024-06-16 13:10:38 +0000 UTC").is_err());
    }

    // --- /proxyMode ------------------------------------------------------------------------------

    #[test]
    fn proxy_mode() {
        assert_eq!(parse_proxy_mode(MODE_IPTABLES).unwrap(), ProxyMode::Iptables);
        assert_eq!(parse_proxy_mode(MODE_IPVS).unwrap(), ProxyMode::Ipvs);
        assert_eq!(parse_proxy_mode(" nftables\n").unwrap(), ProxyMode::Nftables);
        assert_eq!(parse_proxy_mode("kernelspace").unwrap(), ProxyMode::KernelSpace);
        assert_eq!(
            parse_proxy_mode("userspace").unwrap(),
            ProxyMode::Other("userspace".into())
        );
        assert!(parse_proxy_mode("").is_err());
        assert!(parse_proxy_mode("  \n").is_err());
        assert!(parse_proxy_mode("404 page not found").is_err());
        assert!(parse_proxy_mode("<html>").is_err());
        assert_eq!(
            serde_json::to_string(&ProxyMode::KernelSpace).unwrap(),
            "\"kernelspace\""
        );
        assert_eq!(
            serde_json::to_string(&ProxyMode::Other("x-y".into())).unwrap(),
            "\"x-y\""
        );
        assert_eq!(serde_json::from_str::<ProxyMode>("\"ipvs\"").unwrap(), ProxyMode::Ipvs);
        assert_eq!(
            serde_json::from_str::<ProxyMode>("\"weird\"").unwrap(),
            ProxyMode::Other("weird".into())
        );
        assert_eq!(ProxyMode::Nftables.to_string(), "nftables");
    }

    // --- robustness: random input never panics ----------------------------------------------------

    /// xorshift64*: a tiny deterministic PRNG so the test needs no extra crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const PIECES: &[&str] = &[
        "{",
        "}",
        "\"",
        "\\",
        ",",
        "=",
        "#",
        " ",
        "\t",
        "\n",
        "\r",
        "a",
        "_",
        ":",
        "0",
        "1",
        ".",
        "e",
        "+",
        "-",
        "le",
        "Inf",
        "NaN",
        "HELP",
        "TYPE",
        "histogram",
        "summary",
        "gauge",
        "_bucket",
        "_sum",
        "_count",
        "quantile",
        "ü",
        "€",
        "\u{0}",
        "m=+",
        "T",
        "Z",
        "2024-06-16",
        "13:10:38",
        "+0000 UTC",
    ];

    fn exercise(text: &str) {
        if let Ok(expo) = parse_exposition("fuzz", text) {
            for f in &expo.families {
                if let Ok(Some(h)) = histogram(&expo, &f.name) {
                    let _ = h.quantile(0.99);
                    let _ = delta(&h, &h);
                }
            }
        }
        let _ = extract("fuzz", text);
        let _ = parse_healthz(text);
        let _ = parse_proxy_mode(text);
        let _ = parse_timestamp(text);
    }

    #[test]
    fn random_input_never_panics() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = rng.below(40);
            let text: String = (0..len).map(|_| PIECES[rng.below(PIECES.len())]).collect();
            exercise(&text);
        }
        // Arbitrary bytes, made valid UTF-8 lossily.
        for _ in 0..5_000 {
            let len = rng.below(64);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            exercise(&String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn mutated_fixtures_never_panic() {
        let mut rng = Rng(42);
        for base in [V1_21, V1_13, HEALTHZ_V130] {
            let chars: Vec<char> = base.chars().collect();
            for _ in 0..150 {
                let mut m = chars.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(m.len());
                    match rng.below(3) {
                        0 => {
                            m.remove(at);
                        }
                        1 => m.insert(at, PIECES[rng.below(PIECES.len())].chars().next().unwrap_or('x')),
                        _ => m[at] = PIECES[rng.below(PIECES.len())].chars().next().unwrap_or('x'),
                    }
                }
                exercise(&m.into_iter().collect::<String>());
            }
        }
    }

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
