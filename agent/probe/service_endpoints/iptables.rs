//! Service ports and endpoints from kube-proxy's iptables-nft chains.
//!
//! In `nat`, a `KUBE-SERVICES` rule matching an exact destination address,
//! protocol and port names a service port and jumps to its chain (`KUBE-SVC-*`,
//! `KUBE-EXT-*` for external/LB IPs, `KUBE-FW-*`); a `KUBE-NODEPORTS` rule
//! matching a protocol and port (no address) names a NodePort. Following the
//! jumps between `KUBE-*` chains (`KUBE-MARK-MASQ` aside) leads to `KUBE-SEP-*`
//! chains whose `DNAT --to-destination` is an endpoint. In `filter`, kube-proxy's
//! `KUBE-SERVICES` / `KUBE-EXTERNAL-SERVICES` / `KUBE-NODEPORTS` REJECT for the
//! same match is a service port with no endpoints at all.

use super::{Graph, ServicePort, ServiceTable};
use crate::netlink::nft::{Chain, Family, Rule, Set};
use crate::netlink::nft_count::Tally;
use crate::netlink::nft_expr::{rule_facts, RuleFacts, SourceGuard};
use crate::netlink::NlError;

/// Chains that mark packets, never lead to an endpoint.
const NOT_A_PATH: &[&str] = &["KUBE-MARK-MASQ", "KUBE-MARK-DROP", "KUBE-POSTROUTING"];

/// Chains on the way from a service port to its endpoints (pkg/proxy/iptables:
/// service, service-local, external, firewall and endpoint chains).
const PATH_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

fn on_path(chain: &str) -> bool {
    PATH_PREFIXES.iter().any(|p| chain.starts_with(p))
}

/// Reads kube-proxy's iptables chains of one family (one per attempt), from
/// iptables-nft over netlink or from `iptables-legacy-save` text.
#[derive(Debug)]
pub struct IptEndpoints {
    family: Family,
    graph: Graph,
    source: &'static str,
}

impl IptEndpoints {
    pub fn new(family: Family) -> Self {
        Self::with_source(family, "iptables-nft")
    }

    pub fn with_source(family: Family, source: &'static str) -> Self {
        IptEndpoints {
            family,
            graph: Graph::default(),
            source,
        }
    }

    pub fn finish(self) -> ServiceTable {
        self.graph.finish(self.source)
    }

    /// One rule of `table`/`chain`, decoded.
    pub fn add(&mut self, table: &str, chain: &str, f: &RuleFacts) {
        let entry_chain = chain == "KUBE-SERVICES" || chain == "KUBE-NODEPORTS";
        let external = chain == "KUBE-EXTERNAL-SERVICES" && table == "filter";
        if !(entry_chain || external || on_path(chain)) {
            return;
        }
        let node_ports =
            chain == "KUBE-NODEPORTS" || (table == "filter" && chain == "KUBE-EXTERNAL-SERVICES" && f.daddr.is_none());
        let svc = match (f.daddr, f.dport, f.l4proto) {
            (Some(address), Some(port), Some(protocol)) => Some(ServicePort {
                address,
                port,
                protocol,
            }),
            (None, Some(port), Some(protocol)) if node_ports => {
                Some(ServicePort::node_port(self.family == Family::Ip6, protocol, port))
            }
            _ => None,
        };
        if table == "filter" {
            // REJECT: no endpoints at all; DROP: none for this traffic
            // (internalTrafficPolicy / externalTrafficPolicy Local, none on this node).
            if let (Some(svc), true, false) = (svc, f.reject || f.drop, on_path(chain)) {
                self.graph.no_endpoints(svc);
            }
            return;
        }
        if table != "nat" {
            return;
        }
        let mut jumps = f.jumps.iter().filter(|j| !NOT_A_PATH.contains(&j.as_str()));
        if entry_chain {
            match (svc, jumps.next()) {
                (Some(svc), Some(j)) if on_path(j) => self.graph.entry(svc, j),
                (Some(svc), Some(j)) => self.graph.undecoded(
                    svc,
                    format!("{chain} sends it to chain {j}, which kube-proxy's iptables layout does not have"),
                ),
                _ => {}
            }
            return;
        }
        for j in jumps {
            if on_path(j) {
                // Only KUBE-EXT's conditions choose endpoints by source (the eTP=Local
                // short-circuits); KUBE-FW's source ranges are a firewall, not a choice.
                match f.source {
                    Some(g) if chain.starts_with("KUBE-EXT-") => self.graph.guarded_edge(chain, j, g),
                    _ => self.graph.edge(chain, j),
                }
            } else {
                self.graph.unknown(
                    chain,
                    format!("{chain} jumps to chain {j}, which kube-proxy's iptables layout does not have"),
                );
            }
        }
        if let Some(d) = f.dnat {
            self.graph.dnat(chain, d);
        }
    }
}

