//! Each probe's schedule flags, `--<probe>.interval` and `--<probe>.timeout`, built from the
//! probe table (`agent/probe_table.rs`) with clap's builder API, so a probe's row is the one
//! place they are written. A probe without a timeout of its own runs under `--probe.timeout`.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use super::values::{parse_duration, parse_interval_or_never, Every};
use crate::probe::ProbeName;

/// One flag of a probe's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// Without the leading `--`.
    pub long: &'static str,
    pub env: &'static str,
    pub default: &'static str,
    /// The first line of `--help`, and the README's row.
    pub help: &'static str,
    /// `0` turns the probe off (intervals of the probes that can be left out).
    pub zero_is_never: bool,
    /// The flag's former name, still read (a hidden alias; docs/upgrading.md).
    pub was: Option<&'static str>,
}

impl Flag {
    /// A duration.
    pub const fn duration(long: &'static str, env: &'static str, default: &'static str, help: &'static str) -> Self {
        Flag {
            long,
            env,
            default,
            help,
            zero_is_never: false,
            was: None,
        }
    }

    /// A duration, or `0`: never.
    pub const fn or_never(long: &'static str, env: &'static str, default: &'static str, help: &'static str) -> Self {
        Flag {
            zero_is_never: true,
            ..Flag::duration(long, env, default, help)
        }
    }

    /// The same flag, also read under its former name.
    pub const fn was(self, old: &'static str) -> Self {
        Flag { was: Some(old), ..self }
    }

    fn arg(&self) -> Arg {
        let parse: fn(&str) -> Result<Every, String> = if self.zero_is_never {
            parse_interval_or_never
        } else {
            |s| parse_duration(s).map(|d| Every(Some(d)))
        };
        // As clap's derive writes a field's flag: the value is named after the variable.
        let value_name = self.env.strip_prefix("PROXYWATCH_").unwrap_or(self.env);
        let arg = Arg::new(self.long)
            .long(self.long)
            .env(self.env)
            .default_value(self.default)
            .value_name(value_name)
            .help(self.help)
            .action(ArgAction::Set)
            .value_parser(parse);
        match self.was {
            Some(old) => arg.alias(old),
            None => arg,
        }
    }
}

/// A probe's row of flags.
#[derive(Debug, Clone, Copy)]
pub struct ProbeFlags {
    pub probe: ProbeName,
    pub interval: Flag,
    /// None: the probe runs under `--probe.timeout`.
    pub timeout: Option<Flag>,
}

// `TABLE`: every probe's `ProbeFlags`.
probe_table!(flags);

/// What the flags of [`TABLE`] say: each probe's interval (None: never) and own timeout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeSchedules {
    interval: BTreeMap<ProbeName, Option<Duration>>,
    timeout: BTreeMap<ProbeName, Duration>,
}

impl ProbeSchedules {
    /// How often `probe` runs; None: never (its interval is `0`).
    pub fn interval(&self, probe: ProbeName) -> Option<Duration> {
        self.interval.get(&probe).copied().flatten()
    }

    /// The deadline of one run of `probe`: its own `--<probe>.timeout`, or `shared` (`--probe.timeout`).
    pub fn timeout(&self, probe: ProbeName, shared: Duration) -> Duration {
        self.timeout.get(&probe).copied().unwrap_or(shared)
    }
}

