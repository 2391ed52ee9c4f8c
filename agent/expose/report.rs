//! The terminal report of `proxywatch check`: readable at 3 a.m. in 80 columns.

use std::fmt::Write;

use serde_json::Value;

use super::json::Document;
use crate::evaluate::{Finding, Severity};
use crate::history::kube_proxy::p99;
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

/// One evidence value as `key=value` pairs: nested objects flattened to dotted
/// keys (`generations.nft=12`), arrays of plain values joined with commas,
/// arrays of objects indexed (`mismatches[0].family=ipv4`), nulls left out.
pub(crate) fn flatten(key: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                flatten(&format!("{key}.{k}"), v, out);
            }
        }
        Value::Array(a) if a.iter().any(|v| v.is_object() || v.is_array()) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{key}[{i}]"), v, out);
            }
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().filter(|v| !v.is_null()).map(scalar).collect();
            let joined = if items.is_empty() {
                "none".to_string()
            } else {
                items.join(",")
            };
            out.push(format!("{key}={joined}"));
        }
        other => out.push(format!("{key}={}", scalar(other))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // A float for a person: 3 decimals (milliseconds, tenths of a percent), more
        // only for values that small; the JSON keeps every digit.
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let s = if f != 0.0 && f.abs() < 0.01 {
                format!("{f:.6}")
            } else {
                format!("{f:.3}")
            };
            let s = s.trim_end_matches('0');
            s.strip_suffix('.').map_or(s.to_string(), |i| format!("{i}.0"))
        }
        other => other.to_string(),
    }
}

