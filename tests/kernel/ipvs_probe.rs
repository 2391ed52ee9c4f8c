//! The IPVS probe end to end: through the exec path with stand-in `ipvsadm`
//! scripts on a temporary host root, through the `/proc/net/ip_vs` fallback,
//! against a real `kube-ipvs0` interface in a network namespace, and on a
//! fixture node in IPVS mode whose modules are missing. A real IPVS kernel is
//! tests/vm/vm_kernel.rs's.
//!
//! Expected numbers are computed here from the fixture files with simple,
//! independent line counting, never taken from the agent's own parsers.
use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The probes that only read host files (all ok on the copied fixture node).
const FILE_PROBES: &[&str] = &["conntrack", "modules", "node", "sysctls"];

fn ipvs_fixture(name: &str) -> PathBuf {
    common::fixtures().join("ipvs").join(name)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

struct Run {
    doc: Value,
    code: i32,
}

impl Run {
    fn status(&self, probe: &str) -> &str {
        self.doc["probes"][probe]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("probe {probe} missing in {:#}", self.doc["probes"]))
    }

    fn ipvs_error(&self) -> &str {
        self.doc["probes"]["ipvs"]["error"].as_str().unwrap_or("")
    }

    fn finding(&self, id: &str) -> Option<&Value> {
        self.doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
    }
}

/// `proxywatch check --format json` with no inherited environment (clap reads
/// PROXYWATCH_*) and the given PATH; `host_root` None means the real host (`/`), where
/// `Check::run` holds the live-/proc lock.
fn check(host_root: Option<&Path>, path: impl Into<OsString>, extra: &[&str]) -> Run {
    let path: OsString = path.into();
    let mut check = common::Check::new()
        .env_clear()
        .env("PATH", path)
        .args(["--node-name", "ipvs-test"]);
    if let Some(root) = host_root {
        check = check.host_root(root);
    }
    let run = check.args(common::NO_KUBE_PROXY).args(extra).run();
    Run {
        doc: run.doc,
        code: run.code,
    }
}

// ---------------------------------------------------------------------------
// 1. A real kernel: tests/vm/vm_kernel.rs boots Debian's kernel in a VM, with IPVS
// loaded (the table against ipvsadm, both sources) and with IPVS available as
// modules but not loaded (absent, ipvsadm never run, no module loaded). The
// tests that used this machine's kernel could only ever run one way here.

// ---------------------------------------------------------------------------
// Independent reading of the fixtures.

/// What the test itself reads from a table: one entry per virtual server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Vs {
    protocol: String,
    /// `ADDR:PORT` as decoded here, or the mark for FWM (decimal).
    name: String,
    scheduler: String,
    weights: Vec<i64>,
}

/// Lines starting with a protocol are services, `  ->` lines after the titles
/// are their destinations (the title line holds "RemoteAddress").
fn read_table(text: &str, decode: fn(&str, &str) -> String) -> Vec<Vs> {
    let mut out: Vec<Vs> = Vec::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if ["TCP", "UDP", "FWM", "SCTP"].iter().any(|p| line.starts_with(p)) {
            out.push(Vs {
                protocol: t[0].to_string(),
                name: decode(t[0], t[1]),
                scheduler: t[2].to_string(),
                weights: Vec::new(),
            });
        } else if line.starts_with("  ->") && !line.contains("RemoteAddress") {
            // "->", address, forward, weight, ...
            out.last_mut().unwrap().weights.push(t[3].parse().unwrap());
        }
    }
    out
}

fn decode_ipvsadm(protocol: &str, token: &str) -> String {
    if protocol == "FWM" {
        return token.to_string();
    }
    let (addr, port) = token.rsplit_once(':').unwrap();
    let addr: IpAddr = addr.trim_matches(['[', ']']).parse().unwrap();
    format!("{addr}:{}", port.parse::<u16>().unwrap())
}

fn decode_proc(protocol: &str, token: &str) -> String {
    if protocol == "FWM" {
        return u32::from_str_radix(token, 16).unwrap().to_string();
    }
    let (addr, port) = token.rsplit_once(':').unwrap();
    let addr: IpAddr = if let Some(v6) = addr.strip_prefix('[') {
        IpAddr::V6(v6.trim_end_matches(']').parse::<Ipv6Addr>().unwrap())
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(addr, 16).unwrap()))
    };
    format!("{addr}:{}", u16::from_str_radix(port, 16).unwrap())
}

