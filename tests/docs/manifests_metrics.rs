//! Every metric and finding id the alert rules and the dashboard use must
//! exist in what the agent really serves: a renamed metric would otherwise
//! silently disable an alert.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::Serve;

/// Metrics that only exist after activity the fixture cannot make (kube-proxy
/// syncing between two reads), or on a node this one is not: they must at least be
/// rendered by the agent, and each has a test on a node that has it.
const NEED_ACTIVITY: &[&str] = &[
    "proxywatch_kube_proxy_sync_duration_seconds",
    "proxywatch_kube_proxy_network_programming_duration_seconds",
    // The iptables-nft-save cross-check compares with netlink counts, which a fixture host
    // root has none of (tests/kernel/kernel_iptables.rs runs it on a real kernel).
    "proxywatch_iptables_count_mismatches",
    // Two readings of kube-proxy's cgroup (tests/kube_proxy/kube_proxy_cgroup.rs).
    "proxywatch_kube_proxy_cpu_throttled_ratio",
    // A rate needs two readings of kube-proxy's reject and drop rule counters, read over
    // netlink on the node itself or from iptables-legacy-save -c (tests/kube_proxy/kube_proxy_vs_kernel.rs).
    "proxywatch_service_rejected_packets_total",
];

/// Metrics of probes that read netlink on the node itself only (`--host-root /`):
/// a fixture node cannot have them; they must at least be rendered by the agent
/// (tests/kernel/node_ports.rs, tests/kernel/neighbour_tables.rs and tests/stale/conntrack_stale.rs read them on the real kernel).
const NODE_ONLY: &[&str] = &[
    "proxywatch_neighbour_entries",
    "proxywatch_neighbour_gc_thresh",
    "proxywatch_neighbour_table_fulls_total",
    "proxywatch_node_ports",
    "proxywatch_node_ports_in_ephemeral_range",
    "proxywatch_snat_ports_fill_ratio",
];

