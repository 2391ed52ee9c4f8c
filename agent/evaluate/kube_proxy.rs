//! kube-proxy checks: sync latency (the runbook's baseline), health, staleness,
//! restarts and resources.

use super::{grade, Finding, ModeDecision, Severity, Thresholds};
use crate::history::kube_proxy::{KubeProxyDerived, LatencyWindow};
use crate::probe::kube_proxy::{KubeProxyFacts, Latency};
use crate::snapshot::Snapshot;

fn kp(s: &Snapshot) -> Option<&KubeProxyFacts> {
    s.facts.kube_proxy.as_ref()
}

/// What the history stage derived for kube-proxy (empty before the first reading).
fn derived(s: &Snapshot) -> KubeProxyDerived {
    s.derived.kube_proxy.clone().unwrap_or_default()
}

/// Grades a latency over the window since the previous reading when there is
/// one, else since kube-proxy started.
fn latency(
    id: &str,
    what: &str,
    (l, w): (&Latency, Option<&LatencyWindow>),
    warning: f64,
    critical: f64,
    remediation: &[&str],
) -> Option<Finding> {
    let (p99, p50, scope) = match w {
        Some(w) => (w.p99?, w.p50, format!("over the last {:.0} s", w.seconds)),
        None => (
            l.p99_since_start?,
            l.p50_since_start,
            "since kube-proxy started".to_string(),
        ),
    };
    let mut severity = grade(p99, warning, critical);
    if w.is_none() {
        // Since start may cover days of history: worth a warning, not a readiness flip.
        severity = severity.min(Severity::Warning);
    }
    Some(
        Finding::new(id, severity, format!("kube-proxy {what} p99 is {p99:.2} s {scope}"))
            .evidence("p99_seconds", p99)
            .evidence("p50_seconds", p50)
            .evidence("count_window", w.map(|w| w.count))
            .evidence("p99_since_start_seconds", l.p99_since_start)
            .evidence("warning_at_seconds", warning)
            .evidence("critical_at_seconds", critical)
            .remediation(remediation),
    )
}

const SLOW_SYNC: &[&str] = &[
    "p99 above 1 s means rule churn; above 5 s after scaling, iptables' O(n) rewrite is the bottleneck (see proxywatch_iptables_rules).",
    "Switch to IPVS or nftables mode, or raise iptables.syncPeriod / minSyncPeriod in the kube-proxy ConfigMap, then kubectl -n kube-system rollout restart ds kube-proxy; verify within 15 minutes that p99 drops.",
    "Roll back: restore the ConfigMap backup and restart kube-proxy again.",
];

pub fn sync_slow(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    latency(
        "kube_proxy_sync_slow",
        "rule sync",
        (
            kp(s)?.sync.as_ref()?,
            s.derived.kube_proxy.as_ref().and_then(|d| d.sync.as_ref()),
        ),
        t.kube_proxy_sync_warning_seconds,
        t.kube_proxy_sync_critical_seconds,
        SLOW_SYNC,
    )
}

pub fn network_programming_slow(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    latency(
        "kube_proxy_network_programming_slow",
        "network programming",
        (
            kp(s)?.network_programming.as_ref()?,
            s.derived.kube_proxy.as_ref().and_then(|d| d.network_programming.as_ref()),
        ),
        t.kube_proxy_programming_warning_seconds,
        t.kube_proxy_programming_critical_seconds,
        &[
            "Network programming latency is the time from a Service or EndpointSlice change to rules on this node: high values mean new pods get traffic late and removed pods keep getting it.",
            "It includes the sync time (see kube_proxy_sync_slow) and kube-proxy's own queueing: check its CPU (throttling) and the API server's latency.",
        ],
    )
}

