//! IPVS persistence templates that point at weight-0 real servers, from `/proc/net/ip_vs_conn`.
//!
//! A persistent virtual server (`ipvsadm -p`, kube-proxy's `sessionAffinity: ClientIP`) keeps,
//! per client, a *template*: an entry of the connection table with client port 0 whose
//! destination is the real server the client is pinned to. While
//! `net.ipv4.vs.expire_quiescent_template` is 0, IPVS keeps sending that client's new
//! connections to it even at weight 0 (`ip_vs_check_template`, ip_vs_conn.c); kube-proxy sets it
//! to 1. The kernel prints a template's state as `NONE` or `ASSURED`
//! (`ip_vs_ctpl_state_name_table`, ip_vs_proto.c), where a connection has its protocol's state.
//!
//! The table can hold millions of connections, so it is read only when a weight-0 real server
//! belongs to a persistent virtual server, streamed line by line, and at most [`MAX_ENTRIES`]
//! entries of it: past them the counts are lower bounds and say so.
//!
//! A line, as the kernel writes it (`ip_vs_conn_seq_show`), here one template captured in the
//! test VM (tests/fixtures/ipvs/SOURCES.md):
//!
//! ```text
//! Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
//! TCP 7F000001 0000 7F000001 0050 7F000003 1F90 ASSURED       10792
//! ```
//!
//! IPv4 addresses are 8 hex digits, IPv6 ones the 8 groups of `%pI6`; ports are hex. A
//! firewall-mark service's template has protocol `IP`, the mark as its virtual address and
//! virtual port 0.

use std::collections::HashMap;
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::WeightZeroRealServer;

/// Entries of `/proc/net/ip_vs_conn` read at most in one run (about 24 MiB of text, streamed).
pub const MAX_ENTRIES: u64 = 262_144;

/// How the templates of [`IpvsFacts::weight_zero`](super::IpvsFacts::weight_zero) were counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateScan {
    /// Entries of the connection table read (count).
    pub entries_read: u64,
    /// Persistence templates among them, pointing anywhere (count).
    pub templates: u64,
    /// True when the table had more than [`MAX_ENTRIES`] entries: the counts are lower bounds.
    pub truncated: bool,
    /// Lines that were not an entry the kernel writes, skipped (count); the first is quoted.
    pub unparsed: u64,
    /// The first such line, cut to 120 characters (no unit).
    pub first_unparsed: Option<String>,
}

/// A template's service and destination, as in the connection table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    /// `Some(mark)` for a firewall-mark service; else the protocol, virtual address and port.
    fwmark: Option<u32>,
    protocol: String,
    vaddr: Option<IpAddr>,
    vport: u16,
    daddr: IpAddr,
    dport: u16,
}

/// One line of the table: `Ok(Some(key))` for a template, `Ok(None)` for a connection.
fn parse_line(line: &str) -> Result<Option<Key>, ()> {
    let t: Vec<&str> = line.split_whitespace().collect();
    if t.len() < 9 {
        return Err(());
    }
    let hex16 = |s: &str| u16::from_str_radix(s, 16).map_err(|_| ());
    let (cport, vport, dport) = (hex16(t[2])?, hex16(t[4])?, hex16(t[6])?);
    parse_addr(t[1])?;
    let vaddr = parse_addr(t[3])?;
    let daddr = parse_addr(t[5])?;
    t[8].parse::<u64>().map_err(|_| ())?;
    if cport != 0 || !matches!(t[7], "NONE" | "ASSURED") {
        return Ok(None);
    }
    let protocol = t[0].to_ascii_uppercase();
    let fwmark = (protocol == "IP").then(|| mark_of(vaddr));
    Ok(Some(Key {
        fwmark,
        vaddr: fwmark.is_none().then_some(vaddr),
        vport: if fwmark.is_some() { 0 } else { vport },
        protocol,
        daddr,
        dport,
    }))
}

