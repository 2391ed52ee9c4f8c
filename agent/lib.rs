//! proxywatch: is this node's kube-proxy data plane healthy?
//!
//! One direction, four stages:
//!
//! ```text
//! probe/     reads the host (files under --host-root, commands on PATH) into typed facts
//! snapshot   all facts of one node at one time, plus each probe's outcome
//! evaluate/  pure functions: (snapshot, thresholds) -> findings
//! expose/    rendering only: Prometheus text, JSON, terminal report, HTTP routes
//! ```
//!
//! `scheduler` runs the probes in the background on their own intervals and
//! publishes each new snapshot with its findings, rendered once; HTTP handlers
//! only read the latest publication.

pub mod compare;
pub mod config;
pub mod evaluate;
pub mod exec;
pub mod expose;
pub mod fetch;
pub mod host;
pub mod parse;
pub mod probe;
pub mod promtext;
pub mod reaper;
pub mod scheduler;
pub mod snapshot;
pub mod timefmt;
pub mod trend;
pub mod window;
