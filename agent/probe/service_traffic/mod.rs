//! The service_traffic probe: Service traffic tried for real, from the node's
//! own network namespace — the one probe that sends packets, so it is off
//! unless asked (`--service-traffic.interval`, `check --try-services`).
//!
//! One run:
//!
//! 1. the targets, found in kube-proxy's nf_tables rules by the same decoders
//!    the stale check uses ([`service_endpoints`]): `default/kubernetes`'s
//!    TCP port (443), `kube-system/kube-dns`'s port 53 (UDP and TCP), and the
//!    Services of `--service-traffic.target ns/name:port`. A Service's name is
//!    in kube-proxy's comment on its `KUBE-SERVICES` rule (iptables-nft:
//!    `default/kubernetes:https cluster IP`) or in the name of the chain its
//!    `service-ips` element goes to (nftables:
//!    `service-2QRHZV4L-default/kubernetes/tcp/https`). Read again only when
//!    the ruleset generation moved ([`TrafficMemory`]). iptables-legacy
//!    rules are not in nf_tables: their ports come from the same comments in
//!    the iptables probe's latest `iptables-legacy-save` (its reading, which the
//!    scheduler hands this probe: the probe table's `reads`). IPVS carries no Service names: a
//!    name none of those rules gave is looked up by its ClusterIP among the virtual servers of
//!    `/proc/net/ip_vs` ([`Address`]: `--service-traffic.address`, else what the agent's own
//!    pod was told of the API server and the cluster DNS), its real servers above weight 0
//!    its endpoints; a name found nowhere is `not_in_rules`, not tried;
//! 2. one try per target, all at once through one poll(2) loop (`attempt.rs`), each under
//!    `--service-traffic.try-timeout`:
//!    a TCP connect (its connect time), or a DNS query for
//!    `kubernetes.default.svc.<--service-traffic.cluster-domain>` over UDP
//!    (its answer time) and over TCP (connect and answer time); a failure is
//!    named exactly (refused, timeout, unreachable, the DNS rcode);
//! 3. per try, the conntrack entry of its own tuple (a ctnetlink GET, what
//!    `conntrack -G` sends): its reply source is the endpoint the DNAT chose.
//!    An endpoint the Service's rules no longer list is a stale path; no
//!    entry, or one kube-proxy's rules did not translate, is a data-plane
//!    failure.
//!
//! Cost: one blocking call per run, one socket per try, one GET per try (over one netlink
//! socket), the rules walked once per generation. Nothing is changed on the node; no module is loaded (nothing
//! is asked over netlink when nf_tables or nf_conntrack_netlink is not loaded).

mod attempt;
mod discover;
pub mod dns;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use super::service_endpoints::names::{iptables_entry, link_of_chain, name_of_chain, name_of_comment, NamedPort};
use super::service_endpoints::{service_label, socket, ServicePort, ServiceTable};
use super::{Deadline, ProbeContext, ProbeError, Probed};
use crate::netlink::replay::NodeConn;
use crate::netlink::{ct_dump, Conn, NlError, NETLINK_NETFILTER};
use attempt::{attempt_all, Outcome};
pub use discover::{Found, TrafficMemory};

/// `--service-traffic.target` flags read, at most.
pub const MAX_TARGETS: usize = 20;
/// A Service's current endpoints listed in a try, at most.
pub const MAX_RULE_ENDPOINTS: usize = 16;
/// The API server's Service.
pub const API_SERVER: &str = "default/kubernetes";
/// The cluster DNS Service.
pub const DNS: &str = "kube-system/kube-dns";

/// A Service named by `--service-traffic.target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// `namespace/name`.
    pub service: String,
    pub port: u16,
}

impl std::str::FromStr for Named {
    type Err = String;

    /// `ns/name:port`.
    fn from_str(s: &str) -> Result<Named, String> {
        let bad =
            || format!("{s:?}: expected namespace/name:port (a Service and its port number), e.g. default/web:80");
        let (service, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let (ns, name) = service.split_once('/').ok_or_else(bad)?;
        let ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok(ns) || !ok(name) {
            return Err(bad());
        }
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
        Ok(Named {
            service: service.to_string(),
            port,
        })
    }
}

/// A Service's ClusterIP given to the probe, for rules that carry no Service names (IPVS):
/// `--service-traffic.address ns/name=IP`, or what the agent's own pod was told
/// ([`Address::defaults`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// `namespace/name`.
    pub service: String,
    pub ip: std::net::IpAddr,
    /// Where it came from: `--service-traffic.address`, `KUBERNETES_SERVICE_HOST`, `/etc/resolv.conf`.
    pub origin: &'static str,
}

