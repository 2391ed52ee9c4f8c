//! IPVS facts: the virtual-server table and its counters, parsed from text.
//!
//! Four inputs, four pure parsers (no I/O; `&str` in, typed facts or a
//! [`ParseError`] with the 1-based line out):
//!
//! | input                         | parser                       |
//! |-------------------------------|------------------------------|
//! | `ipvsadm -Ln`                 | [`parse_ipvsadm_list`]       |
//! | `ipvsadm -Ln --stats [--exact]` | [`parse_ipvsadm_stats`]    |
//! | `/proc/net/ip_vs`             | [`parse_proc_ip_vs`]         |
//! | `/proc/net/ip_vs_stats`       | [`parse_proc_ip_vs_stats`]   |
//!
//! [`merge_stats`] attaches the `--stats` counters to the services of a list.
//!
//! # Where the formats come from
//!
//! ipvsadm (checked against `ipvsadm.c` as mirrored in Distrotech/ipvsadm,
//! commit 0047f4d3bd015391ff8cb8524b31687cf2626b09, functions `list_all`,
//! `print_title`, `print_service_entry`, `print_largenum`; and against the
//! format strings inside the Debian 12 `ipvsadm 1:1.31-1+b1` binary):
//!
//! * `list_all` prints `IP Virtual Server version %d.%d.%d (size=%d)`, then the
//!   title, then one entry per service, so a table with no services is exactly
//!   the three header lines.
//! * Title (plain list): `Prot LocalAddress:Port Scheduler Flags` and
//!   `  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn`.
//!   `--stats`, `--rate`, `--thresholds`, `--persistent-conn` and `--tun-info`
//!   print other titles (`%-33s %8s ...`); `--stats` wins over `--rate` when
//!   both are given.
//! * Service name: `"%-4s %s"` (1.31; older: `"%s  %s"`) of protocol and
//!   `addr:port` (`[v6]:port` for IPv6), or `FWM  %d` / `FWM  %d IPv6`. The
//!   firewall mark is a `u32` printed with `%d`, so marks >= 2^31 appear
//!   negative; we convert them back.
//! * Plain list service line: `"%s %s"` of name and scheduler, then optionally
//!   ` (flag,...)` (scheduler flags such as `sh-fallback,sh-port`: the 1.31
//!   binary holds a ` (` literal right before ` persistent %u`; the 1.31 source
//!   itself was not in the searchable index), ` persistent %u` (seconds),
//!   ` mask %s` (IPv4) or ` mask %i` (IPv6 prefix), ` pe %s`, ` ops`.
//! * Plain list destination: `"  -> %-28s %-7s %-6d %-10u %-10u\n"`: address,
//!   forwarding method (`Masq`, `Local`, `Tunnel`, `Route`), weight,
//!   ActiveConn, InActConn. `%-10u` leaves trailing spaces, which pasted
//!   samples usually lose; both are accepted.
//! * Stats lines: `"%-33s"` service name / `"  -> %-28s"` destination, then
//!   five `print_largenum` fields. With `--exact` each is `%*llu` (width 9, or
//!   digits + 1). Without it: below 10^8 `%9llu`; below 10^9 `%8lluK` of
//!   `i / 1000`; below 10^11 `%8lluM` of `i / 10^6`; below 10^14 `%8lluG` of
//!   `i / 10^9`; else `%8lluT` of `i / 10^12`. The division truncates, so a
//!   suffixed value parsed back (`n * 1000^k`) is a lower bound: the true count
//!   is in `[n * unit, (n + 1) * unit)`. The agent runs with `--exact`.
//!
//! Kernel (`net/netfilter/ipvs/ip_vs_ctl.c`, `ip_vs_info_seq_show` and
//! `ip_vs_stats_show`):
//!
//! * `/proc/net/ip_vs` service: `"%s  %08X:%04X %s %s "` (IPv4, the last `%s`
//!   is `"ops "` or empty), `"%s  [%pI6]:%04X %s "` (IPv6, full uncompressed
//!   groups), `"FWM  %08X %s %s"` (fwmark in **hex**), then
//!   `"persistent %d %08X\n"` or `'\n'`. The persistence timeout there is
//!   `svc->timeout`, which the kernel stores in **jiffies** (`u->timeout * HZ`),
//!   not seconds; see [`parse_proc_ip_vs`].
//! * `/proc/net/ip_vs` destination: `"  -> %08X:%04X      %-7s %-6d %-10d %-10d\n"`
//!   (or `[%pI6]:%04X`).
//! * `/proc/net/ip_vs_stats`: two title lines, `"%8LX %8LX %8LX %16LX %16LX\n\n"`
//!   totals, a rate title, `"%8LX %8LX %8LX %16LX %16LX\n"` rates; all hex.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::parse::{parse_hex_u64, parse_u64, quote, ParseError};

/// Inputs with more lines than this are rejected, so parsing stays bounded.
pub const MAX_LINES: usize = 1_000_000;

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
    /// Persistence timeout in seconds when the service is persistent. From
    /// `/proc/net/ip_vs` this is only filled by [`parse_proc_ip_vs_with_hz`],
    /// because the kernel prints it in jiffies.
    pub persistent_seconds: Option<u32>,
    /// The service's destinations (backends), in input order.
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
/// suffix is a lower bound (ipvsadm truncates; see the module docs).
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

// ---------------------------------------------------------------------------
// Shared line handling

/// The title lines, compared with runs of whitespace collapsed to one space.
const VERSION_PREFIX: &str = "IP Virtual Server version ";
const LIST_TITLE: &str = "Prot LocalAddress:Port Scheduler Flags";
const LIST_DEST_TITLE: &str = "-> RemoteAddress:Port Forward Weight ActiveConn InActConn";
const STATS_TITLE: &str = "Prot LocalAddress:Port Conns InPkts OutPkts InBytes OutBytes";
const RATE_TITLE: &str = "Prot LocalAddress:Port CPS InPPS OutPPS InBPS OutBPS";
const BARE_DEST_TITLE: &str = "-> RemoteAddress:Port";
const CONN_TITLE: &str = "IPVS connection entries";

fn normalize(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits into numbered, right-trimmed lines after checking the line cap and
/// emptiness. Trailing blank lines are dropped; blank lines elsewhere are kept
/// (and rejected by the callers).
fn lines_of<'a>(source_name: &str, text: &'a str) -> Result<Vec<(usize, &'a str)>, ParseError> {
    if text.lines().nth(MAX_LINES).is_some() {
        return Err(ParseError::whole(
            source_name,
            format!("more than {MAX_LINES} lines; refusing to parse"),
        ));
    }
    let body = text.trim_end();
    if body.is_empty() {
        return Err(ParseError::whole(source_name, "empty input"));
    }
    Ok(body.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end())).collect())
}

/// Names a title line we do not accept, so the error says what was run.
fn describe_title(norm: &str) -> &'static str {
    if norm == STATS_TITLE {
        "the `ipvsadm --stats` layout"
    } else if norm == RATE_TITLE {
        "the `ipvsadm --rate` layout (CPS/InPPS/OutPPS/InBPS/OutBPS), which proxywatch does not parse"
    } else if norm == LIST_TITLE {
        "the plain `ipvsadm -Ln` list layout"
    } else if norm.contains("Uthreshold") {
        "the `ipvsadm --thresholds` layout"
    } else if norm.contains("PersistConn") {
        "the `ipvsadm --persistent-conn` layout"
    } else if norm.contains("TunnelInfo") {
        "the `ipvsadm --tun-info` layout"
    } else {
        "an unknown layout"
    }
}

