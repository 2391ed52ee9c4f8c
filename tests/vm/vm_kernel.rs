//! Real kernels in a VM: a stock Debian 12 kernel under QEMU (tests/vm/vm.sh),
//! for what this machine's kernel cannot show: real IPVS (it has none),
//! "the agent never loads a kernel module" (it has CONFIG_MODULES=n), and a
//! neighbour table that refuses (its limits are global to a kernel: lowered
//! only in the guest).
//!
//! Each test boots one scenario (tests/vm/guest/scenarios.sh). The guest prints
//! the agent's JSON and text reports and the ground truth read with the
//! kernel's own tools just before and just after each agent run (`ipvsadm
//! -Ln`, `-Ln --stats --exact`, `/proc/net/ip_vs*`, `ip -j addr`, the sysctls,
//! `/proc/modules`; `conntrack -L` and `ipvsadm -Lnc` for stale entries),
//! between markers on the serial console. The expected values are computed
//! here from that ground truth with simple, independent parsing, never with
//! the agent's parsers.
//!
//! Needs root, QEMU and the tools tests/run.sh installs; the first run
//! downloads the kernel package (about 70 MB) into the cache vm.sh names.
//! Without them a test prints SKIPPED and passes; with CI=true it fails.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// What vm.sh needs on the host (it checks them too, with a clearer message).
const TOOLS: &[&str] = &[
    "bash",
    "qemu-system-x86_64",
    "busybox",
    "cpio",
    "gzip",
    "xz",
    "depmod",
    "apt-get",
    "apt-cache",
    "dpkg-deb",
    "ldd",
    "strip",
    "flock",
    "timeout",
    "ipvsadm",
    "ip",
    "xtables-legacy-multi",
    "xtables-nft-multi",
    "nft",
    "conntrack",
    "socat",
];

fn vm_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/vm.sh")
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm")
}

/// Builds the image once per test binary (the tests boot it in parallel).
fn build() -> &'static Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new("bash")
            .arg(vm_sh())
            .arg("build")
            .arg(common::binary())
            .arg(out_dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("bash: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "vm.sh build: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    })
}

/// One scenario's serial log, cut into its blocks.
struct Vm {
    log: PathBuf,
    /// name -> (text, exit code of the command that printed it)
    blocks: BTreeMap<String, (String, i32)>,
}

impl Vm {
    fn boot(scenario: &str) -> Option<Vm> {
        if !common::can_run(TOOLS) {
            return None;
        }
        if let Err(e) = build() {
            panic!("{e}");
        }
        let out = Command::new("bash")
            .arg(vm_sh())
            .arg("boot")
            .arg(out_dir())
            .arg(scenario)
            .stdin(Stdio::null())
            .output()
            .expect("run vm.sh");
        let log = out_dir().join(format!("{scenario}.log"));
        assert!(
            out.status.success(),
            "vm.sh boot {scenario}: {}\n{}\nlog: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            log.display()
        );
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let vm = Vm {
            blocks: parse_blocks(&text),
            log,
        };
        assert!(
            text.contains(&format!("@@PW-SCENARIO {scenario} kernel=6.1.0-")),
            "not the Debian 12 kernel or not this scenario: {}",
            vm.log.display()
        );
        assert!(
            text.contains("@@PW-DONE rc=0@@"),
            "the scenario did not finish: {}",
            vm.log.display()
        );
        Some(vm)
    }

    fn block(&self, name: &str) -> &str {
        match self.blocks.get(name) {
            Some((text, _)) => text,
            None => panic!("no block {name} in {}", self.log.display()),
        }
    }

    /// A block whose command must have succeeded.
    fn ok(&self, name: &str) -> &str {
        let text = self.block(name);
        let rc = self.blocks[name].1;
        let err = self.blocks.get(&format!("{name}.stderr")).map(|b| b.0.as_str());
        assert_eq!(rc, 0, "{name} failed ({}): {text}\n{err:?}", self.log.display());
        text
    }

    fn rc(&self, name: &str) -> i32 {
        self.block(name);
        self.blocks[name].1
    }

    fn json(&self, name: &str) -> Value {
        let text = self.block(name);
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name} is not JSON ({e}) in {}", self.log.display()))
    }

    /// The agent's text report: no panic, exit 0 (ok), 1 (warning) or 2 (critical).
    fn text_report(&self, name: &str) -> &str {
        let stderr = self
            .blocks
            .get(&format!("{name}.stderr"))
            .map(|b| b.0.as_str())
            .unwrap_or("");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let rc = self.rc(name);
        assert!((0..=2).contains(&rc), "{name}: exit {rc}: {stderr}");
        self.block(name)
    }

    /// The agent's report: JSON, no panic, exit 0 (ok), 1 (warning) or 2 (critical).
    fn report(&self, name: &str) -> Value {
        let stderr = self
            .blocks
            .get(&format!("{name}.stderr"))
            .map(|b| b.0.as_str())
            .unwrap_or("");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let rc = self.rc(name);
        assert!((0..=2).contains(&rc), "{name}: exit {rc}: {stderr}");
        let doc = self.json(name);
        assert_eq!(doc["node"], "vm", "{name}");
        doc
    }
}

fn parse_blocks(text: &str) -> BTreeMap<String, (String, i32)> {
    let mut blocks = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("@@PW-BEGIN ").and_then(|l| l.strip_suffix("@@")) {
            assert!(current.is_none(), "nested block {name}");
            current = Some((name.to_string(), String::new()));
        } else if let Some(rest) = line.strip_prefix("@@PW-END ").and_then(|l| l.strip_suffix("@@")) {
            let (name, rc) = rest.rsplit_once(" rc=").expect("end marker");
            let (open, body) = current.take().expect("end without begin");
            assert_eq!(open, name, "block ends out of order");
            blocks.insert(open, (body, rc.parse().expect("rc")));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    assert!(current.is_none(), "unterminated block");
    blocks
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id)
}

fn ids(doc: &Value) -> Vec<String> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{} ({})", f["id"].as_str().unwrap(), f["severity"].as_str().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------
// Ground truth: ipvsadm's own output, read here line by line.

#[derive(Debug, Clone, PartialEq)]
struct Dest {
    address: String,
    port: u16,
    forward: String,
    weight: i64,
    active: u64,
    inactive: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Svc {
    protocol: String,
    address: String,
    port: u16,
    fwmark: Option<u32>,
    scheduler: String,
    /// `(sh-fallback,sh-port)` on the service line; None: the source cannot tell.
    flags: Option<Vec<String>>,
    persistent: bool,
    persistent_seconds: Option<u64>,
    dests: Vec<Dest>,
    /// Conns, InPkts, OutPkts, InBytes, OutBytes.
    stats: Option<[u64; 5]>,
}

impl Svc {
    /// `TCP 10.96.0.1:443`, `UDP [fd00::1]:53`, `FWM 100`: the agent's sample format.
    fn show(&self) -> String {
        match self.fwmark {
            Some(m) => format!("FWM {m}"),
            None if self.address.contains(':') => format!("{} [{}]:{}", self.protocol, self.address, self.port),
            None => format!("{} {}:{}", self.protocol, self.address, self.port),
        }
    }

    fn without_backends(&self) -> bool {
        self.dests.iter().all(|d| d.weight <= 0)
    }
}

fn addr_port(token: &str) -> (String, u16) {
    let (a, p) = token.rsplit_once(':').unwrap();
    let ip: IpAddr = a.trim_matches(['[', ']']).parse().unwrap();
    (ip.to_string(), p.parse().unwrap())
}

/// `ipvsadm -Ln` in the order ipvsadm prints it.
fn read_ipvsadm_list(text: &str) -> Vec<Svc> {
    let mut out: Vec<Svc> = Vec::new();
    for line in text.lines().skip(3) {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t[0] == "->" {
            let (address, port) = addr_port(t[1]);
            out.last_mut().unwrap().dests.push(Dest {
                address,
                port,
                forward: t[2].into(),
                weight: t[3].parse().unwrap(),
                active: t[4].parse().unwrap(),
                inactive: t[5].parse().unwrap(),
            });
            continue;
        }
        let mut rest = &t[2..];
        let (address, port, fwmark) = if t[0] == "FWM" {
            if rest.first() == Some(&"IPv6") {
                rest = &rest[1..];
            }
            (String::new(), 0, Some(t[1].parse().unwrap()))
        } else {
            let (a, p) = addr_port(t[1]);
            (a, p, None)
        };
        let mut svc = Svc {
            protocol: t[0].into(),
            address,
            port,
            fwmark,
            scheduler: rest[0].into(),
            flags: Some(Vec::new()),
            persistent: false,
            persistent_seconds: None,
            dests: Vec::new(),
            stats: None,
        };
        let mut i = 1;
        while i < rest.len() {
            match rest[i] {
                f if f.starts_with('(') => {
                    svc.flags = Some(f.trim_matches(['(', ')']).split(',').map(String::from).collect());
                    i += 1;
                }
                "persistent" => {
                    svc.persistent = true;
                    svc.persistent_seconds = Some(rest[i + 1].parse().unwrap());
                    i += 2;
                }
                other => panic!("flag {other} not used by the scenarios"),
            }
        }
        out.push(svc);
    }
    out
}

/// `ipvsadm -Ln --stats --exact`: per service, in the same order as the list.
fn read_ipvsadm_stats(text: &str) -> Vec<(String, [u64; 5])> {
    text.lines()
        .skip(3)
        .filter(|l| !l.trim_start().starts_with("->"))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let n = t.len();
            let mut v = [0u64; 5];
            for (i, x) in t[n - 5..].iter().enumerate() {
                v[i] = x.parse().unwrap();
            }
            (t[..n - 5].join(" "), v)
        })
        .collect()
}

