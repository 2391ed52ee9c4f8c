//! Command line: every flag also read from a `PROXYWATCH_*` environment variable.
//! How a value is written (durations, ratios, modes) and read is `config/values.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::evaluate::Thresholds;
use crate::probe::ProbeName;
use crate::scheduler::Schedule;

mod commands;
mod probe_flags;
pub use commands::{BaselineAction, BaselineArgs, BaselineSaveArgs, CompareArgs, CompareFormat, NpdArgs};
mod values;
pub use probe_flags::ProbeSchedules;
pub use values::{parse_duration, value_error_origin, Every, DURATION_SYNTAX};
use values::{parse_interval_or_never, parse_listen, parse_process_name, parse_severity, DURATIONS_HELP};

/// Flags with a dot in their name that `-h` shows; `-h` also shows every flag without one and
/// every positional argument. `--help` shows them all.
const SHORT_HELP: &[&str] = &[
    "kube-proxy.mode",
    "kube-proxy.metrics-url",
    "kube-proxy.healthz-url",
    "kube-proxy.down-grace",
    "web.bearer-token-file",
    "log.level",
];

/// Flags without a dot that only `--help` shows.
const LONG_HELP_ONLY: &[&str] = &["host-cgroup-root"];

/// `Common`'s flags without a dot (`compare` and `npd` leave them out of `-h`).
const COMMON_UNDOTTED: &[&str] = &["host-root", "node-name"];

/// The end of each command's `-h`.
const SHORT_HELP_END: &str =
    "These are the flags most often set; --help lists all of them, with their environment variables \
                              and how durations are written.";

/// The width help is wrapped to when stdout is not a terminal (`COLUMNS` if set).
pub const HELP_WIDTH: usize = 80;

/// The command line as `main` parses it: `Cli`'s, with `-h` short and `--help` long, wrapped to
/// `width` (the terminal's when `None`), and durations that may start with `-` (so that `-1s`
/// reaches the duration parser and its message, instead of passing for a flag).
pub fn command(width: Option<usize>) -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let cmd = match width {
        Some(w) => cmd.term_width(w),
        None => cmd,
    };
    tune(cmd)
}

fn tune(cmd: clap::Command) -> clap::Command {
    use std::any::TypeId;
    // `compare` and `npd` mostly read what an agent already found: their `-h` leaves out the
    // probes' flags (`--help` has them).
    let own_only = matches!(cmd.get_name(), "compare" | "npd");
    cmd.mut_args(|a| {
        let parser = a.get_value_parser().type_id();
        // Durations, intervals and the thresholds' numbers (ratios, seconds): a negative value
        // reaches the value's parser, whose message says what is expected.
        let a =
            if parser == TypeId::of::<Duration>() || parser == TypeId::of::<Every>() || parser == TypeId::of::<f64>() {
                a.allow_hyphen_values(true)
            } else {
                a
            };
        match a.get_long() {
            Some(long)
                if (long.contains('.') && (own_only || !SHORT_HELP.contains(&long)))
                    || LONG_HELP_ONLY.contains(&long)
                    || (own_only && COMMON_UNDOTTED.contains(&long)) =>
            {
                a.hide_short_help(true)
            }
            _ => a,
        }
    })
    .mut_subcommands(tune)
}

/// Parses the process' command line with [`command`].
pub fn parse(width: Option<usize>) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cmd = command(width);
    let matches = cmd.try_get_matches_from_mut(std::env::args_os())?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

