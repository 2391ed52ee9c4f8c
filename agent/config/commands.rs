//! The arguments of `npd`, `baseline` and `compare` (serve's and check's stay in config.rs,
//! beside the `Common` flags they share).

use super::*;

#[derive(Debug, Args)]
pub struct NpdArgs {
    /// The local agent (e.g. http://127.0.0.1:9877) whose /findings are read; without it every probe runs once here.
    #[arg(long, env = "PROXYWATCH_NPD_FROM", value_name = "URL")]
    pub from: Option<String>,

    /// File holding the token of an agent started with --web.bearer-token-file; sent to --from in plain HTTP (loopback only).
    // Read at each run (a rotated token is picked up), trimmed. No TLS client: behind
    // kube-rbac-proxy the plugin reads the agent's own 127.0.0.1 port (docs/npd.md).
    #[arg(
        long = "bearer-token-file",
        env = "PROXYWATCH_NPD_BEARER_TOKEN_FILE",
        value_name = "FILE",
        requires = "from"
    )]
    pub bearer_token_file: Option<PathBuf>,

    /// Deadline of the --from request; keep it below the NPD rule's timeout.
    #[arg(long, env = "PROXYWATCH_NPD_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Lowest severity that makes the condition True (exit 1): info, warning or critical.
    #[arg(long, env = "PROXYWATCH_NPD_SEVERITY", default_value = "critical", value_parser = parse_severity)]
    pub severity: crate::evaluate::Severity,

    /// Which findings this condition covers: all, conntrack, kube-proxy, rules or kernel (README, NPD table).
    #[arg(
        long,
        env = "PROXYWATCH_NPD_AREA",
        value_enum,
        default_value = "all",
        conflicts_with = "finding"
    )]
    pub area: crate::expose::npd::Area,

    /// Cover this one finding id only (for an NPD temporary rule: an Event).
    #[arg(long, env = "PROXYWATCH_NPD_FINDING", value_name = "ID", value_parser = crate::expose::npd::known_finding)]
    pub finding: Option<String>,

    /// Bytes of the stdout line at most (NPD's max_output_length); cut on a word boundary.
    #[arg(
        long = "max-output-length",
        env = "PROXYWATCH_NPD_MAX_OUTPUT_LENGTH",
        default_value_t = 80
    )]
    pub max_output_length: usize,

    #[command(flatten)]
    pub common: Common,
}

impl NpdArgs {
    pub fn selection(&self) -> crate::expose::npd::Selection {
        match &self.finding {
            Some(id) => crate::expose::npd::Selection::Finding(id.clone()),
            None => crate::expose::npd::Selection::Area(self.area),
        }
    }
}

#[derive(Debug, Args)]
pub struct BaselineArgs {
    #[command(subcommand)]
    pub action: BaselineAction,
}

#[derive(Debug, Subcommand)]
pub enum BaselineAction {
    /// Run every probe once and write the /snapshot document to FILE (the same as `check --format json > FILE`).
    #[command(after_help = SHORT_HELP_END, after_long_help = DURATIONS_HELP)]
    Save(BaselineSaveArgs),
}

#[derive(Debug, Args)]
pub struct BaselineSaveArgs {
    /// Where to write the snapshot (replaced atomically).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Also try Service traffic once (the one probe that sends packets).
    ///
    /// The service_traffic probe: a TCP connect to default/kubernetes, a DNS query to kube-dns, each --service-traffic.target; `compare` then shows connect times.
    #[arg(long = "try-services")]
    pub try_services: bool,

    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    /// For a person, 80 columns.
    Text,
    /// Every fact, the findings and the verdict, for tools.
    Json,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a snapshot saved by `baseline save` (or `check --format json`, or a /snapshot body).
    #[arg(value_name = "FILE")]
    pub baseline: PathBuf,

    /// The saved snapshot to compare with, as `diff BEFORE AFTER` would; the same as --against.
    #[arg(value_name = "AFTER", conflicts_with_all = ["against", "url"])]
    pub after: Option<PathBuf>,

    /// Compare against this saved snapshot instead of running the probes now.
    #[arg(
        long,
        env = "PROXYWATCH_COMPARE_AGAINST",
        value_name = "FILE2",
        conflicts_with = "url"
    )]
    pub against: Option<PathBuf>,

    /// Compare against a running agent's /snapshot (e.g. http://NODE:9877) instead of running the probes now.
    #[arg(long, env = "PROXYWATCH_COMPARE_URL", value_name = "URL")]
    pub url: Option<String>,

    /// Timeout of the --url request.
    #[arg(long = "url-timeout", env = "PROXYWATCH_COMPARE_URL_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub url_timeout: Duration,

    /// Output format.
    #[arg(long, env = "PROXYWATCH_COMPARE_FORMAT", value_enum, default_value = "text")]
    pub format: CompareFormat,

    #[command(flatten)]
    pub common: Common,
}
