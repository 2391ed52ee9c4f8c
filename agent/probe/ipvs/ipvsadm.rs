//! `ipvsadm -Ln` and `ipvsadm -Ln --stats [--exact]`: the list layout and its
//! two pure parsers (`&str` in, typed facts or a [`ParseError`] with the
//! 1-based line out; no I/O).
//!
//! The line handling and the list-layout engine (`parse_table`, generic over
//! a `Dialect`) also serve `/proc/net/ip_vs`, which the kernel prints with
//! the same titles and line shapes but hex numbers (see [`super::proc`]).
//!
//! # Where the format comes from
//!
//! Checked against `ipvsadm.c` as mirrored in Distrotech/ipvsadm,
//! commit 0047f4d3bd015391ff8cb8524b31687cf2626b09, functions `list_all`,
//! `print_title`, `print_service_entry`, `print_largenum`; and against the
//! format strings inside the Debian 12 `ipvsadm 1:1.31-1+b1` binary:
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

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{RealServer, ServiceKey, ServiceStats, VirtualServer};
use crate::parse::{parse_u64, quote, ParseError};

/// Inputs with more lines than this are rejected, so parsing stays bounded
/// (every parser of `ipvsadm` output and of the `/proc/net/ip_vs*` files).
pub const MAX_LINES: usize = 1_000_000;

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

pub(super) fn normalize(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits into numbered, right-trimmed lines after checking the line cap and
/// emptiness. Trailing blank lines are dropped; blank lines elsewhere are kept
/// (and rejected by the callers).
pub(super) fn lines_of<'a>(source_name: &str, text: &'a str) -> Result<Vec<(usize, &'a str)>, ParseError> {
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

pub(super) fn err(source_name: &str, line: usize, message: impl Into<String>) -> ParseError {
    ParseError::new(source_name, line, message)
}

/// Header bookkeeping shared by the list-shaped parsers.
struct Headers {
    title: bool,
    dest_title: bool,
}

impl Headers {
    fn new() -> Self {
        Headers {
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

/// How one list-shaped source writes the parts that differ between
/// `ipvsadm -Ln` (decimal numbers, dotted/bracketed addresses) and
/// `/proc/net/ip_vs` (hex addresses, ports and marks).
pub(super) trait Dialect {
    /// Whether an `FWM` service may carry the literal `IPv6` after its mark
    /// (ipvsadm marks IPv6 firewall-mark services so).
    const FWM_IPV6_WORD: bool;
    /// `ADDR:PORT` of a service or destination; `what` names the column.
    fn addr_port(&self, source_name: &str, n: usize, what: &str, token: &str) -> Result<(String, u16), ParseError>;
    /// The firewall mark after `FWM`.
    fn fwmark(&self, source_name: &str, n: usize, token: &str) -> Result<u32, ParseError>;
    /// The flags after the scheduler, into `vs`.
    fn flags(&self, source_name: &str, n: usize, vs: &mut VirtualServer, flags: &[&str]) -> Result<(), ParseError>;
}

/// `ipvsadm -Ln`'s dialect.
struct Ipvsadm;

impl Dialect for Ipvsadm {
    const FWM_IPV6_WORD: bool = true;

    fn addr_port(&self, source_name: &str, n: usize, what: &str, token: &str) -> Result<(String, u16), ParseError> {
        parse_dotted_addr_port(source_name, n, what, token)
    }

    fn fwmark(&self, source_name: &str, n: usize, token: &str) -> Result<u32, ParseError> {
        parse_decimal_fwmark(source_name, n, token)
    }

    fn flags(&self, source_name: &str, n: usize, vs: &mut VirtualServer, flags: &[&str]) -> Result<(), ParseError> {
        parse_list_flags(source_name, n, vs, flags)
    }
}

// ---------------------------------------------------------------------------
// Addresses and numbers

/// The address part of an `ADDR:PORT` token, split off its port.
pub(super) enum HostPart<'a> {
    /// `[ADDR]:PORT`: an IPv6 address, the same in both dialects.
    V6(Ipv6Addr),
    /// `ADDR:PORT`: an IPv4 address, written as each dialect writes it.
    Other(&'a str),
}

/// Splits `[v6]:port` or `v4:port` at the port's colon, for both dialects;
/// the error says what is missing.
pub(super) fn split_addr_port(token: &str) -> Result<(HostPart<'_>, &str), &'static str> {
    if let Some(rest) = token.strip_prefix('[') {
        let (inner, port) = rest.split_once("]:").ok_or("no `]:` after an IPv6 address")?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| "not an IPv6 address")?;
        Ok((HostPart::V6(ip), port))
    } else {
        let (a, port) = token.rsplit_once(':').ok_or("no `:port`")?;
        Ok((HostPart::Other(a), port))
    }
}

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
    let (addr, port) = match split_addr_port(token).map_err(bad)? {
        (HostPart::V6(ip), port) => (ip.to_string(), port),
        (HostPart::Other(a), port) => {
            let ip: Ipv4Addr = a.parse().map_err(|_| bad("not an IPv4 address"))?;
            (ip.to_string(), port)
        }
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("port is not a decimal number"));
    }
    let port: u16 = port.parse().map_err(|_| bad("port out of range"))?;
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
fn parse_service_head<'a, D: Dialect>(
    source_name: &str,
    n: usize,
    line: &str,
    tokens: &'a [&'a str],
    dialect: &D,
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
        vs.fwmark = Some(dialect.fwmark(source_name, n, target)?);
        // ipvsadm marks IPv6 firewall-mark services with a literal `IPv6`.
        if D::FWM_IPV6_WORD && rest.first() == Some(&"IPv6") {
            rest = &rest[1..];
        }
    } else {
        check_protocol(source_name, n, line, first)?;
        vs.protocol = first.to_string();
        let (address, port) = dialect.addr_port(source_name, n, "LocalAddress:Port", target)?;
        vs.address = address;
        vs.port = port;
    }
    Ok((vs, rest))
}

