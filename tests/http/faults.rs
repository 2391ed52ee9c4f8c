//! Fault tests: `proxywatch serve` on a fixture node while one of its inputs
//! misbehaves. Two command probes are attacked through stand-in scripts on
//! PATH (only shell builtins and absolute /bin paths), on a copy of an IPVS
//! fixture node without its netlink recording (so the iptables probe runs its
//! save command): the iptables probe (`iptables-nft-save`) and the IPVS probe
//! (`ipvsadm -Ln`, then `-Ln --stats --exact`); the conntrack probe's /proc
//! files are attacked directly. Both commands are rule-set dumps, run one at a
//! time, so the probe not under attack gets a deadline long enough to outwait a
//! hung one ([`Agent::start_with`]).
//!
//! For each fault the test polls /snapshot until the faulty probe reports the
//! expected error, checks that every other probe reports what it reports on the
//! healthy node and that /metrics answers 200 during the fault. Then it swaps
//! the healthy input back in, waits for the probe to recover plus one interval,
//! and checks that no process of the stand-in is left (by a marker argument
//! and by the stand-in's directory in argv) and that the agent has no zombie
//! child. The endless-output and 10 MB-stderr cases also bound the agent's RSS.
//!
//! What root makes untestable: a chmod-000 file is still readable by root
//! (CAP_DAC_OVERRIDE), so "permission denied" is tested by running the agent
//! as `nobody` on a world-readable copy of the node; "hangs on read" is a FIFO
//! without a writer (open(2) blocks in the kernel, uninterruptibly for the
//! agent's blocking thread).
use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Serve;
use serde_json::Value;

const NODE: &str = "ipvs-modules-loaded";
const COUNT: &str = "proc/sys/net/netfilter/nf_conntrack_count";
/// Fast schedule for the two probes under test; the others run once at start.
const INTERVAL_MS: u64 = 200;
const TIMEOUT_MS: u64 = 1000;
/// RSS the agent must stay under after the output floods.
const RSS_LIMIT_KIB: u64 = 64 * 1024;
/// stdout cap given to the agent (the iptables probe's limit); conntrack's is fixed at 1 MiB.
const MAX_OUTPUT: u64 = 8 << 20;

// ---------------------------------------------------------------------------
// Files and stand-ins.