/// Appends `items` after `first`, as many per line as fit in WIDTH, the next
/// lines indented by `indent`. An item with spaces in it (an error message)
/// sits alone on its line(s), its value wrapped under itself, so where each
/// `key=value` ends is never in doubt (with `spaced_alone`).
fn pack(out: &mut String, first: &str, indent: usize, items: &[String], spaced_alone: bool) {
    let pad = " ".repeat(indent);
    let mut line = first.to_string();
    let mut empty = true;
    for item in items {
        let w = item.chars().count();
        let alone = spaced_alone && item.contains(char::is_whitespace);
        if !empty && (alone || line.chars().count() + 1 + w > WIDTH) {
            out.push_str(line.trim_end());
            out.push('\n');
            line = pad.clone();
            empty = true;
        }
        if alone || line.chars().count() + w > WIDTH {
            let hang = indent + item.find('=').map_or(0, |i| item[..i].chars().count() + 1);
            wrap(out, &line, hang.min(WIDTH / 2), item);
            line = pad.clone();
            continue;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(item);
        empty = false;
    }
    if !empty {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn probe_state(doc: &Document, probe: &str) -> &'static str {
    match doc.probes.get(probe).map(|o| o.status) {
        Some(ProbeStatus::Ok) => "ok",
        Some(ProbeStatus::Absent) => "absent",
        Some(ProbeStatus::Failed) => "FAILED",
        None => "not run",
    }
}

/// A duration for the summary lines, as precise as the findings' numbers.
fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 120.0 {
        format!("{s:.2} s")
    } else {
        crate::timefmt::human_duration(s)
    }
}

/// A try's time in milliseconds, to 0.01 ms (loopback connects take tenths of one).
pub(crate) fn try_ms(s: f64) -> String {
    format!("{:.2} ms", s * 1000.0)
}

/// One line per Service try (`--try-services`, `--service-traffic.interval`): the latest
/// try's result, time and the endpoint it reached, then the p50 and p99 of the target's
/// latest successful tries, as the history keeps them (`check` runs once: over 1 try).
/// `(target, text)` pairs, in the probe's order; empty when the probe did not run.
pub(crate) fn service_try_lines(doc: &Document) -> Vec<(String, String)> {
    use crate::probe::service_traffic::Path;
    let Some(f) = &doc.facts.service_traffic else {
        return Vec::new();
    };
    let history = doc.derived.service_traffic.as_ref();
    f.tries
        .iter()
        .map(|t| {
            let mut text = t.result.clone();
            if let Some(s) = t.seconds.filter(|_| t.ok()) {
                text = format!("{text} in {}", try_ms(s));
            }
            if let Some(d) = t.detail.as_ref().filter(|_| !t.ok()) {
                text = format!("{text} ({d})");
            }
            match (t.path, &t.endpoint) {
                (Path::Current, Some(e)) => text.push_str(&format!(" to {e}")),
                (Path::Stale, Some(e)) => text.push_str(&format!(" to {e}, no longer in the service's endpoints")),
                (Path::None, _) => text.push_str(", no conntrack entry"),
                (Path::NotTranslated, _) => text.push_str(", not translated by the rules"),
                _ => {}
            }
            let h = history.and_then(|h| h.targets.iter().find(|h| h.target == t.target));
            match h.map(|h| (h.p50_seconds, h.p99_seconds, h.window_tries)) {
                Some((Some(p50), Some(p99), n)) => text.push_str(&format!(
                    "; p50 {}, p99 {} over {n} {}",
                    try_ms(p50),
                    try_ms(p99),
                    if n == 1 { "try" } else { "tries" }
                )),
                _ => text.push_str("; no successful try yet"),
            }
            (t.target.clone(), text)
        })
        .collect()
}

/// How the mode was decided, for a person.
fn mode_line(doc: &Document) -> String {
    let m = &doc.proxy_mode;
    let mut line = match m.source.as_str() {
        "kube-proxy" => format!("{} (kube-proxy's /proxyMode)", m.mode),
        "flag" => format!("{} (declared by --kube-proxy.mode; the node shows no mode)", m.mode),
        "unknown" => format!("{} (no /proxyMode answer, no kube-proxy rules, none declared)", m.mode),
        src => format!("{} ({src})", m.mode),
    };
    if let (Some(d), Some(o)) = (&m.declared, &m.observed) {
        if *d != o.mode {
            line.push_str(&format!("; declared {d}"));
        }
    }
    line
}

/// Rule counts per backend, nftables and IPVS sizes: one list of parts.
fn rules_parts(doc: &Document) -> Vec<String> {
    let mut parts = Vec::new();
    match &doc.facts.iptables {
        Some(ipt) => {
            let mut by_backend: Vec<(String, u64, Vec<String>)> = Vec::new();
            for s in &ipt.saves {
                let rules: u64 = s.counts.tables.values().map(|c| c.rules).sum();
                match by_backend.iter_mut().find(|(b, ..)| *b == s.backend) {
                    Some((_, n, fams)) => {
                        *n += rules;
                        fams.push(format!("{} {rules}", s.family));
                    }
                    None => by_backend.push((s.backend.clone(), rules, vec![format!("{} {rules}", s.family)])),
                }
            }
            if by_backend.is_empty() {
                parts.push("iptables: no rules read".to_string());
            }
            for (b, n, fams) in by_backend {
                let used = if b == ipt.backend_in_use { ", in use" } else { "" };
                parts.push(format!("iptables-{b} {n} rules ({}{used})", fams.join(", ")));
            }
        }
        None => parts.push(format!("iptables {}", probe_state(doc, "iptables"))),
    }
    match &doc.facts.nftables {
        Some(nft) if !nft.tables.is_empty() => {
            for t in &nft.tables {
                parts.push(format!(
                    "nftables {} {} rules, {} chains ({} services)",
                    t.family, t.counts.rules, t.counts.chains, t.counts.service_chains
                ));
            }
        }
        Some(_) => parts.push("nftables: no kube-proxy table".to_string()),
        None => parts.push(format!("nftables {}", probe_state(doc, "nftables"))),
    }
    match &doc.facts.ipvs {
        Some(ipvs) => parts.push(format!(
            "IPVS {} virtual servers, {} real servers ({} without backends)",
            ipvs.virtual_servers, ipvs.real_servers, ipvs.without_backends
        )),
        None => parts.push(format!("IPVS {}", probe_state(doc, "ipvs"))),
    }
    parts
}

/// kube-proxy's health, sync p99 and last sync: one list of parts.
fn kube_proxy_parts(doc: &Document) -> Vec<String> {
    let Some(kp) = &doc.facts.kube_proxy else {
        return vec![format!("{} (see probes)", probe_state(doc, "kube_proxy"))];
    };
    let mut parts = Vec::new();
    if let Some(p) = &kp.process {
        parts.push(format!("pid {}", p.pid));
    }
    parts.push(match &kp.healthz {
        Some(h) if h.status_code == 200 => "healthy (/healthz 200)".to_string(),
        Some(h) if h.draining() && h.livez_status != Some(503) => {
            format!("node draining (/healthz {}, not eligible)", h.status_code)
        }
        Some(h) if h.status_code != 0 => match h.staleness_seconds {
            Some(s) => format!("UNHEALTHY (/healthz {}, {} stale)", h.status_code, secs(s)),
            None => format!("UNHEALTHY (/healthz {})", h.status_code),
        },
        Some(h) if h.timed_out => "/healthz timed out".to_string(),
        Some(h) if h.refused => "/healthz refused".to_string(),
        _ => "/healthz unreadable".to_string(),
    });
    if !kp.metrics_up {
        parts.push("/metrics down".to_string());
    }
    let d = doc.derived.kube_proxy.clone().unwrap_or_default();
    if let Some(p) = kp.sync.as_ref().and_then(|l| p99(l, d.sync.as_ref())) {
        let over = if d.sync.is_some() {
            "last interval"
        } else {
            "since start"
        };
        parts.push(format!("sync p99 {} ({over})", secs(p)));
    }
    if let Some(age) = d.last_sync_age_seconds {
        parts.push(format!("last sync {} ago", secs(age)));
    }
    if d.restarts > 0 {
        parts.push(format!("{} restarts seen", d.restarts));
    }
    parts
}

fn conntrack_parts(doc: &Document) -> Vec<String> {
    let Some(ct) = &doc.facts.conntrack else {
        return vec![format!("{} (see probes)", probe_state(doc, "conntrack"))];
    };
    let fill = ct
        .fill_ratio()
        .map_or("no limit readable".to_string(), |r| format!("{:.1}% full", r * 100.0));
    let mut parts = vec![format!("{} of {} entries ({fill})", ct.entries, ct.max)];
    match doc.derived.conntrack.as_ref().and_then(|d| d.window.as_ref()) {
        Some(w) => parts.push(format!(
            "last {}: drop={} early_drop={} insert_failed={}",
            crate::timefmt::human_duration(w.seconds),
            w.get("drop"),
            w.get("early_drop"),
            w.get("insert_failed")
        )),
        None => parts.push(format!(
            "since boot: drop={} early_drop={} insert_failed={}",
            ct.stat("drop"),
            ct.stat("early_drop"),
            ct.stat("insert_failed")
        )),
    }
    if let Some(tr) = doc.derived.conntrack.as_ref().and_then(|d| d.trend.as_ref()) {
        if let Some(s) = tr.seconds_to_full {
            parts.push(format!("full in about {}", crate::timefmt::human_duration(s)));
        }
    }
    parts
}

/// The nf_tables watcher: whether it listens, its commits by writer class, its losses.
fn changes_parts(doc: &Document) -> Option<Vec<String>> {
    use crate::history::nftables_watch::WatchState;
    let w = doc.derived.nftables_watch.as_ref()?;
    let mut parts = vec![match (w.state, &w.error) {
        (WatchState::Watching, _) => "watching nf_tables commits".to_string(),
        (WatchState::Unavailable, Some(why)) => format!("not watched ({why})"),
        (_, _) => "watcher starting".to_string(),
    }];
    parts.push(format!(
        "{} by kube-proxy, {} by others seen",
        w.commits_kube_proxy_total, w.commits_other_total
    ));
    if w.notifications_lost_total > 0 {
        parts.push(format!(
            "notifications lost {} times (rules re-read)",
            w.notifications_lost_total
        ));
    }
    Some(parts)
}

/// Journal lines `check` prints at most (the newest).
const JOURNAL_LINES: usize = 10;

/// Joins parts with "; " and wraps them after `label` (padded to LABEL columns).
fn line(out: &mut String, label: &str, parts: &[String]) {
    let items: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if i + 1 < parts.len() {
                format!("{p};")
            } else {
                p.clone()
            }
        })
        .collect();
    // Each part stays whole on a line when it fits.
    pack(out, &format!("{label:<LABEL$}"), LABEL, &items, false);
}

