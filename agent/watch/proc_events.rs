//! kube-proxy's children, from the kernel's process events (the proc connector:
//! `NETLINK_CONNECTOR`, `CN_IDX_PROC`; `include/uapi/linux/connector.h` and `cn_proc.h`).
//!
//! kube-proxy writes its rules through children that exit at once (`iptables-restore`,
//! `nft -f -`): by the time the NEWGEN is read, `/proc/<pid>` may be gone and its parent with it.
//! A fork is told before the child can commit, so while a kube-proxy is known the watcher
//! listens to process events and remembers, for a bounded number of kube-proxy's children (and
//! their children), the kube-proxy they descend from, and for the last [`MAX_FORKS`] forks of
//! any process, the parent (a script's writer gone is named with it). At a NEWGEN the nftables watcher first
//! reads what is queued on this socket ([`KubeProxyChildren::parent_of_gone`]), so the fork of the
//! writer is always seen before its commit is attributed: no race with the child's exit.
//!
//! Listening needs CAP_NET_ADMIN, the initial user and PID namespaces, and works in the initial
//! network namespace only (the connector exists there alone). Where it cannot, that is said once
//! in the log, and an exited writer's parent stays unknown, as before. Subscribed only while the
//! kube_proxy probe names a process (`PROC_CN_MCAST_IGNORE` and closed when it names none).
//!
//! [`decode`] is pure (fuzzed: `fuzz/fuzz_targets/proc_events.rs`).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::netlink::{errno_text, messages};

/// `NETLINK_CONNECTOR` (linux/netlink.h).
pub const NETLINK_CONNECTOR: isize = 11;
/// `CN_IDX_PROC`, `CN_VAL_PROC` (linux/connector.h): the process events' id, also their group.
pub const CN_IDX_PROC: u32 = 1;
pub const CN_VAL_PROC: u32 = 1;
/// `enum proc_cn_mcast_op`.
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;
/// `enum what` of `struct proc_event`.
const PROC_EVENT_NONE: u32 = 0;
const PROC_EVENT_FORK: u32 = 1;
const PROC_EVENT_EXEC: u32 = 2;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// `NLMSG_DONE`: the type every connector message travels in.
const NLMSG_DONE: u16 = 3;
/// `struct cn_msg`: id {idx, val}, seq, ack, len (u16), flags (u16).
const CN_MSG_LEN: usize = 20;
/// `struct proc_event` up to its union: what, cpu, timestamp_ns (aligned to 8).
const EVENT_HEADER: usize = 16;

/// How many children are remembered at most (the oldest go first): kube-proxy runs one or two
/// children per sync; this holds thousands of syncs' worth.
pub const MAX_CHILDREN: usize = 4096;

/// One process event, as far as attribution needs it (PIDs are thread group IDs, the PIDs of
/// `/proc` and of NEWGEN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A new process (`child_tgid`) of `parent_tgid`; a new thread (`thread` true) is not one.
    Fork {
        parent_tgid: i32,
        child_tgid: i32,
        thread: bool,
    },
    Exec {
        tgid: i32,
    },
    /// A thread of `tgid` exited, at `timestamp_ns` (the kernel's `ktime_get_ns()`: CLOCK_MONOTONIC).
    Exit {
        tgid: i32,
        timestamp_ns: u64,
    },
    /// The answer to a subscription: 0, or the errno that refused it.
    Ack {
        err: u32,
    },
    /// Any other kind (uid, gid, sid, ptrace, comm, coredump...).
    Other {
        what: u32,
    },
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("malformed netlink message: {0}")]
    Netlink(String),
    #[error("a connector message of {0} bytes, shorter than its header")]
    Short(usize),
    #[error("connector message for {idx}:{val}, not the process events'")]
    NotProc { idx: u32, val: u32 },
    #[error("a {what:#x} process event cut short ({len} bytes)")]
    Cut { what: u32, len: usize },
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    u32_at(b, at).map(|v| v as i32)
}

