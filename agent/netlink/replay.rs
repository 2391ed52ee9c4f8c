//! Where kernel answers come from ([`KernelSource`]), and the replay of a netlink
//! recording: a fixture node's kernel, as it answered each request once.
//!
//! A recording is a text file per protocol under the fixture node,
//! `<root>/netlink/<protocol>.txt` ([`recording_file`]): one exchange per block,
//! blocks separated by a blank line, `#` lines are comments:
//!
//! ```text
//! > <the request's bytes in hex, nlmsg seq and pid zeroed>
//! < <one reply datagram in hex, every message's seq and pid zeroed>
//! < <the next datagram of the same answer>
//! ```
//!
//! [`Replay`] answers a request with the datagrams recorded for the same bytes
//! (seq and pid zeroed on both sides), each message's seq rewritten to the
//! request's. A request the recording does not hold is refused with
//! [`NlError::NotRecorded`], naming it: unknown is not empty, so it is never
//! answered with an empty dump. Recordings are made by test code only
//! (`netlink/record.rs`, `tests/tools/record_netlink_node.sh`): the agent
//! never writes a file on the node.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{messages, Conn, NlError, Socket, NLMSG_HDRLEN};

/// `NETLINK_ROUTE`, the protocol of rtnetlink (neighbour tables).
pub const NETLINK_ROUTE: isize = 0;

/// Where a host's kernel answers come from, decided once per host root.
#[derive(Debug, Clone)]
pub enum KernelSource {
    /// The node itself (`--host-root /`): the kernel of the agent's network namespace.
    Live,
    /// A fixture root with no kernel: probes read files and recorded command output only.
    Files,
    /// A fixture root with a netlink recording (`<root>/netlink/`): the netlink
    /// readers decode the recorded answers.
    Recorded(PathBuf),
    /// The live kernel, every exchange kept for a recording (test code only).
    #[cfg(test)]
    Recording(Arc<super::record::Log>),
}

impl KernelSource {
    /// The source of a host root: live at `/`, recorded where `<root>/netlink/` is a directory.
    pub fn of(root: &Path) -> Self {
        if root == Path::new("/") {
            KernelSource::Live
        } else if root.join("netlink").is_dir() {
            KernelSource::Recorded(root.join("netlink"))
        } else {
            KernelSource::Files
        }
    }

    /// Whether probes ask a kernel over netlink (live or recorded) rather than read files only.
    pub fn netlink(&self) -> bool {
        !matches!(self, KernelSource::Files)
    }

    /// What `/snapshot` and the report call it: `kernel`, `files` or `recording`.
    pub fn as_str(&self) -> &'static str {
        match self {
            KernelSource::Live => "kernel",
            KernelSource::Files => "files",
            KernelSource::Recorded(_) => "recording",
            #[cfg(test)]
            KernelSource::Recording(_) => "kernel",
        }
    }

    /// A connection for `protocol`: a socket, or the recording's replay.
    pub fn open(&self, protocol: isize) -> Result<NodeConn, NlError> {
        match self {
            KernelSource::Live => Ok(NodeConn::Socket(Socket::open(protocol)?)),
            KernelSource::Files => Err(NlError::NotRecorded(
                "this host root has no kernel to ask and no netlink recording".into(),
            )),
            KernelSource::Recorded(dir) => Ok(NodeConn::Replay(Replay::load(&recording_file(dir, protocol))?)),
            #[cfg(test)]
            KernelSource::Recording(log) => Ok(NodeConn::Recording(super::record::Recorder::new(
                Socket::open(protocol)?,
                log.clone(),
                protocol,
            ))),
        }
    }
}

/// `<dir>/netfilter.txt` for NETLINK_NETFILTER, `<dir>/route.txt` for NETLINK_ROUTE.
pub fn recording_file(dir: &Path, protocol: isize) -> PathBuf {
    dir.join(format!("{}.txt", protocol_name(protocol)))
}

pub fn protocol_name(protocol: isize) -> String {
    match protocol {
        super::NETLINK_NETFILTER => "netfilter".into(),
        NETLINK_ROUTE => "route".into(),
        p => format!("protocol-{p}"),
    }
}

/// The connection a probe gets from its host's [`KernelSource`].
pub enum NodeConn {
    Socket(Socket),
    Replay(Replay),
    #[cfg(test)]
    Recording(super::record::Recorder),
}

impl Conn for NodeConn {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError> {
        match self {
            NodeConn::Socket(s) => s.send(msg),
            NodeConn::Replay(r) => r.send(msg),
            #[cfg(test)]
            NodeConn::Recording(r) => r.send(msg),
        }
    }

