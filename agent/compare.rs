//! Baseline and compare: what changed on a node between two snapshots, and
//! whether it got better or worse (the runbook's "capture a baseline, change
//! one thing, verify").
//!
//! Pure functions over two `/snapshot` documents read as plain JSON, so a
//! baseline saved by one agent version compares with a snapshot of another:
//! unknown fields are ignored, facts one side lacks are reported as missing.
//!
//! The verdict: **worse** if a warning or critical finding appeared or got more
//! severe, the overall status got worse, or a Service try (`--try-services`)
//! got slower by at least 100 ms or stopped succeeding; **better** if the
//! reverse happened and nothing got worse; otherwise **same**. Info findings
//! are listed but do not decide the verdict (they count as ok in the overall
//! status too).
//!
//! `compare/extract.rs` reads the facts compared from a document (`extract`);
//! `compare/text.rs` writes a comparison for a terminal (`render_text`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

mod extract;
mod text;
use extract::{extract, Fact};
pub use text::render_text;
use text::show;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompareError {
    #[error("{name}: not JSON: {message}")]
    NotJson { name: String, message: String },
    #[error("{name}: not a proxywatch snapshot: {why}")]
    NotSnapshot { name: String, why: String },
}

/// What a text that is not JSON looks like, when it is another of the agent's pages.
fn looks_like(text: &str) -> Option<&'static str> {
    let head = text.trim_start();
    let lower: String = head.chars().take(16).collect::<String>().to_ascii_lowercase();
    if lower.starts_with("<!doctype") || lower.starts_with("<html") {
        return Some("this is an HTML page (the status page at /?)");
    }
    let first = head.lines().next().unwrap_or("");
    // `name 1` or `name{labels} 1`: a metric name, then a number.
    let metric_line = |l: &str| {
        let name_end = l
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(l.len());
        let rest = &l[name_end..];
        let value = match rest.strip_prefix('{') {
            Some(labels) => labels.rsplit_once('}').map(|(_, v)| v),
            None => Some(rest),
        };
        name_end > 0
            && value
                .and_then(|v| v.split_whitespace().next())
                .is_some_and(|v| v.parse::<f64>().is_ok())
    };
    if first.starts_with("# HELP ") || first.starts_with("# TYPE ") || metric_line(first) {
        return Some("this is Prometheus metrics text (/metrics?)");
    }
    None
}

/// Parses a `/snapshot` document (`baseline save`, `check --format json`).
/// Only the `facts` object is required; everything else is optional.
pub fn parse_document(name: &str, text: &str) -> Result<Value, CompareError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| CompareError::NotJson {
        name: name.to_string(),
        message: match looks_like(text) {
            Some(what) => format!("{what}; compare reads the JSON of /snapshot (`baseline save`, `check --format json`, or --url http://NODE:9877, which fetches /snapshot)"),
            None => e.to_string(),
        },
    })?;
    let not = |why: &str| CompareError::NotSnapshot {
        name: name.to_string(),
        why: why.to_string(),
    };
    let obj = doc.as_object().ok_or_else(|| {
        not(if doc.is_array() {
            "a JSON object was expected, not a list (/findings is a list: compare reads /snapshot)"
        } else {
            "a JSON object was expected"
        })
    })?;
    if !obj.get("facts").is_some_and(Value::is_object) {
        return Err(not("no `facts` object"));
    }
    Ok(doc)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Better,
    Same,
    Worse,
}

impl Verdict {
    /// For a change pipeline: 0 same or better, 1 worse (3, could not run, is main's).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Better | Verdict::Same => 0,
            Verdict::Worse => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Same => "same",
            Verdict::Worse => "worse",
        }
    }
}

/// Where a document came from and what it says about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// File name, URL or "probes now".
    pub source: String,
    pub node: Option<String>,
    pub collected_at: Option<String>,
    pub status: Option<String>,
    pub agent_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FactState {
    Same,
    Changed,
    /// The fact is not in the before document (probe absent or failed, or an older agent).
    MissingBefore,
    /// The fact is not in the after document.
    MissingAfter,
}

