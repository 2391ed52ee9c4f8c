//! The service_traffic probe's series: the tries' times as a histogram, the
//! tries by result (both from history: since the agent started), and whether
//! each target's latest try succeeded. The `target` label is bounded: the
//! three built-in tries and at most `MAX_TARGETS` flags, each with its NodePort.

use prometheus::core::{Collector, Desc};
use prometheus::proto;

use super::Out;
use crate::snapshot::Snapshot;

/// A histogram whose buckets history already counted (the registry is made afresh per render).
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

const HISTOGRAM: &str = "proxywatch_service_traffic_connect_seconds";
const HISTOGRAM_HELP: &str = "Time of the service_traffic probe's successful tries per target since the agent started: the TCP connect time through the Service's ClusterIP (DNS over UDP: the answer time).";

pub(super) fn service_traffic(out: &Out, s: &Snapshot) {
    if let Some(d) = &s.derived.service_traffic {
        let mut metrics = Vec::new();
        for t in &d.targets {
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
        for t in &d.targets {
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
        for t in &f.tries {
            ok.with_label_values(&[t.target.as_str()])
                .set(if t.ok() { 1.0 } else { 0.0 });
        }
    }
}
