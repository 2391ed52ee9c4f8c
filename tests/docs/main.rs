//! One test binary for 7 files (readme, docs_testing, manifests_metrics, remediation_safety, rules_selector, promtool_metrics, screenshots): The documentation, manifests and remediations held to the binary: no agent on the live node.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped to link one binary instead of 7 (issue 29): files that start
//! stand-in kube-proxy processes, or time the live node, stay binaries of their own,
//! since the tests of one binary run concurrently.

#[path = "../common/mod.rs"]
mod common;

mod docs_testing;
mod manifests_metrics;
mod promtool_metrics;
mod readme;
mod remediation_safety;
mod rules_selector;
mod screenshots;