/// One connector message's payload (after the netlink header): its process event.
pub fn decode_one(payload: &[u8]) -> Result<ProcEvent, DecodeError> {
    let short = || DecodeError::Short(payload.len());
    let idx = u32_at(payload, 0).ok_or_else(short)?;
    let val = u32_at(payload, 4).ok_or_else(short)?;
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC) {
        return Err(DecodeError::NotProc { idx, val });
    }
    let len = payload
        .get(16..18)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]) as usize)
        .ok_or_else(short)?;
    let data = payload.get(CN_MSG_LEN..).ok_or_else(short)?;
    // The event is `len` bytes, within what arrived.
    let ev = &data[..len.min(data.len())];
    let what = u32_at(ev, 0).ok_or(DecodeError::Cut { what: 0, len: ev.len() })?;
    let cut = || DecodeError::Cut { what, len: ev.len() };
    let field = |n: usize| i32_at(ev, EVENT_HEADER + 4 * n).ok_or_else(cut);
    Ok(match what {
        PROC_EVENT_NONE => ProcEvent::Ack {
            err: u32_at(ev, EVENT_HEADER).ok_or_else(cut)?,
        },
        PROC_EVENT_FORK => {
            let (parent_tgid, child_pid, child_tgid) = (field(1)?, field(2)?, field(3)?);
            ProcEvent::Fork {
                parent_tgid,
                child_tgid,
                thread: child_pid != child_tgid,
            }
        }
        PROC_EVENT_EXEC => ProcEvent::Exec { tgid: field(1)? },
        PROC_EVENT_EXIT => ProcEvent::Exit {
            tgid: field(1)?,
            timestamp_ns: ev
                .get(8..16)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_ne_bytes)
                .ok_or_else(cut)?,
        },
        what => ProcEvent::Other { what },
    })
}

/// Every process event of one datagram, in order; a malformed message ends the datagram.
pub fn decode(datagram: &[u8]) -> Vec<Result<ProcEvent, DecodeError>> {
    let mut out = Vec::new();
    for m in messages(datagram) {
        match m {
            Ok(m) => out.push(decode_one(m.payload)),
            Err(e) => {
                out.push(Err(DecodeError::Netlink(e.to_string())));
                break;
            }
        }
    }
    out
}

/// How many recent forks of any process are remembered (the oldest go first): a writer that
/// exited before it was looked at is named with its parent if its fork is among them. The
/// watcher looks within milliseconds of the commit; at 1,000 forks a second this holds 4 s.
pub const MAX_FORKS: usize = 4096;

/// kube-proxy's descendants seen forked: child -> the kube-proxy it descends from, at most
/// [`MAX_CHILDREN`] (the oldest forgotten first); and every process's recent forks, child ->
/// parent, at most [`MAX_FORKS`]. Kept after the child's exit: that is their use.
#[derive(Debug, Default)]
pub struct Children {
    kube_proxy: Option<i32>,
    of: HashMap<i32, i32>,
    order: VecDeque<i32>,
    forks: HashMap<i32, i32>,
    fork_order: VecDeque<i32>,
    /// The last exit of a thread of the followed kube-proxy (CLOCK_MONOTONIC ns): the last one
    /// is the process's end, told before its pidfd becomes readable (`do_exit` sends the event
    /// before `exit_notify` wakes the pidfd).
    kube_proxy_exit_ns: Option<u64>,
}

impl Children {
    /// Follows `pid` (none: nothing); another kube-proxy forgets the previous one's children.
    pub fn follow(&mut self, pid: Option<i32>) {
        if self.kube_proxy != pid {
            *self = Children {
                kube_proxy: pid,
                ..Default::default()
            };
        }
    }

    /// Takes one event. Every new process has its fork told, so a PID reused by a process
    /// that is not kube-proxy's is forgotten at its fork.
    pub fn take(&mut self, e: ProcEvent) {
        if let ProcEvent::Exit { tgid, timestamp_ns } = e {
            if Some(tgid) == self.kube_proxy {
                self.kube_proxy_exit_ns = self.kube_proxy_exit_ns.max(Some(timestamp_ns));
            }
            return;
        }
        let ProcEvent::Fork {
            parent_tgid,
            child_tgid,
            thread: false,
        } = e
        else {
            return;
        };
        let Some(kp) = self.kube_proxy else { return };
        if self.forks.insert(child_tgid, parent_tgid).is_none() {
            self.fork_order.push_back(child_tgid);
        }
        while self.fork_order.len() > MAX_FORKS {
            if let Some(old) = self.fork_order.pop_front() {
                self.forks.remove(&old);
            }
        }
        let root = if parent_tgid == kp {
            Some(kp)
        } else {
            self.of.get(&parent_tgid).copied()
        };
        match root {
            Some(root) => {
                if self.of.insert(child_tgid, root).is_none() {
                    self.order.push_back(child_tgid);
                }
                while self.order.len() > MAX_CHILDREN {
                    if let Some(old) = self.order.pop_front() {
                        self.of.remove(&old);
                    }
                }
            }
            None => {
                if self.of.remove(&child_tgid).is_some() {
                    self.order.retain(|p| *p != child_tgid);
                }
            }
        }
    }

