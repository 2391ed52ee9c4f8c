//! The text format's smallest pieces, shared by the line parser and the label parser.

pub(super) fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

pub(super) fn skip_blanks(s: &str) -> &str {
    s.trim_start_matches(is_blank)
}

/// Splits a leading name whose first byte satisfies `start` and the others `rest`; the name is
/// empty when there is none.
pub(super) fn split_name(s: &str, start: fn(u8) -> bool, rest: fn(u8) -> bool) -> (&str, &str) {
    let bytes = s.as_bytes();
    if bytes.is_empty() || !start(bytes[0]) {
        return ("", s);
    }
    let end = bytes.iter().position(|&b| !rest(b)).unwrap_or(bytes.len());
    s.split_at(end)
}
