//! One test binary for 8 files (kube_proxy_probe, kube_proxy_hostile, kube_proxy_cgroup, kube_proxy_corpus, kube_proxy_vs_kernel, kube_proxy_down_e2e, proxy_mode, pid1): kube-proxy as the agent sees it: its metrics and health (fake kube-proxy on loopback), processes named kube-proxy and their cgroup, its real rule dumps and reported counts against the kernel's, its death end to end, its mode, and the agent as PID 1.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod kube_proxy_cgroup;
mod kube_proxy_corpus;
mod kube_proxy_down_e2e;
mod kube_proxy_hostile;
mod kube_proxy_probe;
mod kube_proxy_vs_kernel;
mod pid1;
mod proxy_mode;
