//! The iptables probe, in one folder: here its facts ([`IptablesFacts`]) and the counts
//! both readers fill ([`SaveCounts`], [`classify_chain`]), the backend decision and the
//! save runs (the fixture node's way); in [`save`], the `iptables-save` parser; in [`node`], the probe's entry ([`probe`]) and the node's own read over netlink;
//! in [`delta`], the counts carried by the change watcher's notifications.

pub mod delta;
mod memory;
pub mod node;
pub mod save;
pub use memory::Memory;
pub use node::probe;
pub use save::*;

use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// The counts of one save or netlink count: what the text parser (save.rs) and the
// netlink reader (node.rs) both fill.

/// The builtin chains of each iptables table. iptables-nft-save prints them
/// for every table that exists, created in the kernel or not.
pub const BUILTIN_CHAINS: &[(&str, &[&str])] = &[
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
    ("raw", &["PREROUTING", "OUTPUT"]),
    ("security", &["INPUT", "FORWARD", "OUTPUT"]),
];

/// Counts for one table (`*filter`, `*nat`, `*mangle`...).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TableCounts {
    /// Chains declared in the table (`:NAME ...` lines), builtin and user chains, in chains.
    pub chains: u64,
    /// Rules in the table (`-A ...` lines), in rules.
    pub rules: u64,
}

/// Chains per kube-proxy (iptables mode) chain family, counted per declaration.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KubeChains {
    /// `KUBE-SVC-*` chains (a service port's cluster-policy chain), in chains.
    pub svc: u64,
    /// `KUBE-SEP-*` chains (one endpoint of a service port), in chains.
    pub sep: u64,
    /// `KUBE-EXT-*` chains (external traffic of a NodePort/LoadBalancer/externalIP service port), in chains.
    pub ext: u64,
    /// `KUBE-FW-*` chains (LoadBalancer source ranges), in chains.
    pub fw: u64,
    /// `KUBE-SVL-*` chains (local-policy chain, `externalTrafficPolicy: Local`), in chains.
    pub svl: u64,
}

/// Everything [`SaveParser`] learned from one iptables-save output.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SaveCounts {
    /// Counts per table, keyed by table name (`filter`, `nat`, `mangle`, `raw`, `security`).
    pub tables: BTreeMap<String, TableCounts>,
    /// kube-proxy's per-service chains, counted per declaration in whichever table they appear.
    pub kube: KubeChains,
    /// `KUBE-IPTABLES-HINT` is declared in the `mangle` table (kubelet/kube-proxy's backend hint), true/false.
    pub hint_chain: bool,
    /// `KUBE-KUBELET-CANARY` is declared in at least one table, true/false.
    pub kubelet_canary: bool,
    /// `KUBE-PROXY-CANARY` is declared in at least one table, true/false.
    pub proxy_canary: bool,
    /// Rules that sit in a `KUBE-*` chain or jump/goto a `KUBE-*` chain, in rules.
    pub kube_rules: u64,
    /// Bytes of output parsed, counting one newline per line (0 when counted over netlink), in bytes.
    pub bytes: u64,
    /// Lines of output parsed (0 when counted over netlink), in lines.
    pub lines: u64,
    /// A `# Warning: iptables-legacy tables present ...` comment was seen, true/false.
    pub legacy_warning: bool,
    /// The output had no table at all but had the legacy warning: this backend is
    /// empty and the rules live in the legacy backend, true/false.
    pub empty_with_warning: bool,
}

/// What a chain's name makes it, for the counts: one of kube-proxy's chain families, the
/// hint (in `mangle` only), a canary, or none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainKind {
    Svc,
    Sep,
    Ext,
    Fw,
    Svl,
    Hint,
    KubeletCanary,
    ProxyCanary,
    Other,
}

/// The kind of chain `name` is in `table`.
pub fn chain_kind(table: &str, name: &str) -> ChainKind {
    if name.starts_with("KUBE-SVC-") {
        ChainKind::Svc
    } else if name.starts_with("KUBE-SEP-") {
        ChainKind::Sep
    } else if name.starts_with("KUBE-EXT-") {
        ChainKind::Ext
    } else if name.starts_with("KUBE-FW-") {
        ChainKind::Fw
    } else if name.starts_with("KUBE-SVL-") {
        ChainKind::Svl
    } else if name == "KUBE-IPTABLES-HINT" && table == "mangle" {
        ChainKind::Hint
    } else if name == "KUBE-KUBELET-CANARY" {
        ChainKind::KubeletCanary
    } else if name == "KUBE-PROXY-CANARY" {
        ChainKind::ProxyCanary
    } else {
        ChainKind::Other
    }
}

