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
    let router = proxywatch::serve::http::router(
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
        legacy: Default::default(),
    });
    // The counts of tests/fixtures/nft/pwgen-50svc-input.nft (50 services x 2 endpoints,
    // 10 NodePorts; SOURCES.md there), as the netlink count has that table.
    let elements = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let nft = nftables::NftTableCounts {
        chains: 16 + 50 + 100 + 10,
        base_chains: 8,
        rules: 23 + 50 * 2 + 100 * 2 + 10 * 2,
        service_chains: 50,
        endpoint_chains: 100,
        external_chains: 10,
        local_chains: 0,
        sets: 2,
        maps: 5,
        map_elements: elements(&[
            ("firewall-ips", 0),
            ("no-endpoint-nodeports", 0),
            ("no-endpoint-services", 3),
            ("service-ips", 50),
            ("service-nodeports", 10),
        ]),
        set_elements: elements(&[("cluster-ips", 53), ("nodeport-ips", 1)]),
    };
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
    let cumulative = (metrics.sync_duration.clone(), metrics.network_programming.clone());
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
    s.facts.rp_filter = Some(proxywatch::probe::rp_filter::RpFilterFacts {
        all: 0,
        interfaces: vec![proxywatch::probe::rp_filter::InterfaceFilter {
            name: "eth0".into(),
            value: 2,
            effective: 2,
            default_route: true,
        }],
        more_interfaces: 0,
        drops_total: Some(0),
    });
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
            sync_cumulative: cumulative.0,
            network_programming_cumulative: cumulative.1,
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
        notified: false,
    }
}

#[test]
fn the_full_node_has_every_probes_facts() {
    // The metric rows are held to what this snapshot renders: a probe left out of it would have
    // its metrics checked by no test (docs/how-it-works.md, "Adding a probe").
    let s = full_snapshot();
    // service_traffic is off by default: docs/reference.md lists its series apart from the
    // table, in prose, and says so.
    let missing: Vec<&str> = proxywatch::probe::PROBES
        .iter()
        .filter(|p| **p != proxywatch::probe::ProbeName::ServiceTraffic)
        .filter(|p| s.facts.reading(**p).is_none())
        .map(|p| p.as_str())
        .collect();
    assert!(missing.is_empty(), "full_snapshot has no facts for {missing:?}");
}

fn full_node_metrics() -> String {
    let s = full_snapshot();
    let mut verdict = proxywatch::evaluate::evaluate(&s, &proxywatch::config::default_thresholds());
    // As the scheduler does: the history stage stamps since when each finding is active.
    proxywatch::history::findings::FindingTracker::default().stamp(&mut verdict.findings, s.collected_at);
    let p = proxywatch::expose::Publication::new(&s, verdict);
    String::from_utf8(p.metrics().unwrap().to_vec()).unwrap()
}

// --- docs/npd.md: the one NPD table ------------------------------------------------------------

