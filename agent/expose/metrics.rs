//! Prometheus text rendering, once per snapshot.
//!
//! Kernel counters are exported as counters with the kernel's value (a fresh
//! registry per render, so `inc_by` sets it). Cardinality is bounded: one
//! series per watched module, sysctl, probe and check id.
//!
//! One function per section, called by `render` (each probe's sections are named in its row of
//! the probe table, `agent/probe_table.rs`); the larger families live beside this file:
//! `metrics/rules.rs` (iptables, nftables, IPVS, netlink counts) and `metrics/kube_proxy.rs`
//! (kube-proxy itself).

use std::collections::BTreeMap;

use prometheus::core::{AtomicF64, AtomicU64};
use prometheus::core::{Collector, GenericCounterVec, GenericGaugeVec};
use prometheus::{Encoder, Opts, Registry, TextEncoder};

use crate::evaluate::{recommended_conntrack_max, Finding, Severity, CHECKS};
use crate::snapshot::{ProbeStatus, Snapshot};

mod kube_proxy;
mod nftables_watch;
mod rules;
mod service_rejects;
mod service_traffic;
use kube_proxy::kube_proxy;
use rules::{iptables, ipvs, netlink_counts, nftables};
use service_traffic::service_traffic;

type Gauges = GenericGaugeVec<AtomicF64>;
type Counters = GenericCounterVec<AtomicU64>;

/// Build revision: build.rs sets it from `PROXYWATCH_REVISION` or `git rev-parse HEAD`, and to
/// the version when neither is there (a source tarball, a Docker build without the argument).
pub const REVISION: &str = match option_env!("PROXYWATCH_REVISION") {
    Some(r) => r,
    None => env!("CARGO_PKG_VERSION"),
};

/// Every backend `iptables_backend_in_use` can name (probe::iptables::detect_backend).
pub const IPTABLES_BACKENDS: &[&str] = &["nft", "legacy", "default", "none"];

/// Every mode kube-proxy's /proxyMode answers with today (ProxyMode's known variants).
pub const KUBE_PROXY_MODES: &[&str] = &["iptables", "ipvs", "nftables", "kernelspace"];

/// A state set: one series per possible value, 1 for `active` and 0 for the others, so that a
/// change flips values instead of swapping series (and `== 1` / `== 0` both select). An
/// `active` value outside `values` gets its own series too: unknown is shown, not dropped.
fn state_set(g: &Gauges, values: &[&str], active: &str) {
    for v in values {
        g.with_label_values(&[v]).set(if *v == active { 1.0 } else { 0.0 });
    }
    if !values.contains(&active) {
        g.with_label_values(&[active]).set(1.0);
    }
}

mod snat;

struct Out {
    registry: Registry,
    /// Families a section wrote as text itself, by name: `encode` puts each where the registry's
    /// families sorted by name leave its place.
    written: std::cell::RefCell<Vec<(&'static str, Vec<u8>)>>,
}

impl Out {
    fn new() -> Self {
        Out {
            registry: Registry::new(),
            written: Default::default(),
        }
    }

    /// A family written as text (what the encoder would write for it), for the sections whose
    /// series are many and change every run: building, gathering and encoding a registry's
    /// metrics costs several times writing their lines.
    fn written(&self, name: &'static str, text: Vec<u8>) {
        if !text.is_empty() {
            self.written.borrow_mut().push((name, text));
        }
    }

