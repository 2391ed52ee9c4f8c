//! nf_tables notifications (NFNLGRP_NFTABLES) -> commits: a pure decoder.
//!
//! The kernel notifies every change of a commit as it applies it (a table, chain, rule, set or
//! set element added or deleted, in the message's own layout), then one `NFT_MSG_NEWGEN` with the
//! new generation and the committing process (`NFTA_GEN_PROC_PID`, `NFTA_GEN_PROC_NAME`:
//! include/uapi/linux/netfilter/nf_tables.h, `nf_tables_fill_gen_info`). Commits are serialised
//! per network namespace (the commit mutex), so the changes between two NEWGENs are one commit's.
//! [`Pending`] sums them per table and hands them out, with the writer, at the NEWGEN.
//!
//! Only what the journal and `rules_changed_by_other_process` need is kept: per table, the rules
//! added and removed (those of kube-proxy's chains and tables apart), the chains added and
//! deleted (names capped), set elements, the table added or deleted. Everything is bounded: a
//! full resync of 10 000 rules is a few counters. Garbage is an error, never a panic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::netlink::nft::{self, msg_type};
use crate::netlink::{nfgen, Msg, NlError};

/// `NFNL_SUBSYS_NFTABLES`, the high byte of an nf_tables message's type.
const SUBSYS_NFTABLES: u16 = 10;
/// `NFNLGRP_NFTABLES` (include/uapi/linux/netfilter/nfnetlink.h: NONE 0 ... EXP_DESTROY 6, NFTABLES 7).
pub const NFNLGRP_NFTABLES: u32 = 7;

// enum nf_tables_msg_types (the DESTROY variants are Linux 6.3's; the kernel notifies them as DEL).
const NEWTABLE: u16 = 0;
const DELTABLE: u16 = 2;
const NEWCHAIN: u16 = 3;
const DELCHAIN: u16 = 5;
const NEWRULE: u16 = 6;
const DELRULE: u16 = 8;
const NEWSET: u16 = 9;
const DELSET: u16 = 11;
const NEWSETELEM: u16 = 12;
const DELSETELEM: u16 = 14;
const NEWGEN: u16 = 15;
const DESTROYTABLE: u16 = 26;
const DESTROYCHAIN: u16 = 27;
const DESTROYRULE: u16 = 28;
const DESTROYSET: u16 = 29;
const DESTROYSETELEM: u16 = 30;

// Attributes (enum nft_*_attributes).
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_GEN_ID: u16 = 1;
const NFTA_GEN_PROC_PID: u16 = 2;
const NFTA_GEN_PROC_NAME: u16 = 3;

/// kube-proxy's iptables chains start with this; its nftables tables are named
/// [`crate::probe::nftables::TABLE`].
pub const KUBE_CHAIN_PREFIX: &str = "KUBE-";
/// The iptables built-in chains: where kube-proxy's jump rules into its own chains live.
pub const BASE_CHAINS: &[&str] = &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
/// Chain names kept per table and direction; more are only counted.
pub const MAX_CHAIN_NAMES: usize = 8;
/// Tables kept per commit; more are only counted.
pub const MAX_TABLES: usize = 16;

/// What one commit did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableChange {
    /// nft's family name: `ip`, `ip6`, `inet`, `bridge`, `arp`, `netdev`, or the number.
    pub family: String,
    pub table: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_added: bool,
    /// The table itself was deleted (with whatever it held).
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_deleted: bool,
    pub rules_added: u64,
    pub rules_removed: u64,
    /// Of `rules_added` / `rules_removed`: rules of kube-proxy's own chains (`KUBE-*`) or tables
    /// (`kube-proxy`), and rules anywhere that jump or go to a `KUBE-*` chain.
    pub kube_rules_added: u64,
    pub kube_rules_removed: u64,
    /// Of `rules_removed`: rules of the iptables built-in chains (PREROUTING, OUTPUT...).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_rules_removed: u64,
    /// Of `kube_rules_added` / `kube_rules_removed`: rules of the built-in chains that jump to a
    /// `KUBE-*` chain (the service portals kube-proxy adds with `iptables -I`, apart from its
    /// restores).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_kube_rules_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub base_kube_rules_removed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chains_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chains_deleted: u64,
    /// The first [`MAX_CHAIN_NAMES`] chains deleted, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains_deleted_names: Vec<String>,
    /// Of `chains_deleted`: kube-proxy's (`KUBE-*`, or any chain of its nftables table).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kube_chains_deleted: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sets_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sets_deleted: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elements_added: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elements_removed: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TableChange {
    /// Whether this is one of kube-proxy's nftables tables.
    pub fn is_kube_table(&self) -> bool {
        self.table == crate::probe::nftables::TABLE
    }

    /// Whether kube-proxy keeps state here: its nftables table, or a table with changes to its chains.
    pub fn holds_kube(&self) -> bool {
        self.is_kube_table() || self.kube_rules_added + self.kube_rules_removed + self.kube_chains_deleted > 0
    }

    /// kube-proxy's own rules, chains or table went: what makes the finding critical.
    pub fn removed_kube(&self) -> bool {
        self.kube_rules_removed > 0 || self.kube_chains_deleted > 0 || (self.table_deleted && self.holds_kube())
    }
}

