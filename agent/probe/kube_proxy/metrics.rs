//! The few facts the agent reads from kube-proxy's `/metrics` (port 10249; [`extract`] →
//! [`KubeProxyMetrics`]): which metric families matter, across kube-proxy versions, and how their
//! label sets combine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::parse::{quote, ParseError};
use crate::promtext::{histogram, parse_exposition_limited, Exposition, Histogram, Limits, MetricType};

/// `kubeproxy_sync_proxy_rules_duration_seconds`: duration of each rules sync (histogram, s).
pub const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
/// v1.13 and older: `kubeproxy_sync_proxy_rules_latency_microseconds` (histogram, µs).
pub const SYNC_LATENCY_LEGACY_US: &str = "kubeproxy_sync_proxy_rules_latency_microseconds";
/// `kubeproxy_network_programming_duration_seconds` (histogram, s).
pub const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
/// Unix time (s) of the last successful sync (gauge; `ip_family` label since ~v1.30).
pub const LAST_SYNC_TIMESTAMP: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
/// Unix time (s) a sync was last queued (gauge).
pub const LAST_QUEUED_TIMESTAMP: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
/// Rules owned by kube-proxy per iptables table (gauge, label `table`).
pub const IPTABLES_TOTAL: &str = "kubeproxy_sync_proxy_rules_iptables_total";
/// iptables-restore failures (counter, iptables and ipvs modes).
pub const IPTABLES_RESTORE_FAILURES: &str = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
/// Partial iptables-restore failures (counter, iptables mode, v1.28+: a sync that
/// restored only changed chains failed, and a full sync follows).
pub const IPTABLES_PARTIAL_RESTORE_FAILURES: &str =
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total";
/// nftables transaction failures (counter, nftables mode, v1.29+).
pub const NFTABLES_SYNC_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
/// Endpoint changes not yet synced (gauge).
pub const ENDPOINT_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_endpoint_changes_pending";
/// Service changes not yet synced (gauge).
pub const SERVICE_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_service_changes_pending";
/// Packets accepted on NodePorts of the loopback interface (counter, iptables mode, v1.31+;
/// kubernetes#125015): NodePorts reached on localhost, which stop working in nftables mode.
pub const LOCALHOST_NODEPORTS_ACCEPTED: &str = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total";
/// Packets dropped by kube-proxy's conntrack-invalid rule (counter, iptables mode, v1.31+;
/// kubernetes#122812): nftables mode no longer drops them.
pub const CT_STATE_INVALID_DROPPED: &str = "kubeproxy_iptables_ct_state_invalid_dropped_packets_total";
/// Process start, Unix time (s) (gauge, from client_golang's process collector).
pub const PROCESS_START_TIME: &str = "process_start_time_seconds";
/// Build info (gauge 1, labels `git_version`, or `gitVersion` before ~v1.14).
pub const BUILD_INFO: &str = "kubernetes_build_info";

const WANTED_FAMILIES: &[&str] = &[
    SYNC_DURATION,
    SYNC_LATENCY_LEGACY_US,
    NETWORK_PROGRAMMING,
    LAST_SYNC_TIMESTAMP,
    LAST_QUEUED_TIMESTAMP,
    IPTABLES_TOTAL,
    IPTABLES_RESTORE_FAILURES,
    IPTABLES_PARTIAL_RESTORE_FAILURES,
    NFTABLES_SYNC_FAILURES,
    ENDPOINT_CHANGES_PENDING,
    SERVICE_CHANGES_PENDING,
    LOCALHOST_NODEPORTS_ACCEPTED,
    CT_STATE_INVALID_DROPPED,
    PROCESS_START_TIME,
    BUILD_INFO,
];

/// What parsing kube-proxy's `/metrics` may cost. Real bodies are far inside: the two fixtures
/// (v1.13.4 and v1.21.1, `tests/fixtures/kube-proxy/`) have lines of at most 236 and 320 bytes,
/// at most 9 labels per sample, 43 and 52 families, and the agent keeps 20 and 111 of their
/// samples; a v1.30.0 scrape (elastic/beats' kube-proxy test data,
/// `metricbeat/module/kubernetes/proxy/_meta/test/metrics.1.31`) weighs 84,241 bytes.
pub const LIMITS: Limits = Limits {
    max_line_bytes: 64 << 10,
    max_labels_per_sample: 64,
    max_label_value_bytes: 4 << 10,
    max_families: 10_000,
    max_kept_bytes: 1 << 20,
    deadline: None,
};

