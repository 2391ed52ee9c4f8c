//! Reverse-path filtering on the interfaces that carry Service traffic, and the packets it
//! dropped. The kernel checks a packet's source against the interface it arrived on with
//! `max(conf/all/rp_filter, conf/<if>/rp_filter)` (Documentation/networking/ip-sysctl.rst):
//! 0 off, 1 strict (the reply must leave by the same interface), 2 loose (any route back). A
//! packet that fails is dropped and counted in `/proc/net/netstat`'s `TcpExt:
//! IPReversePathFilter` (`LINUX_MIB_IPRPFILTER`), for every protocol despite the line's name.
//!
//! The interfaces read are those of the node's network routes in `/proc/net/route` (its
//! default route first, then connected and gateway routes), not host routes (`/32`, one per pod
//! with Calico or Cilium): at most [`MAX_INTERFACES`], loopback left out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::parse::{quote, ParseError};

/// Interfaces read at most.
pub const MAX_INTERFACES: usize = 16;

/// One interface's filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceFilter {
    pub name: String,
    /// `conf/<if>/rp_filter`.
    pub value: i64,
    /// `max(all, value)`: what the kernel applies on this interface.
    pub effective: i64,
    /// It carries the default route.
    pub default_route: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RpFilterFacts {
    /// `net.ipv4.conf.all.rp_filter`.
    pub all: i64,
    /// The interfaces of the node's network routes, default route first (at most [`MAX_INTERFACES`]).
    pub interfaces: Vec<InterfaceFilter>,
    /// Interfaces with network routes beyond [`MAX_INTERFACES`], not read.
    #[serde(default)]
    pub more_interfaces: u32,
    /// `TcpExt: IPReversePathFilter`: packets dropped by the check since boot (this network
    /// namespace); None when the kernel has no such counter.
    pub drops_total: Option<u64>,
}

/// The interfaces of `/proc/net/route`'s network routes: (name, carries the default route),
/// default-route interfaces first, each once, loopback and `/32` host routes left out.
pub fn parse_route(source: &str, text: &str) -> Result<Vec<(String, bool)>, ParseError> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let cols: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(iface), Some(dest), Some(mask)) = (col("Iface"), col("Destination"), col("Mask")) else {
        return Err(ParseError::new(
            source,
            1,
            format!(
                "expected a header with Iface, Destination and Mask, found {}",
                quote(header)
            ),
        ));
    };
    let mut out: Vec<(String, bool)> = Vec::new();
    for (i, line) in lines.enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let (Some(name), Some(d), Some(m)) = (f.get(iface), f.get(dest), f.get(mask)) else {
            return Err(ParseError::new(source, i + 2, format!("short line {}", quote(line))));
        };
        let hex = |v: &str| u32::from_str_radix(v, 16);
        let (Ok(d), Ok(m)) = (hex(d), hex(m)) else {
            return Err(ParseError::new(
                source,
                i + 2,
                format!("expected hex address and mask, found {}", quote(line)),
            ));
        };
        if *name == "lo" || m == u32::MAX {
            continue;
        }
        let default = d == 0 && m == 0;
        match out.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 |= default,
            None => out.push((name.to_string(), default)),
        }
    }
    // Stable: default-route interfaces first, the rest in the table's order.
    out.sort_by_key(|(_, default)| !default);
    Ok(out)
}

/// `/proc/net/netstat`'s counters of one section (`TcpExt`, `IpExt`...): a header line of names
/// and a line of values, both prefixed `Section:`.
pub fn parse_netstat(source: &str, text: &str, section: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    let prefix = format!("{section}:");
    let mut rows = text.lines().enumerate().filter(|(_, l)| l.starts_with(&prefix));
    let Some((at, names)) = rows.next() else {
        return Ok(BTreeMap::new());
    };
    let Some((n, values)) = rows.next() else {
        return Err(ParseError::new(
            source,
            at + 1,
            format!("{section}: names without values"),
        ));
    };
    let names: Vec<&str> = names[prefix.len()..].split_whitespace().collect();
    let values: Vec<&str> = values[prefix.len()..].split_whitespace().collect();
    if names.len() != values.len() {
        return Err(ParseError::new(
            source,
            n + 1,
            format!("{section}: {} names but {} values", names.len(), values.len()),
        ));
    }
    names
        .iter()
        .zip(&values)
        .map(|(k, v)| {
            v.parse::<u64>()
                .map(|v| (k.to_string(), v))
                .map_err(|_| ParseError::new(source, n + 1, format!("{k}: expected a counter, found {}", quote(v))))
        })
        .collect()
}

pub async fn probe(ctx: &ProbeContext, _deadline: Deadline) -> Result<Probed<RpFilterFacts>, ProbeError> {
    let host = ctx.host.clone();
    super::blocking(ProbeName::RpFilter, move || read(&host)).await
}

