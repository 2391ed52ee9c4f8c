//! When the agent is PID 1 (a container without an init), orphaned
//! grandchildren of the commands it runs are re-parented to it and must be
//! reaped, or they stay zombies. The Dockerfile runs tini anyway; this is the
//! safety net.
//!
//! It cannot simply `waitpid(-1)`: that would steal the exit status of
//! commands `exec` is still waiting for. So it reaps only zombies that `exec`
//! did not start itself.

use std::time::Duration;

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Starts the reaper thread when this process is PID 1; does nothing otherwise.
pub fn start_if_pid1() {
    if std::process::id() != 1 {
        return;
    }
    let spawned = std::thread::Builder::new().name("reaper".into()).spawn(|| loop {
        reap_foreign_zombies();
        std::thread::sleep(Duration::from_secs(1));
    });
    if let Err(e) = spawned {
        tracing::warn!("could not start the zombie reaper: {e}");
    }
}

/// Reaps zombie children of this process that `exec` does not own.
pub fn reap_foreign_zombies() -> usize {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut reaped = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which may contain spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        if state == "Z"
            && ppid.parse::<i32>() == Ok(me)
            && !crate::exec::is_owned(pid)
            && waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)).is_ok()
        {
            reaped += 1;
        }
    }
    reaped
}
