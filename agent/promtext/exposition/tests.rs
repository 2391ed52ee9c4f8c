use super::*;

const V1_21: &str =
    include_str!("../../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");
const V1_13: &str = include_str!("../../../tests/fixtures/kube-proxy/v1.13.4-netdata-go.d-plugin-testdata.prom");

// kube-proxy's family names, spelled out: promtext does not depend on probe/.
const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
const IPTABLES_TOTAL: &str = "kubeproxy_sync_proxy_rules_iptables_total";

fn parse(text: &str) -> Result<Exposition, ParseError> {
    parse_exposition("test", text)
}

fn err_line(text: &str) -> usize {
    match parse(text) {
        Ok(e) => panic!("expected an error for {text:?}, got {e:?}"),
        Err(e) => e.line,
    }
}

#[test]
fn invalid_name_with_multibyte_text_is_an_error_not_a_panic() {
    // Found by fuzz/kube_proxy_metrics: the message sliced the line at byte 80,
    // inside a multi-byte character (here U+FFFD, what lossy decoding makes of bad bytes).
    let text = format!("# HELP a{}\n", "\u{fffd}".repeat(30));
    assert_eq!(err_line(&text), 1);
    let text = format!("# TYPE a{} counter\n", "é".repeat(60));
    assert_eq!(err_line(&text), 1);
}

#[test]
fn v1_21_fixture_parses_whole() {
    let expo = parse_exposition("v1.21.1", V1_21).unwrap();
    let sync = expo.family(SYNC_DURATION).unwrap();
    assert_eq!(sync.metric_type, MetricType::Histogram);
    assert_eq!(sync.help.as_deref(), Some("[ALPHA] SyncProxyRules latency in seconds"));
    assert_eq!(sync.samples.len(), 15 + 1 + 2);
    let rules = expo.family(IPTABLES_TOTAL).unwrap();
    assert_eq!(rules.samples[1].label("table"), Some("nat"));
    assert_eq!(rules.samples[1].value, 6.0);
    assert_eq!(rules.samples[1].line, 215);
    // rest_client metrics carry URL labels with `{`, `}`, `/`, `:`.
    assert!(expo.family("rest_client_requests_total").is_some());
}

#[test]
fn v1_13_fixture_parses_whole_with_summaries() {
    let expo = parse_exposition("v1.13.4", V1_13).unwrap();
    let summary = expo.family("http_request_duration_microseconds").unwrap();
    assert_eq!(summary.metric_type, MetricType::Summary);
    assert!(summary.samples.iter().any(|s| s.label("quantile") == Some("0.99")));
    assert!(summary
        .samples
        .iter()
        .any(|s| s.name == "http_request_duration_microseconds_count"));
}

#[test]
fn filtered_keeps_only_wanted_families_but_validates_all() {
    let mut asked = Vec::new();
    let expo = parse_exposition_filtered("v1.21.1", V1_21, |n| {
        asked.push(n.to_string());
        n == SYNC_DURATION
    })
    .unwrap();
    assert_eq!(expo.families.len(), 1);
    assert_eq!(expo.families[0].name, SYNC_DURATION);
    // Called once per family, with base names.
    assert!(asked.iter().any(|n| n == NETWORK_PROGRAMMING));
    assert!(!asked.iter().any(|n| n.ends_with("_bucket")));
    let mut sorted = asked.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), asked.len());

    let bad = "# TYPE a gauge\na 1\nb{x=\"1\" 2\n";
    let e = parse_exposition_filtered("t", bad, |n| n == "a").unwrap_err();
    assert_eq!(e.line, 3);
}

#[test]
fn help_escapes() {
    let expo = parse("# HELP m a\\\\b\\nc \"q\" {x}\n# TYPE m gauge\nm 1\n").unwrap();
    assert_eq!(expo.families[0].help.as_deref(), Some("a\\b\nc \"q\" {x}"));
    let expo = parse("# HELP m\nm 1\n").unwrap();
    assert_eq!(expo.families[0].help.as_deref(), Some(""));
    assert_eq!(err_line("# HELP m bad \\t escape\n"), 1);
    assert_eq!(err_line("\n# HELP m trailing \\"), 2);
}

#[test]
fn label_value_escapes_and_special_characters() {
    let text = r#"# TYPE m counter
m{a="q\"uote",b="back\\slash",c="new\nline",d="} , = # x",e="{}"} 1
m{ a = "x" , } 2
m{} 3
m{a="ünï€ode"}4
"#;
    let expo = parse(text).unwrap();
    let s = &expo.families[0].samples;
    assert_eq!(s[0].label("a"), Some("q\"uote"));
    assert_eq!(s[0].label("b"), Some("back\\slash"));
    assert_eq!(s[0].label("c"), Some("new\nline"));
    assert_eq!(s[0].label("d"), Some("} , = # x"));
    assert_eq!(s[0].label("e"), Some("{}"));
    assert_eq!(s[1].labels, vec![("a".to_string(), "x".to_string())]);
    assert_eq!(s[2].labels, vec![]);
    assert_eq!(s[3].label("a"), Some("ünï€ode"));
    assert_eq!(s[3].value, 4.0);
}

