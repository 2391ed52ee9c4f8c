//! One test binary for 8 files (parsers_never_panic, fixture_nodes, findings_e2e, compare, baseline_file, smoke_cli, limits, kubectl_plugin): The agent on fixture roots and files: parsers, golden nodes, findings end to end, compare/baseline, the CLI, limits.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod baseline_file;
mod compare;
mod findings_e2e;
mod fixture_nodes;
mod kubectl_plugin;
mod limits;
mod parsers_never_panic;
mod smoke_cli;
