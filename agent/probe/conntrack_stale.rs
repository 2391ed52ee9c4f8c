//! The conntrack_stale probe: conntrack entries still NATed to an endpoint the
//! data plane no longer has (the "DNS times out after CoreDNS restarted" case).
//!
//! One run, where the host has a kernel to ask (`Host::kernel()`: the node
//! itself, `--host-root /`, whose netlink answers for the agent's own network
//! namespace, or a fixture node's netlink recording; elsewhere the source is absent):
//!
//! 1. the ruleset generation (`NFT_MSG_GETGEN`);
//! 2. the service table ([`service_endpoints`]) at that generation — reused
//!    from [`StaleMemory`] when the generation is the one it was read at, else
//!    read anew: kube-proxy's iptables-nft `nat`/`filter` chains and its
//!    nftables `kube-proxy` table, both families, one walk per family — plus
//!    the IPVS table (`/proc/net/ip_vs`, when IPVS is loaded), read every run,
//!    and the iptables-legacy table the iptables probe decoded from its latest
//!    `iptables-legacy-save` (its reading's `legacy`, handed by the scheduler: the probe table's `reads`);
//!    a service port whose path was not understood is undecoded: not judged;
//! 3. the node's addresses (rtnetlink), to tell NodePort traffic;
//! 4. per family with service ports, one ctnetlink dump ([`ct_dump`]),
//!    streamed — only DST_NAT entries, filtered in the kernel, unless IPVS
//!    lists services (IPVS does not set DST_NAT); with the SNAT grouping, one
//!    dump of both families and a second of SRC_NAT entries (below): an entry whose
//!    original destination is a service port (or a NodePort on a node
//!    address) and whose reply source is the address of none of its
//!    endpoints, in any path the rules give it, adds one to its (service,
//!    removed endpoint) count;
//! 5. the generation (and the IPVS table) again: if the rules changed during
//!    the dump, the table is read at the new generation; the same table means
//!    the counts hold (other commits, e.g. a CNI's, do not fail the run), a
//!    different one may hold endpoints that were just added: the run starts
//!    again with the table at the new generation, up to [`RUNS`] times while
//!    the deadline leaves room for one more, then fails naming the rules
//!    (never a false count; the scheduler keeps the last good reading meanwhile).
//!
//! The SNAT grouping ([`super::snat`], `--conntrack.snat`) shares step 4's
//! dump, which is then of both families (AF_UNSPEC: one walk of the global
//! hash table) and of DST_NAT entries, followed by a second dump of SRC_NAT
//! entries without DST_NAT (the kernel's status filter is `(status & mask)
//! == value`, no "DST_NAT or SRC_NAT"): only NATed entries cross to user
//! space, each once; under IPVS one whole dump; each entry is checked here.
//! The source NAT rules are read after the dumps (their counters are
//! history's to compare).
//!
//! Memory: one receive buffer and the counts per (service, dead endpoint),
//! at most [`MAX_GROUPS`] of them (beyond, entries still count in the
//! per-protocol totals).
//!
//! `conntrack_stale/dump.rs` holds step 4: which dumps a run makes, and making them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::service_endpoints::iptables::LegacySaves;
use super::service_endpoints::BothLayouts;
use super::service_endpoints::{protocol_name, service_label, socket, ServicePort, ServiceTable};
use super::{Deadline, Given, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::netlink::nft::Family;
use crate::netlink::{ct_dump, nft_count, NlError, NETLINK_NETFILTER};

mod dump;

/// Distinct (service, dead endpoint) pairs counted one by one.
pub const MAX_GROUPS: usize = 10_000;
/// Pairs listed in the facts (the largest first).
pub const MAX_LISTED: usize = 50;
/// Undecoded service ports listed in the facts.
pub const MAX_UNDECODED_LISTED: usize = 10;
/// The sources of a service table, each always present in `undecoded`.
pub const SOURCES: &[&str] = &["iptables-nft", "iptables-legacy", "nftables", "ipvs"];

/// A service port whose path the decoder did not understand: never judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UndecodedPort {
    /// `10.96.0.10:53/udp`; a NodePort as `0.0.0.0:30053/udp` (`[::]` for IPv6);
    /// `unknown` for map elements whose key could not be read.
    pub service: String,
    /// The source that could not decode it (`nftables`, `iptables-nft`, ...).
    pub source: String,
    /// What the decoder met.
    pub reason: String,
}