/// The agent's `detail` entries named like [`Vs::name`].
fn detail_names(facts: &Value) -> BTreeSet<(String, String)> {
    facts["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let proto = v["protocol"].as_str().unwrap().to_string();
            let name = match v["fwmark"].as_u64() {
                Some(m) => m.to_string(),
                None => format!("{}:{}", v["address"].as_str().unwrap(), v["port"]),
            };
            (proto, name)
        })
        .collect()
}

/// Asserts the summary numbers against the test's own reading of the table.
fn assert_counts(facts: &Value, table: &[Vs], what: &str) {
    assert!(!table.is_empty(), "{what}: the fixture has services");
    let real: usize = table.iter().map(|v| v.weights.len()).sum();
    let without = table.iter().filter(|v| v.weights.iter().all(|w| *w <= 0)).count();
    assert_eq!(facts["virtual_servers"], table.len() as u64, "{what}");
    assert_eq!(facts["real_servers"], real as u64, "{what}");
    assert_eq!(facts["without_backends"], without as u64, "{what}");
    // Every weight-0 real server is listed, and counted under its service's protocol.
    let mut at_zero = std::collections::BTreeMap::new();
    for v in table {
        let n = v.weights.iter().filter(|w| **w == 0).count() as u64;
        if n > 0 {
            *at_zero.entry(v.protocol.clone()).or_insert(0u64) += n;
        }
    }
    let listed: u64 = at_zero.values().sum();
    assert_eq!(facts["weight_zero"].as_array().unwrap().len() as u64, listed, "{what}");
    let by_protocol: std::collections::BTreeMap<String, u64> =
        serde_json::from_value(facts["weight_zero_by_protocol"].clone()).unwrap();
    assert_eq!(by_protocol, at_zero, "{what}");
    let mut groups = std::collections::BTreeMap::new();
    for v in table {
        *groups.entry((v.protocol.clone(), v.scheduler.clone())).or_insert(0u64) += 1;
    }
    let got: std::collections::BTreeMap<(String, String), u64> = facts["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                (
                    g["protocol"].as_str().unwrap().into(),
                    g["scheduler"].as_str().unwrap().into(),
                ),
                g["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, groups, "{what}: groups");
    let want: BTreeSet<(String, String)> = table.iter().map(|v| (v.protocol.clone(), v.name.clone())).collect();
    assert_eq!(detail_names(facts), want, "{what}: services");
}

/// `/proc/net/ip_vs_stats`: totals on line 3, rates on line 6, all hex.
fn assert_global_stats(facts: &Value) {
    let text = read(&ipvs_fixture("ip_vs_stats-node_exporter.txt"));
    let lines: Vec<&str> = text.lines().collect();
    let hex = |line: &str| -> Vec<u64> {
        line.split_whitespace()
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .collect()
    };
    let (totals, rates) = (hex(lines[2]), hex(lines[5]));
    let s = &facts["stats"];
    let names = [
        "connections",
        "incoming_packets",
        "outgoing_packets",
        "incoming_bytes",
        "outgoing_bytes",
    ];
    for (i, n) in names.iter().enumerate() {
        assert_eq!(s[n], totals[i], "stats.{n}");
        assert_eq!(s[format!("{n}_per_second")], rates[i], "stats.{n}_per_second");
    }
}

// ---------------------------------------------------------------------------
// 2./3. A temporary host root with IPVS, and stand-in ipvsadm scripts.

/// A host root: the ipvs-modules-loaded fixture node (so the file probes are
/// ok), with `proc/net/ip_vs` and `proc/net/ip_vs_stats` from the given
/// fixtures, an empty `exec/` for stand-ins, and no netlink recording.
fn ipvs_root(tmp: &Path, proc_ip_vs: &str) -> PathBuf {
    let root = tmp.join("root");
    // Files only: no netlink recording, so no kernel to ask (kube-ipvs0 is not read).
    common::copy_files_only("ipvs-modules-loaded", &root);
    for golden in ["expected.json", "expected.txt"] {
        let _ = std::fs::remove_file(root.join(golden));
    }
    std::fs::copy(ipvs_fixture(proc_ip_vs), root.join("proc/net/ip_vs")).unwrap();
    std::fs::copy(
        ipvs_fixture("ip_vs_stats-node_exporter.txt"),
        root.join("proc/net/ip_vs_stats"),
    )
    .unwrap();
    root
}

/// A sleep duration no other process on the machine uses: marks this test's processes.
fn marker(variant: u32) -> String {
    format!("{}.{}", 4000 + variant, std::process::id())
}

/// Processes whose argv contains `marker` as one argument.
fn with_marker(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
            found.push(format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// SIGKILLed processes can take a moment to be torn down: look again for a
/// short while before calling one a leftover (no timing is asserted).
fn assert_no_leftover(marker: &str, what: &str) {
    for _ in 0..50 {
        if with_marker(marker).is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(40));
    }
    panic!("{what}: leftover processes: {:?}", with_marker(marker));
}

/// What the stand-in does for `ipvsadm -Ln` (the stats call, when reached, prints its fixture).
enum Behaviour {
    /// Print the list fixture, then the stats fixture for `-Ln --stats --exact`.
    Capture,
    /// Run a long /bin/sleep (a child of the shell, not exec'd).
    Hang,
    /// Write a message to stderr and exit 1.
    Fail(&'static str),
    /// Print the given text (garbage).
    Print(&'static str),
}

/// `text` as one single-quoted shell word.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Writes `exec/ipvsadm` (+ its fixture files) in `root`. Every stand-in first
/// starts a background /bin/sleep with `marker` (a grandchild left in the
/// command's process group, output detached) that the agent must kill.
fn stand_in(root: &Path, list: &str, stats: &str, behaviour: Behaviour, marker: &str) {
    let exec = root.join("exec");
    std::fs::create_dir_all(&exec).unwrap();
    std::fs::write(exec.join("ln.txt"), list).unwrap();
    std::fs::write(exec.join("ln-stats.txt"), stats).unwrap();
    let print = |file: &str| {
        format!("while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done < \"${{0%/*}}/{file}\"")
    };
    let list_action = match behaviour {
        Behaviour::Capture => print("ln.txt"),
        Behaviour::Hang => format!("/bin/sleep {marker}"),
        Behaviour::Fail(msg) => format!("printf '%s\\n' {} >&2; exit 1", sh_quote(msg)),
        Behaviour::Print(text) => format!("printf '%s' {}", sh_quote(text)),
    };
    write_executable(
        &exec.join("ipvsadm"),
        &format!(
            "#!/bin/sh\n\
             /bin/sleep {marker} </dev/null >/dev/null 2>&1 &\n\
             case \"$*\" in\n\
             '-Ln') {list_action} ;;\n\
             '-Ln --stats --exact') {} ;;\n\
             *) printf 'stand-in ipvsadm: unexpected arguments: %s\\n' \"$*\" >&2; exit 2 ;;\n\
             esac\n",
            print("ln-stats.txt")
        ),
    );
}

#[test]
fn stand_in_ipvsadm_refuses_other_arguments() {
    // The stand-ins must fail loudly if the agent ever calls ipvsadm differently.
    let tmp = tempfile::tempdir().unwrap();
    let list = read(&ipvs_fixture("ln-wrr-weight-electrocucaracha.txt"));
    let stats = read(&ipvs_fixture("stats-ln-stats-rate-wrr-electrocucaracha.txt"));
    let m = marker(0);
    stand_in(tmp.path(), &list, &stats, Behaviour::Capture, &m);
    let run = |args: &[&str]| {
        Command::new(tmp.path().join("exec/ipvsadm"))
            .env_clear()
            .args(args)
            .output()
            .expect("run stand-in")
    };
    let ok = run(&["-Ln"]);
    assert!(ok.status.success());
    assert_eq!(String::from_utf8(ok.stdout).unwrap(), list);
    assert_eq!(
        String::from_utf8(run(&["-Ln", "--stats", "--exact"]).stdout).unwrap(),
        stats
    );
    assert_eq!(run(&["-Ln", "--stats"]).status.code(), Some(2));
    assert_eq!(run(&[]).status.code(), Some(2));
    // Nothing here kills the background sleeps, so the /proc scan must see them
    // (it is what the agent tests rely on); wait for the forked shells to exec.
    let mut ours = with_marker(&m);
    for _ in 0..50 {
        if ours.len() >= 4 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(40));
        ours = with_marker(&m);
    }
    assert_eq!(ours.len(), 4, "one background sleep per stand-in run: {ours:?}");
    // Ours to end, by pid.
    for p in ours {
        let pid: i32 = p.split(':').next().unwrap().parse().unwrap();
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    assert_no_leftover(&m, "stand-in self-test cleanup");
}

/// The wrr lab capture: `-Ln` and `-Ln --stats` of the same single service, so stats merge.
#[test]
fn stand_in_ipvsadm_list_and_stats_are_summarised() {
    let list = read(&ipvs_fixture("ln-wrr-weight-electrocucaracha.txt"));
    let stats = read(&ipvs_fixture("stats-ln-stats-rate-wrr-electrocucaracha.txt"));
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "node_exporter-v4-fwm-tunnel.txt");
    let m = marker(1);
    stand_in(&root, &list, &stats, Behaviour::Capture, &m);
    let r = check(Some(&root), root.join("exec"), &[]);
    assert_no_leftover(&m, "capture");
    assert_eq!(r.status("ipvs"), "ok", "{:#}", r.doc["probes"]["ipvs"]);
    for p in FILE_PROBES {
        assert_eq!(r.status(p), "ok", "{p}");
    }
    let facts = &r.doc["facts"]["ipvs"];
    assert_eq!(facts["source"], "ipvsadm");
    assert_counts(facts, &read_table(&list, decode_ipvsadm), "wrr list");
    // Not the /proc/net/ip_vs table (4 services), which the host root also has.
    assert_ne!(facts["virtual_servers"], 4);
    assert!(facts["interface"].is_null(), "netlink is not asked for a fixture root");
    assert_global_stats(facts);

    // Per-service counters: the stats capture's service line, read here.
    let line = stats.lines().find(|l| l.starts_with("TCP")).unwrap();
    let t: Vec<&str> = line.split_whitespace().collect();
    let want: Vec<u64> = t[2..7].iter().map(|n| n.parse().unwrap()).collect();
    let detail = &facts["detail"][0];
    assert_eq!(
        format!("{}:{}", detail["address"].as_str().unwrap(), detail["port"]),
        t[1]
    );
    let s = &detail["stats"];
    let got = [
        &s["connections"],
        &s["incoming_packets"],
        &s["outgoing_packets"],
        &s["incoming_bytes"],
        &s["outgoing_bytes"],
    ];
    let got: Vec<u64> = got.iter().map(|v| v.as_u64().expect("merged stats")).collect();
    assert_eq!(got, want);
}

/// kube-proxy's kind capture: a dozen services, TCP and UDP; the stats output
/// is ipvsadm's header only (no services), so nothing is merged.
#[test]
fn stand_in_ipvsadm_kube_proxy_table_counts() {
    let list = read(&ipvs_fixture("ln-kube-proxy-ipvs-kind-tkng.txt"));
    let stats_full = read(&ipvs_fixture("stats-ln-stats-rate-wrr-electrocucaracha.txt"));
    let stats: String = stats_full.lines().take(3).map(|l| format!("{l}\n")).collect();
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "node_exporter-v4-fwm-tunnel.txt");
    let m = marker(2);
    stand_in(&root, &list, &stats, Behaviour::Capture, &m);
    let r = check(Some(&root), root.join("exec"), &[]);
    assert_no_leftover(&m, "kind capture");
    assert_eq!(r.status("ipvs"), "ok", "{:#}", r.doc["probes"]["ipvs"]);
    let facts = &r.doc["facts"]["ipvs"];
    assert_eq!(facts["source"], "ipvsadm");
    let table = read_table(&list, decode_ipvsadm);
    assert!(table.iter().any(|v| v.protocol == "UDP"), "fixture has UDP");
    assert_counts(facts, &table, "kind list");
    assert!(facts["detail"].as_array().unwrap().iter().all(|v| v["stats"].is_null()));
    assert_global_stats(facts);
}

/// One failing stand-in: ipvs fails with `want` in its error, nothing else changes.
fn assert_ipvs_fails_alone(variant: u32, behaviour: Behaviour, extra: &[&str], want: &str) {
    let list = read(&ipvs_fixture("ln-wrr-weight-electrocucaracha.txt"));
    let stats = read(&ipvs_fixture("stats-ln-stats-rate-wrr-electrocucaracha.txt"));
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "node_exporter-v4-fwm-tunnel.txt");
    // Baseline: the same root with a working stand-in.
    let m = marker(variant);
    stand_in(&root, &list, &stats, Behaviour::Capture, &m);
    let baseline = check(Some(&root), root.join("exec"), extra);
    assert_eq!(baseline.status("ipvs"), "ok", "{:#}", baseline.doc["probes"]["ipvs"]);

    stand_in(&root, &list, &stats, behaviour, &m);
    let r = check(Some(&root), root.join("exec"), extra);
    assert_no_leftover(&m, want);
    assert_eq!(r.status("ipvs"), "failed", "{want}: {:#}", r.doc["probes"]["ipvs"]);
    let err = r.ipvs_error();
    assert!(err.contains(want), "error {err:?} lacks {want:?}");
    assert!(err.contains("ipvsadm -Ln"), "error names the command: {err}");
    assert!(r.doc["facts"]["ipvs"].is_null(), "no facts from a failed probe");
    let f = r.finding("probe_failed").expect("probe_failed finding");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["evidence"]["ipvs"], err);
    for (p, o) in r.doc["probes"].as_object().unwrap() {
        if p != "ipvs" {
            assert_eq!(o["status"], baseline.doc["probes"][p]["status"], "{want}: {p}: {o:#}");
        }
    }
    for p in FILE_PROBES {
        assert_eq!(r.status(p), "ok", "{want}: {p}");
    }
    assert!(r.code == 1 || r.code == 2, "exit {}", r.code);
}

