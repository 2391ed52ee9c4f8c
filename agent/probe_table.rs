//! The probe table: every probe, once, with everything the other stages need to know of it.
//!
//! One row per probe, in the order reports list them:
//!
//! | column | what it says | read by |
//! |---|---|---|
//! | `Variant => name` | `ProbeName::Variant`; `name` is the probe's `probe` label, its JSON key and its `Facts` slot | `probe/mod.rs`, `snapshot.rs` |
//! | `run` | the probe's `async fn probe(ctx, deadline)`, or `probe(ctx, given, deadline)` when it reads others | `probe::run` |
//! | `reads` | the probes whose latest reading it reads: handed in a `Given` from the latest snapshot, never through `Memory` (in `check`, it runs after them) | `probe::run`, `scheduler.rs` |
//! | `area` | the part of the data plane it sees (`crate::area::Area`): its failure leaves that area's NPD condition unknown | `expose/npd.rs` |
//! | `facts` | what one run reads: `Reading::Variant` and the slot's type (`(boxed)`: moved in a `Box`, it is large) | `probe/mod.rs`, `snapshot.rs` |
//! | `json` | the slot's serde attributes in `/snapshot` (`null` or left out while empty) | `snapshot.rs` |
//! | `interval`, `timeout` | the flags `--<name>.interval` and `--<name>.timeout` (`None`: `--probe.timeout`) | `config/probe_flags.rs` |
//! | `metrics` | the functions of `expose/metrics.rs` (or its files) that render its facts | `expose::metrics::render` |
//! | `memory` | what it keeps between runs to make the next one cheaper (`()`: nothing), its field of `probe::Memory` | the probe |
//!
//! Each stage reads the table in its own module by calling `probe_table!(stage)`, which writes
//! that stage's part there: `probe` makes `ProbeName`, `PROBES`, `Reading` and `run`; `facts`
//! makes `Facts` with `apply` and `clear`; `flags` makes the table of each probe's flags;
//! `metrics` makes `probe_sections`, which `render` calls. The names in a row are resolved where
//! the stage calls it (`node::probe` in `probe/`, `node` in `expose/metrics.rs`), so no stage
//! imports another to learn the list, and adding a probe is its file under `agent/probe/` and
//! its row here (docs/how-it-works.md, "Adding a probe").
//!
//! A flag's prefix is its subject: a probe's own schedule is `--<name>.interval` and
//! `--<name>.timeout`, the probe's name with `-` for `_`; a probe without a timeout of its own
//! runs under `--probe.timeout`.