impl KubeChains {
    /// The counter of `kind`'s family (None for the hint, the canaries and other chains).
    pub fn of(&mut self, kind: ChainKind) -> Option<&mut u64> {
        match kind {
            ChainKind::Svc => Some(&mut self.svc),
            ChainKind::Sep => Some(&mut self.sep),
            ChainKind::Ext => Some(&mut self.ext),
            ChainKind::Fw => Some(&mut self.fw),
            ChainKind::Svl => Some(&mut self.svl),
            _ => None,
        }
    }
}

/// Counts a declared chain into kube-proxy's chain families, the hint and the
/// canaries: shared by the text parser and the netlink reader.
pub fn classify_chain(counts: &mut SaveCounts, table: &str, name: &str) {
    let kind = chain_kind(table, name);
    if let Some(n) = counts.kube.of(kind) {
        *n += 1;
    }
    match kind {
        ChainKind::Hint => counts.hint_chain = true,
        ChainKind::KubeletCanary => counts.kubelet_canary = true,
        ChainKind::ProxyCanary => counts.proxy_canary = true,
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// The facts, the backend decision and the save runs. The probe's entry is in
// node.rs (which reads this file, never the reverse): where the host
// has a kernel to ask (`Host::kernel()`: the node itself, or a fixture node's
// netlink recording) the nft backend is read over netlink, the legacy backend with iptables-legacy-save when it has tables,
// and iptables-nft-save runs only as a cross-check on its own interval. On a
// fixture host root, every save command found on PATH runs
// ([`read_with_saves`]), as it always did.

/// One backend and family's counts: a save run, or a netlink count.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SaveRun {
    /// `nft`, `legacy`, or `default` when only a plain `iptables-save` exists.
    pub backend: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// The command run, or `netlink` when the counts were read from the kernel.
    pub command: String,
    /// Wall time of the save, or of the netlink count (0 when reused), in seconds.
    pub duration_seconds: f64,
    pub counts: SaveCounts,
    /// For a netlink count: at which generation and when it was made, and whether reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netlink: Option<super::counted::NetlinkCount>,
}

impl SaveRun {
    /// A run of an iptables-save command (whose wall time is kube-proxy's cost too).
    pub fn is_save(&self) -> bool {
        self.netlink.is_none()
    }
}

/// One count that iptables-nft-save and netlink disagree on.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CountMismatch {
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// What was counted, e.g. `nat rules`, `filter chains`, `KUBE-SVC chains`, `KUBE-* rules`.
    pub what: String,
    /// The netlink count.
    pub netlink: u64,
    /// What iptables-nft-save showed.
    pub save: u64,
}

/// The latest iptables-nft-save cross-check (`--iptables.save-interval`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CrossCheck {
    /// Unix time the cross-check ran, in seconds (it runs on its own interval,
    /// so it may be older than this reading).
    #[serde(rename = "timestamp_seconds", alias = "at_seconds")]
    pub at_seconds: f64,
    /// The iptables-nft-save / ip6tables-nft-save runs: wall time and counts.
    pub saves: Vec<SaveRun>,
    /// Generation of each compared family (`ipv4`, `ipv6`): the save's counts
    /// are compared with the netlink counts of that same generation.
    pub generations: std::collections::BTreeMap<String, u32>,
    /// Counts that differ; empty when the two agree.
    pub mismatches: Vec<CountMismatch>,
    /// Families not compared, and why (the ruleset changed during the save...).
    pub not_compared: Vec<String>,
    /// Why a save failed (its error), when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `facts.iptables` holds.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IptablesFacts {
    pub saves: Vec<SaveRun>,
    /// The backend kube-proxy's rules are in (`nft`, `legacy`, `default`), or `none`
    /// when no backend carries kube-proxy rules.
    pub backend_in_use: String,
    /// How `backend_in_use` was decided, as kubernetes-sigs/iptables-wrappers does.
    pub backend_reason: String,
    /// Backends that carry kube-proxy (`KUBE-*`) rules; two means split-brain.
    pub backends_with_kube_rules: Vec<String>,
    /// Save commands on PATH that were not run, each with why (no unit): the
    /// nft ones while `nf_tables` is not loaded, since running them would load it.
    #[serde(default)]
    pub not_run: Vec<String>,
    /// The latest iptables-nft-save cross-check of the netlink counts, if one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_check: Option<CrossCheck>,
    /// kube-proxy's reject and drop rules with their counters (None: not read, e.g. a fixture host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_counters: Option<super::rule_counters::RuleCounters>,
    /// What the legacy saves decode to (kube-proxy's service table, the service_traffic
    /// targets' ports, the source NAT rules), for the probes that read this one (the probe
    /// table's `reads`). Not in `/snapshot`: the rules are the kernel's, the counts are above.
    #[serde(skip)]
    pub legacy: super::service_endpoints::iptables::LegacySaves,
}