#[derive(Debug, Parser)]
#[command(
    name = "proxywatch",
    version,
    about = "Tells whether this node's kube-proxy data plane is healthy.",
    long_about = "Tells whether this node's kube-proxy data plane is healthy: kernel modules, conntrack, sysctls.\n\
                  `serve` runs the probes in the background and serves /metrics, /snapshot, /findings, /healthz, /readyz.\n\
                  `check` runs every probe once and prints the findings; exit code 0 ok, 1 warning, 2 critical, 3 the agent could not run.\n\
                  `baseline save FILE` records the snapshot before a change; `compare FILE` tells what changed since, \
                  exit code 0 same or better, 1 worse, 3 could not run.\n\
                  `npd` is a node-problem-detector custom plugin: one line, exit 0 ok, 1 problem, 2 cannot tell."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run probes in the background and serve HTTP.
    #[command(after_help = SHORT_HELP_END, after_long_help = DURATIONS_HELP)]
    Serve(ServeArgs),
    /// Run every probe once, print the findings, exit with a Nagios-style code.
    #[command(after_help = SHORT_HELP_END, after_long_help = DURATIONS_HELP)]
    Check(CheckArgs),
    /// Record this node's snapshot before a change (`baseline save FILE`).
    Baseline(BaselineArgs),
    /// Compare a saved baseline with the node now, another saved snapshot, or a running agent.
    ///
    /// Prints each fact's before, after and change, the findings that appeared or resolved, and a
    /// verdict. Exit code: 0 same or better, 1 worse, 3 could not run (unreadable file, not a snapshot...).
    #[command(after_help = SHORT_HELP_END, after_long_help = DURATIONS_HELP)]
    Compare(CompareArgs),
    /// A node-problem-detector custom plugin: one line on stdout, exit 0 ok, 1 problem, 2 cannot tell.
    ///
    /// Reads a running agent's /findings (--from) or, without it, runs every probe once. Exit code
    /// 1 when a selected finding is at or above --severity, 2 when the agent cannot tell (not
    /// answering in --timeout, an error status, an unreadable answer, a failed probe of the area).
    Npd(NpdArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on: IP:PORT, :PORT (every IPv4 address) or localhost:PORT.
    ///
    /// The DaemonSet passes 0.0.0.0:9877.
    #[arg(long, env = "PROXYWATCH_LISTEN", default_value = "127.0.0.1:9877", value_name = "ADDRESS", value_parser = parse_listen)]
    pub listen: SocketAddr,

    /// Time a client has to send its request headers; slower clients are cut off.
    #[arg(long = "web.header-read-timeout", env = "PROXYWATCH_WEB_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,

    /// Deadline of one request.
    #[arg(long = "web.request-timeout", env = "PROXYWATCH_WEB_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Requests served at once; more are answered 503 at once instead of queueing.
    #[arg(
        long = "web.max-concurrent",
        env = "PROXYWATCH_WEB_MAX_CONCURRENT",
        default_value_t = 64
    )]
    pub max_concurrent: usize,

    /// Open connections at once; beyond it new connections may only ask /healthz (see
    /// --web.reserved-health-connections) or are closed on accept.
    #[arg(
        long = "web.max-connections",
        env = "PROXYWATCH_WEB_MAX_CONNECTIONS",
        default_value_t = 256
    )]
    pub max_connections: usize,

    /// Open connections from one client address (an IPv6 client: its /64) at once; beyond it
    /// the client's new connections may only ask /healthz or are closed on accept.
    #[arg(
        long = "web.max-connections-per-address",
        env = "PROXYWATCH_WEB_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 128
    )]
    pub max_connections_per_address: usize,

    /// Connections held back for the kubelet's probes, used only when the caps above are
    /// reached: each serves one /healthz request (anything else gets 503) and lasts at most
    /// --web.header-read-timeout; at most 2 per client address.
    #[arg(
        long = "web.reserved-health-connections",
        env = "PROXYWATCH_WEB_RESERVED_HEALTH_CONNECTIONS",
        default_value_t = 8
    )]
    pub reserved_health_connections: usize,

    /// How long writing a response may make no progress (a client that stopped reading) before the connection is cut.
    #[arg(long = "web.write-stall-timeout", env = "PROXYWATCH_WEB_WRITE_STALL_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_stall_timeout: Duration,

    /// Age after which a connection's next response says `Connection: close` and is its last (cut if still open --web.header-read-timeout + --web.request-timeout later).
    #[arg(long = "web.max-connection-age", env = "PROXYWATCH_WEB_MAX_CONNECTION_AGE", default_value = "5m", value_parser = parse_duration)]
    pub max_connection_age: Duration,

    /// Host names accepted in the Host header besides IP addresses, localhost and the node name
    /// (comma-separated); other names get 421, against DNS rebinding.
    #[arg(
        long = "web.allowed-hosts",
        env = "PROXYWATCH_WEB_ALLOWED_HOSTS",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,

    /// File holding a bearer token required on every endpoint but /healthz.
    ///
    /// Re-read when it changes (off by default; kube-rbac-proxy in front is the usual way).
    #[arg(
        long = "web.bearer-token-file",
        env = "PROXYWATCH_WEB_BEARER_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub bearer_token_file: Option<std::path::PathBuf>,

    /// Shortest time between two returns of freed memory to the kernel (malloc_trim, after a publication); 0 = never.
    #[arg(long = "memory.trim-interval", env = "PROXYWATCH_MEMORY_TRIM_INTERVAL", default_value = "5s", value_parser = parse_interval_or_never)]
    pub trim_interval: Every,

    #[command(flatten)]
    pub common: Common,
}

