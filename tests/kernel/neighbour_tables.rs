//! The neighbour tables on the real kernel, read only. The kernel's neighbour
//! limits are global (one table per family for every namespace), so this test
//! never adds a neighbour: it reads `ip -s ntable show` before and after the
//! agent's `check` (run in a namespace the test creates, which sees the same
//! tables) and holds the agent to it: the same tables and thresholds, and each
//! counter between the two readings (the table may be changing: other work on
//! the machine). Filling the table until the kernel refuses is the VM's
//! (tests/vm/vm_kernel.rs, scenario `neighbour`).
use crate::common;

use std::collections::BTreeMap;

use common::Netns;
use serde_json::Value;

/// `ip -s ntable show`: per table name, the numbers of its first block (the
/// table's own, with thresh1-3; the per-device blocks are skipped).
fn ntable() -> BTreeMap<String, BTreeMap<String, u64>> {
    let out = common::run("ip", &["-s", "ntable", "show"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut tables = BTreeMap::new();
    for block in text.split("\n\n") {
        let words: Vec<&str> = block.split_whitespace().collect();
        if !words.contains(&"thresh3") || words.len() < 2 {
            continue;
        }
        let mut nums = BTreeMap::new();
        for w in words.windows(2) {
            if let Ok(n) = w[1].parse::<u64>() {
                nums.insert(w[0].to_string(), n);
            }
        }
        tables.insert(words[1].to_string(), nums);
    }
    tables
}

#[test]
fn the_agent_reads_the_tables_ip_ntable_shows() {
    if !common::can_run(&["ip"]) {
        return;
    }
    let ns = Netns::new("ntable");
    let before = ntable();
    assert!(before.contains_key("arp_cache"), "{before:?}");
    let out = ns
        .command(
            common::binary().to_str().unwrap(),
            &[
                "check",
                "--format",
                "json",
                "--iptables.save-interval",
                "0",
                "--conntrack-stale.interval",
                "0",
            ],
        )
        .args(common::NO_KUBE_PROXY)
        .output()
        .unwrap();
    let after = ntable();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["probes"]["neighbour_tables"]["status"], "ok",
        "{}",
        doc["probes"]["neighbour_tables"]
    );
    let tables = doc["facts"]["neighbour_tables"]["tables"].as_array().unwrap();
    let names: Vec<&str> = tables.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        before.keys().map(String::as_str).collect::<Vec<_>>(),
        "the same tables"
    );
    for t in tables {
        let name = t["name"].as_str().unwrap();
        let (b, a) = (&before[name], &after[name]);
        assert_eq!(t["family"], if name == "arp_cache" { "ipv4" } else { "ipv6" });
        for (ours, theirs) in [
            ("gc_thresh1", "thresh1"),
            ("gc_thresh2", "thresh2"),
            ("gc_thresh3", "thresh3"),
        ] {
            assert_eq!(t[ours].as_u64(), Some(b[theirs]), "{name} {ours}: {t}");
            assert_eq!(b[theirs], a[theirs], "{name}: {theirs} changed during the test");
        }
        for counter in [
            "allocs",
            "destroys",
            "forced_gc_runs",
            "table_fulls",
            "res_failed",
            "periodic_gc_runs",
        ] {
            let v = t["counters"][counter]
                .as_u64()
                .unwrap_or_else(|| panic!("{name} {counter}: {t}"));
            assert!(
                (b[counter]..=a[counter]).contains(&v),
                "{name} {counter}: {v} not between ip's {} and {}",
                b[counter],
                a[counter]
            );
        }
        // Entries go up and down; with nothing moving they are equal.
        if b["entries"] == a["entries"] && b["allocs"] == a["allocs"] && b["destroys"] == a["destroys"] {
            assert_eq!(t["entries"].as_u64(), Some(b["entries"]), "{name}: {t}");
        }
        assert_eq!(t["unknown_attributes"], 0, "{t}");
        assert!(t.get("undecoded").is_none(), "{t}");
    }
    // The warning follows the fill the facts show.
    let findings: Vec<&str> = common::finding_ids(&doc["findings"]);
    let over = tables
        .iter()
        .filter_map(|t| Some(t["entries"].as_f64()? / t["gc_thresh3"].as_f64()?))
        .any(|f| f >= 0.8);
    assert_eq!(
        findings.contains(&"neighbour_table_fill"),
        over,
        "{findings:?} {tables:?}"
    );
}
