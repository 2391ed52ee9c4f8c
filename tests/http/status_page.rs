//! The status page in a real browser: `proxywatch serve` on a fixture node with
//! a critical finding (tests/fixtures/nodes/ip-forward-off), read by headless
//! Chromium. Checks the rendered DOM shows the finding and its remediation, that
//! the page logs nothing to the console (no script errors, no blocked inline
//! style or asset under the page's CSP), and leaves a screenshot for CI.
//!
//! The charts: `serve` on a copy of the fixture node whose conntrack count the test
//! grows, with a fake kube-proxy whose sync histogram the test feeds, until the
//! history holds enough points; then every point Chromium's DOM draws in the SVG is
//! mapped back through the chart's axes and must equal `/snapshot`'s
//! `derived.series` of the same publication.
use crate::common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::fake_kube_proxy::{kube_proxy_fixture, FakeKubeProxy, Reply, METRICS_FIXTURE};
use common::{Agent, Serve};
use serde_json::Value;

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

const SYNC: &str = "kubeproxy_sync_proxy_rules_duration_seconds";

/// `text` with `n` more observations of `value` seconds in the `family` histogram.
fn add_observations(text: &str, family: &str, value: f64, n: u64) -> String {
    let bucket = format!("{family}_bucket{{le=\"");
    let count = format!("{family}_count ");
    let sum = format!("{family}_sum ");
    let n_f = n as f64;
    text.split('\n')
        .map(|line| {
            if let Some(rest) = line.strip_prefix(bucket.as_str()) {
                let (le, v) = rest.split_once("\"} ").unwrap();
                let le: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                if value <= le {
                    return format!(
                        "{bucket}{}\"}} {}",
                        rest.split_once('"').unwrap().0,
                        v.parse::<f64>().unwrap() + n_f
                    );
                }
            } else if let Some(v) = line.strip_prefix(count.as_str()) {
                return format!("{count}{}", v.parse::<f64>().unwrap() + n_f);
            } else if let Some(v) = line.strip_prefix(sum.as_str()) {
                return format!("{sum}{}", v.parse::<f64>().unwrap() + n_f * value);
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Threads that change the node while the agent watches it; stopped and joined on drop.
struct Feeders {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Feeders {
    fn start(count_file: PathBuf, fake: Arc<FakeKubeProxy>) -> Feeders {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        // conntrack: 52 429 entries growing by 600 every 0.5 s (a trend, a forecast).
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut entries = 52_429u64;
            while !s.load(Ordering::SeqCst) {
                std::fs::write(&count_file, format!("{entries}\n")).unwrap();
                entries += 600;
                std::thread::sleep(Duration::from_millis(500));
            }
        }));
        // kube-proxy: a few syncs every 0.3 s, their duration changing every 1.2 s so the p99 moves.
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut text = kube_proxy_fixture(METRICS_FIXTURE);
            for i in 0.. {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                text = add_observations(&text, SYNC, [0.05, 0.1, 0.3, 0.2, 0.7, 0.12, 0.06][(i / 4) % 7], 5);
                fake.set("/metrics", Reply::ok(text.clone()));
                std::thread::sleep(Duration::from_millis(300));
            }
        }));
        Feeders { stop, threads }
    }
}

impl Drop for Feeders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn snapshot(agent: &Agent) -> Value {
    let (code, body) = common::http_get(agent.addr(), "/snapshot").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The value of attribute `name` in the first tag of `html` that starts with `start`.
fn attr<'a>(html: &'a str, start: &str, name: &str) -> Option<&'a str> {
    let tag = &html[html.find(start)?..];
    let tag = &tag[..tag.find('>')?];
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[at..at + tag[at..].find('"')?])
}

