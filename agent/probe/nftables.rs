//! kube-proxy's nftables-mode table (`table ip kube-proxy`, `table ip6 kube-proxy`),
//! counted over netlink (nf_tables messages, crate::netlink::nft_count) the way
//! `nft list table` shows it: chains (base ones have a hook), rules, named sets
//! and maps, and their elements. On the node the kernel answers; on a fixture
//! node its netlink recording does; a host root with neither has no table to
//! read, which the probe says.

use std::collections::BTreeMap;

/// Counts for one nftables table, as `nft list table` would show them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftTableCounts {
    /// Chains in the table, base and regular, in chains.
    pub chains: u64,
    /// Base chains (with `type ... hook ... priority ...;`), in chains.
    pub base_chains: u64,
    /// Rules over all chains (statement lines, not the hook/policy/comment lines), in rules.
    pub rules: u64,
    /// kube-proxy per-service-port chains, `service-<8 base32 chars>-...`, in chains.
    pub service_chains: u64,
    /// kube-proxy per-endpoint chains, `endpoint-<8 base32 chars>-...`, in chains.
    pub endpoint_chains: u64,
    /// kube-proxy external-traffic chains, `external-<8 base32 chars>-...`, in chains.
    pub external_chains: u64,
    /// kube-proxy local-endpoint chains (internalTrafficPolicy / externalTrafficPolicy
    /// Local), `local-<8 base32 chars>-...`, in chains.
    #[serde(default)]
    pub local_chains: u64,
    /// Named sets (`set NAME { ... }`), in sets.
    pub sets: u64,
    /// Named maps, including verdict maps (`map NAME { ... }`), in maps.
    pub maps: u64,
    /// Elements of each named map, keyed by map name (`service-ips`, `service-nodeports`,
    /// `no-endpoint-services`, `firewall-ips`...); 0 for a map listed without elements, in elements.
    pub map_elements: BTreeMap<String, u64>,
    /// Elements of each named set, keyed by set name (`cluster-ips`, `nodeport-ips`,
    /// `affinity-*`...), in elements.
    pub set_elements: BTreeMap<String, u64>,
}

/// Whether `name` is `<prefix><8 base32 chars>-...`, kube-proxy's per-service chain naming.
fn is_hashed(name: &str, prefix: &str) -> bool {
    match name.strip_prefix(prefix) {
        Some(rest) => {
            let b = rest.as_bytes();
            b.len() > 9
                && b[..8]
                    .iter()
                    .all(|c| c.is_ascii_uppercase() || (b'2'..=b'7').contains(c))
                && b[8] == b'-'
        }
        None => false,
    }
}

/// kube-proxy's table name in nftables mode (in both the ip and ip6 families).
pub const TABLE: &str = "kube-proxy";

/// Counts kube-proxy's table from nf_tables messages as `nft list table` lists
/// it: chains (base ones have a hook), rules, named sets
/// and maps (nft lists no block for an anonymous set), elements as nft lists them.
#[derive(Debug, Default)]
pub struct NftTally {
    found: bool,
    counts: NftTableCounts,
}

impl NftTally {
    /// The counts; None when the table does not exist.
    pub fn finish(self) -> Option<NftTableCounts> {
        self.found.then_some(self.counts)
    }
}

impl crate::netlink::nft_count::Tally for NftTally {
    fn wants(&self, table: &str) -> bool {
        table == TABLE
    }

    fn table(&mut self, _: &str) {
        self.found = true;
    }

    fn chain(&mut self, c: &crate::netlink::nft::Chain<'_>) -> Result<(), crate::netlink::NlError> {
        let n = &mut self.counts;
        n.chains += 1;
        n.base_chains += u64::from(c.base);
        if is_hashed(c.name, "service-") {
            n.service_chains += 1;
        } else if is_hashed(c.name, "endpoint-") {
            n.endpoint_chains += 1;
        } else if is_hashed(c.name, "external-") {
            n.external_chains += 1;
        } else if is_hashed(c.name, "local-") {
            n.local_chains += 1;
        }
        Ok(())
    }

    fn rule(&mut self, _: &crate::netlink::nft::Rule<'_>) -> Result<(), crate::netlink::NlError> {
        self.counts.rules += 1;
        Ok(())
    }

    fn set(&mut self, s: &crate::netlink::nft::Set<'_>) -> bool {
        let n = &mut self.counts;
        if s.is_map() {
            n.maps += 1;
            n.map_elements.insert(s.name.to_string(), 0);
        } else {
            n.sets += 1;
            n.set_elements.insert(s.name.to_string(), 0);
        }
        true
    }

    fn elements(&mut self, _: &str, set: &str, k: u64) {
        let n = &mut self.counts;
        if let Some(e) = n.map_elements.get_mut(set) {
            *e += k;
        } else if let Some(e) = n.set_elements.get_mut(set) {
            *e += k;
        }
    }
}

