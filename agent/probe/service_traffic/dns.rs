//! The DNS query the service_traffic probe sends and the decoding of its
//! answer (RFC 1035 §4.1): one question, type A (or AAAA), class IN, recursion
//! desired; the answer is judged by its header only (id, QR, RCODE, answer
//! count), so no name in it is ever followed (no compression pointer loop to
//! fear). Pure: bytes in, bytes or a typed error out.

/// What an answer said, as far as the try goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// RCODE (0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED...).
    pub rcode: u8,
    /// ANCOUNT: answer records.
    pub answers: u16,
    /// TC: the answer was cut to fit a UDP datagram.
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("a name label longer than 63 bytes or a name longer than 255")]
    NameTooLong,
    #[error("an empty label in the name")]
    EmptyLabel,
    #[error("an answer of {0} bytes, shorter than a DNS header")]
    Short(usize),
    #[error("an answer to another query (id {got:#06x}, sent {want:#06x})")]
    OtherId { got: u16, want: u16 },
    #[error("a message that is not an answer (QR unset)")]
    NotAnAnswer,
}

/// `kubernetes.default.svc.cluster.local`: a query for it, with `id`;
/// `aaaa` asks for IPv6 addresses.
pub fn query(id: u16, name: &str, aaaa: bool) -> Result<Vec<u8>, DnsError> {
    let name = name.trim_end_matches('.');
    if name.len() > 253 {
        return Err(DnsError::NameTooLong);
    }
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00]); // RD
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // QDCOUNT 1
    for label in name.split('.') {
        if label.is_empty() {
            return Err(DnsError::EmptyLabel);
        }
        if label.len() > 63 {
            return Err(DnsError::NameTooLong);
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, if aaaa { 28 } else { 1 }, 0, 1]);
    Ok(q)
}

/// The header of an answer to query `id`.
pub fn answer(id: u16, msg: &[u8]) -> Result<Answer, DnsError> {
    let h: &[u8; 12] = msg
        .get(..12)
        .and_then(|h| h.try_into().ok())
        .ok_or(DnsError::Short(msg.len()))?;
    let got = u16::from_be_bytes([h[0], h[1]]);
    if got != id {
        return Err(DnsError::OtherId { got, want: id });
    }
    if h[2] & 0x80 == 0 {
        return Err(DnsError::NotAnAnswer);
    }
    Ok(Answer {
        rcode: h[3] & 0x0f,
        answers: u16::from_be_bytes([h[6], h[7]]),
        truncated: h[2] & 0x02 != 0,
    })
}

/// RCODE's name (RFC 1035, 6895).
pub fn rcode_name(rcode: u8) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => "other",
    }
}

/// For the fuzz target: no input panics either function.
pub fn fuzz(data: &[u8]) {
    let id = data.first().map_or(0, |b| u16::from(*b));
    let _ = answer(id, data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = query(id, s, data.len() % 2 == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `dig +noedns kubernetes.default.svc.cluster.local` sends (its
    /// id aside), as RFC 1035 §4.1 lays them out.
    #[test]
    fn query_bytes() {
        let q = query(0xbeef, "kubernetes.default.svc.cluster.local.", false).unwrap();
        let mut want = vec![0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in ["kubernetes", "default", "svc", "cluster", "local"] {
            want.push(l.len() as u8);
            want.extend_from_slice(l.as_bytes());
        }
        want.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(q, want);
        assert_eq!(query(1, "a..b", false), Err(DnsError::EmptyLabel));
        assert_eq!(query(1, &"x".repeat(64), false), Err(DnsError::NameTooLong));
        assert_eq!(query(1, "x", true).unwrap()[15..17], [0, 28]);
    }

    #[test]
    fn answer_headers() {
        // NOERROR, one answer; NXDOMAIN; a truncated one; another id; a query.
        let a = [0xbe, 0xef, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        assert_eq!(
            answer(0xbeef, &a),
            Ok(Answer {
                rcode: 0,
                answers: 1,
                truncated: false
            })
        );
        let nx = [0xbe, 0xef, 0x81, 0x83, 0, 1, 0, 0, 0, 0, 0, 0];
        assert_eq!(answer(0xbeef, &nx).unwrap().rcode, 3);
        assert_eq!(rcode_name(3), "NXDOMAIN");
        let tc = [0xbe, 0xef, 0x83, 0x80, 0, 1, 0, 0, 0, 0, 0, 0];
        assert!(answer(0xbeef, &tc).unwrap().truncated);
        assert_eq!(answer(1, &a), Err(DnsError::OtherId { got: 0xbeef, want: 1 }));
        assert_eq!(
            answer(0xbeef, &query(0xbeef, "x", false).unwrap()),
            Err(DnsError::NotAnAnswer)
        );
        for cut in 0..12 {
            assert_eq!(answer(0xbeef, &a[..cut]), Err(DnsError::Short(cut)));
        }
        fuzz(&[]);
        fuzz(&a);
    }
}