fn names_in(text: &str, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A kube-proxy stand-in on loopback serving captured responses.
fn fake_kube_proxy(root: &Path) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let metrics =
        std::fs::read_to_string(root.join("kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom")).unwrap();
    let healthz =
        std::fs::read_to_string(root.join("kube-proxy/v1.30-kind-nodeEligible-raesene-2024-06-16.json")).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream: TcpStream = stream;
            let mut line = String::new();
            if BufReader::new(&mut stream).read_line(&mut line).is_err() {
                continue;
            }
            let body = match line.split_whitespace().nth(1) {
                Some("/metrics") => metrics.as_str(),
                Some("/healthz") => healthz.as_str(),
                Some("/proxyMode") => "iptables",
                _ => "",
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn alert_rules_and_dashboard_use_only_what_the_agent_serves() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = common::fixtures();
    // A node with IPVS, a kube-proxy rule set (stand-in iptables-nft-save printing a
    // captured save) and a kube-proxy answering on loopback: every probe has facts.
    let bin = tempfile::tempdir().unwrap();
    let save = bin.path().join("iptables-nft-save");
    std::fs::write(
        &save,
        format!(
            "#!/bin/sh\nwhile IFS= read -r l; do printf '%s\\n' \"$l\"; done < '{}'\n",
            fixtures.join("iptables/kube-100x2-iptables-nft-save.txt").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&save, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The IPVS node with its /proc/net/ip_vs_stats (the IPVS connection panels).
    let root = tempfile::tempdir().unwrap();
    // Without its netlink recording (of a namespace without rules), so that the iptables
    // probe reads the stand-in's save.
    common::copy_files_only("ipvs-modules-loaded", root.path());
    std::fs::copy(
        fixtures.join("ipvs/ip_vs_stats-node_exporter.txt"),
        root.path().join("proc/net/ip_vs_stats"),
    )
    .unwrap();
    let kp = fake_kube_proxy(&fixtures);
    let kp_url = format!("http://127.0.0.1:{kp}");
    let agent = Serve::new()
        .env_clear()
        .env("PATH", bin.path())
        .arg("--host-root")
        .arg(root.path())
        .args(["--kube-proxy.metrics-url", &kp_url, "--kube-proxy.healthz-url", &kp_url])
        // A short trend window, so the time-to-full series exists quickly.
        .args(["--conntrack.interval", "100ms", "--conntrack.trend-window", "1s"])
        .start();
    let served = |m: &str, body: &str| {
        body.lines()
            .any(|l| l.starts_with(m) && l[m.len()..].starts_with(['{', ' ']))
    };

    let rules = std::fs::read_to_string(repo.join("manifests/prometheusrule.yaml")).unwrap();
    let dashboard = std::fs::read_to_string(repo.join("manifests/dashboards/proxywatch.json")).unwrap();
    let used: Vec<String> = names_in(&format!("{rules}\n{dashboard}"), "proxywatch_");
    assert!(
        used.len() > 15,
        "found only {} metric names in the rules and dashboard",
        used.len()
    );

    // kube-proxy's nftables table (the nftables panels) is read over netlink only: a
    // fixture root serves it from a netlink recording, and the recorded-netlink node's
    // golden (tests/offline/fixture_nodes.rs holds the agent's output to it) is what the
    // agent served there.
    let recorded = std::fs::read_to_string(fixtures.join("nodes/recorded-netlink/expected.metrics")).unwrap();
    assert!(
        recorded.contains("proxywatch_nftables_rules{family=\"ipv4\"}"),
        "the recorded-netlink node's nftables table"
    );
    // Poll until every used metric is there (probes run on their intervals).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut missing: Vec<String>;
    loop {
        let body = match agent.get("/metrics") {
            Ok((200, body)) => body,
            _ => String::new(),
        };
        missing = used
            .iter()
            .filter(|m| {
                let elsewhere = NEED_ACTIVITY.contains(&m.as_str())
                    || NODE_ONLY.contains(&m.as_str())
                    || (m.starts_with("proxywatch_nftables_") && served(m, &recorded));
                !elsewhere && !served(m, &body)
            })
            .cloned()
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        missing.is_empty(),
        "used by the rules or dashboard but not served: {missing:?}"
    );
    let body = agent.get("/metrics").map(|(_, b)| b).unwrap_or_default();
    fleet_conventions(&body);
    // The renderer: expose/metrics.rs and its sections under expose/metrics/.
    let mut source = std::fs::read_to_string(repo.join("agent/expose/metrics.rs")).unwrap();
    for e in std::fs::read_dir(repo.join("agent/expose/metrics")).unwrap() {
        source += &std::fs::read_to_string(e.unwrap().path()).unwrap();
    }
    for m in NEED_ACTIVITY.iter().chain(NODE_ONLY) {
        assert!(source.contains(&format!("\"{m}\"")), "{m} is not rendered by the agent");
    }

    // Finding ids the rules select on must be checks the agent has.
    let ids: Vec<&str> = proxywatch::evaluate::CHECKS.iter().map(|c| c.id).collect();
    for part in format!("{rules}\n{dashboard}").split("id=").skip(1) {
        let id: String = part
            .trim_start_matches(['"', '\\', '~'])
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if id.is_empty() {
            continue;
        }
        // `id=~"sysctl_.+"` selects by prefix: some check must have it.
        let regex_prefix = part.starts_with("~") && id.ends_with('_');
        let known = if regex_prefix {
            ids.iter().any(|i| i.starts_with(&id))
        } else {
            ids.contains(&id.as_str())
        };
        assert!(
            known,
            "rules or dashboard select finding id {id:?}, unknown to the agent"
        );
    }
}

/// What the dashboard and the upgrade note rely on, on the real agent's scrape: state sets
/// (every value, one 1), `family` ipv4/ipv6 only, no old names, and promtool's lint.
fn fleet_conventions(body: &str) {
    let samples = |name: &str| -> Vec<(String, f64)> {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .map(|l| {
                let (series, v) = l.rsplit_once(' ').unwrap();
                (series.to_string(), v.parse().unwrap())
            })
            .collect()
    };
    for (name, label, values) in [
        (
            "proxywatch_kube_proxy_mode",
            "mode",
            proxywatch::expose::metrics::KUBE_PROXY_MODES,
        ),
        (
            "proxywatch_iptables_backend_in_use",
            "backend",
            proxywatch::expose::metrics::IPTABLES_BACKENDS,
        ),
    ] {
        let got = samples(name);
        for v in values {
            assert!(
                got.iter().any(|(s, _)| s.contains(&format!("{label}=\"{v}\""))),
                "{name}: no series for {v}: {got:?}"
            );
        }
        assert_eq!(got.iter().filter(|(_, v)| *v == 1.0).count(), 1, "{name}: {got:?}");
        assert!(got.iter().all(|(_, v)| *v == 0.0 || *v == 1.0), "{name}: {got:?}");
    }
    for l in body.lines().filter(|l| l.contains("family=\"")) {
        assert!(l.contains("family=\"ipv4\"") || l.contains("family=\"ipv6\""), "{l}");
    }
    assert!(!body.contains("revision=\"unknown\""), "build_info without a revision");
    // docs/upgrading.md's renamed series: the old names are no longer served, the new ones
    // have their row in the metrics table of docs/reference.md (which tests/docs/readme.rs holds to
    // the binary).
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let note = std::fs::read_to_string(repo.join("docs/upgrading.md")).unwrap();
    let readme = std::fs::read_to_string(repo.join("docs/reference.md")).unwrap();
    let table = note.split("### Series").nth(1).unwrap().split("\n\n").nth(1).unwrap();
    let mut renames = 0;
    for row in table.lines().skip(2) {
        let cells: Vec<&str> = row.split('|').collect();
        let (old, new) = (names_in(cells[1], "proxywatch_"), names_in(cells[2], "proxywatch_"));
        assert!(!old.is_empty() && !new.is_empty(), "docs/upgrading.md: {row}");
        for o in &old {
            let served = body
                .lines()
                .any(|l| l.starts_with(&format!("{o}{{")) || l.starts_with(&format!("{o} ")));
            assert!(!served, "{o} is still served");
            assert!(
                !readme.contains(&format!("| `{o}` |")),
                "{o} still has a row in docs/reference.md"
            );
        }
        for n in &new {
            assert!(
                readme.contains(&format!("| `{n}` |")),
                "{n} has no row in docs/reference.md"
            );
        }
        renames += 1;
    }
    assert!(
        renames >= 2,
        "docs/upgrading.md lists {renames} renamed series: {table}"
    );
    if !common::can_run(&["promtool"]) {
        return;
    }
    let mut child = std::process::Command::new(common::which("promtool").unwrap())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics {}:\n{said}",
        out.status
    );
}