pub fn unhealthy(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let k = kp(s)?;
    let h = k.healthz.as_ref()?;
    let answered = h.status_code != 0;
    let (severity, summary) = if answered && h.status_code != 200 {
        (
            Severity::Critical,
            format!(
                "kube-proxy /healthz answers {}: its rules are stale (last updated {})",
                h.status_code,
                h.last_updated.as_deref().unwrap_or("unknown")
            ),
        )
    } else if h.timed_out {
        // Seen even without hostPID (no process visible): something listens and hangs.
        (
            Severity::Critical,
            "kube-proxy's /healthz accepts connections but does not answer".to_string(),
        )
    } else if !answered && !k.metrics_up && h.refused && k.metrics_refused {
        // Nothing listens on either port: the only evidence of kube-proxy is a process with its
        // name, which any process can take. Never a page on that alone.
        let pids: Vec<String> = k.process_candidates.iter().map(|c| c.pid.to_string()).collect();
        (
            Severity::Warning,
            format!(
                "a process named kube-proxy runs (pid {}) but nothing listens on kube-proxy's ports: \
                 kube-proxy is down, listens elsewhere, or the process is not kube-proxy",
                pids.join(", ")
            ),
        )
    } else if !answered && !k.metrics_up {
        // Something listens but neither endpoint answers properly.
        match &k.process {
            Some(_) => (
                Severity::Critical,
                "kube-proxy runs but neither /healthz nor /metrics answers".to_string(),
            ),
            None => (
                Severity::Warning,
                "neither kube-proxy's /healthz nor its /metrics answers properly".to_string(),
            ),
        }
    } else if answered {
        (Severity::Ok, "kube-proxy /healthz answers 200".to_string())
    } else {
        (
            Severity::Ok,
            "kube-proxy /metrics answers; /healthz does not".to_string(),
        )
    };
    Some(
        Finding::new("kube_proxy_unhealthy", severity, summary)
            .evidence("healthz_status", h.status_code)
            .evidence("healthz_error", h.error.clone())
            .evidence("staleness_seconds", h.staleness_seconds)
            .evidence("metrics_error", k.metrics_error.clone())
            .evidence("pid", k.process.as_ref().map(|p| p.pid))
            .remediation(&[
                "kubectl -n kube-system logs <kube-proxy pod on this node> --tail=100: look for failed syncs (iptables-restore errors) or lost API server connections.",
                "If it is wedged, delete the pod so the DaemonSet recreates it; services keep working on the old rules meanwhile.",
                "If nothing listens on its ports, check kube-proxy's metricsBindAddress and healthzBindAddress against --kube-proxy.metrics-url and --kube-proxy.healthz-url, and whether the process is kube-proxy at all (see kube_proxy_process_ambiguous).",
            ]),
    )
}

const AMBIGUOUS: &[&str] = &[
    "Find what each process is: ps -o pid,lstart,args -p <pid>; the cgroup in the evidence (or cat /proc/<pid>/cgroup) names the pod (its UID after \"pod\") or the systemd unit it runs in.",
    "kube-proxy runs in the kube-system DaemonSet's pod on this node (kubectl -n kube-system get pods -o wide -l k8s-app=kube-proxy --field-selector spec.nodeName=<node>); find the pod of any other process called kube-proxy (crictl ps, crictl inspect <container>) and remove it.",
    "The agent takes for kube-proxy only the process whose start time agrees with process_start_time_seconds on kube-proxy's /metrics; until then it reports no process facts.",
];

pub fn process_ambiguous(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let k = kp(s)?;
    let candidates = &k.process_candidates;
    let metrics_start = k.metrics.as_ref().and_then(|m| m.process_start_time_seconds);
    let pids: Vec<i32> = candidates.iter().map(|c| c.pid).collect();
    let shown = |pids: &[i32]| pids.iter().map(i32::to_string).collect::<Vec<_>>().join(", ");
    let (severity, summary) = match (&k.process, candidates.len(), metrics_start) {
        (Some(p), n, _) if n > 1 => (
            Severity::Info,
            format!(
                "{n} processes look like kube-proxy (pids {}); pid {} is the one whose start time agrees with kube-proxy's /metrics",
                shown(&pids),
                p.pid
            ),
        ),
        (None, n, Some(t)) if n > 0 => (
            Severity::Warning,
            format!(
                "no process that looks like kube-proxy (pids {}) started when the kube-proxy answering /metrics did ({t:.0}): none is taken for kube-proxy",
                shown(&pids)
            ),
        ),
        (None, n, None) if n > 1 => (
            Severity::Warning,
            format!(
                "{n} processes look like kube-proxy (pids {}) and nothing tells them apart (/metrics gives no start time): none is taken for kube-proxy",
                shown(&pids)
            ),
        ),
        _ if k.processes_named_only > 0 => (
            Severity::Info,
            format!(
                "{} process(es) are named kube-proxy but run another program (argv[0] is not kube-proxy)",
                k.processes_named_only
            ),
        ),
        _ => (Severity::Ok, format!("{} process(es) look like kube-proxy", candidates.len())),
    };
    Some(
        Finding::new("kube_proxy_process_ambiguous", severity, summary)
            .evidence("pid", k.process.as_ref().map(|p| p.pid))
            .evidence("metrics_start_time_seconds", metrics_start)
            .evidence(
                "candidates",
                serde_json::to_value(candidates).unwrap_or(serde_json::Value::Null),
            )
            .evidence("named_only", k.processes_named_only)
            .remediation(AMBIGUOUS),
    )
}

