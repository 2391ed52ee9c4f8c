//! nf_tables messages: the requests the reader sends and pure decoders of the
//! answers (include/uapi/linux/netfilter/nf_tables.h). Only what counting
//! needs is decoded; an attribute of a type not listed here is skipped, so a
//! newer kernel's additions are harmless.

use std::net::IpAddr;

use super::{nfgen, Attr, Attrs, NlError, Request, NLM_F_DUMP, NLM_F_REQUEST};

// The kernel's numbers, named where every nf_tables reader finds them.
pub use super::nft_uapi::*;

/// The netlink message type of an nf_tables message.
pub const fn msg_type(m: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | m
}

/// `AF_INET` and `AF_INET6`: the nf_tables families `ip` and `ip6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Ip,
    Ip6,
}

impl Family {
    pub fn code(self) -> u8 {
        match self {
            Family::Ip => 2,
            Family::Ip6 => 10,
        }
    }

    /// nft's name of the family (`ip`, `ip6`).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }

    /// Bytes of one of its addresses: 4 or 16.
    pub fn addr_len(self) -> usize {
        match self {
            Family::Ip => 4,
            Family::Ip6 => 16,
        }
    }

    /// The address in the first [`Family::addr_len`] bytes of `b` (None when shorter).
    pub fn addr(self, b: &[u8]) -> Option<IpAddr> {
        match self {
            Family::Ip => <[u8; 4]>::try_from(b.get(..4)?).ok().map(IpAddr::from),
            Family::Ip6 => <[u8; 16]>::try_from(b.get(..16)?).ok().map(IpAddr::from),
        }
    }
}

// ---------------------------------------------------------------------------
// Requests.

pub fn get_gen() -> Request {
    Request::new(msg_type(NFT_MSG_GETGEN), NLM_F_REQUEST, 0)
}

pub fn dump_tables(family: Family) -> Request {
    Request::new(msg_type(NFT_MSG_GETTABLE), NLM_F_REQUEST | NLM_F_DUMP, family.code())
}

/// Every chain of the family (the kernel does not filter chain dumps by table).
pub fn dump_chains(family: Family) -> Request {
    Request::new(msg_type(NFT_MSG_GETCHAIN), NLM_F_REQUEST | NLM_F_DUMP, family.code())
}

/// The rules of one chain: the kernel looks the chain up by name, so the cost
/// is that chain's rules, not the table's.
pub fn dump_rules(family: Family, table: &str, chain: &str) -> Request {
    Request::new(msg_type(NFT_MSG_GETRULE), NLM_F_REQUEST | NLM_F_DUMP, family.code())
        .string(NFTA_RULE_TABLE, table)
        .string(NFTA_RULE_CHAIN, chain)
}

/// One chain by table and name (no dump): the chain, or ENOENT.
pub fn get_chain(family: Family, table: &str, chain: &str) -> Request {
    Request::new(msg_type(NFT_MSG_GETCHAIN), NLM_F_REQUEST, family.code())
        .string(NFTA_CHAIN_TABLE, table)
        .string(NFTA_CHAIN_NAME, chain)
}

pub fn dump_sets(family: Family, table: &str) -> Request {
    Request::new(msg_type(NFT_MSG_GETSET), NLM_F_REQUEST | NLM_F_DUMP, family.code()).string(NFTA_SET_TABLE, table)
}

pub fn dump_elements(family: Family, table: &str, set: &str) -> Request {
    Request::new(msg_type(NFT_MSG_GETSETELEM), NLM_F_REQUEST | NLM_F_DUMP, family.code())
        .string(NFTA_SET_ELEM_LIST_TABLE, table)
        .string(NFTA_SET_ELEM_LIST_SET, set)
}

// ---------------------------------------------------------------------------
// Decoders. Each takes a message's type and payload (after the netlink header).

fn expect(ty: u16, want: u16, what: &str) -> Result<(), NlError> {
    if ty == msg_type(want) {
        Ok(())
    } else {
        Err(NlError::Malformed(format!(
            "message type {ty:#06x} where a {what} belongs"
        )))
    }
}

