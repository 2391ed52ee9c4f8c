//! As PID 1 (a container without tini), the agent reaps the orphans its
//! commands leave behind. The agent runs as PID 1 of a new PID namespace
//! (`unshare --pid --fork --mount-proc`), with a stand-in iptables-nft-save
//! that counts its runs in a file and leaves a grandchild behind on each of its
//! first `ORPHANS` runs: once they are all made, none may stay a zombie.
use crate::common;

use std::time::{Duration, Instant};

/// Pids of zombie processes whose parent is `parent` (host pid numbers).
fn zombies_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.first() == Some(&"Z") && f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The host pid of the single child of `pid` (unshare's forked child: the agent).
fn only_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// How many orphans the stand-in save leaves (one per run, the first runs only).
const ORPHANS: usize = 8;

#[test]
fn as_pid_1_the_agent_reaps_orphans_of_its_commands() {
    if !common::can_run(&["unshare"]) {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let save = bin.path().join("iptables-nft-save");
    let runs_file = bin.path().join("runs");
    // A background sleep outlives the save; the runner kills the group after the
    // save exits, and the killed sleep, re-parented to PID 1, needs reaping. Each
    // run appends a line to `runs`; the first ORPHANS runs leave an orphan, later
    // ones none, so the test knows how many there were to reap.
    std::fs::write(
        &save,
        format!(
            "#!/bin/sh\n\
             echo run >> '{runs}'\n\
             n=0; while read -r _; do n=$((n + 1)); done < '{runs}'\n\
             if [ \"$n\" -le {ORPHANS} ]; then /bin/sleep 30 </dev/null >/dev/null 2>&1 & fi\n\
             printf '# empty\\n'\nexit 0\n",
            runs = runs_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&save, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Files only: the iptables probe runs the stand-in save each time (a recording would count
    // over netlink and run the save only as its cross-check).
    let node = common::files_only_node("healthy-iptables");
    // The harness's agent under unshare: its child is unshare, and the agent unshare's child
    // (--kill-child: the agent dies with unshare, which the harness stops by PID).
    let unshare = common::which("unshare").unwrap();
    let serve = common::Serve::new()
        .wrap([
            unshare.as_os_str(),
            "--pid".as_ref(),
            "--fork".as_ref(),
            "--mount-proc".as_ref(),
            "--kill-child".as_ref(),
        ])
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--iptables.interval", "200ms"])
        .env_clear()
        .env("PATH", bin.path())
        .ready("/healthz")
        .start();
    let deadline = Instant::now() + Duration::from_secs(20);
    let agent = loop {
        if let Some(pid) = only_child(serve.pid()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "agent did not start under unshare");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ns_pid = std::fs::read_to_string(format!("/proc/{agent}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().last().unwrap().to_string())
        .unwrap();
    assert_eq!(ns_pid, "1", "the agent is not PID 1 of its namespace");

    // Let the iptables probe run (every 200 ms) until every orphan was made and
    // one more run has passed.
    let runs = || std::fs::read_to_string(&runs_file).map_or(0, |t| t.lines().count());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut probe_ok = false;
    while runs() <= ORPHANS || !probe_ok {
        assert!(
            Instant::now() < deadline,
            "{} runs of the stand-in save in 30 s (want {}), probe ok: {probe_ok}",
            runs(),
            ORPHANS + 1
        );
        if let Ok((_, json)) = serve.get("/snapshot") {
            let doc: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            probe_ok |= doc["probes"]["iptables"]["status"] == "ok";
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The reaper polls every second: within a few polls every orphan is reaped.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = zombies_of(agent);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = zombies_of(agent);
    }
    eprintln!(
        "{} runs of the stand-in save, {ORPHANS} orphans; zombies left: {left:?}",
        runs()
    );
    assert!(
        left.is_empty(),
        "{} of the {ORPHANS} orphans left as zombies under the agent (PID 1) 5 s after the last: {left:?}",
        left.len()
    );
}
