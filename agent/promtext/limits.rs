//! What one parse may cost, whatever the exporter sends: [`Limits`] bounds the work per line
//! (its length, its labels), the state kept for the whole text (families indexed, samples kept)
//! and the time; [`clip`] and [`short_name`] bound what an error message quotes.
//!
//! Text from an exporter is untrusted: a process that listens on the exporter's port before it
//! does (or a broken exporter) must not make the agent spend unbounded CPU or memory, nor copy
//! megabytes into an error that is then logged and served every interval.

use std::borrow::Cow;
use std::time::Instant;

/// Bounds on one parse. Each bound exceeded is a parse error naming it; none truncates silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest line, in bytes (newline excluded).
    pub max_line_bytes: usize,
    /// Most labels on one sample.
    pub max_labels_per_sample: usize,
    /// Longest label value, in bytes (as written, escapes included).
    pub max_label_value_bytes: usize,
    /// Most metric families in the text, kept or not (each costs an index entry until the end).
    pub max_families: usize,
    /// Most bytes the kept families may take in memory (an estimate counting each sample's and
    /// label's allocations, not only the text).
    pub max_kept_bytes: usize,
    /// When to give up: checked every [`DEADLINE_CHECK_LINES`] lines.
    pub deadline: Option<Instant>,
}

/// How often (in lines) the parser looks at the clock.
pub const DEADLINE_CHECK_LINES: usize = 1024;

impl Limits {
    /// Generous bounds for any exporter: 64 KiB lines, 64 labels of at most 4 KiB, 10,000
    /// families, 16 MiB kept, no deadline.
    pub const DEFAULT: Limits = Limits {
        max_line_bytes: 64 << 10,
        max_labels_per_sample: 64,
        max_label_value_bytes: 4 << 10,
        max_families: 10_000,
        max_kept_bytes: 16 << 20,
        deadline: None,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Longest message a parse error carries, in bytes; the source name and line come on top, so a
/// whole error stays under 1 KiB for any source name under 400 bytes.
pub const MAX_MESSAGE_BYTES: usize = 512;

/// Longest metric or label name quoted whole in an error, in bytes.
pub const MAX_NAME_BYTES: usize = 100;

/// `text` cut to at most `max` bytes (on a character boundary) with `…` appended when cut.
pub fn clip(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A name as an error shows it: whole up to [`MAX_NAME_BYTES`], else cut with `…`. Names are
/// validated identifiers (`[a-zA-Z0-9_:]`), so they need no escaping, only a bound.
pub fn short_name(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_NAME_BYTES {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(clip(name.to_string(), MAX_NAME_BYTES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_and_short_names() {
        assert_eq!(clip("abc".into(), 10), "abc");
        let c = clip("é".repeat(100), 11);
        assert!(c.len() <= 11 && c.ends_with('…'), "{c}");
        assert_eq!(clip(String::new(), 0), "");
        assert_eq!(short_name("up"), "up");
        let long = "a".repeat(10_000);
        let s = short_name(&long);
        assert!(s.len() <= MAX_NAME_BYTES && s.ends_with('…'));
    }
}
