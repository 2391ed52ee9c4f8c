//! The status page (`GET /` from a browser): the node's status at a glance.
//!
//! One self-contained HTML document, rendered once per publication: no
//! JavaScript, no external assets (the CSP header the route sends forbids
//! both), semantic HTML, refreshed by `<meta http-equiv="refresh">`. Every
//! string that comes from the node (names, summaries, errors, evidence) goes
//! through `esc`. The charts (inline SVG of the history) are drawn in `page/chart.rs`.

use std::fmt::Write;

use serde_json::Value;

use super::json::Document;
use crate::evaluate::Severity;
use crate::history::kube_proxy::p99;
use crate::snapshot::ProbeStatus;

mod chart;
use chart::charts;

/// Seconds between the page's automatic reloads.
pub const REFRESH_SECONDS: u32 = 10;

/// The Content-Security-Policy sent with the page: inline styles only.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// HTML-escapes text for element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root{color-scheme:light;--ok:#1b6e20;--info:#0b57a4;--warning:#8a4b00;--critical:#b3001b;--line:#d0d4da;--muted:#555}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1a1a1a;background:#f6f7f9}
header{padding:14px 24px;color:#fff;background:var(--ok)}
header.status-warning{background:var(--warning)}header.status-critical{background:var(--critical)}
header h1{margin:0;font-size:22px}header p{margin:4px 0 0;opacity:.95}
main{max-width:1100px;margin:0 auto;padding:8px 24px 24px}
h2{font-size:18px;margin:22px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:16px;margin:0 0 4px}h4{font-size:14px;margin:8px 0 2px}
.finding{background:#fff;border:1px solid var(--line);border-left:6px solid var(--info);border-radius:4px;padding:10px 14px;margin:10px 0}
.finding.sev-warning{border-left-color:var(--warning)}.finding.sev-critical{border-left-color:var(--critical)}
.badge{display:inline-block;min-width:72px;text-align:center;font-size:12px;font-weight:700;letter-spacing:.04em;color:#fff;border-radius:3px;padding:1px 6px;margin-right:6px;background:var(--info)}
.badge.sev-warning{background:var(--warning)}.badge.sev-critical{background:var(--critical)}.badge.sev-ok{background:var(--ok)}
.summary{margin:2px 0 6px}
dl.evidence{display:grid;grid-template-columns:max-content 1fr;gap:1px 12px;margin:4px 0;font-size:13px}
dl.evidence dt{color:var(--muted)}dl.evidence dd{margin:0;font-family:ui-monospace,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
ol{margin:2px 0;padding-left:22px}li{margin:2px 0;overflow-wrap:anywhere}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:0 24px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);vertical-align:top}
thead th{background:#eef0f3}th{font-weight:600}.num{text-align:right;font-variant-numeric:tabular-nums}
meter{width:100%;height:22px}
.fill{font-size:16px;margin:4px 0}
.bad{color:var(--critical);font-weight:600}.muted{color:var(--muted)}
footer{max-width:1100px;margin:0 auto;padding:8px 24px 24px;color:var(--muted);font-size:13px}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace}td code{overflow-wrap:anywhere}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:8px 24px}
figure.chart{margin:0;background:#fff;border:1px solid var(--line);border-radius:4px;padding:8px 10px}
svg.chart{display:block;width:100%;height:auto}
svg .grid{stroke:#e3e6ea;stroke-width:1}svg .axisline,svg .tick{stroke:#777;stroke-width:1}
svg .axis{font-size:12px;fill:#444}svg .label{font-size:13px;font-weight:600;fill:#1a1a1a}
svg .series{stroke:#1a1a1a;stroke-width:2.5;fill:none}svg .dot{fill:#1a1a1a}
svg .forecast{stroke:var(--critical);stroke-width:2.5;fill:none}
svg .p50{fill:#1a1a1a}svg .p99{fill:none;stroke:#1a1a1a;stroke-width:1.5}
.caption{margin:2px 0 0;font-size:12px;color:var(--muted)}
"#;

fn severity_class(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "sev-critical",
        Severity::Warning => "sev-warning",
        Severity::Info => "sev-info",
        Severity::Ok => "sev-ok",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(", "),
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

fn age(seconds: f64) -> String {
    if seconds < 0.0 {
        "0 s".into()
    } else if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if seconds < 172_800.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.0} days", seconds / 86_400.0)
    }
}

/// Renders the page. `collected_at` is the snapshot's Unix time (probe ages are relative to it).
pub fn render(doc: &Document, collected_at: f64) -> String {
    render_into(doc, collected_at, String::with_capacity(16 * 1024))
}

/// [`render`], written at the end of `o` (a publication sizes it from the last rendering).
pub(crate) fn render_into(doc: &Document, collected_at: f64, mut o: String) -> String {
    let status = doc.status.as_str();
    let count = |s: Severity| doc.findings.iter().filter(|f| f.severity == s).count();
    let node = esc(&doc.node);
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\n\
         <title>{} · {node} · proxywatch</title>\n<link rel=\"icon\" href=\"data:,\">\n<style>{STYLE}</style>\n</head>\n<body>\n",
        status.to_uppercase()
    );
    let _ = write!(
        o,
        "<header class=\"status-{status}\">\n<h1>Node <span id=\"node\">{node}</span>: <strong id=\"status\">{}</strong></h1>\n\
         <p>{} critical, {} warning, {} info · snapshot {} · kube-proxy mode <strong>{}</strong>{} · proxywatch {} · reloads every {REFRESH_SECONDS} s</p>\n</header>\n<main>\n",
        status.to_uppercase(),
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info),
        esc(&doc.collected_at),
        esc(mode_str(doc)),
        if doc.proxy_mode.source == mode_str(doc) {
            String::new()
        } else {
            format!(" ({})", esc(&doc.proxy_mode.source))
        },
        esc(&doc.agent.version),
    );

    // Findings first: what to do comes before the numbers.
    o.push_str("<section aria-labelledby=\"findings-h\">\n<h2 id=\"findings-h\">Findings</h2>\n");
    if doc.findings.is_empty() {
        o.push_str("<p>No findings: the data plane looks healthy.</p>\n");
    }
    for f in &doc.findings {
        let class = severity_class(f.severity);
        let _ = write!(
            o,
            "<article class=\"finding {class}\" id=\"finding-{id}\" aria-labelledby=\"finding-{id}-h\">\n\
             <h3 id=\"finding-{id}-h\"><span class=\"badge {class}\">{sev}</span> <code>{id}</code></h3>\n\
             <p class=\"summary\">{summary}</p>\n",
            id = esc(&f.id),
            sev = f.severity.as_str().to_uppercase(),
            summary = esc(&f.summary),
        );
        if let Some(since) = f.since {
            let at = crate::timefmt::rfc3339(since);
            let _ = writeln!(
                o,
                "<p class=\"since\">{} since <time datetime=\"{at}\">{at}</time> ({})</p>",
                f.severity.as_str(),
                crate::timefmt::human_duration(collected_at - since),
            );
        }
        if !f.evidence.is_empty() {
            o.push_str("<h4>Evidence</h4>\n<dl class=\"evidence\">");
            // Flattened as in `check`: nested keys dotted, nulls left out.
            let mut pairs = Vec::new();
            for (k, v) in &f.evidence {
                super::report::flatten(k, v, &mut pairs);
            }
            for pair in &pairs {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let _ = write!(o, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
            }
            o.push_str("</dl>\n");
        }
        if !f.remediation.is_empty() {
            o.push_str("<h4>Remediation</h4>\n<ol class=\"remediation\">\n");
            for step in &f.remediation {
                let _ = writeln!(o, "<li>{}</li>", esc(step));
            }
            o.push_str("</ol>\n");
        }
        o.push_str("</article>\n");
    }
    o.push_str("</section>\n");

    charts(&mut o, doc, collected_at);
    conntrack(&mut o, doc);
    stale(&mut o, doc);
    snat(&mut o, doc);
    o.push_str("<div class=\"grid\">\n");
    rules(&mut o, doc);
    changes(&mut o, doc);
    kube_proxy(&mut o, doc);
    kernel(&mut o, doc);
    o.push_str("</div>\n");
    sysctls(&mut o, doc);
    probes(&mut o, doc, collected_at);

    o.push_str(
        "</main>\n<footer>Machine-readable: <a href=\"/metrics\">/metrics</a> · <a href=\"/snapshot\">/snapshot</a> · \
         <a href=\"/findings\">/findings</a> · <a href=\"/healthz\">/healthz</a> · <a href=\"/readyz\">/readyz</a></footer>\n</body>\n</html>\n",
    );
    o
}

fn mode_str(doc: &Document) -> &str {
    doc.proxy_mode.mode.as_str()
}

fn section(o: &mut String, id: &str, title: &str) {
    let _ = writeln!(
        o,
        "<section aria-labelledby=\"{id}-h\">\n<h2 id=\"{id}-h\">{title}</h2>"
    );
}

fn conntrack(o: &mut String, doc: &Document) {
    section(o, "conntrack", "Conntrack");
    let Some(ct) = &doc.facts.conntrack else {
        o.push_str(
            "<p class=\"muted\">No conntrack facts (the probe found no table or failed; see Probes).</p>\n</section>\n",
        );
        return;
    };
    match ct.fill_ratio() {
        Some(r) => {
            let _ = write!(
                o,
                "<p class=\"fill\"><label for=\"ct-fill\">Table fill</label>: <strong>{:.1}%</strong> ({} of {} entries)</p>\n\
                 <meter id=\"ct-fill\" min=\"0\" max=\"1\" low=\"0.8\" high=\"0.95\" optimum=\"0\" value=\"{:.4}\">{:.1}%</meter>\n",
                r * 100.0,
                ct.entries,
                ct.max,
                r.min(1.0),
                r * 100.0
            );
        }
        None => {
            let _ = writeln!(o, "<p>{} entries, no limit readable.</p>", ct.entries);
        }
    }
    o.push_str("<table>\n<thead><tr><th scope=\"col\">counter</th><th scope=\"col\" class=\"num\">since boot</th><th scope=\"col\" class=\"num\">recent window</th></tr></thead>\n<tbody>\n");
    let derived = doc.derived.conntrack.clone().unwrap_or_default();
    for name in ["drop", "early_drop", "insert_failed", "invalid"] {
        let recent = derived
            .window
            .as_ref()
            .map(|w| format!("{} in {}", w.get(name), crate::timefmt::human_duration(w.seconds)))
            .unwrap_or_else(|| "—".into());
        let class = if derived.window.as_ref().is_some_and(|w| w.get(name) > 0) {
            " bad"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "<tr><th scope=\"row\">{name}</th><td class=\"num\">{}</td><td class=\"num{class}\">{}</td></tr>",
            ct.stat(name),
            esc(&recent)
        );
    }
    o.push_str("</tbody>\n</table>\n");
    if let Some(tr) = &derived.trend {
        let full = tr
            .seconds_to_full
            .map(|s| format!("full in about {}", crate::timefmt::human_duration(s)))
            .unwrap_or_else(|| "not growing".into());
        let _ = writeln!(
            o,
            "<p>Trend over {}: {:+.2} entries/s, {}.</p>",
            crate::timefmt::human_duration(tr.window_seconds),
            tr.slope_per_second,
            esc(&full)
        );
    }
    o.push_str("</section>\n");
}

/// Stale (UDP) and draining (TCP, SCTP) conntrack entries per service and
/// removed endpoint (the conntrack_stale probe).
fn stale(o: &mut String, doc: &Document) {
    let (Some(f), Some(d)) = (&doc.facts.conntrack_stale, &doc.derived.conntrack_stale) else {
        return;
    };
    section(o, "stale", "Stale conntrack entries");
    let _ = writeln!(
        o,
        "<p>{} entries checked against {} service ports ({} NodePorts) and {} endpoints (from {}, generation {}).</p>",
        f.examined_entries,
        f.service_ports,
        f.node_ports,
        f.endpoints,
        esc(&f.source),
        f.generation
    );
    if d.groups.is_empty() && d.draining.is_empty() {
        o.push_str(
            "<p class=\"muted\">No entry NATed to an endpoint no longer in the service's endpoints.</p>\n</section>\n",
        );
        return;
    }
    o.push_str("<table>\n<thead><tr><th scope=\"col\">service</th><th scope=\"col\">removed endpoint</th><th scope=\"col\">state</th><th scope=\"col\" class=\"num\">entries</th><th scope=\"col\">first seen</th><th scope=\"col\" class=\"num\">checks</th></tr></thead>\n<tbody>\n");
    let rows = d
        .groups
        .iter()
        .map(|g| (g, "stale", g.checks >= 2))
        .chain(d.draining.iter().map(|g| (g, "draining", false)));
    for (g, state, bad) in rows {
        let class = if bad { " class=\"bad\"" } else { "" };
        let _ = writeln!(
            o,
            "<tr{class}><th scope=\"row\">{}</th><td>{}</td><td>{state}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            esc(&g.group.service) + if g.group.node_port { " (NodePort)" } else { "" },
            esc(&g.group.endpoint),
            g.group.entries,
            esc(&crate::timefmt::rfc3339(g.first_seen_seconds)),
            g.checks
        );
    }
    o.push_str("</tbody>\n</table>\n</section>\n");
}

/// Groups shown in the Source NAT section (the snapshot lists up to [`crate::probe::snat::MAX_LISTED`]).
const SNAT_SHOWN: usize = 10;

/// The fullest source NAT groups (translated source, destination, zone) and
/// the ports they use, from the snapshot's SNAT facts.
fn snat(o: &mut String, doc: &Document) {
    let Some(f) = doc.facts.conntrack_stale.as_ref().and_then(|c| c.snat.as_ref()) else {
        return;
    };
    section(o, "snat", "Source NAT");
    let _ = writeln!(
        o,
        "<p>{} source-NATed entries in {} groups; {} source NAT rules ({} without random-fully).</p>",
        f.entries,
        f.groups,
        f.rules.len(),
        f.rules.iter().filter(|r| !r.random_fully).count()
    );
    if f.top.is_empty() {
        o.push_str("<p class=\"muted\">No source-NATed connection in the conntrack table.</p>\n</section>\n");
        return;
    }
    o.push_str("<table>\n<thead><tr><th scope=\"col\">translated source</th><th scope=\"col\">destination</th><th scope=\"col\" class=\"num\">zone</th><th scope=\"col\" class=\"num\">ports in use</th><th scope=\"col\">range</th><th scope=\"col\" class=\"num\">fill</th></tr></thead>\n<tbody>\n");
    // Marked: at or past the fill the snat_ports_near_exhaustion finding warns from.
    let limit = doc
        .findings
        .iter()
        .find(|x| x.id == "snat_ports_near_exhaustion")
        .and_then(|x| x.evidence.get("fill_warning"))
        .and_then(|v| v.as_f64())
        .unwrap_or(f64::INFINITY);
    for g in f.top.iter().take(SNAT_SHOWN) {
        let class = if g.fill >= limit { " class=\"bad\"" } else { "" };
        let destination = if g.protocol.starts_with("icmp") {
            format!(
                "{}/{}",
                crate::probe::service_endpoints::socket(g.destination, None),
                g.protocol
            )
        } else {
            format!(
                "{}/{}",
                crate::probe::service_endpoints::socket(g.destination, Some(g.port)),
                g.protocol
            )
        };
        let _ = writeln!(
            o,
            "<tr{class}><th scope=\"row\">{}</th><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{} ({})</td><td class=\"num\">{:.1}%</td></tr>",
            esc(&g.source.to_string()),
            esc(&destination),
            g.zone,
            g.ports_in_use,
            esc(&g.range),
            esc(&g.range_from),
            g.fill * 100.0
        );
    }
    o.push_str("</tbody>\n</table>\n");
    if f.top.len() > SNAT_SHOWN || f.groups > f.top.len() as u64 {
        let _ = writeln!(
            o,
            "<p class=\"muted\">The {} fullest of {} groups; all listed groups are in /snapshot (facts.conntrack_stale.snat.top).</p>",
            SNAT_SHOWN.min(f.top.len()),
            f.groups
        );
    }
    o.push_str("</section>\n");
}

fn rules(o: &mut String, doc: &Document) {
    section(o, "rules", "Rules");
    let mut any = false;
    if let Some(ipt) = &doc.facts.iptables {
        any = true;
        let _ = writeln!(
            o,
            "<p>iptables backend in use: <strong>{}</strong> <span class=\"muted\">({})</span></p>",
            esc(&ipt.backend_in_use),
            esc(&ipt.backend_reason)
        );
        o.push_str("<table>\n<thead><tr><th scope=\"col\">backend</th><th scope=\"col\">family</th><th scope=\"col\">table</th><th scope=\"col\" class=\"num\">rules</th><th scope=\"col\" class=\"num\">save</th></tr></thead>\n<tbody>\n");
        for s in &ipt.saves {
            for (table, c) in &s.counts.tables {
                let _ = writeln!(
                    o,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.0} ms</td></tr>",
                    esc(&s.backend),
                    esc(&s.family),
                    esc(table),
                    c.rules,
                    s.duration_seconds * 1000.0
                );
            }
        }
        o.push_str("</tbody>\n</table>\n");
    }
    if let Some(nft) = &doc.facts.nftables {
        any = true;
        for t in &nft.tables {
            let _ = writeln!(
                o,
                "<p>nftables <code>{} kube-proxy</code>: {} rules, {} chains ({} service chains), listed in {:.0} ms.</p>",
                t.nft_family(),
                t.counts.rules,
                t.counts.chains,
                t.counts.service_chains,
                t.duration_seconds * 1000.0
            );
        }
    }
    if let Some(ipvs) = &doc.facts.ipvs {
        any = true;
        let _ = writeln!(
            o,
            "<p>IPVS: {} virtual servers, {} real servers, {} without backends.</p>",
            ipvs.virtual_servers, ipvs.real_servers, ipvs.without_backends
        );
    }
    if !any {
        o.push_str(
            "<p class=\"muted\">No rule sets read (no iptables, nft or IPVS tools, or the probes failed).</p>\n",
        );
    }
    o.push_str("</section>\n");
}

/// Journal rows the page shows at most (the newest; /snapshot has the whole journal).
const JOURNAL_ROWS: usize = 16;

/// The nf_tables watcher's journal: who committed what, newest first.
fn changes(o: &mut String, doc: &Document) {
    use crate::history::nftables_watch::WatchState;
    let Some(w) = &doc.derived.nftables_watch else {
        return;
    };
    section(o, "changes", "Rule changes");
    match (w.state, &w.error) {
        (WatchState::Watching, _) => {
            let _ = writeln!(
                o,
                "<p>Watching nf_tables commits: {} by kube-proxy, {} by other processes{}.</p>",
                w.commits_kube_proxy_total,
                w.commits_other_total,
                if w.notifications_lost_total > 0 {
                    format!(
                        "; notifications lost {} times (rules re-read)",
                        w.notifications_lost_total
                    )
                } else {
                    String::new()
                }
            );
        }
        (_, why) => {
            let _ = writeln!(
                o,
                "<p class=\"muted\">Not watching nf_tables commits{}: the rule probes poll.</p>",
                why.as_ref().map(|w| format!(" ({})", esc(w))).unwrap_or_default()
            );
        }
    }
    if !w.journal.is_empty() {
        o.push_str("<ol class=\"journal\" reversed>\n");
        for e in w.journal.iter().rev().take(JOURNAL_ROWS) {
            let _ = writeln!(o, "<li>{}</li>", esc(&e.describe()));
        }
        o.push_str("</ol>\n");
    }
    o.push_str("</section>\n");
}

fn kube_proxy(o: &mut String, doc: &Document) {
    section(o, "kube-proxy", "kube-proxy");
    let Some(kp) = &doc.facts.kube_proxy else {
        o.push_str(
            "<p class=\"muted\">kube-proxy not reachable (absent, or its metrics port is closed).</p>\n</section>\n",
        );
        return;
    };
    o.push_str("<table>\n<tbody>\n");
    let row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "<tr><th scope=\"row\">{k}</th><td>{}</td></tr>", esc(&v));
    };
    row(o, "mode", kp.mode.clone().unwrap_or_default().to_string());
    row(o, "metrics", if kp.metrics_up { "up".into() } else { "down".into() });
    let secs = |v: Option<f64>| v.map_or("—".into(), |s| format!("{:.3} s", s));
    let d = doc.derived.kube_proxy.clone().unwrap_or_default();
    row(
        o,
        "sync p99",
        secs(kp.sync.as_ref().and_then(|l| p99(l, d.sync.as_ref()))),
    );
    row(
        o,
        "network programming p99",
        secs(
            kp.network_programming
                .as_ref()
                .and_then(|l| p99(l, d.network_programming.as_ref())),
        ),
    );
    row(o, "last sync age", d.last_sync_age_seconds.map_or("—".into(), age));
    row(o, "restarts seen", d.restarts.to_string());
    o.push_str("</tbody>\n</table>\n</section>\n");
}

fn kernel(o: &mut String, doc: &Document) {
    section(o, "kernel", "Kernel modules");
    if let Some(node) = &doc.facts.node {
        let _ = writeln!(
            o,
            "<p>Kernel {}, {} CPUs.</p>",
            esc(node.kernel_release.as_deref().unwrap_or("unknown")),
            node.cpus
        );
    }
    if let Some(m) = &doc.facts.modules {
        o.push_str(
            "<table>\n<thead><tr><th scope=\"col\">module</th><th scope=\"col\">state</th></tr></thead>\n<tbody>\n",
        );
        for (name, state) in &m.modules {
            let s = serde_json::to_value(state).map(|v| show(&v)).unwrap_or_default();
            let class = if state.is_present() { "" } else { " class=\"muted\"" };
            let _ = writeln!(
                o,
                "<tr><td><code>{}</code></td><td{class}>{}</td></tr>",
                esc(name),
                esc(&s)
            );
        }
        o.push_str("</tbody>\n</table>\n");
    }
    o.push_str("</section>\n");
}

fn sysctls(o: &mut String, doc: &Document) {
    section(o, "sysctls", "Sysctls");
    if let Some(sys) = &doc.facts.sysctls {
        o.push_str("<table>\n<thead><tr><th scope=\"col\">sysctl</th><th scope=\"col\" class=\"num\">value</th></tr></thead>\n<tbody>\n");
        for (name, v) in &sys.values {
            let v = v.map_or("absent".to_string(), |v| v.to_string());
            let _ = writeln!(
                o,
                "<tr><td><code>{}</code></td><td class=\"num\">{}</td></tr>",
                esc(name),
                esc(&v)
            );
        }
        o.push_str("</tbody>\n</table>\n");
    } else {
        o.push_str("<p class=\"muted\">No sysctl facts (see Probes).</p>\n");
    }
    o.push_str("</section>\n");
}

fn probes(o: &mut String, doc: &Document, collected_at: f64) {
    section(o, "probes", "Probes");
    o.push_str(
        "<table>\n<thead><tr><th scope=\"col\">probe</th><th scope=\"col\">status</th><th scope=\"col\" class=\"num\">took</th>\
         <th scope=\"col\">last success</th><th scope=\"col\">detail</th></tr></thead>\n<tbody>\n",
    );
    for (name, p) in &doc.probes {
        let (status, class) = match p.status {
            ProbeStatus::Ok => ("ok", ""),
            ProbeStatus::Absent => ("absent", " class=\"muted\""),
            ProbeStatus::Failed => ("FAILED", " class=\"bad\""),
        };
        let last = p
            .last_success_seconds
            .map_or("never".to_string(), |t| format!("{} before", age(collected_at - t)));
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td{class}>{status}</td><td class=\"num\">{:.1} ms</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            p.duration_seconds * 1000.0,
            esc(&last),
            esc(p.error.as_deref().unwrap_or(""))
        );
    }
    o.push_str(
        "</tbody>\n</table>\n<p class=\"muted\">Ages are relative to the snapshot time above.</p>\n</section>\n",
    );
}