/// The chart `id`'s `class` polyline in the DOM, mapped back to (time, value) through its axes.
fn drawn(dom: &str, id: &str, class: &str) -> Vec<[f64; 2]> {
    let fig = &dom[dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no chart {id} in the DOM:\n{dom}"))..];
    let fig = &fig[..fig.find("</figure>").unwrap()];
    let num = |n: &str| -> f64 {
        attr(fig, "<svg", n)
            .unwrap_or_else(|| panic!("{id}: no {n}:\n{fig}"))
            .parse()
            .unwrap()
    };
    let (t0, t1, v0, v1) = (num("data-t0"), num("data-t1"), num("data-v0"), num("data-v1"));
    let (x0, x1, y0, y1) = (num("data-x0"), num("data-x1"), num("data-y0"), num("data-y1"));
    let Some(points) = attr(fig, &format!("<polyline class=\"{class}\""), "points") else {
        return Vec::new();
    };
    points
        .split(' ')
        .map(|xy| {
            let (x, y) = xy.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            [
                t0 + (x - x0) / (x1 - x0) * (t1 - t0),
                v0 + (y - y0) / (y1 - y0) * (v1 - v0),
            ]
        })
        .collect()
}

/// The snapshot's `derived.series.<key>` points.
fn series(snap: &Value, key: &str) -> Vec<[f64; 2]> {
    snap["derived"]["series"][key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
                .collect()
        })
        .unwrap_or_default()
}

/// Drawn and kept points agree to the drawing's precision (0.01 px, printed to 2 decimals).
fn assert_same_points(what: &str, drawn: &[[f64; 2]], kept: &[[f64; 2]], dt: f64, dv: f64) {
    assert_eq!(drawn.len(), kept.len(), "{what}: drawn {drawn:?}\nkept {kept:?}");
    for (d, k) in drawn.iter().zip(kept) {
        assert!(
            (d[0] - k[0]).abs() <= dt && (d[1] - k[1]).abs() <= dv,
            "{what}: drawn {d:?}, kept {k:?}\ndrawn {drawn:?}\nkept {kept:?}"
        );
    }
}

