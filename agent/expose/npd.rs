//! `proxywatch npd`: the verdict as a node-problem-detector custom plugin says it.
//!
//! NPD runs a plugin per rule and reads its exit code — 0 OK, 1 a problem
//! (condition `True`), anything else Unknown — and its stdout, trimmed and cut
//! to `max_output_length` bytes (80 by default), as the condition's message.
//! So: one line, the most severe findings first by id with their key number,
//! cut on a word boundary; exit 1 when a selected finding is at or above
//! `--severity`, 2 when the agent cannot tell (its answer missing, unreadable,
//! or a probe of the selected area failed), 0 otherwise.
//!
//! A condition is one rule, and NPD gives a rule one fixed reason: several
//! permanent rules on one condition overwrite each other every round (a True
//! from one, a False from the next). So each condition here is one area
//! (`--area`), named in the README's table; a single finding (`--finding`)
//! suits a temporary rule (an Event whose reason is the finding's id in CamelCase).

use std::fmt::Write;

use crate::evaluate::{Finding, Severity, CHECKS};

/// The exit codes NPD reads.
pub const EXIT_OK: u8 = 0;
pub const EXIT_PROBLEM: u8 = 1;
pub const EXIT_UNKNOWN: u8 = 2;

pub use crate::area::Area;

/// The area of a finding id, from its row in `CHECKS`; None for `probe_failed`, which
/// says what cannot be seen, not a problem, and for an id this binary does not have.
pub fn area_of(id: &str) -> Option<Area> {
    CHECKS.iter().find(|c| c.id == id).and_then(|c| c.area)
}

/// The area whose view a probe's failure blinds (`probe_failed` names probes in its
/// evidence), from the probe's row in the probe table; All for a name this binary does not
/// have, so that an unknown probe's failure leaves every condition unknown.
fn area_of_probe(probe: &str) -> Area {
    crate::probe::PROBES
        .iter()
        .find(|p| p.as_str() == probe)
        .map_or(Area::All, |p| p.area())
}

/// `conntrack_table_fill` -> `ConntrackTableFill`: the NPD reason of a finding's rule.
pub fn reason(id: &str) -> String {
    id.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// What one plugin run covers.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    Area(Area),
    /// One finding id (checked against this binary's CHECKS).
    Finding(String),
}

impl Selection {
    fn covers(&self, id: &str) -> bool {
        match self {
            Selection::Area(Area::All) => id != "probe_failed",
            Selection::Area(a) => area_of(id) == Some(*a),
            Selection::Finding(f) => f == id,
        }
    }

    fn blinded_by(&self, probe: &str) -> bool {
        match self {
            Selection::Area(Area::All) => true,
            Selection::Area(a) => area_of_probe(probe) == *a || area_of_probe(probe) == Area::All,
            Selection::Finding(f) => area_of(f).is_none_or(|a| a == area_of_probe(probe)),
        }
    }
}

/// Refuses a `--finding` this binary does not know (a typo would read OK forever).
pub fn known_finding(id: &str) -> Result<String, String> {
    if CHECKS.iter().any(|c| c.id == id) {
        Ok(id.to_string())
    } else {
        Err(format!("unknown finding id {id:?} (see the README's findings table)"))
    }
}

/// The number a finding's summary leads with (`97.0%`, `9.00s`, `4`), if any: the measured
/// value, which summaries give first (`established=432000s` counts: the value after `=`).
pub fn key_number(summary: &str) -> Option<String> {
    let mut words = summary.split_whitespace();
    while let Some(w) = words.next() {
        let w = w.trim_start_matches(['(', '[']);
        let w = match w.split_once('=') {
            Some((_, v)) if v.starts_with(|c: char| c.is_ascii_digit()) => v,
            _ => w,
        };
        if !w.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let mut n = w.trim_end_matches([',', ';', ':', ')', ']', '.']).to_string();
        if n.len() > 12 {
            return None;
        }
        if let Some(unit) = words.next() {
            let unit = unit.trim_end_matches([',', ';', ':', ')', '.']);
            if matches!(unit, "s" | "ms" | "%") {
                n.push_str(unit);
            }
        }
        return Some(n);
    }
    None
}