pub fn sync_stale(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    kp(s)?;
    // While syncs are failing, kube_proxy_sync_failing says so (with the queued age in
    // its evidence): one finding for one cause, not two.
    if super::kube_proxy_syncs::failing(s) {
        return None;
    }
    let k = derived(s);
    let waited = k.queued_unsynced_seconds?;
    Some(
        Finding::new(
            "kube_proxy_sync_stale",
            if waited > t.kube_proxy_queued_warning_seconds { Severity::Warning } else { Severity::Ok },
            format!("changes have waited {waited:.0} s for a kube-proxy sync"),
        )
        .evidence("queued_unsynced_seconds", waited)
        .evidence("last_sync_age_seconds", k.last_sync_age_seconds)
        .evidence("warning_at_seconds", t.kube_proxy_queued_warning_seconds)
        .remediation(&[
            "kube-proxy queued rule changes but has not synced them: syncs are failing or blocked (xtables lock held by another process, a slow iptables-restore).",
            "Check kube-proxy's logs and kubeproxy_sync_proxy_rules_iptables_restore_failures_total; look for other processes holding /run/xtables.lock.",
        ]),
    )
}

pub fn restarted(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    kp(s)?;
    let k = derived(s);
    let recent = k
        .last_restart_seconds
        .is_some_and(|r| s.collected_at - r <= t.kube_proxy_restart_window_seconds);
    Some(
        Finding::new(
            "kube_proxy_restarted",
            if recent { Severity::Warning } else { Severity::Ok },
            format!(
                "kube-proxy restarted {} time(s) since the agent started, the latest within {:.0} min",
                k.restarts,
                t.kube_proxy_restart_window_seconds / 60.0
            ),
        )
        .evidence("restarts", k.restarts)
        .evidence("last_restart_timestamp_seconds", k.last_restart_seconds)
        .remediation(&[
            "A restart reprograms every rule and briefly interrupts new connections; repeated restarts usually mean OOM kills or failing liveness probes.",
            "kubectl -n kube-system describe pod <kube-proxy pod>: look at Last State (OOMKilled?) and events.",
        ]),
    )
}

pub fn resources_near_limit(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let p = kp(s)?.process.as_ref()?;
    let limit = p.memory_limit_bytes?;
    let ratio = p.resident_memory_bytes as f64 / limit as f64;
    Some(
        Finding::new(
            "kube_proxy_resources_near_limit",
            if ratio >= 0.9 { Severity::Warning } else { Severity::Ok },
            format!(
                "kube-proxy uses {:.0}% of its memory limit ({} of {} bytes)",
                ratio * 100.0,
                p.resident_memory_bytes,
                limit
            ),
        )
        .evidence("resident_memory_bytes", p.resident_memory_bytes)
        .evidence("memory_limit_bytes", limit)
        .evidence(
            "cgroup_memory_usage_bytes",
            p.cgroup.as_ref().and_then(|c| c.memory_usage_bytes),
        )
        .evidence("cgroup_path", p.cgroup.as_ref().map(|c| c.path.clone()))
        .evidence("cpu_limit_cores", p.cpu_limit_cores)
        .remediation(&[
            "kube-proxy near its limit gets OOM-killed (and reprograms every rule on restart): raise the DaemonSet's memory limit, sized for the rule set (kubectl top pod -n kube-system -l k8s-app=kube-proxy).",
            "Roll back: revert the DaemonSet change with kubectl rollout undo ds/kube-proxy -n kube-system.",
        ]),
    )
}

/// Share of CPU periods throttled at which kube-proxy's throttling is a warning: kubernetes-mixin's
/// CPUThrottlingHigh threshold (`cpuThrottlingPercent: 25`).
pub const THROTTLED_WARNING_RATIO: f64 = 0.25;
/// Fewer periods than this in the window say too little (a mostly idle kube-proxy).
pub const THROTTLED_MIN_PERIODS: u64 = 10;

