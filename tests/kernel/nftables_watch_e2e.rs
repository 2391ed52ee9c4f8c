//! End to end (issue #36): who changed the rules, from the kernel's nf_tables notifications.
//!
//! In a network namespace the test creates: kube-proxy-shaped iptables-nft rules (its `nat`
//! chains, the service portals jumping to them from PREROUTING and OUTPUT) and kube-proxy's
//! `ip kube-proxy` nftables table, rewritten every second by a stand-in kube-proxy (a shell
//! named `pwt-kpw`, `--kube-proxy.process-name`) through child `iptables-nft-restore --noflush`
//! and `nft -f` processes, as kube-proxy does. The agent runs in the namespace (nf_tables
//! notifications are per network namespace: it sees only the test's commits).
//!
//! - kube-proxy's own rewrites are journaled as kube-proxy's and never raise
//!   `rules_changed_by_other_process`;
//! - another process (an `iptables-nft-restore` that flushes nat, child of a `bash`) raises it,
//!   critical, naming that process, its PID and its parent, as `nft monitor` printed them for
//!   the same generation; the commits wake the iptables and nftables probes (re-read long
//!   before their intervals); the stand-in's next rewrites (its chains, not the flushed jumps)
//!   do not clear it.
//!
//! Needs root, `ip`, `iptables-nft-restore`, `nft`, `bash`. About 10 s.
//! Logs in `target/e2e-logs/nftables_watch_e2e/`.
use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{KubeNat, Netns, Process, Serve};
use serde_json::Value;

const KUBE_PROXY_NAME: &str = "pwt-kpw";
/// The removed-portals test's stand-in: its own name, so that the two tests, run at once, each
/// find only their own kube-proxy.
const PORTALS_KUBE_PROXY_NAME: &str = "pwt-kpp";

fn log_dir() -> PathBuf {
    log_dir_named("nftables_watch_e2e")
}

