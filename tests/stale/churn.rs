//! What the stale-check tests under churn share: running a tool in a namespace, inserting a
//! DST_NAT conntrack entry, and a thread that commits rule changes without a pause.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use common::Netns;

/// Runs `program args` in the namespace called `ns` with `stdin` as its input;
/// panics when it fails.
pub fn run_in(ns: &str, program: &str, args: &[&str], stdin: &str) {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    common::run_input("ip", &full, stdin);
}

/// One conntrack entry `proto` from 10.250.100.1:`sport` to `dst`:`dport`, NATed to `to` (`ip:port`).
pub fn insert_dnat(ns: &Netns, proto: &str, sport: u16, dst: &str, dport: u16, to: &str) {
    let (sport, dport) = (sport.to_string(), dport.to_string());
    let mut args = vec![
        "-I",
        "-p",
        proto,
        "-s",
        "10.250.100.1",
        "-d",
        dst,
        "--sport",
        &sport,
        "--dport",
        &dport,
        "-t",
        "600",
        "--dst-nat",
        to,
    ];
    if proto == "tcp" {
        args.extend(["--state", "ESTABLISHED"]);
    }
    ns.exec_ok("conntrack", &args);
}

/// Commits without a pause until stopped (on drop too, so before the namespace goes): rule
/// set `other`, then `base` again, then an unrelated chain made and deleted (four commits a
/// round, each moving the ruleset's generation); `stop` gives the number of commits.
pub struct Churn {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl Churn {
    pub fn start(ns: &Netns, base: String, other: String) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, flag) = (ns.name.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut commits = 0;
            while !flag.load(Ordering::Relaxed) {
                run_in(&ns, "iptables-nft-restore", &[], &other);
                run_in(&ns, "iptables-nft-restore", &[], &base);
                run_in(&ns, "iptables-nft", &["-t", "nat", "-N", "PWT-UNRELATED"], "");
                run_in(&ns, "iptables-nft", &["-t", "nat", "-X", "PWT-UNRELATED"], "");
                commits += 4;
            }
            commits
        });
        Churn {
            stop,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().unwrap().join() {
            Ok(n) => n,
            Err(e) => std::panic::resume_unwind(e),
        }
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
