//! The data plane's rule sets: iptables per backend and family, kube-proxy's nftables table,
//! IPVS, and when and at which generation the netlink counts were made.

use super::{state_set, Out, IPTABLES_BACKENDS};
use crate::snapshot::Snapshot;

/// kube-proxy's nftables maps with fixed names.
const NFT_MAPS: &[&str] = &[
    "service-ips",
    "service-nodeports",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "firewall-ips",
];

/// iptables rule sets, per backend and family.
pub(super) fn iptables(out: &Out, s: &Snapshot) {
    if let Some(ipt) = &s.facts.iptables {
        let rules = out.gauge(
            "proxywatch_iptables_rules",
            "Rules per table as iptables-save shows them (the nft backend counted over netlink).",
            &["backend", "family", "table"],
        );
        let chains = out.gauge(
            "proxywatch_iptables_chains",
            "Chains per table as iptables-save shows them (the nft backend counted over netlink).",
            &["backend", "family", "table"],
        );
        let kube = out.gauge(
            "proxywatch_iptables_kube_chains",
            "kube-proxy chains per family (svc, sep, ext, fw, svl).",
            &["backend", "family", "kind"],
        );
        let kube_rules = out.gauge(
            "proxywatch_iptables_kube_rules",
            "Rules in KUBE-* chains or jumping to them.",
            &["backend", "family"],
        );
        let bytes = out.gauge(
            "proxywatch_iptables_save_bytes",
            "Bytes of iptables-save output.",
            &["backend", "family"],
        );
        let secs = out.gauge(
            "proxywatch_iptables_save_duration_seconds",
            "Wall time of iptables-save (legacy saves, and the iptables-nft-save cross-check).",
            &["backend", "family"],
        );
        for r in &ipt.saves {
            let (b, f) = (r.backend.as_str(), r.family.as_str());
            for (table, c) in &r.counts.tables {
                rules.with_label_values(&[b, f, table]).set(c.rules as f64);
                chains.with_label_values(&[b, f, table]).set(c.chains as f64);
            }
            let k = &r.counts.kube;
            for (kind, n) in [
                ("svc", k.svc),
                ("sep", k.sep),
                ("ext", k.ext),
                ("fw", k.fw),
                ("svl", k.svl),
            ] {
                kube.with_label_values(&[b, f, kind]).set(n as f64);
            }
            kube_rules.with_label_values(&[b, f]).set(r.counts.kube_rules as f64);
        }
        // Save commands only (legacy saves, the latest cross-check): not netlink counts.
        for r in ipt.save_runs() {
            let (b, f) = (r.backend.as_str(), r.family.as_str());
            bytes.with_label_values(&[b, f]).set(r.counts.bytes as f64);
            secs.with_label_values(&[b, f]).set(r.duration_seconds);
        }
        let g = out.gauge(
            "proxywatch_iptables_backend_in_use",
            "State set: 1 for the iptables backend kube-proxy's rules are in, 0 for the others (nft, legacy, default, none).",
            &["backend"],
        );
        state_set(&g, IPTABLES_BACKENDS, &ipt.backend_in_use);
    }
}