/// One commit as its NEWGEN closes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitFacts {
    /// NFTA_GEN_ID: the ruleset generation this commit made.
    pub generation: u32,
    /// NFTA_GEN_PROC_PID (Linux 4.18+), in the initial PID namespace.
    pub pid: Option<u32>,
    /// NFTA_GEN_PROC_NAME: the writer's comm (15 bytes at most).
    pub name: Option<String>,
    /// The tables it changed, by family and name.
    pub tables: Vec<TableChange>,
    /// Tables changed beyond [`MAX_TABLES`], only counted.
    pub more_tables: u32,
    /// Notifications of this commit (for the journal's size line).
    pub messages: u64,
}

/// The changes of the commit under way, until its NEWGEN.
#[derive(Debug, Default)]
pub struct Pending {
    tables: BTreeMap<(u8, String), TableChange>,
    more_tables: u32,
    messages: u64,
}

fn family_name(code: u8) -> String {
    match code {
        1 => "inet".into(),
        2 => "ip".into(),
        3 => "arp".into(),
        5 => "netdev".into(),
        7 => "bridge".into(),
        10 => "ip6".into(),
        n => n.to_string(),
    }
}

fn string_attr(payload: &[u8], kind: u16) -> Result<Option<&str>, NlError> {
    let (_, _, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if a.kind == kind {
            return a.str().map(Some);
        }
    }
    Ok(None)
}

fn missing(what: &str) -> NlError {
    NlError::Malformed(format!("an nf_tables notification without its {what}"))
}

impl Pending {
    /// Forgets the commit under way (its notifications were lost).
    pub fn reset(&mut self) {
        *self = Pending::default();
    }