    fn register<C: Collector + Clone + 'static>(&self, c: C) -> C {
        // Names are fixed or validated by the parsers; a clash would be a bug caught by tests.
        if let Err(e) = self.registry.register(Box::new(c.clone())) {
            tracing::error!("metric registration failed: {e}");
        }
        c
    }

    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> Gauges {
        self.register(Gauges::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    /// A counter without labels whose value is not whole (seconds).
    fn seconds_counter(&self, name: &str, help: &str) -> prometheus::Counter {
        self.register(prometheus::CounterVec::new(Opts::new(name, help), &[]).expect("valid metric"))
            .with_label_values(&[] as &[&str])
    }

    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> Counters {
        self.register(Counters::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    /// The registry in the Prometheus text format, written at the end of `buf`, and the families
    /// written as text in their places: the families sorted by name, as the encoder sorts them.
    fn encode(&self, mut buf: Vec<u8>) -> Vec<u8> {
        let start = buf.len();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!("metrics encoding failed: {e}");
        }
        let mut written = self.written.take();
        written.sort_by_key(|(name, _)| *name);
        for (name, text) in written {
            let at = start + family_after(&buf[start..], name);
            buf.extend_from_slice(&text);
            // Moved into place without another buffer.
            buf[at..].rotate_right(text.len());
        }
        buf
    }
}

/// Where the first family named after `name` starts in `text` (the encoder's output: each
/// family opens with its `# HELP` or `# TYPE` line), or its end.
fn family_after(text: &[u8], name: &str) -> usize {
    let mut at = 0;
    for line in text.split_inclusive(|b| *b == b'\n') {
        let family = line
            .strip_prefix(b"# HELP ")
            .or_else(|| line.strip_prefix(b"# TYPE "))
            .map(|rest| rest.split(|b| *b == b' ' || *b == b'\n').next().unwrap_or_default());
        if family.is_some_and(|f| f > name.as_bytes()) {
            return at;
        }
        at += line.len();
    }
    at
}

// `probe_sections`: the sections of each probe's facts, named in its row of the probe table
// (`agent/probe_table.rs`).
probe_table!(metrics);

/// Renders a snapshot and its findings: one function per section, each registering its
/// series in the shared registry; the encoder writes the families sorted by name. Each probe's
/// sections come from the probe table; the rest are the agent's own (probes, rule-set counts,
/// the history's per-Service rejects, the nf_tables watcher, the process, the findings).
pub fn render(s: &Snapshot, findings: &[Finding]) -> String {
    // The encoder writes UTF-8 (names, help and label values are strings).
    String::from_utf8(render_into(s, findings, Vec::with_capacity(8192))).unwrap_or_default()
}

/// [`render`], written into `buf` (a publication sizes it from the last rendering).
pub(crate) fn render_into(s: &Snapshot, findings: &[Finding], buf: Vec<u8>) -> Vec<u8> {
    let out = Out::new();
    build_info(&out);
    probes(&out, s);
    probe_sections(&out, s);
    netlink_counts(&out, s);
    service_rejects::render(&out, s);
    nftables_watch::render(&out, s);
    own_process(&out);
    self::findings(&out, findings);
    out.encode(buf)
}

/// The agent's version and build revision.
fn build_info(out: &Out) {
    out.gauge(
        "proxywatch_build_info",
        "proxywatch version and revision (the git commit it was built from; the version when built outside git); always 1.",
        &["version", "revision"],
    )
    .with_label_values(&[env!("CARGO_PKG_VERSION"), REVISION])
    .set(1.0);
}

/// Probes: each one's latest run.
fn probes(out: &Out, s: &Snapshot) {
    let success = out.gauge(
        "proxywatch_probe_success",
        "1 when the probe's latest run succeeded or found its source absent, 0 when it failed.",
        &["probe"],
    );
    let duration = out.gauge(
        "proxywatch_probe_duration_seconds",
        "Wall time of the probe's latest run.",
        &["probe"],
    );
    out.counter(
        "proxywatch_pipeline_panics_total",
        "Panics caught while folding a probe report into history and evaluation (each one logged; /healthz fails when no report goes through for longer than its bound); a rendering that panics answers its request 500 and is logged, not counted here.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .inc_by(s.pipeline_panics);
    out.counter(
        "proxywatch_publications_total",
        "Verdicts made since the agent started: one per probe report, one per batch of queued events (a burst of nf_tables commits is judged once, not once per commit); each is rendered only when first asked for (a scrape, /snapshot, the page).",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .inc_by(s.publications);
    let last_ok = out.gauge(
        "proxywatch_probe_last_success_timestamp_seconds",
        "Unix time of the probe's latest run that did not fail.",
        &["probe"],
    );
    let reading = out.gauge(
        "proxywatch_probe_reading_timestamp_seconds",
        "Unix time of the reading the probe's series show: its latest run's, or while its runs fail, the last good one's (kept for 5 minutes, so a transient failure turns no gauge into a false 0; then the series go). Absent when the probe's source is absent.",
        &["probe"],
    );
    for (p, o) in &s.probes {
        if let Some(t) = o.reading_seconds {
            reading.with_label_values(&[p.as_str()]).set(t);
        }
        success
            .with_label_values(&[p.as_str()])
            .set(if o.status == ProbeStatus::Failed { 0.0 } else { 1.0 });
        duration.with_label_values(&[p.as_str()]).set(o.duration_seconds);
        if let Some(t) = o.last_success_seconds {
            last_ok.with_label_values(&[p.as_str()]).set(t);
        }
    }
}

/// Stale conntrack entries: 0 when none (or not checked); a failed check
/// shows its last good reading for a while, then nothing (unknown is not 0).
fn conntrack_stale(out: &Out, s: &Snapshot) {
    let stale = out.gauge(
        "proxywatch_conntrack_stale_entries",
        "UDP conntrack entries whose original destination is a service port and whose reply source (the endpoint they were NATed to) is no longer in that service's endpoints in any path of kube-proxy's rules (what kube-proxy's reconciler clears; TCP and SCTP ones are draining: proxywatch_conntrack_draining_entries), by L4 protocol, at the latest conntrack_stale check that completed (while checks fail, its reading is kept for 5 minutes: see proxywatch_probe_reading_timestamp_seconds{probe=\"conntrack_stale\"}); 0 when none or when the check does not run here; absent when checks failed for longer.",
        &["protocol"],
    );
    let failed = s
        .probes
        .get(&crate::probe::ProbeName::ConntrackStale)
        .is_some_and(|o| o.status == ProbeStatus::Failed);
    if s.facts.conntrack_stale.is_none() && failed {
        return;
    }
    let draining = out.gauge(
        "proxywatch_conntrack_draining_entries",
        "TCP and SCTP conntrack entries whose original destination is a service port and whose reply source is no longer in that service's endpoints in any path of kube-proxy's rules: draining (a terminating pod finishing its connections, or one gone), never deleted by kube-proxy; by L4 protocol, at the latest conntrack_stale check that completed (kept 5 minutes while checks fail); 0 when none or when the check does not run here; absent when checks failed for longer.",
        &["protocol"],
    );
    let (zero_stale, zero_draining) = (
        BTreeMap::from([("udp".to_string(), 0)]),
        BTreeMap::from([("tcp".to_string(), 0), ("sctp".to_string(), 0)]),
    );
    let f = s.facts.conntrack_stale.as_ref();
    // Every protocol of each always there (a reading from before draining was counted has none).
    for (gauge, zero, by_proto) in [
        (&stale, zero_stale, f.map(|f| &f.stale_entries)),
        (&draining, zero_draining, f.map(|f| &f.draining_entries)),
    ] {
        let mut all = zero;
        all.extend(by_proto.into_iter().flatten().map(|(p, n)| (p.clone(), *n)));
        for (p, n) in all {
            gauge.with_label_values(&[p.as_str()]).set(n as f64);
        }
    }
    // Only with a reading: a failed run is no "0 undecoded".
    if let Some(f) = &s.facts.conntrack_stale {
        let undecoded = out.gauge(
            "proxywatch_conntrack_stale_undecoded_service_ports",
            "Service ports whose path through kube-proxy's rules the conntrack_stale decoder did not understand, per source, at the latest check: their entries are not judged (stale detection is partial above 0).",
            &["source"],
        );
        for source in crate::probe::conntrack_stale::SOURCES {
            let n = f.undecoded.get(*source).copied().unwrap_or(0);
            undecoded.with_label_values(&[source]).set(n as f64);
        }
    }
}

/// Conntrack: the table, its growth trend and the kernel's statistics.
fn conntrack(out: &Out, s: &Snapshot) {
    if let Some(ct) = &s.facts.conntrack {
        out.gauge(
            "proxywatch_conntrack_entries",
            "Entries in the conntrack table (nf_conntrack_count).",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(ct.entries as f64);
        out.gauge(
            "proxywatch_conntrack_entries_limit",
            "Maximum entries of the conntrack table (nf_conntrack_max); new flows are dropped beyond it.",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(ct.max as f64);
        if let Some(b) = ct.buckets {
            out.gauge(
                "proxywatch_conntrack_buckets",
                "Buckets of the conntrack hash table (nf_conntrack_buckets).",
                &[],
            )
            .with_label_values(&[] as &[&str])
            .set(b as f64);
        }
        if let Some(tr) = s.derived.conntrack.as_ref().and_then(|d| d.trend.as_ref()) {
            out.gauge(
                "proxywatch_conntrack_entries_growth_per_second",
                "Growth of the conntrack entry count, in entries per second: a Theil-Sen fit (robust to one spike) over --conntrack.trend-window. Absent until the agent's history covers half that window.",
                &[],
            )
            .with_label_values(&[] as &[&str])
            .set(tr.slope_per_second);
            out.gauge(
                "proxywatch_conntrack_seconds_to_full",
                "Projected seconds until the conntrack table is full at its fitted growth rate. +Inf when the table is not growing (so `< 3600` alerts need no absent() guard and a flat table reads as 'never'); absent until the agent's history covers half of --conntrack.trend-window.",
                &[],
            )
            .with_label_values(&[] as &[&str])
            .set(tr.seconds_to_full.unwrap_or(f64::INFINITY));
        }
        for (field, v) in &ct.stats {
            out.counter(
                &format!("proxywatch_conntrack_stat_{field}_total"),
                &format!("Conntrack statistic `{field}` summed over CPUs (/proc/net/stat/nf_conntrack or ctnetlink)."),
                &[],
            )
            .with_label_values(&[] as &[&str])
            .inc_by(*v);
        }
    }
}

/// The node: its CPUs, and kube-proxy's conntrack sizing for them.
fn node(out: &Out, s: &Snapshot) {
    if let Some(node) = &s.facts.node {
        out.gauge(
            "proxywatch_conntrack_recommended_limit",
            "kube-proxy's conntrack sizing for this node: max(131072, 32768 x CPUs).",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(recommended_conntrack_max(node.cpus) as f64);
        out.gauge("proxywatch_node_cpus", "Online CPUs of the node.", &[])
            .with_label_values(&[] as &[&str])
            .set(node.cpus as f64);
    }
}

/// Kernel modules.
fn modules(out: &Out, s: &Snapshot) {
    if let Some(m) = &s.facts.modules {
        let g = out.gauge(
            "proxywatch_kernel_module_loaded",
            "1 when the kernel module is loaded or built in, 0 when missing.",
            &["module"],
        );
        for (name, state) in &m.modules {
            g.with_label_values(&[name.as_str()])
                .set(if state.is_present() { 1.0 } else { 0.0 });
        }
    }
}

/// Sysctls.
fn sysctls(out: &Out, s: &Snapshot) {
    if let Some(sys) = &s.facts.sysctls {
        let g = out.gauge(
            "proxywatch_sysctl_value",
            "Value of a sysctl kube-proxy depends on; absent when the sysctl does not exist.",
            &["name"],
        );
        for (name, v) in &sys.values {
            if let Some(v) = v {
                g.with_label_values(&[name.as_str()]).set(*v as f64);
            }
        }
    }
}

/// Reverse-path filtering: the effective value per interface of the node's routes (at most 16)
/// and the kernel's drop counter.
fn rp_filter(out: &Out, s: &Snapshot) {
    let Some(f) = &s.facts.rp_filter else {
        return;
    };
    let g = out.gauge(
        "proxywatch_rp_filter",
        "Effective reverse-path filter of an interface of the node's network routes: max(conf.all, conf.<interface>) rp_filter; 0 off, 1 strict, 2 loose.",
        &["interface"],
    );
    for i in &f.interfaces {
        g.with_label_values(&[i.name.as_str()]).set(i.effective as f64);
    }
    if let Some(d) = f.drops_total {
        out.counter(
            "proxywatch_rp_filter_drops_total",
            "Packets the reverse-path filter dropped (TcpExt IPReversePathFilter in /proc/net/netstat, every protocol).",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .inc_by(d);
    }
}

/// Who holds the xtables lock: whether it is held, for how long, and how many wait (the holder
/// itself is in /snapshot and the finding: a PID is no label).
fn xtables_lock(out: &Out, s: &Snapshot) {
    let Some(f) = &s.facts.xtables_lock else {
        return;
    };
    out.gauge(
        "proxywatch_xtables_lock_held",
        "1 while a process holds /run/xtables.lock (/proc/locks), 0 when it is free.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(if f.holder.is_some() { 1.0 } else { 0.0 });
    out.gauge(
        "proxywatch_xtables_lock_held_seconds",
        "How long the current holder has held /run/xtables.lock, from the first reading that showed it (a lower bound); 0 when free.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(s.derived.xtables_lock.as_ref().map_or(0.0, |h| h.held_seconds));
    out.gauge(
        "proxywatch_xtables_lock_waiters",
        "Processes blocked waiting for /run/xtables.lock (an iptables --wait without a timeout; kube-proxy polls and is not counted).",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(f.waiters_total as f64);
}

/// The kernel's neighbour tables, by family; a value that did not decode is left out, never 0.
fn neighbour_tables(out: &Out, s: &Snapshot) {
    let Some(n) = &s.facts.neighbour_tables else {
        return;
    };
    let entries = out.gauge(
        "proxywatch_neighbour_entries",
        "Entries in the kernel's neighbour table (ARP for ipv4, NDP for ipv6), all network namespaces together.",
        &["family"],
    );
    let thresh = out.gauge(
        "proxywatch_neighbour_gc_thresh",
        "The neighbour table's gc_thresh1/2/3 (level): gc_thresh3 is the hard limit past which new neighbours are refused.",
        &["family", "level"],
    );
    let fulls = out.counter(
        "proxywatch_neighbour_table_fulls_total",
        "New neighbours the kernel refused because the table was full (\"neighbour table overflow\").",
        &["family"],
    );
    let forced = out.counter(
        "proxywatch_neighbour_forced_gc_runs_total",
        "Garbage collections forced by the table passing gc_thresh2 or gc_thresh3.",
        &["family"],
    );
    for t in &n.tables {
        let f = t.family.as_str();
        if let Some(e) = t.entries {
            entries.with_label_values(&[f]).set(e as f64);
        }
        for (level, v) in [("1", t.gc_thresh1), ("2", t.gc_thresh2), ("3", t.gc_thresh3)] {
            if let Some(v) = v {
                thresh.with_label_values(&[f, level]).set(v as f64);
            }
        }
        if let Some(c) = &t.counters {
            fulls.with_label_values(&[f]).inc_by(c.table_fulls);
            forced.with_label_values(&[f]).inc_by(c.forced_gc_runs);
        }
    }
}

/// NodePorts against the ephemeral port range; absent while the probe has no reading (never a false 0).
fn node_ports(out: &Out, s: &Snapshot) {
    let Some(np) = &s.facts.node_ports else {
        return;
    };
    for (name, help, v) in [
        (
            "proxywatch_node_ports",
            "NodePorts and healthCheckNodePorts the data plane serves (distinct port, protocol and kind; iptables-nft, nftables and IPVS).",
            np.node_ports,
        ),
        (
            "proxywatch_node_ports_in_ephemeral_range",
            "Of those, the ones inside net.ipv4.ip_local_port_range and not in net.ipv4.ip_local_reserved_ports: an outgoing connection of the node can take them.",
            np.in_ephemeral_range,
        ),
    ] {
        out.gauge(name, help, &[]).with_label_values(&[] as &[&str]).set(v as f64);
    }
}

/// The agent's own process (process_resident_memory_bytes, process_cpu_seconds_total...),
/// the standard collector every Prometheus exporter has; read per render, not per scrape.
fn own_process(out: &Out) {
    let own = prometheus::process_collector::ProcessCollector::for_self();
    if let Err(e) = out.registry.register(Box::new(own)) {
        tracing::error!("process metrics registration failed: {e}");
    }
}

/// Findings: every known check, always present.
fn findings(out: &Out, findings: &[Finding]) {
    let sev = out.gauge(
        "proxywatch_finding_severity",
        "Severity of each check: 0 ok, 1 info, 2 warning, 3 critical.",
        &["id"],
    );
    for c in CHECKS {
        let level = findings
            .iter()
            .find(|f| f.id == c.id)
            .map_or(Severity::Ok, |f| f.severity);
        sev.with_label_values(&[c.id]).set(level as i32 as f64);
    }
    let since = out.gauge(
        "proxywatch_finding_active_since_timestamp_seconds",
        "Unix time since which each active finding has held its current severity, as this agent saw it (restarts start afresh); no series while the finding is ok.",
        &["id"],
    );
    for f in findings {
        if let Some(t) = f.since {
            since.with_label_values(&[f.id.as_str()]).set(t);
        }
    }
    let count = out.gauge(
        "proxywatch_active_findings",
        "Number of active findings by severity (info, warning, critical); each finding's own level is proxywatch_finding_severity{id}.",
        &["severity"],
    );
    for level in [Severity::Info, Severity::Warning, Severity::Critical] {
        let n = findings.iter().filter(|f| f.severity == level).count();
        count.with_label_values(&[level.as_str()]).set(n as f64);
    }
    let critical = findings.iter().any(|f| f.severity == Severity::Critical);
    out.gauge(
        "proxywatch_node_ready",
        "1 unless a critical finding is active on this node's data plane.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(if critical { 0.0 } else { 1.0 });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::evaluate;

    pub(super) fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn exports_facts_and_every_check() {
        let mut s = crate::evaluate::test_support::healthy();
        let ct = s.facts.conntrack.as_mut().unwrap();
        ct.stats.insert("drop".into(), 7);
        ct.stats_source = Some("test".into());
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        let findings = evaluate(&s, &crate::config::default_thresholds()).findings;
        let text = render(&s, &findings);
        assert_eq!(value(&text, "proxywatch_conntrack_entries"), Some(1000.0));
        assert_eq!(value(&text, "proxywatch_conntrack_entries_limit"), Some(262_144.0));
        assert_eq!(value(&text, "proxywatch_conntrack_stat_drop_total"), Some(7.0));
        assert!(text.contains("# TYPE proxywatch_conntrack_stat_drop_total counter"));
        assert_eq!(
            value(&text, "proxywatch_sysctl_value{name=\"net.ipv4.ip_forward\"}"),
            Some(0.0)
        );
        assert_eq!(
            value(&text, "proxywatch_kernel_module_loaded{module=\"ip_vs\"}"),
            Some(1.0)
        );
        for c in CHECKS {
            assert!(
                text.contains(&format!("proxywatch_finding_severity{{id=\"{}\"}}", c.id)),
                "{}",
                c.id
            );
        }
        assert_eq!(
            value(&text, "proxywatch_finding_severity{id=\"sysctl_ip_forward\"}"),
            Some(3.0)
        );
        assert_eq!(value(&text, "proxywatch_node_ready"), Some(0.0));
        assert_eq!(
            value(&text, "proxywatch_active_findings{severity=\"critical\"}"),
            Some(1.0)
        );
        assert!(!text.contains("proxywatch_findings{"), "the old name is gone");
        assert!(
            value(&text, "process_resident_memory_bytes").is_some_and(|v| v > 0.0),
            "own RSS missing"
        );
        assert!(
            !text.contains("proxywatch_conntrack_seconds_to_full"),
            "no trend, no series"
        );
    }

    #[test]
    fn backend_and_mode_are_state_sets() {
        use crate::probe::kube_proxy::{proxy_mode::ProxyMode, KubeProxyFacts};
        let mut s = crate::evaluate::test_support::healthy();
        s.facts.iptables = Some(crate::probe::iptables::IptablesFacts {
            backend_in_use: "legacy".into(),
            ..Default::default()
        });
        s.facts.kube_proxy = Some(KubeProxyFacts {
            mode: Some(ProxyMode::Ipvs),
            ..Default::default()
        });
        let text = render(&s, &[]);
        for b in IPTABLES_BACKENDS {
            let want = if *b == "legacy" { 1.0 } else { 0.0 };
            let series = format!("proxywatch_iptables_backend_in_use{{backend=\"{b}\"}}");
            assert_eq!(value(&text, &series), Some(want), "{series}");
        }
        for m in KUBE_PROXY_MODES {
            let want = if *m == "ipvs" { 1.0 } else { 0.0 };
            let series = format!("proxywatch_kube_proxy_mode{{mode=\"{m}\"}}");
            assert_eq!(value(&text, &series), Some(want), "{series}");
        }
        // A mode nobody listed is shown (one more series), not dropped.
        s.facts.kube_proxy.as_mut().unwrap().mode = Some(ProxyMode::Other("userspace".into()));
        let text = render(&s, &[]);
        assert_eq!(
            value(&text, "proxywatch_kube_proxy_mode{mode=\"userspace\"}"),
            Some(1.0)
        );
        assert_eq!(value(&text, "proxywatch_kube_proxy_mode{mode=\"ipvs\"}"), Some(0.0));
        let ones = text
            .lines()
            .filter(|l| l.starts_with("proxywatch_kube_proxy_mode{") && l.ends_with(" 1"))
            .count();
        assert_eq!(ones, 1, "{text}");
        // /proxyMode unanswered: no mode series at all (unknown, not "none of them").
        s.facts.kube_proxy.as_mut().unwrap().mode = None;
        assert!(!render(&s, &[]).contains("proxywatch_kube_proxy_mode{"));
    }

    #[test]
    fn build_info_names_the_commit_built() {
        let text = render(&crate::evaluate::test_support::healthy(), &[]);
        let line = text.lines().find(|l| l.starts_with("proxywatch_build_info{")).unwrap();
        assert!(line.contains(&format!("revision=\"{REVISION}\"")), "{line}");
        match option_env!("PROXYWATCH_REVISION_FROM") {
            // build.rs read `git rev-parse HEAD` (and reruns when HEAD moves): the commit now.
            Some("git") => {
                let head = std::process::Command::new("git")
                    .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
                    .output()
                    .expect("git ran at build time");
                assert_eq!(REVISION, String::from_utf8_lossy(&head.stdout).trim());
                assert_eq!(REVISION.len(), 40, "{REVISION}");
            }
            Some("env") => assert!(!REVISION.is_empty()),
            // Outside git and without PROXYWATCH_REVISION: the version, never "unknown".
            _ => assert_eq!(REVISION, env!("CARGO_PKG_VERSION")),
        }
    }

    #[test]
    fn time_to_full_is_inf_when_not_growing() {
        use crate::history::trend::ConntrackTrend;
        let mut s = crate::evaluate::test_support::healthy();
        let mut trend = ConntrackTrend {
            slope_per_second: 12.5,
            seconds_to_full: Some(1800.0),
            window_seconds: 900.0,
            points: 181,
            ..Default::default()
        };
        s.derived.conntrack.get_or_insert_with(Default::default).trend = Some(trend.clone());
        let text = render(&s, &[]);
        assert_eq!(value(&text, "proxywatch_conntrack_seconds_to_full"), Some(1800.0));
        assert_eq!(
            value(&text, "proxywatch_conntrack_entries_growth_per_second"),
            Some(12.5)
        );
        trend.slope_per_second = 0.0;
        trend.seconds_to_full = None;
        s.derived.conntrack.get_or_insert_with(Default::default).trend = Some(trend);
        let text = render(&s, &[]);
        // The encoder writes `inf`, which Prometheus' parser (Go's ParseFloat) reads as +Inf.
        assert_eq!(
            value(&text, "proxywatch_conntrack_seconds_to_full"),
            Some(f64::INFINITY),
            "{text}"
        );
    }
}
