//! Conntrack statistics over ctnetlink (NFNL_SUBSYS_CTNETLINK), what
//! `conntrack -S` asks: one `IPCTNL_MSG_CT_GET_STATS_CPU` message per CPU and
//! the global `IPCTNL_MSG_CT_GET_STATS` (entries, limit).
//!
//! Counters are named as in `/proc/net/stat/nf_conntrack`'s header, so both
//! sources give the same metric names: `error` is `icmp_error`,
//! `clash_resolve` is `clashres`, `chain_toolong` is `chainlength`.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{nfgen, Conn, NlError, Request, Session, NLM_F_DUMP, NLM_F_REQUEST};

/// `NFNL_SUBSYS_CTNETLINK`.
const SUBSYS: u16 = 1;
const IPCTNL_MSG_CT_GET_STATS_CPU: u16 = 4;
const IPCTNL_MSG_CT_GET_STATS: u16 = 5;
const CTA_STATS_GLOBAL_ENTRIES: u16 = 1;
const CTA_STATS_GLOBAL_MAX_ENTRIES: u16 = 2;

/// `enum ctattr_stats_cpu` → the proc file's column name. Types 1, 3, 5, 6, 7
/// are no longer sent by current kernels; older ones did.
fn stat_name(kind: u16) -> Option<&'static str> {
    Some(match kind {
        1 => "searched",
        2 => "found",
        3 => "new",
        4 => "invalid",
        5 => "ignore",
        6 => "delete",
        7 => "delete_list",
        8 => "insert",
        9 => "insert_failed",
        10 => "drop",
        11 => "early_drop",
        12 => "icmp_error",
        13 => "search_restart",
        14 => "clashres",
        15 => "chainlength",
        _ => return None,
    })
}

const fn msg_type(m: u16) -> u16 {
    (SUBSYS << 8) | m
}

/// Adds one CPU's message to `sums`; returns the CPU number (the nfgenmsg resource id).
/// Attributes of unknown types (a newer kernel's counters) are skipped.
pub fn add_cpu_stats(ty: u16, payload: &[u8], sums: &mut BTreeMap<String, u64>) -> Result<u16, NlError> {
    if ty != msg_type(IPCTNL_MSG_CT_GET_STATS_CPU) {
        return Err(NlError::Malformed(format!(
            "message type {ty:#06x} where per-CPU conntrack statistics belong"
        )));
    }
    let (_, cpu, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if let Some(name) = stat_name(a.kind) {
            let v = u64::from(a.be_u32()?);
            let slot = sums.entry(name.to_string()).or_insert(0);
            *slot = slot.saturating_add(v);
        }
    }
    Ok(cpu)
}

/// (entries, max) from the global statistics message.
pub fn decode_global(ty: u16, payload: &[u8]) -> Result<(u64, Option<u64>), NlError> {
    if ty != msg_type(IPCTNL_MSG_CT_GET_STATS) {
        return Err(NlError::Malformed(format!(
            "message type {ty:#06x} where global conntrack statistics belong"
        )));
    }
    let (_, _, attrs) = nfgen(payload)?;
    let (mut entries, mut max) = (None, None);
    for a in attrs {
        let a = a?;
        match a.kind {
            CTA_STATS_GLOBAL_ENTRIES => entries = Some(u64::from(a.be_u32()?)),
            CTA_STATS_GLOBAL_MAX_ENTRIES => max = Some(u64::from(a.be_u32()?)),
            _ => {}
        }
    }
    let entries = entries
        .ok_or_else(|| NlError::Malformed("global conntrack statistics without CTA_STATS_GLOBAL_ENTRIES".into()))?;
    Ok((entries, max))
}

/// What ctnetlink says.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Counters summed over CPUs, by the proc file's column name.
    pub sums: BTreeMap<String, u64>,
    /// CPUs that answered.
    pub cpus: usize,
    /// Entries in the table now.
    pub entries: u64,
}