impl CompareArgs {
    /// The saved snapshot to compare with: AFTER or --against.
    pub fn after_file(&self) -> Option<&PathBuf> {
        self.after.as_ref().or(self.against.as_ref())
    }
}

impl ServeArgs {
    /// The listener's limits; `node` is the node name, accepted in the Host header.
    pub fn limits(&self, node: &str) -> Result<crate::serve::server::Limits, crate::serve::token::TokenError> {
        let bearer_token = match &self.bearer_token_file {
            None => None,
            Some(path) => Some(crate::serve::token::BearerToken::from_file(
                path,
                crate::serve::token::RECHECK,
            )?),
        };
        let names = std::iter::once(node).chain(self.allowed_hosts.iter().map(String::as_str));
        Ok(crate::serve::server::Limits {
            header_read_timeout: self.header_read_timeout,
            request_timeout: self.request_timeout,
            max_concurrent: self.max_concurrent,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            reserved_health_connections: self.reserved_health_connections,
            write_stall_timeout: self.write_stall_timeout,
            max_connection_age: self.max_connection_age,
            bearer_token,
            allowed_hosts: crate::serve::guard::AllowedHosts::new(names),
            ..Default::default()
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For a person, 80 columns.
    Text,
    /// Exactly the /snapshot document.
    Json,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Output format.
    #[arg(long, env = "PROXYWATCH_FORMAT", value_enum, default_value = "text")]
    pub format: Format,

    /// Also try Service traffic once (the one probe that sends packets).
    ///
    /// The service_traffic probe: a TCP connect to default/kubernetes, a DNS query to kube-dns, each --service-traffic.target; `compare` then shows connect times.
    #[arg(long = "try-services")]
    pub try_services: bool,

    #[command(flatten)]
    pub common: Common,
}

/// Options shared by `serve` and `check`.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Root of the node's filesystem: files are read from DIR/proc, DIR/sys, DIR/lib/modules.
    #[arg(long, env = "PROXYWATCH_HOST_ROOT", default_value = "/", value_name = "DIR")]
    pub host_root: PathBuf,

    /// The node's cgroup filesystem, where kube-proxy's memory and CPU limits and throttling are read (default: sys/fs/cgroup under --host-root; the DaemonSet mounts the host's read-only at /host/sys/fs/cgroup).
    #[arg(long = "host-cgroup-root", env = "PROXYWATCH_HOST_CGROUP_ROOT", value_name = "DIR")]
    pub host_cgroup_root: Option<PathBuf>,

    /// Node name in reports (default: the host's hostname).
    #[arg(long, env = "PROXYWATCH_NODE_NAME")]
    pub node_name: Option<String>,

    /// The limits the checks judge by: every threshold flag, from `crate::evaluate::Thresholds`.
    #[command(flatten)]
    pub thresholds: Thresholds,

    /// How far back conntrack counter increases (drop, early_drop, insert_failed) count toward findings.
    #[arg(long = "conntrack.window", env = "PROXYWATCH_CONNTRACK_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub conntrack_window: Duration,

    /// How far back the conntrack growth trend (and time-to-full) is fitted; a robust fit, so one spike does not count.
    #[arg(long = "conntrack.trend-window", env = "PROXYWATCH_CONNTRACK_TREND_WINDOW", default_value = "15m", value_parser = parse_duration)]
    pub conntrack_trend_window: Duration,

    /// Group the source-NATed conntrack entries (SNAT ports in use) and read the MASQUERADE/SNAT rules in the conntrack_stale probe's run; false: the stale check's dumps filter on DST_NAT in the kernel again.
    #[arg(long = "conntrack.snat", env = "PROXYWATCH_CONNTRACK_SNAT", default_value_t = true, action = clap::ArgAction::Set)]
    pub conntrack_snat: bool,

    /// How far back a rise of a neighbour table's table_fulls (neighbours refused) counts as refusing now.
    #[arg(long = "neighbour-tables.window", env = "PROXYWATCH_NEIGHBOUR_TABLES_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub neighbour_tables_window: Duration,

    /// How far back the reverse-path filter's drops (IPReversePathFilter) count for rp_filter_drops' rate.
    #[arg(long = "rp-filter.window", env = "PROXYWATCH_RP_FILTER_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub rp_filter_window: Duration,

    /// A Service the service_traffic probe also tries, as namespace/name:port (a TCP connect to its ClusterIP, found in kube-proxy's rules, and to its NodePort on the node's own address where it has one); repeatable, at most 20.
    #[arg(
        long = "service-traffic.target",
        env = "PROXYWATCH_SERVICE_TRAFFIC_TARGET",
        value_delimiter = ',',
        value_name = "NS/NAME:PORT"
    )]
    pub service_traffic_target: Vec<crate::probe::service_traffic::Named>,