    /// The kube-proxy `pid` descends from, if it was seen forked from it.
    pub fn root_of(&self, pid: i32) -> Option<i32> {
        self.of.get(&pid).copied()
    }

    /// When the followed kube-proxy `pid` exited (its last thread), if that was seen.
    pub fn exit_of(&self, pid: i32) -> Option<u64> {
        self.kube_proxy_exit_ns.filter(|_| self.kube_proxy == Some(pid))
    }

    /// The parent `pid` was seen forked from, among the recent forks.
    pub fn forked_by(&self, pid: i32) -> Option<i32> {
        self.forks.get(&pid).copied()
    }

    /// The followed kube-proxy and its last `n - 1` descendants seen forked, newest last.
    pub fn recent(&self, n: usize) -> Vec<i32> {
        let Some(kp) = self.kube_proxy else { return vec![] };
        let skip = self.order.len().saturating_sub(n.saturating_sub(1));
        std::iter::once(kp)
            .chain(self.order.iter().skip(skip).copied())
            .take(n)
            .collect()
    }

    /// Whether `pid` is the followed kube-proxy or was seen forked from it.
    pub fn is_kube_proxys(&self, pid: i32) -> bool {
        Some(pid) == self.kube_proxy || self.of.contains_key(&pid)
    }

    pub fn len(&self) -> usize {
        self.of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }
}

/// The listening socket and what it told, shared by the task that follows kube-proxy (and
/// drains the socket as it becomes readable) and the nftables watcher's thread (which drains it
/// before it attributes a commit).
#[derive(Default)]
pub struct KubeProxyChildren {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sock: Option<netlink_sys::Socket>,
    children: Children,
    /// Events lost to an overflow of the socket (their children are not remembered).
    lost: u64,
    filter: Option<Filter>,
}

/// How long after its PID was taken off the filter a commit may still have had datagrams
/// dropped by it (the filter is set anew as the process events are read, within milliseconds).
const TAKEN_OFF_FOR: Duration = Duration::from_secs(2);

/// The nftables watcher's socket filter ([`super::socket_filter`]): set to the PIDs of
/// kube-proxy and its children seen forked, while the process events are listened to and no
/// other process changed kube-proxy's rules lately.
struct Filter {
    fd: OwnedFd,
    /// The PIDs the filter on the socket drops, as last set.
    on: Vec<u32>,
    /// PIDs taken off, and when.
    taken_off: Vec<(u32, Instant)>,
    /// Off until then: another process changed kube-proxy's rules, and kube-proxy's commits
    /// must be read whole to see it write them back.
    suspended_until: Option<Instant>,
    /// Why it could not be set, once.
    error: Option<String>,
}

fn os(op: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{op}: {}", errno_text(e.raw_os_error().unwrap_or(0)))
}

/// A connector message carrying the subscription `op`.
fn mcast_message(op: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + CN_MSG_LEN + 4);
    let len = (16 + CN_MSG_LEN + 4) as u32;
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes()); // flags
    m.extend_from_slice(&0u32.to_ne_bytes()); // seq
    m.extend_from_slice(&std::process::id().to_ne_bytes());
    m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
    m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // ack
    m.extend_from_slice(&4u16.to_ne_bytes()); // len
    m.extend_from_slice(&0u16.to_ne_bytes()); // flags
    m.extend_from_slice(&op.to_ne_bytes());
    m
}