/// One fact on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactChange {
    pub name: String,
    /// null when missing on that side (see `state`) or when the fact itself is null (an absent sysctl).
    pub before: Value,
    pub after: Value,
    /// after - before, when both are numbers.
    pub change: Option<f64>,
    /// `%`, `s`, `/s` or empty.
    pub unit: &'static str,
    pub state: FactState,
}

/// A finding on one or both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingChange {
    pub id: String,
    /// Severity before / after; None when the finding was not active on that side.
    pub before: Option<String>,
    pub after: Option<String>,
    /// The newest summary (after's, or before's for a resolved finding).
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub verdict: Verdict,
    /// Why the verdict is what it is, one line each.
    pub reasons: Vec<String>,
    pub before: Side,
    pub after: Side,
    /// Every fact present on either side, in a fixed order.
    pub facts: Vec<FactChange>,
    pub appeared: Vec<FindingChange>,
    pub resolved: Vec<FindingChange>,
    pub severity_changed: Vec<FindingChange>,
    /// The proxy mode the node was judged by, when it changed between the two.
    pub mode_change: Option<ModeChange>,
}

/// A proxy-mode switch (or its rollback) between the two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeChange {
    pub before: String,
    pub after: String,
}

fn rank(severity: Option<&str>) -> u8 {
    match severity {
        Some("critical") => 3,
        Some("warning") => 2,
        Some("info") => 1,
        _ => 0,
    }
}

fn side(source: &str, doc: &Value) -> Side {
    let s = |v: &Value| v.as_str().map(str::to_string);
    Side {
        source: source.to_string(),
        node: s(&doc["node"]),
        collected_at: s(&doc["collected_at"]),
        status: s(&doc["status"]),
        agent_version: s(&doc["agent"]["version"]),
    }
}

/// id -> (severity, summary) of the active findings; entries without an id are skipped.
fn findings(doc: &Value) -> BTreeMap<String, (String, String)> {
    doc["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let id = f["id"].as_str()?.to_string();
            let sev = f["severity"].as_str().unwrap_or("unknown").to_string();
            Some((id, (sev, f["summary"].as_str().unwrap_or("").to_string())))
        })
        .collect()
}

fn round(x: f64, places: i32) -> f64 {
    let p = 10f64.powi(places);
    (x * p).round() / p
}

/// The agent's own wall time reading a rule set: it moves from run to run with
/// the machine's load (a first, cold read is often twice as slow), so only a swing
/// both large and relative counts.
fn is_wall_time(name: &str) -> bool {
    name.ends_with(" save duration") || name.ends_with(" list duration")
}

/// A wall time changed when it moved by at least this many seconds... Two reads of
/// the same 200-service rule set in a row took 31 ms and 13 ms on the 2-core test
/// machine (tests/offline/compare.rs, unchanged_rules_on_the_real_kernel_list_no_duration).
const WALL_TIME_MIN_CHANGE_SECONDS: f64 = 0.1;
/// ...and at least doubled or halved.
const WALL_TIME_MIN_CHANGE_RATIO: f64 = 2.0;

/// The name of a try's time: `service connect time default/kubernetes:443/tcp`
/// (the TCP connect time; DNS over UDP: the answer time).
const CONNECT_TIME: &str = "service connect time ";

/// A try's time changed when it moved by at least the runbook's limit of a
/// healthy `time_connect` (100 ms, the default of --service-traffic.slow):
/// each snapshot holds one try per target, a single sample with no spread to
/// judge its noise by, so the bound is the one a person acts on. A lost SYN
/// costs TCP's initial retransmission timeout (1 s, RFC 6298 2.1), ten times it.
const CONNECT_MIN_CHANGE_SECONDS: f64 = 0.1;