impl std::str::FromStr for Address {
    type Err = String;

    /// `ns/name=IP`.
    fn from_str(s: &str) -> Result<Address, String> {
        let bad = || {
            format!(
                "{s:?}: expected namespace/name=IP (a Service and its ClusterIP), e.g. kube-system/kube-dns=10.96.0.10"
            )
        };
        let (service, ip) = s.split_once('=').ok_or_else(bad)?;
        let (ns, name) = service.split_once('/').ok_or_else(bad)?;
        let ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok(ns) || !ok(name) {
            return Err(bad());
        }
        Ok(Address {
            service: service.to_string(),
            ip: ip.trim().parse().map_err(|_| bad())?,
            origin: "--service-traffic.address",
        })
    }
}

impl Address {
    /// The given addresses, then what the agent's own pod was told of the two built-in
    /// targets where none was given: the kubelet sets `KUBERNETES_SERVICE_HOST` (the
    /// `default/kubernetes` ClusterIP) in every container, and with the DaemonSet's
    /// `dnsPolicy: ClusterFirstWithHostNet` its `/etc/resolv.conf` names the cluster DNS
    /// Service's ClusterIP first. `env` and `resolv_conf` are the agent's own (not the node's).
    pub fn defaults(given: &[Address], env: Option<&str>, resolv_conf: Option<&str>) -> Vec<Address> {
        let mut out = given.to_vec();
        let missing = |out: &[Address], name: &str| !out.iter().any(|a| a.service == name);
        if let Some(ip) = env.and_then(|v| v.trim().parse().ok()) {
            if missing(&out, API_SERVER) {
                out.push(Address {
                    service: API_SERVER.into(),
                    ip,
                    origin: "KUBERNETES_SERVICE_HOST",
                });
            }
        }
        if let Some(ip) = resolv_conf.and_then(first_nameserver) {
            if missing(&out, DNS) {
                out.push(Address {
                    service: DNS.into(),
                    ip,
                    origin: "/etc/resolv.conf",
                });
            }
        }
        out
    }
}

/// The first `nameserver` of a resolv.conf (resolv.conf(5)), when it is an address.
pub fn first_nameserver(text: &str) -> Option<std::net::IpAddr> {
    text.lines().find_map(|l| {
        let mut t = l.split_whitespace();
        (t.next() == Some("nameserver"))
            .then(|| t.next()?.parse().ok())
            .flatten()
    })
}

/// What the probe tries, from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub targets: Vec<Named>,
    /// The ClusterIPs of Services the rules do not name (IPVS), by name; read where a name
    /// was not found in kube-proxy's nf_tables or legacy rules.
    pub addresses: Vec<Address>,
    /// The cluster's DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// The deadline of each try.
    pub try_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            targets: Vec::new(),
            addresses: Vec::new(),
            cluster_domain: "cluster.local".into(),
            try_timeout: Duration::from_secs(1),
        }
    }
}

/// Which target a try is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// `default/kubernetes`: critical when failing.
    ApiServer,
    /// `kube-system/kube-dns`: critical when failing.
    Dns,
    /// A `--service-traffic.target`: a warning when failing.
    Target,
}

/// Where the try's conntrack entry says it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// NATed to one of the Service's current endpoints.
    Current,
    /// NATed to an endpoint the Service's rules no longer list.
    Stale,
    /// No conntrack entry for the try's tuple: the packet never went through conntrack's DNAT.
    None,
    /// An entry the rules did not translate (it went to the ClusterIP itself).
    NotTranslated,
    /// Not looked up (no try, or nf_conntrack_netlink not loaded, or the lookup failed: `detail`).
    Unknown,
}

/// One try of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Try {
    /// `default/kubernetes:443/tcp`, `kube-system/kube-dns:53/udp`: the `target` label.
    pub target: String,
    pub role: Role,
    /// The service port tried, `10.96.0.1:443/tcp`; None when not in the rules.
    pub service: Option<String>,
    /// `ok`, `refused`, `timeout`, `unreachable`, `dns_rcode`, `error`, or
    /// `not_in_rules` (no such Service in kube-proxy's rules: not tried).
    pub result: String,
    /// The exact failure (`NXDOMAIN`, an errno), or what a success said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The try's time, in seconds: TCP connect time, or for DNS over UDP the answer time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// DNS: from the query sent to its answer, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_seconds: Option<f64>,
    /// The try's own address and port (the conntrack tuple's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The endpoint the conntrack entry of the try says it reached (`10.244.1.5:6443`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub path: Path,
    /// Why the path is unknown, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_detail: Option<String>,
    /// The endpoints the Service's rules send to now (the path it should take),
    /// at most [`MAX_RULE_ENDPOINTS`].
    #[serde(default)]
    pub rule_endpoints: Vec<String>,
}

