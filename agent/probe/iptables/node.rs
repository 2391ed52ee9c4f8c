//! The iptables probe's entry ([`probe`]). On the node itself: iptables-nft's tables read from the
//! kernel over netlink, the legacy backend with iptables-legacy-save only
//! when it has tables, and iptables-nft-save as a cross-check on its own
//! interval (`--iptables.save-interval`).
//!
//! The netlink count gives the facts iptables-nft-save's text gave, with the
//! same meaning (see [`IptTally`]): per table (`filter`, `nat`, `mangle`,
//! `raw`, `security`) the chains and rules the save would print, kube-proxy's
//! chain families, the hint and canaries, and the rules in or jumping to a
//! `KUBE-*` chain, decoded from the rule's expressions: iptables-nft writes
//! `-j CHAIN` / `-g CHAIN` as an `immediate` verdict (NFT_JUMP / NFT_GOTO)
//! with the chain's name.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

use super::super::counted::NetlinkCount;
use super::super::rule_counters::{self, RuleCounters};
use super::super::service_endpoints::iptables::{LegacySave, LegacySaves};
use super::super::Memory;
use super::super::{Deadline, ProbeContext, ProbeError, ProbeName};
use super::delta::CountDelta;
use super::{
    classify_chain, detect_backend, read_with_saves, run_save, run_save_with, ChainKind, CountMismatch, CrossCheck,
    IptablesFacts, Read, SaveCounts, SaveRun, TableCounts, BUILTIN_CHAINS,
};
use crate::host::Host;
use crate::netlink::nft::{Chain, Family, Rule, Set};
use crate::netlink::nft_count::{self, Plan, Tally};
use crate::netlink::{NlError, NETLINK_NETFILTER};

/// The tables iptables-nft-save prints (the xtables tables); other tables of
/// the family (kube-proxy's `kube-proxy`, a firewall's own) are not read.
pub const XTABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];

/// Per family: (nf_tables family, label, legacy save, legacy table-name file).
const FAMILIES: &[(Family, &str, &str, &str)] = &[
    (Family::Ip, "ipv4", "iptables-legacy-save", "/proc/net/ip_tables_names"),
    (
        Family::Ip6,
        "ipv6",
        "ip6tables-legacy-save",
        "/proc/net/ip6_tables_names",
    ),
];

/// Counts iptables-nft's tables as iptables-nft-save would print them.
#[derive(Debug, Default)]
pub struct IptTally {
    counts: SaveCounts,
    /// Builtin chains of each table that exist in the kernel, as a bit per
    /// entry of [`BUILTIN_CHAINS`]; the save prints the others anyway.
    builtins_seen: BTreeMap<String, u8>,
    /// nat chains holding the older eTP=Local drop (`rule_counters::nat`).
    nat_drops: Vec<String>,
}

fn builtins(table: &str) -> &'static [&'static str] {
    BUILTIN_CHAINS.iter().find(|(t, _)| *t == table).map_or(&[], |(_, c)| c)
}

impl IptTally {
    /// The counts, with the builtin chains iptables-nft-save prints whether or not they exist.
    pub fn finish(mut self) -> SaveCounts {
        for (table, c) in self.counts.tables.iter_mut() {
            let seen = self.builtins_seen.get(table).copied().unwrap_or(0);
            c.chains += builtins(table).len() as u64 - u64::from(seen.count_ones());
        }
        self.counts
    }
}

impl Tally for IptTally {
    fn wants(&self, table: &str) -> bool {
        XTABLES.contains(&table)
    }

    fn table(&mut self, table: &str) {
        self.counts.tables.insert(table.to_string(), TableCounts::default());
    }

    fn chain(&mut self, c: &Chain<'_>) -> Result<(), NlError> {
        self.counts.tables.entry(c.table.to_string()).or_default().chains += 1;
        if let Some(i) = builtins(c.table).iter().position(|b| *b == c.name) {
            *self.builtins_seen.entry(c.table.to_string()).or_default() |= 1 << i;
        }
        classify_chain(&mut self.counts, c.table, c.name);
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        self.counts.tables.entry(r.table.to_string()).or_default().rules += 1;
        if r.chain.starts_with("KUBE-") || r.jumps_to("KUBE-")? {
            self.counts.kube_rules += 1;
        }
        rule_counters::nat::note(&mut self.nat_drops, r)
    }