    fn recv(&mut self, deadline: Instant) -> Result<&[u8], NlError> {
        match self {
            NodeConn::Socket(s) => s.recv(deadline),
            NodeConn::Replay(r) => r.recv(deadline),
            #[cfg(test)]
            NodeConn::Recording(r) => r.recv(deadline),
        }
    }
}

/// One recorded exchange: the request (seq and pid zeroed) and its answer's datagrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub request: Vec<u8>,
    pub replies: Vec<Vec<u8>>,
}

/// Sets the seq and pid of every message in `buf` (a request or a datagram).
pub fn stamp(buf: &mut [u8], seq: u32) {
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
        buf[at + 8..at + 12].copy_from_slice(&seq.to_ne_bytes());
        buf[at + 12..at + 16].copy_from_slice(&0u32.to_ne_bytes());
        if len < NLMSG_HDRLEN {
            break;
        }
        at += (len + 3) & !3;
    }
}

/// A request as its recording names it: type, flags and the bytes after the header.
pub fn describe(request: &[u8]) -> String {
    match messages(request).next() {
        Some(Ok(m)) => format!(
            "type {:#06x} flags {:#06x} payload {}",
            m.ty,
            m.flags,
            hex(&m.payload[..m.payload.len().min(64)])
        ),
        _ => format!("{} bytes {}", request.len(), hex(&request[..request.len().min(64)])),
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// The exchanges of a recording's text; a line that is not one is an error with its number.
pub fn parse(text: &str) -> Result<Vec<Exchange>, String> {
    let mut out: Vec<Exchange> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}", i + 1);
        let (mark, body) = line.split_at(line.chars().next().map_or(0, char::len_utf8));
        let bytes = unhex(body.trim()).ok_or_else(|| bad("not hex"))?;
        match mark {
            ">" => out.push(Exchange {
                request: bytes,
                replies: Vec::new(),
            }),
            "<" => out
                .last_mut()
                .ok_or_else(|| bad("a reply before any request"))?
                .replies
                .push(bytes),
            _ => return Err(bad("neither '>' (a request) nor '<' (a reply)")),
        }
    }
    Ok(out)
}

/// The text of a recording (what [`parse`] reads).
pub fn format(header: &str, exchanges: &[Exchange]) -> String {
    let mut s = String::new();
    for l in header.lines() {
        s.push_str(&format!("# {l}\n"));
    }
    for e in exchanges {
        s.push_str(&format!("\n> {}\n", hex(&e.request)));
        for r in &e.replies {
            s.push_str(&format!("< {}\n", hex(r)));
        }
    }
    s
}

/// A connection that answers from a recording.
pub struct Replay {
    file: Arc<str>,
    exchanges: Arc<Vec<Exchange>>,
    /// The answer being read: its datagrams, the next one, the request's seq.
    answer: Option<(usize, usize, u32)>,
    current: Vec<u8>,
}

/// Recordings are small (a test namespace's tables); this bounds what a bad one costs.
const MAX_RECORDING_BYTES: u64 = 16 << 20;

