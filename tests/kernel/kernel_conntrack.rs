//! The conntrack probe against the real kernel, through the real binary; and the rp_filter
//! probe, whose sysctls and drop counter are per network namespace as conntrack's statistics are.
//!
//! Every test works inside a network namespace of its own (a fresh netns has an
//! empty conntrack table and its own statistics), so exact values can be
//! asserted. Needs root, `ip` and `conntrack`; some tests also need `nft`,
//! `python3` (raw sockets for invalid packets) and `promtool`. See docs/testing.md.
use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Agent, Netns, Serve};
use proxywatch::probe::conntrack::parse_stat;
use serde_json::Value;

const STAT: &str = "/proc/net/stat/nf_conntrack";
const COUNT: &str = "/proc/sys/net/netfilter/nf_conntrack_count";
const MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
const BUCKETS: &str = "/proc/sys/net/netfilter/nf_conntrack_buckets";

/// Port the agent listens on inside a test's own namespace: every port is free there.
const NS_PORT: u16 = 9877;

/// How long to poll for a value before giving up. Generous: only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers: the namespace's kernel state, read with ordinary tools.

fn text(out: std::process::Output) -> String {
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Reads a file as seen from inside the namespace (`/proc/net` and `/proc/sys/net` are per netns).
fn ns_read(ns: &Netns, path: &str) -> String {
    text(ns.exec_ok("cat", &[path]))
}

fn ns_number(ns: &Netns, path: &str) -> u64 {
    let s = ns_read(ns, path);
    s.trim().parse().unwrap_or_else(|e| panic!("{path}: {s:?}: {e}"))
}

/// Sums `/proc/net/stat/nf_conntrack` text over CPUs per column (`entries`, a
/// global count, excepted). Independent of the crate's parser, so a bug there
/// cannot hide in both the agent and the expected value.
fn sum_stat_text(text: &str) -> BTreeMap<String, u64> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(header.first(), Some(&"entries"), "{text}");
    let mut sums = BTreeMap::new();
    let mut rows = 0;
    for line in lines {
        let values: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(values.len(), header.len(), "{text}");
        for (col, v) in header.iter().zip(values).skip(1) {
            *sums.entry(col.to_string()).or_insert(0) += u64::from_str_radix(v, 16).unwrap();
        }
        rows += 1;
    }
    assert!(rows > 0, "no CPU rows: {text}");
    sums
}

/// The `invalid` column of each CPU row.
fn ns_invalid_rows(ns: &Netns) -> Vec<u64> {
    let text = ns_read(ns, STAT);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let col = lines
        .next()
        .unwrap()
        .split_whitespace()
        .position(|c| c == "invalid")
        .expect("an invalid column");
    lines
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(col).unwrap(), 16).unwrap())
        .collect()
}

/// The namespace's `/proc/net/stat/nf_conntrack`, summed over CPUs.
fn ns_stats(ns: &Netns) -> BTreeMap<String, u64> {
    sum_stat_text(&ns_read(ns, STAT))
}

/// The `entries` column of the stat file (the same global count on every row).
fn ns_stat_entries(ns: &Netns) -> Vec<u64> {
    ns_read(ns, STAT)
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .collect()
}

/// `conntrack -C` inside the namespace.
fn ns_conntrack_count(ns: &Netns) -> u64 {
    let s = text(ns.exec_ok("conntrack", &["-C"]));
    s.trim().parse().unwrap_or_else(|e| panic!("conntrack -C: {s:?}: {e}"))
}

/// Sends `n` raw TCP SYN|FIN packets (an invalid flag combination) to a closed
/// port on 127.0.0.1, with a correct checksum so only the flags are wrong. The
/// sender hops over the CPUs, so the per-CPU rows all get counts to sum.
const SYN_FIN: &str = r#"
import os, socket, struct, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
cpus = sorted(os.sched_getaffinity(0))
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
lo = socket.inet_aton("127.0.0.1")
def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
for i in range(n):
    os.sched_setaffinity(0, {cpus[i % len(cpus)]})
    hdr = struct.pack("!HHIIBBHHH", 40000 + i, port, 1000 + i, 0, 5 << 4, 0x03, 65535, 0, 0)
    pseudo = lo + lo + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(hdr))
    hdr = hdr[:16] + struct.pack("!H", csum(pseudo + hdr)) + hdr[18:]
    s.sendto(hdr, ("127.0.0.1", 0))
"#;

