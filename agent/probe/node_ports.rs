//! The node_ports probe: the NodePorts the data plane serves, against the
//! ports the kernel hands to outgoing connections.
//!
//! The kernel picks the source port of an outgoing TCP, UDP or SCTP socket
//! that did not bind one (connect(), sendto() on an unbound UDP socket) from
//! `net.ipv4.ip_local_port_range` (both bounds included; IPv6 uses the same
//! sysctl), skipping the ports listed in `net.ipv4.ip_local_reserved_ports`.
//! A NodePort in that range and not reserved can be taken by a process of the
//! node, and the NodePort then fails on this node while the connection lives
//! (kubernetes#111682, #111823). Both sysctls are per network namespace: the
//! ones read are the agent's (the DaemonSet runs in the host namespace).
//!
//! Where the NodePorts come from, at one nf_tables generation (kept in
//! [`super::Memory`] and reused while the generation holds):
//! - iptables-nft (both families): `nat` `KUBE-NODEPORTS` rules matching a
//!   protocol and port, `filter` `KUBE-EXTERNAL-SERVICES` rules for a port with
//!   no address (a NodePort without endpoints), and `filter` `KUBE-NODEPORTS`
//!   `ACCEPT` rules: kube-proxy's healthCheckNodePorts (TCP; seen where
//!   kube-proxy writes such a rule, iptables mode: the socket kube-proxy
//!   listens on for them is not read);
//! - nftables mode: the `kube-proxy` tables' `service-nodeports` and
//!   `no-endpoint-nodeports` maps;
//! - IPVS mode: virtual servers on an address of the node that is not on
//!   `kube-ipvs0` (where kube-proxy binds service IPs), from `/proc/net/ip_vs`.
//!
//! Only those chains and maps are dumped. iptables-legacy tables are not in
//! nf_tables: when `/proc/net/ip_tables_names` lists `nat` or `filter` the
//! facts say so (`unread`), never "no NodePorts".

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::service_endpoints::protocol_name;
use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::netlink::nft::{Chain, Element, Family, Rule, Set};
use crate::netlink::nft_count::{self, Tally};
use crate::netlink::nft_expr::rule_facts;
use crate::netlink::{NlError, NETLINK_NETFILTER};
use crate::parse::{quote, ParseError};

/// NodePorts listed in the facts (all of them are counted).
pub const MAX_LISTED: usize = 500;

pub const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
pub const RESERVED_PORTS: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
const PROC_IP_VS: &str = "/proc/net/ip_vs";
const LEGACY_NAMES: &[(&str, &str)] = &[
    ("iptables-legacy", "/proc/net/ip_tables_names"),
    ("ip6tables-legacy", "/proc/net/ip6_tables_names"),
];
/// kube-proxy's nftables table.
const NFT_TABLE: &str = "kube-proxy";

/// Ports `first` to `last`, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

/// What kube-proxy made the port for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortKind {
    /// A Service's NodePort.
    NodePort,
    /// A Service's healthCheckNodePort (externalTrafficPolicy Local), served by kube-proxy itself.
    HealthCheck,
}