/// The table with its counters, as ipvsadm shows it.
fn truth_table(vm: &Vm, prefix: &str) -> Vec<Svc> {
    let mut table = read_ipvsadm_list(vm.ok(&format!("{prefix}.ipvsadm-Ln")));
    let stats = read_ipvsadm_stats(vm.ok(&format!("{prefix}.ipvsadm-stats")));
    assert_eq!(table.len(), stats.len(), "{prefix}: list and stats disagree");
    for (svc, (name, v)) in table.iter_mut().zip(stats) {
        let first = name.split_whitespace().nth(1).unwrap();
        match svc.fwmark {
            Some(m) => assert_eq!(first, m.to_string()),
            None => assert_eq!(addr_port(first), (svc.address.clone(), svc.port)),
        }
        svc.stats = Some(v);
    }
    table
}

/// `/proc/net/ip_vs_stats`: totals on line 3, rates on line 6, all hex.
fn read_proc_stats(text: &str) -> ([u64; 5], [u64; 5]) {
    let lines: Vec<&str> = text.lines().collect();
    let hex = |line: &str| -> [u64; 5] {
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .collect();
        v.try_into().unwrap()
    };
    (hex(lines[2]), hex(lines[5]))
}

/// `ip -j addr show`: (interface, address) pairs.
fn read_ip_addrs(text: &str) -> Vec<(String, IpAddr)> {
    let links: Value = serde_json::from_str(text).unwrap();
    let mut out = Vec::new();
    for link in links.as_array().unwrap() {
        for a in link["addr_info"].as_array().unwrap() {
            out.push((
                link["ifname"].as_str().unwrap().to_string(),
                a["local"].as_str().unwrap().parse().unwrap(),
            ));
        }
    }
    out
}

fn read_sysctls(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(|l| {
            let (k, v) = l.split_once(" = ").unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// `CONFIG_HZ` of the guest's kernel, from the config the build copied in.
fn kernel_hz() -> u64 {
    let kdir = std::fs::read_link(out_dir().join("vmlinux")).unwrap();
    let config = std::fs::read_to_string(kdir.with_file_name("config")).unwrap();
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .unwrap()
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------
// The agent's facts, in the same shape.

fn agent_table(facts: &Value) -> Vec<Svc> {
    facts["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Svc {
            protocol: v["protocol"].as_str().unwrap().into(),
            address: v["address"].as_str().unwrap().into(),
            port: v["port"].as_u64().unwrap() as u16,
            fwmark: v["fwmark"].as_u64().map(|m| m as u32),
            scheduler: v["scheduler"].as_str().unwrap().into(),
            flags: v["scheduler_flags"]
                .as_array()
                .map(|a| a.iter().map(|f| f.as_str().unwrap().to_string()).collect()),
            persistent: v["persistent"].as_bool().unwrap_or(false),
            persistent_seconds: v["persistent_seconds"].as_u64(),
            dests: v["real_servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| Dest {
                    address: r["address"].as_str().unwrap().into(),
                    port: r["port"].as_u64().unwrap() as u16,
                    forward: r["forward"].as_str().unwrap().into(),
                    weight: r["weight"].as_i64().unwrap(),
                    active: r["active_connections"].as_u64().unwrap(),
                    inactive: r["inactive_connections"].as_u64().unwrap(),
                })
                .collect(),
            stats: v["stats"].as_object().map(|s| {
                [
                    "connections",
                    "incoming_packets",
                    "outgoing_packets",
                    "incoming_bytes",
                    "outgoing_bytes",
                ]
                .map(|k| s[k].as_u64().unwrap())
            }),
        })
        .collect()
}

/// One agent run against the truth read just before and just after it.
struct Round<'a> {
    vm: &'a Vm,
    /// e.g. `healthy.ipvsadm`
    name: String,
    doc: Value,
    /// ipvsadm's table with counters (equal before and after the run).
    table: Vec<Svc>,
    /// All local addresses (equal before and after).
    addrs: Vec<(String, IpAddr)>,
    sysctls: BTreeMap<String, String>,
}

impl<'a> Round<'a> {
    fn new(vm: &'a Vm, name: &str) -> Round<'a> {
        let (before, after) = (format!("{name}.before"), format!("{name}.after"));
        let table = truth_table(vm, &before);
        assert_eq!(table, truth_table(vm, &after), "{name}: the table moved during the run");
        for part in ["proc-ip_vs", "ip-all", "sysctls"] {
            assert_eq!(
                vm.ok(&format!("{before}.{part}")),
                vm.ok(&format!("{after}.{part}")),
                "{name}: {part} moved during the run"
            );
        }
        let addrs = read_ip_addrs(vm.ok(&format!("{before}.ip-all")));
        let sysctls = read_sysctls(vm.ok(&format!("{before}.sysctls")));
        let doc = vm.report(&format!("{name}.json"));
        Round {
            vm,
            name: name.into(),
            doc,
            table,
            addrs,
            sysctls,
        }
    }

    fn facts(&self) -> &Value {
        &self.doc["facts"]["ipvs"]
    }

    /// Every fact of the table, the interface and the counters against the truth.
    /// `from_proc`: the table came from /proc/net/ip_vs, which has no per-service
    /// counters and no scheduler flags.
    fn assert_table(&self, from_proc: bool) {
        let name = &self.name;
        assert_eq!(
            self.doc["probes"]["ipvs"]["status"], "ok",
            "{name}: {:#}",
            self.doc["probes"]["ipvs"]
        );
        let facts = self.facts();
        assert_eq!(
            facts["source"],
            if from_proc { "/proc/net/ip_vs" } else { "ipvsadm" },
            "{name}"
        );
        let mut want = self.table.clone();
        if from_proc {
            for s in &mut want {
                s.flags = None;
                s.stats = None;
            }
        }
        let got = agent_table(facts);
        assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{name}: virtual server {} (in ipvsadm's order)", w.show());
        }
        assert_eq!(facts["detail_truncated"], false);
        assert_eq!(facts["virtual_servers"], want.len() as u64, "{name}");
        let real: usize = want.iter().map(|s| s.dests.len()).sum();
        assert_eq!(facts["real_servers"], real as u64, "{name}");
        let mut groups: BTreeMap<(String, String), u64> = BTreeMap::new();
        for s in &want {
            *groups.entry((s.protocol.clone(), s.scheduler.clone())).or_default() += 1;
        }
        let got_groups: BTreeMap<(String, String), u64> = facts["groups"]
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
        assert_eq!(got_groups, groups, "{name}: groups");

        // Global counters: totals exactly; the rate estimates decay after the
        // traffic, so the agent's lie between the two reads.
        let (t0, r0) = read_proc_stats(self.vm.ok(&format!("{name}.before.proc-ip_vs_stats")));
        let (t1, r1) = read_proc_stats(self.vm.ok(&format!("{name}.after.proc-ip_vs_stats")));
        assert_eq!(t0, t1, "{name}: totals moved");
        let s = &facts["stats"];
        let fields = [
            "connections",
            "incoming_packets",
            "outgoing_packets",
            "incoming_bytes",
            "outgoing_bytes",
        ];
        for (i, f) in fields.iter().enumerate() {
            assert_eq!(s[f], t0[i], "{name}: stats.{f}");
            let rate = s[format!("{f}_per_second")].as_u64().unwrap();
            assert!(
                (r0[i].min(r1[i])..=r0[i].max(r1[i])).contains(&rate),
                "{name}: {f}_per_second {rate} not within {} and {}",
                r0[i],
                r1[i]
            );
        }
        assert!(
            t0[0] > 0 && t0[3] > 0,
            "{name}: the scenario's traffic went through IPVS"
        );

        // kube-ipvs0 and the bindings, from `ip -j addr`.
        let on_ipvs0: BTreeSet<IpAddr> = read_ip_addrs(self.vm.ok(&format!("{name}.before.ip-kube-ipvs0")))
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        assert!(!on_ipvs0.is_empty());
        let iface = &facts["interface"];
        assert_eq!(iface["exists"], true, "{name}");
        let got_ipvs0: BTreeSet<IpAddr> = iface["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(got_ipvs0, on_ipvs0, "{name}: kube-ipvs0 addresses");
        let vips: BTreeSet<IpAddr> = want
            .iter()
            .filter(|s| s.fwmark.is_none())
            .map(|s| s.address.parse().unwrap())
            .collect();
        let local: BTreeSet<IpAddr> = self.addrs.iter().map(|(_, a)| *a).collect();
        let as_set = |v: &Value| -> BTreeSet<IpAddr> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().parse().unwrap())
                .collect()
        };
        assert_eq!(
            as_set(&facts["unbound_service_ips"]),
            vips.difference(&local).copied().collect(),
            "{name}: unbound service IPs"
        );
        assert_eq!(
            as_set(&facts["bound_without_service"]),
            on_ipvs0.difference(&vips).copied().collect(),
            "{name}: kube-ipvs0 addresses without a service"
        );
        let without: Vec<&Svc> = want.iter().filter(|s| s.without_backends()).collect();
        assert_eq!(facts["without_backends"], without.len() as u64, "{name}");
        let sample: Vec<String> = without.iter().take(5).map(|s| s.show()).collect();
        assert_eq!(facts["without_backends_sample"], serde_json::json!(sample), "{name}");
    }

    fn sysctl(&self, name: &str) -> i64 {
        self.sysctls[name].parse().unwrap()
    }
}

/// The scenario table has everything the parsers must keep: IPv6, v4 and v6
/// firewall marks, the three forwarding methods, weights, `-b` flags,
/// persistence, counters from real traffic.
fn assert_scenario_coverage(table: &[Svc]) {
    assert!(table.iter().any(|s| s.address.contains(':')), "IPv6 service");
    assert!(
        table.iter().filter(|s| s.fwmark.is_some()).count() >= 2,
        "fwmark services"
    );
    assert!(table
        .iter()
        .any(|s| s.flags.as_ref().is_some_and(|f| f.contains(&"sh-port".to_string()))));
    assert!(table.iter().any(|s| s.persistent_seconds == Some(10800)));
    let forwards: BTreeSet<&str> = table
        .iter()
        .flat_map(|s| s.dests.iter().map(|d| d.forward.as_str()))
        .collect();
    assert!(
        ["Masq", "Route", "Tunnel"].iter().all(|f| forwards.contains(f)),
        "{forwards:?}"
    );
    assert!(
        table.iter().any(|s| s.dests.iter().any(|d| d.active == 1)),
        "an open connection"
    );
    assert!(table.iter().any(|s| s.dests.iter().any(|d| d.weight == 3)), "weights");
}

/// With /proc and no kernel config, persistence is reported as present with an unknown timeout.
fn assert_persistence_unknown_without_hz(vm: &Vm, prefix: &str, table: &[Svc]) {
    let doc = vm.report(&format!("{prefix}.proc-nohz.json"));
    let got = agent_table(&doc["facts"]["ipvs"]);
    assert_eq!(got.len(), table.len());
    for (g, w) in got.iter().zip(table) {
        assert_eq!(g.persistent, w.persistent, "{}", w.show());
        if w.persistent {
            assert_eq!(g.persistent_seconds, None, "{}: no HZ, no seconds", w.show());
        }
    }
    assert!(doc["facts"]["ipvs"]["kernel_hz"].is_null());
}

fn ipvs_findings(doc: &Value) -> Vec<String> {
    ids(doc).into_iter().filter(|f| f.starts_with("ipvs_")).collect()
}

/// The `ipvs` scenario: one boot, a healthy phase then a sick one, shared by two tests.
fn ipvs_vm() -> Option<&'static Vm> {
    static VM: OnceLock<Option<Vm>> = OnceLock::new();
    VM.get_or_init(|| Vm::boot("ipvs")).as_ref()
}

