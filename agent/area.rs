//! The parts of the data plane a node's health is told in: each check's row
//! (`evaluate::CHECKS`) and each probe's (`probe_table.rs`) names its area, and
//! `proxywatch npd` gives each area its own node-problem-detector condition.

use clap::ValueEnum;

/// Which findings one condition covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Area {
    /// Every finding: one condition for the whole data plane.
    All,
    /// conntrack_* and sysctl_conntrack_tcp_timeouts (condition ConntrackProblem).
    Conntrack,
    /// kube_proxy_* (condition KubeProxyProblem).
    KubeProxy,
    /// iptables_*, nftables_*, proxy_mode_leftovers and the IPVS state (condition ProxyRulesProblem).
    Rules,
    /// sysctl_* and the IPVS sysctls and modules (condition ProxyKernelProblem).
    Kernel,
}

impl Area {
    pub fn as_str(self) -> &'static str {
        match self {
            Area::All => "all",
            Area::Conntrack => "conntrack",
            Area::KubeProxy => "kube-proxy",
            Area::Rules => "rules",
            Area::Kernel => "kernel",
        }
    }

    /// The NPD condition type of the area, as the shipped monitor config names it.
    pub fn condition(self) -> &'static str {
        match self {
            Area::All => "KubeProxyDataPlaneProblem",
            Area::Conntrack => "ConntrackProblem",
            Area::KubeProxy => "KubeProxyProblem",
            Area::Rules => "ProxyRulesProblem",
            Area::Kernel => "ProxyKernelProblem",
        }
    }
}