/// One port the data plane serves on every node address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePort {
    pub port: u16,
    /// `tcp`, `udp`, `sctp` (or the protocol number).
    pub protocol: String,
    pub kind: PortKind,
    /// `ipv4`, `ipv6`: the families whose rules serve it.
    pub families: Vec<String>,
    /// `iptables-nft`, `nftables`, `ipvs`: where it was read.
    pub sources: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodePortFacts {
    /// `net.ipv4.ip_local_port_range`: where outgoing connections' source ports come from (both families).
    pub ip_local_port_range: Option<PortRange>,
    /// `net.ipv4.ip_local_reserved_ports`, as ranges (a single port is a range of one).
    pub ip_local_reserved_ports: Vec<PortRange>,
    /// Where the NodePorts were read: `iptables-nft`, `nftables`, `ipvs` joined
    /// with `+` when several serve some, or `none`.
    pub source: String,
    /// The nf_tables ruleset generation the rules were read at (0 when nf_tables is not loaded).
    pub generation: u32,
    /// The nf_tables part was read by an earlier run at this generation.
    pub table_reused: bool,
    /// Distinct (port, protocol, kind) the data plane serves.
    pub node_ports: u64,
    /// Of those, healthCheckNodePorts.
    pub health_check_node_ports: u64,
    /// NodePorts inside the ephemeral range and not reserved: an outgoing connection can take them.
    pub in_ephemeral_range: u64,
    /// Those ports, by port (at most [`MAX_LISTED`]).
    pub exposed: Vec<NodePort>,
    /// The value of `net.ipv4.ip_local_reserved_ports` that keeps what is
    /// reserved now and adds every exposed port; None when none is exposed.
    pub reserve_value: Option<String>,
    /// Rules or map elements of those chains and maps that could not be decoded (not counted as no NodePort).
    pub undecoded: u64,
    /// Sources that may hold NodePorts but were not read (iptables-legacy tables).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

// ---------------------------------------------------------------------------
// Parsers.

fn port(source: &str, text: &str) -> Result<u16, ParseError> {
    text.parse::<u16>()
        .map_err(|_| ParseError::new(source, 1, format!("expected a port (0-65535), found {}", quote(text))))
}

/// `ip_local_port_range`: two ports, `32768\t60999\n`.
pub fn parse_port_range(source: &str, text: &str) -> Result<PortRange, ParseError> {
    let f: Vec<&str> = text.split_whitespace().collect();
    let [first, last] = f[..] else {
        return Err(ParseError::new(
            source,
            1,
            format!("expected two ports, found {}", quote(text.trim())),
        ));
    };
    let r = PortRange {
        first: port(source, first)?,
        last: port(source, last)?,
    };
    if r.first > r.last {
        return Err(ParseError::new(
            source,
            1,
            format!("first port {} above last {}", r.first, r.last),
        ));
    }
    Ok(r)
}

/// `ip_local_reserved_ports`: a comma-separated list of ports and ranges
/// (`8080,30000-32767`), empty when none; sorted and merged.
pub fn parse_reserved_ports(source: &str, text: &str) -> Result<Vec<PortRange>, ParseError> {
    let t = text.trim();
    if t.lines().count() > 1 {
        return Err(ParseError::new(source, 2, "expected one line"));
    }
    let mut out = Vec::new();
    for item in t.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let r = match item.split_once('-') {
            Some((a, b)) => PortRange {
                first: port(source, a.trim())?,
                last: port(source, b.trim())?,
            },
            None => {
                let p = port(source, item)?;
                PortRange { first: p, last: p }
            }
        };
        if r.first > r.last {
            return Err(ParseError::new(
                source,
                1,
                format!("range {} runs backwards", quote(item)),
            ));
        }
        out.push(r);
    }
    Ok(merge(out))
}

/// Sorted, with overlapping and adjacent ranges joined.
pub fn merge(mut ranges: Vec<PortRange>) -> Vec<PortRange> {
    ranges.sort();
    let mut out: Vec<PortRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(l) if u32::from(r.first) <= u32::from(l.last) + 1 => l.last = l.last.max(r.last),
            _ => out.push(r),
        }
    }
    out
}

