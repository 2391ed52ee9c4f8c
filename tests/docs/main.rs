//! One test binary for 9 files (readme, docs_testing, manifests_metrics, remediation_safety, rules_selector, promtool_metrics, screenshots, alerts_agree, alertmanager_inhibit): The documentation, manifests, alert rules and remediations held to the binary: no agent on the live node.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod alertmanager_inhibit;
mod alerts_agree;
mod docs_testing;
mod manifests_metrics;
mod promtool_metrics;
mod readme;
mod remediation_safety;
mod rules_selector;
mod screenshots;