#[test]
fn stand_in_ipvsadm_that_hangs_times_out_and_is_killed() {
    assert_ipvs_fails_alone(3, Behaviour::Hang, &["--ipvs.timeout", "2s"], "timed out");
}

#[test]
fn stand_in_ipvsadm_exit_1_reports_its_stderr() {
    let msg = "Can't initialize ipvs: Protocol not available";
    assert_ipvs_fails_alone(4, Behaviour::Fail(msg), &[], msg);
}

#[test]
fn stand_in_ipvsadm_garbage_fails_with_line_number() {
    // ipvsadm's three header lines, then a line that is no service or destination.
    let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
                Prot LocalAddress:Port Scheduler Flags\n  \
                -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n\
                this is not ipvsadm output\n";
    assert_ipvs_fails_alone(5, Behaviour::Print(text), &[], "ipvsadm -Ln: line 4:");
}

#[test]
fn stand_in_ipvsadm_output_over_the_configured_cap_is_killed() {
    // `--exec.max-output-bytes` caps ipvsadm's stdout as it caps the rule-set dumps.
    let list = read(&ipvs_fixture("ln-wrr-weight-electrocucaracha.txt"));
    let stats = read(&ipvs_fixture("stats-ln-stats-rate-wrr-electrocucaracha.txt"));
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "node_exporter-v4-fwm-tunnel.txt");
    let m = marker(6);
    stand_in(&root, &list, &stats, Behaviour::Capture, &m);
    let cap = list.len() / 2;
    let r = check(
        Some(&root),
        root.join("exec"),
        &["--exec.max-output-bytes", &cap.to_string()],
    );
    assert_no_leftover(&m, "over the cap");
    assert_eq!(r.status("ipvs"), "failed", "{:#}", r.doc["probes"]["ipvs"]);
    let want = format!("ipvsadm -Ln: output exceeds {cap} bytes; killed");
    assert!(
        r.ipvs_error().contains(&want),
        "error {:?} lacks {want:?}",
        r.ipvs_error()
    );
    assert!(r.doc["facts"]["ipvs"].is_null(), "no facts from a failed probe");
    // A cap above both outputs: the same stand-in is fine.
    let enough = list.len().max(stats.len()) + 64;
    let r = check(
        Some(&root),
        root.join("exec"),
        &["--exec.max-output-bytes", &enough.to_string()],
    );
    assert_no_leftover(&m, "under the cap");
    assert_eq!(r.status("ipvs"), "ok", "{:#}", r.doc["probes"]["ipvs"]);
    assert_eq!(r.doc["facts"]["ipvs"]["source"], "ipvsadm");
}

