//! The README and docs/reference.md are the user's manual: they must say exactly what the agent has,
//! both ways. Every flag row equals the binary's own definition (name,
//! environment variable, default, help) and every flag has a row; every metric
//! the agent emits has a row and every row is emitted; every finding id both ways;
//! every documented endpoint answers.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;

/// The user's manual: the README and the reference it links to (flags, endpoints, metrics).
fn readme() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    ["README.md", "docs/reference.md"]
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cells of every table row of the README whose first cell is `` `PREFIX...` ``.
fn rows<'a>(text: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .filter(|l| l.starts_with(&format!("| `{prefix}")))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`'))
                .collect()
        })
        .collect()
}

/// One flag as the binary defines it: (flag, env, default, help).
type FlagRow = (String, String, String, String);

fn flags_of(cmd: &clap::Command, out: &mut BTreeSet<FlagRow>) {
    for a in cmd.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        if long == "help" || long == "version" {
            continue;
        }
        let env = a
            .get_env()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let default: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        // A row has `-h`'s sentence and `--help`'s paragraphs after it, in one cell.
        let help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string().replace(".\n\n", ". "))
            .unwrap_or_default();
        out.insert((
            format!("--{long}"),
            env,
            default.join(","),
            help.trim_end_matches('.').to_string(),
        ));
    }
    for sub in cmd.get_subcommands() {
        flags_of(sub, out);
    }
}

#[test]
fn flag_rows_equal_the_binarys_flags_both_ways() {
    let mut code = BTreeSet::new();
    flags_of(&proxywatch::config::Cli::command(), &mut code);
    let text = readme();
    let documented: BTreeSet<FlagRow> = rows(&text, "--")
        .into_iter()
        .map(|c| {
            assert_eq!(c.len(), 4, "a flag row has 4 cells: {c:?}");
            (
                c[0].to_string(),
                c[1].to_string(),
                c[2].to_string(),
                c[3].replace("\\|", "|"),
            )
        })
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README flag rows differ from the binary's flags.\nin the binary, not (or not so) in README.md:\n{missing:#?}\nin README.md, not (or not so) in the binary:\n{stale:#?}"
    );
}

#[test]
fn finding_ids_both_ways() {
    let text = readme();
    let code: BTreeSet<&str> = proxywatch::evaluate::CHECKS.iter().map(|c| c.id).collect();
    // The findings table: rows of the Findings section whose second cell is a severity.
    let documented: BTreeSet<&str> = section(&text, "## Findings")
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let id = c.first()?.strip_prefix('`')?.strip_suffix('`')?;
            let sev = c.get(1)?;
            ["info", "warning", "critical"]
                .iter()
                .any(|s| sev.contains(s))
                .then_some(id)
        })
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "findings table vs CHECKS: missing rows {missing:?}, rows without a check {stale:?}"
    );
}

/// The README's text from `heading` to the next `## ` heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no {heading:?} in README.md"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

/// Metric names of a Prometheus text body (TYPE lines).
fn metric_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn metric_rows_equal_what_the_agent_emits_both_ways() {
    let body = full_node_metrics();
    let emitted: BTreeSet<String> = metric_names(&body)
        .into_iter()
        // The standard process collector's series are documented as a group.
        .filter(|n| n.starts_with("proxywatch_"))
        .map(|n| {
            // One row covers every conntrack statistic.
            if n.starts_with("proxywatch_conntrack_stat_") {
                "proxywatch_conntrack_stat_<field>_total".to_string()
            } else {
                n
            }
        })
        .collect();
    let text = readme();
    // A row may name several metrics: `a`, `b`.
    let documented: BTreeSet<String> = rows(&text, "proxywatch_")
        .into_iter()
        .flat_map(|c| c[0].split("`, `").map(str::to_string).collect::<Vec<_>>())
        .collect();
    let missing: Vec<_> = emitted.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&emitted).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "metrics table vs /metrics of a node with every source: undocumented {missing:?}, documented but never emitted {stale:?}"
    );
    assert!(
        text.contains("`process_resident_memory_bytes`"),
        "the process collector's group"
    );
}