/// A fact whose change decides the verdict on its own: a try's time (slower is
/// worse) and its result (a try that stopped succeeding is worse). Returns
/// (worse, why) for a changed fact.
fn judged(c: &FactChange) -> Option<(bool, String)> {
    if c.state != FactState::Changed {
        return None;
    }
    if let Some(target) = c.name.strip_prefix(CONNECT_TIME) {
        let (b, a) = (c.before.as_f64()?, c.after.as_f64()?);
        let ms = |x: f64| format!("{:.1} ms", x * 1000.0);
        let how = if a > b { "slower" } else { "faster" };
        return Some((a > b, format!("{target} connects {how} ({} -> {})", ms(b), ms(a))));
    }
    if let Some(target) = c.name.strip_prefix("service try ") {
        let (b, a) = (c.before.as_str()?, c.after.as_str()?);
        return match (b == "ok", a == "ok") {
            (true, false) => Some((true, format!("{target} try failed ({b} -> {a})"))),
            (false, true) => Some((false, format!("{target} try succeeds ({b} -> {a})"))),
            _ => None,
        };
    }
    None
}

/// Whether a fact is unchanged for a person: equal as shown (a p99 of 0.1234 s
/// and 0.1236 s both read 0.124 s), and for the agent's wall times within the
/// noise of two runs.
fn same(name: &str, before: &Value, after: &Value, unit: &str) -> bool {
    if before == after {
        return true;
    }
    if let (Some(b), Some(a)) = (before.as_f64(), after.as_f64()) {
        if is_wall_time(name) {
            let d = (a - b).abs();
            return d < WALL_TIME_MIN_CHANGE_SECONDS || a.max(b) < WALL_TIME_MIN_CHANGE_RATIO * a.min(b);
        }
        if name.starts_with(CONNECT_TIME) {
            return (a - b).abs() < CONNECT_MIN_CHANGE_SECONDS;
        }
        return show(before, unit) == show(after, unit);
    }
    false
}

/// Compares two documents (already checked by `parse_document`).
pub fn compare(before_source: &str, before: &Value, after_source: &str, after: &Value) -> Comparison {
    let facts = fact_changes(&extract(before), &extract(after));
    let mode = |d: &Value| d["proxy_mode"]["mode"].as_str().map(str::to_string);
    let mode_change = match (mode(before), mode(after)) {
        (Some(b), Some(a)) if a != b => Some(ModeChange { before: b, after: a }),
        _ => None,
    };
    let mut reasons = Reasons::default();
    let changed = finding_changes(&findings(before), &findings(after), mode_change.as_ref(), &mut reasons);
    for (worse_now, why) in facts.iter().filter_map(judged) {
        if worse_now {
            reasons.worse.push(why);
        } else {
            reasons.better.push(why);
        }
    }
    reasons.status(before["status"].as_str(), after["status"].as_str());
    let (verdict, reasons) = reasons.verdict();
    Comparison {
        verdict,
        reasons,
        before: side(before_source, before),
        after: side(after_source, after),
        facts,
        appeared: changed.appeared,
        resolved: changed.resolved,
        severity_changed: changed.severity_changed,
        mode_change,
    }
}

/// Every fact on either side: in before's order, then those only after has.
fn fact_changes(b: &[Fact], a: &[Fact]) -> Vec<FactChange> {
    let after_by_name: BTreeMap<&str, &Fact> = a.iter().map(|f| (f.0.as_str(), f)).collect();
    let before_names: BTreeSet<&str> = b.iter().map(|f| f.0.as_str()).collect();
    let mut facts = Vec::new();
    for (name, bv, unit) in b {
        let change = match after_by_name.get(name.as_str()) {
            Some((_, av, _)) => {
                let delta = match (bv.as_f64(), av.as_f64()) {
                    (Some(x), Some(y)) => Some(round(y - x, 4)),
                    _ => None,
                };
                FactChange {
                    name: name.clone(),
                    before: bv.clone(),
                    after: av.clone(),
                    change: delta,
                    unit,
                    state: if same(name, bv, av, unit) {
                        FactState::Same
                    } else {
                        FactState::Changed
                    },
                }
            }
            None => FactChange {
                name: name.clone(),
                before: bv.clone(),
                after: Value::Null,
                change: None,
                unit,
                state: FactState::MissingAfter,
            },
        };
        facts.push(change);
    }
    for (name, av, unit) in a {
        if !before_names.contains(name.as_str()) {
            facts.push(FactChange {
                name: name.clone(),
                before: Value::Null,
                after: av.clone(),
                change: None,
                unit,
                state: FactState::MissingBefore,
            });
        }
    }
    facts
}