/// Makes conntrack see the namespace's traffic (a `ct` expression registers its
/// hooks) and counts, on the output path, the packets it marks invalid.
fn track_and_count_invalid(ns: &Netns) {
    ns.exec_ok("nft", &["add", "table", "inet", "pwt"]);
    ns.exec_ok(
        "nft",
        &["add chain inet pwt out { type filter hook output priority 0; policy accept; }"],
    );
    ns.exec_ok("nft", &["add rule inet pwt out ct state invalid counter"]);
}

/// Packets the output chain's `ct state invalid counter` has seen.
fn nft_invalid_counter(ns: &Netns) -> u64 {
    let listing = text(ns.exec_ok("nft", &["list", "chain", "inet", "pwt", "out"]));
    let after = listing
        .split("counter packets ")
        .nth(1)
        .unwrap_or_else(|| panic!("no counter in:\n{listing}"));
    after.split_whitespace().next().unwrap().parse().unwrap()
}

/// Sends `n` SYN|FIN packets inside the namespace; returns the kernel's
/// summed `invalid` counter before and after.
fn send_invalid(ns: &Netns, n: u32) -> (u64, u64) {
    let before = ns_stats(ns)["invalid"];
    ns.exec_ok("python3", &["-c", SYN_FIN, &n.to_string(), "9"]);
    (before, ns_stats(ns)["invalid"])
}

/// `proxywatch check --format json` inside the namespace.
fn check_json(ns: &Netns, extra: &[&str]) -> Value {
    let run = common::Check::new().in_netns(ns).args(extra).run();
    // Exit 0/1/2 are verdicts (a bare netns has ip_forward=0: critical); 3 means the agent failed.
    assert!((0..=2).contains(&run.code), "check: exit {}\n{}", run.code, run.stderr);
    run.doc
}

fn json_stats(doc: &Value) -> BTreeMap<String, u64> {
    doc["facts"]["conntrack"]["stats"]
        .as_object()
        .unwrap_or_else(|| panic!("no facts.conntrack.stats in {doc:#}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

/// The value of an unlabelled series in Prometheus text.
fn metric(body: &str, name: &str) -> Option<u64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.trim().parse::<f64>().unwrap_or_else(|e| panic!("{name} {v:?}: {e}")) as u64)
}

// ---------------------------------------------------------------------------
// The agent as a server (the shared harness): stopped by its PID and reaped on drop.

/// Starts `proxywatch serve`, inside `ns` on NS_PORT when given (`ip netns exec` execs
/// the agent, so the child's PID is the agent's), else on a free loopback port; waits for
/// its first snapshot (the first `/metrics`: `first_answer()`). Requests go from inside
/// the agent's namespace.
fn serve(ns: Option<&Netns>) -> Agent {
    let mut serve = Serve::new().args(["--conntrack.interval", "200ms", "--log.level", "debug"]);
    if let Some(ns) = ns {
        serve = serve.in_netns(ns).listen(&format!("127.0.0.1:{NS_PORT}"));
    }
    serve.start()
}

/// `promtool check metrics` on a body: exit 0 and nothing printed.
fn promtool_check(body: &str, what: &str) {
    use std::io::Write;
    assert!(
        body.contains("# TYPE proxywatch_conntrack_entries gauge") && metric(body, "proxywatch_node_ready").is_some(),
        "{what}: not a proxywatch scrape:\n{body}"
    );
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
        "{what}: promtool {}:\n{said}",
        out.status
    );
}

// ---------------------------------------------------------------------------
// Tests.

