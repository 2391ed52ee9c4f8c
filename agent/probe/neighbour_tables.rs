//! The neighbour_tables probe: the kernel's ARP (IPv4, `arp_cache`) and NDP
//! (IPv6, `ndisc_cache`) tables over rtnetlink (`RTM_GETNEIGHTBL`, one dump):
//! entries, `gc_thresh1/2/3` and the table's counters.
//!
//! Why: past `gc_thresh3` entries the kernel runs a forced garbage collection
//! and, when that frees nothing, refuses the new neighbour ("neighbour table
//! overflow" in the kernel log, `table_fulls` counts it): new flows to that
//! next hop fail. A node talking to many pods and nodes directly (a flat pod
//! network, large clusters) passes the default 1024. Per-device ARP counts
//! (node_exporter's arp collector) do not show the table's limit or its
//! refusals.
//!
//! The table and its thresholds are the kernel's, one per family for every
//! network namespace: `entries` counts the neighbours of all namespaces,
//! while the sysctls under `/proc/sys/net/ipv4/neigh/default/gc_thresh*` exist
//! in the initial namespace only. The agent reads them over netlink (the
//! DaemonSet runs in the host namespace); the answer in a pod's namespace is
//! the same table (seen on this kernel: a new namespace's dump has the same
//! entries and thresholds, and no `neigh/default` sysctls); what it misses is
//! the host devices' own parameters. Since Linux 4.19 the thresholds are compared with the
//! entries the collector may drop (permanent and externally learned entries
//! excepted): with many permanent entries `entries` overstates the fill.
//!
//! The message is decoded attribute by attribute: an attribute of unknown
//! type is counted, one that does not decode is named in `undecoded` and its
//! value left out (never 0).

use std::time::Instant;

use netlink_packet_route::neighbour_table::{NeighbourTableConfig, NeighbourTableStats};
use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::netlink::{attrs, NlError, Request, Session, NLM_F_DUMP, NLM_F_REQUEST};

const NETLINK_ROUTE: isize = 0;
const RTM_NEWNEIGHTBL: u16 = 64;
const RTM_GETNEIGHTBL: u16 = 66;
const AF_UNSPEC: u8 = 0;
const NDTA_NAME: u16 = 1;
const NDTA_THRESH1: u16 = 2;
const NDTA_THRESH2: u16 = 3;
const NDTA_THRESH3: u16 = 4;
const NDTA_CONFIG: u16 = 5;
const NDTA_PARMS: u16 = 6;
const NDTA_STATS: u16 = 7;
const NDTA_GC_INTERVAL: u16 = 8;
/// `struct ndtmsg`: family and padding.
const NDTMSG_LEN: usize = 4;

/// The table's counters since boot (`struct ndt_stats`, summed over CPUs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeighbourCounters {
    /// Entries allocated.
    pub allocs: u64,
    pub destroys: u64,
    pub hash_grows: u64,
    /// Resolutions that failed (no answer to ARP/NDP).
    pub res_failed: u64,
    pub lookups: u64,
    pub hits: u64,
    pub periodic_gc_runs: u64,
    /// Collections run because the table passed gc_thresh2 or gc_thresh3.
    pub forced_gc_runs: u64,
    /// New neighbours refused because the table was full ("neighbour table overflow").
    pub table_fulls: u64,
}

/// One neighbour table as the kernel reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeighbourTable {
    /// `ipv4`, `ipv6`, or the address family number.
    pub family: String,
    /// The kernel's name: `arp_cache`, `ndisc_cache`.
    pub name: String,
    /// Entries now (`ndtc_entries`); None when NDTA_CONFIG did not decode.
    pub entries: Option<u64>,
    /// Below it the collector leaves entries alone.
    pub gc_thresh1: Option<u64>,
    /// Past it a forced collection runs when the last was over 5 s ago.
    pub gc_thresh2: Option<u64>,
    /// The hard limit: past it new neighbours are refused when a collection frees nothing.
    pub gc_thresh3: Option<u64>,
    pub counters: Option<NeighbourCounters>,
    /// Attributes that did not decode (named; their values are left out, not 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecoded: Vec<String>,
    /// Attributes of a type this decoder does not know (a newer kernel's), skipped.
    #[serde(default)]
    pub unknown_attributes: u64,
}

