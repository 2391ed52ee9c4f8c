//! The terminal report of `proxywatch check`: readable at 3 a.m. in 80 columns.

use std::fmt::Write;

use serde_json::Value;

use super::json::Document;
use crate::evaluate::Severity;
use crate::snapshot::ProbeStatus;

const WIDTH: usize = 80;

fn tag(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "[CRIT]",
        Severity::Warning => "[WARN]",
        Severity::Info => "[INFO]",
        Severity::Ok => "[ OK ]",
    }
}

/// Appends `text` wrapped to WIDTH, the first line after `first`, others indented by `indent`.
pub(crate) fn wrap(out: &mut String, first: &str, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    let mut line = first.to_string();
    let mut col = line.chars().count();
    let mut empty = true;
    for word in text.split_whitespace() {
        let w = word.chars().count();
        if !empty && col + 1 + w > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = pad.clone();
            col = indent;
            empty = true;
        }
        if !empty {
            line.push(' ');
            col += 1;
        }
        line.push_str(word);
        col += w;
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

pub fn render(doc: &Document) -> String {
    let mut out = String::new();
    let count = |s: Severity| doc.findings.iter().filter(|f| f.severity == s).count();
    let _ = writeln!(out, "proxywatch check: node {} at {}", doc.node, doc.collected_at);
    let collected_at = crate::timefmt::parse_timestamp(&doc.collected_at).unwrap_or(0.0);
    let _ = writeln!(
        out,
        "status: {} ({} critical, {} warning, {} info)",
        doc.status.as_str().to_uppercase(),
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info)
    );
    out.push('\n');
    if doc.findings.is_empty() {
        out.push_str("No findings: the data plane looks healthy.\n\n");
    }
    for f in &doc.findings {
        wrap(&mut out, &format!("{} {}: ", tag(f.severity), f.id), 7, &f.summary);
        if let Some(since) = f.since {
            let _ = writeln!(
                out,
                "       since: {} ({} at {})",
                crate::timefmt::rfc3339(since),
                crate::timefmt::human_duration(collected_at - since),
                f.severity.as_str()
            );
        }
        if !f.evidence.is_empty() {
            let ev: Vec<String> = f.evidence.iter().map(|(k, v)| format!("{k}={}", show(v))).collect();
            wrap(&mut out, "       evidence: ", 17, &ev.join(" "));
        }
        for (i, step) in f.remediation.iter().enumerate() {
            let first = if i == 0 {
                "       fix: 1. ".to_string()
            } else {
                format!("            {}. ", i + 1)
            };
            wrap(&mut out, &first, 15, step);
        }
        out.push('\n');
    }
    out.push_str("probes:\n");
    for (name, o) in &doc.probes {
        let status = match o.status {
            ProbeStatus::Ok => "ok",
            ProbeStatus::Absent => "absent",
            ProbeStatus::Failed => "FAILED",
        };
        let head = format!("  {name:<10} {status:<7} {:>7.1} ms ", o.duration_seconds * 1000.0);
        wrap(&mut out, &head, 30, o.error.as_deref().unwrap_or(""));
    }
    if let (Some(f), Some(d)) = (&doc.facts.conntrack_stale, &doc.derived.conntrack_stale) {
        let total: u64 = f.stale_entries.values().sum();
        let _ = writeln!(
            out,
            "\nstale conntrack entries: {total} ({} entries checked, {} service ports from {})",
            f.examined_entries, f.service_ports, f.source
        );
        for g in &d.groups {
            let _ = writeln!(
                out,
                "  {}{} -> {} (gone): {} entries, {} checks",
                g.group.service,
                if g.group.node_port { " (NodePort)" } else { "" },
                g.group.endpoint,
                g.group.entries,
                g.checks
            );
        }
    }
    if let Some(ct) = &doc.facts.conntrack {
        let fill = ct
            .fill_ratio()
            .map_or("n/a".to_string(), |r| format!("{:.1}%", r * 100.0));
        let _ = writeln!(
            out,
            "\nconntrack: {} of {} entries ({fill})\n           since boot: drop={} early_drop={} insert_failed={}",
            ct.entries,
            ct.max,
            ct.stat("drop"),
            ct.stat("early_drop"),
            ct.stat("insert_failed")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::evaluate;

    #[test]
    fn fits_80_columns_and_marks_severity() {
        let mut s = crate::evaluate::test_support::healthy();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        s.facts.conntrack.as_mut().unwrap().entries = 250_000;
        let t = crate::config::default_thresholds();
        let doc = Document::new(&s, evaluate(&s, &t));
        let text = render(&doc);
        for line in text.lines() {
            // A single unbreakable word (a long command) may exceed; none of ours does.
            assert!(line.chars().count() <= WIDTH, "too wide: {line:?}");
        }
        assert!(
            text.contains("status: CRITICAL (2 critical, 0 warning, 0 info)"),
            "{text}"
        );
        assert!(text.contains("[CRIT] sysctl_ip_forward:"));
        assert!(
            text.contains("fix: 1. Enable it now: sysctl -w net.ipv4.ip_forward=1"),
            "{text}"
        );
    }
}
