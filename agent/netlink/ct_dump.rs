//! Conntrack entries over ctnetlink: `IPCTNL_MSG_CT_GET` with NLM_F_DUMP,
//! what `conntrack -L` sends, filtered in the kernel where it can be and
//! streamed entry by entry (one receive buffer, whatever the table size).
//!
//! Kernel-side filters (net/netfilter/nf_conntrack_netlink.c,
//! ctnetlink_alloc_filter): the nfgenmsg family (L3), `CTA_STATUS` +
//! `CTA_STATUS_MASK` (since 5.19: only entries with the DST_NAT bit), and
//! `CTA_FILTER` with `CTA_FILTER_FLAG_CTA_PROTO_NUM` and the protocol in
//! `CTA_TUPLE_ORIG` (since 5.8). A kernel that does not know an attribute
//! ignores it, so every entry is checked again here: filtering in the kernel
//! only saves work, it never decides.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use super::{attrs, nfgen, Attr, Conn, NlError, Request, Session, NLM_F_DUMP, NLM_F_REQUEST};

/// `NFNL_SUBSYS_CTNETLINK`.
const SUBSYS: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_STATUS: u16 = 3;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
const CTA_STATUS_MASK: u16 = 26;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_TUPLE_ZONE: u16 = 3;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMPV6_ID: u16 = 7;
/// IPPROTO_ICMP, IPPROTO_ICMPV6: no ports, an id the NAT core keeps unique.
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_FLAG_CTA_PROTO_NUM: u32 = 1 << 3;
const NLA_F_NESTED: u16 = 0x8000;

/// `IPS_DST_NAT`: the entry's destination was translated.
pub const IPS_DST_NAT: u32 = 1 << 5;
/// `IPS_SRC_NAT`: the entry's source was translated (MASQUERADE, SNAT).
pub const IPS_SRC_NAT: u32 = 1 << 4;

/// One entry, as far as service NAT goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtEntry {
    pub l4proto: u8,
    /// The client: the original tuple's source.
    pub orig_src: Option<IpAddr>,
    /// Where the client sent it: the original tuple's destination.
    pub orig_dst: IpAddr,
    pub orig_dport: u16,
    /// Who answers: the reply tuple's source (the endpoint after DNAT).
    pub reply_src: IpAddr,
    pub reply_sport: u16,
    /// Where the answer goes: the reply tuple's destination (after SNAT, the
    /// translated source address and port).
    pub reply_dst: IpAddr,
    pub reply_dport: u16,
    pub status: u32,
}

impl CtEntry {
    pub fn dst_nat(&self) -> bool {
        self.status & IPS_DST_NAT != 0
    }

    pub fn src_nat(&self) -> bool {
        self.status & IPS_SRC_NAT != 0
    }
}

#[derive(Default)]
struct Tuple {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: Option<u8>,
    sport: Option<u16>,
    dport: Option<u16>,
    icmp_id: Option<u16>,
    zone: Option<u16>,
}

fn ip(a: &Attr<'_>) -> Option<IpAddr> {
    match a.value.len() {
        4 => <[u8; 4]>::try_from(a.value).ok().map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        16 => <[u8; 16]>::try_from(a.value)
            .ok()
            .map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        _ => None,
    }
}

fn port(a: &Attr<'_>) -> Result<u16, NlError> {
    match a.value {
        [x, y] => Ok(u16::from_be_bytes([*x, *y])),
        v => Err(NlError::Malformed(format!("conntrack port of {} bytes", v.len()))),
    }
}