/// Width of the labels of the summary lines (`kube-proxy: `).
const LABEL: usize = 12;

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
    // The answer first: how the node proxies, what its data plane holds, whether kube-proxy keeps up.
    wrap(&mut out, &format!("{:<LABEL$}", "mode:"), LABEL, &mode_line(doc));
    line(&mut out, "rules:", &rules_parts(doc));
    line(&mut out, "kube-proxy:", &kube_proxy_parts(doc));
    line(&mut out, "conntrack:", &conntrack_parts(doc));
    if let Some(parts) = changes_parts(doc) {
        line(&mut out, "changes:", &parts);
    }
    out.push('\n');
    if doc.findings.is_empty() {
        out.push_str("No findings: the data plane looks healthy.\n\n");
    }
    for f in &doc.findings {
        finding(&mut out, f, collected_at);
    }
    stale_entries(&mut out, doc);
    service_tries(&mut out, doc);
    journal(&mut out, doc);
    probes(&mut out, doc);
    out
}

/// One finding: its summary, since when, its evidence and the steps to fix it.
fn finding(out: &mut String, f: &Finding, collected_at: f64) {
    wrap(out, &format!("{} {}: ", tag(f.severity), f.id), 7, &f.summary);
    if let Some(since) = f.since {
        let _ = writeln!(
            out,
            "       since: {} ({} at {})",
            crate::timefmt::rfc3339(since),
            crate::timefmt::human_duration(collected_at - since),
            f.severity.as_str()
        );
    }
    let mut ev = Vec::new();
    for (k, v) in &f.evidence {
        flatten(k, v, &mut ev);
    }
    if !ev.is_empty() {
        pack(out, "       evidence: ", 17, &ev, true);
    }
    for (i, step) in f.remediation.iter().enumerate() {
        let first = if i == 0 {
            "       fix: 1. ".to_string()
        } else {
            format!("            {}. ", i + 1)
        };
        wrap(out, &first, 15, step);
    }
    out.push('\n');
}

