//! What a rule's expressions say about service traffic: the match on
//! destination address, L4 protocol and destination port, the chains it jumps
//! or goes to, the maps it looks verdicts up in, and the DNAT it performs.
//!
//! Pure: bytes in, [`RuleFacts`] out, never a panic. The register machine is
//! followed only as far as kube-proxy's rules need (include/uapi/linux/netfilter/nf_tables.h):
//!
//! - `payload` / `meta` load a field into a register, `bitwise` marks it masked
//!   (a prefix match is not an exact address), `cmp eq` compares it with a constant;
//! - `immediate` loads a constant (or is a jump/goto verdict);
//! - iptables-nft's compat `match` `udp`/`tcp` (struct xt_udp / xt_tcp, host
//!   order) give the port when iptables did not write it natively;
//! - iptables-nft's compat `target` `DNAT` (rev 0: nf_nat_ipv4_multi_range_compat,
//!   rev 1/2: nf_nat_range / nf_nat_range2 — `u32 flags; union nf_inet_addr
//!   min_addr, max_addr; __be16 min_proto, max_proto[, base_proto]`) and nft's
//!   native `nat` expression (type DNAT, address and port from registers) give
//!   the endpoint;
//! - compat `target` `REJECT` marks kube-proxy's "has no endpoints" rule.
//!
//! Checked against `nft --debug=netlink` on the test kernel; the tests decode
//! rules captured from it with tests/tools/nl_capture.py.

use std::net::IpAddr;

use super::nft::{Family, Rule};
use super::NlError;

const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_META_L4PROTO: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NF_DROP: i32 = 0;
const NFTA_FIB_F_SADDR: u32 = 1;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const RTN_LOCAL: u32 = 2;
/// xt_addrtype v1: `1 << RTN_LOCAL`, and the flag that inverts the source match.
const XT_ADDRTYPE_LOCAL: u16 = 1 << 2;
const XT_ADDRTYPE_INVERT_SOURCE: u32 = 1;

/// The source address field of the family's network header: (offset, length).
fn saddr_field(family: Family) -> (u32, u32) {
    match family {
        Family::Ip => (12, 4),
        _ => (8, 16),
    }
}
const NFT_NAT_DNAT: u32 = 1;
const NF_NAT_RANGE_MAP_IPS: u32 = 1;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;

/// What one rule matches and does, as far as service routing goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleFacts {
    /// `meta l4proto X` / `-p X` (or the IP header's protocol field).
    pub l4proto: Option<u8>,
    /// An exact destination address (`-d A/32`, `ip daddr A`).
    pub daddr: Option<IpAddr>,
    /// An exact destination port (`--dport P`, `th dport P`).
    pub dport: Option<u16>,
    /// Chains jumped or gone to (`-j CHAIN`, `jump`, `goto`).
    pub jumps: Vec<String>,
    /// Named sets/maps looked up (`vmap @name` or an anonymous `__map%d`).
    pub lookups: Vec<String>,
    /// The DNAT destination: address, and port when one is given.
    pub dnat: Option<(IpAddr, Option<u16>)>,
    /// A compat REJECT target (kube-proxy's "has no endpoints" rule).
    pub reject: bool,
    /// A drop verdict (`-j DROP`, `drop`: kube-proxy's "has no local endpoints" rule).
    pub drop: bool,
    /// What the rule requires of the packet's source, if anything (the
    /// `externalTrafficPolicy: Local` short-circuits: `ip saddr 10.0.0.0/8`,
    /// `fib saddr type local`, `-m addrtype --src-type LOCAL`).
    pub source: Option<SourceGuard>,
}

/// A rule's condition on the packet's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceGuard {
    /// The source is in this prefix (address, prefix length).
    Prefix(IpAddr, u8),
    /// The source is a local address of the node.
    Local,
    /// Any other condition on the source (negated, a set, several at once).
    Other,
}