#[test]
fn ipvs_healthy_node_matches_ipvsadm() {
    let Some(vm) = ipvs_vm() else {
        return;
    };
    vm.ok("setup");
    let hz = kernel_hz();
    for (round, from_proc) in [("healthy.ipvsadm", false), ("healthy.proc", true)] {
        let r = Round::new(vm, round);
        assert_scenario_coverage(&r.table);
        r.assert_table(from_proc);
        if from_proc {
            assert_eq!(r.facts()["kernel_hz"], hz, "{round}: HZ from /boot/config-<release>");
        }
        // No IPVS finding: only the informational list of schedulers.
        assert_eq!(ipvs_findings(&r.doc), ["ipvs_scheduler (info)"], "{round}");
        assert_eq!(r.doc["proxy_mode"]["mode"], "ipvs");
        for (s, want) in [
            ("net.ipv4.vs.conntrack", 1),
            ("net.ipv4.vs.expire_nodest_conn", 1),
            ("net.ipv4.vs.expire_quiescent_template", 1),
        ] {
            assert_eq!(r.sysctl(s), want, "{s}");
            assert_eq!(r.doc["facts"]["sysctls"]["values"][s], want, "{round}: {s}");
        }
        let text = vm.text_report(&format!("{round}.text"));
        // The probe table: `ipvs`, padded to the longest probe name, then its status.
        assert!(
            text.lines().any(|l| l.split_whitespace().take(2).eq(["ipvs", "ok"])),
            "{round}: {text}"
        );
    }
    let table = truth_table(vm, "healthy.proc.before");
    assert_persistence_unknown_without_hz(vm, "healthy", &table);
    // The agent ran ipvsadm only while it was on PATH, and only these two ways.
    let log = vm.ok("healthy.exec-log");
    let runs: BTreeSet<&str> = log.lines().filter(|l| l.starts_with("ipvsadm")).collect();
    assert_eq!(
        runs,
        BTreeSet::from(["ipvsadm -Ln", "ipvsadm -Ln --stats --exact"]),
        "{log}"
    );
    assert_eq!(
        log.lines().filter(|l| *l == "ipvsadm -Ln").count(),
        2,
        "json + text with ipvsadm: {log}"
    );
}

#[test]
fn ipvs_sick_node_gives_the_right_findings() {
    let Some(vm) = ipvs_vm() else {
        return;
    };
    vm.ok("sick");
    for (round, from_proc) in [("sick.ipvsadm", false), ("sick.proc", true)] {
        let r = Round::new(vm, round);
        r.assert_table(from_proc);
        let doc = &r.doc;
        assert_eq!(doc["status"], "critical", "{round}: {:?}", ids(doc));
        assert_eq!(vm.rc(&format!("{round}.json")), 2);

        let f = finding(doc, "ipvs_vs_conntrack").expect("ipvs_vs_conntrack");
        assert_eq!(f["severity"], "critical");
        assert_eq!(r.sysctl("net.ipv4.vs.conntrack"), 0);
        assert_eq!(f["evidence"]["net.ipv4.vs.conntrack"], 0);
        assert_eq!(f["evidence"]["expected"], 1);

        let without: Vec<&Svc> = r.table.iter().filter(|s| s.without_backends()).collect();
        assert_eq!(without.len(), 3, "no backend (v4, v6) and weight 0 only");
        assert!(without.iter().any(|s| !s.dests.is_empty()), "a weight-0-only service");
        let f = finding(doc, "ipvs_virtual_servers_without_backends").expect("without backends");
        assert_eq!(f["severity"], "warning");
        assert_eq!(f["evidence"]["count"], 3);
        let first: Vec<String> = without.iter().map(|s| s.show()).collect();
        assert_eq!(
            f["evidence"]["first"],
            serde_json::json!(first),
            "{round}: in ipvsadm's order"
        );

        let f = finding(doc, "ipvs_interface_out_of_sync").expect("out of sync");
        assert_eq!(f["severity"], "warning");
        assert_eq!(f["evidence"]["kube_ipvs0_exists"], true);
        assert_eq!(f["evidence"]["unbound_service_ips"], 1);
        assert_eq!(f["evidence"]["unbound_first"], serde_json::json!(["10.96.70.70"]));
        assert_eq!(f["evidence"]["bound_without_service"], 1);
        assert_eq!(
            f["evidence"]["bound_without_service_first"],
            serde_json::json!(["10.96.99.99"])
        );

        let f = finding(doc, "ipvs_expire_sysctls").expect("ipvs_expire_sysctls");
        assert_eq!(f["severity"], "warning");
        for s in [
            "net.ipv4.vs.expire_nodest_conn",
            "net.ipv4.vs.expire_quiescent_template",
        ] {
            assert_eq!(r.sysctl(s), 0);
            assert_eq!(f["evidence"][s], 0, "{round}: {s}");
        }
        assert_eq!(f["evidence"]["expected"], 1);

        let text = vm.text_report(&format!("{round}.text"));
        for id in [
            "ipvs_vs_conntrack",
            "ipvs_virtual_servers_without_backends",
            "ipvs_interface_out_of_sync",
            "ipvs_expire_sysctls",
        ] {
            assert!(text.contains(id), "{round}: text report lacks {id}");
        }
    }
    // Same facts whatever the source: the evidence of the two rounds is identical.
    let a = Round::new(vm, "sick.ipvsadm");
    let b = Round::new(vm, "sick.proc");
    for id in ["ipvs_virtual_servers_without_backends", "ipvs_interface_out_of_sync"] {
        assert_eq!(
            finding(&a.doc, id).unwrap()["evidence"],
            finding(&b.doc, id).unwrap()["evidence"],
            "{id}"
        );
    }
}

// ---------------------------------------------------------------------------
// Nothing the agent does loads a kernel module.

/// Module names in a `/proc/modules` text.
fn module_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// `/proc/modules` and `/sys/module` byte-identical at each step; the kernel asked
/// modprobe for nothing; then the control shows the same node does load `control`
/// modules when a tool that autoloads runs, so the comparison can fail.
fn assert_no_module_loaded(vm: &Vm, steps: &[&str], control: &[&str]) {
    let before = vm.ok("before.proc-modules");
    let sys_before = vm.ok("before.sys-module");
    for step in steps {
        let after = vm.ok(&format!("{step}.proc-modules"));
        let new: Vec<String> = module_names(after).difference(&module_names(before)).cloned().collect();
        assert!(
            new.is_empty(),
            "the agent loaded {new:?} ({step}; {})",
            vm.log.display()
        );
        assert_eq!(after, before, "/proc/modules changed ({step})");
        assert_eq!(
            vm.ok(&format!("{step}.sys-module")),
            sys_before,
            "/sys/module changed ({step})"
        );
    }
    assert_eq!(vm.ok("modprobe-log"), "", "module requests during the agent's runs");
    let loaded = module_names(vm.ok("control.proc-modules"));
    for m in control {
        assert!(!module_names(before).contains(*m), "{m} was loaded before");
        assert!(loaded.contains(*m), "control: {m} not loaded: the check could not fail");
    }
    assert!(
        !vm.ok("control.modprobe-log").is_empty(),
        "control: the kernel asked modprobe"
    );
}

