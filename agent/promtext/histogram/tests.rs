use super::*;
use crate::promtext::parse_exposition;

const V1_21: &str =
    include_str!("../../../tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom");

// kube-proxy's family names, spelled out: promtext does not depend on probe/.
const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

fn parse(text: &str) -> Result<Exposition, ParseError> {
    parse_exposition("test", text)
}

// --- histograms --------------------------------------------------------------------------

#[test]
fn v1_21_sync_histogram_exact() {
    let expo = parse_exposition("v1.21.1", V1_21).unwrap();
    let h = histogram(&expo, SYNC_DURATION).unwrap().unwrap();
    assert_eq!(h.count, 23.0);
    assert_eq!(h.sum, 9.3710718);
    assert_eq!(h.buckets.len(), 16);
    assert_eq!(h.buckets[0], (0.001, 0.0));
    assert_eq!(h.buckets[6], (0.064, 6.0));
    assert_eq!(h.buckets[14], (16.384, 23.0));
    assert_eq!(h.buckets[15], (f64::INFINITY, 23.0));
    // By hand: rank 0.99*23 = 22.77 falls in (1.024, 2.048] holding 23-20 = 3:
    // 1.024 + 1.024 * (22.77-20)/3 = 1.969493333...
    assert!(close(h.quantile(0.99).unwrap(), 1.024 + 1.024 * 2.77 / 3.0));
    assert!(close(h.quantile(0.99).unwrap(), 1.969_493_333_333_333));
    // p50: rank 11.5 in (0.256, 0.512] holding 18-7 = 11: 0.256 + 0.256*4.5/11.
    assert!(close(h.quantile(0.5).unwrap(), 0.256 + 0.256 * 4.5 / 11.0));
    assert!(close(h.mean().unwrap(), 9.3710718 / 23.0));
}

#[test]
fn v1_21_network_programming_histogram() {
    let expo = parse_exposition("v1.21.1", V1_21).unwrap();
    let h = histogram(&expo, NETWORK_PROGRAMMING).unwrap().unwrap();
    assert_eq!(h.count, 8.0);
    assert_eq!(h.sum, 33.3351237);
    assert_eq!(h.buckets.len(), 82); // 0, 0.25, 0.5, 1..=59, 60..=115 by 5, 120..=300 by 30, +Inf
    assert_eq!(h.buckets[0], (0.0, 0.0));
    // rank 7.92 in (16, 17] holding 1: 16.92.
    assert!(close(h.quantile(0.99).unwrap(), 16.92));
    // rank 4 in (1, 2] holding 5: 1 + 4/5.
    assert!(close(h.quantile(0.5).unwrap(), 1.8));
}

#[test]
fn histogram_sums_label_sets_other_than_le() {
    let text = r#"# TYPE h histogram
h_bucket{ip_family="IPv4",le="0.1"} 1
h_bucket{ip_family="IPv4",le="1"} 3
h_bucket{ip_family="IPv4",le="+Inf"} 4
h_sum{ip_family="IPv4"} 2.5
h_count{ip_family="IPv4"} 4
h_bucket{le="0.1",ip_family="IPv6"} 2
h_bucket{le="1",ip_family="IPv6"} 2
h_bucket{le="+Inf",ip_family="IPv6"} 5
h_sum{ip_family="IPv6"} 10
h_count{ip_family="IPv6"} 5
"#;
    let h = histogram(&parse(text).unwrap(), "h").unwrap().unwrap();
    assert_eq!(h.buckets, vec![(0.1, 3.0), (1.0, 5.0), (f64::INFINITY, 9.0)]);
    assert_eq!(h.count, 9.0);
    assert_eq!(h.sum, 12.5);
}

#[test]
fn histogram_absent_or_empty_is_none_and_wrong_type_is_error() {
    let expo = parse("# TYPE h histogram\n# TYPE g gauge\ng 1\n").unwrap();
    assert_eq!(histogram(&expo, "h").unwrap(), None);
    assert_eq!(histogram(&expo, "missing").unwrap(), None);
    assert!(matches!(
        histogram(&expo, "g"),
        Err(HistogramError::NotAHistogram { .. })
    ));
}

