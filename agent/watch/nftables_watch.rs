//! The nf_tables watcher: a `NETLINK_NETFILTER` socket joined to `NFNLGRP_NFTABLES`, read by a
//! thread of its own that sleeps in `recv` until the kernel sends something (no timer at idle).
//! Each datagram goes through the pure decoder ([`super::nft_decode`]); at each NEWGEN the
//! writer is looked up in `/proc` at once ([`super::attribute`]), before anything else, since
//! kube-proxy's `iptables-restore` children exit right after their commit; one gone already is
//! looked up among kube-proxy's children the process events saw forked ([`super::proc_events`],
//! followed by the task the sources share ([`super::Shared`]) while the kube_proxy probe names
//! a process, and drained here first).
//! Then, for a commit whose every notification was read and decoded, it carries the iptables
//! and nftables probes' counts of the generation before to the commit's
//! ([`crate::probe::Memory::advance`]): the probes the scheduler wakes after the debounce find
//! them there and dump nothing. After a loss the next commit carries nothing, and what its
//! notifications cannot account for is left to the woken probe's dump.
//!
//! Notifications are per network namespace: the agent (hostNetwork) sees the node's commits.
//! Joining the group needs CAP_NET_ADMIN; where it fails, or where `nf_tables` is not loaded
//! (joining would make the kernel load it: the agent loads no module), the watcher says why in
//! an [`Event::Unavailable`] and the probes keep their polls. An ENOBUFS (a burst larger than
//! the socket's buffer) is an [`Event::Lost`]: the commit under way is dropped, nothing is
//! carried, and the scheduler wakes the probes, which dump the rules again.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::Sender;

use super::nft_decode::Pending;
use super::proc_events::KubeProxyChildren;
use super::{attribute, Commit, Event, Shared, Writer};
use crate::host::Host;
use crate::netlink::nft_uapi::NFNLGRP_NFTABLES;
use crate::netlink::replay::KernelSource;
use crate::netlink::{errno_text, messages, NETLINK_NETFILTER, RECV_BUFFER};
use crate::probe::kube_proxy::process::COMM_BYTES;
use crate::probe::ProbeContext;
use crate::timefmt::unix_seconds;

/// The receive buffer asked for (the kernel caps it at `net.core.rmem_max`).
const SOCKET_BUFFER: usize = 8 << 20;
/// While `nf_tables` is not loaded there is nothing to watch; look again this often.
const MODULE_RECHECK: Duration = Duration::from_secs(60);
/// `MSG_TRUNC`: recv returns the datagram's real length, so a cut one is seen.
const MSG_TRUNC: i32 = 0x20;

/// Starts the watcher's thread; kube-proxy's children are followed through `shared`.
pub fn start(ctx: Arc<ProbeContext>, shared: Arc<Shared>, tx: Sender<Event>) {
    let children = shared.follow_kube_proxy(&ctx, &tx);
    let spawned = std::thread::Builder::new().name("nftables-watch".into()).spawn({
        let tx = tx.clone();
        move || run(&ctx, &children, &tx)
    });
    if let Err(e) = spawned {
        let _ = tx.try_send(Event::Unavailable(format!("starting its thread: {e}")));
    }
}

fn os(op: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{op}: {}", errno_text(e.raw_os_error().unwrap_or(0)))
}

/// The socket, joined to the group (in the calling thread's network namespace).
pub fn open() -> Result<netlink_sys::Socket, String> {
    let mut sock = netlink_sys::Socket::new(NETLINK_NETFILTER).map_err(os("opening a netlink socket"))?;
    sock.bind_auto().map_err(os("binding the netlink socket"))?;
    // Best effort: above rmem_max the kernel keeps its cap.
    let _ = sock.set_rx_buf_sz(SOCKET_BUFFER);
    sock.add_membership(NFNLGRP_NFTABLES)
        .map_err(os("joining NFNLGRP_NFTABLES"))?;
    Ok(sock)
}

