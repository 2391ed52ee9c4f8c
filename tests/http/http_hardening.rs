//! The listener on the real binary: slow clients cut off near the configured
//! timeout, methods, bearer token, and a graceful exit on SIGTERM (the request in
//! flight answered, the running command's process group gone).
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

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

/// `--web.header-read-timeout` under test, and how late after it the close may come: the
/// machine is shared and noisy, so the bound is loose, but a close at 10 s (20x) fails.
const HEADER_TIMEOUT: Duration = Duration::from_millis(500);
const HEADER_TIMEOUT_SLACK: u32 = 3;

#[test]
fn slow_client_is_cut_off_by_the_header_timeout() {
    let timeout = format!("{}ms", HEADER_TIMEOUT.as_millis());
    let agent = start(&["--web.header-read-timeout", &timeout]);
    let connected = Instant::now();
    let mut s = TcpStream::connect(agent.addr()).unwrap();
    // Half a request line, then silence: a slowloris client.
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let r = s.read_to_end(&mut buf);
    let closed = connected.elapsed();
    // The server closes the connection (EOF, possibly after a 408) instead of waiting forever.
    assert!(r.is_ok(), "connection still open after 10 s: {r:?}");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    // ...and it does so because of the timeout: not before it, and not long after it.
    // (Measured from connect, before the timer can start: a close at 480 ms after the
    // write can still be 500 ms after the server began reading.)
    assert!(
        closed >= HEADER_TIMEOUT,
        "closed after {closed:?}, before the {HEADER_TIMEOUT:?} header timeout"
    );
    assert!(
        closed < HEADER_TIMEOUT * HEADER_TIMEOUT_SLACK,
        "closed after {closed:?}: not near the {HEADER_TIMEOUT:?} header timeout"
    );
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

/// Processes whose command line holds `marker` (the stand-in's sleep and its shell).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_str().is_none_or(|n| n.parse::<u32>().is_err()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
            found.push(format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// SIGKILLs a process group on drop (a stand-in left behind by a failed test);
/// forgotten once the group is seen gone.
struct KillGroup(nix::unistd::Pid);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

#[test]
fn sigterm_finishes_the_request_in_flight_and_kills_the_running_command() {
    // A stand-in iptables-nft-save that records its process group (it leads it: the
    // runner starts every command in a group of its own) and then hangs in a child.
    let bin = tempfile::tempdir().unwrap();
    let pgid_file = bin.path().join("pgid");
    let marker = format!("{}.{}", 9100, std::process::id());
    let save = bin.path().join("iptables-nft-save");
    std::fs::write(
        &save,
        format!(
            "#!/bin/sh\necho $$ > '{}.tmp' && /bin/mv '{0}.tmp' '{0}'\n/bin/sleep {marker}\n",
            pgid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&save, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let node = common::fixtures().join("nodes/healthy-iptables");
    let agent = Serve::new()
        .env_clear()
        .env("PATH", bin.path())
        .arg("--host-root")
        .arg(&node)
        .args(common::NO_KUBE_PROXY)
        .args(["--iptables.timeout", "60s"])
        // The iptables probe never reports while its save hangs: wait for the listener only.
        .ready("/healthz")
        .start();
    let addr = agent.addr();

    // The command runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pgid: i32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pgid_file) {
            break text.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "the stand-in save never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever fails below, the group does not outlive the test.
    let cleanup = KillGroup(nix::unistd::Pid::from_raw(pgid));
    // The script writes its group before it starts the sleep: wait for the sleep itself.
    common::poll(
        "the stand-in's sleep runs",
        Duration::from_secs(20),
        || match processes_with(&marker) {
            p if p.len() == 1 => Ok(()),
            p => Err(format!("{p:?}")),
        },
    );

    // A request in flight: its head half sent.
    let mut client = TcpStream::connect(addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: proxywatch\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));

    agent.sigterm();
    // Shutting down: the listener closes first (new connections refused)...
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting 5 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...and the request in flight is still answered.
    client.write_all(b"\r\n").unwrap();
    let mut answer = Vec::new();
    client
        .read_to_end(&mut answer)
        .expect("the answer to the request in flight");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "request in flight at SIGTERM: {answer:?}"
    );

    // SIGTERM by PID; a bounded wait (not a timing assertion): the agent must exit on its own, with 0.
    let status = agent.stop_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(addr).is_err(), "still listening");
    // Nothing of the command's group outlives the agent.
    let pgid = nix::unistd::Pid::from_raw(pgid);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let group_gone = nix::sys::signal::killpg(pgid, None) == Err(nix::errno::Errno::ESRCH);
        let left = processes_with(&marker);
        if group_gone && left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the agent exited: process group {pgid} still exists ({group_gone}), processes {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Gone: its number may be reused by now, so nothing is sent to it any more.
    std::mem::forget(cleanup);
}
