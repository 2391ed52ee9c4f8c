//! The nf_tables watcher (`derived.nftables_watch`): whether it listens, and commits by writer
//! class only (`kube-proxy` / `other`: never a PID or a name, which would grow without bound);
//! who wrote is in /snapshot's journal and in the finding. Absent when the watcher is off.

use super::Out;
use crate::history::nftables_watch::{WatchState, WriterClass};
use crate::snapshot::Snapshot;

pub(super) fn render(out: &Out, s: &Snapshot) {
    let Some(w) = &s.derived.nftables_watch else {
        return;
    };
    out.gauge(
        "proxywatch_nftables_watch_up",
        "1 while the agent listens to nf_tables notifications (NFNLGRP_NFTABLES), 0 when it cannot (why: /snapshot derived.nftables_watch.error; the rule probes keep polling).",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(if w.state == WatchState::Watching { 1.0 } else { 0.0 });
    let commits = out.counter(
        "proxywatch_nftables_commits_total",
        "nf_tables commits seen since the agent started, by writer class: kube-proxy (its process or a child of it) or other.",
        &["writer"],
    );
    for (class, n) in [
        (WriterClass::KubeProxy, w.commits_kube_proxy_total),
        (WriterClass::Other, w.commits_other_total),
    ] {
        commits.with_label_values(&[class.as_str()]).inc_by(n);
    }
    out.counter(
        "proxywatch_nftables_notifications_lost_total",
        "Times nf_tables notifications were lost (the socket overflowed, ENOBUFS); each time the rules are re-read.",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .inc_by(w.notifications_lost_total);
}