impl Tally for IptEndpoints {
    fn wants(&self, table: &str) -> bool {
        table == "nat" || table == "filter"
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if !r.chain.starts_with("KUBE-") {
            return Ok(());
        }
        let f = rule_facts(self.family, r)?;
        self.add(r.table, r.chain, &f);
        Ok(())
    }

    fn set(&mut self, _: &Set<'_>) -> bool {
        false
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}
}

/// Targets that end or mark a packet, never a chain (`-j DROP`, `-j DNAT`...).
const TARGETS: &[&str] = &[
    "ACCEPT",
    "DROP",
    "RETURN",
    "REJECT",
    "DNAT",
    "SNAT",
    "MASQUERADE",
    "MARK",
    "CONNMARK",
    "LOG",
    "NFLOG",
    "NOTRACK",
    "CT",
    "REDIRECT",
];

/// kube-proxy's chains read from `iptables-legacy-save` text, line by line as
/// the save streams (the iptables probe's own run: no extra fork). The text's
/// hash over its tables and rules (not the chains' packet counters, which
/// change with traffic) tells whether the table must be rebuilt.
#[derive(Debug)]
pub struct SaveText {
    ipt: IptEndpoints,
    table: String,
    line: u64,
    hash: std::collections::hash_map::DefaultHasher,
    /// The Service names whose ports are kept (the service_traffic probe's targets).
    names: Vec<String>,
    /// The ClusterIP ports and NodePorts of those names, as kube-proxy's comments say.
    pub named: Vec<super::names::NamedPort>,
}

impl SaveText {
    pub fn new(family: Family) -> Self {
        Self::naming(family, Vec::new())
    }

    /// Also keeps the service ports of `names` (`ns/name`), from kube-proxy's
    /// `KUBE-SERVICES` comments (`default/kubernetes:https cluster IP`).
    pub fn naming(family: Family, names: Vec<String>) -> Self {
        SaveText {
            ipt: IptEndpoints::with_source(family, "iptables-legacy"),
            table: String::new(),
            line: 0,
            hash: Default::default(),
            names,
            named: Vec::new(),
        }
    }

    /// One line of the save; an error names the line and what is wrong with it.
    pub fn feed_line(&mut self, line: &str) -> Result<(), String> {
        use std::hash::Hash;
        self.line += 1;
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(t) = line.strip_prefix('*') {
            self.table = t.trim().to_string();
            line.hash(&mut self.hash);
            return Ok(());
        }
        if line == "COMMIT" {
            line.hash(&mut self.hash);
            self.table.clear();
            return Ok(());
        }
        let Some(rest) = line.strip_prefix("-A ") else {
            return Ok(());
        };
        line.hash(&mut self.hash);
        if self.table != "nat" && self.table != "filter" {
            return Ok(());
        }
        let chain = rest.split_whitespace().next().unwrap_or_default();
        if !chain.starts_with("KUBE-") {
            return Ok(());
        }
        let (f, comment) = self.rule(rest).map_err(|e| {
            format!(
                "iptables-legacy-save line {}: {e}: {}",
                self.line,
                crate::parse::quote(line)
            )
        })?;
        if self.table == "nat" && !self.names.is_empty() {
            let v6 = self.ipt.family == Family::Ip6;
            if let Some((name, svc, link)) = super::names::iptables_entry(chain, comment.as_deref(), &f, v6) {
                if self.names.iter().any(|n| n == name) {
                    self.named.push((name.to_string(), svc, link.to_string()));
                }
            }
        }
        let table = std::mem::take(&mut self.table);
        self.ipt.add(&table, chain, &f);
        self.table = table;
        Ok(())
    }

