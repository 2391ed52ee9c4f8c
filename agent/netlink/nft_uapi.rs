//! The kernel's nf_tables names, in one place: the subsystem and group, the message types
//! (`enum nf_tables_msg_types`), the message attributes (`enum nft_<object>_attributes`) and
//! the expression attributes (`enum nft_<expr>_attributes`), all from
//! include/uapi/linux/netfilter/nf_tables.h, nfnetlink.h and, for the compat `match` and
//! `target`, nf_tables_compat.h. Every decoder and request of the agent takes its numbers from
//! here; an expression's attributes are looked up through [`super::nft::ExprAttrs`].

/// `NFNL_SUBSYS_NFTABLES`: the high byte of an nf_tables message's type.
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFNLGRP_NFTABLES` (nfnetlink.h: NONE 0 ... EXP_DESTROY 6, NFTABLES 7).
pub const NFNLGRP_NFTABLES: u32 = 7;

// enum nf_tables_msg_types (the DESTROY variants are Linux 6.3's; the kernel notifies them as DEL).
pub const NFT_MSG_NEWTABLE: u16 = 0;
pub const NFT_MSG_GETTABLE: u16 = 1;
pub const NFT_MSG_DELTABLE: u16 = 2;
pub const NFT_MSG_NEWCHAIN: u16 = 3;
pub const NFT_MSG_GETCHAIN: u16 = 4;
pub const NFT_MSG_DELCHAIN: u16 = 5;
pub const NFT_MSG_NEWRULE: u16 = 6;
pub const NFT_MSG_GETRULE: u16 = 7;
pub const NFT_MSG_DELRULE: u16 = 8;
pub const NFT_MSG_NEWSET: u16 = 9;
pub const NFT_MSG_GETSET: u16 = 10;
pub const NFT_MSG_DELSET: u16 = 11;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
pub const NFT_MSG_DELSETELEM: u16 = 14;
pub const NFT_MSG_NEWGEN: u16 = 15;
pub const NFT_MSG_GETGEN: u16 = 16;
pub const NFT_MSG_DESTROYTABLE: u16 = 26;
pub const NFT_MSG_DESTROYCHAIN: u16 = 27;
pub const NFT_MSG_DESTROYRULE: u16 = 28;
pub const NFT_MSG_DESTROYSET: u16 = 29;
pub const NFT_MSG_DESTROYSETELEM: u16 = 30;

// Message attributes.
pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_RULE_USERDATA: u16 = 7;
pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_FLAGS: u16 = 3;
pub const NFTA_GEN_ID: u16 = 1;
pub const NFTA_GEN_PROC_PID: u16 = 2;
pub const NFTA_GEN_PROC_NAME: u16 = 3;
// A rule's expression list, and one expression.
pub const NFTA_LIST_ELEM: u16 = 1;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;
// enum nft_data_attributes and nft_verdict_attributes.
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;

// Expression attributes.
// payload
pub const NFTA_PAYLOAD_DREG: u16 = 1;
pub const NFTA_PAYLOAD_BASE: u16 = 2;
pub const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub const NFTA_PAYLOAD_LEN: u16 = 4;
// meta
pub const NFTA_META_DREG: u16 = 1;
pub const NFTA_META_KEY: u16 = 2;
// bitwise
pub const NFTA_BITWISE_SREG: u16 = 1;
pub const NFTA_BITWISE_DREG: u16 = 2;
pub const NFTA_BITWISE_MASK: u16 = 4;
// fib
pub const NFTA_FIB_DREG: u16 = 1;
pub const NFTA_FIB_RESULT: u16 = 2;
pub const NFTA_FIB_FLAGS: u16 = 3;
// ct, numgen, hash: where each writes its result
pub const NFTA_CT_DREG: u16 = 1;
pub const NFTA_NG_DREG: u16 = 1;
pub const NFTA_HASH_DREG: u16 = 2;
// immediate
pub const NFTA_IMMEDIATE_DREG: u16 = 1;
pub const NFTA_IMMEDIATE_DATA: u16 = 2;
// cmp
pub const NFTA_CMP_SREG: u16 = 1;
pub const NFTA_CMP_OP: u16 = 2;
pub const NFTA_CMP_DATA: u16 = 3;
// lookup
pub const NFTA_LOOKUP_SET: u16 = 1;
pub const NFTA_LOOKUP_SREG: u16 = 2;
// compat match and target (the same three for both)
pub const NFTA_MATCH_NAME: u16 = 1;
pub const NFTA_MATCH_REV: u16 = 2;
pub const NFTA_MATCH_INFO: u16 = 3;
pub const NFTA_TARGET_NAME: u16 = 1;
pub const NFTA_TARGET_REV: u16 = 2;
pub const NFTA_TARGET_INFO: u16 = 3;
// nat
pub const NFTA_NAT_TYPE: u16 = 1;
pub const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
pub const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
pub const NFTA_NAT_REG_PROTO_MAX: u16 = 6;
pub const NFTA_NAT_FLAGS: u16 = 7;
// masq
pub const NFTA_MASQ_FLAGS: u16 = 1;
pub const NFTA_MASQ_REG_PROTO_MIN: u16 = 2;
pub const NFTA_MASQ_REG_PROTO_MAX: u16 = 3;
// counter
pub const NFTA_COUNTER_PACKETS: u16 = 2;

// Values the attributes carry.
/// `enum nft_payload_bases`: the network and the transport header.
pub const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
pub const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
/// `enum nft_meta_keys`: the L4 protocol.
pub const NFT_META_L4PROTO: u32 = 16;
/// `enum nft_cmp_ops`: equal.
pub const NFT_CMP_EQ: u32 = 0;
/// `enum nft_fib_flags`: look up the source address.
pub const NFTA_FIB_F_SADDR: u32 = 1;
/// `enum nft_fib_result`: the address type.
pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
/// `enum nft_nat_types`.
pub const NFT_NAT_SNAT: u32 = 0;
pub const NFT_NAT_DNAT: u32 = 1;
/// Verdict codes of a jump and a goto (`enum nft_verdicts`).
pub const NFT_JUMP: i32 = -3;
pub const NFT_GOTO: i32 = -4;
/// `enum nft_set_flags`.
pub const NFT_SET_ANONYMOUS: u32 = 0x1;
pub const NFT_SET_MAP: u32 = 0x8;
pub const NFT_SET_OBJECT: u32 = 0x40;
/// `enum nft_set_elem_flags`.
pub const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;

// include/uapi/linux/netfilter/nf_nat.h: the flags of a NAT range.
/// `NF_NAT_RANGE_MAP_IPS`: the rule names an address.
pub const NF_NAT_RANGE_MAP_IPS: u32 = 1 << 0;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`: the rule names a port range.
pub const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 1 << 1;
/// `NF_NAT_RANGE_PROTO_RANDOM_FULLY` (`--random-fully`, `fully-random`).
pub const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 1 << 4;
