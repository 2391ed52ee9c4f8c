//! The source NAT rules of nat POSTROUTING over nf_tables netlink: what each
//! translates to (MASQUERADE or SNAT, the port range), whether it picks ports
//! fully at random, and its packet counter when it has one.
//!
//! Decoded (include/uapi/linux/netfilter/nf_tables.h, nf_nat.h):
//! - iptables-nft's compat `target` `MASQUERADE` / `SNAT`: rev 0 of IPv4 is
//!   `nf_nat_ipv4_multi_range_compat` (`u32 rangesize; { u32 flags; __be32
//!   min_ip, max_ip; __be16 min, max }`), IPv6 and SNAT rev 1/2 are
//!   `nf_nat_range[2]` (`u32 flags; nf_inet_addr min, max; __be16 min_proto,
//!   max_proto`), flags in host order;
//! - nft's native `masq` (`NFTA_MASQ_FLAGS`, ports from registers) and `nat`
//!   of type SNAT (`NFTA_NAT_FLAGS`, `NFTA_NAT_REG_PROTO_MIN/MAX`), the port
//!   registers loaded by `immediate`;
//! - `counter` (`NFTA_COUNTER_PACKETS`): iptables-nft gives every rule one;
//!   kube-proxy's nftables rules have none, and a rule without a counter has
//!   `packets: None` (never 0).
//!
//! Checked against `nft --debug=netlink` on the test kernel (6.18); the tests
//! decode rules captured there with tests/tools/nl_capture.py.

use std::time::Instant;

use super::nft::{self, Family, Rule};
use super::nft_uapi::*;
use super::{Conn, NlError, Session};

/// One source NAT action of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnatAction {
    /// `MASQUERADE` or `SNAT`.
    pub kind: &'static str,
    /// The `NF_NAT_RANGE_*` flags.
    pub flags: u32,
    /// The port range (`--to-ports`, `to :A-B`), when the rule gives one.
    pub ports: Option<(u16, u16)>,
    /// The rule's packet counter; None: the rule has no counter expression.
    pub packets: Option<u64>,
}

impl SnatAction {
    pub fn random_fully(&self) -> bool {
        self.flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0
    }
}

fn ne32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Flags and port range of a compat MASQUERADE/SNAT target's info.
fn target_info(family: Family, rev: u32, info: &[u8]) -> Option<(u32, Option<(u16, u16)>)> {
    let (flags, lo, hi) = if family == Family::Ip && rev == 0 {
        (ne32(info, 4)?, 16, 18)
    } else {
        (ne32(info, 0)?, 36, 38)
    };
    let ports = if flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0 {
        Some((be16(info, lo)?, be16(info, hi)?))
    } else {
        None
    };
    Some((flags, ports))
}

