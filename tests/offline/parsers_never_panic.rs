//! Property tests of the probes' parsers:
//!
//! 1. arbitrary bytes (lossily decoded, as the agent decodes files and command
//!    output) never panic any parser;
//! 2. arbitrary mixes of real fixture lines (some of them cut or spliced) never
//!    panic any parser;
//! 3. generated kube-proxy-like `iptables-save` texts (N services × M endpoints,
//!    random tables, user chains, counters, comments, CRLF) are counted exactly:
//!    the expected counts are tallied by the generator as it writes each line,
//!    never by a parser;
//! 4. every input under tests/fixtures/fuzz-regressions/ (crashes the fuzzers
//!    found) goes through every parser without panicking.
//!
//! Failing cases are not persisted to files (the source tree stays clean):
//! proptest prints the minimal failing input, which belongs in a unit test or
//! in tests/fixtures/fuzz-regressions/.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::Config;
use proxywatch::probe::iptables::{KubeChains, SaveParser, TableCounts};
use proxywatch::probe::kube_proxy::{healthz, metrics, proxy_mode};
use proxywatch::probe::{conntrack, ipvs, kube_proxy, modules, node, sysctl};
use proxywatch::promtext;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Feeds `text` to SaveParser the way the exec runner does: split on `\n`,
/// no empty last line, stop at the first refused line.
fn feed_save(text: &str) {
    let mut p = SaveParser::new("t");
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    for l in lines {
        if p.feed_line(l).is_err() {
            return;
        }
    }
    let _ = p.finish();
    // The legacy service-table decoder reads the same lines (both families).
    for family in [
        proxywatch::netlink::nft::Family::Ip,
        proxywatch::netlink::nft::Family::Ip6,
    ] {
        let mut t = proxywatch::probe::service_endpoints::iptables::SaveText::new(family);
        if text.split('\n').all(|l| t.feed_line(l).is_ok()) {
            let _ = t.finish(None);
        }
    }
    // And the legacy source NAT rules (SNAT facts).
    for family in [
        proxywatch::netlink::nft::Family::Ip,
        proxywatch::netlink::nft::Family::Ip6,
    ] {
        let mut t = proxywatch::probe::snat::LegacySnatText::new(family);
        text.split('\n').for_each(|l| t.feed_line(l));
        let _ = t.finish();
    }
}

/// Runs every parser the probes use on `text`; results are ignored, only panics matter.
fn every_parser(text: &str) {
    let _ = conntrack::parse_stat("t", text);
    let _ = modules::parse_proc_modules("t", text);
    let _ = modules::parse_modules_builtin("t", text);
    let _ = sysctl::parse_value("t", text);
    let _ = proxywatch::probe::rp_filter::parse_route("t", text);
    let _ = proxywatch::probe::rp_filter::parse_netstat("t", text, "TcpExt");
    let lock = proxywatch::probe::xtables_lock::FileId {
        major: 0xfe,
        minor: 0,
        inode: 10059897,
    };
    let _ = proxywatch::probe::xtables_lock::parse_locks("t", text, lock);
    let _ = proxywatch::probe::node_ports::parse_port_range("t", text);
    let _ = proxywatch::probe::node_ports::parse_reserved_ports("t", text);
    let _ = proxywatch::probe::neighbour_tables::decode_table(text.as_bytes());
    let _ = node::parse_cpu_list("t", text);
    feed_save(text);
    let _ = SaveParser::parse_str("t", text);
    let list = ipvs::ipvsadm::parse_ipvsadm_list("t", text);
    if let (Ok(mut services), Ok(stats)) = (list, ipvs::ipvsadm::parse_ipvsadm_stats("t", text)) {
        let _ = ipvs::merge_stats(&mut services, stats);
    }
    let _ = ipvs::proc::parse_proc_ip_vs("t", text);
    let _ = ipvs::proc::parse_proc_ip_vs_with_hz("t", text, 250);
    let _ = ipvs::proc::parse_proc_ip_vs_with_hz("t", text, 0);
    let _ = ipvs::proc::parse_proc_ip_vs_stats("t", text);
    let _ = metrics::extract("t", text);
    if let Ok(expo) = promtext::parse_exposition("t", text) {
        for f in &expo.families {
            if let Ok(Some(h)) = promtext::histogram(&expo, &f.name) {
                let _ = (h.quantile(0.99), h.mean(), promtext::delta(&h, &h));
            }
        }
    }
    if let Ok(h) = healthz::parse_healthz(text) {
        let _ = h.staleness_seconds();
    }
    let _ = proxy_mode::parse_proxy_mode(text);
    let _ = kube_proxy::parse_btime("t", text);
    let _ = kube_proxy::parse_cpu_max(text);
    for line in kube_proxy::cgroup::parse_proc_cgroup(text) {
        let _ = kube_proxy::cgroup::split_relative(&line.path);
    }
    let _ = kube_proxy::cgroup::parse_limit(text);
    let _ = kube_proxy::cgroup::parse_cpu_stat(text);
    let _ = proxywatch::netlink::replay::parse(text);
    let _ = proxywatch::expose::npd::parse_findings(text);
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// Distinct lines of every fixture file (the probes' real inputs), read once.
fn fixture_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| {
        let mut files = Vec::new();
        collect_files(&fixtures(), &mut files);
        files.sort();
        let mut lines: Vec<String> = files
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .flat_map(|b| {
                String::from_utf8_lossy(&b)
                    .split('\n')
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines.dedup();
        assert!(lines.len() > 1000, "fixtures have {} distinct lines", lines.len());
        lines
    })
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// One line of a mix: a fixture line, possibly cut at a byte offset or spliced with noise.
#[derive(Debug, Clone)]
enum Piece {
    Line(usize),
    Cut(usize, usize),
    Noise(usize, String),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        6 => any::<usize>().prop_map(Piece::Line),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(l, at)| Piece::Cut(l, at)),
        1 => (any::<usize>(), "[ \t\r#:*{}\\[\\]\"=,.0-9a-zA-Z\u{e9}\u{2028}\u{3000}-]{0,12}")
            .prop_map(|(l, s)| Piece::Noise(l, s)),
    ]
}

