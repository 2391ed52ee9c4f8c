//! The process holding the xtables lock, as other findings name it: a leaf of evaluate/, so
//! that the lock's finding and kube-proxy's sync findings can both use it without a circle.

use crate::probe::xtables_lock::LockProcess;
use crate::snapshot::Snapshot;

/// Whether `p` is kube-proxy or one of its children (its `iptables-restore`).
pub(super) fn is_kube_proxy(s: &Snapshot, p: &LockProcess) -> bool {
    let Some(kp) = s.facts.kube_proxy.as_ref().and_then(|k| k.process.as_ref()) else {
        return false;
    };
    let pid = kp.pid;
    p.process.pid.and_then(|x| i32::try_from(x).ok()) == Some(pid) || p.process.parent_pid == Some(pid)
}

/// The holder, in the words other findings' remediations use: `flock (PID 42) ... for 12 s`.
pub(super) fn holder_line(s: &Snapshot) -> Option<String> {
    let f = s.facts.xtables_lock.as_ref()?;
    let h = f.holder.as_ref()?;
    if is_kube_proxy(s, h) {
        return None;
    }
    let held = s.derived.xtables_lock.as_ref().map_or(0.0, |h| h.held_seconds);
    Some(format!(
        "{} has held {} for {held:.0} s (see iptables_lock_held)",
        h.process.describe(),
        f.path
    ))
}
