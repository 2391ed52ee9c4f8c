//! How flag values are written and read: durations (and `0` for never), ratios, modes,
//! severities; and which environment variable a bad value came from.

use std::time::Duration;

use super::Cli;
pub use crate::duration::{parse_duration, DURATION_SYNTAX};

pub(super) fn parse_severity(s: &str) -> Result<crate::evaluate::Severity, String> {
    use crate::evaluate::Severity;
    match s {
        "info" => Ok(Severity::Info),
        "warning" => Ok(Severity::Warning),
        "critical" => Ok(Severity::Critical),
        _ => Err(format!("{s:?}: expected info, warning or critical")),
    }
}

/// An interval that may be `0`: never.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Every(pub Option<Duration>);

/// A duration, or `0` for never.
pub(super) fn parse_interval_or_never(s: &str) -> Result<Every, String> {
    if s.trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse::<f64>()
        == Ok(0.0)
    {
        return Ok(Every(None));
    }
    parse_duration(s).map(|d| Every(Some(d)))
}

/// A process name (`--kube-proxy.process-name`): a file name, so neither empty nor with a `/`.
pub(super) fn parse_process_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains('/') || s.contains('\0') {
        return Err(format!("{s:?}: expected a file name (not empty, no '/')"));
    }
    Ok(s.to_string())
}

/// The end of each command's `--help`.
pub(super) const DURATIONS_HELP: &str =
    "Durations are written 500ms, 30s, 5m, 1h or 1m30s (units h, m, s, ms, largest first); \
                              a bare number is seconds. A flag's environment variable takes the same values.";

/// How `--listen` is written, for its errors.
pub const LISTEN_SYNTAX: &str =
    "IP:PORT (0.0.0.0:9877, 127.0.0.1:9877, [::]:9877), :PORT (every IPv4 address) or localhost:PORT";

/// `--listen`: an IP address and port, or as node_exporter's `--web.listen-address` is written,
/// `:PORT` (every IPv4 address: 0.0.0.0) or `localhost:PORT` (127.0.0.1).
pub(super) fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{Ipv4Addr, SocketAddr};
    let t = s.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bad = |why: &str| format!("{s:?}: {why}; expected {LISTEN_SYNTAX}");
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| bad(&format!("{port:?} is not a port (0 to 65535)")))?;
    match host {
        "" => Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))),
        "localhost" => Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        h if h.parse::<std::net::Ipv6Addr>().is_ok() => Err(bad("an IPv6 address is written in brackets")),
        h => Err(bad(&format!(
            "{h:?} is not an IP address (names other than localhost are not looked up)"
        ))),
    }
}

/// Where a bad value came from, for the message: clap names the flag, but the DaemonSet sets
/// the environment variable, and that is the name the user must look for. `args` is the
/// command line (without the program name); `None` when the error is not about a flag's value.
pub fn value_error_origin(err: &clap::Error, args: &[std::ffi::OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    if !matches!(err.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
        return None;
    }
    let Some(ContextValue::String(shown)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--conntrack.window <DURATION>" -> "conntrack.window".
    let long = shown.strip_prefix("--")?.split([' ', '=']).next()?.to_string();
    let flag = format!("--{long}");
    let cmd = Cli::command();
    let mut all = vec![&cmd];
    all.extend(cmd.get_subcommands());
    let mut subs: Vec<&clap::Command> = Vec::new();
    for c in &all {
        subs.extend(c.get_subcommands());
    }
    all.extend(subs);
    let arg = all
        .iter()
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long.as_str()))?;
    // Typed under its name or a former one (a hidden alias).
    let names: Vec<String> = std::iter::once(long.as_str())
        .chain(arg.get_all_aliases().unwrap_or_default())
        .map(|n| format!("--{n}"))
        .collect();
    let on_command_line = args.iter().any(|a| {
        let a = a.to_string_lossy();
        names.iter().any(|n| a == n.as_str() || a.starts_with(&format!("{n}=")))
    });
    if on_command_line {
        return None;
    }
    let env = arg.get_env()?.to_string_lossy().into_owned();
    let value = std::env::var_os(&env)?;
    Some(format!(
        "the value came from the environment variable {env}={:?}, which sets {flag} (in a cluster: the DaemonSet's env)",
        value.to_string_lossy()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        // Compounds, largest unit first, as Go and Prometheus write them.
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h15m").unwrap(), Duration::from_secs(4500));
        assert_eq!(parse_duration("2s500ms").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration(" 1h0m1s ").unwrap(), Duration::from_secs(3601));
        // A bare number is seconds, and the errors say so.
        assert_eq!(parse_duration("60").unwrap(), Duration::from_secs(60));
        let e = parse_duration("abc").unwrap_err();
        assert!(e.contains("1m30s") && e.contains("a bare number is seconds"), "{e}");
        for bad in [
            "30s1m", "1m1m", "1m30", "1m 30s", "inf", "nan", "1e3s", "-5s", "1.2.3s", "s", "m5",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_duration("1m30").unwrap_err().contains("has no unit"));
        assert!(parse_duration("30s1m").unwrap_err().contains("largest first"));
        assert!(parse_duration("8d").is_err());
        assert!(parse_duration("169h").is_err(), "more than 7 days");
        assert_eq!(parse_interval_or_never("0").unwrap(), Every(None));
        assert_eq!(parse_interval_or_never("0s").unwrap(), Every(None));
        assert_eq!(
            parse_interval_or_never("10m").unwrap(),
            Every(Some(Duration::from_secs(600)))
        );
        assert!(parse_interval_or_never("x").is_err());
        let e = parse_duration("-1s").unwrap_err();
        assert!(e.contains("cannot be negative") && e.ends_with("like 1s"), "{e}");
    }

    #[test]
    fn listen_addresses_as_node_exporter_writes_them() {
        let ok = |s: &str| parse_listen(s).unwrap().to_string();
        assert_eq!(ok("0.0.0.0:9877"), "0.0.0.0:9877");
        assert_eq!(ok("[::1]:9877"), "[::1]:9877");
        assert_eq!(ok(":9877"), "0.0.0.0:9877");
        assert_eq!(ok("localhost:9877"), "127.0.0.1:9877");
        for (bad, why) in [
            ("9877", "no port"),
            ("localhost:x", "is not a port"),
            (":99999", "is not a port"),
            ("node1:9877", "is not an IP address"),
            ("::1:9877", "in brackets"),
        ] {
            let e = parse_listen(bad).unwrap_err();
            assert!(
                e.contains(why) && e.contains(":PORT") && e.contains("localhost:PORT"),
                "{bad}: {e}"
            );
        }
    }
}
