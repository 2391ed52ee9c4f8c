//! IPVS facts: the virtual-server table, its counters and `kube-ipvs0`.
//!
//! This module holds the facts types, the probe and the merge of the
//! sources; each source has its own submodule:
//!
//! | input                              | reader                           |
//! |------------------------------------|----------------------------------|
//! | `ipvsadm -Ln`                      | [`ipvsadm::parse_ipvsadm_list`]  |
//! | `ipvsadm -Ln --stats [--exact]`    | [`ipvsadm::parse_ipvsadm_stats`] |
//! | `/proc/net/ip_vs`                  | [`proc::parse_proc_ip_vs`]       |
//! | `/proc/net/ip_vs_stats`            | [`proc::parse_proc_ip_vs_stats`] |
//! | `/proc/net/ip_vs_conn` (templates) | [`templates::count`]             |
//! | interfaces and addresses (netlink) | [`interface::local_addresses`]   |
//!
//! The parsers are pure (`&str` in, typed facts or a
//! [`ParseError`](crate::parse::ParseError) with the 1-based line out).
//! [`merge_stats`] attaches the `--stats` counters to the services of a list;
//! [`summarise`] turns the table, the global counters and the node's
//! addresses into [`IpvsFacts`].
//!
//! [`probe`] looks for `/proc/net/ip_vs` first: without it IPVS is absent and
//! nothing else runs (ipvsadm would `modprobe ip_vs`). The `/proc` files are
//! read on the blocking pool behind the probe's hang guard
//! ([`crate::probe::blocking`]), like every file probe; ipvsadm runs with the
//! configured output cap (`--exec.max-output-bytes`). The connection table
//! (`/proc/net/ip_vs_conn`) is read only when a weight-0 real server belongs to
//! a persistent virtual server, for the templates pinning clients to it, and at
//! most [`templates::MAX_ENTRIES`] entries of it.

pub mod interface;
pub mod ipvsadm;
pub mod proc;
pub mod templates;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use self::interface::{LocalAddresses, KUBE_IPVS0};
use self::ipvsadm::{parse_ipvsadm_list, parse_ipvsadm_stats};
use self::proc::{parse_config_hz, parse_proc_ip_vs, parse_proc_ip_vs_stats, parse_proc_ip_vs_with_hz};
use super::{blocking, Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::exec::{CommandSpec, ExecError};
use crate::host::Host;

/// One IPVS virtual service (a ClusterIP:port, NodePort, ... in kube-proxy terms).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualServer {
    /// Protocol: `TCP`, `UDP`, `SCTP`, or `FWM` for a firewall-mark service (no unit).
    pub protocol: String,
    /// Virtual IP as text (dotted IPv4, or compressed IPv6 without brackets); empty for `FWM` (no unit).
    pub address: String,
    /// Virtual port (TCP/UDP/SCTP port number); 0 for `FWM`.
    pub port: u16,
    /// Firewall mark (netfilter mark value, no unit); `Some` only for `FWM` services.
    pub fwmark: Option<u32>,
    /// Scheduler name such as `rr`, `wrr`, `wlc`, `sh` (no unit).
    pub scheduler: String,
    /// Scheduler flags (`ipvsadm -b`, e.g. `sh-fallback`, `sh-port`; no unit);
    /// `None` when the source cannot tell: `/proc/net/ip_vs` does not print them.
    #[serde(default)]
    pub scheduler_flags: Option<Vec<String>>,
    /// Whether the service is persistent (`ipvsadm -p`; kube-proxy's
    /// `sessionAffinity: ClientIP`), from either source (no unit).
    #[serde(default)]
    pub persistent: bool,
    /// Persistence timeout in seconds when the service is persistent. From
    /// `/proc/net/ip_vs`, which prints it in jiffies, only when the kernel's HZ
    /// is known ([`proc::parse_proc_ip_vs_with_hz`]); else `None` with
    /// `persistent` true.
    pub persistent_seconds: Option<u32>,
    /// The service's destinations (backends), one entry per backend, ordered
    /// like `ipvsadm -Ln` (see [`canonical_order`]).
    pub real_servers: Vec<RealServer>,
    /// Cumulative counters from `ipvsadm -Ln --stats`, once merged with [`merge_stats`].
    pub stats: Option<ServiceStats>,
}

/// One destination (real server, i.e. backend endpoint) of a virtual service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RealServer {
    /// Backend IP as text (dotted IPv4, or compressed IPv6 without brackets) (no unit).
    pub address: String,
    /// Backend port (TCP/UDP/SCTP port number).
    pub port: u16,
    /// Forwarding method as printed: `Masq`, `Route`, `Tunnel`, `Local`, ... (no unit).
    pub forward: String,
    /// Scheduling weight (dimensionless); 0 means the backend takes no new connections.
    pub weight: i32,
    /// ActiveConn: connections in ESTABLISHED state (count).
    pub active_connections: u64,
    /// InActConn: connections in other states, e.g. TIME_WAIT (count).
    pub inactive_connections: u64,
}

/// Cumulative per-service counters since the service was created (`ipvsadm --stats`).
///
/// Parsed from output without `--exact`, a value printed with a K/M/G/T
/// suffix is a lower bound (ipvsadm truncates; see [`ipvsadm`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceStats {
    /// Conns: connections scheduled (count).
    pub connections: u64,
    /// InPkts: packets in, client to service (packets).
    pub incoming_packets: u64,
    /// OutPkts: packets out, service to client (packets).
    pub outgoing_packets: u64,
    /// InBytes: bytes in (bytes).
    pub incoming_bytes: u64,
    /// OutBytes: bytes out (bytes).
    pub outgoing_bytes: u64,
}