/// `check` inside a fresh namespace reports exactly the entries inserted, the
/// global limit and buckets, and the namespace's statistics.
#[test]
fn check_counts_exactly_the_entries_of_its_namespace() {
    if !common::can_run(&["ip", "conntrack"]) {
        return;
    }
    // nf_conntrack_max and _buckets are global (read-only in a child netns):
    // hold the lock so no other test changes them between our reads.
    let _lock = common::global_lock();
    let ns = Netns::new("ct");
    assert_eq!(ns_conntrack_count(&ns), 0, "a new namespace starts with an empty table");
    let n = common::insert_conntrack_entries(&ns, 20000, 33, 4);
    assert_eq!(n, 37);
    assert_eq!(ns_conntrack_count(&ns), n);
    assert_eq!(ns_number(&ns, COUNT), n);
    let rows = ns_stat_entries(&ns);
    assert!(
        !rows.is_empty() && rows.iter().all(|&e| e == n),
        "stat file entries {rows:?}"
    );

    let (max, buckets, before) = (ns_number(&ns, MAX), ns_number(&ns, BUCKETS), ns_stats(&ns));
    let doc = check_json(&ns, &[]);
    let (max_after, buckets_after, after) = (ns_number(&ns, MAX), ns_number(&ns, BUCKETS), ns_stats(&ns));
    assert_eq!(
        (max, buckets),
        (max_after, buckets_after),
        "limit changed under the lock"
    );

    let ct = &doc["facts"]["conntrack"];
    assert_eq!(ct["entries"], n, "{ct:#}");
    assert_eq!(ct["max"], max, "{ct:#}");
    assert!(max > 0);
    assert_eq!(ct["buckets"], buckets, "{ct:#}");
    assert_eq!(ct["stats_source"], STAT);
    let agent = json_stats(&doc);
    assert_eq!(
        agent.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "every stat column, `entries` excepted"
    );
    for (col, v) in &agent {
        assert!(
            before[col] <= *v && *v <= after[col],
            "{col}: agent {v}, kernel {} before and {} after",
            before[col],
            after[col]
        );
    }
    // conntrack -I counts in `insert`, so the stats really are this namespace's.
    assert!(agent["insert"] >= n, "insert {} < {n}", agent["insert"]);
}

/// Packets the kernel marks invalid show up in `proxywatch_conntrack_stat_invalid_total`.
#[test]
fn invalid_packets_are_counted() {
    if !common::can_run(&["ip", "conntrack", "nft", "python3"]) {
        return;
    }
    let ns = Netns::new("ctinv");
    track_and_count_invalid(&ns);
    let sent = 7;
    let (before, after) = send_invalid(&ns, sent);
    assert_eq!(before, 0, "a new namespace starts with no invalid packets");
    let seen = nft_invalid_counter(&ns);
    assert!(
        seen >= u64::from(sent),
        "nft saw {seen} invalid packets on output, sent {sent}"
    );
    assert!(after >= seen, "kernel invalid {after} < nft's {seen}");
    let rows = ns_invalid_rows(&ns);
    if rows.len() > 1 {
        assert!(
            rows.iter().filter(|&&v| v > 0).count() > 1,
            "invalid per CPU {rows:?}: the sum must span rows"
        );
    }

    let server = serve(Some(&ns));
    // Read the kernel around the scrape: the agent's traffic on lo is tracked too.
    let k_before = ns_stats(&ns)["invalid"];
    let body = server.get_ok("/metrics");
    let k_after = ns_stats(&ns)["invalid"];
    let agent = metric(&body, "proxywatch_conntrack_stat_invalid_total")
        .unwrap_or_else(|| panic!("no proxywatch_conntrack_stat_invalid_total in:\n{body}"));
    assert!(
        k_before <= agent && agent <= k_after,
        "agent {agent}, kernel {k_before} before the scrape and {k_after} after"
    );
    assert!(agent >= after, "agent {agent} < {after} counted right after sending");
    server.stop_cleanly();
}