/// The plain-text status lines appended to the `/` index for curl.
pub fn text_status(doc: &Document) -> String {
    let count = |s: Severity| doc.findings.iter().filter(|f| f.severity == s).count();
    let mut o = format!(
        "status: {} on node {} at {} ({} critical, {} warning, {} info)\n",
        doc.status.as_str().to_uppercase(),
        doc.node,
        doc.collected_at,
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info)
    );
    for f in &doc.findings {
        let _ = writeln!(o, "  [{}] {}: {}", f.severity.as_str(), f.id, f.summary);
    }
    // The Service tries, as `check` prints them, over the tries the history keeps.
    let tries = super::report::service_try_lines(doc);
    if !tries.is_empty() {
        o.push_str("service tries (connect time; DNS over UDP: answer time):\n");
        for (target, text) in tries {
            let _ = writeln!(o, "  {target}: {text}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::evaluate;
    use crate::history::series::Point;

    pub(super) fn doc(s: &crate::snapshot::Snapshot) -> Document {
        Document::new(s, evaluate(s, &crate::config::default_thresholds()))
    }

    #[test]
    fn escapes_everything() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let mut s = crate::evaluate::test_support::healthy();
        s.node = "<script>alert(1)</script>".into();
        crate::evaluate::test_support::set_sysctl(&mut s, "<img src=x onerror=alert(2)>", 1);
        let html = render(&doc(&s), 0.0);
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn shows_status_findings_and_facts() {
        let mut s = crate::evaluate::test_support::healthy();
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.ip_forward", 0);
        s.facts.conntrack.as_mut().unwrap().entries = 131_072;
        let html = render(&doc(&s), 0.0);
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
        assert!(html.contains("<header class=\"status-critical\">"));
        assert!(html.contains("id=\"finding-sysctl_ip_forward\""));
        assert!(html.contains("<span class=\"badge sev-critical\">CRITICAL</span>"));
        assert!(
            html.contains("<li>Enable it now: sysctl -w net.ipv4.ip_forward=1"),
            "{html}"
        );
        assert!(html.contains("value=\"0.5000\""), "conntrack meter at 50 %");
        assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"));
        assert!(html.len() < 64 * 1024, "small: {} bytes", html.len());
        let text = text_status(&doc(&s));
        assert!(text.starts_with("status: CRITICAL on node node-a at "), "{text}");
        assert!(text.contains("  [critical] sysctl_ip_forward: "), "{text}");
    }

    #[test]
    fn snat_top_groups_from_the_snapshot() {
        use crate::probe::snat::{SnatFacts, SnatGroup};
        let mut s = crate::evaluate::test_support::healthy();
        let group = |zone: u16, n: u64, protocol: &str, port: u16| SnatGroup {
            source: "192.168.0.2".parse().unwrap(),
            destination: "203.0.113.7".parse().unwrap(),
            port,
            protocol: protocol.into(),
            zone,
            ports_in_use: n,
            range: "20000-20009".into(),
            range_size: 10,
            range_from: "rule".into(),
            fill: n as f64 / 10.0,
        };
        s.facts.conntrack_stale = Some(crate::probe::conntrack_stale::ConntrackStaleFacts {
            snat: Some(SnatFacts {
                entries: 13,
                groups: 3,
                top: vec![group(1, 9, "tcp", 443), group(2, 3, "tcp", 443), group(0, 1, "icmp", 0)],
                max_fill: Some(0.9),
                ..Default::default()
            }),
            ..Default::default()
        });
        let html = render(&doc(&s), 0.0);
        assert!(html.contains("<h2 id=\"snat-h\">Source NAT</h2>"), "{html}");
        assert!(html.contains("13 source-NATed entries in 3 groups"), "{html}");
        assert!(
            html.contains("<tr class=\"bad\"><th scope=\"row\">192.168.0.2</th><td>203.0.113.7:443/tcp</td><td class=\"num\">1</td><td class=\"num\">9</td><td>20000-20009 (rule)</td><td class=\"num\">90.0%</td></tr>"),
            "{html}"
        );
        assert!(html.contains("<tr><th scope=\"row\">192.168.0.2</th><td>203.0.113.7:443/tcp</td><td class=\"num\">2</td><td class=\"num\">3</td>"), "{html}");
        assert!(html.contains("<td>203.0.113.7/icmp</td>"), "{html}");
        // No SNAT facts (--conntrack.snat false): no section.
        let html = render(&doc(&crate::evaluate::test_support::healthy()), 0.0);
        assert!(!html.contains("Source NAT</h2>"));
    }

    #[test]
    fn full_history_keeps_the_page_small() {
        use crate::history::series::CAPACITY;
        let mut s = crate::evaluate::test_support::healthy();
        s.collected_at = 1_764_578_000.0 + 20.0 * CAPACITY as f64;
        let pts = |f: fn(f64) -> f64| -> Vec<Point> {
            (0..CAPACITY)
                .map(|i| [1_764_578_000.0 + 20.0 * i as f64, f(i as f64)])
                .collect()
        };
        s.derived.series.conntrack_fill = pts(|i| 0.2 + i * 0.003);
        s.derived.series.kube_proxy_sync_p99_seconds = pts(|i| 0.05 + (i * 0.7).sin().abs());
        s.derived.series.stale_entries = pts(|i| (i * 7.0) % 40.0);
        let html = render(&doc(&s), s.collected_at);
        assert_eq!(html.matches("<polyline class=\"series\"").count(), 3);
        assert!(html.len() < 64 * 1024, "{} bytes", html.len());
        eprintln!("page with three full series: {} bytes", html.len());
    }
}