#[test]
fn proc_ip_vs_fallback_without_ipvsadm_ipv4_fwm() {
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "node_exporter-v4-fwm-tunnel.txt");
    // exec/ exists but holds no ipvsadm.
    let r = check(Some(&root), root.join("exec"), &[]);
    assert_eq!(r.status("ipvs"), "ok", "{:#}", r.doc["probes"]["ipvs"]);
    let facts = &r.doc["facts"]["ipvs"];
    assert_eq!(facts["source"], "/proc/net/ip_vs");
    let table = read_table(&read(&ipvs_fixture("node_exporter-v4-fwm-tunnel.txt")), decode_proc);
    assert!(table.iter().any(|v| v.protocol == "FWM"), "fixture has FWM");
    assert_counts(facts, &table, "node_exporter proc");
    assert_global_stats(facts);
}

#[test]
fn proc_ip_vs_fallback_without_ipvsadm_ipv6() {
    let tmp = tempfile::tempdir().unwrap();
    let root = ipvs_root(tmp.path(), "prometheus-procfs-ttar-v4-v6-fwm.txt");
    let r = check(Some(&root), root.join("exec"), &[]);
    assert_eq!(r.status("ipvs"), "ok", "{:#}", r.doc["probes"]["ipvs"]);
    let facts = &r.doc["facts"]["ipvs"];
    assert_eq!(facts["source"], "/proc/net/ip_vs");
    let table = read_table(
        &read(&ipvs_fixture("prometheus-procfs-ttar-v4-v6-fwm.txt")),
        decode_proc,
    );
    assert!(table.iter().any(|v| v.name.starts_with("2620::1:")), "fixture has IPv6");
    // Its FWM service has only weight-0 destinations.
    assert!(table.iter().any(|v| v.weights.iter().all(|w| *w <= 0)));
    assert_counts(facts, &table, "procfs proc v4+v6");
    let v6 = facts["detail"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["address"] == "2620::1")
        .expect("IPv6 service");
    assert_eq!(v6["real_servers"][2]["address"], "2620::4");
    assert_eq!(facts["without_backends_sample"], serde_json::json!(["FWM 268439552"]));
    assert_eq!(u32::from_str_radix("10001000", 16).unwrap(), 268_439_552);
}