impl Replay {
    pub fn load(path: &Path) -> Result<Replay, NlError> {
        let shown = path.display().to_string();
        let refuse = |why: String| NlError::NotRecorded(format!("{shown}: {why}"));
        let meta = std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
        if meta.len() > MAX_RECORDING_BYTES {
            return Err(refuse(format!("larger than {MAX_RECORDING_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
        Ok(Replay::new(&shown, parse(&text).map_err(refuse)?))
    }

    pub fn new(file: &str, exchanges: Vec<Exchange>) -> Replay {
        Replay {
            file: file.into(),
            exchanges: Arc::new(exchanges),
            answer: None,
            current: Vec::new(),
        }
    }
}

impl Conn for Replay {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError> {
        let seq = messages(msg).next().and_then(|m| m.ok()).map_or(0, |m| m.seq);
        let mut key = msg.to_vec();
        stamp(&mut key, 0);
        match self.exchanges.iter().position(|e| e.request == key) {
            Some(i) => {
                self.answer = Some((i, 0, seq));
                Ok(())
            }
            None => {
                self.answer = None;
                Err(NlError::NotRecorded(format!(
                    "{}: no recorded answer to the request {}",
                    self.file,
                    describe(&key)
                )))
            }
        }
    }

    fn recv(&mut self, _deadline: Instant) -> Result<&[u8], NlError> {
        let Some((i, next, seq)) = self.answer else {
            return Err(NlError::NotRecorded(format!(
                "{}: a read with no request sent",
                self.file
            )));
        };
        let exchange = &self.exchanges[i];
        let Some(datagram) = exchange.replies.get(next) else {
            return Err(NlError::NotRecorded(format!(
                "{}: the recorded answer to the request {} ends before the reader does",
                self.file,
                describe(&exchange.request)
            )));
        };
        self.current.clear();
        self.current.extend_from_slice(datagram);
        stamp(&mut self.current, seq);
        self.answer = Some((i, next + 1, seq));
        Ok(&self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{done, msg};
    use super::super::{Request, Session, NLM_F_DUMP, NLM_F_REQUEST};
    use super::*;

    fn request(ty: u16) -> Vec<u8> {
        let mut r = Request::new(ty, NLM_F_REQUEST | NLM_F_DUMP, 2);
        let mut b = r.bytes(0).to_vec();
        stamp(&mut b, 0);
        b
    }

    #[test]
    fn the_text_round_trips() {
        let ex = vec![Exchange {
            request: request(0x0a01),
            replies: vec![msg(0x0a00, 2, 0, &[2, 0, 0, 0]), done(0)],
        }];
        let text = format("a recording\nof one exchange", &ex);
        assert!(text.starts_with("# a recording\n# of one exchange\n\n> "), "{text}");
        assert_eq!(parse(&text).unwrap(), ex);
        assert_eq!(parse("< 00").unwrap_err(), "line 1: a reply before any request");
        assert_eq!(parse("> 0g").unwrap_err(), "line 1: not hex");
        assert!(parse("x 00").unwrap_err().contains("neither"));
        // A line whose mark is a multi-byte character: an error, not a panic (found by
        // fuzz/fuzz_targets/netlink_replay.rs; split_at(1) cut inside the character).
        assert!(parse("\u{e9}00").unwrap_err().contains("neither"));
        assert_eq!(parse("> 00\n\u{e9}< 00").unwrap_err(), "line 2: not hex");
    }

    #[test]
    fn a_replay_answers_with_the_requests_seq() {
        let ex = vec![Exchange {
            request: request(0x0a01),
            replies: vec![msg(0x0a00, 2, 0, &[2, 0, 0, 0]), done(0)],
        }];
        let mut s = Session::new(Replay::new("t", ex), Instant::now());
        let mut seen = Vec::new();
        // Session numbers its first request 1: the recorded seq 0 is rewritten to it.
        s.dump(&mut Request::new(0x0a01, NLM_F_REQUEST | NLM_F_DUMP, 2), |p| {
            seen.push(p.ty);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![0x0a00]);
    }

    #[test]
    fn a_request_not_recorded_is_an_error_naming_it_never_an_empty_answer() {
        let mut s = Session::new(Replay::new("node/netlink/netfilter.txt", vec![]), Instant::now());
        let err = s
            .dump(&mut Request::new(0x0a01, NLM_F_REQUEST | NLM_F_DUMP, 2), |_| Ok(()))
            .unwrap_err();
        assert!(matches!(err, NlError::NotRecorded(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "not in the netlink recording: node/netlink/netfilter.txt: no recorded answer to the \
             request type 0x0a01 flags 0x0301 payload 02000000"
        );
    }

    #[test]
    fn a_cut_recording_is_an_error_not_the_end_of_the_dump() {
        let ex = vec![Exchange {
            request: request(0x0a01),
            replies: vec![msg(0x0a00, 2, 0, &[2, 0, 0, 0])],
        }];
        let mut s = Session::new(Replay::new("t", ex), Instant::now());
        let err = s
            .dump(&mut Request::new(0x0a01, NLM_F_REQUEST | NLM_F_DUMP, 2), |_| Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("ends before the reader does"), "{err}");
    }

    #[test]
    fn the_source_of_a_root() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(KernelSource::of(Path::new("/")).as_str(), "kernel");
        assert_eq!(KernelSource::of(dir.path()).as_str(), "files");
        assert!(!KernelSource::of(dir.path()).netlink());
        std::fs::create_dir(dir.path().join("netlink")).unwrap();
        let recorded = KernelSource::of(dir.path());
        assert_eq!(recorded.as_str(), "recording");
        // No file for the protocol: a clear error, not an empty kernel.
        let err = recorded.open(super::super::NETLINK_NETFILTER).err().unwrap();
        assert!(err.to_string().contains("netfilter.txt"), "{err}");
    }
}
