//! The Prometheus text exposition format 0.0.4: its data model ([`Exposition`], [`MetricFamily`],
//! [`Sample`]) and a small, strict parser of our own ([`parse_exposition`],
//! [`parse_exposition_filtered`], [`parse_exposition_limited`]), linear in its input and within
//! [`Limits`]. Every error names the input and the 1-based line, and quotes at most a bounded
//! excerpt of it.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::labels::{parse_label_set, unescape_label_value, LabelScratch};
use super::lex::{is_blank, skip_blanks, split_name};
use super::limits::{clip, short_name, Limits, DEADLINE_CHECK_LINES, MAX_MESSAGE_BYTES};
use crate::parse::{quote, ParseError};

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

/// Parses a whole Prometheus text exposition (format 0.0.4), keeping every family, within
/// [`Limits::DEFAULT`].
///
/// Strict: any line that is not empty, a comment, a valid `# HELP`/`# TYPE` or a valid sample
/// is an error with its line number. Also errors: a second `# HELP`/`# TYPE` for a family, a
/// `# TYPE` after the family's samples, a family whose lines are split into several groups,
/// duplicate label names, a histogram `_bucket` without a numeric `le`, a summary quantile
/// without a numeric `quantile`, carriage returns, and any bound of [`Limits`] exceeded.
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
    parse_exposition_limited(source_name, text, wanted, &Limits::DEFAULT)
}

/// [`parse_exposition_filtered`] within `limits`. The cost is linear in the text: a line is
/// refused before any work once it is over `max_line_bytes`, duplicate labels are found with a
/// set, the family index holds slices of `text` (no copies) and stops at `max_families`, and
/// what is kept is counted against `max_kept_bytes` as it is kept.
pub fn parse_exposition_limited<F>(
    source_name: &str,
    text: &str,
    wanted: F,
    limits: &Limits,
) -> Result<Exposition, ParseError>
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
        limits,
        kept_bytes: 0,
    };
    let mut labels = LabelScratch::default();
    for (i, raw_line) in text.split('\n').enumerate() {
        let line_no = i + 1;
        if i % DEADLINE_CHECK_LINES == 0 && limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(parser.err(line_no, "gave up: the parse did not finish by the probe's deadline"));
        }
        if raw_line.len() > limits.max_line_bytes {
            return Err(parser.err(
                line_no,
                format!(
                    "line of {} bytes, longer than {}: {}",
                    raw_line.len(),
                    limits.max_line_bytes,
                    quote(raw_line)
                ),
            ));
        }
        parser.line(line_no, raw_line, &mut labels)?;
    }
    Ok(parser.expo)
}

/// What the parser keeps per family until the end: a slice of the text, no copy.
struct FamState<'a> {
    name: &'a str,
    declared: Option<MetricType>,
    has_help: bool,
    has_samples: bool,
    first_line: usize,
    /// Index into `expo.families` when the family is kept.
    out: Option<usize>,
}

struct Parser<'a, 's, F> {
    source: &'s str,
    fams: Vec<FamState<'a>>,
    index: HashMap<&'a str, usize>,
    current: Option<usize>,
    wanted: F,
    expo: Exposition,
    limits: &'s Limits,
    /// Estimated bytes of what `expo` holds.
    kept_bytes: usize,
}

/// Estimated heap cost of a kept sample and of each of its labels, beside their text.
const SAMPLE_COST: usize = 96;
const LABEL_COST: usize = 64;
const FAMILY_COST: usize = 128;

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

/// Splits a leading `[a-zA-Z_:][a-zA-Z0-9_:]*`; the name is empty when there is none.
fn split_metric_name(s: &str) -> (&str, &str) {
    split_name(s, is_metric_name_start, is_metric_name_char)
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

/// Checks `# HELP` text: `\\` and `\n` are the only escapes.
fn check_help(raw: &str) -> Result<(), String> {
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\\' | 'n') => {}
                Some(other) => {
                    return Err(format!(
                        "invalid escape sequence {} in HELP text (only \\\\ and \\n are allowed)",
                        quote(&format!("\\{other}"))
                    ))
                }
                None => return Err("HELP text ends with a lone backslash".to_string()),
            }
        }
    }
    Ok(())
}

/// Unescapes `# HELP` text already checked by [`check_help`]: the same
/// escapes as a label value (`\\`, `\n`; a stray `\"` is kept as `"`).
fn unescape_help(raw: &str) -> String {
    super::labels::unescape_label_value(raw).into_owned()
}