/// `serve` follows the namespace's table as entries come and go.
#[test]
fn serve_follows_the_table() {
    if !common::can_run(&["ip", "conntrack"]) {
        return;
    }
    let ns = Netns::new("ctserve");
    let server = serve(Some(&ns));
    let first = server.first_answer();
    assert_eq!(metric(first, "proxywatch_conntrack_entries"), Some(0), "{first}");
    // /readyz exists now; a bare namespace has ip_forward=0, so it may say "not ready".
    let (code, body) = server.get("/readyz").expect("/readyz answers");
    assert!(
        code == 200 || body.starts_with("not ready: critical findings"),
        "{code} {body}"
    );

    // Poll until the agent reports the kernel's count (or the deadline), then assert the value.
    let follow = |server: &Agent, want: u64| {
        let start = Instant::now();
        loop {
            let got = metric(&server.get_ok("/metrics"), "proxywatch_conntrack_entries");
            if got == Some(want) || start.elapsed() > DEADLINE {
                assert_eq!(got, Some(want), "agent vs conntrack -C\n{}", server.log());
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let n = common::insert_conntrack_entries(&ns, 30000, 20, 5);
    assert_eq!(ns_conntrack_count(&ns), n);
    follow(&server, n);

    ns.exec_ok("conntrack", &["-D", "-p", "udp"]);
    let left = ns_conntrack_count(&ns);
    assert_eq!(left, 20);
    follow(&server, left);
    server.stop_cleanly();
}

/// promtool accepts `/metrics`, in a namespace with non-zero counters and in the root namespace.
#[test]
fn promtool_accepts_metrics() {
    if !common::can_run(&["ip", "conntrack", "nft", "python3", "promtool"]) {
        return;
    }
    {
        let ns = Netns::new("ctprom");
        track_and_count_invalid(&ns);
        send_invalid(&ns, 3);
        common::insert_conntrack_entries(&ns, 40000, 5, 2);
        let server = serve(Some(&ns));
        let body = server.first_answer().to_string();
        // At least the 7 inserted: the namespace's tracked loopback HTTP adds its own entries.
        assert!(metric(&body, "proxywatch_conntrack_entries") >= Some(7), "{body}");
        assert!(
            metric(&body, "proxywatch_conntrack_stat_invalid_total") > Some(0),
            "{body}"
        );
        promtool_check(&body, "netns /metrics");
        server.stop_cleanly();
    }
    // The root namespace: read-only, but its rule sets are global state other tests change.
    let _lock = common::global_lock();
    // On a free loopback port (the harness tries another if one is taken meanwhile).
    let server = serve(None);
    promtool_check(server.first_answer(), "root namespace /metrics");
    server.stop_cleanly();
}

/// `conntrack -S` summed over CPUs, by the proc file's column names (conntrack-tools names
/// three counters differently): the tool a user would run, read by the test, not the agent.
fn sum_conntrack_s(text: &str) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("cpu=")) {
        for field in line.split_whitespace().skip(1) {
            let (name, value) = field.split_once('=').unwrap_or_else(|| panic!("{field} in {line}"));
            let name = match name {
                "error" => "icmp_error",
                "clash_resolve" => "clashres",
                "chaintoolong" => "chainlength",
                other => other,
            };
            *sums.entry(name.to_string()).or_insert(0) += value.parse::<u64>().unwrap();
        }
    }
    assert!(!sums.is_empty(), "no cpu= line in {text}");
    sums
}

/// Without the proc file the agent asks ctnetlink; the three (the proc file, `conntrack -S`
/// and the agent over ctnetlink) agree on the real kernel.
#[test]
fn ctnetlink_fallback_matches_the_proc_file_and_conntrack_s() {
    if !common::can_run(&["ip", "conntrack", "nft", "python3", "unshare"]) {
        return;
    }
    let ns = Netns::new("ctstat");
    track_and_count_invalid(&ns);
    let (_, invalid) = send_invalid(&ns, 5);
    assert!(invalid >= 5, "invalid {invalid}");
    let n = common::insert_conntrack_entries(&ns, 50000, 6, 0);

    // Nothing runs in the namespace now, so the counters hold still; re-read if they moved.
    let (proc_stats, tool_stats) = (0..5)
        .find_map(|_| {
            let raw = ns_read(&ns, STAT);
            let tool = sum_conntrack_s(&text(ns.exec_ok("conntrack", &["-S"])));
            let proc = parse_stat(STAT, &raw).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                proc,
                sum_stat_text(&raw),
                "the crate's parse_stat vs a plain sum of\n{raw}"
            );
            (ns_stats(&ns) == proc).then_some((proc, tool))
        })
        .expect("counters kept moving in an idle namespace");
    let common_cols: Vec<&String> = tool_stats.keys().filter(|k| proc_stats.contains_key(*k)).collect();
    for col in [
        "invalid",
        "drop",
        "early_drop",
        "insert_failed",
        "found",
        "insert",
        "search_restart",
        "icmp_error",
        "clashres",
        "chainlength",
    ] {
        assert!(
            common_cols.iter().any(|c| *c == col),
            "{col} not in both: {tool_stats:?} / {proc_stats:?}"
        );
    }
    for col in &common_cols {
        assert_eq!(tool_stats[*col], proc_stats[*col], "{col}: conntrack -S vs {STAT}");
    }
    assert_eq!(proc_stats["invalid"], invalid);
    assert!(proc_stats["insert"] >= n);

    // A root with the count and limit but no stat file.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("proc/sys/net/netfilter");
    std::fs::create_dir_all(&dir).unwrap();
    for f in [COUNT, MAX] {
        std::fs::write(root.path().join(&f[1..]), ns_read(&ns, f)).unwrap();
    }

    // On the node itself (--host-root /) without the stat file: ctnetlink, no
    // command. The agent runs in a mount namespace of its own whose /proc is a
    // directory holding only the count and the limit; a stand-in `conntrack`
    // on its PATH would leave a mark if it ran (the agent runs no command for it).
    let fake = root.path().join("proc");
    let bin_dir = root.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let marker = root.path().join("conntrack-ran");
    let stand_in = bin_dir.join("conntrack");
    std::fs::write(&stand_in, format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display())).unwrap();
    std::fs::set_permissions(&stand_in, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        "mount --bind {} /proc && exec env PATH={} {} check --format json --node-name t",
        fake.display(),
        bin_dir.display(),
        common::binary().display()
    );
    let out = ns
        .command("unshare", &["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr)));
    let ct = &doc["facts"]["conntrack"];
    assert_eq!(
        ct["stats_source"], "ctnetlink",
        "{ct:#} / {:#}",
        doc["probes"]["conntrack"]
    );
    assert!(!marker.exists(), "the agent ran conntrack");
    assert_eq!(ct["entries"], n);
    let agent = json_stats(&doc);
    assert_eq!(agent, tool_stats, "agent (ctnetlink) vs conntrack -S");
    for col in &common_cols {
        assert_eq!(agent[*col], proc_stats[*col], "{col}: agent (ctnetlink) vs {STAT}");
    }
}

// ---------------------------------------------------------------------------
// Reverse-path filtering: rp_filter and TcpExt IPReversePathFilter are per network namespace too.

/// `TcpExt: IPReversePathFilter` in the namespace's `/proc/net/netstat`, read here with its
/// own few lines (not the crate's parser).
fn ns_rp_filter_drops(ns: &Netns) -> u64 {
    let text = ns_read(ns, "/proc/net/netstat");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("TcpExt:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let at = rows[0]
        .iter()
        .position(|n| *n == "IPReversePathFilter")
        .expect("IPReversePathFilter");
    rows[1][at].parse().unwrap()
}

/// Sends `n` UDP datagrams from the client's 10.98.2.5 to the node's 10.98.1.1 (port 9: no
/// listener, an answer is never needed).
fn send_from_the_other_side(client: &Netns, n: u32) {
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('10.98.2.5', 0))\nfor _ in range({n}):\n    s.sendto(b'x', ('10.98.1.1', 9))\n"
    );
    client.exec_ok("python3", &["-c", &script]);
}

