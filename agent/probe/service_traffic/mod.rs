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
//!    the ruleset generation moved ([`TrafficMemory`]); IPVS and
//!    iptables-legacy rules carry no Service names, so their Services are not
//!    found (`not_in_rules`);
//! 2. one try per target, all at once, each under `--service-traffic.try-timeout`:
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
//! Cost: one socket per try, one GET per try, the rules walked once per
//! generation. Nothing is changed on the node; no module is loaded (nothing
//! is asked over netlink when nf_tables or nf_conntrack_netlink is not loaded).

pub mod dns;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::service_endpoints::iptables::IptEndpoints;
use super::service_endpoints::nftables::{self, NftEndpoints};
use super::service_endpoints::{service_label, socket, ServicePort, ServiceTable};
use super::{Deadline, ProbeContext, ProbeError, Probed};
use crate::host::Host;
use crate::netlink::nft::{Chain, Element, Family, Rule, Set};
use crate::netlink::nft_count::{self, Tally};
use crate::netlink::{ct_dump, NlError, NETLINK_NETFILTER};

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

/// What the probe tries, from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub targets: Vec<Named>,
    /// The cluster's DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// The deadline of each try.
    pub try_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            targets: Vec::new(),
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
    /// Where the targets were found: `iptables-nft`, `nftables` (joined with `+`), or `none`.
    pub source: String,
    /// The ruleset generation the targets were read at.
    pub generation: u32,
    /// Every target's try, in order: the API server, DNS over UDP and TCP, the flags' targets.
    pub tries: Vec<Try>,
}

// ---------------------------------------------------------------------------
// Finding the targets in kube-proxy's rules.

/// A Service's name from kube-proxy's `KUBE-SERVICES` comment
/// (`ns/name:port cluster IP`, `ns/name cluster IP`).
pub fn name_of_comment(comment: &str) -> Option<&str> {
    let first = comment.split_whitespace().next()?;
    let name = first.split(':').next()?;
    name.contains('/').then_some(name)
}

/// A Service's name from an nftables chain (`service-HASH-ns/name/proto/port`,
/// `external-HASH-...`).
pub fn name_of_chain(chain: &str) -> Option<&str> {
    let rest = chain
        .strip_prefix("service-")
        .or_else(|| chain.strip_prefix("external-"))?;
    let (_hash, rest) = rest.split_once('-')?;
    let mut parts = rest.splitn(3, '/');
    let (ns, name) = (parts.next()?, parts.next()?);
    parts.next()?;
    rest.get(..ns.len() + 1 + name.len())
}

/// One family's walk: kube-proxy's service table, and the service ports of the wanted names.
struct Walk<'a> {
    family: Family,
    ipt: IptEndpoints,
    nft: NftEndpoints,
    wanted: &'a [String],
    named: Vec<(String, ServicePort)>,
}

impl Walk<'_> {
    fn want(&self, name: Option<&str>) -> Option<String> {
        let n = name?;
        self.wanted.iter().any(|w| w == n).then(|| n.to_string())
    }
}

impl Tally for Walk<'_> {
    fn wants(&self, table: &str) -> bool {
        self.ipt.wants(table) || self.nft.wants(table)
    }

    fn table(&mut self, _: &str) {}

    fn chain(&mut self, _: &Chain<'_>) -> Result<(), NlError> {
        Ok(())
    }

    fn rule(&mut self, r: &Rule<'_>) -> Result<(), NlError> {
        if r.table == nftables::TABLE {
            return self.nft.rule(r);
        }
        if !(r.table == "nat" && r.chain == "KUBE-SERVICES") {
            return self.ipt.rule(r);
        }
        let f = crate::netlink::nft_expr::rule_facts(self.family, r)?;
        self.ipt.add(r.table, r.chain, &f);
        let x = super::rule_counters::extra(r)?;
        let comment = x
            .comment
            .or_else(|| r.userdata.and_then(super::rule_counters::userdata_comment));
        if let (Some(name), Some(address), Some(port), Some(protocol)) = (
            self.want(comment.and_then(name_of_comment)),
            f.daddr,
            f.dport,
            f.l4proto,
        ) {
            self.named.push((
                name,
                ServicePort {
                    address,
                    port,
                    protocol,
                },
            ));
        }
        Ok(())
    }

    fn set(&mut self, s: &Set<'_>) -> bool {
        s.table == nftables::TABLE && self.nft.set(s)
    }

    fn elements(&mut self, _: &str, _: &str, _: u64) {}

    fn element_detail(&self) -> bool {
        true
    }

    fn element(&mut self, set: &str, e: Element<'_>) -> Result<(), NlError> {
        if set == "service-ips" {
            if let Some(name) = self.want(e.chain.and_then(name_of_chain)) {
                if let Ok(svc) = self.nft.address_key(set, e.key) {
                    self.named.push((name, svc));
                }
            }
        }
        self.nft.element(set, e)
    }
}