#[test]
fn every_documented_endpoint_answers() {
    let text = readme();
    let documented: Vec<String> = rows(section(&text, "## Endpoints"), "/")
        .into_iter()
        .map(|c| c[0].to_string())
        .collect();
    assert!(documented.len() >= 6, "{documented:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(None);
    let snapshot = full_snapshot();
    let verdict = proxywatch::evaluate::evaluate(&snapshot, &proxywatch::config::default_thresholds());
    tx.send_replace(Some(std::sync::Arc::new(proxywatch::expose::Publication::new(
        &snapshot, verdict,
    ))));
    let router = proxywatch::expose::http::router(
        rx,
        std::sync::Arc::new(proxywatch::liveness::Liveness::new(std::time::Duration::from_secs(60))),
    );
    for path in &documented {
        let status = rt.block_on(async {
            use tower::ServiceExt;
            let req = axum::http::Request::get(path.as_str())
                .body(axum::body::Body::empty())
                .unwrap();
            router.clone().oneshot(req).await.unwrap().status()
        });
        // 503 is /readyz's documented answer on a node with a critical finding.
        assert!(
            status == 200 || (path == "/readyz" && status == 503),
            "{path}: {status}"
        );
    }
    // And a path that is not documented does not answer.
    let status = rt.block_on(async {
        use tower::ServiceExt;
        let req = axum::http::Request::get("/debug")
            .body(axum::body::Body::empty())
            .unwrap();
        router.clone().oneshot(req).await.unwrap().status()
    });
    assert_eq!(status, 404);
}

// --- a node where every probe has a source -----------------------------------------------------

fn fixture(rel: &str) -> String {
    let p = common::fixtures().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A snapshot with every probe's facts and every derived value, read by the
/// agent's own parsers from the captured fixtures, so its /metrics has every
/// series the agent can emit.
fn full_snapshot() -> proxywatch::snapshot::Snapshot {
    use proxywatch::history::kube_proxy::{KubeProxyDerived, LatencyWindow};
    use proxywatch::history::trend::ConntrackTrend;
    use proxywatch::history::window::CounterDeltas;
    use proxywatch::history::{ConntrackDerived, Derived};
    use proxywatch::probe::PROBES;
    use proxywatch::probe::{conntrack, iptables, ipvs, kube_proxy, modules, nftables, node, sysctl};
    use proxywatch::snapshot::{ProbeOutcome, ProbeStatus, Snapshot};

    let mut s = Snapshot::new("readme");
    s.collected_at = 1_800_000_000.0;
    s.facts.node = Some(node::NodeFacts {
        kernel_release: Some("6.1.0-28-amd64".into()),
        cpus: 4,
        cpus_source: "test".into(),
    });
    s.facts.modules = Some(modules::ModuleFacts {
        kernel_release: Some("6.1.0-28-amd64".into()),
        modules: modules::WATCHED
            .iter()
            .map(|(m, _)| (m.to_string(), modules::ModuleState::Loaded))
            .collect(),
        sources: vec!["/proc/modules".into()],
    });
    let stats = conntrack::parse_stat(
        "stat",
        &fixture("samples/proc-net-stat-nf_conntrack/debian12-kernel6.18-netns-loopback-invalid.txt"),
    )
    .unwrap();
    s.facts.conntrack = Some(conntrack::ConntrackFacts {
        entries: 1000,
        max: 262_144,
        buckets: Some(65_536),
        stats: stats.clone(),
        stats_source: Some("/proc/net/stat/nf_conntrack".into()),
    });
    s.facts.sysctls = Some(sysctl::SysctlFacts {
        values: sysctl::WATCHED.iter().map(|n| (n.to_string(), Some(1))).collect(),
    });
    s.facts.node_ports = Some(proxywatch::probe::node_ports::judge(
        Some(proxywatch::probe::node_ports::parse_port_range("range", "32768\t60999\n").unwrap()),
        Vec::new(),
        &Default::default(),
    ));
    let counts =
        iptables::SaveParser::parse_str("save", &fixture("iptables/kube-100x2-iptables-nft-save.txt")).unwrap();
    let run = iptables::SaveRun {
        backend: "nft".into(),
        family: "ipv4".into(),
        command: "iptables-nft-save".into(),
        duration_seconds: 0.2,
        counts,
        netlink: Some(netlink_count()),
    };
    // The iptables-nft-save cross-check of those counts (its wall time and bytes are exported).
    let save = iptables::SaveRun {
        command: "iptables-nft-save".into(),
        netlink: None,
        ..run.clone()
    };
    let (backend_in_use, backend_reason, backends_with_kube_rules) =
        iptables::detect_backend(std::slice::from_ref(&run));
    s.facts.iptables = Some(iptables::IptablesFacts {
        saves: vec![run],
        backend_in_use,
        backend_reason,
        backends_with_kube_rules,
        not_run: Vec::new(),
        cross_check: Some(iptables::CrossCheck {
            at_seconds: 1_799_999_990.0,
            saves: vec![save],
            generations: Default::default(),
            mismatches: Vec::new(),
            not_compared: Vec::new(),
            error: None,
        }),
        rule_counters: None,
    });
    let nft = nftables::parse_list_table(
        "nft",
        &fixture("nft/list-table-ip-kube-proxy-pwgen-50svc-debian12-nft1.0.6.txt"),
    )
    .unwrap();
    s.facts.nftables = Some(nftables::NftablesFacts {
        tables: vec![nftables::NftTable {
            family: "ipv4".into(),
            duration_seconds: 0.1,
            bytes: 1000,
            counts: nft,
            netlink: Some(netlink_count()),
        }],
    });
    let services =
        ipvs::ipvsadm::parse_ipvsadm_list("ipvsadm", &fixture("ipvs/ln-kube-proxy-ipvs-kind-tkng.txt")).unwrap();
    let global = ipvs::proc::parse_proc_ip_vs_stats("stats", &fixture("ipvs/ip_vs_stats-node_exporter.txt")).unwrap();
    let mut ipvs_facts = ipvs::summarise("ipvsadm", services, Some(global), None);
    ipvs_facts.interface = Some(ipvs::IpvsInterface {
        exists: true,
        addresses: vec!["10.96.0.1".into()],
    });
    s.facts.ipvs = Some(ipvs_facts);
    let metrics = kube_proxy::metrics::extract(
        "metrics",
        &fixture("kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom"),
    )
    .unwrap();
    s.facts.kube_proxy = Some(kube_proxy::KubeProxyFacts {
        mode: Some(kube_proxy::proxy_mode::ProxyMode::Iptables),
        metrics_up: true,
        sync: metrics.sync_duration.as_ref().map(kube_proxy::Latency::since_start),
        network_programming: metrics
            .network_programming
            .as_ref()
            .map(kube_proxy::Latency::since_start),
        metrics: Some(metrics),
        healthz: Some(kube_proxy::HealthzFacts {
            status_code: 200,
            ..Default::default()
        }),
        process: Some(kube_proxy::ProcessFacts {
            pid: 42,
            start_time_seconds: 1_799_990_000.0,
            cpu_seconds_total: 12.5,
            resident_memory_bytes: 50 << 20,
            threads: 10,
            memory_limit_bytes: Some(256 << 20),
            cpu_limit_cores: Some(1.0),
            cgroup: Some(kube_proxy::cgroup::CgroupFacts {
                version: 2,
                path: "/kubepods.slice/kube-proxy".into(),
                memory_limit_bytes: Some(256 << 20),
                memory_usage_bytes: Some(60 << 20),
                cpu_limit_cores: Some(1.0),
                cpu_quota_seconds: Some(0.1),
                cpu_period_seconds: Some(0.1),
                cpu: Some(kube_proxy::cgroup::CpuStat {
                    periods_total: 1000,
                    throttled_periods_total: 10,
                    throttled_seconds_total: 0.5,
                }),
                ..Default::default()
            }),
            cgroup_error: None,
            identity: Default::default(),
        }),
        ..Default::default()
    });
    let window = LatencyWindow {
        p50: Some(0.1),
        p99: Some(0.4),
        count: 10.0,
        seconds: 15.0,
    };
    s.facts.conntrack_stale = Some(proxywatch::probe::conntrack_stale::ConntrackStaleFacts {
        source: "iptables-nft".into(),
        stale_entries: proxywatch::probe::service_endpoints::per_protocol([]),
        snat: Some(Default::default()),
        ..Default::default()
    });
    // The neighbour tables from this kernel's captured RTM_NEWNEIGHTBL message.
    let arp: String = fixture("samples/netlink-neightbl/arp_cache.hex")
        .split_whitespace()
        .collect();
    let arp: Vec<u8> = (0..arp.len() / 2)
        .map(|i| u8::from_str_radix(&arp[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    s.facts.xtables_lock = Some(proxywatch::probe::xtables_lock::XtablesLockFacts {
        path: "/run/xtables.lock".into(),
        ..Default::default()
    });
    s.facts.neighbour_tables = Some(proxywatch::probe::neighbour_tables::NeighbourFacts {
        tables: vec![proxywatch::probe::neighbour_tables::decode_table(&arp)
            .unwrap()
            .unwrap()],
    });
    s.derived = Derived {
        nftables_watch: Some(proxywatch::history::nftables_watch::NftablesWatch {
            state: proxywatch::history::nftables_watch::WatchState::Watching,
            commits_kube_proxy_total: 3,
            commits_other_total: 1,
            ..Default::default()
        }),
        service_rejects: Some(proxywatch::history::service_rejects::ServiceRejects {
            seconds: 30.0,
            sources: vec!["nft ipv4".into()],
            totals: vec![proxywatch::history::service_rejects::ReasonRate {
                reason: proxywatch::probe::rule_counters::Reason::NoEndpoints,
                protocol: "tcp".into(),
                packets_per_second: 2.0,
                packets_total: 60,
            }],
            ..Default::default()
        }),
        conntrack_stale: None,
        kube_proxy_sync_failures: None,
        neighbour_tables: None,
        conntrack: Some(ConntrackDerived {
            window: Some(CounterDeltas {
                seconds: 300.0,
                increase: stats.keys().map(|k| (k.clone(), 1)).collect::<BTreeMap<_, _>>(),
            }),
            trend: Some(ConntrackTrend {
                slope_per_second: 1.0,
                seconds_to_full: Some(100_000.0),
                window_seconds: 900.0,
                points: 100,
                ..Default::default()
            }),
        }),
        kube_proxy: Some(KubeProxyDerived {
            sync: Some(window.clone()),
            network_programming: Some(window),
            last_sync_age_seconds: Some(3.0),
            queued_unsynced_seconds: Some(0.0),
            restarts: 1,
            last_restart_seconds: Some(1_799_999_000.0),
            last_restart_mono: None,
            cpu_throttling: Some(proxywatch::history::kube_proxy::CpuThrottling {
                periods: 100,
                throttled_periods: 5,
                throttled_seconds: 0.2,
                ratio: Some(0.05),
                seconds: 300.0,
            }),
        }),
        ..Default::default()
    };
    for &p in PROBES {
        s.probes.insert(
            p,
            ProbeOutcome {
                status: ProbeStatus::Ok,
                duration_seconds: 0.01,
                error: None,
                last_run_seconds: s.collected_at,
                last_success_seconds: Some(s.collected_at),
                reading_seconds: Some(s.collected_at),
            },
        );
    }
    s
}

/// A netlink count made at generation 7.
fn netlink_count() -> proxywatch::probe::counted::NetlinkCount {
    proxywatch::probe::counted::NetlinkCount {
        generation: 7,
        counted_at_seconds: 1_799_999_990.0,
        reused: false,
        attempts: 1,
        bytes: 4096,
        count_seconds: 0.01,
    }
}

fn full_node_metrics() -> String {
    let s = full_snapshot();
    let mut verdict = proxywatch::evaluate::evaluate(&s, &proxywatch::config::default_thresholds());
    // As the scheduler does: the history stage stamps since when each finding is active.
    proxywatch::history::findings::FindingTracker::default().stamp(&mut verdict.findings, s.collected_at);
    let p = proxywatch::expose::Publication::new(&s, verdict);
    String::from_utf8(p.metrics.to_vec()).unwrap()
}