// ---------------------------------------------------------------------------
// 4. A real kube-ipvs0 interface, read over netlink from inside a namespace.

/// Runs `local_addresses()` on a fresh thread that joined the namespace (the
/// test's other threads stay where they are; the thread ends with the call).
fn local_addresses_in(ns: &common::Netns) -> proxywatch::probe::ipvs::interface::LocalAddresses {
    let path = format!("/var/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(proxywatch::probe::ipvs::interface::local_addresses())
            .expect("local_addresses")
    })
    .join()
    .expect("netns thread")
}

#[test]
fn kube_ipvs0_in_netns_real() {
    if !common::can_run(&["ip"]) {
        return;
    }
    let ns = common::Netns::new("ipvs0");
    let dummy = ns
        .command("ip", &["link", "add", "kube-ipvs0", "type", "dummy"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let mut want_links: BTreeSet<String> = ["lo", "kube-ipvs0"].map(String::from).into();
    if !dummy.success() {
        eprintln!("note: no dummy links in this kernel; kube-ipvs0 is a veth here");
        ns.exec_ok(
            "ip",
            &["link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "pwt-peer"],
        );
        want_links.insert("pwt-peer".into());
    }
    let bound = ["10.96.0.1/32", "10.96.0.10/32", "fd00::1/128"];
    for a in bound {
        ns.exec_ok("ip", &["addr", "add", a, "dev", "kube-ipvs0", "nodad"]);
    }
    let want_on_ipvs0: BTreeSet<IpAddr> = bound
        .iter()
        .map(|a| a.split('/').next().unwrap().parse().unwrap())
        .collect();

    let local = local_addresses_in(&ns);
    assert_eq!(local.interfaces, want_links, "exactly the namespace's links");
    let on_ipvs0: Vec<IpAddr> = local
        .addresses
        .iter()
        .filter(|(i, _)| i == "kube-ipvs0")
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(on_ipvs0.len(), 3, "{on_ipvs0:?}");
    assert_eq!(on_ipvs0.into_iter().collect::<BTreeSet<_>>(), want_on_ipvs0);
    let all_local: BTreeSet<IpAddr> = local.addresses.iter().map(|(_, a)| *a).collect();
    assert!(all_local.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "lo is up");

    // kube-proxy's kind table: 10.96.0.1 and 10.96.0.10 are bound, 127.0.0.1 is
    // local on lo, the other service IPs are bound nowhere; fd00::1 has no service.
    let text = read(&ipvs_fixture("ln-kube-proxy-ipvs-kind-tkng.txt"));
    let services = proxywatch::probe::ipvs::ipvsadm::parse_ipvsadm_list("ipvsadm -Ln", &text).unwrap();
    let vs_ips: BTreeSet<IpAddr> = read_table(&text, decode_ipvsadm)
        .iter()
        .map(|v| v.name.rsplit_once(':').unwrap().0.parse().unwrap())
        .collect();
    assert!(vs_ips.contains(&"10.96.0.1".parse().unwrap()) && vs_ips.contains(&"127.0.0.1".parse().unwrap()));
    let facts = proxywatch::probe::ipvs::summarise("ipvsadm", services, None, Some(&local));
    let as_strings = |s: &mut dyn Iterator<Item = &IpAddr>| s.map(|a| a.to_string()).collect::<BTreeSet<String>>();
    let want_unbound = as_strings(&mut vs_ips.difference(&all_local));
    let want_orphans = as_strings(&mut want_on_ipvs0.difference(&vs_ips));
    assert_eq!(want_orphans, BTreeSet::from(["fd00::1".to_string()]));
    assert_eq!(
        want_unbound.len(),
        vs_ips.len() - 3,
        "all but 10.96.0.1, 10.96.0.10, 127.0.0.1"
    );
    let got = |v: &[String]| v.iter().cloned().collect::<BTreeSet<String>>();
    assert_eq!(got(&facts.unbound_service_ips), want_unbound);
    assert_eq!(facts.unbound_service_ips.len(), want_unbound.len(), "no duplicates");
    assert_eq!(got(&facts.bound_without_service), want_orphans);
    let iface = facts.interface.expect("interface asked");
    assert!(iface.exists);
    assert_eq!(
        got(&iface.addresses),
        as_strings(&mut want_on_ipvs0.iter()),
        "kube-ipvs0 addresses"
    );
}

// ---------------------------------------------------------------------------
// 5. A node configured for IPVS whose IPVS modules are not loaded.

fn modules_missing_node() -> PathBuf {
    common::fixtures().join("ipvs-nodes/ipvs-mode-modules-missing")
}

#[test]
fn ipvs_mode_with_modules_missing_is_critical() {
    let node = modules_missing_node();
    assert!(node.join("README.md").is_file(), "README.md says what the node models");
    assert!(!node.join("proc/net/ip_vs").exists());
    let proc_modules = read(&node.join("proc/modules"));
    let loaded: BTreeSet<&str> = proc_modules.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(loaded.contains("nf_conntrack") && loaded.contains("br_netfilter"));
    assert!(!loaded.iter().any(|m| m.starts_with("ip_vs")));

    let r = check(Some(&node), node.join("exec"), &["--kube-proxy.mode", "ipvs"]);
    assert_eq!(r.code, 2, "{:#}", r.doc["findings"]);
    assert_eq!(r.doc["status"], "critical");
    for p in FILE_PROBES {
        assert_eq!(r.status(p), "ok", "{p}: {:#}", r.doc["probes"][p]);
    }
    assert_eq!(r.status("ipvs"), "absent");
    let f = r.finding("ipvs_modules_missing").expect("ipvs_modules_missing");
    assert_eq!(f["severity"], "critical");
    assert_eq!(
        f["evidence"]["missing"],
        serde_json::json!(["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"])
    );
    assert_eq!(f["evidence"]["proxy_mode"], "ipvs");
    let remediation: Vec<&str> = f["remediation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(remediation.iter().any(|s| s.contains("modprobe")), "{remediation:?}");
    assert!(
        remediation
            .iter()
            .any(|s| s.contains("iptables mode") || s.contains("mode: iptables")),
        "{remediation:?}"
    );
    let critical: Vec<&Value> = r.doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "critical")
        .map(|f| &f["id"])
        .collect();
    // Besides the modules: the declared mode says kube-proxy belongs here, and none answers.
    assert_eq!(
        critical,
        [&Value::from("ipvs_modules_missing"), &Value::from("kube_proxy_down")],
        "the only critical findings"
    );

    // Without the declared mode nothing shows IPVS mode: the same node is only worth a mention.
    let auto = check(Some(&node), node.join("exec"), &[]);
    assert_eq!(auto.finding("ipvs_modules_missing").unwrap()["severity"], "info");
    assert_eq!(auto.code, 0, "{:#}", auto.doc["findings"]);
}
