//! kube-proxy itself: whether its /metrics answered, its mode, its sync latencies (as
//! summaries over the agent's window, and as histograms accumulated across its reads), its
//! process and cgroup.

use prometheus::core::Collector;

use super::{state_set, Out, KUBE_PROXY_MODES};
use crate::snapshot::{ProbeStatus, Snapshot};

/// A summary family registered as is: kube-proxy's latency histograms, exposed the way a
/// client_golang summary is (quantiles over a recent window, `_count` and `_sum` cumulative).
#[derive(Clone)]
struct Fixed {
    desc: Vec<prometheus::core::Desc>,
    family: prometheus::proto::MetricFamily,
}

impl Collector for Fixed {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.desc.iter().collect()
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        vec![self.family.clone()]
    }
}

impl Out {
    /// A summary without labels: `quantiles` (those known), and the cumulative count and sum.
    fn summary(&self, name: &str, help: &str, quantiles: &[(f64, Option<f64>)], count: f64, sum: f64) {
        use prometheus::proto::{Metric, MetricFamily, MetricType, Quantile, Summary};
        let Ok(desc) = prometheus::core::Desc::new(name.into(), help.into(), vec![], Default::default()) else {
            tracing::error!("invalid summary name {name}");
            return;
        };
        let mut summary = Summary::default();
        summary.set_sample_count(count.max(0.0) as u64);
        summary.set_sample_sum(sum);
        summary.set_quantile(
            quantiles
                .iter()
                .filter_map(|(q, v)| {
                    let mut x = Quantile::default();
                    x.set_quantile(*q);
                    x.set_value((*v)?);
                    Some(x)
                })
                .collect(),
        );
        let mut metric = Metric::default();
        metric.set_summary(summary);
        let mut family = MetricFamily::default();
        family.set_name(name.into());
        family.set_help(help.into());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(vec![metric]);
        self.register(Fixed {
            desc: vec![desc],
            family,
        });
    }

    /// A gauge without labels, set to `v`.
    fn set_gauge(&self, name: &str, help: &str, v: f64) {
        self.gauge(name, help, &[]).with_label_values(&[] as &[&str]).set(v);
    }

    /// A histogram without labels, with `h`'s buckets (the `+Inf` one is the count, written by
    /// the encoder).
    fn histogram(&self, name: &str, help: &str, h: &crate::promtext::Histogram) {
        use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};
        let Ok(desc) = prometheus::core::Desc::new(name.into(), help.into(), vec![], Default::default()) else {
            tracing::error!("invalid histogram name {name}");
            return;
        };
        let mut hist = Histogram::default();
        hist.set_sample_count(h.count.max(0.0) as u64);
        hist.set_sample_sum(h.sum);
        hist.set_bucket(
            h.buckets
                .iter()
                .filter(|(le, _)| le.is_finite())
                .map(|(le, c)| {
                    let mut b = Bucket::default();
                    b.set_upper_bound(*le);
                    b.set_cumulative_count(c.max(0.0) as u64);
                    b
                })
                .collect(),
        );
        let mut metric = Metric::default();
        metric.set_histogram(hist);
        let mut family = MetricFamily::default();
        family.set_name(name.into());
        family.set_help(help.into());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(vec![metric]);
        self.register(Fixed {
            desc: vec![desc],
            family,
        });
    }
}