impl NeighbourTable {
    /// entries / gc_thresh3, when both are known and the limit is not 0.
    pub fn fill(&self) -> Option<f64> {
        match (self.entries, self.gc_thresh3) {
            (Some(e), Some(t)) if t > 0 => Some(e as f64 / t as f64),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeighbourFacts {
    /// The tables, IPv4 first; a kernel without IPv6 has no `ipv6` table.
    pub tables: Vec<NeighbourTable>,
}

impl NeighbourFacts {
    pub fn family(&self, family: &str) -> Option<&NeighbourTable> {
        self.tables.iter().find(|t| t.family == family)
    }
}

fn family_name(af: u8) -> String {
    match af {
        2 => "ipv4".into(),
        10 => "ipv6".into(),
        n => n.to_string(),
    }
}

fn u32_attr(value: &[u8]) -> Option<u64> {
    <[u8; 4]>::try_from(value)
        .ok()
        .map(|b| u64::from(u32::from_ne_bytes(b)))
}

/// One `RTM_NEWNEIGHTBL` payload. The dump sends one message per table (with
/// the thresholds) and one per device's parameters (name and NDTA_PARMS
/// only): those are `Ok(None)`.
pub fn decode_table(payload: &[u8]) -> Result<Option<NeighbourTable>, NlError> {
    let Some(&af) = payload.first().filter(|_| payload.len() >= NDTMSG_LEN) else {
        return Err(NlError::Malformed(format!(
            "neighbour table message of {} bytes, shorter than its header",
            payload.len()
        )));
    };
    let mut t = NeighbourTable {
        family: family_name(af),
        ..Default::default()
    };
    let mut thresholds = false;
    for a in attrs(&payload[NDTMSG_LEN..]) {
        let a = a?;
        let mut bad = |name: &str| t.undecoded.push(format!("{name} ({} bytes)", a.value.len()));
        match a.kind {
            NDTA_NAME => match a.str() {
                Ok(n) => t.name = n.to_string(),
                Err(_) => bad("NDTA_NAME"),
            },
            NDTA_THRESH1 | NDTA_THRESH2 | NDTA_THRESH3 => {
                thresholds = true;
                let (slot, name) = match a.kind {
                    NDTA_THRESH1 => (&mut t.gc_thresh1, "NDTA_THRESH1"),
                    NDTA_THRESH2 => (&mut t.gc_thresh2, "NDTA_THRESH2"),
                    _ => (&mut t.gc_thresh3, "NDTA_THRESH3"),
                };
                match u32_attr(a.value) {
                    Some(v) => *slot = Some(v),
                    None => t.undecoded.push(format!("{name} ({} bytes)", a.value.len())),
                }
            }
            NDTA_CONFIG => match NeighbourTableConfig::parse(a.value) {
                Ok(c) => t.entries = Some(u64::from(c.entries)),
                Err(_) => bad("NDTA_CONFIG"),
            },
            NDTA_STATS => match NeighbourTableStats::parse(a.value) {
                Ok(s) => {
                    t.counters = Some(NeighbourCounters {
                        allocs: s.allocs,
                        destroys: s.destroys,
                        hash_grows: s.hash_grows,
                        res_failed: s.res_failed,
                        lookups: s.lookups,
                        hits: s.hits,
                        periodic_gc_runs: s.periodic_gc_runs,
                        forced_gc_runs: s.forced_gc_runs,
                        table_fulls: s.table_fulls,
                    })
                }
                Err(_) => bad("NDTA_STATS"),
            },
            NDTA_PARMS | NDTA_GC_INTERVAL => {}
            _ => t.unknown_attributes += 1,
        }
    }
    Ok(thresholds.then_some(t))
}

/// Every table of one dump, IPv4 then IPv6 then others.
pub fn dump<C: crate::netlink::Conn>(conn: C, deadline: Instant) -> Result<NeighbourFacts, NlError> {
    let mut s = Session::new(conn, deadline);
    let mut req = Request::new(RTM_GETNEIGHTBL, NLM_F_REQUEST | NLM_F_DUMP, AF_UNSPEC);
    let mut tables = Vec::new();
    s.dump(&mut req, |p| {
        if p.ty != RTM_NEWNEIGHTBL {
            return Err(NlError::Malformed(format!(
                "message type {} in a neighbour table dump",
                p.ty
            )));
        }
        if let Some(t) = decode_table(p.payload)? {
            // At most a table per family: bounded whatever the kernel sends.
            if tables.len() < 16 {
                tables.push(t);
            }
        }
        Ok(())
    })?;
    let rank = |f: &str| match f {
        "ipv4" => 0,
        "ipv6" => 1,
        _ => 2,
    };
    tables.sort_by(|a: &NeighbourTable, b| rank(&a.family).cmp(&rank(&b.family)).then(a.name.cmp(&b.name)));
    Ok(NeighbourFacts { tables })
}

pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<NeighbourFacts>, ProbeError> {
    if !ctx.host.kernel().netlink() {
        return Ok(Probed::Absent(
            "neighbour tables are read over netlink on the node itself (--host-root /) only".into(),
        ));
    }
    let (host, at) = (ctx.host.clone(), deadline.at());
    super::blocking(ProbeName::NeighbourTables, move || {
        let facts = host
            .netlink(NETLINK_ROUTE)
            .and_then(|s| dump(s, at))
            .map_err(|e| ProbeError::Rtnetlink {
                what: "neighbour tables (RTM_GETNEIGHTBL)",
                source: Box::new(e),
            })?;
        if facts.tables.is_empty() {
            return Ok(Probed::Absent("the kernel lists no neighbour table".into()));
        }
        Ok(Probed::Present(facts))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel (6.18), the IPv4 table's RTM_NEWNEIGHTBL payload and
    /// a device's parameters, as the kernel sent them: tests/fixtures/samples/netlink-neightbl/SOURCES.md.
    const ARP_CACHE: &str = include_str!("../../tests/fixtures/samples/netlink-neightbl/arp_cache.hex");
    const PARMS_ONLY: &str = include_str!("../../tests/fixtures/samples/netlink-neightbl/parms_lo.hex");

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn captured_arp_cache() {
        let t = decode_table(&hex(ARP_CACHE)).unwrap().unwrap();
        assert_eq!((t.family.as_str(), t.name.as_str()), ("ipv4", "arp_cache"));
        assert_eq!(
            (t.gc_thresh1, t.gc_thresh2, t.gc_thresh3),
            (Some(128), Some(512), Some(1024))
        );
        // What `ip -s ntable show` printed for the same bytes (SOURCES.md).
        assert_eq!(t.entries, Some(809));
        let c = t.counters.clone().unwrap();
        assert_eq!((c.allocs, c.destroys, c.hash_grows), (32_167, 31_358, 8));
        assert_eq!((c.res_failed, c.lookups, c.hits), (32_577, 99_109, 46));
        assert_eq!(
            (c.periodic_gc_runs, c.forced_gc_runs, c.table_fulls),
            (100, 11_686, 11_518)
        );
        assert!((t.fill().unwrap() - 809.0 / 1024.0).abs() < 1e-12);
        assert!(t.undecoded.is_empty() && t.unknown_attributes == 0, "{t:?}");
        assert!(
            decode_table(&hex(PARMS_ONLY)).unwrap().is_none(),
            "a device's parameters are no table"
        );
    }

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
        v.extend(kind.to_ne_bytes());
        v.extend(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn unknown_and_short_attributes_are_counted_never_zero() {
        let mut m = vec![10, 0, 0, 0];
        m.extend(attr(NDTA_NAME, b"ndisc_cache\0"));
        m.extend(attr(NDTA_THRESH3, &4096u32.to_ne_bytes()));
        m.extend(attr(NDTA_THRESH2, &[1, 2])); // short
        m.extend(attr(NDTA_STATS, &[0; 40])); // shorter than struct ndt_stats
        m.extend(attr(NDTA_CONFIG, &[0; 8])); // shorter than struct ndt_config
        m.extend(attr(42, &[1, 2, 3, 4])); // a newer kernel's attribute
        let t = decode_table(&m).unwrap().unwrap();
        assert_eq!(t.family, "ipv6");
        assert_eq!((t.gc_thresh2, t.gc_thresh3, t.entries), (None, Some(4096), None));
        assert_eq!(t.counters, None);
        assert_eq!(t.undecoded.len(), 3, "{:?}", t.undecoded);
        assert_eq!(t.unknown_attributes, 1);
        assert_eq!(t.fill(), None, "unknown entries are no fill");
        // Framing that does not add up is an error, never a panic.
        assert!(decode_table(&[2, 0]).is_err());
        let mut cut = vec![2, 0, 0, 0];
        cut.extend(&attr(NDTA_THRESH3, &[0; 4])[..6]);
        assert!(decode_table(&cut).is_err());
        // Arbitrary bytes never panic.
        let mut x: u32 = 7;
        for len in 0..300 {
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = decode_table(&b);
        }
    }

    #[test]
    fn a_dump_with_both_families_and_device_parameters() {
        use crate::netlink::testing::{done, msg, Fake};
        let v6 = {
            let mut m = vec![10, 0, 0, 0];
            m.extend(attr(NDTA_NAME, b"ndisc_cache\0"));
            m.extend(attr(NDTA_THRESH3, &1024u32.to_ne_bytes()));
            m
        };
        let (arp, parms) = (hex(ARP_CACHE), hex(PARMS_ONLY));
        let fake = Fake::new(move |sent| {
            let seq = sent.seq;
            let mut d = msg(RTM_NEWNEIGHTBL, 2, seq, &v6);
            d.extend(msg(RTM_NEWNEIGHTBL, 2, seq, &parms));
            d.extend(msg(RTM_NEWNEIGHTBL, 2, seq, &arp));
            vec![Ok(d), Ok(done(seq))]
        });
        let f = dump(fake, Instant::now() + std::time::Duration::from_secs(5)).unwrap();
        let fams: Vec<&str> = f.tables.iter().map(|t| t.family.as_str()).collect();
        assert_eq!(fams, ["ipv4", "ipv6"]);
        assert_eq!(f.family("ipv6").unwrap().gc_thresh3, Some(1024));
    }
}
