//! The service_traffic probe's series: the tries' times as a histogram, the
//! tries by result (both from history: since the agent started), and whether
//! each target's latest try succeeded. The `target` label is bounded: the
//! three built-in tries and at most `MAX_TARGETS` flags, each with its NodePort.
//!
//! Written as text, line by line as the prometheus crate's encoder writes them (a test holds
//! the two to the same bytes): 23 targets are some 400 lines that change after every run, and
//! building them as registry metrics, gathering and encoding those cost several times writing
//! them, in time and in the memory each publication passes through (docs/benchmarks.md, issue 37).

use std::io::Write;

use super::Out;
use crate::snapshot::Snapshot;

const HISTOGRAM: &str = "proxywatch_service_traffic_connect_seconds";
const HISTOGRAM_HELP: &str = "Time of the service_traffic probe's successful tries per target since the agent started: the TCP connect time through the Service's ClusterIP (DNS over UDP: the answer time).";
const TRIES: &str = "proxywatch_service_traffic_tries_total";
const TRIES_HELP: &str = "Tries of the service_traffic probe per target since the agent started, by result: ok, refused, timeout, unreachable, dns_rcode, error, not_in_rules.";
const SUCCESS: &str = "proxywatch_service_traffic_success";
const SUCCESS_HELP: &str = "1 when the target's latest service_traffic try succeeded (connected; DNS: a NOERROR answer with records), 0 when it failed or its Service is not in kube-proxy's rules.";

/// A label value as the text format escapes it (backslash, newline, double quote).
fn label(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '\n', '"']) {
        return v.into();
    }
    v.replace('\\', "\\\\").replace('\n', "\\n").replace('"', "\\\"").into()
}