fn err(source_name: &str, line: usize, message: impl Into<String>) -> ParseError {
    ParseError::new(source_name, line, message)
}

/// Which table a service line belongs to, with the column layout it uses.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// `ipvsadm -Ln`: decimal numbers, dotted/bracketed addresses.
    IpvsadmList,
    /// `/proc/net/ip_vs`: hex addresses, ports and marks.
    Proc,
}

/// Header bookkeeping shared by the list-shaped parsers.
struct Headers {
    version: bool,
    title: bool,
    dest_title: bool,
}

impl Headers {
    fn new() -> Self {
        Headers {
            version: false,
            title: false,
            dest_title: false,
        }
    }

    /// Returns Ok(true) if `line` is an accepted header line (consumed),
    /// Ok(false) if it is not a header at all, Err if it is a wrong header or
    /// a header out of place.
    fn take(
        &mut self,
        source_name: &str,
        n: usize,
        line: &str,
        in_body: bool,
        title: &str,
        dest_title: &str,
    ) -> Result<bool, ParseError> {
        let norm = normalize(line);
        if norm.starts_with(VERSION_PREFIX.trim_end()) {
            if n != 1 {
                return Err(err(
                    source_name,
                    n,
                    "version line `IP Virtual Server version ...` is only expected on line 1",
                ));
            }
            self.version = true;
            return Ok(true);
        }
        if norm == CONN_TITLE || norm.starts_with("pro expire") {
            return Err(err(
                source_name,
                n,
                format!(
                    "{} is the connection table (`ipvsadm -Lnc`), not a service list",
                    quote(line)
                ),
            ));
        }
        if norm.starts_with("Prot ") {
            if norm != title {
                return Err(err(
                    source_name,
                    n,
                    format!(
                        "unexpected header {}: this is {}; expected {}",
                        quote(line),
                        describe_title(&norm),
                        quote(title)
                    ),
                ));
            }
            if in_body || self.title {
                return Err(err(source_name, n, "column header repeated or after the first service"));
            }
            self.title = true;
            return Ok(true);
        }
        if norm.starts_with("-> RemoteAddress") {
            if norm != dest_title {
                return Err(err(
                    source_name,
                    n,
                    format!(
                        "unexpected destination header {}; expected {}",
                        quote(line),
                        quote(dest_title)
                    ),
                ));
            }
            if in_body || self.dest_title || !self.title {
                return Err(err(source_name, n, "destination header out of place"));
            }
            self.dest_title = true;
            return Ok(true);
        }
        Ok(false)
    }
}

// ---------------------------------------------------------------------------
// Addresses and numbers

/// `10.96.0.1:443` or `[fd20::1]:443` (numeric only).
fn parse_dotted_addr_port(source_name: &str, n: usize, what: &str, token: &str) -> Result<(String, u16), ParseError> {
    let bad = |why: &str| {
        err(
            source_name,
            n,
            format!(
                "{what}: expected a numeric IP:port, found {} ({why}; run ipvsadm with -n)",
                quote(token)
            ),
        )
    };
    let (addr, port) = if let Some(rest) = token.strip_prefix('[') {
        let (inner, port) = rest
            .split_once("]:")
            .ok_or_else(|| bad("no `]:` after an IPv6 address"))?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
        (ip.to_string(), port)
    } else {
        let (a, port) = token.rsplit_once(':').ok_or_else(|| bad("no `:port`"))?;
        let ip: Ipv4Addr = a.parse().map_err(|_| bad("not an IPv4 address"))?;
        (ip.to_string(), port)
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("port is not a decimal number"));
    }
    let port: u16 = port.parse().map_err(|_| bad("port out of range"))?;
    Ok((addr, port))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `0A600001:01BB` or `[2620:0000:...:0001]:0050` (kernel hex form).
fn parse_hex_addr_port(source_name: &str, n: usize, what: &str, token: &str) -> Result<(String, u16), ParseError> {
    let bad = |why: &str| {
        err(
            source_name,
            n,
            format!("{what}: expected kernel hex ADDR:PORT, found {} ({why})", quote(token)),
        )
    };
    let (addr, port) = if let Some(rest) = token.strip_prefix('[') {
        let (inner, port) = rest
            .split_once("]:")
            .ok_or_else(|| bad("no `]:` after an IPv6 address"))?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
        (ip.to_string(), port)
    } else {
        let (a, port) = token.split_once(':').ok_or_else(|| bad("no `:PORT`"))?;
        if !is_hex(a, 8) {
            return Err(bad("address is not 8 hex digits"));
        }
        let v = u32::from_str_radix(a, 16).map_err(|_| bad("address is not hex"))?;
        (Ipv4Addr::from(v).to_string(), port)
    };
    if !is_hex(port, 4) {
        return Err(bad("port is not 4 hex digits"));
    }
    let port = u16::from_str_radix(port, 16).map_err(|_| bad("port is not hex"))?;
    Ok((addr, port))
}

/// ipvsadm prints the `u32` fwmark with `%d`: accept `-2147483648..=4294967295`.
fn parse_decimal_fwmark(source_name: &str, n: usize, token: &str) -> Result<u32, ParseError> {
    let v: i64 = token.parse().map_err(|_| {
        err(
            source_name,
            n,
            format!("fwmark: expected a decimal number, found {}", quote(token)),
        )
    })?;
    if (0..=i64::from(u32::MAX)).contains(&v) {
        Ok(v as u32)
    } else if (i64::from(i32::MIN)..0).contains(&v) {
        Ok(v as i32 as u32)
    } else {
        Err(err(source_name, n, format!("fwmark: {v} is out of range")))
    }
}

fn parse_weight(source_name: &str, n: usize, token: &str) -> Result<i32, ParseError> {
    token.parse::<i32>().map_err(|_| {
        err(
            source_name,
            n,
            format!("Weight: expected an integer, found {}", quote(token)),
        )
    })
}

/// A number as `print_largenum` prints it: digits, optionally followed by one
/// of `K`, `M`, `G`, `T` meaning `* 10^3`, `10^6`, `10^9`, `10^12`.
fn parse_largenum(source_name: &str, n: usize, field: &str, token: &str) -> Result<u64, ParseError> {
    let (digits, unit) = match token.as_bytes().last() {
        Some(b'K') => (&token[..token.len() - 1], 1_000u64),
        Some(b'M') => (&token[..token.len() - 1], 1_000_000),
        Some(b'G') => (&token[..token.len() - 1], 1_000_000_000),
        Some(b'T') => (&token[..token.len() - 1], 1_000_000_000_000),
        _ => (token, 1),
    };
    let bad = || {
        err(
            source_name,
            n,
            format!(
                "{field}: expected a count (digits, optional K/M/G/T suffix), found {}",
                quote(token)
            ),
        )
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: u64 = digits.parse().map_err(|_| bad())?;
    v.checked_mul(unit)
        .ok_or_else(|| err(source_name, n, format!("{field}: {} overflows 64 bits", quote(token))))
}

// ---------------------------------------------------------------------------
// Service and destination lines (list layouts)

const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

fn check_protocol(source_name: &str, n: usize, line: &str, proto: &str) -> Result<(), ParseError> {
    if PROTOCOLS.contains(&proto) {
        Ok(())
    } else {
        Err(err(
            source_name,
            n,
            format!(
                "expected a service line starting with TCP, UDP, SCTP or FWM, found {}",
                quote(line)
            ),
        ))
    }
}

/// Parses the head of a service line: protocol + address/port or FWM + mark.
/// Returns the partly filled service and the remaining tokens.
fn parse_service_head<'a>(
    source_name: &str,
    n: usize,
    line: &str,
    tokens: &'a [&'a str],
    layout: Layout,
) -> Result<(VirtualServer, &'a [&'a str]), ParseError> {
    let first = tokens.first().copied().unwrap_or("");
    let target = tokens
        .get(1)
        .copied()
        .ok_or_else(|| err(source_name, n, format!("service line too short: {}", quote(line))))?;
    let mut vs = VirtualServer::default();
    let mut rest = &tokens[2..];
    if first == "FWM" {
        vs.protocol = "FWM".to_string();
        vs.fwmark = Some(match layout {
            Layout::IpvsadmList => parse_decimal_fwmark(source_name, n, target)?,
            Layout::Proc => {
                if !is_hex(target, 8) {
                    return Err(err(
                        source_name,
                        n,
                        format!("fwmark: expected 8 hex digits, found {}", quote(target)),
                    ));
                }
                parse_hex_u64(source_name, n, "fwmark", target)? as u32
            }
        });
        // ipvsadm marks IPv6 firewall-mark services with a literal `IPv6`.
        if layout == Layout::IpvsadmList && rest.first() == Some(&"IPv6") {
            rest = &rest[1..];
        }
    } else {
        check_protocol(source_name, n, line, first)?;
        vs.protocol = first.to_string();
        let (address, port) = match layout {
            Layout::IpvsadmList => parse_dotted_addr_port(source_name, n, "LocalAddress:Port", target)?,
            Layout::Proc => parse_hex_addr_port(source_name, n, "LocalAddress:Port", target)?,
        };
        vs.address = address;
        vs.port = port;
    }
    Ok((vs, rest))
}