    fn set(&mut self, _: &Set<'_>) -> bool {
        false
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}
}

/// The counts `base` (of one family, at the generation before a commit) carried through that
/// commit's notifications, `delta` (pure): what a dump at the commit's generation would count, or
/// None when the commit changed something its notifications cannot account for
/// ([`CountDelta::uncounted`]) or that does not fit `base` (a count would go below 0, a table
/// changed that `base` does not have).
pub fn advance(base: &SaveCounts, delta: &CountDelta) -> Option<SaveCounts> {
    if delta.uncounted.is_some() {
        return None;
    }
    let mut c = base.clone();
    for t in &delta.tables {
        let empty = TableCounts {
            chains: builtins(&t.table).len() as u64,
            rules: 0,
        };
        let start = match c.tables.get(&t.table) {
            _ if t.deleted && !t.added => {
                if t.rules != 0 || t.chains != 0 {
                    return None;
                }
                c.tables.remove(&t.table);
                continue;
            }
            _ if t.deleted => empty,
            Some(before) => before.clone(),
            None if t.added => empty,
            None => return None,
        };
        let now = TableCounts {
            chains: start.chains.checked_add_signed(t.chains)?,
            rules: start.rules.checked_add_signed(t.rules)?,
        };
        c.tables.insert(t.table.clone(), now);
    }
    c.kube_rules = c.kube_rules.checked_add_signed(delta.kube_rules)?;
    let kinds = [
        ChainKind::Svc,
        ChainKind::Sep,
        ChainKind::Ext,
        ChainKind::Fw,
        ChainKind::Svl,
    ];
    for (kind, d) in kinds.into_iter().zip(delta.kube_chains) {
        let n = c.kube.of(kind)?;
        *n = n.checked_add_signed(d)?;
    }
    c.hint_chain |= delta.hint_added;
    c.kubelet_canary |= delta.kubelet_canary_added;
    c.proxy_canary |= delta.proxy_canary_added;
    Some(c)
}

/// The counts the save and netlink disagree on (pure).
pub fn compare(family: &str, netlink: &SaveCounts, save: &SaveCounts) -> Vec<CountMismatch> {
    let mut out = Vec::new();
    let mut check = |what: String, n: u64, s: u64| {
        if n != s {
            out.push(CountMismatch {
                family: family.to_string(),
                what,
                netlink: n,
                save: s,
            });
        }
    };
    let tables: BTreeSet<&String> = netlink.tables.keys().chain(save.tables.keys()).collect();
    for t in tables {
        let n = netlink.tables.get(t).cloned().unwrap_or_default();
        let s = save.tables.get(t).cloned().unwrap_or_default();
        check(format!("{t} chains"), n.chains, s.chains);
        check(format!("{t} rules"), n.rules, s.rules);
    }
    let (nk, sk) = (&netlink.kube, &save.kube);
    for (kind, n, s) in [
        ("SVC", nk.svc, sk.svc),
        ("SEP", nk.sep, sk.sep),
        ("EXT", nk.ext, sk.ext),
        ("FW", nk.fw, sk.fw),
        ("SVL", nk.svl, sk.svl),
    ] {
        check(format!("KUBE-{kind} chains"), n, s);
    }
    check("KUBE-* rules".into(), netlink.kube_rules, save.kube_rules);
    for (what, n, s) in [
        ("KUBE-IPTABLES-HINT", netlink.hint_chain, save.hint_chain),
        ("KUBE-KUBELET-CANARY", netlink.kubelet_canary, save.kubelet_canary),
        ("KUBE-PROXY-CANARY", netlink.proxy_canary, save.proxy_canary),
    ] {
        check(format!("{what} chain present"), n as u64, s as u64);
    }
    out
}

fn nl_error(family: Family, e: NlError) -> ProbeError {
    ProbeError::NfNetlink {
        what: format!(
            "nf_tables over netlink, {} tables {}",
            family.as_str(),
            XTABLES.join("/")
        ),
        source: e,
    }
}