/// `# HELP` and `# TYPE` (help texts here have nothing to escape).
fn header(o: &mut Vec<u8>, name: &str, help: &str, kind: &str) {
    let _ = write!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

pub(super) fn service_traffic(out: &Out, s: &Snapshot) {
    if let Some(d) = s.derived.service_traffic.as_ref().filter(|d| !d.targets.is_empty()) {
        // The history's targets are sorted by name, as the encoder sorts a family's series.
        let mut o = Vec::with_capacity(d.targets.len() * 1600);
        header(&mut o, HISTOGRAM, HISTOGRAM_HELP, "histogram");
        for t in d.targets.iter() {
            let target = label(&t.target);
            for (le, n) in crate::history::service_traffic::BUCKETS.iter().zip(&t.buckets) {
                let _ = writeln!(o, "{HISTOGRAM}_bucket{{target=\"{target}\",le=\"{le}\"}} {}", *n as f64);
            }
            let _ = writeln!(
                o,
                "{HISTOGRAM}_bucket{{target=\"{target}\",le=\"+Inf\"}} {}",
                t.count as f64
            );
            let _ = writeln!(o, "{HISTOGRAM}_sum{{target=\"{target}\"}} {}", t.sum_seconds);
            let _ = writeln!(o, "{HISTOGRAM}_count{{target=\"{target}\"}} {}", t.count as f64);
        }
        out.written(HISTOGRAM, o);
        // By result, then target (the labels sorted by name, the series by their values).
        let mut tries: Vec<(&str, &str, u64)> = d
            .targets
            .iter()
            .flat_map(|t| t.tries.iter().map(|(r, n)| (r.as_str(), t.target.as_str(), *n)))
            .collect();
        tries.sort_unstable();
        let mut o = Vec::with_capacity(tries.len() * 100 + 300);
        header(&mut o, TRIES, TRIES_HELP, "counter");
        for (result, target, n) in tries {
            let _ = writeln!(
                o,
                "{TRIES}{{result=\"{}\",target=\"{}\"}} {}",
                label(result),
                label(target),
                n as f64
            );
        }
        out.written(TRIES, o);
    }
    if let Some(f) = s.facts.service_traffic.as_ref().filter(|f| !f.tries.is_empty()) {
        // One series per target, sorted: a target tried twice in a run is its later try.
        let latest: std::collections::BTreeMap<&str, bool> =
            f.tries.iter().map(|t| (t.target.as_str(), t.ok())).collect();
        let mut o = Vec::with_capacity(latest.len() * 100 + 300);
        header(&mut o, SUCCESS, SUCCESS_HELP, "gauge");
        for (target, ok) in latest {
            let _ = writeln!(o, "{SUCCESS}{{target=\"{}\"}} {}", label(target), u8::from(ok));
        }
        out.written(SUCCESS, o);
    }
}

#[cfg(test)]
mod tests {
    use prometheus::core::{Collector, Desc};
    use prometheus::proto;

    use super::*;
    use crate::history::service_traffic::ServiceTrafficHistory;
    use crate::probe::service_traffic::{Path, Role, ServiceTrafficFacts, Try};

    /// A histogram whose buckets history already counted.
    struct Counted {
        desc: Desc,
        family: proto::MetricFamily,
    }

    impl Collector for Counted {
        fn desc(&self) -> Vec<&Desc> {
            vec![&self.desc]
        }

        fn collect(&self) -> Vec<proto::MetricFamily> {
            vec![self.family.clone()]
        }
    }

    /// The three families as registry metrics, what this section was before it wrote them.
    fn through_the_registry(out: &Out, s: &Snapshot) {
        if let Some(d) = &s.derived.service_traffic {
            let mut metrics = Vec::new();
            for t in d.targets.iter() {
                let mut label = proto::LabelPair::default();
                label.set_name("target".into());
                label.set_value(t.target.clone());
                let mut h = proto::Histogram::default();
                h.set_sample_count(t.count);
                h.set_sample_sum(t.sum_seconds);
                h.set_bucket(
                    crate::history::service_traffic::BUCKETS
                        .iter()
                        .zip(&t.buckets)
                        .map(|(le, n)| {
                            let mut b = proto::Bucket::default();
                            b.set_upper_bound(*le);
                            b.set_cumulative_count(*n);
                            b
                        })
                        .collect(),
                );
                let mut m = proto::Metric::from_label(vec![label]);
                m.set_histogram(h);
                metrics.push(m);
            }
            if let Ok(desc) = Desc::new(
                HISTOGRAM.into(),
                HISTOGRAM_HELP.into(),
                vec!["target".into()],
                Default::default(),
            ) {
                let mut family = proto::MetricFamily::default();
                family.set_name(HISTOGRAM.into());
                family.set_help(HISTOGRAM_HELP.into());
                family.set_field_type(proto::MetricType::HISTOGRAM);
                family.set_metric(metrics);
                if let Err(e) = out.registry.register(Box::new(Counted { desc, family })) {
                    tracing::error!("metric registration failed: {e}");
                }
            }
            let tries = out.counter(
                "proxywatch_service_traffic_tries_total",
                "Tries of the service_traffic probe per target since the agent started, by result: ok, refused, timeout, unreachable, dns_rcode, error, not_in_rules.",
                &["target", "result"],
            );
            for t in d.targets.iter() {
                for (result, n) in &t.tries {
                    tries
                        .with_label_values(&[t.target.as_str(), result.as_str()])
                        .inc_by(*n);
                }
            }
        }
        if let Some(f) = &s.facts.service_traffic {
            let ok = out.gauge(
                "proxywatch_service_traffic_success",
                "1 when the target's latest service_traffic try succeeded (connected; DNS: a NOERROR answer with records), 0 when it failed or its Service is not in kube-proxy's rules.",
                &["target"],
            );
            for t in f.tries.iter() {
                ok.with_label_values(&[t.target.as_str()])
                    .set(if t.ok() { 1.0 } else { 0.0 });
            }
        }
    }

    fn try_(target: &str, result: &str, s: f64) -> Try {
        Try {
            target: target.into(),
            role: Role::Target,
            service: None,
            result: result.into(),
            detail: None,
            seconds: Some(s),
            answer_seconds: None,
            source: None,
            endpoint: None,
            path: Path::Current,
            path_detail: None,
            rule_endpoints: vec![],
        }
    }

    /// The families written as text are, byte for byte and in their places among the others,
    /// what the prometheus crate's registry and encoder write for the same series.
    #[test]
    fn written_families_are_what_the_encoder_writes() {
        let mut h = ServiceTrafficHistory::default();
        let mut s = crate::evaluate::test_support::healthy();
        let mut facts = ServiceTrafficFacts::default();
        for i in 0..30u32 {
            facts.tries = std::sync::Arc::new(vec![
                try_("default/kubernetes:443/tcp", "ok", 0.0004 + f64::from(i) * 0.0001),
                try_(
                    "kube-system/kube-dns:53/udp",
                    if i % 3 == 0 { "timeout" } else { "ok" },
                    0.3,
                ),
                try_("default/web:80/tcp nodeport", "refused", 0.0002),
                try_("odd/\"quoted\\name\n:80/tcp", "ok", 2.6),
                try_(
                    "default/web:80/tcp",
                    if i % 2 == 0 { "ok" } else { "not_in_rules" },
                    7.0,
                ),
            ]);
            s.derived.service_traffic = Some(h.observe(&facts));
        }
        s.facts.service_traffic = Some(facts);
        let written = String::from_utf8(super::super::render_into(&s, &[], Vec::new())).unwrap();
        let out = Out::new();
        super::super::build_info(&out);
        super::super::probes(&out, &s);
        super::super::probe_sections(&out, &s);
        through_the_registry(&out, &s);
        super::super::netlink_counts(&out, &s);
        super::super::service_rejects::render(&out, &s);
        super::super::nftables_watch::render(&out, &s);
        super::super::own_process(&out);
        super::super::findings(&out, &[]);
        let mut registry = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &out.registry.gather(), &mut registry).unwrap();
        let registry = String::from_utf8(registry).unwrap();
        // The agent's own process (its CPU, its memory) moves between two renders.
        let steady = |t: &str| -> String {
            t.lines()
                .filter(|l| !l.contains("process_"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(written.contains("proxywatch_service_traffic_connect_seconds_bucket{target=\"odd/\\\"quoted\\\\name\\n:80/tcp\",le=\"5\"} 30"), "{written}");
        assert!(
            written.contains(
                "proxywatch_service_traffic_tries_total{result=\"not_in_rules\",target=\"default/web:80/tcp\"} 15"
            ),
            "{written}"
        );
        assert_eq!(steady(&written), steady(&registry));
    }
}
