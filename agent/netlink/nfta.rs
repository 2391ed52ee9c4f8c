//! The attribute types of the nf_tables expressions the decoders follow, by their kernel names
//! (`enum nft_<expr>_attributes` in include/uapi/linux/netfilter/nf_tables.h, and
//! `enum nft_match_attributes` / `nft_target_attributes` in
//! include/uapi/linux/netfilter/nf_tables_compat.h). Each is an index into
//! [`super::nft::attrs_by_kind`]'s array, which holds types below 10.

// payload
pub const NFTA_PAYLOAD_DREG: usize = 1;
pub const NFTA_PAYLOAD_BASE: usize = 2;
pub const NFTA_PAYLOAD_OFFSET: usize = 3;
pub const NFTA_PAYLOAD_LEN: usize = 4;
// meta
pub const NFTA_META_DREG: usize = 1;
pub const NFTA_META_KEY: usize = 2;
// bitwise
pub const NFTA_BITWISE_SREG: usize = 1;
pub const NFTA_BITWISE_DREG: usize = 2;
pub const NFTA_BITWISE_MASK: usize = 4;
// fib
pub const NFTA_FIB_DREG: usize = 1;
pub const NFTA_FIB_RESULT: usize = 2;
pub const NFTA_FIB_FLAGS: usize = 3;
// ct, numgen, hash: where each writes its result
pub const NFTA_CT_DREG: usize = 1;
pub const NFTA_NG_DREG: usize = 1;
pub const NFTA_HASH_DREG: usize = 2;
// immediate
pub const NFTA_IMMEDIATE_DREG: usize = 1;
pub const NFTA_IMMEDIATE_DATA: usize = 2;
// cmp
pub const NFTA_CMP_SREG: usize = 1;
pub const NFTA_CMP_OP: usize = 2;
pub const NFTA_CMP_DATA: usize = 3;
// lookup
pub const NFTA_LOOKUP_SET: usize = 1;
pub const NFTA_LOOKUP_SREG: usize = 2;
// compat match and target (the same three for both)
pub const NFTA_MATCH_NAME: usize = 1;
pub const NFTA_MATCH_REV: usize = 2;
pub const NFTA_MATCH_INFO: usize = 3;
pub const NFTA_TARGET_NAME: usize = 1;
pub const NFTA_TARGET_REV: usize = 2;
pub const NFTA_TARGET_INFO: usize = 3;
// nat
pub const NFTA_NAT_TYPE: usize = 1;
pub const NFTA_NAT_REG_ADDR_MIN: usize = 3;
pub const NFTA_NAT_REG_PROTO_MIN: usize = 5;
pub const NFTA_NAT_REG_PROTO_MAX: usize = 6;
pub const NFTA_NAT_FLAGS: usize = 7;
// masq
pub const NFTA_MASQ_FLAGS: usize = 1;
pub const NFTA_MASQ_REG_PROTO_MIN: usize = 2;
pub const NFTA_MASQ_REG_PROTO_MAX: usize = 3;
// counter
pub const NFTA_COUNTER_PACKETS: usize = 2;
