//! Source NAT: the translated source ports in use per (translated source,
//! destination, destination port, protocol, conntrack zone), counted from the
//! conntrack dumps the conntrack_stale probe streams, and the
//! source NAT rules of nat POSTROUTING (MASQUERADE, SNAT) with or without
//! `random-fully`.
//!
//! Ports in use: an entry with `IPS_SRC_NAT` has its translated source in its
//! reply tuple's destination (address, port); the reply tuple's source is the
//! destination the packets go to (after any DNAT). The kernel keeps every
//! reply tuple unique (per conntrack zone: `nf_nat_used_tuple` in
//! net/netfilter/nf_nat_core.c refuses a tuple already taken), so within a
//! group each entry holds one distinct port and the entries are the ports in use.
//! Two zones may each hold the same translated tuple: they are two groups,
//! each with its own ports. ICMP has no ports: the NAT core keeps the echo id
//! unique instead (`nf_nat_l4proto_unique_tuple`, ids 0-65535 unless a range
//! is given), so an ICMP group is (translated source, destination, zone) and
//! its ids in use, with port 0.
//!
//! Ports allowed: a rule's own range (`--to-ports`, `to :A-B`), else the NAT
//! core's default (net/netfilter/nf_nat_core.c, `nf_nat_l4proto_unique_tuple`,
//! without `NF_NAT_RANGE_PROTO_SPECIFIED`): 1024-65535 for an original source
//! port from 1024 (600-1023 and 1-511 below it) — not ip_local_port_range.
//! Conntrack does not say which rule made an entry: a group takes the
//! narrowest decoded range of its family that holds every port it uses
//! ([`capacity`]), so a near-full small range is never diluted by the default.
//!
//! Memory: the counts of at most [`MAX_GROUPS`] groups (entries of groups
//! beyond it are counted in `entries_ungrouped`), whatever the table's size;
//! an IPv4 group in 24 bytes (its key packed, [`Key4`]), and the listed
//! groups chosen in a buffer of twice [`MAX_LISTED`], never a list of all.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::netlink::ct_dump::{CtEntry, NatEntry, ICMP, ICMPV6};
use crate::netlink::nft::Family;
use crate::netlink::nft_snat::FoundRule;

/// Groups counted one by one.
pub const MAX_GROUPS: usize = 10_000;
/// Groups listed in the facts (the fullest first).
pub const MAX_LISTED: usize = 20;
/// Rules listed in the facts (a CNI may write one per pod); beyond, the rest is said unread.
pub const MAX_RULES: usize = 512;
/// The NAT core's range for a source port from 1024 (nf_nat_core.c).
pub const DEFAULT_RANGE: (u16, u16) = (1024, 65535);

/// One (translated source, destination, port, protocol) group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnatGroup {
    /// The translated source address (the node's, for MASQUERADE).
    pub source: IpAddr,
    pub destination: IpAddr,
    /// 0 for ICMP (no ports: its ids are counted, see the module doc).
    pub port: u16,
    pub protocol: String,
    /// The conntrack zone (`CT --zone`); 0, the default, is not written.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zone: u16,
    /// Distinct translated source ports (ICMP: ids) in use (= entries, see the module doc).
    pub ports_in_use: u64,
    /// The range the ports are taken from: `20000-20009`.
    pub range: String,
    /// Ports in that range.
    pub range_size: u64,
    /// `rule` (a decoded rule's range) or `default` (the NAT core's).
    pub range_from: String,
    /// ports_in_use / range_size.
    pub fill: f64,
}