    /// The rule's facts from `CHAIN args...`, and its comment.
    fn rule(&self, rest: &str) -> Result<(RuleFacts, Option<String>), String> {
        let words = split_words(rest)?;
        let v6 = self.ipt.family == Family::Ip6;
        let mut f = RuleFacts::default();
        let mut i = 1;
        let mut negated = false;
        let mut comment = None;
        while i < words.len() {
            let w = words[i].as_str();
            let value = words.get(i + 1).map(String::as_str);
            let take = |what: &str| value.ok_or_else(|| format!("{what} without a value"));
            match w {
                "!" => {
                    negated = true;
                    i += 1;
                    continue;
                }
                "-d" | "--destination" => {
                    let v = take(w)?;
                    if !negated {
                        f.daddr = exact_address(v, v6)?;
                    }
                    i += 1;
                }
                "-s" | "--source" => {
                    let v = take(w)?;
                    f.guard(if negated {
                        SourceGuard::Other
                    } else {
                        source_prefix(v, v6)?
                    });
                    i += 1;
                }
                "--src-type" => {
                    let v = take(w)?;
                    f.guard(if !negated && v == "LOCAL" {
                        SourceGuard::Local
                    } else {
                        SourceGuard::Other
                    });
                    i += 1;
                }
                "-p" | "--protocol" => {
                    let v = take(w)?;
                    if !negated {
                        f.l4proto = Some(protocol_number(v)?);
                    }
                    i += 1;
                }
                "--dport" | "--destination-port" => {
                    let v = take(w)?;
                    if !negated && !v.contains(':') {
                        f.dport = Some(v.parse().map_err(|_| format!("port {v:?} is not a number"))?);
                    }
                    i += 1;
                }
                "-j" | "--jump" | "-g" | "--goto" => {
                    let v = take(w)?;
                    match v {
                        "REJECT" => f.reject = true,
                        "DROP" => f.drop = true,
                        t if TARGETS.contains(&t) => {}
                        chain => f.jumps.push(chain.to_string()),
                    }
                    i += 1;
                }
                "--to-destination" => {
                    f.dnat = Some(endpoint(take(w)?, v6)?);
                    i += 1;
                }
                "--comment" => {
                    comment = Some(take(w)?.to_string());
                    i += 1;
                }
                _ => {}
            }
            negated = false;
            i += 1;
        }
        if words.iter().any(|w| w == "DNAT") && f.dnat.is_none() {
            return Err("a DNAT without --to-destination".into());
        }
        Ok((f, comment))
    }

    /// The text's hash and the table it decodes to; `previous` (the table of
    /// an earlier run, with its hash) is kept when the text is the same.
    pub fn finish(self, previous: Option<(u64, std::sync::Arc<ServiceTable>)>) -> (u64, std::sync::Arc<ServiceTable>) {
        use std::hash::Hasher;
        let h = self.hash.finish();
        match previous {
            Some((ph, t)) if ph == h => (h, t),
            _ => (h, std::sync::Arc::new(self.ipt.finish())),
        }
    }
}

/// One family's latest legacy save, as the iptables probe decoded it for the probes that
/// read its reading (the probe table's `reads`: conntrack_stale, service_traffic).
#[derive(Debug, Clone, PartialEq)]
pub struct LegacySave {
    /// kube-proxy's service table and the save text's hash, or why the text did not decode.
    pub services: Result<(u64, std::sync::Arc<ServiceTable>), String>,
    /// The service_traffic targets' ports in it ([`SaveText::named`]).
    pub named: Vec<super::names::NamedPort>,
    /// Its source NAT rules (nat POSTROUTING and the chains it reaches), or why they are not listed.
    pub snat: Result<Vec<crate::netlink::nft_snat::FoundRule>, String>,
}