fn doc(rel: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The cells of the table whose header line is `header`, up to the first line that is not a row.
fn table<'a>(text: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    let start = text
        .find(&format!("\n{header}\n"))
        .unwrap_or_else(|| panic!("no table {header:?}"));
    text[start + 1..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`'))
                .collect()
        })
        .collect()
}

/// docs/npd.md's finding table is the binary's own mapping (`npd::area_of`), both ways: every
/// finding id once, with its `--area` and condition; its condition table is the shipped monitor
/// config's (condition, `--area`, reason when True and when False). The README has no copy.
#[test]
fn npd_table_equals_the_codes_area_mapping() {
    use proxywatch::expose::npd::{area_of, Area};
    let text = doc("docs/npd.md");
    let documented: Vec<(String, String, String)> = table(&text, "| finding | `--area` | condition |")
        .into_iter()
        .map(|c| {
            assert_eq!(c.len(), 3, "{c:?}");
            (c[0].to_string(), c[1].to_string(), c[2].to_string())
        })
        .collect();
    let code: BTreeSet<(String, String, String)> = proxywatch::evaluate::CHECKS
        .iter()
        .map(|c| match area_of(c.id) {
            Some(Area::All) => panic!("{}: in no area, so in no condition but --area all", c.id),
            Some(a) => (c.id.to_string(), a.as_str().to_string(), a.condition().to_string()),
            None => (
                c.id.to_string(),
                "none".to_string(),
                "none: the failed probe's area goes Unknown".to_string(),
            ),
        })
        .collect();
    let as_set: BTreeSet<_> = documented.iter().cloned().collect();
    assert_eq!(as_set.len(), documented.len(), "a finding listed twice");
    let missing: Vec<_> = code.difference(&as_set).collect();
    let stale: Vec<_> = as_set.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/npd.md's finding table vs npd::area_of: missing or other {missing:#?}\nnot so in the code {stale:#?}"
    );

    let monitor: serde_json::Value =
        serde_json::from_str(&doc("manifests/overlays/npd/proxywatch-monitor.json")).unwrap();
    let conditions = table(&text, "| condition | `--area` | reason when True | reason when False |");
    let areas = [Area::Conntrack, Area::KubeProxy, Area::Rules, Area::Kernel];
    assert_eq!(conditions.len(), areas.len(), "{conditions:?}");
    for a in areas {
        let row = conditions
            .iter()
            .find(|c| c[0] == a.condition())
            .unwrap_or_else(|| panic!("no row for {}", a.condition()));
        assert_eq!(row[1], a.as_str(), "{row:?}");
        let rule = monitor["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["condition"] == a.condition())
            .unwrap_or_else(|| panic!("no rule for {}", a.condition()));
        assert_eq!(rule["args"][1], format!("--area={}", a.as_str()), "{rule}");
        assert_eq!(rule["reason"], row[2], "{row:?}");
        let default = monitor["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == a.condition())
            .unwrap();
        assert_eq!(default["reason"], row[3], "{row:?}");
    }
    // One table: the README links to it instead of keeping a copy.
    let readme = doc("README.md");
    assert!(
        !readme.contains("| condition | `--area`"),
        "the README has a copy of the NPD table"
    );
    assert!(
        readme.contains("docs/npd.md#"),
        "the README links to docs/npd.md's table"
    );
}

// --- the README as the user's manual ----------------------------------------------------------

/// The README without its HTML comments (markers for tests, never rendered).
fn rendered(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(a) = rest.find("<!--") {
        out.push_str(&rest[..a]);
        rest = rest[a..].find("-->").map_or("", |b| &rest[a + b + 3..]);
    }
    out.push_str(rest);
    out
}

#[test]
fn readme_is_under_20_kb_with_deploy_right_after_quick_start() {
    let text = doc("README.md");
    assert!(
        text.len() < 20_000,
        "README.md is {} bytes, the bar is 20,000",
        text.len()
    );
    let headings: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
    let quick = headings
        .iter()
        .position(|h| *h == "## Quick start")
        .expect("## Quick start");
    assert_eq!(headings.get(quick + 1), Some(&"## Deploy"), "{headings:?}");
    let deploy = text.find("\n## Deploy\n").unwrap();
    let table = text.find("\n| id | severity | what |").expect("the findings table");
    assert!(deploy < table, "the Deploy heading comes after the findings table");
}

/// The user's text names no test file: what a test proves is in docs/testing.md.
#[test]
fn readme_names_no_test_file() {
    let text = rendered(&doc("README.md"));
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tests/") || l.contains(".rs`") || l.contains(".rs "))
        .collect();
    assert!(hits.is_empty(), "test file names in README.md: {hits:#?}");
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            !in_code && l.starts_with('#')
        })
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// Every relative link of the README and docs/*.md leads to a file that exists, and to a heading
/// that exists when it names one; every repository path quoted in backticks exists.
#[test]
fn every_linked_doc_and_test_path_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let dir = file.parent().unwrap();
        // [text](target)
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let dest = if path.is_empty() { file.clone() } else { dir.join(path) };
            checked += 1;
            if !dest.exists() {
                broken.push(format!("{name}: {target}: no such file"));
            } else if !anchor.is_empty()
                && dest.extension().is_some_and(|x| x == "md")
                && !anchors(&std::fs::read_to_string(&dest).unwrap()).contains(anchor)
            {
                broken.push(format!("{name}: {target}: no such heading"));
            }
        }
        // `tests/...`, `docs/...`, `manifests/...`, `tools/...` quoted as paths.
        for quoted in text.split('`').skip(1).step_by(2) {
            let q = quoted.trim_end_matches(['/', ',', '.']);
            let q = q.split(['#', ':']).next().unwrap();
            if !["tests/", "docs/", "manifests/", "tools/", "agent/", "fuzz/"]
                .iter()
                .any(|p| q.starts_with(p))
                || q.contains(|c: char| c.is_whitespace() || "<>*{}$|".contains(c))
            {
                continue;
            }
            checked += 1;
            if !root.join(q).exists() {
                broken.push(format!("{name}: `{quoted}`: no such path"));
            }
        }
    }
    assert!(checked > 100, "only {checked} links and paths found");
    assert!(broken.is_empty(), "{} broken:\n{}", broken.len(), broken.join("\n"));
}

