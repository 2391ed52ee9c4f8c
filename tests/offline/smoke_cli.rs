//! The command line itself: exit codes and help, on the real binary.
use crate::common;

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

/// A bad duration set by the environment (as the DaemonSet sets every flag) is reported with
/// the variable's name, not only the flag's; one set on the command line names the flag alone.
/// Compound durations are accepted from both.
#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let root = common::fixtures().join("nodes/healthy-iptables");
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new(common::binary());
        c.arg("check")
            .arg("--host-root")
            .arg(&root)
            .args(common::NO_KUBE_PROXY)
            .args(args);
        c.env_remove("PROXYWATCH_CONNTRACK_WINDOW");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run(&[("PROXYWATCH_CONNTRACK_WINDOW", "abc")], &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("--conntrack.window"), "{stderr}");
    assert!(
        stderr.contains(
            "note: the value came from the environment variable PROXYWATCH_CONNTRACK_WINDOW=\"abc\", which sets --conntrack.window"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("a bare number is seconds"), "{stderr}");
    // On the command line: the flag is what the user typed; no note about the environment.
    let (code, stderr) = run(&[], &["--conntrack.window", "abc"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("--conntrack.window") && !stderr.contains("PROXYWATCH_CONNTRACK_WINDOW=\""),
        "{stderr}"
    );
    // `1m30s` is a duration, from either place.
    let (code, stderr) = run(&[("PROXYWATCH_CONNTRACK_WINDOW", "1m30s")], &[]);
    assert_ne!(code, Some(3), "{stderr}");
    let (code, stderr) = run(&[], &["--conntrack.window=1m30s"]);
    assert_ne!(code, Some(3), "{stderr}");
    // And `--help` says how durations are written, bare numbers included.
    for sub in [&["serve"][..], &["check"], &["compare"], &["baseline", "save"]] {
        let out = Command::new(common::binary()).args(sub).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("1m30s") && help.contains("a bare number is seconds"),
            "{sub:?}: {help}"
        );
    }
}

/// Help fits a screen: `-h` under 40 lines, `--help` wrapped to 80 columns when it goes to a
/// pipe (as here), with no line longer.
#[test]
fn help_is_short_with_h_and_wrapped_to_80_columns() {
    for sub in [
        &["serve"][..],
        &["check"],
        &["compare"],
        &["npd"],
        &["baseline", "save"],
        &[],
    ] {
        for flag in ["-h", "--help"] {
            let out = Command::new(common::binary())
                .args(sub)
                .arg(flag)
                .env_remove("COLUMNS")
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{sub:?} {flag}");
            let help = String::from_utf8(out.stdout).unwrap();
            let long: Vec<&str> = help.lines().filter(|l| l.chars().count() > 80).collect();
            assert!(long.is_empty(), "{sub:?} {flag}: lines over 80 columns: {long:#?}");
            if flag == "-h" {
                assert!(
                    help.lines().count() < 40,
                    "{sub:?} -h: {} lines\n{help}",
                    help.lines().count()
                );
            }
        }
    }
}

/// Bad values of `--listen` and negative durations: the message names the flag, the value and
/// a correct form.
#[test]
fn bad_listen_and_negative_durations_name_the_flag_the_value_and_a_form() {
    let run = |args: &[&str]| {
        let out = Command::new(common::binary()).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, e) = run(&["check", "--iptables.interval", "-1s"]);
    assert_eq!(code, Some(3), "{e}");
    assert!(
        e.contains("--iptables.interval") && e.contains("-1s") && e.contains("like 1s"),
        "{e}"
    );
    let (code, e) = run(&["serve", "--listen", "node1:9877"]);
    assert_eq!(code, Some(3), "{e}");
    assert!(
        e.contains("--listen") && e.contains("node1:9877") && e.contains("localhost:PORT"),
        "{e}"
    );
}