fn render(pieces: &[Piece]) -> String {
    let pool = fixture_lines();
    let mut out = String::new();
    for p in pieces {
        match p {
            Piece::Line(i) => out.push_str(&pool[i % pool.len()]),
            Piece::Cut(i, at) => {
                let l = &pool[i % pool.len()];
                // Cut on bytes, as a short read would, then decode lossily like the agent.
                let b = l.as_bytes();
                let at = if b.is_empty() { 0 } else { at % b.len() };
                out.push_str(&String::from_utf8_lossy(&b[..at]));
            }
            Piece::Noise(i, s) => {
                let l = &pool[i % pool.len()];
                let mid = l.char_indices().map(|(k, _)| k).nth(l.chars().count() / 2).unwrap_or(0);
                out.push_str(&l[..mid]);
                out.push_str(s);
                out.push_str(&l[mid..]);
            }
        }
        out.push('\n');
    }
    out
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        every_parser(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        every_parser(&text);
    }
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn fixture_line_mixes_never_panic(pieces in proptest::collection::vec(piece(), 0..60)) {
        every_parser(&render(&pieces));
    }
}

// ---------------------------------------------------------------------------
// Generated iptables-save texts, counted by the generator.

/// One service port, as kube-proxy (iptables mode) programs it.
#[derive(Debug, Clone)]
struct Service {
    endpoints: usize,
    external: bool,
    firewall: bool,
    local: bool,
}

#[derive(Debug, Clone)]
struct Plan {
    services: Vec<Service>,
    /// Tables in output order (indexes into TABLES, distinct).
    tables: Vec<usize>,
    /// User (non-KUBE) chains per table, and rules in each.
    user_chains: Vec<(usize, usize)>,
    hint: bool,
    kubelet_canary: bool,
    proxy_canary: bool,
    counters: bool,
    crlf: bool,
    comments: bool,
    legacy_warning: bool,
    /// Declarations in reverse order (iptables-save sorts them, the parser must not care).
    reverse_declarations: bool,
}

const TABLES: &[(&str, &[&str])] = &[
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
    ("raw", &["PREROUTING", "OUTPUT"]),
    ("security", &["INPUT", "FORWARD", "OUTPUT"]),
];

