//! Service traffic kube-proxy rejects (no endpoints) or drops (no local
//! endpoint for `externalTrafficPolicy: Local`), from the rates the history
//! stage derived from the rule counters.

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::rule_counters::Reason;
use crate::snapshot::Snapshot;

/// A Service whose traffic is rejected or dropped at this rate or more (packets
/// per second, over the history window) raises the warning: a chosen floor, so
/// that a stray retry does not, while one client retrying every second does.
pub const SERVICE_REJECT_WARNING_PPS: f64 = 1.0;
/// Services named in the summary, at most (the evidence lists the top ones).
const NAMED: usize = 5;

pub fn traffic_rejected(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let r = s.derived.service_rejects.as_ref()?;
    if r.sources.is_empty() {
        return None;
    }
    let hot: Vec<_> = r
        .services
        .iter()
        .filter(|x| x.packets_per_second >= SERVICE_REJECT_WARNING_PPS)
        .collect();
    let severity = if hot.is_empty() {
        Severity::Ok
    } else {
        Severity::Warning
    };
    let name = |x: &crate::history::service_rejects::ServiceRate| {
        let who = x
            .service
            .clone()
            .unwrap_or_else(|| format!("(no comment) {}", x.targets.join(",")));
        let why = match x.reason {
            Reason::NoEndpoints => "rejected, no endpoints",
            Reason::NoLocalEndpoints => "dropped, no local endpoint",
            Reason::Invalid => "dropped, invalid",
        };
        format!("{who} {}: {:.1} packets/s {why}", x.protocol, x.packets_per_second)
    };
    let summary = if hot.is_empty() {
        format!("no Service's traffic is rejected or dropped at {SERVICE_REJECT_WARNING_PPS} packets/s or more")
    } else {
        let mut names: Vec<String> = hot.iter().take(NAMED).map(|x| name(x)).collect();
        if hot.len() > NAMED {
            names.push(format!("and {} more", hot.len() - NAMED));
        }
        format!(
            "clients are sending to Services kube-proxy cannot serve on this node: {}",
            names.join("; ")
        )
    };
    let services: Vec<serde_json::Value> = hot
        .iter()
        .map(|x| {
            serde_json::json!({
                "service": x.service,
                "reason": x.reason.as_str(),
                "protocol": x.protocol,
                "targets": x.targets,
                "packets_per_second": x.packets_per_second,
            })
        })
        .collect();
    let local = hot.iter().any(|x| x.reason == Reason::NoLocalEndpoints);
    let mut steps = vec![
        "Find the Service's endpoints: kubectl -n <namespace> get endpointslices -l kubernetes.io/service-name=<name> -o wide (empty: no ready Pod matches).".to_string(),
        "Compare its selector with the Pods' labels: kubectl -n <namespace> get service <name> -o jsonpath='{.spec.selector}'; kubectl -n <namespace> get pods -l <selector> (none, or none Ready: fix the selector or the Pods' readiness).".to_string(),
        "A Service scaled to zero on purpose: its clients keep retrying; point them elsewhere or remove the Service.".to_string(),
    ];
    if local {
        steps.push("externalTrafficPolicy: Local drops external traffic on nodes without a local endpoint. Why does this node receive it: the load balancer's health check (the Service's healthCheckNodePort, answered 503 here) must take the node out; a client or DNS record sending to this node's NodePort directly bypasses it. Check: kubectl -n <namespace> get service <name> -o jsonpath='{.spec.healthCheckNodePort}' and the load balancer's target health.".into());
    }
    Some(
        Finding::new(severity, summary)
            .evidence("services", services)
            .evidence("services_left_out", r.services_left_out)
            .evidence("window_seconds", r.seconds)
            .evidence("warning_packets_per_second", SERVICE_REJECT_WARNING_PPS)
            .evidence("sources", r.sources.clone())
            .evidence("undecoded_rules", r.undecoded)
            .remediation_owned(steps),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_thresholds;
    use crate::evaluate::effective_mode;
    use crate::history::service_rejects::{ServiceRate, ServiceRejects};

    fn judge(services: Vec<ServiceRate>, sources: &[&str]) -> Option<Finding> {
        let mut s = Snapshot::new("n");
        s.derived.service_rejects = Some(ServiceRejects {
            seconds: 30.0,
            sources: sources.iter().map(|x| x.to_string()).collect(),
            services,
            ..Default::default()
        });
        let t = default_thresholds();
        traffic_rejected(&s, &t, &effective_mode(&s, &t))
    }

    fn svc(service: Option<&str>, reason: Reason, pps: f64) -> ServiceRate {
        ServiceRate {
            reason,
            service: service.map(str::to_string),
            targets: vec!["*:30080".into()],
            protocol: "tcp".into(),
            packets_per_second: pps,
        }
    }

    #[test]
    fn names_the_services_with_their_rate_and_what_to_do() {
        let f = judge(
            vec![
                svc(Some("shop/cart:http"), Reason::NoLocalEndpoints, 12.5),
                svc(None, Reason::NoEndpoints, 2.0),
                svc(Some("a/b:c"), Reason::NoEndpoints, 0.5),
            ],
            &["nft ipv4"],
        )
        .unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.summary
                .contains("shop/cart:http tcp: 12.5 packets/s dropped, no local endpoint"),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("(no comment) *:30080"), "{}", f.summary);
        assert!(!f.summary.contains("a/b:c"), "below the floor");
        assert_eq!(f.evidence["services"].as_array().unwrap().len(), 2);
        assert!(f.remediation.iter().any(|r| r.contains("healthCheckNodePort")));
        assert_eq!(
            judge(vec![svc(Some("a/b:c"), Reason::NoEndpoints, 0.5)], &["nft ipv4"])
                .unwrap()
                .severity,
            Severity::Ok
        );
        assert!(judge(vec![], &[]).is_none(), "nothing read: no verdict, never ok");
    }
}
