//! The two concurrency caps of `proxywatch serve`, by observation on the real binary:
//!
//! - `--exec.max-children`: two probes run commands at the same time (the iptables
//!   probe's `iptables-nft-save`, the conntrack probe's `conntrack -S` fallback on a
//!   fixture node without the stat file; rule-set dumps such as `ipvsadm` wait for each
//!   other whatever the cap). Each is a stand-in that marks itself running in a
//!   directory, records how many are running, sleeps, and unmarks itself. With the cap
//!   at 1 the record never exceeds 1; at 2 it reaches 2, so the two do overlap when allowed.
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

const NODE: &str = "old-kernel-no-stat-file";
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

/// Runs the agent with `--exec.max-children max` until every stand-in ran 4 times;
/// the most stand-ins seen running at once.
fn most_at_once(max: usize) -> usize {
    let dir = tempfile::Builder::new().prefix("pwlimits-").tempdir().unwrap();
    let bin = dir.path();
    std::fs::create_dir(bin.join("running")).unwrap();
    let node = common::fixtures().join("nodes").join(NODE);
    counting_stand_in(bin, "iptables-nft-save", "printf '# empty\\n'");
    let capture = node.join("exec/conntrack-S.txt");
    counting_stand_in(
        bin,
        "conntrack",
        &format!(
            "while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done < '{}'",
            capture.display()
        ),
    );
    let agent = Serve::new()
        .env_clear()
        .env("PATH", bin)
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--exec.max-children", &max.to_string()])
        .args(["--conntrack.interval", "100ms", "--iptables.interval", "100ms"])
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rec = record(bin);
        let runs = |c: &str| rec.iter().filter(|(n, _)| n == c).count();
        if ["iptables-nft-save", "conntrack"].iter().all(|c| runs(c) >= 4) {
            break;
        }
        assert!(Instant::now() < deadline, "stand-in runs after 60 s: {rec:?}");
        agent.assert_running();
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every probe that ran a command is ok: the cap delays commands, it fails none.
    let doc: serde_json::Value = serde_json::from_str(&agent.get_ok("/snapshot")).unwrap();
    for (probe, want) in [("iptables", "ok"), ("conntrack", "ok")] {
        assert_eq!(
            doc["probes"][probe]["status"], want,
            "{probe}: {}",
            doc["probes"][probe]
        );
    }
    agent.stop_cleanly();
    let rec = record(bin);
    eprintln!("--exec.max-children {max}: {rec:?}");
    rec.iter().map(|(_, n)| *n).max().unwrap()
}

#[test]
fn exec_max_children_bounds_the_commands_running_at_once() {
    assert_eq!(most_at_once(1), 1, "--exec.max-children 1");
    // The control: with room for two, the two probes' commands do overlap.
    assert_eq!(most_at_once(2), 2, "--exec.max-children 2");
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
