//! proxywatch: flags -> config -> run. anyhow lives here only.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use proxywatch::config::{Cli, Command, Common, Format};
use proxywatch::evaluate::{Severity, Thresholds};
use proxywatch::exec::Runner;
use proxywatch::expose::{http, report};
use proxywatch::host::Host;
use proxywatch::probe::{ProbeContext, PROBES};
use proxywatch::scheduler::{self, Aggregator};

/// Exit code when the agent itself could not run (Nagios "unknown").
const EXIT_UNKNOWN: u8 = 3;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are not errors; usage errors must not look like "critical" (2).
            let _ = e.print();
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
            Command::Serve(args) => serve(args.listen, &args.common).await.map(|_| ExitCode::SUCCESS),
            Command::Check(args) => check(args.format, &args.common).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("proxywatch: {e:#}");
            ExitCode::from(EXIT_UNKNOWN)
        }
    }
}

struct Setup {
    ctx: Arc<ProbeContext>,
    aggregator: Aggregator,
}

fn setup(common: &Common) -> anyhow::Result<Setup> {
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
    let ctx = Arc::new(ProbeContext {
        host,
        runner: Runner::new(common.max_children),
        max_output_bytes: common.max_output_bytes,
        kube_proxy: common.kube_proxy_endpoints(),
    });
    let aggregator = Aggregator::new(&node, thresholds, PROBES, common.conntrack_window.as_secs_f64());
    Ok(Setup { ctx, aggregator })
}

async fn check(format: Format, common: &Common) -> anyhow::Result<ExitCode> {
    let Setup { ctx, aggregator } = setup(common)?;
    let publication = scheduler::run_once(ctx, &common.schedules(), aggregator).await;
    let doc = &publication.document;
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Json => stdout.write_all(&publication.snapshot_json),
        Format::Text => stdout.write_all(report::render(doc).as_bytes()),
    }
    .context("writing the report")?;
    Ok(ExitCode::from(match doc.status {
        Severity::Critical => 2,
        Severity::Warning => 1,
        Severity::Ok | Severity::Info => 0,
    }))
}

async fn serve(listen: std::net::SocketAddr, common: &Common) -> anyhow::Result<()> {
    let Setup { ctx, aggregator } = setup(common)?;
    let latest = scheduler::spawn(ctx, common.schedules(), aggregator);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    tracing::info!(%listen, "serving /metrics /snapshot /findings /healthz /readyz");
    axum::serve(listener, http::router(latest))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving HTTP")?;
    tracing::info!("shut down");
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
