//! The listener's protections on the real binary (issue 16): clients that
//! pipeline requests and never read cannot hold it, one address cannot take
//! every connection, `/healthz` answers while the caps are reached, the
//! warning about it is rate-limited; the Host header is checked (DNS
//! rebinding); every response says nosniff and no-store; the bearer token is
//! re-read when its file changes.
//!
//! Clients come from several loopback addresses (127.0.0.2, .3, ...) so that
//! the per-address cap and the total cap can be told apart. Knobs the fix
//! added are passed as environment variables: an agent without them ignores
//! them, so the tests also run (and fail for the right reason) against it.
use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// An agent this test started (common::Agent: stopped by its PID on drop), with an empty PATH.
struct Agent {
    agent: common::Agent,
    port: u16,
    _path: tempfile::TempDir,
}

impl Agent {
    fn log_text(&self) -> String {
        self.agent.log()
    }

    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.agent.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Agent {
    start_with_token(args, env, "")
}

/// Starts an agent and waits for its first snapshot, asking with `token` when not empty.
fn start_with_token(args: &[&str], env: &[(&str, &str)], token: &str) -> Agent {
    let path = tempfile::tempdir().unwrap();
    let mut serve = common::Serve::new()
        .env_clear()
        .env("PATH", path.path())
        .arg("--host-root")
        .arg(common::fixtures().join("nodes/healthy-iptables"))
        .args(common::NO_KUBE_PROXY)
        .args(args);
    for (k, v) in env {
        serve = serve.env(k, v);
    }
    if !token.is_empty() {
        serve = serve.bearer_token(token);
    }
    let agent = serve.start();
    Agent {
        port: agent.port(),
        agent,
        _path: path,
    }
}

/// A connection to the agent from `from` (a loopback address) or the default source.
fn connect(from: Option<Ipv4Addr>, port: u16, small_window: bool) -> std::io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect(("127.0.0.1", port));
    };
    // std cannot bind before connect; tokio's TcpSocket can, on a throwaway runtime.
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        if small_window {
            s.set_recv_buffer_size(4096)?;
        }
        s.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
        let stream = s.connect(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        let std = stream.into_std()?;
        std.set_nonblocking(false)?;
        Ok(std)
    })
}

/// One GET on a fresh connection; the whole response, or why there is none.
fn get(from: Option<Ipv4Addr>, port: u16, path: &str, host: &str) -> Result<String, String> {
    get_with(from, port, path, host, "")
}

/// `get` with extra header lines (each ending in CRLF).
fn get_with(from: Option<Ipv4Addr>, port: u16, path: &str, host: &str, headers: &str) -> Result<String, String> {
    let mut s = connect(from, port, false).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    if buf.is_empty() {
        return Err("closed without a response".into());
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Opens a connection that pipelines `requests` GETs of `path` and never reads.
fn stalled(from: Ipv4Addr, port: u16, path: &str, requests: usize) -> Option<TcpStream> {
    let mut s = connect(Some(from), port, true).ok()?;
    let one = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let all = one.repeat(requests);
    // Non-blocking: what the kernel does not take now is simply not sent.
    s.set_nonblocking(true).ok()?;
    let _ = s.write(all.as_bytes());
    Some(s)
}

/// Established TCP connections whose local port is `port`: the agent's side.
fn server_side_established(port: u16) -> usize {
    let mut n = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && *state == "01" {
                n += 1;
            }
        }
    }
    n
}

/// Pages of memory the kernel holds for TCP buffers (all sockets of this network namespace).
fn tcp_memory_pages() -> u64 {
    std::fs::read_to_string("/proc/net/sockstat")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("TCP:"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "mem").nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What became of a stalled connection once read: closed by the server (EOF or
/// reset, after whatever responses were already delivered), or still open.
fn closed_by_server(s: &mut TcpStream) -> Result<&'static str, String> {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok("eof"),
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok("reset"),
            Err(e) => return Err(format!("still open: {e}")),
        }
    }
}

fn healthz_ok(from: Option<Ipv4Addr>, port: u16) -> Result<(), String> {
    let r = get(from, port, "/healthz", "127.0.0.1")?;
    if r.starts_with("HTTP/1.1 200") && r.ends_with("ok\n") {
        Ok(())
    } else {
        Err(format!("unexpected response: {:?}", r.lines().next()))
    }
}

