//! Shared support for the end-to-end tests: the binary, network namespaces
//! that clean up after themselves, a lock for tests that touch global state,
//! child processes stopped by their PID, and the agent as a server (`Serve`,
//! `Agent`): started on a free port, scraped over HTTP, stopped on drop.
#![allow(dead_code)]

pub mod fake_kube_proxy;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

// ---------------------------------------------------------------------------
// Locks that hold across test binaries (tests/run.sh runs the binaries concurrently).

fn lock_file(name: &str) -> File {
    let path = std::env::temp_dir().join(format!("proxywatch-tests.{name}.lock"));
    File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn flock(f: File, arg: nix::fcntl::FlockArg) -> nix::fcntl::Flock<File> {
    nix::fcntl::Flock::lock(f, arg).unwrap_or_else(|(_, e)| panic!("flock: {e}"))
}

/// How many holders of the live-/proc lock this process has, and its shared flock while it
/// has any: one flock per process, so that a thread joining the others never waits behind a
/// kube-proxy test queued for the exclusive lock (which would wait for this process).
struct LiveProc {
    holders: usize,
    lock: Option<nix::fcntl::Flock<File>>,
}

static LIVE_PROC: Mutex<LiveProc> = Mutex::new(LiveProc { holders: 0, lock: None });

thread_local! {
    /// This thread holds `kube_proxy_process_lock`: its own agents need no shared lock.
    static HOLDS_KUBE_PROXY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Held while an agent reads the live node's `/proc` (host root `/`), where a process named
/// kube-proxy started by another test would be found and judged: shared with every other such
/// test, in every test binary, exclusive against `kube_proxy_process_lock`. `Netns::new`,
/// `Serve::start` on the host root and `Check::run` on the host root take it; a test whose agent
/// reads the live `/proc` otherwise takes it itself. A queued exclusive holder goes first
/// (a turnstile flock), so kube-proxy tests are not starved by a stream of readers.
pub struct LiveProcLock {
    counted: bool,
}

pub fn live_proc_lock() -> LiveProcLock {
    if HOLDS_KUBE_PROXY.with(|h| h.get()) {
        return LiveProcLock { counted: false };
    }
    let mut live = LIVE_PROC.lock().unwrap_or_else(|e| e.into_inner());
    if live.holders == 0 {
        let turnstile = flock(lock_file("turnstile"), nix::fcntl::FlockArg::LockExclusive);
        live.lock = Some(flock(lock_file("live-proc"), nix::fcntl::FlockArg::LockShared));
        drop(turnstile);
    }
    live.holders += 1;
    LiveProcLock { counted: true }
}

impl Drop for LiveProcLock {
    fn drop(&mut self) {
        if self.counted {
            let mut live = LIVE_PROC.lock().unwrap_or_else(|e| e.into_inner());
            live.holders -= 1;
            if live.holders == 0 {
                live.lock = None;
            }
        }
    }
}

/// Held by a test that starts a process named kube-proxy, or needs none to exist besides its
/// own: no agent of another test reads the live `/proc` meanwhile (see `live_proc_lock`), in
/// any test binary, and no other such test runs. The agents this thread starts on the host root
/// take no shared lock (they are the ones meant to see the process).
pub struct KubeProxyLock {
    _lock: nix::fcntl::Flock<File>,
    _turnstile: nix::fcntl::Flock<File>,
}

pub fn kube_proxy_process_lock() -> KubeProxyLock {
    let turnstile = flock(lock_file("turnstile"), nix::fcntl::FlockArg::LockExclusive);
    let lock = flock(lock_file("live-proc"), nix::fcntl::FlockArg::LockExclusive);
    HOLDS_KUBE_PROXY.with(|h| h.set(true));
    KubeProxyLock {
        _lock: lock,
        _turnstile: turnstile,
    }
}

impl Drop for KubeProxyLock {
    fn drop(&mut self) {
        HOLDS_KUBE_PROXY.with(|h| h.set(false));
    }
}

/// Whether an agent started with `args` (and the environment `env` adds) reads the live
/// node's `/proc`: no `--host-root` other than `/`.
fn reads_live_root<'a>(args: impl IntoIterator<Item = &'a OsStr>, env: &[(OsString, OsString)]) -> bool {
    let mut root: Option<OsString> = env
        .iter()
        .find(|(k, _)| k == "PROXYWATCH_HOST_ROOT")
        .map(|(_, v)| v.clone());
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "--host-root" {
            root = args.next().map(OsStr::to_os_string);
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--host-root=")) {
            root = Some(v.into());
        }
    }
    root.is_none_or(|r| Path::new(&r) == Path::new("/"))
}

