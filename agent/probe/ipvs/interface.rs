//! The node's interfaces and addresses over rtnetlink, for `kube-ipvs0`: the
//! dummy interface kube-proxy's IPVS mode binds service IPs to.
//!
//! Netlink answers for the agent's own network namespace, so the probe asks
//! only when the host root is `/` (the agent runs in the host namespace), or a
//! fixture node's recording ([`of_host`]).

use std::collections::BTreeSet;
use std::net::IpAddr;

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
        .map_err(|e| ProbeError::Netlink(format!("interfaces and addresses (RTM_GETLINK, RTM_GETADDR): {e}")))
}

/// [`local_addresses`] over a [`crate::netlink::Conn`]: interface names from
/// `RTM_GETLINK` (`IFLA_IFNAME`), addresses from `RTM_GETADDR` (`IFA_LOCAL`, else `IFA_ADDRESS`).
pub fn dump_addresses<C: crate::netlink::Conn>(
    conn: C,
    deadline: std::time::Instant,
) -> Result<LocalAddresses, crate::netlink::NlError> {
    use crate::netlink::{attrs, NlError, Request, Session, NLM_F_DUMP, NLM_F_REQUEST};
    const RTM_GETLINK: u16 = 18;
    const RTM_GETADDR: u16 = 22;
    let index = |p: &[u8], at: usize| -> Result<u32, NlError> {
        p.get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| NlError::Malformed(format!("{} bytes, shorter than its header", p.len())))
    };
    let mut s = Session::new(conn, deadline);
    let mut names = std::collections::BTreeMap::new();
    s.dump(&mut Request::new(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 0), |p| {
        // struct ifinfomsg: 16 bytes, the index at 4.
        let i = index(p.payload, 4)?;
        for a in attrs(p.payload.get(16..).unwrap_or_default()) {
            let a = a?;
            if a.kind == 3 {
                names.insert(i, a.str()?.to_string());
            }
        }
        Ok(())
    })?;
    let mut local = LocalAddresses {
        interfaces: names.values().cloned().collect(),
        addresses: Vec::new(),
    };
    s.dump(&mut Request::new(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 0), |p| {
        // struct ifaddrmsg: 8 bytes, the family at 0 and the index at 4.
        let (family, i) = (p.payload.first().copied().unwrap_or(0), index(p.payload, 4)?);
        let Some(name) = names.get(&i) else {
            return Ok(());
        };
        let (mut address, mut local_ip) = (None, None);
        for a in attrs(p.payload.get(8..).unwrap_or_default()) {
            let a = a?;
            if a.kind != 1 && a.kind != 2 {
                continue;
            }
            // An address that is not its family's length is not guessed at.
            let ip = match (family, a.value.len()) {
                (2, 4) => IpAddr::from(<[u8; 4]>::try_from(a.value).unwrap_or_default()),
                (10, 16) => IpAddr::from(<[u8; 16]>::try_from(a.value).unwrap_or_default()),
                (f, n) => {
                    return Err(NlError::Malformed(format!(
                        "RTM_NEWADDR of {name}: a {n}-byte address in family {f}"
                    )))
                }
            };
            if a.kind == 1 {
                address = Some(ip);
            } else {
                local_ip = Some(ip);
            }
        }
        if let Some(ip) = local_ip.or(address) {
            local.addresses.push((name.clone(), ip));
        }
        Ok(())
    })?;
    Ok(local)
}

/// Every interface of the agent's network namespace and its addresses.
pub async fn local_addresses() -> Result<LocalAddresses, ProbeError> {
    use futures_util::stream::TryStreamExt;
    use netlink_packet_route::address::AddressAttribute;
    use netlink_packet_route::link::LinkAttribute;

    let netlink = |e: rtnetlink::Error| ProbeError::Netlink(e.to_string());
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| ProbeError::Netlink(format!("opening a netlink socket: {e}")))?;
    let task = tokio::spawn(connection);
    let result = async {
        let mut names = std::collections::BTreeMap::new();
        let mut links = handle.link().get().execute();
        while let Some(msg) = links.try_next().await.map_err(netlink)? {
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
        let mut addrs = handle.address().get().execute();
        while let Some(msg) = addrs.try_next().await.map_err(netlink)? {
            let Some(name) = names.get(&msg.header.index) else {
                continue;
            };
            // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS otherwise.
            let pick = |local: bool| {
                msg.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Local(ip) if local => Some(*ip),
                    AddressAttribute::Address(ip) if !local => Some(*ip),
                    _ => None,
                })
            };
            if let Some(ip) = pick(true).or_else(|| pick(false)) {
                local.addresses.push((name.clone(), ip));
            }
        }
        Ok(local)
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
        assert!(err.to_string().contains("a 3-byte address in family 2"), "{err}");
    }
}
