//! One test binary for 9 files (kernel_iptables, kernel_conntrack, neighbour_tables, node_ports, nftables_watch_e2e, service_traffic, ipvs_probe, no_side_effects, security_context): The agent on the real kernel, in network namespaces each test creates: rule sets, conntrack, neighbour tables, NodePorts, the nftables watch, service traffic, IPVS links, no side effects, the DaemonSet's security context.
//! Each file is a module; a test's name is `file::test`, as docs/testing.md writes it.
//! Grouped by what the tests need (issue 42); the tests of one binary run concurrently, and
//! tests/run.sh runs the binaries concurrently too, so a test that must not overlap another
//! (a process named kube-proxy, the live node's /proc, the initial namespace's rule sets or
//! sysctls) takes its lock in tests/common, which holds across binaries.

#[path = "../common/mod.rs"]
mod common;

mod ipvs_probe;
mod kernel_conntrack;
mod kernel_iptables;
mod neighbour_tables;
mod nftables_watch_e2e;
mod no_side_effects;
mod node_ports;
mod security_context;
mod service_traffic;
