//! The nf_tables watcher: a `NETLINK_NETFILTER` socket joined to `NFNLGRP_NFTABLES`, read by a
//! thread of its own that sleeps in `recv` until the kernel sends something (no timer at idle).
//! Each datagram goes through the pure decoder ([`super::nft_decode`]); at each NEWGEN the
//! writer is looked up in `/proc` at once ([`super::attribute`]), before anything else, since
//! kube-proxy's `iptables-restore` children exit right after their commit.
//!
//! Notifications are per network namespace: the agent (hostNetwork) sees the node's commits.
//! Joining the group needs CAP_NET_ADMIN; where it fails, or where `nf_tables` is not loaded
//! (joining would make the kernel load it: the agent loads no module), the watcher says why in
//! an [`Event::Unavailable`] and the probes keep their polls. An ENOBUFS (a burst larger than
//! the socket's buffer) is an [`Event::Lost`]: the commit under way is dropped, and the
//! scheduler re-reads the rules.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::Sender;

use super::nft_decode::{Pending, NFNLGRP_NFTABLES};
use super::{attribute, Commit, Event};
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

/// Starts the watcher's thread.
pub fn start(ctx: Arc<ProbeContext>, tx: Sender<Event>) {
    let spawned = std::thread::Builder::new().name("nftables-watch".into()).spawn({
        let tx = tx.clone();
        move || run(&ctx, &tx)
    });
    if let Err(e) = spawned {
        let _ = tx.try_send(Event::Unavailable(format!("starting its thread: {e}")));
    }
}

fn os(op: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{op}: {}", errno_text(e.raw_os_error().unwrap_or(0)))
}

/// The socket, joined to the group.
fn open() -> Result<netlink_sys::Socket, String> {
    let mut sock = netlink_sys::Socket::new(NETLINK_NETFILTER).map_err(os("opening a netlink socket"))?;
    sock.bind_auto().map_err(os("binding the netlink socket"))?;
    // Best effort: above rmem_max the kernel keeps its cap.
    let _ = sock.set_rx_buf_sz(SOCKET_BUFFER);
    sock.add_membership(NFNLGRP_NFTABLES)
        .map_err(os("joining NFNLGRP_NFTABLES"))?;
    Ok(sock)
}

fn run(ctx: &ProbeContext, tx: &Sender<Event>) {
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
    let kube_proxy_name: String = ctx.kube_proxy.process_name.chars().take(COMM_BYTES).collect();
    let mut pending = Pending::default();
    let mut undecoded = 0u32;
    let mut buf = vec![0u8; RECV_BUFFER];
    loop {
        let n = match sock.recv(&mut &mut buf[..], MSG_TRUNC) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) => {
                pending.reset();
                if !send(Event::Lost {
                    at_seconds: unix_seconds(SystemTime::now()),
                }) {
                    return;
                }
                continue;
            }
            Err(e) => {
                send(Event::Unavailable(format!(
                    "{}; the iptables and nftables probes keep polling",
                    os("receiving from netlink")(e)
                )));
                return;
            }
        };
        if n > buf.len() {
            // A datagram cut: its notifications are lost like an overflow's.
            pending.reset();
            if !send(Event::Lost {
                at_seconds: unix_seconds(SystemTime::now()),
            }) {
                return;
            }
            continue;
        }
        for m in messages(&buf[..n]) {
            let Ok(m) = m else {
                undecoded = undecoded.saturating_add(1);
                break;
            };
            match pending.feed(&m) {
                Ok(None) => {}
                Ok(Some(c)) => {
                    let writer = attribute::attribute(&ctx.host, c.pid, c.name.clone());
                    let named = [&writer.name, &writer.parent_name]
                        .iter()
                        .any(|n| n.as_deref() == Some(kube_proxy_name.as_str()));
                    let commit = Commit {
                        at_seconds: unix_seconds(SystemTime::now()),
                        generation: c.generation,
                        writer,
                        named_kube_proxy: named,
                        tables: c.tables,
                        more_tables: c.more_tables,
                        notifications: c.messages,
                        undecoded: std::mem::take(&mut undecoded),
                    };
                    if !send(Event::Commit(commit)) {
                        return;
                    }
                }
                Err(_) => undecoded = undecoded.saturating_add(1),
            }
        }
    }
}
