//! The tries themselves: a TCP connect, a DNS query over UDP or TCP, each
//! under its own deadline, a failure named exactly.
//!
//! All of a run's tries go at once through one poll(2) loop on the probe's
//! blocking thread: a non-blocking socket each, and a table of where each try
//! is. No runtime reactor, timer or future per try, and one blocking call per
//! run instead of three hops between the runtime's threads: 1.87–1.95 ms of CPU
//! per run of 23 tries against 2.07–2.16 (docs/benchmarks.md, issue 37; the
//! memory the tries cost was glibc's per-thread caches, which the image turns
//! off). A try's time is from its connect(2), or its query's send, to the poll
//! that saw it done.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Instant;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{dns, Plan, Settings};

/// A failure's name and its detail.
fn failure(e: &std::io::Error) -> (&'static str, String) {
    use nix::errno::Errno;
    let kind = match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ECONNREFUSED) => "refused",
        Some(Errno::ETIMEDOUT) => "timeout",
        Some(Errno::EHOSTUNREACH | Errno::ENETUNREACH) => "unreachable",
        _ => "error",
    };
    (kind, e.to_string())
}

/// What a try did before the conntrack lookup.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) result: &'static str,
    pub(super) detail: Option<String>,
    pub(super) seconds: Option<f64>,
    pub(super) answer_seconds: Option<f64>,
    pub(super) source: Option<SocketAddr>,
    /// The address and port tried (a NodePort: on the node's own address).
    pub(super) dest: Option<SocketAddr>,
}

impl Outcome {
    fn fail(result: &'static str, detail: String) -> Outcome {
        Outcome {
            result,
            detail: Some(detail),
            ..Outcome::default()
        }
    }

    fn failed(&mut self, e: &std::io::Error, context: &str) {
        let (kind, d) = failure(e);
        self.result = kind;
        self.detail = Some(format!("{context}{d}"));
    }
}

/// The source address the node would use toward `to` (a route lookup: a
/// connected UDP socket sends nothing).
fn source_for(to: SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect(to)?;
    Ok(s.local_addr()?.ip())
}

/// Judges a DNS answer: ok when NOERROR with at least one answer record.
fn judge_answer(o: &mut Outcome, id: u16, msg: &[u8]) {
    match dns::answer(id, msg) {
        Ok(a) if a.rcode == 0 && (a.answers > 0 || a.truncated) => {
            o.result = "ok";
            o.detail = Some(format!(
                "NOERROR, {} answer{}",
                a.answers,
                if a.answers == 1 { "" } else { "s" }
            ));
        }
        Ok(a) if a.rcode == 0 => {
            o.result = "dns_rcode";
            o.detail = Some("NOERROR without an answer record".into());
        }
        Ok(a) => {
            o.result = "dns_rcode";
            o.detail = Some(format!("{} (rcode {})", dns::rcode_name(a.rcode), a.rcode));
        }
        Err(e) => {
            o.result = "error";
            o.detail = Some(e.to_string());
        }
    }
}

/// The largest DNS answer over UDP read (EDNS's common 1232 bytes; a longer one is cut, its
/// header still judged).
const UDP_ANSWER: usize = 1232;

/// How a try is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    DnsUdp,
    DnsTcp,
}

/// Where a try is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The TCP connect in flight.
    Connecting,
    /// DNS over UDP: the query sent, its answer awaited.
    Answer,
    /// DNS over TCP: the framed query written so far.
    Sending(usize),
    /// DNS over TCP: the answer being read (its 2-byte length first).
    Reading,
    Done,
}

/// One try in flight.
struct Live {
    sock: Socket,
    kind: Kind,
    step: Step,
    id: u16,
    /// When its connect (or its UDP query) went, and when it must be over.
    started: Instant,
    deadline: Instant,
    /// DNS over TCP: when the query went, after the connect.
    asked: Instant,
    /// The DNS query (framed with its length over TCP), then the answer read so far.
    query: Vec<u8>,
    answer: Vec<u8>,
    outcome: Outcome,
}

impl Live {
    fn finish(&mut self) {
        self.step = Step::Done;
    }

    /// What poll(2) waits for.
    fn events(&self) -> nix::poll::PollFlags {
        use nix::poll::PollFlags;
        match self.step {
            Step::Connecting | Step::Sending(_) => PollFlags::POLLOUT,
            Step::Answer | Step::Reading => PollFlags::POLLIN,
            Step::Done => PollFlags::empty(),
        }
    }