fn missing(what: &str, attr: &str) -> NlError {
    NlError::Malformed(format!("a {what} message without its {attr}"))
}

/// The ruleset generation (`NFT_MSG_NEWGEN`'s NFTA_GEN_ID).
pub fn decode_gen(ty: u16, payload: &[u8]) -> Result<u32, NlError> {
    expect(ty, NFT_MSG_NEWGEN, "generation")?;
    let (_, _, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if a.kind == NFTA_GEN_ID {
            return a.be_u32();
        }
    }
    Err(missing("generation", "NFTA_GEN_ID"))
}

/// A table's name, and the low 16 bits of the generation the dump was made at.
pub fn decode_table(ty: u16, payload: &[u8]) -> Result<(&str, u16), NlError> {
    expect(ty, NFT_MSG_NEWTABLE, "table")?;
    let (_, res_id, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if a.kind == NFTA_TABLE_NAME {
            return Ok((a.str()?, res_id));
        }
    }
    Err(missing("table", "NFTA_TABLE_NAME"))
}

/// One chain of a chain dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain<'a> {
    pub table: &'a str,
    pub name: &'a str,
    /// A base chain (attached to a hook): `type ... hook ...` in nft's listing.
    pub base: bool,
    /// The low 16 bits of the generation of the dump.
    pub gen16: u16,
}

pub fn decode_chain(ty: u16, payload: &[u8]) -> Result<Chain<'_>, NlError> {
    expect(ty, NFT_MSG_NEWCHAIN, "chain")?;
    let (_, gen16, attrs) = nfgen(payload)?;
    let (mut table, mut name, mut base) = (None, None, false);
    for a in attrs {
        let a = a?;
        match a.kind {
            NFTA_CHAIN_TABLE => table = Some(a.str()?),
            NFTA_CHAIN_NAME => name = Some(a.str()?),
            NFTA_CHAIN_HOOK => base = true,
            _ => {}
        }
    }
    Ok(Chain {
        table: table.ok_or_else(|| missing("chain", "NFTA_CHAIN_TABLE"))?,
        name: name.ok_or_else(|| missing("chain", "NFTA_CHAIN_NAME"))?,
        base,
        gen16,
    })
}

/// One rule of a rule dump: where it is, and its expressions still encoded.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    pub table: &'a str,
    pub chain: &'a str,
    pub gen16: u16,
    /// The rule's handle (unique in its table while the rule lives).
    pub handle: Option<u64>,
    /// NFTA_RULE_USERDATA: libnftnl's TLVs (the rule's comment, type 0).
    pub userdata: Option<&'a [u8]>,
    expressions: Option<Attr<'a>>,
}

pub fn decode_rule(ty: u16, payload: &[u8]) -> Result<Rule<'_>, NlError> {
    expect(ty, NFT_MSG_NEWRULE, "rule")?;
    let (_, gen16, attrs) = nfgen(payload)?;
    let (mut table, mut chain, mut expressions) = (None, None, None);
    let (mut handle, mut userdata) = (None, None);
    for a in attrs {
        let a = a?;
        match a.kind {
            NFTA_RULE_TABLE => table = Some(a.str()?),
            NFTA_RULE_CHAIN => chain = Some(a.str()?),
            NFTA_RULE_HANDLE => handle = a.be_u64().ok(),
            NFTA_RULE_USERDATA => userdata = Some(a.value),
            NFTA_RULE_EXPRESSIONS => expressions = Some(a),
            _ => {}
        }
    }
    Ok(Rule {
        table: table.ok_or_else(|| missing("rule", "NFTA_RULE_TABLE"))?,
        chain: chain.ok_or_else(|| missing("rule", "NFTA_RULE_CHAIN"))?,
        gen16,
        handle,
        userdata,
        expressions,
    })
}

