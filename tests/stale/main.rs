//! One test binary for 3 files (conntrack_stale, conntrack_stale_continuity, conntrack_stale_faults): The stale-conntrack check on the real kernel, in namespaces each test creates.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped to link one binary instead of 3 (issue 29): files that start
//! stand-in kube-proxy processes, or time the live node, stay binaries of their own,
//! since the tests of one binary run concurrently.

#[path = "../common/mod.rs"]
mod common;

mod churn;
mod conntrack_stale;
mod conntrack_stale_continuity;
mod conntrack_stale_faults;