/// Entries NATed for one service port to one endpoint it no longer has.
/// TCP and SCTP pairs are draining ([`draining`]), the others stale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaleGroup {
    /// `10.96.0.10:53/udp`; for a NodePort, the node address the client sent to.
    pub service: String,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: String,
    /// Traffic to a NodePort (on the node address in `address`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_port: bool,
    /// The endpoint the entries are NATed to: `10.244.1.2:53`.
    pub endpoint: String,
    pub entries: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackStaleFacts {
    /// Where the service table came from: `iptables-nft`, `nftables`, `ipvs`
    /// (joined with `+` when several list services), or `none`.
    pub source: String,
    /// The nf_tables ruleset generation the table and the dump agree on.
    pub generation: u32,
    /// The nf_tables part of the table was read by an earlier run at this generation.
    pub table_reused: bool,
    /// Service ports, NodePorts included.
    pub service_ports: u64,
    #[serde(default)]
    pub node_ports: u64,
    pub endpoints: u64,
    /// DST_NAT entries the kernel sent.
    pub dst_nat_entries: u64,
    /// Entries looked at: the DST_NAT ones, or all of them when IPVS lists services.
    #[serde(default)]
    pub examined_entries: u64,
    /// Stale entries per protocol: UDP (and any protocol but TCP and SCTP) to
    /// an endpoint the service port no longer has, what kube-proxy's
    /// reconciler clears (`udp` always present, 0 when none).
    pub stale_entries: BTreeMap<String, u64>,
    /// Pairs with stale entries (all of them, even beyond the list).
    pub stale_groups: u64,
    /// The largest [`MAX_LISTED`] stale pairs.
    pub stale: Vec<StaleGroup>,
    /// Draining entries per protocol: TCP and SCTP to an endpoint no longer
    /// in the service's endpoints, which kube-proxy never deletes (a
    /// terminating pod still serving them, or one gone whose clients will get
    /// a reset or time out); `tcp` and `sctp` always present, 0 when none.
    #[serde(default)]
    pub draining_entries: BTreeMap<String, u64>,
    /// Pairs with draining entries (all of them, even beyond the list).
    #[serde(default)]
    pub draining_groups: u64,
    /// The largest [`MAX_LISTED`] draining pairs.
    #[serde(default)]
    pub draining: Vec<StaleGroup>,
    /// Wall time of the dumps, in seconds.
    pub dump_seconds: f64,
    /// Service ports whose path the decoder did not understand, per source
    /// (every source present, 0 when none): their entries are not judged, so
    /// stale detection is partial when any is above 0.
    #[serde(default)]
    pub undecoded: BTreeMap<String, u64>,
    /// The first [`MAX_UNDECODED_LISTED`] of them (by service), with the reason.
    #[serde(default)]
    pub undecoded_ports: Vec<UndecodedPort>,
    /// Entries to an undecoded service port (examined, not judged).
    #[serde(default)]
    pub undecoded_entries: u64,
    /// Why the service table of the iptables probe's latest legacy save could
    /// not be read (a failed, cut or garbled save): its service ports are
    /// missing from this check, whose other sources still count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub legacy_errors: Vec<String>,
    /// Source NAT: ports in use per group from the same dumps, and the
    /// MASQUERADE/SNAT rules ([`super::snat`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snat: Option<super::snat::SnatFacts>,
}

/// The nf_tables part of the service table, with the sources that listed services.
#[derive(Debug, Default)]
struct NfTable {
    table: ServiceTable,
    sources: Vec<&'static str>,
}

/// The service table kept between runs, valid for exactly one ruleset
/// generation. Why not the history stage: history sees the reading after the
/// probe made it; this spares the probe reading the rules, so it must be asked
/// before, by the probe (the same reasoning as [`super::counted::Memory`]).
#[derive(Debug, Default)]
pub struct StaleMemory {
    table: Mutex<Option<(u32, Arc<NfTable>)>>,
}

impl StaleMemory {
    fn get(&self, generation: u32) -> Option<Arc<NfTable>> {
        let t = self.table.lock().ok()?;
        t.as_ref().filter(|(g, _)| *g == generation).map(|(_, t)| t.clone())
    }