impl<'a> Rule<'a> {
    /// The rule's NFTA_RULE_EXPRESSIONS list, still encoded (decoded by [`super::nft_expr`]).
    pub fn expressions(&self) -> Option<Attr<'a>> {
        self.expressions
    }

    /// Whether the rule jumps or goes to a chain whose name starts with
    /// `prefix`: an `immediate` expression whose data is a verdict, code
    /// NFT_JUMP or NFT_GOTO, with the chain's name. That is what iptables-nft
    /// writes for `-j CHAIN` / `-g CHAIN` (and nft for `jump` / `goto`).
    pub fn jumps_to(&self, prefix: &str) -> Result<bool, NlError> {
        let Some(list) = self.expressions else {
            return Ok(false);
        };
        for expr in expressions(list) {
            let (name, data) = expr?;
            if name != Some("immediate") {
                continue;
            }
            if let Some(target) = data.map(|d| verdict_chain(d.nested())).transpose()?.flatten() {
                if target.starts_with(prefix) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

/// One expression's data attributes, looked up by their type (`NFTA_<EXPR>_*` of
/// [`super::nft_uapi`]); types of 10 and above (no expression the agent decodes has them) are
/// left out.
pub struct ExprAttrs<'a>([Option<Attr<'a>>; 10]);

impl<'a> ExprAttrs<'a> {
    pub fn of(data: Attr<'a>) -> Result<Self, NlError> {
        Self::collect(data.nested())
    }

    /// Attributes already split out, as a test builds them.
    #[cfg(test)]
    pub fn from_attrs(attrs: impl IntoIterator<Item = Attr<'a>>) -> Self {
        Self::collect(attrs.into_iter().map(Ok)).expect("no error to meet")
    }

    fn collect(attrs: impl Iterator<Item = Result<Attr<'a>, NlError>>) -> Result<Self, NlError> {
        let mut at: [Option<Attr<'a>>; 10] = [None; 10];
        for a in attrs {
            let a = a?;
            if let Some(slot) = at.get_mut(a.kind as usize) {
                *slot = Some(a);
            }
        }
        Ok(ExprAttrs(at))
    }

    /// The attribute of that type, when it is there.
    pub fn get(&self, kind: u16) -> Option<Attr<'a>> {
        self.0.get(kind as usize).copied().flatten()
    }

    /// The attribute as a 32-bit number, when it is there.
    pub fn num(&self, kind: u16) -> Result<Option<u32>, NlError> {
        self.get(kind).map(|a| a.be_u32()).transpose()
    }
}

/// The expressions of a rule's NFTA_RULE_EXPRESSIONS list, in order: each
/// one's name and its data attribute (either may be missing in a malformed rule).
pub fn expressions<'a>(
    list: Attr<'a>,
) -> impl Iterator<Item = Result<(Option<&'a str>, Option<Attr<'a>>), NlError>> + 'a {
    list.nested().filter_map(|elem| {
        let elem = match elem {
            Ok(e) if e.kind != NFTA_LIST_ELEM => return None,
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        let (mut name, mut data) = (None, None);
        for a in elem.nested() {
            let a = match a {
                Ok(a) => a,
                Err(e) => return Some(Err(e)),
            };
            match a.kind {
                NFTA_EXPR_NAME => match a.str() {
                    Ok(s) => name = Some(s),
                    Err(e) => return Some(Err(e)),
                },
                NFTA_EXPR_DATA => data = Some(a),
                _ => {}
            }
        }
        Some(Ok((name, data)))
    })
}

/// The chain of an immediate's jump or goto verdict, if that is what it holds.
fn verdict_chain(immediate: Attrs<'_>) -> Result<Option<&str>, NlError> {
    for a in immediate {
        let a = a?;
        if a.kind == NFTA_IMMEDIATE_DATA {
            if let Some(chain) = data_verdict_chain(a)? {
                return Ok(Some(chain));
            }
        }
    }
    Ok(None)
}

