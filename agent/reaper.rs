//! When the agent is PID 1 (a container without an init), orphaned
//! grandchildren of the commands it runs are re-parented to it and must be
//! reaped, or they stay zombies. The Dockerfile runs tini anyway; this is the
//! safety net.
//!
//! It cannot simply `waitpid(-1)`: that would steal the exit status of
//! commands `exec` is still waiting for. So it reaps only zombies that `exec`
//! did not start itself, deciding under exec's registration lock: a command
//! that exits between its spawn and its registration is still `exec`'s.

use std::time::Duration;

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
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
        if state == "Z" && ppid.parse::<i32>() == Ok(me) && reap_if_foreign(pid) {
            reaped += 1;
        }
    }
    reaped
}

/// Reaps `pid` unless it is a command `exec` waits for; whether it was reaped.
/// The check and the `waitpid` happen under exec's registration lock, so a
/// command spawned but not yet registered is never taken for an orphan.
pub fn reap_if_foreign(pid: i32) -> bool {
    crate::exec::with_owned_pids(|owned| {
        !owned.contains(&pid)
            && matches!(
                waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
                Ok(s) if s != WaitStatus::StillAlive
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{CommandSpec, Runner};

    /// The orphan reaper, run in the window between a command's spawn and its
    /// registration, once the command has exited: as if its 1 s tick fell there.
    fn reaper_in_the_window(pid: i32) {
        let zombie = std::time::Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")) {
            assert!(std::time::Instant::now() < zombie, "{pid} did not exit");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(reap_if_foreign(pid));
        });
        // Reaped at once, or blocked until the runner has registered the pid.
        let _ = rx.recv_timeout(Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_command_that_exits_before_it_is_registered_keeps_its_exit_status() {
        crate::exec::hook::AFTER_SPAWN.with(|h| h.set(Some(reaper_in_the_window)));
        let r = Runner::default()
            .run_capture(&CommandSpec::new("/bin/sh", &["-c", "exit 7"]))
            .await;
        crate::exec::hook::AFTER_SPAWN.with(|h| h.set(None));
        let (_, fin) = r.expect("the exit status reached the command's waiter");
        assert_eq!(fin.status.code(), Some(7));
    }
}