    /// A Service's ClusterIP for the service_traffic probe where kube-proxy's rules carry no Service names (IPVS), as namespace/name=IP; tried only where IPVS has a virtual server at it. Without one, default/kubernetes is taken from KUBERNETES_SERVICE_HOST and kube-system/kube-dns from the first nameserver of the agent's own /etc/resolv.conf (a pod's, with dnsPolicy ClusterFirstWithHostNet); repeatable.
    #[arg(
        long = "service-traffic.address",
        env = "PROXYWATCH_SERVICE_TRAFFIC_ADDRESS",
        value_delimiter = ',',
        value_name = "NS/NAME=IP"
    )]
    pub service_traffic_address: Vec<crate::probe::service_traffic::Address>,

    /// The cluster's DNS domain: the service_traffic probe asks kube-dns for kubernetes.default.svc.<this>.
    #[arg(
        long = "service-traffic.cluster-domain",
        env = "PROXYWATCH_SERVICE_TRAFFIC_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    pub service_traffic_cluster_domain: String,

    /// Deadline of each service_traffic try (a connect, a DNS answer).
    #[arg(long = "service-traffic.try-timeout", env = "PROXYWATCH_SERVICE_TRAFFIC_TRY_TIMEOUT", default_value = "1s", value_parser = parse_duration)]
    pub service_traffic_try_timeout: Duration,

    /// Each probe's --<probe>.interval and --<probe>.timeout: from the probe table.
    #[command(flatten)]
    pub schedule: ProbeSchedules,

    /// Deadline of one run of each probe without a timeout of its own (node, modules, conntrack, sysctls, rp_filter, neighbour_tables, xtables_lock), ctnetlink included.
    #[arg(long = "probe.timeout", env = "PROXYWATCH_PROBE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,

    /// How often iptables-nft-save cross-checks the netlink counts (0 = never; `check` runs it once unless 0).
    #[arg(long = "iptables.save-interval", env = "PROXYWATCH_IPTABLES_SAVE_INTERVAL", default_value = "10m", value_parser = parse_interval_or_never)]
    pub iptables_save_interval: Every,

    /// kube-proxy's metrics server (serves /metrics and /proxyMode).
    #[arg(
        long = "kube-proxy.metrics-url",
        env = "PROXYWATCH_KUBE_PROXY_METRICS_URL",
        default_value = "http://127.0.0.1:10249"
    )]
    pub kube_proxy_metrics_url: String,

    /// kube-proxy's health server (serves /healthz).
    #[arg(
        long = "kube-proxy.healthz-url",
        env = "PROXYWATCH_KUBE_PROXY_HEALTHZ_URL",
        default_value = "http://127.0.0.1:10256"
    )]
    pub kube_proxy_healthz_url: String,

    /// kube-proxy's process name: a process is a candidate when its comm (the name's first 15 bytes, as the kernel keeps it) and its argv[0]'s basename are both this. For a kube-proxy binary installed under another name.
    #[arg(long = "kube-proxy.process-name", env = "PROXYWATCH_KUBE_PROXY_PROCESS_NAME", default_value = "kube-proxy", value_parser = parse_process_name)]
    pub kube_proxy_process_name: String,

    /// Largest kube-proxy /metrics body read, in bytes (real ones weigh 12 to 83 KiB); /proxyMode and /healthz are capped at 4 KiB and 64 KiB.
    #[arg(long = "kube-proxy.max-body-bytes", env = "PROXYWATCH_KUBE_PROXY_MAX_BODY_BYTES", default_value_t = 4 << 20)]
    pub kube_proxy_max_body_bytes: usize,

    /// Cap on one command's output (rule-set dumps), in bytes; beyond it the command is killed. Output held whole (ipvsadm) is capped at 16 MiB at most.
    // 64 MiB: the largest output measured, iptables-save at 10,000 services x 5 endpoints,
    // is 27,304,934 bytes (docs/benchmarks.md); streamed, it is never held whole.
    #[arg(long = "exec.max-output-bytes", env = "PROXYWATCH_EXEC_MAX_OUTPUT_BYTES", default_value_t = 64 << 20)]
    pub max_output_bytes: u64,

    /// How many external commands may run at once.
    #[arg(
        long = "exec.max-children",
        env = "PROXYWATCH_EXEC_MAX_CHILDREN",
        default_value_t = 4
    )]
    pub max_children: usize,

    /// Watch nf_tables notifications (every family): each commit journaled with its writer (PID, name, parent, unit or pod), the iptables and nftables probes re-read 200 ms after a burst of commits, rules_changed_by_other_process raised when another process removes kube-proxy's rules. false: poll only.
    #[arg(long = "nftables-watch.enabled", env = "PROXYWATCH_NFTABLES_WATCH_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub nftables_watch_enabled: bool,

    /// Drop kube-proxy's own commits' notifications in the kernel, their NEWGEN kept (a socket filter on the PIDs of kube-proxy and the children the process events saw it fork, so hostNetwork in the initial namespaces only): its journal entries then say who committed but no rule counts, and its counts are re-read at the probes' polls. Every notification is read again for --nftables-watch.window after another process changes kube-proxy's rules, to see kube-proxy write them back. false: read every notification.
    #[arg(long = "nftables-watch.skip-kube-proxy", env = "PROXYWATCH_NFTABLES_WATCH_SKIP_KUBE_PROXY", default_value_t = true, action = clap::ArgAction::Set)]
    pub nftables_watch_skip_kube_proxy: bool,

    /// The network namespace (a path such as /proc/1/ns/net) where kube-proxy's process events are listened to, for an agent run in a namespace of its own (the benchmarks): the kernel's proc connector exists in the initial one only, the DaemonSet's (hostNetwork). Not in --help.
    #[arg(long = "proc-events.netns", env = "PROXYWATCH_PROC_EVENTS_NETNS", hide = true)]
    pub proc_events_netns: Option<std::path::PathBuf>,

    /// How often the kernel's per-CPU conntrack statistics are read between the conntrack probe's runs (one small read, no table dump), so that conntrack_drops and conntrack_insert_failed appear within this long of the first drop; a read whose drop counters did not move costs nothing more. 0: only at the conntrack probe's runs.
    #[arg(long = "conntrack-stats.interval", env = "PROXYWATCH_CONNTRACK_STATS_INTERVAL", default_value = "1s", value_parser = parse_interval_or_never)]
    pub conntrack_stats_interval: Every,

    /// Log level: error, warn, info, debug.
    #[arg(long = "log.level", env = "PROXYWATCH_LOG_LEVEL", default_value = "info")]
    pub log_level: tracing::Level,
}