impl Args for ProbeSchedules {
    fn augment_args(mut cmd: Command) -> Command {
        for row in TABLE {
            cmd = cmd.arg(row.interval.arg());
            if let Some(t) = &row.timeout {
                cmd = cmd.arg(t.arg());
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for ProbeSchedules {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let get = |f: &Flag| m.get_one::<Every>(f.long).and_then(|e| e.0);
        let mut s = ProbeSchedules::default();
        for row in TABLE {
            s.interval.insert(row.probe, get(&row.interval));
            if let Some(d) = row.timeout.as_ref().and_then(get) {
                s.timeout.insert(row.probe, d);
            }
        }
        Ok(s)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::PROBES;

    #[test]
    fn every_probe_has_one_row_and_its_flags_follow_its_name() {
        let probes: Vec<ProbeName> = TABLE.iter().map(|r| r.probe).collect();
        assert_eq!(probes, PROBES, "one row per probe, in the table's order");
        for row in TABLE {
            let prefix = row.probe.as_str().replace('_', "-");
            assert_eq!(row.interval.long, format!("{prefix}.interval"));
            if let Some(t) = &row.timeout {
                assert_eq!(t.long, format!("{prefix}.timeout"));
                assert!(!t.zero_is_never, "a timeout of 0 is no deadline");
            }
            for f in std::iter::once(&row.interval).chain(&row.timeout) {
                let env = format!("PROXYWATCH_{}", f.long.replace(['.', '-'], "_").to_uppercase());
                assert_eq!(f.env, env, "{}", f.long);
                assert!(
                    !f.help.ends_with('.'),
                    "{}: clap's derive drops the period, so do we",
                    f.long
                );
            }
        }
    }

    fn schedules(args: &[&str]) -> Vec<(String, Duration, Duration)> {
        use clap::Parser;
        let cli = crate::config::Cli::try_parse_from(["proxywatch", "check"].iter().chain(args)).unwrap();
        let crate::config::Command::Check(c) = cli.command else {
            unreachable!("parsed as check")
        };
        c.common
            .schedules()
            .into_iter()
            .map(|s| (s.probe.to_string(), s.interval, s.timeout))
            .collect()
    }

    #[test]
    fn the_defaults_schedule_every_probe_as_before_the_table() {
        let s = |n: &str, i: u64, t: u64| (n.to_string(), Duration::from_secs(i), Duration::from_secs(t));
        assert_eq!(
            schedules(&[]),
            [
                s("node", 60, 10),
                s("modules", 60, 10),
                s("conntrack", 5, 10),
                s("conntrack_stale", 60, 20),
                s("sysctls", 15, 10),
                s("rp_filter", 15, 10),
                s("node_ports", 60, 10),
                s("neighbour_tables", 15, 10),
                s("iptables", 60, 30),
                s("xtables_lock", 5, 10),
                s("nftables", 120, 30),
                s("ipvs", 30, 10),
                s("kube_proxy", 15, 2),
            ]
        );
        // --probe.timeout is the deadline of the probes without their own.
        let shared: Vec<String> = schedules(&["--probe.timeout", "3s"])
            .into_iter()
            .filter(|(_, _, t)| *t == Duration::from_secs(3))
            .map(|(n, _, _)| n)
            .collect();
        assert_eq!(
            shared,
            [
                "node",
                "modules",
                "conntrack",
                "sysctls",
                "rp_filter",
                "neighbour_tables",
                "xtables_lock"
            ]
        );
        // And its help names them, as the README's row does.
        use clap::CommandFactory;
        let cmd = crate::config::Cli::command();
        let check = cmd.find_subcommand("check").unwrap();
        let arg = check
            .get_arguments()
            .find(|a| a.get_long() == Some("probe.timeout"))
            .unwrap();
        let help = arg.get_help().unwrap().to_string();
        assert!(help.contains(&format!("({})", shared.join(", "))), "{help}");
    }

    #[test]
    fn a_renamed_flag_is_still_read_under_its_former_name() {
        let stale = |args: &[&str]| schedules(args).into_iter().find(|(n, _, _)| n == "conntrack_stale");
        let want = Some((
            "conntrack_stale".to_string(),
            Duration::from_secs(7),
            Duration::from_secs(9),
        ));
        assert_eq!(
            stale(&["--conntrack.stale-interval", "7s", "--conntrack.stale-timeout", "9s"]),
            want
        );
        assert_eq!(
            stale(&["--conntrack-stale.interval", "7s", "--conntrack-stale.timeout", "9s"]),
            want
        );
        assert_eq!(stale(&["--conntrack.stale-interval", "0"]), None, "0: never");
        assert_eq!(stale(&["--conntrack-stale.interval=0"]), None);
        // Hidden: --help names the flag once, by its name.
        use clap::CommandFactory;
        let mut cmd = crate::config::Cli::command();
        let help = cmd.find_subcommand_mut("check").unwrap().render_long_help().to_string();
        assert!(help.contains("--conntrack-stale.interval") && !help.contains("conntrack.stale-interval"));
    }

    #[test]
    fn a_bad_interval_is_refused_and_zero_only_where_it_means_never() {
        use clap::Parser;
        let parse = |args: &[&str]| crate::config::Cli::try_parse_from(["proxywatch", "check"].iter().chain(args));
        assert!(parse(&["--conntrack.interval", "abc"]).is_err());
        assert!(
            parse(&["--conntrack.interval", "0"]).is_err(),
            "the conntrack probe cannot be turned off"
        );
        assert!(parse(&["--node-ports.interval", "0"]).is_ok());
        let kube_proxy = schedules(&["--kube-proxy.interval", "1m30s"])
            .into_iter()
            .find(|(p, _, _)| p == "kube_proxy")
            .expect("the kube_proxy probe is scheduled");
        assert_eq!(kube_proxy.1, Duration::from_secs(90));
    }
}