/// What the iptables probe's latest run decoded from its legacy saves, per family (IPv4,
/// IPv6): part of its reading, so that the probes that read it get it through the snapshot.
/// None: the family has no legacy tables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegacySaves(pub [Option<LegacySave>; 2]);

impl LegacySaves {
    /// Whether the family's latest legacy save was read (decoded or not).
    pub fn has(&self, v6: bool) -> bool {
        self.0[usize::from(v6)].is_some()
    }

    /// The decoded tables of both families, and the errors of those that did not decode.
    pub fn tables(&self) -> (Vec<std::sync::Arc<ServiceTable>>, Vec<String>) {
        let (mut tables, mut errors) = (Vec::new(), Vec::new());
        for save in self.0.iter().flatten() {
            match &save.services {
                Ok((_, t)) => tables.push(t.clone()),
                Err(e) => errors.push(e.clone()),
            }
        }
        (tables, errors)
    }

    /// The service_traffic targets' ports in both families' saves.
    pub fn named(&self) -> Vec<super::names::NamedPort> {
        self.0.iter().flatten().flat_map(|s| s.named.iter().cloned()).collect()
    }

    /// The source NAT rules of both families' saves, and why a family's are not listed.
    pub fn snat_rules(&self) -> (Vec<crate::netlink::nft_snat::FoundRule>, Vec<String>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        for save in self.0.iter().flatten() {
            match &save.snat {
                Ok(r) => rules.extend(r.iter().cloned()),
                Err(e) => errors.push(e.clone()),
            }
        }
        (rules, errors)
    }
}

/// The iptables probe's cache of the tables it decoded from its legacy saves, per family,
/// with their text's hash: a save whose text did not change is not decoded again.
#[derive(Debug, Default)]
pub struct LegacyTables(std::sync::Mutex<[Option<Decoded>; 2]>);

/// A legacy save's text hash and the table it decoded to.
type Decoded = (u64, std::sync::Arc<ServiceTable>);

impl LegacyTables {
    /// The table of the family's latest decoded save and its text's hash.
    pub fn previous(&self, v6: bool) -> Option<Decoded> {
        self.0.lock().ok()?[usize::from(v6)].clone()
    }

    /// The family's latest save decoded to this (None: it did not, or it has no legacy tables).
    pub fn put(&self, v6: bool, t: Option<Decoded>) {
        if let Ok(mut s) = self.0.lock() {
            s[usize::from(v6)] = t;
        }
    }
}

/// Words of a rule as iptables-save quotes them (`"..."` with `\"` inside).
pub(crate) fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut w = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => w.extend(chars.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => w.push(c),
                }
            }
            if !closed {
                return Err("a quote that is never closed".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                w.push(c);
                chars.next();
            }
        }
        words.push(w);
    }
    Ok(words)
}

fn exact_address(v: &str, v6: bool) -> Result<Option<std::net::IpAddr>, String> {
    let (a, mask) = v.split_once('/').map_or((v, None), |(a, m)| (a, Some(m)));
    let addr: std::net::IpAddr = a.parse().map_err(|_| format!("address {v:?} not understood"))?;
    if addr.is_ipv6() != v6 {
        return Err(format!("address {v:?} of the other family"));
    }
    let full = if v6 { "128" } else { "32" };
    Ok(mask.is_none_or(|m| m == full).then_some(addr))
}

