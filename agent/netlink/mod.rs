//! Netlink, the kernel's own interface to its tables: the socket and the
//! framing, shared by the nf_tables reader ([`nft`], [`nft_count`]) and the
//! conntrack statistics reader ([`ctnetlink`]).
//!
//! Two layers, kept apart so the decoders can be unit-tested and fuzzed
//! without a kernel:
//!
//! - pure framing: [`messages`] splits a received datagram into netlink
//!   messages, [`attrs`] walks a message's attributes; both return
//!   [`NlError::Malformed`] on anything that does not add up (a length past
//!   the end, a header cut short) and never panic;
//! - I/O: [`Conn`] is one socket (the real [`Socket`], or a scripted fake in
//!   tests), [`Session`] sends requests on it and streams the answers to a
//!   callback one datagram at a time, so memory stays at one receive buffer
//!   whatever the size of the dump.
//!
//! Netlink answers for the network namespace of the socket, i.e. the agent's
//! own: probes open connections through their host's [`replay::KernelSource`],
//! a socket only when `--host-root` is `/`, a recording's replay on a fixture
//! node that has one, nothing on the others.
//! A request to a netfilter subsystem autoloads its kernel module, so callers
//! ask `probe::modules::tool_would_load` first and send nothing when the module is not there.

pub mod ct_dump;
pub mod ctnetlink;
pub mod nfacct;
pub mod nft;
pub mod nft_count;
pub mod nft_expr;
pub mod nft_snat;
pub mod nft_uapi;
#[cfg(test)]
pub mod record;
pub mod replay;

use std::time::Instant;

/// `NETLINK_NETFILTER`, the protocol of nfnetlink (nf_tables, ctnetlink).
pub const NETLINK_NETFILTER: isize = 12;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
/// The dump was interrupted by a change of the table it walks: its parts are inconsistent.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
/// A new-object request's "fail if it exists" (an nf_tables notification keeps the request's).
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_DUMP: u16 = 0x300;

/// Netlink message header length.
pub const NLMSG_HDRLEN: usize = 16;
/// nfnetlink's `struct nfgenmsg` after the header: family, version, resource id.
pub const NFGENMSG_LEN: usize = 4;

/// Attribute type flags, masked off the type.
const NLA_F_NESTED: u16 = 0x8000;
const NLA_F_NET_BYTEORDER: u16 = 0x4000;

/// Receive buffer: the kernel fills dump datagrams up to 32 KiB
/// (netlink_recvmsg caps `max_recvmsg_len`), so 64 KiB always holds one.
pub const RECV_BUFFER: usize = 64 * 1024;

/// What went wrong talking to the kernel, or in what it said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NlError {
    /// A socket call failed (`op` says which), with its errno.
    #[error("{op}: {}", errno_text(*.errno))]
    Os { op: &'static str, errno: i32 },
    /// The kernel answered a request with an error.
    #[error("the kernel answered {}", errno_text(*.errno))]
    Kernel { errno: i32 },
    /// Bytes that are not what the protocol says (cut short, lengths past the end...).
    #[error("malformed netlink message: {0}")]
    Malformed(String),
    /// The dump was interrupted by a concurrent change (NLM_F_DUMP_INTR) or the
    /// ruleset generation moved: its parts do not belong together.
    #[error("the ruleset changed during the dump ({0})")]
    Changed(String),
    /// No answer before the probe's deadline.
    #[error("no answer before the deadline")]
    Timeout,
    /// A datagram larger than the read offered (its tail is lost).
    #[error("{0}")]
    Truncated(String),
    /// A fixture node's recording holds no answer to a request (`replay.rs`): unknown, not empty.
    #[error("not in the netlink recording: {0}")]
    NotRecorded(String),
}

impl NlError {
    /// The errno of an OS or kernel error.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NlError::Os { errno, .. } | NlError::Kernel { errno } => Some(*errno),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(nix::errno::Errno::ENOENT as i32)
    }
}

/// `EPERM (Operation not permitted)`, with what the agent lacks for the usual ones.
pub fn errno_text(errno: i32) -> String {
    use nix::errno::Errno;
    let e = Errno::from_raw(errno);
    let hint = match e {
        Errno::EPERM | Errno::EACCES => " (needs CAP_NET_ADMIN in the node's network namespace)",
        Errno::ENOBUFS => " (the socket's receive buffer overflowed: messages were lost)",
        Errno::EPROTONOSUPPORT | Errno::EOPNOTSUPP => " (this kernel lacks the netlink subsystem)",
        _ => "",
    };
    format!("{e:?} ({}){hint}", e.desc())
}