/// Parses `-> ADDR:PORT FORWARD WEIGHT ACTIVE INACTIVE` (tokens after `->`).
fn parse_destination(
    source_name: &str,
    n: usize,
    line: &str,
    tokens: &[&str],
    layout: Layout,
) -> Result<RealServer, ParseError> {
    if tokens.len() != 5 {
        return Err(err(
            source_name,
            n,
            format!(
                "destination line: expected `-> ADDR:PORT Forward Weight ActiveConn InActConn` (5 fields), found {} fields in {}",
                tokens.len(),
                quote(line)
            ),
        ));
    }
    let (address, port) = match layout {
        Layout::IpvsadmList => parse_dotted_addr_port(source_name, n, "RemoteAddress:Port", tokens[0])?,
        Layout::Proc => parse_hex_addr_port(source_name, n, "RemoteAddress:Port", tokens[0])?,
    };
    let forward = tokens[1];
    if forward.is_empty() || !forward.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(err(
            source_name,
            n,
            format!("Forward: expected a method name such as Masq, found {}", quote(forward)),
        ));
    }
    Ok(RealServer {
        address,
        port,
        forward: forward.to_string(),
        weight: parse_weight(source_name, n, tokens[2])?,
        active_connections: parse_u64(source_name, n, "ActiveConn", tokens[3])?,
        inactive_connections: parse_u64(source_name, n, "InActConn", tokens[4])?,
    })
}

/// Flags after the scheduler in `ipvsadm -Ln`.
fn parse_list_flags(source_name: &str, n: usize, vs: &mut VirtualServer, flags: &[&str]) -> Result<(), ParseError> {
    let mut i = 0;
    while i < flags.len() {
        let tok = flags[i];
        let arg = flags.get(i + 1).copied();
        let need = |what: &str| err(source_name, n, format!("`{tok}` must be followed by {what}"));
        match tok {
            "persistent" => {
                let a = arg.ok_or_else(|| need("a timeout in seconds"))?;
                let secs = parse_u64(source_name, n, "persistent timeout", a)?;
                let secs = u32::try_from(secs)
                    .map_err(|_| err(source_name, n, format!("persistent timeout {secs} out of range")))?;
                vs.persistent_seconds = Some(secs);
                i += 2;
            }
            // Persistence granularity: dotted IPv4 mask or IPv6 prefix length. Not kept.
            "mask" => {
                let a = arg.ok_or_else(|| need("a netmask"))?;
                if a.parse::<Ipv4Addr>().is_err() && a.parse::<u8>().is_err() {
                    return Err(err(
                        source_name,
                        n,
                        format!("mask: expected a netmask, found {}", quote(a)),
                    ));
                }
                i += 2;
            }
            // Persistence engine (e.g. `sip`). Not kept.
            "pe" => {
                arg.ok_or_else(|| need("an engine name"))?;
                i += 2;
            }
            // One-packet scheduling. Not kept.
            "ops" => i += 1,
            // Scheduler flags such as `(sh-fallback,sh-port)`. Not kept.
            t if t.len() > 2 && t.starts_with('(') && t.ends_with(')') && i == 0 => i += 1,
            _ => {
                return Err(err(
                    source_name,
                    n,
                    format!("unknown service flag {} after the scheduler", quote(tok)),
                ))
            }
        }
    }
    Ok(())
}

/// Flags after the scheduler in `/proc/net/ip_vs`: `[ops] [persistent JIFFIES MASKHEX]`.
/// Returns the persistence timeout in jiffies, if any.
fn parse_proc_flags(source_name: &str, n: usize, flags: &[&str]) -> Result<Option<u64>, ParseError> {
    let mut i = 0;
    let mut jiffies = None;
    while i < flags.len() {
        match flags[i] {
            "ops" => i += 1,
            "persistent" => {
                let (Some(t), Some(m)) = (flags.get(i + 1), flags.get(i + 2)) else {
                    return Err(err(
                        source_name,
                        n,
                        "`persistent` must be followed by a timeout and a hex netmask",
                    ));
                };
                jiffies = Some(parse_u64(source_name, n, "persistent timeout (jiffies)", t)?);
                if !is_hex(m, 8) {
                    return Err(err(
                        source_name,
                        n,
                        format!("persistent netmask: expected 8 hex digits, found {}", quote(m)),
                    ));
                }
                i += 3;
            }
            other => {
                return Err(err(
                    source_name,
                    n,
                    format!("unknown service flag {} after the scheduler", quote(other)),
                ))
            }
        }
    }
    Ok(jiffies)
}

fn parse_scheduler<'a>(source_name: &str, n: usize, line: &str, rest: &[&'a str]) -> Result<&'a str, ParseError> {
    let sched = rest.first().copied().ok_or_else(|| {
        err(
            source_name,
            n,
            format!("service line has no scheduler: {}", quote(line)),
        )
    })?;
    if !sched
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(err(source_name, n, format!("scheduler: unexpected {}", quote(sched))));
    }
    Ok(sched)
}