fn tuple(t: Attr<'_>) -> Result<Tuple, NlError> {
    let mut out = Tuple::default();
    for a in t.nested() {
        let a = a?;
        match a.kind {
            CTA_TUPLE_IP => {
                for i in a.nested() {
                    let i = i?;
                    match i.kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => out.src = ip(&i),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => out.dst = ip(&i),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for p in a.nested() {
                    let p = p?;
                    match p.kind {
                        CTA_PROTO_NUM => out.proto = p.value.first().copied(),
                        CTA_PROTO_SRC_PORT => out.sport = Some(port(&p)?),
                        CTA_PROTO_DST_PORT => out.dport = Some(port(&p)?),
                        CTA_PROTO_ICMP_ID | CTA_PROTO_ICMPV6_ID => out.icmp_id = Some(port(&p)?),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_ZONE => out.zone = Some(port(&a)?),
            _ => {}
        }
    }
    Ok(out)
}

/// Decodes one `IPCTNL_MSG_CT_NEW` message of a dump. `Ok(None)`: an entry
/// without ports (ICMP, GRE...) or addresses, which no service NAT makes.
pub fn decode_entry(ty: u16, payload: &[u8]) -> Result<Option<CtEntry>, NlError> {
    Ok(decode_nat_entry(ty, payload)?.filter(|n| !n.icmp).map(|n| n.entry))
}

/// An entry as the source NAT grouping reads it: [`CtEntry`] and its
/// conntrack zone; an ICMP entry too, its id standing for the ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatEntry {
    /// For ICMP (`icmp`): `orig_dport` and `reply_sport` 0, `reply_dport` the
    /// reply tuple's id (after source NAT, the translated id: the NAT core
    /// keeps it unique per translated address, as it does a port).
    pub entry: CtEntry,
    /// `CTA_ZONE` (else the reply tuple's own zone, a zone of one direction); 0: none.
    pub zone: u16,
    pub icmp: bool,
}

/// [`decode_entry`], ICMP entries and the zone included.
pub fn decode_nat_entry(ty: u16, payload: &[u8]) -> Result<Option<NatEntry>, NlError> {
    if ty != msg_type(IPCTNL_MSG_CT_NEW) {
        return Err(NlError::Malformed(format!(
            "message type {ty:#06x} where a conntrack entry belongs"
        )));
    }
    let (_, _, list) = nfgen(payload)?;
    let (mut orig, mut reply, mut status, mut zone) = (None, None, 0, None);
    for a in list {
        let a = a?;
        match a.kind {
            CTA_TUPLE_ORIG => orig = Some(tuple(a)?),
            CTA_TUPLE_REPLY => reply = Some(tuple(a)?),
            CTA_STATUS => status = a.be_u32()?,
            CTA_ZONE => zone = Some(port(&a)?),
            _ => {}
        }
    }
    let (Some(o), Some(r)) = (orig, reply) else {
        return Err(NlError::Malformed("a conntrack entry without both tuples".into()));
    };
    let zone = zone.or(r.zone).unwrap_or(0);
    let icmp = matches!(o.proto, Some(ICMP | ICMPV6));
    let ports = if icmp {
        (Some(0), Some(0), r.icmp_id)
    } else {
        (o.dport, r.sport, r.dport)
    };
    Ok(match (o.proto, o.dst, ports, r.src, r.dst) {
        (
            Some(l4proto),
            Some(orig_dst),
            (Some(orig_dport), Some(reply_sport), Some(reply_dport)),
            Some(reply_src),
            Some(reply_dst),
        ) => Some(NatEntry {
            entry: CtEntry {
                l4proto,
                orig_src: o.src,
                orig_dst,
                orig_dport,
                reply_src,
                reply_sport,
                reply_dst,
                reply_dport,
                status,
            },
            zone,
            icmp,
        }),
        _ => None,
    })
}

const fn msg_type(m: u16) -> u16 {
    (SUBSYS << 8) | m
}

fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + value.len());
    b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(value);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

/// The dump request of one L3 family (2 or 10): only entries with every bit
/// of `status` set (none: every entry), and of `l4proto` only when given.
pub fn dump_request(family: u8, l4proto: Option<u8>, status: u32) -> Request {
    dump_request_masked(family, l4proto, status, status)
}

/// The dump request of entries whose status, masked with `mask`, is `status`
/// (the kernel's `(ct->status & mask) == status`): `SRC_NAT` under the mask
/// `SRC_NAT | DST_NAT` asks for the source-NATed entries without DNAT.
pub fn dump_request_masked(family: u8, l4proto: Option<u8>, status: u32, mask: u32) -> Request {
    let mut r = Request::new(msg_type(IPCTNL_MSG_CT_GET), NLM_F_REQUEST | NLM_F_DUMP, family);
    if mask != 0 {
        r = r
            .attr(CTA_STATUS, &status.to_be_bytes())
            .attr(CTA_STATUS_MASK, &mask.to_be_bytes());
    }
    if let Some(p) = l4proto {
        let proto = nla(CTA_TUPLE_PROTO | NLA_F_NESTED, &nla(CTA_PROTO_NUM, &[p]));
        r = r.attr(CTA_TUPLE_ORIG | NLA_F_NESTED, &proto).attr(
            CTA_FILTER | NLA_F_NESTED,
            &nla(CTA_FILTER_ORIG_FLAGS, &CTA_FILTER_FLAG_CTA_PROTO_NUM.to_ne_bytes()),
        );
    }
    r
}

/// The entry of one original tuple (what `conntrack -G` sends): a GET
/// without NLM_F_DUMP, answered by that entry alone, or ENOENT (`Ok(None)`).
pub fn get<C: Conn>(
    conn: C,
    deadline: Instant,
    l4proto: u8,
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
) -> Result<Option<CtEntry>, NlError> {
    let mut s = Session::new(conn, deadline);
    match s.request(&mut get_request(l4proto, src, dst)) {
        Ok((ty, payload)) => decode_entry(ty, &payload),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The request of [`get`]; the family is the addresses'.
pub fn get_request(l4proto: u8, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Request {
    let addr = |kind_v4: u16, kind_v6: u16, a: IpAddr| match a {
        IpAddr::V4(a) => nla(kind_v4, &a.octets()),
        IpAddr::V6(a) => nla(kind_v6, &a.octets()),
    };
    let mut ip = addr(CTA_IP_V4_SRC, CTA_IP_V6_SRC, src.0);
    ip.extend(addr(CTA_IP_V4_DST, CTA_IP_V6_DST, dst.0));
    let mut proto = nla(CTA_PROTO_NUM, &[l4proto]);
    proto.extend(nla(CTA_PROTO_SRC_PORT, &src.1.to_be_bytes()));
    proto.extend(nla(CTA_PROTO_DST_PORT, &dst.1.to_be_bytes()));
    let mut tuple = nla(CTA_TUPLE_IP | NLA_F_NESTED, &ip);
    tuple.extend(nla(CTA_TUPLE_PROTO | NLA_F_NESTED, &proto));
    let family = if src.0.is_ipv6() { 10 } else { 2 };
    Request::new(msg_type(IPCTNL_MSG_CT_GET), NLM_F_REQUEST, family).attr(CTA_TUPLE_ORIG | NLA_F_NESTED, &tuple)
}

/// What one dump went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Messages the kernel sent (entries that passed its filters).
    pub messages: u64,
    pub bytes: u64,
}

/// Dumps the entries of `family` (and `l4proto`) — only those with every bit
/// of `status` set (`IPS_DST_NAT`, `IPS_SRC_NAT`; 0: all) — giving each decoded
/// entry to `each`; memory is one receive buffer. (IPVS rewrites an entry's
/// reply tuple without setting DST_NAT, so IPVS mode asks for every entry;
/// the kernel's filter is `(status & mask) == value`, no "either bit": the
/// stale check with the SNAT grouping makes two dumps, see [`dump_nat`].)
pub fn dump<C: Conn>(
    conn: C,
    deadline: Instant,
    family: u8,
    l4proto: Option<u8>,
    status: u32,
    mut each: impl FnMut(&CtEntry),
) -> Result<DumpStats, NlError> {
    dump_nat(conn, deadline, family, l4proto, (status, status), |n| {
        if !n.icmp {
            each(&n.entry)
        }
    })
}

/// [`dump`] of the entries whose status masked with `mask.1` is `mask.0`
/// (checked here again), each given with its zone, ICMP entries included.
pub fn dump_nat<C: Conn>(
    conn: C,
    deadline: Instant,
    family: u8,
    l4proto: Option<u8>,
    (status, mask): (u32, u32),
    mut each: impl FnMut(&NatEntry),
) -> Result<DumpStats, NlError> {
    let mut s = Session::new(conn, deadline);
    let mut stats = DumpStats::default();
    s.dump(&mut dump_request_masked(family, l4proto, status, mask), |p| {
        stats.messages += 1;
        if let Some(n) = decode_nat_entry(p.ty, p.payload)? {
            if n.entry.status & mask == status & mask && l4proto.is_none_or(|want| want == n.entry.l4proto) {
                each(&n);
            }
        }
        Ok(())
    })?;
    stats.bytes = s.bytes;
    Ok(stats)
}

/// The attributes of a payload after nfgenmsg, for the fuzz target.
pub fn fuzz_decode(data: &[u8]) {
    let _ = decode_entry(msg_type(IPCTNL_MSG_CT_NEW), data);
    let _ = decode_nat_entry(msg_type(IPCTNL_MSG_CT_NEW), data);
    for a in attrs(data).flatten() {
        let _ = tuple(a);
    }
}

#[cfg(test)]
mod tests {
    use super::super::nft_expr::captured::hex;
    use super::super::testing::*;
    use super::*;

    /// An entry captured from the test kernel with `tests/tools/nl_capture.py ct 2`:
    /// udp 10.244.1.2:40003 → 10.96.0.10:53, DNATed to 10.244.1.2:53 (status 0x1a8).
    pub const UDP_DNAT: &str = "020000003400018014000180080001000af40102080002000a60000a1c0002800500010011000000060002009c43000006000300003500003400028014000180080001000af40102080002000af401021c00028005000100110000000600020000350000060003009c43000008000300000001a8080008000000000008000c009f58049d08000b0000000001080007000000001b";
    /// The same flow from port 40004 that the rules did not NAT (status 0x188).
    pub const UDP_NO_NAT: &str = "020000003400018014000180080001000af40102080002000a60000a1c0002800500010011000000060002009c44000006000300003500003400028014000180080001000a60000a080002000af401021c00028005000100110000000600020000350000060003009c4400000800030000000188080008000000000008000c006e54d60a08000b0000000001080007000000001d";

    #[test]
    fn decodes_a_captured_entry() {
        let e = decode_entry(msg_type(IPCTNL_MSG_CT_NEW), &hex(UDP_DNAT))
            .unwrap()
            .unwrap();
        assert_eq!(e.l4proto, 17);
        assert_eq!((e.orig_dst, e.orig_dport), ("10.96.0.10".parse().unwrap(), 53));
        assert_eq!((e.reply_src, e.reply_sport), ("10.244.1.2".parse().unwrap(), 53));
        assert_eq!((e.reply_dst, e.reply_dport), ("10.244.1.2".parse().unwrap(), 40003));
        assert!(e.dst_nat() && !e.src_nat());
    }

    /// An ICMP echo source-NATed in zone 5: orig 10.0.0.2 → 10.0.0.9 id 100,
    /// reply 10.0.0.9 → 192.168.0.2 id 200.
    fn icmp_in_zone() -> Vec<u8> {
        let tuple = |src: [u8; 4], dst: [u8; 4], id: u16| {
            let mut ip = nla(CTA_IP_V4_SRC, &src);
            ip.extend(nla(CTA_IP_V4_DST, &dst));
            let mut proto = nla(CTA_PROTO_NUM, &[ICMP]);
            proto.extend(nla(CTA_PROTO_ICMP_ID, &id.to_be_bytes()));
            proto.extend(nla(5, &[8])); // CTA_PROTO_ICMP_TYPE
            let mut t = nla(CTA_TUPLE_IP | NLA_F_NESTED, &ip);
            t.extend(nla(CTA_TUPLE_PROTO | NLA_F_NESTED, &proto));
            t
        };
        let mut b = vec![2, 0, 0, 0];
        b.extend(nla(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple([10, 0, 0, 2], [10, 0, 0, 9], 100),
        ));
        b.extend(nla(
            CTA_TUPLE_REPLY | NLA_F_NESTED,
            &tuple([10, 0, 0, 9], [192, 168, 0, 2], 200),
        ));
        b.extend(nla(CTA_STATUS, &(IPS_SRC_NAT | 0x188).to_be_bytes()));
        b.extend(nla(CTA_ZONE, &5u16.to_be_bytes()));
        b
    }

    #[test]
    fn icmp_and_zones_for_the_snat_grouping_only() {
        let ty = msg_type(IPCTNL_MSG_CT_NEW);
        let b = icmp_in_zone();
        let n = decode_nat_entry(ty, &b).unwrap().unwrap();
        assert!(n.icmp && n.entry.src_nat());
        assert_eq!(n.zone, 5);
        assert_eq!(
            (n.entry.reply_dst, n.entry.reply_dport),
            ("192.168.0.2".parse().unwrap(), 200)
        );
        assert_eq!((n.entry.orig_dport, n.entry.reply_sport), (0, 0));
        // What service_traffic and the stale count read: no ICMP entry.
        assert_eq!(decode_entry(ty, &b).unwrap(), None);
        let udp = decode_nat_entry(ty, &hex(UDP_DNAT)).unwrap().unwrap();
        assert_eq!((udp.zone, udp.icmp), (0, false));
        for cut in 0..b.len() {
            let _ = decode_nat_entry(ty, &b[..cut]);
        }
    }

    #[test]
    fn a_masked_dump_asks_for_source_nat_without_dnat_and_rechecks_it() {
        let ty = msg_type(IPCTNL_MSG_CT_NEW);
        let (icmp, dnat) = (icmp_in_zone(), hex(UDP_DNAT));
        let conn = Fake::new(move |sent| {
            let get = |k| sent.attrs.iter().find(|(kind, _)| *kind == k).map(|(_, v)| v.clone());
            assert_eq!(sent.family, 0);
            assert_eq!(get(CTA_STATUS), Some(IPS_SRC_NAT.to_be_bytes().to_vec()));
            assert_eq!(
                get(CTA_STATUS_MASK),
                Some((IPS_SRC_NAT | IPS_DST_NAT).to_be_bytes().to_vec())
            );
            vec![Ok([
                msg(ty, super::super::NLM_F_MULTI, sent.seq, &icmp),
                // A kernel that ignored the mask: checked here again.
                msg(ty, super::super::NLM_F_MULTI, sent.seq, &dnat),
                done(sent.seq),
            ]
            .concat())]
        });
        let mut seen = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let mask = (IPS_SRC_NAT, IPS_SRC_NAT | IPS_DST_NAT);
        let st = dump_nat(conn, deadline, 0, None, mask, |n| seen.push(*n)).unwrap();
        assert_eq!(st.messages, 2);
        assert_eq!(seen.len(), 1);
        assert!(seen[0].icmp && seen[0].zone == 5);
    }

    #[test]
    fn cut_entries_never_panic() {
        let b = hex(UDP_DNAT);
        for cut in 0..b.len() {
            let _ = decode_entry(msg_type(IPCTNL_MSG_CT_NEW), &b[..cut]);
            fuzz_decode(&b[..cut]);
        }
    }

    #[test]
    fn dump_streams_and_rechecks_filters() {
        let good = hex(UDP_DNAT);
        let plain = hex(UDP_NO_NAT);
        assert!(!decode_entry(msg_type(IPCTNL_MSG_CT_NEW), &plain)
            .unwrap()
            .unwrap()
            .dst_nat());
        let ty = msg_type(IPCTNL_MSG_CT_NEW);
        for dst_nat_only in [true, false] {
            let (good, plain) = (good.clone(), plain.clone());
            let conn = Fake::new(move |sent| {
                assert_eq!(sent.family, 2);
                let masked = sent
                    .attrs
                    .iter()
                    .any(|(k, v)| *k == CTA_STATUS_MASK && v == &IPS_DST_NAT.to_be_bytes());
                assert_eq!(masked, dst_nat_only, "the kernel filters on status only when asked");
                vec![Ok([
                    msg(ty, super::super::NLM_F_MULTI, sent.seq, &good),
                    msg(ty, super::super::NLM_F_MULTI, sent.seq, &plain),
                    done(sent.seq),
                ]
                .concat())]
            });
            let mut seen = Vec::new();
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            let status = if dst_nat_only { IPS_DST_NAT } else { 0 };
            let st = dump(conn, deadline, 2, Some(17), status, |e| seen.push(*e)).unwrap();
            assert_eq!(st.messages, 2);
            // Without the filter the entry without DST_NAT is given too (IPVS mode).
            assert_eq!(seen.len(), if dst_nat_only { 1 } else { 2 });
        }
    }
}