    /// Whether changes are waiting for their NEWGEN.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    fn table(&mut self, family: u8, table: &str) -> Option<&mut TableChange> {
        let key = (family, table.to_string());
        if !self.tables.contains_key(&key) {
            if self.tables.len() >= MAX_TABLES {
                self.more_tables = self.more_tables.saturating_add(1);
                return None;
            }
            self.tables.insert(
                key.clone(),
                TableChange {
                    family: family_name(family),
                    table: table.to_string(),
                    ..Default::default()
                },
            );
        }
        self.tables.get_mut(&key)
    }

    /// Takes one notification; at a NEWGEN, returns the commit it closes. Messages of other
    /// subsystems and types are skipped; a malformed one is an error (the commit's other
    /// changes stay pending).
    pub fn feed(&mut self, m: &Msg<'_>) -> Result<Option<CommitFacts>, NlError> {
        if m.ty >> 8 != SUBSYS_NFTABLES {
            return Ok(None);
        }
        let kind = m.ty & 0xff;
        if kind == NEWGEN {
            return self.generation(m.payload).map(Some);
        }
        let family = *m.payload.first().ok_or_else(|| missing("nfgenmsg"))?;
        match kind {
            NEWTABLE | DELTABLE | DESTROYTABLE => {
                let name = string_attr(m.payload, NFTA_TABLE_NAME)?.ok_or_else(|| missing("table name"))?;
                self.messages += 1;
                if let Some(t) = self.table(family, name) {
                    if kind == NEWTABLE {
                        t.table_added = true;
                    } else {
                        t.table_deleted = true;
                    }
                }
            }
            NEWCHAIN | DELCHAIN | DESTROYCHAIN => {
                let table = string_attr(m.payload, NFTA_CHAIN_TABLE)?.ok_or_else(|| missing("chain's table"))?;
                let name = string_attr(m.payload, NFTA_CHAIN_NAME)?.ok_or_else(|| missing("chain name"))?;
                self.messages += 1;
                if let Some(t) = self.table(family, table) {
                    if kind == NEWCHAIN {
                        // A base chain's policy update is notified as NEWCHAIN again: counted twice.
                        t.chains_added += 1;
                    } else {
                        t.chains_deleted += 1;
                        if name.starts_with(KUBE_CHAIN_PREFIX) || t.is_kube_table() {
                            t.kube_chains_deleted += 1;
                        }
                        if t.chains_deleted_names.len() < MAX_CHAIN_NAMES {
                            t.chains_deleted_names.push(name.to_string());
                        }
                    }
                }
            }
            NEWRULE | DELRULE | DESTROYRULE => {
                // The same layout as a dump's rule: decode it as one.
                let rule = nft::decode_rule(msg_type(nft::NFT_MSG_NEWRULE), m.payload)?;
                let jumps = rule.jumps_to(KUBE_CHAIN_PREFIX)?;
                self.messages += 1;
                let (chain, table) = (rule.chain, rule.table);
                if let Some(t) = self.table(family, table) {
                    let kube = jumps || chain.starts_with(KUBE_CHAIN_PREFIX) || t.is_kube_table();
                    let base = BASE_CHAINS.contains(&chain);
                    if kind == NEWRULE {
                        t.rules_added += 1;
                        t.kube_rules_added += u64::from(kube);
                        t.base_kube_rules_added += u64::from(base && jumps);
                    } else {
                        t.rules_removed += 1;
                        t.kube_rules_removed += u64::from(kube);
                        t.base_rules_removed += u64::from(base);
                        t.base_kube_rules_removed += u64::from(base && jumps);
                    }
                }
            }
            NEWSET | DELSET | DESTROYSET => {
                let table = string_attr(m.payload, NFTA_SET_TABLE)?.ok_or_else(|| missing("set's table"))?;
                self.messages += 1;
                if let Some(t) = self.table(family, table) {
                    if kind == NEWSET {
                        t.sets_added += 1;
                    } else {
                        t.sets_deleted += 1;
                    }
                }
            }
            NEWSETELEM | DELSETELEM | DESTROYSETELEM => {
                let (_, _, attrs) = nfgen(m.payload)?;
                let (mut table, mut count) = (None, 0u64);
                for a in attrs {
                    let a = a?;
                    match a.kind {
                        NFTA_SET_ELEM_LIST_TABLE => table = Some(a.str()?),
                        NFTA_SET_ELEM_LIST_ELEMENTS => {
                            for e in a.nested() {
                                e?;
                                count += 1;
                            }
                        }
                        _ => {}
                    }
                }
                let table = table.ok_or_else(|| missing("element's table"))?;
                self.messages += 1;
                if let Some(t) = self.table(family, table) {
                    if kind == NEWSETELEM {
                        t.elements_added += count;
                    } else {
                        t.elements_removed += count;
                    }
                }
            }
            _ => {}
        }
        Ok(None)
    }

    fn generation(&mut self, payload: &[u8]) -> Result<CommitFacts, NlError> {
        let (_, _, attrs) = nfgen(payload)?;
        let (mut generation, mut pid, mut name) = (None, None, None);
        for a in attrs {
            let a = a?;
            match a.kind {
                NFTA_GEN_ID => generation = Some(a.be_u32()?),
                NFTA_GEN_PROC_PID => pid = Some(a.be_u32()?),
                NFTA_GEN_PROC_NAME => name = Some(a.str()?.to_string()),
                _ => {}
            }
        }
        let generation = generation.ok_or_else(|| missing("NFTA_GEN_ID"))?;
        let taken = std::mem::take(self);
        Ok(CommitFacts {
            generation,
            pid,
            name,
            tables: taken.tables.into_values().collect(),
            more_tables: taken.more_tables,
            messages: taken.messages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::messages;

    /// The datagrams of `nft_capture.hex` (see its header for what made them).
    fn capture() -> Vec<Vec<u8>> {
        include_str!("nft_capture.hex")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                (0..l.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect()
    }

    fn commits(datagrams: &[Vec<u8>]) -> Vec<CommitFacts> {
        let mut p = Pending::default();
        let mut out = Vec::new();
        for d in datagrams {
            for m in messages(d) {
                if let Some(c) = p.feed(&m.unwrap()).unwrap() {
                    out.push(c);
                }
            }
        }
        assert!(p.is_empty(), "every change closed by its NEWGEN");
        out
    }

    #[test]
    fn the_captured_commits_as_nft_monitor_printed_them() {
        let c = commits(&capture());
        let who: Vec<_> = c.iter().map(|c| (c.generation, c.pid, c.name.as_deref())).collect();
        assert_eq!(
            who,
            [
                (2, Some(14071), Some("iptables-nft-re")),
                (3, Some(14073), Some("iptables-nft")),
                (4, Some(14076), Some("nft")),
                (5, Some(14078), Some("nft")),
            ]
        );
        // iptables-nft-restore: the nat table, PREROUTING (notified twice) and KUBE-SERVICES, the
        // jump into KUBE-SERVICES and the rule in it: both kube-proxy's.
        let t = &c[0].tables;
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].family.as_str(), t[0].table.as_str()), ("ip", "nat"));
        assert!(t[0].table_added && !t[0].table_deleted);
        assert_eq!((t[0].rules_added, t[0].kube_rules_added, t[0].chains_added), (2, 2, 3));
        assert_eq!(t[0].base_kube_rules_added, 1, "the jump from PREROUTING");
        assert_eq!(c[0].messages, 6);
        // iptables-nft -t nat -F: both rules removed, one of a built-in chain; kube-proxy's.
        let t = &c[1].tables[0];
        assert_eq!((t.rules_removed, t.kube_rules_removed, t.base_rules_removed), (2, 2, 1));
        assert_eq!(t.base_kube_rules_removed, 1, "the jump from PREROUTING");
        assert!(t.removed_kube() && !t.table_deleted);
        // nft adds kube-proxy's table; then deletes it with its chain and rule.
        let t = &c[2].tables[0];
        assert_eq!(
            (t.table.as_str(), t.table_added, t.rules_added, t.kube_rules_added),
            ("kube-proxy", true, 1, 1)
        );
        assert!(!t.removed_kube());
        let t = &c[3].tables[0];
        assert!(t.table_deleted && t.removed_kube());
        assert_eq!((t.rules_removed, t.chains_deleted, t.kube_chains_deleted), (1, 1, 1));
        assert_eq!(t.chains_deleted_names, ["services"]);
    }

    #[test]
    fn a_commit_cut_anywhere_is_an_error_or_skipped_never_a_panic() {
        for d in capture() {
            for cut in 0..d.len() {
                let mut p = Pending::default();
                for m in messages(&d[..cut]).flatten() {
                    let _ = p.feed(&m);
                }
                // And every byte flipped in turn.
                let mut bad = d.clone();
                bad[cut] ^= 0xff;
                for m in messages(&bad).flatten() {
                    let _ = p.feed(&m);
                }
            }
        }
    }

    #[test]
    fn tables_beyond_the_cap_are_counted() {
        let mut p = Pending::default();
        for i in 0..(MAX_TABLES + 3) {
            let payload = [
                &[2u8, 0, 0, 0][..],
                &crate::netlink::testing::attr(NFTA_TABLE_NAME, format!("t{i}\0").as_bytes()),
            ]
            .concat();
            let m = Msg {
                ty: msg_type(NEWTABLE),
                flags: 0,
                seq: 0,
                payload: &payload,
            };
            assert_eq!(p.feed(&m).unwrap(), None);
        }
        let gen = [
            &[0u8, 0, 0, 0][..],
            &crate::netlink::testing::attr(NFTA_GEN_ID, &7u32.to_be_bytes()),
        ]
        .concat();
        let c = p
            .feed(&Msg {
                ty: msg_type(NEWGEN),
                flags: 0,
                seq: 0,
                payload: &gen,
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.generation, c.tables.len(), c.more_tables, c.pid),
            (7, MAX_TABLES, 3, None)
        );
    }
}