impl Try {
    pub fn ok(&self) -> bool {
        self.result == "ok"
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceTrafficFacts {
    /// Where the targets were found: `iptables-nft`, `nftables`, `iptables-legacy`, `ipvs`
    /// (joined with `+`), or `none`.
    pub source: String,
    /// The ruleset generation the targets were read at.
    pub generation: u32,
    /// Every target's try, in order: the API server, DNS over UDP and TCP, the flags' targets.
    /// Shared: every publication keeps a copy of the snapshot, and a copy of the tries
    /// allocated every string again (issue 37's memory).
    pub tries: Arc<Vec<Try>>,
}

// ---------------------------------------------------------------------------
// The tries.

/// What one try is: a target, the service port, and how to try it.
#[derive(Debug, Clone)]
struct Plan {
    target: String,
    role: Role,
    /// The service port tried: a ClusterIP's, or a NodePort (its unspecified-address key).
    svc: Option<ServicePort>,
    dns: bool,
    /// A NodePort's ClusterIP: the node's own address is the one its route to it takes.
    via: Option<std::net::IpAddr>,
}

/// The targets of a run, in order: each its service port, IPv4 first.
fn plans(found: &Found, s: &Settings) -> Vec<Plan> {
    let pick = |name: &str, protocol: u8, port: Option<u16>| -> Option<ServicePort> {
        let mut ports: Vec<ServicePort> = found
            .named
            .iter()
            .filter(|(n, p, _)| {
                n == name && !p.is_node_port() && p.protocol == protocol && port.is_none_or(|want| want == p.port)
            })
            .map(|(_, p, _)| *p)
            .collect();
        ports.sort_by_key(|p| (p.address.is_ipv6(), p.port));
        ports.first().copied()
    };
    // The NodePort of the same Service port (its chains share the link), in the ClusterIP's family.
    let node_port = |name: &str, svc: ServicePort| -> Option<ServicePort> {
        let link = found.named.iter().find(|(n, p, _)| n == name && *p == svc)?.2.as_str();
        found
            .named
            .iter()
            .filter(|(n, p, l)| {
                n == name
                    && l == link
                    && p.is_node_port()
                    && p.protocol == svc.protocol
                    && p.address.is_ipv6() == svc.address.is_ipv6()
            })
            .map(|(_, p, _)| *p)
            .min()
    };
    let api = pick(API_SERVER, 6, Some(443)).or_else(|| pick(API_SERVER, 6, None));
    let mut out = vec![
        Plan {
            target: format!("{API_SERVER}:{}/tcp", api.map_or(443, |p| p.port)),
            role: Role::ApiServer,
            svc: api,
            dns: false,
            via: None,
        },
        Plan {
            target: format!("{DNS}:53/udp"),
            role: Role::Dns,
            svc: pick(DNS, 17, Some(53)),
            dns: true,
            via: None,
        },
        Plan {
            target: format!("{DNS}:53/tcp"),
            role: Role::Dns,
            svc: pick(DNS, 6, Some(53)),
            dns: true,
            via: None,
        },
    ];
    for t in s.targets.iter().take(MAX_TARGETS) {
        let svc = pick(&t.service, 6, Some(t.port));
        let target = format!("{}:{}/tcp", t.service, t.port);
        out.push(Plan {
            target: target.clone(),
            role: Role::Target,
            svc,
            dns: false,
            via: None,
        });
        if let Some((svc, np)) = svc.and_then(|svc| Some((svc, node_port(&t.service, svc)?))) {
            out.push(Plan {
                target: format!("{target} nodeport"),
                role: Role::Target,
                svc: Some(np),
                dns: false,
                via: Some(svc.address),
            });
        }
    }
    out
}

/// The names a run looks for.
pub fn wanted(s: &Settings) -> Vec<String> {
    let mut w = vec![API_SERVER.to_string(), DNS.to_string()];
    for t in s.targets.iter().take(MAX_TARGETS) {
        if !w.contains(&t.service) {
            w.push(t.service.clone());
        }
    }
    w
}

/// Where the conntrack entry of a try says it went.
pub fn path_of(table: &ServiceTable, svc: &ServicePort, e: Option<&ct_dump::CtEntry>) -> (Path, Option<String>) {
    let Some(e) = e else { return (Path::None, None) };
    if e.reply_src == e.orig_dst && e.reply_sport == e.orig_dport {
        return (Path::NotTranslated, None);
    }
    let endpoint = socket(e.reply_src, Some(e.reply_sport));
    // By address, as the stale check and kube-proxy's reconciler compare endpoints.
    let path = match table.is_current(svc, e.reply_src) {
        Some(true) => Path::Current,
        Some(false) => Path::Stale,
        // Not a decoded service port: not judged.
        None => Path::Unknown,
    };
    (path, Some(endpoint))
}

fn nl(e: NlError) -> ProbeError {
    ProbeError::NfNetlink {
        what: "kube-proxy's rules over nf_tables netlink (the service_traffic targets)".into(),
        source: e,
    }
}

/// The service_traffic probe; `given` holds the iptables probe's latest reading (the
/// targets' ports in its legacy saves).
pub async fn probe(
    ctx: &ProbeContext,
    given: &super::Given,
    deadline: Deadline,
) -> Result<Probed<ServiceTrafficFacts>, ProbeError> {
    if !matches!(ctx.host.kernel(), crate::netlink::replay::KernelSource::Live) {
        return Ok(Probed::Absent(
            "Service traffic is tried from the node itself (--host-root /) only".into(),
        ));
    }
    let settings = ctx.service_traffic.clone();
    let wanted = wanted(&settings);
    let at = deadline.at();
    let (host, memory) = (ctx.host.clone(), ctx.memory.clone());
    let legacy = match given.iptables() {
        Some(Ok(f)) => f.legacy.clone(),
        _ => Default::default(),
    };
    let addresses = settings.addresses.clone();
    let base = (std::process::id() as u16).wrapping_mul(31);
    // One blocking call for the whole run: the rules read (when their generation moved), the
    // tries over one poll loop, their conntrack entries over one netlink socket.
    let facts = super::blocking(super::ProbeName::ServiceTraffic, move || {
        let conntrack = !super::modules::tool_would_load(&host, "nf_conntrack_netlink");
        let (g, f) = if super::modules::tool_would_load(&host, "nf_tables") {
            (0, Arc::new(Found::default()))
        } else {
            discover::find(&host, &memory.service_traffic, &wanted, at).map_err(nl)?
        };
        let f = discover::with_legacy(f, &legacy);
        let found = discover::with_ipvs(f, &host, &addresses)?;
        let plans = plans(&found, &settings);
        let outcomes = attempt_all(&plans, &settings, base, at);
        let keys: Vec<Option<Key>> = plans
            .iter()
            .zip(&outcomes)
            .map(|(p, o)| Some((p.svc?.protocol, o.source?, o.dest?)))
            .collect();
        let entries = if conntrack {
            lookups(&host, at, keys)
        } else {
            keys.iter()
                .map(|_| Err("nf_conntrack_netlink is not loaded (nothing asked, so nothing loaded)".into()))
                .collect()
        };
        let tries = plans
            .into_iter()
            .zip(outcomes)
            .zip(entries)
            .map(|((p, o), e)| to_try(&found.table, p, o, e))
            .collect();
        Ok(ServiceTrafficFacts {
            source: if found.sources.is_empty() {
                "none".into()
            } else {
                found.sources.join("+")
            },
            generation: g,
            tries: Arc::new(tries),
        })
    })
    .await?;
    Ok(Probed::Present(facts))
}

/// A try's conntrack tuple: protocol, its own source, the service port.
type Key = (u8, SocketAddr, SocketAddr);

/// A connection lent to one GET, so that the run's GETs share it.
struct Lent<'a>(&'a mut NodeConn);

impl Conn for Lent<'_> {
    fn send(&mut self, msg: &[u8]) -> Result<(), NlError> {
        self.0.send(msg)
    }

