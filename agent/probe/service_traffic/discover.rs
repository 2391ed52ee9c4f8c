//! Finding the targets in kube-proxy's rules: a Service's name is in
//! kube-proxy's comment on its `KUBE-SERVICES` rule (iptables) or in the name
//! of the chain its `service-ips` element goes to (nftables).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::super::service_endpoints::iptables::{IptEndpoints, LegacySaves};
use super::super::service_endpoints::names::{iptables_entry, link_of_chain, name_of_chain, NamedPort};
use super::super::service_endpoints::nftables::{self, NftEndpoints};
use super::super::service_endpoints::{ServicePort, ServiceTable};
use crate::host::Host;
use crate::netlink::nft::{Chain, Element, Family, Rule, Set};
use crate::netlink::nft_count::{self, Tally};
use crate::netlink::{NlError, NETLINK_NETFILTER};

/// One family's walk: kube-proxy's service table, and the service ports of the wanted names.
struct Walk<'a> {
    family: Family,
    ipt: IptEndpoints,
    nft: NftEndpoints,
    wanted: &'a [String],
    named: Vec<NamedPort>,
}

impl Walk<'_> {
    fn want(&self, name: Option<&str>) -> Option<String> {
        let n = name?;
        self.wanted.iter().any(|w| w == n).then(|| n.to_string())
    }
}

impl Tally for Walk<'_> {
    fn wants(&self, table: &str) -> bool {
        self.ipt.wants(table) || self.nft.wants(table)
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if r.table == nftables::TABLE {
            return self.nft.rule(r);
        }
        if !(r.table == "nat" && (r.chain == "KUBE-SERVICES" || r.chain == "KUBE-NODEPORTS")) {
            return self.ipt.rule(r);
        }
        let f = crate::netlink::nft_expr::rule_facts(self.family, r)?;
        self.ipt.add(r.table, r.chain, &f);
        let x = crate::probe::rule_counters::extra(r)?;
        let comment = x
            .comment
            .or_else(|| r.userdata.and_then(crate::probe::rule_counters::userdata_comment));
        if let Some((name, svc, link)) = iptables_entry(r.chain, comment, &f, self.family == Family::Ip6) {
            if let Some(name) = self.want(Some(name)) {
                self.named.push((name, svc, link.to_string()));
            }
        }
        Ok(())
    }

    fn set(&mut self, s: &Set<'_>) -> bool {
        s.table == nftables::TABLE && self.nft.set(s)
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}

    fn element_detail(&self) -> bool {
        true
    }

    fn element(&mut self, set: &str, e: Element<'_>) -> Result<(), NlError> {
        // A ClusterIP (its service- chain: not a LoadBalancer IP's external- one), a NodePort.
        let key = match (set, e.chain) {
            ("service-ips", Some(c)) if c.starts_with("service-") => self.nft.address_key(set, e.key).ok(),
            ("service-nodeports", Some(_)) => self.nft.port_key(set, e.key).ok(),
            _ => None,
        };
        if let (Some(svc), Some(chain)) = (key, e.chain) {
            if let (Some(name), Some(link)) = (self.want(name_of_chain(chain)), link_of_chain(chain)) {
                self.named.push((name, svc, link.to_string()));
            }
        }
        self.nft.element(set, e)
    }
}

/// The wanted Services' ports and their current endpoints, at one generation.
#[derive(Debug, Default)]
pub struct Found {
    pub sources: Vec<&'static str>,
    /// (name, service port, link), sorted.
    pub named: Vec<NamedPort>,
    /// The named ports' endpoints only (the rest of the table is not kept).
    pub table: ServiceTable,
}

/// (generation, the names looked for, what was found).
type Kept = (u32, Vec<String>, Arc<Found>);

/// The targets kept between runs, for one generation and one list of names.
#[derive(Debug, Default)]
pub struct TrafficMemory {
    found: Mutex<Option<Kept>>,
}