/// The bytes of the value an NFTA_DATA_* attribute holds, if it holds one.
pub fn data_value<'a>(data: Attr<'a>) -> Result<Option<&'a [u8]>, NlError> {
    for a in data.nested() {
        let a = a?;
        if a.kind == NFTA_DATA_VALUE {
            return Ok(Some(a.value));
        }
    }
    Ok(None)
}

/// The chain of the jump or goto verdict an NFTA_DATA_* attribute holds, if it holds one.
pub fn data_verdict_chain<'a>(data: Attr<'a>) -> Result<Option<&'a str>, NlError> {
    for d in data.nested() {
        let d = d?;
        if d.kind != NFTA_DATA_VERDICT {
            continue;
        }
        let (mut code, mut chain) = (None, None);
        for v in d.nested() {
            let v = v?;
            match v.kind {
                NFTA_VERDICT_CODE => code = Some(v.be_u32()? as i32),
                NFTA_VERDICT_CHAIN => chain = Some(v.str()?),
                _ => {}
            }
        }
        if matches!(code, Some(NFT_JUMP | NFT_GOTO)) {
            return Ok(chain);
        }
    }
    Ok(None)
}

/// The verdict code an NFTA_DATA_* attribute holds (`NF_DROP` 0, `NF_ACCEPT`
/// 1, `NFT_JUMP` -3, ...), if it holds a verdict.
pub fn data_verdict_code(data: Attr<'_>) -> Result<Option<i32>, NlError> {
    for d in data.nested() {
        let d = d?;
        if d.kind != NFTA_DATA_VERDICT {
            continue;
        }
        for v in d.nested() {
            let v = v?;
            if v.kind == NFTA_VERDICT_CODE {
                return Ok(Some(v.be_u32()? as i32));
            }
        }
    }
    Ok(None)
}

/// One set or map of a set dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set<'a> {
    pub table: &'a str,
    pub name: &'a str,
    pub flags: u32,
    pub gen16: u16,
}

impl Set<'_> {
    /// An anonymous set (`{ ... }` inside a rule; nft lists no `set` block for it).
    pub fn anonymous(&self) -> bool {
        self.flags & NFT_SET_ANONYMOUS != 0
    }

    /// nft lists it as `map` (data or object map), not `set`.
    pub fn is_map(&self) -> bool {
        self.flags & (NFT_SET_MAP | NFT_SET_OBJECT) != 0
    }
}

pub fn decode_set(ty: u16, payload: &[u8]) -> Result<Set<'_>, NlError> {
    expect(ty, NFT_MSG_NEWSET, "set")?;
    let (_, gen16, attrs) = nfgen(payload)?;
    let (mut table, mut name, mut flags) = (None, None, 0);
    for a in attrs {
        let a = a?;
        match a.kind {
            NFTA_SET_TABLE => table = Some(a.str()?),
            NFTA_SET_NAME => name = Some(a.str()?),
            NFTA_SET_FLAGS => flags = a.be_u32()?,
            _ => {}
        }
    }
    Ok(Set {
        table: table.ok_or_else(|| missing("set", "NFTA_SET_TABLE"))?,
        name: name.ok_or_else(|| missing("set", "NFTA_SET_NAME"))?,
        flags,
        gen16,
    })
}

/// One element of a set or map, as far as a verdict map goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element<'a> {
    /// The key's bytes (a concatenation pads each field to 4 bytes).
    pub key: &'a [u8],
    /// The chain a verdict map's element jumps or goes to.
    pub chain: Option<&'a str>,
}