/// Parses `-> ADDR:PORT FORWARD WEIGHT ACTIVE INACTIVE` (tokens after `->`).
fn parse_destination<D: Dialect>(
    source_name: &str,
    n: usize,
    line: &str,
    tokens: &[&str],
    dialect: &D,
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
    let (address, port) = dialect.addr_port(source_name, n, "RemoteAddress:Port", tokens[0])?;
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
    // ipvsadm prints scheduler flags when there are some: none printed is none set.
    vs.scheduler_flags = Some(Vec::new());
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
                vs.persistent = true;
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
            // Scheduler flags such as `(sh-fallback,sh-port)`, right after the scheduler.
            t if t.len() > 2 && t.starts_with('(') && t.ends_with(')') && i == 0 => {
                let names: Vec<String> = t[1..t.len() - 1].split(',').map(str::to_string).collect();
                if names
                    .iter()
                    .any(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
                {
                    return Err(err(source_name, n, format!("scheduler flags: unexpected {}", quote(t))));
                }
                vs.scheduler_flags = Some(names);
                i += 1;
            }
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

/// The engine for both list-shaped inputs (`ipvsadm -Ln`, `/proc/net/ip_vs`).
pub(super) fn parse_table<D: Dialect>(
    source_name: &str,
    text: &str,
    dialect: &D,
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
            let rs = parse_destination(source_name, n, line, &tokens[1..], dialect)?;
            current.real_servers.push(rs);
            continue;
        }
        let (mut vs, rest) = parse_service_head(source_name, n, line, &tokens, dialect)?;
        vs.scheduler = parse_scheduler(source_name, n, line, rest)?.to_string();
        dialect.flags(source_name, n, &mut vs, &rest[1..])?;
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
    parse_table(source_name, text, &Ipvsadm)
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
        let (vs, rest) = parse_service_head(source_name, n, line, &tokens, &Ipvsadm)?;
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

#[cfg(test)]
mod tests;
