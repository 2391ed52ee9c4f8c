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
        let after_value = skip_blanks(after_value);
        let timestamp_ms = if after_value.is_empty() {
            None
        } else {
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
            Some(ts)
        };

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
mod tests {
    use super::*;

    const V1_21: &str =
        include_str!("../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");
    const V1_13: &str = include_str!("../../tests/fixtures/kube-proxy/v1.13.4-netdata-go.d-plugin-testdata.prom");

    // kube-proxy's family names, spelled out: promtext does not depend on probe/.
    const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
    const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
    const IPTABLES_TOTAL: &str = "kubeproxy_sync_proxy_rules_iptables_total";

    fn parse(text: &str) -> Result<Exposition, ParseError> {
        parse_exposition("test", text)
    }

    fn err_line(text: &str) -> usize {
        match parse(text) {
            Ok(e) => panic!("expected an error for {text:?}, got {e:?}"),
            Err(e) => e.line,
        }
    }

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
}
