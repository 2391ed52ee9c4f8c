//! Shared support for the end-to-end tests: the binary, network namespaces
//! that clean up after themselves, and a lock for tests that touch global state.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_proxywatch"))
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Whether this run is CI, where a test that needs root or a tool must fail, not skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// True when the test can use root powers and the listed tools. Outside CI a
/// missing prerequisite skips the test with a note; in CI it fails it.
pub fn can_run(tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    for t in tools {
        if which(t).is_none() {
            missing.push(format!("`{t}` on PATH"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("needs {}", missing.join(", "));
    assert!(!in_ci(), "{msg} (CI=true: not skipping)");
    eprintln!("SKIPPED: {msg}");
    false
}

pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Serialises tests that touch global state (sysctls, the root namespace's
/// rule sets) across test binaries too, with an flock on a shared file.
pub struct GlobalLock(#[allow(dead_code)] nix::fcntl::Flock<File>);

pub fn global_lock() -> GlobalLock {
    let f = File::create(std::env::temp_dir().join("proxywatch-tests.lock")).expect("lock file");
    let lock =
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap_or_else(|(_, e)| panic!("flock: {e}"));
    GlobalLock(lock)
}

/// Runs a command, panicking with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace created for one test and deleted on drop (also on panic).
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("pwt-{tag}-{}", std::process::id());
        // A namespace left by a killed earlier run of this same test would clash.
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec_ok("ip", &["link", "set", "lo", "up"]);
        ns
    }

    /// A command line that runs `program args` inside the namespace.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]).args(args);
        c
    }

    pub fn exec_ok(&self, program: &str, args: &[&str]) -> Output {
        let mut full = vec!["netns", "exec", &self.name, program];
        full.extend_from_slice(args);
        run("ip", &full)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// Writes `value` to a sysctl file and restores the old value on drop (also on panic).
pub struct SysctlGuard {
    path: PathBuf,
    old: String,
}

impl SysctlGuard {
    pub fn set(path: &str, value: &str) -> SysctlGuard {
        let path = PathBuf::from(path);
        let old = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        SysctlGuard { path, old }
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, self.old.trim()) {
            eprintln!("could not restore {}: {e}", self.path.display());
        }
    }
}

/// Flags that point the kube-proxy probe at a closed port (9, discard): no kube-proxy here.
pub const NO_KUBE_PROXY: &[&str] = &[
    "--kube-proxy.metrics-url",
    "http://127.0.0.1:9",
    "--kube-proxy.healthz-url",
    "http://127.0.0.1:9",
];

/// Copies a directory tree (a fixture node) to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}