#[test]
fn pipelining_clients_that_never_read_cannot_starve_healthz_and_are_cut_off() {
    let stall = Duration::from_secs(2);
    let agent = start(
        &[],
        &[
            ("PROXYWATCH_WEB_WRITE_STALL_TIMEOUT", "2s"),
            ("PROXYWATCH_LOG_LEVEL", "info"),
        ],
    );
    let port = agent.port;
    let rss_before = agent.rss_kib();
    // 300 connections from three addresses (100 each: under the per-address cap,
    // over the total cap of 256), each pipelining 300 GET /snapshot and reading nothing.
    let t0 = Instant::now();
    let mut conns: Vec<TcpStream> = Vec::new();
    for i in 0..300u16 {
        let from = Ipv4Addr::new(127, 0, 0, 2 + (i % 3) as u8);
        if let Some(s) = stalled(from, port, "/snapshot", 2000) {
            conns.push(s);
        }
    }
    let opened = t0.elapsed();
    assert_eq!(conns.len(), 300, "could not open 300 connections");

    // A fresh client asks /healthz every 100 ms until the agent has closed every
    // stalled connection (and a second more); every one must be answered.
    let mut asked = 0;
    let mut failures = Vec::new();
    let mut peak = 0;
    let mut peak_tcp_pages = 0;
    let mut all_closed_at = None;
    let deadline = Instant::now() + stall * 10;
    loop {
        let established = server_side_established(port);
        peak = peak.max(established);
        peak_tcp_pages = peak_tcp_pages.max(tcp_memory_pages());
        asked += 1;
        if let Err(e) = healthz_ok(None, port) {
            failures.push(format!("{:?} after the attack began: {e}", t0.elapsed()));
        }
        match all_closed_at {
            None if established == 0 => all_closed_at = Some(t0.elapsed()),
            Some(at) if t0.elapsed() > at + Duration::from_secs(1) => break,
            _ => {}
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_during = agent.rss_kib();
    println!(
        "300 stalled connections opened in {opened:?}; agent side peak {peak} established; \
         /healthz asked {asked} times, {} failed; all closed {all_closed_at:?} after the attack began; \
         RSS {rss_before} -> {rss_during} KiB; kernel TCP memory peak {} MiB (whole machine)",
        failures.len(),
        peak_tcp_pages * 4 / 1024
    );
    assert!(
        failures.is_empty(),
        "/healthz failed {} of {asked} times while the caps were reached: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        peak >= 250,
        "the attack never reached the cap (peak {peak} connections)"
    );
    let closed_after = all_closed_at.unwrap_or_else(|| {
        panic!(
            "{} stalled connections still open {:?} after the attack began",
            server_side_established(port),
            t0.elapsed()
        )
    });
    // Not a timing assertion on the exact value: closed by the stall timer, not by chance.
    assert!(
        closed_after >= stall,
        "closed before the stall timeout: {closed_after:?}"
    );
    // From the clients' side too: every stalled connection was closed by the agent.
    let mut outcomes = std::collections::BTreeMap::new();
    for s in &mut conns {
        let o = closed_by_server(s).unwrap_or_else(|e| panic!("a stalled connection: {e}"));
        *outcomes.entry(o).or_insert(0) += 1;
    }
    println!("stalled connections, as their clients saw the end: {outcomes:?}");
    // The agent still serves normally afterwards.
    let r = get(None, port, "/metrics", "127.0.0.1").unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{}", r.lines().next().unwrap_or(""));
    // The cap was logged, and rate-limited: one warning for the whole burst.
    let log = agent.log_text();
    let warnings = log.lines().filter(|l| l.contains("connection limit reached")).count();
    assert!((1..=2).contains(&warnings), "{warnings} cap warnings:\n{log}");
}

/// Status line of a response.
fn status(r: &str) -> &str {
    r.lines().next().unwrap_or("")
}

#[test]
fn one_address_cannot_take_every_connection() {
    let agent = start(&["--web.max-connections-per-address", "8", "--log.level", "info"], &[]);
    let port = agent.port;
    let a = Ipv4Addr::new(127, 0, 0, 2);
    let b = Ipv4Addr::new(127, 0, 0, 3);
    // 127.0.0.2 holds its 8 regular connections (stalled), then 30 more.
    let held: Vec<TcpStream> = (0..8).filter_map(|_| stalled(a, port, "/snapshot", 2000)).collect();
    assert_eq!(held.len(), 8);
    let wait = Instant::now() + Duration::from_secs(10);
    while server_side_established(port) < 8 && Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its next connection is a reserved one: /healthz only.
    let r = get(Some(a), port, "/metrics", "127.0.0.1").unwrap();
    assert!(status(&r).starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.contains("may only ask /healthz"), "{r}");
    healthz_ok(Some(a), port).unwrap();
    let extra: Vec<TcpStream> = (0..30).filter_map(|_| connect(Some(a), port, false).ok()).collect();
    // Another address is not affected.
    let r = get(Some(b), port, "/metrics", "127.0.0.1").unwrap();
    assert!(status(&r).starts_with("HTTP/1.1 200"), "{}", status(&r));
    healthz_ok(Some(b), port).unwrap();
    drop(extra);
    let log = agent.log_text();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("connection limit reached")).collect();
    assert_eq!(warnings.len(), 1, "rate-limited to one:\n{log}");
    assert!(
        warnings[0].contains("--web.max-connections-per-address"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("peer=127.0.0.2"), "{}", warnings[0]);
}

#[test]
fn host_header_is_checked_against_dns_rebinding() {
    let agent = start(
        &[
            "--node-name",
            "node-7",
            "--web.allowed-hosts",
            "metrics.example.com,other",
        ],
        &[],
    );
    let port = agent.port;
    for (host, want) in [
        ("127.0.0.1:9877", "200"),
        ("[::1]:9877", "200"),
        ("localhost", "200"),
        ("node-7", "200"),
        ("NODE-7.:9877", "200"),
        ("metrics.example.com", "200"),
        ("evil.example", "421"),
        ("evil.example:9877", "421"),
        ("node-7.evil.example", "421"),
        ("bad host", "400"),
    ] {
        for path in ["/metrics", "/snapshot", "/findings", "/readyz", "/"] {
            let r = get(None, port, path, host).unwrap();
            assert!(
                status(&r).starts_with(&format!("HTTP/1.1 {want}")),
                "Host {host:?} {path}: {}",
                status(&r)
            );
        }
    }
    // /healthz answers whatever the Host: it reveals nothing and the kubelet must reach it.
    let r = get(None, port, "/healthz", "evil.example").unwrap();
    assert!(status(&r).starts_with("HTTP/1.1 200"), "{}", status(&r));
    // HTTP/1.0 without a Host (not a browser) is served.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.0 200"), "{}", status(&out));
}

#[test]
fn every_response_says_nosniff_and_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let agent = start_with_token(&["--web.bearer-token-file", token.to_str().unwrap()], &[], "t0ken");
    let port = agent.port;
    let cases = [
        ("GET /healthz", "", "200"),
        ("GET /metrics", "Authorization: Bearer t0ken\r\n", "200"),
        ("GET /snapshot", "Authorization: Bearer t0ken\r\n", "200"),
        ("GET /", "Authorization: Bearer t0ken\r\nAccept: text/html\r\n", "200"),
        ("GET /metrics", "", "401"),
        ("GET /nope", "Authorization: Bearer t0ken\r\n", "404"),
        (
            "POST /metrics",
            "Authorization: Bearer t0ken\r\nContent-Length: 0\r\n",
            "405",
        ),
        (
            "GET /metrics",
            "Authorization: Bearer t0ken\r\nContent-Length: 1\r\n",
            "413",
        ),
    ];
    for (line, headers, want) in cases {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let req = format!("{line} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out).to_ascii_lowercase();
        let head = out.split("\r\n\r\n").next().unwrap_or("");
        assert!(head.starts_with(&format!("http/1.1 {want}")), "{line}: {head}");
        assert!(head.contains("\r\nx-content-type-options: nosniff"), "{line}: {head}");
        assert!(head.contains("\r\ncache-control: no-store"), "{line}: {head}");
    }
    let r = get(None, port, "/metrics", "evil.example").unwrap();
    assert!(status(&r).starts_with("HTTP/1.1 421"));
    assert!(r.to_ascii_lowercase().contains("cache-control: no-store"), "{r}");
}

/// GET /metrics with an Authorization header; the status code.
fn with_auth(port: u16, auth: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: {auth}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn bearer_token_rotation_needs_no_restart() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let agent = start_with_token(
        &["--web.bearer-token-file", token.to_str().unwrap()],
        &[],
        "first-token",
    );
    let port = agent.port;
    assert_eq!(with_auth(port, "Bearer first-token"), 200);
    // The scheme is case-insensitive (RFC 7235); the token is not.
    assert_eq!(with_auth(port, "bearer first-token"), 200);
    assert_eq!(with_auth(port, "BEARER first-token"), 200);
    assert_eq!(with_auth(port, "Bearer FIRST-TOKEN"), 401);
    // Rotate the way a Secret volume does: a new file renamed over the old one.
    let next = dir.path().join("token.new");
    std::fs::write(&next, "second-token\n").unwrap();
    std::fs::rename(&next, &token).unwrap();
    let rotated = Instant::now();
    let deadline = rotated + Duration::from_secs(10);
    while with_auth(port, "Bearer second-token") != 200 {
        assert!(Instant::now() < deadline, "the new token was not taken within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("new token in force {:?} after the rotation", rotated.elapsed());
    assert_eq!(with_auth(port, "Bearer first-token"), 401, "the old token is refused");
    // A rotation caught half-way (the file gone) keeps the last good token.
    std::fs::remove_file(&token).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(with_auth(port, "Bearer second-token"), 200);
    assert_eq!(with_auth(port, "Bearer "), 401);
    assert!(agent.log_text().contains("the previous token stays in force"));
}