/// Cuts `line` to at most `max` bytes, at a word boundary when there is one,
/// without a dangling separator.
pub fn cut(line: &str, max: usize) -> String {
    let line = line.trim();
    if line.len() <= max {
        return line.to_string();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    // The cut falls inside a word unless a separator is on either side of it.
    if !line[end..].starts_with([' ', ',', ';']) && !line[..end].ends_with([' ', ',', ';']) {
        if let Some(space) = line[..end].rfind(' ') {
            end = space;
        }
    }
    line[..end].trim_end_matches([' ', ',', ';', ':']).to_string()
}

/// The plugin's verdict: exit code and its one line, at most `max` bytes.
pub fn verdict(findings: &[Finding], selection: &Selection, threshold: Severity, max: usize) -> (u8, String) {
    let selected: Vec<&Finding> = findings.iter().filter(|f| selection.covers(&f.id)).collect();
    let problems: Vec<&Finding> = selected.iter().copied().filter(|f| f.severity >= threshold).collect();
    if !problems.is_empty() {
        return (EXIT_PROBLEM, list(&problems, max));
    }
    // Nothing at the threshold: unless part of the picture is missing.
    let blind: Vec<(&str, String)> = findings
        .iter()
        .filter(|f| f.id == "probe_failed")
        .flat_map(|f| f.evidence.iter())
        .filter(|(probe, _)| selection.blinded_by(probe))
        .map(|(probe, e)| (probe.as_str(), e.as_str().map_or_else(|| e.to_string(), str::to_string)))
        .collect();
    if let Some((probe, error)) = blind.first() {
        let more = if blind.len() > 1 {
            format!(" (+{} more)", blind.len() - 1)
        } else {
            String::new()
        };
        return (
            EXIT_UNKNOWN,
            cut(&format!("unknown: probe {probe} failed{more}: {error}"), max),
        );
    }
    let mut line = format!("ok: nothing at {} or above", threshold.as_str());
    if !selected.is_empty() && line.len() + 2 < max {
        let _ = write!(line, "; {}", list(&selected, max - line.len() - 2));
    }
    (EXIT_OK, cut(&line, max))
}

/// `critical: a 97.0%, b; warning: c 9.00s`, in the given order (most severe
/// first), whole items only, within `max` bytes; what does not fit is counted (`+2 more`).
fn list(findings: &[&Finding], max: usize) -> String {
    let mut out = String::new();
    let mut current: Option<Severity> = None;
    for (i, f) in findings.iter().enumerate() {
        let mut piece = String::new();
        if current != Some(f.severity) {
            if current.is_some() {
                piece.push_str("; ");
            }
            let _ = write!(piece, "{}: ", f.severity.as_str());
        } else {
            piece.push_str(", ");
        }
        piece.push_str(&f.id);
        if let Some(n) = key_number(&f.summary) {
            let _ = write!(piece, " {n}");
        }
        let left = findings.len() - i - 1;
        let reserve = if left > 0 { format!(" +{left} more").len() } else { 0 };
        if out.len() + piece.len() + reserve > max && !out.is_empty() {
            let _ = write!(out, " +{} more", findings.len() - i);
            return cut(&out, max);
        }
        out.push_str(&piece);
        current = Some(f.severity);
    }
    cut(&out, max)
}

/// Reads an agent's `/findings` body; anything else is an error that says what it got.
pub fn parse_findings(body: &str) -> Result<Vec<Finding>, String> {
    serde_json::from_str::<Vec<Finding>>(body).map_err(|e| format!("not a /findings answer ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: &str, severity: Severity, summary: &str) -> Finding {
        Finding {
            id: id.into(),
            severity,
            since: None,
            summary: summary.into(),
            evidence: Default::default(),
            remediation: vec![],
        }
    }

    #[test]
    fn every_check_has_an_area_and_a_camel_case_reason() {
        for c in CHECKS {
            let r = reason(c.id);
            assert!(r.chars().next().unwrap().is_ascii_uppercase() && r.chars().all(|c| c.is_ascii_alphanumeric()));
            if c.id != "probe_failed" {
                let a = area_of(c.id).unwrap();
                assert_ne!(a, Area::All, "{} has no area of its own", c.id);
            }
        }
        // A probe's failure blinds one area, not every condition.
        for p in crate::probe::PROBES {
            assert_ne!(p.area(), Area::All, "probe {} has no area of its own", p.as_str());
            assert_eq!(area_of_probe(p.as_str()), p.area());
        }
        assert_eq!(area_of_probe("no_such_probe"), Area::All);
        assert_eq!(area_of("no_such_check"), None);
        assert_eq!(reason("conntrack_table_fill"), "ConntrackTableFill");
        assert_eq!(reason("kube_proxy_restarted"), "KubeProxyRestarted");
    }

    #[test]
    fn problem_lists_the_most_severe_first_with_key_numbers() {
        let v = [
            f(
                "conntrack_table_fill",
                Severity::Critical,
                "conntrack table 97.0% full (254 of 262 entries)",
            ),
            f(
                "kube_proxy_mode_mismatch",
                Severity::Critical,
                "kube-proxy runs in ipvs mode, iptables declared",
            ),
            f(
                "kube_proxy_sync_slow",
                Severity::Warning,
                "kube-proxy sync p99 is 2.10 s over the last interval",
            ),
        ];
        let all = Selection::Area(Area::All);
        let (code, line) = verdict(&v, &all, Severity::Critical, 80);
        assert_eq!(code, EXIT_PROBLEM);
        assert_eq!(line, "critical: conntrack_table_fill 97.0%, kube_proxy_mode_mismatch");
        let (code, line) = verdict(&v, &all, Severity::Warning, 200);
        assert_eq!(code, EXIT_PROBLEM);
        assert_eq!(
            line,
            "critical: conntrack_table_fill 97.0%, kube_proxy_mode_mismatch; warning: kube_proxy_sync_slow 2.10s"
        );
        // NPD's 80 bytes: whole items only, the rest counted.
        let (_, line) = verdict(&v, &all, Severity::Warning, 80);
        assert_eq!(
            line,
            "critical: conntrack_table_fill 97.0%, kube_proxy_mode_mismatch +1 more"
        );
        let (_, line) = verdict(&v, &all, Severity::Warning, 40);
        assert_eq!(line, "critical: conntrack_table_fill 97.0% +2");
        for max in 10..120 {
            assert!(verdict(&v, &all, Severity::Warning, max).1.len() <= max, "{max}");
        }
        // By area: only the area's findings; a warning below the threshold is reported as ok, with its name.
        let (code, line) = verdict(&v, &Selection::Area(Area::KubeProxy), Severity::Critical, 80);
        assert_eq!(
            (code, line.as_str()),
            (EXIT_PROBLEM, "critical: kube_proxy_mode_mismatch")
        );
        let (code, line) = verdict(&v[2..], &Selection::Area(Area::KubeProxy), Severity::Critical, 80);
        assert_eq!(code, EXIT_OK);
        assert_eq!(
            line,
            "ok: nothing at critical or above; warning: kube_proxy_sync_slow 2.10s"
        );
        let (code, _) = verdict(&v, &Selection::Area(Area::Rules), Severity::Info, 80);
        assert_eq!(code, EXIT_OK);
        // One finding.
        let (code, line) = verdict(
            &v,
            &Selection::Finding("kube_proxy_sync_slow".into()),
            Severity::Warning,
            80,
        );
        assert_eq!(
            (code, line.as_str()),
            (EXIT_PROBLEM, "warning: kube_proxy_sync_slow 2.10s")
        );
    }

    #[test]
    fn a_failed_probe_of_the_area_is_unknown_unless_a_problem_is_seen() {
        let mut pf = f("probe_failed", Severity::Warning, "probe failed: conntrack");
        pf.evidence.insert(
            "conntrack".into(),
            "reading /proc/net/stat/nf_conntrack: timed out".into(),
        );
        let (code, line) = verdict(
            std::slice::from_ref(&pf),
            &Selection::Area(Area::Conntrack),
            Severity::Critical,
            80,
        );
        assert_eq!(code, EXIT_UNKNOWN);
        assert_eq!(
            line,
            "unknown: probe conntrack failed: reading /proc/net/stat/nf_conntrack: timed out"
        );
        // Another area still tells.
        let (code, _) = verdict(
            std::slice::from_ref(&pf),
            &Selection::Area(Area::KubeProxy),
            Severity::Critical,
            80,
        );
        assert_eq!(code, EXIT_OK);
        // probe_failed itself is never "a problem" of the whole data plane, even at --severity warning.
        let (code, _) = verdict(
            std::slice::from_ref(&pf),
            &Selection::Area(Area::All),
            Severity::Warning,
            80,
        );
        assert_eq!(code, EXIT_UNKNOWN);
        let both = [f("kube_proxy_down", Severity::Critical, "kube-proxy is down"), pf];
        let (code, _) = verdict(&both, &Selection::Area(Area::All), Severity::Critical, 80);
        assert_eq!(
            code, EXIT_PROBLEM,
            "a problem seen is a problem, whatever else is unseen"
        );
    }

    #[test]
    fn cut_on_a_word_boundary_within_the_limit() {
        let long = "critical: aaaa 1, bbbb 2, cccc 3";
        assert_eq!(cut(long, 80), long);
        assert_eq!(cut(long, 22), "critical: aaaa 1, bbbb");
        assert_eq!(cut(long, 24), "critical: aaaa 1, bbbb 2");
        assert_eq!(cut(long, 25), "critical: aaaa 1, bbbb 2");
        assert_eq!(
            cut("x".repeat(100).as_str(), 80).len(),
            80,
            "one long word is cut inside it"
        );
        // Never inside a UTF-8 character.
        let s = format!("{}é", "a".repeat(79));
        assert_eq!(cut(&s, 80), "a".repeat(79));
        for n in 0..60 {
            assert!(cut(long, n).len() <= n);
        }
    }

    #[test]
    fn key_numbers() {
        assert_eq!(
            key_number("conntrack table 97.0% full (1 of 2)").as_deref(),
            Some("97.0%")
        );
        assert_eq!(
            key_number("kube-proxy sync p99 is 9.00 s ...").as_deref(),
            Some("9.00s")
        );
        assert_eq!(key_number("net.ipv4.ip_forward is 0: the node").as_deref(), Some("0"));
        assert_eq!(key_number("no number here"), None);
        // A sysctl's value after its name: the measured number, not the default quoted after it.
        assert_eq!(
            key_number("conntrack TCP timeouts are established=432000s close_wait=3600s; kube-proxy's defaults are 86400s and 3600s").as_deref(),
            Some("432000s")
        );
        assert_eq!(key_number("mode eTP=Local, 3 services").as_deref(), Some("3"));
    }

    #[test]
    fn garbage_is_not_a_findings_list() {
        assert!(parse_findings("<html>").is_err());
        assert!(parse_findings("{}").is_err());
        assert!(parse_findings("[{\"id\": 3}]").is_err());
        assert_eq!(parse_findings("[]").unwrap(), vec![]);
    }
}