/// kube-proxy's cgroup: its limits and usage as read, its throttling counters as counters, and
/// the share of periods throttled over the history's window.
fn kube_proxy_cgroup(
    out: &Out,
    k: &crate::probe::kube_proxy::KubeProxyFacts,
    d: &crate::history::kube_proxy::KubeProxyDerived,
) {
    let Some(cg) = k.process.as_ref().and_then(|p| p.cgroup.as_ref()) else {
        return;
    };
    let one = |name: &str, help: &str, v: Option<f64>| {
        if let Some(v) = v {
            out.gauge(name, help, &[]).with_label_values(&[] as &[&str]).set(v);
        }
    };
    one(
        "proxywatch_kube_proxy_cgroup_memory_limit_bytes",
        "Memory limit of kube-proxy's cgroup (memory.max or memory.limit_in_bytes); absent when unlimited.",
        cg.memory_limit_bytes.map(|b| b as f64),
    );
    one(
        "proxywatch_kube_proxy_cgroup_memory_usage_bytes",
        "Memory charged to kube-proxy's cgroup, page cache included (memory.current or memory.usage_in_bytes).",
        cg.memory_usage_bytes.map(|b| b as f64),
    );
    one(
        "proxywatch_kube_proxy_cgroup_cpu_quota_seconds",
        "CPU time kube-proxy's cgroup may use per CFS period (cpu.max or cpu.cfs_quota_us); quota / period is the limit in CPUs; absent when unlimited.",
        cg.cpu_quota_seconds,
    );
    one(
        "proxywatch_kube_proxy_cgroup_cpu_period_seconds",
        "CFS enforcement period of kube-proxy's cgroup (cpu.max or cpu.cfs_period_us); absent when its CPU is unlimited.",
        cg.cpu_period_seconds,
    );
    if let Some(cpu) = cg.cpu {
        for (name, help, v) in [
            (
                "proxywatch_kube_proxy_cgroup_cpu_periods_total",
                "CFS enforcement periods in which kube-proxy's cgroup had runnable tasks (cpu.stat nr_periods).",
                cpu.periods_total,
            ),
            (
                "proxywatch_kube_proxy_cgroup_cpu_throttled_periods_total",
                "Periods in which kube-proxy's cgroup was throttled (cpu.stat nr_throttled).",
                cpu.throttled_periods_total,
            ),
        ] {
            out.counter(name, help, &[]).with_label_values(&[] as &[&str]).inc_by(v);
        }
        out.seconds_counter(
            "proxywatch_kube_proxy_cgroup_cpu_throttled_seconds_total",
            "Time kube-proxy's cgroup was throttled (cpu.stat throttled_usec or throttled_time).",
        )
        .inc_by(cpu.throttled_seconds_total);
    }
    one(
        "proxywatch_kube_proxy_cpu_throttled_ratio",
        "Share of kube-proxy's CPU periods that were throttled over the last 5 minutes.",
        d.cpu_throttling.as_ref().and_then(|w| w.ratio),
    );
}

