//! proxywatch: is this node's kube-proxy data plane healthy?
//!
//! One direction, five stages, driven by `scheduler`:
//!
//! ```text
//!  host: files under --host-root · commands on PATH · kube-proxy's local HTTP
//!        and the kernel over netlink (one source, `Host::kernel()`: live, a recording, or none)
//!    │
//!    ▼ probe/     one contract for every source (probe/mod.rs):
//!    │            probe(&ProbeContext, Deadline) -> Result<Probed<Facts>, ProbeError>
//!    │            (the context's `Memory` spares work by ruleset generation, nothing more)
//!  Reading        what one probe saw at one moment; Probed::Absent when the source is not there
//!    │
//!    ▼ history/   the only stage that derives from the past: counter windows, the conntrack trend and
//!    │            time to full, kube-proxy's latency window, restarts, sync age
//!  Snapshot       latest readings (`facts`) + `derived` + each probe's outcome
//!    │
//!    ▼ evaluate/  pure: (snapshot, thresholds) -> Verdict { mode with its source, findings }
//!  Verdict
//!    │
//!    │            (history::findings then stamps each finding's `since` and yields
//!    │            its transitions, which `serve` logs)
//!    ▼ expose/    rendering only, once per snapshot: /metrics, /snapshot, /findings, the
//!                 status page, the terminal report; HTTP handlers copy the bytes
//! ```
//!
//! One fact end to end, conntrack drops: `probe::conntrack::probe` reads
//! `/proc/net/stat/nf_conntrack` on the blocking pool and parses it into
//! `ConntrackFacts.stats["drop"]` (a counter since boot); the scheduler hands the
//! reading to `history::History::observe`, whose `CounterWindow` turns successive
//! readings into `derived.conntrack.window` (the increase over `--conntrack.window`);
//! `evaluate::conntrack::drops` grades that increase into the `conntrack_drops`
//! finding; `expose::metrics` renders `proxywatch_conntrack_stat_drop_total` and
//! `proxywatch_finding_severity{id="conntrack_drops"}`, served as bytes on `/metrics`.
//!
//! Each probe is registered once, in its row of the probe table (`probe_table.rs`), which
//! every stage reads where it lives: the probe's name, reader, facts slot, flags and metrics
//! sections. Each probe's deadline is its `--<probe>.timeout` flag (or the shared
//! `--probe.timeout`): commands get what is left of it, file reads run behind a hang guard,
//! requests end at it. A probe that fails, hangs or panics fails alone; a panic in history,
//! evaluation or rendering is caught too (`scheduler::step`), counted, and `/healthz` fails
//! once no report has gone through for a while (`liveness`), so the kubelet restarts an agent
//! whose publication would otherwise stay frozen. `config` holds every flag and its default
//! (the only place defaults are written; each probe's interval and timeout are its table
//! row's); `exec` is the one command runner, `fetch` the one HTTP client.

// Denied everywhere; allowed only for `trim`'s malloc_trim(3) and mallopt(3), which std does not
// wrap, and `watch::socket_filter`'s setsockopt.
#![deny(unsafe_code)]

// The probe table, first: every stage below reads it (`probe_table!`).
#[macro_use]
mod probe_table;

pub mod area;
pub mod compare;
pub mod config;
pub mod deadline;
pub mod duration;
pub mod evaluate;
pub mod exec;
pub mod expose;
pub mod fetch;
pub mod history;
pub mod host;
pub mod liveness;
pub mod netlink;
pub mod parse;
pub mod persist;
pub mod probe;
pub mod promtext;
pub mod reaper;
pub mod scheduler;
pub mod serve;
pub mod snapshot;
pub mod timefmt;
pub mod trim;
pub mod watch;

#[cfg(test)]
pub(crate) mod test_rng;
