//! The node's interfaces and addresses over rtnetlink, for `kube-ipvs0`: the
//! dummy interface kube-proxy's IPVS mode binds service IPs to.
//!
//! Netlink answers for the agent's own network namespace, so the probe asks
//! only when the host root is `/` (the agent runs in the host namespace), or a
//! fixture node's recording ([`of_host`]).

use std::collections::BTreeSet;
use std::net::IpAddr;

use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};

use crate::probe::ProbeError;

/// The interface kube-proxy's IPVS mode binds service IPs to.
pub const KUBE_IPVS0: &str = "kube-ipvs0";

/// The node's interfaces and their addresses, as netlink shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalAddresses {
    /// Interface names (no unit).
    pub interfaces: BTreeSet<String>,
    /// (interface name, address) pairs (no unit).
    pub addresses: Vec<(String, IpAddr)>,
}

/// The interfaces and addresses of `host`'s kernel: rtnetlink on the live node,
/// the same two dumps (`RTM_GETLINK`, `RTM_GETADDR`) replayed from a recording.
pub async fn of_host(host: &crate::host::Host, deadline: std::time::Instant) -> Result<LocalAddresses, ProbeError> {
    use crate::netlink::replay::{KernelSource, NETLINK_ROUTE};
    if matches!(host.kernel(), KernelSource::Live) {
        return local_addresses().await;
    }
    // A recording is a small file read in memory: not worth a blocking-pool slot.
    host.netlink(NETLINK_ROUTE)
        .and_then(|c| dump_addresses(c, deadline))
        .map_err(|e| ProbeError::Rtnetlink {
            what: "interfaces and addresses (RTM_GETLINK, RTM_GETADDR)",
            source: Box::new(e),
        })
}

/// What the two dumps say, from netlink-packet-route's typed messages (the live node's
/// rtnetlink stream and a recording's replayed payloads alike): interface names from
/// `IFLA_IFNAME`, each address from `IFA_LOCAL` (the interface's own on point-to-point
/// links), else `IFA_ADDRESS`; an address on an interface the link dump did not name is
/// left out.
fn collect(links: &[LinkMessage], addrs: &[AddressMessage]) -> LocalAddresses {
    let mut names = std::collections::BTreeMap::new();
    for msg in links {
        for attr in &msg.attributes {
            if let LinkAttribute::IfName(name) = attr {
                names.insert(msg.header.index, name.clone());
            }
        }
    }
    let mut local = LocalAddresses {
        interfaces: names.values().cloned().collect(),
        addresses: Vec::new(),
    };
    for msg in addrs {
        let Some(name) = names.get(&msg.header.index) else {
            continue;
        };
        let pick = |want_local: bool| {
            msg.attributes.iter().find_map(|a| match a {
                AddressAttribute::Local(ip) if want_local => Some(*ip),
                AddressAttribute::Address(ip) if !want_local => Some(*ip),
                _ => None,
            })
        };
        if let Some(ip) = pick(true).or_else(|| pick(false)) {
            local.addresses.push((name.clone(), ip));
        }
    }
    local
}

/// [`local_addresses`] over a [`crate::netlink::Conn`]: the same two dumps (`RTM_GETLINK`,
/// `RTM_GETADDR`), each payload decoded by netlink-packet-route.
pub fn dump_addresses<C: crate::netlink::Conn>(
    conn: C,
    deadline: std::time::Instant,
) -> Result<LocalAddresses, crate::netlink::NlError> {
    use crate::netlink::{NlError, Request, Session, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_core::Parseable;
    // rtnetlink.h; netlink-packet-route keeps its message type numbers private.
    const RTM_GETLINK: u16 = 18;
    const RTM_GETADDR: u16 = 22;
    let malformed = |what: &str, e: netlink_packet_core::DecodeError| NlError::Malformed(format!("{what}: {e}"));
    let mut s = Session::new(conn, deadline);
    let mut links = Vec::new();
    s.dump(&mut Request::new(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 0), |p| {
        links.push(LinkMessage::parse(p.payload).map_err(|e| malformed("RTM_NEWLINK", e))?);
        Ok(())
    })?;
    let mut addrs = Vec::new();
    s.dump(&mut Request::new(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 0), |p| {
        addrs.push(AddressMessage::parse(p.payload).map_err(|e| malformed("RTM_NEWADDR", e))?);
        Ok(())
    })?;
    Ok(collect(&links, &addrs))
}

/// Every interface of the agent's network namespace and its addresses.
pub async fn local_addresses() -> Result<LocalAddresses, ProbeError> {
    use futures_util::stream::TryStreamExt;
    let netlink = |e: rtnetlink::Error| ProbeError::Rtnetlink {
        what: "interfaces and addresses",
        source: Box::new(e),
    };
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| ProbeError::Rtnetlink {
        what: "opening a netlink socket",
        source: Box::new(e),
    })?;
    let task = tokio::spawn(connection);
    let result = async {
        let links: Vec<LinkMessage> = handle.link().get().execute().try_collect().await.map_err(netlink)?;
        let addrs: Vec<AddressMessage> = handle.address().get().execute().try_collect().await.map_err(netlink)?;
        Ok(collect(&links, &addrs))
    }
    .await;
    task.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::testing::{attr, done, msg, string, Fake};

    fn link(index: u32, name: &str) -> Vec<u8> {
        let mut p = vec![0u8; 16];
        p[4..8].copy_from_slice(&index.to_ne_bytes());
        p.extend(string(3, name));
        msg(16, 2, 1, &p)
    }

    fn addr(seq: u32, family: u8, index: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![family, 24, 0, 0];
        p.extend_from_slice(&index.to_ne_bytes());
        p.extend(attrs.concat());
        msg(20, 2, seq, &p)
    }

    fn fake(addrs: Vec<Vec<u8>>) -> Fake {
        let mut addrs = Some(addrs);
        Fake::new(move |sent| match sent.ty {
            18 => vec![Ok([link(1, "lo"), link(2, "eth0")].concat()), Ok(done(sent.seq))],
            _ => {
                let mut d = addrs.take().unwrap_or_default().concat();
                d.extend(done(sent.seq));
                vec![Ok(d)]
            }
        })
    }

    #[test]
    fn addresses_over_a_conn_local_before_address() {
        let got = dump_addresses(
            fake(vec![
                addr(2, 2, 1, &[attr(1, &[127, 0, 0, 1])]),
                // IFA_LOCAL wins over IFA_ADDRESS (the peer's, on point-to-point links).
                addr(2, 2, 2, &[attr(1, &[10, 0, 0, 9]), attr(2, &[192, 168, 50, 10])]),
                // An interface the link dump did not name is left out.
                addr(2, 2, 7, &[attr(1, &[10, 9, 9, 9])]),
            ]),
            std::time::Instant::now(),
        )
        .unwrap();
        assert_eq!(got.interfaces, BTreeSet::from(["eth0".to_string(), "lo".to_string()]));
        assert_eq!(
            got.addresses,
            vec![
                ("lo".to_string(), "127.0.0.1".parse().unwrap()),
                ("eth0".to_string(), "192.168.50.10".parse().unwrap()),
            ]
        );
    }

    #[test]
    fn an_address_of_the_wrong_length_is_an_error_not_skipped() {
        let err = dump_addresses(
            fake(vec![addr(2, 2, 2, &[attr(2, &[192, 168, 50])])]),
            std::time::Instant::now(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("RTM_NEWADDR"), "{err}");
    }
}