// ---------------------------------------------------------------------------
// Pure framing.

/// One netlink message of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    /// After the 16-byte header, up to the message's length.
    pub payload: &'a [u8],
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_ne(b: &[u8]) -> u16 {
    u16::from_ne_bytes([b[0], b[1]])
}

fn u32_ne(b: &[u8]) -> u32 {
    u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

/// The messages of one received datagram.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { rest: buf }
}

pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Msg<'a>, NlError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        if b.len() < NLMSG_HDRLEN {
            self.rest = &[];
            return Some(Err(NlError::Malformed(format!(
                "{} trailing bytes, shorter than a message header",
                b.len()
            ))));
        }
        let len = u32_ne(&b[0..4]) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            self.rest = &[];
            return Some(Err(NlError::Malformed(format!(
                "message length {len} outside 16..={} (truncated?)",
                b.len()
            ))));
        }
        let msg = Msg {
            ty: u16_ne(&b[4..6]),
            flags: u16_ne(&b[6..8]),
            seq: u32_ne(&b[8..12]),
            payload: &b[NLMSG_HDRLEN..len],
        };
        self.rest = &b[align4(len).min(b.len())..];
        Some(Ok(msg))
    }
}

/// One attribute: its type without the nested/byte-order flags, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// A big-endian u32 (nf_tables' numbers).
    pub fn be_u32(&self) -> Result<u32, NlError> {
        match self.value {
            [a, b, c, d] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
            v => Err(NlError::Malformed(format!(
                "attribute {}: {} bytes where a 32-bit number belongs",
                self.kind,
                v.len()
            ))),
        }
    }

    /// A big-endian u64.
    pub fn be_u64(&self) -> Result<u64, NlError> {
        let v: [u8; 8] = self.value.try_into().map_err(|_| {
            NlError::Malformed(format!(
                "attribute {}: {} bytes where a 64-bit number belongs",
                self.kind,
                self.value.len()
            ))
        })?;
        Ok(u64::from_be_bytes(v))
    }

    /// A NUL-terminated string (the NUL and anything after it dropped).
    pub fn str(&self) -> Result<&'a str, NlError> {
        let end = self.value.iter().position(|&b| b == 0).unwrap_or(self.value.len());
        std::str::from_utf8(&self.value[..end])
            .map_err(|_| NlError::Malformed(format!("attribute {}: a name that is not UTF-8", self.kind)))
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        attrs(self.value)
    }
}

/// The attributes in `buf` (a message payload after its fixed header, or a nested attribute).
pub fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs { rest: buf }
}

#[derive(Clone)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, NlError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        if b.len() < 4 {
            self.rest = &[];
            return Some(Err(NlError::Malformed(format!(
                "{} trailing bytes, shorter than an attribute header",
                b.len()
            ))));
        }
        let len = u16_ne(&b[0..2]) as usize;
        if len < 4 || len > b.len() {
            self.rest = &[];
            return Some(Err(NlError::Malformed(format!(
                "attribute length {len} outside 4..={}",
                b.len()
            ))));
        }
        let kind = u16_ne(&b[2..4]) & !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);
        self.rest = &b[align4(len).min(b.len())..];
        Some(Ok(Attr {
            kind,
            value: &b[4..len],
        }))
    }
}

/// Splits an nfnetlink payload into its `nfgenmsg` (family, resource id, host
/// order) and the attributes after it.
pub fn nfgen(payload: &[u8]) -> Result<(u8, u16, Attrs<'_>), NlError> {
    if payload.len() < NFGENMSG_LEN {
        return Err(NlError::Malformed(format!(
            "{} payload bytes, shorter than nfgenmsg",
            payload.len()
        )));
    }
    let res_id = u16::from_be_bytes([payload[2], payload[3]]);
    Ok((payload[0], res_id, attrs(&payload[NFGENMSG_LEN..])))
}

/// The errno of an `NLMSG_ERROR` payload (0 for an acknowledgement), as a positive number.
pub fn error_code(payload: &[u8]) -> Result<i32, NlError> {
    if payload.len() < 4 {
        return Err(NlError::Malformed("NLMSG_ERROR shorter than its error code".into()));
    }
    Ok(i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]).saturating_neg())
}

/// Builds one nfnetlink request: header, nfgenmsg, attributes.
pub struct Request {
    buf: Vec<u8>,
}