    fn recv(&mut self, deadline: std::time::Instant) -> Result<&[u8], NlError> {
        self.0.recv(deadline)
    }
}

/// The conntrack entry of each try's own tuple (a ctnetlink GET each), over one socket: a socket
/// per GET, with its zeroed 64 KiB receive buffer, cost more than the GET. A GET that failed (a
/// timeout: its answer may still come, with the sequence number the next GET's would have)
/// leaves its socket behind, and the next GET opens another.
fn lookups(
    host: &crate::host::Host,
    at: std::time::Instant,
    keys: Vec<Option<Key>>,
) -> Vec<Result<Option<ct_dump::CtEntry>, String>> {
    let mut shared: Option<NodeConn> = None;
    keys.into_iter()
        .map(|k| {
            let Some((proto, src, dst)) = k else {
                return Err("not tried".into());
            };
            let conn = match &mut shared {
                Some(c) => c,
                None => shared.insert(host.netlink(NETLINK_NETFILTER).map_err(|e| e.to_string())?),
            };
            let entry = ct_dump::get(Lent(conn), at, proto, (src.ip(), src.port()), (dst.ip(), dst.port()));
            if entry.is_err() {
                shared = None;
            }
            entry.map_err(|e| format!("conntrack GET over ctnetlink: {e}"))
        })
        .collect()
}

