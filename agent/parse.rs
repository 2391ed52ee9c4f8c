//! The error every parser returns, and small helpers shared by parsers.
//!
//! Parsers are pure functions over text: they never touch `std::fs` or
//! `std::process`. Their errors name the input (a file path or a command
//! line) and the 1-based line, so an SRE can open the exact spot.

use std::fmt;

/// What went wrong while parsing one input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// The input's name: a path such as `/proc/net/stat/nf_conntrack`, or a command such as `ipvsadm -Ln`.
    pub source_name: String,
    /// 1-based line number, or 0 when the error is about the input as a whole.
    pub line: usize,
    /// What was expected and what was found.
    pub message: String,
}

impl ParseError {
    pub fn new(source_name: &str, line: usize, message: impl Into<String>) -> Self {
        ParseError {
            source_name: source_name.to_string(),
            line,
            message: message.into(),
        }
    }

    /// An error about the whole input (empty, truncated...), not one line.
    pub fn whole(source_name: &str, message: impl Into<String>) -> Self {
        Self::new(source_name, 0, message)
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.source_name, self.message)
        } else {
            write!(f, "{}: line {}: {}", self.source_name, self.line, self.message)
        }
    }
}

/// Shortens untrusted text quoted in an error message, so garbage input cannot make errors huge.
pub fn quote(text: &str) -> String {
    const MAX: usize = 60;
    let mut out: String = text.chars().take(MAX).collect();
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    format!("{out:?}")
}

/// Parses a decimal unsigned integer, trimming surrounding whitespace.
pub fn parse_u64(source_name: &str, line: usize, field: &str, text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse::<u64>().map_err(|_| {
        ParseError::new(
            source_name,
            line,
            format!("{field}: expected an unsigned integer, found {}", quote(t)),
        )
    })
}

/// Parses a hexadecimal unsigned integer (no `0x` prefix), as the kernel prints them.
pub fn parse_hex_u64(source_name: &str, line: usize, field: &str, text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    if t.is_empty() || t.len() > 16 {
        return Err(ParseError::new(
            source_name,
            line,
            format!("{field}: expected a hexadecimal integer, found {}", quote(t)),
        ));
    }
    u64::from_str_radix(t, 16).map_err(|_| {
        ParseError::new(
            source_name,
            line,
            format!("{field}: expected a hexadecimal integer, found {}", quote(t)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_source_and_line() {
        let e = ParseError::new("/proc/x", 3, "bad");
        assert_eq!(e.to_string(), "/proc/x: line 3: bad");
        assert_eq!(ParseError::whole("/proc/x", "empty").to_string(), "/proc/x: empty");
    }

    #[test]
    fn quote_caps_length() {
        let long = "x".repeat(1000);
        assert!(quote(&long).chars().count() < 70);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64("f", 1, "n", " 42\n").unwrap(), 42);
        assert!(parse_u64("f", 1, "n", "-1").is_err());
        assert_eq!(parse_hex_u64("f", 1, "n", "0000000e").unwrap(), 14);
        assert!(parse_hex_u64("f", 1, "n", "zz").is_err());
        assert!(parse_hex_u64("f", 1, "n", "").is_err());
    }
}
