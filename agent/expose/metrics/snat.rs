//! Source NAT: the fullest group's fill, the groups and the rules (with or
//! without random-fully). Absent while the conntrack_stale probe has no
//! reading (never a false 0); per-group detail is in /snapshot, capped.

use super::Out;
use crate::snapshot::Snapshot;

pub(super) fn snat(out: &Out, s: &Snapshot) {
    let Some(f) = s.facts.conntrack_stale.as_ref().and_then(|c| c.snat.as_ref()) else {
        return;
    };
    let one = |name: &str, help: &str, v: f64| {
        out.gauge(name, help, &[]).with_label_values(&[] as &[&str]).set(v);
    };
    one(
        "proxywatch_snat_ports_fill_ratio",
        "Translated source ports in use / ports the rule allows, of the fullest (translated source, destination, port, protocol) group of source-NATed conntrack entries at the latest conntrack_stale check; 0 when none is source-NATed.",
        f.max_fill.unwrap_or(0.0),
    );
    one(
        "proxywatch_snat_entries",
        "Conntrack entries with the SRC_NAT status (TCP, UDP, SCTP, ICMP) at the latest conntrack_stale check.",
        f.entries as f64,
    );
    one(
        "proxywatch_snat_groups",
        "(translated source, destination, port, protocol) groups of those entries.",
        f.groups as f64,
    );
    one(
        "proxywatch_snat_groups_not_counted",
        "Of those, groups beyond the agent's cap (10,000) whose ports were not counted one by one (their entries are in proxywatch_snat_entries).",
        f.groups_dropped as f64,
    );
    // Rules partly unread: a count would pass for all of them (unknown is not 0).
    if !f.rule_errors.is_empty() {
        return;
    }
    let rules = out.gauge(
        "proxywatch_snat_rules",
        "MASQUERADE/SNAT rules of nat POSTROUTING and the chains it reaches (iptables both backends, kube-proxy's nftables table), by whether they pick ports fully at random; absent while some could not be read.",
        &["random_fully"],
    );
    for want in [true, false] {
        let n = f.rules.iter().filter(|r| r.random_fully == want).count();
        rules
            .with_label_values(&[if want { "true" } else { "false" }])
            .set(n as f64);
    }
}