    fn put(&self, generation: u32, t: Arc<NfTable>) {
        if let Ok(mut slot) = self.table.lock() {
            *slot = Some((generation, t));
        }
    }
}

fn generation(host: &Host, deadline: Instant) -> Result<u32, NlError> {
    nft_count::generation(host.netlink(NETLINK_NETFILTER)?, deadline)
}

/// The nf_tables service table at the current generation (both families, one
/// generation): read again, up to [`nft_count::ATTEMPTS`] times, when a commit
/// fell between the two families' walks.
fn nf_table(host: &Host, memory: &StaleMemory, deadline: Instant) -> Result<(u32, Arc<NfTable>, bool), NlError> {
    let mut why = Vec::new();
    for _ in 0..nft_count::ATTEMPTS {
        match nf_table_once(host, memory, deadline) {
            Err(NlError::Changed(w)) => why.push(w),
            r => return r,
        }
    }
    Err(NlError::Changed(why.join("; ")))
}

fn nf_table_once(host: &Host, memory: &StaleMemory, deadline: Instant) -> Result<(u32, Arc<NfTable>, bool), NlError> {
    let gen = generation(host, deadline)?;
    if let Some(t) = memory.get(gen) {
        return Ok((gen, t, true));
    }
    let mut all = NfTable::default();
    let mut gens = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let plan = nft_count::Plan { family, sets: true };
        let c = nft_count::count(&mut || host.netlink(NETLINK_NETFILTER), plan, deadline, &|| {
            BothLayouts::new(family)
        })?;
        gens.push(c.generation);
        for (name, t) in [
            ("iptables-nft", c.tally.ipt.finish()),
            ("nftables", c.tally.nft.finish()),
        ] {
            if !t.services.is_empty() && !all.sources.contains(&name) {
                all.sources.push(name);
            }
            all.table.merge(t);
        }
    }
    if gens.iter().any(|g| *g != gens[0]) {
        return Err(NlError::Changed(format!(
            "a commit between the two families' walks: generations {gens:?}"
        )));
    }
    let t = Arc::new(all);
    memory.put(gens[0], t.clone());
    Ok((gens[0], t, false))
}

const PROC_IP_VS: &str = "/proc/net/ip_vs";

/// IPVS's virtual and real servers, when IPVS is loaded (reading the file loads nothing).
fn ipvs_table(host: &Host) -> Result<ServiceTable, ProbeError> {
    let Some(text) = host.read_optional(PROC_IP_VS)? else {
        return Ok(ServiceTable::default());
    };
    let servers = super::ipvs::proc::parse_proc_ip_vs(PROC_IP_VS, &text)?;
    Ok(super::service_endpoints::ipvs::table(&servers))
}

/// Whether entries of this L4 protocol to a removed endpoint are draining
/// rather than stale: TCP and SCTP, which kube-proxy's reconciler leaves to
/// finish or be reset (it "only deal[s] with UDP protocol entries").
pub fn draining(protocol: u8) -> bool {
    matches!(protocol, 6 | 132)
}

/// Counts what the dumps say against a service table (pure apart from the dump).
///
/// The judgement is kube-proxy's own reconciler's
/// (kubernetes/kubernetes `pkg/proxy/conntrack/cleanup.go`, `CleanStaleEntries`):
/// it maps each service IP:port (ClusterIP, LoadBalancer and external IPs)
/// and each NodePort to "the set of serving endpoint IPs", and clears an entry
/// "if the original destination (--orig-dst) of the entry is service IP ... and
/// (--orig-port-dst) of the flow is service Port and the reply source
/// (--reply-src) is not IP of any serving endpoint"; a NodePort by its port
/// alone. "Changes to the service should not affect existing flows, so we do
/// not take traffic policies, topology, or terminating status of the service
/// into account." So here: every path of a port counts (an
/// `externalTrafficPolicy: Local` NodePort's flow to a remote endpoint is
/// current), the reply source is compared by address, and no source address
/// matters. Two differences, both said where they are reported: kube-proxy
/// reconciles UDP only, so the TCP and SCTP entries counted here are
/// draining, not stale ([`draining`]); and it skips a service
/// with no serving endpoints, which is counted here (the scale-to-zero case:
/// those flows stay blackholed until they time out). kube-proxy's serving
/// endpoints include terminating ones it may leave out of its rules: from the
/// rules alone, an endpoint missing is "no longer in the service's
/// endpoints", not gone.
#[derive(Debug, Default)]
pub struct Counter {
    /// The node's own addresses: traffic to one of them may be to a NodePort.
    pub local: HashSet<IpAddr>,
    groups: HashMap<(ServicePort, IpAddr, u16), u64>,
    per_protocol: HashMap<u8, u64>,
    /// Entries looked at.
    pub seen: u64,
    /// Of those, with the DST_NAT status.
    pub dst_nat: u64,
    /// Of those, to a service port whose path was not understood (not judged).
    pub undecoded: u64,
}

