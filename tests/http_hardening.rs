//! The listener on the real binary: slow clients cut off, methods, bearer
//! token, and a graceful exit on SIGTERM.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Agent, Serve};

fn start(extra: &[&str]) -> Agent {
    let node = common::fixtures().join("nodes/healthy-iptables");
    let empty = tempfile::tempdir().unwrap();
    Serve::new()
        .env_clear()
        .env("PATH", empty.path())
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(extra)
        // Wait for the first snapshot (the token header is ignored when no token is set).
        .bearer_token("pw-test-token")
        .start()
}

#[test]
fn slow_client_is_cut_off_by_the_header_timeout() {
    let agent = start(&["--web.header-read-timeout", "500ms"]);
    let mut s = TcpStream::connect(agent.addr()).unwrap();
    // Half a request line, then silence: a slowloris client.
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let r = s.read_to_end(&mut buf);
    // The server closes the connection (EOF, possibly after a 408) instead of waiting forever.
    assert!(r.is_ok(), "connection still open after 10 s: {r:?}");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    // The agent still serves others.
    let ok = agent.request("GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
}

#[test]
fn only_get_and_head_and_no_bodies() {
    let agent = start(&[]);
    let post = agent
        .request("POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    assert!(post.starts_with("HTTP/1.0 405"), "{post}");
    let head = agent.request("HEAD /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    let body = agent
        .request("GET /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc")
        .unwrap();
    assert!(body.starts_with("HTTP/1.0 413"), "{body}");
}

#[test]
fn bearer_token_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "pw-test-token\n").unwrap();
    let agent = start(&["--web.bearer-token-file", token.to_str().unwrap()]);
    let denied = agent.request("GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(denied.starts_with("HTTP/1.0 401"), "{denied}");
    let allowed = agent
        .request("GET /metrics HTTP/1.0\r\nAuthorization: Bearer pw-test-token\r\n\r\n")
        .unwrap();
    assert!(allowed.starts_with("HTTP/1.0 200"), "{allowed}");
    assert!(allowed.contains("proxywatch_node_ready"));
    let health = agent.request("GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    assert!(health.starts_with("HTTP/1.0 200"), "liveness needs no token: {health}");
}

#[test]
fn sigterm_exits_cleanly() {
    let agent = start(&[]);
    let addr = agent.addr();
    // SIGTERM by PID; a bounded wait (not a timing assertion): the agent must exit on its own, with 0.
    let status = agent.stop_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(addr).is_err(), "still listening");
}