/// `10.0.0.0/8`, `10.0.0.1` (a /32), `fd00::/64`.
fn source_prefix(v: &str, v6: bool) -> Result<SourceGuard, String> {
    let (a, mask) = v.split_once('/').map_or((v, None), |(a, m)| (a, Some(m)));
    let addr: std::net::IpAddr = a.parse().map_err(|_| format!("source {v:?} not understood"))?;
    if addr.is_ipv6() != v6 {
        return Err(format!("source {v:?} of the other family"));
    }
    let full = if v6 { 128 } else { 32 };
    match mask.map(str::parse::<u8>) {
        None => Ok(SourceGuard::Prefix(addr, full)),
        Some(Ok(len)) if len <= full => Ok(SourceGuard::Prefix(addr, len)),
        // A dotted mask (`255.0.0.0`, older iptables): a condition not modelled.
        Some(_) => Ok(SourceGuard::Other),
    }
}

fn protocol_number(v: &str) -> Result<u8, String> {
    match v {
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "sctp" => Ok(132),
        "icmp" => Ok(1),
        "ipv6-icmp" | "icmpv6" => Ok(58),
        n => n.parse().map_err(|_| format!("protocol {v:?} not understood")),
    }
}

/// `10.0.0.1:80`, `10.0.0.1`, `[fd00::1]:80`, `fd00::1`.
fn endpoint(v: &str, v6: bool) -> Result<super::Endpoint, String> {
    let bad = || format!("--to-destination {v:?} not understood");
    let (a, port) = if let Some(r) = v.strip_prefix('[') {
        let (a, p) = r.split_once(']').ok_or_else(bad)?;
        (a, p.strip_prefix(':'))
    } else if v6 {
        (v, None)
    } else {
        v.split_once(':').map_or((v, None), |(a, p)| (a, Some(p)))
    };
    let addr: std::net::IpAddr = a.parse().map_err(|_| bad())?;
    if addr.is_ipv6() != v6 {
        return Err(bad());
    }
    let port = port
        .map(|p| p.split('-').next().unwrap_or(p).parse::<u16>().map_err(|_| bad()))
        .transpose()?;
    Ok((addr, port))
}

#[cfg(test)]
mod tests {
    use super::super::service_label;
    use super::*;
    use crate::netlink::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
    use crate::netlink::nft_expr::captured::*;
    use std::collections::BTreeSet;