pub(super) fn find(
    host: &Host,
    memory: &TrafficMemory,
    wanted: &[String],
    deadline: Instant,
) -> Result<(u32, Arc<Found>), NlError> {
    let mut why = Vec::new();
    for _ in 0..nft_count::ATTEMPTS {
        let gen = nft_count::generation(host.netlink(NETLINK_NETFILTER)?, deadline)?;
        if let Ok(m) = memory.found.lock() {
            if let Some((g, w, f)) = m.as_ref() {
                if *g == gen && w == wanted {
                    return Ok((gen, f.clone()));
                }
            }
        }
        let mut found = Found::default();
        let mut gens = Vec::new();
        let mut full = ServiceTable::default();
        for family in [Family::Ip, Family::Ip6] {
            let plan = nft_count::Plan { family, sets: true };
            let c = nft_count::count(&mut || host.netlink(NETLINK_NETFILTER), plan, deadline, &|| Walk {
                family,
                ipt: IptEndpoints::new(family),
                nft: NftEndpoints::new(family),
                wanted,
                named: Vec::new(),
            })?;
            gens.push(c.generation);
            found.named.extend(c.tally.named);
            for (name, t) in [
                ("iptables-nft", c.tally.ipt.finish()),
                ("nftables", c.tally.nft.finish()),
            ] {
                if !t.services.is_empty() && !found.sources.contains(&name) {
                    found.sources.push(name);
                }
                full.merge(t);
            }
        }
        if gens.iter().any(|g| *g != gens[0]) {
            why.push(format!("generations {gens:?}"));
            continue;
        }
        found.named.sort();
        found.named.dedup();
        for (_, svc, _) in &found.named {
            if let Some(eps) = full.services.get(svc) {
                found.table.services.insert(*svc, eps.clone());
            }
            if let Some(u) = full.undecoded.get(svc) {
                found.table.undecoded.insert(*svc, u.clone());
            }
        }
        let found = Arc::new(found);
        if let Ok(mut m) = memory.found.lock() {
            *m = Some((gens[0], wanted.to_vec(), found.clone()));
        }
        return Ok((gens[0], found));
    }
    Err(NlError::Changed(format!(
        "a commit between the two families' walks, {} times: {}",
        why.len(),
        why.join("; ")
    )))
}

/// What nf_tables gave, with the iptables-legacy part added: the targets' ports
/// in the iptables probe's latest legacy saves (their names from kube-proxy's
/// comments, [`crate::probe::service_endpoints::iptables::SaveText::naming`])
/// and their endpoints. Legacy rules have no generation to keep them by: read
/// each run (a few ports).
pub(super) fn with_legacy(found: Arc<Found>, legacy: &LegacySaves) -> Arc<Found> {
    let named = legacy.named();
    if named.is_empty() {
        return found;
    }
    let mut f = Found {
        sources: found.sources.clone(),
        named: found.named.clone(),
        table: found.table.clone(),
    };
    let (tables, _) = legacy.tables();
    for (_, svc, _) in &named {
        for t in &tables {
            if let Some(eps) = t.services.get(svc) {
                f.table.services.insert(*svc, eps.clone());
            }
            if let Some(u) = t.undecoded.get(svc) {
                f.table.undecoded.insert(*svc, u.clone());
            }
        }
    }
    f.sources.push("iptables-legacy");
    f.named.extend(named);
    f.named.sort();
    f.named.dedup();
    Arc::new(f)
}

