//! The README is the user's manual: it must name every flag, finding and
//! metric the agent has. This test fails when one is added without a line there.
mod common;

use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

#[test]
fn every_flag_is_documented() {
    let text = readme();
    let mut missing = Vec::new();
    for sub in [&["serve"][..], &["check"], &["baseline", "save"], &["compare"]] {
        let out = Command::new(common::binary()).args(sub).arg("--help").output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        for line in help.lines() {
            let Some(flag) = line.split_whitespace().next() else {
                continue;
            };
            if !flag.starts_with("--") || flag == "--help" || flag == "--version" {
                continue;
            }
            let flag = flag.trim_end_matches(',');
            if !text.contains(&format!("`{flag}`")) {
                missing.push(format!("{} {flag}", sub.join(" ")));
            }
        }
    }
    assert!(missing.is_empty(), "flags missing from README.md: {missing:?}");
}

#[test]
fn every_finding_is_documented() {
    let text = readme();
    let missing: Vec<&str> = proxywatch::evaluate::CHECKS
        .iter()
        .map(|c| c.id)
        .filter(|id| !text.contains(&format!("`{id}`")))
        .collect();
    assert!(missing.is_empty(), "findings missing from README.md: {missing:?}");
}

#[test]
fn every_metric_is_documented() {
    let text = readme();
    let source =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("agent/expose/metrics.rs"))
            .unwrap();
    let mut names: Vec<&str> = source
        .split('"')
        .filter(|s| {
            s.starts_with("proxywatch_")
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(
        names.len() > 40,
        "found only {} metric names in metrics.rs",
        names.len()
    );
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !n.starts_with("proxywatch_conntrack_stat_"))
        .filter(|n| !text.contains(&format!("`{n}`")))
        .collect();
    assert!(missing.is_empty(), "metrics missing from README.md: {missing:?}");
    assert!(text.contains("`proxywatch_conntrack_stat_<field>_total`"));
}

#[test]
fn every_endpoint_is_documented() {
    let text = readme();
    for path in ["/", "/metrics", "/snapshot", "/findings", "/healthz", "/readyz"] {
        assert!(
            text.contains(&format!("| `{path}` |")),
            "{path} missing from the endpoints table"
        );
    }
}