    #[test]
    fn captured_chains_resolve_to_their_dnat() {
        let mut t = IptEndpoints::new(Family::Ip);
        for capture in [SERVICES, SVC, SEP] {
            for l in capture.lines() {
                let b = hex(l);
                t.rule(&decode_rule(msg_type(NFT_MSG_NEWRULE), &b).unwrap()).unwrap();
            }
        }
        let table = t.finish();
        let svc = ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        };
        assert_eq!(table.services[&svc], vec![("10.244.1.2".parse().unwrap(), Some(53))]);
        assert_eq!(table.is_current(&svc, "10.244.1.2".parse().unwrap()), Some(true));
        assert_eq!(table.is_current(&svc, "10.244.1.3".parse().unwrap()), Some(false));
        let other = ServicePort { port: 54, ..svc };
        assert_eq!(table.is_current(&other, "10.244.1.2".parse().unwrap()), None);
        assert_eq!(service_label(&svc), "10.96.0.10:53/udp");
        assert_eq!(table.protocols(false), BTreeSet::from([17]));
    }

    fn sp(a: &str, port: u16, protocol: u8) -> ServicePort {
        ServicePort {
            address: a.parse().unwrap(),
            port,
            protocol,
        }
    }

    fn decode(text: &str) -> Result<(u64, std::sync::Arc<ServiceTable>), String> {
        let mut t = SaveText::new(Family::Ip);
        for l in text.lines() {
            t.feed_line(l)?;
        }
        Ok(t.finish(None))
    }

    /// kube-proxy's own expected iptables-restore input of TestOverallIPTablesRules
    /// (tests/fixtures/kube-proxy-corpus/ORIGIN.md), read as legacy save text.
    #[test]
    fn legacy_save_text_of_kube_proxys_own_test() {
        let text = include_str!("../../../tests/fixtures/kube-proxy-corpus/iptables-TestOverallIPTablesRules.txt");
        let (h, table) = decode(text).unwrap();
        let ep = |a: &str| (a.parse().unwrap(), Some(80));
        assert_eq!(table.services.len(), 13, "{table:?}");
        assert_eq!(table.endpoints(), 14);
        assert!(table.undecoded.is_empty(), "{:?}", table.undecoded);
        assert_eq!(
            table.services[&sp("172.30.0.44", 80, 6)],
            vec![ep("10.180.0.4"), ep("10.180.0.5")]
        );
        // LoadBalancer IP → KUBE-FW → KUBE-EXT → KUBE-SVC; eTP=Local without local
        // endpoints: the short-circuit to KUBE-SVC (and the filter DROP).
        assert_eq!(table.services[&sp("5.6.7.8", 80, 6)], vec![ep("10.180.0.3")]);
        assert_eq!(table.services[&sp("1.2.3.4", 80, 6)], vec![ep("10.180.0.2")]);
        assert_eq!(
            table.services[&ServicePort::node_port(false, 6, 3001)],
            vec![ep("10.180.0.2")]
        );
        assert!(
            table.services[&sp("172.30.0.46", 80, 6)].is_empty(),
            "REJECT: no endpoints"
        );
        // Counters on chain lines change with traffic, not the table.
        let again = text.replace(":KUBE-SERVICES - [0:0]", ":KUBE-SERVICES - [12:3456]");
        let mut t = SaveText::new(Family::Ip);
        for l in again.lines() {
            t.feed_line(l).unwrap();
        }
        let (h2, kept) = t.finish(Some((h, table.clone())));
        assert_eq!(h2, h);
        assert!(std::sync::Arc::ptr_eq(&kept, &table), "same text: the table is kept");
        let (h3, _) = decode(&text.replace("10.180.0.5:80", "10.180.0.6:80")).unwrap();
        assert_ne!(h3, h);
    }

    #[test]
    fn legacy_save_text_errors_name_the_line() {
        let bad = |rule: &str| decode(&format!("*nat\n:KUBE-SERVICES - [0:0]\n{rule}\nCOMMIT\n")).unwrap_err();
        let e = bad("-A KUBE-SEP-X -p tcp -j DNAT");
        assert!(
            e.contains("line 3") && e.contains("DNAT without --to-destination"),
            "{e}"
        );
        assert!(bad("-A KUBE-SERVICES -m comment --comment \"cut").contains("never closed"));
        assert!(bad("-A KUBE-SEP-X -p tcp -j DNAT --to-destination 10.1.2").contains("not understood"));
        assert!(bad("-A KUBE-SERVICES -d fd00::1/128 -p tcp --dport 80 -j KUBE-SVC-X").contains("other family"));
        assert!(bad("-A KUBE-SERVICES -d").contains("without a value"));
        assert!(bad("-A KUBE-SEP-Z -p udp -m udp -j DNAT --to-destination [fd00::1]:53").contains("not understood"));
        // An unknown chain prefix is undecoded, not an error.
        let (_, t) =
            decode("*nat\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-WEIRD-X\nCOMMIT\n")
                .unwrap();
        assert!(t.undecoded[&sp("10.96.0.1", 443, 6)].reason.contains("KUBE-WEIRD-X"));
        assert_eq!(t.undecoded[&sp("10.96.0.1", 443, 6)].source, "iptables-legacy");
        // A jump from a service chain to a chain outside kube-proxy's layout: undecoded too.
        let (_, t) = decode(
            "*nat\n-A KUBE-SERVICES -d 10.96.0.3/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-Q\n\
             -A KUBE-SVC-Q -j MY-OWN-CHAIN\n-A KUBE-SVC-Q -j KUBE-SEP-Q\n\
             -A KUBE-SEP-Q -p tcp -m tcp -j DNAT --to-destination 10.244.0.3:80\nCOMMIT\n",
        )
        .unwrap();
        assert!(t.services.is_empty(), "{t:?}");
        assert!(t.undecoded[&sp("10.96.0.3", 80, 6)].reason.contains("MY-OWN-CHAIN"));
    }
}