/// Every probe ran several times during `serve`: each probe's last-success time
/// took at least `min` distinct values over the scrapes, and it never failed.
fn assert_probes_cycled(vm: &Vm, min: usize) {
    let scrapes = vm.ok("serve.scrapes");
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in scrapes.lines() {
        if let Some(rest) = line.strip_prefix("proxywatch_probe_last_success_timestamp_seconds{probe=\"") {
            let (probe, value) = rest.split_once("\"} ").unwrap();
            seen.entry(probe.into()).or_default().insert(value.into());
        }
        if let Some(rest) = line.strip_prefix("proxywatch_probe_success{probe=\"") {
            assert!(rest.ends_with("} 1"), "a probe failed during serve: {line}");
        }
    }
    let probes = [
        "conntrack",
        "iptables",
        "ipvs",
        "kube_proxy",
        "modules",
        "nftables",
        "node",
        "sysctls",
    ];
    for p in probes {
        let n = seen.get(p).map_or(0, BTreeSet::len);
        assert!(
            n >= min,
            "probe {p} ran {n} times during serve (want >= {min}):\n{scrapes}"
        );
    }
    let out = vm.ok("serve.serve-output");
    assert!(
        out.ends_with("exit 0\n"),
        "serve did not stop cleanly on SIGTERM: {out}"
    );
}

#[test]
fn ipvs_modules_not_loaded_stay_unloaded() {
    let Some(vm) = Vm::boot("ipvs-unloaded") else {
        return;
    };
    let setup = vm.ok("setup");
    assert!(
        setup.contains("ip_vs.ko") && setup.contains("ip_vs_rr.ko"),
        "IPVS is one modprobe away"
    );
    let before = module_names(vm.ok("before.proc-modules"));
    assert!(before.contains("nf_conntrack") && !before.iter().any(|m| m.starts_with("ip_vs")));

    for run in ["auto.json", "ipvs-mode.json"] {
        let doc = vm.report(run);
        let ipvs = &doc["probes"]["ipvs"];
        assert_eq!(ipvs["status"], "absent", "{run}: {ipvs:#}");
        assert!(
            ipvs["error"].as_str().unwrap().contains("ipvsadm was not run"),
            "{ipvs:#}"
        );
        assert!(doc["facts"]["ipvs"].is_null());
        for m in ["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"] {
            assert_eq!(doc["facts"]["modules"]["modules"][m], "missing", "{run}: {m}");
        }
        assert_eq!(doc["facts"]["modules"]["modules"]["nf_conntrack"], "loaded");
    }
    let auto = vm.report("auto.json");
    assert_eq!(finding(&auto, "ipvs_modules_missing").unwrap()["severity"], "info");
    let ipvs = vm.report("ipvs-mode.json");
    assert_eq!(vm.rc("ipvs-mode.json"), 2);
    let f = finding(&ipvs, "ipvs_modules_missing").expect("ipvs_modules_missing");
    assert_eq!(f["severity"], "critical");
    assert_eq!(
        f["evidence"]["missing"],
        serde_json::json!(["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"])
    );
    assert_eq!(f["evidence"]["proxy_mode"], "ipvs");
    assert!(vm.text_report("ipvs-mode.text").contains("ipvs_modules_missing"));

    assert_probes_cycled(&vm, 6);
    let log = vm.ok("exec-log");
    assert!(!log.contains("ipvsadm"), "the agent ran ipvsadm:\n{log}");
    assert_no_module_loaded(&vm, &["after-check", "after-check-ipvs", "after-serve"], &["ip_vs"]);
}

#[test]
fn legacy_only_node_keeps_nf_tables_unloaded() {
    let Some(vm) = Vm::boot("legacy-only") else {
        return;
    };
    vm.ok("setup");
    assert!(
        vm.ok("rules").contains("-A KUBE-SERVICES"),
        "the legacy rules are there"
    );
    let before = module_names(vm.ok("before.proc-modules"));
    assert!(before.contains("ip_tables") && before.contains("iptable_nat"));
    assert!(!before.contains("nf_tables") && !before.contains("nfnetlink"));

    let doc = vm.report("check.json");
    assert_eq!(doc["probes"]["iptables"]["status"], "ok", "{:#}", doc["probes"]);
    let facts = &doc["facts"]["iptables"];
    assert_eq!(facts["backend_in_use"], "legacy", "{facts:#}");
    assert_eq!(facts["backends_with_kube_rules"], serde_json::json!(["legacy"]));
    let saves = facts["saves"].as_array().unwrap();
    let legacy = saves
        .iter()
        .find(|s| s["command"] == "iptables-legacy-save")
        .expect("iptables-legacy-save ran");
    let rules = vm.ok("rules");
    let kube_rules = rules.lines().filter(|l| l.starts_with("-A KUBE-")).count() as u64;
    assert_eq!(
        legacy["counts"]["tables"]["nat"]["rules"],
        rules_in(rules, "nat"),
        "{legacy:#}"
    );
    assert!(legacy["counts"]["kube_rules"].as_u64().unwrap() >= kube_rules);
    assert!(
        saves.iter().all(|s| s["backend"] != "nft"),
        "an nft save ran: {saves:#?}"
    );
    assert_ne!(
        doc["probes"]["nftables"]["status"], "failed",
        "{:#}",
        doc["probes"]["nftables"]
    );
    assert!(vm.text_report("check.text").contains("iptables"));

    assert_probes_cycled(&vm, 6);
    let log = vm.ok("exec-log");
    assert!(
        // `-c`: the counters of kube-proxy's reject and drop rules come with the one save.
        log.lines().filter(|l| *l == "iptables-legacy-save -c").count() >= 4,
        "{log}"
    );
    for tool in ["iptables-nft-save", "ip6tables-nft-save", "nft "] {
        assert!(
            !log.contains(tool),
            "the agent ran {tool} with nf_tables unloaded:\n{log}"
        );
    }
    assert_no_module_loaded(&vm, &["after-check", "after-serve"], &["nf_tables", "nfnetlink"]);
}

#[test]
fn ipvs_virtual_servers_left_after_a_rollback_to_iptables_are_leftovers() {
    let Some(vm) = Vm::boot("ipvs-leftover") else {
        return;
    };
    vm.ok("setup");
    // Ground truth: the virtual servers ipvsadm lists.
    let virtual_servers = vm
        .ok("ipvsadm")
        .lines()
        .filter(|l| l.starts_with("TCP ") || l.starts_with("UDP "))
        .count() as u64;
    assert_eq!(virtual_servers, 2, "{}", vm.ok("ipvsadm"));
    let doc = vm.report("check.json");
    // No kube-ipvs0 and kube-proxy's iptables rules with its canary: the node runs iptables mode.
    assert_eq!(doc["proxy_mode"]["mode"], "iptables", "{:#}", doc["proxy_mode"]);
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "proxy_mode_leftovers")
        .unwrap_or_else(|| panic!("no proxy_mode_leftovers: {:#}", doc["findings"]));
    assert_eq!(f["severity"], "warning", "{f:#}");
    let items = f["evidence"]["leftovers"].as_array().unwrap();
    let ipvs = items
        .iter()
        .find(|i| i["what"] == "IPVS virtual servers")
        .unwrap_or_else(|| panic!("{items:#?}"));
    assert_eq!(ipvs["count"], virtual_servers, "{items:#?}");
    assert!(vm.text_report("check.text").contains("proxy_mode_leftovers"));
}

/// `-A` lines of one table in an iptables-save text.
fn rules_in(save: &str, table: &str) -> u64 {
    let mut current = "";
    let mut n = 0;
    for l in save.lines() {
        if let Some(t) = l.strip_prefix('*') {
            current = t;
        } else if l.starts_with("-A ") && current == table {
            n += 1;
        }
    }
    n
}

// ---------------------------------------------------------------------------
// Stale conntrack entries in IPVS mode (issue 17): the `ipvs-stale` scenario.
// Ground truth is `conntrack -L -o extended` and `ipvsadm -Lnc`, read here
// token by token.

/// The scenario's IPVS services: (protocol, virtual address, virtual port, real servers' port).
const STALE_SERVICES: [(&str, &str, u16, u16); 2] = [("udp", "127.0.0.1", 53, 53), ("tcp", "127.0.0.1", 80, 8080)];
/// The real server removed from both services, and the one kept.
const REMOVED: &str = "127.0.0.3";
const KEPT: &str = "127.0.0.2";

/// Status bits (include/uapi/linux/netfilter/nf_conntrack_common.h).
const IPS_SEEN_REPLY: u32 = 1 << 1;
const IPS_ASSURED: u32 = 1 << 2;
const IPS_CONFIRMED: u32 = 1 << 3;
const IPS_SRC_NAT: u32 = 1 << 4;
const IPS_DST_NAT: u32 = 1 << 5;
const IPS_SRC_NAT_DONE: u32 = 1 << 7;
const IPS_DST_NAT_DONE: u32 = 1 << 8;

/// One `conntrack -L` line. In this scenario the mark is a copy of the
/// entry's status bits (the guest's `status_marks`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ct {
    proto: String,
    sport: u16,
    /// The original destination: where the client sent it.
    dst: String,
    dport: u16,
    /// The reply source: who answers.
    reply_src: String,
    reply_sport: u16,
    mark: u32,
}

impl Ct {
    /// The scenario's service this entry was sent to, if any.
    fn service(&self) -> Option<(&'static str, &'static str, u16, u16)> {
        STALE_SERVICES
            .into_iter()
            .find(|(p, a, port, _)| self.proto == *p && self.dst == *a && self.dport == *port)
    }
}

