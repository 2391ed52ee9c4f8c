//! proxywatch: flags -> config -> run. anyhow lives here only.

#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use proxywatch::compare;
use proxywatch::config::{
    BaselineAction, BaselineArgs, Command, Common, CompareArgs, CompareFormat, Format, NpdArgs, ServeArgs,
};
use proxywatch::evaluate::{Severity, Thresholds};
use proxywatch::exec::Runner;
use proxywatch::expose::report;
use proxywatch::host::Host;
use proxywatch::liveness::Liveness;
use proxywatch::probe::ProbeContext;
use proxywatch::scheduler::{self, Aggregator};
use proxywatch::serve::{http, server};

/// Exit code when the agent itself could not run (Nagios "unknown").
const EXIT_UNKNOWN: u8 = 3;

fn main() -> ExitCode {
    // Before any thread starts: glibc's arenas are made as threads first allocate.
    proxywatch::trim::settle_allocator();
    // Help fits the terminal, or 80 columns (`COLUMNS`) when it goes to a pipe or a file.
    let width = (!std::io::stdout().is_terminal()).then(|| {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse().ok())
            .filter(|&c: &usize| c >= 20)
            .unwrap_or(proxywatch::config::HELP_WIDTH)
    });
    let cli = match proxywatch::config::parse(width) {
        Ok(c) => c,
        Err(e) => {
            // `npd` answers NPD even here: one line on stdout, Unknown (2), never an empty message.
            if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("npd") {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or("").trim_start_matches("error: ");
                println!("{}", proxywatch::expose::npd::cut(&format!("unknown: {first}"), 80));
                let _ = e.print();
                return ExitCode::from(proxywatch::expose::npd::EXIT_UNKNOWN);
            }
            // --help and --version are not errors; usage errors must not look like "critical" (2).
            let _ = e.print();
            let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
            if let Some(origin) = proxywatch::config::value_error_origin(&e, &args) {
                eprintln!("note: {origin}");
            }
            return if e.use_stderr() {
                ExitCode::from(EXIT_UNKNOWN)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let common = match &cli.command {
        Command::Serve(a) => &a.common,
        Command::Check(a) => &a.common,
        Command::Baseline(BaselineArgs {
            action: BaselineAction::Save(a),
        }) => &a.common,
        Command::Compare(a) => &a.common,
        Command::Npd(a) => &a.common,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(common.log_level)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("proxywatch: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_UNKNOWN);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(&args).await.map(|_| ExitCode::SUCCESS),
            Command::Check(args) => check(args.format, &args.common, args.try_services).await,
            Command::Baseline(BaselineArgs {
                action: BaselineAction::Save(args),
            }) => baseline_save(&args.file, &args.common, args.try_services).await,
            Command::Compare(args) => compare_cmd(&args).await,
            Command::Npd(args) => Ok(npd(&args).await),
        }
    });
    // Dropping the runtime cancels the probe tasks (their commands' groups are
    // killed); a read stuck in the kernel must not hold the exit past this.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("proxywatch: {e:#}");
            ExitCode::from(EXIT_UNKNOWN)
        }
    }
}

/// A line for the person at the terminal, on stderr at once (`check` never waits silently).
fn say(line: &str) {
    eprintln!("{line}");
}

struct Setup {
    ctx: Arc<ProbeContext>,
    aggregator: Aggregator,
    node: String,
}

fn setup(common: &Common, schedules: &[scheduler::Schedule]) -> anyhow::Result<Setup> {
    let thresholds: Thresholds = common.thresholds().map_err(anyhow::Error::msg)?;
    let host = Host::new(&common.host_root);
    anyhow::ensure!(
        host.root().is_dir(),
        "--host-root {}: not a directory",
        host.root().display()
    );
    let node = match &common.node_name {
        Some(n) => n.clone(),
        None => host
            .read_optional("/proc/sys/kernel/hostname")
            .ok()
            .flatten()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_string()),
    };
    if let Some(ns) = &common.proc_events_netns {
        let _ = proxywatch::watch::proc_events::NETNS.set(ns.clone());
    }
    let ctx = Arc::new(ProbeContext {
        host,
        runner: Runner::new(common.max_children),
        max_output_bytes: common.max_output_bytes,
        kube_proxy: common.kube_proxy_endpoints(),
        memory: Default::default(),
        kube_proxy_found: Default::default(),
        iptables_save_interval: common.iptables_save_interval.0,
        snat: common.conntrack_snat,
        service_traffic: common.service_traffic(),
        conntrack_stats_interval: common.conntrack_stats_interval.0,
        nftables_skip_kube_proxy: common.nftables_skip_kube_proxy(),
    });
    let probes: Vec<_> = schedules.iter().map(|s| s.probe).collect();
    let aggregator = Aggregator::new(&node, thresholds, &probes, common.history());
    Ok(Setup { ctx, aggregator, node })
}

