//! kube-proxy's exit at its instant: a pidfd (`pidfd_open(2)`) on the process the kube_proxy
//! probe found (`ProbeContext::kube_proxy_found`), polled by the runtime's reactor. A pidfd becomes
//! readable when its process exits, so the watch costs nothing until then: no timer, no read of
//! `/proc`. At the exit it reports [`Event::ProcessExited`] with the exit's time; the
//! scheduler wakes the kube_proxy probe, and the history stage starts kube-proxy's absence (and
//! so `--kube-proxy.down-grace`) at that time, not at the probe's next run.
//!
//! The time is the kernel's: the exit event of the process's last thread, from the process
//! events the sources share ([`super::Shared`]; `do_exit` sends it before it wakes the pidfd, so
//! it is queued by the time the pidfd is readable). On a loaded node the agent may get a CPU
//! a while after the exit; the kernel's timestamp does not move with that. Where the process
//! events cannot be listened to (outside the initial network namespace, without
//! CAP_NET_ADMIN), the time is when the pidfd was seen readable.
//!
//! The agent does not wait on the process (it is not its parent: the container runtime reaps
//! kube-proxy), so nothing is left behind. A PID is opened only after the probe found it, and
//! the start time read back after the open tells whether the PID still names that process (a
//! PID reused meanwhile is not watched). Where pidfds are missing (Linux < 5.3, a seccomp
//! profile that refuses the call) or the agent does not see the node's PIDs (`--host-root`
//! not `/`), it says why in an [`Event::ExitUnavailable`]: the absence then starts at the probe's
//! next run, as before.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::Sender;

use super::proc_events::KubeProxyChildren;
use super::{Event, Shared};
use crate::netlink::replay::KernelSource;
use crate::probe::{ProbeContext, WatchedProcess};
use crate::timefmt::unix_seconds;

/// Start times read back after the open agree within this many seconds (both come from the same
/// `/proc/<pid>/stat` field and `btime`: they are equal unless the PID names another process).
const SAME_START_SECONDS: f64 = 0.5;

/// Starts the watch as a task of the current runtime.
pub fn start(ctx: Arc<ProbeContext>, shared: Arc<Shared>, tx: Sender<Event>) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            let children = shared.follow_kube_proxy(&ctx, &tx);
            rt.spawn(run(ctx, children, tx));
        }
        Err(e) => {
            let _ = tx.try_send(Event::ExitUnavailable(format!("no runtime to run in: {e}")));
        }
    }
}

/// Whether pidfds work here: opening one on the agent itself.
fn probe_pidfd() -> Result<(), String> {
    let me = rustix::process::getpid();
    rustix::process::pidfd_open(me, rustix::process::PidfdFlags::NONBLOCK)
        .map(drop)
        .map_err(|e| format!("pidfd_open: {e} (Linux 5.3 or later, and a seccomp profile that allows it)"))
}

/// A pidfd on `p`, once its start time says it is still that process; None when it is gone
/// already or the PID names another process now.
fn open(ctx: &ProbeContext, p: WatchedProcess) -> Option<AsyncFd<OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(p.pid).filter(|_| p.pid > 0)?;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK).ok()?;
    // The pidfd now pins the process: the start time read after the open is its own.
    let start = crate::probe::kube_proxy::process::start_time(&ctx.host, p.pid).ok()?;
    if (start - p.start_time_seconds).abs() > SAME_START_SECONDS {
        return None;
    }
    // Deprecated for a raw fd closed while still registered (tokio#8587); this one is an
    // OwnedFd that the AsyncFd owns and closes after deregistering it. Its replacement is unsafe.
    #[allow(deprecated)]
    AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok()
}

