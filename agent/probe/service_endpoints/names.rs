//! Service names and ports as kube-proxy writes them into its rules: the comments of its
//! iptables entry rules and the names of its nftables chains. Pure readers, shared by the
//! legacy save reader (service_endpoints::iptables) and the service_traffic probe.

use super::ServicePort;
use crate::netlink::nft_expr::RuleFacts;

/// A Service's name from kube-proxy's `KUBE-SERVICES` comment
/// (`ns/name:port cluster IP`, `ns/name cluster IP`).
pub fn name_of_comment(comment: &str) -> Option<&str> {
    let first = comment.split_whitespace().next()?;
    let name = first.split(':').next()?;
    name.contains('/').then_some(name)
}

/// A Service's name from an nftables chain (`service-HASH-ns/name/proto/port`,
/// `external-HASH-...`).
pub fn name_of_chain(chain: &str) -> Option<&str> {
    let rest = chain
        .strip_prefix("service-")
        .or_else(|| chain.strip_prefix("external-"))?;
    let (_hash, rest) = rest.split_once('-')?;
    let mut parts = rest.splitn(3, '/');
    let (ns, name) = (parts.next()?, parts.next()?);
    parts.next()?;
    rest.get(..ns.len() + 1 + name.len())
}

/// The hash a Service port's chains share: `KUBE-SVC-X` / `KUBE-EXT-X`
/// (iptables), `service-X-...` / `external-X-...` (nftables). It pairs a
/// Service port's ClusterIP with its NodePort.
pub fn link_of_chain(chain: &str) -> Option<&str> {
    for prefix in ["KUBE-SVC-", "KUBE-EXT-", "KUBE-XLB-"] {
        if let Some(hash) = chain.strip_prefix(prefix) {
            return Some(hash);
        }
    }
    let rest = chain
        .strip_prefix("service-")
        .or_else(|| chain.strip_prefix("external-"))?;
    Some(rest.split_once('-')?.0)
}

/// A Service port found by name: (`ns/name`, its ClusterIP port or NodePort, [`link_of_chain`]).
pub type NamedPort = (String, ServicePort, String);

/// The Service port of one of kube-proxy's iptables entry rules, by its
/// comment: a `KUBE-SERVICES` rule of a ClusterIP (`ns/name:port cluster IP`)
/// or a `KUBE-NODEPORTS` rule (`ns/name:port`), with the link of the chain it
/// jumps to. iptables-nft (netlink) and iptables-legacy (save text) alike.
pub fn iptables_entry<'a>(
    chain: &str,
    comment: Option<&'a str>,
    f: &'a RuleFacts,
    v6: bool,
) -> Option<(&'a str, ServicePort, &'a str)> {
    let (comment, port, protocol) = (comment?, f.dport?, f.l4proto?);
    let link = f.jumps.iter().find_map(|j| link_of_chain(j))?;
    let svc = match chain {
        "KUBE-SERVICES" if comment.ends_with(" cluster IP") => ServicePort {
            address: f.daddr?,
            port,
            protocol,
        },
        "KUBE-NODEPORTS" => ServicePort::node_port(v6, protocol, port),
        _ => return None,
    };
    Some((name_of_comment(comment)?, svc, link))
}