impl Common {
    pub fn kube_proxy_endpoints(&self) -> crate::probe::kube_proxy::Endpoints {
        crate::probe::kube_proxy::Endpoints {
            metrics_url: self.kube_proxy_metrics_url.clone(),
            healthz_url: self.kube_proxy_healthz_url.clone(),
            max_body_bytes: self.kube_proxy_max_body_bytes,
            cgroup_root: self.host_cgroup_root.clone(),
            process_name: self.kube_proxy_process_name.clone(),
        }
    }

    pub fn thresholds(&self) -> Result<Thresholds, String> {
        let t = &self.thresholds;
        if t.conntrack_fill_warning > t.conntrack_fill_critical {
            return Err(format!(
                "--conntrack.fill-warning ({}) must not exceed --conntrack.fill-critical ({})",
                t.conntrack_fill_warning, t.conntrack_fill_critical
            ));
        }
        if self.service_traffic_target.len() > crate::probe::service_traffic::MAX_TARGETS {
            return Err(format!(
                "--service-traffic.target: {} Services named, at most {} are tried",
                self.service_traffic_target.len(),
                crate::probe::service_traffic::MAX_TARGETS
            ));
        }
        // The two built-in targets and the flags' own: one address each, at most.
        if self.service_traffic_address.len() > crate::probe::service_traffic::MAX_TARGETS + 2 {
            return Err(format!(
                "--service-traffic.address: {} addresses given, at most {} (one per target)",
                self.service_traffic_address.len(),
                crate::probe::service_traffic::MAX_TARGETS + 2
            ));
        }
        if t.conntrack_time_to_full_critical_seconds > t.conntrack_time_to_full_warning_seconds {
            return Err(format!(
                "--conntrack.time-to-full-critical ({:?}) must not exceed --conntrack.time-to-full-warning ({:?})",
                std::time::Duration::from_secs_f64(t.conntrack_time_to_full_critical_seconds),
                std::time::Duration::from_secs_f64(t.conntrack_time_to_full_warning_seconds)
            ));
        }
        Ok(t.clone())
    }

