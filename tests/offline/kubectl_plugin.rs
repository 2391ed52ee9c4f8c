//! tools/kubectl-proxywatch, the 3 a.m. command: `kubectl proxywatch check NODE` runs `check` in
//! the agent pod on NODE, not in any pod of the DaemonSet. A fake `kubectl` first on PATH
//! records every call's arguments and answers as a cluster would.
use std::path::{Path, PathBuf};
use std::process::Command;

fn plugin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kubectl-proxywatch")
}

/// The fake: each call appends its arguments, one a line, then `--end--`, to $FAKE_LOG.
/// `get pods` prints $FAKE_PODS (NAME PHASE lines); `get node` fails unless $FAKE_NODE is
/// set; `exec` prints what it would run and exits $FAKE_EXEC_EXIT (as kubectl passes on the
/// remote command's exit code).
const FAKE_KUBECTL: &str = r#"#!/bin/sh
for a in "$@"; do printf '%s\n' "$a" >> "$FAKE_LOG"; done
echo --end-- >> "$FAKE_LOG"
case " $* " in
    *" get pods "*) printf '%s' "$FAKE_PODS" ;;
    *" get node "*) [ -n "${FAKE_NODE:-}" ] || { echo 'Error from server (NotFound): nodes not found' >&2; exit 1; } ;;
    *" exec "*) echo "ran: $*"; exit "${FAKE_EXEC_EXIT:-0}" ;;
esac
"#;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Every kubectl call's arguments.
    calls: Vec<Vec<String>>,
}

fn run(args: &[&str], pods: &str, node_exists: bool, exec_exit: i32) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let kubectl = dir.path().join("kubectl");
    std::fs::write(&kubectl, FAKE_KUBECTL).unwrap();
    std::fs::set_permissions(&kubectl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let log = dir.path().join("calls");
    let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    let mut c = Command::new(plugin());
    c.args(args)
        .env("PATH", path)
        .env("FAKE_LOG", &log)
        .env("FAKE_PODS", pods)
        .env("FAKE_EXEC_EXIT", exec_exit.to_string())
        .env_remove("PROXYWATCH_NAMESPACE");
    if node_exists {
        c.env("FAKE_NODE", "1");
    } else {
        c.env_remove("FAKE_NODE");
    }
    let out = c.output().unwrap();
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .split("--end--\n")
        .filter(|c| !c.is_empty())
        .map(|c| c.lines().map(str::to_string).collect())
        .collect();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        calls,
    }
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn check_runs_in_the_running_pod_on_the_named_node() {
    // A pod still terminating after a rollout is listed first: the running one is picked.
    let r = run(
        &["check", "node-7", "--format", "json"],
        "proxywatch-old Terminating\nproxywatch-x9k2 Running\n",
        true,
        2,
    );
    assert_eq!(r.calls.len(), 2, "{:?}\n{}", r.calls, r.stderr);
    let get = &r.calls[0];
    assert_eq!(get[..4], args(&["-n", "proxywatch", "get", "pods"]), "{get:?}");
    let at = get
        .iter()
        .position(|a| a == "--field-selector")
        .expect("a field selector");
    assert_eq!(get[at + 1], "spec.nodeName=node-7");
    let at = get.iter().position(|a| a == "-l").expect("a label selector");
    assert_eq!(
        get[at + 1],
        "app.kubernetes.io/name=proxywatch,app.kubernetes.io/component=node-agent"
    );
    assert_eq!(
        r.calls[1],
        args(&[
            "-n",
            "proxywatch",
            "exec",
            "proxywatch-x9k2",
            "-c",
            "proxywatch",
            "--",
            "proxywatch",
            "check",
            "--format",
            "json"
        ])
    );
    // check's exit code comes through (2: critical), and its output.
    assert_eq!(r.code, Some(2));
    assert!(r.stdout.starts_with("ran: "), "{}", r.stdout);
}

#[test]
fn the_manifests_labels_are_the_ones_selected() {
    // The plugin's label selector is the DaemonSet's own selector.
    let ds = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/daemonset.yaml")).unwrap();
    let sel = &ds[ds.find("  selector:\n    matchLabels:\n").unwrap()..];
    assert!(sel.contains("app.kubernetes.io/name: proxywatch\n      app.kubernetes.io/component: node-agent\n"));
}

#[test]
fn no_node_and_no_pod_are_told_apart() {
    let r = run(&["check", "node-typo"], "", false, 0);
    assert_eq!(r.code, Some(3));
    assert!(r.stderr.contains("no node named node-typo"), "{}", r.stderr);
    assert!(r.calls.iter().all(|c| !c.contains(&"exec".to_string())));

    let r = run(&["check", "win-1"], "", true, 0);
    assert_eq!(r.code, Some(3));
    assert!(
        r.stderr
            .contains("no proxywatch pod on node win-1 in namespace proxywatch"),
        "{}",
        r.stderr
    );

    let r = run(&["check", "node-2"], "proxywatch-abc Pending\n", true, 0);
    assert_eq!(r.code, Some(3));
    assert!(
        r.stderr
            .contains("no running proxywatch pod on node node-2: proxywatch-abc Pending"),
        "{}",
        r.stderr
    );
    assert!(r.calls.iter().all(|c| !c.contains(&"exec".to_string())));

    let r = run(&["check"], "", true, 0);
    assert_eq!(r.code, Some(3));
    assert!(r.stderr.contains("check needs a node"), "{}", r.stderr);
    assert!(r.calls.is_empty());
}

#[test]
fn pod_prints_the_pods_name() {
    let r = run(&["pod", "node-7"], "proxywatch-x9k2 Running\n", true, 0);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "proxywatch-x9k2\n");
}

#[test]
fn the_script_is_shellcheck_clean() {
    if crate::common::which("shellcheck").is_none() {
        assert!(
            !crate::common::in_ci(),
            "needs `shellcheck` on PATH (CI=true: not skipping)"
        );
        eprintln!("SKIPPED: needs `shellcheck` on PATH");
        return;
    }
    let out = Command::new("shellcheck").arg(plugin()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