impl Counter {
    /// A counter for a node with these addresses (NodePort traffic goes to one of them).
    pub fn with_local(local: HashSet<IpAddr>) -> Counter {
        Counter {
            local,
            ..Counter::default()
        }
    }

    pub fn add(&mut self, table: &ServiceTable, e: &ct_dump::CtEntry) {
        self.seen += 1;
        self.dst_nat += u64::from(e.dst_nat());
        if e.reply_src == e.orig_dst && e.reply_sport == e.orig_dport {
            return; // not translated
        }
        let svc = ServicePort {
            address: e.orig_dst,
            port: e.orig_dport,
            protocol: e.l4proto,
        };
        let node_port = ServicePort::node_port(e.orig_dst.is_ipv6(), e.l4proto, e.orig_dport);
        // Unknown is not empty: a port whose path was not understood is never judged.
        if table.is_undecoded(&svc)
            || (!table.services.contains_key(&svc)
                && self.local.contains(&e.orig_dst)
                && table.is_undecoded(&node_port))
        {
            self.undecoded += 1;
            return;
        }
        // Not a service port (kube-proxy did not make it), or a NodePort on
        // a node address: judged like kube-proxy does, by its port alone.
        let current = match table.is_current(&svc, e.reply_src) {
            Some(c) => c,
            None if self.local.contains(&e.orig_dst) => match table.is_current(&node_port, e.reply_src) {
                Some(c) => c,
                None => return,
            },
            None => return,
        };
        if current {
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

    pub fn facts(self, table: &ServiceTable) -> ConntrackStaleFacts {
        let (mut drain, mut stale): (Vec<StaleGroup>, Vec<StaleGroup>) = (Vec::new(), Vec::new());
        for ((svc, ep, port), entries) in self.groups {
            let to = if draining(svc.protocol) { &mut drain } else { &mut stale };
            to.push(StaleGroup {
                service: service_label(&svc),
                address: svc.address,
                port: svc.port,
                protocol: protocol_name(svc.protocol),
                node_port: !table.services.contains_key(&svc),
                endpoint: socket(ep, Some(port)),
                entries,
            });
        }
        for groups in [&mut stale, &mut drain] {
            groups.sort_by(|a, b| {
                b.entries
                    .cmp(&a.entries)
                    .then_with(|| (&a.service, &a.endpoint).cmp(&(&b.service, &b.endpoint)))
            });
        }
        let (stale_groups, draining_groups) = (stale.len() as u64, drain.len() as u64);
        stale.truncate(MAX_LISTED);
        drain.truncate(MAX_LISTED);
        let mut stale_entries: BTreeMap<String, u64> = BTreeMap::from([("udp".to_string(), 0)]);
        let mut draining_entries: BTreeMap<String, u64> = ["tcp", "sctp"].iter().map(|p| (p.to_string(), 0)).collect();
        for (p, n) in self.per_protocol {
            let to = if draining(p) {
                &mut draining_entries
            } else {
                &mut stale_entries
            };
            *to.entry(protocol_name(p)).or_default() += n;
        }
        let mut undecoded: BTreeMap<String, u64> = SOURCES.iter().map(|s| (s.to_string(), 0)).collect();
        for (source, n) in table.undecoded_by_source() {
            *undecoded.entry(source.to_string()).or_default() += n;
        }
        let mut ports: Vec<(&ServicePort, &super::service_endpoints::Undecoded)> = table.undecoded.iter().collect();
        ports.sort_by_key(|(svc, _)| **svc);
        let unkeyed = table.unkeyed.iter().map(|(u, _)| UndecodedPort {
            service: "unknown".into(),
            source: u.source.to_string(),
            reason: u.reason.clone(),
        });
        let undecoded_ports = unkeyed
            .chain(ports.into_iter().map(|(svc, u)| UndecodedPort {
                service: service_label(svc),
                source: u.source.to_string(),
                reason: u.reason.clone(),
            }))
            .take(MAX_UNDECODED_LISTED)
            .collect();
        ConntrackStaleFacts {
            undecoded,
            undecoded_ports,
            undecoded_entries: self.undecoded,
            stale_entries,
            stale_groups,
            stale,
            draining_entries,
            draining_groups,
            draining: drain,
            dst_nat_entries: self.dst_nat,
            examined_entries: self.seen,
            service_ports: table.services.len() as u64,
            node_ports: table.node_ports() as u64,
            endpoints: table.endpoints() as u64,
            ..Default::default()
        }
    }
}

/// Runs of one check at most: each starts again with the table at the
/// generation that interrupted the previous one.
pub const RUNS: usize = 4;

/// An error reading kube-proxy's rules (the service table, the generation):
/// what changed there is the rules, not the conntrack entries.
fn rules(e: NlError) -> ProbeError {
    match e {
        NlError::Changed(why) => ProbeError::RulesMoved(format!(
            "kube-proxy's service table over nf_tables netlink: the rules kept changing while it was read ({why})"
        )),
        e => ProbeError::NfNetlink {
            what: "kube-proxy's service table over nf_tables netlink".into(),
            source: e,
        },
    }
}

/// What one run reads, and with what.
struct Run<'a> {
    memory: &'a StaleMemory,
    /// What the iptables probe's latest reading decoded from its legacy saves.
    legacy: &'a LegacySaves,
    /// Why there is no such reading: the iptables probe's latest run failed.
    legacy_failed: Option<&'a str>,
    host: &'a Host,
    local: &'a HashSet<IpAddr>,
    /// nf_tables is loaded (else only IPVS can list services: asking would load it).
    nf_tables: bool,
    /// Group SRC_NAT entries and read the source NAT rules too.
    snat: bool,
    deadline: Instant,
}

impl Run<'_> {
    fn nf_table(&self) -> Result<(u32, Arc<NfTable>, bool), NlError> {
        if self.nf_tables {
            nf_table(self.host, self.memory, self.deadline)
        } else {
            Ok((0, Arc::default(), false))
        }
    }

