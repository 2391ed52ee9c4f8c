//! The comparison as text for a terminal: the verdict, then each changed finding and fact
//! in columns that fit 80 characters.

use std::fmt::Write;

use serde_json::Value;

use super::{Comparison, FactChange, FactState, Side};
use crate::expose::report::wrap;

fn tag(severity: Option<&str>) -> &'static str {
    match severity {
        Some("critical") => "CRIT",
        Some("warning") => "WARN",
        Some("info") => "INFO",
        Some("ok") => "OK",
        None => "none",
        Some(_) => "?",
    }
}

/// A value for a person: numbers without noise, null as "none".
pub(super) fn show(v: &Value, unit: &str) -> String {
    match v {
        Value::Null => "none".into(),
        Value::Number(n) if unit == "%" => format!("{:.1}%", n.as_f64().unwrap_or(f64::NAN)),
        Value::Number(n) => {
            let s = match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => i.to_string(),
                (None, Some(f)) => trim(format!("{f:.3}")),
                _ => n.to_string(),
            };
            match unit {
                "" => s,
                u => format!("{s} {u}"),
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn show_change(c: f64, unit: &str) -> String {
    let s = if unit == "%" {
        format!("{c:+.1}")
    } else if c.fract() == 0.0 && c.abs() < 1e15 {
        format!("{:+}", c as i64)
    } else {
        trim(format!("{c:+.3}"))
    };
    match unit {
        "%" => format!("{s} pt"),
        "" => s,
        u => format!("{s} {u}"),
    }
}

fn describe(s: &Side) -> String {
    let mut parts = vec![format!("node {}", s.node.as_deref().unwrap_or("missing"))];
    if let Some(at) = &s.collected_at {
        parts.push(at.clone());
    }
    parts.push(format!("status {}", s.status.as_deref().unwrap_or("missing")));
    if let Some(v) = &s.agent_version {
        parts.push(format!("agent {v}"));
    }
    parts.join(", ")
}

const NAME: usize = 36;

const COL: usize = 13;

/// The comparison for a person, 80 columns.
pub fn render_text(c: &Comparison) -> String {
    let mut out = String::new();
    verdict(&mut out, c);
    numeric_facts(&mut out, &c.facts);
    other_facts(&mut out, &c.facts);
    let same = c.facts.iter().filter(|f| f.state == FactState::Same).count();
    let _ = writeln!(out, "{same} facts unchanged (--format json lists every fact).\n");
    findings(&mut out, c);
    out
}

/// The verdict, the two sides, and the reasons for the verdict.
fn verdict(out: &mut String, c: &Comparison) {
    let _ = writeln!(out, "proxywatch compare: {}", c.verdict.as_str().to_uppercase());
    wrap(
        out,
        "  before: ",
        10,
        &format!("{}: {}", c.before.source, describe(&c.before)),
    );
    wrap(
        out,
        "  after:  ",
        10,
        &format!("{}: {}", c.after.source, describe(&c.after)),
    );
    if c.before.node.is_some() && c.before.node != c.after.node {
        out.push_str("  note: the two snapshots are of different nodes\n");
    }
    if let Some(m) = &c.mode_change {
        let _ = writeln!(out, "  proxy mode changed: {} -> {}", m.before, m.after);
    }
    for r in &c.reasons {
        wrap(out, &format!("  {}: ", c.verdict.as_str()), 4, r);
    }
    out.push('\n');
}

/// The changed facts that are numbers (on either side), as a table: before, after, change.
fn numeric_facts(out: &mut String, facts: &[FactChange]) {
    let numeric: Vec<&FactChange> = facts
        .iter()
        .filter(|f| f.state != FactState::Same && (f.before.is_number() || f.after.is_number()))
        .collect();
    if numeric.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{:<NAME$} {:>COL$} {:>COL$} {:>COL$}",
        "fact", "before", "after", "change"
    );
    for f in &numeric {
        let missing = |v: &Value, gone: bool| if gone { "missing".into() } else { show(v, f.unit) };
        let before = missing(&f.before, f.state == FactState::MissingBefore);
        let after = missing(&f.after, f.state == FactState::MissingAfter);
        let change = f.change.map(|d| show_change(d, f.unit)).unwrap_or_default();
        let mut name = f.name.clone();
        if name.chars().count() > NAME {
            let _ = writeln!(out, "{name}");
            name.clear();
        }
        let line = format!("{name:<NAME$} {before:>COL$} {after:>COL$} {change:>COL$}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push('\n');
}

/// The other changed facts (words, flags), one `name: before -> after` line each.
fn other_facts(out: &mut String, facts: &[FactChange]) {
    let other: Vec<&FactChange> = facts
        .iter()
        .filter(|f| f.state != FactState::Same && !(f.before.is_number() || f.after.is_number()))
        .collect();
    if other.is_empty() {
        return;
    }
    out.push_str("changed:\n");
    for f in &other {
        let before = if f.state == FactState::MissingBefore {
            "missing".into()
        } else {
            show(&f.before, f.unit)
        };
        let after = if f.state == FactState::MissingAfter {
            "missing".into()
        } else {
            show(&f.after, f.unit)
        };
        wrap(out, "  ", 6, &format!("{}: {before} -> {after}", f.name));
    }
    out.push('\n');
}

/// The findings that appeared, resolved or changed severity, or that none did.
fn findings(out: &mut String, c: &Comparison) {
    for (title, list) in [
        ("findings appeared", &c.appeared),
        ("findings resolved", &c.resolved),
        ("findings that changed severity", &c.severity_changed),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}:");
        for f in list {
            let head = match (&f.before, &f.after) {
                (None, after) => format!("  [{}] {}", tag(after.as_deref()), f.id),
                (before, None) => format!("  [{}] {}", tag(before.as_deref()), f.id),
                (b, a) => format!("  [{} -> {}] {}", tag(b.as_deref()), tag(a.as_deref()), f.id),
            };
            let _ = writeln!(out, "{head}");
            wrap(out, "      ", 6, &f.summary);
        }
        out.push('\n');
    }
    if c.appeared.is_empty() && c.resolved.is_empty() && c.severity_changed.is_empty() {
        out.push_str("findings: no change.\n");
    }
}

#[cfg(test)]
mod tests {
    use super::super::compare;
    use super::super::tests::{doc, finding};
    use super::*;
    use serde_json::json;

    #[test]
    fn text_fits_80_columns() {
        let before = doc("ok", 200, json!([]));
        let mut after = doc(
            "critical",
            970,
            json!([
                finding("conntrack_table_fill", "critical"),
                finding("ipvs_virtual_servers_without_backends", "warning")
            ]),
        );
        after["facts"]["sysctls"]["values"]["net.netfilter.nf_conntrack_tcp_timeout_established"] = json!(86400);
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(1.5);
        after["facts"]["modules"]["modules"]["ip_vs"] = json!("loaded");
        let text = render_text(&compare("baseline.json", &before, "probes now", &after));
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "too wide: {line:?}");
        }
        assert!(text.starts_with("proxywatch compare: WORSE\n"), "{text}");
        assert!(text.contains("conntrack fill"), "{text}");
        assert!(text.contains("20.0%"), "{text}");
        assert!(text.contains("97.0%"), "{text}");
        assert!(text.contains("+77.0 pt"), "{text}");
        assert!(text.contains("iptables nft ipv4 save duration"), "{text}");
        assert!(text.contains("+1.25 s"), "{text}");
        assert!(text.contains("module ip_vs: missing -> loaded"), "{text}");
        assert!(
            text.contains("[CRIT] conntrack_table_fill\n      conntrack_table_fill summary"),
            "{text}"
        );
        assert!(
            text.contains("sysctl net.netfilter.nf_conntrack_tcp_timeout_established\n"),
            "{text}"
        );
    }
}
