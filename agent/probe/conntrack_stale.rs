//! The conntrack_stale probe: conntrack entries still NATed to an endpoint the
//! data plane no longer has (the "DNS times out after CoreDNS restarted" case).
//!
//! One run, on the node itself only (`--host-root /`: netlink answers for the
//! agent's own network namespace; on a fixture node the source is absent):
//!
//! 1. the ruleset generation (`NFT_MSG_GETGEN`);
//! 2. the service table ([`service_endpoints`]) at that generation — reused
//!    from [`StaleMemory`] when the generation is the one it was read at, else
//!    read anew (iptables-nft's `nat`/`filter` tables of both families);
//! 3. per family and per protocol of its service ports, a ctnetlink dump of the
//!    DST_NAT entries ([`ct_dump`]), streamed: an entry whose original
//!    destination is a service port and whose reply source is not one of its
//!    endpoints adds one to its (service, dead endpoint) count;
//! 4. the generation again: if the rules changed during the dump, the counts
//!    may hold endpoints that were just added; the table is read again and
//!    the dump redone, once, then the run fails (never a false count).
//!
//! Memory: one receive buffer and the counts per (service, dead endpoint),
//! at most [`MAX_GROUPS`] of them (beyond, entries still count in the
//! per-protocol totals).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::service_endpoints::{
    per_protocol, protocol_name, service_label, socket, IptEndpoints, ServicePort, ServiceTable,
};
use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::netlink::nft::Family;
use crate::netlink::{ct_dump, nft_count, NlError, Socket, NETLINK_NETFILTER};

/// Distinct (service, dead endpoint) pairs counted one by one.
pub const MAX_GROUPS: usize = 10_000;
/// Pairs listed in the facts (the largest first).
pub const MAX_LISTED: usize = 50;

/// Entries NATed for one service port to one endpoint it no longer has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaleGroup {
    /// `10.96.0.10:53/udp`.
    pub service: String,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: String,
    /// The endpoint the entries are NATed to: `10.244.1.2:53`.
    pub endpoint: String,
    pub entries: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackStaleFacts {
    /// Where the service table came from (`iptables-nft`).
    pub source: String,
    /// The nf_tables ruleset generation the table and the dump agree on.
    pub generation: u32,
    /// The table was read by an earlier run at this generation.
    pub table_reused: bool,
    pub service_ports: u64,
    pub endpoints: u64,
    /// DST_NAT entries of the services' protocols the kernel sent.
    pub dst_nat_entries: u64,
    /// Stale entries per protocol (every protocol present, 0 when none).
    pub stale_entries: BTreeMap<String, u64>,
    /// Pairs with stale entries (all of them, even beyond the list).
    pub stale_groups: u64,
    /// The largest [`MAX_LISTED`] pairs.
    pub stale: Vec<StaleGroup>,
    /// Wall time of the dumps, in seconds.
    pub dump_seconds: f64,
}

/// The service table kept between runs, valid for exactly one ruleset
/// generation. Why not the history stage: history sees the reading after the
/// probe made it; this spares the probe reading the rules, so it must be asked
/// before, by the probe (the same reasoning as [`super::counted::Memory`]).
#[derive(Debug, Default)]
pub struct StaleMemory {
    table: Mutex<Option<(u32, Arc<ServiceTable>)>>,
}

impl StaleMemory {
    fn get(&self, generation: u32) -> Option<Arc<ServiceTable>> {
        let t = self.table.lock().ok()?;
        t.as_ref().filter(|(g, _)| *g == generation).map(|(_, t)| t.clone())
    }

    fn put(&self, generation: u32, t: Arc<ServiceTable>) {
        if let Ok(mut slot) = self.table.lock() {
            *slot = Some((generation, t));
        }
    }
}

fn generation(deadline: Instant) -> Result<u32, NlError> {
    nft_count::generation(Socket::open(NETLINK_NETFILTER)?, deadline)
}

/// The service table at the current generation (both families, one generation).
fn table(memory: &StaleMemory, deadline: Instant) -> Result<(u32, Arc<ServiceTable>, bool), NlError> {
    let gen = generation(deadline)?;
    if let Some(t) = memory.get(gen) {
        return Ok((gen, t, true));
    }
    let mut all = ServiceTable::default();
    let mut gens = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let plan = nft_count::Plan { family, sets: false };
        let c = nft_count::count(&mut || Socket::open(NETLINK_NETFILTER), plan, deadline, &|| {
            IptEndpoints::new(family)
        })?;
        gens.push(c.generation);
        all.merge(c.tally.finish());
    }
    if gens.iter().any(|g| *g != gens[0]) {
        return Err(NlError::Changed(format!("generations {gens:?} between the families")));
    }
    let t = Arc::new(all);
    memory.put(gens[0], t.clone());
    Ok((gens[0], t, false))
}

/// Counts what the dumps say against `table` (pure apart from the dump).
#[derive(Debug, Default)]
pub struct Counter {
    groups: HashMap<(ServicePort, IpAddr, u16), u64>,
    per_protocol: HashMap<u8, u64>,
    pub seen: u64,
}

impl Counter {
    pub fn add(&mut self, table: &ServiceTable, e: &ct_dump::CtEntry) {
        self.seen += 1;
        let svc = ServicePort {
            address: e.orig_dst,
            port: e.orig_dport,
            protocol: e.l4proto,
        };
        // Not a service port (kube-proxy did not make it) or a current endpoint: not stale.
        if table.is_current(&svc, e.reply_src, e.reply_sport) != Some(false) {
            return;
        }
        *self.per_protocol.entry(e.l4proto).or_default() += 1;
        let key = (svc, e.reply_src, e.reply_sport);
        if let Some(n) = self.groups.get_mut(&key) {
            *n += 1;
        } else if self.groups.len() < MAX_GROUPS {
            self.groups.insert(key, 1);
        }
    }

