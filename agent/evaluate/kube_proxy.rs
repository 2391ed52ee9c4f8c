//! kube-proxy checks: sync latency (the runbook's baseline), health, staleness,
//! restarts and resources.

use super::{grade, Finding, ModeDecision, Severity, Thresholds};
use crate::history::kube_proxy::{KubeProxyDerived, LatencyWindow};
use crate::probe::kube_proxy::{KubeProxyFacts, Latency};
use crate::probe::ProbeName;
use crate::snapshot::{ProbeStatus, Snapshot};
use crate::timefmt::rfc3339;

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
        Finding::new(severity, format!("kube-proxy {what} p99 is {p99:.2} s {scope}"))
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
    let (severity, summary) = if h.draining() && h.livez_status != Some(503) {
        // The node is leaving (kube_proxy_node_draining says so): /healthz 503 is kube-proxy
        // telling load balancers to stop sending here, not late rules. /livez 503 would be.
        (
            Severity::Ok,
            match h.livez_status {
                Some(200) => "kube-proxy's proxier is healthy (/livez 200); /healthz answers 503 because the node is draining".to_string(),
                _ => "kube-proxy's /healthz answers 503 because the node is draining (nodeEligible false); no /livez to tell the proxier's own health, judged by its syncs (kube_proxy_sync_stale, kube_proxy_sync_failing)".to_string(),
            },
        )
    } else if answered && h.status_code != 200 {
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
        Finding::new(severity, summary)
            .evidence("healthz_status", h.status_code)
            .evidence("healthz_error", h.error.clone())
            .evidence("staleness_seconds", h.staleness_seconds)
            .evidence("node_eligible", h.node_eligible)
            .evidence("livez_status", h.livez_status)
            .evidence("metrics_error", k.metrics_error.clone())
            .evidence("pid", k.process.as_ref().map(|p| p.pid))
            .remediation(&[
                "kubectl -n kube-system logs <kube-proxy pod on this node> --tail=100: look for failed syncs (iptables-restore errors) or lost API server connections.",
                "If it is wedged, delete the pod so the DaemonSet recreates it; services keep working on the old rules meanwhile.",
                "If nothing listens on its ports, check kube-proxy's metricsBindAddress and healthzBindAddress against --kube-proxy.metrics-url and --kube-proxy.healthz-url, and whether the process is kube-proxy at all (see kube_proxy_process_ambiguous).",
            ]),
    )
}