impl IptablesFacts {
    pub fn is_mismatch(&self) -> bool {
        self.backends_with_kube_rules.len() > 1
    }

    /// Every save command run (legacy saves and the latest cross-check's), not netlink counts.
    pub fn save_runs(&self) -> impl Iterator<Item = &SaveRun> {
        self.saves
            .iter()
            .filter(|r| r.is_save())
            .chain(self.cross_check.iter().flat_map(|c| c.saves.iter()))
    }
}

/// (backend, family, command): backend-specific commands first, then the plain fallback.
pub(crate) const COMMANDS: &[(&str, &str, &str)] = &[
    ("nft", "ipv4", "iptables-nft-save"),
    ("legacy", "ipv4", "iptables-legacy-save"),
    ("nft", "ipv6", "ip6tables-nft-save"),
    ("legacy", "ipv6", "ip6tables-legacy-save"),
];
const FALLBACK: &[(&str, &str, &str)] = &[
    ("default", "ipv4", "iptables-save"),
    ("default", "ipv6", "ip6tables-save"),
];

/// Decides the backend in use the way kubernetes-sigs/iptables-wrappers does:
/// a backend whose mangle table has KUBE-IPTABLES-HINT (or KUBE-KUBELET-CANARY)
/// wins, nft first; otherwise the backend with more rules; none without rules.
pub fn detect_backend(saves: &[SaveRun]) -> (String, String, Vec<String>) {
    let mut backends: Vec<String> = saves.iter().map(|s| s.backend.clone()).collect();
    backends.sort();
    backends.dedup();
    let with_kube: Vec<String> = backends
        .iter()
        .filter(|b| saves.iter().any(|s| &s.backend == *b && s.counts.kube_rules > 0))
        .cloned()
        .collect();
    let ordered = ["nft", "legacy", "default"];
    for b in ordered {
        if saves
            .iter()
            .any(|s| s.backend == b && (s.counts.hint_chain || s.counts.kubelet_canary))
        {
            return (
                b.to_string(),
                format!("KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY found in the {b} backend"),
                with_kube,
            );
        }
    }
    let rules = |b: &str| -> u64 {
        saves
            .iter()
            .filter(|s| s.backend == b)
            .flat_map(|s| s.counts.tables.values())
            .map(|t| t.rules)
            .sum()
    };
    let best = ordered
        .iter()
        .copied()
        .map(|b| (b, rules(b)))
        .max_by_key(|&(b, n)| (n, b == "nft"));
    match best {
        Some((b, n)) if n > 0 => (
            b.to_string(),
            format!("no hint chain; the {b} backend has the most rules ({n})"),
            with_kube,
        ),
        _ => ("none".to_string(), "no backend has any rule".to_string(), with_kube),
    }
}

/// Runs one save command and streams its output through the parser.
pub(crate) async fn run_save(
    ctx: &super::ProbeContext,
    run: (&str, &str, &str),
    deadline: super::Deadline,
) -> Result<SaveRun, super::ProbeError> {
    run_save_with(ctx, (run.0, run.1, run.2, &[]), deadline, &mut |_| {}).await
}

