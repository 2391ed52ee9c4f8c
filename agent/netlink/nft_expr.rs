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

use super::nft::{ExprAttrs, Family, Rule};
use super::nft_uapi::*;
use super::NlError;

const NF_DROP: i32 = 0;
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
    let mut m = Machine::new(family);
    let Some(list) = rule.expressions() else {
        return Ok(m.facts);
    };
    for expr in super::nft::expressions(list) {
        let (Some(name), Some(data)) = expr? else {
            continue;
        };
        // Attributes of the expression by type (all are small).
        let at = ExprAttrs::of(data)?;
        m.step(name, &at)?;
    }
    Ok(m.facts)
}

/// The register machine as far as [`rule_facts`] follows it: what each register
/// holds, and what the rule's expressions have said so far.
struct Machine {
    family: Family,
    regs: Vec<(u32, Reg)>,
    facts: RuleFacts,
}

impl Machine {
    fn new(family: Family) -> Self {
        Machine {
            family,
            regs: Vec::new(),
            facts: RuleFacts::default(),
        }
    }

    /// Loads `v` into register `r`, replacing what it held.
    fn set(&mut self, r: u32, v: Reg) {
        self.regs.retain(|(n, _)| *n != r);
        self.regs.push((r, v));
    }

    /// Follows one expression.
    fn step(&mut self, name: &str, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        match name {
            "payload" => self.payload(at),
            "meta" => self.meta(at),
            "bitwise" => self.bitwise(at),
            "fib" => self.fib(at),
            "ct" => self.clobber(at, NFTA_CT_DREG),
            "numgen" => self.clobber(at, NFTA_NG_DREG),
            // Its first attribute is its source register; its destination is the second.
            "hash" => self.clobber(at, NFTA_HASH_DREG),
            "immediate" => self.immediate(at),
            "cmp" => self.cmp(at),
            "lookup" => self.lookup(at),
            "match" => self.xt_match(at),
            "target" => self.xt_target(at),
            "nat" => self.nat(at),
            _ => Ok(()),
        }
    }

    /// `ct`, `numgen`, `hash`: whatever is in the destination register (attribute `dreg`) is
    /// no longer a plain field.
    fn clobber(&mut self, at: &ExprAttrs<'_>, dreg: u16) -> Result<(), NlError> {
        if let Some(d) = at.num(dreg)? {
            self.set(d, Reg::Other);
        }
        Ok(())
    }

    /// `payload`: a header field loaded into a register.
    fn payload(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        if let (Some(dreg), Some(base), Some(offset), Some(len)) = (
            at.num(NFTA_PAYLOAD_DREG)?,
            at.num(NFTA_PAYLOAD_BASE)?,
            at.num(NFTA_PAYLOAD_OFFSET)?,
            at.num(NFTA_PAYLOAD_LEN)?,
        ) {
            self.set(dreg, Reg::Payload { base, offset, len });
        }
        Ok(())
    }

    /// `meta`: the L4 protocol (or another packet attribute) loaded into a register.
    fn meta(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        if let (Some(dreg), Some(key)) = (at.num(NFTA_META_DREG)?, at.num(NFTA_META_KEY)?) {
            let v = if key == NFT_META_L4PROTO {
                Reg::L4proto
            } else {
                Reg::Other
            };
            self.set(dreg, v);
        }
        Ok(())
    }