async fn check(format: Format, common: &Common, try_services: bool) -> anyhow::Result<ExitCode> {
    let schedules = common.schedules_trying(try_services);
    let Setup { ctx, aggregator, .. } = setup(common, &schedules)?;
    let publication = scheduler::run_once(ctx, &schedules, &common.sources(), aggregator, &mut say).await;
    let doc = publication.document();
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Json => stdout.write_all(&publication.snapshot_json().map_err(anyhow::Error::msg)?),
        Format::Text => stdout.write_all(report::render(doc).as_bytes()),
    }
    .context("writing the report")?;
    Ok(ExitCode::from(match doc.status {
        Severity::Critical => 2,
        Severity::Warning => 1,
        Severity::Ok | Severity::Info => 0,
    }))
}

/// Runs every probe once and returns the /snapshot document.
async fn snapshot_now(common: &Common, try_services: bool) -> anyhow::Result<bytes::Bytes> {
    let schedules = common.schedules_trying(try_services);
    let Setup { ctx, aggregator, .. } = setup(common, &schedules)?;
    let publication = scheduler::run_once(ctx, &schedules, &common.sources(), aggregator, &mut say).await;
    publication.snapshot_json().map_err(anyhow::Error::msg)
}

async fn baseline_save(file: &std::path::Path, common: &Common, try_services: bool) -> anyhow::Result<ExitCode> {
    let json = snapshot_now(common, try_services).await?;
    let doc = compare::parse_document("snapshot", &String::from_utf8_lossy(&json))?;
    // Never half written, and never through a link planted beside it (we are root).
    proxywatch::persist::write_atomically(file, &json)?;
    let findings = doc["findings"].as_array().map_or(0, Vec::len);
    eprintln!(
        "proxywatch: baseline of node {} saved to {} (status {}, {findings} finding{})",
        doc["node"].as_str().unwrap_or("?"),
        file.display(),
        doc["status"].as_str().unwrap_or("?"),
        if findings == 1 { "" } else { "s" },
    );
    Ok(ExitCode::SUCCESS)
}

fn read_document(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    Ok(compare::parse_document(&name, &text)?)
}

async fn compare_cmd(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let before_name = args.baseline.display().to_string();
    let before = read_document(&args.baseline)?;
    let (after_name, after) = if let Some(path) = args.after_file() {
        (path.display().to_string(), read_document(path)?)
    } else if let Some(url) = &args.url {
        // A bare agent address gets /snapshot; a full URL is used as given.
        let url = match proxywatch::fetch::split_url(url) {
            Some((_, "/")) => proxywatch::fetch::join(url, "/snapshot"),
            Some(_) => url.clone(),
            None => anyhow::bail!("--url {url}: expected http://HOST:PORT (the agent's address)"),
        };
        let got = proxywatch::fetch::get(&url, args.url_timeout, 64 << 20).await?;
        anyhow::ensure!(
            got.status == 200,
            "{url}: HTTP {}: {}",
            got.status,
            got.body.lines().next().unwrap_or("")
        );
        let doc = compare::parse_document(&url, &got.body)?;
        (url, doc)
    } else {
        let json = snapshot_now(&args.common, false).await?;
        let doc = compare::parse_document("probes now", &String::from_utf8_lossy(&json))?;
        ("probes now".to_string(), doc)
    };
    let c = compare::compare(&before_name, &before, &after_name, &after);
    let mut stdout = std::io::stdout().lock();
    match args.format {
        CompareFormat::Text => stdout.write_all(compare::render_text(&c).as_bytes()),
        CompareFormat::Json => {
            let mut v = serde_json::to_vec_pretty(&c).context("serializing the comparison")?;
            v.push(b'\n');
            stdout.write_all(&v)
        }
    }
    .context("writing the comparison")?;
    Ok(ExitCode::from(c.verdict.exit_code()))
}