/// IPVS's part, for names the rules did not give (kube-proxy's IPVS mode names no Service):
/// each virtual server at a given address ([`super::Address`]) is that Service's port, its
/// real servers above weight 0 its endpoints (one at weight 0 is draining: IPVS sends it no
/// new connection). A name the nf_tables or legacy rules gave is left as they give it (a
/// rollback's leftover IPVS table must not replace the rules in force). Read from
/// `/proc/net/ip_vs` each run (ipvsadm would load `ip_vs`; the file is there only when it is
/// loaded): a few lines per virtual server.
pub(super) fn with_ipvs(
    found: Arc<Found>,
    host: &Host,
    addresses: &[super::Address],
) -> Result<Arc<Found>, super::ProbeError> {
    const PROC_IP_VS: &str = "/proc/net/ip_vs";
    let open: Vec<&super::Address> = addresses
        .iter()
        .filter(|a| !found.named.iter().any(|(n, _, _)| *n == a.service))
        .collect();
    if open.is_empty() {
        return Ok(found);
    }
    let Some(text) = host.read_optional(PROC_IP_VS)? else {
        return Ok(found);
    };
    let table = crate::probe::ipvs::proc::parse_proc_ip_vs(&host.path(PROC_IP_VS).display().to_string(), &text)?;
    let mut f = Found {
        sources: found.sources.clone(),
        named: found.named.clone(),
        table: found.table.clone(),
    };
    let mut any = false;
    for vs in table.iter().filter(|v| v.fwmark.is_none()) {
        let (Ok(address), Some(protocol)) = (vs.address.parse::<std::net::IpAddr>(), ip_protocol(&vs.protocol)) else {
            continue;
        };
        let svc = ServicePort {
            address,
            port: vs.port,
            protocol,
        };
        for a in open.iter().filter(|a| a.ip == address) {
            f.named.push((a.service.clone(), svc, "ipvs".into()));
            let eps = vs
                .real_servers
                .iter()
                .filter(|r| r.weight > 0)
                .filter_map(|r| Some((r.address.parse().ok()?, Some(r.port))))
                .collect();
            f.table.services.insert(svc, eps);
            any = true;
        }
    }
    if !any {
        return Ok(found);
    }
    f.sources.push("ipvs");
    f.named.sort();
    f.named.dedup();
    Ok(Arc::new(f))
}