/// `conntrack -L [-o extended]`: per line the first `src=`/`dst=`/`sport=`/`dport=`
/// are the original tuple, the second ones the reply tuple.
fn read_conntrack(text: &str) -> Vec<Ct> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        // `ipv4 2 udp 17 ...` with -o extended, `udp 17 ...` without.
        let Some(proto) = t.iter().find(|w| ["tcp", "udp"].contains(w)) else {
            continue;
        };
        let mut kv: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for w in &t {
            if let Some((k, v)) = w.split_once('=') {
                kv.entry(k).or_default().push(v);
            }
        }
        let port = |k: &str, i: usize| -> u16 { kv[k][i].parse().unwrap() };
        out.push(Ct {
            proto: proto.to_string(),
            sport: port("sport", 0),
            dst: kv["dst"][0].into(),
            dport: port("dport", 0),
            reply_src: kv["src"][1].into(),
            reply_sport: port("sport", 1),
            mark: kv["mark"][0].parse().unwrap(),
        });
    }
    out
}

/// The entries sent to the scenario's services.
fn service_entries(vm: &Vm, block: &str) -> Vec<Ct> {
    read_conntrack(vm.ok(block))
        .into_iter()
        .filter(|e| e.service().is_some())
        .collect()
}

/// What the agent must report: (service, dead endpoint) → entries, for the
/// entries whose original destination is a service's virtual address and port
/// and whose reply source is the removed real server.
fn stale_truth(entries: &[Ct]) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for e in entries {
        if let Some((proto, vip, vport, _)) = e.service() {
            if e.reply_src == REMOVED {
                let key = (
                    format!("{vip}:{vport}/{proto}"),
                    format!("{}:{}", e.reply_src, e.reply_sport),
                );
                *out.entry(key).or_default() += 1;
            }
        }
    }
    out
}

fn per_protocol(groups: &BTreeMap<(String, String), u64>, proto: &str) -> u64 {
    groups
        .iter()
        .filter(|((svc, _), _)| svc.ends_with(&format!("/{proto}")))
        .map(|(_, n)| n)
        .sum()
}

/// `ipvsadm -Lnc`: (protocol, client, virtual, destination) per IPVS connection.
fn read_ipvs_conns(text: &str) -> Vec<(String, String, String, String)> {
    text.lines()
        .skip(2)
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t[0].to_lowercase(), t[3].into(), t[4].into(), t[5].into())
        })
        .collect()
}

/// IPVS connections of one protocol to one real server.
fn ipvs_conns_to(vm: &Vm, block: &str, proto: &str, server: &str) -> usize {
    read_ipvs_conns(vm.ok(block))
        .iter()
        .filter(|(p, _, _, d)| p == proto && d.rsplit_once(':').unwrap().0 == server)
        .count()
}