fn unix_now() -> f64 {
    crate::timefmt::unix_seconds(SystemTime::now())
}

/// The ruleset generation now.
fn generation(host: &Host, deadline: Instant) -> Result<u32, NlError> {
    nft_count::generation(host.netlink(NETLINK_NETFILTER)?, deadline)
}

/// The families' netlink counts (blocking): reused at an unchanged generation.
fn count_families(
    host: &Host,
    memory: &Memory,
    families: &[Family],
    deadline: Instant,
) -> Result<Vec<(SaveCounts, NetlinkCount)>, ProbeError> {
    super::super::counted::counts_now(host, &memory.iptables.counts, families, deadline, |family| {
        let plan = Plan { family, sets: false };
        let c = nft_count::count(
            &mut || host.netlink(NETLINK_NETFILTER),
            plan,
            deadline,
            &IptTally::default,
        )?;
        let mut tally = c.tally;
        let how = super::super::counted::NetlinkCount {
            generation: c.generation,
            ..Default::default()
        };
        memory
            .iptables
            .nat_drop_chains
            .put(family, std::mem::take(&mut tally.nat_drops), how);
        Ok((tally.finish(), c.generation, c.attempts, c.bytes))
    })
    .map_err(|(family, e)| nl_error(family, e))
}

/// Runs a netlink read on the iptables probe's blocking slot.
async fn on_pool<T: Send + 'static>(
    family: Family,
    f: impl FnOnce() -> Result<T, NlError> + Send + 'static,
) -> Result<T, ProbeError> {
    super::super::blocking(ProbeName::Iptables, move || f().map_err(|e| nl_error(family, e))).await
}

/// The iptables probe. Fails as a whole when a count fails, so a partial
/// count is never reported as the node's rule set.
pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<super::super::Probed<IptablesFacts>, ProbeError> {
    let (read, rule_counters, legacy) = if ctx.host.kernel().netlink() {
        read_node(ctx, deadline).await?
    } else {
        (read_with_saves(ctx, deadline).await?, None, LegacySaves::default())
    };
    let (saves, cross_check, not_run) = match read {
        Read::Present(saves, cross_check, not_run) => (saves, cross_check, not_run),
        Read::Absent(why) => return Ok(super::super::Probed::Absent(why)),
    };
    let (backend_in_use, backend_reason, backends_with_kube_rules) = detect_backend(&saves);
    Ok(super::super::Probed::Present(IptablesFacts {
        saves,
        backend_in_use,
        backend_reason,
        backends_with_kube_rules,
        not_run,
        cross_check,
        rule_counters,
        legacy,
    }))
}

