//! Connection tracking: table size, limit, buckets and the per-CPU statistics
//! whose `drop` / `early_drop` counters are the kernel's "table full, dropping
//! packet" condition.
//!
//! `/proc/net/stat/nf_conntrack` is parsed by header name: its columns differ
//! between kernels (`searched`/`delete_list` before 5.x, `clashres`/`chainlength`
//! after). Kernels without CONFIG_NF_CONNTRACK_PROCFS lack it; then the same
//! counters are asked over ctnetlink (no fork; see crate::netlink::ctnetlink): the node's
//! kernel, or a fixture node's netlink recording.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, Probed};
use crate::host::Host;
use crate::parse::{parse_hex_u64, parse_u64, quote, ParseError};

const COUNT: &str = "/proc/sys/net/netfilter/nf_conntrack_count";
const MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
const BUCKETS: &str = "/proc/sys/net/netfilter/nf_conntrack_buckets";
pub(crate) const STAT: &str = "/proc/net/stat/nf_conntrack";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConntrackFacts {
    /// Entries in the table now (`nf_conntrack_count`).
    pub entries: u64,
    /// The table's limit (`nf_conntrack_max`); new flows are dropped beyond it.
    pub max: u64,
    /// Hash table buckets (`nf_conntrack_buckets`), when readable.
    pub buckets: Option<u64>,
    /// Per-CPU statistics summed over CPUs, by the kernel's column name
    /// (drop, early_drop, insert_failed, invalid, found, ...). Counters since boot.
    pub stats: BTreeMap<String, u64>,
    /// Where `stats` came from: `/proc/net/stat/nf_conntrack`, or `ctnetlink`; none when
    /// none could be read (nf_conntrack_netlink not loaded: nothing is asked, to load nothing; or a
    /// host root with no kernel to ask).
    pub stats_source: Option<String>,
}

impl ConntrackFacts {
    /// entries / max, or None when the limit is 0 (unlimited or unreadable).
    pub fn fill_ratio(&self) -> Option<f64> {
        (self.max > 0).then(|| self.entries as f64 / self.max as f64)
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats.get(name).copied().unwrap_or(0)
    }
}

/// Columns that are not per-CPU counters: `entries` repeats the global count on every row.
const NOT_SUMMED: &[&str] = &["entries"];

/// Sums `/proc/net/stat/nf_conntrack` over CPUs, by header name.
pub fn parse_stat(source: &str, text: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    for_each_stat(source, text, |col, n| {
        let slot = sums.entry(col.to_string()).or_insert(0);
        *slot = slot.saturating_add(n);
    })?;
    Ok(sums)
}