/// Totals and estimated rates for all of IPVS in this network namespace (`/proc/net/ip_vs_stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GlobalStats {
    /// Total connections scheduled since IPVS was loaded (count).
    pub connections: u64,
    /// Total incoming packets (packets).
    pub incoming_packets: u64,
    /// Total outgoing packets (packets).
    pub outgoing_packets: u64,
    /// Total incoming bytes (bytes).
    pub incoming_bytes: u64,
    /// Total outgoing bytes (bytes).
    pub outgoing_bytes: u64,
    /// Kernel rate estimate of new connections (connections per second).
    pub connections_per_second: u64,
    /// Kernel rate estimate of incoming packets (packets per second).
    pub incoming_packets_per_second: u64,
    /// Kernel rate estimate of outgoing packets (packets per second).
    pub outgoing_packets_per_second: u64,
    /// Kernel rate estimate of incoming bytes (bytes per second).
    pub incoming_bytes_per_second: u64,
    /// Kernel rate estimate of outgoing bytes (bytes per second).
    pub outgoing_bytes_per_second: u64,
}

/// Identifies a virtual service across outputs: protocol + address + port, or fwmark.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServiceKey {
    /// `TCP`, `UDP`, `SCTP` or `FWM` (no unit).
    pub protocol: String,
    /// Virtual IP text as in [`VirtualServer::address`]; empty for `FWM` (no unit).
    pub address: String,
    /// Virtual port; 0 for `FWM`.
    pub port: u16,
    /// Firewall mark for `FWM` services (no unit).
    pub fwmark: Option<u32>,
}

impl VirtualServer {
    /// The key [`merge_stats`] matches on.
    pub fn key(&self) -> ServiceKey {
        ServiceKey {
            protocol: self.protocol.clone(),
            address: self.address.clone(),
            port: self.port,
            fwmark: self.fwmark,
        }
    }
}

/// How many virtual servers are kept in the JSON detail; the counts cover all.
pub const DETAIL_CAP: usize = 200;
/// How many example addresses a finding's evidence lists.
pub const SAMPLE: usize = 5;
/// How many weight-0 real servers [`IpvsFacts::weight_zero`] lists, at most (the counts per
/// protocol cover all): the history stage ages only these, so it holds at most this many.
pub const WEIGHT_ZERO_CAP: usize = 1024;

/// A real server at weight 0: IPVS sends it no new connection, but keeps the ones it has.
/// kube-proxy leaves a removed TCP endpoint so until its connections are gone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightZeroRealServer {
    /// The virtual server it belongs to (no unit).
    pub service: ServiceKey,
    /// Backend IP as text, as in [`RealServer::address`] (no unit).
    pub address: String,
    /// Backend port.
    pub port: u16,
    /// ActiveConn: its connections in ESTABLISHED state (count).
    pub active_connections: u64,
    /// InActConn: its connections in other states, e.g. TIME_WAIT (count).
    pub inactive_connections: u64,
    /// Whether its virtual server is persistent (`ipvsadm -p`, `sessionAffinity: ClientIP`).
    #[serde(default)]
    pub persistent: bool,
    /// Persistence templates pointing at it: clients pinned to it ([`templates`]; count).
    /// `None` where its virtual server is not persistent or the table could not be read.
    #[serde(default)]
    pub templates: Option<u64>,
}

impl WeightZeroRealServer {
    /// `TCP 10.96.0.10:53`, `TCP [fd00::1]:80`, `FWM 7`: the virtual server as ipvsadm names it.
    pub fn virtual_server(&self) -> String {
        show_service(
            &self.service.protocol,
            &self.service.address,
            self.service.port,
            self.service.fwmark,
        )
    }

    /// `10.244.1.5:53` or `[fd00::5]:80`.
    pub fn real_server(&self) -> String {
        if self.address.contains(':') {
            format!("[{}]:{}", self.address, self.port)
        } else {
            format!("{}:{}", self.address, self.port)
        }
    }
}

/// A virtual server as `PROTO ADDR:PORT` (brackets around IPv6), or `FWM MARK`.
fn show_service(protocol: &str, address: &str, port: u16, fwmark: Option<u32>) -> String {
    match fwmark {
        Some(m) => format!("FWM {m}"),
        None if address.contains(':') => format!("{protocol} [{address}]:{port}"),
        None => format!("{protocol} {address}:{port}"),
    }
}

/// Virtual servers per protocol and scheduler (bounded: a handful of each).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceGroup {
    /// `TCP`, `UDP`, `SCTP` or `FWM` (no unit).
    pub protocol: String,
    /// Scheduler name such as `rr`, `wrr`, `sh` (no unit).
    pub scheduler: String,
    /// Virtual servers with this protocol and scheduler (count).
    pub count: u64,
}

/// The `kube-ipvs0` dummy interface kube-proxy binds service IPs to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpvsInterface {
    /// Whether the interface exists in the agent's network namespace (no unit).
    pub exists: bool,
    /// Addresses on kube-ipvs0 (service IPs), v4 and v6, as text (no unit).
    pub addresses: Vec<String>,
}