/// The node itself (`--host-root /`), and kube-proxy's reject and drop rules' counters.
async fn read_node(
    ctx: &ProbeContext,
    deadline: Deadline,
) -> Result<(Read, Option<RuleCounters>, LegacySaves), ProbeError> {
    // One trip to the blocking pool: the gate, the legacy tables, one
    // generation read and, unless reused, the counts.
    let (host, memory, at) = (ctx.host.clone(), ctx.memory.clone(), deadline.at());
    let started = Instant::now();
    let (nft, legacy, counted, mut rules, acct) = super::super::blocking(ProbeName::Iptables, move || {
        let nft = !super::super::modules::tool_would_load(&host, "nf_tables");
        let mut legacy = Vec::new();
        for (_, _, _, names) in FAMILIES {
            let text = host.read_optional(names)?.unwrap_or_default();
            legacy.push(text.split_whitespace().map(str::to_string).collect::<Vec<_>>());
        }
        let families: Vec<Family> = FAMILIES.iter().map(|f| f.0).collect();
        let counted = if nft {
            count_families(&host, &memory, &families, at)?
        } else {
            Vec::new()
        };
        // Read every run: counters move without the generation moving.
        let rules = if nft {
            nft_rule_counters(&host, &memory, &families, &counted, at)
        } else {
            let mut rules = RuleCounters::default();
            rules
                .unavailable
                .push("iptables-nft: nf_tables is not loaded (not asked)".into());
            rules
        };
        // kube-proxy's invalid-drop nfacct object (asking never loads nfnetlink_acct).
        let ask = !super::super::modules::tool_would_load(&host, "nfnetlink_acct");
        let acct = rule_counters::nfacct::read(&host, ask, at).map_err(|e| e.to_string());
        Ok((nft, legacy, counted, rules, acct))
    })
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut counted = counted.into_iter();
    let mut saves = Vec::new();
    let mut decoded = LegacySaves::default();
    for ((_, label, legacy_save, names), legacy_tables) in FAMILIES.iter().zip(&legacy) {
        if let Some((mut counts, how)) = counted.next() {
            // What iptables-nft-save says on stderr when the legacy backend has tables.
            counts.legacy_warning = !legacy_tables.is_empty();
            counts.empty_with_warning = counts.tables.is_empty() && counts.legacy_warning;
            saves.push(SaveRun {
                backend: "nft".into(),
                family: label.to_string(),
                command: "netlink".into(),
                duration_seconds: if how.reused { elapsed } else { how.count_seconds },
                counts,
                netlink: Some(how),
            });
        }
        if !legacy_tables.is_empty() {
            if !crate::exec::on_path(legacy_save) {
                return Err(ProbeError::Inconsistent(format!(
                    "{names} lists legacy tables ({}) but {legacy_save} is not on PATH",
                    legacy_tables.join(", ")
                )));
            }
            let (run, save) = legacy_save_and_services(ctx, (label, legacy_save), deadline, &mut rules).await?;
            saves.push(run);
            decoded.0[usize::from(*label == "ipv6")] = Some(save);
        } else {
            ctx.memory.iptables.legacy_tables.put(*label == "ipv6", None);
        }
    }
    if !nft && saves.is_empty() {
        return Ok((Read::Absent(
            "nf_tables is not loaded (nothing was asked, so nothing was loaded) and no legacy iptables table exists"
                .into(),
        ), None, decoded));
    }
    rule_counters::nfacct::merge(&mut rules, acct);
    rules.counted_rules = rules.rules.len();
    let cross_check = if nft {
        cross_check(ctx, &saves, deadline).await
    } else {
        None
    };
    Ok((Read::Present(saves, cross_check, Vec::new()), Some(rules), decoded))
}

/// The counters of kube-proxy's reject and drop rules in iptables-nft, the nat
/// table's drop chains being those found at the generation of the family's count
/// in `counted` (in `families`' order). A failed read leaves no counter, and why.
fn nft_rule_counters(
    host: &Host,
    memory: &Memory,
    families: &[Family],
    counted: &[(SaveCounts, NetlinkCount)],
    at: Instant,
) -> RuleCounters {
    let mut rules = RuleCounters::default();
    let nat = |f: Family| {
        let gen = counted
            .iter()
            .zip(families)
            .find(|(_, g)| **g == f)
            .map(|(c, _)| c.1.generation);
        gen.and_then(|g| memory.iptables.nat_drop_chains.get(f, g))
            .map(|(c, _)| c)
            .unwrap_or_default()
    };
    let read = rule_counters::read_nft(host, families, at, &mut rules).and_then(|()| {
        families
            .iter()
            .try_for_each(|&f| rule_counters::nat::read_nft(host, f, &nat(f), at, &mut rules))
    });
    if let Err(e) = read {
        rules = RuleCounters::default();
        rules.unavailable.push(format!("iptables-nft: {e}"));
    }
    rules
}

