//! Every remediation is safe to paste at 3 a.m.: no command that overwrites a file under /etc,
//! flushes or deletes more than the chains it names, or clears all of IPVS or conntrack without
//! saying so. Scanned: every finding's steps as the real binary renders them (`check` on every
//! fixture node, auto and with modes declared, so kube_proxy_down is among them), the findings of
//! a node where everything that has a remediation goes wrong at once (built with the library,
//! evaluated in iptables, IPVS and no-kube-proxy mode), the source of every check
//! (agent/evaluate/*.rs, branches no state above reaches included), and docs/alerts.md.
use crate::common;

use std::path::Path;

use proxywatch::probe::{iptables, ipvs, nftables, ProbeName};
use proxywatch::snapshot::{ProbeOutcome, ProbeStatus, Snapshot};

/// The commands of a text: split at newlines and shell separators (`;`, `&&`, `||`, `|`).
fn commands(text: &str) -> Vec<&str> {
    text.split(['\n', ';', '|', '&'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// Whether the text right after a flag names a chain (a word, a quoted or `$` variable). Not a
/// `<placeholder>`: pasted into a shell it is a redirection, and the flag is left without a chain.
fn names_a_chain(rest: &str) -> bool {
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.starts_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '"' | '$' | '\'' | '\\' | '{'))
}

/// The dangerous forms in `text`, each with the command it was found in.
fn dangers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    // A redirection that replaces a system file (`>>` appends: fine).
    for (i, _) in text.match_indices('>') {
        let before = text[..i].chars().last();
        let after = text[i + 1..].trim_start();
        if before != Some('>')
            && !text[i + 1..].starts_with('>')
            && ["/etc/", "/usr/", "/lib/", "/boot/"]
                .iter()
                .any(|p| after.starts_with(p))
        {
            found.push(format!(
                "overwrites a file: {}",
                &text[i.saturating_sub(40)..(i + 40).min(text.len())]
            ));
        }
    }
    for cmd in commands(text) {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        // `tee` without -a replaces the file it writes.
        if let Some(t) = words.iter().position(|w| *w == "tee") {
            let args = &words[t + 1..];
            let append = args
                .iter()
                .take_while(|a| a.starts_with('-'))
                .any(|a| *a == "-a" || *a == "--append");
            if !append && args.iter().any(|a| a.starts_with("/etc/")) {
                found.push(format!("tee replaces a file: {cmd}"));
            }
        }
        let is = |w: &str, names: &[&str]| names.iter().any(|n| w.trim_matches('`') == *n);
        let ipt = words.iter().any(|w| {
            let w = w.trim_matches('`');
            w.starts_with("iptables") || w.starts_with("ip6tables")
        });
        if ipt {
            for flag in ["-F", "--flush", "-X", "--delete-chain"] {
                for (i, _) in cmd.match_indices(flag) {
                    let start_ok = i == 0 || cmd[..i].ends_with([' ', '`', '(']);
                    let rest = &cmd[i + flag.len()..];
                    let end_ok = rest.is_empty() || rest.starts_with([' ', '`', '/', ',', '.', ')']);
                    if start_ok && end_ok && !names_a_chain(rest) {
                        found.push(format!("{flag} without a chain (the whole table): {cmd}"));
                    }
                }
            }
        }
        if words.iter().any(|w| is(w, &["conntrack"])) && words.iter().any(|w| is(w, &["-F", "--flush"])) {
            found.push(format!("conntrack -F drops every entry of the node: {cmd}"));
        }
        if words.windows(2).any(|p| is(p[0], &["nft"]) && is(p[1], &["flush"]))
            && words.iter().any(|w| is(w, &["ruleset"]))
        {
            found.push(format!("nft flush ruleset removes every table: {cmd}"));
        }
    }
    // ipvsadm -C clears every virtual server, not only kube-proxy's: only with a warning nearby.
    for (i, _) in text
        .match_indices("ipvsadm -C")
        .chain(text.match_indices("ipvsadm --clear"))
    {
        let near = &text[i.saturating_sub(300)..(i + 300).min(text.len())];
        if !near.to_lowercase().contains("warning") && !near.contains("would clear every") {
            found.push(format!(
                "ipvsadm -C without a warning: {}",
                &text[i..(i + 60).min(text.len())]
            ));
        }
    }
    found
}

#[test]
fn the_scanner_catches_each_dangerous_form() {
    let bad = [
        "echo 'net.ipv4.ip_forward=1' > /etc/sysctl.d/90-kubernetes.conf",
        "printf 'x' | sudo tee /etc/modules-load.d/ipvs.conf",
        "iptables -t nat -F / -X on the KUBE-SVC/SEP chains",
        "iptables-legacy -t nat -F",
        "`iptables -t nat -F`/`-X` of the chains",
        "ip6tables -X",
        "iptables -t nat --flush",
        "ipvsadm -C and ip link del kube-ipvs0",
        "conntrack -F",
        "nft flush ruleset",
        "iptables -t nat -F <chain> && iptables -t nat -X <chain>",
    ];
    for b in bad {
        assert!(!dangers(b).is_empty(), "not caught: {b}");
    }
    let good = [
        "echo 'net.ipv4.ip_forward = 1' | sudo tee -a /etc/sysctl.d/90-proxywatch.conf",
        "echo x >> /etc/modules-load.d/x.conf",
        "iptables -t nat -F KUBE-SERVICES; iptables -t nat -X \"$c\"",
        "kubectl get cm kube-proxy -o yaml > kube-proxy-config-backup-$(date +%Y%m%d).yaml",
        "Warning: ipvsadm -C clears every virtual server on the node",
        "conntrack -D -p udp --orig-dst 10.96.0.10",
        "nft delete table ip kube-proxy",
        "grep -F KUBE",
    ];
    for g in good {
        assert_eq!(dangers(g), Vec::<String>::new(), "{g}");
    }
}