    fn generation(&self) -> Result<u32, NlError> {
        if self.nf_tables {
            generation(self.host, self.deadline)
        } else {
            Ok(0)
        }
    }
}

fn read(run: &Run<'_>) -> Result<ConntrackStaleFacts, ProbeError> {
    let mut why: Vec<String> = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        match read_once(run)? {
            Ok(facts) => return Ok(facts),
            Err(w) => why.push(w),
        }
        // Another run only when the deadline leaves room for one as long as
        // this one: else it would end as a timeout and hide why it failed.
        if Instant::now() + started.elapsed() >= run.deadline {
            break;
        }
    }
    Err(ProbeError::RulesMoved(format!(
        "kube-proxy's rules changed during each of {} conntrack dumps, each time to another service table \
         (no count is made against a table the dump did not run under): {}",
        why.len(),
        why.join("; ")
    )))
}

/// One run: the facts, or why the dump must be redone (the service table it
/// was counted against changed under it).
fn read_once(run: &Run<'_>) -> Result<Result<ConntrackStaleFacts, String>, ProbeError> {
    let (gen, nf, reused) = run.nf_table().map_err(rules)?;
    let ipvs = ipvs_table(run.host)?;
    let mut sources = nf.sources.clone();
    let LegacyPart {
        tables: legacy,
        errors: legacy_errors,
        unsaved,
    } = run.legacy_part()?;
    if !legacy.is_empty() {
        sources.push("iptables-legacy");
    }
    if !ipvs.services.is_empty() {
        sources.push("ipvs");
    }
    let dst_nat_only = ipvs.services.is_empty();
    let table = service_table(&nf.table, &ipvs, &legacy);
    let started = Instant::now();
    let mut counter = Counter::with_local(run.local.clone());
    let mut grouper = super::snat::Grouper::default();
    if let Err(why) = run.dump(&table, dst_nat_only, &mut counter, &mut grouper)? {
        return Ok(Err(why));
    }
    let dump_seconds = started.elapsed().as_secs_f64();
    let end = match run.unchanged_since(gen, &nf.table, &ipvs)? {
        Ok(end) => end,
        Err(why) => return Ok(Err(why)),
    };
    let snat = run.snat.then(|| {
        let mut f = super::snat::read_rules(run.host, grouper, run.nf_tables, &run.legacy.snat_rules(), run.deadline);
        // Their source NAT rules are missing too: said so, never an empty list taken as none.
        f.rule_errors.extend(unsaved);
        f
    });
    Ok(Ok(ConntrackStaleFacts {
        source: if sources.is_empty() {
            "none".into()
        } else {
            sources.join("+")
        },
        generation: end,
        table_reused: reused,
        dump_seconds,
        legacy_errors,
        snat,
        ..counter.facts(&table)
    }))
}