/// The engine for both list-shaped inputs.
fn parse_table(
    source_name: &str,
    text: &str,
    layout: Layout,
    hz: Option<u32>,
) -> Result<Vec<VirtualServer>, ParseError> {
    let mut headers = Headers::new();
    let mut services: Vec<VirtualServer> = Vec::new();
    for (n, line) in lines_of(source_name, text)? {
        if line.trim().is_empty() {
            return Err(err(source_name, n, "unexpected blank line"));
        }
        if headers.take(source_name, n, line, !services.is_empty(), LIST_TITLE, LIST_DEST_TITLE)? {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.first() == Some(&"->") {
            let Some(current) = services.last_mut() else {
                return Err(err(source_name, n, "destination line before any service line"));
            };
            let rs = parse_destination(source_name, n, line, &tokens[1..], layout)?;
            current.real_servers.push(rs);
            continue;
        }
        let (mut vs, rest) = parse_service_head(source_name, n, line, &tokens, layout)?;
        vs.scheduler = parse_scheduler(source_name, n, line, rest)?.to_string();
        match layout {
            Layout::IpvsadmList => parse_list_flags(source_name, n, &mut vs, &rest[1..])?,
            Layout::Proc => {
                if let Some(j) = parse_proc_flags(source_name, n, &rest[1..])? {
                    vs.persistent_seconds = hz
                        .filter(|h| *h > 0)
                        .map(|h| u32::try_from(j / u64::from(h)).unwrap_or(u32::MAX));
                }
            }
        }
        services.push(vs);
    }
    Ok(services)
}

// ---------------------------------------------------------------------------
// Public parsers

/// Parses `ipvsadm -Ln` (or `ipvsadm --list --numeric`).
///
/// Accepts the three header lines (optional, for pasted excerpts; if present
/// they must be the plain-list ones), service lines with their flags
/// (`persistent`, `mask`, `pe`, `ops`, `(sched-flags)`; only `persistent`
/// is kept), and destination lines. Trailing whitespace is ignored; anything
/// else unexpected is an error naming the line. Header only gives an empty
/// vector. Addresses must be numeric (`-n`).
pub fn parse_ipvsadm_list(source_name: &str, text: &str) -> Result<Vec<VirtualServer>, ParseError> {
    parse_table(source_name, text, Layout::IpvsadmList, None)
}

/// Parses `/proc/net/ip_vs`: hex addresses/ports/fwmarks become text/decimal.
///
/// The kernel prints the persistence timeout in jiffies, and the kernel's HZ
/// is not knowable from this file, so `persistent_seconds` is left `None`
/// here; use [`parse_proc_ip_vs_with_hz`] when HZ is known.
pub fn parse_proc_ip_vs(source_name: &str, text: &str) -> Result<Vec<VirtualServer>, ParseError> {
    parse_table(source_name, text, Layout::Proc, None)
}

/// Like [`parse_proc_ip_vs`], converting the persistence timeout from jiffies
/// with the kernel's `CONFIG_HZ` (ticks per second).
pub fn parse_proc_ip_vs_with_hz(source_name: &str, text: &str, hz: u32) -> Result<Vec<VirtualServer>, ParseError> {
    parse_table(source_name, text, Layout::Proc, Some(hz))
}

/// Parses `ipvsadm -Ln --stats` (with or without `--exact`) into per-service
/// counters, in input order.
///
/// The `Prot ... Conns InPkts OutPkts InBytes OutBytes` header is required,
/// because the `--rate` layout has the same shape; any other header is an
/// error naming it. Destination (`->`) lines carry per-backend counters: they
/// are checked (a name plus five counts; the name may be a hostname cut to 28
/// characters when `-n` was not given) and then skipped. Service addresses
/// must be numeric.
pub fn parse_ipvsadm_stats(source_name: &str, text: &str) -> Result<Vec<(ServiceKey, ServiceStats)>, ParseError> {
    let mut headers = Headers::new();
    let mut out: Vec<(ServiceKey, ServiceStats)> = Vec::new();
    for (n, line) in lines_of(source_name, text)? {
        if line.trim().is_empty() {
            return Err(err(source_name, n, "unexpected blank line"));
        }
        if headers.take(source_name, n, line, !out.is_empty(), STATS_TITLE, BARE_DEST_TITLE)? {
            continue;
        }
        if !headers.title {
            return Err(err(
                source_name,
                n,
                format!(
                    "expected the `ipvsadm --stats` header {} before {}",
                    quote(STATS_TITLE),
                    quote(line)
                ),
            ));
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.first() == Some(&"->") {
            if out.is_empty() {
                return Err(err(source_name, n, "destination line before any service line"));
            }
            if tokens.len() != 7 {
                return Err(err(
                    source_name,
                    n,
                    format!(
                        "destination stats line: expected `-> ADDR:PORT` and 5 counts, found {}",
                        quote(line)
                    ),
                ));
            }
            for (field, tok) in STATS_FIELDS.iter().zip(&tokens[2..]) {
                parse_largenum(source_name, n, field, tok)?;
            }
            continue;
        }
        let (vs, rest) = parse_service_head(source_name, n, line, &tokens, Layout::IpvsadmList)?;
        if rest.len() != 5 {
            return Err(err(
                source_name,
                n,
                format!(
                    "service stats line: expected 5 counts after the service, found {}",
                    quote(line)
                ),
            ));
        }
        let mut v = [0u64; 5];
        for (i, (field, tok)) in STATS_FIELDS.iter().zip(rest).enumerate() {
            v[i] = parse_largenum(source_name, n, field, tok)?;
        }
        out.push((
            vs.key(),
            ServiceStats {
                connections: v[0],
                incoming_packets: v[1],
                outgoing_packets: v[2],
                incoming_bytes: v[3],
                outgoing_bytes: v[4],
            },
        ));
    }
    if !headers.title {
        return Err(ParseError::whole(source_name, "no `ipvsadm --stats` header found"));
    }
    Ok(out)
}

const STATS_FIELDS: [&str; 5] = ["Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"];

/// Parses `/proc/net/ip_vs_stats` (all values hex): two title lines, the
/// totals, a blank line, the rate title, the rates.
pub fn parse_proc_ip_vs_stats(source_name: &str, text: &str) -> Result<GlobalStats, ParseError> {
    const T1: &str = "Total Incoming Outgoing Incoming Outgoing";
    const T2: &str = "Conns Packets Packets Bytes Bytes";
    const T3: &str = "Conns/s Pkts/s Pkts/s Bytes/s Bytes/s";
    let lines = lines_of(source_name, text)?;
    let expect_title = |idx: usize, want: &str| -> Result<(), ParseError> {
        match lines.get(idx) {
            Some((_, l)) if normalize(l) == want => Ok(()),
            Some((n, l)) => Err(err(
                source_name,
                *n,
                format!("expected header {}, found {}", quote(want), quote(l)),
            )),
            None => Err(err(
                source_name,
                idx + 1,
                format!("truncated: missing header {}", quote(want)),
            )),
        }
    };
    let numbers = |idx: usize, what: &str| -> Result<[u64; 5], ParseError> {
        let Some((n, l)) = lines.get(idx) else {
            return Err(err(source_name, idx + 1, format!("truncated: missing the {what} line")));
        };
        let toks: Vec<&str> = l.split_whitespace().collect();
        if toks.len() != 5 {
            return Err(err(
                source_name,
                *n,
                format!("{what}: expected 5 hex numbers, found {}", quote(l)),
            ));
        }
        let mut v = [0u64; 5];
        for (i, t) in toks.iter().enumerate() {
            v[i] = parse_hex_u64(source_name, *n, what, t)?;
        }
        Ok(v)
    };
    expect_title(0, T1)?;
    expect_title(1, T2)?;
    let totals = numbers(2, "totals")?;
    match lines.get(3) {
        Some((_, l)) if l.trim().is_empty() => {}
        Some((n, l)) => {
            return Err(err(
                source_name,
                *n,
                format!("expected a blank line, found {}", quote(l)),
            ))
        }
        None => return Err(err(source_name, 4, "truncated: missing the rates block")),
    }
    expect_title(4, T3)?;
    let rates = numbers(5, "rates")?;
    if let Some((n, l)) = lines.get(6) {
        return Err(err(source_name, *n, format!("unexpected extra line {}", quote(l))));
    }
    Ok(GlobalStats {
        connections: totals[0],
        incoming_packets: totals[1],
        outgoing_packets: totals[2],
        incoming_bytes: totals[3],
        outgoing_bytes: totals[4],
        connections_per_second: rates[0],
        incoming_packets_per_second: rates[1],
        outgoing_packets_per_second: rates[2],
        incoming_bytes_per_second: rates[3],
        outgoing_bytes_per_second: rates[4],
    })
}

/// Attaches counters from [`parse_ipvsadm_stats`] to the matching services
/// (same protocol + address + port, or same fwmark). Each stats entry goes to
/// the first matching service that has no stats yet, so an IPv4 and an IPv6
/// `FWM` service with the same mark pair up in order (both listings are
/// sorted the same way by ipvsadm). Returns the keys that matched no service,
/// e.g. a service created between the two ipvsadm runs.
pub fn merge_stats(services: &mut [VirtualServer], stats: Vec<(ServiceKey, ServiceStats)>) -> Vec<ServiceKey> {
    let mut unmatched = Vec::new();
    for (key, s) in stats {
        match services.iter_mut().find(|vs| vs.stats.is_none() && vs.key() == key) {
            Some(vs) => vs.stats = Some(s),
            None => unmatched.push(key),
        }
    }
    unmatched
}

// ---------------------------------------------------------------------------
// The probe: IPVS present? then ipvsadm (or /proc/net/ip_vs when ipvsadm is
// not installed), the global counters, and the kube-ipvs0 interface.

/// How many virtual servers are kept in the JSON detail; the counts cover all.
pub const DETAIL_CAP: usize = 200;
/// How many example addresses a finding's evidence lists.
pub const SAMPLE: usize = 5;

/// Virtual servers per protocol and scheduler (bounded: a handful of each).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceGroup {
    pub protocol: String,
    pub scheduler: String,
    /// Virtual servers with this protocol and scheduler.
    pub count: u64,
}

/// The `kube-ipvs0` dummy interface kube-proxy binds service IPs to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpvsInterface {
    pub exists: bool,
    /// Addresses on kube-ipvs0 (service IPs), v4 and v6.
    pub addresses: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpvsFacts {
    /// `ipvsadm` or `/proc/net/ip_vs`.
    pub source: String,
    /// Virtual servers (services × ports), in services.
    pub virtual_servers: u64,
    /// Real servers over all virtual servers, in backends.
    pub real_servers: u64,
    pub groups: Vec<ServiceGroup>,
    /// Virtual servers with no real server, or only weight-0 ones.
    pub without_backends: u64,
    /// The first few of them, as `PROTO ADDR:PORT`.
    pub without_backends_sample: Vec<String>,
    /// Totals since IPVS started (`/proc/net/ip_vs_stats`), when readable.
    pub stats: Option<GlobalStats>,
    /// kube-ipvs0, when netlink could be asked (None: not asked, e.g. a fixture host root).
    pub interface: Option<IpvsInterface>,
    /// Virtual-server IPs not bound to any local interface (ClusterIPs kube-proxy forgot to bind).
    pub unbound_service_ips: Vec<String>,
    /// Addresses on kube-ipvs0 with no virtual server.
    pub bound_without_service: Vec<String>,
    /// The first DETAIL_CAP virtual servers with their real servers.
    pub detail: Vec<VirtualServer>,
    /// True when `detail` was cut at DETAIL_CAP.
    pub detail_truncated: bool,
}

/// The node's interfaces and their addresses, as netlink shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalAddresses {
    pub interfaces: BTreeSet<String>,
    /// (interface, address) pairs.
    pub addresses: Vec<(String, IpAddr)>,
}