/// One legacy save, its lines also decoded into kube-proxy's service table, the
/// service_traffic targets' ports and the source NAT rules, for the probes that read
/// this one (the table rebuilt only when the text changed). Text the decoder cannot
/// read leaves an error there instead, so the stale check says so and uses its other
/// sources; a save that fails fails the probe.
async fn legacy_save_and_services(
    ctx: &ProbeContext,
    (label, command): (&str, &str),
    deadline: Deadline,
    rules: &mut RuleCounters,
) -> Result<(SaveRun, LegacySave), ProbeError> {
    use super::super::service_endpoints::iptables::SaveText;
    let v6 = label == "ipv6";
    let names = super::super::service_traffic::wanted(&ctx.service_traffic);
    let mut text = SaveText::naming(if v6 { Family::Ip6 } else { Family::Ip }, names);
    let mut snat = super::super::snat::LegacySnatText::new(if v6 { Family::Ip6 } else { Family::Ip });
    let mut bad: Option<String> = None;
    // `-c`: the counters come with the table anyway (IPT_SO_GET_ENTRIES); the
    // source NAT rules take theirs from each line, the service table's
    // decoder gets each line as a save without -c prints it.
    // The rules are appended to the reading itself (one list, never copied); a
    // failed save takes back what it added.
    let mut counted = rule_counters::LegacyLines::new(v6);
    counted.counters = std::mem::take(rules);
    let before = (counted.counters.rules.len(), counted.counters.undecoded);
    let run = run_save_with(ctx, ("legacy", label, command, &["-c"]), deadline, &mut |line| {
        snat.feed_line(line);
        let line = counted.feed_line(line);
        if bad.is_none() {
            bad = text.feed_line(line).err();
        }
    })
    .await;
    let source = counted.source();
    *rules = std::mem::take(&mut counted.counters);
    match &run {
        Ok(_) => rules.sources.extend(source),
        Err(e) => {
            std::sync::Arc::make_mut(&mut rules.rules).truncate(before.0);
            rules.undecoded = before.1;
            rules.unavailable.push(format!("{command} -c: {e}"));
        }
    }
    let run = run?;
    let cache = &ctx.memory.iptables.legacy_tables;
    let (services, named) = match bad {
        Some(e) => (Err(e), Vec::new()),
        None => {
            let named = std::mem::take(&mut text.named);
            (Ok(text.finish(cache.previous(v6))), named)
        }
    };
    cache.put(v6, services.as_ref().ok().cloned());
    let save = LegacySave {
        services,
        named,
        snat: snat.finish(),
    };
    Ok((run, save))
}

/// iptables-nft-save against the netlink counts of the same generation, when
/// due. A failed save is recorded in the cross-check, not a probe failure:
/// the netlink counts stand.
async fn cross_check(ctx: &ProbeContext, runs: &[SaveRun], deadline: Deadline) -> Option<CrossCheck> {
    let now = Instant::now();
    if !ctx.memory.iptables.cross_check_due(ctx.iptables_save_interval, now) {
        return ctx.memory.iptables.last_cross_check();
    }
    let mut check = CrossCheck {
        at_seconds: unix_now(),
        ..Default::default()
    };
    for (family, label, _, _) in FAMILIES {
        let command = if *family == Family::Ip {
            "iptables-nft-save"
        } else {
            "ip6tables-nft-save"
        };
        if !crate::exec::on_path(command) {
            check.not_compared.push(format!("{label}: {command} is not on PATH"));
            continue;
        }
        match compare_family(ctx, *family, label, command, deadline).await {
            Ok((run, gens)) => {
                match gens {
                    Ok(generation) => {
                        let netlink = netlink_counts_at(ctx, runs, *family, label, generation, deadline).await;
                        match netlink {
                            Ok(n) => {
                                check.generations.insert(label.to_string(), generation);
                                check.mismatches.extend(compare(label, &n, &run.counts));
                            }
                            Err(e) => check.not_compared.push(format!("{label}: {e}")),
                        }
                    }
                    Err(why) => check.not_compared.push(format!("{label}: {why}")),
                }
                check.saves.push(run);
            }
            Err(e) => {
                check.error = Some(e.to_string());
                break;
            }
        }
    }
    ctx.memory.iptables.record_cross_check(now, check.clone());
    Some(check)
}

/// Runs the save between two generation reads: Ok(generation) when nothing
/// changed during the save, else why it cannot be compared.
async fn compare_family(
    ctx: &ProbeContext,
    family: Family,
    label: &str,
    command: &str,
    deadline: Deadline,
) -> Result<(SaveRun, Result<u32, String>), ProbeError> {
    let at = deadline.at();
    let host = ctx.host.clone();
    let before = on_pool(family, move || generation(&host, at)).await?;
    let run = run_save(ctx, ("nft", label, command), deadline).await?;
    let host = ctx.host.clone();
    let after = on_pool(family, move || generation(&host, at)).await?;
    let gens = if before == after {
        Ok(before)
    } else {
        Err(format!(
            "the ruleset changed during {command} (generation {before} → {after}); not compared"
        ))
    };
    Ok((run, gens))
}

