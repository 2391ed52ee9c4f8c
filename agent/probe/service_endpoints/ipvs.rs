//! Service ports and endpoints in IPVS mode: each virtual server is a service
//! port (kube-proxy makes one per ClusterIP, external IP, load-balancer IP and
//! node address × NodePort) and its real servers are its endpoints — all of
//! them, weight 0 included: kube-proxy sets a terminating endpoint's weight to
//! 0 and deletes the real server only once its connections are gone, so until
//! then its entries are not stale. Firewall-mark services have no address and
//! are left out.

use std::net::IpAddr;

use super::{ServicePort, ServiceTable};
use crate::probe::ipvs::VirtualServer;

fn protocol(name: &str) -> Option<u8> {
    match name {
        "TCP" => Some(6),
        "UDP" => Some(17),
        "SCTP" => Some(132),
        _ => None,
    }
}

/// The service table of an IPVS table (as parsed from `/proc/net/ip_vs`).
pub fn table(servers: &[VirtualServer]) -> ServiceTable {
    let mut t = ServiceTable::default();
    for vs in servers {
        let (Some(protocol), Ok(address)) = (protocol(&vs.protocol), vs.address.parse::<IpAddr>()) else {
            continue;
        };
        let eps = t
            .services
            .entry(ServicePort {
                address,
                port: vs.port,
                protocol,
            })
            .or_default();
        for rs in &vs.real_servers {
            if let Ok(a) = rs.address.parse::<IpAddr>() {
                eps.push((a, Some(rs.port)));
            }
        }
        eps.sort();
        eps.dedup();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ipvs::proc::parse_proc_ip_vs;

    #[test]
    fn virtual_servers_are_service_ports() {
        // Captured shape of /proc/net/ip_vs (addresses and ports in hex).
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
UDP  0A60000A:0035 rr\n  -> 0AF40102:0035      Masq    1      0          3\n  -> 0AF40103:0035      Masq    0      0          1\n\
TCP  0A600014:0050 rr\n\
FWM  00000001 rr\n  -> 0AF40104:0050      Masq    1      0          0\n";
        let vs = parse_proc_ip_vs("/proc/net/ip_vs", text).unwrap();
        let t = table(&vs);
        let dns = ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        };
        assert_eq!(t.services.len(), 2, "{t:?}");
        assert_eq!(
            t.is_current(&dns, "10.244.1.3".parse().unwrap(), 53),
            Some(true),
            "weight 0 is current"
        );
        assert_eq!(t.is_current(&dns, "10.244.1.9".parse().unwrap(), 53), Some(false));
        let web = ServicePort {
            address: "10.96.0.20".parse().unwrap(),
            port: 80,
            protocol: 6,
        };
        assert!(t.services[&web].is_empty());
    }
}
