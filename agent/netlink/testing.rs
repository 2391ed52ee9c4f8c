//! A scripted kernel for the readers' tests: each request gets the
//! datagrams a closure returns.
use super::*;
use std::collections::VecDeque;

/// A message as the kernel would send it.
pub fn msg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(payload);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

/// An attribute with `value`.
pub fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(value);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

pub fn nested(kind: u16, inner: &[Vec<u8>]) -> Vec<u8> {
    attr(kind | NLA_F_NESTED, &inner.concat())
}

pub fn string(kind: u16, s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    attr(kind, &v)
}

pub fn be32(kind: u16, v: u32) -> Vec<u8> {
    attr(kind, &v.to_be_bytes())
}

/// nfgenmsg + attributes.
pub fn nfgen_payload(family: u8, res_id: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut p = vec![family, 0];
    p.extend_from_slice(&res_id.to_be_bytes());
    p.extend_from_slice(&attrs.concat());
    p
}

pub fn done(seq: u32) -> Vec<u8> {
    msg(NLMSG_DONE, NLM_F_MULTI, seq, &0i32.to_ne_bytes())
}

pub fn error(seq: u32, errno: i32) -> Vec<u8> {
    let mut p = (-errno).to_ne_bytes().to_vec();
    p.extend_from_slice(&[0; 16]);
    msg(NLMSG_ERROR, 0, seq, &p)
}

/// A decoded request: type, flags, seq, nfgenmsg family and its attributes as (type, bytes).
pub struct Sent {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub family: u8,
    pub attrs: Vec<(u16, Vec<u8>)>,
}

impl Sent {
    pub fn str_attr(&self, kind: u16) -> Option<String> {
        self.attrs
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, v)| String::from_utf8_lossy(v.split(|b| *b == 0).next().unwrap_or(&[])).into_owned())
    }
}

type Script = Box<dyn FnMut(&Sent) -> Vec<Result<Vec<u8>, NlError>>>;

/// A connection whose answers come from `script`, one call per request.
pub struct Fake {
    script: Script,
    queue: VecDeque<Result<Vec<u8>, NlError>>,
    current: Vec<u8>,
}

impl Fake {
    pub fn new(script: impl FnMut(&Sent) -> Vec<Result<Vec<u8>, NlError>> + 'static) -> Self {
        Fake {
            script: Box::new(script),
            queue: VecDeque::new(),
            current: Vec::new(),
        }
    }
}

impl Conn for Fake {
    fn send(&mut self, m: &[u8]) -> Result<(), NlError> {
        let msg = messages(m).next().unwrap().unwrap();
        let (family, _, a) = nfgen(msg.payload).unwrap();
        let sent = Sent {
            ty: msg.ty,
            flags: msg.flags,
            seq: msg.seq,
            family,
            attrs: a.map(|a| a.unwrap()).map(|a| (a.kind, a.value.to_vec())).collect(),
        };
        let answers = (self.script)(&sent);
        self.queue.extend(answers);
        Ok(())
    }

    fn recv(&mut self, _deadline: Instant) -> Result<&[u8], NlError> {
        match self.queue.pop_front() {
            Some(Ok(d)) => {
                self.current = d;
                Ok(&self.current)
            }
            Some(Err(e)) => Err(e),
            None => Err(NlError::Timeout),
        }
    }
}