/// What the IPVS probe reports: the table summarised, with a bounded detail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpvsFacts {
    /// Where the table came from: `ipvsadm` or `/proc/net/ip_vs` (no unit).
    pub source: String,
    /// Virtual servers (services × ports), in services.
    pub virtual_servers: u64,
    /// Real servers over all virtual servers, in backends.
    pub real_servers: u64,
    /// Virtual servers per protocol and scheduler, sorted by both (count per group).
    pub groups: Vec<ServiceGroup>,
    /// Virtual servers with no real server, or only weight-0 ones (count).
    pub without_backends: u64,
    /// The first few (at most [`SAMPLE`]) of them, as `PROTO ADDR:PORT` (no unit).
    pub without_backends_sample: Vec<String>,
    /// Real servers at weight 0 over all virtual servers, by protocol (`TCP`, `UDP`, `SCTP`,
    /// `FWM`; count); every one, whether listed in `weight_zero` or not.
    #[serde(default)]
    pub weight_zero_by_protocol: std::collections::BTreeMap<String, u64>,
    /// The real servers at weight 0 with their connections, in ipvsadm's order: the first
    /// [`WEIGHT_ZERO_CAP`]; units per field.
    #[serde(default)]
    pub weight_zero: Vec<WeightZeroRealServer>,
    /// How the persistence templates of `weight_zero` were counted from `/proc/net/ip_vs_conn`:
    /// `None` when not read (no listed real server of a persistent virtual server).
    #[serde(default)]
    pub templates: Option<templates::TemplateScan>,
    /// Why the connection table could not be read, when it was wanted (no unit).
    #[serde(default)]
    pub templates_error: Option<String>,
    /// Totals since IPVS started (`/proc/net/ip_vs_stats`), when readable; units per field.
    pub stats: Option<GlobalStats>,
    /// kube-ipvs0, when netlink could be asked (None: not asked, e.g. a fixture host root).
    pub interface: Option<IpvsInterface>,
    /// Virtual-server IPs not bound to any local interface (ClusterIPs kube-proxy forgot to bind), as text (no unit).
    pub unbound_service_ips: Vec<String>,
    /// Addresses on kube-ipvs0 with no virtual server, as text (no unit).
    pub bound_without_service: Vec<String>,
    /// The first [`DETAIL_CAP`] virtual servers with their real servers; units per field.
    pub detail: Vec<VirtualServer>,
    /// True when `detail` was cut at [`DETAIL_CAP`] (no unit).
    pub detail_truncated: bool,
    /// The kernel's `CONFIG_HZ` (ticks per second) that converted the
    /// persistence timeouts of `/proc/net/ip_vs` from jiffies, from
    /// `/boot/config-<release>` under the host root; `None` when the table came
    /// from ipvsadm or HZ could not be found (timeouts then unknown).
    #[serde(default)]
    pub kernel_hz: Option<u32>,
}

// ---------------------------------------------------------------------------
// Merging the sources

/// Attaches counters from [`parse_ipvsadm_stats`] to the matching services
/// (same protocol + address + port, or same fwmark). Each stats entry goes to
/// the first matching service that has no stats yet, so an IPv4 and an IPv6
/// `FWM` service with the same mark pair up in order (both listings are
/// sorted the same way by ipvsadm). Returns the keys that matched no service,
/// e.g. a service created between the two ipvsadm runs.
pub fn merge_stats(services: &mut [VirtualServer], stats: Vec<(ServiceKey, ServiceStats)>) -> Vec<ServiceKey> {
    // The services still without stats, by key, in order: one lookup per entry.
    let mut open: HashMap<ServiceKey, VecDeque<usize>> = HashMap::new();
    for (i, vs) in services.iter().enumerate() {
        if vs.stats.is_none() {
            open.entry(vs.key()).or_default().push_back(i);
        }
    }
    let mut unmatched = Vec::new();
    for (key, s) in stats {
        match open.get_mut(&key).and_then(VecDeque::pop_front) {
            Some(i) => services[i].stats = Some(s),
            None => unmatched.push(key),
        }
    }
    unmatched
}

/// Puts virtual servers and their real servers in the order `ipvsadm -Ln`
/// prints them, whatever the source (`/proc/net/ip_vs` follows the kernel's
/// hash order): services by firewall mark (none first), address family (IPv4
/// first), protocol number (TCP, UDP, SCTP), address, port; real servers by
/// address, then port. ipvsadm compares with `int` subtraction, so its own
/// order differs from this one only between addresses (or marks) 2^31 or more
/// apart; this one is plainly numeric. A firewall-mark service's family is
/// that of its first real server (`/proc` does not print it).
pub fn canonical_order(services: &mut [VirtualServer]) {
    fn ip(text: &str) -> Option<IpAddr> {
        text.parse().ok()
    }
    for vs in services.iter_mut() {
        vs.real_servers.sort_by_key(|r| (ip(&r.address), r.port));
    }
    services.sort_by_cached_key(|vs| {
        let family_of = match vs.fwmark {
            Some(_) => vs.real_servers.first().map_or("", |r| r.address.as_str()),
            None => vs.address.as_str(),
        };
        let protocol = match vs.protocol.as_str() {
            "TCP" => 6,
            "UDP" => 17,
            "SCTP" => 132,
            _ => 255,
        };
        (vs.fwmark, family_of.contains(':'), protocol, ip(&vs.address), vs.port)
    });
}