/// Both families' tables over netlink (blocking): reused at an unchanged generation.
#[allow(clippy::type_complexity)]
fn count_tables(
    host: &crate::host::Host,
    memory: &super::Memory,
    deadline: std::time::Instant,
) -> Result<Vec<(Option<NftTableCounts>, super::counted::NetlinkCount)>, super::ProbeError> {
    use crate::netlink::nft::Family;
    use crate::netlink::{nft_count, NETLINK_NETFILTER};
    super::counted::counts_now(host, &memory.nftables, &[Family::Ip, Family::Ip6], deadline, |family| {
        let plan = nft_count::Plan { family, sets: true };
        let c = nft_count::count(
            &mut || host.netlink(NETLINK_NETFILTER),
            plan,
            deadline,
            &NftTally::default,
        )?;
        Ok((c.tally.finish(), c.generation, c.attempts, c.bytes))
    })
    .map_err(|(family, e)| super::ProbeError::NfNetlink {
        what: format!("nf_tables over netlink, table {} {TABLE}", family.as_str()),
        source: e,
    })
}

// ---------------------------------------------------------------------------
// The probe.

/// One kube-proxy table, as counted.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftTable {
    /// `ipv4` or `ipv6`: the address family, as in every other metric label and key (nft
    /// names the table's family `ip` or `ip6`: [`NftTable::nft_family`]).
    pub family: String,
    /// Wall time of reading the table (the netlink count), in seconds.
    pub duration_seconds: f64,
    /// Bytes read: of the listing, or of the netlink messages.
    pub bytes: u64,
    pub counts: NftTableCounts,
    /// For a netlink count: at which generation and when it was made, and whether reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netlink: Option<super::counted::NetlinkCount>,
}

impl NftTable {
    /// nft's name of the table's family (`ip`, `ip6`), as in `nft list table ip kube-proxy`.
    pub fn nft_family(&self) -> &'static str {
        if self.family == "ipv6" {
            "ip6"
        } else {
            "ip"
        }
    }
}

/// The address family (`ipv4`, `ipv6`) of an nft family name (`ip`, `ip6`).
pub fn address_family(nft_family: &str) -> &'static str {
    if nft_family == "ip6" {
        "ipv6"
    } else {
        "ipv4"
    }
}

/// A table's `family` key as read from JSON: `ipv4`/`ipv6`, or the `ip`/`ip6` of documents
/// written before the family vocabulary was unified (docs/upgrading.md).
pub fn address_family_of_key(key: &str) -> &str {
    match key {
        "ip" => "ipv4",
        "ip6" => "ipv6",
        other => other,
    }
}

/// What `facts.nftables` holds: kube-proxy's nftables-mode tables.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NftablesFacts {
    pub tables: Vec<NftTable>,
}

/// What the probe keeps between runs (its row's `memory`): kube-proxy's table per family by
/// ruleset generation; None: no such table at that generation.
pub type Memory = super::counted::CountCache<Option<NftTableCounts>>;

const NO_TABLE: &str = "no kube-proxy nftables table (kube-proxy is not in nftables mode)";

/// Reads kube-proxy's table in each family over netlink (the node's kernel, or
/// a fixture node's recording). Both families share the deadline.
pub async fn probe(
    ctx: &super::ProbeContext,
    deadline: super::Deadline,
) -> Result<super::Probed<NftablesFacts>, super::ProbeError> {
    use super::{ProbeName, Probed};
    use crate::netlink::nft::Family;
    if !ctx.host.kernel().netlink() {
        return Ok(Probed::Absent(
            "kube-proxy's nftables tables are read over netlink on the node itself (--host-root /) only".into(),
        ));
    }
    // One trip to the blocking pool: the gate, one generation read and,
    // unless reused, the counts.
    let (host, memory, at) = (ctx.host.clone(), ctx.memory.clone(), deadline.at());
    let started = std::time::Instant::now();
    let counted = super::blocking(ProbeName::Nftables, move || {
        if super::modules::tool_would_load(&host, "nf_tables") {
            return Ok(None);
        }
        count_tables(&host, &memory, at).map(Some)
    })
    .await?;
    let Some(counted) = counted else {
        return Ok(Probed::Absent(
            "nf_tables is not loaded (nothing was asked, so nothing was loaded): no kube-proxy nftables table".into(),
        ));
    };
    let elapsed = started.elapsed().as_secs_f64();
    let mut tables = Vec::new();
    for (family, (counts, how)) in [Family::Ip, Family::Ip6].into_iter().zip(counted) {
        if let Some(counts) = counts {
            tables.push(NftTable {
                family: address_family(family.as_str()).to_string(),
                duration_seconds: if how.reused { elapsed } else { how.count_seconds },
                bytes: how.bytes,
                counts,
                netlink: Some(how),
            });
        }
    }
    if tables.is_empty() {
        return Ok(Probed::Absent(NO_TABLE.into()));
    }
    Ok(Probed::Present(NftablesFacts { tables }))
}