/// The agent's (service, removed endpoint) → entries: stale (UDP) and draining (TCP) alike.
fn agent_stale(facts: &Value) -> BTreeMap<(String, String), u64> {
    facts["stale"]
        .as_array()
        .unwrap_or_else(|| panic!("no stale list: {facts:#}"))
        .iter()
        .chain(facts["draining"].as_array().into_iter().flatten())
        .map(|g| {
            (
                (
                    g["service"].as_str().unwrap().to_string(),
                    g["endpoint"].as_str().unwrap().to_string(),
                ),
                g["entries"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The agent's conntrack_stale facts equal `want`, computed from `conntrack -L`.
fn assert_stale_facts(name: &str, doc: &Value, want: &BTreeMap<(String, String), u64>) {
    let probe = &doc["probes"]["conntrack_stale"];
    assert_eq!(probe["status"], "ok", "{name}: {probe:#}");
    let facts = &doc["facts"]["conntrack_stale"];
    // UDP stale, TCP draining (kube-proxy reconciles UDP only).
    for (proto, key) in [("udp", "stale_entries"), ("tcp", "draining_entries")] {
        assert_eq!(
            facts[key][proto],
            per_protocol(want, proto),
            "{name}: {key}.{proto}: {facts:#}"
        );
    }
    assert_eq!(&agent_stale(facts), want, "{name}: groups");
    assert_eq!(
        facts["stale_groups"].as_u64().unwrap_or(0) + facts["draining_groups"].as_u64().unwrap_or(0),
        want.len() as u64,
        "{name}"
    );
    // The table is IPVS's (nf_tables holds no kube-proxy rules here): two
    // virtual servers, one real server each left. No entry on this node has
    // DST_NAT, the IPVS ones included, so the dump must not filter on it.
    assert_eq!(facts["source"], "ipvs", "{name}");
    assert_eq!(facts["service_ports"], 2, "{name}");
    assert_eq!(facts["endpoints"], 2, "{name}");
    assert_eq!(facts["dst_nat_entries"], 0, "{name}");
    let services: u64 = want.values().sum();
    assert!(
        facts["examined_entries"].as_u64().unwrap() >= services,
        "{name}: {facts:#}"
    );
}

/// The `ipvs-stale` scenario: one boot shared by two tests.
fn ipvs_stale_vm() -> Option<&'static Vm> {
    static VM: OnceLock<Option<Vm>> = OnceLock::new();
    VM.get_or_init(|| Vm::boot("ipvs-stale")).as_ref()
}

/// The question the agent's IPVS mode rests on: IPVS's NAT (`net.ipv4.vs.conntrack=1`,
/// masquerading real servers) makes conntrack entries whose reply tuple is the real
/// server (ip_vs_update_conntrack → nf_conntrack_alter_reply) but never sets DST_NAT,
/// with or without a nat table; so a dump filtered on DST_NAT misses them all.
/// With kube-proxy's nat table nf_nat adds its null bindings (SRC_NAT_DONE,
/// DST_NAT_DONE), which is all `conntrack -L --dst-nat` tests.
#[test]
fn ipvs_nat_conntrack_entries_have_no_dst_nat_bit() {
    let Some(vm) = ipvs_stale_vm() else {
        return;
    };
    vm.ok("setup");
    vm.ok("nat-rules");
    let plain: BTreeSet<(String, u16)> = service_entries(vm, "plain.conntrack")
        .into_iter()
        .map(|e| (e.proto, e.sport))
        .collect();
    assert_eq!(
        plain.len(),
        4,
        "two UDP clients and two connections before the nat table"
    );
    let entries = service_entries(vm, "status.conntrack");
    for proto in ["udp", "tcp"] {
        assert_eq!(
            entries.iter().filter(|e| e.proto == proto).count(),
            4,
            "{proto}: four flows, two without and two with the nat table:\n{}",
            vm.ok("status.conntrack")
        );
    }
    for e in &entries {
        let (_, _, _, rs_port) = e.service().unwrap();
        assert!(
            [KEPT, REMOVED].contains(&e.reply_src.as_str()) && e.reply_sport == rs_port,
            "the reply tuple is the real server's: {e:?}"
        );
        assert_eq!(e.mark & IPS_DST_NAT, 0, "DST_NAT set on an IPVS entry: {e:?}");
        assert_eq!(e.mark & IPS_SRC_NAT, 0, "SRC_NAT set on an IPVS entry: {e:?}");
        // All the bits: an unanswered UDP flow is confirmed only, a TCP
        // connection also saw replies and is assured; with a nat table nf_nat
        // adds its null bindings, and nothing else.
        let mut want = match e.proto.as_str() {
            "udp" => IPS_CONFIRMED,
            _ => IPS_SEEN_REPLY | IPS_ASSURED | IPS_CONFIRMED,
        };
        if !plain.contains(&(e.proto.clone(), e.sport)) {
            want |= IPS_SRC_NAT_DONE | IPS_DST_NAT_DONE;
        }
        assert_eq!(e.mark, want, "status bits of {e:?}");
    }
    // Each entry is one IPVS connection, to the real server of its reply tuple.
    let from_ct: BTreeSet<(String, String, String, String)> = entries
        .iter()
        .map(|e| {
            (
                e.proto.clone(),
                format!("127.0.0.1:{}", e.sport),
                format!("{}:{}", e.dst, e.dport),
                format!("{}:{}", e.reply_src, e.reply_sport),
            )
        })
        .collect();
    let from_ipvs: BTreeSet<_> = read_ipvs_conns(vm.ok("status.ipvsadm-Lnc")).into_iter().collect();
    assert_eq!(from_ct, from_ipvs, "conntrack entries vs IPVS connections");
    // `conntrack -L --dst-nat` (libnetfilter_conntrack: DST_NAT_DONE and a reply
    // source that is not the original destination) lists the entries made with
    // the nat table only: it is no test of DST_NAT.
    let listed: BTreeSet<(String, u16)> = service_entries(vm, "status.dst-nat")
        .into_iter()
        .map(|e| (e.proto, e.sport))
        .collect();
    let with_nat: BTreeSet<(String, u16)> = entries
        .iter()
        .map(|e| (e.proto.clone(), e.sport))
        .filter(|k| !plain.contains(k))
        .collect();
    assert_eq!(listed, with_nat, "conntrack -L --dst-nat");
}

/// Real server 127.0.0.3 removed from both services (weight 0, then `ipvsadm -d`)
/// with `expire_nodest_conn=0`: IPVS keeps its connections to it and drops their
/// packets, the conntrack entries stay (the UDP clients keep sending from the
/// same ports). The agent's counts and (service, dead endpoint) groups equal
/// what `conntrack -L` shows before and after each run, in two `check`s and in
/// `serve`; `check` is one-shot, so the finding (a pair seen in two runs in a
/// row) is asserted from `serve`'s /snapshot. After `conntrack -D`, nothing is
/// stale. IPVS's own connections are asserted too, since they are the rest of
/// the story: `conntrack -D` does not reach them (the UDP clients stay
/// blackholed), `expire_nodest_conn=1` does at their next packet.
#[test]
fn ipvs_stale_entries_match_conntrack() {
    let Some(vm) = ipvs_stale_vm() else {
        return;
    };
    vm.ok("setup");
    let status = stale_truth(&service_entries(vm, "status.conntrack"));
    for (proto, vip, vport, port) in STALE_SERVICES {
        let key = (format!("{vip}:{vport}/{proto}"), format!("{REMOVED}:{port}"));
        assert!(status.contains_key(&key), "no flow to {key:?} before the removal");
        let kept = service_entries(vm, "status.conntrack")
            .iter()
            .filter(|e| e.proto == proto && e.reply_src == KEPT)
            .count();
        assert!(kept > 0, "no {proto} flow to {KEPT}");
    }
    let table = vm.ok("remove");
    assert!(!table.contains(REMOVED) && table.matches(KEPT).count() == 2, "{table}");

    for round in ["stale.1", "stale.2"] {
        let want = stale_truth(&service_entries(vm, &format!("{round}.before.conntrack")));
        assert_eq!(
            want,
            stale_truth(&service_entries(vm, &format!("{round}.after.conntrack"))),
            "{round}: the stale entries moved during the run"
        );
        assert_eq!(want, status, "{round}: every entry to {REMOVED} stayed");
        // IPVS still holds its UDP connections to the removed server.
        assert_eq!(
            ipvs_conns_to(vm, &format!("{round}.before.ipvsadm-Lnc"), "udp", REMOVED) as u64,
            per_protocol(&want, "udp"),
            "{round}: {}",
            vm.ok(&format!("{round}.before.ipvsadm-Lnc"))
        );
        let doc = vm.report(&format!("{round}.json"));
        assert_stale_facts(round, &doc, &want);
    }

    // serve: the finding, critical (udp/53), with the counts of conntrack -L.
    let want = stale_truth(&service_entries(vm, "stale.serve.before"));
    assert_eq!(want, stale_truth(&service_entries(vm, "stale.serve.after")));
    assert_eq!(want, status);
    let doc = vm.json("stale.serve.snapshot");
    vm.ok("stale.serve.snapshot");
    assert_stale_facts("serve", &doc, &want);
    let f = finding(&doc, "conntrack_stale_endpoint_entries")
        .unwrap_or_else(|| panic!("no finding after three runs: {:#}", doc["findings"]));
    assert_eq!(f["severity"], "critical", "{f:#}");
    let udp: BTreeMap<_, _> = want.iter().filter(|((s, _), _)| s.ends_with("/udp")).collect();
    assert_eq!(
        f["evidence"]["stale_entries"],
        udp.values().copied().sum::<u64>(),
        "{f:#}"
    );
    assert_eq!(f["evidence"]["pairs"], udp.len() as u64, "{f:#}");
    assert!(
        finding(&doc, "ipvs_expire_sysctls").is_some(),
        "expire_nodest_conn=0 is why IPVS keeps the flows: {:?}",
        ids(&doc)
    );
    assert!(vm.ok("stale.serve.serve-output").ends_with("exit 0\n"));

    // conntrack -D deleted those entries (it lists what it deleted): nothing
    // stale, for conntrack and for the agent.
    assert_eq!(stale_truth(&read_conntrack(vm.ok("delete"))), status, "conntrack -D");
    for side in ["before", "after"] {
        let left = stale_truth(&service_entries(vm, &format!("cleared.{side}.conntrack")));
        assert!(left.is_empty(), "{side}: {left:?}");
    }
    assert_stale_facts("cleared", &vm.report("cleared.json"), &BTreeMap::new());
    // ... but IPVS still sends the UDP clients' datagrams to the removed server.
    assert_eq!(
        ipvs_conns_to(vm, "cleared.after.ipvsadm-Lnc", "udp", REMOVED) as u64,
        per_protocol(&status, "udp")
    );

    // expire_nodest_conn=1: at their next datagram IPVS drops those connections
    // and schedules the clients anew, to the kept server.
    assert_eq!(ipvs_conns_to(vm, "expired.ipvsadm-Lnc", "udp", REMOVED), 0);
    let now = service_entries(vm, "expired.conntrack");
    for e in service_entries(vm, "stale.1.before.conntrack") {
        if e.proto == "udp" && e.reply_src == REMOVED {
            assert!(
                now.iter()
                    .any(|n| n.proto == "udp" && n.sport == e.sport && n.reply_src == KEPT),
                "client port {} not rescheduled to {KEPT}: {}",
                e.sport,
                vm.ok("expired.conntrack")
            );
        }
    }
}

/// Part 3 of the `ipvs-stale` scenario, kube-proxy's `expire_nodest_conn=1`:
/// removing a real server (`ipvsadm -d`) makes the kernel (5.9 and later,
/// ip_vs_expire_nodest_conn_flush) expire every IPVS connection to it, and
/// with each its conntrack entry, without waiting for a packet: the idle TCP
/// connection's entry is gone, the UDP client's next datagram is scheduled to
/// the kept server from the same port. So with the sysctl set, IPVS-NAT flows
/// leave no stale entry behind; part 2 needs it at 0.
#[test]
fn ipvs_expire_nodest_conn_takes_the_entries_with_the_real_server() {
    let Some(vm) = ipvs_stale_vm() else {
        return;
    };
    let before = service_entries(vm, "nodest.before.conntrack");
    let on_removed: Vec<&Ct> = before.iter().filter(|e| e.reply_src == REMOVED).collect();
    for proto in ["udp", "tcp"] {
        assert!(
            on_removed.iter().any(|e| e.proto == proto),
            "a new {proto} flow went to {REMOVED}: {before:#?}"
        );
        assert!(ipvs_conns_to(vm, "nodest.before.ipvsadm-Lnc", proto, REMOVED) > 0);
    }
    let after = service_entries(vm, "nodest.after.conntrack");
    assert!(stale_truth(&after).is_empty(), "{after:#?}");
    for proto in ["udp", "tcp"] {
        assert_eq!(ipvs_conns_to(vm, "nodest.after.ipvsadm-Lnc", proto, REMOVED), 0);
    }
    for e in on_removed {
        let now: Vec<&Ct> = after
            .iter()
            .filter(|n| n.proto == e.proto && n.sport == e.sport)
            .collect();
        if e.proto == "tcp" {
            assert!(now.is_empty(), "the idle connection's entry stayed: {now:?}");
        } else {
            assert!(
                now.len() == 1 && now[0].reply_src == KEPT,
                "client port {} not rescheduled to {KEPT}: {after:#?}",
                e.sport
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Neighbour table refusing (scenario `neighbour`): the guest's own kernel, its
// gc_thresh3 lowered to 64, 100 neighbours added at once.

/// `ip -s ntable show name arp_cache`: the table's own block (with thresh3), its numbers by name.
fn read_ntable(text: &str) -> BTreeMap<String, u64> {
    let block = text
        .split("\n\n")
        .find(|b| b.contains("thresh3"))
        .unwrap_or_else(|| panic!("no table block in {text}"));
    let words: Vec<&str> = block.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|w| Some((w[0].to_string(), w[1].parse::<u64>().ok()?)))
        .collect()
}

/// The agent's IPv4 table in a document (/snapshot or `check`).
fn ipv4_table(doc: &Value) -> Value {
    doc["facts"]["neighbour_tables"]["tables"]
        .as_array()
        .unwrap_or_else(|| panic!("no neighbour tables: {}", doc["probes"]["neighbour_tables"]))
        .iter()
        .find(|t| t["family"] == "ipv4")
        .unwrap()
        .clone()
}

/// ip's numbers before and after `name` (a block pair NAME.ip-before / NAME.ip-after).
fn ntable_around(vm: &Vm, name: &str) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    (
        read_ntable(vm.ok(&format!("{name}.ip-before"))),
        read_ntable(vm.ok(&format!("{name}.ip-after"))),
    )
}

/// The agent's counters lie between ip's two readings (they only grow), its
/// entries and thresholds equal ip's when ip read the same twice.
fn assert_between(name: &str, table: &Value, before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) {
    for k in ["table_fulls", "forced_gc_runs", "allocs", "destroys"] {
        let v = table["counters"][k].as_u64().unwrap();
        assert!(
            (before[k]..=after[k]).contains(&v),
            "{name}: {k} {v} not within ip's {}..={}",
            before[k],
            after[k]
        );
    }
    for (ours, theirs) in [
        ("entries", "entries"),
        ("gc_thresh1", "thresh1"),
        ("gc_thresh2", "thresh2"),
        ("gc_thresh3", "thresh3"),
    ] {
        if before[theirs] == after[theirs] {
            assert_eq!(table[ours].as_u64(), Some(before[theirs]), "{name}: {ours}: {table}");
        }
    }
}

fn severity_of(findings: &Value, id: &str) -> Option<String> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .map(|f| f["severity"].as_str().unwrap().to_string())
}

#[test]
fn neighbour_table_refusing_matches_ip_ntable_and_the_finding_clears() {
    let Some(vm) = Vm::boot("neighbour") else {
        return;
    };
    let setup = read_ntable(vm.ok("setup"));
    assert_eq!((setup["thresh1"], setup["thresh2"], setup["thresh3"]), (16, 32, 64));

    // Serving, before the fill: nothing refused.
    let (_, after) = ntable_around(&vm, "quiet");
    assert_eq!(after["table_fulls"], 0, "{after:?}");
    // The serving agent's snapshot may be a little older than ip's reading: no
    // refusal yet, the lowered limit.
    let quiet = ipv4_table(&vm.json("quiet.snapshot"));
    assert_eq!(
        (quiet["gc_thresh3"].as_u64(), quiet["counters"]["table_fulls"].as_u64()),
        (Some(64), Some(0)),
        "{quiet}"
    );
    let findings = vm.json("quiet.findings");
    assert_eq!(severity_of(&findings, "neighbour_table_overflow"), None, "{findings:#}");

    // 100 neighbours at once: the kernel refused some (ENOBUFS) and counted it.
    let fill = vm.ok("fill");
    assert!(!fill.contains("exit 0"), "ip -batch did not fail: {fill}");
    assert!(
        vm.block("fill.stderr").contains("No buffer space available"),
        "{}",
        vm.block("fill.stderr")
    );
    let (before, _) = ntable_around(&vm, "full");
    assert!(before["table_fulls"] > 0, "the kernel refused none: {before:?}");
    let findings = vm.json("full.findings");
    assert_eq!(
        severity_of(&findings, "neighbour_table_overflow").as_deref(),
        Some("critical"),
        "{findings:#}"
    );
    // The fill warning follows the entries the agent read: the kernel's forced GC may
    // already have brought them back to gc_thresh2 (32 of 64) by the time it reads.
    let fill = findings
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "neighbour_table_overflow")
        .and_then(|f| f["evidence"]["tables"].as_array())
        .and_then(|t| t.iter().find(|t| t["family"] == "ipv4"))
        .and_then(|t| t["fill"].as_f64())
        .expect("the overflow finding's evidence has the ipv4 table's fill");
    assert_eq!(
        severity_of(&findings, "neighbour_table_fill").as_deref(),
        (fill >= 0.8).then_some("warning"),
        "fill {fill}: {findings:#}"
    );

    // `check` between two of ip's readings: the same table, counters and thresholds.
    let (before, after) = ntable_around(&vm, "check");
    let check = vm.report("check.json");
    let table = ipv4_table(&check);
    assert_between("check", &table, &before, &after);
    assert!(table["counters"]["table_fulls"].as_u64() > Some(0), "{table}");
    // One reading: refusals since boot only (info), and the fill warning while entries stay near gc_thresh3.
    assert_eq!(
        finding(&check, "neighbour_table_overflow").map(|f| f["severity"].clone()),
        Some("info".into()),
        "{}",
        ids(&check).join(", ")
    );

    // Entries removed and the window (10 s) passed: nothing refused since (so the
    // serving agent's latest reading has ip's numbers), the findings clear.
    let (before, after) = ntable_around(&vm, "cleared");
    assert_eq!(before["table_fulls"], after["table_fulls"], "still refusing: {after:?}");
    assert_between("cleared", &ipv4_table(&vm.json("cleared.snapshot")), &before, &after);
    let findings = vm.json("cleared.findings");
    assert_eq!(severity_of(&findings, "neighbour_table_overflow"), None, "{findings:#}");
    assert_eq!(severity_of(&findings, "neighbour_table_fill"), None, "{findings:#}");
    assert!(vm.ok("serve-output").contains("exit 0"), "{}", vm.block("serve-output"));
}

// ---------------------------------------------------------------------------
// Conntrack table full (scenario `conntrack-full`): the guest's own kernel, its
// nf_conntrack_max lowered to 64, held full with ASSURED entries, new UDP flows
// dropped. The host-side suite never lowers the host's limit (issue 43): this is
// where the agent reads a real full table.

/// The kernel's count, limit and `drop` summed over CPUs, from a `conntrack_truth` block.
fn read_ct_truth(text: &str) -> (u64, u64, u64) {
    let mut lines = text.lines();
    let mut next_number = || lines.next().and_then(|l| l.trim().parse::<u64>().ok()).expect(text);
    let (count, max) = (next_number(), next_number());
    let rest: Vec<&str> = text.lines().skip(2).collect();
    let col = rest[0]
        .split_whitespace()
        .position(|c| c == "drop")
        .unwrap_or_else(|| panic!("no drop column: {text}"));
    let drop = rest[1..]
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(col).unwrap(), 16).unwrap())
        .sum();
    (count, max, drop)
}

fn ct_around(vm: &Vm, name: &str) -> ((u64, u64, u64), (u64, u64, u64)) {
    (
        read_ct_truth(vm.ok(&format!("{name}.kernel-before"))),
        read_ct_truth(vm.ok(&format!("{name}.kernel-after"))),
    )
}

#[test]
fn conntrack_full_table_matches_the_kernel_and_the_findings_clear() {
    let Some(vm) = Vm::boot("conntrack-full") else {
        return;
    };
    assert_eq!(vm.ok("setup").trim(), "64", "the lowered limit");

    // Before the fill: the limit read, no drop, no finding.
    let ((_, max, drop), _) = ct_around(&vm, "quiet");
    assert_eq!((max, drop), (64, 0));
    let quiet = &vm.json("quiet.snapshot")["facts"]["conntrack"];
    assert_eq!(quiet["max"], 64, "{quiet}");
    assert_eq!(quiet["stats"]["drop"], 0, "{quiet}");
    let findings = vm.json("quiet.findings");
    for id in ["conntrack_table_fill", "conntrack_drops"] {
        assert_eq!(severity_of(&findings, id), None, "{findings:#}");
    }

    // Full: the kernel holds 64 of 64 and dropped new flows; the agent read the
    // same count and limit, its drop counter between the kernel's two readings.
    assert_eq!(vm.ok("fill").trim(), "64");
    let ((count_b, _, drop_b), (count_a, _, drop_a)) = ct_around(&vm, "full");
    assert!(
        drop_b > 0,
        "the kernel dropped nothing: {}",
        vm.ok("full.kernel-before")
    );
    let full = &vm.json("full.snapshot")["facts"]["conntrack"];
    if count_b == count_a {
        assert_eq!(full["entries"].as_u64(), Some(count_b), "{full}");
    }
    let agent_drop = full["stats"]["drop"].as_u64().unwrap();
    assert!(
        agent_drop > 0 && agent_drop <= drop_a,
        "the agent's drop {agent_drop}, the kernel's {drop_b}..={drop_a}"
    );
    let findings = vm.json("full.findings");
    assert_eq!(
        severity_of(&findings, "conntrack_table_fill").as_deref(),
        Some("critical"),
        "{findings:#}"
    );
    assert_eq!(
        severity_of(&findings, "conntrack_drops").as_deref(),
        Some("critical"),
        "{findings:#}"
    );

    // Flushed, the window passed with no new drop: both clear.
    let ((count_b, _, drop_b), (_, _, drop_a)) = ct_around(&vm, "cleared");
    assert!(count_b < 64, "not relieved: {count_b}");
    assert_eq!(drop_b, drop_a, "still dropping");
    let findings = vm.json("cleared.findings");
    for id in ["conntrack_table_fill", "conntrack_drops"] {
        assert_eq!(severity_of(&findings, id), None, "{findings:#}");
    }
    assert!(vm.ok("serve-output").contains("exit 0"), "{}", vm.block("serve-output"));
}

/// When the guest printed block `name` (seconds of its uptime, `@@PW-TIME`).
fn block_time(vm: &Vm, name: &str) -> f64 {
    let text = std::fs::read_to_string(&vm.log).unwrap();
    let mark = format!("@@PW-TIME {name} ");
    let at = text
        .find(&mark)
        .unwrap_or_else(|| panic!("no time for {name} in {}", vm.log.display()));
    let rest = &text[at + mark.len()..];
    rest[..rest.find("@@").unwrap()].parse().unwrap()
}

/// `ipvsadm -Ln`'s line for real server `rs`: (weight, ActiveConn), or None.
fn ipvsadm_real_server(text: &str, rs: &str) -> Option<(i64, u64)> {
    text.lines().find_map(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        (t.len() >= 6 && t[0] == "->" && t[1] == rs).then(|| (t[3].parse().unwrap(), t[4].parse().unwrap()))
    })
}

/// Templates in `/proc/net/ip_vs_conn` to `dest_hex` (`7F000003 1F90`): client port 0000,
/// state NONE or ASSURED.
fn templates_to(text: &str, dest_hex: &str) -> usize {
    text.lines()
        .skip(1)
        .filter(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() >= 8
                && t[2] == "0000"
                && format!("{} {}", t[5], t[6]) == dest_hex
                && (t[7] == "NONE" || t[7] == "ASSURED")
        })
        .count()
}