/// The netlink counts at `generation`: this run's if they are of it, else
/// counted (or reused) now; an error if the ruleset has moved on since.
async fn netlink_counts_at(
    ctx: &ProbeContext,
    runs: &[SaveRun],
    family: Family,
    label: &str,
    generation: u32,
    deadline: Deadline,
) -> Result<SaveCounts, ProbeError> {
    let mine = runs.iter().find(|r| {
        r.backend == "nft" && r.family == label && r.netlink.as_ref().is_some_and(|n| n.generation == generation)
    });
    if let Some(r) = mine {
        return Ok(r.counts.clone());
    }
    let (host, memory, at) = (ctx.host.clone(), ctx.memory.clone(), deadline.at());
    let counted = super::super::blocking(ProbeName::Iptables, move || {
        count_families(&host, &memory, &[family], at)
    })
    .await?;
    let Some((counts, how)) = counted.into_iter().next() else {
        return Err(nl_error(family, NlError::Malformed("no count".into())));
    };
    if how.generation != generation {
        return Err(ProbeError::RulesMoved(format!(
            "the ruleset changed after the save (generation {generation} → {}); not compared",
            how.generation
        )));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nft::samples;
    use crate::netlink::nft::{decode_chain, decode_rule, msg_type, NFT_MSG_NEWCHAIN, NFT_MSG_NEWRULE};
    use crate::probe::iptables::delta::TableDelta;

    fn chain(t: &mut IptTally, table: &str, name: &str, base: bool) {
        let p = samples::chain(2, 1, table, name, base);
        t.chain(&decode_chain(msg_type(NFT_MSG_NEWCHAIN), &p).unwrap()).unwrap();
    }

    fn rule(t: &mut IptTally, table: &str, chain: &str, jump: Option<&str>) {
        let e = match jump {
            Some(j) => samples::immediate(-3, Some(j)),
            None => samples::immediate(1, None),
        };
        let p = samples::rule(2, 1, table, chain, &[samples::counter(), e]);
        t.rule(&decode_rule(msg_type(NFT_MSG_NEWRULE), &p).unwrap()).unwrap();
    }

    /// The netlink view of the text parser's SMALL sample (iptables.rs tests):
    /// the same counts, with nat's INPUT never created in the kernel.
    #[test]
    fn same_facts_as_the_save_text() {
        let mut t = IptTally::default();
        t.table("mangle");
        for c in ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"] {
            chain(&mut t, "mangle", c, true);
        }
        for c in ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"] {
            chain(&mut t, "mangle", c, false);
        }
        t.table("nat");
        for c in ["PREROUTING", "OUTPUT", "POSTROUTING"] {
            chain(&mut t, "nat", c, true);
        }
        for c in [
            "KUBE-SERVICES",
            "KUBE-SVC-XPGD46QRK7WJZT7O",
            "KUBE-SEP-SXIVWICOYRO3J4NJ",
        ] {
            chain(&mut t, "nat", c, false);
        }
        rule(&mut t, "nat", "PREROUTING", Some("KUBE-SERVICES"));
        rule(&mut t, "nat", "OUTPUT", None);
        rule(&mut t, "nat", "KUBE-SERVICES", Some("KUBE-SVC-XPGD46QRK7WJZT7O"));
        rule(
            &mut t,
            "nat",
            "KUBE-SVC-XPGD46QRK7WJZT7O",
            Some("KUBE-SEP-SXIVWICOYRO3J4NJ"),
        );
        rule(&mut t, "nat", "KUBE-SEP-SXIVWICOYRO3J4NJ", None);
        let c = t.finish();
        assert_eq!(c.tables["mangle"], TableCounts { chains: 8, rules: 0 });
        assert_eq!(
            c.tables["nat"],
            TableCounts { chains: 7, rules: 5 },
            "INPUT counted as the save prints it"
        );
        assert_eq!((c.kube.svc, c.kube.sep), (1, 1));
        assert!(c.hint_chain && c.kubelet_canary && c.proxy_canary);
        assert_eq!(c.kube_rules, 4);
        let text = SaveCounts {
            bytes: 1,
            lines: 1,
            ..c.clone()
        };
        assert!(
            compare("ipv4", &c, &text).is_empty(),
            "bytes and lines are not compared"
        );
    }

    fn delta(tables: Vec<TableDelta>) -> CountDelta {
        CountDelta {
            family: 2,
            tables,
            ..Default::default()
        }
    }

    fn nat(f: impl FnOnce(&mut TableDelta)) -> TableDelta {
        let mut t = TableDelta {
            table: "nat".into(),
            ..Default::default()
        };
        f(&mut t);
        t
    }

    /// A commit's notifications carry a count to what a dump after it counts: rules and chains
    /// per table, kube-proxy's, a table deleted and added again (as iptables-nft-restore without
    /// --noflush does) counted from its built-in chains; and nothing when they cannot.
    #[test]
    fn a_count_is_carried_through_a_commit_or_not_at_all() {
        let mut base = SaveCounts::default();
        base.tables.insert("nat".into(), TableCounts { chains: 7, rules: 5 });
        base.tables.insert("filter".into(), TableCounts { chains: 3, rules: 0 });
        (base.kube_rules, base.kube.svc, base.kube.sep) = (4, 1, 1);
        let mut d = delta(vec![nat(|t| (t.rules, t.chains) = (-3, -1))]);
        (d.kube_rules, d.kube_chains) = (-3, [-1, 0, 0, 0, 0]);
        let c = advance(&base, &d).unwrap();
        assert_eq!(c.tables["nat"], TableCounts { chains: 6, rules: 2 });
        assert_eq!((c.kube_rules, c.kube.svc, c.kube.sep), (1, 0, 1));
        assert_eq!(c.tables["filter"], base.tables["filter"], "untouched");
        // Deleted, added again with one chain and two rules: nat's 4 built-in chains + 1.
        let mut d = delta(vec![nat(|t| {
            (t.deleted, t.added, t.rules, t.chains) = (true, true, 2, 1)
        })]);
        (d.kube_rules, d.kube_chains, d.proxy_canary_added) = (-2, [-1, -1, 0, 0, 0], true);
        let c = advance(&base, &d).unwrap();
        assert_eq!(c.tables["nat"], TableCounts { chains: 5, rules: 2 });
        assert!(c.proxy_canary && c.kube_rules == 2);
        // Deleted: gone. A new table starts from its built-in chains.
        let c = advance(&base, &delta(vec![nat(|t| t.deleted = true)])).unwrap();
        assert!(!c.tables.contains_key("nat"));
        let raw = TableDelta {
            table: "raw".into(),
            added: true,
            ..Default::default()
        };
        let c = advance(&base, &delta(vec![raw])).unwrap();
        assert_eq!(c.tables["raw"], TableCounts { chains: 2, rules: 0 });
        // What does not fit is no count.
        let uncounted = CountDelta {
            uncounted: Some("a chain added without NLM_F_EXCL"),
            ..Default::default()
        };
        assert_eq!(advance(&base, &uncounted), None);
        assert_eq!(advance(&base, &delta(vec![nat(|t| t.rules = -6)])), None, "below 0");
        let mangle = TableDelta {
            table: "mangle".into(),
            rules: 1,
            ..Default::default()
        };
        assert_eq!(
            advance(&base, &delta(vec![mangle])),
            None,
            "a table the count does not have"
        );
    }

    #[test]
    fn mismatches_name_both_numbers() {
        let mut n = SaveCounts::default();
        n.tables.insert("nat".into(), TableCounts { chains: 7, rules: 5 });
        let mut s = n.clone();
        s.tables.get_mut("nat").unwrap().rules = 6;
        s.tables.insert("raw".into(), TableCounts { chains: 2, rules: 0 });
        s.proxy_canary = true;
        let m = compare("ipv6", &n, &s);
        let got: Vec<(&str, u64, u64)> = m.iter().map(|m| (m.what.as_str(), m.netlink, m.save)).collect();
        assert_eq!(
            got,
            [
                ("nat rules", 5, 6),
                ("raw chains", 0, 2),
                ("KUBE-PROXY-CANARY chain present", 0, 1)
            ]
        );
        assert!(m.iter().all(|m| m.family == "ipv6"));
    }
}