fn sysctl(host: &Host, path: &str) -> Result<Option<i64>, ProbeError> {
    match host.read_optional(path)? {
        None => Ok(None),
        Some(t) => Ok(Some(super::sysctl::parse_value(
            &host.path(path).display().to_string(),
            &t,
        )?)),
    }
}

pub fn read(host: &Host) -> Result<Probed<RpFilterFacts>, ProbeError> {
    let Some(all) = sysctl(host, "/proc/sys/net/ipv4/conf/all/rp_filter")? else {
        return Ok(Probed::Absent("no /proc/sys/net/ipv4/conf/all/rp_filter".into()));
    };
    let routes = match host.read_optional("/proc/net/route")? {
        Some(t) => parse_route(&host.path("/proc/net/route").display().to_string(), &t)?,
        None => Vec::new(),
    };
    let more = routes.len().saturating_sub(MAX_INTERFACES) as u32;
    let mut interfaces = Vec::new();
    for (name, default_route) in routes.into_iter().take(MAX_INTERFACES) {
        // A name from the kernel's table, but never a path: no '/' nor "..".
        if name.contains('/') || name == ".." || name == "." {
            continue;
        }
        // Gone between the two reads: skipped, not 0.
        if let Some(value) = sysctl(host, &format!("/proc/sys/net/ipv4/conf/{name}/rp_filter"))? {
            interfaces.push(InterfaceFilter {
                name,
                value,
                effective: value.max(all),
                default_route,
            });
        }
    }
    let drops_total = match host.read_optional("/proc/net/netstat")? {
        Some(t) => parse_netstat(&host.path("/proc/net/netstat").display().to_string(), &t, "TcpExt")?
            .get("IPReversePathFilter")
            .copied(),
        None => None,
    };
    Ok(Probed::Present(RpFilterFacts {
        all,
        interfaces,
        more_interfaces: more,
        drops_total,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's /proc/net/route (kernel 6.18, 2026-12-02), with a Calico-like /32 pod route
    /// and a second uplink added.
    const ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t0010A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
cali1234\t0500F00A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0
lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0
";

    #[test]
    fn network_routes_default_first_no_host_routes() {
        assert_eq!(
            parse_route("r", ROUTE).unwrap(),
            vec![("eth0".to_string(), true), ("eth1".to_string(), false)]
        );
        assert!(parse_route("r", "garbage\n").is_err());
        assert!(parse_route("r", "Iface Destination Mask\neth0 zz 00\n").is_err());
        assert!(parse_route("r", "Iface Destination Mask\neth0\n").is_err());
        assert_eq!(parse_route("r", "").ok(), None);
    }

    #[test]
    fn netstat_counters_of_a_section() {
        // The TcpExt lines of this machine's /proc/net/netstat, shortened.
        let text =
            "TcpExt: SyncookiesSent IPReversePathFilter TCPTimeouts\nTcpExt: 0 417 3\nIpExt: InNoRoutes\nIpExt: 2\n";
        let c = parse_netstat("n", text, "TcpExt").unwrap();
        assert_eq!(c["IPReversePathFilter"], 417);
        assert_eq!(parse_netstat("n", text, "IpExt").unwrap()["InNoRoutes"], 2);
        assert!(parse_netstat("n", text, "MPTcpExt").unwrap().is_empty());
        assert!(parse_netstat("n", "TcpExt: A B\nTcpExt: 1\n", "TcpExt").is_err());
        assert!(parse_netstat("n", "TcpExt: A\n", "TcpExt").is_err());
        assert!(parse_netstat("n", "TcpExt: A\nTcpExt: x\n", "TcpExt").is_err());
    }

    #[test]
    fn effective_is_the_max_of_all_and_the_interface() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (p, v) in [
            ("proc/sys/net/ipv4/conf/all/rp_filter", "2\n"),
            ("proc/sys/net/ipv4/conf/eth0/rp_filter", "1\n"),
            ("proc/sys/net/ipv4/conf/eth1/rp_filter", "0\n"),
            ("proc/net/route", ROUTE),
            ("proc/net/netstat", "TcpExt: IPReversePathFilter\nTcpExt: 9\n"),
        ] {
            std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            std::fs::write(root.join(p), v).unwrap();
        }
        let Probed::Present(f) = read(&Host::new(root)).unwrap() else {
            panic!()
        };
        assert_eq!(f.all, 2);
        let eff: Vec<(&str, i64, i64)> = f
            .interfaces
            .iter()
            .map(|i| (i.name.as_str(), i.value, i.effective))
            .collect();
        assert_eq!(eff, [("eth0", 1, 2), ("eth1", 0, 2)]);
        assert_eq!(f.drops_total, Some(9));
        assert!(matches!(
            read(&Host::new(root.join("none"))).unwrap(),
            Probed::Absent(_)
        ));
    }
}