#[test]
fn docs_alerts_md_is_safe_to_paste() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.md");
    let d = dangers(&std::fs::read_to_string(&path).unwrap());
    assert!(d.is_empty(), "{}: {d:#?}", path.display());
}

#[test]
fn the_checks_source_is_safe_to_paste() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent/evaluate");
    let mut scanned = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let d = dangers(&std::fs::read_to_string(&p).unwrap());
            assert!(d.is_empty(), "{}: {d:#?}", p.display());
            scanned += 1;
        }
    }
    assert!(scanned >= 8, "{scanned} files");
}

fn assert_safe(origin: &str, findings: &serde_json::Value) -> usize {
    let mut steps = 0;
    for f in findings.as_array().unwrap() {
        for step in f["remediation"].as_array().unwrap() {
            let d = dangers(step.as_str().unwrap());
            assert!(d.is_empty(), "{origin}: finding {}: {d:#?}", f["id"]);
            steps += 1;
        }
    }
    steps
}

#[test]
fn every_rendered_remediation_is_safe_to_paste() {
    let nodes = common::fixtures().join("nodes");
    let mut ids = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&nodes).unwrap() {
        let root = e.unwrap().path();
        for extra in [
            &[][..],
            &["--kube-proxy.mode", "ipvs"],
            &["--kube-proxy.mode", "iptables"],
        ] {
            let doc = common::Check::new()
                .env_clear()
                .env("PATH", root.join("exec"))
                .args(["--node-name", "fixture"])
                .host_root(&root)
                .args(common::NO_KUBE_PROXY)
                .args(extra)
                .run()
                .doc;
            assert_safe(&format!("{} {extra:?}", root.display()), &doc["findings"]);
            for f in doc["findings"].as_array().unwrap() {
                ids.insert(f["id"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(
        ids.contains("kube_proxy_down") && ids.contains("sysctl_ip_forward"),
        "{ids:?}"
    );

    // Everything with a remediation wrong at once, in each mode.
    let s = broken_node();
    for mode in ["iptables", "ipvs", "nftables", "none", "auto"] {
        let mut t = proxywatch::config::default_thresholds();
        t.proxy_mode = mode.parse().unwrap();
        let v = proxywatch::evaluate::evaluate(&s, &t);
        let json = serde_json::to_value(&v.findings).unwrap();
        assert!(assert_safe(&format!("broken node, mode {mode}"), &json) > 0);
        ids.extend(v.findings.iter().map(|f| f.id.clone()));
    }
    for id in [
        "proxy_mode_leftovers",
        "iptables_backend_mismatch",
        "iptables_stale_kube_rules",
        "kube_proxy_down",
    ] {
        assert!(ids.contains(id), "{id} never rendered: {ids:?}");
    }
}

/// kube-proxy's state of every mode at once, in both iptables backends (one without its
/// canary), IPVS state, kube-proxy gone: leftovers, backend mismatch, stale rules, down.
fn broken_node() -> Snapshot {
    let mut s = Snapshot::new("broken");
    s.collected_at = 1_800_000_000.0;
    let run = |backend: &str, canary: bool| {
        let mut r = iptables::SaveRun {
            backend: backend.into(),
            family: "ipv4".into(),
            ..Default::default()
        };
        r.counts.kube.svc = 10;
        r.counts.kube.sep = 20;
        r.counts.proxy_canary = canary;
        r.counts.kube_rules = 100;
        r
    };
    s.facts.iptables = Some(iptables::IptablesFacts {
        saves: vec![run("nft", true), run("legacy", false)],
        backend_in_use: "nft".into(),
        backends_with_kube_rules: vec!["nft".into(), "legacy".into()],
        ..Default::default()
    });
    s.facts.nftables = Some(nftables::NftablesFacts {
        tables: vec![nftables::NftTable {
            family: "ip".into(),
            ..Default::default()
        }],
    });
    s.facts.ipvs = Some(ipvs::IpvsFacts {
        virtual_servers: 5,
        interface: Some(ipvs::IpvsInterface {
            exists: true,
            addresses: vec!["10.96.0.1".into()],
        }),
        ..Default::default()
    });
    s.probes.insert(
        ProbeName::KubeProxy,
        ProbeOutcome {
            status: ProbeStatus::Absent,
            duration_seconds: 0.01,
            error: None,
            last_run_seconds: s.collected_at,
            last_success_seconds: Some(s.collected_at),
            reading_seconds: None,
        },
    );
    s
}
