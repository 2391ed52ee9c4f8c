//! Service traffic tried for real (the service_traffic probe): a try that
//! failed, and a try slower than the runbook's `time_connect` limit. Each
//! finding names the endpoint the try reached (its conntrack entry) and the
//! path it should have taken (the Service's current endpoints in the rules).

use serde_json::{json, Value};

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::service_traffic::{Path, Role, Try};
use crate::snapshot::Snapshot;

fn evidence(t: &Try) -> Value {
    json!({
        "target": t.target,
        "service": t.service,
        "result": t.result,
        "detail": t.detail,
        "seconds": t.seconds,
        "source": t.source,
        "endpoint_reached": t.endpoint,
        "path": t.path,
        "rule_endpoints": t.rule_endpoints,
    })
}

/// `default/kubernetes:443/tcp (10.96.0.1:443/tcp): refused at endpoint 10.0.0.5:6443 (current)`.
fn describe(t: &Try) -> String {
    let service = t.service.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
    let what = match (&t.detail, t.ok()) {
        (_, true) => format!("{:.0} ms", t.seconds.unwrap_or(0.0) * 1000.0),
        (Some(d), false) => format!("{}: {d}", t.result),
        (None, false) => t.result.clone(),
    };
    let path = match (&t.endpoint, t.path) {
        (Some(ep), Path::Stale) => format!(", reached {ep}, an endpoint its rules no longer list"),
        (Some(ep), _) => format!(", reached {ep}"),
        (None, Path::None) => ", no conntrack entry (no DNAT)".into(),
        (None, Path::NotTranslated) => ", not translated by the rules".into(),
        (None, _) => String::new(),
    };
    format!("{}{service}: {what}{path}", t.target)
}

/// The rules' endpoints, for the summary.
fn should(t: &Try) -> String {
    if t.rule_endpoints.is_empty() {
        "the rules list no endpoint".into()
    } else {
        format!("the rules send it to {}", t.rule_endpoints.join(", "))
    }
}

