//! kube-proxy's cgroup end to end, through `proxywatch serve` (issue 18):
//!
//! 1. The cgroup v2 fixture node with a private namespace (kube-proxy's path relative to the
//!    agent's), whose `cpu.stat` the test rewrites between probe runs: the throttling window,
//!    `kube_proxy_cpu_throttled` and the metrics follow.
//! 2. A real cgroup of this kernel (v1, or v2 where that is what the machine has): a busy copy of
//!    `yes` called kube-proxy under a 0.1-core quota and a 64 MiB limit is throttled, and the agent
//!    reads it from the real cgroupfs. Needs root; skipped (failed under CI=true) without it.
//!
//! The probes other than kube_proxy read the healthy fixture node, so nothing else fires.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(40);

fn nodes() -> PathBuf {
    common::fixtures().join("nodes")
}

/// `proxywatch serve` on `host_root` with nothing listening on kube-proxy's ports.
fn serve(host_root: &Path, extra: &[&str]) -> common::Agent {
    common::Serve::new()
        .env_clear()
        .args(["--node-name", "fixture", "--host-root"])
        .arg(host_root)
        .args(common::NO_KUBE_PROXY)
        .args(["--kube-proxy.interval", "300ms"])
        .args(extra)
        .no_wait()
        .start()
}

/// `/metrics`, which must answer 200.
fn metrics(agent: &common::Agent) -> String {
    agent.get_ok("/metrics")
}

/// Calls `f` until it returns Ok, at most DEADLINE; panics with its last Err.
fn poll<T>(what: &str, f: impl FnMut() -> Result<T, String>) -> T {
    common::poll(what, DEADLINE, f)
}

fn finding<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
    doc["findings"].as_array()?.iter().find(|f| f["id"] == id)
}

/// Polls until `kube_proxy_cpu_throttled` is a warning; returns the snapshot.
fn throttled(agent: &common::Agent) -> Value {
    poll("kube_proxy_cpu_throttled", || {
        let d = agent.snapshot()?;
        match finding(&d, "kube_proxy_cpu_throttled") {
            Some(f) if f["severity"] == "warning" => Ok(d.clone()),
            _ => Err(format!(
                "{:#} {:#}",
                d["derived"]["kube_proxy"], d["facts"]["kube_proxy"]["process"]["cgroup"]
            )),
        }
    })
}

// ---------------------------------------------------------------------------
// 1. The v2 fixture node, rewritten between runs.

#[test]
fn throttling_over_the_window_from_a_private_namespace_fixture() {
    let name = "kube-proxy-cgroup-v2-private-ns";
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(name);
    common::copy_tree(&nodes().join(name), &root);
    let agent = serve(&root, &[]);
    // The first reading: kube-proxy's cgroup found, no window yet.
    let doc = poll("the first cgroup reading", || {
        let d = agent.snapshot()?;
        let cg = &d["facts"]["kube_proxy"]["process"]["cgroup"];
        (cg["found_by"] == "search")
            .then(|| d.clone())
            .ok_or_else(|| format!("{d:#}"))
    });
    let path = doc["facts"]["kube_proxy"]["process"]["cgroup"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let stat_file = root.join(format!("sys/fs/cgroup{path}/cpu.stat"));
    let before = std::fs::read_to_string(&stat_file).unwrap();
    let field = |key: &str| -> u64 {
        before
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        finding(&doc, "kube_proxy_cpu_throttled").is_none(),
        "one reading: no window"
    );

    // 100 more periods, 40 of them throttled (2 s): 40 % over the window.
    let after = before
        .replace(
            &format!("nr_periods {}", field("nr_periods")),
            &format!("nr_periods {}", field("nr_periods") + 100),
        )
        .replace(
            &format!("nr_throttled {}", field("nr_throttled")),
            &format!("nr_throttled {}", field("nr_throttled") + 40),
        )
        .replace(
            &format!("throttled_usec {}", field("throttled_usec")),
            &format!("throttled_usec {}", field("throttled_usec") + 2_000_000),
        );
    assert_ne!(after, before);
    let partial = stat_file.with_extension("new");
    std::fs::write(&partial, &after).unwrap();
    std::fs::rename(&partial, &stat_file).unwrap();

    let doc = throttled(&agent);
    let w = &doc["derived"]["kube_proxy"]["cpu_throttling"];
    assert_eq!(
        (w["periods"].as_u64(), w["throttled_periods"].as_u64()),
        (Some(100), Some(40)),
        "{w:#}"
    );
    assert_eq!(w["ratio"].as_f64(), Some(0.4));
    assert!((w["throttled_seconds"].as_f64().unwrap() - 2.0).abs() < 1e-6, "{w:#}");
    let f = finding(&doc, "kube_proxy_cpu_throttled").unwrap();
    assert_eq!(f["evidence"]["throttled_ratio"].as_f64(), Some(0.4));
    assert_eq!(f["evidence"]["cpu_limit_cores"].as_f64(), Some(0.2));
    let m = poll("the throttling metrics", || {
        let m = metrics(&agent);
        (common::series(&m, "proxywatch_kube_proxy_cpu_throttled_ratio") == Some(0.4))
            .then(|| m.clone())
            .ok_or(m)
    });
    assert_eq!(
        common::series(&m, "proxywatch_finding_severity{id=\"kube_proxy_cpu_throttled\"}"),
        Some(2.0)
    );
    // The limit in base units (seconds of CPU per period, and the period): 0.2 CPUs.
    let quota = common::series(&m, "proxywatch_kube_proxy_cgroup_cpu_quota_seconds").expect("quota");
    let period = common::series(&m, "proxywatch_kube_proxy_cgroup_cpu_period_seconds").expect("period");
    assert!((quota / period - 0.2).abs() < 1e-9, "quota {quota} / period {period}");
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_cgroup_memory_limit_bytes"),
        Some(134_217_728.0)
    );
    assert_eq!(
        common::series(&m, "proxywatch_kube_proxy_cgroup_cpu_periods_total"),
        Some((field("nr_periods") + 100) as f64)
    );
    // Warnings only: the node stays ready.
    assert_eq!(common::series(&m, "proxywatch_node_ready"), Some(1.0));
}