/// The stale and draining conntrack entries, per service and endpoint; nothing
/// without the conntrack_stale probe's facts and their history.
fn stale_entries(out: &mut String, doc: &Document) {
    let (Some(f), Some(d)) = (&doc.facts.conntrack_stale, &doc.derived.conntrack_stale) else {
        return;
    };
    let total: u64 = f.stale_entries.values().sum();
    let draining: u64 = f.draining_entries.values().sum();
    // Wrapped to the report's width: with a long source ("iptables-nft, nftables") the line
    // ran past 80 columns.
    wrap(
        out,
        "stale conntrack entries: ",
        2,
        &format!(
            "{total}, draining: {draining} ({} entries checked, {} service ports from {})",
            f.examined_entries, f.service_ports, f.source
        ),
    );
    for (g, state) in d
        .groups
        .iter()
        .map(|g| (g, "stale"))
        .chain(d.draining.iter().map(|g| (g, "draining")))
    {
        wrap(
            out,
            "  ",
            4,
            &format!(
                "{}{} -> {} ({state}, no longer in the service's endpoints): {} entries, {} checks",
                g.group.service,
                if g.group.node_port { " (NodePort)" } else { "" },
                g.group.endpoint,
                g.group.entries,
                g.checks
            ),
        );
    }
    out.push('\n');
}

/// The Service tries (`--try-services`), one line each; nothing without any.
fn service_tries(out: &mut String, doc: &Document) {
    let tries = service_try_lines(doc);
    if tries.is_empty() {
        return;
    }
    let _ = writeln!(out, "service tries (connect time; DNS over UDP: answer time):");
    for (target, text) in &tries {
        wrap(out, &format!("  {target}: "), 4, text);
    }
    out.push('\n');
}