/// A firewall mark the kernel put in the address's first 32 bits (`htonl(svc->fwmark)`).
fn mark_of(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(v4) => u32::from(v4),
        IpAddr::V6(v6) => (u128::from(v6) >> 96) as u32,
    }
}

fn parse_addr(s: &str) -> Result<IpAddr, ()> {
    if s.len() == 8 && !s.contains(':') {
        return u32::from_str_radix(s, 16)
            .map(|v| IpAddr::V4(Ipv4Addr::from(v)))
            .map_err(|_| ());
    }
    s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| ())
}

/// The key a template of `rs` has; `None` when its addresses are not addresses.
fn key_of(rs: &WeightZeroRealServer) -> Option<Key> {
    let daddr: IpAddr = rs.address.parse().ok()?;
    let s = &rs.service;
    Some(match s.fwmark {
        Some(mark) => Key {
            fwmark: Some(mark),
            protocol: "IP".into(),
            vaddr: None,
            vport: 0,
            daddr,
            dport: rs.port,
        },
        None => Key {
            fwmark: None,
            protocol: s.protocol.to_ascii_uppercase(),
            vaddr: Some(s.address.parse().ok()?),
            vport: s.port,
            daddr,
            dport: rs.port,
        },
    })
}

/// Counts, from the connection table's lines, the templates pointing at each of `weight_zero`
/// (its `templates` set where its service is persistent, else left `None`). Pure over the
/// reader: at most [`MAX_ENTRIES`] entries are read.
pub fn count(weight_zero: &mut [WeightZeroRealServer], table: impl BufRead) -> std::io::Result<TemplateScan> {
    let mut index: HashMap<Key, Vec<usize>> = HashMap::new();
    // A fwmark template's destination port is 0 for a port-less real server: match on the
    // address alone then.
    let mut by_mark_addr: HashMap<(u32, IpAddr), Vec<usize>> = HashMap::new();
    for (i, rs) in weight_zero.iter_mut().enumerate() {
        if !rs.persistent {
            continue;
        }
        rs.templates = Some(0);
        if let Some(k) = key_of(rs) {
            if let Some(m) = k.fwmark {
                by_mark_addr.entry((m, k.daddr)).or_default().push(i);
            }
            index.entry(k).or_default().push(i);
        }
    }
    let mut scan = TemplateScan::default();
    // Bytes, decoded lossily: a line that is not UTF-8 is one unparsed line, not an error.
    let mut lines = table.split(b'\n');
    // The title line.
    if lines.next().transpose()?.is_none() {
        return Ok(scan);
    }
    for line in lines {
        let line = line?;
        let line = String::from_utf8_lossy(&line);
        if line.trim().is_empty() {
            continue;
        }
        if scan.entries_read == MAX_ENTRIES {
            scan.truncated = true;
            break;
        }
        scan.entries_read += 1;
        let key = match parse_line(&line) {
            Ok(Some(k)) => k,
            Ok(None) => continue,
            Err(()) => {
                scan.unparsed += 1;
                if scan.first_unparsed.is_none() {
                    scan.first_unparsed = Some(line.chars().take(120).collect());
                }
                continue;
            }
        };
        scan.templates += 1;
        let hits = match (index.get(&key), key.fwmark) {
            (Some(h), _) => Some(h),
            (None, Some(m)) if key.dport == 0 => by_mark_addr.get(&(m, key.daddr)),
            _ => None,
        };
        for &i in hits.into_iter().flatten() {
            if let Some(n) = weight_zero[i].templates.as_mut() {
                *n += 1;
            }
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ipvs::ServiceKey;

    /// `/proc/net/ip_vs_conn` in the test VM (tests/vm, scenario ipvs-lingering): two
    /// connections and the template of their client, all to 127.0.0.3:8080.
    const VM: &str = include_str!("../../../tests/fixtures/ipvs/ip_vs_conn-vm-persistent-template.txt");

    fn rs(protocol: &str, vip: &str, vport: u16, fwmark: Option<u32>, addr: &str, port: u16) -> WeightZeroRealServer {
        WeightZeroRealServer {
            service: ServiceKey {
                protocol: protocol.into(),
                address: vip.into(),
                port: vport,
                fwmark,
            },
            address: addr.into(),
            port,
            persistent: true,
            ..Default::default()
        }
    }

    #[test]
    fn the_vms_template_is_counted_for_its_real_server_and_the_connections_are_not() {
        let mut wz = vec![
            rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080),
            rs("TCP", "127.0.0.1", 80, None, "127.0.0.2", 8080),
            rs("UDP", "127.0.0.1", 80, None, "127.0.0.3", 8080),
        ];
        let scan = count(&mut wz, VM.as_bytes()).unwrap();
        assert_eq!(
            (scan.entries_read, scan.templates, scan.truncated, scan.unparsed),
            (3, 1, false, 0)
        );
        let got: Vec<Option<u64>> = wz.iter().map(|r| r.templates).collect();
        assert_eq!(got, [Some(1), Some(0), Some(0)]);
    }

    #[test]
    fn a_real_server_of_a_service_without_persistence_is_not_counted() {
        let mut wz = vec![rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080)];
        wz[0].persistent = false;
        count(&mut wz, VM.as_bytes()).unwrap();
        assert_eq!(wz[0].templates, None);
    }

    #[test]
    fn ipv6_and_firewall_mark_templates_match_their_real_servers() {
        let table = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n\
            TCP fd00:0000:0000:0000:0000:0000:0000:0009 0000 fd00:0000:0000:0000:0000:0000:0000:0001 01BB fd00:0000:0000:0000:0000:0000:0000:0005 1F90 NONE          300\n\
            IP  0A000009 0000 00000007 0000 0A000005 0000 ASSURED       300\n\
            IP  0A000009 0000 00000007 0000 0A000006 0050 NONE          300\n\
            TCP 0A000009 C350 00000007 0000 0A000005 0050 ESTABLISHED   300\n";
        let mut wz = vec![
            rs("TCP", "fd00::1", 443, None, "fd00::5", 8080),
            rs("FWM", "", 0, Some(7), "10.0.0.5", 80),
            rs("FWM", "", 0, Some(7), "10.0.0.6", 80),
        ];
        let scan = count(&mut wz, table.as_bytes()).unwrap();
        assert_eq!((scan.entries_read, scan.templates), (4, 3));
        let got: Vec<Option<u64>> = wz.iter().map(|r| r.templates).collect();
        assert_eq!(got, [Some(1), Some(1), Some(1)]);
    }

    #[test]
    fn past_the_cap_the_counts_are_lower_bounds_and_garbage_is_counted_not_fatal() {
        let mut table = String::from("Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires PEName PEData\n");
        table.push_str("not an entry at all\n");
        for _ in 0..MAX_ENTRIES {
            table.push_str("TCP 7F000001 0000 7F000001 0050 7F000003 1F90 ASSURED 10\n");
        }
        let mut wz = vec![rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080)];
        let scan = count(&mut wz, table.as_bytes()).unwrap();
        assert!(scan.truncated);
        assert_eq!(scan.entries_read, MAX_ENTRIES);
        assert_eq!(
            (scan.unparsed, scan.first_unparsed.as_deref()),
            (1, Some("not an entry at all"))
        );
        assert_eq!(wz[0].templates, Some(MAX_ENTRIES - 1));
    }

    #[test]
    fn an_empty_or_headless_table_counts_nothing() {
        let mut wz = vec![rs("TCP", "127.0.0.1", 80, None, "127.0.0.3", 8080)];
        assert_eq!(count(&mut wz, &b""[..]).unwrap(), TemplateScan::default());
        assert_eq!(wz[0].templates, Some(0));
    }
}