/// IPVS's protocol name as its IP protocol number.
fn ip_protocol(name: &str) -> Option<u8> {
    match name {
        "TCP" => Some(6),
        "UDP" => Some(17),
        "SCTP" => Some(132),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::service_endpoints::names::name_of_comment;
    use super::super::super::service_endpoints::ServicePort;
    use super::*;
    use crate::netlink::nft_expr::RuleFacts;

    fn address(service: &str, ip: &str) -> super::super::Address {
        format!("{service}={ip}").parse().unwrap()
    }

    #[test]
    fn ipvs_virtual_servers_at_the_given_addresses_are_those_services_ports() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc/net")).unwrap();
        // /proc/net/ip_vs as the kernel prints it (hex): 10.96.0.1:443 TCP to two real
        // servers, one drained (weight 0); 10.96.0.10:53 UDP and TCP; 10.96.5.5:80.
        std::fs::write(
            root.path().join("proc/net/ip_vs"),
            "IP Virtual Server version 1.2.1 (size=4096)\n\
             Prot LocalAddress:Port Scheduler Flags\n\
             \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
             TCP  0A600001:01BB rr\n\
             \x20 -> AC120002:192B      Masq    1      0          0\n\
             \x20 -> AC120003:192B      Masq    0      4          0\n\
             UDP  0A60000A:0035 rr\n\
             \x20 -> 0AF40002:0035      Masq    1      0          0\n\
             TCP  0A60000A:0035 rr\n\
             \x20 -> 0AF40002:0035      Masq    1      0          0\n\
             TCP  0A600505:0050 rr\n\
             \x20 -> 0AF40505:1F90      Masq    1      0          0\n",
        )
        .unwrap();
        let host = Host::new(root.path());
        let given = [
            address("default/kubernetes", "10.96.0.1"),
            address("kube-system/kube-dns", "10.96.0.10"),
        ];
        let f = with_ipvs(Arc::new(Found::default()), &host, &given).unwrap();
        assert_eq!(f.sources, ["ipvs"]);
        let named: Vec<(&str, String)> = f
            .named
            .iter()
            .map(|(n, p, _)| (n.as_str(), crate::probe::service_endpoints::service_label(p)))
            .collect();
        assert_eq!(
            named,
            [
                ("default/kubernetes", "10.96.0.1:443/tcp".to_string()),
                ("kube-system/kube-dns", "10.96.0.10:53/tcp".to_string()),
                ("kube-system/kube-dns", "10.96.0.10:53/udp".to_string()),
            ]
        );
        let api = f.named[0].1;
        // The drained real server is no endpoint of the path.
        assert_eq!(f.table.services[&api], [("172.18.0.2".parse().unwrap(), Some(6443))]);
        assert_eq!(f.table.is_current(&api, "172.18.0.3".parse().unwrap()), Some(false));
        // A name the rules gave stays theirs; nothing at the address: nothing added.
        let ruled = Found {
            sources: vec!["iptables-nft"],
            named: vec![("default/kubernetes".into(), api, "L".into())],
            table: ServiceTable::default(),
        };
        let f = with_ipvs(Arc::new(ruled), &host, &given[..1]).unwrap();
        assert_eq!((f.sources.clone(), f.named.len()), (vec!["iptables-nft"], 1));
        let f = with_ipvs(
            Arc::new(Found::default()),
            &host,
            &[address("default/kubernetes", "10.1.1.1")],
        )
        .unwrap();
        assert!(f.sources.is_empty() && f.named.is_empty());
        // No IPVS: nothing read, nothing added; a garbled table is an error, said.
        let empty = tempfile::tempdir().unwrap();
        assert!(with_ipvs(Arc::new(Found::default()), &Host::new(empty.path()), &given)
            .unwrap()
            .named
            .is_empty());
        std::fs::write(root.path().join("proc/net/ip_vs"), "garbage\n").unwrap();
        assert!(with_ipvs(Arc::new(Found::default()), &host, &given).is_err());
    }

    #[test]
    fn names_in_kube_proxys_rules() {
        // pkg/proxy/iptables: servicePortName + " cluster IP"; a port without a name: "ns/name".
        assert_eq!(
            name_of_comment("default/kubernetes:https cluster IP"),
            Some("default/kubernetes")
        );
        assert_eq!(name_of_comment("ns/web cluster IP"), Some("ns/web"));
        assert_eq!(
            name_of_comment("kubernetes service nodeports; NOTE: this must be the last rule in this chain"),
            None
        );
        // pkg/proxy/nftables: servicePortChainNamePrefix + hash + "-" + ns/name/proto/port.
        assert_eq!(
            name_of_chain("service-2QRHZV4L-default/kubernetes/tcp/https"),
            Some("default/kubernetes")
        );
        assert_eq!(
            name_of_chain("external-HVFWP5L3-kube-system/kube-dns/udp/dns"),
            Some("kube-system/kube-dns")
        );
        assert_eq!(name_of_chain("service-X-default"), None);
        assert_eq!(
            name_of_chain("endpoint-X-default/kubernetes/tcp/https__10.0.0.1/6443"),
            None
        );
    }

    #[test]
    fn links_pair_a_cluster_ip_with_its_node_port() {
        assert_eq!(link_of_chain("KUBE-SVC-NPX46M4PTMTKRN6Y"), Some("NPX46M4PTMTKRN6Y"));
        assert_eq!(link_of_chain("KUBE-EXT-NPX46M4PTMTKRN6Y"), Some("NPX46M4PTMTKRN6Y"));
        assert_eq!(
            link_of_chain("external-2QRHZV4L-default/kubernetes/tcp/https"),
            Some("2QRHZV4L")
        );
        assert_eq!(link_of_chain("KUBE-MARK-MASQ"), None);
        let f = RuleFacts {
            daddr: Some("10.96.0.20".parse().unwrap()),
            dport: Some(80),
            l4proto: Some(6),
            jumps: vec!["KUBE-SVC-WEB".into()],
            ..RuleFacts::default()
        };
        let web = ServicePort {
            address: "10.96.0.20".parse().unwrap(),
            port: 80,
            protocol: 6,
        };
        assert_eq!(
            iptables_entry("KUBE-SERVICES", Some("ns/web:http cluster IP"), &f, false),
            Some(("ns/web", web, "WEB"))
        );
        // A LoadBalancer IP's rule is not the ClusterIP.
        assert_eq!(
            iptables_entry("KUBE-SERVICES", Some("ns/web:http loadbalancer IP"), &f, false),
            None
        );
        let np = RuleFacts {
            daddr: None,
            jumps: vec!["KUBE-EXT-WEB".into()],
            ..f.clone()
        };
        assert_eq!(
            iptables_entry("KUBE-NODEPORTS", Some("ns/web:http"), &np, false),
            Some(("ns/web", ServicePort::node_port(false, 6, 80), "WEB"))
        );
    }
}