impl<'a, F: FnMut(&str) -> bool> Parser<'a, '_, F> {
    /// A parse error at `line`; the message is clipped to [`MAX_MESSAGE_BYTES`].
    fn err(&self, line: usize, message: impl Into<String>) -> ParseError {
        ParseError::new(self.source, line, clip(message.into(), MAX_MESSAGE_BYTES))
    }

    fn line(&mut self, line_no: usize, raw: &'a str, labels: &mut LabelScratch<'a>) -> Result<(), ParseError> {
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
        self.sample(line_no, line, labels)
    }

    /// Counts `bytes` more against the kept budget.
    fn keep(&mut self, line_no: usize, bytes: usize) -> Result<(), ParseError> {
        self.kept_bytes = self.kept_bytes.saturating_add(bytes);
        if self.kept_bytes > self.limits.max_kept_bytes {
            return Err(self.err(
                line_no,
                format!(
                    "the metric families kept take more than {} bytes",
                    self.limits.max_kept_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Makes `name` the current family, creating it if new. A family that appeared before and
    /// was interrupted by another one is an error: the format requires one group per family.
    fn enter(&mut self, name: &'a str, line: usize) -> Result<usize, ParseError> {
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
        if self.fams.len() >= self.limits.max_families {
            return Err(self.err(
                line,
                format!(
                    "more than {} metric families (the next is {})",
                    self.limits.max_families,
                    quote(name)
                ),
            ));
        }
        let out = if (self.wanted)(name) {
            self.keep(line, FAMILY_COST + name.len())?;
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
            name,
            declared: None,
            has_help: false,
            has_samples: false,
            first_line: line,
            out,
        });
        self.index.insert(name, i);
        self.current = Some(i);
        Ok(i)
    }

    fn comment(&mut self, line_no: usize, comment: &'a str) -> Result<(), ParseError> {
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
        let shown = short_name(name);
        let after = skip_blanks(after);
        if is_help {
            check_help(after).map_err(|m| self.err(line_no, format!("# HELP {shown}: {m}")))?;
            let i = self.enter(name, line_no)?;
            if self.fams[i].has_help {
                return Err(self.err(line_no, format!("second # HELP line for metric family {}", quote(name))));
            }
            self.fams[i].has_help = true;
            if let Some(o) = self.fams[i].out {
                self.keep(line_no, after.len())?;
                self.expo.families[o].help = Some(unescape_help(after));
            }
        } else {
            let (word, trailing) = split_token(after);
            let metric_type = MetricType::from_keyword(word).ok_or_else(|| {
                self.err(
                    line_no,
                    format!(
                        "# TYPE {shown}: expected counter, gauge, histogram, summary or untyped, found {}",
                        quote(word)
                    ),
                )
            })?;
            if !skip_blanks(trailing).is_empty() {
                return Err(self.err(
                    line_no,
                    format!(
                        "# TYPE {shown}: unexpected text after the type: {}",
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
    fn resolve(&self, line_no: usize, sample_name: &'a str) -> Result<(&'a str, Option<MetricType>), ParseError> {
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

    fn sample(&mut self, line_no: usize, line: &'a str, labels: &mut LabelScratch<'a>) -> Result<(), ParseError> {
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
        let shown = short_name(name);
        labels.clear();
        let blank_after_name = rest.starts_with(is_blank);
        let mut rest = skip_blanks(rest);
        if let Some(r) = rest.strip_prefix('{') {
            rest = parse_label_set(r, labels, self.limits).map_err(|m| self.err(line_no, format!("{shown}: {m}")))?;
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
            return Err(self.err(line_no, format!("{shown}: missing sample value")));
        }
        let value = parse_float(value_token)
            .ok_or_else(|| self.err(line_no, format!("{shown}: invalid sample value {}", quote(value_token))))?;
        let timestamp_ms = self.timestamp(line_no, &shown, skip_blanks(after_value))?;

        let (family, declared) = self.resolve(line_no, name)?;
        match declared {
            Some(MetricType::Histogram) if name.ends_with("_bucket") => {
                self.check_bound_label(line_no, name, &labels.pairs, "le")?;
            }
            Some(MetricType::Summary) if family == name => {
                self.check_bound_label(line_no, name, &labels.pairs, "quantile")?;
            }
            _ => {}
        }
        let i = self.enter(family, line_no)?;
        self.fams[i].has_samples = true;
        if let Some(o) = self.fams[i].out {
            let cost = SAMPLE_COST
                + name.len()
                + labels
                    .pairs
                    .iter()
                    .map(|(n, v)| LABEL_COST + n.len() + v.len())
                    .sum::<usize>();
            self.keep(line_no, cost)?;
            let labels = labels
                .pairs
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

    /// The optional timestamp after a sample's value (`after_value`, blanks skipped): an
    /// integer of milliseconds and nothing after it.
    fn timestamp(&self, line_no: usize, shown: &str, after_value: &str) -> Result<Option<i64>, ParseError> {
        if after_value.is_empty() {
            return Ok(None);
        }
        let (ts, trailing) = split_token(after_value);
        let ts = ts.parse::<i64>().map_err(|_| {
            self.err(
                line_no,
                format!(
                    "{shown}: expected an integer timestamp in milliseconds, found {}",
                    quote(ts)
                ),
            )
        })?;
        let trailing = skip_blanks(trailing);
        if !trailing.is_empty() {
            return Err(self.err(
                line_no,
                format!("{shown}: unexpected text after the timestamp: {}", quote(trailing)),
            ));
        }
        Ok(Some(ts))
    }

    fn check_bound_label(
        &self,
        line_no: usize,
        name: &str,
        labels: &[(&str, &str)],
        label: &str,
    ) -> Result<(), ParseError> {
        let shown = short_name(name);
        let raw = labels
            .iter()
            .find(|(n, _)| *n == label)
            .map(|(_, v)| *v)
            .ok_or_else(|| self.err(line_no, format!("{shown}: missing the {label:?} label")))?;
        let value = unescape_label_value(raw);
        match parse_float(&value) {
            Some(v) if !v.is_nan() => Ok(()),
            _ => Err(self.err(
                line_no,
                format!("{shown}: label {label:?} must be a number, found {}", quote(&value)),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