    /// The deadline passed.
    fn expire(&mut self) {
        let within = self.deadline.saturating_duration_since(self.started);
        self.outcome.result = "timeout";
        self.outcome.detail = Some(match self.step {
            Step::Connecting => format!("no connection within {within:?}"),
            Step::Answer => format!("no answer within {within:?}"),
            _ => format!("connected, no answer within {within:?}"),
        });
        self.finish();
    }

    /// Moves on after poll(2) said the socket is ready (or in error).
    fn advance(&mut self) {
        match self.step {
            Step::Connecting => match self.sock.take_error() {
                Ok(None) => {
                    self.outcome.result = "ok";
                    self.outcome.seconds = Some(self.started.elapsed().as_secs_f64());
                    if self.kind == Kind::DnsTcp {
                        self.asked = Instant::now();
                        self.step = Step::Sending(0);
                        self.advance();
                    } else {
                        self.finish();
                    }
                }
                Ok(Some(e)) | Err(e) => {
                    self.outcome.failed(&e, "");
                    self.finish();
                }
            },
            Step::Sending(sent) => match (&self.sock).write(&self.query[sent..]) {
                Ok(n) if sent + n == self.query.len() => self.step = Step::Reading,
                Ok(n) => self.step = Step::Sending(sent + n),
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.outcome.failed(&e, "after connecting: ");
                    self.finish();
                }
            },
            Step::Reading => self.read_tcp_answer(),
            Step::Answer => {
                let mut buf = [0u8; UDP_ANSWER];
                match (&self.sock).read(&mut buf) {
                    Ok(n) => {
                        let t = self.started.elapsed().as_secs_f64();
                        (self.outcome.seconds, self.outcome.answer_seconds) = (Some(t), Some(t));
                        judge_answer(&mut self.outcome, self.id, &buf[..n]);
                        self.finish();
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.outcome.failed(&e, "");
                        self.finish();
                    }
                }
            }
            Step::Done => {}
        }
    }

    /// DNS over TCP: reads what is there of the answer; judged once whole.
    fn read_tcp_answer(&mut self) {
        let mut chunk = [0u8; 512];
        loop {
            match (&self.sock).read(&mut chunk) {
                Ok(0) => {
                    let e = std::io::Error::new(ErrorKind::UnexpectedEof, "early eof");
                    self.outcome.failed(&e, "after connecting: ");
                    return self.finish();
                }
                Ok(n) => {
                    self.answer.extend_from_slice(&chunk[..n]);
                    if let [hi, lo, msg @ ..] = self.answer.as_slice() {
                        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
                        if msg.len() >= len {
                            self.outcome.answer_seconds = Some(self.asked.elapsed().as_secs_f64());
                            let msg = &msg[..len];
                            judge_answer(&mut self.outcome, self.id, msg);
                            return self.finish();
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.outcome.failed(&e, "after connecting: ");
                    return self.finish();
                }
            }
        }
    }
}

/// A socket of `to`'s family, non-blocking.
fn socket(to: SocketAddr, ty: Type, protocol: Protocol) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(to), ty, Some(protocol))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

fn in_progress(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(nix::errno::Errno::EINPROGRESS as i32) || e.kind() == ErrorKind::WouldBlock
}

