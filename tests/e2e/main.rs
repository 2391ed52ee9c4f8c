//! One test binary for 2 files (e2e_prometheus, npd): The agent end to end with the real consumers: Prometheus evaluating the shipped rules, node-problem-detector running the plugin.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod e2e_prometheus;
mod npd;