/// kube-proxy says the node is leaving the cluster: `/healthz` 503 with `nodeEligible: false`
/// (the node has a deletion timestamp or the `ToBeDeletedByClusterAutoscaler` taint: its
/// `SyncNode`), or 503 while `/livez`, which leaves the node out, answers 200
/// (pkg/proxy/healthcheck/proxy_health.go). By design: load balancers that probe
/// `/healthz` stop sending new connections here before the node goes.
/// Info, never a page; `/livez` 503 besides is `kube_proxy_unhealthy` as well.
pub fn node_draining(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let h = kp(s)?.healthz.as_ref()?;
    let (severity, summary) = if h.draining() {
        let why = match (h.node_eligible, h.livez_status) {
            (Some(false), Some(200)) => "nodeEligible false, /livez 200",
            (Some(false), Some(503)) => "nodeEligible false; /livez 503: its rules are late too",
            (Some(false), _) => "nodeEligible false; no /livez answer",
            _ => "/livez 200",
        };
        (
            Severity::Info,
            format!(
                "kube-proxy reports this node draining: /healthz {} ({why}); the node is being deleted or tainted ToBeDeletedByClusterAutoscaler",
                h.status_code
            ),
        )
    } else {
        (Severity::Ok, "kube-proxy does not report the node draining".to_string())
    };
    Some(
        Finding::new(severity, summary)
            .evidence("healthz_status", h.status_code)
            .evidence("node_eligible", h.node_eligible)
            .evidence("livez_status", h.livez_status)
            .evidence("livez_error", h.livez_error.clone())
            .remediation(&[
                "Expected while the node is drained for deletion: kube-proxy answers /healthz 503 so that cloud load balancers stop sending new connections to it; existing ones keep being served.",
                "If the node is not meant to go: kubectl get node <node> -o jsonpath='{.metadata.deletionTimestamp} {.spec.taints}' shows the deletion timestamp or the ToBeDeletedByClusterAutoscaler taint; the cluster autoscaler's log (or kubectl describe node <node>, its events) says why it chose the node.",
                "Alerts or probes of your own on kube-proxy's /healthz page on every scaled-down node: probe /livez instead (kube-proxy's liveness, the node left out).",
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
        Finding::new(severity, summary)
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
            if waited > t.kube_proxy_queued_warning_seconds { Severity::Warning } else { Severity::Ok },
            format!("changes have waited {waited:.0} s for a kube-proxy sync"),
        )
        .evidence("queued_unsynced_seconds", waited)
        .evidence("last_sync_age_seconds", k.last_sync_age_seconds)
        .evidence("warning_at_seconds", t.kube_proxy_queued_warning_seconds)
        .remediation(&[
            "kube-proxy queued rule changes but has not synced them: syncs are failing or blocked (xtables lock held by another process, a slow iptables-restore).",
            "Check kube-proxy's logs and kubeproxy_sync_proxy_rules_iptables_restore_failures_total; iptables_lock_held names another process holding /run/xtables.lock.",
        ]),
    )
}

pub fn restarted(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    kp(s)?;
    let k = derived(s);
    let recent = k
        .last_restart_mono
        .is_some_and(|r| s.collected_mono - r <= t.kube_proxy_restart_window_seconds);
    Some(
        Finding::new(
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

/// Why kube-proxy belongs on this node, each piece of evidence in words: a declared mode, its own
/// state in the data plane (canary chain, KUBE-SVC chains, its nftables table, IPVS virtual servers
/// with kube-ipvs0), or this agent having seen it answer. Empty when nothing says so (a Cilium
/// node, `--kube-proxy.mode none`): its absence is then no finding. (kubelet's KUBE-KUBELET-CANARY
/// is no evidence: kubelet makes it on nodes without kube-proxy too.)
pub fn expected_because(s: &Snapshot, t: &Thresholds) -> Vec<String> {
    use super::ProxyMode;
    let mut why = Vec::new();
    if t.proxy_mode == ProxyMode::NoKubeProxy {
        return why;
    }
    if t.proxy_mode.is_linux_mode() {
        why.push(format!("--kube-proxy.mode {} is declared", t.proxy_mode));
    }
    for r in s.facts.iptables.iter().flat_map(|f| &f.saves) {
        let at = format!("iptables {} {}", r.backend, r.family);
        // The canary is kube-proxy's own (KUBE-SVC chains without it are another backend's stale
        // copy: iptables_stale_kube_rules).
        if r.counts.proxy_canary {
            why.push(format!(
                "kube-proxy's KUBE-PROXY-CANARY chain is in {at} ({} KUBE-SVC chains)",
                r.counts.kube.svc
            ));
        }
    }
    for t in s.facts.nftables.iter().flat_map(|f| &f.tables) {
        why.push(format!(
            "kube-proxy's nftables table {} kube-proxy exists ({} service chains)",
            t.family, t.counts.service_chains
        ));
    }
    if let Some(ipvs) = &s.facts.ipvs {
        if ipvs.virtual_servers > 0 && ipvs.interface.as_ref().is_some_and(|i| i.exists) {
            why.push(format!(
                "{} IPVS virtual servers and kube-ipvs0 exist",
                ipvs.virtual_servers
            ));
        }
    }
    if let Some(seen) = s.derived.kube_proxy_presence.as_ref().and_then(|p| p.last_seen_seconds) {
        why.push(format!("this agent saw kube-proxy answer at {}", rfc3339(seen)));
    }
    why
}

/// Services whose rules kube-proxy left in the data plane, by where they are.
fn services_programmed(s: &Snapshot) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    for r in s.facts.iptables.iter().flat_map(|f| &f.saves) {
        if r.counts.kube.svc > 0 {
            m.insert(
                format!("iptables {} {} KUBE-SVC chains", r.backend, r.family),
                r.counts.kube.svc.into(),
            );
        }
    }
    for t in s.facts.nftables.iter().flat_map(|f| &f.tables) {
        m.insert(
            format!("nftables {} service chains", t.family),
            t.counts.service_chains.into(),
        );
    }
    if let Some(ipvs) = s.facts.ipvs.as_ref().filter(|i| i.virtual_servers > 0) {
        m.insert("IPVS virtual servers".into(), ipvs.virtual_servers.into());
    }
    m
}

/// The oldest time the rule counts were made at an unchanged nf_tables generation: the ruleset
/// has not changed since then at least (netlink counts only; legacy iptables has no generation).
fn ruleset_unchanged_since(s: &Snapshot) -> Option<f64> {
    let iptables = s
        .facts
        .iptables
        .iter()
        .flat_map(|f| &f.saves)
        .filter_map(|r| r.netlink.as_ref());
    let nftables = s
        .facts
        .nftables
        .iter()
        .flat_map(|f| &f.tables)
        .filter_map(|t| t.netlink.as_ref());
    iptables
        .chain(nftables)
        .map(|n| n.counted_at_seconds)
        .min_by(|a, b| a.total_cmp(b))
}

/// kube-proxy gone where it belongs: the probe found nothing on its ports and no process, for
/// longer than `--kube-proxy.down-grace`, while the evidence ([`expected_because`]) says this node
/// runs it. Its rules stay as it last wrote them: Services route to endpoints that may be gone,
/// and no change is applied until it is back. Info while within the grace (a restart); nothing at
/// all where nothing says kube-proxy belongs. A failed probe run says nothing either way.
pub fn down(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let outcome = s.probes.get(&ProbeName::KubeProxy)?;
    let why = expected_because(s, t);
    if why.is_empty() {
        return None;
    }
    let presence = s.derived.kube_proxy_presence.clone().unwrap_or_default();
    // A failed run is unknown: it neither starts an absence nor ends one (the verdict of the
    // last run that knew stays, rather than a false 0 for a probe that timed out once).
    if outcome.status == ProbeStatus::Failed && presence.absent_since_seconds.is_none() {
        return None;
    }
    let grace = t.kube_proxy_down_grace_seconds;
    if outcome.status == ProbeStatus::Ok {
        return Some(Finding::new(Severity::Ok, "kube-proxy is present").evidence("expected_because", why));
    }
    let since = presence.absent_since_seconds.unwrap_or(s.collected_at);
    // How long on the monotonic clock: a wall clock step neither hastens nor delays the verdict.
    let gone = presence
        .absent_since_mono
        .map_or(0.0, |m| (s.collected_mono - m).max(0.0));
    let services = services_programmed(s);
    let total: u64 = services.values().filter_map(|v| v.as_u64()).max().unwrap_or(0);
    let frozen = if total > 0 {
        format!("the rules of {total} services are frozen as it last wrote them")
    } else {
        "no Service is programmed on this node".to_string()
    };
    let (severity, summary) = if gone >= grace {
        (
            Severity::Critical,
            format!(
                "kube-proxy is down: nothing answers on its ports and no kube-proxy process for {gone:.0} s \
                 (grace {grace:.0} s), while {}; {frozen}",
                why[0]
            ),
        )
    } else {
        (
            Severity::Info,
            format!(
                "kube-proxy has not answered for {gone:.0} s (a restart?); down after {grace:.0} s, since {}",
                why[0]
            ),
        )
    };
    let node = &s.node;
    Some(
        Finding::new(severity, summary)
            .evidence("expected_because", why)
            .evidence("absent_since_timestamp_seconds", since)
            .evidence("absent_for_seconds", gone)
            .evidence("exited_timestamp_seconds", presence.exited_seconds)
            .evidence("exited_pid", presence.exited_pid)
            .evidence("exit_watch_unavailable", presence.exit_watch_unavailable.clone())
            .evidence("grace_seconds", grace)
            .evidence("last_seen_timestamp_seconds", presence.last_seen_seconds)
            .evidence("kube_proxy_last_sync_timestamp_seconds", presence.last_sync_seconds)
            .evidence("ruleset_unchanged_since_timestamp_seconds", ruleset_unchanged_since(s))
            .evidence("services_programmed", services)
            .evidence(
                if outcome.status == ProbeStatus::Failed { "latest_run_failed" } else { "probe_absent_because" },
                outcome.error.clone(),
            )
            .remediation_owned(vec![
                format!("Find kube-proxy's pod on this node and its state: kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide --field-selector spec.nodeName={node}"),
                "Then, with that pod's name: kubectl -n kube-system describe pod POD (Last State, Reason, Events) and kubectl -n kube-system logs POD --previous --tail=100 (the crashed container's last words).".to_string(),
                "CrashLoopBackOff causes: a bad kube-proxy ConfigMap (a YAML error, an unknown field, a mode this kernel cannot run: ipvs without its modules, nftables below kernel 5.13); OOMKilled (raise the DaemonSet's memory limit); 'Another app is currently holding the xtables lock'; an API server it cannot reach (its kubeconfig or certificates).".to_string(),
                format!("No pod at all: kubectl -n kube-system get ds kube-proxy (DESIRED against READY), and the node's taints and labels against the DaemonSet's tolerations and nodeSelector: kubectl describe node {node}"),
                "If the ConfigMap was changed: restore the backup taken before the change (the runbook's kubectl -n kube-system get configmap kube-proxy -o yaml > kube-proxy-config-backup-$(date +%Y%m%d).yaml) with kubectl apply -f kube-proxy-config-backup-YYYYMMDD.yaml, then kubectl -n kube-system rollout restart daemonset kube-proxy and kubectl -n kube-system rollout status daemonset kube-proxy.".to_string(),
                "Meanwhile do not flush the rules: Services keep working to the endpoints that still exist; only changes are not applied.".to_string(),
                "If kube-proxy was removed from this node on purpose (a CNI replaces it): remove its state once (kube-proxy --cleanup, from the kube-proxy image, on the node), or declare --kube-proxy.mode none so that what is left is reported as proxy_mode_leftovers.".to_string(),
            ]),
    )
}

/// How long `check` should wait before reading kube-proxy again: while kube-proxy is gone where it
/// belongs but within the grace, the verdict depends on whether it comes back.
pub fn down_recheck(s: &Snapshot, t: &Thresholds, m: &ModeDecision) -> Option<(ProbeName, f64)> {
    let f = down(s, t, m)?;
    if f.severity != Severity::Info {
        return None;
    }
    let gone = f.evidence["absent_for_seconds"].as_f64()?;
    Some((ProbeName::KubeProxy, (t.kube_proxy_down_grace_seconds - gone).max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::healthy;
    use super::*;
    use crate::evaluate::test_support::judge;
    use crate::probe::kube_proxy::{HealthzFacts, Identity, ProcessCandidate, ProcessFacts};

    fn with(k: KubeProxyFacts) -> Snapshot {
        let mut s = healthy();
        (s.collected_at, s.collected_mono) = (10_000.0, 10_000.0);
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
            last_restart_mono: Some(9_900.0),
            queued_unsynced_seconds: Some(120.0),
            ..Default::default()
        });
        assert_eq!(judge(unhealthy, &s, &t).unwrap().severity, Severity::Critical);
        assert_eq!(judge(restarted, &s, &t).unwrap().severity, Severity::Warning);
        assert_eq!(judge(restarted, &s, &t).unwrap().evidence["restarts"], 2);
        // The restart window is on the monotonic clock: a wall clock set a day ahead since the
        // restart changes the timestamp shown, not whether the restart is recent.
        let mut stepped = s.clone();
        stepped.collected_at += 86_400.0;
        let f = judge(restarted, &stepped, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert_eq!(f.evidence["last_restart_timestamp_seconds"], 9_900.0);
        stepped.collected_mono += t.kube_proxy_restart_window_seconds;
        assert_eq!(judge(restarted, &stepped, &t).unwrap().severity, Severity::Ok);
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

    #[test]
    fn a_draining_node_is_info_never_unhealthy_unless_livez_says_so() {
        let t = crate::config::default_thresholds();
        let h503 = |eligible: Option<bool>, livez: Option<u16>| {
            with(KubeProxyFacts {
                metrics_up: true,
                healthz: Some(HealthzFacts {
                    status_code: 503,
                    node_eligible: eligible,
                    livez_status: livez,
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let sev = |s: &Snapshot| {
            (
                judge(unhealthy, s, &t).unwrap().severity,
                judge(node_draining, s, &t).unwrap().severity,
            )
        };
        // kube-proxy's own answers while the node is tainted ToBeDeletedByClusterAutoscaler.
        assert_eq!(sev(&h503(Some(false), Some(200))), (Severity::Ok, Severity::Info));
        // No /livez (404: not served), nodeEligible alone says why.
        assert_eq!(sev(&h503(Some(false), Some(404))), (Severity::Ok, Severity::Info));
        assert_eq!(sev(&h503(Some(false), None)), (Severity::Ok, Severity::Info));
        // /livez 200 alone: /healthz's 503 is the node's, not the proxier's.
        assert_eq!(sev(&h503(None, Some(200))), (Severity::Ok, Severity::Info));
        // Draining and late rules: both.
        assert_eq!(sev(&h503(Some(false), Some(503))), (Severity::Critical, Severity::Info));
        // Eligible, or an older kube-proxy: as before.
        assert_eq!(sev(&h503(Some(true), Some(503))), (Severity::Critical, Severity::Ok));
        assert_eq!(sev(&h503(Some(true), Some(404))), (Severity::Critical, Severity::Ok));
        assert_eq!(sev(&h503(None, None)), (Severity::Critical, Severity::Ok));
        let f = judge(node_draining, &h503(Some(false), Some(200)), &t).unwrap();
        assert_eq!(f.evidence["node_eligible"], false);
        assert_eq!(f.evidence["livez_status"], 200);
        assert!(f.summary.contains("draining"), "{}", f.summary);
        // A healthy kube-proxy, even one whose body says nodeEligible false (200 cannot come
        // with it from kube-proxy; an answer that does is not a drain).
        let fine = with(KubeProxyFacts {
            healthz: Some(HealthzFacts {
                status_code: 200,
                node_eligible: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(sev(&fine), (Severity::Ok, Severity::Ok));
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

    fn probed(s: &mut Snapshot, status: crate::snapshot::ProbeStatus) {
        s.probes.insert(
            ProbeName::KubeProxy,
            crate::snapshot::ProbeOutcome {
                status,
                duration_seconds: 0.01,
                error: None,
                last_run_seconds: s.collected_at,
                last_success_seconds: Some(s.collected_at),
                reading_seconds: None,
            },
        );
    }

    /// A node whose data plane holds kube-proxy's iptables state (its canary, 50 KUBE-SVC chains),
    /// with the kube-proxy probe finding nothing since `since`.
    fn kube_proxy_rules_absent_since(since: f64) -> Snapshot {
        use crate::probe::iptables::{IptablesFacts, SaveRun};
        let mut s = healthy();
        (s.collected_at, s.collected_mono) = (10_000.0, 10_000.0);
        let mut run = SaveRun {
            backend: "nft".into(),
            family: "ipv4".into(),
            ..Default::default()
        };
        run.counts.proxy_canary = true;
        run.counts.kube.svc = 50;
        s.facts.iptables = Some(IptablesFacts {
            saves: vec![run],
            ..Default::default()
        });
        probed(&mut s, ProbeStatus::Absent);
        s.derived.kube_proxy_presence = Some(crate::history::kube_proxy::KubeProxyPresence {
            absent_since_seconds: Some(since),
            absent_since_mono: Some(since),
            last_seen_seconds: Some(since - 15.0),
            last_sync_seconds: Some(since - 20.0),
            ..Default::default()
        });
        s
    }

    #[test]
    fn kube_proxy_down_after_the_grace_where_its_rules_are() {
        let t = crate::config::default_thresholds();
        assert_eq!(t.kube_proxy_down_grace_seconds, 30.0);
        // Gone 10 s: a restart, maybe; info, and `check` waits the 20 s left.
        let s = kube_proxy_rules_absent_since(9_990.0);
        let f = judge(down, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info, "{f:#?}");
        assert_eq!(
            down_recheck(&s, &t, &crate::evaluate::effective_mode(&s, &t)),
            Some((ProbeName::KubeProxy, 20.0))
        );
        // Gone 30 s: down, with why and what is frozen.
        let s = kube_proxy_rules_absent_since(9_970.0);
        let f = judge(down, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical, "{f:#?}");
        assert!(f.summary.contains("50 services"), "{}", f.summary);
        let why = f.evidence["expected_because"].as_array().unwrap();
        assert!(why[0].as_str().unwrap().contains("KUBE-PROXY-CANARY"), "{why:?}");
        assert!(why
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("this agent saw kube-proxy")));
        assert_eq!(f.evidence["kube_proxy_last_sync_timestamp_seconds"], 9_950.0);
        assert_eq!(
            f.evidence["services_programmed"]["iptables nft ipv4 KUBE-SVC chains"],
            50
        );
        assert!(f.remediation[0].contains("spec.nodeName=node-a"), "{:?}", f.remediation);
        assert_eq!(down_recheck(&s, &t, &crate::evaluate::effective_mode(&s, &t)), None);
        // A failed run after the absence keeps the verdict (no false 0); without a known
        // absence it says nothing: unknown is not absent.
        let mut failed = s.clone();
        probed(&mut failed, ProbeStatus::Failed);
        assert_eq!(judge(down, &failed, &t).unwrap().severity, Severity::Critical);
        failed
            .derived
            .kube_proxy_presence
            .as_mut()
            .unwrap()
            .absent_since_seconds = None;
        assert_eq!(judge(down, &failed, &t), None);
        // kube-proxy present: ok.
        let mut back = s.clone();
        probed(&mut back, ProbeStatus::Ok);
        assert_eq!(judge(down, &back, &t).unwrap().severity, Severity::Ok);
    }

    #[test]
    fn no_evidence_no_kube_proxy_down() {
        let t = crate::config::default_thresholds();
        // A Cilium node: nothing of kube-proxy in the data plane, nothing declared, never seen.
        let mut s = healthy();
        (s.collected_at, s.collected_mono) = (10_000.0, 10_000.0);
        probed(&mut s, ProbeStatus::Absent);
        s.derived.kube_proxy_presence = Some(crate::history::kube_proxy::KubeProxyPresence {
            absent_since_seconds: Some(1_000.0),
            absent_since_mono: Some(1_000.0),
            ..Default::default()
        });
        assert_eq!(judge(down, &s, &t), None);
        // Svc chains without kube-proxy's canary (another backend's stale copy): not evidence.
        let mut stale = kube_proxy_rules_absent_since(1_000.0);
        stale.derived.kube_proxy_presence = s.derived.kube_proxy_presence.clone();
        stale.facts.iptables.as_mut().unwrap().saves[0].counts.proxy_canary = false;
        assert_eq!(judge(down, &stale, &t), None);
        // A declared mode is evidence on its own.
        let declared = Thresholds {
            proxy_mode: crate::evaluate::ProxyMode::Iptables,
            ..t.clone()
        };
        let f = judge(down, &s, &declared).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            f.evidence["expected_because"][0],
            "--kube-proxy.mode iptables is declared"
        );
        // Removed on purpose (--kube-proxy.mode none): its rules are leftovers, not a kube-proxy down.
        let none = Thresholds {
            proxy_mode: crate::evaluate::ProxyMode::NoKubeProxy,
            ..t.clone()
        };
        let rules = kube_proxy_rules_absent_since(1_000.0);
        assert_eq!(judge(down, &rules, &none), None);
        let left = judge(crate::evaluate::mode::leftovers, &rules, &none).unwrap();
        assert_eq!(left.severity, Severity::Warning, "{left:#?}");
        assert_eq!(judge(crate::evaluate::mode::mismatch, &rules, &none), None);
    }

    #[test]
    fn its_nftables_table_and_ipvs_state_are_evidence_too() {
        use crate::probe::ipvs::{IpvsFacts, IpvsInterface};
        use crate::probe::nftables::{NftTable, NftablesFacts};
        let t = crate::config::default_thresholds();
        let mut s = kube_proxy_rules_absent_since(1_000.0);
        s.facts.iptables = None;
        s.derived.kube_proxy_presence = Some(crate::history::kube_proxy::KubeProxyPresence {
            absent_since_seconds: Some(1_000.0),
            absent_since_mono: Some(1_000.0),
            ..Default::default()
        });
        assert_eq!(judge(down, &s, &t), None, "nothing left to say kube-proxy belongs");
        let mut nft = s.clone();
        let mut table = NftTable {
            family: "ip".into(),
            ..Default::default()
        };
        table.counts.service_chains = 7;
        nft.facts.nftables = Some(NftablesFacts { tables: vec![table] });
        let f = judge(down, &nft, &t).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            f.evidence["expected_because"][0],
            "kube-proxy's nftables table ip kube-proxy exists (7 service chains)"
        );
        assert_eq!(f.evidence["services_programmed"]["nftables ip service chains"], 7);
        // IPVS virtual servers count only with kube-ipvs0 (keepalived's alone are not kube-proxy's).
        let mut ipvs = s.clone();
        ipvs.facts.ipvs = Some(IpvsFacts {
            virtual_servers: 4,
            ..Default::default()
        });
        assert_eq!(judge(down, &ipvs, &t), None);
        ipvs.facts.ipvs.as_mut().unwrap().interface = Some(IpvsInterface {
            exists: true,
            addresses: vec!["10.96.0.1".into()],
        });
        assert_eq!(judge(down, &ipvs, &t).unwrap().severity, Severity::Critical);
    }
}