/// Where the process events are listened to, when not in the agent's own network namespace
/// (`--proc-events.netns`, hidden: for an agent run in a namespace of its own, as the
/// benchmarks do; the DaemonSet's is the initial one, where the connector is).
pub static NETNS: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// A NETLINK_CONNECTOR socket, opened in [`NETNS`] by a thread that enters it, if set.
fn connector_socket() -> std::io::Result<netlink_sys::Socket> {
    let Some(path) = NETNS.get() else {
        return netlink_sys::Socket::new(NETLINK_CONNECTOR);
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(path)?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            netlink_sys::Socket::new(NETLINK_CONNECTOR)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the thread entering --proc-events.netns panicked",
            ))
        })
    })
}

/// A socket joined to the process events and subscribed (the kernel's ack read back: it
/// refuses outside the initial user and PID namespaces, and without CAP_NET_ADMIN).
fn subscribe() -> Result<netlink_sys::Socket, String> {
    let mut sock = connector_socket().map_err(|e| {
        format!(
            "{} (the proc connector exists in the initial network namespace only)",
            os("opening a NETLINK_CONNECTOR socket")(e)
        )
    })?;
    sock.bind(&netlink_sys::SocketAddr::new(0, CN_IDX_PROC))
        .map_err(os("joining CN_IDX_PROC"))?;
    let _ = sock.set_rx_buf_sz(1 << 20);
    let kernel = netlink_sys::SocketAddr::new(0, 0);
    sock.send_to(&mcast_message(PROC_CN_MCAST_LISTEN), &kernel, 0)
        .map_err(|e| {
            format!(
                "{} (the proc connector exists in the initial network namespace only)",
                os("subscribing to process events")(e)
            )
        })?;
    // The ack comes at once; events may come before it. Bounded: a second at most.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut buf = vec![0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pfd = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(left.as_millis() as u64).unwrap_or(PollTimeout::ZERO);
        let ready = poll(&mut pfd, timeout).map_err(|e| format!("waiting for the subscription's answer: {e}"))?;
        if ready == 0 {
            return Err("the kernel did not answer the subscription to process events within 1 s".into());
        }
        let n = sock
            .recv(&mut &mut buf[..], 0)
            .map_err(os("reading the subscription's answer"))?;
        for e in decode(&buf[..n.min(buf.len())]).into_iter().flatten() {
            if let ProcEvent::Ack { err } = e {
                return if err == 0 {
                    sock.set_non_blocking(true)
                        .map_err(os("setting the socket non-blocking"))?;
                    Ok(sock)
                } else {
                    Err(format!(
                        "the kernel refused process events: {} (they need CAP_NET_ADMIN and the initial user and PID namespaces)",
                        errno_text(err as i32)
                    ))
                };
            }
        }
    }
}

impl KubeProxyChildren {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Follows kube-proxy `pid`: subscribes when one is named and none was, unsubscribes (and
    /// closes) when none is. Returns the socket's fd while subscribed, or why it cannot listen.
    pub fn follow(&self, pid: Option<i32>) -> Result<Option<RawFd>, String> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.children.follow(pid);
        match (pid, inner.sock.is_some()) {
            (Some(_), false) => inner.sock = Some(subscribe()?),
            (None, true) => {
                if let Some(s) = inner.sock.take() {
                    let _ = s.send_to(
                        &mcast_message(PROC_CN_MCAST_IGNORE),
                        &netlink_sys::SocketAddr::new(0, 0),
                        0,
                    );
                }
            }
            _ => {}
        }
        inner.refresh_filter(Instant::now());
        Ok(inner.sock.as_ref().map(|s| s.as_raw_fd()))
    }

    /// Reads what is queued on the socket (never waits).
    pub fn drain(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
    }

