//! docs/screenshots/*.png are pictures of the binary's output; each has its source beside it,
//! recorded by docs/screenshots.sh when it took the picture: check.txt (the terminal's text,
//! its command on the first line) and status-page.findings.txt (each finding the page showed,
//! then its remediation steps). These tests run the binary as the script did and fail when it
//! no longer prints that source: the picture is stale, rerun docs/screenshots.sh.
use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A stand-in kube-proxy as the script serves it (python3 -m http.server over a directory):
/// each path a file, anything else 404. Returns its port; the thread ends with the test binary.
fn serve_files(files: BTreeMap<String, String>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut line = String::new();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // The headers, up to the blank line.
            let mut h = String::new();
            while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match files.get(path.trim_start_matches('/')) {
                Some(b) => ("200 OK", b.as_str()),
                None => ("404 Not Found", "not found"),
            };
            let _ = write!(
                conn,
                "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// What moves from run to run: the moment (first line, `since:`), probe durations, the port.
fn normalize(text: &str, port: Option<u16>) -> Vec<String> {
    let mut in_probes = false;
    text.lines()
        .map(|l| {
            let mut l = l.trim_end().to_string();
            if let Some(p) = port {
                l = l.replace(&format!("127.0.0.1:{p}"), "127.0.0.1:<port>");
            }
            // An age against now (`last sync 1790 days ago`) grows by itself.
            if let Some(at) = l.find(" ago") {
                let head = &l[..at];
                let cut = head.rsplitn(3, ' ').nth(2).map_or(0, |h| h.len());
                l = format!("{} <age>{}", &l[..cut], &l[at..]);
            }
            if l.starts_with("proxywatch check: ") {
                if let Some((a, _)) = l.rsplit_once(" at ") {
                    l = format!("{a} at <time>");
                }
            } else if l.trim_start().starts_with("since: ") {
                l = "since: <time>".to_string();
            } else if l == "probes:" {
                in_probes = true;
            } else if l.is_empty() {
                in_probes = false;
            } else if in_probes {
                if let Some(ms) = l.find(" ms") {
                    let start = l[..ms].rfind(' ').map_or(0, |s| s + 1);
                    if l[start..ms].parse::<f64>().is_ok() {
                        let width = ms - start;
                        l.replace_range(start..ms, &format!("{:>width$}", "0.0"));
                    }
                }
            }
            l
        })
        .collect()
}

#[test]
fn check_png_source_is_what_the_binary_prints() {
    let recorded = read("docs/screenshots/check.txt");
    let (command, output) = recorded.split_once('\n').expect("the command, then the output");
    // $ proxywatch check --host-root NODE --node-name NAME (kube-proxy: METRICS, HEALTHZ, MODE)
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap() + 1];
    let (node, name) = (after("--host-root"), after("--node-name"));
    let kp = command.split("(kube-proxy: ").nth(1).unwrap().trim_end_matches(')');
    let kp: Vec<&str> = kp.split(", ").collect();
    assert_eq!(kp.len(), 3, "{command}");
    let file = |f: &str| read(&format!("tests/fixtures/kube-proxy/{}", f.rsplit('/').next().unwrap()));
    let port = serve_files(BTreeMap::from([
        ("metrics".to_string(), file(kp[0])),
        ("healthz".to_string(), file(kp[1])),
        ("proxyMode".to_string(), file(kp[2])),
    ]));
    let nodes = common::fixtures().join("nodes");
    let url = format!("http://127.0.0.1:{port}");
    let out = std::process::Command::new(common::binary())
        .current_dir(&nodes)
        .env_clear()
        .env("PATH", nodes.join(node).join("exec"))
        .args(["check", "--host-root", node, "--node-name", name])
        .args(["--kube-proxy.metrics-url", &url, "--kube-proxy.healthz-url", &url])
        .output()
        .unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    // The script's port is unknown now: whatever it was, it is the one port in the text.
    let old_port = output
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok());
    let want = normalize(output, old_port);
    let got = normalize(&got, Some(port));
    assert!(want.len() >= 20, "{} lines in check.txt", want.len());
    assert_eq!(
        want, got,
        "docs/screenshots/check.png is stale: the binary prints otherwise; rerun docs/screenshots.sh"
    );
}

#[test]
fn status_page_png_source_is_what_the_binary_remediates() {
    let recorded = read("docs/screenshots/status-page.findings.txt");
    let mut shown: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for l in recorded.lines() {
        if let Some(step) = l.strip_prefix("- ") {
            shown.get_mut(current.as_ref().unwrap()).unwrap().push(step.to_string());
        } else {
            current = Some(l.to_string());
            shown.insert(l.to_string(), Vec::new());
        }
    }
    // The node the status page test draws (tests/http/status_page.rs' NODE).
    let test = read("tests/http/status_page.rs");
    let node = test
        .split("const NODE: &str = \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("NODE in tests/http/status_page.rs");
    let nodes = common::fixtures().join("nodes");
    let out = std::process::Command::new(common::binary())
        .current_dir(&nodes)
        .env_clear()
        .env("PATH", nodes.join(node).join("exec"))
        .args([
            "check",
            "--format",
            "json",
            "--host-root",
            node,
            "--node-name",
            "fixture",
        ])
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let now: BTreeMap<&str, Vec<&str>> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap(),
                f["remediation"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap())
                    .collect(),
            )
        })
        .collect();
    // The page's own kube-proxy stand-in is not here: findings about it are not compared.
    let compared: Vec<&String> = shown.keys().filter(|id| now.contains_key(id.as_str())).collect();
    assert!(
        !compared.is_empty(),
        "no finding of the picture is raised: {shown:?} vs {now:?}"
    );
    for id in compared {
        assert_eq!(
            shown[id],
            now[id.as_str()],
            "docs/screenshots/status-page.png is stale: {id}'s remediation differs; rerun docs/screenshots.sh"
        );
    }
    // The page's critical finding, the one a reader acts on, is among them.
    assert!(shown.contains_key("sysctl_ip_forward"), "{shown:?}");
}