/// What makes the comparison worse or better, in the order found.
#[derive(Default)]
struct Reasons {
    worse: Vec<String>,
    better: Vec<String>,
}

impl Reasons {
    /// The overall status: worse or better by rank.
    fn status(&mut self, sb: Option<&str>, sa: Option<&str>) {
        if rank(sa) > rank(sb) {
            self.worse.push(format!(
                "status got worse ({} -> {})",
                sb.unwrap_or("missing"),
                sa.unwrap_or("missing")
            ));
        } else if rank(sa) < rank(sb) {
            self.better.push(format!(
                "status got better ({} -> {})",
                sb.unwrap_or("missing"),
                sa.unwrap_or("missing")
            ));
        }
    }

    /// Worse if anything got worse, better if anything got better, else same;
    /// with the reasons that decided it.
    fn verdict(self) -> (Verdict, Vec<String>) {
        if !self.worse.is_empty() {
            (Verdict::Worse, self.worse)
        } else if !self.better.is_empty() {
            (Verdict::Better, self.better)
        } else {
            (
                Verdict::Same,
                vec!["no finding appeared, resolved or changed severity".to_string()],
            )
        }
    }
}

/// The findings that appeared, resolved or changed severity between two sides.
struct FindingChanges {
    appeared: Vec<FindingChange>,
    resolved: Vec<FindingChange>,
    severity_changed: Vec<FindingChange>,
}