/// Runs a command, panicking with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    succeeded(program, args, out)
}

/// Runs a command with `input` on its stdin (a rule set to restore),
/// panicking with its stderr when it fails.
pub fn run_input(program: &str, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    succeeded(program, args, child.wait_with_output().unwrap())
}

fn succeeded(program: &str, args: &[&str], out: Output) -> Output {
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
    /// An agent run in it reads the live node's /proc.
    _live: LiveProcLock,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        // The pid and a count: the tests of a grouped binary (tests/<group>/main.rs) run
        // concurrently in one process, and two files may use the same tag.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("pwt-{tag}-{}-{n}", std::process::id());
        // A namespace left by a killed earlier run of this same test would clash.
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let live = live_proc_lock();
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name, _live: live };
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

    /// [`Netns::exec_ok`] with `input` on the command's stdin.
    pub fn exec_input(&self, program: &str, args: &[&str], input: &str) -> Output {
        let mut full = vec!["netns", "exec", &self.name, program];
        full.extend_from_slice(args);
        run_input("ip", &full, input)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// `name` is `<prefix>-<8 base32 chars>-...`, kube-proxy's hashed chain naming.
pub fn kube_hashed(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|r| {
            r.len() > 9
                && r.as_bytes()[..8]
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(b))
                && r.as_bytes()[8] == b'-'
        })
}

/// kube-proxy's table in `family` (`ip`, `ip6`) of `ns`, counted from `nft -j list table`
/// in the shape of the agent's `facts.nftables.tables[].counts`: what the nftables probe
/// must report, counted by nft's own JSON and not by the agent's code.
pub fn nft_listing_counts(ns: &Netns, family: &str) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    let out = ns.exec_ok("nft", &["-j", "list", "table", family, "kube-proxy"]).stdout;
    let doc: Value = serde_json::from_slice(&out).unwrap();
    let objects = doc["nftables"].as_array().unwrap();
    let of = |kind: &'static str| objects.iter().filter_map(move |o| o.get(kind));
    let chains: Vec<&str> = of("chain").map(|c| c["name"].as_str().unwrap()).collect();
    let hashed = |p: &str| chains.iter().filter(|c| kube_hashed(c, p)).count();
    let elements = |kind: &'static str| -> Map<String, Value> {
        of(kind)
            .map(|s| {
                let n = s.get("elem").and_then(Value::as_array).map_or(0, |e| e.len());
                (s["name"].as_str().unwrap().to_string(), json!(n))
            })
            .collect()
    };
    json!({
        "chains": chains.len(),
        "base_chains": of("chain").filter(|c| c.get("hook").is_some()).count(),
        "rules": of("rule").count(),
        "service_chains": hashed("service"),
        "endpoint_chains": hashed("endpoint"),
        "external_chains": hashed("external"),
        "local_chains": hashed("local"),
        "sets": of("set").count(),
        "maps": of("map").count(),
        "map_elements": elements("map"),
        "set_elements": elements("set"),
    })
}