/// The newest [`JOURNAL_LINES`] rule changes the nf_tables watcher journaled.
fn journal(out: &mut String, doc: &Document) {
    let Some(w) = doc.derived.nftables_watch.as_ref().filter(|w| !w.journal.is_empty()) else {
        return;
    };
    let _ = writeln!(out, "rule changes (newest last, who committed):");
    for e in w.journal.iter().rev().take(JOURNAL_LINES).rev() {
        wrap(out, "  ", 4, &e.describe());
    }
    out.push('\n');
}

/// Each probe's status, duration and error, in columns.
fn probes(out: &mut String, doc: &Document) {
    out.push_str("probes:\n");
    // Columns sized by the longest probe name, so every row aligns.
    let name_w = doc.probes.keys().map(|n| n.chars().count()).max().unwrap_or(0);
    for (name, o) in &doc.probes {
        let status = match o.status {
            ProbeStatus::Ok => "ok",
            ProbeStatus::Absent => "absent",
            ProbeStatus::Failed => "FAILED",
        };
        let head = format!(
            "  {name:<name_w$}  {status:<6} {:>7.1} ms  ",
            o.duration_seconds * 1000.0
        );
        let indent = head.chars().count();
        wrap(out, &head, indent, o.error.as_deref().unwrap_or(""));
    }
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

    fn outcome(status: ProbeStatus, error: Option<&str>) -> crate::snapshot::ProbeOutcome {
        crate::snapshot::ProbeOutcome {
            status,
            duration_seconds: 0.0123,
            error: error.map(str::to_string),
            last_run_seconds: 0.0,
            last_success_seconds: None,
            reading_seconds: None,
        }
    }

    #[test]
    fn probe_columns_align_at_any_name_length() {
        let s = crate::evaluate::test_support::healthy();
        let mut doc = Document::new(&s, evaluate(&s, &crate::config::default_thresholds()));
        doc.probes.insert("a".into(), outcome(ProbeStatus::Ok, None));
        doc.probes.insert(
            "a_much_longer_probe_name".into(),
            outcome(
                ProbeStatus::Failed,
                Some("it broke in a way that takes many words to say"),
            ),
        );
        doc.probes.insert(
            "conntrack_stale".into(),
            outcome(ProbeStatus::Absent, Some("no netlink")),
        );
        let text = render(&doc);
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "probes:")
            .skip(1)
            .filter(|l| l.contains(" ms"))
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        let col = |row: &str, what: &str| row.find(what).unwrap_or_else(|| panic!("{what} in {row:?}"));
        // Status, duration and detail start in the same column on every row.
        let status: Vec<usize> = rows
            .iter()
            .map(|r| {
                col(
                    r,
                    if r.contains("FAILED") {
                        "FAILED"
                    } else if r.contains("absent") {
                        "absent"
                    } else {
                        "ok "
                    },
                )
            })
            .collect();
        assert!(status.iter().all(|c| *c == status[0]), "{text}");
        let ms: Vec<usize> = rows.iter().map(|r| col(r, " ms")).collect();
        assert!(ms.iter().all(|c| *c == ms[0]), "{text}");
        assert_eq!(col(rows[1], "it broke"), col(rows[2], "no netlink"), "{text}");
        // The wrapped rest of a detail starts under the detail.
        let cont = text
            .lines()
            .find(|l| l.trim_start().starts_with("many") || l.trim_start().starts_with("words"))
            .unwrap();
        assert_eq!(cont.len() - cont.trim_start().len(), col(rows[1], "it broke"), "{text}");
        for l in text.lines() {
            assert!(l.chars().count() <= WIDTH, "too wide: {l:?}");
        }
    }

    #[test]
    fn evidence_is_flat_key_value_without_nulls() {
        let mut ev = Vec::new();
        let v = serde_json::json!({
            "count_window": null,
            "generations": {"nft": 12, "legacy": null},
            "mismatches": [{"family": "ipv4", "netlink": 10}],
            "missing": ["ip_vs", "ip_vs_rr"],
            "empty": [],
            "error": "connection refused",
            "ratio": 0.5,
            "p50_seconds": 0.36072727272727273,
            "tiny": 0.000123456,
            "whole": 5.0,
        });
        for (k, v) in v.as_object().unwrap() {
            flatten(k, v, &mut ev);
        }
        assert_eq!(
            ev,
            [
                "empty=none",
                "error=connection refused",
                "generations.nft=12",
                "mismatches[0].family=ipv4",
                "mismatches[0].netlink=10",
                "missing=ip_vs,ip_vs_rr",
                "p50_seconds=0.361",
                "ratio=0.5",
                "tiny=0.000123",
                "whole=5.0",
            ]
        );
        let mut out = String::new();
        pack(&mut out, "       evidence: ", 17, &ev, true);
        // A value with spaces sits alone on its line; short pairs share one.
        assert_eq!(
            out,
            "       evidence: empty=none\n                 error=connection refused\n                 \
             generations.nft=12 mismatches[0].family=ipv4\n                 \
             mismatches[0].netlink=10 missing=ip_vs,ip_vs_rr\n                 \
             p50_seconds=0.361 ratio=0.5 tiny=0.000123 whole=5.0\n"
        );
    }

    #[test]
    fn leads_with_mode_rules_and_kube_proxy() {
        use crate::probe::iptables::{IptablesFacts, SaveCounts, SaveRun, TableCounts};
        use crate::probe::kube_proxy::{HealthzFacts, KubeProxyFacts, Latency};
        let mut s = crate::evaluate::test_support::healthy();
        let save = |backend: &str, family: &str, rules: u64| SaveRun {
            backend: backend.into(),
            family: family.into(),
            command: "netlink".into(),
            duration_seconds: 0.0,
            counts: SaveCounts {
                tables: [("nat".to_string(), TableCounts { chains: 3, rules })].into(),
                ..Default::default()
            },
            netlink: None,
        };
        s.facts.iptables = Some(IptablesFacts {
            saves: vec![
                save("nft", "ipv4", 1200),
                save("nft", "ipv6", 34),
                save("legacy", "ipv4", 0),
            ],
            backend_in_use: "nft".into(),
            ..Default::default()
        });
        s.facts.kube_proxy = Some(KubeProxyFacts {
            mode: Some(crate::evaluate::ProxyMode::Iptables),
            metrics_up: true,
            sync: Some(Latency {
                p99_since_start: Some(0.25),
                ..Default::default()
            }),
            healthz: Some(HealthzFacts {
                status_code: 200,
                ..Default::default()
            }),
            ..Default::default()
        });
        use crate::probe::nftables::{NftTable, NftTableCounts, NftablesFacts};
        s.facts.nftables = Some(NftablesFacts {
            tables: vec![NftTable {
                family: "ip".into(),
                counts: NftTableCounts {
                    rules: 500,
                    chains: 40,
                    service_chains: 12,
                    ..Default::default()
                },
                ..Default::default()
            }],
        });
        let doc = Document::new(&s, evaluate(&s, &crate::config::default_thresholds()));
        let text = render(&doc);
        let head: Vec<&str> = text.lines().take(8).collect();
        // kube-proxy's nftables table in iptables mode: a leftover, and the status says so.
        assert_eq!(head[1], "status: WARNING (0 critical, 1 warning, 0 info)", "{text}");
        assert_eq!(head[2], "mode:       iptables (kube-proxy's /proxyMode)", "{text}");
        assert_eq!(
            head[3], "rules:      iptables-nft 1234 rules (ipv4 1200, ipv6 34, in use);",
            "{text}"
        );
        assert_eq!(head[4], "            iptables-legacy 0 rules (ipv4 0);", "{text}");
        assert_eq!(
            head[5], "            nftables ip 500 rules, 40 chains (12 services); IPVS not run",
            "each part whole on a line"
        );
        assert!(
            text.contains("kube-proxy: healthy (/healthz 200); sync p99 250 ms (since start)\n"),
            "{text}"
        );
        assert!(
            text.contains("conntrack:  1000 of 262144 entries (0.4% full);"),
            "{text}"
        );
        // Before the findings and the probes.
        assert!(text.find("kube-proxy:").unwrap() < text.find("[WARN] proxy_mode_leftovers").unwrap());
    }
}