    /// How far back the history stage looks.
    pub fn history(&self) -> crate::history::HistoryConfig {
        crate::history::HistoryConfig {
            conntrack_window_seconds: self.conntrack_window.as_secs_f64(),
            conntrack_trend_window_seconds: self.conntrack_trend_window.as_secs_f64(),
            conntrack_interval_seconds: self
                .schedule
                .interval(ProbeName::Conntrack)
                .unwrap_or_default()
                .as_secs_f64(),
            neighbour_tables_window_seconds: self.neighbour_tables_window.as_secs_f64(),
            rp_filter_window_seconds: self.rp_filter_window.as_secs_f64(),
        }
    }

    /// How long the nftables watcher reads kube-proxy's commits whole after another process
    /// changed its rules, where it drops them otherwise; None: it never drops them.
    pub fn nftables_skip_kube_proxy(&self) -> Option<Duration> {
        self.nftables_watch_skip_kube_proxy.then(|| {
            Duration::try_from_secs_f64(self.thresholds.rules_changed_window_seconds.max(0.0)).unwrap_or(Duration::MAX)
        })
    }

    /// What the service_traffic probe tries.
    pub fn service_traffic(&self) -> crate::probe::service_traffic::Settings {
        crate::probe::service_traffic::Settings {
            targets: self.service_traffic_target.clone(),
            addresses: crate::probe::service_traffic::Address::defaults(
                &self.service_traffic_address,
                std::env::var("KUBERNETES_SERVICE_HOST").ok().as_deref(),
                std::fs::read_to_string("/etc/resolv.conf").ok().as_deref(),
            ),
            cluster_domain: self.service_traffic_cluster_domain.clone(),
            try_timeout: self.service_traffic_try_timeout,
        }
    }

    /// [`Common::schedules`], with the service_traffic probe when `try_services`
    /// (`check --try-services`, `baseline save --try-services`), whatever its interval.
    pub fn schedules_trying(&self, try_services: bool) -> Vec<Schedule> {
        let mut s = self.schedules();
        if try_services && !s.iter().any(|s| s.probe == ProbeName::ServiceTraffic) {
            s.push(Schedule {
                probe: ProbeName::ServiceTraffic,
                interval: Duration::from_secs(3600),
                timeout: self.schedule.timeout(ProbeName::ServiceTraffic, self.probe_timeout),
            });
        }
        s
    }