#[test]
fn status_page_charts_equal_the_snapshot_history_in_chromium() {
    if !common::can_run(&["chromium"]) {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let node = root.path().join(NODE);
    // Files only (no netlink recording): the conntrack_stale probe is absent, and the page
    // must say so rather than draw zeros.
    common::copy_files_only(NODE, &node);
    let fake = Arc::new(FakeKubeProxy::start());
    let _feeders = Feeders::start(node.join("proc/sys/net/netfilter/nf_conntrack_count"), fake.clone());
    let agent = Serve::new()
        .current_dir(root.path())
        .env_clear()
        .env("PATH", node.join("exec"))
        .args(["--host-root", NODE])
        .args(["--node-name", "fixture"])
        .args(["--conntrack.interval", "3s", "--conntrack.trend-window", "15s"])
        .args(["--kube-proxy.interval", "1s"])
        .args(["--kube-proxy.metrics-url", &fake.url()])
        .args(["--kube-proxy.healthz-url", &fake.url()])
        .ready("/snapshot")
        .start();
    // Enough history: a trend (5 readings over half the window), and several sync p99s.
    common::poll("the history to fill", Duration::from_secs(60), || {
        let s = snapshot(&agent);
        let (fill, sync) = (series(&s, "conntrack_fill"), series(&s, "kube_proxy_sync_p99_seconds"));
        let forecast = series(&s, "conntrack_fill_forecast");
        if fill.len() >= 6 && sync.len() >= 5 && forecast.len() == 2 {
            Ok(())
        } else {
            Err(format!(
                "{} fill, {} sync, {} forecast points",
                fill.len(),
                sync.len(),
                forecast.len()
            ))
        }
    });
    let url = format!("http://{}/", agent.addr());
    let profile = tempfile::tempdir().unwrap();
    // Points are only ever appended here (far below the ring's capacity), so a page is
    // checked against the snapshots read just before and just after the browser's read:
    // its fill and forecast against the one with the same conntrack readings (retried
    // until one has), its sync p99s against the first points of the later one.
    let (dom, snap, after) = (0..20)
        .find_map(|_| {
            let before = snapshot(&agent);
            let out = chromium(profile.path(), &["--dump-dom".to_string(), url.clone()]);
            assert!(
                out.status.success(),
                "chromium: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let dom = String::from_utf8_lossy(&out.stdout).into_owned();
            let after = snapshot(&agent);
            let n = drawn(&dom, "chart-conntrack-fill", "series").len();
            if series(&before, "conntrack_fill").len() == n {
                Some((dom, before, after))
            } else if series(&after, "conntrack_fill").len() == n {
                Some((dom, after.clone(), after))
            } else {
                None
            }
        })
        .expect("no snapshot with the conntrack readings of the page");

    let t = |key: &str| series(&snap, key);
    // Time: 1/100 px of a 476 px axis spanning the chart's domain; value likewise.
    let fig_domain = |id: &str| {
        let fig = &dom[dom.find(&format!("id=\"{id}\"")).unwrap()..];
        let n = |a: &str| attr(fig, "<svg", a).unwrap().parse::<f64>().unwrap();
        (
            (n("data-t1") - n("data-t0")) / (n("data-x1") - n("data-x0")) * 0.006,
            (n("data-v1") - n("data-v0")) / (n("data-y0") - n("data-y1")).abs() * 0.006,
        )
    };
    let (dt, dv) = fig_domain("chart-conntrack-fill");
    assert_same_points(
        "conntrack fill",
        &drawn(&dom, "chart-conntrack-fill", "series"),
        &t("conntrack_fill"),
        dt,
        dv,
    );
    // (5 readings 3 s apart always fall in the 15 s trend window: the trend never flickers.)
    assert_eq!(t("conntrack_fill_forecast").len(), 2, "a forecast to compare");
    assert_same_points(
        "conntrack forecast",
        &drawn(&dom, "chart-conntrack-fill", "forecast"),
        &t("conntrack_fill_forecast"),
        dt,
        dv,
    );
    // The fill grows: the series is what the test wrote, entries / max.
    let fill = t("conntrack_fill");
    assert!(
        fill.windows(2).all(|w| w[1][1] >= w[0][1] && w[1][0] > w[0][0]),
        "{fill:?}"
    );
    assert!(
        fill.iter()
            .all(|p| ((p[1] * 262_144.0).round() as u64 - 52_429) % 600 == 0),
        "{fill:?}"
    );
    let ttf = snap["derived"]["conntrack"]["trend"]["seconds_to_full"]
        .as_f64()
        .unwrap();
    assert!(dom.contains("forecast from the trend: full in about"), "ttf {ttf}");
    let (dt, dv) = fig_domain("chart-sync-p99");
    let sync = drawn(&dom, "chart-sync-p99", "series");
    let kept = series(&after, "kube_proxy_sync_p99_seconds");
    assert!(
        sync.len() >= 5 && sync.len() <= kept.len(),
        "drawn {sync:?}\nkept {kept:?}"
    );
    assert_same_points("sync p99", &sync, &kept[..sync.len()], dt, dv);
    // The feeder's syncs take 0.05 to 0.7 s: the p99s are not all one value.
    assert!(kept.iter().any(|p| p[1] != kept[0][1]), "{kept:?}");
    // No stale-entry checks under a host root without a kernel to ask: said, not drawn as zero.
    assert!(
        dom.contains("No stale-entry checks: the conntrack_stale probe is absent"),
        "{dom}"
    );
    assert!(t("stale_entries").is_empty());

    // A screenshot of the charts for people (CI keeps it), and the page logs nothing.
    let png = target_dir().join("status-page-charts.png");
    let _ = std::fs::remove_file(&png);
    // And the DOM it is drawn from, for docs/screenshots.sh to record the page's source.
    std::fs::write(target_dir().join("status-page-charts.html"), &dom).unwrap();
    let out = chromium(
        profile.path(),
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,2400".to_string(),
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
    let console = console_messages(&stderr);
    assert!(
        console.is_empty(),
        "the page logged to the console:\n{}",
        console.join("\n")
    );
    println!("status page charts screenshot: {}", png.display());
}