pub fn cpu_throttled(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let p = kp(s)?.process.as_ref()?;
    let w = derived(s).cpu_throttling?;
    let ratio = w.ratio?;
    let severity = if ratio >= THROTTLED_WARNING_RATIO && w.periods >= THROTTLED_MIN_PERIODS {
        Severity::Warning
    } else {
        Severity::Ok
    };
    Some(
        Finding::new(
            "kube_proxy_cpu_throttled",
            severity,
            format!(
                "kube-proxy's cgroup was CPU-throttled in {:.0}% of its periods over the last {:.0} s ({:.1} s throttled)",
                ratio * 100.0,
                w.seconds,
                w.throttled_seconds
            ),
        )
        .evidence("throttled_ratio", ratio)
        .evidence("periods", w.periods)
        .evidence("throttled_periods", w.throttled_periods)
        .evidence("throttled_seconds", w.throttled_seconds)
        .evidence("window_seconds", w.seconds)
        .evidence("cpu_limit_cores", p.cpu_limit_cores)
        .evidence("warning_at_ratio", THROTTLED_WARNING_RATIO)
        .remediation(&[
            "A throttled kube-proxy syncs rules late (see kube_proxy_sync_slow and kube_proxy_network_programming_slow) even when the node has idle CPU: its CPU limit is too tight for its bursts.",
            "Back up the DaemonSet (kubectl -n kube-system get ds kube-proxy -o yaml > kube-proxy-ds-$(date +%Y%m%d).yaml), then raise or remove resources.limits.cpu of its container; verify within 15 minutes that proxywatch_kube_proxy_cpu_throttled_ratio falls below 0.25.",
            "Roll back: kubectl -n kube-system rollout undo ds/kube-proxy.",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::kube_proxy::{HealthzFacts, Identity, ProcessCandidate, ProcessFacts};

    fn with(k: KubeProxyFacts) -> Snapshot {
        let mut s = healthy();
        s.collected_at = 10_000.0;
        s.facts.kube_proxy = Some(k);
        s
    }

    #[test]
    fn sync_p99_thresholds_use_the_window() {
        let t = crate::config::default_thresholds();
        let mut k = KubeProxyFacts {
            sync: Some(Latency {
                p99_since_start: Some(0.2),
                count_since_start: 100.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(judge(sync_slow, &with(k.clone()), &t).unwrap().severity, Severity::Ok);
        // A slow history since start, without a window yet: a warning at most.
        k.sync.as_mut().unwrap().p99_since_start = Some(9.0);
        assert_eq!(
            judge(sync_slow, &with(k.clone()), &t).unwrap().severity,
            Severity::Warning
        );
        let mut window = LatencyWindow {
            p50: None,
            p99: Some(6.0),
            count: 10.0,
            seconds: 15.0,
        };
        let with_window = |w: &LatencyWindow| {
            let mut s = with(k.clone());
            s.derived.kube_proxy = Some(KubeProxyDerived {
                sync: Some(w.clone()),
                ..Default::default()
            });
            s
        };
        let f = judge(sync_slow, &with_window(&window), &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.summary.contains("over the last 15 s"), "{}", f.summary);
        window.p99 = Some(1.5);
        assert_eq!(
            judge(sync_slow, &with_window(&window), &t).unwrap().severity,
            Severity::Warning
        );
    }

    #[test]
    fn health_restarts_and_memory() {
        let t = crate::config::default_thresholds();
        let k = KubeProxyFacts {
            healthz: Some(HealthzFacts {
                status_code: 503,
                last_updated: Some("2026-11-29 22:00:00 +0000 UTC".into()),
                ..Default::default()
            }),
            process: Some(ProcessFacts {
                resident_memory_bytes: 95,
                memory_limit_bytes: Some(100),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut s = with(k);
        s.derived.kube_proxy = Some(KubeProxyDerived {
            restarts: 2,
            last_restart_seconds: Some(9_900.0),
            queued_unsynced_seconds: Some(120.0),
            ..Default::default()
        });
        assert_eq!(judge(unhealthy, &s, &t).unwrap().severity, Severity::Critical);
        assert_eq!(judge(restarted, &s, &t).unwrap().severity, Severity::Warning);
        assert_eq!(judge(restarted, &s, &t).unwrap().evidence["restarts"], 2);
        assert_eq!(judge(resources_near_limit, &s, &t).unwrap().severity, Severity::Warning);
        // A health endpoint that accepts and hangs is critical even without a visible process.
        let hung = with(KubeProxyFacts {
            healthz: Some(HealthzFacts {
                timed_out: true,
                error: Some("no answer within 2s".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(judge(unhealthy, &hung, &t).unwrap().severity, Severity::Critical);
        assert_eq!(judge(sync_stale, &s, &t).unwrap().severity, Severity::Warning);
    }

    fn candidate(pid: i32, start: f64) -> ProcessCandidate {
        ProcessCandidate {
            pid,
            start_time_seconds: start,
            command: "/usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf".into(),
            cgroup: Some("/kubepods/besteffort/pod1/c1".into()),
        }
    }

    #[test]
    fn a_process_alone_is_never_critical() {
        let t = crate::config::default_thresholds();
        let refused = HealthzFacts {
            refused: true,
            error: Some("connection refused".into()),
            ..Default::default()
        };
        let alone = KubeProxyFacts {
            healthz: Some(refused.clone()),
            metrics_refused: true,
            process: Some(ProcessFacts {
                pid: 42,
                ..Default::default()
            }),
            process_candidates: vec![candidate(42, 100.0)],
            ..Default::default()
        };
        let f = judge(unhealthy, &with(alone.clone()), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.summary.contains("pid 42"), "{}", f.summary);
        // Something listens on the metrics port but fails: with a process, that is kube-proxy broken.
        let broken = KubeProxyFacts {
            metrics_refused: false,
            metrics_error: Some("HTTP 500".into()),
            ..alone.clone()
        };
        assert_eq!(
            judge(unhealthy, &with(broken.clone()), &t).unwrap().severity,
            Severity::Critical
        );
        let no_process = KubeProxyFacts {
            process: None,
            process_candidates: vec![],
            ..broken
        };
        assert_eq!(
            judge(unhealthy, &with(no_process), &t).unwrap().severity,
            Severity::Warning
        );
        // The impostor alone raises no identity finding; a healthy kube-proxy raises nothing.
        assert_eq!(
            judge(process_ambiguous, &with(alone), &t).unwrap().severity,
            Severity::Ok
        );
        let fine = KubeProxyFacts {
            healthz: Some(HealthzFacts {
                status_code: 200,
                ..Default::default()
            }),
            metrics_up: true,
            ..Default::default()
        };
        assert_eq!(judge(unhealthy, &with(fine), &t).unwrap().severity, Severity::Ok);
    }

    #[test]
    fn cpu_throttling_over_a_quarter_of_the_periods_is_a_warning() {
        use crate::history::kube_proxy::CpuThrottling;
        let t = crate::config::default_thresholds();
        let mut s = with(KubeProxyFacts {
            process: Some(ProcessFacts {
                pid: 1,
                cpu_limit_cores: Some(0.1),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(judge(cpu_throttled, &s, &t), None, "no window yet");
        let mut w = CpuThrottling {
            periods: 100,
            throttled_periods: 25,
            throttled_seconds: 1.2,
            ratio: Some(0.25),
            seconds: 300.0,
        };
        let mut at = |w: &CpuThrottling| {
            s.derived.kube_proxy = Some(KubeProxyDerived {
                cpu_throttling: Some(w.clone()),
                ..Default::default()
            });
            judge(cpu_throttled, &s, &t).map(|f| f.severity)
        };
        assert_eq!(at(&w), Some(Severity::Warning));
        w.ratio = Some(0.24);
        assert_eq!(at(&w), Some(Severity::Ok));
        (w.ratio, w.periods) = (Some(1.0), 5);
        assert_eq!(at(&w), Some(Severity::Ok), "5 periods say too little");
        w.ratio = None;
        assert_eq!(at(&w), None, "idle: no ratio");
    }

    #[test]
    fn several_candidates_are_ambiguous_until_metrics_tell() {
        let t = crate::config::default_thresholds();
        let metrics = |start: Option<f64>| {
            Some(crate::probe::kube_proxy::metrics::KubeProxyMetrics {
                process_start_time_seconds: start,
                ..Default::default()
            })
        };
        let two = KubeProxyFacts {
            process_candidates: vec![candidate(10, 100.0), candidate(20, 200.0)],
            ..Default::default()
        };
        let f = judge(process_ambiguous, &with(two.clone()), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.summary.contains("pids 10, 20"), "{}", f.summary);
        let resolved = KubeProxyFacts {
            metrics: metrics(Some(200.0)),
            process: Some(ProcessFacts {
                pid: 20,
                identity: Identity::Confirmed,
                ..Default::default()
            }),
            ..two.clone()
        };
        let f = judge(process_ambiguous, &with(resolved), &t).unwrap();
        assert_eq!(
            (f.severity, &f.evidence["pid"]),
            (Severity::Info, &serde_json::json!(20))
        );
        // /metrics names a start time no candidate has: none is kube-proxy.
        let mismatch = KubeProxyFacts {
            metrics: metrics(Some(500.0)),
            process_candidates: vec![candidate(10, 100.0)],
            ..Default::default()
        };
        assert_eq!(
            judge(process_ambiguous, &with(mismatch), &t).unwrap().severity,
            Severity::Warning
        );
        let named_only = KubeProxyFacts {
            processes_named_only: 1,
            ..Default::default()
        };
        assert_eq!(
            judge(process_ambiguous, &with(named_only), &t).unwrap().severity,
            Severity::Info
        );
    }
}