/// The wanted Services' ports and their current endpoints, at one generation.
#[derive(Debug, Default)]
pub struct Found {
    pub sources: Vec<&'static str>,
    /// (name, service port), sorted.
    pub named: Vec<(String, ServicePort)>,
    /// The named ports' endpoints only (the rest of the table is not kept).
    pub table: ServiceTable,
}

/// (generation, the names looked for, what was found).
type Kept = (u32, Vec<String>, Arc<Found>);

/// The targets kept between runs, for one generation and one list of names.
#[derive(Debug, Default)]
pub struct TrafficMemory {
    found: Mutex<Option<Kept>>,
}

fn find(
    host: &Host,
    memory: &TrafficMemory,
    wanted: &[String],
    deadline: Instant,
) -> Result<(u32, Arc<Found>), NlError> {
    let mut why = Vec::new();
    for _ in 0..nft_count::ATTEMPTS {
        let gen = nft_count::generation(host.netlink(NETLINK_NETFILTER)?, deadline)?;
        if let Ok(m) = memory.found.lock() {
            if let Some((g, w, f)) = m.as_ref() {
                if *g == gen && w == wanted {
                    return Ok((gen, f.clone()));
                }
            }
        }
        let mut found = Found::default();
        let mut gens = Vec::new();
        let mut full = ServiceTable::default();
        for family in [Family::Ip, Family::Ip6] {
            let plan = nft_count::Plan { family, sets: true };
            let c = nft_count::count(&mut || host.netlink(NETLINK_NETFILTER), plan, deadline, &|| Walk {
                family,
                ipt: IptEndpoints::new(family),
                nft: NftEndpoints::new(family),
                wanted,
                named: Vec::new(),
            })?;
            gens.push(c.generation);
            found.named.extend(c.tally.named);
            for (name, t) in [
                ("iptables-nft", c.tally.ipt.finish()),
                ("nftables", c.tally.nft.finish()),
            ] {
                if !t.services.is_empty() && !found.sources.contains(&name) {
                    found.sources.push(name);
                }
                full.merge(t);
            }
        }
        if gens.iter().any(|g| *g != gens[0]) {
            why.push(format!("generations {gens:?}"));
            continue;
        }
        found.named.sort();
        found.named.dedup();
        for (_, svc) in &found.named {
            if let Some(eps) = full.services.get(svc) {
                found.table.services.insert(*svc, eps.clone());
            }
            if let Some(u) = full.undecoded.get(svc) {
                found.table.undecoded.insert(*svc, u.clone());
            }
        }
        let found = Arc::new(found);
        if let Ok(mut m) = memory.found.lock() {
            *m = Some((gens[0], wanted.to_vec(), found.clone()));
        }
        return Ok((gens[0], found));
    }
    Err(NlError::Changed(format!(
        "a commit between the two families' walks, {} times: {}",
        why.len(),
        why.join("; ")
    )))
}

// ---------------------------------------------------------------------------
// The tries.

/// What one try is: a target, the service port, and how to try it.
#[derive(Debug, Clone)]
struct Plan {
    target: String,
    role: Role,
    svc: Option<ServicePort>,
    dns: bool,
}

/// The targets of a run, in order: each its service port, IPv4 first.
fn plans(found: &Found, s: &Settings) -> Vec<Plan> {
    let pick = |name: &str, protocol: u8, port: Option<u16>| -> Option<ServicePort> {
        let mut ports: Vec<ServicePort> = found
            .named
            .iter()
            .filter(|(n, p)| n == name && p.protocol == protocol && port.is_none_or(|want| want == p.port))
            .map(|(_, p)| *p)
            .collect();
        ports.sort_by_key(|p| (p.address.is_ipv6(), p.port));
        ports.first().copied()
    };
    let api = pick(API_SERVER, 6, Some(443)).or_else(|| pick(API_SERVER, 6, None));
    let mut out = vec![
        Plan {
            target: format!("{API_SERVER}:{}/tcp", api.map_or(443, |p| p.port)),
            role: Role::ApiServer,
            svc: api,
            dns: false,
        },
        Plan {
            target: format!("{DNS}:53/udp"),
            role: Role::Dns,
            svc: pick(DNS, 17, Some(53)),
            dns: true,
        },
        Plan {
            target: format!("{DNS}:53/tcp"),
            role: Role::Dns,
            svc: pick(DNS, 6, Some(53)),
            dns: true,
        },
    ];
    for t in s.targets.iter().take(MAX_TARGETS) {
        out.push(Plan {
            target: format!("{}:{}/tcp", t.service, t.port),
            role: Role::Target,
            svc: pick(&t.service, 6, Some(t.port)),
            dns: false,
        });
    }
    out
}