/// The iptables-legacy part of a run's service table, as of the iptables probe's
/// latest legacy save.
struct LegacyPart {
    /// The decoded tables that have services (or service ports not decoded).
    tables: Vec<Arc<ServiceTable>>,
    /// Why legacy rules are missing from `tables`: a family's save did not decode,
    /// or the kernel lists legacy tables the iptables probe has not saved.
    errors: Vec<String>,
    /// Of `errors`, those about tables the iptables probe has not saved (their
    /// source NAT rules are missing too).
    unsaved: Vec<String>,
}

/// The service table a run counts against: nf_tables', with IPVS's and
/// iptables-legacy's merged in. The nf_tables part is shared with the memory;
/// copied only to add IPVS or legacy.
fn service_table<'a>(nf: &'a ServiceTable, ipvs: &ServiceTable, legacy: &[Arc<ServiceTable>]) -> Cow<'a, ServiceTable> {
    if ipvs.services.is_empty() && ipvs.undecoded.is_empty() && legacy.is_empty() {
        Cow::Borrowed(nf)
    } else {
        let mut t = nf.clone();
        for l in legacy {
            t.merge(ServiceTable::clone(l));
        }
        t.merge(ipvs.clone());
        Cow::Owned(t)
    }
}

impl Run<'_> {
    /// The iptables-legacy part of the service table: as of the iptables probe's
    /// latest legacy save, and what is missing from it.
    fn legacy_part(&self) -> Result<LegacyPart, ProbeError> {
        let (legacy, mut errors) = self.legacy.tables();
        let mut unsaved = Vec::new();
        for (v6, names) in [
            (false, "/proc/net/ip_tables_names"),
            (true, "/proc/net/ip6_tables_names"),
        ] {
            let listed = self.host.read_optional(names)?.is_some_and(|t| !t.trim().is_empty());
            if listed && !self.legacy.has(v6) {
                errors.push(match self.legacy_failed {
                    Some(e) => {
                        format!("{names} lists iptables-legacy tables; the iptables probe's latest run failed: {e}")
                    }
                    None => format!("{names} lists iptables-legacy tables the iptables probe has not saved yet"),
                });
                unsaved.push(errors.last().cloned().unwrap_or_default());
            }
        }
        let tables = legacy
            .into_iter()
            .filter(|t| !t.services.is_empty() || !t.undecoded.is_empty())
            .collect();
        Ok(LegacyPart {
            tables,
            errors,
            unsaved,
        })
    }

    /// The generation the counts hold for, or why they do not. Rules committed during
    /// the dump (by kube-proxy, or by anything else in nf_tables: a CNI, a firewall)
    /// matter only if they changed the service table: the same table before and after
    /// the dump means the counts hold for it. The IPVS table must not have changed either.
    fn unchanged_since(
        &self,
        gen: u32,
        before: &ServiceTable,
        ipvs: &ServiceTable,
    ) -> Result<Result<u32, String>, ProbeError> {
        let mut end = self.generation().map_err(rules)?;
        if end != gen {
            let (now, after, _) = self.nf_table().map_err(rules)?;
            if after.table != *before {
                return Ok(Err(format!(
                    "generation {gen} → {now} during the dump, with other service endpoints"
                )));
            }
            end = now;
        }
        if ipvs_table(self.host)? != *ipvs {
            return Ok(Err("the IPVS table changed during the dump".into()));
        }
        Ok(Ok(end))
    }
}