    /// `bitwise`: a register masked.
    fn bitwise(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        // A masked source address is a prefix match; anything else is no plain field.
        let (sreg, dreg) = (at.num(NFTA_BITWISE_SREG)?, at.num(NFTA_BITWISE_DREG)?);
        let mask = at
            .get(NFTA_BITWISE_MASK)
            .map(super::nft::data_value)
            .transpose()?
            .flatten();
        let src = self.regs.iter().find(|(n, _)| Some(*n) == sreg).map(|(_, r)| r.clone());
        let (offset, len) = saddr_field(self.family);
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
            self.set(d, v);
        }
        Ok(())
    }

    /// `fib`: the result of a route lookup loaded into a register.
    fn fib(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        if let Some(d) = at.num(NFTA_FIB_DREG)? {
            let v = match (at.num(NFTA_FIB_RESULT)?, at.num(NFTA_FIB_FLAGS)?) {
                (Some(NFT_FIB_RESULT_ADDRTYPE), Some(flags)) if flags & NFTA_FIB_F_SADDR != 0 => Reg::FibSaddrType,
                _ => Reg::Other,
            };
            self.set(d, v);
        }
        Ok(())
    }

    /// `immediate`: a jump or goto, a drop, or a constant loaded into a register.
    fn immediate(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        let Some(d) = at.get(NFTA_IMMEDIATE_DATA) else {
            return Ok(());
        };
        if let Some(chain) = super::nft::data_verdict_chain(d)?.map(str::to_string) {
            self.facts.jumps.push(chain);
        } else if super::nft::data_verdict_code(d)? == Some(NF_DROP) {
            self.facts.drop = true;
        } else if let (Some(dreg), Some(v)) = (at.num(NFTA_IMMEDIATE_DREG)?, super::nft::data_value(d)?) {
            self.set(dreg, Reg::Value(v.to_vec()));
        }
        Ok(())
    }

    /// `cmp`: a register compared with a constant; on the source, a condition on it,
    /// else (`eq`) the protocol, destination address or port matched.
    fn cmp(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        let (Some(sreg), Some(op), Some(d)) = (at.num(NFTA_CMP_SREG)?, at.num(NFTA_CMP_OP)?, at.get(NFTA_CMP_DATA))
        else {
            return Ok(());
        };
        let Some(v) = super::nft::data_value(d)? else {
            return Ok(());
        };
        let Some((_, reg)) = self.regs.iter().find(|(n, _)| *n == sreg) else {
            return Ok(());
        };
        let on_source = matches!(reg, Reg::MaskedSaddr(_) | Reg::FibSaddrType) || is_saddr_payload(self.family, reg);
        if on_source {
            self.facts.guard(if op == NFT_CMP_EQ {
                source_guard(self.family, reg, v)
            } else {
                SourceGuard::Other
            });
        } else if op == NFT_CMP_EQ {
            self.facts.matched(self.family, reg, v);
        }
        Ok(())
    }

    /// `lookup`: a set or map looked up.
    fn lookup(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        // A set lookup on the source (`ip saddr @affinity-X`) is a condition on it.
        let sreg = at.num(NFTA_LOOKUP_SREG)?;
        if self
            .regs
            .iter()
            .any(|(n, r)| Some(*n) == sreg && is_saddr_payload(self.family, r))
        {
            self.facts.guard(SourceGuard::Other);
        }
        if let Some(s) = at.get(NFTA_LOOKUP_SET) {
            self.facts.lookups.push(s.str()?.to_string());
        }
        Ok(())
    }

    /// An iptables compat `match`: `addrtype --src-type`, or the port of `udp`/`tcp`.
    fn xt_match(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        let (Some(n), Some(info)) = (at.get(NFTA_MATCH_NAME), at.get(NFTA_MATCH_INFO)) else {
            return Ok(());
        };
        let info = info.value;
        if n.str()? == "addrtype" && at.num(NFTA_MATCH_REV)? == Some(1) {
            if let Some(g) = addrtype_source_guard(info) {
                self.facts.guard(g);
            }
            return Ok(());
        }
        // xt_udp { u16 spts[2], dpts[2]; u8 invflags } and xt_tcp
        // { u16 spts[2], dpts[2]; u8 option, flg_mask, flg_cmp, invflags }.
        if let m @ ("udp" | "tcp") = n.str()? {
            let inv = if m == "udp" { info.get(8) } else { info.get(11) };
            let (Some(lo), Some(hi), Some(inv)) = (ne16(info, 4), ne16(info, 6), inv) else {
                return Err(malformed(&format!("a {m} match of {} bytes", info.len())));
            };
            if lo == hi && inv & 0x02 == 0 {
                self.facts.dport = Some(lo);
            }
        }
        Ok(())
    }

    /// An iptables compat `target`: `DNAT` or `REJECT`.
    fn xt_target(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        let Some(n) = at.get(NFTA_TARGET_NAME) else {
            return Ok(());
        };
        let rev = at.num(NFTA_TARGET_REV)?.unwrap_or(0);
        match n.str()? {
            "DNAT" => {
                let info = at.get(NFTA_TARGET_INFO).map(|a| a.value).unwrap_or_default();
                self.facts.dnat = Some(
                    dnat_target_info(self.family, rev, info)
                        .ok_or_else(|| malformed(&format!("a DNAT target rev {rev} of {} bytes", info.len())))?,
                );
            }
            "REJECT" => self.facts.reject = true,
            _ => {}
        }
        Ok(())
    }

    /// nft's native `nat` expression: a DNAT's address and port from registers.
    fn nat(&mut self, at: &ExprAttrs<'_>) -> Result<(), NlError> {
        if at.num(NFTA_NAT_TYPE)? != Some(NFT_NAT_DNAT) {
            return Ok(());
        }
        let ip = self
            .value(at.num(NFTA_NAT_REG_ADDR_MIN)?)
            .and_then(|b| self.family.addr(b));
        let port = self.value(at.num(NFTA_NAT_REG_PROTO_MIN)?).and_then(be16);
        if let Some(ip) = ip {
            self.facts.dnat = Some((ip, port));
        }
        Ok(())
    }

    /// The constant a register holds, if it holds one.
    fn value(&self, r: Option<u32>) -> Option<&[u8]> {
        r.and_then(|r| {
            self.regs.iter().find_map(|(n, v)| match v {
                Reg::Value(b) if *n == r => Some(b.as_slice()),
                _ => None,
            })
        })
    }
}