/// The elements of one message of an element dump, in order, given to `each`,
/// as nft lists them: in an interval set the kernel stores a range as a start
/// and an end element, and nft prints one, so elements flagged
/// NFT_SET_ELEM_INTERVAL_END are skipped. Returns the generation's low 16 bits.
pub fn each_element<'a>(
    ty: u16,
    payload: &'a [u8],
    mut each: impl FnMut(Element<'a>) -> Result<(), NlError>,
) -> Result<u16, NlError> {
    expect(ty, NFT_MSG_NEWSETELEM, "set element")?;
    let (_, gen16, attrs) = nfgen(payload)?;
    for a in attrs {
        let a = a?;
        if a.kind != NFTA_SET_ELEM_LIST_ELEMENTS {
            continue;
        }
        for e in a.nested() {
            let e = e?;
            if e.kind != NFTA_LIST_ELEM {
                continue;
            }
            let (mut key, mut chain, mut end) = (None, None, false);
            for f in e.nested() {
                let f = f?;
                match f.kind {
                    NFTA_SET_ELEM_KEY => key = data_value(f)?,
                    NFTA_SET_ELEM_DATA => chain = data_verdict_chain(f)?,
                    NFTA_SET_ELEM_FLAGS => end = f.be_u32()? & NFT_SET_ELEM_INTERVAL_END != 0,
                    _ => {}
                }
            }
            if !end {
                each(Element {
                    key: key.unwrap_or_default(),
                    chain,
                })?;
            }
        }
    }
    Ok(gen16)
}

#[cfg(test)]
pub(crate) mod samples {
    //! nf_tables answers built as the kernel encodes them (checked against
    //! `nft --debug=netlink` on the test kernel).
    use super::super::testing::*;
    use super::*;

    pub fn table(family: u8, gen: u16, name: &str) -> Vec<u8> {
        nfgen_payload(family, gen, &[string(NFTA_TABLE_NAME, name), be32(2, 0), be32(3, 4)])
    }

    pub fn chain(family: u8, gen: u16, table: &str, name: &str, base: bool) -> Vec<u8> {
        let mut a = vec![
            string(NFTA_CHAIN_TABLE, table),
            attr(2, &7u64.to_be_bytes()),
            string(NFTA_CHAIN_NAME, name),
        ];
        if base {
            a.push(nested(NFTA_CHAIN_HOOK, &[be32(1, 0), be32(2, (-100i32) as u32)]));
            a.push(be32(5, 1));
            a.push(string(7, "nat"));
        }
        a.push(be32(6, 0));
        nfgen_payload(family, gen, &a)
    }

    /// An immediate expression with a verdict.
    pub fn immediate(code: i32, chain: Option<&str>) -> Vec<u8> {
        let mut v = vec![be32(NFTA_VERDICT_CODE, code as u32)];
        if let Some(c) = chain {
            v.push(string(NFTA_VERDICT_CHAIN, c));
        }
        nested(
            NFTA_LIST_ELEM,
            &[
                string(NFTA_EXPR_NAME, "immediate"),
                nested(
                    NFTA_EXPR_DATA,
                    &[
                        be32(1, 0),
                        nested(NFTA_IMMEDIATE_DATA, &[nested(NFTA_DATA_VERDICT, &v)]),
                    ],
                ),
            ],
        )
    }

    pub fn counter() -> Vec<u8> {
        nested(
            NFTA_LIST_ELEM,
            &[
                string(NFTA_EXPR_NAME, "counter"),
                nested(
                    NFTA_EXPR_DATA,
                    &[attr(1, &0u64.to_be_bytes()), attr(2, &0u64.to_be_bytes())],
                ),
            ],
        )
    }

    pub fn rule(family: u8, gen: u16, table: &str, chain: &str, exprs: &[Vec<u8>]) -> Vec<u8> {
        nfgen_payload(
            family,
            gen,
            &[
                string(NFTA_RULE_TABLE, table),
                string(NFTA_RULE_CHAIN, chain),
                attr(3, &9u64.to_be_bytes()),
                nested(NFTA_RULE_EXPRESSIONS, exprs),
                attr(7, b"\x00\x07comment"),
            ],
        )
    }

    pub fn set(family: u8, gen: u16, table: &str, name: &str, flags: u32) -> Vec<u8> {
        nfgen_payload(
            family,
            gen,
            &[
                string(NFTA_SET_TABLE, table),
                string(NFTA_SET_NAME, name),
                be32(NFTA_SET_FLAGS, flags),
                be32(4, 7),
                be32(5, 4),
            ],
        )
    }

