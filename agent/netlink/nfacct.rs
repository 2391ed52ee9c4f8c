//! nfnetlink_acct: the extended accounting objects `-m nfacct --nfacct-name N`
//! rules count into (`nfacct list`), read by name.
//!
//! kube-proxy's iptables mode (v1.29+, pkg/proxy/metrics/metrics.go
//! `IPTablesCTStateInvalidDroppedNFAcctCounter`) creates
//! [`CT_STATE_INVALID`] and writes
//! `-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`;
//! its `kubeproxy_iptables_ct_state_invalid_dropped_packets_total` is that
//! object's packets. Objects are per network namespace and shared by both
//! families' rules.
//!
//! One `NFNL_MSG_ACCT_GET` (subsystem `NFNL_SUBSYS_ACCT` 7, message 1) with
//! `NFACCT_NAME`: the answer (`NFNL_MSG_ACCT_NEW`) holds `NFACCT_NAME` (1),
//! `NFACCT_PKTS` (2, be64) and `NFACCT_BYTES` (3, be64); ENOENT when there is
//! no such object. The caller makes sure asking loads no module
//! (nfnetlink asks for `nfnetlink-subsys-7` when the subsystem is missing).

use std::time::Instant;

use super::{nfgen, NlError, Request, Session, NETLINK_NETFILTER, NLM_F_REQUEST};

/// kube-proxy's object for the conntrack-invalid drop.
pub const CT_STATE_INVALID: &str = "ct_state_invalid_dropped_pkts";

const NFNL_SUBSYS_ACCT: u16 = 7;
const NFNL_MSG_ACCT_NEW: u16 = 0;
const NFNL_MSG_ACCT_GET: u16 = 1;
const NFACCT_NAME: u16 = 1;
const NFACCT_PKTS: u16 = 2;
const NFACCT_BYTES: u16 = 3;

/// One accounting object's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acct {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
}

/// The request for the object `name`.
pub fn get(name: &str) -> Request {
    Request::new((NFNL_SUBSYS_ACCT << 8) | NFNL_MSG_ACCT_GET, NLM_F_REQUEST, 0).string(NFACCT_NAME, name)
}

/// An `NFNL_MSG_ACCT_NEW` answer: its name and counters, an error when one is missing.
pub fn decode(ty: u16, payload: &[u8]) -> Result<Acct, NlError> {
    if ty != (NFNL_SUBSYS_ACCT << 8) | NFNL_MSG_ACCT_NEW {
        return Err(NlError::Malformed(format!(
            "message type {ty:#x} where an nfacct object belongs"
        )));
    }
    let (_, _, attrs) = nfgen(payload)?;
    let (mut name, mut packets, mut bytes) = (None, None, None);
    for a in attrs {
        let a = a?;
        match a.kind {
            NFACCT_NAME => name = Some(a.str()?.to_string()),
            NFACCT_PKTS => packets = Some(a.be_u64()?),
            NFACCT_BYTES => bytes = Some(a.be_u64()?),
            _ => {}
        }
    }
    match (name, packets, bytes) {
        (Some(name), Some(packets), Some(bytes)) => Ok(Acct { name, packets, bytes }),
        _ => Err(NlError::Malformed(
            "an nfacct object without its name or counters".into(),
        )),
    }
}

/// The object `name` (blocking): None when there is none.
pub fn read(host: &crate::host::Host, name: &str, deadline: Instant) -> Result<Option<Acct>, NlError> {
    let mut s = Session::new(host.netlink(NETLINK_NETFILTER)?, deadline);
    match s.request(&mut get(name)) {
        Ok((ty, payload)) => {
            let a = decode(ty, &payload)?;
            if a.name != name {
                return Err(NlError::Malformed(format!("asked for nfacct {name}, got {}", a.name)));
            }
            Ok(Some(a))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::testing::*;

    /// An answer as nfnetlink_acct builds it (nfnl_acct_fill_info): name,
    /// packets, bytes, use count (4), in an nfgenmsg of family AF_UNSPEC.
    fn answer(name: &str, packets: u64, bytes: u64) -> Vec<u8> {
        nfgen_payload(
            0,
            0,
            &[
                string(1, name),
                attr(2, &packets.to_be_bytes()),
                attr(3, &bytes.to_be_bytes()),
                attr(4, &1u32.to_be_bytes()),
            ],
        )
    }

    #[test]
    fn decodes_an_object_and_refuses_what_is_not_one() {
        let ty = (NFNL_SUBSYS_ACCT << 8) | NFNL_MSG_ACCT_NEW;
        let p = answer(CT_STATE_INVALID, 12, 720);
        assert_eq!(
            decode(ty, &p).unwrap(),
            Acct {
                name: CT_STATE_INVALID.into(),
                packets: 12,
                bytes: 720
            }
        );
        assert!(decode((10 << 8) | 6, &p).is_err(), "another message");
        // Without its counters: an error, never 0 packets.
        let p = nfgen_payload(0, 0, &[string(1, CT_STATE_INVALID)]);
        assert!(decode(ty, &p).is_err());
        let p = answer(CT_STATE_INVALID, 1, 2);
        for cut in 0..p.len() {
            let _ = decode(ty, &p[..cut]);
        }
    }

    #[test]
    fn the_request_names_the_object() {
        let mut r = get(CT_STATE_INVALID);
        let b = r.bytes(5).to_vec();
        // nlmsghdr: type (7 << 8) | 1, flags NLM_F_REQUEST only (no dump).
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 0x0701);
        assert_eq!(u16::from_ne_bytes([b[6], b[7]]), NLM_F_REQUEST);
        assert!(b
            .windows(CT_STATE_INVALID.len())
            .any(|w| w == CT_STATE_INVALID.as_bytes()));
    }
}
