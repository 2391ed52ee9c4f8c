//! The one command runner. Every external command the agent runs goes
//! through here: fixed argv (never a shell), its own process group, both pipes
//! drained concurrently, stdout streamed line by line under a byte cap,
//! stderr's head kept for the error message, a timeout that kills the whole
//! group, and the child always waited for (no zombies).

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::Semaphore;

/// How much of stderr is kept for error messages; the rest is drained and dropped.
const STDERR_KEEP: usize = 4096;
/// A single output line longer than this is treated as garbage.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Pids of the commands being run, so the PID-1 reaper leaves them to their
/// waiter. Its lock is held across spawn and registration, and by the reaper
/// across its check and its `waitpid`: a command that exits before its pid is
/// registered cannot be reaped by the reaper in between (its waiter would get
/// ECHILD and the probe fail).
static OWNED: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn owned_pids() -> std::sync::MutexGuard<'static, Vec<i32>> {
    OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` with the pids of the commands being waited for, no command being
/// spawned or registered meanwhile (`f` must be quick: spawns wait for it).
pub fn with_owned_pids<R>(f: impl FnOnce(&[i32]) -> R) -> R {
    f(&owned_pids())
}

/// A pid registered as a command's; unregistered on drop.
struct Owned(Option<i32>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            owned_pids().retain(|&x| x != p);
        }
    }
}

/// Test hook: runs right after a command is spawned, before it is registered.
#[cfg(test)]
pub(crate) mod hook {
    use std::cell::Cell;
    thread_local! {
        pub(crate) static AFTER_SPAWN: Cell<Option<fn(i32)>> = const { Cell::new(None) };
    }
}

/// Spawns `cmd` and registers its pid as a command's, under one lock (see OWNED).
fn spawn_owned(cmd: &mut Command) -> std::io::Result<(tokio::process::Child, Owned)> {
    let mut owned = owned_pids();
    let child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32);
    #[cfg(test)]
    if let (Some(f), Some(p)) = (hook::AFTER_SPAWN.with(|h| h.get()), pid) {
        f(p);
    }
    if let Some(p) = pid {
        owned.push(p);
    }
    Ok((child, Owned(pid)))
}

/// Whether `program` is an executable file in a PATH directory: probes look
/// before they run, so a missing tool reads as "absent", not as a failure.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path)
        .any(|d| std::fs::metadata(d.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// A captured command's stdout is held whole in memory, so it is capped at
/// most here whatever `--exec.max-output-bytes` says: a quarter of the
/// DaemonSet's 64Mi memory limit. Streamed commands (the iptables saves) hold
/// one line at a time and keep the flag's cap.
pub const MAX_CAPTURE_BYTES: u64 = 16 << 20;

/// Runs commands with a bound on how many run at once, and at most one
/// rule-set dump at a time (each can cost the node hundreds of MiB and seconds).
#[derive(Debug, Clone)]
pub struct Runner {
    slots: Arc<Semaphore>,
    dumps: Arc<Semaphore>,
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
    /// stdout beyond this many bytes kills the command and fails the run.
    pub max_output_bytes: u64,
    /// What a permission error usually means for this command, e.g. "needs CAP_NET_ADMIN".
    pub permission_hint: &'static str,
    /// A rule-set dump (iptables-save, nft list, ipvsadm): one at a time.
    pub dump: bool,
}

impl CommandSpec {
    pub fn new(program: &str, args: &[&str]) -> Self {
        CommandSpec {
            program: program.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_secs(10),
            max_output_bytes: 64 << 20,
            permission_hint: "run as root",
            dump: false,
        }
    }

    /// Marks the command as a rule-set dump: it waits for any other dump to end.
    pub fn dump(mut self) -> Self {
        self.dump = true;
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn max_output_bytes(mut self, n: u64) -> Self {
        self.max_output_bytes = n;
        self
    }

    pub fn permission_hint(mut self, h: &'static str) -> Self {
        self.permission_hint = h;
        self
    }

    /// The command line as a person would type it, for messages.
    pub fn display(&self) -> String {
        let mut s = self.program.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// How a finished command ended.
#[derive(Debug, Clone)]
pub struct Finished {
    pub status: ExitStatus,
    /// Bytes read from stdout.
    pub stdout_bytes: u64,
    /// The first few KiB of stderr, lossily decoded.
    pub stderr_head: String,
    /// Wall time from spawn to exit.
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{command}: command not found on PATH")]
    NotFound { command: String },
    #[error("{command}: permission denied ({hint})")]
    PermissionDenied { command: String, hint: &'static str },
    #[error("{command}: could not start: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{command}: timed out after {after:?}; killed")]
    Timeout { command: String, after: Duration },
    /// Its deadline passed while another rule-set dump ran (one runs at a time): never started.
    #[error("{command}: not run: another rule-set dump held the node for all of its {after:?} (one runs at a time)")]
    DumpBusy { command: String, after: Duration },
    #[error("{command}: output exceeds {limit} bytes; killed")]
    OutputTooLarge { command: String, limit: u64 },
    #[error("{command}: an output line exceeds {limit} bytes; killed")]
    LineTooLong { command: String, limit: usize },
    #[error("{command}: {status}{}", stderr_suffix(.stderr))]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
        hint: Option<&'static str>,
    },
    #[error("{command}: reading output: {source}")]
    Io { command: String, source: std::io::Error },
    /// The line consumer refused a line (a parse error); the command was killed.
    #[error("{0}")]
    Consumer(String),
}

fn stderr_suffix(stderr: &str) -> String {
    let t = stderr.trim();
    if t.is_empty() {
        String::new()
    } else {
        format!(": {}", t.lines().take(3).collect::<Vec<_>>().join(" / "))
    }
}

impl Default for Runner {
    fn default() -> Self {
        Runner::new(4)
    }
}

impl Runner {
    /// `max_children`: how many commands may run at once across all probes.
    pub fn new(max_children: usize) -> Self {
        Runner {
            slots: Arc::new(Semaphore::new(max_children.max(1))),
            dumps: Arc::new(Semaphore::new(1)),
        }
    }

    /// A dump waits for the other dumps before it takes a child slot, within its timeout: the
    /// wait is part of its deadline, and a dump that never got its turn says so. None for a
    /// command that is not a dump.
    async fn dump_turn(
        &self,
        spec: &CommandSpec,
        command: &str,
    ) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, ExecError> {
        if !spec.dump {
            return Ok(None);
        }
        match tokio::time::timeout(spec.timeout, self.dumps.acquire()).await {
            Ok(permit) => Ok(Some(permit.expect("semaphore never closed"))),
            Err(_) => Err(ExecError::DumpBusy {
                command: command.to_string(),
                after: spec.timeout,
            }),
        }
    }

    /// Runs `spec`, passing each stdout line (without its newline) to `on_line`.
    /// Returns how the command ended; a non-zero exit is not an error here:
    /// callers decide (some tools exit 1 for "nothing to show").
    pub async fn run_lines<F>(&self, spec: &CommandSpec, mut on_line: F) -> Result<Finished, ExecError>
    where
        F: FnMut(&str) -> Result<(), String>,
    {
        let asked = Instant::now();
        let command = spec.display();
        let _dump = self.dump_turn(spec, &command).await?;
        let _slot = self.slots.acquire().await.expect("semaphore never closed");
        let timeout = spec.timeout.saturating_sub(asked.elapsed());
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let started = Instant::now();
        let (mut child, _owned) = spawn_owned(&mut cmd).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ExecError::NotFound {
                command: command.clone(),
            },
            std::io::ErrorKind::PermissionDenied => ExecError::PermissionDenied {
                command: command.clone(),
                hint: spec.permission_hint,
            },
            _ => ExecError::Spawn {
                command: command.clone(),
                source: e,
            },
        })?;
        // The child leads its own group (process_group(0)), so its pid is the group id.
        let group = child.id().map(|p| nix::unistd::Pid::from_raw(p as i32));
        let _reaper = GroupGuard(group);
        let stdout = child.stdout.take().expect("stdout piped");
        let stderr = child.stderr.take().expect("stderr piped");

        let work = async {
            let stream = async {
                let r = stream_lines(stdout, spec.max_output_bytes, &mut on_line).await;
                if r.is_err() {
                    // Refused output: stop the command now rather than wait for it.
                    kill_group(group);
                }
                r
            };
            let (out, err) = tokio::join!(stream, drain_head(stderr));
            // Output closed is not exit: wait for the command itself (within the timeout).
            let status = child.wait().await;
            (out, err, status)
        };
        let outcome = tokio::time::timeout(timeout, work).await;
        // Whatever happened, nothing of the group may outlive the run: kill
        // leftovers (double-forked grandchildren), then reap the child if the
        // timeout interrupted the wait.
        kill_group(group);
        let (out, stderr_head, status) = match outcome {
            Ok(v) => v,
            Err(_) => {
                let _ = child.wait().await;
                return Err(ExecError::Timeout {
                    command,
                    after: timeout,
                });
            }
        };
        let status = status.map_err(|e| ExecError::Io {
            command: command.clone(),
            source: e,
        })?;
        let duration = started.elapsed();
        let stdout_bytes = match out {
            Ok(n) => n,
            Err(StreamError::TooLarge) => {
                return Err(ExecError::OutputTooLarge {
                    command,
                    limit: spec.max_output_bytes,
                })
            }
            Err(StreamError::LineTooLong) => {
                return Err(ExecError::LineTooLong {
                    command,
                    limit: MAX_LINE_BYTES,
                })
            }
            Err(StreamError::Io(e)) => return Err(ExecError::Io { command, source: e }),
            Err(StreamError::Consumer(m)) => return Err(ExecError::Consumer(m)),
        };
        Ok(Finished {
            status,
            stdout_bytes,
            stderr_head,
            duration,
        })
    }

    /// Runs `spec` and returns its whole stdout (bounded by the spec's cap).
    /// Like [`Runner::run_lines`], keeping stdout whole; its cap is at most [`MAX_CAPTURE_BYTES`].
    pub async fn run_capture(&self, spec: &CommandSpec) -> Result<(String, Finished), ExecError> {
        let mut text = String::new();
        let capped = CommandSpec {
            max_output_bytes: spec.max_output_bytes.min(MAX_CAPTURE_BYTES),
            ..spec.clone()
        };
        let fin = self
            .run_lines(&capped, |line| {
                text.push_str(line);
                text.push('\n');
                Ok(())
            })
            .await?;
        Ok((text, fin))
    }
}

impl ExecError {
    /// Turns a non-zero exit into an error, with a capability hint when stderr says permission.
    pub fn check_status(spec: &CommandSpec, fin: &Finished) -> Result<(), ExecError> {
        if fin.status.success() {
            return Ok(());
        }
        let lower = fin.stderr_head.to_ascii_lowercase();
        let hint = (lower.contains("permission denied") || lower.contains("operation not permitted"))
            .then_some(spec.permission_hint);
        let mut stderr = fin.stderr_head.clone();
        if let Some(h) = hint {
            stderr = format!("{} ({h})", stderr.trim());
        }
        Err(ExecError::Failed {
            command: spec.display(),
            status: fin.status,
            stderr,
            hint,
        })
    }
}

struct GroupGuard(Option<nix::unistd::Pid>);

impl Drop for GroupGuard {
    // Covers cancellation: if the probe's future is dropped mid-run (its own
    // timeout, shutdown), the group is still killed; kill_on_drop reaps the child.
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

fn kill_group(group: Option<nix::unistd::Pid>) {
    if let Some(pgid) = group {
        // ESRCH (group already gone) is the normal case.
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    }
}

enum StreamError {
    TooLarge,
    LineTooLong,
    Io(std::io::Error),
    Consumer(String),
}

async fn stream_lines<R, F>(mut r: R, cap: u64, on_line: &mut F) -> Result<u64, StreamError>
where
    R: AsyncRead + Unpin,
    F: FnMut(&str) -> Result<(), String>,
{
    let mut total: u64 = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = r.read(&mut chunk).await.map_err(StreamError::Io)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > cap {
            return Err(StreamError::TooLarge);
        }
        let mut rest = &chunk[..n];
        while let Some(pos) = memchr_newline(rest) {
            pending.extend_from_slice(&rest[..pos]);
            emit(&pending, on_line)?;
            pending.clear();
            rest = &rest[pos + 1..];
        }
        pending.extend_from_slice(rest);
        if pending.len() > MAX_LINE_BYTES {
            return Err(StreamError::LineTooLong);
        }
    }
    if !pending.is_empty() {
        emit(&pending, on_line)?;
    }
    Ok(total)
}

fn emit<F>(line: &[u8], on_line: &mut F) -> Result<(), StreamError>
where
    F: FnMut(&str) -> Result<(), String>,
{
    let text = String::from_utf8_lossy(line);
    on_line(&text).map_err(StreamError::Consumer)
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

async fn drain_head<R: AsyncRead + Unpin>(mut r: R) -> String {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = STDERR_KEEP.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> CommandSpec {
        CommandSpec::new("/bin/sh", &["-c", script]).timeout(Duration::from_secs(5))
    }

    #[tokio::test]
    async fn streams_lines_and_keeps_stderr() {
        let r = Runner::default();
        let spec = sh("printf 'a\\nb\\nlast'; echo oops >&2; exit 3");
        let mut lines = Vec::new();
        let fin = r
            .run_lines(&spec, |l| {
                lines.push(l.to_string());
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(lines, ["a", "b", "last"]);
        assert_eq!(fin.stdout_bytes, 8);
        assert_eq!(fin.status.code(), Some(3));
        let err = ExecError::check_status(&spec, &fin).unwrap_err();
        assert!(err.to_string().contains("oops"), "{err}");
    }

    #[tokio::test]
    async fn missing_program_is_not_found() {
        let r = Runner::default();
        let err = r
            .run_capture(&CommandSpec::new("proxywatch-no-such-tool", &[]))
            .await
            .unwrap_err();
        assert!(matches!(err, ExecError::NotFound { .. }), "{err}");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let r = Runner::default();
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // The grandchild writes its pid, then both sleep past the timeout.
        let script = format!("sh -c 'echo $$ > {}; exec sleep 30' & sleep 30", pidfile.display());
        let spec = sh(&script).timeout(Duration::from_millis(500));
        let err = r.run_capture(&spec).await.unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // SIGKILL is delivered asynchronously: give the kernel a moment under load.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while process_alive(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!process_alive(pid), "grandchild {pid} survived");
    }

    #[tokio::test]
    async fn closing_output_before_exit_is_not_a_kill() {
        // Like GNU cat: output closed, then a moment before exit.
        let r = Runner::default();
        let spec = sh("echo done; exec >&- 2>&-; sleep 0.3; exit 0");
        let (text, fin) = r.run_capture(&spec).await.unwrap();
        assert_eq!(text, "done\n");
        assert!(fin.status.success(), "{:?}", fin.status);
    }

    #[tokio::test]
    async fn output_cap_kills() {
        let r = Runner::default();
        let spec = sh("yes proxywatch").max_output_bytes(100_000);
        let err = r.run_capture(&spec).await.unwrap_err();
        assert!(matches!(err, ExecError::OutputTooLarge { limit: 100_000, .. }), "{err}");
    }

    #[tokio::test]
    async fn captured_output_is_capped_far_below_the_pod_limit() {
        // A cap above MAX_CAPTURE_BYTES is lowered to it for a command held whole in memory...
        let r = Runner::default();
        let spec = sh("yes proxywatch").max_output_bytes(1 << 30);
        let err = r.run_capture(&spec).await.unwrap_err();
        assert!(
            matches!(
                err,
                ExecError::OutputTooLarge {
                    limit: MAX_CAPTURE_BYTES,
                    ..
                }
            ),
            "{err}"
        );
        // ...not for a streamed one, which holds one line at a time.
        let mut bytes = 0u64;
        let fin = r
            .run_lines(
                &sh("head -c 20000000 /dev/zero | tr '\\0' 'x' | fold -w 1000").max_output_bytes(1 << 30),
                |l| {
                    bytes += l.len() as u64 + 1;
                    Ok(())
                },
            )
            .await
            .unwrap();
        assert!(fin.status.success());
        assert!(bytes > MAX_CAPTURE_BYTES, "{bytes}");
    }

    #[tokio::test]
    async fn one_rule_set_dump_at_a_time() {
        // Each dump records its start and end; with four child slots, dumps must still not overlap.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let r = Runner::new(4);
        let script = format!("echo start >> {0}; sleep 0.2; echo end >> {0}", log.display());
        let runs = (0..3).map(|_| {
            let (r, spec) = (r.clone(), sh(&script).dump());
            async move { r.run_capture(&spec).await.unwrap() }
        });
        futures_util::future::join_all(runs).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text, "start\nend\n".repeat(3), "dumps overlapped");
    }

    #[tokio::test]
    async fn a_dump_that_never_gets_its_turn_says_so() {
        // A hung dump holds the dump slot; another dump with a shorter deadline is not run,
        // and its error names the wait, not a timeout of its own.
        let r = Runner::new(4);
        let hung = {
            let r = r.clone();
            tokio::spawn(async move { r.run_capture(&sh("sleep 1").dump()).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("ran");
        let waiting = sh(&format!("touch {}", mark.display()))
            .dump()
            .timeout(Duration::from_millis(300));
        let e = r.run_capture(&waiting).await.unwrap_err();
        assert!(matches!(e, ExecError::DumpBusy { .. }), "{e}");
        assert!(e.to_string().contains("another rule-set dump"), "{e}");
        assert!(!mark.exists(), "the waiting dump ran");
        hung.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn children_beyond_the_cap_wait() {
        // Three commands that are not dumps, each counting the ones running at its start:
        // never more than the cap, and exactly the cap when it is 2 (so they do overlap).
        for cap in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let (running, log) = (dir.path().join("running"), dir.path().join("log"));
            std::fs::create_dir(&running).unwrap();
            let r = Runner::new(cap);
            let script = format!(
                ": > {0}/$$; n=0; for f in {0}/*; do n=$((n + 1)); done; echo $n >> {1}; sleep 0.3; rm {0}/$$",
                running.display(),
                log.display()
            );
            let runs = (0..3).map(|_| {
                let (r, spec) = (r.clone(), sh(&script));
                async move { r.run_capture(&spec).await.unwrap() }
            });
            futures_util::future::join_all(runs).await;
            let most = std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .map(|l| l.parse::<usize>().unwrap())
                .max();
            assert_eq!(most, Some(cap), "--exec.max-children {cap}");
        }
    }

    #[tokio::test]
    async fn endless_line_is_refused() {
        let r = Runner::default();
        let spec = sh("tr '\\0' x < /dev/zero");
        let err = r.run_capture(&spec).await.unwrap_err();
        assert!(matches!(err, ExecError::LineTooLong { .. }), "{err}");
    }

    fn process_alive(pid: i32) -> bool {
        // A zombie still has a /proc entry; count it as gone only when reaped or dead.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => false,
            Ok(s) => !s.contains(") Z "),
        }
    }
}