/// Checks `/proc/net/stat/nf_conntrack` whole and hands `take` each per-CPU value of a summed
/// column, by its header name: what [`parse_stat`] sums into a map, and what a reader that
/// wants only some counters sums without building one (`watch::conntrack_stats`).
pub fn for_each_stat(source: &str, text: &str, mut take: impl FnMut(&str, u64)) -> Result<(), ParseError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(ParseError::whole(source, "empty file, expected a header line"));
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    if columns.first() != Some(&"entries") {
        return Err(ParseError::new(
            source,
            1,
            format!("expected a header starting with `entries`, found {}", quote(header)),
        ));
    }
    if let Some(bad) = columns
        .iter()
        .find(|c| !c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    {
        return Err(ParseError::new(source, 1, format!("bad column name {}", quote(bad))));
    }
    let mut rows = 0;
    for (i, line) in lines {
        let values: Vec<&str> = line.split_whitespace().collect();
        if values.len() != columns.len() {
            return Err(ParseError::new(
                source,
                i + 1,
                format!(
                    "expected {} columns as in the header, found {}",
                    columns.len(),
                    values.len()
                ),
            ));
        }
        for (col, v) in columns.iter().zip(values) {
            let n = parse_hex_u64(source, i + 1, col, v)?;
            if !NOT_SUMMED.contains(col) {
                take(col, n);
            }
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(ParseError::whole(source, "header but no per-CPU rows (truncated?)"));
    }
    Ok(())
}

fn read_number(host: &Host, path: &str) -> Result<Option<u64>, ProbeError> {
    match host.read_optional(path)? {
        None => Ok(None),
        Some(text) => Ok(Some(parse_u64(
            &host.path(path).display().to_string(),
            1,
            "value",
            &text,
        )?)),
    }
}

/// Reads the files. When the stat file is missing the facts have no
/// `stats_source`, and the caller falls back to ctnetlink.
pub fn read_files(host: &Host) -> Result<Probed<ConntrackFacts>, ProbeError> {
    let entries = read_number(host, COUNT)?;
    let max = read_number(host, MAX)?;
    let stat_text = host.read_optional(STAT)?;
    let (entries, max) = match (entries, max) {
        (Some(e), Some(m)) => (e, m),
        (None, None) if stat_text.is_none() => {
            return Ok(Probed::Absent(
                "no nf_conntrack in this kernel (nf_conntrack_count and the stat file are absent)".into(),
            ))
        }
        _ => {
            return Err(ProbeError::Inconsistent(format!(
                "{} and {} must both exist",
                host.path(COUNT).display(),
                host.path(MAX).display()
            )))
        }
    };
    let mut facts = ConntrackFacts {
        entries,
        max,
        buckets: read_number(host, BUCKETS)?,
        ..Default::default()
    };
    if let Some(text) = stat_text {
        facts.stats = parse_stat(&host.path(STAT).display().to_string(), &text)?;
        facts.stats_source = Some(STAT.to_string());
    }
    Ok(Probed::Present(facts))
}

/// The probe: the files on the blocking pool; when the stat file is missing, ctnetlink
/// where the host has a kernel to ask (`Host::kernel()`: the node itself, or a fixture
/// node's netlink recording), within what is left of the deadline. Under a host root with
/// no kernel to ask, the statistics stay unknown.
pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<ConntrackFacts>, ProbeError> {
    let host = ctx.host.clone();
    let read = super::blocking(super::ProbeName::Conntrack, move || read_files(&host)).await?;
    let Probed::Present(mut facts) = read else {
        return Ok(read);
    };
    if facts.stats_source.is_some() || !ctx.host.kernel().netlink() {
        return Ok(Probed::Present(facts));
    }
    let (host, at) = (ctx.host.clone(), deadline.at());
    let stats = super::blocking(super::ProbeName::Conntrack, move || read_ctnetlink(&host, at)).await?;
    if let Some(stats) = stats {
        facts.stats = stats;
        facts.stats_source = Some(CTNETLINK.to_string());
    }
    Ok(Probed::Present(facts))
}

/// `stats_source` of statistics read over ctnetlink.
pub const CTNETLINK: &str = "ctnetlink";

/// The per-CPU statistics over ctnetlink; None when nf_conntrack_netlink is
/// not loaded (asking would load it).
pub(crate) fn read_ctnetlink(
    host: &Host,
    deadline: std::time::Instant,
) -> Result<Option<BTreeMap<String, u64>>, ProbeError> {
    use crate::netlink::{ctnetlink, NETLINK_NETFILTER};
    if super::modules::tool_would_load(host, "nf_conntrack_netlink") {
        return Ok(None);
    }
    let stats = host
        .netlink(NETLINK_NETFILTER)
        .and_then(|s| ctnetlink::read(s, deadline))
        .map_err(|e| ProbeError::NfNetlink {
            what: "conntrack statistics over ctnetlink".into(),
            source: e,
        })?;
    Ok(Some(stats.sums))
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! sample {
        ($p:literal) => {
            include_str!(concat!("../../tests/fixtures/samples/", $p))
        };
    }

    #[test]
    fn stat_new_header_this_kernel() {
        // Local capture in a netns after invalid loopback packets: invalid = 0xe on CPU1.
        let s = parse_stat(
            "f",
            sample!("proc-net-stat-nf_conntrack/debian12-kernel6.18-netns-loopback-invalid.txt"),
        )
        .unwrap();
        assert_eq!(s["invalid"], 14);
        assert_eq!(s["drop"], 0);
        assert!(s.contains_key("clashres") && s.contains_key("chainlength"));
        assert!(!s.contains_key("entries"), "entries is global, not a per-CPU counter");
        let idle = parse_stat(
            "f",
            sample!("proc-net-stat-nf_conntrack/debian12-kernel6.18-rootns-idle-17col-clashres-chainlength.txt"),
        )
        .unwrap();
        assert_eq!(idle.values().sum::<u64>(), 0);
        assert_eq!(idle.len(), 16);
    }

    #[test]
    fn stat_old_header() {
        // node_exporter fixture: 4 CPUs, searched/delete_list layout.
        let s = parse_stat(
            "f",
            sample!("proc-net-stat-nf_conntrack/node_exporter-17col-searched-delete_list.txt"),
        )
        .unwrap();
        assert!(s.contains_key("searched") && s.contains_key("delete_list"));
        // Hex values read by eye: invalid 3+2+1+0x2f, ignore 0x588a+0x56a4+0x58d4+0x5688.
        assert_eq!(s["invalid"], 53);
        assert_eq!(s["ignore"], 89_738);
        assert_eq!(s["search_restart"], 7);
        // netdata issue: old kernel, large non-zero values, 3 CPU rows.
        let nd = parse_stat(
            "f",
            sample!("proc-net-stat-nf_conntrack/netdata-issue161-2016-17col-searched-nonzero-partial.txt"),
        )
        .unwrap();
        assert!(nd["searched"] > 0 && nd["found"] > 0);
    }

    #[test]
    fn stat_header_only_is_truncated() {
        let err = parse_stat("f", sample!("proc-net-stat-nf_conntrack/debian11-kernel5.10-header-only-clashres-delete_list-google-nftables-issue138-partial.txt")).unwrap_err();
        assert!(err.message.contains("no per-CPU rows"), "{err}");
    }

    #[test]
    fn stat_bad_inputs_name_the_line() {
        assert!(parse_stat("f", "").unwrap_err().message.contains("empty"));
        let short = "entries drop\n00000001 00000002\n00000001\n";
        assert_eq!(parse_stat("f", short).unwrap_err().line, 3);
        let nonhex = "entries drop\n00000001 0000zz02\n";
        let e = parse_stat("f", nonhex).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("drop"), "{e}");
        assert!(parse_stat("f", "garbage here\n1 2\n").is_err());
        // An unknown but well-formed column is fine: new kernels add columns.
        let s = parse_stat("f", "entries drop future_thing\n1 2 3\n1 2 3\n").unwrap();
        assert_eq!((s["drop"], s["future_thing"]), (4, 6));
    }
}
