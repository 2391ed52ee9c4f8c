//! kube-proxy's rejected and dropped Service traffic: per reason and protocol
//! only (bounded: 3 reasons × tcp/udp/sctp, `any` for invalid); per-Service
//! detail is in /snapshot. Absent while no source of the counters was read
//! (nftables mode, a failed read, the first reading): never a false 0.

use super::Out;
use crate::snapshot::Snapshot;

pub(super) fn render(out: &Out, s: &Snapshot) {
    let Some(r) = &s.derived.service_rejects else {
        return;
    };
    if r.sources.is_empty() || r.totals.is_empty() {
        return;
    }
    let rate = out.gauge(
        "proxywatch_service_rejected_packets_per_second",
        "Packets kube-proxy's rules rejected (reason no_endpoints) or dropped (no_local_endpoints, invalid) per second, over the history window.",
        &["reason", "protocol"],
    );
    let total = out.counter(
        "proxywatch_service_rejected_packets_total",
        "Packets kube-proxy's rules rejected or dropped since the agent started (increases of the rules' counters, resets handled).",
        &["reason", "protocol"],
    );
    for t in &r.totals {
        let l = [t.reason.as_str(), t.protocol.as_str()];
        rate.with_label_values(&l).set(t.packets_per_second);
        total.with_label_values(&l).inc_by(t.packets_total);
    }
    out.gauge(
        "proxywatch_service_rejected_undecoded_rules",
        "kube-proxy reject/drop rules whose counter the agent could not read (their traffic is not in the rates).",
        &[],
    )
    .with_label_values(&[] as &[&str])
    .set(r.undecoded as f64);
}