/// The names a run looks for.
fn wanted(s: &Settings) -> Vec<String> {
    let mut w = vec![API_SERVER.to_string(), DNS.to_string()];
    for t in s.targets.iter().take(MAX_TARGETS) {
        if !w.contains(&t.service) {
            w.push(t.service.clone());
        }
    }
    w
}

/// A failure's name and its detail.
fn failure(e: &std::io::Error) -> (&'static str, String) {
    use nix::errno::Errno;
    let kind = match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ECONNREFUSED) => "refused",
        Some(Errno::ETIMEDOUT) => "timeout",
        Some(Errno::EHOSTUNREACH | Errno::ENETUNREACH) => "unreachable",
        _ => "error",
    };
    (kind, e.to_string())
}

/// What a try did before the conntrack lookup.
#[derive(Debug, Default)]
struct Outcome {
    result: &'static str,
    detail: Option<String>,
    seconds: Option<f64>,
    answer_seconds: Option<f64>,
    source: Option<SocketAddr>,
}

impl Outcome {
    fn fail(result: &'static str, detail: String) -> Outcome {
        Outcome {
            result,
            detail: Some(detail),
            ..Outcome::default()
        }
    }
}

/// The source address the node would use toward `to` (a route lookup: a
/// connected UDP socket sends nothing).
fn source_for(to: SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect(to)?;
    Ok(s.local_addr()?.ip())
}

async fn connect_tcp(to: SocketAddr, timeout: Duration) -> (Outcome, Option<tokio::net::TcpStream>) {
    let prepared = (|| {
        let src = source_for(to)?;
        let sock = if to.is_ipv6() {
            tokio::net::TcpSocket::new_v6()?
        } else {
            tokio::net::TcpSocket::new_v4()?
        };
        sock.bind(SocketAddr::new(src, 0))?;
        let local = sock.local_addr()?;
        Ok::<_, std::io::Error>((sock, local))
    })();
    let (sock, local) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let (kind, d) = failure(&e);
            return (Outcome::fail(kind, d), None);
        }
    };
    let started = Instant::now();
    let mut o = Outcome {
        source: Some(local),
        ..Outcome::default()
    };
    match tokio::time::timeout(timeout, sock.connect(to)).await {
        Ok(Ok(stream)) => {
            o.result = "ok";
            o.seconds = Some(started.elapsed().as_secs_f64());
            (o, Some(stream))
        }
        Ok(Err(e)) => {
            let (kind, d) = failure(&e);
            (
                Outcome {
                    result: kind,
                    detail: Some(d),
                    ..o
                },
                None,
            )
        }
        Err(_) => (
            Outcome {
                result: "timeout",
                detail: Some(format!("no connection within {timeout:?}")),
                ..o
            },
            None,
        ),
    }
}

/// Judges a DNS answer: ok when NOERROR with at least one answer record.
fn judge_answer(o: &mut Outcome, id: u16, msg: &[u8]) {
    match dns::answer(id, msg) {
        Ok(a) if a.rcode == 0 && (a.answers > 0 || a.truncated) => {
            o.result = "ok";
            o.detail = Some(format!(
                "NOERROR, {} answer{}",
                a.answers,
                if a.answers == 1 { "" } else { "s" }
            ));
        }
        Ok(a) if a.rcode == 0 => {
            o.result = "dns_rcode";
            o.detail = Some("NOERROR without an answer record".into());
        }
        Ok(a) => {
            o.result = "dns_rcode";
            o.detail = Some(format!("{} (rcode {})", dns::rcode_name(a.rcode), a.rcode));
        }
        Err(e) => {
            o.result = "error";
            o.detail = Some(e.to_string());
        }
    }
}