/// Starts one try: its socket made, its connect (or UDP query) sent. A try that failed
/// before it had a socket is its outcome.
fn start(p: &Plan, s: &Settings, id: u16, at: Instant) -> Result<Live, Box<Outcome>> {
    let Some(svc) = p.svc else {
        return Err(Box::new(Outcome::fail(
            "not_in_rules",
            format!("{} is not in kube-proxy's rules", p.target),
        )));
    };
    // A NodePort: on the node's own address, the one its route to the Service's ClusterIP takes.
    let address = match p.via.filter(|_| svc.is_node_port()) {
        Some(via) => source_for(SocketAddr::new(via, svc.port)).map_err(|e| {
            let (k, d) = failure(&e);
            Box::new(Outcome::fail(k, format!("the node's own address toward {via}: {d}")))
        })?,
        None => svc.address,
    };
    let to = SocketAddr::new(address, svc.port);
    let kind = match (p.dns, svc.protocol) {
        (true, 17) => Kind::DnsUdp,
        (true, _) => Kind::DnsTcp,
        (false, _) => Kind::Tcp,
    };
    let mut query = Vec::new();
    if kind != Kind::Tcp {
        let name = format!("kubernetes.default.svc.{}", s.cluster_domain.trim_matches('.'));
        let q = dns::query(id, &name, false).map_err(|e| {
            Box::new(Outcome {
                dest: Some(to),
                ..Outcome::fail("error", e.to_string())
            })
        })?;
        if kind == Kind::DnsTcp {
            query.extend_from_slice(&(q.len() as u16).to_be_bytes());
        }
        query.extend_from_slice(&q);
    }
    let early = |e: std::io::Error| {
        let (k, d) = failure(&e);
        Box::new(Outcome {
            dest: Some(to),
            ..Outcome::fail(k, d)
        })
    };
    let sock = if kind == Kind::DnsUdp {
        // connect(2) binds it to the route's source address and a free port.
        let sock = socket(to, Type::DGRAM, Protocol::UDP).map_err(early)?;
        sock.connect(&SockAddr::from(to)).map_err(early)?;
        sock
    } else {
        let src = source_for(to).map_err(early)?;
        let sock = socket(to, Type::STREAM, Protocol::TCP).map_err(early)?;
        sock.bind(&SockAddr::from(SocketAddr::new(src, 0))).map_err(early)?;
        sock
    };
    let started = Instant::now();
    let mut live = Live {
        kind,
        step: if kind == Kind::DnsUdp {
            Step::Answer
        } else {
            Step::Connecting
        },
        id,
        started,
        deadline: (started + s.try_timeout).min(at.max(started)),
        asked: started,
        query,
        answer: Vec::new(),
        outcome: Outcome {
            source: sock.local_addr().ok().and_then(|a| a.as_socket()),
            dest: Some(to),
            ..Outcome::default()
        },
        sock,
    };
    let sent = match kind {
        Kind::DnsUdp => live.sock.send(&live.query).map(|_| ()),
        _ => live.sock.connect(&SockAddr::from(to)),
    };
    match sent {
        // Connected at once (a local address): done, or on to the query.
        Ok(()) if kind != Kind::DnsUdp => live.advance(),
        Ok(()) => {}
        Err(e) if in_progress(&e) => {}
        Err(e) => {
            live.outcome.failed(&e, "");
            live.finish();
        }
    }
    Ok(live)
}

