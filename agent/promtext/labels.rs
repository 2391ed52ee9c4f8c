//! Label sets of the text format, `{name="value",…}`: their syntax and escapes, and the
//! per-line scratch that finds a duplicate name in linear time ([`LabelScratch`]) and stops at
//! the bounds of [`Limits`].

use std::borrow::Cow;
use std::collections::HashSet;

use super::lex::{skip_blanks, split_name};
use super::limits::{short_name, Limits};
use crate::parse::quote;

/// One line's labels, reused from line to line: the pairs in order, and the set of names once
/// there are more than [`FEW_LABELS`] of them, so a duplicate is found in linear time.
#[derive(Default)]
pub(super) struct LabelScratch<'a> {
    pub(super) pairs: Vec<(&'a str, &'a str)>,
    names: HashSet<&'a str>,
}

/// Up to this many labels a scan is faster than hashing.
const FEW_LABELS: usize = 8;

impl<'a> LabelScratch<'a> {
    pub(super) fn clear(&mut self) {
        self.pairs.clear();
        self.names.clear();
    }

    /// Adds a label; `Err` names the bound or the duplicate.
    fn push(&mut self, name: &'a str, value: &'a str, limits: &Limits) -> Result<(), String> {
        if self.pairs.len() >= limits.max_labels_per_sample {
            return Err(format!("more than {} labels", limits.max_labels_per_sample));
        }
        let duplicate = if self.pairs.len() < FEW_LABELS {
            self.pairs.iter().any(|(n, _)| *n == name)
        } else {
            if self.names.is_empty() {
                self.names.extend(self.pairs.iter().map(|(n, _)| *n));
            }
            !self.names.insert(name)
        };
        if duplicate {
            return Err(format!("duplicate label name {}", quote(name)));
        }
        if value.len() > limits.max_label_value_bytes {
            return Err(format!(
                "value of label {} is {} bytes, longer than {}",
                short_name(name),
                value.len(),
                limits.max_label_value_bytes
            ));
        }
        self.pairs.push((name, value));
        Ok(())
    }
}

fn is_label_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_name_char(b: u8) -> bool {
    is_label_name_start(b) || b.is_ascii_digit()
}

/// Splits a leading `[a-zA-Z_][a-zA-Z0-9_]*`; the name is empty when there is none.
fn split_label_name(s: &str) -> (&str, &str) {
    split_name(s, is_label_name_start, is_label_name_char)
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
pub(super) fn unescape_label_value(raw: &str) -> Cow<'_, str> {
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

/// Parses the inside of a label set (after `{`) into `out`; returns the rest after `}`.
pub(super) fn parse_label_set<'a>(
    mut s: &'a str,
    out: &mut LabelScratch<'a>,
    limits: &Limits,
) -> Result<&'a str, String> {
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
        let name_shown = short_name(name);
        let rest = skip_blanks(rest);
        let rest = rest
            .strip_prefix('=')
            .ok_or_else(|| format!("expected '=' after label name {name_shown}, found {}", quote(rest)))?;
        let rest = skip_blanks(rest);
        let rest = rest.strip_prefix('"').ok_or_else(|| {
            format!(
                "expected '\"' to open the value of label {name_shown}, found {}",
                quote(rest)
            )
        })?;
        let (raw, rest) = split_quoted(rest)?;
        out.push(name, raw, limits)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, limits: &Limits) -> Result<Vec<(String, String)>, String> {
        let mut scratch = LabelScratch::default();
        parse_label_set(text, &mut scratch, limits)?;
        Ok(scratch
            .pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect())
    }

    fn many(n: usize) -> String {
        let labels: Vec<String> = (0..n).map(|i| format!("l{i}=\"{i}\"")).collect();
        format!("{}}}", labels.join(","))
    }

    #[test]
    fn duplicates_found_below_and_above_the_scan_threshold() {
        let l = Limits::DEFAULT;
        assert_eq!(parse(&many(3), &l).unwrap().len(), 3);
        assert!(parse("a=\"1\",a=\"2\"}", &l)
            .unwrap_err()
            .contains("duplicate label name \"a\""));
        // 40 labels: past FEW_LABELS, the set decides; the duplicate is the last one.
        let mut text = many(40);
        text.insert_str(text.len() - 1, ",l3=\"again\"");
        assert!(parse(&text, &l).unwrap_err().contains("duplicate label name \"l3\""));
        // The same scratch, reused for a line without duplicates, starts empty.
        let mut scratch = LabelScratch::default();
        assert!(parse_label_set(&text, &mut scratch, &l).is_err());
        scratch.clear();
        assert!(parse_label_set(&many(40), &mut scratch, &l).is_ok());
    }

    #[test]
    fn bounds_on_labels_and_values() {
        let l = Limits {
            max_labels_per_sample: 10,
            max_label_value_bytes: 8,
            ..Limits::DEFAULT
        };
        assert_eq!(parse(&many(10), &l).unwrap().len(), 10);
        assert_eq!(parse(&many(11), &l).unwrap_err(), "more than 10 labels");
        assert!(parse("a=\"12345678\"}", &l).is_ok());
        assert_eq!(
            parse("a=\"123456789\"}", &l).unwrap_err(),
            "value of label a is 9 bytes, longer than 8"
        );
    }

    #[test]
    fn two_hundred_thousand_distinct_labels_take_linear_time() {
        // Quadratic, this is 2e10 comparisons (minutes); linear, about a second unoptimised.
        let l = Limits {
            max_labels_per_sample: usize::MAX,
            ..Limits::DEFAULT
        };
        let started = std::time::Instant::now();
        assert_eq!(parse(&many(200_000), &l).unwrap().len(), 200_000);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }
}
