//! The node's interfaces and addresses over rtnetlink, for `kube-ipvs0`: the
//! dummy interface kube-proxy's IPVS mode binds service IPs to.
//!
//! Netlink answers for the agent's own network namespace, so the probe asks
//! only when the host root is `/` (the agent runs in the host namespace).

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