#[test]
fn values_and_timestamps() {
    let text = "a NaN\nb +Inf\nc -Inf 123\nd 1.5e-3\ne -2E+2 -5\nf .5\ng 7 1395066363000\n";
    let expo = parse(text).unwrap();
    let v = |n: &str| expo.family(n).unwrap().samples[0].value;
    assert!(v("a").is_nan());
    assert_eq!(v("b"), f64::INFINITY);
    assert_eq!(v("c"), f64::NEG_INFINITY);
    assert_eq!(v("d"), 0.0015);
    assert_eq!(v("e"), -200.0);
    assert_eq!(v("f"), 0.5);
    assert_eq!(expo.family("c").unwrap().samples[0].timestamp_ms, Some(123));
    assert_eq!(expo.family("e").unwrap().samples[0].timestamp_ms, Some(-5));
    assert_eq!(
        expo.family("g").unwrap().samples[0].timestamp_ms,
        Some(1_395_066_363_000)
    );
    assert_eq!(expo.family("a").unwrap().metric_type, MetricType::Untyped);
}

#[test]
fn comments_blank_lines_and_whitespace() {
    let text = "\n  # just a comment\n#HELP x h\n# TYPE x gauge\n\t x  { l = \"v\" }\t2\t \n# trailing comment\n";
    let expo = parse(text).unwrap();
    let f = expo.family("x").unwrap();
    assert_eq!(f.help.as_deref(), Some("h"));
    assert_eq!(f.samples[0].value, 2.0);
    assert_eq!(f.samples[0].line, 5);
    assert!(parse("").unwrap().families.is_empty());
}

#[test]
fn malformed_lines_are_errors_with_line_numbers() {
    let cases: &[(&str, usize)] = &[
        ("a 1\nb\n", 2),                         // missing value
        ("a one\n", 1),                          // bad value
        ("a 1 2 3\n", 1),                        // trailing text
        ("a 1 1.5\n", 1),                        // non-integer timestamp
        ("a{b=\"c\" 1\n", 1),                    // unterminated label set
        ("a{b=\"c} 1\n", 1),                     // unterminated value
        ("a{b=c} 1\n", 1),                       // unquoted value
        ("a{b=\"\\t\"} 1\n", 1),                 // invalid escape
        ("a{,} 1\n", 1),                         // lone comma
        ("a{b=\"1\",,} 1\n", 1),                 // double comma
        ("a{b=\"1\" c=\"2\"} 1\n", 1),           // missing comma
        ("a{b=\"1\",b=\"2\"} 1\n", 1),           // duplicate label
        ("a{__name__=\"x\"} 1\n", 1),            // reserved label
        ("a{1b=\"x\"} 1\n", 1),                  // bad label name
        ("a-b 1\n", 1),                          // bad metric name
        ("1a 1\n", 1),                           // bad metric name
        ("a 1\r\n", 1),                          // CRLF
        ("# TYPE a gauges\n", 1),                // bad type
        ("# TYPE a\n", 1),                       // missing type
        ("# TYPE a gauge extra\n", 1),           // trailing text
        ("# TYPE\n", 1),                         // missing name
        ("# HELP 1a x\n", 1),                    // bad name
        ("# TYPE a gauge\n# TYPE a gauge\n", 2), // second TYPE
        ("# HELP a x\n# HELP a y\n", 2),         // second HELP
        ("a 1\n# TYPE a gauge\n", 2),            // TYPE after samples
        ("a 1\nb 1\na 2\n", 3),                  // not grouped
        ("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nx 1\nh_count 1\n", 5),
        ("# TYPE h histogram\nh_bucket 1\n", 2), // bucket without le
        ("# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", 2),
        ("# TYPE h histogram\nh_bucket{le=\"NaN\"} 1\n", 2),
        ("# TYPE h histogram\nh 1\n", 2), // bare histogram sample
        ("# TYPE s summary\ns 1\n", 2),   // quantile missing
        ("a 1 -\n", 1),
        ("a +nan\n", 1), // Go rejects a signed NaN
        ("a 0x10\n", 1),
        ("a 1_000\n", 1),
        ("{a=\"b\"} 1\n", 1), // no metric name
    ];
    for (text, line) in cases {
        assert_eq!(err_line(text), *line, "input {text:?}");
    }
}

#[test]
fn error_message_names_source_and_quotes_input() {
    let e = parse_exposition("http://127.0.0.1:10249/metrics", "ok 1\nbad{x=\"1\"\n").unwrap_err();
    assert_eq!(e.source_name, "http://127.0.0.1:10249/metrics");
    assert_eq!(e.line, 2);
    assert!(e.message.contains("bad"), "{}", e.message);
}

#[test]
fn histogram_and_summary_suffixes_resolve_to_the_family() {
    let text = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 2\ns_count 3\ns_bucket 4\n";
    let expo = parse(text).unwrap();
    assert_eq!(expo.family("h").unwrap().samples.len(), 3);
    assert_eq!(expo.family("s").unwrap().samples.len(), 3);
    // A summary has no _bucket: that is an untyped family of its own.
    assert_eq!(expo.family("s_bucket").unwrap().metric_type, MetricType::Untyped);
}