// ---------------------------------------------------------------------------
// 2. A real cgroup of this kernel.

/// A cgroup made for the test (v1: one directory in the cpu and the memory hierarchy; v2: one
/// directory), removed on drop once its process is gone.
struct TestCgroup {
    dirs: Vec<PathBuf>,
    version: u8,
}

impl TestCgroup {
    /// A 0.1-core quota and a 64 MiB limit, in whichever version this machine mounts; None when
    /// neither can be made here.
    fn create() -> Option<TestCgroup> {
        let name = format!("proxywatch-test-{}", std::process::id());
        let root = Path::new("/sys/fs/cgroup");
        let v1 = (root.join("cpu/cpu.cfs_quota_us").is_file() && root.join("memory/memory.limit_in_bytes").is_file())
            .then(|| {
                let cg = TestCgroup {
                    dirs: vec![root.join("cpu").join(&name), root.join("memory").join(&name)],
                    version: 1,
                };
                for d in &cg.dirs {
                    std::fs::create_dir(d).ok()?;
                }
                std::fs::write(cg.dirs[0].join("cpu.cfs_quota_us"), "10000").ok()?;
                std::fs::write(cg.dirs[0].join("cpu.cfs_period_us"), "100000").ok()?;
                std::fs::write(cg.dirs[1].join("memory.limit_in_bytes"), "67108864").ok()?;
                Some(cg)
            })
            .flatten();
        if v1.is_some() {
            return v1;
        }
        let controllers = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
        if !(controllers.contains("cpu") && controllers.contains("memory")) {
            return None;
        }
        let cg = TestCgroup {
            dirs: vec![root.join(&name)],
            version: 2,
        };
        std::fs::create_dir(&cg.dirs[0]).ok()?;
        std::fs::write(cg.dirs[0].join("cpu.max"), "10000 100000").ok()?;
        std::fs::write(cg.dirs[0].join("memory.max"), "67108864").ok()?;
        Some(cg)
    }

    fn add(&self, pid: u32) {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            // The process may take a moment to leave after it is reaped.
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// A busy process called kube-proxy: a copy of `yes` writing to /dev/null.
struct Busy(Child);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_real_cgroup_throttles_a_busy_kube_proxy() {
    // Processes named kube-proxy: no other test's agent reads the live /proc meanwhile.
    let _kube_proxy = common::kube_proxy_process_lock();
    if !common::can_run(&[]) {
        return;
    }
    let Some(cgroup) = TestCgroup::create() else {
        let msg = "neither cgroup v1 cpu+memory nor v2 with cpu and memory delegated at /sys/fs/cgroup";
        assert!(!common::in_ci(), "{msg} (CI=true: not skipping)");
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let bin = tempfile::tempdir().unwrap();
    let binary = bin.path().join("kube-proxy");
    std::fs::copy("/usr/bin/yes", &binary).expect("copy /usr/bin/yes");
    let busy = Busy(
        Command::new(&binary)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the busy kube-proxy"),
    );
    let pid = busy.0.id();
    cgroup.add(pid);

    // The healthy node, with this machine's /proc/stat and the busy process linked in.
    let node = tempfile::tempdir().unwrap();
    common::copy_tree(&nodes().join("healthy-iptables"), node.path());
    std::fs::copy("/proc/stat", node.path().join("proc/stat")).unwrap();
    std::os::unix::fs::symlink(format!("/proc/{pid}"), node.path().join(format!("proc/{pid}"))).unwrap();
    let agent = serve(node.path(), &["--host-cgroup-root", "/sys/fs/cgroup"]);

    let doc = throttled(&agent);
    let p = &doc["facts"]["kube_proxy"]["process"];
    assert_eq!(p["pid"].as_u64(), Some(u64::from(pid)));
    let cg = &p["cgroup"];
    assert_eq!(cg["version"].as_u64(), Some(u64::from(cgroup.version)), "{cg:#}");
    assert_eq!(cg["found_by"], "path", "{cg:#}");
    assert!(cg["path"]
        .as_str()
        .unwrap()
        .ends_with(&format!("proxywatch-test-{}", std::process::id())));
    assert_eq!(cg["memory_limit_bytes"].as_u64(), Some(64 << 20));
    assert_eq!(cg["cpu_limit_cores"].as_f64(), Some(0.1));
    // Read, and within the limit: v1 leaves memory charged before the move where it was
    // (memory.move_charge_at_immigrate 0), so a process moved in can read 0.
    let usage = cg["memory_usage_bytes"].as_u64().unwrap();
    assert!(usage < 64 << 20, "{usage}");
    // Busy the whole time under a tenth of a core: throttled in nearly every period.
    let w = &doc["derived"]["kube_proxy"]["cpu_throttling"];
    let ratio = w["ratio"].as_f64().unwrap();
    assert!(ratio > 0.5 && w["periods"].as_u64().unwrap() >= 10, "{w:#}");
    eprintln!("real cgroup v{}: {w}", cgroup.version);
    drop(agent);
    drop(busy);
}