/// A source NAT rule of nat POSTROUTING (or a chain it reaches).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnatRule {
    /// `iptables-nft`, `iptables-legacy` or `nftables` (kube-proxy's table).
    pub backend: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    pub table: String,
    pub chain: String,
    /// Position in the chain, from 1.
    pub position: u32,
    /// `MASQUERADE` or `SNAT`.
    pub action: String,
    pub random_fully: bool,
    /// `--to-ports` / `to :A-B`: `20000-20009`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<String>,
    /// Its packet counter; None: the rule has no counter (kube-proxy's
    /// nftables rules, iptables-legacy-save without -c), so whether it carries
    /// traffic is unknown, never taken as 0.
    pub packets: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnatFacts {
    /// Entries with the SRC_NAT status seen (ports-carrying protocols and ICMP).
    pub entries: u64,
    /// Groups (all of them, even beyond the list).
    pub groups: u64,
    /// Groups not counted one by one (beyond [`MAX_GROUPS`]).
    pub groups_dropped: u64,
    /// Entries of those groups.
    pub entries_ungrouped: u64,
    /// The fullest [`MAX_LISTED`] groups.
    pub top: Vec<SnatGroup>,
    /// The fullest group's fill (None: no SRC_NAT entry).
    pub max_fill: Option<f64>,
    /// The source NAT rules read (up to [`MAX_RULES`]; beyond, said in `rule_errors`).
    pub rules: Vec<SnatRule>,
    /// Why a backend's rules could not be read (its rules are missing here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_errors: Vec<String>,
}

fn is_zero(z: &u16) -> bool {
    *z == 0
}

/// The protocol's name as conntrack -p takes it.
pub fn protocol_name(p: u8) -> String {
    match p {
        ICMP => "icmp".into(),
        ICMPV6 => "icmpv6".into(),
        p => super::service_endpoints::protocol_name(p),
    }
}

/// (translated source, destination, destination port, protocol, zone).
type GroupKey = (IpAddr, IpAddr, u16, u8, u16);

/// A group's counts: its entries (ports in use: at most 65,536 per group and
/// zone, so u32 holds them) and the lowest and highest port.
#[derive(Debug, Clone, Copy)]
struct Fill {
    entries: u32,
    lo: u16,
    hi: u16,
}

/// The key of a group of IPv4 addresses, packed: 16 bytes where [`GroupKey`]
/// takes 40 (IpAddr is 17 bytes whatever its family). Most nodes' groups are IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key4 {
    source: u32,
    destination: u32,
    port: u16,
    zone: u16,
    proto: u8,
}

impl Key4 {
    fn key(self) -> GroupKey {
        (
            IpAddr::V4(self.source.into()),
            IpAddr::V4(self.destination.into()),
            self.port,
            self.proto,
            self.zone,
        )
    }
}

/// Counts one entry of port `port` into `map`'s group `key`, which is made when
/// `room`; false when the group is not there and there is no room.
fn bump<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Fill>, key: K, port: u16, room: bool) -> bool {
    if let Some(f) = map.get_mut(&key) {
        f.entries = f.entries.saturating_add(1);
        f.lo = f.lo.min(port);
        f.hi = f.hi.max(port);
        true
    } else if room {
        map.insert(
            key,
            Fill {
                entries: 1,
                lo: port,
                hi: port,
            },
        );
        true
    } else {
        false
    }
}

/// A group as [`Grouper::facts`] ranks it, before the listed ones are named.
struct Ranked {
    fill: f64,
    key: GroupKey,
    entries: u32,
    range: (u16, u16),
    size: u64,
    from: &'static str,
}

/// Groups SRC_NAT entries as the dump streams them.
#[derive(Debug, Default)]
pub struct Grouper {
    /// IPv4 groups: (translated source, destination, port, protocol, zone) → counts.
    v4: HashMap<Key4, Fill>,
    /// IPv6 groups (and any pair of addresses not both IPv4).
    other: HashMap<GroupKey, Fill>,
    pub entries: u64,
    /// The groups beyond [`MAX_GROUPS`], each by a 64-bit hash of its key (8 bytes
    /// where the key takes 40; two of 10,000 keys share a hash with a chance
    /// of about 3 in 10^12, which would undercount them by one).
    dropped: std::collections::HashSet<u64>,
    dropped_hasher: std::hash::RandomState,
    dropped_count: u64,
    ungrouped: u64,
}

/// Distinct groups beyond the cap remembered to count them (then only counted as entries).
const MAX_DROPPED_TRACKED: usize = 10_000;