/// Summarises virtual servers; `local` is what netlink shows (None when not asked).
/// The services are first put in [`canonical_order`], so the detail and every
/// "first few" in the evidence are the same whichever source was read.
pub fn summarise(
    source: &str,
    mut services: Vec<VirtualServer>,
    stats: Option<GlobalStats>,
    local: Option<&LocalAddresses>,
) -> IpvsFacts {
    canonical_order(&mut services);
    let mut groups: std::collections::BTreeMap<(String, String), u64> = Default::default();
    let mut without = Vec::new();
    let mut real_servers = 0u64;
    let mut weight_zero_by_protocol = std::collections::BTreeMap::new();
    let mut weight_zero = Vec::new();
    for vs in &services {
        *groups.entry((vs.protocol.clone(), vs.scheduler.clone())).or_insert(0) += 1;
        real_servers += vs.real_servers.len() as u64;
        if vs.real_servers.iter().all(|r| r.weight <= 0) {
            without.push(vs);
        }
        for r in vs.real_servers.iter().filter(|r| r.weight == 0) {
            *weight_zero_by_protocol.entry(vs.protocol.clone()).or_insert(0) += 1;
            if weight_zero.len() < WEIGHT_ZERO_CAP {
                weight_zero.push(WeightZeroRealServer {
                    service: vs.key(),
                    address: r.address.clone(),
                    port: r.port,
                    active_connections: r.active_connections,
                    inactive_connections: r.inactive_connections,
                    persistent: vs.persistent,
                    templates: None,
                });
            }
        }
    }
    let show = |vs: &VirtualServer| show_service(&vs.protocol, &vs.address, vs.port, vs.fwmark);
    let mut facts = IpvsFacts {
        source: source.to_string(),
        virtual_servers: services.len() as u64,
        real_servers,
        groups: groups
            .into_iter()
            .map(|((protocol, scheduler), count)| ServiceGroup {
                protocol,
                scheduler,
                count,
            })
            .collect(),
        without_backends: without.len() as u64,
        without_backends_sample: without.iter().take(SAMPLE).map(|v| show(v)).collect(),
        weight_zero_by_protocol,
        weight_zero,
        stats,
        ..Default::default()
    };
    if let Some(local) = local {
        let vs_ips: BTreeSet<IpAddr> = services
            .iter()
            .filter(|v| v.fwmark.is_none())
            .filter_map(|v| v.address.parse().ok())
            .collect();
        let all_local: BTreeSet<IpAddr> = local.addresses.iter().map(|(_, a)| *a).collect();
        let on_ipvs0: BTreeSet<IpAddr> = local
            .addresses
            .iter()
            .filter(|(i, _)| i == KUBE_IPVS0)
            .map(|(_, a)| *a)
            .collect();
        let exists = local.interfaces.contains(KUBE_IPVS0);
        facts.interface = Some(IpvsInterface {
            exists,
            addresses: on_ipvs0.iter().map(|a| a.to_string()).collect(),
        });
        facts.unbound_service_ips = vs_ips.difference(&all_local).map(|a| a.to_string()).collect();
        facts.bound_without_service = on_ipvs0.difference(&vs_ips).map(|a| a.to_string()).collect();
    }
    facts.detail_truncated = services.len() > DETAIL_CAP;
    services.truncate(DETAIL_CAP);
    facts.detail = services;
    facts
}

// ---------------------------------------------------------------------------
// The probe: IPVS present? then ipvsadm (or /proc/net/ip_vs when ipvsadm is
// not installed), the global counters, and the kube-ipvs0 interface.

const PROC_IP_VS: &str = "/proc/net/ip_vs";
const PROC_IP_VS_STATS: &str = "/proc/net/ip_vs_stats";
const PROC_IP_VS_CONN: &str = "/proc/net/ip_vs_conn";

/// What the probe reads from `/proc`.
struct ProcFiles {
    /// `/proc/net/ip_vs_stats`, when the file exists.
    stats: Option<GlobalStats>,
    /// `/proc/net/ip_vs`, when asked for (ipvsadm is not on PATH).
    table: Option<Vec<VirtualServer>>,
    /// The kernel's HZ that converted the table's persistence timeouts.
    hz: Option<u32>,
}

/// `CONFIG_HZ` from `/boot/config-<release>` under the host root (Debian,
/// Ubuntu, RHEL and most distributions install it), or `None`.
fn kernel_hz(host: &Host) -> Result<Option<u32>, ProbeError> {
    let Some(release) = host.read_optional("/proc/sys/kernel/osrelease")? else {
        return Ok(None);
    };
    let release = release.trim();
    if release.is_empty() || release.contains('/') {
        return Ok(None);
    }
    Ok(host
        .read_optional(&format!("/boot/config-{release}"))?
        .and_then(|text| parse_config_hz(&text)))
}

/// The probe's file reads (run on the blocking pool): IPVS present? then the
/// global counters, and the table when `with_table`.
fn read_proc(host: &Host, with_table: bool) -> Result<Probed<ProcFiles>, ProbeError> {
    // ipvsadm runs `modprobe ip_vs` when IPVS is not loaded; a read-only agent
    // must not load kernel modules, so look before running it.
    if !host.exists(PROC_IP_VS) {
        return Ok(Probed::Absent(format!(
            "no IPVS in this kernel ({PROC_IP_VS} does not exist); ipvsadm was not run"
        )));
    }
    let stats = match host.read_optional(PROC_IP_VS_STATS)? {
        Some(t) => Some(parse_proc_ip_vs_stats(
            &host.path(PROC_IP_VS_STATS).display().to_string(),
            &t,
        )?),
        None => None,
    };
    let (table, hz) = if with_table {
        let text = host.read(PROC_IP_VS)?;
        let hz = kernel_hz(host)?;
        let name = host.path(PROC_IP_VS).display().to_string();
        let table = match hz {
            Some(hz) => parse_proc_ip_vs_with_hz(&name, &text, hz)?,
            None => parse_proc_ip_vs(&name, &text)?,
        };
        (Some(table), hz)
    } else {
        (None, None)
    };
    Ok(Probed::Present(ProcFiles { stats, table, hz }))
}