impl Request {
    /// `ty` is `(subsystem << 8) | message`; `family` the nfgenmsg family.
    pub fn new(ty: u16, flags: u16, family: u8) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set in bytes()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // seq, set by the session
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
        buf.extend_from_slice(&[family, 0, 0, 0]); // nfgenmsg: family, NFNETLINK_V0, res_id 0
        Request { buf }
    }

    /// Adds a NUL-terminated string attribute.
    pub fn string(mut self, kind: u16, s: &str) -> Self {
        let len = 4 + s.len() + 1;
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
        self
    }

    /// Adds an attribute with raw `value` (`kind` may carry NLA_F_NESTED).
    pub fn attr(mut self, kind: u16, value: &[u8]) -> Self {
        self.buf.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
        self
    }

    /// The bytes to send, with `seq`.
    pub fn bytes(&mut self, seq: u32) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        &self.buf
    }
}

// ---------------------------------------------------------------------------
// I/O.

/// One netlink socket: the real one, or a fake that answers from a script.
pub trait Conn {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError>;
    /// Receives one datagram, waiting at most until `deadline`; it stays valid until the next call.
    fn recv(&mut self, deadline: Instant) -> Result<&[u8], NlError>;
}

/// A non-blocking `NETLINK_NETFILTER` socket; waits are `poll`s bounded by the deadline.
pub struct Socket {
    sock: netlink_sys::Socket,
    /// Zeroed once; each read offers all of it.
    buf: Vec<u8>,
}

impl Socket {
    /// A socket whose reads offer [`RECV_BUFFER`] bytes (the kernel sizes each
    /// dump part to the largest read offered, capped at 32 KiB; offering 4 KiB
    /// to the per-chain dumps measured no faster).
    pub fn open(protocol: isize) -> Result<Socket, NlError> {
        let os = |op| {
            move |e: std::io::Error| NlError::Os {
                op,
                errno: e.raw_os_error().unwrap_or(0),
            }
        };
        let mut sock = netlink_sys::Socket::new(protocol).map_err(os("opening a netlink socket"))?;
        sock.bind_auto().map_err(os("binding the netlink socket"))?;
        sock.set_non_blocking(true)
            .map_err(os("setting the netlink socket non-blocking"))?;
        Ok(Socket {
            sock,
            buf: vec![0; RECV_BUFFER],
        })
    }
}

/// `MSG_TRUNC`: recv returns the datagram's real length, so a cut one is seen.
const MSG_TRUNC: i32 = 0x20;

impl Conn for Socket {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError> {
        match self.sock.send(msg, 0) {
            Ok(n) if n == msg.len() => Ok(()),
            Ok(n) => Err(NlError::Malformed(format!("sent {n} of {} bytes", msg.len()))),
            Err(e) => Err(NlError::Os {
                op: "sending a netlink request",
                errno: e.raw_os_error().unwrap_or(0),
            }),
        }
    }

    fn recv(&mut self, deadline: Instant) -> Result<&[u8], NlError> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let offered = self.buf.len();
        loop {
            // A slice of initialised bytes: nothing is zeroed per read.
            match self.sock.recv(&mut &mut self.buf[..], MSG_TRUNC) {
                Ok(n) if n > offered => {
                    return Err(NlError::Truncated(format!(
                        "a datagram of {n} bytes was cut to the {offered} bytes read"
                    )));
                }
                Ok(n) => return Ok(&self.buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(NlError::Os {
                        op: "receiving from netlink",
                        errno: e.raw_os_error().unwrap_or(0),
                    })
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NlError::Timeout);
            }
            let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(NlError::Os {
                        op: "waiting for netlink",
                        errno: e as i32,
                    })
                }
            }
        }
    }
}

/// Requests and dumps over one [`Conn`], with sequence numbers, until a deadline.
pub struct Session<C> {
    conn: C,
    seq: u32,
    deadline: Instant,
    /// Bytes received so far.
    pub bytes: u64,
}

/// What a dump's messages say besides their payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<'a> {
    pub ty: u16,
    pub payload: &'a [u8],
}

