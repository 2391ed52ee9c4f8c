//! The limits the checks compare facts against, each written once: its field here is its
//! flag (name, environment variable, default and help, which `--help` and docs/reference.md
//! show), and the checks read the field. As node_exporter's collectors declare their flags
//! in their own file, a threshold is declared where evaluation reads it; `Common` flattens
//! this struct into `serve`, `check` and `baseline save`, and `config::default_thresholds`
//! parses an empty command line for the defaults. Durations are held in seconds (each flag
//! keeps the value name it had before, its old field's).

use crate::duration::parse_duration;
use crate::probe::kube_proxy::proxy_mode::ProxyMode;

#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Thresholds {
    /// The mode kube-proxy is meant to run in: auto, iptables, ipvs, nftables or none.
    ///
    /// none: no kube-proxy on this node, on purpose (its state in the data plane is left over, never a kube-proxy down). Judges the node when kube-proxy and the data plane show no mode; a different mode running is a critical finding; a declared mode also says kube-proxy belongs here (kube_proxy_down).
    #[arg(long = "kube-proxy.mode", env = "PROXYWATCH_KUBE_PROXY_MODE", default_value = "auto", value_parser = mode, value_name = "KUBE_PROXY_MODE")]
    pub proxy_mode: ProxyMode,

    /// conntrack fill ratio (entries / max) that raises a warning.
    #[arg(long = "conntrack.fill-warning", env = "PROXYWATCH_CONNTRACK_FILL_WARNING", default_value_t = 0.80, value_parser = ratio)]
    pub conntrack_fill_warning: f64,

    /// conntrack fill ratio that raises a critical finding.
    #[arg(long = "conntrack.fill-critical", env = "PROXYWATCH_CONNTRACK_FILL_CRITICAL", default_value_t = 0.95, value_parser = ratio)]
    pub conntrack_fill_critical: f64,

    /// Projected time until the conntrack table is full (at its current growth) that raises a warning.
    #[arg(long = "conntrack.time-to-full-warning", env = "PROXYWATCH_CONNTRACK_TIME_TO_FULL_WARNING", default_value = "1h", value_parser = seconds, value_name = "CONNTRACK_TIME_TO_FULL_WARNING")]
    pub conntrack_time_to_full_warning_seconds: f64,

    /// Projected time until the conntrack table is full that raises a critical finding.
    #[arg(long = "conntrack.time-to-full-critical", env = "PROXYWATCH_CONNTRACK_TIME_TO_FULL_CRITICAL", default_value = "10m", value_parser = seconds, value_name = "CONNTRACK_TIME_TO_FULL_CRITICAL")]
    pub conntrack_time_to_full_critical_seconds: f64,

    /// How long TCP and SCTP entries to an endpoint no longer in the service's endpoints may drain (a terminating pod finishing its connections; kube-proxy never deletes them) before conntrack_draining_to_removed_endpoints is a warning; info before. Well past the default terminationGracePeriodSeconds (30 s).
    #[arg(long = "conntrack-stale.drain-window", env = "PROXYWATCH_CONNTRACK_STALE_DRAIN_WINDOW", default_value = "5m", value_parser = seconds, value_name = "CONNTRACK_STALE_DRAIN_WINDOW")]
    pub conntrack_drain_window_seconds: f64,

    /// Translated source ports in use / ports the rule allows, per (translated source, destination, port, protocol), that raises a warning (critical when full).
    #[arg(long = "conntrack.snat-fill-warning", env = "PROXYWATCH_CONNTRACK_SNAT_FILL_WARNING", default_value_t = 0.80, value_parser = ratio, value_name = "CONNTRACK_SNAT_FILL_WARNING")]
    pub snat_fill_warning: f64,

    /// Neighbour table entries / gc_thresh3 that raises a warning.
    #[arg(long = "neighbour-tables.fill-warning", env = "PROXYWATCH_NEIGHBOUR_TABLES_FILL_WARNING", default_value_t = 0.80, value_parser = ratio, value_name = "NEIGHBOUR_TABLES_FILL_WARNING")]
    pub neighbour_table_fill_warning: f64,

    /// A service_traffic try's connect time (DNS over UDP: answer time) that raises service_connect_slow (the runbook: above 100 ms, look at kube-proxy's rule programming).
    #[arg(long = "service-traffic.slow", env = "PROXYWATCH_SERVICE_TRAFFIC_SLOW", default_value = "100ms", value_parser = seconds, value_name = "SERVICE_TRAFFIC_SLOW")]
    pub service_connect_slow_seconds: f64,

    /// How long another process than kube-proxy may hold the xtables lock, while kube-proxy's syncs fail, lag or wait or a process waits for the lock, before iptables_lock_held is a warning: kube-proxy's iptables-restore waits 5 s for it (-w 5, kubernetes pkg/util/iptables WaitSecondsValue).
    #[arg(long = "xtables-lock.held-warning", env = "PROXYWATCH_XTABLES_LOCK_HELD_WARNING", default_value = "5s", value_parser = seconds, value_name = "XTABLES_LOCK_HELD_WARNING")]
    pub xtables_lock_held_warning_seconds: f64,

    /// How long a TCP or firewall-mark IPVS real server may stand at weight 0 with active connections before ipvs_real_servers_lingering is a warning (kube-proxy keeps such a real server until its connections are gone); UDP and SCTP ones, and ones without active connections, are info past it.
    #[arg(long = "ipvs.weight-zero-warning", env = "PROXYWATCH_IPVS_WEIGHT_ZERO_WARNING", default_value = "30m", value_parser = seconds, value_name = "IPVS_WEIGHT_ZERO_WARNING")]
    pub ipvs_weight_zero_warning_seconds: f64,

    /// Rules in one nat table that raise a warning.
    #[arg(
        long = "iptables.rules-warning",
        env = "PROXYWATCH_IPTABLES_RULES_WARNING",
        default_value_t = 20_000
    )]
    pub iptables_rules_warning: u64,

    /// Rules in one nat table that raise a critical finding.
    #[arg(
        long = "iptables.rules-critical",
        env = "PROXYWATCH_IPTABLES_RULES_CRITICAL",
        default_value_t = 100_000
    )]
    pub iptables_rules_critical: u64,

    /// iptables-save wall time that raises a warning (kube-proxy's sync does the same work).
    #[arg(long = "iptables.save-warning", env = "PROXYWATCH_IPTABLES_SAVE_WARNING", default_value = "1s", value_parser = seconds, value_name = "IPTABLES_SAVE_WARNING")]
    pub iptables_save_warning_seconds: f64,

    /// iptables-save wall time that raises a critical finding.
    #[arg(long = "iptables.save-critical", env = "PROXYWATCH_IPTABLES_SAVE_CRITICAL", default_value = "5s", value_parser = seconds, value_name = "IPTABLES_SAVE_CRITICAL")]
    pub iptables_save_critical_seconds: f64,

    /// kube-proxy sync p99 that raises a warning (the runbook: > 1 s means rule churn).
    #[arg(long = "kube-proxy.sync-warning", env = "PROXYWATCH_KUBE_PROXY_SYNC_WARNING", default_value = "1s", value_parser = seconds, value_name = "KUBE_PROXY_SYNC_WARNING")]
    pub kube_proxy_sync_warning_seconds: f64,

    /// kube-proxy sync p99 that raises a critical finding (the runbook: > 5 s after scaling).
    #[arg(long = "kube-proxy.sync-critical", env = "PROXYWATCH_KUBE_PROXY_SYNC_CRITICAL", default_value = "5s", value_parser = seconds, value_name = "KUBE_PROXY_SYNC_CRITICAL")]
    pub kube_proxy_sync_critical_seconds: f64,

    /// Network programming p99 that raises a warning.
    #[arg(long = "kube-proxy.programming-warning", env = "PROXYWATCH_KUBE_PROXY_PROGRAMMING_WARNING", default_value = "1s", value_parser = seconds, value_name = "KUBE_PROXY_PROGRAMMING_WARNING")]
    pub kube_proxy_programming_warning_seconds: f64,

    /// Network programming p99 that raises a critical finding.
    #[arg(long = "kube-proxy.programming-critical", env = "PROXYWATCH_KUBE_PROXY_PROGRAMMING_CRITICAL", default_value = "5s", value_parser = seconds, value_name = "KUBE_PROXY_PROGRAMMING_CRITICAL")]
    pub kube_proxy_programming_critical_seconds: f64,

    /// How long changes may wait queued without a sync before a warning.
    #[arg(long = "kube-proxy.queued-warning", env = "PROXYWATCH_KUBE_PROXY_QUEUED_WARNING", default_value = "60s", value_parser = seconds, value_name = "KUBE_PROXY_QUEUED_WARNING")]
    pub kube_proxy_queued_warning_seconds: f64,

    /// While kube-proxy's syncs keep failing, its last successful sync older than this is critical.
    #[arg(long = "kube-proxy.sync-failing-critical", env = "PROXYWATCH_KUBE_PROXY_SYNC_FAILING_CRITICAL", default_value = "5m", value_parser = seconds, value_name = "KUBE_PROXY_SYNC_FAILING_CRITICAL")]
    pub kube_proxy_sync_failing_critical_seconds: f64,

    /// A kube-proxy restart within this long raises a warning.
    #[arg(long = "kube-proxy.restart-window", env = "PROXYWATCH_KUBE_PROXY_RESTART_WINDOW", default_value = "15m", value_parser = seconds, value_name = "KUBE_PROXY_RESTART_WINDOW")]
    pub kube_proxy_restart_window_seconds: f64,

    /// How long kube-proxy may be gone before kube_proxy_down is critical; `check` waits that long (0s: not at all).
    ///
    /// Gone: nothing on its ports, no process, where the evidence says it belongs. A restart shorter than this is not down (kubelet restarts a crashed container after 10 s, then 20 s, 40 s...). `check` (and `baseline save`) wait up to this long, re-reading kube-proxy, before they say down, and say so on stderr first.
    #[arg(long = "kube-proxy.down-grace", env = "PROXYWATCH_KUBE_PROXY_DOWN_GRACE", default_value = "30s", value_parser = seconds_or_zero, value_name = "KUBE_PROXY_DOWN_GRACE")]
    pub kube_proxy_down_grace_seconds: f64,

    /// How long rules_changed_by_other_process stands after another process's change when kube-proxy does not write its rules back (a flush that leaves KUBE-PROXY-CANARY in place never makes it resync).
    #[arg(long = "nftables-watch.window", env = "PROXYWATCH_NFTABLES_WATCH_WINDOW", default_value = "15m", value_parser = seconds, value_name = "NFTABLES_WATCH_WINDOW")]
    pub rules_changed_window_seconds: f64,
}

/// A ratio between 0 and 1.
fn ratio(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a ratio between 0 and 1"))
    }
}

/// A duration ([`parse_duration`]), in seconds.
fn seconds(s: &str) -> Result<f64, String> {
    parse_duration(s).map(|d| d.as_secs_f64())
}

/// A duration in seconds, or `0s` (`--kube-proxy.down-grace 0s`: no grace at all).
fn seconds_or_zero(s: &str) -> Result<f64, String> {
    match s.trim() {
        "0" | "0s" | "0ms" => Ok(0.0),
        _ => seconds(s),
    }
}

fn mode(s: &str) -> Result<ProxyMode, String> {
    s.parse()
}