async fn dns_udp(to: SocketAddr, name: &str, id: u16, timeout: Duration) -> Outcome {
    let query = match dns::query(id, name, false) {
        Ok(q) => q,
        Err(e) => return Outcome::fail("error", e.to_string()),
    };
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let sock = match tokio::net::UdpSocket::bind(any).await {
        Ok(s) => s,
        Err(e) => return Outcome::fail(failure(&e).0, e.to_string()),
    };
    if let Err(e) = sock.connect(to).await {
        let (k, d) = failure(&e);
        return Outcome::fail(k, d);
    }
    let mut o = Outcome {
        source: sock.local_addr().ok(),
        ..Outcome::default()
    };
    let started = Instant::now();
    let exchange = async {
        sock.send(&query).await?;
        let mut buf = vec![0u8; 1232];
        let n = sock.recv(&mut buf).await?;
        buf.truncate(n);
        Ok::<_, std::io::Error>(buf)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(msg)) => {
            let t = started.elapsed().as_secs_f64();
            (o.seconds, o.answer_seconds) = (Some(t), Some(t));
            judge_answer(&mut o, id, &msg);
        }
        Ok(Err(e)) => (o.result, o.detail) = (failure(&e).0, Some(e.to_string())),
        Err(_) => (o.result, o.detail) = ("timeout", Some(format!("no answer within {timeout:?}"))),
    }
    o
}

async fn dns_tcp(to: SocketAddr, name: &str, id: u16, timeout: Duration) -> Outcome {
    let query = match dns::query(id, name, false) {
        Ok(q) => q,
        Err(e) => return Outcome::fail("error", e.to_string()),
    };
    let started = Instant::now();
    let (mut o, stream) = connect_tcp(to, timeout).await;
    let Some(mut stream) = stream else { return o };
    let left = timeout.saturating_sub(started.elapsed());
    let asked = Instant::now();
    let exchange = async {
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        stream.write_all(&framed).await?;
        let len = stream.read_u16().await?;
        let mut msg = vec![0u8; usize::from(len)];
        stream.read_exact(&mut msg).await?;
        Ok::<_, std::io::Error>(msg)
    };
    match tokio::time::timeout(left, exchange).await {
        Ok(Ok(msg)) => {
            o.answer_seconds = Some(asked.elapsed().as_secs_f64());
            judge_answer(&mut o, id, &msg);
        }
        Ok(Err(e)) => (o.result, o.detail) = (failure(&e).0, Some(format!("after connecting: {e}"))),
        Err(_) => (o.result, o.detail) = ("timeout", Some(format!("connected, no answer within {timeout:?}"))),
    }
    o
}

async fn attempt(p: &Plan, s: &Settings, id: u16) -> Outcome {
    let Some(svc) = p.svc else {
        return Outcome::fail("not_in_rules", format!("{} is not in kube-proxy's rules", p.target));
    };
    let to = SocketAddr::new(svc.address, svc.port);
    let name = format!("kubernetes.default.svc.{}", s.cluster_domain.trim_matches('.'));
    match (p.dns, svc.protocol) {
        (true, 17) => dns_udp(to, &name, id, s.try_timeout).await,
        (true, _) => dns_tcp(to, &name, id, s.try_timeout).await,
        (false, _) => connect_tcp(to, s.try_timeout).await.0,
    }
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
    ProbeError::NfNetlink(format!(
        "kube-proxy's rules over nf_tables netlink (the service_traffic targets): {e}"
    ))
}

