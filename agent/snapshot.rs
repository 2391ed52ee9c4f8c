//! One node at one time: the probes' latest readings, what the history stage
//! derived from them, and each probe's outcome.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::history::Derived;
use crate::probe::{ProbeName, Reading};

// `Facts` (one slot per probe, in `/snapshot` as `facts`) and its `apply` and `clear`: from the
// probe table, `agent/probe_table.rs`.
probe_table!(facts);

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
    /// Panics caught in the pipeline (history, evaluation) since the agent started.
    pub pipeline_panics: u64,
    /// Verdicts made since the agent started: one per probe report, one per batch of events
    /// (not one per event); each rendered only when asked for.
    pub publications: u64,
}

impl Snapshot {
    pub fn new(node: &str) -> Self {
        Snapshot {
            node: node.to_string(),
            ..Default::default()
        }
    }
}
