//! One node at one time: the probes' latest readings, what the history stage
//! derived from them, and each probe's outcome.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::history::Derived;
use crate::probe::conntrack::ConntrackFacts;
use crate::probe::conntrack_stale::ConntrackStaleFacts;
use crate::probe::iptables::IptablesFacts;
use crate::probe::ipvs::IpvsFacts;
use crate::probe::kube_proxy::KubeProxyFacts;
use crate::probe::modules::ModuleFacts;
use crate::probe::neighbour_tables::NeighbourFacts;
use crate::probe::nftables::NftablesFacts;
use crate::probe::node::NodeFacts;
use crate::probe::node_ports::NodePortFacts;
use crate::probe::sysctl::SysctlFacts;
use crate::probe::{ProbeName, Reading};

/// Everything the probes found. A probe that found its source absent leaves
/// its slot empty; one that failed keeps its last good reading for a while,
/// with that reading's time in its outcome (`reading_seconds`), never a
/// partial one: an old number is shown as old, never as current.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    #[serde(default)]
    pub node: Option<NodeFacts>,
    #[serde(default)]
    pub modules: Option<ModuleFacts>,
    #[serde(default)]
    pub conntrack: Option<ConntrackFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack_stale: Option<ConntrackStaleFacts>,
    #[serde(default)]
    pub sysctls: Option<SysctlFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ports: Option<NodePortFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_tables: Option<NeighbourFacts>,
    #[serde(default)]
    pub iptables: Option<IptablesFacts>,
    #[serde(default)]
    pub nftables: Option<NftablesFacts>,
    #[serde(default)]
    pub ipvs: Option<IpvsFacts>,
    #[serde(default)]
    pub kube_proxy: Option<KubeProxyFacts>,
}

impl Facts {
    pub fn apply(&mut self, reading: Reading) {
        match reading {
            Reading::Node(f) => self.node = Some(f),
            Reading::Modules(f) => self.modules = Some(f),
            Reading::Conntrack(f) => self.conntrack = Some(f),
            Reading::ConntrackStale(f) => self.conntrack_stale = Some(f),
            Reading::Sysctls(f) => self.sysctls = Some(f),
            Reading::NodePorts(f) => self.node_ports = Some(f),
            Reading::NeighbourTables(f) => self.neighbour_tables = Some(f),
            Reading::Iptables(f) => self.iptables = Some(f),
            Reading::Nftables(f) => self.nftables = Some(f),
            Reading::Ipvs(f) => self.ipvs = Some(f),
            Reading::KubeProxy(f) => self.kube_proxy = Some(*f),
        }
    }

    /// Empties a probe's slot (it failed or its source is absent).
    pub fn clear(&mut self, probe: ProbeName) {
        match probe {
            ProbeName::Node => self.node = None,
            ProbeName::Modules => self.modules = None,
            ProbeName::Conntrack => self.conntrack = None,
            ProbeName::ConntrackStale => self.conntrack_stale = None,
            ProbeName::Sysctls => self.sysctls = None,
            ProbeName::NodePorts => self.node_ports = None,
            ProbeName::NeighbourTables => self.neighbour_tables = None,
            ProbeName::Iptables => self.iptables = None,
            ProbeName::Nftables => self.nftables = None,
            ProbeName::Ipvs => self.ipvs = None,
            ProbeName::KubeProxy => self.kube_proxy = None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeStatus {
    Ok,
    Absent,
    Failed,
}

/// How a probe's latest run went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub status: ProbeStatus,
    /// Wall time of the latest run, in seconds.
    pub duration_seconds: f64,
    /// Why it failed (status failed) or what is absent (status absent).
    #[serde(default)]
    pub error: Option<String>,
    /// Unix time the latest run ended, in seconds. (Keys end in `_timestamp_seconds` when they
    /// hold a time, not a duration; the old names are read too: docs/upgrading.md.)
    #[serde(rename = "last_run_timestamp_seconds", alias = "last_run_seconds")]
    pub last_run_seconds: f64,
    /// Unix time of the latest run that did not fail, in seconds.
    #[serde(default, rename = "last_success_timestamp_seconds", alias = "last_success_seconds")]
    pub last_success_seconds: Option<f64>,
    /// Unix time of the reading the facts show, in seconds: the latest run's,
    /// or, while runs fail, the last good one's (held for at most
    /// [`crate::scheduler::HOLD_SECONDS`]); none when no facts are shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "reading_timestamp_seconds", alias = "reading_seconds")]
    pub reading_seconds: Option<f64>,
}

/// One node at one time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub node: String,
    /// Unix time of the latest update, in seconds.
    pub collected_at: f64,
    /// The same moment on the agent's monotonic clock (seconds since it started): what every
    /// window over time is measured on, so that a wall clock step (NTP) does not stretch or
    /// shrink one. Never shown.
    pub collected_mono: f64,
    /// What each probe read on its latest run.
    pub facts: Facts,
    /// What the history stage derived from the readings so far.
    pub derived: Derived,
    /// Outcome of every probe that has run at least once.
    pub probes: BTreeMap<ProbeName, ProbeOutcome>,
    /// Panics caught in the pipeline (history, evaluation, rendering) since the agent started.
    pub pipeline_panics: u64,
}

impl Snapshot {
    pub fn new(node: &str) -> Self {
        Snapshot {
            node: node.to_string(),
            ..Default::default()
        }
    }
}