/// Issue 41, in real IPVS: a persistent TCP service's real server drained to weight 0 while
/// two connections to it stay open (and the template of their client still points at it) is
/// a warning naming it, with its connections and template as ipvsadm and /proc show them and
/// its age since the drain; deleted, the finding is gone.
#[test]
fn ipvs_real_server_drained_with_live_connections_is_reported_with_its_age_then_clears_once_removed() {
    let Some(vm) = Vm::boot("ipvs-lingering") else {
        return;
    };
    vm.ok("setup");
    // The third connection, made after the drain, went to the weight-0 real server too: its
    // client's template pins it there while expire_quiescent_template is 0.
    assert_eq!(
        ipvsadm_real_server(vm.ok("drain"), "127.0.0.3:8080"),
        Some((0, 3)),
        "{}",
        vm.block("drain")
    );
    assert_eq!(
        ipvsadm_real_server(vm.ok("drain"), "127.0.0.2:8080"),
        Some((1, 0)),
        "{}",
        vm.block("drain")
    );
    let mut want = Vec::new();
    for at in ["lingering.before", "lingering.after"] {
        let (weight, active) = ipvsadm_real_server(vm.ok(&format!("{at}.ipvsadm-Ln")), "127.0.0.3:8080").unwrap();
        let templates = templates_to(vm.ok(&format!("{at}.proc-ip_vs_conn")), "7F000003 1F90");
        want.push((weight, active, templates));
    }
    assert_eq!(want[0], want[1], "the truth moved during the agent's reading");
    assert_eq!(want[0], (0, 3, 1), "the scenario's own setup");
    // /findings is the list the snapshot's `findings` holds.
    let findings = serde_json::json!({ "findings": vm.json("lingering.findings") });
    let f = finding(&findings, "ipvs_real_servers_lingering").unwrap_or_else(|| panic!("{findings:#}"));
    assert_eq!(f["severity"], "warning", "{f:#}");
    let first = &f["evidence"]["first"][0];
    assert_eq!(first["virtual_server"], "TCP 127.0.0.1:80", "{f:#}");
    assert_eq!(first["real_server"], "127.0.0.3:8080", "{f:#}");
    assert_eq!(first["active_connections"].as_u64(), Some(want[0].1), "{f:#}");
    assert_eq!(first["persistence_templates"].as_u64(), Some(want[0].2 as u64), "{f:#}");
    assert_eq!(f["evidence"]["net.ipv4.vs.expire_quiescent_template"], 0, "{f:#}");
    assert_eq!(f["evidence"]["templates_truncated"], false, "{f:#}");
    // Its age: at least the 3 s threshold, at most the time since the drain (the first
    // reading that showed it is after the drain).
    let age = first["seconds_at_weight_zero"].as_f64().unwrap();
    let since_drain = block_time(&vm, "lingering.findings") - block_time(&vm, "drain");
    assert!(
        age >= 3.0 && age <= since_drain,
        "age {age} s, {since_drain} s since the drain: {f:#}"
    );
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("1 persistence template(s) still sending"),
        "{f:#}"
    );
    let text = vm.ok("lingering.text");
    assert!(
        text.lines()
            .any(|l| l.contains("[warning] ipvs_real_servers_lingering") && l.contains("-> 127.0.0.3:8080")),
        "{text}"
    );
    // What the remediation says of kube-proxy's setting: with it back to 1, the client's next
    // connection drops the template and goes to the other real server, where the new
    // template points.
    let requiesced = vm.ok("requiesce");
    assert_eq!(
        ipvsadm_real_server(requiesced, "127.0.0.2:8080"),
        Some((1, 1)),
        "{requiesced}"
    );
    assert_eq!(
        ipvsadm_real_server(requiesced, "127.0.0.3:8080"),
        Some((0, 3)),
        "{requiesced}"
    );
    let table = vm.ok("requiesced.proc-ip_vs_conn");
    assert_eq!(
        (
            templates_to(table, "7F000003 1F90"),
            templates_to(table, "7F000002 1F90")
        ),
        (0, 1),
        "{table}"
    );
    // Deleted (kube-proxy's step once the connections are gone): cleared.
    vm.ok("remove");
    for at in ["removed.before", "removed.after"] {
        assert_eq!(
            ipvsadm_real_server(vm.ok(&format!("{at}.ipvsadm-Ln")), "127.0.0.3:8080"),
            None
        );
    }
    let after = serde_json::json!({ "findings": vm.json("removed.findings") });
    assert!(finding(&after, "ipvs_real_servers_lingering").is_none(), "{after:#}");
    let out = vm.ok("serve-output");
    assert!(!out.contains("panicked") && out.contains("exit 0"), "{out}");
}

