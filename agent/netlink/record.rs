//! Test code only: recording what the kernel answers the probes, for a fixture
//! node's `netlink/` (the format is `replay.rs`'s). The shipped binary never
//! records: this module is compiled for tests alone.
//!
//! `record_a_fixture_node` (ignored: it asks the kernel of the namespace it runs
//! in) runs every probe once against the live kernel with a [`Recorder`] on each
//! socket and writes `$PROXYWATCH_RECORD_DIR/<protocol>.txt`; the node's files are
//! read under `$PROXYWATCH_RECORD_ROOT` (default `/`, the namespace's own), so that a
//! fixture node keeps its files and the requests recorded are the ones its files make
//! the probes send. `tests/tools/record_netlink_node.sh` creates the namespace, fills
//! it with kube-proxy's rules and conntrack entries, and runs it there;
//! `tests/tools/record_fixture_kernels.sh` does it for the other fixture nodes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use super::replay::{format, protocol_name, stamp, Exchange};
use super::{Conn, NlError, Socket};

/// Every exchange of every recorder sharing it, by protocol.
#[derive(Debug, Default)]
pub struct Log {
    exchanges: Mutex<BTreeMap<isize, Vec<Exchange>>>,
}

impl Log {
    fn push(&self, protocol: isize, e: Exchange) {
        let mut all = self.exchanges.lock().unwrap();
        let list = all.entry(protocol).or_default();
        // The first answer to a request is the one replayed: later identical
        // requests (the generation, read again) are not kept twice.
        if !list.iter().any(|x| x.request == e.request) {
            list.push(e);
        }
    }

    /// Each protocol's recording text.
    pub fn files(&self, header: &str) -> Vec<(String, String)> {
        let all = self.exchanges.lock().unwrap();
        all.iter()
            .map(|(p, ex)| (format!("{}.txt", protocol_name(*p)), format(header, ex)))
            .collect()
    }
}

/// A live socket whose every request and reply is kept in a [`Log`].
pub struct Recorder {
    inner: Socket,
    log: std::sync::Arc<Log>,
    protocol: isize,
    open: Option<Exchange>,
}

impl Recorder {
    pub fn new(inner: Socket, log: std::sync::Arc<Log>, protocol: isize) -> Self {
        Recorder {
            inner,
            log,
            protocol,
            open: None,
        }
    }

    fn close(&mut self) {
        if let Some(e) = self.open.take() {
            self.log.push(self.protocol, e);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
    }
}

impl Conn for Recorder {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError> {
        self.close();
        let mut request = msg.to_vec();
        stamp(&mut request, 0);
        self.open = Some(Exchange {
            request,
            replies: Vec::new(),
        });
        self.inner.send(msg)
    }

    fn recv(&mut self, deadline: Instant) -> Result<&[u8], NlError> {
        let data = self.inner.recv(deadline)?;
        if let Some(e) = self.open.as_mut() {
            let mut d = data.to_vec();
            stamp(&mut d, 0);
            e.replies.push(d);
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;
    use crate::probe::{self, ProbeContext, PROBES};

    /// Run by tests/tools/record_netlink_node.sh inside the namespace it made.
    #[tokio::test]
    #[ignore = "records the kernel of the namespace it runs in; run by tests/tools/record_netlink_node.sh"]
    async fn record_a_fixture_node() {
        let out = std::env::var("PROXYWATCH_RECORD_DIR").expect("PROXYWATCH_RECORD_DIR: where to write");
        let root = std::env::var("PROXYWATCH_RECORD_ROOT").unwrap_or_else(|_| "/".into());
        let log = std::sync::Arc::new(Log::default());
        let ctx = ProbeContext {
            host: Host::recording(root, log.clone()),
            runner: crate::exec::Runner::new(4),
            max_output_bytes: 64 << 20,
            kube_proxy: crate::probe::kube_proxy::Endpoints {
                metrics_url: String::new(),
                healthz_url: String::new(),
                max_body_bytes: 0,
                cgroup_root: None,
                process_name: String::new(),
            },
            memory: Default::default(),
            kube_proxy_found: Default::default(),
            iptables_save_interval: None,
            snat: true,
            service_traffic: Default::default(),
            conntrack_stats_interval: None,
            nftables_skip_kube_proxy: None,
        };
        for p in PROBES {
            if *p == probe::ProbeName::KubeProxy {
                continue;
            }
            let deadline = probe::Deadline::after(std::time::Duration::from_secs(20));
            // What the probes read of each other is not netlink: nothing to record.
            match probe::run(*p, &ctx, &probe::Given::default(), deadline).await {
                Ok(_) => eprintln!("{p}: read"),
                Err(e) => eprintln!("{p}: {e}"),
            }
        }
        // What the conntrack probe asks on a kernel without /proc/net/stat/nf_conntrack
        // (this one has it, so the probe did not): recorded too, for the fixture test
        // that removes the file.
        let at = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let stats = ctx
            .host
            .netlink(crate::netlink::NETLINK_NETFILTER)
            .and_then(|c| crate::netlink::ctnetlink::read(c, at));
        eprintln!("ctnetlink statistics: {:?}", stats.map(|s| s.sums));
        std::fs::create_dir_all(&out).unwrap();
        // The script that made the namespace, for the file's first lines.
        let by = std::env::var("PROXYWATCH_RECORD_BY").unwrap_or_else(|_| "tests/tools/record_netlink_node.sh".into());
        let header = format!(
            "proxywatch netlink recording (agent/netlink/replay.rs says the format),\n\
             made by {by}: requests with seq/pid zeroed, then\n\
             their reply datagrams (seq/pid zeroed)"
        );
        for (name, text) in log.files(&header) {
            std::fs::write(std::path::Path::new(&out).join(name), text).unwrap();
        }
    }
}