/// Whether the register holds the family's source address, or a leading part
/// of it: nft loads only the prefix's bytes of a byte-aligned prefix.
fn is_saddr_payload(family: Family, reg: &Reg) -> bool {
    let (so, sl) = saddr_field(family);
    matches!(reg, Reg::Payload { base: NFT_PAYLOAD_NETWORK_HEADER, offset, len } if *offset == so && *len <= sl)
}

/// The condition a `cmp eq` of `v` with a register on the source puts on the source.
fn source_guard(family: Family, reg: &Reg, v: &[u8]) -> SourceGuard {
    let (_, sl) = saddr_field(family);
    // The compared bytes, zero-padded to a whole address.
    let mut full = v.to_vec();
    full.resize(sl as usize, 0);
    match (reg, family.addr(&full)) {
        (Reg::MaskedSaddr(bits), Some(a)) => SourceGuard::Prefix(a, *bits),
        (Reg::Payload { len, .. }, Some(a)) if v.len() == *len as usize => SourceGuard::Prefix(a, (*len * 8) as u8),
        (Reg::FibSaddrType, _) if ne32(v, 0) == Some(RTN_LOCAL) => SourceGuard::Local,
        _ => SourceGuard::Other,
    }
}

/// The source condition of an xt_addrtype_info_v1 { u16 source, dest; u32 flags }
/// (`--src-type`), or none when it has no source type.
fn addrtype_source_guard(info: &[u8]) -> Option<SourceGuard> {
    let (src, flags) = (ne16(info, 0)?, ne32(info, 4)?);
    if src == 0 {
        return None;
    }
    Some(if src == XT_ADDRTYPE_LOCAL && flags & XT_ADDRTYPE_INVERT_SOURCE == 0 {
        SourceGuard::Local
    } else {
        SourceGuard::Other
    })
}

impl RuleFacts {
    /// Records a `cmp eq` of `v` with a register that is not on the source: the
    /// L4 protocol, the destination address or the destination port.
    fn matched(&mut self, family: Family, reg: &Reg, v: &[u8]) {
        match reg {
            Reg::L4proto => self.l4proto = v.first().copied(),
            Reg::Payload { base, offset, len } => {
                match (family, *base, *offset, *len) {
                    (Family::Ip, NFT_PAYLOAD_NETWORK_HEADER, 16, 4)
                    | (Family::Ip6, NFT_PAYLOAD_NETWORK_HEADER, 24, 16) => self.daddr = family.addr(v),
                    (Family::Ip, NFT_PAYLOAD_NETWORK_HEADER, 9, 1)
                    | (Family::Ip6, NFT_PAYLOAD_NETWORK_HEADER, 6, 1) => self.l4proto = v.first().copied(),
                    (_, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2) => self.dport = be16(v),
                    _ => {}
                }
            }
            _ => {}
        }
    }
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
    use crate::netlink::Attr;
    use std::net::Ipv6Addr;

    fn facts(h: &str) -> RuleFacts {
        let b = hex(h);
        let r = decode_rule(msg_type(NFT_MSG_NEWRULE), &b).unwrap();
        rule_facts(Family::Ip, &r).unwrap()
    }

    /// An expression's attributes as the kernel would nest them, from (type, be32) pairs.
    fn attrs(values: &[(u16, [u8; 4])]) -> ExprAttrs<'_> {
        ExprAttrs::from_attrs(values.iter().map(|(kind, v)| Attr { kind: *kind, value: v }))
    }

    #[test]
    fn hash_writes_its_second_register_not_its_source() {
        // payload ip daddr into reg 1, then jhash reg 1 into reg 2: reg 1 still holds the
        // address (NFTA_HASH_SREG is 1, NFTA_HASH_DREG 2).
        let mut m = Machine::new(Family::Ip);
        let be = |v: u32| v.to_be_bytes();
        let payload = [
            (NFTA_PAYLOAD_DREG, be(1)),
            (NFTA_PAYLOAD_BASE, be(NFT_PAYLOAD_NETWORK_HEADER)),
            (NFTA_PAYLOAD_OFFSET, be(16)),
            (NFTA_PAYLOAD_LEN, be(4)),
        ];
        m.step("payload", &attrs(&payload)).unwrap();
        m.step("hash", &attrs(&[(1, be(1)), (2, be(2))])).unwrap();
        let held = |m: &Machine, r: u32| m.regs.iter().find(|(n, _)| *n == r).map(|(_, v)| v.clone());
        assert!(
            matches!(held(&m, 1), Some(Reg::Payload { offset: 16, .. })),
            "{:?}",
            held(&m, 1)
        );
        assert_eq!(held(&m, 2), Some(Reg::Other));
        // ct and numgen write their first.
        m.step("numgen", &attrs(&[(1, be(1))])).unwrap();
        assert_eq!(held(&m, 1), Some(Reg::Other));
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