    pub fn elements(family: u8, gen: u16, table: &str, set: &str, flags: &[u32]) -> Vec<u8> {
        let elems: Vec<Vec<u8>> = flags
            .iter()
            .map(|f| {
                let mut e = vec![nested(1, &[attr(1, &[10, 0, 0, 1])])];
                if *f != 0 {
                    e.push(be32(NFTA_SET_ELEM_FLAGS, *f));
                }
                nested(NFTA_LIST_ELEM, &e)
            })
            .collect();
        nfgen_payload(
            family,
            gen,
            &[
                string(NFTA_SET_ELEM_LIST_TABLE, table),
                string(NFTA_SET_ELEM_LIST_SET, set),
                nested(NFTA_SET_ELEM_LIST_ELEMENTS, &elems),
            ],
        )
    }

    pub fn gen(id: u32) -> Vec<u8> {
        nfgen_payload(
            0,
            (id & 0xffff) as u16,
            &[be32(NFTA_GEN_ID, id), be32(2, 1), string(3, "nft")],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;

    #[test]
    fn decodes_tables_chains_gen() {
        assert_eq!(decode_gen(msg_type(NFT_MSG_NEWGEN), &gen(70_000)).unwrap(), 70_000);
        assert!(decode_gen(msg_type(NFT_MSG_NEWTABLE), &gen(1)).is_err());
        assert_eq!(
            decode_table(msg_type(NFT_MSG_NEWTABLE), &table(2, 5, "nat")).unwrap(),
            ("nat", 5)
        );
        let p = chain(2, 5, "nat", "PREROUTING", true);
        let c = decode_chain(msg_type(NFT_MSG_NEWCHAIN), &p).unwrap();
        assert_eq!((c.table, c.name, c.base, c.gen16), ("nat", "PREROUTING", true, 5));
        let p = chain(2, 5, "nat", "KUBE-SVC-X", false);
        assert!(!decode_chain(msg_type(NFT_MSG_NEWCHAIN), &p).unwrap().base);
    }

    #[test]
    fn rule_jump_targets() {
        let t = msg_type(NFT_MSG_NEWRULE);
        let jump = rule(
            2,
            1,
            "nat",
            "PREROUTING",
            &[counter(), immediate(-3, Some("KUBE-SERVICES"))],
        );
        let r = decode_rule(t, &jump).unwrap();
        assert_eq!((r.table, r.chain), ("nat", "PREROUTING"));
        assert!(r.jumps_to("KUBE-").unwrap());
        assert!(!r.jumps_to("KUBE-SVC-").unwrap());
        let goto = rule(2, 1, "nat", "X", &[immediate(-4, Some("KUBE-SEP-1"))]);
        assert!(decode_rule(t, &goto).unwrap().jumps_to("KUBE-").unwrap());
        // An accept verdict, or a jump elsewhere, or no expression at all.
        let accept = rule(2, 1, "filter", "INPUT", &[immediate(1, None)]);
        assert!(!decode_rule(t, &accept).unwrap().jumps_to("KUBE-").unwrap());
        let other = rule(2, 1, "filter", "INPUT", &[immediate(-3, Some("DOCKER"))]);
        assert!(!decode_rule(t, &other).unwrap().jumps_to("KUBE-").unwrap());
        let empty = rule(2, 1, "filter", "INPUT", &[]);
        assert!(!decode_rule(t, &empty).unwrap().jumps_to("KUBE-").unwrap());
        // A rule message without its chain is malformed.
        let bad = super::super::testing::nfgen_payload(2, 0, &[super::super::testing::string(1, "nat")]);
        assert!(decode_rule(t, &bad).is_err());
    }

    #[test]
    fn sets_and_elements() {
        let p = set(2, 3, "kube-proxy", "service-ips", 0x8 | 0x80);
        let s = decode_set(msg_type(NFT_MSG_NEWSET), &p).unwrap();
        assert!(s.is_map() && !s.anonymous());
        let p = set(2, 3, "kube-proxy", "__set0", 0x1 | 0x2);
        let s = decode_set(msg_type(NFT_MSG_NEWSET), &p).unwrap();
        assert!(s.anonymous() && !s.is_map());
        let count = |p: &[u8]| {
            let mut n = 0;
            let g16 = each_element(msg_type(NFT_MSG_NEWSETELEM), p, |_| {
                n += 1;
                Ok(())
            });
            g16.map(|g| (n, g))
        };
        assert_eq!(count(&elements(2, 3, "t", "s", &[0, 0, 0])).unwrap(), (3, 3));
        // An interval set: two ranges (start + end each) and an open-ended start.
        assert_eq!(count(&elements(2, 3, "t", "s", &[0, 1, 0, 1, 0])).unwrap().0, 3);
    }

    #[test]
    fn unknown_attributes_are_skipped_and_cut_input_is_an_error() {
        use super::super::testing::*;
        let mut p = chain(2, 5, "nat", "POSTROUTING", true);
        p.extend_from_slice(&attr(0x3fff, b"future"));
        assert_eq!(
            decode_chain(msg_type(NFT_MSG_NEWCHAIN), &p).unwrap().name,
            "POSTROUTING"
        );
        let r = rule(2, 1, "nat", "X", &[immediate(-3, Some("KUBE-SEP-1"))]);
        for cut in 0..r.len() {
            if let Ok(rule) = decode_rule(msg_type(NFT_MSG_NEWRULE), &r[..cut]) {
                let _ = rule.jumps_to("KUBE-");
            }
        }
    }
}

#[cfg(test)]
mod element_tests {
    use super::super::testing::*;
    use super::*;

    /// A verdict-map element as the kernel sends it: key, `goto CHAIN` data, flags.
    fn element(key: &[u8], chain: Option<&str>, flags: u32) -> Vec<u8> {
        let mut e = vec![nested(NFTA_SET_ELEM_KEY, &[attr(NFTA_DATA_VALUE, key)])];
        if let Some(c) = chain {
            let v = [be32(NFTA_VERDICT_CODE, NFT_GOTO as u32), string(NFTA_VERDICT_CHAIN, c)];
            e.push(nested(NFTA_SET_ELEM_DATA, &[nested(NFTA_DATA_VERDICT, &v)]));
        }
        if flags != 0 {
            e.push(be32(NFTA_SET_ELEM_FLAGS, flags));
        }
        nested(NFTA_LIST_ELEM, &e)
    }

    #[test]
    fn elements_give_key_and_verdict_chain() {
        let key = [10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0];
        let payload = nfgen_payload(
            2,
            7,
            &[
                string(NFTA_SET_ELEM_LIST_TABLE, "kube-proxy"),
                string(NFTA_SET_ELEM_LIST_SET, "service-ips"),
                nested(
                    NFTA_SET_ELEM_LIST_ELEMENTS,
                    &[
                        element(&key, Some("service-X"), 0),
                        element(&[10, 0, 0, 0], None, 0),
                        element(&[10, 0, 0, 255], None, NFT_SET_ELEM_INTERVAL_END),
                    ],
                ),
            ],
        );
        let mut got = Vec::new();
        let g16 = each_element(msg_type(NFT_MSG_NEWSETELEM), &payload, |e| {
            got.push((e.key.to_vec(), e.chain.map(str::to_string)));
            Ok(())
        })
        .unwrap();
        assert_eq!(g16, 7);
        assert_eq!(
            got,
            vec![(key.to_vec(), Some("service-X".into())), (vec![10, 0, 0, 0], None)],
            "the interval end is not an element"
        );
        for cut in 0..payload.len() {
            let _ = each_element(msg_type(NFT_MSG_NEWSETELEM), &payload[..cut], |_| Ok(()));
        }
        assert!(each_element(msg_type(NFT_MSG_NEWRULE), &payload, |_| Ok(())).is_err());
    }
}
