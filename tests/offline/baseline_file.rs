//! `baseline save FILE` runs as root: its temporary file must not follow a
//! symlink someone planted beside FILE (issue 16). The agent runs as PID 1 of
//! a new PID namespace (`unshare --pid --fork`), which makes the temporary
//! name an older version used, `FILE.tmp-<pid>`, predictable: `FILE.tmp-1`.
use crate::common;

use std::os::unix::fs::symlink;
use std::process::{Command, Stdio};

#[test]
fn baseline_save_does_not_write_through_a_planted_symlink() {
    if !common::can_run(&["unshare"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let out = dir.path().join("baseline.json");
    let planted = dir.path().join("baseline.json.tmp-1");
    symlink(&victim, &planted).unwrap();
    let empty = tempfile::tempdir().unwrap();

    let run = Command::new(common::which("unshare").unwrap())
        .args(["--pid", "--fork", "--kill-child"])
        .arg(common::binary())
        .args(["baseline", "save"])
        .arg(&out)
        .arg("--host-root")
        .arg(common::fixtures().join("nodes/healthy-iptables"))
        .args(common::NO_KUBE_PROXY)
        .env_clear()
        .env("PATH", empty.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{}: {stderr}", run.status);

    let now = std::fs::read_to_string(&victim).unwrap();
    assert!(
        now == "precious\n",
        "the planted symlink was followed: the victim now starts with {:?}",
        &now[..now.len().min(40)]
    );
    assert_eq!(
        std::fs::read_link(&planted).unwrap(),
        victim,
        "the planted link was touched"
    );
    let meta = std::fs::symlink_metadata(&out).unwrap();
    assert!(meta.file_type().is_file(), "{:?}", meta.file_type());
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(
        doc["node"].is_string() && doc["facts"].is_object(),
        "not a snapshot: {doc}"
    );
    // Nothing else left behind: the victim, the planted link, the baseline.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["baseline.json", "baseline.json.tmp-1", "victim"], "{stderr}");
}

/// `baseline save` into a directory that does not exist: one line that names the file and the
/// missing directory, the OS reason at most once, no temporary file name, exit status 3 (the agent could not do its job).
#[test]
fn baseline_save_into_a_missing_directory_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("no-such-dir/baseline.json");
    let empty = tempfile::tempdir().unwrap();
    let run = Command::new(common::binary())
        .args(["baseline", "save"])
        .arg(&out)
        .arg("--host-root")
        .arg(common::fixtures().join("nodes/healthy-iptables"))
        .args(common::NO_KUBE_PROXY)
        .env_clear()
        .env("PATH", empty.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    let want = format!(
        "proxywatch: cannot write {}: directory {} does not exist (create it first, or choose another path)\n",
        out.display(),
        dir.path().join("no-such-dir").display()
    );
    assert_eq!(stderr, want);
    assert!(!dir.path().join("no-such-dir").exists());
}