/// The README's sample of `check` is the binary's own output on the fixture node it names
/// (`<!-- check-sample: NODE -->`), its first lines, with the same flags as the fixture goldens;
/// only the times differ.
#[test]
fn readme_check_sample_equals_the_binarys_output() {
    let text = doc("README.md");
    let marker = "<!-- check-sample: ";
    let at = text.find(marker).expect("a check-sample marker in README.md");
    let node = text[at + marker.len()..].split_whitespace().next().unwrap();
    let block = &text[at..];
    let start = block.find("```\n").expect("a code block after the marker") + 4;
    let sample = &block[start..start + block[start..].find("```").unwrap()];
    let nodes = common::fixtures().join("nodes");
    let out = std::process::Command::new(common::binary())
        .current_dir(&nodes)
        .env_clear()
        .env("PATH", nodes.join(node).join("exec"))
        .args([
            "check",
            "--format",
            "text",
            "--node-name",
            "fixture",
            "--host-root",
            node,
        ])
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    // The moment of the run, on the first line and in `since:`.
    let norm = |l: &str| -> String {
        if l.starts_with("proxywatch check: ") {
            l.rsplit_once(" at ")
                .map_or(l.to_string(), |(a, _)| format!("{a} at <time>"))
        } else if l.trim_start().starts_with("since: ") {
            "since: <time>".to_string()
        } else {
            l.to_string()
        }
    };
    let want: Vec<String> = sample.lines().map(norm).collect();
    let got: Vec<String> = got.lines().map(norm).take(want.len()).collect();
    assert!(want.len() >= 10, "the sample is {} lines", want.len());
    assert_eq!(
        want, got,
        "README.md's check sample is not the binary's output on {node}"
    );
}

/// The `podman run` line gives the container what manifests/daemonset.yaml gives the agent.
#[test]
fn readme_podman_line_has_the_daemonsets_settings() {
    let text = doc("README.md");
    let at = text.find("podman run ").expect("a podman run line");
    let mut line = String::new();
    for l in text[at..].lines() {
        line.push_str(l.trim_end_matches('\\'));
        if !l.ends_with('\\') {
            break;
        }
    }
    let flags: BTreeSet<&str> = line.split_whitespace().collect();
    let ds = doc("manifests/daemonset.yaml");
    let mut want = vec!["--rm".to_string(), "--cap-drop=all".to_string()];
    let yaml = |key: &str| ds.lines().any(|l| l.trim() == key);
    for (key, flag) in [
        ("hostNetwork: true", "--network=host"),
        ("hostPID: true", "--pid=host"),
        ("runAsUser: 0", "--user=0"),
        ("readOnlyRootFilesystem: true", "--read-only"),
        ("allowPrivilegeEscalation: false", "--security-opt=no-new-privileges"),
    ] {
        assert!(
            yaml(key),
            "daemonset.yaml no longer has {key}: update this test and the README"
        );
        want.push(flag.to_string());
    }
    // capabilities: drop: [ALL], add: [...]
    let caps = &ds[ds.find("capabilities:").unwrap()..];
    let add = &caps[caps.find("add:").unwrap() + 4..];
    for l in add.lines().skip(1).take_while(|l| l.trim_start().starts_with("- ")) {
        want.push(format!(
            "--cap-add={}",
            l.trim().trim_start_matches("- ").to_lowercase()
        ));
    }
    // hostPath volumes, read-only where mounted so.
    let mounts = &ds[ds.find("volumeMounts:").unwrap()..ds.find("      volumes:").unwrap()];
    let volumes = &ds[ds.find("      volumes:").unwrap()..];
    for m in mounts.split("- name: ").skip(1) {
        let name = m.lines().next().unwrap().trim();
        let mount = m.split("mountPath: ").nth(1).unwrap().lines().next().unwrap().trim();
        let ro = m.contains("readOnly: true");
        let v = volumes
            .split("- name: ")
            .find(|v| v.lines().next().unwrap().trim() == name)
            .unwrap();
        let host = v.split("path: ").nth(1).unwrap().lines().next().unwrap().trim();
        want.push(format!("--volume={host}:{mount}{}", if ro { ":ro" } else { "" }));
    }
    want.push("--env=PROXYWATCH_HOST_CGROUP_ROOT=/host/sys/fs/cgroup".to_string());
    assert!(ds.contains("- name: PROXYWATCH_HOST_CGROUP_ROOT\n              value: /host/sys/fs/cgroup"));
    let missing: Vec<&String> = want.iter().filter(|f| !flags.contains(f.as_str())).collect();
    assert!(
        missing.is_empty(),
        "the README's podman run line lacks {missing:?}: {line}"
    );
    assert!(want.len() >= 12, "{want:?}");
}