    pub fn facts(self) -> ConntrackStaleFacts {
        let mut groups: Vec<StaleGroup> = self
            .groups
            .into_iter()
            .map(|((svc, ep, port), entries)| StaleGroup {
                service: service_label(&svc),
                address: svc.address,
                port: svc.port,
                protocol: protocol_name(svc.protocol),
                endpoint: socket(ep, Some(port)),
                entries,
            })
            .collect();
        groups.sort_by(|a, b| {
            b.entries
                .cmp(&a.entries)
                .then_with(|| (&a.service, &a.endpoint).cmp(&(&b.service, &b.endpoint)))
        });
        let stale_groups = groups.len() as u64;
        groups.truncate(MAX_LISTED);
        ConntrackStaleFacts {
            stale_entries: per_protocol(self.per_protocol),
            stale_groups,
            stale: groups,
            dst_nat_entries: self.seen,
            ..Default::default()
        }
    }
}

fn read(memory: &StaleMemory, deadline: Instant) -> Result<ConntrackStaleFacts, NlError> {
    let mut last = String::new();
    for _ in 0..2 {
        let (gen, table, reused) = table(memory, deadline)?;
        let started = Instant::now();
        let mut counter = Counter::default();
        for (family, v6) in [(2u8, false), (10u8, true)] {
            for proto in table.protocols(v6) {
                ct_dump::dump(Socket::open(NETLINK_NETFILTER)?, deadline, family, Some(proto), |e| {
                    counter.add(&table, e)
                })?;
            }
        }
        let dump_seconds = started.elapsed().as_secs_f64();
        let end = generation(deadline)?;
        if end != gen {
            last = format!("generation {gen} → {end} during the conntrack dump");
            continue;
        }
        return Ok(ConntrackStaleFacts {
            source: "iptables-nft".into(),
            generation: gen,
            table_reused: reused,
            service_ports: table.services.len() as u64,
            endpoints: table.endpoints() as u64,
            dump_seconds,
            ..counter.facts()
        });
    }
    Err(NlError::Changed(last))
}

pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<ConntrackStaleFacts>, ProbeError> {
    if ctx.host.root() != std::path::Path::new("/") {
        return Ok(Probed::Absent(
            "conntrack entries are read over netlink on the node itself (--host-root /) only".into(),
        ));
    }
    let host = ctx.host.clone();
    let memory = ctx.memory.clone();
    let at = deadline.at();
    super::blocking(ProbeName::ConntrackStale, move || {
        for module in ["nf_conntrack_netlink", "nf_tables"] {
            if super::modules::tool_would_load(&host, module) {
                return Ok(Probed::Absent(format!(
                    "{module} is not loaded (nothing sent, so nothing loaded)"
                )));
            }
        }
        read(&memory.stale, at)
            .map(Probed::Present)
            .map_err(|e| ProbeError::NfNetlink(format!("conntrack entries over ctnetlink: {e}")))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dst: &str, dport: u16, src: &str, sport: u16, proto: u8) -> ct_dump::CtEntry {
        ct_dump::CtEntry {
            l4proto: proto,
            orig_dst: dst.parse().unwrap(),
            orig_dport: dport,
            reply_src: src.parse().unwrap(),
            reply_sport: sport,
            status: ct_dump::IPS_DST_NAT,
        }
    }

    #[test]
    fn counts_only_service_entries_to_gone_endpoints() {
        let dns = ServicePort {
            address: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: 17,
        };
        let v6 = ServicePort {
            address: "fd00::a".parse().unwrap(),
            port: 80,
            protocol: 6,
        };
        let mut table = ServiceTable::default();
        table
            .services
            .insert(dns, vec![("10.244.0.2".parse().unwrap(), Some(53))]);
        table
            .services
            .insert(v6, vec![("fd00:244::2".parse().unwrap(), Some(8080))]);
        let mut c = Counter::default();
        for _ in 0..3 {
            c.add(&table, &entry("10.96.0.10", 53, "10.244.0.9", 53, 17)); // gone
        }
        c.add(&table, &entry("10.96.0.10", 53, "10.244.0.2", 53, 17)); // current
        c.add(&table, &entry("10.96.0.10", 53, "10.244.0.9", 53, 6)); // tcp/53 is no service
        c.add(&table, &entry("192.168.1.1", 53, "10.244.0.9", 53, 17)); // not a service address
        c.add(&table, &entry("fd00::a", 80, "fd00:244::3", 8080, 6)); // IPv6, gone
        c.add(&table, &entry("fd00::a", 80, "fd00:244::2", 8080, 6)); // IPv6, current
        let f = c.facts();
        assert_eq!(f.stale_entries["udp"], 3);
        assert_eq!(f.stale_entries["tcp"], 1);
        assert_eq!(f.stale_entries["sctp"], 0);
        assert_eq!(f.stale_groups, 2);
        assert_eq!(f.stale[0].service, "10.96.0.10:53/udp");
        assert_eq!(f.stale[0].endpoint, "10.244.0.9:53");
        assert_eq!(f.stale[1].endpoint, "[fd00:244::3]:8080");
        assert_eq!(f.dst_nat_entries, 8);
    }
}
