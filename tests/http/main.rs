//! One test binary for 6 files (http_hardening, http_limits, connection_age, status_page, load, faults): The agent as a server on fixture nodes: hardening, limits, connection ageing, the status page in Chromium, load, faults of its commands.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod connection_age;
mod faults;
mod http_hardening;
mod http_limits;
mod load;
mod status_page;