/// `ipvsadm -Lnc`: (protocol, client, virtual, destination) per connection, lowercase protocol.
fn ipvs_connections(text: &str) -> Vec<(String, String, String, String)> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 6).then(|| (t[0].to_lowercase(), t[3].into(), t[4].into(), t[5].into()))
        })
        .collect()
}

/// Issue 37 in IPVS mode, whose rules name no Service: the agent finds the kubernetes-like
/// and kube-dns-like Services as a pod is told of them (KUBERNETES_SERVICE_HOST, the first
/// nameserver of its resolv.conf), tries each for real, and names the real server each try
/// reached, equal to conntrack's reply source for the try's own tuple and to IPVS's
/// connection for it. Told nothing, it tries nothing.
#[test]
fn ipvs_service_tries_find_their_services_by_address_and_name_the_real_server_reached() {
    let Some(vm) = Vm::boot("ipvs-service-traffic") else {
        return;
    };
    vm.ok("setup");
    // The DNS servers answer through IPVS: the lab works without the agent.
    assert!(
        vm.ok("nslookup").contains("Address: 10.96.0.1"),
        "{}",
        vm.block("nslookup")
    );
    let want_rs = |port: u16| ["127.0.0.2", "127.0.0.3"].map(|a| format!("{a}:{port}"));
    let mut reached = BTreeSet::new();
    // first and second as they are; slow with 150 ms of netem delay on lo (each packet of
    // a try crosses it: the SYN and its answer, the query and its answer); fast without.
    for round in ["first", "second", "slow", "fast"] {
        vm.ok(&format!("{round}.save"));
        let doc = vm.report(&format!("{round}.json"));
        let st = &doc["facts"]["service_traffic"];
        assert_eq!(st["source"], "ipvs", "{st:#}");
        let cts = read_conntrack(vm.ok(&format!("{round}.conntrack")));
        let conns = ipvs_connections(vm.ok(&format!("{round}.ipvsadm-Lnc")));
        let tries = st["tries"].as_array().unwrap();
        let targets: Vec<&str> = tries.iter().map(|t| t["target"].as_str().unwrap()).collect();
        assert_eq!(
            targets,
            [
                "default/kubernetes:443/tcp",
                "kube-system/kube-dns:53/udp",
                "kube-system/kube-dns:53/tcp"
            ],
            "{st:#}"
        );
        for (t, (vip, port, rs_port)) in tries.iter().zip([
            ("127.0.10.1", 443, 6443),
            ("127.0.10.10", 53, 53),
            ("127.0.10.10", 53, 53),
        ]) {
            let proto = if t["target"].as_str().unwrap().ends_with("/udp") {
                "udp"
            } else {
                "tcp"
            };
            assert_eq!(t["result"], "ok", "{t:#}");
            assert_eq!(t["service"], format!("{vip}:{port}/{proto}"), "{t:#}");
            assert_eq!(t["path"], "current", "{t:#}");
            let mut eps: Vec<String> = t["rule_endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap().to_string())
                .collect();
            eps.sort();
            assert_eq!(eps, want_rs(rs_port), "{t:#}");
            let source = t["source"].as_str().unwrap();
            let sport: u16 = source.rsplit_once(':').unwrap().1.parse().unwrap();
            let ct: Vec<&Ct> = cts
                .iter()
                .filter(|c| c.proto == proto && c.sport == sport && c.dst == vip && c.dport == port)
                .collect();
            assert_eq!(
                ct.len(),
                1,
                "the try's own conntrack entry: {t:#}\n{}",
                vm.block(&format!("{round}.conntrack"))
            );
            let endpoint = format!("{}:{}", ct[0].reply_src, ct[0].reply_sport);
            assert_eq!(t["endpoint"], endpoint, "{t:#}");
            let conn: Vec<_> = conns
                .iter()
                .filter(|c| c.0 == proto && c.1 == source && c.2 == format!("{vip}:{port}"))
                .collect();
            assert_eq!(conn.len(), 1, "IPVS's connection for the try: {conns:?}");
            assert_eq!(conn[0].3, endpoint, "IPVS and conntrack agree");
            if round == "slow" {
                let secs = t["seconds"].as_f64().unwrap();
                assert!(secs >= 0.3, "two crossings of a 150 ms delay: {secs} s: {t:#}");
            }
            reached.insert(endpoint);
        }
        // Not judged unhealthy: every try went through.
        for id in ["service_traffic_failing", "service_traffic_rejected"] {
            assert!(finding(&doc, id).is_none(), "{id}: {doc:#}");
        }
        let slow = finding(&doc, "service_connect_slow");
        if round == "slow" {
            let f = slow.unwrap_or_else(|| panic!("{:#}", doc["findings"]));
            assert_eq!(f["severity"], "warning", "{f:#}");
            for t in tries {
                let named = format!(
                    "{} ({}): ",
                    t["target"].as_str().unwrap(),
                    t["service"].as_str().unwrap()
                );
                let reached = format!("reached {}", t["endpoint"].as_str().unwrap());
                let summary = f["summary"].as_str().unwrap();
                let at = summary.find(&named).unwrap_or_else(|| panic!("{named} in {f:#}"));
                assert!(summary[at..].contains(&reached), "{reached} in {f:#}");
            }
        } else {
            assert!(slow.is_none(), "{round}: {:#}", doc["findings"]);
        }
    }
    // The runbook's verification: compare of the baselines before and after the delay.
    assert_eq!(vm.rc("compare"), 1, "{}", vm.block("compare"));
    let text = vm.block("compare");
    assert!(text.starts_with("proxywatch compare: WORSE"), "{text}");
    for target in [
        "default/kubernetes:443/tcp",
        "kube-system/kube-dns:53/udp",
        "kube-system/kube-dns:53/tcp",
    ] {
        assert!(
            text.contains(&format!("worse: {target} connects slower")),
            "{target}: {text}"
        );
    }
    // rr over two rounds: both real servers of some Service were reached.
    assert!(reached.len() >= 2, "{reached:?}");
    // No addresses: every target not_in_rules, and no flow from the agent to a service.
    let doc = vm.report("unnamed.json");
    for t in doc["facts"]["service_traffic"]["tries"].as_array().unwrap() {
        assert_eq!(t["result"], "not_in_rules", "{t:#}");
        assert!(t.get("source").is_none(), "{t:#}");
    }
    let before: BTreeSet<u16> = read_conntrack(vm.ok("fast.conntrack"))
        .iter()
        .map(|c| c.sport)
        .collect();
    let new: Vec<Ct> = read_conntrack(vm.ok("unnamed.conntrack"))
        .into_iter()
        .filter(|c| !before.contains(&c.sport) && c.dst.starts_with("127.0.10."))
        .collect();
    assert!(
        new.is_empty(),
        "a flow to a service after the unnamed check: {} entries",
        new.len()
    );
}
