//! Service ports and endpoints in IPVS mode: each virtual server is a service
//! port (kube-proxy makes one per ClusterIP, external IP, load-balancer IP and
//! node address × NodePort) and its real servers are its endpoints — all of
//! them, weight 0 included: kube-proxy sets a terminating endpoint's weight to
//! 0 and deletes the real server only once its connections are gone, so until
//! then its entries are not stale. Firewall-mark services have no address and
//! are left out. A virtual server of a protocol, or with a real server of an
//! address, the decoder does not know is undecoded (never judged).

use std::net::IpAddr;

use super::{ServicePort, ServiceTable, Undecoded};
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
    let undecoded = |reason: String| Undecoded { source: "ipvs", reason };
    for vs in servers {
        if vs.fwmark.is_some() || vs.protocol == "FWM" {
            continue;
        }
        let Ok(address) = vs.address.parse::<IpAddr>() else {
            continue;
        };
        let Some(protocol) = protocol(&vs.protocol) else {
            let svc = ServicePort {
                address,
                port: vs.port,
                protocol: 0,
            };
            let why = format!(
                "virtual server of protocol {}, which the decoder does not know",
                vs.protocol
            );
            t.undecoded.insert(svc, undecoded(why));
            continue;
        };
        let svc = ServicePort {
            address,
            port: vs.port,
            protocol,
        };
        let mut eps = Vec::with_capacity(vs.real_servers.len());
        let mut bad = None;
        for rs in &vs.real_servers {
            match rs.address.parse::<IpAddr>() {
                Ok(a) => eps.push((a, Some(rs.port))),
                Err(_) => bad = Some(rs.address.clone()),
            }
        }
        if let Some(a) = bad {
            t.services.remove(&svc);
            t.undecoded
                .insert(svc, undecoded(format!("real server address {a:?} not understood")));
            continue;
        }
        if t.undecoded.contains_key(&svc) {
            continue;
        }
        let mine = t.services.entry(svc).or_default();
        mine.extend(eps);
        mine.sort();
        mine.dedup();
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
            t.is_current(&dns, "10.244.1.3".parse().unwrap()),
            Some(true),
            "weight 0 is current"
        );
        assert_eq!(t.is_current(&dns, "10.244.1.9".parse().unwrap()), Some(false));
        let web = ServicePort {
            address: "10.96.0.20".parse().unwrap(),
            port: 80,
            protocol: 6,
        };
        assert!(t.services[&web].is_empty());
    }
}
