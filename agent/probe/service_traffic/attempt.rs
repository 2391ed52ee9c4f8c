//! The tries themselves: a TCP connect, a DNS query over UDP or TCP, each
//! under its own deadline, a failure named exactly.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

async fn connect_tcp(to: SocketAddr, timeout: Duration) -> (Outcome, Option<tokio::net::TcpStream>) {
    let prepared = (|| {
        let src = source_for(to)?;
        let sock = if to.is_ipv6() {
            tokio::net::TcpSocket::new_v6()?
        } else {
            tokio::net::TcpSocket::new_v4()?
        };
        sock.bind(SocketAddr::new(src, 0))?;
        let local = sock.local_addr()?;
        Ok::<_, std::io::Error>((sock, local))
    })();
    let (sock, local) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let (kind, d) = failure(&e);
            return (Outcome::fail(kind, d), None);
        }
    };
    let started = Instant::now();
    let mut o = Outcome {
        source: Some(local),
        ..Outcome::default()
    };
    match tokio::time::timeout(timeout, sock.connect(to)).await {
        Ok(Ok(stream)) => {
            o.result = "ok";
            o.seconds = Some(started.elapsed().as_secs_f64());
            (o, Some(stream))
        }
        Ok(Err(e)) => {
            let (kind, d) = failure(&e);
            (
                Outcome {
                    result: kind,
                    detail: Some(d),
                    ..o
                },
                None,
            )
        }
        Err(_) => (
            Outcome {
                result: "timeout",
                detail: Some(format!("no connection within {timeout:?}")),
                ..o
            },
            None,
        ),
    }
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

async fn dns_udp(to: SocketAddr, name: &str, id: u16, timeout: Duration) -> Outcome {
    let query = match dns::query(id, name, false) {
        Ok(q) => q,
        Err(e) => return Outcome::fail("error", e.to_string()),
    };
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let sock = match tokio::net::UdpSocket::bind(any).await {
        Ok(s) => s,
        Err(e) => return Outcome::fail(failure(&e).0, e.to_string()),
    };
    if let Err(e) = sock.connect(to).await {
        let (k, d) = failure(&e);
        return Outcome::fail(k, d);
    }
    let mut o = Outcome {
        source: sock.local_addr().ok(),
        ..Outcome::default()
    };
    let started = Instant::now();
    let exchange = async {
        sock.send(&query).await?;
        let mut buf = vec![0u8; 1232];
        let n = sock.recv(&mut buf).await?;
        buf.truncate(n);
        Ok::<_, std::io::Error>(buf)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(msg)) => {
            let t = started.elapsed().as_secs_f64();
            (o.seconds, o.answer_seconds) = (Some(t), Some(t));
            judge_answer(&mut o, id, &msg);
        }
        Ok(Err(e)) => (o.result, o.detail) = (failure(&e).0, Some(e.to_string())),
        Err(_) => (o.result, o.detail) = ("timeout", Some(format!("no answer within {timeout:?}"))),
    }
    o
}

async fn dns_tcp(to: SocketAddr, name: &str, id: u16, timeout: Duration) -> Outcome {
    let query = match dns::query(id, name, false) {
        Ok(q) => q,
        Err(e) => return Outcome::fail("error", e.to_string()),
    };
    let started = Instant::now();
    let (mut o, stream) = connect_tcp(to, timeout).await;
    let Some(mut stream) = stream else { return o };
    let left = timeout.saturating_sub(started.elapsed());
    let asked = Instant::now();
    let exchange = async {
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        stream.write_all(&framed).await?;
        let len = stream.read_u16().await?;
        let mut msg = vec![0u8; usize::from(len)];
        stream.read_exact(&mut msg).await?;
        Ok::<_, std::io::Error>(msg)
    };
    match tokio::time::timeout(left, exchange).await {
        Ok(Ok(msg)) => {
            o.answer_seconds = Some(asked.elapsed().as_secs_f64());
            judge_answer(&mut o, id, &msg);
        }
        Ok(Err(e)) => (o.result, o.detail) = (failure(&e).0, Some(format!("after connecting: {e}"))),
        Err(_) => (o.result, o.detail) = ("timeout", Some(format!("connected, no answer within {timeout:?}"))),
    }
    o
}

pub(super) async fn attempt(p: &Plan, s: &Settings, id: u16) -> Outcome {
    let Some(svc) = p.svc else {
        return Outcome::fail("not_in_rules", format!("{} is not in kube-proxy's rules", p.target));
    };
    // A NodePort: on the node's own address, the one its route to the Service's ClusterIP takes.
    let address = match p.via.filter(|_| svc.is_node_port()) {
        Some(via) => match source_for(SocketAddr::new(via, svc.port)) {
            Ok(a) => a,
            Err(e) => {
                let (k, d) = failure(&e);
                return Outcome::fail(k, format!("the node's own address toward {via}: {d}"));
            }
        },
        None => svc.address,
    };
    let to = SocketAddr::new(address, svc.port);
    let name = format!("kubernetes.default.svc.{}", s.cluster_domain.trim_matches('.'));
    let o = match (p.dns, svc.protocol) {
        (true, 17) => dns_udp(to, &name, id, s.try_timeout).await,
        (true, _) => dns_tcp(to, &name, id, s.try_timeout).await,
        (false, _) => connect_tcp(to, s.try_timeout).await.0,
    };
    Outcome { dest: Some(to), ..o }
}