    /// For a writer gone: the kube-proxy `pid` descends from, else the parent it was seen forked
    /// from (any process), once what is queued has been read.
    pub fn parent_of_gone(&self, pid: i32) -> Option<i32> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
        inner.children.root_of(pid).or_else(|| inner.children.forked_by(pid))
    }

    /// When the followed kube-proxy `pid` exited (CLOCK_MONOTONIC ns), once what is queued has
    /// been read; None where it was not seen (not listening, another process, events lost).
    pub fn exit_of(&self, pid: i32) -> Option<u64> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
        inner.children.exit_of(pid)
    }

    /// Events lost to overflows so far.
    pub fn lost(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).lost
    }

    /// Keeps a filter on the nftables watcher's socket `fd` (a copy of it) that drops the
    /// notifications of kube-proxy's commits but their NEWGEN, set anew as the process events
    /// tell kube-proxy's children forked.
    pub fn filter(&self, fd: BorrowedFd<'_>) -> Result<(), String> {
        let fd = fd.try_clone_to_owned().map_err(os("copying the nf_tables socket"))?;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.filter = Some(Filter {
            fd,
            on: vec![],
            taken_off: vec![],
            suspended_until: None,
            error: None,
        });
        inner.refresh_filter(Instant::now());
        Ok(())
    }

    /// Takes the filter off for `d`: another process changed kube-proxy's rules.
    pub fn suspend_filter(&self, d: Duration) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if let Some(f) = &mut inner.filter {
            f.suspended_until = now.checked_add(d);
        }
        inner.refresh_filter(now);
    }

    /// Whether the filter may have dropped datagrams of `pid`'s commit, once what is queued has
    /// been read: `pid` is on it, or was taken off within [`TAKEN_OFF_FOR`].
    pub fn dropped(&self, pid: i32) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
        inner.dropped(pid, Instant::now())
    }

    /// For the writer `pid` of a commit, once what is queued has been read (one read for the
    /// three): whether the filter may have dropped its datagrams ([`Self::dropped`]), whether it
    /// is kube-proxy's ([`Self::is_kube_proxys`]), and the kube-proxy it descends from.
    pub fn writer_facts(&self, pid: i32) -> (bool, bool, Option<i32>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
        let dropped = inner.dropped(pid, Instant::now());
        let root = inner.children.root_of(pid);
        (dropped, inner.children.is_kube_proxys(pid), root)
    }

    /// Whether `pid` is the followed kube-proxy or one of its descendants seen forked.
    /// What is queued is read first.
    pub fn is_kube_proxys(&self, pid: i32) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.drain();
        inner.children.is_kube_proxys(pid)
    }

    /// Why the filter could not be set, if it could not.
    pub fn filter_error(&self) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.filter.as_ref().and_then(|f| f.error.clone())
    }
}

impl Inner {
    fn dropped(&self, pid: i32, now: Instant) -> bool {
        let Ok(pid) = u32::try_from(pid) else { return false };
        self.filter.as_ref().is_some_and(|f| {
            f.on.contains(&pid)
                || f.taken_off
                    .iter()
                    .any(|(p, at)| *p == pid && now.saturating_duration_since(*at) < TAKEN_OFF_FOR)
        })
    }

    /// Sets the filter to what the children now say: off while the process events are not
    /// listened to (forks unseen), while suspended, and where setting it failed once.
    fn refresh_filter(&mut self, now: Instant) {
        let listening = self.sock.is_some();
        let Some(f) = &mut self.filter else { return };
        if f.error.is_some() {
            return;
        }
        let suspended = f.suspended_until.is_some_and(|until| now < until);
        let want: Vec<u32> = if listening && !suspended {
            self.children
                .recent(super::socket_filter::MAX_PIDS)
                .into_iter()
                .filter_map(|p| u32::try_from(p).ok())
                .collect()
        } else {
            vec![]
        };
        if want == f.on {
            return;
        }
        let set = super::socket_filter::attach(f.fd.as_fd(), &super::socket_filter::program(&want));
        if let Err(e) = set {
            f.error = Some(format!(
                "setting its socket filter: {}",
                errno_text(e.raw_os_error().unwrap_or(0))
            ));
            // Whatever is on stays on: take it off, or commits of these PIDs go unread.
            if super::socket_filter::detach(f.fd.as_fd()).is_err() {
                return;
            }
        }
        f.taken_off
            .retain(|(_, at)| now.saturating_duration_since(*at) < TAKEN_OFF_FOR);
        let kept = if f.error.is_some() { &[][..] } else { &want[..] };
        for p in f.on.iter().filter(|p| !kept.contains(p)) {
            f.taken_off.push((*p, now));
        }
        f.on = kept.to_vec();
    }