/// A test's own log folder (emptied first): tests running at once never share one.
fn log_dir_named(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let dir = target.join("e2e-logs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// kube-proxy's nat chains as `iptables-restore --noflush` input: its own chains only (each
/// declared, so flushed and rewritten), not the built-in chains.
fn kube_chains() -> String {
    let mut nat = KubeNat::new();
    nat.service(
        "WATCHSVC1",
        "10.96.0.10",
        "tcp",
        80,
        8080,
        &[
            ("KUBE-SEP-WATCHEP1".into(), "10.244.0.5".into()),
            ("KUBE-SEP-WATCHEP2".into(), "10.244.0.6".into()),
        ],
    );
    nat.render()
        .lines()
        .filter(|l| {
            !["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]
                .iter()
                .any(|c| l.starts_with(&format!(":{c} ")) || l.starts_with(&format!("-A {c} ")))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

const KUBE_TABLE: &str = "add table ip kube-proxy
flush table ip kube-proxy
table ip kube-proxy {
    chain nat-prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        jump services
    }
    chain services {
        ip daddr 10.96.0.10 tcp dport 80 counter
    }
}
";

fn findings(agent: &common::Agent) -> Result<Vec<Value>, String> {
    let (code, body) = agent.get("/findings")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
    v.as_array().cloned().ok_or(format!("not a list: {body}"))
}

fn watch(agent: &common::Agent) -> Result<Value, String> {
    let s = agent.snapshot()?;
    let w = s["derived"]["nftables_watch"].clone();
    if w.is_null() {
        return Err(format!("no derived.nftables_watch: {s}"));
    }
    Ok(w)
}

/// `nft monitor`'s `# new generation N by process PID (NAME)` lines, by generation.
fn monitor_generations(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("# new generation ")?;
            let (gen, rest) = rest.split_once(" by process ")?;
            let (pid, name) = rest.split_once(" (")?;
            Some((
                gen.parse().ok()?,
                pid.parse().ok()?,
                name.trim_end_matches(')').to_string(),
            ))
        })
        .collect()
}

#[test]
fn a_flush_by_another_process_is_named_kube_proxys_own_rewrites_are_not() {
    if !common::can_run(&["ip", "iptables-nft-restore", "nft", "bash", "stdbuf"]) {
        return;
    }
    let dir = log_dir();
    let ns = Netns::new("nftw");
    std::fs::write(dir.join("kube.rules"), kube_chains()).unwrap();
    std::fs::write(dir.join("kube.nft"), KUBE_TABLE).unwrap();
    std::fs::write(
        dir.join("portals.rules"),
        "*nat\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n",
    )
    .unwrap();
    // The stand-in kube-proxy: bash under kube-proxy's name (comm and argv[0]), writing through
    // children as kube-proxy does (iptables-restore and nft -f: an exited child is told by its
    // name). Its portals are added once, its chains rewritten every second.
    let standin = dir.join(KUBE_PROXY_NAME);
    let _ = std::fs::remove_file(&standin);
    std::os::unix::fs::symlink(common::which("bash").unwrap(), &standin).unwrap();
    let script = format!(
        "cd {dir}
iptables-nft-restore --noflush < kube.rules
iptables-nft-restore --noflush < portals.rules
while :; do
  nft -f kube.nft
  iptables-nft-restore --noflush < kube.rules
  sleep 1
done",
        dir = dir.display()
    );
    let kube_proxy = Process::spawn(
        "stand-in kube-proxy",
        &mut ns.command(standin.to_str().unwrap(), &["-c", &script]),
        &dir.join("kube-proxy.log"),
    );
    let monitor = Process::spawn(
        "nft monitor",
        &mut ns.command("stdbuf", &["-oL", "nft", "monitor"]),
        &dir.join("nft-monitor.log"),
    );
    let agent = Serve::new()
        .in_netns(&ns)
        .args(["--node-name", "pwt-nftw", "--kube-proxy.interval", "1s"])
        .args(["--kube-proxy.process-name", KUBE_PROXY_NAME])
        .log(dir.join("agent.log"))
        .start();

    // kube-proxy found, the watcher listening, kube-proxy's rewrites seen as its own.
    let w = common::poll(
        "three commits of kube-proxy's journaled",
        Duration::from_secs(20),
        || {
            let w = watch(&agent)?;
            let n = w["commits_kube_proxy_total"].as_u64().unwrap_or(0);
            let s = agent.snapshot()?;
            let kp = s["facts"]["kube_proxy"]["process"]["pid"].as_u64();
            (w["state"] == "watching" && n >= 3 && kp == Some(u64::from(kube_proxy.pid())))
                .then_some(w.clone())
                .ok_or(format!("kube-proxy pid {kp:?}, watch {w}"))
        },
    );
    assert_eq!(w["commits_other_total"], 0, "only kube-proxy wrote: {w}");
    let journal = w["journal"].as_array().unwrap();
    assert!(
        journal.iter().all(|e| e["writer_class"] == "kube-proxy"),
        "{journal:#?}"
    );
    let ids: Vec<String> = findings(&agent)
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(!ids.contains(&"rules_changed_by_other_process".to_string()), "{ids:?}");
    common::poll("nft monitor prints generations", Duration::from_secs(10), || {
        (!monitor_generations(&monitor.log()).is_empty())
            .then_some(())
            .ok_or(monitor.log())
    });

    // Another process flushes nat: an iptables-nft-restore that stays alive on its stdin after
    // its commit, child of a bash.
    let mut other = ns
        .command("bash", &["-c", "iptables-nft-restore --noflush; echo done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bash_pid = other.id();
    let mut stdin = other.stdin.take().unwrap();
    let flushed = Instant::now();
    stdin.write_all(b"*nat\n-F\nCOMMIT\n").unwrap();
    stdin.flush().unwrap();
    let finding = common::poll("rules_changed_by_other_process", Duration::from_secs(10), || {
        findings(&agent)?
            .into_iter()
            .find(|f| f["id"] == "rules_changed_by_other_process")
            .ok_or("not yet".to_string())
    });
    let latency = flushed.elapsed();
    // The writer as the agent named it, against the same process seen from here.
    let writer_pid = finding["evidence"]["writer_pid"].as_u64().expect("writer_pid");
    let stat = std::fs::read_to_string(format!("/proc/{writer_pid}/stat")).unwrap_or_default();
    drop(stdin);
    let _ = other.wait();
    eprintln!(
        "flush written -> finding in /findings: {:.0} ms",
        latency.as_secs_f64() * 1000.0
    );
    assert_eq!(finding["severity"], "critical", "{finding:#}");
    assert!(stat.contains("(iptables-nft-re)"), "{writer_pid}: {stat}");
    assert_eq!(finding["evidence"]["writer_name"], "iptables-nft-re", "{finding:#}");
    assert_eq!(finding["evidence"]["parent_pid"], bash_pid, "{finding:#}");
    assert_eq!(finding["evidence"]["parent_name"], "bash", "{finding:#}");
    assert!(
        finding["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("(PID {writer_pid}), parent bash (PID {bash_pid})")),
        "{finding:#}"
    );
    // What nft monitor printed for the same commit.
    let generation = finding["evidence"]["generation"].as_u64().unwrap();
    let printed = common::poll("nft monitor's line for the flush", Duration::from_secs(5), || {
        monitor_generations(&monitor.log())
            .into_iter()
            .find(|(g, _, _)| *g == generation)
            .ok_or(monitor.log())
    });
    assert_eq!(printed, (generation, writer_pid, "iptables-nft-re".to_string()));
    assert!(
        finding["evidence"]["removed"].to_string().contains("ip nat"),
        "{finding:#}"
    );

    // The commits woke the rule probes: re-read after the flush, long before their 60 s and
    // 120 s intervals.
    let flushed_unix = finding["evidence"]["timestamp_seconds"].as_f64().unwrap();
    common::poll(
        "the iptables and nftables probes re-read early",
        Duration::from_secs(10),
        || {
            let s = agent.snapshot()?;
            let ran = |p: &str| s["probes"][p]["last_success_timestamp_seconds"].as_f64().unwrap_or(0.0);
            (ran("iptables") > flushed_unix && ran("nftables") > flushed_unix)
                .then_some(())
                .ok_or(format!("{}", s["probes"]))
        },
    );

    // kube-proxy's next rewrites put its chains back, not the flushed portals: it stands.
    let before = watch(&agent).unwrap()["commits_kube_proxy_total"].as_u64().unwrap();
    common::poll("two more kube-proxy commits", Duration::from_secs(10), || {
        let n = watch(&agent)?["commits_kube_proxy_total"].as_u64().unwrap_or(0);
        (n >= before + 2).then_some(()).ok_or(format!("{n}"))
    });
    assert!(
        findings(&agent)
            .unwrap()
            .iter()
            .any(|f| f["id"] == "rules_changed_by_other_process"),
        "a partial rewrite does not restore the portals"
    );
    let w = watch(&agent).unwrap();
    assert_eq!(w["commits_other_total"], 1, "{w}");
    let metrics = agent.get_ok("/metrics");
    assert_eq!(
        common::series(&metrics, "proxywatch_nftables_commits_total{writer=\"other\"}"),
        Some(1.0)
    );
    assert_eq!(common::series(&metrics, "proxywatch_nftables_watch_up"), Some(1.0));
    agent.stop_cleanly();
    monitor.stop();
    kube_proxy.stop();
}

/// Another process takes only the service portals (the jumps from nat PREROUTING and OUTPUT
/// to KUBE-SERVICES, as a firewall reload does): kube-proxy's rewrites of its own chains, each
/// far more rules than went, do not end the change, since they never write the jumps; the
/// change ends when kube-proxy adds each jump back (`iptables -I`, through a child, as its
/// full syncs do). Needs root, `ip`, `iptables-nft-restore`, `iptables-nft`, `bash`; about 10 s.
#[test]
fn removed_portals_stand_through_kube_proxys_rewrites_until_it_adds_the_jumps_back() {
    if !common::can_run(&["ip", "iptables-nft-restore", "iptables-nft", "bash"]) {
        return;
    }
    let dir = log_dir_named("nftables_watch_portals");
    let ns = Netns::new("nftp");
    std::fs::write(dir.join("kube.rules"), kube_chains()).unwrap();
    let standin = dir.join(PORTALS_KUBE_PROXY_NAME);
    let _ = std::fs::remove_file(&standin);
    std::os::unix::fs::symlink(common::which("bash").unwrap(), &standin).unwrap();
    let jump = |chain: &str| {
        format!("iptables-nft -t nat -I {chain} -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES")
    };
    let script = format!(
        "cd {dir}
iptables-nft-restore --noflush < kube.rules
{pre}
{out}
while :; do
  iptables-nft-restore --noflush < kube.rules
  if [ -e jumps-back ]; then {pre}; {out}; rm jumps-back; fi
  sleep 1
done",
        dir = dir.display(),
        pre = jump("PREROUTING"),
        out = jump("OUTPUT"),
    );
    let kube_proxy = Process::spawn(
        "stand-in kube-proxy",
        &mut ns.command(standin.to_str().unwrap(), &["-c", &script]),
        &dir.join("kube-proxy.log"),
    );
    let agent = Serve::new()
        .in_netns(&ns)
        .args(["--node-name", "pwt-nftp", "--kube-proxy.interval", "1s"])
        .args(["--kube-proxy.process-name", PORTALS_KUBE_PROXY_NAME])
        .log(dir.join("agent.log"))
        .start();
    let kube_commits = || watch(&agent).map(|w| w["commits_kube_proxy_total"].as_u64().unwrap_or(0));
    common::poll(
        "three commits of kube-proxy's journaled",
        Duration::from_secs(20),
        || {
            let n = kube_commits()?;
            let kp = agent.snapshot()?["facts"]["kube_proxy"]["process"]["pid"].as_u64();
            (n >= 3 && kp == Some(u64::from(kube_proxy.pid())))
                .then_some(())
                .ok_or(format!("{n} commits, kube-proxy {kp:?}"))
        },
    );
    let other = |agent: &common::Agent| -> Result<Option<Value>, String> {
        Ok(findings(agent)?
            .into_iter()
            .find(|f| f["id"] == "rules_changed_by_other_process"))
    };
    assert_eq!(other(&agent).unwrap(), None, "kube-proxy's own commits");

    ns.exec_input(
        "iptables-nft-restore",
        &["--noflush"],
        "*nat\n-F PREROUTING\n-F OUTPUT\nCOMMIT\n",
    );
    let f = common::poll("rules_changed_by_other_process", Duration::from_secs(10), || {
        other(&agent)?.ok_or("not yet".into())
    });
    assert_eq!(f["evidence"]["writer_name"], "iptables-nft-re", "{f:#}");
    let t = &f["evidence"]["tables"][0];
    assert_eq!(
        (&t["table"], &t["rules_removed"], &t["base_kube_rules_removed"]),
        (&Value::from("nat"), &Value::from(2), &Value::from(2)),
        "{f:#}"
    );
    let before = kube_commits().unwrap();
    common::poll(
        "two more rewrites of kube-proxy's chains",
        Duration::from_secs(10),
        || {
            let n = kube_commits()?;
            (n >= before + 2).then_some(()).ok_or(format!("{n}"))
        },
    );
    assert!(
        other(&agent).unwrap().is_some(),
        "kube-proxy's rewrites of its chains ({} rules each) do not put the portals back",
        kube_chains().lines().filter(|l| l.starts_with("-A ")).count()
    );

    std::fs::write(dir.join("jumps-back"), "").unwrap();
    common::poll(
        "the finding cleared by kube-proxy's jumps",
        Duration::from_secs(10),
        || match other(&agent)? {
            None => Ok(()),
            Some(f) => Err(format!("{f}")),
        },
    );
    let w = watch(&agent).unwrap();
    assert_eq!(w["commits_other_total"], 1, "{w}");
    // Each jump is kube-proxy's: by its parent's PID when its /proc was still there, else (the
    // agent runs in the test's namespace, where the kernel's process events do not exist) as a
    // gone `iptables` that only added a jump to a KUBE-* chain.
    // Counted after the flush: the stand-in's first two jumps may be journaled too, when the
    // agent was listening before the stand-in wrote them.
    let journal = w["journal"].as_array().unwrap();
    let flush = journal
        .iter()
        .position(|e| e["writer_class"] == "other")
        .expect("the flush in the journal");
    let jumps = journal[flush..]
        .iter()
        .filter(|e| e["writer_class"] == "kube-proxy" && e["commit"]["writer"]["name"] == "iptables-nft")
        .count();
    assert_eq!(jumps, 2, "the two jumps, each kube-proxy's: {w}");
    agent.stop_cleanly();
    kube_proxy.stop();
}

/// The agent's counts of the `nft` ipv4 tables as its latest iptables reading made them, and
/// that reading's time.
fn agent_counts(agent: &common::Agent) -> Result<(f64, Value), String> {
    let s = agent.snapshot()?;
    let at = s["probes"]["iptables"]["reading_timestamp_seconds"]
        .as_f64()
        .ok_or(format!("no iptables reading: {}", s["probes"]["iptables"]))?;
    let run = s["facts"]["iptables"]["saves"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["backend"] == "nft" && r["family"] == "ipv4"))
        .ok_or(format!("no nft ipv4 count: {}", s["facts"]["iptables"]))?;
    Ok((at, run["counts"].clone()))
}

/// `iptables-nft-save`'s rules per table, and the rules in or jumping to a KUBE-* chain.
fn save_counts(ns: &Netns) -> (std::collections::BTreeMap<String, u64>, u64) {
    let out = ns.exec_ok("iptables-nft-save", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut tables, mut kube, mut table) = (std::collections::BTreeMap::new(), 0, String::new());
    for l in text.lines() {
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
            tables.insert(table.clone(), 0);
        } else if let Some(rule) = l.strip_prefix("-A ") {
            *tables.get_mut(&table).unwrap() += 1;
            let chain = rule.split(' ').next().unwrap_or_default();
            let target = rule
                .split_once(" -j ")
                .or_else(|| rule.split_once(" -g "))
                .map(|(_, t)| t.split(' ').next().unwrap_or_default());
            if chain.starts_with("KUBE-") || target.is_some_and(|t| t.starts_with("KUBE-")) {
                kube += 1;
            }
        }
    }
    (tables, kube)
}

/// A full resync (kube-proxy's 1000×3 rule set, tests/tools/gen_kube_rules.py, in one
/// `iptables-nft-restore`) while the agent is stopped (SIGSTOP, as a node's agent starved of
/// CPU): ~20 000 notifications do not fit the socket's buffer (its size is capped at
/// `net.core.rmem_max`), so the kernel drops them (ENOBUFS). The loss is a fact: counted, the
/// journal says "notifications lost, rules re-read", the rules are re-read (a reading after
/// the loss, long before the 600 s interval), and its counts equal `iptables-nft-save`'s.
/// Needs root, `ip`, `iptables-nft-restore`, `iptables-nft-save`, `python3`; about 10 s.
/// `PWT_RESYNC_SIZE=10000x5` runs the full-size resync of the issue (minutes on a busy box).
#[test]
fn an_overflow_while_the_agent_is_stopped_during_a_resync_is_counted_and_the_rules_re_read() {
    if !common::can_run(&["ip", "iptables-nft-restore", "iptables-nft-save", "python3"]) {
        return;
    }
    let size = std::env::var("PWT_RESYNC_SIZE").unwrap_or("1000x3".into());
    let (services, endpoints) = size.split_once('x').expect("PWT_RESYNC_SIZE: SERVICESxENDPOINTS");
    // Its own directory: log_dir() of the test running beside it empties the shared one.
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .ancestors()
        .nth(3)
        .unwrap()
        .join("e2e-logs/nftables_watch_e2e_resync");
    std::fs::create_dir_all(&dir).unwrap();
    let (rules, _) = common::generate_kube_rules(&dir, services.parse().unwrap(), endpoints.parse().unwrap(), &[]);
    let ns = Netns::new("nftenob");
    let agent = Serve::new()
        .in_netns(&ns)
        .args(["--node-name", "pwt-enob", "--iptables.interval", "600s"])
        .log(dir.join("agent.log"))
        .start();
    common::poll(
        "the watcher listening and the rules read",
        Duration::from_secs(30),
        || {
            let w = watch(&agent)?;
            agent_counts(&agent)?;
            (w["state"] == "watching").then_some(()).ok_or(format!("{w}"))
        },
    );
    let pid = nix::unistd::Pid::from_raw(agent.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let loaded = ns
        .command("iptables-nft-restore", &[])
        .stdin(std::fs::File::open(&rules).unwrap())
        .output()
        .unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(loaded.status.success(), "{}", String::from_utf8_lossy(&loaded.stderr));
    let (tables, kube_rules) = save_counts(&ns);
    let (lost_at, counts) = common::poll(
        "the loss counted and the rules re-read",
        Duration::from_secs(120),
        || {
            let w = watch(&agent)?;
            let lost = w["journal"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|e| e["lost"] == "notifications lost, rules re-read")
                .and_then(|e| e["lost_timestamp_seconds"].as_f64());
            let Some(lost_at) = lost.filter(|_| w["notifications_lost_total"].as_u64() >= Some(1)) else {
                return Err(format!("no loss journaled: {w}"));
            };
            let (read_at, counts) = agent_counts(&agent)?;
            (read_at > lost_at)
                .then_some((lost_at, counts))
                .ok_or(format!("read at {read_at}, lost at {lost_at}"))
        },
    );
    eprintln!("{size}: notifications lost at {lost_at}, rules re-read; save: {tables:?}, {kube_rules} KUBE-* rules");
    for (table, rules) in &tables {
        assert_eq!(counts["tables"][table]["rules"], *rules, "{table}: {counts:#}");
    }
    assert_eq!(counts["kube_rules"], kube_rules, "{counts:#}");
    let metrics = agent.get_ok("/metrics");
    assert!(
        common::series(&metrics, "proxywatch_nftables_notifications_lost_total") >= Some(1.0),
        "{metrics}"
    );
    agent.stop_cleanly();
}

/// kube-proxy's children exit right after their commit: by the time the NEWGEN is read, the
/// writer's `/proc` is gone and its parent with it. Through the kernel's process events (the
/// proc connector, listened to in the initial namespaces, where this test runs), the fork was
/// seen before the commit, so the commit is attributed to the parent all the same.
///
/// A stand-in parent (a `bash` in the initial network namespace, named to the watcher as
/// kube-proxy) runs `nft -f` children that commit inside a network namespace the test created
/// (where the watcher's socket was opened) and are reaped before the watcher reads: first
/// without process events (parent unknown, as before), then with them (the parent named, the
/// commit classed kube-proxy's by its parent's PID); and a second `bash`, not kube-proxy, whose
/// `nft -f` child is as fast: its fork names that parent, and the commit is another process's
/// though its writer is named as kube-proxy's tools are. Needs root, `ip`, `nft`, `bash`, and the
/// initial user, PID and network namespaces (the connector exists there only). About 1 s.
#[test]
fn an_exited_child_is_attributed_to_its_parent_through_process_events_in_the_initial_namespaces() {
    use proxywatch::watch::nftables_watch::{open, Watcher};
    use proxywatch::watch::proc_events::KubeProxyChildren;
    use std::io::BufRead;
    if !common::can_run(&["ip", "nft", "bash"]) {
        return;
    }
    let ns = Netns::new("nftpe");
    // The watcher's socket, opened in the test's namespace (its notifications are that
    // namespace's), from a thread that entered it.
    let path = format!("/run/netns/{}", ns.name);
    let sock = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        open()
    })
    .join()
    .unwrap()
    .expect("the nf_tables watcher's socket in the test's namespace");
    let children = KubeProxyChildren::new();
    let mut watcher = Watcher::new(proxywatch::host::Host::new("/"), sock, children.clone(), "pwt-kp-none");
    watcher.socket().set_non_blocking(true).unwrap();
    let dir = std::env::temp_dir().join(format!("pwt-nftpe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("commit.nft");
    std::fs::write(
        &rules,
        "add table ip pwt_pe\nadd chain ip pwt_pe c\nadd rule ip pwt_pe c counter\n",
    )
    .unwrap();
    // The stand-in parent: one child commit per line read, reaped before it answers.
    let script = format!(
        "while read line; do ip netns exec {} nft -f {}; echo done; done",
        ns.name,
        rules.display()
    );
    let spawn = || {
        let mut p = std::process::Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let to = p.stdin.take().unwrap();
        let from = std::io::BufReader::new(p.stdout.take().unwrap());
        (p, to, from)
    };
    let (mut parent, mut to_parent, mut from_parent) = spawn();
    // Another process doing the same: a script's `nft -f`, not kube-proxy's.
    let (mut other, mut to_other, mut from_other) = spawn();
    let parent_pid = parent.id() as i32;
    let other_pid = other.id() as i32;
    let commit_by = |to: &mut std::process::ChildStdin,
                     from: &mut std::io::BufReader<std::process::ChildStdout>,
                     watcher: &mut Watcher| {
        to.write_all(b"go\n").unwrap();
        let mut answer = String::new();
        from.read_line(&mut answer).unwrap();
        assert_eq!(answer, "done\n", "the child committed and was reaped");
        common::poll("the child's commit", Duration::from_secs(5), || {
            match watcher.read() {
                Ok(events) => events.into_iter().find_map(|e| match e {
                    proxywatch::watch::Event::Commit(c) => Some(c),
                    _ => None,
                }),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                Err(e) => panic!("{e}"),
            }
            .ok_or("not yet".to_string())
        })
    };
    let mut commit_once = |watcher: &mut Watcher| commit_by(&mut to_parent, &mut from_parent, watcher);
    // Without process events: the writer gone, its parent unknown.
    let before = commit_once(&mut watcher);
    assert_eq!(before.writer.name.as_deref(), Some("nft"), "{before:?}");
    assert!(before.writer.gone, "{before:?}");
    assert_eq!(before.writer.parent_pid, None, "{before:?}");
    // Following the stand-in kube-proxy: its child's commit is its own.
    children
        .follow(Some(parent_pid))
        .expect("process events in the initial namespaces, as root");
    let c = commit_once(&mut watcher);
    // The other process's child, gone as fast: its fork names its parent, not kube-proxy.
    let o = commit_by(&mut to_other, &mut from_other, &mut watcher);
    let _ = children.follow(None);
    drop(to_parent);
    drop(to_other);
    let _ = parent.wait();
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.writer.gone && o.writer.parent_from_fork, "{o:?}");
    assert_eq!(o.writer.parent_pid, Some(other_pid), "{o:?}");
    assert_eq!(
        proxywatch::history::nftables_watch::classify(&o, Some(parent_pid)),
        (proxywatch::history::nftables_watch::WriterClass::Other, "pid"),
        "a tool's name does not make a script's commit kube-proxy's"
    );
    assert_eq!(c.writer.name.as_deref(), Some("nft"), "{c:?}");
    assert!(c.writer.gone && c.writer.parent_from_fork, "{c:?}");
    assert_eq!(c.writer.parent_pid, Some(parent_pid), "{c:?}");
    assert_eq!(c.writer.parent_name.as_deref(), Some("bash"), "{c:?}");
    assert_eq!(
        proxywatch::history::nftables_watch::classify(&c, Some(parent_pid)),
        (
            proxywatch::history::nftables_watch::WriterClass::KubeProxy,
            "parent pid"
        )
    );
    assert!(
        c.writer.describe().contains(&format!("parent bash (PID {parent_pid})")),
        "{}",
        c.writer.describe()
    );
}

/// kube-proxy's own commits are dropped in the kernel, their NEWGEN kept, by the socket filter
/// on the PIDs of its children the process events saw forked; another process's commit is read
/// whole, and once it removed kube-proxy's rules, kube-proxy's next commit is read whole too (to
/// see it write them back).
///
/// As above: a stand-in kube-proxy (a `bash` in the initial namespaces, followed through the
/// process events) whose children (each forked 200 ms before it commits, as kube-proxy's
/// `iptables-restore` reads its input first) commit to an `ip kube-proxy` table in a network
/// namespace the test created, where the watcher's socket is; another `bash`'s child flushes
/// that table's chain. A thread reads the process events as the agent's follow task does. Needs
/// root, `ip`, `nft`, `bash`, and the initial user, PID and network namespaces. About 2 s.
#[test]
fn kube_proxy_s_commits_are_dropped_in_the_kernel_but_their_newgen_another_s_are_read_whole_in_the_initial_namespaces()
{
    use proxywatch::watch::nftables_watch::{open, Watcher};
    use proxywatch::watch::proc_events::KubeProxyChildren;
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !common::can_run(&["ip", "nft", "bash"]) {
        return;
    }
    let ns = Netns::new("nftsk");
    let path = format!("/run/netns/{}", ns.name);
    let sock = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        open()
    })
    .join()
    .unwrap()
    .expect("the nf_tables watcher's socket in the test's namespace");
    let children = KubeProxyChildren::new();
    let mut watcher = Watcher::new(proxywatch::host::Host::new("/"), sock, children.clone(), "pwt-kp-none")
        .skipping_kube_proxy(Duration::from_secs(600));
    watcher.socket().set_non_blocking(true).unwrap();
    let dir = std::env::temp_dir().join(format!("pwt-nftsk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sync = dir.join("sync.nft");
    std::fs::write(
        &sync,
        "add table ip kube-proxy\nadd chain ip kube-proxy services\nadd rule ip kube-proxy services counter\nadd rule ip kube-proxy services counter\n",
    )
    .unwrap();
    let flush = dir.join("flush.nft");
    std::fs::write(&flush, "flush chain ip kube-proxy services\n").unwrap();
    let spawn = |file: &std::path::Path| {
        let script = format!(
            "while read line; do (sleep 0.2; exec ip netns exec {} nft -f {}); echo done; done",
            ns.name,
            file.display()
        );
        let mut p = std::process::Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let to = p.stdin.take().unwrap();
        let from = std::io::BufReader::new(p.stdout.take().unwrap());
        (p, to, from)
    };
    let (mut kp, mut to_kp, mut from_kp) = spawn(&sync);
    let (mut other, mut to_other, mut from_other) = spawn(&flush);
    children
        .follow(Some(kp.id() as i32))
        .expect("process events in the initial namespaces, as root");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let follower = std::thread::spawn({
        let (children, stop) = (children.clone(), stop.clone());
        move || {
            while !stop.load(Ordering::Relaxed) {
                children.drain();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    let commit_by = |to: &mut std::process::ChildStdin,
                     from: &mut std::io::BufReader<std::process::ChildStdout>,
                     watcher: &mut Watcher| {
        to.write_all(b"go\n").unwrap();
        let mut answer = String::new();
        from.read_line(&mut answer).unwrap();
        assert_eq!(answer, "done\n", "the child committed and was reaped");
        let mut lost = false;
        let c = common::poll("the child's commit", Duration::from_secs(5), || {
            let events = match watcher.read() {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => vec![],
                Err(e) => panic!("{e}"),
            };
            let mut commit = None;
            for e in events {
                match e {
                    proxywatch::watch::Event::Commit(c) => commit = Some(c),
                    proxywatch::watch::Event::Lost { .. } => lost = true,
                    _ => {}
                }
            }
            commit.ok_or("not yet".to_string())
        });
        (c, lost)
    };
    let (first, first_lost) = commit_by(&mut to_kp, &mut from_kp, &mut watcher);
    let (flushed, flush_lost) = commit_by(&mut to_other, &mut from_other, &mut watcher);
    let (back, back_lost) = commit_by(&mut to_kp, &mut from_kp, &mut watcher);
    stop.store(true, Ordering::Relaxed);
    follower.join().unwrap();
    let _ = children.follow(None);
    drop(to_kp);
    drop(to_other);
    let _ = kp.wait();
    let _ = other.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(children.filter_error(), None);
    // kube-proxy's child: only its NEWGEN came, the writer named from it and its fork.
    assert!(first.filtered && first.tables.is_empty() && !first_lost, "{first:?}");
    assert_eq!(first.writer.name.as_deref(), Some("nft"), "{first:?}");
    assert_eq!(first.writer.parent_pid, Some(kp.id() as i32), "{first:?}");
    assert!(
        !proxywatch::watch::Event::Commit(first.clone()).wakes(),
        "a dropped commit of kube-proxy's wakes no probe"
    );
    // Another process: read whole, what it removed from kube-proxy's table counted.
    assert!(!flushed.filtered && !flush_lost, "{flushed:?}");
    let t = flushed
        .tables
        .iter()
        .find(|t| t.table == "kube-proxy")
        .expect("the kube-proxy table");
    assert_eq!((t.rules_removed, t.kube_rules_removed), (2, 2), "{flushed:?}");
    assert_eq!(flushed.writer.parent_pid, Some(other.id() as i32), "{flushed:?}");
    // Then kube-proxy's next commit is read whole: it writes the two rules back.
    assert!(!back.filtered && !back_lost, "{back:?}");
    let t = back
        .tables
        .iter()
        .find(|t| t.table == "kube-proxy")
        .expect("the kube-proxy table");
    assert_eq!(t.rules_added, 2, "{back:?}");
}

/// `iptables-nft-save`'s chains and rules per table, and the rules in or jumping to a KUBE-* chain.
fn save_tables(ns: &Netns) -> (std::collections::BTreeMap<String, (u64, u64)>, u64) {
    let (rules, kube) = save_counts(ns);
    let out = ns.exec_ok("iptables-nft-save", &[]);
    let (mut tables, mut table) = (std::collections::BTreeMap::new(), String::new());
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
            tables.insert(table.clone(), (0, rules[&table]));
        } else if l.starts_with(':') {
            tables.get_mut(&table).unwrap().0 += 1;
        }
    }
    (tables, kube)
}

/// Commit after commit, the agent's counts equal `iptables-nft-save`'s; those of a commit whose
/// notifications account for every change are carried by them (the woken iptables probe dumps
/// nothing: its reading says `notified`), the others counted by a dump: kube-proxy's rewrite of
/// its chains, a service added and removed (chains created, rules, `-X`), a table created and
/// another flushed and written again (iptables-nft-restore without --noflush deletes the table),
/// a canary deleted (another table still holds one: dumped), a chain added by `nft add chain`
/// (no NLM_F_EXCL: new or updated, not told: dumped), then `nft create chain` (carried again).
/// The iptables probe's interval is 600 s: every reading here is one the commits woke.
/// Needs root, `ip`, `iptables-nft`, `iptables-nft-restore`, `iptables-nft-save`, `nft`,
/// `python3`; a few seconds.
#[test]
fn counts_carried_by_the_notifications_equal_iptables_nft_save_commit_after_commit() {
    let tools = [
        "ip",
        "iptables-nft",
        "iptables-nft-restore",
        "iptables-nft-save",
        "nft",
        "python3",
    ];
    if !common::can_run(&tools) {
        return;
    }
    let dir = log_dir_named("nftables_watch_e2e_carried");
    let (rules, _) = common::generate_kube_rules(&dir, 200, 3, &[]);
    let ns = Netns::new("nftcarry");
    let loaded = ns
        .command("iptables-nft-restore", &[])
        .stdin(std::fs::File::open(&rules).unwrap())
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", String::from_utf8_lossy(&loaded.stderr));
    let full = std::fs::read_to_string(&rules).unwrap();
    // kube-proxy's nat chains, each declared (flushed and rewritten by --noflush).
    let mut kube = String::from("*nat\n");
    let mut nat = false;
    for l in full.lines() {
        if l.starts_with('*') {
            nat = l == "*nat";
        } else if nat && (l.starts_with(":KUBE-") || l.starts_with("-A KUBE-")) {
            kube.push_str(l);
            kube.push('\n');
        }
    }
    kube.push_str("COMMIT\n");
    let agent = Serve::new()
        .in_netns(&ns)
        .args(["--node-name", "pwt-carry", "--iptables.interval", "600s"])
        .log(dir.join("agent.log"))
        .start();
    let reading = |agent: &common::Agent| -> Result<(Value, Value), String> {
        let s = agent.snapshot()?;
        let run = s["facts"]["iptables"]["saves"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["backend"] == "nft" && r["family"] == "ipv4"))
            .ok_or(format!("no nft ipv4 count: {}", s["facts"]["iptables"]))?;
        Ok((run["netlink"].clone(), run["counts"].clone()))
    };
    let first = common::poll(
        "the watcher listening and the rules read",
        Duration::from_secs(30),
        || {
            let w = watch(&agent)?;
            let (how, _) = reading(&agent)?;
            (w["state"] == "watching").then_some(how).ok_or(format!("{w}"))
        },
    );
    let mut generation = first["generation"].as_u64().unwrap();
    let svc = "KUBE-SVC-PWTCARRY00000000";
    let sep = "KUBE-SEP-PWTCARRY00000000";
    // (what, the commands of its commit: program, arguments, stdin; whether its counts are carried)
    type Commands = Vec<(&'static str, Vec<String>, Option<String>)>;
    let steps: Vec<(&str, Commands, bool)> = vec![
        ("kube-proxy's rewrite", vec![("iptables-nft-restore", vec!["--noflush".into()], Some(kube.clone()))], true),
        (
            "a service added",
            vec![(
                "iptables-nft-restore",
                vec!["--noflush".into()],
                Some(format!(
                    "*nat\n:{svc} - [0:0]\n:{sep} - [0:0]\n-A KUBE-SERVICES -d 10.96.99.9/32 -p tcp -m tcp --dport 80 -j {svc}\n-A {svc} -j {sep}\n-A {sep} -p tcp -m tcp -j DNAT --to-destination 10.244.99.9:80\nCOMMIT\n"
                )),
            )],
            true,
        ),
        (
            "the service removed",
            vec![(
                "iptables-nft-restore",
                vec!["--noflush".into()],
                Some(format!(
                    "*nat\n-D KUBE-SERVICES -d 10.96.99.9/32 -p tcp -m tcp --dport 80 -j {svc}\n-F {svc}\n-F {sep}\n-X {svc}\n-X {sep}\nCOMMIT\n"
                )),
            )],
            true,
        ),
        (
            "a table created",
            vec![("iptables-nft", ["-t", "raw", "-A", "PREROUTING", "-j", "ACCEPT"].map(String::from).to_vec(), None)],
            true,
        ),
        (
            "a table written again whole",
            vec![(
                "iptables-nft-restore",
                vec![],
                Some("*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:PWT-RAW - [0:0]\n-A OUTPUT -j PWT-RAW\n-A PWT-RAW -j ACCEPT\nCOMMIT\n".into()),
            )],
            true,
        ),
        (
            "a canary deleted",
            vec![("iptables-nft", ["-t", "nat", "-X", "KUBE-PROXY-CANARY"].map(String::from).to_vec(), None)],
            false,
        ),
        (
            "a chain added without NLM_F_EXCL",
            vec![("nft", ["add", "chain", "ip", "nat", "KUBE-PWT-ADDED"].map(String::from).to_vec(), None)],
            false,
        ),
        (
            "a chain created",
            vec![("nft", ["create", "chain", "ip", "nat", "KUBE-PWT-CREATED"].map(String::from).to_vec(), None)],
            true,
        ),
    ];
    for (what, commands, carried) in steps {
        for (program, args, input) in commands {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = match input {
                Some(text) => ns.exec_input(program, &args, &text),
                None => ns.exec_ok(program, &args),
            };
            assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let (tables, kube_rules) = save_tables(&ns);
        let (how, counts) = common::poll(what, Duration::from_secs(30), || {
            let (how, counts) = reading(&agent)?;
            let same = tables.iter().all(|(t, (chains, rules))| {
                counts["tables"][t]["chains"] == *chains && counts["tables"][t]["rules"] == *rules
            }) && counts["tables"].as_object().map(|t| t.len()) == Some(tables.len())
                && counts["kube_rules"] == kube_rules;
            (how["generation"].as_u64() != Some(generation) && same)
                .then_some((how.clone(), counts.clone()))
                .ok_or(format!("{how} {counts}; save: {tables:?} {kube_rules}"))
        });
        generation = how["generation"].as_u64().unwrap();
        eprintln!("{what}: generation {generation}, carried {}, {counts}", how["notified"]);
        let w = watch(&agent).unwrap();
        if w["notifications_lost_total"] == 0 {
            assert_eq!(how["notified"] == true, carried, "{what}: {how}");
        }
        assert_eq!(counts["proxy_canary"], true, "{what}: mangle and filter still hold one");
    }
    // Every count (kube-proxy's chain families, the hint and canaries too) equals a dump's now.
    let (how, carried) = reading(&agent).unwrap();
    assert_eq!(how["notified"], true, "{how}");
    let run = common::Check::new()
        .in_netns(&ns)
        .args(["--node-name", "pwt-carry", "--kube-proxy.down-grace", "0s"])
        .run();
    let counted = run.doc["facts"]["iptables"]["saves"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["backend"] == "nft" && r["family"] == "ipv4"))
        .map(|r| r["counts"].clone())
        .unwrap_or_else(|| panic!("no nft ipv4 count in check's report: {}", run.stderr));
    assert_eq!(carried, counted);
    agent.stop_cleanly();
}

/// kube-proxy's exit time is the kernel's, not when the agent got round to it: a process (the
/// stand-in) is followed through the process events, SIGKILLed, and looked at only 400 ms
/// later, as a loaded node's agent may be; the exit time told is within 100 ms of the kill
/// (the bound), where the time the exit was seen is 400 ms off. Needs root and the
/// initial user, PID and network namespaces (the connector exists there only).
#[test]
fn kube_proxy_s_exit_time_is_the_kernel_s_when_the_agent_looks_late_in_the_initial_namespaces() {
    use proxywatch::watch::proc_events::KubeProxyChildren;
    use proxywatch::watch::process_exit::exit_time;
    use std::time::SystemTime;
    if !common::can_run(&["sleep"]) {
        return;
    }
    let children = KubeProxyChildren::new();
    let mut p = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = p.id() as i32;
    children
        .follow(Some(pid))
        .expect("process events in the initial namespaces");
    let unix = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
    let killed = unix(SystemTime::now());
    p.kill().unwrap();
    p.wait().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let seen = SystemTime::now();
    let at = exit_time(children.exit_of(pid), seen);
    assert!(unix(seen) - killed >= 0.4);
    assert!(
        (killed..killed + 0.1).contains(&at),
        "the exit told {:.3} s after the kill (seen {:.3} s after)",
        at - killed,
        unix(seen) - killed
    );
    assert_eq!(children.exit_of(pid + 1), None, "only the followed process's exit");
}