/// `ipvsadm -Ln`, with the counters of `ipvsadm -Ln --stats --exact` merged in.
/// `ipvsadm -Ln`, then `-Ln --stats --exact`: both share what is left of the deadline.
async fn run_ipvsadm(ctx: &ProbeContext, deadline: Deadline) -> Result<Vec<VirtualServer>, ProbeError> {
    let (runner, max_output_bytes) = (&ctx.runner, ctx.max_output_bytes);
    let list = CommandSpec::new("ipvsadm", &["-Ln"])
        .dump()
        .timeout(deadline.remaining())
        .max_output_bytes(max_output_bytes)
        .permission_hint("needs CAP_NET_ADMIN");
    let (text, fin) = runner.run_capture(&list).await?;
    ExecError::check_status(&list, &fin)?;
    let mut services = parse_ipvsadm_list("ipvsadm -Ln", &text)?;
    let st = CommandSpec::new("ipvsadm", &["-Ln", "--stats", "--exact"])
        .dump()
        .timeout(deadline.remaining())
        .max_output_bytes(max_output_bytes)
        .permission_hint("needs CAP_NET_ADMIN");
    let (text, fin) = runner.run_capture(&st).await?;
    ExecError::check_status(&st, &fin)?;
    let per_service = parse_ipvsadm_stats("ipvsadm -Ln --stats --exact", &text)?;
    merge_stats(&mut services, per_service);
    Ok(services)
}

/// Runs the IPVS probe until the deadline: the /proc files on the blocking
/// pool, ipvsadm (its stdout capped by `--exec.max-output-bytes`), kube-ipvs0.
/// kube-ipvs0 is read over netlink only where the host has a kernel to ask
/// (`Host::kernel()`: `/`, or a netlink recording): on another
/// fixture node netlink would show the agent's own namespace.
pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<IpvsFacts>, ProbeError> {
    let host = ctx.host.clone();
    let use_netlink = host.kernel().netlink();
    // Without ipvsadm on PATH the table comes from /proc/net/ip_vs.
    let with_table = !crate::exec::on_path("ipvsadm");
    let files = match blocking(ProbeName::Ipvs, move || read_proc(&host, with_table)).await? {
        Probed::Present(files) => files,
        Probed::Absent(why) => return Ok(Probed::Absent(why)),
    };
    let (source, services) = match files.table {
        Some(table) => (PROC_IP_VS, table),
        None => ("ipvsadm", run_ipvsadm(ctx, deadline).await?),
    };
    let local = if use_netlink {
        Some(interface::of_host(&ctx.host, deadline.at()).await?)
    } else {
        None
    };
    let mut facts = summarise(source, services, files.stats, local.as_ref());
    facts.kernel_hz = files.hz;
    if facts.weight_zero.iter().any(|r| r.persistent) {
        let host = ctx.host.clone();
        let mut wz = std::mem::take(&mut facts.weight_zero);
        let (wz, scan) = blocking(ProbeName::Ipvs, move || {
            let scan = read_templates(&host, &mut wz);
            Ok::<_, ProbeError>((wz, scan))
        })
        .await?;
        facts.weight_zero = wz;
        match scan {
            Ok(scan) => facts.templates = Some(scan),
            Err(e) => facts.templates_error = Some(e),
        }
    }
    Ok(Probed::Present(facts))
}

/// The persistence templates of the weight-0 real servers, streamed from `/proc/net/ip_vs_conn`
/// ([`templates::count`]); a failure leaves their counts `None` and is said in one line.
fn read_templates(host: &Host, wz: &mut [WeightZeroRealServer]) -> Result<templates::TemplateScan, String> {
    let path = host.path(PROC_IP_VS_CONN);
    let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    templates::count(wz, std::io::BufReader::with_capacity(64 << 10, file)).map_err(|e| {
        for r in wz.iter_mut() {
            r.templates = None;
        }
        format!("{}: {e}", path.display())
    })
}

/// Captured inputs (tests/fixtures/ipvs, see its SOURCES.md) and helpers
/// shared by the unit tests of this module and of its parsers.
#[cfg(test)]
mod fixtures {
    use super::{RealServer, ServiceKey, ServiceStats, VirtualServer};

    pub(super) const KIND: &str = include_str!("../../../tests/fixtures/ipvs/ln-kube-proxy-ipvs-kind-tkng.txt");
    pub(super) const IPV6: &str =
        include_str!("../../../tests/fixtures/ipvs/ln-kube-proxy-ipv6-only-k8s-issue87604-partial.txt");
    pub(super) const PERSIST_TRAILING: &str = include_str!(
        "../../../tests/fixtures/ipvs/ln-kube-proxy-persistent-trailing-spaces-opsnull-issue251-partial.txt"
    );
    pub(super) const FWM_TUNNEL: &str =
        include_str!("../../../tests/fixtures/ipvs/ln-kube-router-dsr-fwm-tunnel-issue1169-partial.txt");
    pub(super) const PERSIST_MASK: &str =
        include_str!("../../../tests/fixtures/ipvs/ln-kube-router-persistent-mask.txt");
    pub(super) const WRR: &str = include_str!("../../../tests/fixtures/ipvs/ln-wrr-weight-electrocucaracha.txt");
    pub(super) const LNC: &str = include_str!("../../../tests/fixtures/ipvs/lnc-dr-gentleduo.txt");
    pub(super) const RATE: &str = include_str!("../../../tests/fixtures/ipvs/rate-kube-proxy-calico-tigera.txt");
    pub(super) const STATS_KM: &str =
        include_str!("../../../tests/fixtures/ipvs/stats-l-nonnumeric-KM-suffix-loxilb.txt");
    pub(super) const STATS_PR160: &str =
        include_str!("../../../tests/fixtures/ipvs/stats-ln-kube-router-pr160-partial.txt");
    pub(super) const STATS_WRR: &str =
        include_str!("../../../tests/fixtures/ipvs/stats-ln-stats-rate-wrr-electrocucaracha.txt");
    pub(super) const PROC_NODE_EXPORTER: &str =
        include_str!("../../../tests/fixtures/ipvs/node_exporter-v4-fwm-tunnel.txt");
    pub(super) const PROC_PROCFS: &str =
        include_str!("../../../tests/fixtures/ipvs/prometheus-procfs-ttar-v4-v6-fwm.txt");
    pub(super) const PROC_STATS: &str = include_str!("../../../tests/fixtures/ipvs/ip_vs_stats-node_exporter.txt");