/// Longest `table` label value kept (iptables tables are `filter`, `nat`, `mangle`, `raw`,
/// `security`), and most distinct tables.
pub const MAX_TABLE_BYTES: usize = 32;
pub const MAX_TABLES: usize = 16;
/// Longest `git_version` kept, in characters (e.g. `v1.31.2-eks-1234567` is 19).
pub const MAX_VERSION_CHARS: usize = 64;

/// What the agent reads from kube-proxy's `/metrics`. A field is `None` (or empty) when
/// kube-proxy does not export that metric (version or proxy mode). Series that newer versions
/// split by `ip_family` are combined as documented per field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KubeProxyMetrics {
    /// Rules-sync duration, seconds. From `kubeproxy_sync_proxy_rules_duration_seconds`, or
    /// when absent from v1.13's `kubeproxy_sync_proxy_rules_latency_microseconds` converted
    /// to seconds (bounds and sum ÷ 1e6). Summed over `ip_family`.
    pub sync_duration: Option<Histogram>,
    /// True when `sync_duration` came from the legacy microseconds histogram.
    pub sync_duration_legacy: bool,
    /// Network programming latency (service/endpoint change → rules synced), seconds.
    pub network_programming: Option<Histogram>,
    /// Unix time (s) of the last successful sync; the oldest over `ip_family` label sets.
    pub last_sync_timestamp_seconds: Option<f64>,
    /// Unix time (s) a sync was last queued; the newest over `ip_family` label sets.
    pub last_queued_timestamp_seconds: Option<f64>,
    /// Number of iptables rules owned by kube-proxy, per table (`filter`, `nat`, …), summed
    /// over `ip_family`. Empty outside iptables mode or before v1.21.
    pub iptables_rules: BTreeMap<String, f64>,
    /// Failed syncs since start (count): `…_iptables_restore_failures_total`,
    /// `…_iptables_partial_restore_failures_total` and `…_nftables_sync_failures_total`,
    /// summed over `ip_family`.
    pub sync_failures_total: Option<f64>,
    /// Endpoint changes received but not yet synced (count).
    pub endpoint_changes_pending: Option<f64>,
    /// Service changes received but not yet synced (count).
    pub service_changes_pending: Option<f64>,
    /// Packets accepted on NodePorts via localhost since start (iptables mode, v1.31+).
    #[serde(default)]
    pub localhost_nodeports_accepted_packets_total: Option<f64>,
    /// Packets dropped as conntrack-invalid since start (iptables mode, v1.31+).
    #[serde(default)]
    pub ct_state_invalid_dropped_packets_total: Option<f64>,
    /// Unix time (s) the kube-proxy process started (restart detection for [`delta`](crate::promtext::delta)).
    pub process_start_time_seconds: Option<f64>,
    /// kube-proxy's `git_version`, e.g. `v1.21.1`: printable ASCII, at most
    /// [`MAX_VERSION_CHARS`] characters (`…` when cut).
    pub version: Option<String>,
}

#[derive(Clone, Copy)]
enum Combine {
    Sum,
    Min,
    Max,
}

/// The value of a counter/gauge/untyped family over all its label sets, combined.
fn scalar(expo: &Exposition, source_name: &str, name: &str, combine: Combine) -> Result<Option<f64>, ParseError> {
    let Some(family) = expo.family(name) else {
        return Ok(None);
    };
    if matches!(family.metric_type, MetricType::Histogram | MetricType::Summary) {
        return Err(ParseError::whole(
            source_name,
            format!("{name}: expected a counter or gauge, found a {}", family.metric_type),
        ));
    }
    let mut out: Option<f64> = None;
    for s in family.samples.iter().filter(|s| s.name == name) {
        out = Some(match (out, combine) {
            (None, _) => s.value,
            (Some(a), Combine::Sum) => a + s.value,
            (Some(a), Combine::Min) => a.min(s.value),
            (Some(a), Combine::Max) => a.max(s.value),
        });
    }
    Ok(out)
}