    /// The event sources that run (`crate::watch::SOURCES`, less those turned off).
    pub fn sources(&self) -> Vec<crate::watch::Source> {
        crate::watch::SOURCES
            .iter()
            .filter(|s| match s.name {
                "nftables_watch" => self.nftables_watch_enabled,
                "conntrack_stats" => self.conntrack_stats_interval.0.is_some(),
                _ => true,
            })
            .copied()
            .collect()
    }

    pub fn schedules(&self) -> Vec<Schedule> {
        crate::probe::PROBES
            .iter()
            .filter_map(|&probe| {
                Some(Schedule {
                    probe,
                    interval: self.schedule.interval(probe)?,
                    timeout: self.schedule.timeout(probe, self.probe_timeout),
                })
            })
            .collect()
    }
}

/// The thresholds of a run with no flag: the binary's defaults, from the one
/// place they are written (the flags above). Tests build theirs from here.
pub fn default_thresholds() -> Thresholds {
    let cli = Cli::try_parse_from(["proxywatch", "check"]).expect("the defaults parse");
    let Command::Check(args) = cli.command else {
        unreachable!("parsed as check")
    };
    args.common.thresholds().expect("the defaults are consistent")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_env() {
        let cli = Cli::try_parse_from([
            "proxywatch",
            "check",
            "--format",
            "json",
            "--conntrack.fill-warning",
            "0.5",
        ])
        .unwrap();
        let Command::Check(c) = cli.command else { panic!() };
        assert_eq!(c.format, Format::Json);
        assert_eq!(c.common.thresholds().unwrap().conntrack_fill_warning, 0.5);
        assert!(Cli::try_parse_from(["proxywatch", "check", "--conntrack.fill-warning", "2"]).is_err());
        let cli = Cli::try_parse_from(["proxywatch", "check", "--conntrack.fill-warning", "0.99"]).unwrap();
        let Command::Check(c) = cli.command else { panic!() };
        assert!(c.common.thresholds().is_err(), "warning above critical is refused");
    }

    /// `--memory.trim-interval 0` is never, as its help says (0s was once refused, so the soak's
    /// agent without the trim did not start); the default is 5 s.
    #[test]
    fn trim_interval_zero_is_never() {
        let serve = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["proxywatch", "serve"][..], args].concat()).unwrap();
            let Command::Serve(s) = cli.command else { panic!() };
            s.trim_interval
        };
        assert_eq!(serve(&[]), Every(Some(Duration::from_secs(5))));
        for zero in ["0", "0s", "0ms"] {
            assert_eq!(serve(&["--memory.trim-interval", zero]), Every(None), "{zero}");
        }
        assert_eq!(
            serve(&["--memory.trim-interval", "30s"]),
            Every(Some(Duration::from_secs(30)))
        );
    }

    #[test]
    fn baseline_and_compare() {
        let cli = Cli::try_parse_from(["proxywatch", "baseline", "save", "/tmp/b.json"]).unwrap();
        let Command::Baseline(BaselineArgs {
            action: BaselineAction::Save(s),
        }) = cli.command
        else {
            panic!()
        };
        assert_eq!(s.file, PathBuf::from("/tmp/b.json"));
        let cli = Cli::try_parse_from([
            "proxywatch",
            "compare",
            "b.json",
            "--against",
            "c.json",
            "--format",
            "json",
        ])
        .unwrap();
        let Command::Compare(c) = cli.command else { panic!() };
        assert_eq!(c.against, Some(PathBuf::from("c.json")));
        assert_eq!(c.format, CompareFormat::Json);
        // `compare BEFORE AFTER`, as with diff: the second file is --against.
        let cli = Cli::try_parse_from(["proxywatch", "compare", "b.json", "c.json"]).unwrap();
        let Command::Compare(c) = cli.command else { panic!() };
        assert_eq!(c.after_file(), Some(&PathBuf::from("c.json")));
        assert!(Cli::try_parse_from(["proxywatch", "compare", "b.json", "c.json", "--against", "d.json"]).is_err());
        assert!(Cli::try_parse_from([
            "proxywatch",
            "compare",
            "b.json",
            "--against",
            "c",
            "--url",
            "http://x:1"
        ])
        .is_err());
        assert!(
            Cli::try_parse_from(["proxywatch", "compare"]).is_err(),
            "FILE is required"
        );
    }

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