/// kube-proxy's nftables tables (nftables mode).
pub(super) fn nftables(out: &Out, s: &Snapshot) {
    if let Some(nft) = &s.facts.nftables {
        let chains = out.gauge(
            "proxywatch_nftables_chains",
            "Chains in kube-proxy's nftables table.",
            &["family"],
        );
        let rules = out.gauge(
            "proxywatch_nftables_rules",
            "Rules in kube-proxy's nftables table.",
            &["family"],
        );
        let svc = out.gauge(
            "proxywatch_nftables_service_chains",
            "service-* chains (one per service port) in kube-proxy's nftables table.",
            &["family"],
        );
        let ep = out.gauge(
            "proxywatch_nftables_endpoint_chains",
            "endpoint-* chains (one per endpoint) in kube-proxy's nftables table.",
            &["family"],
        );
        let local = out.gauge(
            "proxywatch_nftables_local_chains",
            "local-* chains (one per service port with internalTrafficPolicy or externalTrafficPolicy Local and local endpoints) in kube-proxy's nftables table.",
            &["family"],
        );
        let elements = out.gauge(
            "proxywatch_nftables_map_elements",
            "Elements of kube-proxy's fixed maps (service-ips, service-nodeports, ...).",
            &["family", "map"],
        );
        let secs = out.gauge(
            "proxywatch_nftables_list_duration_seconds",
            "Wall time of reading kube-proxy's nftables table (the netlink count).",
            &["family"],
        );
        for t in &nft.tables {
            let f = t.family.as_str();
            chains.with_label_values(&[f]).set(t.counts.chains as f64);
            rules.with_label_values(&[f]).set(t.counts.rules as f64);
            svc.with_label_values(&[f]).set(t.counts.service_chains as f64);
            ep.with_label_values(&[f]).set(t.counts.endpoint_chains as f64);
            local.with_label_values(&[f]).set(t.counts.local_chains as f64);
            secs.with_label_values(&[f]).set(t.duration_seconds);
            // Only kube-proxy's fixed map names: per-service sets would be unbounded.
            for (map, n) in &t.counts.map_elements {
                if NFT_MAPS.contains(&map.as_str()) {
                    elements.with_label_values(&[f, map]).set(*n as f64);
                }
            }
        }
    }
}