/// Reads the per-CPU statistics and the entry count.
pub fn read<C: Conn>(conn: C, deadline: Instant) -> Result<Stats, NlError> {
    let mut s = Session::new(conn, deadline);
    let mut sums = BTreeMap::new();
    let mut cpus = 0;
    s.dump(
        &mut Request::new(msg_type(IPCTNL_MSG_CT_GET_STATS_CPU), NLM_F_REQUEST | NLM_F_DUMP, 0),
        |p| {
            add_cpu_stats(p.ty, p.payload, &mut sums)?;
            cpus += 1;
            Ok(())
        },
    )?;
    if cpus == 0 {
        return Err(NlError::Malformed(
            "no per-CPU conntrack statistics in the answer".into(),
        ));
    }
    let (ty, payload) = s.request(&mut Request::new(msg_type(IPCTNL_MSG_CT_GET_STATS), NLM_F_REQUEST, 0))?;
    let (entries, _) = decode_global(ty, &payload)?;
    Ok(Stats { sums, cpus, entries })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::NLM_F_MULTI;
    use super::*;

    /// One CPU's message as kernel 6.18 sends it (types 2, 4, 8..=15).
    fn cpu(n: u16, invalid: u32, drop: u32) -> Vec<u8> {
        let a: Vec<Vec<u8>> = [2u16, 4, 8, 9, 10, 11, 12, 13, 14, 15]
            .iter()
            .map(|&k| {
                be32(
                    k,
                    match k {
                        4 => invalid,
                        10 => drop,
                        _ => 1,
                    },
                )
            })
            .collect();
        nfgen_payload(0, n, &a)
    }

    #[test]
    fn sums_cpus_with_proc_names() {
        let mut sums = BTreeMap::new();
        assert_eq!(add_cpu_stats(0x0104, &cpu(0, 3, 0), &mut sums).unwrap(), 0);
        assert_eq!(add_cpu_stats(0x0104, &cpu(1, 11, 2), &mut sums).unwrap(), 1);
        assert_eq!(sums["invalid"], 14);
        assert_eq!(sums["drop"], 2);
        assert_eq!(sums["clashres"], 2);
        assert_eq!(sums["chainlength"], 2);
        assert_eq!(sums["icmp_error"], 2);
        assert_eq!(sums.len(), 10);
        // An unknown counter is skipped; a 64-bit value where 32 bits belong is an error.
        let mut p = cpu(2, 0, 0);
        p.extend_from_slice(&be32(31, 9));
        add_cpu_stats(0x0104, &p, &mut sums).unwrap();
        assert_eq!(sums.len(), 10);
        let bad = nfgen_payload(0, 0, &[attr(4, &[0; 8])]);
        assert!(add_cpu_stats(0x0104, &bad, &mut sums).is_err());
        assert!(add_cpu_stats(0x0105, &cpu(0, 0, 0), &mut sums).is_err());
    }

    #[test]
    fn reads_over_a_session() {
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let conn = Fake::new(|r| match r.ty {
            0x0104 => vec![
                Ok([
                    msg(0x0104, NLM_F_MULTI, r.seq, &cpu(0, 1, 0)),
                    msg(0x0104, NLM_F_MULTI, r.seq, &cpu(1, 2, 0)),
                ]
                .concat()),
                Ok(done(r.seq)),
            ],
            0x0105 => vec![Ok(msg(
                0x0105,
                0,
                r.seq,
                &nfgen_payload(0, 0, &[be32(1, 52), be32(2, 262_144)]),
            ))],
            _ => panic!("unexpected request"),
        });
        let s = read(conn, deadline).unwrap();
        assert_eq!((s.cpus, s.entries, s.sums["invalid"]), (2, 52, 3));
        // EPERM without CAP_NET_ADMIN.
        let e = read(Fake::new(|r| vec![Ok(error(r.seq, 1))]), deadline).unwrap_err();
        assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
    }
}
