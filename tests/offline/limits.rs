//! The two concurrency caps of `proxywatch serve`, by observation on the real binary:
//!
//! - rule-set dumps one at a time, whatever `--exec.max-children`: every command the
//!   probes run is a dump (the iptables probe's `iptables-nft-save`, the IPVS probe's
//!   `ipvsadm`; each can cost the node hundreds of MiB), so with the cap at 4 two probes'
//!   stand-ins, each marking itself running in a directory and recording how many are
//!   running, never overlap. The cap itself bounds commands that are not dumps; no probe
//!   runs one now, so it is held by a unit test of the runner
//!   (`exec::tests::children_beyond_the_cap_wait`).
//! - `--web.max-connections`: with the cap at 4 and a long header timeout, 4 idle
//!   connections are held open and the 5th is closed at once; once the 4 are answered
//!   and closed, new connections are served again.
use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Serve;

/// An IPVS node (ip_vs loaded, so `ipvsadm` is run), copied without its netlink recording so
/// that the iptables probe runs `iptables-nft-save` too.
const NODE: &str = "ipvs-modules-loaded";
/// How long each stand-in command runs: long next to a probe's own work, short for the test.
const COMMAND_MS: u64 = 300;

fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A stand-in `name` that records the number of stand-ins running (itself included)
/// as a line `name N` in `dir/record`, runs COMMAND_MS, then does `then`.
fn counting_stand_in(dir: &Path, name: &str, then: &str) {
    let running = dir.join("running");
    let script = format!(
        "#!/bin/sh\n\
         # proxywatch limits stand-in for {name}: counts the stand-ins running at once.\n\
         : > '{running}/'$$\n\
         n=0; for f in '{running}'/*; do n=$((n + 1)); done\n\
         echo \"{name} $n\" >> '{record}'\n\
         /bin/sleep {secs}\n\
         /bin/rm -f '{running}/'$$\n\
         {then}\n",
        running = running.display(),
        record = dir.join("record").display(),
        secs = COMMAND_MS as f64 / 1000.0,
    );
    write_executable(&dir.join(name), &script);
}

/// The stand-ins' record: (command, running at its start) per run.
fn record(dir: &Path) -> Vec<(String, usize)> {
    std::fs::read_to_string(dir.join("record"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(c, n)| (c.to_string(), n.parse().unwrap()))
        .collect()
}

/// Runs the agent with `--exec.max-children 4` until every stand-in ran 4 times;
/// the most stand-ins seen running at once.
fn most_at_once() -> usize {
    let dir = tempfile::Builder::new().prefix("pwlimits-").tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(bin.join("running")).unwrap();
    let node = dir.path().join("node");
    common::copy_files_only(NODE, &node);
    counting_stand_in(&bin, "iptables-nft-save", "printf '# empty\\n'");
    let ipvs = common::fixtures().join("ipvs");
    counting_stand_in(
        &bin,
        "ipvsadm",
        &format!(
            "case \"$*\" in *--stats*) f='{}';; *) f='{}';; esac; \
             while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done < \"$f\"",
            ipvs.join("stats-ln-kube-router-pr160-partial.txt").display(),
            ipvs.join("ln-kube-proxy-ipvs-kind-tkng.txt").display(),
        ),
    );
    let agent = Serve::new()
        .env_clear()
        .env("PATH", &bin)
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--exec.max-children", "4"])
        .args(["--ipvs.interval", "100ms", "--iptables.interval", "100ms"])
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rec = record(&bin);
        let runs = |c: &str| rec.iter().filter(|(n, _)| n == c).count();
        if ["iptables-nft-save", "ipvsadm"].iter().all(|c| runs(c) >= 4) {
            break;
        }
        assert!(Instant::now() < deadline, "stand-in runs after 60 s: {rec:?}");
        agent.assert_running();
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every probe that ran a command is ok: dumps wait for each other, none fails.
    let doc: serde_json::Value = serde_json::from_str(&agent.get_ok("/snapshot")).unwrap();
    for (probe, want) in [("iptables", "ok"), ("ipvs", "ok")] {
        assert_eq!(
            doc["probes"][probe]["status"], want,
            "{probe}: {}",
            doc["probes"][probe]
        );
    }
    agent.stop_cleanly();
    let rec = record(&bin);
    eprintln!("--exec.max-children 4: {rec:?}");
    rec.iter().map(|(_, n)| *n).max().unwrap()
}

#[test]
fn rule_set_dumps_of_two_probes_never_overlap_whatever_the_children_cap() {
    assert_eq!(most_at_once(), 1, "two dumps ran at once with --exec.max-children 4");
}

/// True when the server closed `s` (EOF or reset) within `wait`; false when it is still open.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!(
            "unexpected answer on an idle connection: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) => panic!("read: {e}"),
    }
}

fn answer(s: &mut TcpStream) -> String {
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn web_max_connections_closes_connections_beyond_the_cap() {
    const CAP: usize = 4;
    let node = common::fixtures().join("nodes/healthy-iptables");
    let empty = tempfile::tempdir().unwrap();
    let agent = Serve::new()
        .env_clear()
        .env("PATH", empty.path())
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--web.max-connections", &CAP.to_string()])
        // No slot kept for the kubelet's /healthz beyond the cap (tests/http/http_limits.rs covers
        // those): here every connection past the cap is refused.
        .args(["--web.reserved-health-connections", "0"])
        // Idle connections stay open for 60 s unless the cap closes them.
        .args(["--web.header-read-timeout", "60s"])
        .start();
    // CAP idle connections: each still open after 300 ms (the agent has accepted them by then).
    // The start-up's readiness request may still hold its slot for a moment after its answer
    // (the slot is given back when the connection's task ends, just after the close the
    // client sees): on a busy machine the last one can find the cap reached, so try again
    // for a few seconds before calling the cap wrong.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut held = loop {
        let mut held: Vec<TcpStream> = (0..CAP).map(|_| TcpStream::connect(agent.addr()).unwrap()).collect();
        let closed: Vec<usize> = (0..CAP)
            .filter(|&i| closed_within(&mut held[i], Duration::from_millis(300)))
            .map(|i| i + 1)
            .collect();
        if closed.is_empty() {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "connections {closed:?} of {CAP} closed, again and again for 5 s"
        );
        drop(held);
        std::thread::sleep(Duration::from_millis(200));
    };
    // One more: closed at once (well before the header timeout).
    let started = Instant::now();
    let mut extra = TcpStream::connect(agent.addr()).unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_secs(5)),
        "connection {} stayed open with --web.max-connections {CAP}",
        CAP + 1
    );
    eprintln!("connection {} closed after {:?}", CAP + 1, started.elapsed());
    // The held ones still work; once they are answered and closed, there is room again.
    for s in &mut held {
        let a = answer(s);
        assert!(a.starts_with("HTTP/1.0 200"), "{a}");
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(agent.addr()).unwrap();
        let a = answer(&mut s);
        if a.starts_with("HTTP/1.0 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no room after the held connections closed: {a:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.stop_cleanly();
}