/// Inserts into `ns`'s conntrack table `tcp` ESTABLISHED TCP entries and `udp` UDP entries with distinct
/// source ports starting at `first_port`; returns how many were inserted.
pub fn insert_conntrack_entries(ns: &Netns, first_port: u16, tcp: u16, udp: u16) -> u64 {
    for i in 0..tcp {
        let sport = (first_port + i).to_string();
        ns.exec_ok(
            "conntrack",
            &[
                "-I",
                "-p",
                "tcp",
                "-s",
                "10.0.0.1",
                "-d",
                "10.0.0.2",
                "--sport",
                &sport,
                "--dport",
                "80",
                "--state",
                "ESTABLISHED",
                "-t",
                "600",
                "-u",
                "ASSURED",
            ],
        );
    }
    for i in 0..udp {
        let sport = (first_port + tcp + i).to_string();
        ns.exec_ok(
            "conntrack",
            &[
                "-I", "-p", "udp", "-s", "10.0.0.1", "-d", "10.0.0.3", "--sport", &sport, "--dport", "53", "-t", "600",
            ],
        );
    }
    u64::from(tcp + udp)
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

/// Flags that point the kube-proxy probe at a closed port (9, discard): no kube-proxy here. Where
/// the evidence says one belongs (a declared mode), `kube_proxy_down` is then said at once
/// (no grace: `check` would otherwise wait 30 s for it to come back).
pub const NO_KUBE_PROXY: &[&str] = &[
    "--kube-proxy.metrics-url",
    "http://127.0.0.1:9",
    "--kube-proxy.healthz-url",
    "http://127.0.0.1:9",
    "--kube-proxy.down-grace",
    "0s",
];

/// Generates kube-proxy's iptables-mode rule set (tests/tools/gen_kube_rules.py)
/// into `dir`; returns the iptables-restore input and the exact counts the
/// generator promises (see its docstring). `extra`: more generator flags.
pub fn generate_kube_rules(dir: &Path, services: u32, endpoints: u32, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let tag = format!("{services}x{endpoints}{}", extra.join(""));
    let rules = dir.join(format!("{tag}.rules"));
    let expected = dir.join(format!("{tag}.json"));
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_rules.py");
    let (s, e) = (services.to_string(), endpoints.to_string());
    let mut args = vec![
        gen.to_str().unwrap(),
        "--services",
        &s,
        "--endpoints",
        &e,
        "--expected",
        expected.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run("python3", &args);
    std::fs::write(&rules, &out.stdout).unwrap();
    let expected = serde_json::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
    (rules, expected)
}

/// The ids of a list of findings (a /findings body, or appeared/resolved of a comparison).
pub fn finding_ids(list: &serde_json::Value) -> Vec<&str> {
    list.as_array()
        .map(|l| l.iter().filter_map(|f| f["id"].as_str()).collect())
        .unwrap_or_default()
}

/// A copy of a fixture node without its netlink recording: a host root with files only and no
/// kernel to ask, for a test that brings its own stand-ins (an `iptables-nft-save` on PATH, a
/// fake kube-proxy) and must not have them contradicted by the recorded kernel. Deleted on drop.
pub struct FilesOnlyNode {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl std::ops::Deref for FilesOnlyNode {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.root
    }
}

impl AsRef<Path> for FilesOnlyNode {
    fn as_ref(&self) -> &Path {
        &self.root
    }
}

impl AsRef<OsStr> for FilesOnlyNode {
    fn as_ref(&self) -> &OsStr {
        self.root.as_os_str()
    }
}

/// The fixture node `name` as a [`FilesOnlyNode`].
pub fn files_only_node(name: &str) -> FilesOnlyNode {
    let dir = tempfile::Builder::new().prefix("pwnode-").tempdir().unwrap();
    let root = dir.path().join(name);
    copy_files_only(name, &root);
    FilesOnlyNode { _dir: dir, root }
}

/// Copies the fixture node `name` to `to` without its netlink recording (see
/// [`FilesOnlyNode`]), for a test that owns the directory it copies into.
pub fn copy_files_only(name: &str, to: &Path) {
    copy_tree(&fixtures().join("nodes").join(name), to);
    std::fs::remove_dir_all(to.join("netlink")).unwrap_or_else(|e| panic!("{name}: its netlink/: {e}"));
}

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

/// Replaces a file atomically: written beside it, then renamed over it (a reader
/// never sees it half written).
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("pwtmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A `/proc/net/stat/nf_conntrack` text with `column` set on each CPU row (the
/// test's own writer: the column found by its header name, the value in the
/// kernel's `%08x`, the kernel's layout kept).
pub fn stat_with_column(stat: &str, column: &str, per_cpu: &[u64]) -> String {
    let mut lines = stat.lines();
    let header = lines.next().unwrap();
    let col = header
        .split_whitespace()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no {column} column in {header}"));
    let mut out = format!("{header}\n");
    for (row, line) in lines.enumerate() {
        // Keep the kernel's layout (two spaces after entries and icmp_error): replace in place.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let mut at = 0;
        for f in &fields[..col] {
            at = line[at..].find(f).unwrap() + at + f.len();
        }
        let start = line[at..].find(fields[col]).unwrap() + at;
        let mut l = line.to_string();
        l.replace_range(start..start + 8, &format!("{:08x}", per_cpu[row]));
        out.push_str(&l);
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------
// Processes the tests start: stopped by their own PID, always reaped.

/// How long `stop` waits for a process to exit on SIGTERM before it sends SIGKILL.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// How long `Serve::start` waits for the agent to answer.
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// A child process of the test, stopped by its PID: SIGTERM, then SIGKILL after a
/// deadline, always reaped; also on drop (so on panic).
pub struct Process {
    what: String,
    pid: u32,
    child: Mutex<Option<Child>>,
    log: Option<PathBuf>,
}

impl Process {
    /// Wraps a spawned child; `log` is where its output goes, for messages.
    pub fn new(what: &str, child: Child, log: Option<PathBuf>) -> Process {
        Process {
            what: what.to_string(),
            pid: child.id(),
            child: Mutex::new(Some(child)),
            log,
        }
    }

    /// Spawns `cmd` with stdin closed and stdout and stderr to `log`.
    pub fn spawn(what: &str, cmd: &mut Command, log: &Path) -> Process {
        let out = File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Process::new(what, child, Some(log.to_path_buf()))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child, while not yet reaped (a panic elsewhere must not stop the reaping).
    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The whole log, empty when there is none.
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Where the log is and its last lines, for failure messages.
    fn log_tail(&self) -> String {
        let Some(path) = &self.log else {
            return "(no log)".to_string();
        };
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        format!("log {}:\n{}", path.display(), tail.join("\n"))
    }

    /// The exit status, once the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.child().as_mut()?.try_wait().unwrap()
    }

    pub fn assert_running(&self) {
        if let Some(st) = self.exited() {
            panic!("{} exited with {st}; {}", self.what, self.log_tail());
        }
    }

    /// Sends SIGTERM by PID and returns at once (only while not reaped: the PID is
    /// still this child's); `stop_within` then waits for the exit.
    pub fn sigterm(&self) {
        let mut child = self.child();
        if let Some(c) = child.as_mut() {
            if !matches!(c.try_wait(), Ok(None)) {
                return;
            }
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// SIGTERM by PID, up to `deadline` for it to exit, then SIGKILL; always reaped.
    /// The exit status and whether the process exited on SIGTERM (not killed);
    /// None when it was already stopped.
    pub fn terminate(&self, deadline: Duration) -> Option<(ExitStatus, bool)> {
        let mut child = self.child().take()?;
        if let Ok(Some(st)) = child.try_wait() {
            return Some((st, true));
        }
        // Not reaped yet, so the PID is still this child's.
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                return Some((st, true));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok().map(|st| (st, false))
    }

    /// Stops the process; panics if it did not exit within STOP_DEADLINE of SIGTERM.
    pub fn stop(self) -> ExitStatus {
        self.stop_within(STOP_DEADLINE)
    }

    /// Stops the process; panics if it did not exit within `deadline` of SIGTERM (it is killed then).
    pub fn stop_within(self, deadline: Duration) -> ExitStatus {
        self.stop_by(deadline)
    }

    /// Stops the process and asserts a clean exit (0) on SIGTERM.
    pub fn stop_cleanly(self) {
        let st = self.stop_by(STOP_DEADLINE);
        assert!(
            st.success(),
            "{} exited with {st} on SIGTERM; {}",
            self.what,
            self.log_tail()
        );
    }

    fn stop_by(&self, deadline: Duration) -> ExitStatus {
        match self.terminate(deadline) {
            Some((st, true)) => st,
            Some((_, false)) => panic!(
                "{} did not stop on SIGTERM within {deadline:?} (killed); {}",
                self.what,
                self.log_tail()
            ),
            None => panic!("{}: no child to stop", self.what),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.terminate(STOP_DEADLINE);
    }
}

// ---------------------------------------------------------------------------
// HTTP/1.0 clients: the server closes the connection after one plain body.

/// A port on 127.0.0.1 free a moment ago (bound, learned, closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `request` as is and returns the whole answer, from inside the network
/// namespace `netns` when given: a thread enters it with setns(2), so only that
/// thread changes namespace.
fn exchange(netns: Option<&str>, addr: SocketAddr, request: &[u8]) -> Result<Vec<u8>, String> {
    let talk = move |request: &[u8]| -> Result<Vec<u8>, String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("{addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).map_err(|e| format!("{addr}: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(|e| format!("{addr}: {e}"))?;
        Ok(raw)
    };
    let Some(netns) = netns else {
        return talk(request);
    };
    let nspath = format!("/run/netns/{netns}");
    let request = request.to_vec();
    std::thread::spawn(move || {
        let f = File::open(&nspath).map_err(|e| format!("{nspath}: {e}"))?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns {nspath}: {e}"))?;
        talk(&request)
    })
    .join()
    .expect("HTTP thread panicked")
}

/// `POST path` of a JSON body from inside `ns`: the status code and the body.
pub fn http_post_json_in(ns: &Netns, addr: SocketAddr, path: &str, json: &str) -> Result<(u16, String), String> {
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    );
    let raw = exchange(Some(&ns.name), addr, request.as_bytes()).map_err(|e| format!("POST {path}: {e}"))?;
    let resp = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

/// `GET path` with extra header lines (each ending in CRLF): the status code and the body.
fn get(netns: Option<&str>, addr: SocketAddr, path: &str, headers: &str) -> Result<(u16, String), String> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n");
    let raw = exchange(netns, addr, request.as_bytes()).map_err(|e| format!("GET {path}: {e}"))?;
    let resp = String::from_utf8(raw).map_err(|e| format!("{addr}{path}: {e}"))?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: no header end in {resp:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{addr}{path}: bad status line {head:?}"))?;
    Ok((code, body.to_string()))
}

/// Calls `f` until it returns Ok, for at most `deadline`; panics with its last Err.
pub fn poll<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(t) => return t,
            Err(last) if start.elapsed() > deadline => {
                panic!("{what}: not reached within {deadline:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The value of one series (`name{labels}` exactly as rendered) in Prometheus text;
/// a value that is not a number panics.
pub fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(n, _)| *n == name))
        .map(|(_, v)| v.parse().unwrap_or_else(|_| panic!("{name}: {v:?}")))
}

/// `GET path` over HTTP/1.0: the status code and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    get(None, addr, path, "")
}

/// `GET path` from inside `ns` (for servers listening in it).
pub fn http_get_in(ns: &Netns, addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    get(Some(&ns.name), addr, path, "")
}

// ---------------------------------------------------------------------------
// The agent's one-shot `check`.

/// `proxywatch check --format json` as a test runs it: with the given arguments and
/// environment, inside a test's netns or through a launcher (`wrap`) when asked; `run` waits
/// for it and returns its exit code, output and parsed JSON. On the host root (no
/// `--host-root` of its own) it holds `live_proc_lock` while it runs.
pub struct Check {
    wrap: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_clear: bool,
    netns: Option<String>,
    current_dir: Option<PathBuf>,
    format: String,
}

/// What a `check` run printed and returned.
pub struct Checked {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// stdout parsed, for `--format json` (the default); Null for another format.
    pub doc: serde_json::Value,
    pub stdout: String,
    pub stderr: String,
}

impl Default for Check {
    fn default() -> Self {
        Check::new()
    }
}

impl Check {
    pub fn new() -> Check {
        Check {
            wrap: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            netns: None,
            current_dir: None,
            format: "json".into(),
        }
    }

    /// `--format text` (or another): `run` then leaves `doc` Null.
    pub fn format(mut self, format: &str) -> Check {
        self.format = format.into();
        self
    }

    pub fn host_root(self, root: impl AsRef<OsStr>) -> Check {
        self.arg("--host-root").arg(root)
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Check {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Check {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// No inherited environment (clap reads PROXYWATCH_*): only what `env` adds.
    pub fn env_clear(mut self) -> Check {
        self.env_clear = true;
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Check {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Check {
        self.current_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Runs it inside `ns` (`ip netns exec`).
    pub fn in_netns(self, ns: &Netns) -> Check {
        self.in_netns_named(&ns.name)
    }

    /// The same by the namespace's name (from a thread that has no `Netns`).
    pub fn in_netns_named(mut self, name: &str) -> Check {
        self.netns = Some(name.to_string());
        self
    }

    /// Runs it through a launcher that execs it (`setpriv ... --`, `unshare ...`).
    pub fn wrap<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, launcher: I) -> Check {
        self.wrap.extend(launcher.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// The command line, to run by hand (to time it or feed its stdin).
    pub fn command(&self) -> Command {
        let mut line: Vec<OsString> = Vec::new();
        if let Some(ns) = &self.netns {
            line.push(which("ip").expect("`ip` on PATH").into());
            line.extend(["netns", "exec", ns].map(OsString::from));
        }
        line.extend(self.wrap.iter().cloned());
        line.push(binary().into());
        let mut cmd = Command::new(&line[0]);
        cmd.args(&line[1..]);
        cmd.arg("check").arg("--format").arg(&self.format).args(&self.args);
        if self.env_clear {
            cmd.env_clear();
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs it to its end; panics if it panicked or, for JSON, printed no JSON document.
    pub fn run(self) -> Checked {
        let _live = reads_live_root(self.args.iter().map(OsString::as_os_str), &self.env).then(live_proc_lock);
        let out = self.command().output().expect("run proxywatch check");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "proxywatch check panicked:\n{stderr}");
        let doc = if self.format == "json" {
            serde_json::from_str(&stdout).unwrap_or_else(|e| {
                panic!(
                    "proxywatch check printed no JSON ({e}); {}\nstdout: {stdout}\nstderr: {stderr}",
                    out.status
                )
            })
        } else {
            serde_json::Value::Null
        };
        Checked {
            code: out.status.code().unwrap_or(-1),
            doc,
            stdout,
            stderr,
        }
    }
}

// ---------------------------------------------------------------------------
// The agent as a server.

/// `proxywatch serve` as a test starts it: on a free loopback port (or a given
/// address, e.g. inside a network namespace), with the given arguments and
/// environment; stdout discarded, stderr to a log. `start` waits until it answers.
pub struct Serve {
    wrap: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_clear: bool,
    current_dir: Option<PathBuf>,
    user: Option<(u32, u32)>,
    netns: Option<String>,
    listen: Option<SocketAddr>,
    log: Option<PathBuf>,
    ready: Option<String>,
    token: Option<String>,
}

impl Default for Serve {
    fn default() -> Self {
        Serve::new()
    }
}

impl Serve {
    /// By default `start` waits for `/metrics` to answer 200: the first snapshot,
    /// once every probe has reported.
    pub fn new() -> Serve {
        Serve {
            wrap: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            current_dir: None,
            user: None,
            netns: None,
            listen: None,
            log: None,
            ready: Some("/metrics".to_string()),
            token: None,
        }
    }

    /// Starts the agent through a launcher: `launcher... proxywatch serve ...` (inside the
    /// netns when there is one). Each program of the launcher must exec the next, as
    /// `unshare`, `setpriv` and `sh -c '... exec "$@"'` do, so that the child's PID stays
    /// the agent's (stopped, signalled and read in /proc by that PID); or, as
    /// `unshare --pid --fork --kill-child` does, take the agent down with it, and then the
    /// child's PID is the launcher's (the test finds the agent under it).
    pub fn wrap<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, launcher: I) -> Serve {
        self.wrap.extend(launcher.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Serve {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Serve {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// No inherited environment (clap reads PROXYWATCH_*): only what `env` adds.
    pub fn env_clear(mut self) -> Serve {
        self.env_clear = true;
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Serve {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Serve {
        self.current_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Runs the agent as this user and group.
    pub fn user(mut self, uid: u32, gid: u32) -> Serve {
        self.user = Some((uid, gid));
        self
    }

    /// Runs the agent inside `ns` (`ip netns exec` execs it, so the child's PID is
    /// the agent's), on 127.0.0.1:9877 unless `listen` says otherwise: every port
    /// is free there. Requests go from inside the namespace too.
    pub fn in_netns(mut self, ns: &Netns) -> Serve {
        self.netns = Some(ns.name.clone());
        self
    }

    /// Listens on `addr` instead of a free loopback port.
    pub fn listen(mut self, addr: &str) -> Serve {
        self.listen = Some(addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")));
        self
    }

    /// Writes stderr to `path` instead of a temporary file.
    pub fn log(mut self, path: impl AsRef<Path>) -> Serve {
        self.log = Some(path.as_ref().to_path_buf());
        self
    }

    /// `start` waits until `GET path` answers 200 (instead of `/metrics`).
    pub fn ready(mut self, path: &str) -> Serve {
        self.ready = Some(path.to_string());
        self
    }

    /// `start` returns as soon as the agent is spawned.
    pub fn no_wait(mut self) -> Serve {
        self.ready = None;
        self
    }

    /// Every request sends `Authorization: Bearer <token>`.
    pub fn bearer_token(mut self, token: &str) -> Serve {
        self.token = Some(token.to_string());
        self
    }

    fn command(&self, addr: SocketAddr, log: &Path) -> Command {
        let mut line: Vec<OsString> = Vec::new();
        if let Some(ns) = &self.netns {
            line.push(which("ip").expect("`ip` on PATH").into());
            line.extend(["netns", "exec", ns].map(OsString::from));
        }
        line.extend(self.wrap.iter().cloned());
        line.push(binary().into());
        let mut cmd = Command::new(&line[0]);
        cmd.args(&line[1..]);
        cmd.arg("serve").arg(format!("--listen={addr}")).args(&self.args);
        if self.env_clear {
            cmd.env_clear();
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display())));
        cmd
    }

    /// Starts the agent and waits until it answers (see `ready`); panics if it
    /// exits first or does not answer within START_DEADLINE. On a free port
    /// another process took meanwhile, it tries another.
    pub fn start(self) -> Agent {
        let attempts = if self.listen.is_some() { 1 } else { 5 };
        let mut live = reads_live_root(self.args.iter().map(OsString::as_os_str), &self.env).then(live_proc_lock);
        for attempt in 1..=attempts {
            let addr = match (self.listen, &self.netns) {
                (Some(addr), _) => addr,
                (None, Some(_)) => "127.0.0.1:9877".parse().unwrap(),
                (None, None) => SocketAddr::from(([127, 0, 0, 1], free_port())),
            };
            let dir = tempfile::Builder::new().prefix("pwserve-").tempdir().unwrap();
            let log = self.log.clone().unwrap_or_else(|| dir.path().join("serve.log"));
            let child = self
                .command(addr, &log)
                .spawn()
                .unwrap_or_else(|e| panic!("start proxywatch serve: {e}"));
            let mut agent = Agent {
                process: Process::new("proxywatch serve", child, Some(log)),
                addr,
                netns: self.netns.clone(),
                headers: self
                    .token
                    .as_ref()
                    .map(|t| format!("Authorization: Bearer {t}\r\n"))
                    .unwrap_or_default(),
                first: String::new(),
                _dir: dir,
                _live: None,
            };
            let Some(path) = &self.ready else {
                agent._live = live.take();
                return agent;
            };
            let start = Instant::now();
            loop {
                if let Some(st) = agent.process.exited() {
                    let log = agent.log();
                    if attempt < attempts && log.contains("listening on") {
                        eprintln!("proxywatch serve could not listen on {addr}, trying another port: {log}");
                        break;
                    }
                    panic!("proxywatch serve exited with {st} before answering on {addr}:\n{log}");
                }
                match agent.get(path) {
                    Ok((200, body)) => {
                        agent.first = body;
                        agent._live = live.take();
                        return agent;
                    }
                    Ok((503, body)) if body.contains("no snapshot yet") => {}
                    Ok((code, body)) => panic!(
                        "{path} answered {code} while the agent started: {body}\n{}",
                        agent.log()
                    ),
                    Err(_) => {} // not listening yet
                }
                if start.elapsed() > START_DEADLINE {
                    panic!(
                        "proxywatch serve on {addr}: {path} not 200 within {START_DEADLINE:?}:\n{}",
                        agent.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("proxywatch serve never came up");
    }
}

/// A running `proxywatch serve`, stopped by its PID (SIGTERM, then SIGKILL) and
/// reaped on drop, also on panic.
pub struct Agent {
    process: Process,
    addr: SocketAddr,
    netns: Option<String>,
    headers: String,
    first: String,
    _dir: tempfile::TempDir,
    /// Released after the agent stopped (fields drop in order).
    _live: Option<LiveProcLock>,
}

impl Agent {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The body of the 200 answer `start` waited for (the first `/metrics` by default).
    pub fn first_answer(&self) -> &str {
        &self.first
    }

    /// `GET path`: the status code and the body; Err when nothing answers.
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        get(self.netns.as_deref(), self.addr, path, &self.headers)
    }

    /// `/snapshot` as JSON; Err while it does not answer 200.
    pub fn snapshot(&self) -> Result<serde_json::Value, String> {
        match self.get("/snapshot")? {
            (200, body) => serde_json::from_str(&body).map_err(|e| format!("/snapshot: {e}")),
            (code, body) => Err(format!("/snapshot: HTTP {code}: {body}")),
        }
    }

    /// `GET path`'s body when it answered 200; None while the agent does not answer yet or
    /// answers another status.
    pub fn get_200(&self, path: &str) -> Option<String> {
        match self.get(path) {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    }

    /// `GET path`, which must answer 200: the body.
    pub fn get_ok(&self, path: &str) -> String {
        match self.get(path) {
            Ok((200, body)) => body,
            other => panic!("{path}: {other:?}\n{}", self.log()),
        }
    }

    /// Sends a raw request as is: the whole answer (status line, headers, body).
    pub fn request(&self, raw: &str) -> Result<String, String> {
        let answer = exchange(self.netns.as_deref(), self.addr, raw.as_bytes())?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    pub fn exited(&self) -> Option<ExitStatus> {
        self.process.exited()
    }

    pub fn assert_running(&self) {
        self.process.assert_running()
    }

    /// Sends SIGTERM without waiting (to act while the agent shuts down); `stop_within` waits.
    pub fn sigterm(&self) {
        self.process.sigterm()
    }

    /// Stops the agent; panics if it did not exit within STOP_DEADLINE of SIGTERM.
    pub fn stop(self) -> ExitStatus {
        self.process.stop()
    }

    pub fn stop_within(self, deadline: Duration) -> ExitStatus {
        self.process.stop_within(deadline)
    }

    /// Stops the agent and asserts it exited 0 on SIGTERM.
    pub fn stop_cleanly(self) {
        self.process.stop_cleanly()
    }
}

/// kube-proxy's iptables-mode `nat` table, as `iptables-restore` input, for a
/// few hand-written services (tests/tools/gen_kube_rules.py makes many).
pub struct KubeNat {
    chains: Vec<String>,
    rules: Vec<String>,
}

impl KubeNat {
    /// The service portals from OUTPUT and PREROUTING, and KUBE-MARK-MASQ.
    pub fn new() -> KubeNat {
        let mut t = KubeNat {
            chains: Vec::new(),
            rules: Vec::new(),
        };
        t.chain("KUBE-SERVICES").chain("KUBE-MARK-MASQ");
        t.rule("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
            .rule("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
            .rule("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000");
        t
    }

    pub fn chain(&mut self, name: &str) -> &mut KubeNat {
        self.chains.push(name.to_string());
        self
    }

    /// One `-A CHAIN ...` line, after those added before it.
    pub fn rule(&mut self, rule: &str) -> &mut KubeNat {
        self.rules.push(rule.to_string());
        self
    }

    /// A ClusterIP service `ip:port/proto`: KUBE-SERVICES jumps to KUBE-SVC-`svc`,
    /// which picks one of `endpoints` (its KUBE-SEP chain, its address) with
    /// kube-proxy's probabilities; each KUBE-SEP DNATs to the address, port `tport`.
    pub fn service(
        &mut self,
        svc: &str,
        ip: &str,
        proto: &str,
        port: u16,
        tport: u16,
        endpoints: &[(String, String)],
    ) -> &mut KubeNat {
        let svc_chain = format!("KUBE-SVC-{svc}");
        self.chain(&svc_chain).rule(&format!(
            "-A KUBE-SERVICES -m comment --comment \"ns/{svc} cluster IP\" -m {proto} -p {proto} -d {ip} --dport {port} -j {svc_chain}"
        ));
        for (n, (sep, ep)) in endpoints.iter().enumerate() {
            let left = endpoints.len() - n;
            let stat = if left > 1 {
                format!("-m statistic --mode random --probability {:.10} ", 1.0 / left as f64)
            } else {
                String::new()
            };
            self.chain(sep)
                .rule(&format!(
                    "-A {svc_chain} -m comment --comment \"ns/{svc} -> {ep}:{tport}\" {stat}-j {sep}"
                ))
                .rule(&format!("-A {sep} -s {ep}/32 -j KUBE-MARK-MASQ"))
                .rule(&format!(
                    "-A {sep} -m {proto} -p {proto} -j DNAT --to-destination {ep}:{tport}"
                ));
        }
        self
    }

    pub fn render(&self) -> String {
        let mut t = String::from(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
        );
        for c in &self.chains {
            t.push_str(&format!(":{c} - [0:0]\n"));
        }
        for r in &self.rules {
            t.push_str(r);
            t.push('\n');
        }
        t.push_str("COMMIT\n");
        t
    }
}

/// Every probe's interval, made longer than any test: `serve` runs one round of
/// probes, as `check` does (a second conntrack reading would open the drop window,
/// which changes the conntrack_drops finding). kube-proxy's stays the default: tests
/// that follow a stand-in kube-proxy read it again.
pub const ONE_ROUND: &[&str] = &[
    "--node.interval",
    "1h",
    "--modules.interval",
    "1h",
    "--conntrack.interval",
    "1h",
    "--sysctls.interval",
    "1h",
    "--iptables.interval",
    "1h",
    "--nftables.interval",
    "1h",
    "--ipvs.interval",
    "1h",
];