/// [`run_save`] with `args` (never `-t TABLE`: a legacy save with -t creates that table), each line also to `also`.
pub(crate) async fn run_save_with(
    ctx: &super::ProbeContext,
    (backend, family, command, args): (&str, &str, &str, &[&str]),
    deadline: super::Deadline,
    also: &mut (dyn FnMut(&str) + Send),
) -> Result<SaveRun, super::ProbeError> {
    let spec = crate::exec::CommandSpec::new(command, args)
        .dump()
        .timeout(deadline.remaining())
        .max_output_bytes(ctx.max_output_bytes)
        .permission_hint("needs CAP_NET_ADMIN (and CAP_NET_RAW for the legacy backend)");
    let mut parser = SaveParser::new(command);
    let fin = ctx
        .runner
        .run_lines(&spec, |line| {
            also(line);
            parser.feed_line(line).map_err(|e| e.to_string())
        })
        .await?;
    crate::exec::ExecError::check_status(&spec, &fin)?;
    let mut counts = parser.finish()?;
    // iptables-nft-save >= 1.8.9 prints the legacy warning on stderr.
    if fin.stderr_head.contains(LEGACY_WARNING_PREFIX) {
        counts.legacy_warning = true;
        counts.empty_with_warning = counts.tables.is_empty();
    }
    Ok(SaveRun {
        backend: backend.to_string(),
        family: family.to_string(),
        command: command.to_string(),
        duration_seconds: fin.duration.as_secs_f64(),
        counts,
        netlink: None,
    })
}

/// What one probe run read, before the backend is decided.
pub(crate) enum Read {
    /// The saves or counts, the cross-check when one ran, and the saves not run (with why).
    Present(Vec<SaveRun>, Option<CrossCheck>, Vec<String>),
    Absent(String),
}