/// `proxywatch npd`: NPD's exit code and one line on stdout, whatever happens
/// (an error is exit 2 with its reason as the line, never an empty message).
async fn npd(args: &NpdArgs) -> ExitCode {
    use proxywatch::expose::npd;
    let (code, line) = match npd_findings(args).await {
        Ok(findings) => npd::verdict(&findings, &args.selection(), args.severity, args.max_output_length),
        Err(why) => (npd::EXIT_UNKNOWN, format!("unknown: {why:#}")),
    };
    let line = npd::cut(&line.replace(['\n', '\r'], " "), args.max_output_length);
    let mut stdout = std::io::stdout().lock();
    // NPD reads the exit code even when its pipe is gone; nothing else to do on a write error.
    let _ = writeln!(stdout, "{line}");
    ExitCode::from(code)
}

async fn npd_findings(args: &NpdArgs) -> anyhow::Result<Vec<proxywatch::evaluate::Finding>> {
    let Some(from) = &args.from else {
        let schedules = args.common.schedules();
        let Setup { ctx, aggregator, .. } = setup(&args.common, &schedules)?;
        let publication = scheduler::run_once(ctx, &schedules, &args.common.sources(), aggregator, &mut say).await;
        return Ok(publication.findings().to_vec());
    };
    let (url, agent) = match proxywatch::fetch::split_url(from) {
        Some((authority, "/")) => (proxywatch::fetch::join(from, "/findings"), authority),
        Some((authority, _)) => (from.clone(), authority),
        // kube-rbac-proxy's port: its HTTPS needs a TLS client the plugin does not have.
        None if from.starts_with("https://") => {
            anyhow::bail!("--from {from}: no TLS; read the agent's http://127.0.0.1 port")
        }
        None => anyhow::bail!("--from {from}: expected http://HOST:PORT (the agent's address)"),
    };
    let token = match &args.bearer_token_file {
        None => None,
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("--bearer-token-file {}", path.display()))?;
            let t = text.trim().to_string();
            anyhow::ensure!(!t.is_empty(), "--bearer-token-file {}: empty", path.display());
            Some(t)
        }
    };
    // Messages name the agent's address, not the whole URL: they must fit NPD's 80 bytes.
    let got = match proxywatch::fetch::get_authorized(&url, args.timeout, 16 << 20, token.as_deref()).await {
        Ok(got) => got,
        Err(e) if e.is_refused() => anyhow::bail!("agent not answering: connection refused at {agent}"),
        Err(proxywatch::fetch::FetchError::Timeout { after, .. }) => {
            anyhow::bail!("agent at {agent} did not answer within {after:?}")
        }
        Err(proxywatch::fetch::FetchError::Io { message, .. }) => anyhow::bail!("agent at {agent}: {message}"),
        Err(e) => return Err(e.into()),
    };
    anyhow::ensure!(
        got.status == 200,
        "agent at {agent}: HTTP {}: {}",
        got.status,
        got.body.lines().next().unwrap_or("")
    );
    proxywatch::expose::npd::parse_findings(&got.body).map_err(|e| anyhow::anyhow!("agent at {agent}: {e}"))
}

async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let common = &args.common;
    let schedules = common.schedules();
    let Setup { ctx, aggregator, node } = setup(common, &schedules)?;
    let limits = args.limits(&node)?;
    proxywatch::reaper::start_if_pid1();
    let listener = server::bind(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let liveness = Arc::new(Liveness::new(scheduler::liveness_bound(&schedules)));
    let latest = scheduler::spawn(
        ctx,
        schedules,
        &common.sources(),
        aggregator.log_changes(),
        liveness.clone(),
        args.trim_interval.0,
    );
    tracing::info!(listen = %args.listen, "serving /metrics /snapshot /findings /healthz /readyz");
    let (routes, health) = (http::router(latest, liveness.clone()), http::health_only(liveness));
    server::serve(listener, routes, health, limits, shutdown_signal())
        .await
        .context("serving HTTP")?;
    tracing::info!("shutting down: probes cancelled, their commands killed");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