fn plan() -> impl Strategy<Value = Plan> {
    let service =
        (0usize..5, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(endpoints, external, firewall, local)| {
            Service {
                endpoints,
                external,
                firewall,
                local,
            }
        });
    (
        proptest::collection::vec(service, 0..40),
        Just((0..TABLES.len()).collect::<Vec<_>>()).prop_shuffle(),
        0..=TABLES.len(),
        proptest::collection::vec((0usize..3, 0usize..4), TABLES.len()),
        proptest::collection::vec(any::<bool>(), 8),
    )
        .prop_map(|(services, order, keep, user_chains, flags)| Plan {
            services,
            tables: order.into_iter().take(keep).collect(),
            user_chains,
            hint: flags[0],
            kubelet_canary: flags[1],
            proxy_canary: flags[2],
            counters: flags[3],
            crlf: flags[4],
            comments: flags[5],
            legacy_warning: flags[6],
            reverse_declarations: flags[7],
        })
}

/// What the parser must report for a generated text.
#[derive(Debug, Default)]
struct Expected {
    tables: BTreeMap<String, TableCounts>,
    kube: KubeChains,
    kube_rules: u64,
    hint_chain: bool,
    kubelet_canary: bool,
    proxy_canary: bool,
    lines: u64,
}

/// Builds one table: declarations first (as iptables-save prints them), then rules.
struct TableWriter {
    decls: Vec<String>,
    rules: Vec<String>,
    counts: TableCounts,
    kube_rules: u64,
}

impl TableWriter {
    fn new() -> Self {
        TableWriter {
            decls: Vec::new(),
            rules: Vec::new(),
            counts: TableCounts::default(),
            kube_rules: 0,
        }
    }

    fn chain(&mut self, name: &str, policy: &str, n: usize) {
        self.decls.push(format!(":{name} {policy} [{}:{}]", n * 7, n * 420));
        self.counts.chains += 1;
    }

    /// `kube`: whether this rule is in a KUBE-* chain or jumps to one (the generator knows).
    fn rule(&mut self, text: String, kube: bool) {
        self.rules.push(text);
        self.counts.rules += 1;
        if kube {
            self.kube_rules += 1;
        }
    }
}

fn svc_chain(prefix: &str, i: usize) -> String {
    // kube-proxy's names are KUBE-XXX- plus 16 base32 characters.
    format!("{prefix}{i:016X}")
}

