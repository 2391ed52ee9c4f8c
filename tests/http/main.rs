//! One test binary for 3 files (http_hardening, http_limits, connection_age): The agent's HTTP server: hardening, limits, connection ageing.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped to link one binary instead of 3 (issue 29): files that start
//! stand-in kube-proxy processes, or time the live node, stay binaries of their own,
//! since the tests of one binary run concurrently.

#[path = "../common/mod.rs"]
mod common;

mod connection_age;
mod http_hardening;
mod http_limits;
