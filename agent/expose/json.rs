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
            },
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("document serializes");
        v.push(b'\n');
        v
    }
}