async fn run(ctx: Arc<ProbeContext>, children: Arc<KubeProxyChildren>, tx: Sender<Event>) {
    if !matches!(ctx.host.kernel(), KernelSource::Live) {
        let _ = tx
            .send(Event::ExitUnavailable(format!(
                "--host-root is not / (kernel answers from {}): no process to watch",
                ctx.host.kernel().as_str()
            )))
            .await;
        return;
    }
    if let Err(why) = probe_pidfd() {
        let _ = tx
            .send(Event::ExitUnavailable(format!(
                "{why}; kube-proxy's absence starts at the kube_proxy probe's next run"
            )))
            .await;
        return;
    }
    if tx.send(Event::ExitWatching).await.is_err() {
        return;
    }
    let mut found = ctx.kube_proxy_found.subscribe();
    // The process whose exit was reported: not watched again while the probe still names it.
    let mut reported: Option<WatchedProcess> = None;
    loop {
        let target = *found.borrow_and_update();
        let watched = target
            .filter(|t| Some(*t) != reported)
            .and_then(|t| Some((t, open(&ctx, t)?)));
        match watched {
            None => tokio::select! {
                changed = found.changed() => if changed.is_err() { return },
                _ = tx.closed() => return,
            },
            Some((t, fd)) => tokio::select! {
                ready = fd.readable() => {
                    let seen = SystemTime::now();
                    if ready.is_err() {
                        return;
                    }
                    let at_seconds = exit_time(children.exit_of(t.pid), seen);
                    reported = Some(t);
                    if tx.send(Event::ProcessExited { pid: t.pid, at_seconds }).await.is_err() {
                        return;
                    }
                }
                changed = found.changed() => if changed.is_err() { return },
                _ = tx.closed() => return,
            },
        }
    }
}

/// The exit's Unix time: the kernel's CLOCK_MONOTONIC `exit_ns` carried to the wall clock, or,
/// without it (or from a clock that disagrees), `seen`.
pub fn exit_time(exit_ns: Option<u64>, seen: SystemTime) -> f64 {
    let seen_unix = unix_seconds(seen);
    let Some(exit_ns) = exit_ns else { return seen_unix };
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let now_ns = (now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128) as f64;
    let ago = (now_ns - exit_ns as f64) / 1e9;
    // An exit seen before it happened, or an hour before: not this exit's time.
    if !(0.0..3600.0).contains(&ago) {
        return seen_unix;
    }
    (unix_seconds(SystemTime::now()) - ago).min(seen_unix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::kube_proxy::process::start_time;

    fn live_ctx() -> Arc<ProbeContext> {
        Arc::new(crate::probe::test_context(crate::host::Host::new("/")))
    }

    /// The watch started (its first word said), and a child of the test with its PID and start
    /// time, not yet named to the watch.
    async fn watch_started_with_a_child() -> (
        Arc<ProbeContext>,
        tokio::sync::mpsc::Receiver<Event>,
        std::process::Child,
        i32,
        f64,
    ) {
        let ctx = live_ctx();
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        start(ctx.clone(), Shared::new(), tx);
        assert_eq!(rx.recv().await, Some(Event::ExitWatching));
        let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let started = start_time(&ctx.host, pid).unwrap();
        (ctx, rx, child, pid, started)
    }

    /// A child of the test exits: the watch says so with the time it saw it, once, and watches
    /// the next process the probe names. The test reaps its own child (the agent reaps none).
    #[tokio::test]
    async fn an_exit_is_reported_once_with_its_time() {
        let (ctx, mut rx, mut child, pid, started) = watch_started_with_a_child().await;
        ctx.kube_proxy_found.found(Some(WatchedProcess {
            pid,
            start_time_seconds: started,
        }));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(rx.try_recv().is_err(), "nothing before the exit");
        let killed = unix_seconds(SystemTime::now());
        child.kill().unwrap();
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
            .await
            .expect("the exit is reported")
            .unwrap();
        let Event::ProcessExited { pid: p, at_seconds } = event else {
            panic!("{event:?}")
        };
        assert_eq!(p, pid);
        assert!(at_seconds >= killed, "{at_seconds} < {killed}");
        child.wait().unwrap();
        // The probe still names it (a reading in flight): not reported twice.
        ctx.kube_proxy_found.found(None);
        ctx.kube_proxy_found.found(Some(WatchedProcess {
            pid,
            start_time_seconds: started,
        }));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(rx.try_recv().is_err());
    }

    /// A PID whose start time is not the one the probe found (reused) is not watched.
    #[tokio::test]
    async fn a_reused_pid_is_not_watched() {
        let (ctx, mut rx, mut child, pid, started) = watch_started_with_a_child().await;
        ctx.kube_proxy_found.found(Some(WatchedProcess {
            pid,
            start_time_seconds: started - 100.0,
        }));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(rx.try_recv().is_err(), "another process's exit is not kube-proxy's");
    }

    #[tokio::test]
    async fn a_recorded_root_has_no_process_to_watch() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Arc::new(crate::probe::test_context(crate::host::Host::new(dir.path())));
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        start(ctx, Shared::new(), tx);
        let Some(Event::ExitUnavailable(why)) = rx.recv().await else {
            panic!()
        };
        assert!(why.contains("--host-root is not /"), "{why}");
    }
}