/// One try as reported: its outcome, the endpoint its conntrack entry reached, the rules' path.
fn to_try(table: &ServiceTable, p: Plan, o: Outcome, e: Result<Option<ct_dump::CtEntry>, String>) -> Try {
    let rule_endpoints = p
        .svc
        .and_then(|s| table.services.get(&s))
        .map(|eps| {
            eps.iter()
                .take(MAX_RULE_ENDPOINTS)
                .map(|(a, port)| socket(*a, *port))
                .collect()
        })
        .unwrap_or_default();
    let (path, endpoint, path_detail) = match (p.svc, e) {
        // The kernel removes the entry of a TCP connection refused before it was
        // established (a RST on an unassured entry): no entry says nothing then.
        (Some(svc), Ok(None)) if svc.protocol == 6 && o.result == "refused" => (
            Path::Unknown,
            None,
            Some("refused before established: the kernel removed its conntrack entry".into()),
        ),
        (Some(svc), Ok(e)) => {
            let (path, ep) = path_of(table, &svc, e.as_ref());
            (path, ep, None)
        }
        (_, Err(why)) => (Path::Unknown, None, Some(why)),
        (None, Ok(_)) => (Path::Unknown, None, None),
    };
    Try {
        target: p.target,
        role: p.role,
        // A NodePort: the node's own address it was tried on.
        service: match (p.svc, o.dest) {
            (Some(s), Some(d)) if s.is_node_port() => Some(service_label(&ServicePort { address: d.ip(), ..s })),
            (s, _) => s.map(|s| service_label(&s)),
        },
        result: o.result.to_string(),
        detail: o.detail,
        seconds: o.seconds,
        answer_seconds: o.answer_seconds,
        source: o.source.map(|s| socket(s.ip(), Some(s.port()))),
        endpoint,
        path,
        path_detail,
        rule_endpoints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_flags() {
        assert_eq!(
            "default/web:80".parse::<Named>(),
            Ok(Named {
                service: "default/web".into(),
                port: 80
            })
        );
        for bad in [
            "web:80",
            "default/web",
            "default/web:0",
            "default/web:http",
            "a b/c:1",
            "/x:1",
        ] {
            assert!(bad.parse::<Named>().is_err(), "{bad}");
        }
    }

    #[test]
    fn address_flags_and_what_the_pod_was_told() {
        let dns: Address = "kube-system/kube-dns=10.96.0.10".parse().unwrap();
        assert_eq!(
            (dns.service.as_str(), dns.ip.to_string()),
            ("kube-system/kube-dns", "10.96.0.10".into())
        );
        assert_eq!(dns.origin, "--service-traffic.address");
        assert_eq!(
            "default/kubernetes=fd00::1".parse::<Address>().unwrap().ip.to_string(),
            "fd00::1"
        );
        for bad in ["kube-dns=10.96.0.10", "a/b=", "a/b=10.96.0", "a/b:53", "/b=1.2.3.4"] {
            assert!(bad.parse::<Address>().is_err(), "{bad}");
        }
        let resolv = "# Generated by the kubelet\nsearch default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver 8.8.8.8\noptions ndots:5\n";
        assert_eq!(first_nameserver(resolv), "10.96.0.10".parse().ok());
        assert_eq!(first_nameserver("nameserver not-an-ip\n"), None);
        // Nothing given: both from the pod.
        let got = Address::defaults(&[], Some("10.96.0.1"), Some(resolv));
        let seen: Vec<(&str, String, &str)> = got
            .iter()
            .map(|a| (a.service.as_str(), a.ip.to_string(), a.origin))
            .collect();
        assert_eq!(
            seen,
            [
                (API_SERVER, "10.96.0.1".into(), "KUBERNETES_SERVICE_HOST"),
                (DNS, "10.96.0.10".into(), "/etc/resolv.conf"),
            ]
        );
        // A flag wins over the pod's; no environment, no file: only the flags.
        let flag: Address = "kube-system/kube-dns=10.0.0.10".parse().unwrap();
        let got = Address::defaults(std::slice::from_ref(&flag), None, Some(resolv));
        assert_eq!(got, std::slice::from_ref(&flag));
        assert_eq!(Address::defaults(&[], Some("not-an-ip"), None), []);
    }

    fn svc(a: &str, port: u16, protocol: u8) -> ServicePort {
        ServicePort {
            address: a.parse().unwrap(),
            port,
            protocol,
        }
    }

    #[test]
    fn plans_pick_ipv4_and_the_named_ports() {
        let found = Found {
            sources: vec!["nftables"],
            named: vec![
                (API_SERVER.into(), svc("fd00::1", 443, 6), "A6".into()),
                (API_SERVER.into(), svc("10.96.0.1", 443, 6), "A".into()),
                (DNS.into(), svc("10.96.0.10", 53, 17), "D".into()),
                (DNS.into(), svc("10.96.0.10", 9153, 6), "M".into()),
                ("ns/web".into(), svc("10.96.5.5", 80, 6), "W".into()),
                // Its NodePort, and another port's (another link).
                ("ns/web".into(), ServicePort::node_port(false, 6, 30080), "W".into()),
                ("ns/web".into(), ServicePort::node_port(false, 6, 30081), "X".into()),
            ],
            table: ServiceTable::default(),
        };
        let s = Settings {
            targets: vec!["ns/web:80".parse().unwrap(), "ns/gone:80".parse().unwrap()],
            ..Settings::default()
        };
        let p = plans(&found, &s);
        let got: Vec<(&str, Option<String>)> = p
            .iter()
            .map(|p| (p.target.as_str(), p.svc.map(|s| service_label(&s))))
            .collect();
        assert_eq!(
            got,
            [
                ("default/kubernetes:443/tcp", Some("10.96.0.1:443/tcp".into())),
                ("kube-system/kube-dns:53/udp", Some("10.96.0.10:53/udp".into())),
                ("kube-system/kube-dns:53/tcp", None),
                ("ns/web:80/tcp", Some("10.96.5.5:80/tcp".into())),
                ("ns/web:80/tcp nodeport", Some("0.0.0.0:30080/tcp".into())),
                ("ns/gone:80/tcp", None),
            ]
        );
        assert_eq!(wanted(&s), [API_SERVER, DNS, "ns/web", "ns/gone"]);
        let many = Settings {
            targets: (1..=50).map(|i| format!("ns/s{i}:80").parse().unwrap()).collect(),
            ..Settings::default()
        };
        assert_eq!(plans(&found, &many).len(), 3 + MAX_TARGETS, "capped");
        assert_eq!(p[4].via, Some("10.96.5.5".parse().unwrap()), "the NodePort's ClusterIP");
    }

    #[test]
    fn paths() {
        let dns = svc("10.96.0.10", 53, 17);
        let mut t = ServiceTable::default();
        t.services.insert(dns, vec![("10.244.1.2".parse().unwrap(), Some(53))]);
        let entry = |ep: &str| ct_dump::CtEntry {
            l4proto: 17,
            orig_src: Some("192.168.0.2".parse().unwrap()),
            orig_dst: dns.address,
            orig_dport: 53,
            reply_src: ep.parse().unwrap(),
            reply_sport: 53,
            reply_dst: "192.168.0.2".parse().unwrap(),
            reply_dport: 40000,
            status: ct_dump::IPS_DST_NAT,
        };
        assert_eq!(
            path_of(&t, &dns, Some(&entry("10.244.1.2"))),
            (Path::Current, Some("10.244.1.2:53".into()))
        );
        assert_eq!(
            path_of(&t, &dns, Some(&entry("10.244.9.9"))),
            (Path::Stale, Some("10.244.9.9:53".into()))
        );
        assert_eq!(path_of(&t, &dns, Some(&entry("10.96.0.10"))).0, Path::NotTranslated);
        assert_eq!(path_of(&t, &dns, None), (Path::None, None));
        assert_eq!(
            path_of(&t, &svc("10.96.0.11", 53, 17), Some(&entry("10.244.1.2"))).0,
            Path::Unknown
        );
    }
}