/// The agent's finding `id` from /findings (ok findings are not listed: None), once `ok` holds.
fn finding_where(server: &Agent, id: &str, ok: impl Fn(Option<&Value>) -> bool) -> Option<Value> {
    common::poll(id, DEADLINE, || {
        let (_, body) = server.get("/findings")?;
        let doc: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let f = doc.as_array().and_then(|l| l.iter().find(|f| f["id"] == id)).cloned();
        if ok(f.as_ref()) {
            Ok(f)
        } else {
            Err(body)
        }
    })
}

/// A node namespace whose veth (10.98.1.1/24) faces a client namespace, and whose route to the
/// client's second address (10.98.2.0/24) leaves by another interface (a second veth): the
/// asymmetric path of a node with two uplinks. The client's datagrams from 10.98.2.5 come in by the veth. Strict on
/// the veth: the kernel drops every one (its counter says so); the agent's count equals the
/// kernel's, rp_filter_drops warns naming the veth, sysctl_rp_filter_strict is info. Loose: the
/// same datagrams pass, the counter stands still, and both findings clear.
#[test]
fn strict_rp_filter_drops_are_counted_and_clear_when_loose() {
    if !common::can_run(&["ip", "python3", "sysctl"]) {
        return;
    }
    let node = Netns::new("rpnode");
    let client = Netns::new("rpcli");
    common::run(
        "ip",
        &[
            "link",
            "add",
            "pwrp-n",
            "address",
            "02:00:0a:62:01:01",
            "netns",
            &node.name,
            "type",
            "veth",
            "peer",
            "name",
            "pwrp-c",
            "address",
            "02:00:0a:62:01:02",
            "netns",
            &client.name,
        ],
    );
    for args in [
        &["addr", "add", "10.98.1.1/24", "dev", "pwrp-n"][..],
        &["link", "set", "pwrp-n", "up"],
        // The second uplink: a veth whose peer stays unaddressed (no dummy module is loaded here).
        &["link", "add", "pwrp-d", "type", "veth", "peer", "name", "pwrp-e"],
        &["addr", "add", "10.98.2.1/24", "dev", "pwrp-d"],
        &["link", "set", "pwrp-e", "up"],
        &["link", "set", "pwrp-d", "up"],
    ] {
        node.exec_ok("ip", args);
    }
    for args in [
        &["addr", "add", "10.98.1.2/24", "dev", "pwrp-c"][..],
        &["addr", "add", "10.98.2.5/32", "dev", "lo"],
        &["link", "set", "pwrp-c", "up"],
        // A fixed neighbour: the node's ARP answers are subject to the same check.
        &[
            "neigh",
            "add",
            "10.98.1.1",
            "lladdr",
            "02:00:0a:62:01:01",
            "dev",
            "pwrp-c",
            "nud",
            "permanent",
        ],
    ] {
        client.exec_ok("ip", args);
    }
    // A new namespace inherits conf.all from the root one: set it, so only the veth decides.
    let rp = |all: &str, veth: &str| {
        node.exec_ok(
            "sysctl",
            &[
                "-q",
                "-w",
                &format!("net.ipv4.conf.all.rp_filter={all}"),
                &format!("net.ipv4.conf.pwrp-n.rp_filter={veth}"),
                "net.ipv4.conf.pwrp-d.rp_filter=0",
            ],
        );
    };
    rp("0", "1");
    assert_eq!(ns_rp_filter_drops(&node), 0, "a fresh namespace");

    let server = Serve::new()
        .args(["--rp-filter.interval", "200ms", "--rp-filter.window", "3s"])
        .in_netns(&node)
        .listen(&format!("127.0.0.1:{NS_PORT}"))
        .start();
    let strict = finding_where(&server, "sysctl_rp_filter_strict", |f| f.is_some()).unwrap();
    assert_eq!(strict["severity"], "info", "{strict}");
    assert_eq!(strict["summary"], "strict reverse-path filtering on pwrp-n", "{strict}");
    assert_eq!(
        strict["evidence"]["interfaces"]["pwrp-n"],
        serde_json::json!({"value": 1, "effective": 1})
    );
    assert_eq!(
        strict["evidence"]["interfaces"]["pwrp-d"],
        serde_json::json!({"value": 0, "effective": 0})
    );
    // The agent has read the counter at 0 twice before any packet (a rate needs two readings):
    // what follows is all in its window.
    common::poll("a rate of 0", DEADLINE, || {
        let s = server.snapshot()?;
        let d = &s["derived"]["rp_filter_drops"];
        (s["facts"]["rp_filter"]["drops_total"] == 0 && d["increase"] == 0 && d["seconds"].as_f64() > Some(0.0))
            .then_some(())
            .ok_or_else(|| s["derived"].to_string())
    });
    assert!(finding_where(&server, "rp_filter_drops", |f| f.is_none()).is_none());

    send_from_the_other_side(&client, 500);
    let dropped = ns_rp_filter_drops(&node);
    assert_eq!(dropped, 500, "the kernel dropped every datagram");
    let drops = finding_where(&server, "rp_filter_drops", |f| {
        f.is_some_and(|f| f["evidence"]["packets_total"] == dropped)
    })
    .unwrap();
    assert_eq!(drops["severity"], "warning", "{drops}");
    assert_eq!(drops["evidence"]["packets"], dropped, "{drops}");
    assert_eq!(
        drops["evidence"]["strict_interfaces"],
        serde_json::json!(["pwrp-n"]),
        "{drops}"
    );
    assert!(
        drops["summary"].as_str().unwrap().ends_with("(strict on pwrp-n)"),
        "{drops}"
    );
    let metrics = server.get_ok("/metrics");
    assert_eq!(
        metric(&metrics, "proxywatch_rp_filter_drops_total"),
        Some(dropped),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "proxywatch_rp_filter{interface=\"pwrp-n\"}"),
        Some(1),
        "{metrics}"
    );
    assert!(
        drops["remediation"].as_array().unwrap().iter().any(|r| r
            .as_str()
            .unwrap()
            .contains("sudo sysctl -w net.ipv4.conf.pwrp-n.rp_filter=2.")),
        "{drops}"
    );

    // Loose: the same traffic passes; the counter stands, the findings clear (the drops once
    // the window has passed them).
    rp("0", "2");
    send_from_the_other_side(&client, 500);
    assert_eq!(ns_rp_filter_drops(&node), dropped, "loose mode drops none of them");
    finding_where(&server, "sysctl_rp_filter_strict", |f| f.is_none());
    finding_where(&server, "rp_filter_drops", |f| f.is_none());
    let s = server.snapshot().unwrap();
    assert_eq!(
        s["facts"]["rp_filter"]["drops_total"], dropped,
        "{}",
        s["facts"]["rp_filter"]
    );
    assert_eq!(s["derived"]["rp_filter_drops"]["increase"], 0, "{}", s["derived"]);
    server.stop_cleanly();
}