/// Summarises virtual servers; `local` is what netlink shows (None when not asked).
pub fn summarise(
    source: &str,
    mut services: Vec<VirtualServer>,
    stats: Option<GlobalStats>,
    local: Option<&LocalAddresses>,
) -> IpvsFacts {
    let mut groups: std::collections::BTreeMap<(String, String), u64> = Default::default();
    let mut without = Vec::new();
    let mut real_servers = 0u64;
    for vs in &services {
        *groups.entry((vs.protocol.clone(), vs.scheduler.clone())).or_insert(0) += 1;
        real_servers += vs.real_servers.len() as u64;
        if vs.real_servers.iter().all(|r| r.weight <= 0) {
            without.push(vs);
        }
    }
    let show = |vs: &VirtualServer| match vs.fwmark {
        Some(m) => format!("FWM {m}"),
        None if vs.address.contains(':') => format!("{} [{}]:{}", vs.protocol, vs.address, vs.port),
        None => format!("{} {}:{}", vs.protocol, vs.address, vs.port),
    };
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

/// The interface kube-proxy's IPVS mode binds service IPs to.
pub const KUBE_IPVS0: &str = "kube-ipvs0";

/// Every interface of the agent's network namespace and its addresses.
pub async fn local_addresses() -> Result<LocalAddresses, super::ProbeError> {
    use futures_util::stream::TryStreamExt;
    use netlink_packet_route::address::AddressAttribute;
    use netlink_packet_route::link::LinkAttribute;

    let netlink = |e: rtnetlink::Error| super::ProbeError::Netlink(e.to_string());
    let (connection, handle, _) = rtnetlink::new_connection()
        .map_err(|e| super::ProbeError::Netlink(format!("opening a netlink socket: {e}")))?;
    let task = tokio::spawn(connection);
    let result = async {
        let mut names = std::collections::BTreeMap::new();
        let mut links = handle.link().get().execute();
        while let Some(msg) = links.try_next().await.map_err(netlink)? {
            for attr in &msg.attributes {
                if let LinkAttribute::IfName(name) = attr {
                    names.insert(msg.header.index, name.clone());
                }
            }
        }
        let mut local = LocalAddresses {
            interfaces: names.values().cloned().collect(),
            addresses: Vec::new(),
        };
        let mut addrs = handle.address().get().execute();
        while let Some(msg) = addrs.try_next().await.map_err(netlink)? {
            let Some(name) = names.get(&msg.header.index) else {
                continue;
            };
            // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS otherwise.
            let pick = |local: bool| {
                msg.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Local(ip) if local => Some(*ip),
                    AddressAttribute::Address(ip) if !local => Some(*ip),
                    _ => None,
                })
            };
            if let Some(ip) = pick(true).or_else(|| pick(false)) {
                local.addresses.push((name.clone(), ip));
            }
        }
        Ok(local)
    }
    .await;
    task.abort();
    result
}

/// Runs the IPVS probe until the deadline. Netlink (kube-ipvs0) is read only
/// when the host root is `/`: on a fixture node it would show the agent's own namespace.
pub async fn probe(
    ctx: &super::ProbeContext,
    deadline: super::Deadline,
) -> Result<super::Probed<IpvsFacts>, super::ProbeError> {
    let (host, runner) = (&ctx.host, &ctx.runner);
    let use_netlink = host.root() == std::path::Path::new("/");
    // ipvsadm runs `modprobe ip_vs` when IPVS is not loaded; a read-only agent
    // must not load kernel modules, so look before running it.
    if !host.exists(PROC_IP_VS) {
        return Ok(super::Probed::Absent(format!(
            "no IPVS in this kernel ({PROC_IP_VS} does not exist); ipvsadm was not run"
        )));
    }
    let stats_text = host.read_optional(PROC_IP_VS_STATS)?;
    let stats = match &stats_text {
        Some(t) => Some(parse_proc_ip_vs_stats(
            &host.path(PROC_IP_VS_STATS).display().to_string(),
            t,
        )?),
        None => None,
    };
    let (source, services) = if crate::exec::on_path("ipvsadm") {
        let list = crate::exec::CommandSpec::new("ipvsadm", &["-Ln"])
            .timeout(deadline.remaining())
            .max_output_bytes(256 << 20)
            .permission_hint("needs CAP_NET_ADMIN");
        let (text, fin) = runner.run_capture(&list).await?;
        crate::exec::ExecError::check_status(&list, &fin)?;
        let mut services = parse_ipvsadm_list("ipvsadm -Ln", &text)?;
        let st = crate::exec::CommandSpec::new("ipvsadm", &["-Ln", "--stats", "--exact"])
            .timeout(deadline.remaining())
            .max_output_bytes(256 << 20)
            .permission_hint("needs CAP_NET_ADMIN");
        let (text, fin) = runner.run_capture(&st).await?;
        crate::exec::ExecError::check_status(&st, &fin)?;
        let per_service = parse_ipvsadm_stats("ipvsadm -Ln --stats --exact", &text)?;
        merge_stats(&mut services, per_service);
        ("ipvsadm", services)
    } else {
        let text = host.read(PROC_IP_VS)?;
        (
            "/proc/net/ip_vs",
            parse_proc_ip_vs(&host.path(PROC_IP_VS).display().to_string(), &text)?,
        )
    };
    let local = if use_netlink {
        Some(local_addresses().await?)
    } else {
        None
    };
    Ok(super::Probed::Present(summarise(
        source,
        services,
        stats,
        local.as_ref(),
    )))
}