macro_rules! probe_table {
    ($stage:ident) => {
        probe_table! { @rows $stage
            /// CPUs and kernel release.
            Node => node {
                run: node::probe,
                reads: [],
                area: Conntrack,
                facts: node::NodeFacts,
                json: #[serde(default)],
                interval: Flag::duration("node.interval", "PROXYWATCH_NODE_INTERVAL", "60s",
                    "How often the node probe (CPUs, kernel release) runs"),
                timeout: None,
                metrics: [node],
                memory: (),
            }
            /// The kernel modules kube-proxy's modes need, loaded or built in.
            Modules => modules {
                run: modules::probe,
                reads: [],
                area: Kernel,
                facts: modules::ModuleFacts,
                json: #[serde(default)],
                interval: Flag::duration("modules.interval", "PROXYWATCH_MODULES_INTERVAL", "60s",
                    "How often the kernel modules probe runs"),
                timeout: None,
                metrics: [modules],
                memory: (),
            }
            /// The conntrack table's fill and the kernel's conntrack statistics.
            Conntrack => conntrack {
                run: conntrack::probe,
                reads: [],
                area: Conntrack,
                facts: conntrack::ConntrackFacts,
                json: #[serde(default)],
                interval: Flag::duration("conntrack.interval", "PROXYWATCH_CONNTRACK_INTERVAL", "5s",
                    "How often the conntrack probe runs"),
                timeout: None,
                metrics: [conntrack],
                memory: (),
            }
            /// NATed conntrack entries whose endpoint is gone, and the source-NAT port use.
            ConntrackStale => conntrack_stale {
                run: conntrack_stale::probe,
                reads: [Iptables],
                area: Conntrack,
                facts: conntrack_stale::ConntrackStaleFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("conntrack-stale.interval", "PROXYWATCH_CONNTRACK_STALE_INTERVAL", "60s",
                    "How often the conntrack_stale probe dumps the NATed conntrack entries and compares them with the services' current endpoints; 0: never")
                    .was("conntrack.stale-interval"),
                timeout: Some(Flag::duration("conntrack-stale.timeout", "PROXYWATCH_CONNTRACK_STALE_TIMEOUT", "20s",
                    "Deadline of one conntrack_stale run (rules and conntrack dump)")
                    .was("conntrack.stale-timeout")),
                metrics: [conntrack_stale, snat::snat],
                memory: conntrack_stale::StaleMemory,
            }
            /// The sysctls kube-proxy's data plane depends on.
            Sysctls => sysctls {
                run: sysctl::probe,
                reads: [],
                area: Kernel,
                facts: sysctl::SysctlFacts,
                json: #[serde(default)],
                interval: Flag::duration("sysctls.interval", "PROXYWATCH_SYSCTLS_INTERVAL", "15s",
                    "How often the sysctls probe runs"),
                timeout: None,
                metrics: [sysctls],
                memory: (),
            }
            /// Reverse-path filtering on the interfaces of the node's routes, and its drops.
            RpFilter => rp_filter {
                run: rp_filter::probe,
                reads: [],
                area: Kernel,
                facts: rp_filter::RpFilterFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("rp-filter.interval", "PROXYWATCH_RP_FILTER_INTERVAL", "15s",
                    "How often the rp_filter probe reads rp_filter on the interfaces of the node's network routes and the IPReversePathFilter drop counter (/proc/net/netstat); 0: never"),
                timeout: None,
                metrics: [rp_filter],
                memory: (),
            }
            /// The NodePorts the data plane serves against the ephemeral port range.
            NodePorts => node_ports {
                run: node_ports::probe,
                reads: [],
                area: Kernel,
                facts: node_ports::NodePortFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("node-ports.interval", "PROXYWATCH_NODE_PORTS_INTERVAL", "60s",
                    "How often the node_ports probe compares the NodePorts the data plane serves with the ephemeral port range; 0: never"),
                timeout: Some(Flag::duration("node-ports.timeout", "PROXYWATCH_NODE_PORTS_TIMEOUT", "10s",
                    "Deadline of one node_ports run (its NodePort chains and maps over netlink, /proc/net/ip_vs)")),
                metrics: [node_ports],
                memory: node_ports::Memory,
            }
            /// The ARP and NDP tables against their gc thresholds.
            NeighbourTables => neighbour_tables {
                run: neighbour_tables::probe,
                reads: [],
                area: Kernel,
                facts: neighbour_tables::NeighbourFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("neighbour-tables.interval", "PROXYWATCH_NEIGHBOUR_TABLES_INTERVAL", "15s",
                    "How often the neighbour_tables probe reads the kernel's ARP and NDP tables (entries, gc_thresh1-3, counters) over rtnetlink; 0: never"),
                timeout: None,
                metrics: [neighbour_tables],
                memory: (),
            }
            /// iptables: backends, rule counts, kube-proxy's chains, the save cross-check.
            Iptables => iptables {
                run: iptables::probe,
                reads: [],
                area: Rules,
                facts: iptables::IptablesFacts,
                json: #[serde(default)],
                interval: Flag::duration("iptables.interval", "PROXYWATCH_IPTABLES_INTERVAL", "60s",
                    "How often the iptables probe counts the rules (nft backend over netlink; iptables-legacy-save only where legacy tables exist)"),
                timeout: Some(Flag::duration("iptables.timeout", "PROXYWATCH_IPTABLES_TIMEOUT", "30s",
                    "Deadline of one iptables probe run: its netlink counts and every iptables-save it runs share it")),
                metrics: [iptables],
                memory: iptables::Memory,
            }
            /// Who holds the xtables lock (/proc/locks against /run/xtables.lock), and who waits.
            XtablesLock => xtables_lock {
                run: xtables_lock::probe,
                reads: [],
                area: Rules,
                facts: xtables_lock::XtablesLockFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("xtables-lock.interval", "PROXYWATCH_XTABLES_LOCK_INTERVAL", "5s",
                    "How often the xtables_lock probe reads who holds /run/xtables.lock (/proc/locks; the file is only stat'ed, the lock never taken); 0: never"),
                timeout: None,
                metrics: [xtables_lock],
                memory: (),
            }
            /// kube-proxy's nftables tables, counted over netlink.
            Nftables => nftables {
                run: nftables::probe,
                reads: [],
                area: Rules,
                facts: nftables::NftablesFacts,
                json: #[serde(default)],
                interval: Flag::duration("nftables.interval", "PROXYWATCH_NFTABLES_INTERVAL", "120s",
                    "How often the nftables probe counts kube-proxy's nftables tables (over netlink; reused while nothing changed)"),
                timeout: Some(Flag::duration("nftables.timeout", "PROXYWATCH_NFTABLES_TIMEOUT", "30s",
                    "Deadline of one nftables probe run (both families)")),
                metrics: [nftables],
                memory: nftables::Memory,
            }
            /// IPVS: virtual servers, real servers, kube-ipvs0.
            Ipvs => ipvs {
                run: ipvs::probe,
                reads: [],
                area: Rules,
                facts: ipvs::IpvsFacts,
                json: #[serde(default)],
                interval: Flag::duration("ipvs.interval", "PROXYWATCH_IPVS_INTERVAL", "30s",
                    "How often the IPVS probe runs (ipvsadm, /proc/net/ip_vs, kube-ipvs0)"),
                timeout: Some(Flag::duration("ipvs.timeout", "PROXYWATCH_IPVS_TIMEOUT", "10s",
                    "Deadline of one IPVS probe run (both ipvsadm commands, /proc, kube-ipvs0)")),
                metrics: [ipvs],
                memory: (),
            }
            /// Service traffic tried for real: the API server's and DNS's ClusterIPs, and named Services.
            ServiceTraffic => service_traffic {
                run: service_traffic::probe,
                reads: [Iptables],
                area: Rules,
                facts: service_traffic::ServiceTrafficFacts,
                json: #[serde(default, skip_serializing_if = "Option::is_none")],
                interval: Flag::or_never("service-traffic.interval", "PROXYWATCH_SERVICE_TRAFFIC_INTERVAL", "0",
                    "How often the service_traffic probe tries Service traffic (a TCP connect to default/kubernetes, a DNS query to kube-dns over UDP and TCP, each --service-traffic.target): the one probe that sends packets; 0: never (check --try-services runs it once)"),
                timeout: Some(Flag::duration("service-traffic.timeout", "PROXYWATCH_SERVICE_TRAFFIC_TIMEOUT", "10s",
                    "Deadline of one service_traffic run (the rules, every try, the conntrack lookups)")),
                metrics: [service_traffic],
                memory: service_traffic::TrafficMemory,
            }
            /// kube-proxy itself: its mode, health, sync metrics, process and cgroup.
            KubeProxy => kube_proxy {
                run: kube_proxy::probe,
                reads: [],
                area: KubeProxy,
                facts: kube_proxy::KubeProxyFacts (boxed),
                json: #[serde(default)],
                interval: Flag::duration("kube-proxy.interval", "PROXYWATCH_KUBE_PROXY_INTERVAL", "15s",
                    "How often the kube-proxy probe runs"),
                timeout: Some(Flag::duration("kube-proxy.timeout", "PROXYWATCH_KUBE_PROXY_TIMEOUT", "2s",
                    "Deadline of one kube-proxy probe run: its requests (in parallel) and the process scan")),
                metrics: [kube_proxy],
                memory: (),
            }
        }
    };

    // Below: what each stage makes of the rows. First the rows are read once, by name, into one
    // bracket each that the stages match by position.
    (@rows $stage:ident $(
        $(#[doc = $doc:literal])*
        $variant:ident => $name:ident {
            run: $run:path,
            reads: [$($reads:ident),* $(,)?],
            area: $area:ident,
            facts: $facts_mod:ident :: $facts:ident $(($boxed:ident))?,
            json: #[$json:meta],
            interval: $interval:expr,
            timeout: $timeout:expr,
            metrics: [$($section:path),* $(,)?],
            memory: $memory:ty,
        }
    )*) => {
        probe_table! { @$stage $(
            [$(#[doc = $doc])* $variant $name ($run) ($facts_mod $facts [$($boxed)?]) (#[$json]) ($interval) ($timeout) [$($section),*] [$($reads),*] $area ($memory)]
        )* }
    };

    // probe/mod.rs: the names, the readings and the dispatcher.
    (@probe $([$(#[doc = $doc:literal])* $variant:ident $name:ident ($run:path) ($facts_mod:ident $facts:ident [$($boxed:ident)?]) $json:tt $interval:tt $timeout:tt $sections:tt [$($reads:ident),*] $area:ident ($memory:ty)])*) => {
        /// Every probe, in the order reports list them (the probe table, `agent/probe_table.rs`).
        /// The name is the probe's `probe` label, its JSON key and its flag prefix.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ProbeName {
            $($(#[doc = $doc])* $variant,)*
        }

        pub const PROBES: &[ProbeName] = &[$(ProbeName::$variant,)*];

        /// What the agent keeps between runs of each probe, only to make its next reading
        /// cheaper (its row's `memory`; `()`: nothing): each entry is served only to a run that
        /// has just checked it still holds (the ruleset generation it was read at, the hash of
        /// the text it was decoded from, the cross-check's interval), so it never changes what a
        /// reading says. What one probe needs of another's reading is never here: it comes from
        /// the snapshot (the row's `reads`, [`Given`]).
        #[derive(Debug, Default)]
        pub struct Memory {
            $(pub $name: $memory,)*
        }

        impl ProbeName {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ProbeName::$variant => stringify!($name),)*
                }
            }

            /// The probes whose latest reading this one reads (its row's `reads`): the
            /// scheduler hands them in a [`Given`], and runs it after them in `check`.
            pub fn reads(self) -> &'static [ProbeName] {
                match self {
                    $(ProbeName::$variant => &[$(ProbeName::$reads),*],)*
                }
            }

            /// The part of the data plane the probe sees (its row's `area`): its failure
            /// leaves that area's NPD condition unknown (`proxywatch npd`).
            pub fn area(self) -> $crate::area::Area {
                match self {
                    $(ProbeName::$variant => $crate::area::Area::$area,)*
                }
            }
        }

        /// The latest readings of the probes a probe reads (its row's `reads`), as the
        /// scheduler hands them from the latest snapshot: a probe's reading when its latest
        /// run read one, its error when that run failed (never a reading held from before
        /// it), nothing when its source is absent or it has not run yet.
        #[derive(Debug, Clone, Default)]
        pub struct Given {
            readings: Vec<(ProbeName, Result<Reading, String>)>,
        }

        impl Given {
            pub fn new(readings: Vec<(ProbeName, Result<Reading, String>)>) -> Self {
                Given { readings }
            }

            $(
                #[doc = concat!("The ", stringify!($name), " probe's latest reading, or its error.")]
                #[allow(unreachable_patterns)]
                pub fn $name(&self) -> Option<Result<&$facts_mod::$facts, &str>> {
                    self.readings.iter().find_map(|(p, r)| match (p, r) {
                        (ProbeName::$variant, Ok(Reading::$variant(f))) => Some(Ok(probe_table!(@ref f $($boxed)?))),
                        (ProbeName::$variant, Err(e)) => Some(Err(e.as_str())),
                        _ => None,
                    })
                }
            )*
        }

        /// What one probe run read: one variant per probe, its facts of that moment.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Reading {
            $($variant(probe_table!(@boxed [$facts_mod::$facts] $($boxed)?)),)*
        }

        /// Runs one probe once, until `deadline`: the one place that knows which
        /// function reads which probe.
        pub async fn run(name: ProbeName, ctx: &ProbeContext, given: &Given, deadline: Deadline) -> Result<Probed<Reading>, ProbeError> {
            let _ = given;
            match name {
                $(ProbeName::$variant => probe_table!(@call $run, ctx, given, deadline, [$($reads),*]).await.map(|p| match p {
                    Probed::Present(f) => Probed::Present(Reading::$variant(probe_table!(@box f $($boxed)?))),
                    Probed::Absent(why) => Probed::Absent(why),
                }),)*
            }
        }
    };
    (@call $run:path, $ctx:ident, $given:ident, $deadline:ident, []) => { $run($ctx, $deadline) };
    (@call $run:path, $ctx:ident, $given:ident, $deadline:ident, [$($r:ident),+]) => { $run($ctx, $given, $deadline) };
    (@ref $f:ident) => { $f };
    (@ref $f:ident boxed) => { &**$f };
    (@boxed [$t:ty]) => { $t };
    (@boxed [$t:ty] boxed) => { Box<$t> };
    (@box $f:ident) => { $f };
    (@box $f:ident boxed) => { Box::new($f) };
    (@unbox $f:ident) => { $f };
    (@unbox $f:ident boxed) => { *$f };

    // snapshot.rs: one slot per probe in `Facts`.
    (@facts $([$(#[doc = $doc:literal])* $variant:ident $name:ident ($run:path) ($facts_mod:ident $facts:ident [$($boxed:ident)?]) (#[$json:meta]) $interval:tt $timeout:tt $sections:tt $reads:tt $area:tt $memory:tt])*) => {
        /// Everything the probes found, one slot per probe (the probe table, `agent/probe_table.rs`).
        /// A probe that found its source absent leaves its slot empty; one that failed keeps its
        /// last good reading for a while, with that reading's time in its outcome
        /// (`reading_seconds`), never a partial one: an old number is shown as old, never as current.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        pub struct Facts {
            $($(#[doc = $doc])* #[$json] pub $name: Option<$crate::probe::$facts_mod::$facts>,)*
        }

        impl Facts {
            pub fn apply(&mut self, reading: Reading) {
                match reading {
                    $(Reading::$variant(f) => self.$name = Some(probe_table!(@unbox f $($boxed)?)),)*
                }
            }

            /// A copy of a probe's slot as a reading (for the probes that read it).
            pub fn reading(&self, probe: ProbeName) -> Option<Reading> {
                match probe {
                    $(ProbeName::$variant => self.$name.clone().map(|f| Reading::$variant(probe_table!(@box f $($boxed)?))),)*
                }
            }

            /// Empties a probe's slot (it failed or its source is absent).
            pub fn clear(&mut self, probe: ProbeName) {
                match probe {
                    $(ProbeName::$variant => self.$name = None,)*
                }
            }
        }
    };

    // config/probe_flags.rs: each probe's interval and timeout flags.
    (@flags $([$(#[doc = $doc:literal])* $variant:ident $name:ident $run:tt $facts:tt $json:tt ($interval:expr) ($timeout:expr) $sections:tt $reads:tt $area:tt $memory:tt])*) => {
        /// Each probe's schedule flags, in the table's order.
        pub const TABLE: &[ProbeFlags] = &[$(ProbeFlags {
            probe: ProbeName::$variant,
            interval: $interval,
            timeout: $timeout,
        },)*];
    };

    // expose/metrics.rs: the sections that render each probe's facts.
    (@metrics $([$(#[doc = $doc:literal])* $variant:ident $name:ident $run:tt $facts:tt $json:tt $interval:tt $timeout:tt [$($section:path),*] $reads:tt $area:tt $memory:tt])*) => {
        /// Each probe's sections, in the table's order (the encoder sorts the families by name).
        fn probe_sections(out: &Out, s: &Snapshot) {
            $($($section(out, s);)*)*
        }
    };
}