    pub(super) const ALL: [&str; 14] = [
        KIND,
        IPV6,
        PERSIST_TRAILING,
        FWM_TUNNEL,
        PERSIST_MASK,
        WRR,
        LNC,
        RATE,
        STATS_KM,
        STATS_PR160,
        STATS_WRR,
        PROC_NODE_EXPORTER,
        PROC_PROCFS,
        PROC_STATS,
    ];

    pub(super) const SRC: &str = "ipvsadm -Ln";

    pub(super) fn rs(address: &str, port: u16, forward: &str, weight: i32, active: u64, inactive: u64) -> RealServer {
        RealServer {
            address: address.to_string(),
            port,
            forward: forward.to_string(),
            weight,
            active_connections: active,
            inactive_connections: inactive,
        }
    }

    pub(super) fn find<'a>(list: &'a [VirtualServer], proto: &str, addr: &str, port: u16) -> &'a VirtualServer {
        list.iter()
            .find(|v| v.protocol == proto && v.address == addr && v.port == port)
            .unwrap_or_else(|| panic!("no {proto} {addr}:{port}"))
    }

    pub(super) fn key(proto: &str, addr: &str, port: u16) -> ServiceKey {
        ServiceKey {
            protocol: proto.into(),
            address: addr.into(),
            port,
            fwmark: None,
        }
    }

    pub(super) fn st(c: u64, ip: u64, op: u64, ib: u64, ob: u64) -> ServiceStats {
        ServiceStats {
            connections: c,
            incoming_packets: ip,
            outgoing_packets: op,
            incoming_bytes: ib,
            outgoing_bytes: ob,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::ipvsadm::MAX_LINES;
    use super::proc::parse_proc_ip_vs_with_hz;
    use super::*;
    use std::time::Duration;

    // --- the probe ---------------------------------------------------------------

    #[tokio::test]
    async fn proc_reads_go_through_the_hang_guard() {
        // An earlier run's read stuck in the kernel holds the IPVS slot: the
        // probe must not start another read behind it.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let stuck = tokio::spawn(blocking(ProbeName::Ipvs, move || {
            let _ = rx.recv();
            Ok(())
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let root = tempfile::tempdir().unwrap();
        let ctx = ProbeContext {
            host: Host::new(root.path()),
            runner: crate::exec::Runner::new(1),
            max_output_bytes: 1 << 20,
            kube_proxy: crate::probe::kube_proxy::Endpoints {
                metrics_url: String::new(),
                healthz_url: String::new(),
                max_body_bytes: 0,
                cgroup_root: None,
                process_name: String::new(),
            },
            memory: Default::default(),
            kube_proxy_found: Default::default(),
            iptables_save_interval: None,
            snat: true,
            service_traffic: Default::default(),
            conntrack_stats_interval: None,
            nftables_skip_kube_proxy: None,
        };
        let run = || probe(&ctx, Deadline::after(Duration::from_secs(5)));
        let err = run().await.unwrap_err();
        assert!(matches!(err, ProbeError::StillRunning(_)), "{err}");
        tx.send(()).unwrap();
        stuck.await.unwrap().unwrap();
        // Slot free: the read runs (this root has no /proc/net/ip_vs, so no IPVS).
        match run().await.unwrap() {
            Probed::Absent(why) => assert!(why.contains(PROC_IP_VS), "{why}"),
            Probed::Present(f) => panic!("IPVS present on an empty root: {f:?}"),
        }
    }

    // --- the line cap, shared by every parser --------------------------------

    #[test]
    fn line_cap_is_enforced() {
        let text = "TCP  10.0.0.1:80 rr\n".repeat(MAX_LINES + 1);
        let e = parse_ipvsadm_list(SRC, &text).unwrap_err();
        assert_eq!(e.line, 0);
        assert!(e.message.contains("more than"), "{e}");
        assert!(parse_proc_ip_vs("/proc/net/ip_vs", &text).is_err());
        assert!(parse_ipvsadm_stats(SRC, &text).is_err());
        // Exactly at the cap is still parsed.
        let text = "TCP  10.0.0.1:80 rr\n".repeat(MAX_LINES);
        assert_eq!(parse_ipvsadm_list(SRC, &text).unwrap().len(), MAX_LINES);
    }

    // --- merging ipvsadm's list and stats ------------------------------------

    #[test]
    fn merge_attaches_stats() {
        let mut l = parse_ipvsadm_list(SRC, WRR).unwrap();
        let s = parse_ipvsadm_stats(SRC, STATS_WRR).unwrap();
        let unmatched = merge_stats(&mut l, s);
        assert!(unmatched.is_empty());
        assert_eq!(l[0].stats, Some(st(24, 112, 110, 7578, 7568)));

        let mut l = parse_ipvsadm_list(SRC, FWM_TUNNEL).unwrap();
        let extra = vec![
            (
                ServiceKey {
                    protocol: "FWM".into(),
                    fwmark: Some(1481),
                    ..Default::default()
                },
                st(1, 2, 3, 4, 5),
            ),
            (key("UDP", "10.110.76.40", 80), st(9, 9, 9, 9, 9)),
        ];
        let unmatched = merge_stats(&mut l, extra);
        assert_eq!(unmatched, vec![key("UDP", "10.110.76.40", 80)]);
        assert_eq!(l[0].stats, None);
        assert_eq!(l[1].stats, Some(st(1, 2, 3, 4, 5)));
    }

    #[test]
    fn merge_pairs_equal_keys_in_order() {
        // An IPv4 and an IPv6 FWM service with the same mark have the same key.
        let fwm7 = ServiceKey {
            protocol: "FWM".into(),
            fwmark: Some(7),
            ..Default::default()
        };
        let list = "FWM  7 rr\nTCP  10.0.0.1:80 rr\nFWM  7 IPv6 rr\n";
        let mut l = parse_ipvsadm_list(SRC, list).unwrap();
        let stats = vec![
            (fwm7.clone(), st(1, 1, 1, 1, 1)),
            (fwm7.clone(), st(2, 2, 2, 2, 2)),
            (fwm7.clone(), st(3, 3, 3, 3, 3)),
        ];
        assert_eq!(merge_stats(&mut l, stats), vec![fwm7.clone()]);
        assert_eq!(l[0].stats, Some(st(1, 1, 1, 1, 1)));
        assert_eq!(l[1].stats, None);
        assert_eq!(l[2].stats, Some(st(2, 2, 2, 2, 2)));

        // A service that already has counters is passed over.
        let mut l = parse_ipvsadm_list(SRC, list).unwrap();
        l[0].stats = Some(st(9, 9, 9, 9, 9));
        assert!(merge_stats(&mut l, vec![(fwm7.clone(), st(1, 1, 1, 1, 1))]).is_empty());
        assert_eq!(l[0].stats, Some(st(9, 9, 9, 9, 9)));
        assert_eq!(l[2].stats, Some(st(1, 1, 1, 1, 1)));
    }

    // --- serde ------------------------------------------------------------------

    #[test]
    fn order_is_the_same_whatever_the_source() {
        // The same table as the kernel prints it (hash order, real servers in
        // insertion order) and as ipvsadm prints it (sorted): one order after.
        let proc = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port Scheduler Flags\n  \
                    -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
                    FWM  00000064 rr \n  \
                    -> 0AF40303:0000      Tunnel  1      0          0         \n\
                    UDP  0A60000A:0035 rr  \n  \
                    -> 0AF40003:0035      Masq    1      0          0         \n  \
                    -> 0AF40002:0035      Masq    1      0          0         \n\
                    TCP  [fd00:0010:0096:0000:0000:0000:0000:0001]:0050 rr \n\
                    TCP  7F000001:7580 rr  \n\
                    TCP  0A60000A:0035 rr  \n\
                    TCP  0A600001:01BB rr  \n";
        let ipvsadm = "TCP  10.96.0.1:443 rr\n\
                       TCP  10.96.0.10:53 rr\n\
                       TCP  127.0.0.1:30080 rr\n\
                       UDP  10.96.0.10:53 rr\n  \
                       -> 10.244.0.2:53 Masq 1 0 0\n  \
                       -> 10.244.0.3:53 Masq 1 0 0\n\
                       TCP  [fd00:10:96::1]:80 rr\n\
                       FWM  100 rr\n  \
                       -> 10.244.3.3:0 Tunnel 1 0 0\n";
        let names = |mut v: Vec<VirtualServer>| {
            canonical_order(&mut v);
            v.iter()
                .map(|s| {
                    let rs: Vec<String> = s.real_servers.iter().map(|r| r.address.clone()).collect();
                    format!(
                        "{} {}:{} {:?} {}",
                        s.protocol,
                        s.address,
                        s.port,
                        s.fwmark,
                        rs.join(",")
                    )
                })
                .collect::<Vec<_>>()
        };
        let from_proc = names(parse_proc_ip_vs("p", proc).unwrap());
        let from_ipvsadm = names(parse_ipvsadm_list("l", ipvsadm).unwrap());
        assert_eq!(from_proc, from_ipvsadm);
        assert_eq!(from_proc[0], "TCP 10.96.0.1:443 None ");
        assert_eq!(from_proc[3], "UDP 10.96.0.10:53 None 10.244.0.2,10.244.0.3");
        assert_eq!(from_proc[5], "FWM :0 Some(100) 10.244.3.3");
        // summarise orders too, so the sample of services without backends does.
        let facts = summarise("/proc/net/ip_vs", parse_proc_ip_vs("p", proc).unwrap(), None, None);
        assert_eq!(
            facts.without_backends_sample,
            [
                "TCP 10.96.0.1:443",
                "TCP 10.96.0.10:53",
                "TCP 127.0.0.1:30080",
                "TCP [fd00:10:96::1]:80"
            ]
        );
    }

    #[test]
    fn weight_zero_real_servers_are_facts_with_their_connections_from_either_source() {
        // One table as ipvsadm -Ln prints it and as /proc/net/ip_vs does (hex, hash order):
        // a TCP real server at weight 0 with connections, a UDP one without, an IPv6 one.
        let ipvsadm = "TCP  10.96.0.10:53 rr\n  \
                       -> 10.244.0.2:53 Masq 1 4 0\n  \
                       -> 10.244.0.3:53 Masq 0 12 3\n\
                       UDP  10.96.0.10:53 rr\n  \
                       -> 10.244.0.3:53 Masq 0 0 40\n\
                       TCP  [fd00:10:96::1]:80 rr\n  \
                       -> [fd00:10:244::5]:8080 Masq 0 1 0\n";
        let proc = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port Scheduler Flags\n  \
                    -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
                    UDP  0A60000A:0035 rr  \n  \
                    -> 0AF40003:0035      Masq    0      0          40        \n\
                    TCP  [fd00:0010:0096:0000:0000:0000:0000:0001]:0050 rr \n  \
                    -> [fd00:0010:0244:0000:0000:0000:0000:0005]:1F90      Masq    0      1          0         \n\
                    TCP  0A60000A:0035 rr  \n  \
                    -> 0AF40003:0035      Masq    0      12         3         \n  \
                    -> 0AF40002:0035      Masq    1      4          0         \n";
        let from_ipvsadm = summarise("ipvsadm", parse_ipvsadm_list("l", ipvsadm).unwrap(), None, None);
        let from_proc = summarise(PROC_IP_VS, parse_proc_ip_vs("p", proc).unwrap(), None, None);
        assert_eq!(from_ipvsadm.weight_zero, from_proc.weight_zero);
        assert_eq!(from_ipvsadm.weight_zero_by_protocol, from_proc.weight_zero_by_protocol);
        let f = from_proc;
        assert_eq!(
            f.weight_zero_by_protocol,
            [("TCP".to_string(), 2), ("UDP".to_string(), 1)].into()
        );
        let shown: Vec<(String, String, u64, u64)> = f
            .weight_zero
            .iter()
            .map(|r| {
                (
                    r.virtual_server(),
                    r.real_server(),
                    r.active_connections,
                    r.inactive_connections,
                )
            })
            .collect();
        let row = |v: &str, r: &str, a, i| (v.to_string(), r.to_string(), a, i);
        assert_eq!(
            shown,
            [
                row("TCP 10.96.0.10:53", "10.244.0.3:53", 12, 3),
                row("UDP 10.96.0.10:53", "10.244.0.3:53", 0, 40),
                row("TCP [fd00:10:96::1]:80", "[fd00:10:244::5]:8080", 1, 0),
            ]
        );
        // The list stops at its cap; the count goes on.
        let many: String = (0..WEIGHT_ZERO_CAP + 3)
            .map(|i| format!("  -> 10.244.{}.{}:80 Masq 0 1 0\n", i / 250, i % 250))
            .collect();
        let f = summarise(
            "ipvsadm",
            parse_ipvsadm_list("l", &format!("TCP  10.96.0.1:80 rr\n{many}")).unwrap(),
            None,
            None,
        );
        assert_eq!(f.weight_zero.len(), WEIGHT_ZERO_CAP);
        assert_eq!(f.weight_zero_by_protocol["TCP"], (WEIGHT_ZERO_CAP + 3) as u64);
    }

    #[test]
    fn facts_round_trip_through_json() {
        let mut l = parse_ipvsadm_list(SRC, WRR).unwrap();
        merge_stats(&mut l, parse_ipvsadm_stats(SRC, STATS_WRR).unwrap());
        let json = serde_json::to_string(&l).unwrap();
        let back: Vec<VirtualServer> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, l);
        let g = parse_proc_ip_vs_stats("s", PROC_STATS).unwrap();
        assert_eq!(
            serde_json::from_str::<GlobalStats>(&serde_json::to_string(&g).unwrap()).unwrap(),
            g
        );
    }

    // --- robustness -------------------------------------------------------------

    fn run_all(text: &str) {
        let _ = parse_ipvsadm_list("f", text);
        let _ = parse_ipvsadm_stats("f", text);
        let _ = parse_proc_ip_vs("f", text);
        let _ = parse_proc_ip_vs_with_hz("f", text, 0);
        let _ = parse_proc_ip_vs_stats("f", text);
    }

    #[test]
    fn no_panic_on_any_truncation() {
        for fixture in ALL {
            let bytes = fixture.as_bytes();
            for cut in 0..=bytes.len() {
                run_all(&String::from_utf8_lossy(&bytes[..cut]));
                // Also the tail, so parsers see inputs starting mid-line.
                run_all(&String::from_utf8_lossy(&bytes[cut..]));
            }
        }
    }

    #[test]
    fn no_panic_on_garbage() {
        let long_line = "A".repeat(1 << 20);
        let long_tokens = "TCP  10.0.0.1:80 rr persistent ".repeat(10_000);
        let mut inputs: Vec<String> = vec![
            "\0".repeat(4096),
            String::from_utf8_lossy(&[0xff; 4096]).into_owned(),
            long_line.clone(),
            format!("TCP  {long_line}:80 rr\n"),
            format!("  -> {long_line}\n"),
            long_tokens,
            "->".into(),
            "  ->\n".into(),
            "TCP".into(),
            "FWM".into(),
            "TCP  [".into(),
            "TCP  []:".into(),
            "TCP  [::]:\n".into(),
            "TCP  :\n".into(),
            "Prot".into(),
            "\r\n\r\n".into(),
            "é".repeat(1000),
            "TCP  10.0.0.1:80 rr (\n".into(),
            "TCP  10.0.0.1:80 rr ()\n".into(),
            "Prot LocalAddress:Port Conns InPkts OutPkts InBytes OutBytes\n  -> x 1 2 3 4 5\n".into(),
            "Prot LocalAddress:Port Conns InPkts OutPkts InBytes OutBytes\nTCP  1.1.1.1:1 K M G T 99999999999999999999T\n"
                .into(),
        ];
        // Deterministic pseudo-random bytes and mutations of fixtures (no rand crate).
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let len = (next() % 512) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            inputs.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        for fixture in ALL {
            for _ in 0..50 {
                let mut bytes = fixture.as_bytes().to_vec();
                if bytes.is_empty() {
                    continue;
                }
                for _ in 0..4 {
                    let i = (next() as usize) % bytes.len();
                    bytes[i] = b" \t\n->:[]0aFKx"[(next() % 13) as usize];
                }
                inputs.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        for text in &inputs {
            run_all(text);
        }
        // Error messages quote at most a short excerpt of the garbage.
        let e = parse_ipvsadm_list("f", &long_line).unwrap_err();
        assert!(e.to_string().len() < 300, "{}", e.to_string().len());
    }
}