/// `proxywatch_kube_proxy_up`: 1 when kube-proxy's /metrics answered, 0 when it did not or
/// nothing of kube-proxy is on the node (the probe found it absent); absent only while the probe
/// fails (unknown, never a false 0). Whether a 0 matters (kube-proxy belongs here) is the
/// kube_proxy_down finding's call.
fn kube_proxy_up(out: &Out, s: &Snapshot) {
    let up = match (&s.facts.kube_proxy, s.probes.get(&crate::probe::ProbeName::KubeProxy)) {
        (Some(k), _) => k.metrics_up,
        (None, Some(o)) if o.status == ProbeStatus::Absent => false,
        _ => return,
    };
    out.gauge(
        "proxywatch_kube_proxy_up",
        "1 when kube-proxy's /metrics answered; 0 when it did not or no kube-proxy is on the node (see proxywatch_finding_severity{id=\"kube_proxy_down\"} for whether it belongs here); absent while the kube_proxy probe fails.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(if up { 1.0 } else { 0.0 });
}

/// kube-proxy itself.
pub(super) fn kube_proxy(out: &Out, s: &Snapshot) {
    kube_proxy_up(out, s);
    if let Some(k) = &s.facts.kube_proxy {
        if let Some(mode) = &k.mode {
            let g = out.gauge(
                "proxywatch_kube_proxy_mode",
                "State set: 1 for the mode kube-proxy's /proxyMode reports, 0 for the others (iptables, ipvs, nftables, kernelspace; another reported mode gets its own series); absent while /proxyMode does not answer.",
                &["mode"],
            );
            state_set(&g, KUBE_PROXY_MODES, mode.as_str());
        }
        let d = s.derived.kube_proxy.clone().unwrap_or_default();
        kube_proxy_syncs(out, k, &d);
        kube_proxy_process(out, k, &d);
        if let Some(m) = &k.metrics {
            kube_proxy_reports(out, m);
        }
    }
}

/// kube-proxy's syncs: their latencies (summaries over the agent's window, histograms
/// accumulated across its reads), the age of the last one and how long changes have queued.
fn kube_proxy_syncs(
    out: &Out,
    k: &crate::probe::kube_proxy::KubeProxyFacts,
    d: &crate::history::kube_proxy::KubeProxyDerived,
) {
    let m = k.metrics.as_ref();
    for (name, help, w, h) in [
        (
            "proxywatch_kube_proxy_sync_duration_seconds",
            "kube-proxy rule sync duration: p50/p99 over the window since the agent's previous read of kube-proxy (from kubeproxy_sync_proxy_rules_duration_seconds' buckets), count and sum since kube-proxy started.",
            &d.sync,
            m.and_then(|m| m.sync_duration.as_ref()),
        ),
        (
            "proxywatch_kube_proxy_network_programming_duration_seconds",
            "kube-proxy network programming latency: p50/p99 over the window since the agent's previous read of kube-proxy (from kubeproxy_network_programming_duration_seconds' buckets), count and sum since kube-proxy started.",
            &d.network_programming,
            m.and_then(|m| m.network_programming.as_ref()),
        ),
    ] {
        // A summary, as client_golang's are: promtool accepts a `quantile` label only there.
        // No window yet, or no event in it: no quantile line, rather than a misleading 0.
        if let Some(h) = h {
            let (p50, p99) = w.as_ref().map_or((None, None), |w| (w.p50, w.p99));
            out.summary(name, help, &[(0.5, p50), (0.99, p99)], h.count, h.sum);
        }
    }
    for (name, help, h) in [
        (
            "proxywatch_kube_proxy_sync_latency_seconds",
            "kube-proxy rule sync duration (kubeproxy_sync_proxy_rules_duration_seconds) with kube-proxy's buckets, accumulated across the agent's reads since it started (a kube-proxy restart counted as Prometheus counts a counter reset): histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m]))) across nodes.",
            d.sync_cumulative.as_ref(),
        ),
        (
            "proxywatch_kube_proxy_network_programming_latency_seconds",
            "kube-proxy network programming latency (kubeproxy_network_programming_duration_seconds) with kube-proxy's buckets, accumulated across the agent's reads since it started, like proxywatch_kube_proxy_sync_latency_seconds.",
            d.network_programming_cumulative.as_ref(),
        ),
    ] {
        if let Some(h) = h {
            out.histogram(name, help, h);
        }
    }
    if let Some(age) = d.last_sync_age_seconds {
        out.set_gauge(
            "proxywatch_kube_proxy_last_sync_age_seconds",
            "Seconds since kube-proxy's last successful sync.",
            age,
        );
    }
    if let Some(q) = d.queued_unsynced_seconds {
        out.set_gauge(
            "proxywatch_kube_proxy_queued_unsynced_seconds",
            "Seconds queued changes have waited for a sync; 0 when none waits.",
            q,
        );
    }
}

/// kube-proxy's process: its memory, CPU and start time, its cgroup, the processes that look
/// like it and its restarts.
fn kube_proxy_process(
    out: &Out,
    k: &crate::probe::kube_proxy::KubeProxyFacts,
    d: &crate::history::kube_proxy::KubeProxyDerived,
) {
    if let Some(p) = &k.process {
        out.set_gauge(
            "proxywatch_kube_proxy_process_resident_memory_bytes",
            "Resident memory of the kube-proxy process.",
            p.resident_memory_bytes as f64,
        );
        out.seconds_counter(
            "proxywatch_kube_proxy_process_cpu_seconds_total",
            "User and system CPU time of the kube-proxy process.",
        )
        .inc_by(p.cpu_seconds_total);
        out.set_gauge(
            "proxywatch_kube_proxy_process_start_time_seconds",
            "Start time of the kube-proxy process, Unix seconds.",
            p.start_time_seconds,
        );
    }
    kube_proxy_cgroup(out, k, d);
    out.set_gauge(
        "proxywatch_kube_proxy_process_candidates",
        "Processes that look like kube-proxy (name and argv[0]); more than 1 is ambiguous.",
        k.process_candidates.len() as f64,
    );
    out.counter(
        "proxywatch_kube_proxy_restarts_total",
        "kube-proxy restarts seen since the agent started.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .inc_by(d.restarts);
}

/// What kube-proxy reports of its own syncs on its /metrics: the failed ones and the rules
/// written per iptables table.
fn kube_proxy_reports(out: &Out, m: &crate::probe::kube_proxy::metrics::KubeProxyMetrics) {
    if let Some(total) = m.sync_failures_total.filter(|v| v.is_finite() && *v >= 0.0) {
        out.counter(
            "proxywatch_kube_proxy_sync_failures_total",
            "Failed kube-proxy syncs since it started, as it reports them (iptables restores, partial restores and nftables transactions).",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .inc_by(total as u64);
    }
    if !m.iptables_rules.is_empty() {
        let g = out.gauge(
            "proxywatch_kube_proxy_iptables_rules",
            "Rules kube-proxy reports it wrote per iptables table at its last sync (kubeproxy_sync_proxy_rules_iptables_total), beside the kernel's proxywatch_iptables_rules.",
            &["table"],
        );
        for (table, v) in &m.iptables_rules {
            g.with_label_values(&[table.as_str()]).set(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use super::super::tests::value;
    use crate::snapshot::ProbeStatus;

    #[test]
    fn kube_proxy_up_is_0_when_absent_and_missing_only_while_the_probe_fails() {
        use crate::probe::ProbeName;
        use crate::snapshot::ProbeOutcome;
        let outcome = |status| ProbeOutcome {
            status,
            duration_seconds: 0.0,
            error: None,
            last_run_seconds: 0.0,
            last_success_seconds: None,
            reading_seconds: None,
        };
        let mut s = crate::evaluate::test_support::healthy();
        s.probes.insert(ProbeName::KubeProxy, outcome(ProbeStatus::Absent));
        assert_eq!(value(&render(&s, &[]), "proxywatch_kube_proxy_up"), Some(0.0));
        s.probes.insert(ProbeName::KubeProxy, outcome(ProbeStatus::Failed));
        assert_eq!(
            value(&render(&s, &[]), "proxywatch_kube_proxy_up"),
            None,
            "unknown, not 0"
        );
        s.probes.insert(ProbeName::KubeProxy, outcome(ProbeStatus::Ok));
        s.facts.kube_proxy = Some(crate::probe::kube_proxy::KubeProxyFacts {
            metrics_up: true,
            ..Default::default()
        });
        assert_eq!(value(&render(&s, &[]), "proxywatch_kube_proxy_up"), Some(1.0));
    }

    #[test]
    fn latency_is_a_summary_with_window_quantiles_and_cumulative_count() {
        use crate::history::kube_proxy::{KubeProxyDerived, LatencyWindow};
        use crate::promtext::Histogram;
        let mut s = crate::evaluate::test_support::healthy();
        let h = Histogram {
            buckets: vec![(1.0, 90.0), (f64::INFINITY, 100.0)],
            count: 100.0,
            sum: 42.5,
        };
        s.facts.kube_proxy = Some(crate::probe::kube_proxy::KubeProxyFacts {
            metrics_up: true,
            metrics: Some(crate::probe::kube_proxy::metrics::KubeProxyMetrics {
                sync_duration: Some(h),
                ..Default::default()
            }),
            ..Default::default()
        });
        // No window yet: count and sum, no quantile line.
        let text = render(&s, &[]);
        let name = "proxywatch_kube_proxy_sync_duration_seconds";
        assert!(text.contains(&format!("# TYPE {name} summary")), "{text}");
        assert_eq!(value(&text, &format!("{name}_count")), Some(100.0));
        assert_eq!(value(&text, &format!("{name}_sum")), Some(42.5));
        assert!(!text.contains(&format!("{name}{{quantile")), "{text}");
        s.derived.kube_proxy = Some(KubeProxyDerived {
            sync: Some(LatencyWindow {
                p50: Some(0.2),
                p99: Some(3.5),
                count: 10.0,
                seconds: 15.0,
            }),
            ..Default::default()
        });
        let text = render(&s, &[]);
        assert_eq!(value(&text, &format!("{name}{{quantile=\"0.99\"}}")), Some(3.5));
        assert_eq!(value(&text, &format!("{name}{{quantile=\"0.5\"}}")), Some(0.2));
        // No network-programming histogram from kube-proxy: no family at all.
        assert!(!text.contains("proxywatch_kube_proxy_network_programming_duration_seconds"));
    }

    #[test]
    fn accumulated_latency_is_a_histogram_with_kube_proxys_buckets() {
        use crate::history::kube_proxy::KubeProxyDerived;
        use crate::promtext::Histogram;
        let mut s = crate::evaluate::test_support::healthy();
        s.facts.kube_proxy = Some(crate::probe::kube_proxy::KubeProxyFacts {
            metrics_up: true,
            ..Default::default()
        });
        let name = "proxywatch_kube_proxy_sync_latency_seconds";
        assert!(!render(&s, &[]).contains(name), "absent before a read");
        s.derived.kube_proxy = Some(KubeProxyDerived {
            sync_cumulative: Some(Histogram {
                buckets: vec![(0.001, 3.0), (0.002, 5.0), (16.384, 9.0), (f64::INFINITY, 10.0)],
                count: 10.0,
                sum: 20.5,
            }),
            ..Default::default()
        });
        let text = render(&s, &[]);
        assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
        for (le, v) in [("0.001", 3.0), ("0.002", 5.0), ("16.384", 9.0), ("+Inf", 10.0)] {
            assert_eq!(
                value(&text, &format!("{name}_bucket{{le=\"{le}\"}}")),
                Some(v),
                "{le}\n{text}"
            );
        }
        assert_eq!(text.matches(&format!("{name}_bucket{{le=\"+Inf\"}}")).count(), 1);
        assert_eq!(value(&text, &format!("{name}_count")), Some(10.0));
        assert_eq!(value(&text, &format!("{name}_sum")), Some(20.5));
        assert!(!text.contains("proxywatch_kube_proxy_network_programming_latency_seconds"));
    }
}