fn write_executable(path: &Path, text: &str) {
    // Write then rename: an exec of a half-written script would be a different fault.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Makes a tree world-readable (for the agent run as `nobody`).
fn open_up(p: &Path) {
    let meta = std::fs::symlink_metadata(p).unwrap();
    if meta.is_dir() {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        for e in std::fs::read_dir(p).unwrap() {
            open_up(&e.unwrap().path());
        }
    } else if meta.is_file() {
        let mode = meta.permissions().mode() | 0o444;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Prints a file with builtins only (GNU cat closes stdout before exiting; see fixture_nodes.rs).
fn print_file(file: &Path) -> String {
    format!(
        "while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done < '{}'",
        file.display()
    )
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Iptables,
    Ipvs,
}

impl Target {
    fn probe(self) -> &'static str {
        match self {
            Target::Iptables => "iptables",
            Target::Ipvs => "ipvs",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Target::Iptables => "iptables-nft-save",
            Target::Ipvs => "ipvsadm",
        }
    }

    /// The command's healthy output, as a file in the stand-in directory (ipvsadm's
    /// `--stats` listing beside it).
    fn good_output(self, bin: &Path) -> PathBuf {
        match self {
            Target::Iptables => bin.join("save.txt"),
            Target::Ipvs => bin.join("ipvsadm-Ln.txt"),
        }
    }

    /// The stand-in's healthy body: ipvsadm prints its listing or, with `--stats`, its counters.
    fn good_body(self, bin: &Path) -> String {
        match self {
            Target::Iptables => print_file(&self.good_output(bin)),
            Target::Ipvs => format!(
                "case \"$*\" in\n*--stats*) {} ;;\n*) {} ;;\nesac",
                print_file(&bin.join("ipvsadm-Ln-stats.txt")),
                print_file(&self.good_output(bin))
            ),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Missing,
    Hang,
    DoubleFork,
    IgnoresTerm,
    Endless,
    Stderr10M,
    Garbage,
}

/// The stand-in script for `target` behaving as `fault`. `marker` is a number
/// no other process uses, passed to every long-lived process it starts.
fn stand_in(target: Target, fault: Option<Fault>, bin: &Path, marker: &str) -> Option<String> {
    let good = target.good_body(bin);
    let body = match fault {
        None => good,
        Some(Fault::Missing) => return None,
        // A child of the shell (not exec'd), so the group holds two processes.
        Some(Fault::Hang) => format!("/bin/sleep {marker}"),
        // Full output, then a grandchild that keeps stdout open; the script exits at once.
        Some(Fault::DoubleFork) => format!("{good}\n( /bin/sleep {marker} & )\nexit 0"),
        Some(Fault::IgnoresTerm) => format!("trap '' TERM\n/bin/sleep {marker}\n/bin/sleep {marker}"),
        Some(Fault::Endless) => match target {
            // Valid output without end: only the output cap or the timeout stops it.
            Target::Iptables => {
                format!("printf '*filter\\n:INPUT ACCEPT [0:0]\\n'\nexec /bin/yes -- '-A INPUT -j ACCEPT' {marker}")
            }
            Target::Ipvs => "printf 'IP Virtual Server version 1.2.1 (size=4096)\\nProt LocalAddress:Port Scheduler Flags\\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\\n'\n\
                 while :; do printf 'TCP  10.96.0.1:443 rr\\n  -> 192.168.224.3:6443           Masq    1      0          0\\n'; done"
                .to_string(),
        },
        Some(Fault::Stderr10M) => {
            format!("/bin/yes 'stand-in failure {marker}: out of cheese' | /bin/head -c 10485760 >&2\nexit 1")
        }
        Some(Fault::Garbage) => "printf 'hello garbage \\001\\377\\n*filter\\n'\nexit 0".to_string(),
    };
    Some(format!(
        "#!/bin/sh\n# proxywatch fault stand-in for {}\n{body}\n",
        target.command()
    ))
}

/// A copy of the fixture node plus a stand-in directory (the agent's whole PATH).
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    marker: String,
}

impl Node {
    fn new(case: u32) -> Node {
        let dir = tempfile::Builder::new().prefix("pwfault-").tempdir().unwrap();
        let root = dir.path().join("node");
        // Files only: without the recording the iptables probe runs iptables-nft-save.
        common::copy_files_only(NODE, &root);
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let ipvs = common::fixtures().join("ipvs");
        std::fs::copy(
            ipvs.join("ln-kube-proxy-ipvs-kind-tkng.txt"),
            Target::Ipvs.good_output(&bin),
        )
        .unwrap();
        std::fs::copy(
            ipvs.join("stats-ln-kube-router-pr160-partial.txt"),
            bin.join("ipvsadm-Ln-stats.txt"),
        )
        .unwrap();
        std::fs::copy(
            common::fixtures().join("iptables/kube-20x1-no-hint-no-canary-iptables-nft-save.txt"),
            Target::Iptables.good_output(&bin),
        )
        .unwrap();
        let marker = format!("{}.{}", 7000 + case, std::process::id());
        let node = Node {
            _dir: dir,
            root,
            bin,
            marker,
        };
        node.install(Target::Iptables, None);
        node.install(Target::Ipvs, None);
        node
    }

    /// Puts the stand-in for `target` in place (or removes it for `Missing`).
    fn install(&self, target: Target, fault: Option<Fault>) {
        let path = self.bin.join(target.command());
        match stand_in(target, fault, &self.bin, &self.marker) {
            Some(script) => write_executable(&path, &script),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Processes (other than `except`) that carry the marker or run a script from `bin`.
    fn leftovers(&self, except: u32) -> Vec<String> {
        let bin = self.bin.to_string_lossy().into_owned();
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.parse::<u32>().map_or(true, |p| p == except) {
                continue;
            }
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let mine = cmdline.split(|b| *b == 0).any(|a| {
                let a = String::from_utf8_lossy(a);
                a == self.marker || a.contains(&bin)
            });
            if mine {
                found.push(format!(
                    "{name}: {}",
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                ));
            }
        }
        found
    }
}

// ---------------------------------------------------------------------------
// The agent.

/// `proxywatch serve` (the shared harness's agent) with what these tests read of it.
struct Agent(common::Agent);

impl Agent {
    /// `proxywatch serve` on `node` with nothing from this machine's environment.
    fn start(node: &Node, as_nobody: bool) -> Agent {
        Agent::start_with(node, as_nobody, Target::Iptables)
    }

    /// Both command probes run rule-set dumps, one at a time (`crate::exec`'s dump slot): a
    /// hung dump holds the slot until its timeout, and the other probe's command waits for it
    /// within its own deadline. So the probe under attack (`faulty`) gets TIMEOUT_MS and the
    /// other four times that, enough to outwait it (its two commands may each wait once) and
    /// still report ok.
    fn start_with(node: &Node, as_nobody: bool, faulty: Target) -> Agent {
        let interval = format!("{INTERVAL_MS}ms");
        let timeout = format!("{TIMEOUT_MS}ms");
        let outwait = format!("{}ms", 4 * TIMEOUT_MS);
        let (iptables_timeout, ipvs_timeout) = match faulty {
            Target::Iptables => (&timeout, &outwait),
            Target::Ipvs => (&outwait, &timeout),
        };
        let mut serve = Serve::new()
            .env_clear()
            .env("PATH", &node.bin)
            .args(["--node-name", "faults", "--host-root"])
            .arg(&node.root)
            .args(["--conntrack.interval", &interval, "--probe.timeout", &timeout])
            .args(["--iptables.interval", &interval, "--iptables.timeout", iptables_timeout])
            .args(["--ipvs.interval", &interval, "--ipvs.timeout", ipvs_timeout])
            .args(["--exec.max-output-bytes", &MAX_OUTPUT.to_string()])
            .args(common::NO_KUBE_PROXY)
            .args(["--log.level", "error"])
            // Up once /healthz answers; each test then waits for the probe states it needs.
            .ready("/healthz");
        if as_nobody {
            serve = serve.user(65534, 65534);
        }
        Agent(serve.start())
    }

    fn get(&self, path: &str) -> Result<(u16, String), String> {
        self.0.get(path)
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }

    fn stderr(&self) -> String {
        self.0.log()
    }

    fn snapshot(&self) -> Option<Value> {
        let (code, body) = self.get("/snapshot").ok()?;
        if code != 200 {
            return None;
        }
        serde_json::from_str(&body).ok()
    }

    /// Polls /snapshot until `want` holds for it; panics with the last one after `secs`.
    fn wait_for(&self, secs: u64, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(doc) = self.snapshot() {
                if want(&doc) {
                    return doc;
                }
                last = doc;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{what}: not seen in {secs}s; last probes: {:#}\nagent stderr:\n{}",
            last["probes"],
            self.stderr()
        );
    }

    fn status_field(&self, key: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{}/status", self.pid()))
    }

    fn rss_kib(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    fn threads(&self) -> u64 {
        self.status_field("Threads:")
    }

    /// Children of the agent in state Z.
    fn zombies(&self) -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let mut f = rest.split_whitespace();
            let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
            if state == Some("Z") && ppid == Some(self.pid()) {
                found.push(stat.trim().to_string());
            }
        }
        found
    }
}

fn status(doc: &Value, probe: &str) -> String {
    doc["probes"][probe]["status"].as_str().unwrap_or("?").to_string()
}

fn error(doc: &Value, probe: &str) -> String {
    doc["probes"][probe]["error"].as_str().unwrap_or("").to_string()
}

/// Probe statuses on the healthy node (an IPVS node without its recording) with both healthy stand-ins.
const HEALTHY: &[(&str, &str)] = &[
    ("node", "ok"),
    ("modules", "ok"),
    ("conntrack", "ok"),
    ("sysctls", "ok"),
    ("iptables", "ok"),
    ("nftables", "absent"),
    ("ipvs", "ok"),
    ("kube_proxy", "absent"),
];

fn assert_others_healthy(doc: &Value, faulty: &str) {
    for (probe, want) in HEALTHY.iter().filter(|(p, _)| *p != faulty) {
        assert_eq!(
            status(doc, probe),
            *want,
            "{probe} during the {faulty} fault: {:#}",
            doc["probes"][probe]
        );
    }
}

/// Waits (briefly) for leftovers to be torn down, then asserts there are none.
fn assert_clean(node: &Node, agent: &Agent, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = node.leftovers(agent.pid());
        let zombies = agent.zombies();
        if left.is_empty() && zombies.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: leftover processes {left:?}, zombie children {zombies:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The whole scenario for one command fault; `want` is what the error must contain.
fn command_fault(case: u32, target: Target, fault: Fault, want_status: &str, want: &[&str]) {
    let node = Node::new(case);
    let agent = Agent::start_with(&node, false, target);
    let probe = target.probe();
    let what = format!("{probe} {fault:?}");
    agent.wait_for(10, &format!("{what}: healthy start"), |d| {
        HEALTHY.iter().all(|(p, s)| status(d, p) == *s)
    });
    node.install(target, Some(fault));
    let doc = agent.wait_for(15, &format!("{what}: reported"), |d| {
        status(d, probe) == want_status && want.iter().any(|w| error(d, probe).contains(w))
    });
    let err = error(&doc, probe);
    assert!(err.len() < 1024, "{what}: error is {} bytes: {err}", err.len());
    assert_others_healthy(&doc, probe);
    let (code, body) = agent.get("/metrics").expect("/metrics during the fault");
    assert_eq!(code, 200, "{what}: /metrics");
    let success = if want_status == "failed" { 0 } else { 1 };
    assert!(
        body.contains(&format!("proxywatch_probe_success{{probe=\"{probe}\"}} {success}")),
        "{what}: /metrics must show the probe's state:\n{body}"
    );
    if matches!(fault, Fault::Endless | Fault::Stderr10M) {
        // Let a few more floods run before measuring.
        std::thread::sleep(Duration::from_millis(3 * (INTERVAL_MS + TIMEOUT_MS)));
        let rss = agent.rss_kib();
        assert!(rss < RSS_LIMIT_KIB, "{what}: agent RSS {rss} KiB after the flood");
    }
    // Heal: the probe must recover, and nothing of the faulty runs may remain.
    node.install(target, None);
    let healed = agent.wait_for(15, &format!("{what}: recovered"), |d| status(d, probe) == "ok");
    assert_others_healthy(&healed, probe);
    std::thread::sleep(Duration::from_millis(INTERVAL_MS));
    assert_clean(&node, &agent, &what);
    let log = agent.stderr();
    assert!(!log.contains("panicked"), "{what}: agent log:\n{log}");
}

// ---------------------------------------------------------------------------
// iptables-nft-save faults.

#[test]
fn iptables_missing_binary_is_absent() {
    // The agent looks on PATH first: no save command is "absent", not a failure.
    command_fault(
        1,
        Target::Iptables,
        Fault::Missing,
        "absent",
        &["no iptables-save command on PATH"],
    );
}

#[test]
fn iptables_sleeping_forever_times_out() {
    command_fault(
        2,
        Target::Iptables,
        Fault::Hang,
        "failed",
        &["iptables-nft-save: timed out after"],
    );
}

#[test]
fn iptables_grandchild_holding_stdout_times_out_and_is_killed() {
    command_fault(
        3,
        Target::Iptables,
        Fault::DoubleFork,
        "failed",
        &["iptables-nft-save: timed out after"],
    );
}

#[test]
fn iptables_ignoring_sigterm_is_killed() {
    command_fault(
        4,
        Target::Iptables,
        Fault::IgnoresTerm,
        "failed",
        &["iptables-nft-save: timed out after"],
    );
}

#[test]
fn iptables_endless_output_is_cut() {
    command_fault(
        5,
        Target::Iptables,
        Fault::Endless,
        "failed",
        &[
            &format!("iptables-nft-save: output exceeds {MAX_OUTPUT} bytes; killed"),
            "iptables-nft-save: timed out after",
            // Parsing runs on the probe's task: when it is slow (a debug build), the
            // scheduler's bound can fire before the command's own, without its name.
            "timed out after",
        ],
    );
}

#[test]
fn iptables_10mb_stderr_and_exit_1() {
    command_fault(
        6,
        Target::Iptables,
        Fault::Stderr10M,
        "failed",
        &["exit status: 1: stand-in failure"],
    );
}

#[test]
fn iptables_garbage_output_names_the_line() {
    command_fault(
        7,
        Target::Iptables,
        Fault::Garbage,
        "failed",
        &["iptables-nft-save: line 1: expected a comment"],
    );
}

// ---------------------------------------------------------------------------
// ipvsadm faults (without ipvsadm on PATH the table comes from /proc/net/ip_vs: no fault).

#[test]
fn ipvsadm_sleeping_forever_times_out() {
    command_fault(
        12,
        Target::Ipvs,
        Fault::Hang,
        "failed",
        &["ipvsadm -Ln: timed out after"],
    );
}

#[test]
fn ipvsadm_grandchild_holding_stdout_times_out_and_is_killed() {
    command_fault(
        13,
        Target::Ipvs,
        Fault::DoubleFork,
        "failed",
        &[
            "ipvsadm -Ln: timed out after",
            "ipvsadm -Ln --stats --exact: timed out after",
        ],
    );
}

#[test]
fn ipvsadm_ignoring_sigterm_is_killed() {
    command_fault(
        14,
        Target::Ipvs,
        Fault::IgnoresTerm,
        "failed",
        &["ipvsadm -Ln: timed out after"],
    );
}

#[test]
fn ipvsadm_endless_output_is_cut() {
    command_fault(
        15,
        Target::Ipvs,
        Fault::Endless,
        "failed",
        &[
            &format!("ipvsadm -Ln: output exceeds {MAX_OUTPUT} bytes; killed"),
            "timed out after",
        ],
    );
}

#[test]
fn ipvsadm_10mb_stderr_and_exit_1() {
    command_fault(
        16,
        Target::Ipvs,
        Fault::Stderr10M,
        "failed",
        &["exit status: 1: stand-in failure"],
    );
}

#[test]
fn ipvsadm_garbage_output_names_the_line() {
    command_fault(17, Target::Ipvs, Fault::Garbage, "failed", &["ipvsadm -Ln: line 1"]);
}

// ---------------------------------------------------------------------------
// The conntrack probe's /proc files.

/// Breaks the count file with `make` and waits until the conntrack probe fails with `want`.
fn proc_fault(case: u32, as_nobody: bool, make: impl FnOnce(&Path), want: &str) -> (Node, Agent) {
    let node = Node::new(case);
    if as_nobody {
        open_up(node.root.parent().unwrap());
    }
    let agent = Agent::start(&node, as_nobody);
    agent.wait_for(10, "healthy start", |d| HEALTHY.iter().all(|(p, s)| status(d, p) == *s));
    make(&node.root.join(COUNT));
    // `want` may list alternatives separated by `|`.
    let doc = agent.wait_for(15, want, |d| {
        status(d, "conntrack") == "failed" && want.split('|').any(|w| error(d, "conntrack").contains(w))
    });
    assert_others_healthy(&doc, "conntrack");
    assert_eq!(agent.get("/metrics").unwrap().0, 200);
    (node, agent)
}

fn restore_count(node: &Node, agent: &Agent) {
    let count = node.root.join(COUNT);
    if count.is_dir() {
        std::fs::remove_dir(&count).unwrap();
    } else {
        let _ = std::fs::remove_file(&count);
    }
    std::fs::write(&count, "41872\n").unwrap();
    std::fs::set_permissions(&count, std::fs::Permissions::from_mode(0o644)).unwrap();
    let doc = agent.wait_for(10, "recovered", |d| status(d, "conntrack") == "ok");
    assert_eq!(doc["facts"]["conntrack"]["entries"], 41872);
}

#[test]
fn proc_file_that_is_a_directory_fails_the_read() {
    let (node, agent) = proc_fault(
        21,
        false,
        |count| {
            std::fs::remove_file(count).unwrap();
            std::fs::create_dir(count).unwrap();
        },
        "Is a directory",
    );
    restore_count(&node, &agent);
}

#[test]
fn proc_file_without_permission_as_nobody() {
    // Starting the agent as `nobody` takes root (setuid); skipped without it, failed under CI=true.
    if !common::can_run(&[]) {
        return;
    }
    // As root a mode-000 file is readable; only an unprivileged agent sees EACCES.
    let (node, agent) = proc_fault(
        22,
        true,
        |count| std::fs::set_permissions(count, std::fs::Permissions::from_mode(0o000)).unwrap(),
        "permission denied",
    );
    restore_count(&node, &agent);
}

/// A FIFO without a writer in place of the count file: open(2) blocks in the kernel.
fn fifo_count(count: &Path) {
    std::fs::remove_file(count).unwrap();
    nix::unistd::mkfifo(count, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

/// Unblocks every open(2) stuck on the FIFO: open it for writing, then close it (EOF).
fn release_fifo(count: &Path) {
    for _ in 0..200 {
        match nix::fcntl::open(
            count,
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => drop(fd),
            Err(_) => break, // ENXIO: no reader left
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn proc_file_that_hangs_on_read_times_out() {
    // The first run times out; later ones refuse to start behind the stuck read.
    let (node, agent) = proc_fault(23, false, fifo_count, "timed out after|previous run still blocked");
    // The other probes go on while the reads stay blocked.
    std::thread::sleep(Duration::from_millis(3 * (INTERVAL_MS + TIMEOUT_MS)));
    let doc = agent.snapshot().unwrap();
    assert_eq!(status(&doc, "conntrack"), "failed", "{:#}", doc["probes"]["conntrack"]);
    assert_others_healthy(&doc, "conntrack");
    assert_eq!(agent.get("/metrics").unwrap().0, 200);
    release_fifo(&node.root.join(COUNT));
    restore_count(&node, &agent);
}

/// A read stuck in the kernel cannot be cancelled; the next intervals must
/// not pile up blocked threads behind it (they report "still blocked").
#[test]
fn proc_read_hang_does_not_leak_a_thread_per_interval() {
    let (node, agent) = proc_fault(25, false, fifo_count, "previous run still blocked");
    let before = agent.threads();
    std::thread::sleep(Duration::from_millis(6 * (INTERVAL_MS + TIMEOUT_MS)));
    let after = agent.threads();
    release_fifo(&node.root.join(COUNT));
    restore_count(&node, &agent);
    assert!(
        after <= before + 1,
        "agent threads grew from {before} to {after} in 6 intervals of a hung /proc read"
    );
}

#[test]
fn proc_file_rewritten_during_reads_is_never_torn() {
    let node = Node::new(24);
    let agent = Agent::start(&node, false);
    agent.wait_for(10, "healthy start", |d| HEALTHY.iter().all(|(p, s)| status(d, p) == *s));
    // Values of different lengths, written in place (truncate + write, not atomic):
    // a read can see the empty file between the two, never a mix of two values.
    const VALUES: &[u64] = &[7, 41872, 524287, 99_999_999_999];
    let count = node.root.join(COUNT);
    // The node's own value, which a reading before the first rewrite shows.
    let original: u64 = std::fs::read_to_string(&count).unwrap().trim().parse().unwrap();
    let max: u64 = std::fs::read_to_string(node.root.join("proc/sys/net/netfilter/nf_conntrack_max"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (count, stop) = (count.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(&count, format!("{}\n", VALUES[i % VALUES.len()])).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(3));
            }
            i
        })
    };
    let (mut ok, mut failed, mut seen) = (0, 0, std::collections::BTreeSet::new());
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut last_run = 0.0;
    while Instant::now() < deadline {
        let Some(doc) = agent.snapshot() else { continue };
        let run = doc["probes"]["conntrack"]["last_run_timestamp_seconds"]
            .as_f64()
            .unwrap();
        if run == last_run {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        last_run = run;
        match status(&doc, "conntrack").as_str() {
            "ok" => {
                let ct = &doc["facts"]["conntrack"];
                let entries = ct["entries"].as_u64().unwrap();
                assert!(
                    VALUES.contains(&entries) || entries == original,
                    "torn read: entries {entries} in {ct:#}"
                );
                assert_eq!(ct["max"], max, "{ct:#}");
                seen.insert(entries);
                ok += 1;
            }
            "failed" => {
                // Only the empty file between truncate and write may fail, as a parse error.
                let e = error(&doc, "conntrack");
                assert!(e.contains("nf_conntrack_count") && e.contains("value"), "{e}");
                failed += 1;
            }
            other => panic!("conntrack {other}: {:#}", doc["probes"]["conntrack"]),
        }
        assert_others_healthy(&doc, "conntrack");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    eprintln!("{writes} writes; {ok} ok snapshots (values {seen:?}), {failed} failed on an empty read");
    assert!(ok >= 5, "only {ok} ok snapshots in 4 s");
    assert!(seen.len() >= 2, "the rewrites were never observed: {seen:?}");
}