/// Every plan's try, all at once, each under `s.try_timeout` (and none past `at`, the run's
/// deadline); the outcomes in the plans' order. Blocks the calling thread until the last is over.
pub(super) fn attempt_all(plans: &[Plan], s: &Settings, base_id: u16, at: Instant) -> Vec<Outcome> {
    use nix::poll::{poll, PollFd, PollTimeout};
    // A try that failed before it had a socket is its outcome, boxed (the Err of [`start`]).
    let mut tries: Vec<Result<Live, Box<Outcome>>> = plans
        .iter()
        .enumerate()
        .map(|(i, p)| start(p, s, base_id.wrapping_add(i as u16), at))
        .collect();
    loop {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for live in tries.iter_mut().filter_map(|t| t.as_mut().ok()) {
            if live.step == Step::Done {
                continue;
            }
            if live.deadline <= now {
                live.expire();
            } else {
                next = Some(next.map_or(live.deadline, |n| n.min(live.deadline)));
            }
        }
        let Some(next) = next else { break };
        let waiting: Vec<usize> = (0..tries.len())
            .filter(|&i| matches!(&tries[i], Ok(l) if l.step != Step::Done))
            .collect();
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd> = waiting
                .iter()
                .filter_map(|&i| tries[i].as_ref().ok())
                .map(|l| PollFd::new(l.sock.as_fd(), l.events()))
                .collect();
            // Rounded up, so that a wait never ends just before the deadline it waits for.
            let ms = next.saturating_duration_since(now).as_micros().div_ceil(1000);
            let timeout = PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    // poll(2) itself failed (ENOMEM): every try still in flight says so.
                    let e = std::io::Error::from(e);
                    for &i in &waiting {
                        if let Ok(l) = &mut tries[i] {
                            l.outcome.failed(&e, "waiting for the tries: ");
                            l.finish();
                        }
                    }
                    continue;
                }
            }
            fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect()
        };
        for (&i, ready) in waiting.iter().zip(ready) {
            if let (Ok(l), true) = (&mut tries[i], ready) {
                l.advance();
            }
        }
    }
    tries
        .into_iter()
        .map(|t| match t {
            Ok(live) => live.outcome,
            Err(o) => *o,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The poll loop on loopback (no root, no namespace): servers the test starts on 127.0.0.1,
    //! each try's outcome as the probe reports it. The same tries through kube-proxy-shaped
    //! rules, with conntrack, are tests/kernel/service_traffic.rs.
    use super::*;
    use crate::probe::service_endpoints::ServicePort;
    use crate::probe::service_traffic::Role;
    use std::net::{TcpListener, UdpSocket};
    use std::time::Duration;

    fn plan(port: u16, protocol: u8, dns: bool) -> Plan {
        Plan {
            target: format!("t:{port}"),
            role: Role::Target,
            svc: Some(ServicePort {
                address: "127.0.0.1".parse().unwrap(),
                port,
                protocol,
            }),
            dns,
            via: None,
        }
    }

    /// A DNS answer to `q` with one A record, as a server would send it.
    fn answer(q: &[u8]) -> Vec<u8> {
        let mut end = 12;
        while q[end] != 0 {
            end += usize::from(q[end]) + 1;
        }
        let mut a = q[..2].to_vec();
        a.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        a.extend_from_slice(&q[12..end + 5]);
        a.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 96, 0, 1]);
        a
    }

    #[test]
    fn every_kind_of_try_at_once_each_its_outcome() {
        // TCP: a listener (ok) and a port nothing listens on (refused).
        let listening = TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // DNS over UDP: a server that answers, and one that never does.
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let silent_udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let u = udp.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            if let Ok((n, peer)) = u.recv_from(&mut buf) {
                let _ = u.send_to(&answer(&buf[..n]), peer);
            }
        });
        // DNS over TCP: a server that answers in two writes, and one that accepts and says nothing.
        let tcp_dns = TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let t = tcp_dns.try_clone().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            if let Ok((mut c, _)) = t.accept() {
                let mut len = [0u8; 2];
                c.read_exact(&mut len).unwrap();
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                c.read_exact(&mut q).unwrap();
                let a = answer(&q);
                let mut framed = (a.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&a);
                c.write_all(&framed[..5]).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                c.write_all(&framed[5..]).unwrap();
            }
        });
        let port = |l: &TcpListener| l.local_addr().unwrap().port();
        let plans = [
            plan(port(&listening), 6, false),
            plan(closed, 6, false),
            plan(udp.local_addr().unwrap().port(), 17, true),
            plan(silent_udp.local_addr().unwrap().port(), 17, true),
            plan(port(&tcp_dns), 6, true),
            plan(port(&silent_tcp), 6, true),
            Plan {
                svc: None,
                ..plan(1, 6, false)
            },
        ];
        let s = Settings {
            try_timeout: Duration::from_secs(1),
            ..Settings::default()
        };
        let started = Instant::now();
        let o = attempt_all(&plans, &s, 7, started + Duration::from_secs(10));
        let seen: Vec<(&str, Option<&str>)> = o.iter().map(|o| (o.result, o.detail.as_deref())).collect();
        assert_eq!(
            seen,
            [
                ("ok", None),
                ("refused", Some("Connection refused (os error 111)")),
                ("ok", Some("NOERROR, 1 answer")),
                ("timeout", Some("no answer within 1s")),
                ("ok", Some("NOERROR, 1 answer")),
                ("timeout", Some("connected, no answer within 1s")),
                ("not_in_rules", Some("t:1 is not in kube-proxy's rules")),
            ]
        );
        // All at once: the two timeouts together took one try timeout, not two (in turn, they
        // would take 2 s at least).
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        for (i, o) in o.iter().enumerate().take(6) {
            let to = o.dest.expect("tried");
            assert_eq!(to.port(), plans[i].svc.unwrap().port, "{i}");
            assert_eq!(
                o.source.map(|s| s.ip().to_string()).as_deref(),
                Some("127.0.0.1"),
                "{i}"
            );
        }
        // Connect times for the TCP tries that connected; DNS over TCP: connect, then answer
        // (after the server's 20 ms pause between its two writes).
        assert!(o[0].seconds.is_some() && o[0].answer_seconds.is_none());
        assert!(o[2].seconds == o[2].answer_seconds && o[2].seconds.is_some());
        assert!(o[4].answer_seconds.unwrap() >= 0.02, "{:?}", o[4].answer_seconds);
        assert!(o[5].seconds.is_some(), "connected before it timed out");
    }

    #[test]
    fn no_try_outlives_the_runs_deadline() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = Settings {
            try_timeout: Duration::from_secs(30),
            ..Settings::default()
        };
        let at = Instant::now() + Duration::from_millis(100);
        let o = attempt_all(&[plan(silent.local_addr().unwrap().port(), 17, true)], &s, 1, at);
        assert_eq!(o[0].result, "timeout");
        assert!(
            Instant::now() < at + Duration::from_secs(5),
            "cut at the run's deadline"
        );
        let detail = o[0].detail.as_deref().unwrap();
        assert!(
            detail.starts_with("no answer within ") && !detail.ends_with("30s"),
            "{detail}"
        );
    }
}