/// IPVS: totals only; per-backend detail lives in /snapshot (bounded cardinality).
pub(super) fn ipvs(out: &Out, s: &Snapshot) {
    if let Some(ipvs) = &s.facts.ipvs {
        let vs = out.gauge(
            "proxywatch_ipvs_virtual_servers",
            "IPVS virtual servers by protocol (tcp, udp, sctp, fwm) and scheduler.",
            &["protocol", "scheduler"],
        );
        // One case for protocol values in every metric: lower case, as the conntrack, NAT
        // and rejection series have them (IPVS itself says TCP, FWM).
        for g in &ipvs.groups {
            vs.with_label_values(&[g.protocol.to_ascii_lowercase().as_str(), g.scheduler.as_str()])
                .set(g.count as f64);
        }
        out.gauge(
            "proxywatch_ipvs_real_servers",
            "IPVS real servers over all virtual servers.",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(ipvs.real_servers as f64);
        out.gauge(
            "proxywatch_ipvs_virtual_servers_without_backends",
            "IPVS virtual servers with no real server or only weight-0 ones.",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(ipvs.without_backends as f64);
        // Every protocol always there, 0 when none: an alert on one need not wait for it to appear.
        let wz = out.gauge(
            "proxywatch_ipvs_weight_zero_real_servers",
            "IPVS real servers at weight 0 (no new connections; kube-proxy's terminating TCP endpoints until their connections end), by protocol of their virtual server (tcp, udp, sctp, fwm).",
            &["protocol"],
        );
        for p in ["TCP", "UDP", "SCTP", "FWM"] {
            let n = ipvs.weight_zero_by_protocol.get(p).copied().unwrap_or(0);
            wz.with_label_values(&[p.to_ascii_lowercase().as_str()]).set(n as f64);
        }
        out.gauge(
            "proxywatch_ipvs_weight_zero_max_seconds",
            "Longest time an IPVS real server now at weight 0 has been so, from the first reading that showed it at 0 (a lower bound); 0 when none.",
            &[],
        )
        .with_label_values(&[] as &[&str])
        .set(s.derived.ipvs_weight_zero.as_ref().map_or(0.0, |a| a.max_seconds));
        if let Some(st) = &ipvs.stats {
            for (name, help, v) in [
                (
                    "proxywatch_ipvs_connections_total",
                    "Connections IPVS scheduled (/proc/net/ip_vs_stats).",
                    st.connections,
                ),
                (
                    "proxywatch_ipvs_incoming_packets_total",
                    "Packets IPVS received.",
                    st.incoming_packets,
                ),
                (
                    "proxywatch_ipvs_outgoing_packets_total",
                    "Packets IPVS sent.",
                    st.outgoing_packets,
                ),
                (
                    "proxywatch_ipvs_incoming_bytes_total",
                    "Bytes IPVS received.",
                    st.incoming_bytes,
                ),
                (
                    "proxywatch_ipvs_outgoing_bytes_total",
                    "Bytes IPVS sent.",
                    st.outgoing_bytes,
                ),
            ] {
                out.counter(name, help, &[]).with_label_values(&[] as &[&str]).inc_by(v);
            }
        }
        if let Some(iface) = &ipvs.interface {
            let g = out.gauge(
                "proxywatch_ipvs_interface_addresses",
                "Addresses bound to kube-ipvs0 by family; absent when the interface does not exist.",
                &["family"],
            );
            if iface.exists {
                let v6 = iface.addresses.iter().filter(|a| a.contains(':')).count();
                g.with_label_values(&["ipv4"]).set((iface.addresses.len() - v6) as f64);
                g.with_label_values(&["ipv6"]).set(v6 as f64);
            }
        }
    }
}

/// When and at which nf_tables generation the rule-set counts were made, and
/// the iptables-nft-save cross-check.
pub(super) fn netlink_counts(out: &Out, s: &Snapshot) {
    let mut counts = Vec::new();
    if let Some(ipt) = &s.facts.iptables {
        for r in &ipt.saves {
            if let Some(n) = &r.netlink {
                counts.push(("iptables", r.family.as_str(), n));
            }
        }
        if let Some(c) = &ipt.cross_check {
            let g = |name, help| out.gauge(name, help, &[]).with_label_values(&[] as &[&str]);
            g(
                "proxywatch_iptables_count_mismatches",
                "Counts iptables-nft-save and netlink disagree on at the latest cross-check (same generation).",
            )
            .set(c.mismatches.len() as f64);
            g(
                "proxywatch_iptables_cross_check_timestamp_seconds",
                "Unix time of the latest iptables-nft-save cross-check.",
            )
            .set(c.at_seconds);
        }
    }
    if let Some(nft) = &s.facts.nftables {
        for t in &nft.tables {
            if let Some(n) = &t.netlink {
                counts.push(("nftables", t.family.as_str(), n));
            }
        }
    }
    if counts.is_empty() {
        return;
    }
    let generation = out.gauge(
        "proxywatch_rules_count_generation",
        "nf_tables ruleset generation the rule counts were made at (over netlink).",
        &["probe", "family"],
    );
    let at = out.gauge(
        "proxywatch_rules_counted_timestamp_seconds",
        "Unix time the rule counts were made; older than the probe run when reused at an unchanged generation.",
        &["probe", "family"],
    );
    let secs = out.gauge(
        "proxywatch_rules_count_duration_seconds",
        "Wall time of the latest netlink rule count; 0 when reused at an unchanged generation.",
        &["probe", "family"],
    );
    for (probe, family, n) in counts {
        generation
            .with_label_values(&[probe, family])
            .set(f64::from(n.generation));
        at.with_label_values(&[probe, family]).set(n.counted_at_seconds);
        secs.with_label_values(&[probe, family]).set(n.count_seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::super::render;

    #[test]
    fn family_is_ipv4_or_ipv6_for_nftables_too() {
        use crate::probe::nftables::{NftTable, NftablesFacts};
        let mut s = crate::evaluate::test_support::healthy();
        s.facts.nftables = Some(NftablesFacts {
            tables: ["ipv4", "ipv6"]
                .map(|f| NftTable {
                    family: f.into(),
                    netlink: Some(Default::default()),
                    ..Default::default()
                })
                .to_vec(),
        });
        let text = render(&s, &[]);
        let families: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split("family=\"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(families.into_iter().collect::<Vec<_>>(), ["ipv4", "ipv6"], "{text}");
        assert!(text.contains("proxywatch_rules_count_generation{family=\"ipv6\",probe=\"nftables\"}"));
        assert_eq!(s.facts.nftables.as_ref().unwrap().tables[1].nft_family(), "ip6");
    }
}