fn run(ctx: &ProbeContext, children: &Arc<KubeProxyChildren>, tx: &Sender<Event>) {
    let send = |e: Event| tx.blocking_send(e).is_ok();
    if !matches!(ctx.host.kernel(), KernelSource::Live) {
        send(Event::Unavailable(format!(
            "--host-root is not / (kernel answers from {}): no kernel to watch",
            ctx.host.kernel().as_str()
        )));
        return;
    }
    let mut said_not_loaded = false;
    while crate::probe::modules::tool_would_load(&ctx.host, "nf_tables") {
        if !said_not_loaded
            && !send(Event::Unavailable(
                "nf_tables is not loaded (joining its group would load it): nothing to watch; looked for again every 60 s".into(),
            ))
        {
            return;
        }
        said_not_loaded = true;
        std::thread::sleep(MODULE_RECHECK);
        if tx.is_closed() {
            return;
        }
    }
    let sock = match open() {
        Ok(s) => s,
        Err(why) => {
            send(Event::Unavailable(format!(
                "{why}; the iptables and nftables probes keep polling"
            )));
            return;
        }
    };
    if !send(Event::Watching) {
        return;
    }
    let mut watcher = Watcher::new(ctx.host.clone(), sock, children.clone(), &ctx.kube_proxy.process_name)
        .carrying(ctx.memory.clone());
    if let Some(window) = ctx.nftables_skip_kube_proxy {
        watcher = watcher.skipping_kube_proxy(window);
    }
    loop {
        match watcher.read() {
            Ok(events) => {
                for e in events {
                    if !send(e) {
                        return;
                    }
                }
            }
            Err(e) => {
                send(Event::Unavailable(format!(
                    "{}; the iptables and nftables probes keep polling",
                    os("receiving from netlink")(e)
                )));
                return;
            }
        }
    }
}

/// What the watcher reads, datagram by datagram: the commits attributed (the writer looked up
/// in `/proc` at once; one that exited already, through kube-proxy's children seen forked).
pub struct Watcher {
    host: Host,
    sock: netlink_sys::Socket,
    children: Arc<KubeProxyChildren>,
    kube_proxy_name: String,
    pending: Pending,
    undecoded: u32,
    /// The probes' counts this watcher carries from commit to commit (None: it carries none),
    /// and the generation when it began to: a commit of that generation or an earlier one may
    /// have begun before the group was joined.
    memory: Option<(Arc<crate::probe::Memory>, u32)>,
    /// Notifications were lost since the last NEWGEN: its commit carries no count.
    gap: bool,
    /// kube-proxy's commits are dropped in the kernel (the socket filter [`KubeProxyChildren`]
    /// keeps) but for this long after another process changed its rules; None: read whole.
    skip_window: Option<Duration>,
    buf: Vec<u8>,
}

impl Watcher {
    /// Reads `sock` (from [`open`]); `kube_proxy_name` is `--kube-proxy.process-name`.
    pub fn new(host: Host, sock: netlink_sys::Socket, children: Arc<KubeProxyChildren>, kube_proxy_name: &str) -> Self {
        Watcher {
            host,
            sock,
            children,
            kube_proxy_name: kube_proxy_name.chars().take(COMM_BYTES).collect(),
            pending: Pending::default(),
            undecoded: 0,
            memory: None,
            gap: false,
            skip_window: None,
            buf: vec![0u8; RECV_BUFFER],
        }
    }

    /// Carries the iptables and nftables probes' counts in `memory` through each commit whose
    /// every notification was read and decoded ([`crate::probe::Memory::advance`]), so that the
    /// probes it wakes dump nothing again. Called once the socket joined the group: the
    /// generation now is read, and only later commits (bumped after it, so notified after the
    /// join) carry counts; where it cannot be read, none does.
    pub fn carrying(mut self, memory: Arc<crate::probe::Memory>) -> Self {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let now = self
            .host
            .netlink(crate::netlink::NETLINK_NETFILTER)
            .and_then(|c| crate::netlink::nft_count::generation(c, deadline));
        self.memory = now.ok().map(|g| (memory, g));
        self
    }

    /// Drops kube-proxy's own commits' notifications in the kernel, their NEWGEN kept, but for
    /// `window` after another process changed kube-proxy's rules ([`super::socket_filter`]):
    /// the filter follows kube-proxy's children as the process events tell them forked, so
    /// where they cannot be listened to nothing is dropped.
    pub fn skipping_kube_proxy(mut self, window: Duration) -> Self {
        match self.children.filter(std::os::fd::AsFd::as_fd(&self.sock)) {
            Ok(()) => self.skip_window = Some(window),
            Err(why) => tracing::info!("kube-proxy's commits are read whole: {why}"),
        }
        self
    }

    /// The socket (a test sets it non-blocking).
    pub fn socket(&self) -> &netlink_sys::Socket {
        &self.sock
    }