pub async fn probe(ctx: &ProbeContext, deadline: Deadline) -> Result<Probed<ServiceTrafficFacts>, ProbeError> {
    if !matches!(ctx.host.kernel(), crate::netlink::replay::KernelSource::Live) {
        return Ok(Probed::Absent(
            "Service traffic is tried from the node itself (--host-root /) only".into(),
        ));
    }
    let settings = ctx.service_traffic.clone();
    let wanted = wanted(&settings);
    let at = deadline.at();
    let (host, memory) = (ctx.host.clone(), ctx.memory.clone());
    let w = wanted.clone();
    let (generation, found, conntrack) = super::blocking(super::ProbeName::ServiceTraffic, move || {
        let conntrack = !super::modules::tool_would_load(&host, "nf_conntrack_netlink");
        if super::modules::tool_would_load(&host, "nf_tables") {
            return Ok((0, Arc::new(Found::default()), conntrack));
        }
        let (g, f) = find(&host, &memory.service_traffic, &w, at).map_err(nl)?;
        Ok((g, f, conntrack))
    })
    .await?;
    let plans = plans(&found, &settings);
    let base = (std::process::id() as u16).wrapping_mul(31);
    let outcomes = futures_util::future::join_all(
        plans
            .iter()
            .enumerate()
            .map(|(i, p)| attempt(p, &settings, base.wrapping_add(i as u16))),
    )
    .await;
    // The conntrack entry of each try's own tuple.
    let host = ctx.host.clone();
    let keys: Vec<Option<(u8, SocketAddr, SocketAddr)>> = plans
        .iter()
        .zip(&outcomes)
        .map(|(p, o)| Some((p.svc?.protocol, o.source?, SocketAddr::new(p.svc?.address, p.svc?.port))))
        .collect();
    let entries: Vec<Result<Option<ct_dump::CtEntry>, String>> = if conntrack {
        super::blocking(super::ProbeName::ServiceTraffic, move || {
            Ok(keys
                .into_iter()
                .map(|k| {
                    let Some((proto, src, dst)) = k else {
                        return Err("not tried".into());
                    };
                    let conn = host.netlink(NETLINK_NETFILTER).map_err(|e| e.to_string())?;
                    ct_dump::get(conn, at, proto, (src.ip(), src.port()), (dst.ip(), dst.port()))
                        .map_err(|e| format!("conntrack GET over ctnetlink: {e}"))
                })
                .collect())
        })
        .await?
    } else {
        keys.iter()
            .map(|_| Err("nf_conntrack_netlink is not loaded (nothing asked, so nothing loaded)".into()))
            .collect()
    };
    let tries = plans
        .into_iter()
        .zip(outcomes)
        .zip(entries)
        .map(|((p, o), e)| {
            let rule_endpoints = p
                .svc
                .and_then(|s| found.table.services.get(&s))
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
                    let (path, ep) = path_of(&found.table, &svc, e.as_ref());
                    (path, ep, None)
                }
                (_, Err(why)) => (Path::Unknown, None, Some(why)),
                (None, Ok(_)) => (Path::Unknown, None, None),
            };
            Try {
                target: p.target,
                role: p.role,
                service: p.svc.map(|s| service_label(&s)),
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
        })
        .collect();
    Ok(Probed::Present(ServiceTrafficFacts {
        source: if found.sources.is_empty() {
            "none".into()
        } else {
            found.sources.join("+")
        },
        generation,
        tries,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_kube_proxys_rules() {
        // pkg/proxy/iptables: servicePortName + " cluster IP"; a port without a name: "ns/name".
        assert_eq!(
            name_of_comment("default/kubernetes:https cluster IP"),
            Some("default/kubernetes")
        );
        assert_eq!(name_of_comment("ns/web cluster IP"), Some("ns/web"));
        assert_eq!(
            name_of_comment("kubernetes service nodeports; NOTE: this must be the last rule in this chain"),
            None
        );
        // pkg/proxy/nftables: servicePortChainNamePrefix + hash + "-" + ns/name/proto/port.
        assert_eq!(
            name_of_chain("service-2QRHZV4L-default/kubernetes/tcp/https"),
            Some("default/kubernetes")
        );
        assert_eq!(
            name_of_chain("external-HVFWP5L3-kube-system/kube-dns/udp/dns"),
            Some("kube-system/kube-dns")
        );
        assert_eq!(name_of_chain("service-X-default"), None);
        assert_eq!(
            name_of_chain("endpoint-X-default/kubernetes/tcp/https__10.0.0.1/6443"),
            None
        );
    }

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
                (API_SERVER.into(), svc("fd00::1", 443, 6)),
                (API_SERVER.into(), svc("10.96.0.1", 443, 6)),
                (DNS.into(), svc("10.96.0.10", 53, 17)),
                (DNS.into(), svc("10.96.0.10", 9153, 6)),
                ("ns/web".into(), svc("10.96.5.5", 80, 6)),
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
                ("ns/gone:80/tcp", None),
            ]
        );
        assert_eq!(wanted(&s), [API_SERVER, DNS, "ns/web", "ns/gone"]);
        let many = Settings {
            targets: (1..=50).map(|i| format!("ns/s{i}:80").parse().unwrap()).collect(),
            ..Settings::default()
        };
        assert_eq!(plans(&found, &many).len(), 3 + MAX_TARGETS, "capped");
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