    fn drain(&mut self) {
        self.drain_events();
        self.refresh_filter(Instant::now());
    }

    fn drain_events(&mut self) {
        let Some(sock) = &self.sock else { return };
        let mut buf = [0u8; 8192];
        loop {
            match sock.recv(&mut &mut buf[..], 0) {
                Ok(n) => {
                    for e in decode(&buf[..n.min(buf.len())]).into_iter().flatten() {
                        self.children.take(e);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) => {
                    self.lost = self.lost.saturating_add(1);
                }
                Err(_) => return, // EAGAIN: nothing more queued
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connector message of one process event, as the kernel sends it.
    fn event(what: u32, fields: &[i32]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&1u32.to_ne_bytes()); // cpu
        ev.extend_from_slice(&123u64.to_ne_bytes());
        for f in fields {
            ev.extend_from_slice(&f.to_ne_bytes());
        }
        let mut cn = Vec::new();
        cn.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        cn.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        cn.extend_from_slice(&[0; 8]);
        cn.extend_from_slice(&(ev.len() as u16).to_ne_bytes());
        cn.extend_from_slice(&[0; 2]);
        cn.extend_from_slice(&ev);
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + cn.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&cn);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn fork(parent: i32, child: i32) -> Vec<u8> {
        event(PROC_EVENT_FORK, &[parent, parent, child, child])
    }

    #[test]
    fn decodes_fork_exec_exit_ack_and_others() {
        let mut d = fork(10, 11);
        d.extend(event(PROC_EVENT_FORK, &[10, 10, 12, 10]));
        d.extend(event(PROC_EVENT_EXEC, &[11, 11]));
        d.extend(event(PROC_EVENT_EXIT, &[11, 11, 0, 17]));
        d.extend(event(PROC_EVENT_NONE, &[1]));
        d.extend(event(0x200, &[11, 11]));
        let got: Vec<_> = decode(&d).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                ProcEvent::Fork {
                    parent_tgid: 10,
                    child_tgid: 11,
                    thread: false
                },
                ProcEvent::Fork {
                    parent_tgid: 10,
                    child_tgid: 10,
                    thread: true
                },
                ProcEvent::Exec { tgid: 11 },
                ProcEvent::Exit {
                    tgid: 11,
                    timestamp_ns: 123
                },
                ProcEvent::Ack { err: 1 },
                ProcEvent::Other { what: 0x200 },
            ]
        );
    }

    #[test]
    fn cut_or_foreign_messages_are_errors_not_panics() {
        let whole = fork(10, 11);
        for cut in 0..whole.len() {
            let _ = decode(&whole[..cut]);
        }
        // A fork whose event length says less than its fields.
        let mut short = whole.clone();
        short[16 + 16] = 20;
        assert!(matches!(decode(&short)[0], Err(DecodeError::Cut { what: 1, .. })));
        let mut other = whole;
        other[16] = 9;
        assert_eq!(decode(&other)[0], Err(DecodeError::NotProc { idx: 9, val: 1 }));
    }

    #[test]
    fn children_and_grandchildren_are_remembered_past_their_exit_and_forgotten_on_reuse() {
        let take = |c: &mut Children, d: Vec<u8>| decode(&d).into_iter().flatten().for_each(|e| c.take(e));
        let mut c = Children::default();
        take(&mut c, fork(100, 101));
        assert!(c.is_empty(), "no kube-proxy followed: nothing remembered");
        c.follow(Some(100));
        take(&mut c, fork(100, 101)); // kube-proxy -> sh
        take(&mut c, fork(101, 102)); // sh -> iptables-restore
        take(&mut c, event(PROC_EVENT_FORK, &[100, 100, 103, 100])); // a thread
        take(&mut c, fork(7, 104)); // someone else's
        take(&mut c, event(PROC_EVENT_EXIT, &[102, 102, 0, 17]));
        assert_eq!((c.root_of(101), c.root_of(102)), (Some(100), Some(100)));
        assert_eq!((c.root_of(103), c.root_of(104)), (None, None));
        // PID 102 reused by another parent's child: no longer kube-proxy's.
        take(&mut c, fork(7, 102));
        assert_eq!(c.root_of(102), None);
        // Bounded, the oldest first.
        for p in 0..MAX_CHILDREN as i32 + 10 {
            take(&mut c, fork(100, 10_000 + p));
        }
        assert_eq!(c.len(), MAX_CHILDREN);
        assert_eq!(c.root_of(101), None);
        assert_eq!(c.root_of(10_000 + MAX_CHILDREN as i32 + 9), Some(100));
        // Another kube-proxy: the previous one's children are forgotten.
        c.follow(Some(200));
        assert!(c.is_empty());
    }

    /// The exit time is the followed kube-proxy's last thread's, and only its.
    #[test]
    fn the_filter_s_pids_are_kube_proxy_and_its_newest_descendants_and_a_reused_pid_leaves() {
        let mut c = Children::default();
        assert!(c.recent(4).is_empty(), "nothing followed, nothing filtered");
        c.follow(Some(10));
        for child in 11..20 {
            c.take(ProcEvent::Fork {
                parent_tgid: 10,
                child_tgid: child,
                thread: false,
            });
        }
        c.take(ProcEvent::Fork {
            parent_tgid: 19,
            child_tgid: 30,
            thread: false,
        });
        assert_eq!(c.recent(4), vec![10, 18, 19, 30]);
        assert!(c.is_kube_proxys(10) && c.is_kube_proxys(30) && !c.is_kube_proxys(31));
        // PID 19 reused by another process's child: no longer kube-proxy's.
        c.take(ProcEvent::Fork {
            parent_tgid: 1,
            child_tgid: 19,
            thread: false,
        });
        assert_eq!(c.recent(4), vec![10, 17, 18, 30]);
        assert!(!c.is_kube_proxys(19));
        c.follow(None);
        assert!(c.recent(4).is_empty());
    }

    #[test]
    fn the_followed_kube_proxy_s_exit_time_is_its_last_thread_s() {
        let exit = |tgid: i32, pid: i32, ns: u64| {
            let mut d = event(PROC_EVENT_EXIT, &[pid, tgid, 9, 9]);
            d[16 + CN_MSG_LEN + 8..16 + CN_MSG_LEN + 16].copy_from_slice(&ns.to_ne_bytes());
            d
        };
        let take = |c: &mut Children, d: Vec<u8>| decode(&d).into_iter().flatten().for_each(|e| c.take(e));
        let mut c = Children::default();
        take(&mut c, exit(100, 100, 5));
        assert_eq!(c.exit_of(100), None, "not followed: not remembered");
        c.follow(Some(100));
        take(&mut c, exit(7, 7, 6));
        assert_eq!(c.exit_of(100), None, "another process's exit");
        take(&mut c, exit(100, 101, 2_000)); // a thread
        take(&mut c, exit(100, 100, 1_500)); // the leader, before the last thread
        assert_eq!(c.exit_of(100), Some(2_000));
        assert_eq!(c.exit_of(7), None);
        c.follow(Some(200));
        assert_eq!(c.exit_of(200), None, "a new kube-proxy has not exited");
    }

    #[test]
    fn any_process_s_recent_forks_name_the_parent_of_a_writer_gone_bounded() {
        let take = |c: &mut Children, d: Vec<u8>| decode(&d).into_iter().flatten().for_each(|e| c.take(e));
        let mut c = Children::default();
        take(&mut c, fork(7, 104));
        assert_eq!(c.forked_by(104), None, "not listening: nothing remembered");
        c.follow(Some(100));
        take(&mut c, fork(7, 104)); // a script's iptables-restore
        take(&mut c, fork(100, 105)); // kube-proxy's
        take(&mut c, event(PROC_EVENT_FORK, &[7, 7, 106, 7])); // a thread
        assert_eq!(
            (c.forked_by(104), c.forked_by(105), c.forked_by(106)),
            (Some(7), Some(100), None)
        );
        assert_eq!((c.root_of(104), c.root_of(105)), (None, Some(100)));
        for p in 0..MAX_FORKS as i32 {
            take(&mut c, fork(8, 20_000 + p));
        }
        assert_eq!(c.forked_by(104), None, "the oldest forgotten first");
        assert_eq!(c.forked_by(20_000), Some(8));
        assert_eq!(c.forks.len(), MAX_FORKS);
    }
}