impl Grouper {
    /// An entry of the default zone.
    pub fn add(&mut self, e: &CtEntry) {
        self.add_in(e, 0);
    }

    /// An entry of a dump, in its zone (ICMP: its id as the port).
    pub fn add_nat(&mut self, n: &NatEntry) {
        self.add_in(&n.entry, n.zone);
    }

    fn add_in(&mut self, e: &CtEntry, zone: u16) {
        if !e.src_nat() {
            return;
        }
        self.entries += 1;
        let key = (e.reply_dst, e.reply_src, e.reply_sport, e.l4proto, zone);
        let (p, room) = (e.reply_dport, self.v4.len() + self.other.len() < MAX_GROUPS);
        let grouped = match key {
            (IpAddr::V4(source), IpAddr::V4(destination), port, proto, zone) => {
                let k = Key4 {
                    source: source.into(),
                    destination: destination.into(),
                    port,
                    zone,
                    proto,
                };
                bump(&mut self.v4, k, p, room)
            }
            _ => bump(&mut self.other, key, p, room),
        };
        if !grouped {
            self.ungrouped += 1;
            let hash = std::hash::BuildHasher::hash_one(&self.dropped_hasher, key);
            if self.dropped.len() < MAX_DROPPED_TRACKED {
                if self.dropped.insert(hash) {
                    self.dropped_count += 1;
                }
            } else if !self.dropped.contains(&hash) {
                // Beyond both caps a group is counted once per entry: an upper bound.
                self.dropped_count += 1;
            }
        }
    }

    /// The facts, each group against the narrowest range of `ranges` (of its
    /// family) holding every port it uses. Only the listed groups are made into
    /// [`SnatGroup`]s (names and range text): the rest are ranked as keys.
    pub fn facts(self, rules: &[FoundRule]) -> SnatFacts {
        let ranges_of = |family: Family| -> Vec<(u16, u16)> {
            rules
                .iter()
                .filter(|r| r.family == family)
                .filter_map(|r| r.action.ports)
                .collect()
        };
        let ranges = [ranges_of(Family::Ip), ranges_of(Family::Ip6)];
        let group_count = self.v4.len() + self.other.len();
        let rank = |(key, f): (GroupKey, Fill)| {
            let (source, _, _, proto, _) = key;
            // ICMP: rules' port ranges are for ports-carrying protocols
            // (iptables and nft take them with a protocol only); ids 0-65535.
            let (range, from) = if matches!(proto, ICMP | ICMPV6) {
                ((0, 65535), "default")
            } else {
                capacity(&ranges[usize::from(source.is_ipv6())], f.lo, f.hi)
            };
            let size = u64::from(range.1 - range.0) + 1;
            Ranked {
                fill: f64::from(f.entries) / size as f64,
                key,
                entries: f.entries,
                range,
                size,
                from,
            }
        };
        // Fullest first; among equals by (source, destination, port, zone).
        let order = |a: &Ranked, b: &Ranked| {
            let (ka, kb) = (a.key, b.key);
            b.fill
                .total_cmp(&a.fill)
                .then_with(|| (ka.0, ka.1, ka.2, ka.4).cmp(&(kb.0, kb.1, kb.2, kb.4)))
        };
        // The fullest MAX_LISTED, kept in a buffer of twice that: when it is full,
        // the better half stays.
        let mut ranked: Vec<Ranked> = Vec::with_capacity(2 * MAX_LISTED);
        let all = self.v4.into_iter().map(|(k, f)| (k.key(), f)).chain(self.other);
        for r in all.map(rank) {
            if ranked.len() == 2 * MAX_LISTED {
                ranked.select_nth_unstable_by(MAX_LISTED - 1, order);
                ranked.truncate(MAX_LISTED);
            }
            ranked.push(r);
        }
        if ranked.len() > MAX_LISTED {
            ranked.select_nth_unstable_by(MAX_LISTED - 1, order);
            ranked.truncate(MAX_LISTED);
        }
        ranked.sort_by(order);
        let top: Vec<SnatGroup> = ranked
            .into_iter()
            .map(|r| {
                let (source, destination, port, proto, zone) = r.key;
                SnatGroup {
                    source,
                    destination,
                    port,
                    protocol: protocol_name(proto),
                    zone,
                    ports_in_use: u64::from(r.entries),
                    range: format!("{}-{}", r.range.0, r.range.1),
                    range_size: r.size,
                    range_from: r.from.into(),
                    fill: r.fill,
                }
            })
            .collect();
        let groups = group_count as u64 + self.dropped_count;
        let max_fill = top.first().map(|g| g.fill);
        SnatFacts {
            entries: self.entries,
            groups,
            groups_dropped: self.dropped_count,
            entries_ungrouped: self.ungrouped,
            top,
            max_fill,
            ..Default::default()
        }
    }
}

