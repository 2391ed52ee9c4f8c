//! The `/snapshot` document (also `proxywatch check --format json`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::evaluate::{overall, Finding, ModeDecision, Severity, Verdict};
use crate::history::Derived;
use crate::snapshot::{Facts, ProbeOutcome, Snapshot};
use crate::timefmt::rfc3339;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub node: String,
    /// RFC 3339, UTC.
    pub collected_at: String,
    /// ok | warning | critical: the worst active finding (info counts as ok).
    pub status: Severity,
    pub findings: Vec<Finding>,
    /// The kube-proxy mode the checks assumed, and why.
    pub proxy_mode: ModeDecision,
    /// Every probe's latest outcome, by probe name.
    pub probes: BTreeMap<String, ProbeOutcome>,
    /// What each probe read on its latest run.
    pub facts: Facts,
    /// What the history stage derived over time (counter windows, trends,
    /// restarts); left out while nothing is derived, as after a single run.
    #[serde(default, skip_serializing_if = "Derived::is_empty")]
    pub derived: Derived,
    pub agent: Agent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub version: String,
    /// The commit built, as `proxywatch_build_info{revision}` says (the version outside git).
    #[serde(default)]
    pub revision: String,
}

impl Document {
    pub fn new(s: &Snapshot, verdict: Verdict) -> Self {
        let Verdict {
            mode: proxy_mode,
            findings,
        } = verdict;
        Document {
            proxy_mode,
            node: s.node.clone(),
            collected_at: rfc3339(s.collected_at),
            status: overall(&findings),
            findings,
            probes: s
                .probes
                .iter()
                .map(|(p, o)| (p.as_str().to_string(), o.clone()))
                .collect(),
            facts: s.facts.clone(),
            derived: s.derived.clone(),
            agent: Agent {
                version: env!("CARGO_PKG_VERSION").to_string(),
                revision: crate::expose::metrics::REVISION.to_string(),
            },
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("document serializes");
        v.push(b'\n');
        v
    }

    /// [`Document::to_json`], written into a buffer sized from the last publication's.
    pub(crate) fn to_json_bytes(&self) -> bytes::Bytes {
        static SIZE: super::SizeHint = super::SizeHint::new();
        let mut v = SIZE.buffer(8192);
        serde_json::to_writer_pretty(&mut v, self).expect("document serializes");
        v.push(b'\n');
        SIZE.done(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timestamps are named as timestamps, and documents written with the old key names
    /// (docs/upgrading.md) still load with their values.
    #[test]
    fn timestamp_keys_are_named_so_and_old_names_still_load() {
        let o = ProbeOutcome {
            status: crate::snapshot::ProbeStatus::Ok,
            duration_seconds: 0.5,
            error: None,
            last_run_seconds: 1_800_000_000.0,
            last_success_seconds: Some(1_799_999_000.0),
            reading_seconds: None,
        };
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["last_run_timestamp_seconds"], 1_800_000_000.0);
        assert_eq!(v["last_success_timestamp_seconds"], 1_799_999_000.0);
        assert!(v.get("last_run_seconds").is_none(), "{v}");
        let old: ProbeOutcome = serde_json::from_value(serde_json::json!({
            "status": "ok", "duration_seconds": 0.5, "error": null,
            "last_run_seconds": 1_800_000_000.0, "last_success_seconds": 1_799_999_000.0,
        }))
        .unwrap();
        assert_eq!(old, o);
        let count: crate::probe::counted::NetlinkCount =
            serde_json::from_value(serde_json::json!({"generation": 7, "counted_at_seconds": 12.0,
                "reused": false, "attempts": 1, "bytes": 0, "count_seconds": 0.0}))
            .unwrap();
        assert_eq!(count.counted_at_seconds, 12.0);
        assert_eq!(serde_json::to_value(&count).unwrap()["counted_timestamp_seconds"], 12.0);
        let cc = serde_json::to_value(crate::probe::iptables::CrossCheck {
            at_seconds: 5.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cc["timestamp_seconds"], 5.0);
    }

    /// /snapshot and /metrics name the same build.
    #[test]
    fn agent_revision_is_build_info_revision() {
        let s = crate::evaluate::test_support::healthy();
        let verdict = crate::evaluate::evaluate(&s, &crate::config::default_thresholds());
        let doc = Document::new(&s, verdict);
        let metrics = crate::expose::metrics::render(&s, &[]);
        let line = metrics
            .lines()
            .find(|l| l.starts_with("proxywatch_build_info{"))
            .unwrap();
        assert!(!doc.agent.revision.is_empty());
        assert!(line.contains(&format!("revision=\"{}\"", doc.agent.revision)), "{line}");
    }
}
