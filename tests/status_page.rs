//! The status page in a real browser: `proxywatch serve` on a fixture node with
//! a critical finding (tests/fixtures/nodes/ip-forward-off), read by headless
//! Chromium. Checks the rendered DOM shows the finding and its remediation, that
//! the page logs nothing to the console (no script errors, no blocked inline
//! style or asset under the page's CSP), and leaves a screenshot for CI.
mod common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Agent, Serve};

const NODE: &str = "ip-forward-off";

/// `proxywatch serve` on the fixture node, once its first snapshot exists; stopped when the test ends, also on panic.
fn serve() -> Agent {
    let nodes = common::fixtures().join("nodes");
    Serve::new()
        .current_dir(&nodes)
        .env_clear()
        .env("PATH", nodes.join(NODE).join("exec"))
        .args(["--host-root", NODE])
        .args(["--node-name", "fixture"])
        .args(["--kube-proxy.metrics-url", "http://127.0.0.1:9"])
        .args(["--kube-proxy.healthz-url", "http://127.0.0.1:9"])
        .ready("/snapshot")
        .start()
}

/// Runs headless Chromium with a fresh profile; kills its whole process group after 90 s.
fn chromium(profile: &Path, args: &[String]) -> Output {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start chromium");
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    // Drain the pipes on threads so a chatty browser cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            panic!("chromium {args:?} did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Helpers (GPU, renderer) of a finished browser should be gone; make sure.
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Console messages the page produced (`INFO:CONSOLE` lines with --enable-logging=stderr).
fn console_messages(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

#[test]
fn status_page_in_headless_chromium() {
    if !common::can_run(&["chromium"]) {
        return;
    }
    let agent = serve();
    let url = format!("http://{}/", agent.addr());
    let profile = tempfile::tempdir().unwrap();

    // The DOM as the browser built it.
    let out = chromium(profile.path(), &["--dump-dom".to_string(), url.clone()]);
    let dom = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {}\n{stderr}", out.status);
    assert!(dom.contains("<header class=\"status-critical\">"), "{dom}");
    assert!(dom.contains("<strong id=\"status\">CRITICAL</strong>"), "{dom}");
    assert!(dom.contains("<span id=\"node\">fixture</span>"), "{dom}");
    // The critical finding, with its badge, and its remediation as a list.
    let start = dom
        .find("id=\"finding-sysctl_ip_forward\"")
        .unwrap_or_else(|| panic!("no sysctl_ip_forward finding in the DOM:\n{dom}"));
    let article = &dom[start..start + dom[start..].find("</article>").unwrap()];
    assert!(article.contains("CRITICAL</span>"), "{article}");
    assert!(article.contains("net.ipv4.ip_forward is 0"), "{article}");
    assert!(
        article.contains("<li>Enable it now: sysctl -w net.ipv4.ip_forward=1"),
        "{article}"
    );
    // Facts: the conntrack bar and the probes table.
    assert!(dom.contains("<meter id=\"ct-fill\""), "{dom}");
    assert!(dom.contains("<h2 id=\"probes-h\">Probes</h2>"), "{dom}");
    let console = console_messages(&stderr);
    assert!(
        console.is_empty(),
        "the page logged to the console:\n{}",
        console.join("\n")
    );

    // A screenshot for people (CI keeps it).
    let png = target_dir().join("status-page.png");
    let _ = std::fs::remove_file(&png);
    let out = chromium(
        profile.path(),
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,900".to_string(),
            url,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chromium screenshot failed: {}\n{stderr}",
        out.status
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(bytes.len() > 10_000, "a blank page? {} bytes", bytes.len());
    let console = console_messages(&stderr);
    assert!(
        console.is_empty(),
        "the page logged to the console:\n{}",
        console.join("\n")
    );
    println!("status page screenshot: {}", png.display());
    std::io::stdout().flush().unwrap();
}