/// A fixture host root: runs every save command found on PATH. Each save
/// gets what is left of the deadline.
pub(crate) async fn read_with_saves(
    ctx: &super::ProbeContext,
    deadline: super::Deadline,
) -> Result<Read, super::ProbeError> {
    let mut chosen: Vec<(&str, &str, &str)> = COMMANDS.iter().copied().filter(|c| crate::exec::on_path(c.2)).collect();
    if chosen.is_empty() {
        chosen = FALLBACK.iter().copied().filter(|c| crate::exec::on_path(c.2)).collect();
    }
    if chosen.is_empty() {
        return Ok(Read::Absent("no iptables-save command on PATH".into()));
    }
    // iptables-nft-save asks nf_tables over nfnetlink: with nf_tables not
    // loaded the kernel would load both to answer. No nft rule can exist then,
    // so the nft saves are not run. (A plain `iptables-save` fallback is run
    // as it is: which backend it is cannot be told without running it.)
    let host = ctx.host.clone();
    let nft_would_load = super::blocking(super::ProbeName::Iptables, move || {
        Ok(super::modules::tool_would_load(&host, "nf_tables"))
    })
    .await?;
    let mut not_run = Vec::new();
    if nft_would_load {
        chosen.retain(|(backend, _, command)| {
            let keep = *backend != "nft";
            if !keep {
                not_run.push(format!(
                    "{command}: nf_tables is not loaded, so the nft backend has no rules (running it would load the module)"
                ));
            }
            keep
        });
        if chosen.is_empty() {
            return Ok(Read::Absent(format!(
                "only nft-backend saves on PATH and nf_tables is not loaded; not run: {}",
                not_run.join("; ")
            )));
        }
    }
    let mut saves = Vec::new();
    for c in chosen {
        saves.push(run_save(ctx, c, deadline).await?);
    }
    Ok(Read::Present(saves, None, not_run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::ParseError;
    use std::collections::BTreeMap;

    fn parse(text: &str) -> Result<SaveCounts, ParseError> {
        SaveParser::parse_str("iptables-save", text)
    }

    /// Reads a file of tests/fixtures/iptables/ (relative to the crate root).
    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/iptables/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    const SMALL: &str = "\
# Generated by iptables-nft-save v1.8.9 (nf_tables) on Sun Nov 29 22:36:20 2026
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
# Completed on Sun Nov 29 22:36:20 2026
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"-j KUBE-X in a comment\" -j ACCEPT
-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -j KUBE-SEP-SXIVWICOYRO3J4NJ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -p tcp -m comment --comment ns1/svc1:p80 -m tcp -j DNAT --to-destination 10.180.0.1:80
COMMIT
";

    #[test]
    fn small_sample() {
        let c = parse(SMALL).unwrap();
        assert_eq!(c.tables["mangle"], TableCounts { chains: 8, rules: 0 });
        assert_eq!(c.tables["nat"], TableCounts { chains: 7, rules: 5 });
        assert_eq!(
            c.kube,
            KubeChains {
                svc: 1,
                sep: 1,
                ..Default::default()
            }
        );
        assert!(c.hint_chain && c.kubelet_canary && c.proxy_canary);
        assert_eq!(c.kube_rules, 4, "the OUTPUT rule only mentions -j KUBE- in its comment");
        assert_eq!(c.bytes, SMALL.len() as u64);
        assert_eq!(c.lines, SMALL.lines().count() as u64);
        assert!(!c.legacy_warning && !c.empty_with_warning);
    }

    #[test]
    fn streaming_equals_whole() {
        let mut p = SaveParser::new("x");
        for l in SMALL.split('\n').filter(|l| !l.is_empty()) {
            p.feed_line(l).unwrap();
        }
        assert_eq!(p.finish().unwrap(), parse(SMALL).unwrap());
    }

    #[test]
    fn hint_outside_mangle_does_not_count() {
        let c = parse("*nat\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n").unwrap();
        assert!(!c.hint_chain);
    }

    #[test]
    fn empty_and_comment_only_outputs_are_valid() {
        let c = parse("").unwrap();
        assert!(c.tables.is_empty() && !c.empty_with_warning);
        let c = parse("# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n").unwrap();
        assert!(c.tables.is_empty() && c.legacy_warning && c.empty_with_warning);
        assert_eq!(c.kube, KubeChains::default());
    }

    #[test]
    fn incompatible_table_is_an_error_naming_it() {
        // iptables-nft-save 1.8.9+ on a table holding rules written with nft.
        let e = err("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n# Table `nat' is incompatible, use 'nft' tool.\n");
        assert_eq!(e.line, 4);
        assert!(
            e.message.contains("\"nat\"") && e.message.contains("incompatible"),
            "{e}"
        );
    }

    #[test]
    fn counters_prefix_and_crlf() {
        let c = parse("*filter\r\n:INPUT ACCEPT [12:3456]\r\n[1:60] -A INPUT -j KUBE-FIREWALL\r\n\r\nCOMMIT\r\n");
        let c = c.unwrap();
        assert_eq!(c.tables["filter"], TableCounts { chains: 1, rules: 1 });
        assert_eq!(c.kube_rules, 1);
    }

    fn err(text: &str) -> ParseError {
        parse(text).expect_err("should fail")
    }

    #[test]
    fn truncated_save_is_an_error() {
        let e = err("# Generated by x\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("no COMMIT"), "{e}");
    }

    #[test]
    fn garbage_line_is_an_error() {
        let e = err("*filter\n:INPUT ACCEPT [0:0]\nhello world\nCOMMIT\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("hello world"), "{e}");
        assert_eq!(err("*filter\n-I INPUT -j ACCEPT\nCOMMIT\n").line, 2);
    }

    #[test]
    fn rule_or_chain_outside_table_is_an_error() {
        let e = err("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n-A INPUT -j ACCEPT\n");
        assert_eq!(e.line, 4);
        assert!(e.message.contains("outside a table"), "{e}");
        assert_eq!(err(":INPUT ACCEPT [0:0]\n").line, 1);
        assert_eq!(err("COMMIT\n").line, 1);
    }

    #[test]
    fn unknown_chain_is_an_error() {
        let e = err("*nat\n:PREROUTING ACCEPT [0:0]\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("KUBE-SERVICES"), "{e}");
        // Declared in another table does not count.
        let e = err("*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n");
        assert_eq!(e.line, 5);
    }

    #[test]
    fn duplicated_or_nested_table_is_an_error() {
        let e = err("*nat\nCOMMIT\n*filter\nCOMMIT\n*nat\nCOMMIT\n");
        assert_eq!(e.line, 5);
        assert!(e.message.contains("twice"), "{e}");
        let e = err("*nat\n*filter\nCOMMIT\n");
        assert_eq!(e.line, 2);
    }

    #[test]
    fn bad_declarations_are_errors() {
        assert_eq!(err("*nat\n:X - [a:0]\nCOMMIT\n").line, 2);
        assert_eq!(err("*nat\n:X - \nCOMMIT\n").line, 2);
        assert_eq!(err("*nat\n:X MAYBE [0:0]\nCOMMIT\n").line, 2);
        assert_eq!(err("*nat\n:X - [0:0] extra\nCOMMIT\n").line, 2);
        assert_eq!(err("*bad table\nCOMMIT\n").line, 1);
    }

    #[test]
    fn huge_line_is_an_error() {
        let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m comment --comment \"");
        text.push_str(&"x".repeat(MAX_LINE_BYTES));
        text.push_str("\" -j ACCEPT\nCOMMIT\n");
        let e = err(&text);
        assert_eq!(e.line, 3);
        assert!(e.to_string().len() < 300, "error message must stay short");
    }

    #[test]
    fn extra_blank_after_dash_a_is_not_a_panic() {
        // Found with fuzz/iptables_save: `-A` followed by more than one blank (here
        // U+3000 or two spaces) before a multi-byte chain name sliced inside a character.
        let c = parse("*t\n:X - [0:0]\n-A \u{3000}X -j KUBE-Y\nCOMMIT\n").unwrap();
        assert_eq!((c.tables["t"].rules, c.kube_rules), (1, 1));
        let c = parse("*t\n:éé - [0:0]\n-A  éé -j ACCEPT\nCOMMIT\n").unwrap();
        assert_eq!((c.tables["t"].rules, c.kube_rules), (1, 0));
    }

    // Captured with the real tools in a throwaway network namespace: see
    // tests/fixtures/iptables/README.md.

    #[test]
    fn real_nft_save_sample() {
        let c = parse(&fixture("kube-100x2-iptables-nft-save.txt")).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&fixture("kube-100x2-expected.json")).unwrap();
        check_expected(&c, &expected);
    }

    #[test]
    fn real_legacy_save_sample() {
        let c = parse(&fixture("kube-100x2-iptables-legacy-save.txt")).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&fixture("kube-100x2-expected.json")).unwrap();
        check_expected(&c, &expected);
    }

    #[test]
    fn real_nft_save_on_legacy_only_host() {
        let c = parse(&fixture("legacy-only-host-iptables-nft-save-stdout-stderr.txt")).unwrap();
        assert!(c.tables.is_empty());
        assert!(c.empty_with_warning);
    }

    #[test]
    fn real_save_without_hint_and_canaries() {
        let c = parse(&fixture("kube-20x1-no-hint-no-canary-iptables-nft-save.txt")).unwrap();
        let expected: serde_json::Value =
            serde_json::from_str(&fixture("kube-20x1-no-hint-no-canary-expected.json")).unwrap();
        check_expected(&c, &expected);
        assert!(!c.hint_chain && !c.kubelet_canary && !c.proxy_canary);
    }

    #[test]
    fn real_truncated_save_is_an_error() {
        let text = fixture("kube-100x2-iptables-nft-save.txt");
        let cut: String = text.lines().take(150).map(|l| format!("{l}\n")).collect();
        assert!(parse(&cut).unwrap_err().message.contains("no COMMIT"));
    }

    /// Compares with the JSON written by tests/tools/gen_kube_rules.py --expected.
    pub(crate) fn check_expected(c: &SaveCounts, expected: &serde_json::Value) {
        let tables: BTreeMap<String, TableCounts> = serde_json::from_value(expected["tables"].clone()).unwrap();
        assert_eq!(c.tables, tables);
        let kube: KubeChains = serde_json::from_value(expected["kube"].clone()).unwrap();
        assert_eq!(c.kube, kube);
        assert_eq!(c.hint_chain, expected["hint_chain"].as_bool().unwrap());
        assert_eq!(c.kubelet_canary, expected["kubelet_canary"].as_bool().unwrap());
        assert_eq!(c.proxy_canary, expected["proxy_canary"].as_bool().unwrap());
        assert_eq!(c.kube_rules, expected["kube_rules"].as_u64().unwrap());
    }
}