const PROC_IP_VS: &str = "/proc/net/ip_vs";
const PROC_IP_VS_STATS: &str = "/proc/net/ip_vs_stats";

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: &str = include_str!("../../tests/fixtures/ipvs/ln-kube-proxy-ipvs-kind-tkng.txt");
    const IPV6: &str = include_str!("../../tests/fixtures/ipvs/ln-kube-proxy-ipv6-only-k8s-issue87604-partial.txt");
    const PERSIST_TRAILING: &str =
        include_str!("../../tests/fixtures/ipvs/ln-kube-proxy-persistent-trailing-spaces-opsnull-issue251-partial.txt");
    const FWM_TUNNEL: &str =
        include_str!("../../tests/fixtures/ipvs/ln-kube-router-dsr-fwm-tunnel-issue1169-partial.txt");
    const PERSIST_MASK: &str = include_str!("../../tests/fixtures/ipvs/ln-kube-router-persistent-mask.txt");
    const WRR: &str = include_str!("../../tests/fixtures/ipvs/ln-wrr-weight-electrocucaracha.txt");
    const LNC: &str = include_str!("../../tests/fixtures/ipvs/lnc-dr-gentleduo.txt");
    const RATE: &str = include_str!("../../tests/fixtures/ipvs/rate-kube-proxy-calico-tigera.txt");
    const STATS_KM: &str = include_str!("../../tests/fixtures/ipvs/stats-l-nonnumeric-KM-suffix-loxilb.txt");
    const STATS_PR160: &str = include_str!("../../tests/fixtures/ipvs/stats-ln-kube-router-pr160-partial.txt");
    const STATS_WRR: &str = include_str!("../../tests/fixtures/ipvs/stats-ln-stats-rate-wrr-electrocucaracha.txt");
    const PROC_NODE_EXPORTER: &str = include_str!("../../tests/fixtures/ipvs/node_exporter-v4-fwm-tunnel.txt");
    const PROC_PROCFS: &str = include_str!("../../tests/fixtures/ipvs/prometheus-procfs-ttar-v4-v6-fwm.txt");
    const PROC_STATS: &str = include_str!("../../tests/fixtures/ipvs/ip_vs_stats-node_exporter.txt");

    const ALL: [&str; 14] = [
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

    const SRC: &str = "ipvsadm -Ln";

    fn rs(address: &str, port: u16, forward: &str, weight: i32, active: u64, inactive: u64) -> RealServer {
        RealServer {
            address: address.to_string(),
            port,
            forward: forward.to_string(),
            weight,
            active_connections: active,
            inactive_connections: inactive,
        }
    }

    fn find<'a>(list: &'a [VirtualServer], proto: &str, addr: &str, port: u16) -> &'a VirtualServer {
        list.iter()
            .find(|v| v.protocol == proto && v.address == addr && v.port == port)
            .unwrap_or_else(|| panic!("no {proto} {addr}:{port}"))
    }

    // --- ipvsadm -Ln ---------------------------------------------------------

    #[test]
    fn list_kind_ipv4() {
        let l = parse_ipvsadm_list(SRC, KIND).unwrap();
        assert_eq!(l.len(), 12);
        assert_eq!(l.iter().filter(|v| v.protocol == "TCP").count(), 11);
        let api = find(&l, "TCP", "10.96.0.1", 443);
        assert_eq!(api.scheduler, "rr");
        assert_eq!(api.persistent_seconds, None);
        assert_eq!(api.fwmark, None);
        assert_eq!(api.real_servers, vec![rs("192.168.224.3", 6443, "Masq", 1, 0, 0)]);
        let dns = find(&l, "UDP", "10.96.0.10", 53);
        assert_eq!(
            dns.real_servers,
            vec![
                rs("10.244.0.3", 53, "Masq", 1, 0, 8),
                rs("10.244.0.4", 53, "Masq", 1, 0, 8)
            ]
        );
        let np = find(&l, "TCP", "127.0.0.1", 31730);
        assert_eq!(np.real_servers.len(), 2);
        let total: usize = l.iter().map(|v| v.real_servers.len()).sum();
        assert_eq!(total, 20);
        assert!(l.iter().all(|v| v.stats.is_none()));
    }

    #[test]
    fn list_ipv6_only() {
        let l = parse_ipvsadm_list(SRC, IPV6).unwrap();
        assert_eq!(l.len(), 3);
        let api = find(&l, "TCP", "fd20::1", 443);
        assert_eq!(api.real_servers, vec![rs("2001:db8:0:f101::2", 6443, "Masq", 1, 5, 0)]);
        let dns = find(&l, "TCP", "fd20::a", 53);
        assert_eq!(dns.real_servers[1], rs("fd20::7042", 53, "Masq", 1, 0, 0));
        assert_eq!(find(&l, "TCP", "fd20::a", 9153).real_servers.len(), 1);
    }

    #[test]
    fn list_persistent_with_real_trailing_spaces() {
        let l = parse_ipvsadm_list(SRC, PERSIST_TRAILING).unwrap();
        assert_eq!(l.len(), 7);
        let api = find(&l, "TCP", "10.254.0.1", 443);
        assert_eq!(api.persistent_seconds, Some(10800));
        assert_eq!(api.real_servers.len(), 2);
        assert_eq!(api.real_servers[1], rs("172.16.16.82", 6443, "Masq", 1, 0, 0));
        assert_eq!(find(&l, "TCP", "10.253.102.0", 32429).real_servers.len(), 4);
        let last = find(&l, "TCP", "10.254.20.57", 1);
        assert_eq!(last.real_servers[2], rs("172.16.16.83", 1, "Masq", 1, 0, 0));
        assert_eq!(l.iter().filter(|v| v.persistent_seconds.is_some()).count(), 1);
    }

    #[test]
    fn list_headerless_fwm_tunnel() {
        let l = parse_ipvsadm_list(SRC, FWM_TUNNEL).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].address, "10.110.76.40");
        assert_eq!(l[0].port, 80);
        assert_eq!(l[0].real_servers[1], rs("10.244.3.9", 80, "Masq", 1, 0, 0));
        let fwm = &l[1];
        assert_eq!(fwm.protocol, "FWM");
        assert_eq!(fwm.fwmark, Some(1481));
        assert_eq!(fwm.address, "");
        assert_eq!(fwm.port, 0);
        assert_eq!(fwm.scheduler, "rr");
        assert_eq!(
            fwm.real_servers,
            vec![
                rs("10.244.2.11", 80, "Tunnel", 1, 0, 0),
                rs("10.244.3.9", 80, "Tunnel", 1, 0, 0)
            ]
        );
    }

    #[test]
    fn list_persistent_mask() {
        let l = parse_ipvsadm_list(SRC, PERSIST_MASK).unwrap();
        assert_eq!(l.len(), 5);
        assert_eq!(l[0].address, "10.3.0.1");
        assert_eq!(l[0].persistent_seconds, Some(10800));
        assert_eq!(l[0].scheduler, "rr");
        let etcd = find(&l, "TCP", "10.3.0.15", 2379);
        assert_eq!(etcd.real_servers, vec![rs("10.10.3.3", 2379, "Masq", 1, 45, 0)]);
        assert_eq!(find(&l, "UDP", "10.3.0.10", 53).real_servers.len(), 1);
    }

    #[test]
    fn list_wrr_weights() {
        let l = parse_ipvsadm_list(SRC, WRR).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].scheduler, "wrr");
        assert_eq!(
            l[0].real_servers,
            vec![
                rs("172.80.0.2", 80, "Masq", 3, 2, 4),
                rs("172.80.0.3", 80, "Masq", 1, 0, 6),
                rs("172.80.0.4", 80, "Masq", 1, 0, 6),
            ]
        );
    }

    #[test]
    fn list_zero_services() {
        // What ipvsadm 1.31 `list_all` prints with an empty table: the version
        // line, then `print_title`, then nothing (ipvsadm.c, list_all and
        // print_title; header text as in every fixture above).
        let empty = "IP Virtual Server version 1.2.1 (size=4096)\n\
                     Prot LocalAddress:Port Scheduler Flags\n  \
                     -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n";
        assert_eq!(parse_ipvsadm_list(SRC, empty).unwrap(), vec![]);
    }

    #[test]
    fn list_flags_and_odd_values() {
        let text = "TCP  10.0.0.1:80 sh (sh-fallback,sh-port) persistent 60 pe sip ops\n\
                    \t->\t10.0.0.2:80\tRoute\t0\t0\t0\t\n\
                    SCTP 10.0.0.3:0 rr persistent 300 mask 255.255.255.0\n\
                    FWM  -1 IPv6 wlc\n\
                    TCP  [::ffff:10.0.0.9]:443 rr\n";
        let l = parse_ipvsadm_list(SRC, text).unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].scheduler, "sh");
        assert_eq!(l[0].persistent_seconds, Some(60));
        assert_eq!(l[0].real_servers, vec![rs("10.0.0.2", 80, "Route", 0, 0, 0)]);
        assert_eq!(l[1].protocol, "SCTP");
        assert_eq!(l[1].persistent_seconds, Some(300));
        assert_eq!(l[2].fwmark, Some(u32::MAX));
        assert_eq!(l[3].address, "::ffff:10.0.0.9");
    }

    #[test]
    fn list_errors_name_the_line() {
        let dest_first = "IP Virtual Server version 1.2.1 (size=4096)\n  -> 10.0.0.1:80 Masq 1 0 0\n";
        let e = parse_ipvsadm_list(SRC, dest_first).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("before any service"), "{e}");

        let bad_weight = "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq x 0 0\n";
        let e = parse_ipvsadm_list(SRC, bad_weight).unwrap_err();
        assert_eq!((e.line, e.source_name.as_str()), (2, SRC));
        assert!(e.message.contains("Weight"), "{e}");

        let hostname = "TCP  kubernetes:https rr\n";
        let e = parse_ipvsadm_list(SRC, hostname).unwrap_err();
        assert!(e.message.contains("-n"), "{e}");

        for bad in [
            "TCP  10.0.0.1:80 rr bogus\n",
            "TCP  10.0.0.1:80\n",
            "TCP  10.0.0.1:99999 rr\n",
            "ICMP 10.0.0.1:80 rr\n",
            "TCP  10.0.0.1:80 rr persistent\n",
            "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 0\n",
            "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 0 0 9\n",
            "TCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq 1 -1 0\n",
            "TCP  10.0.0.1:80 rr\n\nTCP  10.0.0.2:80 rr\n",
            "TCP  10.0.0.1:80 rr\nProt LocalAddress:Port Scheduler Flags\n",
            "FWM  99999999999 rr\n",
            "",
            " \n\t\n",
        ] {
            assert!(parse_ipvsadm_list(SRC, bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn list_rejects_connection_table() {
        let e = parse_ipvsadm_list("ipvsadm -Lnc", LNC).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("connection table"), "{e}");
        assert!(e.to_string().starts_with("ipvsadm -Lnc: line 1:"), "{e}");
    }

    #[test]
    fn list_rejects_stats_and_rate_layouts() {
        let e = parse_ipvsadm_list(SRC, STATS_WRR).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("--stats"), "{e}");
        let e = parse_ipvsadm_list(SRC, RATE).unwrap_err();
        assert!(e.message.contains("--rate"), "{e}");
    }

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

    // --- ipvsadm -Ln --stats --------------------------------------------------

    fn key(proto: &str, addr: &str, port: u16) -> ServiceKey {
        ServiceKey {
            protocol: proto.into(),
            address: addr.into(),
            port,
            fwmark: None,
        }
    }

    fn st(c: u64, ip: u64, op: u64, ib: u64, ob: u64) -> ServiceStats {
        ServiceStats {
            connections: c,
            incoming_packets: ip,
            outgoing_packets: op,
            incoming_bytes: ib,
            outgoing_bytes: ob,
        }
    }

    #[test]
    fn stats_wrr() {
        let s = parse_ipvsadm_stats("ipvsadm -Ln --stats", STATS_WRR).unwrap();
        assert_eq!(s, vec![(key("TCP", "1.2.3.4", 80), st(24, 112, 110, 7578, 7568))]);
    }

    #[test]
    fn stats_pr160() {
        let s = parse_ipvsadm_stats("ipvsadm -Ln --stats", STATS_PR160).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], (key("TCP", "10.3.0.1", 443), st(0, 0, 0, 0, 0)));
        assert_eq!(
            s[2],
            (key("TCP", "10.3.0.42", 80), st(14209, 111769, 74613, 7207174, 8334358))
        );
    }

    #[test]
    fn stats_km_suffix_and_hostname_destinations() {
        // `830843K` is ipvsadm's `i / 1000` of a value in [830843000, 830844000).
        let s = parse_ipvsadm_stats("ipvsadm -l --stats", STATS_KM).unwrap();
        assert_eq!(
            s,
            vec![(
                key("TCP", "20.20.20.1", 2020),
                st(401, 8939187, 8953980, 830_843_000, 1_135_000_000)
            )]
        );
    }

    #[test]
    fn largenum_rule() {
        let p = |t: &str| parse_largenum("x", 1, "f", t);
        assert_eq!(p("99999999").unwrap(), 99_999_999);
        assert_eq!(p("100000K").unwrap(), 100_000_000);
        assert_eq!(p("1000M").unwrap(), 1_000_000_000);
        assert_eq!(p("100G").unwrap(), 100_000_000_000);
        assert_eq!(p("100T").unwrap(), 100_000_000_000_000);
        assert_eq!(p("18446744T").unwrap(), 18_446_744_000_000_000_000);
        assert_eq!(p("18446744073709551615").unwrap(), u64::MAX);
        for bad in ["", "K", "1k", "1KB", "-1", "1.5M", "99999999T", "1 K"] {
            assert!(p(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn stats_exact_and_fwm() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n  \
                    -> RemoteAddress:Port\n\
                    FWM  1481                            3       4        5  123456789012 1\n  \
                    -> 10.244.2.11:80                    3       4        5  123456789012 1\n\
                    FWM  7 IPv6                          0       0        0        0        0\n\
                    TCP  [fd20::1]:443                   1       2        3        4        5\n";
        let s = parse_ipvsadm_stats("ipvsadm -Ln --stats --exact", text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].0.fwmark, Some(1481));
        assert_eq!(s[0].0.protocol, "FWM");
        assert_eq!(s[0].1.incoming_bytes, 123_456_789_012);
        assert_eq!(s[1].0.fwmark, Some(7));
        assert_eq!(s[2].0, key("TCP", "fd20::1", 443));
    }

    #[test]
    fn stats_rejects_rate_layout() {
        let e = parse_ipvsadm_stats("ipvsadm -Ln --rate", RATE).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("unexpected header"), "{e}");
        assert!(e.message.contains("CPS"), "{e}");
        assert!(e.message.contains("--rate"), "{e}");
    }

    #[test]
    fn stats_rejects_other_inputs() {
        let e = parse_ipvsadm_stats(SRC, KIND).unwrap_err();
        assert!(e.message.contains("plain `ipvsadm -Ln`"), "{e}");
        // Headerless: could be --rate, so refuse.
        let e = parse_ipvsadm_stats(SRC, "TCP  10.0.0.1:80 1 2 3 4 5\n").unwrap_err();
        assert_eq!(e.line, 1);
        let header_only = "IP Virtual Server version 1.2.1 (size=4096)\n";
        assert!(parse_ipvsadm_stats(SRC, header_only).is_err());
        assert!(parse_ipvsadm_stats(SRC, LNC).is_err());
        let short = "Prot LocalAddress:Port Conns InPkts OutPkts InBytes OutBytes\nTCP  10.0.0.1:80 1 2 3 4\n";
        assert_eq!(parse_ipvsadm_stats(SRC, short).unwrap_err().line, 2);
        // Zero services with the stats header is fine.
        let none = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n  \
                    -> RemoteAddress:Port\n";
        assert_eq!(parse_ipvsadm_stats(SRC, none).unwrap(), vec![]);
    }

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

    // --- /proc/net/ip_vs ------------------------------------------------------

    const PROC: &str = "/proc/net/ip_vs";

    #[test]
    fn proc_node_exporter() {
        let l = parse_proc_ip_vs(PROC, PROC_NODE_EXPORTER).unwrap();
        assert_eq!(l.len(), 4);
        let first = &l[0];
        assert_eq!(
            (first.protocol.as_str(), first.address.as_str(), first.port),
            ("TCP", "192.168.0.22", 3306)
        );
        assert_eq!(first.scheduler, "wlc");
        assert_eq!(
            first.real_servers,
            vec![
                rs("192.168.82.22", 3306, "Tunnel", 100, 248, 2),
                rs("192.168.83.24", 3306, "Tunnel", 100, 248, 2),
                rs("192.168.83.21", 3306, "Tunnel", 100, 248, 1),
            ]
        );
        let second = find(&l, "TCP", "192.168.0.57", 3306);
        assert_eq!(second.real_servers[0], rs("192.168.84.22", 3306, "Tunnel", 0, 0, 0));
        assert_eq!(second.real_servers[1].active_connections, 1499);
        let fwm = &l[3];
        assert_eq!(fwm.protocol, "FWM");
        assert_eq!(fwm.fwmark, Some(0x1000_1000));
        assert_eq!(fwm.address, "");
        assert_eq!(fwm.scheduler, "wlc");
        assert_eq!(
            fwm.real_servers,
            vec![
                rs("192.168.50.26", 3306, "Tunnel", 20, 64, 1),
                rs("192.168.49.32", 3306, "Tunnel", 100, 321, 5),
            ]
        );
    }

    #[test]
    fn proc_procfs_v4_v6_fwm() {
        let l = parse_proc_ip_vs(PROC, PROC_PROCFS).unwrap();
        assert_eq!(l.len(), 5);
        let v6 = find(&l, "TCP", "2620::1", 80);
        assert_eq!(v6.scheduler, "sh");
        assert_eq!(
            v6.real_servers,
            vec![
                rs("2620::2", 80, "Route", 1, 0, 0),
                rs("2620::3", 80, "Route", 1, 0, 0),
                rs("2620::4", 80, "Route", 1, 1, 1),
            ]
        );
        let fwm = &l[4];
        assert_eq!(fwm.fwmark, Some(268_439_552));
        assert_eq!(fwm.real_servers[1], rs("192.168.50.21", 3306, "Route", 0, 0, 2));
    }

    #[test]
    fn proc_persistence_is_jiffies() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port Scheduler Flags\n  \
                    -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
                    UDP  0A60000A:0035 rr ops persistent 2700000 FFFFFFFF\n  \
                    -> 0AF40003:0035      Masq    1      0          0         \n\
                    TCP  0A600001:01BB rr  \n";
        let l = parse_proc_ip_vs(PROC, text).unwrap();
        assert_eq!(l[0].address, "10.96.0.10");
        assert_eq!(l[0].port, 53);
        assert_eq!(l[0].persistent_seconds, None);
        assert_eq!(l[1].address, "10.96.0.1");
        assert_eq!(l[1].port, 443);
        let l = parse_proc_ip_vs_with_hz(PROC, text, 250).unwrap();
        assert_eq!(l[0].persistent_seconds, Some(10800));
        assert_eq!(l[1].persistent_seconds, None);
    }

    #[test]
    fn proc_rejects_ipvsadm_forms() {
        // Dotted addresses are ipvsadm's, not the kernel's.
        let e = parse_proc_ip_vs(PROC, WRR).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(parse_proc_ip_vs(PROC, "FWM  1481 rr\n").is_err());
        assert!(parse_proc_ip_vs(PROC, "TCP  0A600001:1BB rr\n").is_err());
        assert!(parse_proc_ip_vs(PROC, "TCP  0A600001:01BB rr persistent 10 FF\n").is_err());
        assert!(parse_ipvsadm_list(SRC, PROC_PROCFS).is_err());
    }

    // --- /proc/net/ip_vs_stats ------------------------------------------------

    #[test]
    fn proc_stats_node_exporter() {
        let g = parse_proc_ip_vs_stats("/proc/net/ip_vs_stats", PROC_STATS).unwrap();
        assert_eq!(
            g,
            GlobalStats {
                connections: 0x16AA370,
                incoming_packets: 0xE33656E5,
                outgoing_packets: 0,
                incoming_bytes: 0x51D8C8883AB3,
                outgoing_bytes: 0,
                connections_per_second: 4,
                incoming_packets_per_second: 0x1FB3C,
                outgoing_packets_per_second: 0,
                incoming_bytes_per_second: 0x1282A8F,
                outgoing_bytes_per_second: 0,
            }
        );
        assert_eq!(g.connections, 23_765_872);
        assert_eq!(g.incoming_bytes, 89_991_519_156_915);
    }

    #[test]
    fn proc_stats_errors() {
        let src = "/proc/net/ip_vs_stats";
        let lines: Vec<&str> = PROC_STATS.lines().collect();
        let e = parse_proc_ip_vs_stats(src, &lines[..3].join("\n")).unwrap_err();
        assert!(e.message.contains("truncated"), "{e}");
        let bad = PROC_STATS.replace("E33656E5", "E33656G5");
        assert_eq!(parse_proc_ip_vs_stats(src, &bad).unwrap_err().line, 3);
        let extra = format!("{PROC_STATS}       1        1        1                1                1\n");
        assert_eq!(parse_proc_ip_vs_stats(src, &extra).unwrap_err().line, 7);
        assert!(parse_proc_ip_vs_stats(src, KIND).is_err());
    }

    // --- serde ------------------------------------------------------------------

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