/// The range a group's ports come from: the narrowest of `ranges` holding
/// [lo, hi], else the NAT core's default for ports of that size.
pub fn capacity(ranges: &[(u16, u16)], lo: u16, hi: u16) -> ((u16, u16), &'static str) {
    let best = ranges
        .iter()
        .filter(|(a, b)| a <= b && *a <= lo && hi <= *b)
        .min_by_key(|(a, b)| b - a);
    if let Some(r) = best {
        return (*r, "rule");
    }
    let default = if hi < 512 {
        (1, 511)
    } else if lo >= 600 && hi < 1024 {
        (600, 1023)
    } else if lo >= 1024 {
        DEFAULT_RANGE
    } else {
        // Ports on both sides of 1024: no single default range holds them.
        (1, 65535)
    };
    (default, "default")
}

/// The facts' form of a rule read over nf_tables.
pub fn rule_of(r: &FoundRule) -> SnatRule {
    SnatRule {
        backend: if r.table == "kube-proxy" {
            "nftables"
        } else {
            "iptables-nft"
        }
        .into(),
        family: if r.family == Family::Ip { "ipv4" } else { "ipv6" }.into(),
        table: r.table.clone(),
        chain: r.chain.clone(),
        position: r.position,
        action: r.action.kind.into(),
        random_fully: r.action.random_fully(),
        ports: r.action.ports.map(|(a, b)| format!("{a}-{b}")),
        packets: r.action.packets,
    }
}

/// The rules of the iptables probe's latest legacy saves (both families), and
/// why a family's could not be read
/// ([`super::service_endpoints::iptables::LegacySaves::snat_rules`]).
pub type LegacyRules = (Vec<FoundRule>, Vec<String>);

/// Edges between nat chains kept from a legacy save (kube-proxy's per-service
/// chains excepted: no source NAT is reached through them).
pub const MAX_LEGACY_EDGES: usize = 4096;

/// The source NAT rules of nat POSTROUTING (and the chains it reaches) in an
/// iptables-save text, line by line.
#[derive(Debug)]
pub struct LegacySnatText {
    family: Family,
    in_nat: bool,
    rules: Vec<FoundRule>,
    positions: HashMap<String, u32>,
    current: (String, u32),
    edges: Vec<(String, String)>,
    overflow: bool,
}

impl LegacySnatText {
    pub fn new(family: Family) -> Self {
        LegacySnatText {
            family,
            in_nat: false,
            rules: Vec::new(),
            positions: HashMap::new(),
            current: (String::new(), 0),
            edges: Vec::new(),
            overflow: false,
        }
    }

