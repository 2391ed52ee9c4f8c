//! `--web.max-connection-age` as a kept-alive scraper sees it (issue 28): the
//! real binary on a fixture node (`--web.max-connection-age 2s`), and a
//! client that keeps one connection alive and sends a request every second,
//! the way a curl loop or Python's http.client does: it reconnects only when
//! the server said `Connection: close` (or the connection is gone). Across
//! several ages, every request must get its answer: an aged connection says
//! `Connection: close` on its next response and is closed after it, never
//! while a request is on its way (which the client would see as EOF instead
//! of an answer, Python's `RemoteDisconnected`).
use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One answer on a kept-alive connection: its status and whether it said `Connection: close`.
fn exchange(reader: &mut BufReader<TcpStream>, host: &str, path: &str) -> Result<(u16, bool), String> {
    reader
        .get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut status = String::new();
    match reader.read_line(&mut status) {
        Ok(0) => return Err("EOF instead of an answer".into()),
        Ok(_) => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("status line {status:?}"))?;
    let (mut len, mut close) = (None, false);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| format!("headers: {e}"))?;
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
        if line.starts_with("connection:") && line.contains("close") {
            close = true;
        }
    }
    let len = len.ok_or("no Content-Length")?;
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).map_err(|e| format!("body: {e}"))?;
    Ok((code, close))
}

#[test]
fn a_kept_alive_client_gets_every_answer_across_connection_ages() {
    let agent = common::Serve::new()
        .args(["--host-root"])
        .arg(common::fixtures().join("nodes/healthy-iptables"))
        .args(common::NO_KUBE_PROXY)
        .args(["--web.max-connection-age", "2s"])
        .start();
    let addr = agent.addr();
    let host = addr.to_string();
    let connect = || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        BufReader::new(s)
    };
    // 9 s at one request a second: four ages of 2 s, each request landing at
    // a different point of its connection's life (on a shared CPU the second
    // is not exact, which only moves the points).
    let mut conn = connect();
    let (mut answered, mut connections, mut closes) = (0, 1, 0);
    let mut failures = Vec::new();
    let started = Instant::now();
    for i in 0..10 {
        let path = if i % 2 == 0 { "/metrics" } else { "/snapshot" };
        match exchange(&mut conn, &host, path) {
            Ok((200, close)) => {
                answered += 1;
                if close {
                    closes += 1;
                    // Closed after the answer that said so: EOF now, not later.
                    let mut rest = Vec::new();
                    let n = conn.read_to_end(&mut rest).unwrap_or(0);
                    assert_eq!(n, 0, "bytes after the last answer of a closed connection");
                    conn = connect();
                    connections += 1;
                }
            }
            Ok((code, _)) => failures.push(format!("request {i} at {:?}: HTTP {code}", started.elapsed())),
            Err(e) => {
                failures.push(format!("request {i} at {:?}: {e}", started.elapsed()));
                conn = connect();
                connections += 1;
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "10 requests in {:?}: {answered} answered, {closes} said Connection: close, {connections} connections",
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "requests without an answer:\n{}\n{}",
        failures.join("\n"),
        agent.log()
    );
    // At one request a second and an age of 2 s, each connection carries a few
    // requests and the client moved through several ages.
    assert!(
        closes >= 3,
        "{closes} answers said Connection: close in 10 s at a 2 s age"
    );
    agent.assert_running();
}
