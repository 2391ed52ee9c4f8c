//! `/proc/net/ip_vs` and `/proc/net/ip_vs_stats`: pure parsers of the
//! kernel's IPVS files (`&str` in, typed facts or a [`ParseError`] with the
//! 1-based line out; no I/O).
//!
//! `/proc/net/ip_vs` has the titles and line shapes of `ipvsadm -Ln`, so it
//! goes through the same engine as [`super::ipvsadm`], with the kernel's hex
//! numbers.
//!
//! # Where the format comes from
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

use std::net::Ipv4Addr;

use super::ipvsadm::{err, lines_of, normalize, parse_table, split_addr_port, Dialect, HostPart};
use super::{GlobalStats, VirtualServer};
use crate::parse::{parse_hex_u64, parse_u64, quote, ParseError};

/// The kernel's dialect of the list layout; `hz` converts the persistence
/// timeout from jiffies when known.
struct Kernel {
    /// The kernel's `CONFIG_HZ` (ticks per second), when known.
    hz: Option<u32>,
}

impl Dialect for Kernel {
    const FWM_IPV6_WORD: bool = false;

    fn addr_port(&self, source_name: &str, n: usize, what: &str, token: &str) -> Result<(String, u16), ParseError> {
        parse_hex_addr_port(source_name, n, what, token)
    }

    fn fwmark(&self, source_name: &str, n: usize, token: &str) -> Result<u32, ParseError> {
        if !is_hex(token, 8) {
            return Err(err(
                source_name,
                n,
                format!("fwmark: expected 8 hex digits, found {}", quote(token)),
            ));
        }
        Ok(parse_hex_u64(source_name, n, "fwmark", token)? as u32)
    }

    fn flags(&self, source_name: &str, n: usize, vs: &mut VirtualServer, flags: &[&str]) -> Result<(), ParseError> {
        if let Some(j) = parse_proc_flags(source_name, n, flags)? {
            vs.persistent = true;
            vs.persistent_seconds = self
                .hz
                .filter(|h| *h > 0)
                .map(|h| u32::try_from(j / u64::from(h)).unwrap_or(u32::MAX));
        }
        Ok(())
    }
}

/// Parses `/proc/net/ip_vs`: hex addresses/ports/fwmarks become text/decimal.
///
/// The kernel prints the persistence timeout in jiffies, and the kernel's HZ
/// is not knowable from this file, so a persistent service has `persistent`
/// set and `persistent_seconds` left `None` (unknown, not absent); use
/// [`parse_proc_ip_vs_with_hz`] when HZ is known. Scheduler flags are not in
/// this file: `scheduler_flags` is `None`.
pub fn parse_proc_ip_vs(source_name: &str, text: &str) -> Result<Vec<VirtualServer>, ParseError> {
    parse_table(source_name, text, &Kernel { hz: None })
}

/// Like [`parse_proc_ip_vs`], converting the persistence timeout from jiffies
/// with the kernel's `CONFIG_HZ` (ticks per second).
pub fn parse_proc_ip_vs_with_hz(source_name: &str, text: &str, hz: u32) -> Result<Vec<VirtualServer>, ParseError> {
    parse_table(source_name, text, &Kernel { hz: Some(hz) })
}

/// `CONFIG_HZ=250` in a kernel config (`/boot/config-<release>`): the ticks
/// per second that `/proc/net/ip_vs` counts persistence timeouts in. `None`
/// when the line is missing or not a positive number.
pub fn parse_config_hz(config: &str) -> Option<u32> {
    config
        .lines()
        .find_map(|l| l.trim().strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|hz| *hz > 0)
}

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
    let (addr, port) = match split_addr_port(token).map_err(bad)? {
        (HostPart::V6(ip), port) => (ip.to_string(), port),
        (HostPart::Other(a), port) => {
            if !is_hex(a, 8) {
                return Err(bad("address is not 8 hex digits"));
            }
            let v = u32::from_str_radix(a, 16).map_err(|_| bad("address is not hex"))?;
            (Ipv4Addr::from(v).to_string(), port)
        }
    };

    if !is_hex(port, 4) {
        return Err(bad("port is not 4 hex digits"));
    }
    let port = u16::from_str_radix(port, 16).map_err(|_| bad("port is not hex"))?;
    Ok((addr, port))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ipvs::fixtures::*;
    use crate::probe::ipvs::ipvsadm::parse_ipvsadm_list;

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
        // Persistent, timeout unknown without HZ: kept as such, not dropped.
        assert!(l[0].persistent);
        assert_eq!(l[0].persistent_seconds, None);
        assert_eq!(l[1].address, "10.96.0.1");
        assert_eq!(l[1].port, 443);
        assert!(!l[1].persistent);
        // The file has no scheduler flags: unknown, not "none".
        assert!(l.iter().all(|v| v.scheduler_flags.is_none()));
        let l = parse_proc_ip_vs_with_hz(PROC, text, 250).unwrap();
        assert_eq!(l[0].persistent_seconds, Some(10800));
        assert!(l[0].persistent);
        assert_eq!(l[1].persistent_seconds, None);
        let l = parse_proc_ip_vs_with_hz(PROC, text, 1000).unwrap();
        assert_eq!(l[0].persistent_seconds, Some(2700));
    }

    #[test]
    fn config_hz() {
        let config =
            "# Linux/x86 6.1.0 Kernel Configuration\nCONFIG_HZ_250=y\n# CONFIG_HZ_1000 is not set\nCONFIG_HZ=250\n";
        assert_eq!(parse_config_hz(config), Some(250));
        assert_eq!(parse_config_hz("CONFIG_HZ_250=y\n"), None);
        assert_eq!(parse_config_hz("CONFIG_HZ=0\n"), None);
        assert_eq!(parse_config_hz("CONFIG_HZ=fast\n"), None);
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
}