    /// One line of the save, with its `[packets:bytes] ` prefix (`-c`) or without.
    pub fn feed_line(&mut self, line: &str) {
        let line = line.trim();
        // `-c`: the rule's counter; not numbers, or no prefix: no counter (unknown, never 0).
        let (packets, line) = match line.strip_prefix('[').and_then(|r| r.split_once("] ")) {
            Some((counts, rule)) => (counts.split_once(':').and_then(|(p, _)| p.parse::<u64>().ok()), rule),
            None => (None, line),
        };
        if let Some(t) = line.strip_prefix('*') {
            self.in_nat = t == "nat";
            return;
        }
        if !self.in_nat {
            return;
        }
        let Some(rest) = line.strip_prefix("-A ") else { return };
        let Some(chain) = rest.split_whitespace().next() else {
            return;
        };
        // A rule's place in its chain. kube-proxy's per-service chains (tens of thousands
        // on a large node) are counted in a single slot: a save prints each chain's rules
        // together, and a map entry per chain cost ~4 MiB at 10000x5. Other chains (a
        // handful) keep one entry each, wherever their rules are printed.
        let position = if per_service_chain(chain) {
            if self.current.0 != *chain {
                self.current = (chain.to_string(), 0);
            }
            self.current.1 += 1;
            self.current.1
        } else {
            let p = self.positions.entry(chain.to_string()).or_insert(0);
            *p += 1;
            *p
        };
        // Per-service chains matter only for a source NAT of their own (their jumps are
        // not followed): most of a large save's lines end here, unsplit.
        if per_service_chain(chain) && !rest.contains("-j MASQUERADE") && !rest.contains("-j SNAT") {
            return;
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        let target = words.windows(2).find(|w| w[0] == "-j" || w[0] == "-g").map(|w| w[1]);
        match target {
            Some(kind @ ("MASQUERADE" | "SNAT")) => {
                let random_fully = words.contains(&"--random-fully");
                let ports = words
                    .windows(2)
                    .find(|w| w[0] == "--to-ports" || w[0] == "--to-source")
                    .and_then(|w| {
                        let p = if w[0] == "--to-ports" {
                            w[1]
                        } else {
                            to_source_ports(self.family, w[1])?
                        };
                        let (a, b) = p.split_once('-').unwrap_or((p, p));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    });
                let mut flags = 0;
                if random_fully {
                    flags |= crate::netlink::nft_uapi::NF_NAT_RANGE_PROTO_RANDOM_FULLY;
                }
                if ports.is_some() {
                    flags |= crate::netlink::nft_uapi::NF_NAT_RANGE_PROTO_SPECIFIED;
                }
                self.rules.push(FoundRule {
                    family: self.family,
                    table: "nat".into(),
                    chain: chain.to_string(),
                    position,
                    action: crate::netlink::nft_snat::SnatAction {
                        kind: if kind == "SNAT" { "SNAT" } else { "MASQUERADE" },
                        flags,
                        ports,
                        packets,
                    },
                });
            }
            Some(to) if !per_service_chain(chain) => {
                if self.edges.len() < MAX_LEGACY_EDGES {
                    self.edges.push((chain.to_string(), to.to_string()));
                } else {
                    self.overflow = true;
                }
            }
            _ => {}
        }
    }

    /// The rules in chains POSTROUTING reaches; an error when the edges overflowed.
    pub fn finish(self) -> Result<Vec<FoundRule>, String> {
        if self.overflow {
            return Err(format!(
                "more than {MAX_LEGACY_EDGES} jumps between nat chains in the legacy save: its source NAT rules are not listed"
            ));
        }
        let mut reach = vec!["POSTROUTING".to_string()];
        let mut i = 0;
        while i < reach.len() {
            for (from, to) in &self.edges {
                if *from == reach[i] && !reach.contains(to) {
                    reach.push(to.clone());
                }
            }
            i += 1;
        }
        Ok(self.rules.into_iter().filter(|r| reach.contains(&r.chain)).collect())
    }
}

/// The ports of an SNAT `--to-source`: `1.2.3.4:1000-2000`, `[fd00::1]:1000-2000`
/// (a bare IPv6 address has colons but no ports).
fn to_source_ports(family: Family, to: &str) -> Option<&str> {
    match to.rsplit_once(']') {
        Some((_, rest)) => rest.strip_prefix(':'),
        None if family == Family::Ip => to.rsplit_once(':').map(|(_, p)| p),
        None => None,
    }
}

fn per_service_chain(chain: &str) -> bool {
    [
        "KUBE-SVC-",
        "KUBE-SEP-",
        "KUBE-EXT-",
        "KUBE-FW-",
        "KUBE-SVL-",
        "KUBE-XLB-",
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-MARK-",
    ]
    .iter()
    .any(|p| chain.starts_with(p))
}

/// The SNAT facts: the groups against the rules' ranges, and the rules of
/// iptables-nft and kube-proxy's nftables table (over netlink, when nf_tables
/// is loaded: asking would load it) and of the legacy saves.
pub fn read_rules(
    host: &crate::host::Host,
    grouper: Grouper,
    nf_tables: bool,
    legacy: &LegacyRules,
    deadline: std::time::Instant,
) -> SnatFacts {
    use crate::netlink::{nft_snat, NETLINK_NETFILTER};
    let mut found: Vec<FoundRule> = Vec::new();
    let mut errors = legacy.1.clone();
    if nf_tables {
        for family in [Family::Ip, Family::Ip6] {
            let mut last = None;
            for _ in 0..crate::netlink::nft_count::ATTEMPTS {
                let r = host
                    .netlink(NETLINK_NETFILTER)
                    .and_then(|c| nft_snat::read(c, family, deadline));
                match r {
                    Err(crate::netlink::NlError::Changed(w)) => last = Some(w),
                    Ok((rules, skipped)) => {
                        if skipped > 0 {
                            errors.push(format!(
                                "{}: {skipped} chains reached from nat POSTROUTING beyond the first {} were not read",
                                family.as_str(),
                                nft_snat::MAX_CHAINS
                            ));
                        }
                        found.extend(rules);
                        last = None;
                        break;
                    }
                    Err(e) => {
                        last = Some(e.to_string());
                        break;
                    }
                }
            }
            if let Some(w) = last {
                errors.push(format!(
                    "{} source NAT rules over nf_tables netlink: {w}",
                    family.as_str()
                ));
            }
        }
    }
    let mut rules: Vec<SnatRule> = found.iter().map(rule_of).collect();
    rules.extend(legacy.0.iter().map(|r| SnatRule {
        backend: "iptables-legacy".into(),
        ..rule_of(r)
    }));
    if rules.len() > MAX_RULES {
        errors.push(format!(
            "{} source NAT rules beyond the first {MAX_RULES} were not listed",
            rules.len() - MAX_RULES
        ));
        rules.truncate(MAX_RULES);
    }
    found.extend(legacy.0.iter().cloned());
    SnatFacts {
        rules,
        rule_errors: errors,
        ..grouper.facts(&found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::ct_dump::{IPS_DST_NAT, IPS_SRC_NAT};
    use crate::netlink::nft_snat::SnatAction;

    fn snat(src: &str, dst: &str, dport: u16, port: u16) -> CtEntry {
        CtEntry {
            l4proto: 6,
            orig_src: Some("10.244.0.5".parse().unwrap()),
            orig_dst: dst.parse().unwrap(),
            orig_dport: dport,
            reply_src: dst.parse().unwrap(),
            reply_sport: dport,
            reply_dst: src.parse().unwrap(),
            reply_dport: port,
            status: IPS_SRC_NAT,
        }
    }

    fn rule(family: Family, ports: Option<(u16, u16)>) -> FoundRule {
        FoundRule {
            family,
            table: "nat".into(),
            chain: "POSTROUTING".into(),
            position: 1,
            action: SnatAction {
                kind: "MASQUERADE",
                flags: 0,
                ports,
                packets: Some(3),
            },
        }
    }

    #[test]
    fn groups_by_translated_source_and_destination_against_the_narrowest_range() {
        let mut g = Grouper::default();
        for p in 20000..20008 {
            g.add(&snat("192.168.0.2", "203.0.113.7", 443, p));
        }
        for p in [40000, 40001] {
            g.add(&snat("192.168.0.2", "203.0.113.8", 443, p));
        }
        let mut plain = snat("192.168.0.2", "203.0.113.9", 443, 1);
        plain.status = IPS_DST_NAT;
        g.add(&plain); // no SRC_NAT: not counted
        let f = g.facts(&[
            rule(Family::Ip, Some((20000, 20009))),
            rule(Family::Ip6, Some((20000, 20001))),
        ]);
        assert_eq!((f.entries, f.groups, f.groups_dropped), (10, 2, 0));
        assert_eq!(f.top[0].destination, "203.0.113.7".parse::<IpAddr>().unwrap());
        assert_eq!((f.top[0].ports_in_use, f.top[0].range_size), (8, 10));
        assert_eq!(
            (f.top[0].range.as_str(), f.top[0].range_from.as_str()),
            ("20000-20009", "rule")
        );
        assert_eq!(f.max_fill, Some(0.8));
        // Ports outside every rule's range: the NAT core's default.
        assert_eq!((f.top[1].range.as_str(), f.top[1].range_size), ("1024-65535", 64512));
        assert_eq!(Grouper::default().facts(&[]).max_fill, None);
        // Each family's groups against its own family's rules.
        let mut g = Grouper::default();
        for p in [20000, 20001] {
            g.add(&snat("fd00::2", "2001:db8::7", 443, p));
            g.add(&snat("192.168.0.2", "203.0.113.7", 443, p));
        }
        let f = g.facts(&[
            rule(Family::Ip, Some((20000, 20009))),
            rule(Family::Ip6, Some((20000, 20001))),
        ]);
        let by: Vec<(String, String)> = f.top.iter().map(|g| (g.source.to_string(), g.range.clone())).collect();
        assert_eq!(
            by,
            [
                ("fd00::2".into(), "20000-20001".into()),
                ("192.168.0.2".into(), "20000-20009".into())
            ]
        );
    }

    #[test]
    fn zones_are_groups_of_their_own_and_icmp_ids_are_counted() {
        let mut g = Grouper::default();
        let e = snat("192.168.0.2", "203.0.113.7", 443, 20000);
        // The same translated tuple in zones 1 and 2: two groups of one port each.
        for zone in [1, 2] {
            g.add_nat(&NatEntry {
                entry: e,
                zone,
                icmp: false,
            });
        }
        let ping = |id: u16| NatEntry {
            entry: CtEntry {
                l4proto: ICMP,
                orig_dport: 0,
                reply_sport: 0,
                reply_dport: id,
                ..snat("192.168.0.2", "203.0.113.9", 0, 0)
            },
            zone: 0,
            icmp: true,
        };
        for id in [7, 8, 9] {
            g.add_nat(&ping(id));
        }
        let f = g.facts(&[rule(Family::Ip, Some((20000, 20009)))]);
        assert_eq!((f.entries, f.groups), (5, 3));
        let by: Vec<(String, u16, u16, u64, String)> = f
            .top
            .iter()
            .map(|g| (g.protocol.clone(), g.port, g.zone, g.ports_in_use, g.range.clone()))
            .collect();
        assert_eq!(
            by,
            [
                ("tcp".into(), 443, 1, 1, "20000-20009".into()),
                ("tcp".into(), 443, 2, 1, "20000-20009".into()),
                // ICMP: no rule's port range, the NAT core's ids.
                ("icmp".into(), 0, 0, 3, "0-65535".into()),
            ]
        );
        let json = serde_json::to_value(&f.top).unwrap();
        assert_eq!(json[0]["zone"], 1);
        assert!(json[2].get("zone").is_none(), "zone 0 is not written: {json}");
    }

    #[test]
    fn legacy_counters_from_the_save_with_c() {
        let mut t = LegacySnatText::new(Family::Ip);
        for l in [
            "*nat",
            ":POSTROUTING ACCEPT [0:0]",
            "[12:720] -A POSTROUTING -s 10.9.0.0/16 -j MASQUERADE",
            "[x:1] -A POSTROUTING -j MASQUERADE --random-fully",
            "-A POSTROUTING -j MASQUERADE --to-ports 1000-2000",
        ] {
            t.feed_line(l);
        }
        let r = t.finish().unwrap();
        let got: Vec<(u32, Option<u64>)> = r.iter().map(|r| (r.position, r.action.packets)).collect();
        // A counter that is not a number, or none: unknown, never 0.
        assert_eq!(got, [(1, Some(12)), (2, None), (3, None)]);
        assert_eq!(r[2].action.ports, Some((1000, 2000)));
    }

    #[test]
    fn memory_is_capped_and_what_is_dropped_is_counted() {
        let mut g = Grouper::default();
        for i in 0..(MAX_GROUPS as u32 + 5) {
            let dst = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            g.add(&snat("192.168.0.2", &dst, 80, 30000));
            g.add(&snat("192.168.0.2", &dst, 80, 30001));
        }
        let f = g.facts(&[]);
        assert_eq!(
            (f.groups, f.groups_dropped, f.entries_ungrouped),
            (MAX_GROUPS as u64 + 5, 5, 10)
        );
        assert_eq!(f.top.len(), MAX_LISTED);
        assert_eq!(f.entries, 2 * (MAX_GROUPS as u64 + 5));
    }

    #[test]
    fn the_listed_groups_are_the_fullest_in_order_of_fill() {
        let mut g = Grouper::default();
        // 60 groups; group i has (i * 7) % 60 + 1 entries: distinct counts.
        for i in 0..60u32 {
            let dst = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            for p in 0..(i * 7) % 60 + 1 {
                g.add(&snat("192.168.0.2", &dst, 80, 30000 + p as u16));
            }
        }
        let f = g.facts(&[]);
        let got: Vec<u64> = f.top.iter().map(|t| t.ports_in_use).collect();
        assert_eq!(got, (41..=60).rev().collect::<Vec<u64>>());
        assert_eq!(f.groups, 60);
        assert_eq!(f.max_fill, Some(60.0 / 64512.0));
    }

    #[test]
    fn default_ranges_follow_the_nat_core() {
        assert_eq!(capacity(&[], 30000, 30010), ((1024, 65535), "default"));
        assert_eq!(capacity(&[], 700, 800), ((600, 1023), "default"));
        assert_eq!(capacity(&[], 10, 20), ((1, 511), "default"));
        assert_eq!(capacity(&[(1, 100), (10, 30)], 10, 20), ((10, 30), "rule"));
        assert_eq!(capacity(&[(10, 30)], 10, 40), ((1, 511), "default"));
        assert_eq!(capacity(&[], 1000, 2000), ((1, 65535), "default"));
    }

    #[test]
    fn legacy_save_rules_reached_from_postrouting() {
        let mut t = LegacySnatText::new(Family::Ip);
        for l in [
            "*filter",
            "-A FORWARD -j MASQUERADE",
            "*nat",
            ":POSTROUTING ACCEPT [0:0]",
            "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
            "-A POSTROUTING -s 10.9.0.0/16 -p tcp -j MASQUERADE --to-ports 20000-20009",
            "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
            "-A KUBE-POSTROUTING -j MASQUERADE --random-fully",
            "-A OTHER -j SNAT --to-source 192.0.2.1:1000-2000",
            "COMMIT",
        ] {
            t.feed_line(l);
        }
        let r = t.finish().unwrap();
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            (r[0].chain.as_str(), r[0].position, r[0].action.ports),
            ("POSTROUTING", 2, Some((20000, 20009)))
        );
        assert!(!r[0].action.random_fully());
        assert_eq!(
            (r[1].chain.as_str(), r[1].action.random_fully(), r[1].action.packets),
            ("KUBE-POSTROUTING", true, None)
        );
        let mut t = LegacySnatText::new(Family::Ip);
        t.feed_line("*nat");
        t.feed_line("-A POSTROUTING -j SNAT --to-source 192.0.2.1:1000-2000");
        assert_eq!(t.finish().unwrap()[0].action.ports, Some((1000, 2000)));
        for (to, want) in [
            ("fd00::1", None),
            ("[fd00::1]:1000-2000", Some((1000, 2000))),
            ("[fd00::1]", None),
        ] {
            let mut t = LegacySnatText::new(Family::Ip6);
            t.feed_line("*nat");
            t.feed_line(&format!("-A POSTROUTING -j SNAT --to-source {to}"));
            assert_eq!(t.finish().unwrap()[0].action.ports, want, "{to}");
        }
    }
}