/// The rule's source NAT action, if it has one; the jumps and gotos it makes.
pub fn snat_action(family: Family, rule: &Rule<'_>) -> Result<(Option<SnatAction>, Vec<String>), NlError> {
    let mut jumps = Vec::new();
    let Some(list) = rule.expressions() else {
        return Ok((None, jumps));
    };
    let mut action: Option<SnatAction> = None;
    let mut packets = None;
    let mut regs: Vec<(u32, Vec<u8>)> = Vec::new();
    for expr in nft::expressions(list) {
        let (Some(name), Some(data)) = expr? else {
            continue;
        };
        // Attributes of the expression by type (all are small).
        let at = nft::ExprAttrs::of(data)?;
        let num = |k: u16| at.num(k);
        let reg = |r: Option<u32>| {
            r.and_then(|r| regs.iter().rev().find(|(n, _)| *n == r))
                .and_then(|(_, v)| be16(v, 0))
        };
        match name {
            "counter" => {
                packets = Some(
                    at.get(NFTA_COUNTER_PACKETS)
                        .map(|a| a.be_u64())
                        .transpose()?
                        .unwrap_or(0),
                )
            }
            "immediate" => {
                let Some(d) = at.get(NFTA_IMMEDIATE_DATA) else { continue };
                if let Some(chain) = nft::data_verdict_chain(d)? {
                    jumps.push(chain.to_string());
                } else if let (Some(dreg), Some(v)) = (num(NFTA_IMMEDIATE_DREG)?, nft::data_value(d)?) {
                    regs.push((dreg, v.to_vec()));
                }
            }
            "target" => {
                let Some(n) = at.get(NFTA_TARGET_NAME) else { continue };
                let kind = match n.str()? {
                    "MASQUERADE" => "MASQUERADE",
                    "SNAT" => "SNAT",
                    _ => continue,
                };
                let rev = num(NFTA_TARGET_REV)?.unwrap_or(0);
                let info = at.get(NFTA_TARGET_INFO).map(|a| a.value).unwrap_or_default();
                let (flags, ports) = target_info(family, rev, info).ok_or_else(|| {
                    NlError::Malformed(format!(
                        "nf_tables expression: a {kind} target rev {rev} of {} bytes",
                        info.len()
                    ))
                })?;
                action = Some(SnatAction {
                    kind,
                    flags,
                    ports,
                    packets: None,
                });
            }
            "masq" => {
                let flags = num(NFTA_MASQ_FLAGS)?.unwrap_or(0);
                let hi = reg(num(NFTA_MASQ_REG_PROTO_MAX)?);
                let ports = reg(num(NFTA_MASQ_REG_PROTO_MIN)?).map(|lo| (lo, hi.unwrap_or(lo)));
                action = Some(SnatAction {
                    kind: "MASQUERADE",
                    flags,
                    ports,
                    packets: None,
                });
            }
            "nat" if num(NFTA_NAT_TYPE)? == Some(NFT_NAT_SNAT) => {
                let hi = reg(num(NFTA_NAT_REG_PROTO_MAX)?);
                let ports = reg(num(NFTA_NAT_REG_PROTO_MIN)?).map(|lo| (lo, hi.unwrap_or(lo)));
                action = Some(SnatAction {
                    kind: "SNAT",
                    flags: num(NFTA_NAT_FLAGS)?.unwrap_or(0),
                    ports,
                    packets: None,
                });
            }
            _ => {}
        }
    }
    Ok((action.map(|a| SnatAction { packets, ..a }), jumps))
}

/// One source NAT rule and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRule {
    pub family: Family,
    pub table: String,
    pub chain: String,
    /// Its position in the chain, from 1 (as `iptables -L --line-numbers`).
    pub position: u32,
    pub action: SnatAction,
}

/// Chains read at most per family and table (nat POSTROUTING and what it jumps to).
pub const MAX_CHAINS: usize = 256;

/// Where the walk starts: iptables-nft's nat POSTROUTING, kube-proxy's
/// nftables base chain `nat-postrouting`.
pub const ROOTS: &[(&str, &str)] = &[("nat", "POSTROUTING"), ("kube-proxy", "nat-postrouting")];

