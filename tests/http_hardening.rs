//! The listener on the real binary: slow clients cut off, methods, bearer
//! token, and a graceful exit on SIGTERM.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Agent {
    child: Child,
    port: u16,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(extra: &[&str]) -> Agent {
    let port = free_port();
    let node = common::fixtures().join("nodes/healthy-iptables");
    let empty = tempfile::tempdir().unwrap();
    let child = Command::new(common::binary())
        .env_clear()
        .env("PATH", empty.path())
        .arg("serve")
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let agent = Agent { child, port };
    // Wait for the first snapshot (the token header is ignored when no token is set).
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let probe = "GET /metrics HTTP/1.0\r\nAuthorization: Bearer pw-test-token\r\n\r\n";
        if request(port, probe).is_some_and(|r| r.starts_with("HTTP/1.0 200")) {
            return agent;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("agent did not start");
}

fn request(port: u16, raw: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(raw.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn slow_client_is_cut_off_by_the_header_timeout() {
    let agent = start(&["--web.header-read-timeout", "500ms"]);
    let mut s = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
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
    let ok = request(agent.port, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
}

#[test]
fn only_get_and_head_and_no_bodies() {
    let agent = start(&[]);
    let post = request(agent.port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert!(post.starts_with("HTTP/1.0 405"), "{post}");
    let head = request(agent.port, "HEAD /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    let body = request(agent.port, "GET /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc").unwrap();
    assert!(body.starts_with("HTTP/1.0 413"), "{body}");
}

#[test]
fn bearer_token_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "pw-test-token\n").unwrap();
    let agent = start(&["--web.bearer-token-file", token.to_str().unwrap()]);
    let denied = request(agent.port, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(denied.starts_with("HTTP/1.0 401"), "{denied}");
    let allowed = request(
        agent.port,
        "GET /metrics HTTP/1.0\r\nAuthorization: Bearer pw-test-token\r\n\r\n",
    )
    .unwrap();
    assert!(allowed.starts_with("HTTP/1.0 200"), "{allowed}");
    assert!(allowed.contains("proxywatch_node_ready"));
    let health = request(agent.port, "GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    assert!(health.starts_with("HTTP/1.0 200"), "liveness needs no token: {health}");
}

#[test]
fn sigterm_exits_cleanly() {
    let mut agent = start(&[]);
    let pid = nix::unistd::Pid::from_raw(agent.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // Bounded wait (not a timing assertion): the agent must exit on its own, with 0.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = agent.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "still running 10 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    assert!(
        TcpStream::connect(("127.0.0.1", agent.port)).is_err(),
        "still listening"
    );
}