impl<C: Conn> Session<C> {
    pub fn new(conn: C, deadline: Instant) -> Self {
        Session {
            conn,
            seq: 0,
            deadline,
            bytes: 0,
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    /// Sends a request that has one answer (no dump) and returns a copy of that
    /// answer's payload; a kernel error is [`NlError::Kernel`].
    pub fn request(&mut self, req: &mut Request) -> Result<(u16, Vec<u8>), NlError> {
        let seq = self.next_seq();
        self.conn.send(req.bytes(seq))?;
        loop {
            let data = self.conn.recv(self.deadline)?;
            self.bytes += data.len() as u64;
            for m in messages(data) {
                let m = m?;
                if m.seq != seq || m.ty == NLMSG_NOOP {
                    continue; // an answer to an earlier request
                }
                return match m.ty {
                    NLMSG_ERROR => match error_code(m.payload)? {
                        0 => Err(NlError::Malformed("an acknowledgement where an answer belongs".into())),
                        errno => Err(NlError::Kernel { errno }),
                    },
                    NLMSG_DONE | NLMSG_OVERRUN => Err(NlError::Malformed(format!(
                        "message type {} where an answer belongs",
                        m.ty
                    ))),
                    ty => Ok((ty, m.payload.to_vec())),
                };
            }
        }
    }

    /// Sends a dump request and gives each message of the answer to `each`, one
    /// datagram at a time. A message flagged NLM_F_DUMP_INTR ends the dump with
    /// [`NlError::Changed`]; an error from `each` ends it too (the socket is then
    /// mid-dump and must be dropped).
    pub fn dump(
        &mut self,
        req: &mut Request,
        each: impl FnMut(Part<'_>) -> Result<(), NlError>,
    ) -> Result<(), NlError> {
        self.dump_batched(req, 1, each)
    }

    /// [`Session::dump`], reading up to `batch` datagrams (at most `batch` × the
    /// read size held) before giving their messages to `each`. For a dump the
    /// kernel resumes by walking its list from the start (the chain dump):
    /// reading its parts back to back keeps that walk in the CPU's cache, where
    /// the work `each` does between parts (other dumps) would evict it.
    pub fn dump_batched(
        &mut self,
        req: &mut Request,
        batch: usize,
        mut each: impl FnMut(Part<'_>) -> Result<(), NlError>,
    ) -> Result<(), NlError> {
        let seq = self.next_seq();
        self.conn.send(req.bytes(seq))?;
        let mut held: Vec<u8> = Vec::new();
        loop {
            if batch <= 1 {
                let data = self.conn.recv(self.deadline)?;
                self.bytes += data.len() as u64;
                if handle(data, seq, &mut each)? {
                    return Ok(());
                }
                continue;
            }
            held.clear();
            for _ in 0..batch {
                let data = self.conn.recv(self.deadline)?;
                self.bytes += data.len() as u64;
                held.extend_from_slice(data);
                if ends(data, seq) {
                    break;
                }
            }
            if handle(&held, seq, &mut each)? {
                return Ok(());
            }
        }
    }
}

/// Whether `data` holds the end of dump `seq`: DONE, an error, or anything
/// that makes [`handle`] stop.
fn ends(data: &[u8], seq: u32) -> bool {
    messages(data).any(|m| match m {
        Ok(m) => {
            m.seq == seq && (matches!(m.ty, NLMSG_DONE | NLMSG_ERROR | NLMSG_OVERRUN) || m.flags & NLM_F_DUMP_INTR != 0)
        }
        Err(_) => true,
    })
}

/// Gives the messages of dump `seq` in `data` to `each`; true at the dump's DONE.
fn handle(data: &[u8], seq: u32, each: &mut impl FnMut(Part<'_>) -> Result<(), NlError>) -> Result<bool, NlError> {
    for m in messages(data) {
        let m = m?;
        if m.seq != seq || m.ty == NLMSG_NOOP {
            continue;
        }
        if m.flags & NLM_F_DUMP_INTR != 0 {
            return Err(NlError::Changed("NLM_F_DUMP_INTR".into()));
        }
        match m.ty {
            NLMSG_DONE => {
                // A dump that failed in the kernel ends with its errno here.
                if m.payload.len() >= 4 {
                    if let errno @ 1.. = error_code(m.payload)? {
                        return Err(NlError::Kernel { errno });
                    }
                }
                return Ok(true);
            }
            NLMSG_ERROR => match error_code(m.payload)? {
                0 => continue,
                errno => return Err(NlError::Kernel { errno }),
            },
            NLMSG_OVERRUN => return Err(NlError::Malformed("NLMSG_OVERRUN: data lost".into())),
            ty => each(Part { ty, payload: m.payload })?,
        }
    }
    Ok(false)
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