/// As the kernel prints and reads it: `8080,30000-32767`.
pub fn format_ranges(ranges: &[PortRange]) -> String {
    ranges
        .iter()
        .map(|r| {
            if r.first == r.last {
                r.first.to_string()
            } else {
                format!("{}-{}", r.first, r.last)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------
// What the data plane serves.

const V4: u8 = 1;
const V6: u8 = 2;
const IPTABLES_NFT: u8 = 1;
const NFTABLES: u8 = 2;
const IPVS: u8 = 4;

/// NodePorts by (port, protocol, kind): families and sources as bits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    ports: BTreeMap<(u16, u8, PortKind), (u8, u8)>,
    pub undecoded: u64,
}

impl Found {
    fn add(&mut self, port: u16, protocol: u8, kind: PortKind, family: u8, source: u8) {
        let e = self.ports.entry((port, protocol, kind)).or_default();
        e.0 |= family;
        e.1 |= source;
    }

    fn merge(&mut self, other: &Found) {
        for (&(p, proto, k), &(f, s)) in &other.ports {
            self.add(p, proto, k, f, s);
        }
        self.undecoded += other.undecoded;
    }

    fn sources(&self) -> u8 {
        self.ports.values().fold(0, |a, (_, s)| a | s)
    }
}

/// One family's walk of kube-proxy's NodePort chains and maps (a fresh one per attempt).
#[derive(Debug)]
pub struct Walk {
    family: Family,
    pub found: Found,
}

impl Walk {
    pub fn new(family: Family) -> Walk {
        Walk {
            family,
            found: Found::default(),
        }
    }

    fn fam(&self) -> u8 {
        if self.family == Family::Ip6 {
            V6
        } else {
            V4
        }
    }
}

fn node_port_chain(table: &str, chain: &str) -> bool {
    matches!(
        (table, chain),
        ("nat", "KUBE-NODEPORTS") | ("filter", "KUBE-NODEPORTS") | ("filter", "KUBE-EXTERNAL-SERVICES")
    )
}

impl Tally for Walk {
    fn wants(&self, table: &str) -> bool {
        matches!(table, "nat" | "filter" | NFT_TABLE)
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rules_of(&self, c: &Chain<'_>) -> bool {
        node_port_chain(c.table, c.name)
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if !node_port_chain(r.table, r.chain) {
            return Ok(());
        }
        let Ok(f) = rule_facts(self.family, r) else {
            self.found.undecoded += 1;
            return Ok(());
        };
        // A rule with an address is an external IP's, not a NodePort.
        let (None, Some(port), Some(proto)) = (f.daddr, f.dport, f.l4proto) else {
            return Ok(());
        };
        let kind = if r.table == "filter" && r.chain == "KUBE-NODEPORTS" {
            // kube-proxy's only rule there: `-p tcp --dport N -j ACCEPT` for a healthCheckNodePort.
            PortKind::HealthCheck
        } else {
            PortKind::NodePort
        };
        let fam = self.fam();
        self.found.add(port, proto, kind, fam, IPTABLES_NFT);
        Ok(())
    }

    fn set(&mut self, s: &Set<'_>) -> bool {
        s.table == NFT_TABLE && matches!(s.name, "service-nodeports" | "no-endpoint-nodeports")
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}

    fn element_detail(&self) -> bool {
        true
    }

    /// `inet_proto . inet_service`: each field padded to 4 bytes.
    fn element(&mut self, _set: &str, e: Element<'_>) -> Result<(), NlError> {
        match e.key {
            [proto, _, _, _, hi, lo, ..] => {
                let fam = self.fam();
                self.found.add(
                    u16::from_be_bytes([*hi, *lo]),
                    *proto,
                    PortKind::NodePort,
                    fam,
                    NFTABLES,
                );
            }
            _ => self.found.undecoded += 1,
        }
        Ok(())
    }
}

/// IPVS virtual servers on node addresses (not on kube-ipvs0): NodePorts.
pub fn ipvs_node_ports(servers: &[super::ipvs::VirtualServer], node: &HashSet<IpAddr>, found: &mut Found) {
    for vs in servers {
        let proto = match vs.protocol.as_str() {
            "TCP" => 6,
            "UDP" => 17,
            "SCTP" => 132,
            _ => continue,
        };
        let Ok(a) = vs.address.parse::<IpAddr>() else {
            continue;
        };
        if node.contains(&a) {
            found.add(
                vs.port,
                proto,
                PortKind::NodePort,
                if a.is_ipv6() { V6 } else { V4 },
                IPVS,
            );
        }
    }
}

/// The facts, from the sysctls and what the data plane serves (pure).
pub fn judge(range: Option<PortRange>, reserved: Vec<PortRange>, found: &Found) -> NodePortFacts {
    let reserved_now = |p: u16| reserved.iter().any(|r| r.contains(p));
    let names = |bits: u8, all: &[(u8, &str)]| -> Vec<String> {
        all.iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|(_, n)| n.to_string())
            .collect()
    };
    let sources = [(IPTABLES_NFT, "iptables-nft"), (NFTABLES, "nftables"), (IPVS, "ipvs")];
    let mut exposed = Vec::new();
    let mut in_range = 0u64;
    let mut add_ports = Vec::new();
    for (&(port, proto, kind), &(fams, srcs)) in &found.ports {
        if !range.is_some_and(|r| r.contains(port)) || reserved_now(port) {
            continue;
        }
        in_range += 1;
        add_ports.push(PortRange {
            first: port,
            last: port,
        });
        if exposed.len() < MAX_LISTED {
            exposed.push(NodePort {
                port,
                protocol: protocol_name(proto),
                kind,
                families: names(fams, &[(V4, "ipv4"), (V6, "ipv6")]),
                sources: names(srcs, &sources),
            });
        }
    }
    let reserve_value = (!add_ports.is_empty()).then(|| {
        add_ports.extend(reserved.iter().copied());
        format_ranges(&merge(add_ports))
    });
    let source = names(found.sources(), &sources);
    NodePortFacts {
        ip_local_port_range: range,
        ip_local_reserved_ports: reserved,
        source: if source.is_empty() {
            "none".into()
        } else {
            source.join("+")
        },
        node_ports: found.ports.len() as u64,
        health_check_node_ports: found.ports.keys().filter(|k| k.2 == PortKind::HealthCheck).count() as u64,
        in_ephemeral_range: in_range,
        exposed,
        reserve_value,
        undecoded: found.undecoded,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------
// The probe.

fn nl(e: NlError) -> ProbeError {
    ProbeError::NfNetlink {
        what: "kube-proxy's NodePort chains and maps".into(),
        source: e,
    }
}

/// Both families' NodePorts in nf_tables at one generation, reused while it holds: read
/// again, up to [`nft_count::ATTEMPTS`] times, when a commit fell between the two families'
/// walks (kube-proxy commits often on a busy node; the soak saw a run fail on it).
fn nf_node_ports(
    host: &Host,
    memory: &super::Memory,
    deadline: std::time::Instant,
) -> Result<(Found, u32, bool), ProbeError> {
    let mut why = Vec::new();
    for _ in 0..nft_count::ATTEMPTS {
        match nf_node_ports_once(host, memory, deadline)? {
            Ok(r) => return Ok(r),
            Err(gens) => why.push(gens),
        }
    }
    Err(nl(NlError::Changed(format!(
        "generations {} between the families",
        why.join(", then ")
    ))))
}

/// One try: Err(the generations) when the families were read at different ones.
fn nf_node_ports_once(
    host: &Host,
    memory: &super::Memory,
    deadline: std::time::Instant,
) -> Result<Result<(Found, u32, bool), String>, ProbeError> {
    let families = [Family::Ip, Family::Ip6];
    let counted = super::counted::counts_now(host, &memory.node_ports, &families, deadline, |family| {
        let plan = nft_count::Plan { family, sets: true };
        let c = nft_count::count(&mut || host.netlink(NETLINK_NETFILTER), plan, deadline, &|| {
            Walk::new(family)
        })?;
        Ok((c.tally.found, c.generation, c.attempts, c.bytes))
    })
    .map_err(|(f, e)| ProbeError::NfNetlink {
        what: format!("kube-proxy's NodePort chains and maps ({})", f.as_str()),
        source: e,
    })?;
    let mut all = Found::default();
    let mut gens = Vec::new();
    let mut reused = true;
    for (found, how) in &counted {
        all.merge(found);
        gens.push(how.generation);
        reused &= how.reused;
    }
    if gens.iter().any(|g| *g != gens[0]) {
        return Ok(Err(format!("{gens:?}")));
    }
    Ok(Ok((all, gens[0], reused)))
}

/// Sizes of the single read of a sysctl file, tried in turn.
const SYSCTL_READS: &[usize] = &[4 << 10, 64 << 10, 512 << 10];

/// A sysctl file in one read() from offset 0. The kernel answers a read at a
/// later offset with end of file (proc_do_large_bitmap, proc_dointvec), so a
/// reader that reads in pieces gets a cut list: std's `read_to_end` starts
/// with a 32-byte read, and `ip_local_reserved_ports` longer than 32
/// characters came back cut there (seen on this kernel). A read that fills
/// its buffer is retried with a larger one; the longest list (every other
/// port) is about 196 KiB.
pub fn read_sysctl(host: &Host, node_path: &str) -> Result<Option<String>, ProbeError> {
    use std::io::Read;
    let path = host.path(node_path);
    let io = |e: std::io::Error| crate::host::ReadError::Io {
        path: path.display().to_string(),
        source: e,
    };
    for &size in SYSCTL_READS {
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e).into()),
        };
        let mut buf = vec![0u8; size];
        let n = f.read(&mut buf).map_err(io)?;
        if n < size {
            buf.truncate(n);
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
    }
    Err(crate::host::ReadError::TooLarge {
        path: path.display().to_string(),
        limit: SYSCTL_READS[SYSCTL_READS.len() - 1] as u64,
    }
    .into())
}

fn read(
    host: &Host,
    memory: &super::Memory,
    node: &HashSet<IpAddr>,
    deadline: std::time::Instant,
) -> Result<Probed<NodePortFacts>, ProbeError> {
    let Some(range_text) = read_sysctl(host, PORT_RANGE)? else {
        return Ok(Probed::Absent(format!("{PORT_RANGE} does not exist (no IPv4 stack)")));
    };
    let range = parse_port_range(&host.path(PORT_RANGE).display().to_string(), &range_text)?;
    let reserved = match read_sysctl(host, RESERVED_PORTS)? {
        Some(t) => parse_reserved_ports(&host.path(RESERVED_PORTS).display().to_string(), &t)?,
        None => Vec::new(),
    };
    let (mut found, generation, reused) = if super::modules::tool_would_load(host, "nf_tables") {
        (Found::default(), 0, false)
    } else {
        nf_node_ports(host, memory, deadline)?
    };
    if let Some(text) = host.read_optional(PROC_IP_VS)? {
        let servers = super::ipvs::proc::parse_proc_ip_vs(PROC_IP_VS, &text)?;
        ipvs_node_ports(&servers, node, &mut found);
    }
    let mut unread = Vec::new();
    for (what, path) in LEGACY_NAMES {
        if let Some(names) = host.read_optional(path)? {
            let tables: Vec<&str> = names
                .split_whitespace()
                .filter(|t| matches!(*t, "nat" | "filter"))
                .collect();
            if !tables.is_empty() {
                unread.push(format!("{what} ({})", tables.join(", ")));
            }
        }
    }
    Ok(Probed::Present(NodePortFacts {
        generation,
        table_reused: reused,
        unread,
        ..judge(Some(range), reserved, &found)
    }))
}

/// What the probe keeps between runs (its row's `memory`): the NodePorts found per family, by
/// ruleset generation.
pub type Memory = super::counted::CountCache<Found>;

pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<NodePortFacts>, ProbeError> {
    if !ctx.host.kernel().netlink() {
        return Ok(Probed::Absent(
            "NodePorts are read over netlink on the node itself (--host-root /) only".into(),
        ));
    }
    // The node's addresses, for IPVS: kube-ipvs0 holds the service IPs, not node addresses.
    let local = super::ipvs::interface::of_host(&ctx.host, deadline.at()).await?;
    let node: HashSet<IpAddr> = local
        .addresses
        .into_iter()
        .filter(|(i, _)| i != super::ipvs::interface::KUBE_IPVS0)
        .map(|(_, a)| a)
        .collect();
    let host = ctx.host.clone();
    let memory = ctx.memory.clone();
    let at = deadline.at();
    super::blocking(ProbeName::NodePorts, move || read(&host, &memory, &node, at)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: u16, last: u16) -> PortRange {
        PortRange { first, last }
    }

    #[test]
    fn port_range_as_the_kernel_prints_it() {
        // The kernel's default (this machine's /proc/sys/net/ipv4/ip_local_port_range).
        assert_eq!(parse_port_range("f", "32768\t60999\n").unwrap(), r(32768, 60999));
        assert_eq!(parse_port_range("f", "1024 65535\n").unwrap(), r(1024, 65535));
        for bad in ["", "32768\n", "1 2 3", "a b", "60999 32768", "1024 65536"] {
            assert!(parse_port_range("f", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_ports_lists_and_ranges() {
        assert_eq!(parse_reserved_ports("f", "\n").unwrap(), vec![]);
        // As the kernel prints a list it was given as "30080,30000-30010,30011,9100".
        assert_eq!(
            parse_reserved_ports("f", "9100,30000-30011,30080\n").unwrap(),
            vec![r(9100, 9100), r(30000, 30011), r(30080, 30080)]
        );
        assert_eq!(
            parse_reserved_ports("f", "30080, 30000-30010,30011,30005-30006").unwrap(),
            vec![r(30000, 30011), r(30080, 30080)]
        );
        for bad in ["x", "30010-30000", "1-2-3", "70000", "1\n2"] {
            assert!(parse_reserved_ports("f", bad).is_err(), "{bad:?}");
        }
        assert_eq!(format_ranges(&[r(9100, 9100), r(30000, 30011)]), "9100,30000-30011");
        assert_eq!(merge(vec![r(65535, 65535), r(0, 65534)]), vec![r(0, 65535)]);
    }

    #[test]
    fn a_long_sysctl_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/sys/net/ipv4")).unwrap();
        let list: Vec<String> = (1..=40_000u32).step_by(2).map(|p| p.to_string()).collect();
        let text = list.join(",") + "\n";
        std::fs::write(dir.path().join(&RESERVED_PORTS[1..]), &text).unwrap();
        let host = Host::new(dir.path());
        assert_eq!(read_sysctl(&host, RESERVED_PORTS).unwrap().unwrap(), text);
        assert_eq!(parse_reserved_ports("f", &text).unwrap().len(), 20_000);
        assert_eq!(read_sysctl(&host, PORT_RANGE).unwrap(), None);
    }

    #[test]
    fn exposed_are_those_in_range_and_not_reserved() {
        let mut f = Found::default();
        f.add(30080, 6, PortKind::NodePort, V4, IPTABLES_NFT);
        f.add(30080, 6, PortKind::NodePort, V6, NFTABLES);
        f.add(30053, 17, PortKind::NodePort, V4, IPTABLES_NFT);
        f.add(30055, 6, PortKind::HealthCheck, V4, IPTABLES_NFT);
        f.add(32000, 6, PortKind::NodePort, V6, IPVS); // outside the range
        f.add(30090, 6, PortKind::NodePort, V4, IPTABLES_NFT); // reserved
        let facts = judge(Some(r(30050, 30100)), vec![r(30090, 30091)], &f);
        let ports: Vec<(u16, &str)> = facts.exposed.iter().map(|p| (p.port, p.protocol.as_str())).collect();
        assert_eq!(ports, [(30053, "udp"), (30055, "tcp"), (30080, "tcp")]);
        assert_eq!(facts.exposed[2].families, ["ipv4", "ipv6"]);
        assert_eq!(facts.exposed[2].sources, ["iptables-nft", "nftables"]);
        assert_eq!(facts.exposed[1].kind, PortKind::HealthCheck);
        assert_eq!(
            (
                facts.node_ports,
                facts.health_check_node_ports,
                facts.in_ephemeral_range
            ),
            (5, 1, 3)
        );
        assert_eq!(facts.reserve_value.as_deref(), Some("30053,30055,30080,30090-30091"));
        assert_eq!(facts.source, "iptables-nft+nftables+ipvs");
        let none = judge(Some(r(32768, 60999)), vec![], &f);
        assert_eq!((none.in_ephemeral_range, none.reserve_value), (0, None));
        assert_eq!(judge(None, vec![], &Found::default()).source, "none");
    }

    #[test]
    fn map_keys_of_any_length_never_panic() {
        let mut w = Walk::new(Family::Ip6);
        for key in [&[][..], &[6], &[6, 0, 0, 0, 0x75], &[6, 0, 0, 0, 0x75, 0x30, 0, 0]] {
            w.element("service-nodeports", Element { key, chain: None }).unwrap();
        }
        assert_eq!(w.found.undecoded, 3);
        let facts = judge(Some(r(1024, 65535)), vec![], &w.found);
        assert_eq!(facts.exposed[0].port, 30000);
        assert_eq!(facts.exposed[0].families, ["ipv6"]);
        assert_eq!(facts.undecoded, 3);
    }

    #[test]
    fn ipvs_virtual_servers_on_node_addresses_only() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
TCP  0A600014:0050 rr\n\
TCP  C0A80002:7594 rr\n  -> 0AF40102:0050      Masq    1      0          0\n";
        let vs = super::super::ipvs::proc::parse_proc_ip_vs("/proc/net/ip_vs", text).unwrap();
        let mut f = Found::default();
        ipvs_node_ports(&vs, &HashSet::from(["192.168.0.2".parse().unwrap()]), &mut f);
        let facts = judge(Some(r(30000, 30100)), vec![], &f);
        assert_eq!(facts.node_ports, 1, "the ClusterIP 10.96.0.20:80 is no NodePort");
        assert_eq!(facts.exposed[0].port, 30100);
        assert_eq!(facts.source, "ipvs");
    }
}
