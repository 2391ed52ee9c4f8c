//! One test binary for 7 files (parsers_never_panic, fixture_nodes, compare, baseline_file, smoke_cli, limits, kubectl_plugin): The agent on fixture roots and files: parsers, golden nodes, compare/baseline, the CLI, limits.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped to link one binary instead of 7 (issue 29): files that start
//! stand-in kube-proxy processes, or time the live node, stay binaries of their own,
//! since the tests of one binary run concurrently.

#[path = "../common/mod.rs"]
mod common;

mod baseline_file;
mod compare;
mod fixture_nodes;
mod kubectl_plugin;
mod limits;
mod parsers_never_panic;
mod smoke_cli;