    /// Reads one datagram (waiting for it, unless the socket is non-blocking) and returns its
    /// events: the commits it completes, or a loss. Errors are the socket's, ENOBUFS excepted.
    pub fn read(&mut self) -> Result<Vec<Event>, std::io::Error> {
        let lost = || {
            vec![Event::Lost {
                at_seconds: unix_seconds(SystemTime::now()),
            }]
        };
        let n = match self.sock.recv(&mut &mut self.buf[..], MSG_TRUNC) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(vec![]),
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) => {
                self.pending.reset();
                self.gap = true;
                return Ok(lost());
            }
            Err(e) => return Err(e),
        };
        if n > self.buf.len() {
            // A datagram cut: its notifications are lost like an overflow's.
            self.pending.reset();
            self.gap = true;
            return Ok(lost());
        }
        let mut events = Vec::new();
        for m in messages(&self.buf[..n]) {
            let Ok(m) = m else {
                self.undecoded = self.undecoded.saturating_add(1);
                break;
            };
            match self.pending.feed(&m) {
                Ok(None) => {}
                Ok(Some(c)) => {
                    // Before anything else but the writer's lookup (kube-proxy's children exit at
                    // once): the probes woken after the debounce find their counts carried.
                    let pid = c.pid.and_then(|p| i32::try_from(p).ok());
                    // Only its NEWGEN may have come: nothing to carry, and one not kube-proxy's
                    // (a PID just reused) is a loss, its rules re-read.
                    let (dropped, kube_proxys, root) = match pid {
                        Some(p) => self.children.writer_facts(p),
                        None => (false, false, None),
                    };
                    let filtered = self.skip_window.is_some() && dropped;
                    // kube-proxy's child, dropped: named from its NEWGEN and its fork, without
                    // reading /proc (what it would tell is the same each commit).
                    let writer = match (filtered && kube_proxys, pid) {
                        (true, Some(p)) => self.forked_writer(p, root, c.name.clone()),
                        _ => self.writer(c.pid, c.name.clone()),
                    };
                    if filtered && !kube_proxys {
                        events.extend(lost());
                    }
                    let whole = !std::mem::take(&mut self.gap) && self.undecoded == 0 && !filtered;
                    if let (true, Some((memory, joined))) = (whole, &self.memory) {
                        // Generations wrap: "later" is a positive distance.
                        if (c.generation.wrapping_sub(*joined) as i32) > 0 {
                            memory.advance(c.generation, &c.counts, unix_seconds(SystemTime::now()));
                        }
                    }
                    let named = [&writer.name, &writer.parent_name]
                        .iter()
                        .any(|n| n.as_deref() == Some(self.kube_proxy_name.as_str()));
                    if let Some(window) = self.skip_window {
                        // Another process changed kube-proxy's rules: read kube-proxy's commits
                        // whole, to see it write them back.
                        let other = !kube_proxys && !named;
                        if !filtered && other && c.tables.iter().any(|t| t.concerns_kube().is_some()) {
                            self.children.suspend_filter(window);
                        }
                    }
                    events.push(Event::Commit(Commit {
                        at_seconds: unix_seconds(SystemTime::now()),
                        generation: c.generation,
                        writer,
                        named_kube_proxy: named,
                        tables: c.tables,
                        more_tables: c.more_tables,
                        notifications: c.messages,
                        undecoded: std::mem::take(&mut self.undecoded),
                        filtered,
                    }));
                }
                Err(_) => self.undecoded = self.undecoded.saturating_add(1),
            }
        }
        Ok(events)
    }

    /// kube-proxy's child `pid` as the process events saw it forked: the kube-proxy it descends
    /// from as its parent, its name from the NEWGEN.
    fn forked_writer(&self, pid: i32, parent: Option<i32>, name: Option<String>) -> Writer {
        Writer {
            pid: u32::try_from(pid).ok(),
            name,
            parent_pid: parent,
            parent_name: parent.map(|_| self.kube_proxy_name.clone()),
            parent_from_fork: parent.is_some(),
            ..Default::default()
        }
    }

    /// The writer from `/proc`; one gone already is kube-proxy's child when the process events
    /// (read up to now: its fork came before its commit) saw it forked from kube-proxy, or a
    /// descendant of it, and else has the parent they saw it forked from, if any.
    fn writer(&self, pid: Option<u32>, name: Option<String>) -> Writer {
        let mut w = attribute::attribute(&self.host, pid, name);
        if w.parent_pid.is_none() {
            let pid = pid.and_then(|p| i32::try_from(p).ok());
            let parent = pid.and_then(|p| self.children.parent_of_gone(p));
            if let Some(parent) = parent {
                w.parent_pid = Some(parent);
                w.parent_name = attribute::stat(&self.host, parent.into()).map(|(n, _)| n);
                w.parent_from_fork = true;
            }
        }
        w
    }
}