/// The source NAT rules of nat POSTROUTING and every chain it reaches (up to
/// [`MAX_CHAINS`]), for one family, all read at one ruleset generation (else
/// [`NlError::Changed`]). A chain or table that does not exist is skipped.
/// Returns the rules and the chains left unread beyond the cap.
pub fn read<C: Conn>(conn: C, family: Family, deadline: Instant) -> Result<(Vec<FoundRule>, u64), NlError> {
    let mut s = Session::new(conn, deadline);
    let (ty, p) = s.request(&mut nft::get_gen())?;
    let gen = nft::decode_gen(ty, &p)?;
    let mut out = Vec::new();
    let mut skipped = 0u64;
    for (table, root) in ROOTS {
        let mut todo = vec![root.to_string()];
        let mut seen: Vec<String> = Vec::new();
        while let Some(chain) = todo.pop() {
            if seen.contains(&chain) {
                continue;
            }
            if seen.len() >= MAX_CHAINS {
                skipped += 1;
                continue;
            }
            seen.push(chain.clone());
            let mut position = 0;
            let mut next = Vec::new();
            let r = s.dump(&mut nft::dump_rules(family, table, &chain), |m| {
                let r = nft::decode_rule(m.ty, m.payload)?;
                if r.gen16 != gen as u16 {
                    return Err(NlError::Changed(format!(
                        "a rule of generation ..{:04x} while reading {gen}",
                        r.gen16
                    )));
                }
                position += 1;
                let (action, jumps) = snat_action(family, &r)?;
                next.extend(jumps);
                if let Some(action) = action {
                    out.push(FoundRule {
                        family,
                        table: table.to_string(),
                        chain: chain.clone(),
                        position,
                        action,
                    });
                }
                Ok(())
            });
            match r {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            next.reverse();
            todo.extend(next);
        }
    }
    let (ty, p) = s.request(&mut nft::get_gen())?;
    let end = nft::decode_gen(ty, &p)?;
    if end != gen {
        return Err(NlError::Changed(format!(
            "generation {gen} → {end} while reading nat POSTROUTING"
        )));
    }
    Ok((out, skipped))
}

#[cfg(test)]
mod tests {
    use super::super::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
    use super::super::nft_expr::captured::{hex, line};
    use super::*;

    /// Captured from the test kernel with `tests/tools/nl_capture.py rules 2 nat POSTROUTING` after
    /// `-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`,
    /// `-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE`,
    /// `-A POSTROUTING -p tcp -s 10.9.0.0/16 -j MASQUERADE --to-ports 20000-20009`,
    /// `-A POSTROUTING -p udp -s 10.8.0.0/16 -j SNAT --to-source 192.0.2.1:1000-2000 --random-fully`
    /// (iptables v1.8.9, nf_tables).
    const IPT_POST: &str = include_str!("testdata/snat_ipt_post.hex");
    /// `-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN`, `-j MARK --xor-mark 0x4000`,
    /// `-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`.
    const IPT_KPOST: &str = include_str!("testdata/snat_ipt_kpost.hex");
    /// `ip6tables-nft -t nat -A POSTROUTING -s fd00::/8 -j MASQUERADE --random-fully`.
    const IP6T_POST: &str = include_str!("testdata/snat_ip6t_post.hex");
    /// kube-proxy's nftables `masquerading` chain (`meta mark & 0x4000 == 0 return`,
    /// `meta mark set meta mark ^ 0x4000`, `masquerade fully-random`) and an added
    /// `meta l4proto tcp counter masquerade to :3000-3005`.
    const NFT_MASQ: &str = include_str!("testdata/snat_nft_masq.hex");

    fn decode(family: Family, capture: &str, n: usize) -> (Option<SnatAction>, Vec<String>) {
        let b = hex(line(capture, n));
        let r = decode_rule(msg_type(NFT_MSG_NEWRULE), &b).unwrap();
        snat_action(family, &r).unwrap()
    }

    #[test]
    fn decodes_iptables_nft_rules() {
        let (a, jumps) = decode(Family::Ip, IPT_POST, 0);
        assert_eq!((a, jumps), (None, vec!["KUBE-POSTROUTING".to_string()]));
        let a = decode(Family::Ip, IPT_POST, 1).0.unwrap();
        assert_eq!(
            (a.kind, a.ports, a.packets, a.random_fully()),
            ("MASQUERADE", None, Some(0), false)
        );
        let a = decode(Family::Ip, IPT_POST, 2).0.unwrap();
        assert_eq!((a.ports, a.random_fully()), (Some((20000, 20009)), false));
        let a = decode(Family::Ip, IPT_POST, 3).0.unwrap();
        assert_eq!((a.kind, a.ports, a.random_fully()), ("SNAT", Some((1000, 2000)), true));
        assert_eq!(decode(Family::Ip, IPT_KPOST, 0).0, None);
        assert_eq!(decode(Family::Ip, IPT_KPOST, 1).0, None);
        let a = decode(Family::Ip, IPT_KPOST, 2).0.unwrap();
        assert_eq!((a.kind, a.random_fully(), a.packets), ("MASQUERADE", true, Some(0)));
        let a = decode(Family::Ip6, IP6T_POST, 0).0.unwrap();
        assert_eq!((a.kind, a.random_fully(), a.ports), ("MASQUERADE", true, None));
    }

    #[test]
    fn decodes_native_masquerade_without_inventing_a_counter() {
        let a = decode(Family::Ip, NFT_MASQ, 2).0.unwrap();
        assert_eq!(
            (a.kind, a.random_fully(), a.ports, a.packets),
            ("MASQUERADE", true, None, None)
        );
        let a = decode(Family::Ip, NFT_MASQ, 3).0.unwrap();
        assert_eq!(
            (a.random_fully(), a.ports, a.packets),
            (false, Some((3000, 3005)), Some(0))
        );
        assert_eq!(decode(Family::Ip, NFT_MASQ, 0).0, None);
    }

    #[test]
    fn cut_rules_never_panic() {
        for capture in [IPT_POST, IPT_KPOST, IP6T_POST, NFT_MASQ] {
            for l in capture.lines() {
                let b = hex(l);
                for cut in 0..b.len() {
                    if let Ok(r) = decode_rule(msg_type(NFT_MSG_NEWRULE), &b[..cut]) {
                        let _ = snat_action(Family::Ip, &r);
                        let _ = snat_action(Family::Ip6, &r);
                    }
                }
            }
        }
    }
}