/// Parses kube-proxy's `/metrics` body and extracts [`KubeProxyMetrics`], within [`LIMITS`].
/// Only the families listed in the field docs are kept in memory, but every line is validated.
pub fn extract(source_name: &str, text: &str) -> Result<KubeProxyMetrics, ParseError> {
    extract_within(source_name, text, &LIMITS)
}

/// [`extract`] within other limits (the probe adds its deadline to [`LIMITS`]).
pub fn extract_within(source_name: &str, text: &str, limits: &Limits) -> Result<KubeProxyMetrics, ParseError> {
    let expo = parse_exposition_limited(source_name, text, |name| WANTED_FAMILIES.contains(&name), limits)?;
    extract_from(source_name, &expo)
}

/// A `git_version` as kept: printable ASCII (anything else becomes `?`), at most
/// [`MAX_VERSION_CHARS`] characters, `…` when cut.
fn bounded_version(v: &str) -> String {
    let mut out: String = v
        .chars()
        .take(MAX_VERSION_CHARS)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if v.chars().nth(MAX_VERSION_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// [`extract`] over an already parsed exposition.
pub fn extract_from(source_name: &str, expo: &Exposition) -> Result<KubeProxyMetrics, ParseError> {
    let hist = |name: &str| histogram(expo, name).map_err(|e| e.into_parse_error(source_name));

    let mut sync_duration = hist(SYNC_DURATION)?;
    let mut sync_duration_legacy = false;
    if sync_duration.is_none() {
        if let Some(mut h) = hist(SYNC_LATENCY_LEGACY_US)? {
            for b in &mut h.buckets {
                b.0 /= 1e6;
            }
            h.sum /= 1e6;
            sync_duration = Some(h);
            sync_duration_legacy = true;
        }
    }

    let mut iptables_rules = BTreeMap::new();
    if let Some(family) = expo.family(IPTABLES_TOTAL) {
        for s in family.samples.iter().filter(|s| s.name == IPTABLES_TOTAL) {
            let table = s.label("table").ok_or_else(|| {
                ParseError::new(
                    source_name,
                    s.line,
                    format!("{IPTABLES_TOTAL}: sample without a \"table\" label"),
                )
            })?;
            if table.len() > MAX_TABLE_BYTES {
                return Err(ParseError::new(
                    source_name,
                    s.line,
                    format!(
                        "{IPTABLES_TOTAL}: table {} is longer than {MAX_TABLE_BYTES} bytes",
                        quote(table)
                    ),
                ));
            }
            if iptables_rules.len() >= MAX_TABLES && !iptables_rules.contains_key(table) {
                return Err(ParseError::new(
                    source_name,
                    s.line,
                    format!("{IPTABLES_TOTAL}: more than {MAX_TABLES} tables"),
                ));
            }
            *iptables_rules.entry(table.to_string()).or_insert(0.0) += s.value;
        }
    }

    let iptables_failures = scalar(expo, source_name, IPTABLES_RESTORE_FAILURES, Combine::Sum)?;
    let partial_failures = scalar(expo, source_name, IPTABLES_PARTIAL_RESTORE_FAILURES, Combine::Sum)?;
    let nftables_failures = scalar(expo, source_name, NFTABLES_SYNC_FAILURES, Combine::Sum)?;
    let sync_failures_total = match (iptables_failures, partial_failures, nftables_failures) {
        (None, None, None) => None,
        (a, b, c) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0) + c.unwrap_or(0.0)),
    };

    let version = expo.family(BUILD_INFO).and_then(|f| {
        f.samples
            .iter()
            .find_map(|s| s.label("git_version").or_else(|| s.label("gitVersion")))
            .map(bounded_version)
    });

    Ok(KubeProxyMetrics {
        sync_duration,
        sync_duration_legacy,
        network_programming: hist(NETWORK_PROGRAMMING)?,
        last_sync_timestamp_seconds: scalar(expo, source_name, LAST_SYNC_TIMESTAMP, Combine::Min)?,
        last_queued_timestamp_seconds: scalar(expo, source_name, LAST_QUEUED_TIMESTAMP, Combine::Max)?,
        iptables_rules,
        sync_failures_total,
        endpoint_changes_pending: scalar(expo, source_name, ENDPOINT_CHANGES_PENDING, Combine::Sum)?,
        service_changes_pending: scalar(expo, source_name, SERVICE_CHANGES_PENDING, Combine::Sum)?,
        localhost_nodeports_accepted_packets_total: scalar(
            expo,
            source_name,
            LOCALHOST_NODEPORTS_ACCEPTED,
            Combine::Sum,
        )?,
        ct_state_invalid_dropped_packets_total: scalar(expo, source_name, CT_STATE_INVALID_DROPPED, Combine::Sum)?,
        process_start_time_seconds: scalar(expo, source_name, PROCESS_START_TIME, Combine::Max)?,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::kube_proxy::healthz::parse_healthz;
    use crate::probe::kube_proxy::proxy_mode::parse_proxy_mode;
    use crate::promtext::{delta, parse_exposition};
    use crate::timefmt::parse_timestamp;

    const V1_21: &str =
        include_str!("../../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");
    const V1_13: &str = include_str!("../../../tests/fixtures/kube-proxy/v1.13.4-netdata-go.d-plugin-testdata.prom");
    const HEALTHZ_V130: &str =
        include_str!("../../../tests/fixtures/kube-proxy/v1.30-kind-nodeEligible-raesene-2024-06-16.json");

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    // --- extract -------------------------------------------------------------------------------

    #[test]
    fn extract_reports_histogram_errors_as_parse_errors() {
        let text = format!(
            "# TYPE {SYNC_DURATION} histogram\n{SYNC_DURATION}_bucket{{le=\"1\"}} 1\n{SYNC_DURATION}_sum 1\n{SYNC_DURATION}_count 1\n"
        );
        let e = extract("m", &text).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.message.contains("+Inf"), "{}", e.message);
    }

    #[test]
    fn extract_v1_21() {
        let m = extract("v1.21.1", V1_21).unwrap();
        let sync = m.sync_duration.as_ref().unwrap();
        assert!(!m.sync_duration_legacy);
        assert_eq!((sync.count, sync.sum), (23.0, 9.3710718));
        assert_eq!(m.network_programming.as_ref().unwrap().count, 8.0);
        assert_eq!(m.last_sync_timestamp_seconds, Some(1.641_503_918_313_382_4e9));
        assert_eq!(m.last_queued_timestamp_seconds, Some(1.641_498_517_907_028_2e9));
        let rules: Vec<(&str, f64)> = m.iptables_rules.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(rules, vec![("filter", 5.0), ("nat", 6.0)]);
        assert_eq!(m.sync_failures_total, Some(0.0));
        assert_eq!(m.endpoint_changes_pending, Some(0.0));
        assert_eq!(m.service_changes_pending, Some(0.0));
        assert_eq!(m.process_start_time_seconds, Some(1.641_495_795_1e9));
        assert_eq!(m.version.as_deref(), Some("v1.21.1"));
        // Counters of v1.31+: absent from v1.21, so None (not 0).
        assert_eq!(m.localhost_nodeports_accepted_packets_total, None);
        assert_eq!(m.ct_state_invalid_dropped_packets_total, None);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<KubeProxyMetrics>(&json).unwrap(), m);
    }

    #[test]
    fn extract_v1_13_converts_legacy_microseconds() {
        let m = extract("v1.13.4", V1_13).unwrap();
        assert!(m.sync_duration_legacy);
        let sync = m.sync_duration.unwrap();
        assert_eq!(sync.count, 2669.0);
        assert!(close(sync.sum, 62.885705));
        assert_eq!(sync.buckets[0], (0.001, 1.0));
        assert_eq!(sync.buckets[14], (16.384, 2669.0));
        assert_eq!(sync.buckets[15], (f64::INFINITY, 2669.0));
        // rank 0.99*2669 = 2642.31 in (0.032, 0.064] holding 2660-2534 = 126:
        // 0.032 + 0.032 * 108.31/126 = 0.059507301...
        assert!(close(sync.quantile(0.99).unwrap(), 0.032 + 0.032 * 108.31 / 126.0));
        assert_eq!(m.network_programming, None);
        assert_eq!(m.last_sync_timestamp_seconds, None);
        assert!(m.iptables_rules.is_empty());
        assert_eq!(m.sync_failures_total, None);
        assert_eq!(m.version.as_deref(), Some("v1.13.4"));
        assert_eq!(m.process_start_time_seconds, Some(1.553_010_380_9e9));
    }

    #[test]
    fn extract_newer_ip_family_and_nftables() {
        let text = r#"# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1000.5
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 990
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 995
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 999
# TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter
kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 2
kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv6"} 1
# TYPE kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total counter
kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family="IPv4"} 4
# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"} 10
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv6",table="nat"} 7
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="filter"} 3
# TYPE kubeproxy_iptables_localhost_nodeports_accepted_packets_total counter
kubeproxy_iptables_localhost_nodeports_accepted_packets_total 12
# TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets_total counter
kubeproxy_iptables_ct_state_invalid_dropped_packets_total 3
# TYPE unrelated_histogram histogram
unrelated_histogram_bucket{le="1"} 5
unrelated_histogram_bucket{le="+Inf"} 2
unrelated_histogram_sum 0
unrelated_histogram_count 9
"#;
        let m = extract("t", text).unwrap();
        assert_eq!(m.last_sync_timestamp_seconds, Some(990.0));
        assert_eq!(m.last_queued_timestamp_seconds, Some(999.0));
        // 2 + 1 nftables transactions, 4 partial restores: every failed sync counts.
        assert_eq!(m.sync_failures_total, Some(7.0));
        assert_eq!(m.iptables_rules.get("nat"), Some(&17.0));
        assert_eq!(m.iptables_rules.get("filter"), Some(&3.0));
        assert_eq!(m.localhost_nodeports_accepted_packets_total, Some(12.0));
        assert_eq!(m.ct_state_invalid_dropped_packets_total, Some(3.0));
        assert_eq!(m.sync_duration, None);
    }

    #[test]
    fn extract_errors() {
        let e = extract(
            "t",
            "# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge\nkubeproxy_sync_proxy_rules_iptables_total 3\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        let e = extract("t", "# TYPE kubeproxy_sync_proxy_rules_service_changes_pending summary\nkubeproxy_sync_proxy_rules_service_changes_pending_sum 3\n")
            .unwrap_err();
        assert!(e.message.contains("expected a counter or gauge"), "{e}");
        // Malformed lines in unwanted families still fail.
        let e = extract("t", "go_goroutines 1\ngo_threads x\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn kept_label_values_are_bounded() {
        let rules = |table: &str| format!("# TYPE {IPTABLES_TOTAL} gauge\n{IPTABLES_TOTAL}{{table=\"{table}\"}} 1\n");
        assert!(extract("t", &rules(&"n".repeat(MAX_TABLE_BYTES))).is_ok());
        let e = extract("t", &rules(&"n".repeat(MAX_TABLE_BYTES + 1))).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("longer than 32 bytes"), "{e}");
        let many: String = (0..=MAX_TABLES)
            .map(|i| format!("{IPTABLES_TOTAL}{{table=\"t{i}\"}} 1\n"))
            .collect();
        let e = extract("t", &format!("# TYPE {IPTABLES_TOTAL} gauge\n{many}")).unwrap_err();
        assert!(e.message.contains("more than 16 tables"), "{e}");

        let info = |v: &str| format!("# TYPE {BUILD_INFO} gauge\n{BUILD_INFO}{{git_version=\"{v}\"}} 1\n");
        let m = extract("t", &info(&format!("v1.30.0-{}", "x".repeat(200)))).unwrap();
        let v = m.version.unwrap();
        assert_eq!(v.chars().count(), MAX_VERSION_CHARS + 1);
        assert!(v.starts_with("v1.30.0-x") && v.ends_with('…'), "{v}");
        // An escaped newline and a raw ESC: neither reaches a terminal report.
        let m = extract("t", &info("v1.30.0\\n\u{1b}[2J")).unwrap();
        assert_eq!(m.version.as_deref(), Some("v1.30.0??[2J"));
    }

    #[test]
    fn hostile_bodies_fail_fast_with_short_errors() {
        let one_line: String = format!(
            "{IPTABLES_TOTAL}{{{}}} 1\n",
            (0..2_000).map(|i| format!("l{i}=\"\"")).collect::<Vec<_>>().join(",")
        );
        let families: String = (0..20_000).map(|i| format!("family_{i} 1\n")).collect();
        let values: String = format!("{BUILD_INFO}{{git_version=\"{}\"}} 1\n", "v".repeat(8 << 10));
        let long_name = format!("{} 1\n{} 2\n", "a".repeat(60_000), "b".repeat(1000));
        for (what, text, needle) in [
            ("labels", one_line, "more than 64 labels"),
            ("families", families, "more than 10000 metric families"),
            ("values", values, "longer than 4096"),
            (
                "grouping",
                format!("{long_name}{}", "a".repeat(60_000) + " 3\n"),
                "not grouped",
            ),
        ] {
            let e = extract("http://127.0.0.1:10249/metrics", &text).unwrap_err();
            let shown = e.to_string();
            assert!(shown.len() < 1024, "{what}: {} bytes", shown.len());
            assert!(shown.contains(needle), "{what}: {shown}");
        }
        // Past its deadline, a parse gives up at the next check.
        let past = Limits {
            deadline: Some(std::time::Instant::now()),
            ..LIMITS
        };
        let e = extract_within("t", &crate::promtext::clip(V1_21.to_string(), 1 << 20), &past).unwrap_err();
        assert!(e.message.contains("deadline"), "{e}");
    }

    // --- robustness: random input never panics kube-proxy's parsers ------------------------------
    // All of them (promtext, /healthz, /proxyMode, timestamps too), fed the same generated inputs.

    use crate::test_rng::Rng;

    const PIECES: &[&str] = &[
        "{",
        "}",
        "\"",
        "\\",
        ",",
        "=",
        "#",
        " ",
        "\t",
        "\n",
        "\r",
        "a",
        "_",
        ":",
        "0",
        "1",
        ".",
        "e",
        "+",
        "-",
        "le",
        "Inf",
        "NaN",
        "HELP",
        "TYPE",
        "histogram",
        "summary",
        "gauge",
        "_bucket",
        "_sum",
        "_count",
        "quantile",
        "ü",
        "€",
        "\u{0}",
        "m=+",
        "T",
        "Z",
        "2024-06-16",
        "13:10:38",
        "+0000 UTC",
    ];

    fn exercise(text: &str) {
        if let Ok(expo) = parse_exposition("fuzz", text) {
            for f in &expo.families {
                if let Ok(Some(h)) = histogram(&expo, &f.name) {
                    let _ = h.quantile(0.99);
                    let _ = delta(&h, &h);
                }
            }
        }
        let _ = extract("fuzz", text);
        let _ = parse_healthz(text);
        let _ = parse_proxy_mode(text);
        let _ = parse_timestamp(text);
    }

    #[test]
    fn random_input_never_panics() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = rng.below(40);
            let text: String = (0..len).map(|_| PIECES[rng.below(PIECES.len())]).collect();
            exercise(&text);
        }
        // Arbitrary bytes, made valid UTF-8 lossily.
        for _ in 0..5_000 {
            let len = rng.below(64);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            exercise(&String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn mutated_fixtures_never_panic() {
        let mut rng = Rng(42);
        for base in [V1_21, V1_13, HEALTHZ_V130] {
            let chars: Vec<char> = base.chars().collect();
            for _ in 0..150 {
                let mut m = chars.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(m.len());
                    match rng.below(3) {
                        0 => {
                            m.remove(at);
                        }
                        1 => m.insert(at, PIECES[rng.below(PIECES.len())].chars().next().unwrap_or('x')),
                        _ => m[at] = PIECES[rng.below(PIECES.len())].chars().next().unwrap_or('x'),
                    }
                }
                exercise(&m.into_iter().collect::<String>());
            }
        }
    }
}
