//! The command line itself: exit codes and help, on the real binary.
mod common;

use std::process::Command;

#[test]
fn usage_errors_exit_3_not_critical() {
    let out = Command::new(common::binary())
        .args(["check", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(common::binary())
        .args(["check", "--host-root", "/nonexistent-dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir"));
}

#[test]
fn help_documents_every_flag_with_its_env_var() {
    for sub in [
        &["serve"][..],
        &["check"][..],
        &["compare"][..],
        &["baseline", "save"][..],
    ] {
        let out = Command::new(common::binary()).args(sub).arg("--help").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8(out.stdout).unwrap();
        for line in help
            .lines()
            .filter(|l| l.trim_start().starts_with("--") && !l.contains("--help") && !l.contains("--version"))
        {
            let flag = line.split_whitespace().next().unwrap();
            // clap prints "[env: PROXYWATCH_...=]" in the flag's help block; find it after the flag.
            let rest = &help[help.find(line).unwrap()..];
            let block_end = rest[2..].find("\n  -").map_or(rest.len(), |i| i + 2);
            assert!(
                rest[..block_end].contains("[env: PROXYWATCH_"),
                "{sub:?} {flag} has no env var"
            );
        }
    }
}