/// Compares the active findings before (`fb`) and after (`fa`); a warning or
/// critical one appearing, resolving or changing severity goes to `reasons`.
fn finding_changes(
    fb: &BTreeMap<String, (String, String)>,
    fa: &BTreeMap<String, (String, String)>,
    mode_change: Option<&ModeChange>,
    reasons: &mut Reasons,
) -> FindingChanges {
    let mut appeared = Vec::new();
    let mut resolved = Vec::new();
    let mut severity_changed = Vec::new();
    for (id, (sev, summary)) in fa {
        match fb.get(id) {
            None => {
                if rank(Some(sev)) >= 2 {
                    reasons.worse.push(match mode_change {
                        // What a switch or a rollback left behind is the point of comparing.
                        Some(m) if id == "proxy_mode_leftovers" => format!(
                            "{id} appeared ({sev}) after the mode change {} -> {}: state of the old mode is still there",
                            m.before, m.after
                        ),
                        _ => format!("{id} appeared ({sev})"),
                    });
                }
                appeared.push(FindingChange {
                    id: id.clone(),
                    before: None,
                    after: Some(sev.clone()),
                    summary: summary.clone(),
                });
            }
            Some((old, _)) if old != sev => {
                let (r0, r1) = (rank(Some(old)), rank(Some(sev)));
                if r1 > r0 && r1 >= 2 {
                    reasons.worse.push(format!("{id} got more severe ({old} -> {sev})"));
                } else if r1 < r0 && r0 >= 2 {
                    reasons.better.push(format!("{id} got less severe ({old} -> {sev})"));
                }
                severity_changed.push(FindingChange {
                    id: id.clone(),
                    before: Some(old.clone()),
                    after: Some(sev.clone()),
                    summary: summary.clone(),
                });
            }
            Some(_) => {}
        }
    }
    for (id, (sev, summary)) in fb {
        if !fa.contains_key(id) {
            if rank(Some(sev)) >= 2 {
                reasons.better.push(format!("{id} resolved (was {sev})"));
            }
            resolved.push(FindingChange {
                id: id.clone(),
                before: Some(sev.clone()),
                after: None,
                summary: summary.clone(),
            });
        }
    }
    FindingChanges {
        appeared,
        resolved,
        severity_changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn doc(status: &str, entries: u64, findings: Value) -> Value {
        json!({
            "node": "n1",
            "collected_at": "2026-01-01T00:00:00.000Z",
            "status": status,
            "findings": findings,
            "proxy_mode": {"mode": "iptables", "source": "flag"},
            "probes": {"conntrack": {"status": "ok"}},
            "facts": {
                "conntrack": {"entries": entries, "max": 1000, "stats": {"drop": 5}},
                "sysctls": {"values": {"net.ipv4.ip_forward": 1, "net.ipv4.vs.conntrack": null}},
                "modules": {"modules": {"ip_vs": "missing"}},
                "iptables": {"backend_in_use": "nft", "saves": [
                    {"backend": "nft", "family": "ipv4", "duration_seconds": 0.25,
                     "counts": {"tables": {"nat": {"rules": 100, "chains": 10}}, "kube_rules": 80, "kube": {"svc": 7}}}
                ]}
            },
            "agent": {"version": "0.1.0"}
        })
    }

    pub(super) fn finding(id: &str, severity: &str) -> Value {
        json!({"id": id, "severity": severity, "summary": format!("{id} summary"), "evidence": {}, "remediation": []})
    }

    fn fact<'a>(c: &'a Comparison, name: &str) -> &'a FactChange {
        c.facts
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no fact {name}: {:#?}", c.facts))
    }

    #[test]
    fn not_a_snapshot_is_a_clear_error() {
        assert_eq!(
            parse_document("x.json", r#"{"findings": []}"#).unwrap_err().to_string(),
            "x.json: not a proxywatch snapshot: no `facts` object"
        );
        assert!(parse_document("x.json", "[1]")
            .unwrap_err()
            .to_string()
            .contains("not a proxywatch snapshot"));
        assert!(parse_document("x.json", "hello")
            .unwrap_err()
            .to_string()
            .starts_with("x.json: not JSON"));
        // The agent's other pages: said what they are, and where the snapshot is.
        let metrics = "# HELP proxywatch_build_info x\n# TYPE proxywatch_build_info gauge\nproxywatch_build_info 1\n";
        let e = parse_document("http://n:9877/metrics", metrics)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("http://n:9877/metrics: not JSON: this is Prometheus metrics text"),
            "{e}"
        );
        assert!(e.contains("/snapshot"), "{e}");
        let e = parse_document("u", "proxywatch_node_ready 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Prometheus metrics text"), "{e}");
        let e = parse_document("u", "<!DOCTYPE html>\n<html>").unwrap_err().to_string();
        assert!(e.contains("HTML page") && e.contains("/snapshot"), "{e}");
        let e = parse_document("u", "[]").unwrap_err().to_string();
        assert!(e.contains("/findings is a list"), "{e}");
        // Other text: the JSON parser's own message.
        let e = parse_document("u", "before the change: all good")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("u: not JSON: expected value"), "{e}");
        assert!(parse_document("x.json", r#"{"facts": {}}"#).is_ok());
    }

    #[test]
    fn a_finding_appearing_is_worse() {
        let before = doc("ok", 200, json!([]));
        let after = doc("critical", 970, json!([finding("conntrack_table_fill", "critical")]));
        let c = compare("a", &before, "b", &after);
        assert_eq!(c.verdict, Verdict::Worse);
        assert_eq!(c.verdict.exit_code(), 1);
        let fill = fact(&c, "conntrack fill");
        assert_eq!((fill.before.as_f64(), fill.after.as_f64()), (Some(20.0), Some(97.0)));
        assert_eq!(fill.change, Some(77.0));
        assert_eq!(fill.state, FactState::Changed);
        assert_eq!(fact(&c, "iptables nft ipv4 nat rules").state, FactState::Same);
        assert_eq!(c.appeared[0].id, "conntrack_table_fill");
        assert!(c
            .reasons
            .iter()
            .any(|r| r == "conntrack_table_fill appeared (critical)"));
        assert!(c.reasons.iter().any(|r| r == "status got worse (ok -> critical)"));
        // And back: better, exit 0.
        let c = compare("b", &after, "a", &before);
        assert_eq!(c.verdict, Verdict::Better);
        assert_eq!(c.verdict.exit_code(), 0);
        assert_eq!(c.resolved[0].id, "conntrack_table_fill");
    }

    #[test]
    fn since_is_ignored() {
        // The same finding, active since different times (two agents, or one restarted).
        let mut a = finding("conntrack_table_fill", "critical");
        a["since"] = json!("2026-01-01T00:00:00.000Z");
        let mut b = a.clone();
        b["since"] = json!("2026-01-01T05:00:00.000Z");
        let c = compare(
            "a",
            &doc("critical", 970, json!([a])),
            "b",
            &doc("critical", 970, json!([b])),
        );
        assert_eq!(c.verdict, Verdict::Same);
        assert!(c.appeared.is_empty() && c.resolved.is_empty() && c.severity_changed.is_empty());
        assert!(render_text(&c).contains("findings: no change."));
    }

    #[test]
    fn severity_changes_and_info_findings() {
        let before = doc("warning", 850, json!([finding("conntrack_table_fill", "warning")]));
        let after = doc(
            "critical",
            960,
            json!([
                finding("conntrack_table_fill", "critical"),
                finding("conntrack_drops", "info")
            ]),
        );
        let c = compare("a", &before, "b", &after);
        assert_eq!(c.verdict, Verdict::Worse);
        assert_eq!(c.severity_changed[0].before.as_deref(), Some("warning"));
        assert!(c
            .reasons
            .iter()
            .any(|r| r.contains("got more severe (warning -> critical)")));
        // An info finding appearing alone does not make it worse.
        let before = doc("ok", 100, json!([]));
        let after = doc("ok", 100, json!([finding("conntrack_drops", "info")]));
        let c = compare("a", &before, "b", &after);
        assert_eq!(c.verdict, Verdict::Same);
        assert_eq!(c.appeared.len(), 1);
        // Same document: same, every fact unchanged.
        let c = compare("a", &before, "a", &before);
        assert_eq!(c.verdict, Verdict::Same);
        assert!(c.facts.iter().all(|f| f.state == FactState::Same));
    }

    #[test]
    fn works_across_versions_unknown_and_missing_fields() {
        let before = doc("ok", 200, json!([]));
        let mut after = doc("ok", 300, json!([]));
        after["from_the_future"] = json!({"x": [1, 2]});
        after["facts"]["conntrack"]["new_field"] = json!(42);
        after["facts"]["quantum"] = json!({"qubits": 3});
        after["facts"].as_object_mut().unwrap().remove("sysctls");
        after.as_object_mut().unwrap().remove("agent");
        after["facts"]["conntrack"]["entries"] = json!("not a number");
        let c = compare("a", &before, "b", &after);
        assert_eq!(c.verdict, Verdict::Same);
        assert_eq!(fact(&c, "sysctl net.ipv4.ip_forward").state, FactState::MissingAfter);
        assert_eq!(fact(&c, "conntrack fill").state, FactState::MissingAfter);
        assert_eq!(fact(&c, "conntrack max").state, FactState::Same);
        assert_eq!(c.after.agent_version, None);
        let text = render_text(&c);
        assert!(
            text.lines()
                .any(|l| l.starts_with("sysctl net.ipv4.ip_forward ") && l.ends_with(" 1       missing")),
            "{text}"
        );
        assert!(text.contains("sysctl net.ipv4.vs.conntrack: none -> missing"), "{text}");
    }

    #[test]
    fn derived_values_read_from_either_layout() {
        // Since 0.2 the trend and restarts sit under `derived`; 0.1 kept them in the facts.
        let mut old = doc("ok", 200, json!([]));
        old["facts"]["conntrack"]["trend"] = json!({"slope_per_second": 2.0, "seconds_to_full": 400.0});
        old["facts"]["kube_proxy"] = json!({"restarts": 1, "sync": {"count_window": 3.0, "p99_window": 0.5}});
        let mut new = doc("ok", 200, json!([]));
        new["derived"] = json!({
            "conntrack": {"trend": {"slope_per_second": 5.0, "seconds_to_full": 160.0}},
            "kube_proxy": {"restarts": 2, "sync": {"p99": 1.5, "count": 4.0, "seconds": 15.0}}
        });
        new["facts"]["kube_proxy"] = json!({"sync": {"p99_since_start": 0.1}});
        let c = compare("old", &old, "new", &new);
        for (name, before, after) in [
            ("conntrack growth", 2.0, 5.0),
            ("conntrack time to full", 400.0, 160.0),
            ("kube-proxy restarts", 1.0, 2.0),
            ("kube-proxy sync p99", 0.5, 1.5),
        ] {
            let f = fact(&c, name);
            assert_eq!(
                (f.before.as_f64(), f.after.as_f64()),
                (Some(before), Some(after)),
                "{name}"
            );
        }
    }

    #[test]
    fn a_mode_change_is_shown_and_its_leftovers_are_worse() {
        let before = doc("ok", 200, json!([]));
        let mut after = doc("warning", 200, json!([finding("proxy_mode_leftovers", "warning")]));
        after["proxy_mode"] = json!({"mode": "ipvs", "source": "kube-proxy"});
        let c = compare("before", &before, "after", &after);
        assert_eq!(
            c.mode_change,
            Some(ModeChange {
                before: "iptables".into(),
                after: "ipvs".into()
            })
        );
        assert_eq!(c.verdict, Verdict::Worse);
        assert!(
            c.reasons[0].contains("after the mode change iptables -> ipvs"),
            "{:?}",
            c.reasons
        );
        assert!(render_text(&c).contains("  proxy mode changed: iptables -> ipvs\n"));
        // The same mode on both sides: no mode line.
        assert_eq!(compare("a", &before, "b", &before).mode_change, None);
    }

    #[test]
    fn noise_is_not_a_change() {
        let before = doc("ok", 200, json!([]));
        let mut after = before.clone();
        // Another run of the same save: a few ms slower. Not a change, not listed.
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.262);
        after["facts"]["kube_proxy"] = json!({"sync": {"p99_since_start": 0.12341}});
        let mut before = before;
        before["facts"]["kube_proxy"] = json!({"sync": {"p99_since_start": 0.12338}});
        let c = compare("a", &before, "b", &after);
        let dur = fact(&c, "iptables nft ipv4 save duration");
        assert_eq!(dur.state, FactState::Same, "{dur:?}");
        assert_eq!(fact(&c, "kube-proxy sync p99").state, FactState::Same);
        assert!(c.facts.iter().all(|f| f.state == FactState::Same), "{:#?}", c.facts);
        let text = render_text(&c);
        assert!(!text.contains("save duration"), "{text}");
        assert!(!text.contains("sync p99"), "{text}");
        assert!(text.contains(" facts unchanged"), "{text}");
        // A save that got ten times slower is a change; so is a p99 that moved as shown.
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(2.5);
        after["facts"]["kube_proxy"]["sync"]["p99_since_start"] = json!(0.5);
        let c = compare("a", &before, "b", &after);
        assert_eq!(fact(&c, "iptables nft ipv4 save duration").state, FactState::Changed);
        assert_eq!(fact(&c, "kube-proxy sync p99").state, FactState::Changed);
        let text = render_text(&c);
        assert!(text.contains("+2.25 s"), "{text}");
        // A cold first read: 13 ms then 31 ms is more than twice, but 18 ms, below the floor.
        before["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.013);
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.031);
        let c = compare("a", &before, "b", &after);
        assert_eq!(fact(&c, "iptables nft ipv4 save duration").state, FactState::Same);
        // 0.3 s to 0.5 s: 200 ms, but less than double.
        before["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.3);
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.5);
        let c = compare("a", &before, "b", &after);
        assert_eq!(fact(&c, "iptables nft ipv4 save duration").state, FactState::Same);
        // A tiny save: 2 ms to 6 ms is three times but 4 ms, below the floor.
        after["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.006);
        before["facts"]["iptables"]["saves"][0]["duration_seconds"] = json!(0.002);
        let c = compare("a", &before, "b", &after);
        assert_eq!(fact(&c, "iptables nft ipv4 save duration").state, FactState::Same);
    }

    #[test]
    fn a_slower_or_failing_service_try_is_worse() {
        let tried = |api: Value, dns: &str| {
            let mut d = doc("ok", 200, json!([]));
            d["facts"]["service_traffic"] = json!({"tries": [
                {"target": "default/kubernetes:443/tcp", "result": "ok", "seconds": api},
                {"target": "kube-system/kube-dns:53/udp", "result": dns, "seconds": 0.0004},
            ]});
            d
        };
        // A lost SYN: one retransmission timeout (1 s) on the connect.
        let (fast, slow) = (tried(json!(0.0003), "ok"), tried(json!(1.0021), "ok"));
        let c = compare("a", &fast, "b", &slow);
        assert_eq!(c.verdict, Verdict::Worse);
        assert_eq!(
            c.reasons,
            ["default/kubernetes:443/tcp connects slower (0.3 ms -> 1002.1 ms)"]
        );
        let t = fact(&c, "service connect time default/kubernetes:443/tcp");
        assert_eq!((t.state, t.unit), (FactState::Changed, "s"));
        assert_eq!(
            fact(&c, "service try default/kubernetes:443/tcp").state,
            FactState::Same
        );
        // And back: better.
        let c = compare("b", &slow, "a", &fast);
        assert_eq!(c.verdict, Verdict::Better);
        assert!(c.reasons[0].contains("connects faster"), "{:?}", c.reasons);
        // Under 100 ms of change, even ten times slower: one sample each, not a change.
        let c = compare("a", &fast, "b", &tried(json!(0.003), "ok"));
        assert_eq!(c.verdict, Verdict::Same, "{:?}", c.reasons);
        let c = compare("a", &tried(json!(0.2), "ok"), "b", &tried(json!(0.299), "ok"));
        assert_eq!(c.verdict, Verdict::Same, "{:?}", c.reasons);
        let c = compare("a", &tried(json!(0.2), "ok"), "b", &tried(json!(0.301), "ok"));
        assert_eq!(c.verdict, Verdict::Worse, "{:?}", c.reasons);
        // A try that stopped succeeding: worse (its time is no longer there).
        let c = compare("a", &fast, "b", &tried(json!(0.0003), "refused"));
        assert_eq!(c.verdict, Verdict::Worse);
        assert_eq!(c.reasons, ["kube-system/kube-dns:53/udp try failed (ok -> refused)"]);
        assert_eq!(
            fact(&c, "service connect time kube-system/kube-dns:53/udp").state,
            FactState::MissingAfter
        );
        // Without --try-services on one side: missing, not worse.
        let c = compare("a", &doc("ok", 200, json!([])), "b", &slow);
        assert_eq!(c.verdict, Verdict::Same, "{:?}", c.reasons);
    }
}