fn generate(plan: &Plan) -> (String, Expected) {
    let mut exp = Expected::default();
    let mut out: Vec<String> = Vec::new();
    if plan.comments {
        out.push("# Generated by iptables-nft-save v1.8.9 (nf_tables) on Sun Nov 29 22:36:20 2026".into());
    }
    if plan.legacy_warning {
        out.push("# Warning: iptables-legacy tables present, use iptables-legacy-save to see them".into());
    }
    for &t in &plan.tables {
        let (table, builtins) = TABLES[t];
        let mut w = TableWriter::new();
        for (k, b) in builtins.iter().enumerate() {
            w.chain(b, if k % 2 == 0 { "ACCEPT" } else { "DROP" }, k);
        }
        let (users, rules_each) = plan.user_chains[t];
        for u in 0..users {
            let name = format!("CUSTOM-{table}-{u}");
            w.chain(&name, "-", u);
            for r in 0..rules_each {
                w.rule(format!("-A {name} -s 192.0.2.{r}/32 -j RETURN"), false);
            }
            w.rule(format!("-A {} -j {name}", builtins[0]), false);
        }
        // A comment that mentions a KUBE- jump is not a jump.
        w.rule(
            format!(
                "-A {} -m comment --comment \"-j KUBE-NOT-A-JUMP \\\"quoted\\\"\" -j ACCEPT",
                builtins[builtins.len() - 1]
            ),
            false,
        );
        if table == "mangle" && plan.hint {
            w.chain("KUBE-IPTABLES-HINT", "-", 0);
            exp.hint_chain = true;
        }
        if matches!(table, "mangle" | "nat" | "filter") {
            if plan.kubelet_canary {
                w.chain("KUBE-KUBELET-CANARY", "-", 0);
                exp.kubelet_canary = true;
            }
            if plan.proxy_canary {
                w.chain("KUBE-PROXY-CANARY", "-", 0);
                exp.proxy_canary = true;
            }
        }
        if table == "filter" {
            w.chain("KUBE-FORWARD", "-", 0);
            w.rule(
                "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD".into(),
                true,
            );
            w.rule("-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP".into(), true);
        }
        if table == "nat" {
            for c in ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-MARK-MASQ", "KUBE-POSTROUTING"] {
                w.chain(c, "-", 0);
            }
            w.rule(
                "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES".into(),
                true,
            );
            w.rule(
                "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES".into(),
                true,
            );
            w.rule(
                "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING".into(),
                true,
            );
            w.rule("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000".into(), true);
            w.rule("-A KUBE-POSTROUTING -j MASQUERADE --random-fully".into(), true);
            w.rule(
                "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS".into(),
                true,
            );
            for (i, s) in plan.services.iter().enumerate() {
                let svc = svc_chain("KUBE-SVC-", i);
                let comment = format!("ns{}/svc{i}:p80", i % 3);
                w.chain(&svc, "-", i);
                exp.kube.svc += 1;
                w.rule(
                    format!(
                        "-A KUBE-SERVICES -d 10.96.{}.{}/32 -p tcp -m comment --comment \"{comment} cluster IP\" -m tcp --dport 80 -j {svc}",
                        i / 250,
                        i % 250
                    ),
                    true,
                );
                for e in 0..s.endpoints {
                    let sep = svc_chain("KUBE-SEP-", i * 10 + e);
                    w.chain(&sep, "-", e);
                    exp.kube.sep += 1;
                    let left = s.endpoints - e;
                    let jump = if left > 1 {
                        format!(
                            "-m statistic --mode random --probability {:.11} -j {sep}",
                            1.0 / left as f64
                        )
                    } else {
                        format!("-j {sep}")
                    };
                    w.rule(
                        format!("-A {svc} -m comment --comment \"{comment} -> 10.244.{e}.{i}:80\" {jump}"),
                        true,
                    );
                    w.rule(
                        format!(
                            "-A {sep} -s 10.244.{e}.{}/32 -m comment --comment {comment} -j KUBE-MARK-MASQ",
                            i % 250
                        ),
                        true,
                    );
                    w.rule(
                        format!("-A {sep} -p tcp -m comment --comment {comment} -m tcp -j DNAT --to-destination 10.244.{e}.{}:80", i % 250),
                        true,
                    );
                }
                if s.external {
                    let ext = svc_chain("KUBE-EXT-", i);
                    w.chain(&ext, "-", i);
                    exp.kube.ext += 1;
                    w.rule(
                        format!(
                            "-A KUBE-NODEPORTS -p tcp -m comment --comment {comment} -m tcp --dport {} -j {ext}",
                            30000 + i
                        ),
                        true,
                    );
                    w.rule(format!("-A {ext} -m comment --comment \"masquerade traffic for {comment} external destinations\" -j KUBE-MARK-MASQ"), true);
                    w.rule(format!("-A {ext} -j {svc}"), true);
                }
                if s.firewall {
                    let fw = svc_chain("KUBE-FW-", i);
                    w.chain(&fw, "-", i);
                    exp.kube.fw += 1;
                    w.rule(
                        format!("-A {fw} -m comment --comment \"{comment} loadbalancer IP\" -j DROP"),
                        true,
                    );
                }
                if s.local {
                    let svl = svc_chain("KUBE-SVL-", i);
                    w.chain(&svl, "-", i);
                    exp.kube.svl += 1;
                    w.rule(
                        format!("-A {svl} -m comment --comment \"{comment} has no local endpoints\" -j RETURN"),
                        true,
                    );
                }
            }
        }
        out.push(format!("*{table}"));
        if plan.reverse_declarations {
            w.decls.reverse();
        }
        out.extend(w.decls);
        for (k, r) in w.rules.into_iter().enumerate() {
            if plan.counters {
                out.push(format!("[{}:{}] {r}", k * 3, k * 180));
            } else {
                out.push(r);
            }
            if plan.comments && k % 17 == 16 {
                out.push(String::new());
            }
        }
        out.push("COMMIT".into());
        if plan.comments {
            out.push("# Completed on Sun Nov 29 22:36:20 2026".into());
        }
        exp.kube_rules += w.kube_rules;
        exp.tables.insert(table.to_string(), w.counts);
    }
    exp.lines = out.len() as u64;
    let eol = if plan.crlf { "\r\n" } else { "\n" };
    let mut text = String::new();
    for l in &out {
        text.push_str(l);
        text.push_str(eol);
    }
    (text, exp)
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn generated_saves_count_exactly(plan in plan()) {
        let (text, exp) = generate(&plan);
        let mut p = SaveParser::new("generated");
        // As the runner emits them: split on `\n`, no empty last line.
        for line in text.split_terminator('\n') {
            p.feed_line(line).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        }
        let c = p.finish().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&c.tables, &exp.tables);
        prop_assert_eq!(&c.kube, &exp.kube);
        prop_assert_eq!(c.kube_rules, exp.kube_rules);
        prop_assert_eq!(c.hint_chain, exp.hint_chain);
        prop_assert_eq!(c.kubelet_canary, exp.kubelet_canary);
        prop_assert_eq!(c.proxy_canary, exp.proxy_canary);
        prop_assert_eq!(c.lines, exp.lines);
        prop_assert_eq!(c.bytes, text.len() as u64);
        prop_assert_eq!(c.legacy_warning, plan.legacy_warning);
        prop_assert_eq!(c.empty_with_warning, plan.legacy_warning && plan.tables.is_empty());
        // The in-memory path agrees on everything but bytes (it drops `\r`).
        let whole = SaveParser::parse_str("generated", &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&whole.tables, &c.tables);
        prop_assert_eq!(&whole.kube, &c.kube);
        prop_assert_eq!(whole.kube_rules, c.kube_rules);
    }

    /// Cutting a generated save anywhere inside a table never passes as a whole save.
    #[test]
    fn truncated_generated_saves_are_refused(plan in plan(), cut in any::<prop::sample::Index>()) {
        let (text, _) = generate(&plan);
        let lines: Vec<&str> = text.lines().collect();
        let k = cut.index(lines.len() + 1);
        let head = &lines[..k];
        let opened = head.iter().filter(|l| l.starts_with('*')).count();
        let committed = head.iter().filter(|l| l.trim() == "COMMIT").count();
        let r = SaveParser::parse_str("cut", &head.join("\n"));
        if opened > committed {
            prop_assert!(r.is_err(), "a save cut inside a table was accepted");
        } else {
            prop_assert!(r.is_ok(), "{:?}", r.err());
        }
    }
}