/// The conntrack_stale probe; `given` holds the iptables probe's latest reading (the
/// iptables-legacy part of the service table and of the source NAT rules).
pub async fn probe(
    ctx: &ProbeContext,
    given: &Given,
    deadline: Deadline,
) -> Result<Probed<ConntrackStaleFacts>, ProbeError> {
    if !ctx.host.kernel().netlink() {
        return Ok(Probed::Absent(
            "conntrack entries are read over netlink on the node itself (--host-root /) only".into(),
        ));
    }
    let host = ctx.host.clone();
    let memory = ctx.memory.clone();
    let snat = ctx.snat;
    let at = deadline.at();
    let (legacy, legacy_failed) = match given.iptables() {
        Some(Ok(f)) => (f.legacy.clone(), None),
        Some(Err(e)) => (LegacySaves::default(), Some(e.to_string())),
        None => (LegacySaves::default(), None),
    };
    let local: HashSet<IpAddr> = super::ipvs::interface::of_host(&ctx.host, at)
        .await?
        .addresses
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    super::blocking(ProbeName::ConntrackStale, move || {
        if super::modules::tool_would_load(&host, "nf_conntrack_netlink") {
            return Ok(Probed::Absent(
                "nf_conntrack_netlink is not loaded (nothing sent, so nothing loaded)".into(),
            ));
        }
        let run = Run {
            memory: &memory.conntrack_stale,
            legacy: &legacy,
            legacy_failed: legacy_failed.as_deref(),
            host: &host,
            local: &local,
            nf_tables: !super::modules::tool_would_load(&host, "nf_tables"),
            snat,
            deadline: at,
        };
        read(&run).map(Probed::Present)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dst: &str, dport: u16, src: &str, sport: u16, proto: u8) -> ct_dump::CtEntry {
        ct_dump::CtEntry {
            l4proto: proto,
            orig_src: None,
            orig_dst: dst.parse().unwrap(),
            orig_dport: dport,
            reply_src: src.parse().unwrap(),
            reply_sport: sport,
            reply_dst: "10.0.0.1".parse().unwrap(),
            reply_dport: 40000,
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
        let f = c.facts(&table);
        assert_eq!(f.stale_entries, BTreeMap::from([("udp".into(), 3)]));
        assert_eq!(
            f.draining_entries,
            BTreeMap::from([("tcp".into(), 1), ("sctp".into(), 0)]),
            "TCP to a removed endpoint drains: kube-proxy never deletes it"
        );
        assert_eq!((f.stale_groups, f.draining_groups), (1, 1));
        assert_eq!(f.stale[0].service, "10.96.0.10:53/udp");
        assert_eq!(f.stale[0].endpoint, "10.244.0.9:53");
        assert_eq!(f.draining[0].endpoint, "[fd00:244::3]:8080");
        assert_eq!(f.dst_nat_entries, 8);
        assert_eq!((f.service_ports, f.node_ports, f.endpoints), (2, 0, 2));
    }

    #[test]
    fn node_ports_on_node_addresses_and_entries_without_nat() {
        let mut table = ServiceTable::default();
        table.services.insert(
            ServicePort::node_port(false, 6, 30080),
            vec![("10.244.0.2".parse().unwrap(), Some(8080))],
        );
        let mut c = Counter::with_local(HashSet::from(["192.168.0.2".parse().unwrap()]));
        c.add(&table, &entry("192.168.0.2", 30080, "10.244.0.9", 8080, 6)); // gone, via the node
        c.add(&table, &entry("192.168.0.2", 30080, "10.244.0.2", 8080, 6)); // current
        c.add(&table, &entry("192.168.0.3", 30080, "10.244.0.9", 8080, 6)); // not this node
        c.add(&table, &entry("192.168.0.2", 30081, "10.244.0.9", 8080, 6)); // no such NodePort
                                                                            // IPVS mode dumps every entry: one to the node itself, not translated, is no NAT at all.
        let mut plain = entry("192.168.0.2", 30080, "192.168.0.2", 30080, 6);
        plain.status = 0;
        c.add(&table, &plain);
        let f = c.facts(&table);
        assert_eq!(f.draining_entries["tcp"], 1);
        assert_eq!(f.draining[0].service, "192.168.0.2:30080/tcp");
        assert!(f.draining[0].node_port);
        assert_eq!((f.examined_entries, f.dst_nat_entries, f.node_ports), (5, 4, 1));
    }
}