/// A failed try: critical for the API server and DNS, a warning for a named
/// Service. A built-in target not in kube-proxy's rules (another DNS Service
/// name, IPVS mode) is not judged; a named one is.
pub fn failing(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let f = s.facts.service_traffic.as_ref()?;
    let failed: Vec<&Try> = f
        .tries
        .iter()
        // A built-in target not in the rules is not judged; a named one is.
        .filter(|t| !(t.ok() || (t.result == "not_in_rules" && t.role != Role::Target)))
        .collect();
    let stale: Vec<&Try> = f.tries.iter().filter(|t| t.ok() && t.path == Path::Stale).collect();
    let severity = if failed.iter().any(|t| t.role != Role::Target) {
        Severity::Critical
    } else if !failed.is_empty() || !stale.is_empty() {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let tried = f.tries.iter().filter(|t| t.service.is_some()).count();
    let summary = match (failed.first(), stale.first()) {
        (Some(t), _) => format!(
            "Service traffic fails from this node: {}{} ({})",
            failed
                .iter()
                .take(3)
                .map(|t| describe(t))
                .collect::<Vec<_>>()
                .join("; "),
            if failed.len() > 3 {
                format!(" and {} more", failed.len() - 3)
            } else {
                String::new()
            },
            should(t)
        ),
        (None, Some(t)) => format!("Service traffic takes a stale path: {} ({})", describe(t), should(t)),
        (None, None) => format!("{tried} Service tries from this node succeeded"),
    };
    let mut finding = Finding::new(severity, summary)
        .evidence("failing", Value::Array(failed.iter().map(|t| evidence(t)).collect()))
        .evidence("stale_path", Value::Array(stale.iter().map(|t| evidence(t)).collect()))
        .evidence("tries", f.tries.len());
    if let Some(t) = failed.first().or(stale.first()) {
        let mut steps = Vec::new();
        if let Some(svc) = &t.service {
            let (addr, proto) = svc.rsplit_once('/').unwrap_or((svc, "tcp"));
            let (ip, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
            let ip = ip.trim_matches(['[', ']']);
            steps.push(format!(
                "See the conntrack entries of the Service port (read-only): conntrack -L -p {proto} --orig-dst {ip} --orig-port-dst {port}"
            ));
        }
        steps.extend([
            "Compare the endpoint reached with the Service's current endpoints (read-only): kubectl get endpointslices -n <namespace> -l kubernetes.io/service-name=<name> -o wide".to_string(),
            "refused: the endpoint (or kube-proxy's REJECT for a Service without endpoints) answered; check the pods behind the Service are Ready and listen on the target port. timeout with no conntrack entry: the packet never met kube-proxy's DNAT (rules missing: see kube_proxy_* findings); timeout with an entry: the endpoint is unreachable from this node (CNI, routing, MTU, a NetworkPolicy).".to_string(),
            "A stale path (an endpoint the rules no longer list): the entry outlived its endpoint; see finding conntrack_stale_endpoint_entries and delete that entry only: conntrack -D -p <protocol> --orig-dst <ClusterIP> --reply-src <old endpoint address>".to_string(),
        ]);
        finding = finding.remediation_owned(steps);
    }
    Some(finding)
}

/// A successful try slower than `--service-traffic.slow` (the runbook's 100 ms `time_connect`).
pub fn connect_slow(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let f = s.facts.service_traffic.as_ref()?;
    let limit = t.service_connect_slow_seconds;
    let slow: Vec<&Try> = f
        .tries
        .iter()
        .filter(|t| t.ok() && t.seconds.is_some_and(|s| s > limit))
        .collect();
    let severity = if slow.is_empty() {
        Severity::Ok
    } else {
        Severity::Warning
    };
    let summary = match slow.first() {
        Some(first) => format!(
            "Service connect time above {:.0} ms: {} ({})",
            limit * 1000.0,
            slow.iter().take(3).map(|t| describe(t)).collect::<Vec<_>>().join("; "),
            should(first)
        ),
        None => format!("every Service try under {:.0} ms", limit * 1000.0),
    };
    let mut finding = Finding::new(severity, summary)
        .evidence("slow", Value::Array(slow.iter().map(|t| evidence(t)).collect()))
        .evidence("slow_seconds", limit);
    if !slow.is_empty() {
        finding = finding.remediation(&[
            "Time it as the runbook does, from this node (read-only): curl -o /dev/null -s -w 'time_connect=%{time_connect}\\n' https://<ClusterIP>:<port>/ -k",
            "Slow only through the ClusterIP, fast to the endpoint directly: look at kube-proxy's rule programming (kube_proxy_sync_slow, iptables_rules_large); slow to the endpoint too: its node, the network between (CNI, MTU, tc qdiscs), or the endpoint itself.",
            "Compare with a baseline: proxywatch baseline save --try-services before.json, then proxywatch compare before.json.",
        ]);
    }
    Some(finding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::probe::service_traffic::ServiceTrafficFacts;

    fn try_(role: Role, result: &str, seconds: Option<f64>, path: Path) -> Try {
        Try {
            target: "kube-system/kube-dns:53/udp".into(),
            role,
            service: Some("10.96.0.10:53/udp".into()),
            result: result.into(),
            detail: None,
            seconds,
            answer_seconds: seconds,
            source: Some("192.168.0.2:40000".into()),
            endpoint: Some("10.244.1.2:53".into()),
            path,
            path_detail: None,
            rule_endpoints: vec!["10.244.1.2:53".into()],
        }
    }

    fn with(tries: Vec<Try>) -> Snapshot {
        let mut s = healthy();
        s.facts.service_traffic = Some(ServiceTrafficFacts {
            source: "nftables".into(),
            generation: 1,
            tries: tries.into(),
        });
        s
    }

    #[test]
    fn failing_by_role_and_stale_paths() {
        let t = crate::config::default_thresholds();
        assert_eq!(judge(failing, &healthy(), &t), None, "not tried: no judgement");
        let ok = with(vec![try_(Role::Dns, "ok", Some(0.002), Path::Current)]);
        assert_eq!(judge(failing, &ok, &t).unwrap().severity, Severity::Ok);
        let dns = judge(
            failing,
            &with(vec![try_(Role::Dns, "refused", None, Path::Current)]),
            &t,
        )
        .unwrap();
        assert_eq!(dns.severity, Severity::Critical);
        assert!(
            dns.summary.contains("refused, reached 10.244.1.2:53"),
            "{}",
            dns.summary
        );
        assert!(
            dns.summary.contains("the rules send it to 10.244.1.2:53"),
            "{}",
            dns.summary
        );
        assert!(dns.remediation[0].contains("--orig-dst 10.96.0.10 --orig-port-dst 53"));
        let named = with(vec![try_(Role::Target, "timeout", None, Path::None)]);
        assert_eq!(judge(failing, &named, &t).unwrap().severity, Severity::Warning);
        let absent = with(vec![try_(Role::Dns, "not_in_rules", None, Path::Unknown)]);
        assert_eq!(judge(failing, &absent, &t).unwrap().severity, Severity::Ok);
        let stale = judge(
            failing,
            &with(vec![try_(Role::Dns, "ok", Some(0.002), Path::Stale)]),
            &t,
        )
        .unwrap();
        assert_eq!(stale.severity, Severity::Warning);
        assert!(stale.summary.contains("no longer list"), "{}", stale.summary);
    }

    #[test]
    fn slow_above_the_threshold_only() {
        let t = crate::config::default_thresholds();
        assert_eq!(t.service_connect_slow_seconds, 0.1, "the runbook's 100 ms");
        let fast = with(vec![try_(Role::ApiServer, "ok", Some(0.1), Path::Current)]);
        assert_eq!(judge(connect_slow, &fast, &t).unwrap().severity, Severity::Ok);
        let slow = judge(
            connect_slow,
            &with(vec![try_(Role::ApiServer, "ok", Some(0.152), Path::Current)]),
            &t,
        )
        .unwrap();
        assert_eq!(slow.severity, Severity::Warning);
        assert!(
            slow.summary.contains("152 ms, reached 10.244.1.2:53"),
            "{}",
            slow.summary
        );
        let failed = with(vec![try_(Role::ApiServer, "timeout", Some(2.0), Path::None)]);
        assert_eq!(
            judge(connect_slow, &failed, &t).unwrap().severity,
            Severity::Ok,
            "failing's, not slow's"
        );
    }
}