impl RuleFacts {
    /// Adds a condition on the source: a second one makes it `Other`.
    pub fn guard(&mut self, g: SourceGuard) {
        self.source = Some(match self.source {
            None => g,
            Some(_) => SourceGuard::Other,
        });
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reg {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    /// The source address under a mask (a prefix match), with the prefix length.
    MaskedSaddr(u8),
    /// `fib saddr type`: the source address's route type.
    FibSaddrType,
    L4proto,
    Value(Vec<u8>),
    Other,
}

fn malformed(what: &str) -> NlError {
    NlError::Malformed(format!("nf_tables expression: {what}"))
}

fn be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

fn ne16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn ne32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The DNAT destination of an iptables compat `DNAT` target's info.
pub fn dnat_target_info(family: Family, rev: u32, info: &[u8]) -> Option<(IpAddr, Option<u16>)> {
    if rev == 0 {
        // nf_nat_ipv4_multi_range_compat: rangesize, then { flags, min_ip, max_ip, min, max }.
        let flags = ne32(info, 4)?;
        if flags & NF_NAT_RANGE_MAP_IPS == 0 {
            return None;
        }
        let ip = Family::Ip.addr(info.get(8..12)?)?;
        let port = (flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0)
            .then(|| be16(info.get(16..18)?))
            .flatten();
        return Some((ip, port));
    }
    let flags = ne32(info, 0)?;
    if flags & NF_NAT_RANGE_MAP_IPS == 0 {
        return None;
    }
    let ip = family.addr(info.get(4..20)?)?;
    let port = (flags & NF_NAT_RANGE_PROTO_SPECIFIED != 0)
        .then(|| be16(info.get(36..38)?))
        .flatten();
    Some((ip, port))
}

/// Decodes one rule's expressions.
pub fn rule_facts(family: Family, rule: &Rule<'_>) -> Result<RuleFacts, NlError> {
    let mut f = RuleFacts::default();
    let Some(list) = rule.expressions() else {
        return Ok(f);
    };
    let mut regs: Vec<(u32, Reg)> = Vec::new();
    let set = |regs: &mut Vec<(u32, Reg)>, r: u32, v: Reg| {
        regs.retain(|(n, _)| *n != r);
        regs.push((r, v));
    };
    for expr in super::nft::expressions(list) {
        let (Some(name), Some(data)) = expr? else {
            continue;
        };
        // Attributes of the expression by type (all are small).
        let at = super::nft::attrs_by_kind(data)?;
        let num = |k: usize| at[k].map(|a| a.be_u32()).transpose();
        match name {
            "payload" => {
                if let (Some(dreg), Some(base), Some(offset), Some(len)) = (num(1)?, num(2)?, num(3)?, num(4)?) {
                    set(&mut regs, dreg, Reg::Payload { base, offset, len });
                }
            }
            "meta" => {
                if let (Some(dreg), Some(key)) = (num(1)?, num(2)?) {
                    let v = if key == NFT_META_L4PROTO {
                        Reg::L4proto
                    } else {
                        Reg::Other
                    };
                    set(&mut regs, dreg, v);
                }
            }
            "bitwise" => {
                // A masked source address is a prefix match; anything else is no plain field.
                let (sreg, dreg) = (num(1)?, num(2)?);
                let mask = at[4].map(super::nft::data_value).transpose()?.flatten();
                let src = regs.iter().find(|(n, _)| Some(*n) == sreg).map(|(_, r)| r.clone());
                let (offset, len) = saddr_field(family);
                let v = match (src, mask) {
                    (
                        Some(Reg::Payload {
                            base: NFT_PAYLOAD_NETWORK_HEADER,
                            offset: o,
                            len: l,
                        }),
                        Some(m),
                    ) if o == offset && l <= len && m.len() == l as usize => {
                        Reg::MaskedSaddr(m.iter().map(|b| b.count_ones() as u8).sum())
                    }
                    _ => Reg::Other,
                };
                if let Some(d) = dreg {
                    set(&mut regs, d, v);
                }
            }
            "fib" => {
                // NFTA_FIB_DREG, NFTA_FIB_RESULT, NFTA_FIB_FLAGS.
                if let Some(d) = num(1)? {
                    let v = match (num(2)?, num(3)?) {
                        (Some(NFT_FIB_RESULT_ADDRTYPE), Some(flags)) if flags & NFTA_FIB_F_SADDR != 0 => {
                            Reg::FibSaddrType
                        }
                        _ => Reg::Other,
                    };
                    set(&mut regs, d, v);
                }
            }
            "ct" | "numgen" | "hash" => {
                // Whatever is in the destination register is no longer a plain field.
                if let Some(d) = num(1)? {
                    set(&mut regs, d, Reg::Other);
                }
            }
            "immediate" => {
                let Some(d) = at[2] else { continue };
                if let Some(chain) = super::nft::data_verdict_chain(d)?.map(str::to_string) {
                    f.jumps.push(chain);
                } else if super::nft::data_verdict_code(d)? == Some(NF_DROP) {
                    f.drop = true;
                } else if let (Some(dreg), Some(v)) = (num(1)?, super::nft::data_value(d)?) {
                    set(&mut regs, dreg, Reg::Value(v.to_vec()));
                }
            }
            "cmp" => {
                let (Some(sreg), Some(op), Some(d)) = (num(1)?, num(2)?, at[3]) else {
                    continue;
                };
                let Some(v) = super::nft::data_value(d)? else { continue };
                let Some((_, reg)) = regs.iter().find(|(n, _)| *n == sreg) else {
                    continue;
                };
                let (so, sl) = saddr_field(family);
                let on_source = match reg {
                    Reg::MaskedSaddr(_) | Reg::FibSaddrType => true,
                    // nft loads only the prefix's bytes of a byte-aligned prefix.
                    Reg::Payload { base, offset, len } => {
                        *base == NFT_PAYLOAD_NETWORK_HEADER && *offset == so && *len <= sl
                    }
                    _ => false,
                };
                if op != NFT_CMP_EQ {
                    if on_source {
                        f.guard(SourceGuard::Other);
                    }
                    continue;
                }
                if on_source {
                    // The compared bytes, zero-padded to a whole address.
                    let mut full = v.to_vec();
                    full.resize(sl as usize, 0);
                    let g = match (reg, family.addr(&full)) {
                        (Reg::MaskedSaddr(bits), Some(a)) => SourceGuard::Prefix(a, *bits),
                        (Reg::Payload { len, .. }, Some(a)) if v.len() == *len as usize => {
                            SourceGuard::Prefix(a, (*len * 8) as u8)
                        }
                        (Reg::FibSaddrType, _) if ne32(v, 0) == Some(RTN_LOCAL) => SourceGuard::Local,
                        _ => SourceGuard::Other,
                    };
                    f.guard(g);
                    continue;
                }
                match reg {
                    Reg::L4proto => f.l4proto = v.first().copied(),
                    Reg::Payload { base, offset, len } => match (family, *base, *offset, *len) {
                        (Family::Ip, NFT_PAYLOAD_NETWORK_HEADER, 16, 4)
                        | (Family::Ip6, NFT_PAYLOAD_NETWORK_HEADER, 24, 16) => f.daddr = family.addr(v),
                        (Family::Ip, NFT_PAYLOAD_NETWORK_HEADER, 9, 1)
                        | (Family::Ip6, NFT_PAYLOAD_NETWORK_HEADER, 6, 1) => f.l4proto = v.first().copied(),
                        (_, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2) => f.dport = be16(v),
                        _ => {}
                    },
                    _ => {}
                }
            }
            "lookup" => {
                // A set lookup on the source (`ip saddr @affinity-X`) is a condition on it.
                let (so, sl) = saddr_field(family);
                let sreg = num(2)?;
                if regs.iter().any(|(n, r)| {
                    Some(*n) == sreg
                        && matches!(r, Reg::Payload { base: NFT_PAYLOAD_NETWORK_HEADER, offset, len } if *offset == so && *len <= sl)
                }) {
                    f.guard(SourceGuard::Other);
                }
                if let Some(s) = at[1] {
                    f.lookups.push(s.str()?.to_string());
                }
            }
            "match" => {
                let (Some(n), Some(info)) = (at[1], at[3]) else {
                    continue;
                };
                let info = info.value;
                // xt_addrtype_info_v1 { u16 source, dest; u32 flags }: `--src-type`.
                if n.str()? == "addrtype" && num(2)? == Some(1) {
                    if let (Some(src), Some(flags)) = (ne16(info, 0), ne32(info, 4)) {
                        if src != 0 {
                            f.guard(if src == XT_ADDRTYPE_LOCAL && flags & XT_ADDRTYPE_INVERT_SOURCE == 0 {
                                SourceGuard::Local
                            } else {
                                SourceGuard::Other
                            });
                        }
                    }
                    continue;
                }
                // xt_udp { u16 spts[2], dpts[2]; u8 invflags } and xt_tcp
                // { u16 spts[2], dpts[2]; u8 option, flg_mask, flg_cmp, invflags }.
                if let m @ ("udp" | "tcp") = n.str()? {
                    let inv = if m == "udp" { info.get(8) } else { info.get(11) };
                    let (Some(lo), Some(hi), Some(inv)) = (ne16(info, 4), ne16(info, 6), inv) else {
                        return Err(malformed(&format!("a {m} match of {} bytes", info.len())));
                    };
                    if lo == hi && inv & 0x02 == 0 {
                        f.dport = Some(lo);
                    }
                }
            }
            "target" => {
                let Some(n) = at[1] else { continue };
                let rev = num(2)?.unwrap_or(0);
                match n.str()? {
                    "DNAT" => {
                        let info = at[3].map(|a| a.value).unwrap_or_default();
                        f.dnat =
                            Some(dnat_target_info(family, rev, info).ok_or_else(|| {
                                malformed(&format!("a DNAT target rev {rev} of {} bytes", info.len()))
                            })?);
                    }
                    "REJECT" => f.reject = true,
                    _ => {}
                }
            }
            "nat" => {
                if num(1)? != Some(NFT_NAT_DNAT) {
                    continue;
                }
                let reg_value = |r: Option<u32>| {
                    r.and_then(|r| {
                        regs.iter().find_map(|(n, v)| match v {
                            Reg::Value(b) if *n == r => Some(b.clone()),
                            _ => None,
                        })
                    })
                };
                let ip = reg_value(num(3)?).and_then(|b| family.addr(&b));
                let port = reg_value(num(5)?).and_then(|b| be16(&b));
                if let Some(ip) = ip {
                    f.dnat = Some((ip, port));
                }
            }
            _ => {}
        }
    }
    Ok(f)
}

#[cfg(test)]
pub(crate) mod captured {
    //! Rules captured from the test kernel (6.18) with
    //! `tests/tools/nl_capture.py rules 2 nat CHAIN` after iptables-nft-restore
    //! of kube-proxy-shaped rules (iptables v1.8.9): the NFT_MSG_NEWRULE payloads.

    /// The bytes of one hex line (the `n`th line of a capture: [`line`]).
    pub fn hex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    pub fn line(capture: &str, n: usize) -> &str {
        capture.lines().nth(n).unwrap_or_default()
    }

    /// `-A KUBE-SERVICES -m comment --comment "ns/dns:dns cluster IP" -m udp -p udp -d 10.96.0.10 --dport 53 -j KUBE-SVC-AAAA`
    pub const SERVICES: &str = include_str!("testdata/ipt_services.hex");

    /// `-A KUBE-SVC-AAAA -m comment ... -m statistic --mode random --probability 0.5 -j KUBE-SEP-BBBB`
    pub const SVC: &str = include_str!("testdata/ipt_svc.hex");

    /// `-A KUBE-SEP-BBBB -m comment --comment ns/dns:dns -m udp -p udp -j DNAT --to-destination 10.244.1.2:53`
    /// (the second line; the first is `-s 10.244.1.2 -j KUBE-MARK-MASQ`)
    pub const SEP: &str = include_str!("testdata/ipt_sep.hex");
}

#[cfg(test)]
mod tests {
    use super::captured::*;
    use super::*;
    use crate::netlink::nft::{decode_rule, msg_type, NFT_MSG_NEWRULE};
    use std::net::Ipv6Addr;

    fn facts(h: &str) -> RuleFacts {
        let b = hex(h);
        let r = decode_rule(msg_type(NFT_MSG_NEWRULE), &b).unwrap();
        rule_facts(Family::Ip, &r).unwrap()
    }

    #[test]
    fn service_rule_from_the_kernel() {
        let f = facts(line(SERVICES, 0));
        assert_eq!(f.l4proto, Some(17));
        assert_eq!(f.daddr, Some("10.96.0.10".parse().unwrap()));
        assert_eq!(f.dport, Some(53));
        assert_eq!(f.jumps, vec!["KUBE-SVC-AAAA".to_string()]);
        assert_eq!(f.dnat, None);
    }

    #[test]
    fn svc_and_sep_rules_from_the_kernel() {
        let f = facts(line(SVC, 0));
        assert_eq!(
            (f.daddr, f.dport, f.jumps.clone()),
            (None, None, vec!["KUBE-SEP-BBBB".to_string()])
        );
        assert_eq!(facts(line(SEP, 0)).jumps, vec!["KUBE-MARK-MASQ".to_string()]);
        let f = facts(line(SEP, 1));
        assert_eq!(f.l4proto, Some(17));
        assert_eq!(f.dnat, Some(("10.244.1.2".parse().unwrap(), Some(53))));
        assert!(f.jumps.is_empty());
        assert_eq!(f.daddr, None, "-s is the source, not the destination");
    }

    #[test]
    fn dnat_infos() {
        let mut v2 = vec![0u8; 48];
        v2[0..4].copy_from_slice(&3u32.to_ne_bytes());
        v2[4..20].copy_from_slice(&"fd00::5".parse::<Ipv6Addr>().unwrap().octets());
        v2[36..38].copy_from_slice(&8080u16.to_be_bytes());
        assert_eq!(
            dnat_target_info(Family::Ip6, 2, &v2),
            Some(("fd00::5".parse().unwrap(), Some(8080)))
        );
        v2[0..4].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(
            dnat_target_info(Family::Ip6, 2, &v2),
            Some(("fd00::5".parse().unwrap(), None))
        );
        assert_eq!(dnat_target_info(Family::Ip6, 2, &v2[..10]), None);
        let mut v0 = vec![0u8; 24];
        v0[0..4].copy_from_slice(&1u32.to_ne_bytes());
        v0[4..8].copy_from_slice(&3u32.to_ne_bytes());
        v0[8..12].copy_from_slice(&[10, 0, 0, 7]);
        v0[16..18].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(
            dnat_target_info(Family::Ip, 0, &v0),
            Some(("10.0.0.7".parse().unwrap(), Some(53)))
        );
    }

    #[test]
    fn truncations_never_panic() {
        for h in [SERVICES, SVC, SEP].iter().flat_map(|c| c.lines()) {
            let b = hex(h);
            for cut in 0..b.len() {
                if let Ok(r) = decode_rule(msg_type(NFT_MSG_NEWRULE), &b[..cut]) {
                    let _ = rule_facts(Family::Ip, &r);
                    let _ = rule_facts(Family::Ip6, &r);
                }
            }
        }
    }
}