fn hist_err(body: &str) -> HistogramError {
    let text = format!("# TYPE h histogram\n{body}");
    histogram(&parse(&text).unwrap(), "h").unwrap_err()
}

#[test]
fn histogram_validation_errors() {
    let e = hist_err("h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n");
    assert!(matches!(e, HistogramError::MissingInfBucket { .. }), "{e}");
    let e = hist_err("h_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 4\nh_bucket{le=\"+Inf\"} 5\nh_sum 1\nh_count 5\n");
    match &e {
        HistogramError::NotMonotonic {
            le,
            count,
            previous_le,
            previous_count,
            line,
            ..
        } => {
            assert_eq!(
                (*le, *count, *previous_le, *previous_count, *line),
                (2.0, 4.0, 1.0, 5.0, 3)
            );
        }
        other => panic!("{other}"),
    }
    let e = hist_err("h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n");
    assert!(matches!(e, HistogramError::CountMismatch { count, inf_bucket, .. } if count == 3.0 && inf_bucket == 2.0));
    let e = hist_err("h_bucket{le=\"+Inf\"} 2\nh_sum 1\n");
    assert!(matches!(e, HistogramError::MissingCount { .. }), "{e}");
    let e = hist_err("h_bucket{le=\"+Inf\"} 2\nh_count 2\n");
    assert!(matches!(e, HistogramError::MissingSum { .. }), "{e}");
    let e = hist_err("h_sum 1\nh_count 2\n");
    assert!(matches!(e, HistogramError::MissingBuckets { .. }), "{e}");
    let e = hist_err("h_bucket{le=\"0.2\"} 1\nh_bucket{le=\"2e-1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n");
    assert!(matches!(e, HistogramError::DuplicateSeries { line: 3, .. }), "{e}");
    let e = hist_err(
        "h_bucket{a=\"x\",le=\"1\"} 1\nh_bucket{a=\"x\",le=\"+Inf\"} 1\nh_sum{a=\"x\"} 1\nh_count{a=\"x\"} 1\n\
         h_bucket{a=\"y\",le=\"2\"} 1\nh_bucket{a=\"y\",le=\"+Inf\"} 1\nh_sum{a=\"y\"} 1\nh_count{a=\"y\"} 1\n",
    );
    assert!(matches!(e, HistogramError::LayoutMismatch { .. }), "{e}");
    let e = hist_err("h_bucket{le=\"1\"} -1\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
    assert!(matches!(e, HistogramError::NotMonotonic { .. }), "{e}");
}

#[test]
fn histogram_error_becomes_parse_error_with_line() {
    let e = hist_err("h_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\nh_sum 1\nh_count 4\n").into_parse_error("src");
    assert_eq!(e.source_name, "src");
    assert_eq!(e.line, 3);
    assert!(e.message.starts_with("h{}: bucket le=inf has count 4"), "{}", e.message);
}

// --- quantile: cases mirrored from prometheus promql/promqltest/testdata/histograms.test ---

/// testhistogram at 50m (value 10× the per-5m increment).
fn testhistogram_positive() -> Vec<(f64, f64)> {
    vec![(0.1, 50.0), (0.2, 70.0), (1.0, 110.0), (f64::INFINITY, 120.0)]
}

fn testhistogram_negative() -> Vec<(f64, f64)> {
    vec![(-0.2, 10.0), (-0.1, 20.0), (0.3, 20.0), (f64::INFINITY, 30.0)]
}

#[test]
fn quantile_prometheus_testhistogram() {
    let p = testhistogram_positive();
    let n = testhistogram_negative();
    let cases = [
        (0.0, 0.0, -0.2),
        (1.0, 1.0, 0.3),
        (0.2, 0.048, -0.2),
        (0.5, 0.15, -0.15),
        (0.8, 0.72, 0.3),
    ];
    for (q, want_p, want_n) in cases {
        assert!(close(quantile(q, &p).unwrap(), want_p), "q={q} positive");
        assert!(close(quantile(q, &n).unwrap(), want_n), "q={q} negative");
    }
    assert_eq!(quantile(-0.1, &p), Some(f64::NEG_INFINITY));
    assert_eq!(quantile(1.01, &p), Some(f64::INFINITY));
    assert_eq!(quantile(f64::NAN, &p), None);
}

#[test]
fn quantile_prometheus_testhistogram2_and_3() {
    let h2 = [(0.0, 0.0), (2.0, 1.0), (4.0, 2.0), (6.0, 3.0), (f64::INFINITY, 3.0)];
    assert!(close(quantile(1.0 / 6.0, &h2).unwrap(), 1.0));
    assert!(close(quantile(0.5, &h2).unwrap(), 3.0));
    assert!(close(quantile(5.0 / 6.0, &h2).unwrap(), 5.0));
    // testhistogram3 (positive), unsorted input on purpose.
    let h3 = [
        (1.0, 110.0),
        (0.0, 0.0),
        (f64::INFINITY, 110.0),
        (0.1, 50.0),
        (0.2, 70.0),
    ];
    for (q, want) in [(0.0, 0.0), (0.25, 0.055), (0.5, 0.125), (0.75, 0.45), (1.0, 1.0)] {
        assert!(close(quantile(q, &h3).unwrap(), want), "q={q}");
    }
    let h3n = [
        (-0.25, 0.0),
        (-0.2, 10.0),
        (-0.1, 20.0),
        (0.3, 20.0),
        (f64::INFINITY, 20.0),
    ];
    for (q, want) in [(0.0, -0.25), (0.25, -0.225), (0.5, -0.2), (0.75, -0.15), (1.0, -0.1)] {
        assert!(close(quantile(q, &h3n).unwrap(), want), "q={q}");
    }
}

#[test]
fn quantile_prometheus_aggregated_request_duration() {
    // sum(rate(request_duration_seconds_bucket[10m])) by (le), scaled (quantile is scale-free).
    let agg = [(0.1, 100.0), (0.2, 190.0), (f64::INFINITY, 250.0)];
    assert!(close(quantile(0.3, &agg).unwrap(), 0.075));
    assert!((quantile(0.5, &agg).unwrap() - 0.127_777_777_777_777_8).abs() < 1e-12);
    let rates: Vec<(f64, f64)> = agg.iter().map(|&(le, c)| (le, c / 600.0)).collect();
    assert!(close(quantile(0.3, &rates).unwrap(), 0.075));
    // by (le, job): job1 = ins1+ins2 = [30, 80, 100], job2 = [70, 110, 150].
    let job1 = [(0.1, 30.0), (0.2, 80.0), (f64::INFINITY, 100.0)];
    let job2 = [(0.1, 70.0), (0.2, 110.0), (f64::INFINITY, 150.0)];
    assert!(close(quantile(0.3, &job1).unwrap(), 0.1));
    assert!(close(quantile(0.3, &job2).unwrap(), 0.064_285_714_285_714_3));
    assert!(close(quantile(0.5, &job1).unwrap(), 0.14));
    assert!(close(quantile(0.5, &job2).unwrap(), 0.1125));
}

#[test]
fn quantile_special_cases() {
    // Mixed le representations are coalesced (testdata "mixed"): 0.2 three times.
    let mixed = [
        (0.1, 10.0),
        (0.2, 10.0),
        (0.2, 10.0),
        (0.2, 10.0),
        (f64::INFINITY, 40.0),
    ];
    // Coalesced: (0.1,10) (0.2,30) (+Inf,40); q=0.5 → rank 20 in (0.1,0.2] → 0.15.
    assert!(close(quantile(0.5, &mixed).unwrap(), 0.15));
    assert_eq!(quantile(0.5, &[]), None);
    assert_eq!(quantile(0.5, &[(f64::INFINITY, 5.0)]), None); // fewer than 2 buckets
    assert_eq!(quantile(0.5, &[(1.0, 1.0), (2.0, 2.0)]), None); // no +Inf
    assert_eq!(quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None); // no observations
                                                                          // q=0 with an empty lowest bucket whose bound is > 0: 0/0 in Prometheus → NaN → None.
    assert_eq!(quantile(0.0, &[(1.0, 0.0), (f64::INFINITY, 5.0)]), None);
    // Rank in +Inf bucket returns the highest finite bound.
    assert_eq!(
        quantile(0.99, &[(1.0, 1.0), (2.0, 1.0), (f64::INFINITY, 10.0)]),
        Some(2.0)
    );
    // Non-monotonic input is forced monotonic: (1,5) (2,3→5) (+Inf,10): q=0.4 → rank 4 → 0.8.
    assert!(close(
        quantile(0.4, &[(1.0, 5.0), (2.0, 3.0), (f64::INFINITY, 10.0)]).unwrap(),
        0.8
    ));
    // Precision errors below 1e-12 relative are ignored.
    let fuzzy = [(1.0, 10.0), (2.0, 10.0 + 1e-12), (f64::INFINITY, 20.0)];
    assert!(close(quantile(0.5, &fuzzy).unwrap(), 1.0));
}

// --- delta ---------------------------------------------------------------------------------

fn h(buckets: &[(f64, f64)], sum: f64) -> Histogram {
    Histogram {
        buckets: buckets.to_vec(),
        count: buckets.last().unwrap().1,
        sum,
    }
}

#[test]
fn delta_window_and_restart() {
    let older = h(&[(0.1, 5.0), (1.0, 7.0), (f64::INFINITY, 8.0)], 3.0);
    let newer = h(&[(0.1, 6.0), (1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
    let d = delta(&newer, &older).unwrap();
    assert_eq!(d.buckets, vec![(0.1, 1.0), (1.0, 3.0), (f64::INFINITY, 4.0)]);
    assert_eq!(d.count, 4.0);
    assert_eq!(d.sum, 4.5);
    // rank 0.5*4 = 2 in (0.1, 1] holding 2: 0.1 + 0.9 * 1/2.
    assert!(close(d.quantile(0.5).unwrap(), 0.55));
    // Unchanged: zero observations in the window, no quantile.
    let same = delta(&newer, &newer).unwrap();
    assert_eq!(same.count, 0.0);
    assert_eq!(same.quantile(0.99), None);
    // Restart: counters went backwards.
    assert_eq!(delta(&older, &newer), None);
    let restarted = h(&[(0.1, 0.0), (1.0, 1.0), (f64::INFINITY, 9.0)], 1.0);
    assert_eq!(delta(&restarted, &older), None);
    // Different bucket layout.
    let other = h(&[(0.2, 6.0), (1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
    assert_eq!(delta(&other, &older), None);
    let shorter = h(&[(1.0, 10.0), (f64::INFINITY, 12.0)], 7.5);
    assert_eq!(delta(&shorter, &older), None);
}

#[test]
fn histogram_json_round_trip_keeps_infinity() {
    let hist = h(&[(0.5, 1.0), (f64::INFINITY, 2.0)], 1.25);
    let json = serde_json::to_string(&hist).unwrap();
    assert_eq!(json, r#"{"buckets":[[0.5,1.0],["+Inf",2.0]],"count":2.0,"sum":1.25}"#);
    assert_eq!(serde_json::from_str::<Histogram>(&json).unwrap(), hist);
    let from_ints: Histogram = serde_json::from_str(r#"{"buckets":[[1,1],["+Inf",2]],"count":2,"sum":3}"#).unwrap();
    assert_eq!(from_ints.buckets[1], (f64::INFINITY, 2.0));
    assert!(serde_json::from_str::<Histogram>(r#"{"buckets":[["inf",1]],"count":1,"sum":0}"#).is_err());
}

// --- robustness: random buckets never panic quantile ----------------------------------------

use crate::test_rng::Rng;

#[test]
fn random_buckets_never_panic_quantile() {
    let mut rng = Rng(7);
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-300,
        1e300,
    ];
    for _ in 0..20_000 {
        let n = rng.below(6);
        let b: Vec<(f64, f64)> = (0..n)
            .map(|_| (specials[rng.below(specials.len())], specials[rng.below(specials.len())]))
            .collect();
        let q = [0.0, 0.5, 0.99, 1.0, -1.0, 2.0, f64::NAN][rng.below(7)];
        let _ = quantile(q, &b);
    }
}