/// Sanity check of the generator itself on one hand-computed plan.
#[test]
fn generator_counts_a_known_plan() {
    let plan = Plan {
        services: vec![
            Service {
                endpoints: 2,
                external: true,
                firewall: false,
                local: true,
            },
            Service {
                endpoints: 0,
                external: false,
                firewall: true,
                local: false,
            },
        ],
        tables: vec![1, 0],
        user_chains: vec![(0, 0); TABLES.len()],
        hint: true,
        kubelet_canary: true,
        proxy_canary: false,
        counters: false,
        crlf: false,
        comments: false,
        legacy_warning: false,
        reverse_declarations: false,
    };
    let (text, exp) = generate(&plan);
    // nat: 4 builtins + 4 KUBE-* + canary + (svc0, 2 seps, ext0, svl0) + (svc1, fw1) = 16 chains.
    // rules: 1 comment rule + 6 fixed + svc0 (1 + 2*3 + 3 + 1) + svc1 (1 + 1) = 20.
    assert_eq!(exp.tables["nat"], TableCounts { chains: 16, rules: 20 });
    // filter: 3 builtins + canary + KUBE-FORWARD; comment rule + 2 forward rules.
    assert_eq!(exp.tables["filter"], TableCounts { chains: 5, rules: 3 });
    assert_eq!(exp.kube_rules, 19 + 2);
    let c = SaveParser::parse_str("known", &text).unwrap();
    assert_eq!(c.tables, exp.tables);
    assert_eq!(c.kube_rules, exp.kube_rules);
    assert!(
        !c.hint_chain,
        "the hint counts only in mangle, which this plan leaves out"
    );
}

/// Inputs that crashed a fuzz target (tests/fixtures/fuzz-regressions/, named
/// `<target>--<what>`) go through every parser without panicking.
#[test]
fn fuzz_regressions_never_panic() {
    let dir = fixtures().join("fuzz-regressions");
    let mut files = Vec::new();
    collect_files(&dir, &mut files);
    for f in files.iter().filter(|f| f.extension().is_none_or(|e| e != "md")) {
        let bytes = std::fs::read(f).unwrap();
        every_parser(&String::from_utf8_lossy(&bytes));
    }
}
