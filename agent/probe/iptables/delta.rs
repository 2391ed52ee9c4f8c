//! What one nf_tables commit did to the iptables probe's counts of one family: the type the
//! nf_tables watcher fills from a commit's notifications ([`crate::watch::nft_decode`]) and the
//! probe applies to the previous generation's counts ([`super::node::advance`]). It lives with
//! the counts it changes, so that the probe needs nothing of the watcher.

use super::{chain_kind, ChainKind, BUILTIN_CHAINS};
use crate::netlink::{nft, NlError};
use crate::probe::rule_counters::nat as nat_drop;

/// What one commit did to the counts the iptables and nftables probes keep of one family (`ip`
/// or `ip6`): enough to carry the previous generation's counts to this one without a dump
/// (`crate::probe::Memory::advance`), or why that cannot be done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountDelta {
    /// The nf_tables family: 2 (`ip`) or 10 (`ip6`).
    pub family: u8,
    /// Per iptables-nft table it changed ([`XTABLES`](super::node::XTABLES)), in the order first changed.
    pub tables: Vec<TableDelta>,
    /// Rules in or jumping to a `KUBE-*` chain (as the iptables tally counts them), added minus removed.
    pub kube_rules: i64,
    /// kube-proxy's chain families (`KUBE-SVC-`, `-SEP-`, `-EXT-`, `-FW-`, `-SVL-`), added minus deleted.
    pub kube_chains: [i64; 5],
    /// `KUBE-IPTABLES-HINT` (mangle), `KUBE-KUBELET-CANARY`, `KUBE-PROXY-CANARY` added.
    pub hint_added: bool,
    pub kubelet_canary_added: bool,
    pub proxy_canary_added: bool,
    /// kube-proxy's nftables table of this family changed: its counts need a dump.
    pub kube_table: bool,
    /// Why the iptables-nft counts cannot be carried by this commit's notifications (a dump must
    /// count them): a chain added without `NLM_F_EXCL` (new or only updated: not told), a hint
    /// or canary deleted (another table may hold one), a rule of the older eTP=Local drop.
    pub uncounted: Option<&'static str>,
}

/// What one commit did to one iptables-nft table's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableDelta {
    pub table: String,
    /// The table was deleted: the deltas that follow count from an empty table.
    pub deleted: bool,
    /// The table was added (after its deletion, when it was deleted too); an added table that
    /// existed already is only updated.
    pub added: bool,
    /// Rules added minus removed.
    pub rules: i64,
    /// Chains added minus deleted, the table's built-in chains left out (iptables-nft-save
    /// prints those whether they exist or not).
    pub chains: i64,
}

/// The slot of a kube-proxy chain family in [`CountDelta::kube_chains`].
fn kube_slot(kind: ChainKind) -> Option<usize> {
    match kind {
        ChainKind::Svc => Some(0),
        ChainKind::Sep => Some(1),
        ChainKind::Ext => Some(2),
        ChainKind::Fw => Some(3),
        ChainKind::Svl => Some(4),
        _ => None,
    }
}

fn is_builtin(table: &str, chain: &str) -> bool {
    BUILTIN_CHAINS
        .iter()
        .any(|(t, chains)| *t == table && chains.contains(&chain))
}

impl CountDelta {
    pub(crate) fn table(&mut self, table: &str) -> &mut TableDelta {
        let i = match self.tables.iter().position(|t| t.table == table) {
            Some(i) => i,
            None => {
                self.tables.push(TableDelta {
                    table: table.to_string(),
                    ..Default::default()
                });
                self.tables.len() - 1
            }
        };
        &mut self.tables[i]
    }

    pub(crate) fn uncounted(&mut self, why: &'static str) {
        self.uncounted.get_or_insert(why);
    }

    pub(crate) fn table_change(&mut self, table: &str, added: bool) {
        let t = self.table(table);
        if added {
            t.added = true;
        } else {
            *t = TableDelta {
                table: t.table.clone(),
                deleted: true,
                ..Default::default()
            };
        }
    }

    pub(crate) fn chain(&mut self, table: &str, name: &str, added: bool, exclusive: bool) {
        if is_builtin(table, name) {
            return;
        }
        if added && !exclusive {
            return self.uncounted("a chain added without NLM_F_EXCL (new, or an existing one updated)");
        }
        let kind = chain_kind(table, name);
        let one = if added { 1 } else { -1 };
        self.table(table).chains += one;
        if let Some(i) = kube_slot(kind) {
            self.kube_chains[i] += one;
        }
        match (kind, added) {
            (ChainKind::Hint, true) => self.hint_added = true,
            (ChainKind::KubeletCanary, true) => self.kubelet_canary_added = true,
            (ChainKind::ProxyCanary, true) => self.proxy_canary_added = true,
            (ChainKind::Hint | ChainKind::KubeletCanary | ChainKind::ProxyCanary, false) => {
                self.uncounted("a hint or canary chain deleted (another table may hold one)")
            }
            _ => {}
        }
    }

    /// `kube`: the rule is of a `KUBE-*` chain or jumps to one.
    pub(crate) fn rule(&mut self, r: &nft::Rule<'_>, kube: bool, added: bool) -> Result<(), NlError> {
        let one = if added { 1 } else { -1 };
        self.table(r.table).rules += one;
        if kube {
            self.kube_rules += one;
        }
        if r.table == "nat" && nat_drop::chain_label(r.chain).is_some() && r.jumps_to("KUBE-MARK-DROP")? {
            self.uncounted("a rule of kube-proxy's older eTP=Local drop (its chains are learned by a dump)");
        }
        Ok(())
    }
}
