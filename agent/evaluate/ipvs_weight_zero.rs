//! IPVS real servers left at weight 0 (kubernetes/kubernetes#81775, #92019). kube-proxy's
//! graceful termination (pkg/proxy/ipvs/graceful_termination.go) sets a removed endpoint's TCP
//! real server to weight 0 and deletes it, checking every minute, once its ActiveConn + InActConn
//! is 0; UDP and SCTP real servers it deletes at once (`IsRsGracefulTerminationNeeded`,
//! util/ipvs.go), leaving their connections to `net.ipv4.vs.expire_nodest_conn`. So a TCP real
//! server at weight 0 with active connections long after is held by connections to an endpoint
//! that is likely gone (a warning); one with inactive connections only is near the end of that
//! wait, and one with none, or a UDP or SCTP one, kube-proxy did not leave so: worth a look, not
//! a page (info).

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::ipvs::WeightZeroRealServer;
use crate::snapshot::Snapshot;
use crate::timefmt::human_duration;

/// How many lingering real servers the evidence lists; `more` counts the rest.
const LISTED: usize = 10;

/// Whether kube-proxy keeps a real server of this protocol at weight 0 while it has connections
/// (TCP, and firewall-mark services, whose protocol IPVS does not say), or deletes it at once.
fn graceful(protocol: &str) -> bool {
    !protocol.eq_ignore_ascii_case("UDP") && !protocol.eq_ignore_ascii_case("SCTP")
}

/// `ipvsadm`'s options naming the virtual server of `rs` (`-t VIP:PORT`, `-u ...`, `-f MARK`).
fn service_option(rs: &WeightZeroRealServer) -> String {
    let k = &rs.service;
    if let Some(mark) = k.fwmark {
        return format!("-f {mark}{}", if rs.address.contains(':') { " -6" } else { "" });
    }
    let flag = match k.protocol.as_str() {
        "UDP" => "-u",
        "SCTP" => "--sctp-service",
        _ => "-t",
    };
    if k.address.contains(':') {
        format!("{flag} [{}]:{}", k.address, k.port)
    } else {
        format!("{flag} {}:{}", k.address, k.port)
    }
}

struct Lingering<'a> {
    rs: &'a WeightZeroRealServer,
    seconds: f64,
    since: Option<f64>,
    /// Held at weight 0 by active connections of a protocol kube-proxy waits for, or still
    /// given new connections through persistence templates: the warning.
    held: bool,
}

/// Whether IPVS still sends a template's client to a weight-0 real server: while
/// `net.ipv4.vs.expire_quiescent_template` is not 1 (kube-proxy sets 1; unread: assume 1).
fn templates_pin(s: &Snapshot) -> bool {
    s.facts
        .sysctls
        .as_ref()
        .and_then(|sys| sys.get("net.ipv4.vs.expire_quiescent_template"))
        .is_some_and(|v| v != 1)
}

pub fn real_servers_lingering(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipvs = s.facts.ipvs.as_ref()?;
    let ages = s.derived.ipvs_weight_zero.as_ref();
    let by_real_server = ages.map(|a| a.by_real_server()).unwrap_or_default();
    let at_zero: u64 = ipvs.weight_zero_by_protocol.values().sum();
    let after = t.ipvs_weight_zero_warning_seconds;
    let pin = templates_pin(s);
    let mut lingering: Vec<Lingering> = ipvs
        .weight_zero
        .iter()
        .filter_map(|rs| {
            let age = by_real_server.get(&(&rs.service, rs.address.as_str(), rs.port))?;
            (age.seconds >= after).then(|| Lingering {
                rs,
                seconds: age.seconds,
                since: Some(age.since_timestamp_seconds),
                held: (graceful(&rs.service.protocol) && rs.active_connections > 0)
                    || (pin && rs.templates.unwrap_or(0) > 0),
            })
        })
        .collect();
    // The warnings first, then the oldest.
    lingering.sort_by(|a, b| b.held.cmp(&a.held).then(b.seconds.total_cmp(&a.seconds)));
    let held = lingering.iter().filter(|l| l.held).count();
    let by_templates = lingering
        .iter()
        .filter(|l| pin && l.rs.templates.unwrap_or(0) > 0)
        .count();
    let oldest = ages.map_or(0.0, |a| a.max_seconds);
    let severity = if held > 0 {
        Severity::Warning
    } else if !lingering.is_empty() {
        Severity::Info
    } else {
        Severity::Ok
    };
    let limit = human_duration(after);
    let summary = match lingering.first() {
        None => format!("no IPVS real server has stood at weight 0 for {limit} or longer ({at_zero} at weight 0 now)"),
        Some(first) => format!(
            "{} IPVS real server(s) at weight 0 for {limit} or longer, {held} of them TCP or firewall-mark with active connections (kube-proxy keeps such a real server until its connections end){}; the first: {} -> {}, {} at weight 0, {} active / {} inactive connections{}",
            lingering.len(),
            if by_templates > 0 {
                format!(" or still given new ones through persistence templates ({by_templates})")
            } else {
                String::new()
            },
            first.rs.virtual_server(),
            first.rs.real_server(),
            human_duration(first.seconds),
            first.rs.active_connections,
            first.rs.inactive_connections,
            pinned(first.rs, pin),
        ),
    };
    let listed: Vec<serde_json::Value> = lingering
        .iter()
        .take(LISTED)
        .map(|l| {
            serde_json::json!({
                "virtual_server": l.rs.virtual_server(),
                "real_server": l.rs.real_server(),
                "seconds_at_weight_zero": l.seconds,
                "since_timestamp_seconds": l.since,
                "active_connections": l.rs.active_connections,
                "inactive_connections": l.rs.inactive_connections,
                "held_by_active_connections": l.held,
                "persistence_templates": l.rs.templates,
            })
        })
        .collect();
    let mut f = Finding::new(severity, summary)
        .evidence("lingering", lingering.len())
        .evidence("held_by_active_connections", held)
        .evidence("at_weight_zero", at_zero)
        .evidence("not_aged", at_zero.saturating_sub(ipvs.weight_zero.len() as u64))
        .evidence("oldest_seconds", oldest)
        .evidence("warning_after_seconds", after)
        .evidence("first", listed)
        .evidence("more", lingering.len().saturating_sub(LISTED))
        .evidence("net.ipv4.vs.expire_quiescent_template", quiescent(s))
        .evidence("templates_read", ipvs.templates.as_ref().map(|t| t.entries_read))
        .evidence("templates_truncated", ipvs.templates.as_ref().map(|t| t.truncated))
        .evidence("templates_error", ipvs.templates_error.clone());
    if let Some(first) = lingering.first() {
        f = f.remediation_owned(steps(first.rs, pin));
    }
    Some(f)
}

fn quiescent(s: &Snapshot) -> Option<i64> {
    s.facts
        .sysctls
        .as_ref()
        .and_then(|sys| sys.get("net.ipv4.vs.expire_quiescent_template"))
}

/// `, 3 persistence templates pinning clients to it (...)`, or nothing where none were counted.
fn pinned(rs: &WeightZeroRealServer, pin: bool) -> String {
    match rs.templates {
        Some(n) if n > 0 && pin => format!(
            ", {n} persistence template(s) still sending their clients' new connections to it (net.ipv4.vs.expire_quiescent_template is not 1)"
        ),
        Some(n) if n > 0 => format!(", {n} persistence template(s) pointing at it"),
        _ => String::new(),
    }
}

/// The runbook's steps, with the first lingering real server filled in.
fn steps(rs: &WeightZeroRealServer, pin: bool) -> Vec<String> {
    let svc = service_option(rs);
    let real = rs.real_server();
    let mut steps = vec![
        format!("Look at it: ipvsadm -Ln {svc} (Weight 0, ActiveConn, InActConn), and its connections: ipvsadm -Lnc | grep -F '{real}'"),
        format!("Is the endpoint still there? kubectl get endpointslices -A -o wide | grep -wF '{}'. A terminating pod with a long terminationGracePeriodSeconds, or long-lived connections (gRPC, WebSocket, database pools) draining as designed, is no fault: raise --ipvs.weight-zero-warning above that grace period. A ready endpoint should not be at weight 0 at all: a kube-proxy restart can leave it so (kubernetes/kubernetes#92019); removing the real server (last step) lets kube-proxy's next sync add it back.", rs.address),
        "If the pod is gone, its connections lead nowhere: kube-proxy deletes the real server only once ActiveConn + InActConn is 0, and IPVS drops an idle connection only after its timeout. See the node's timeouts with ipvsadm -Ln --timeout; kube-proxy sets them from --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and --ipvs-udp-timeout (ipvs.tcpTimeout, tcpFinTimeout, udpTimeout in its ConfigMap; 0 leaves the kernel's). A shorter TCP timeout frees idle ones sooner; a client that keeps sending is never idle: restart that client.".to_string(),
        format!("To remove this one real server now, once the endpoint is gone (or ready, above): ipvsadm -d {svc} -r {real} (its connections are dropped at their next packet with net.ipv4.vs.expire_nodest_conn=1; kube-proxy adds back only a real server its endpoints still have)."),
    ];
    if rs.templates.unwrap_or(0) > 0 {
        steps.insert(
            1,
            format!(
                "Its persistence templates (sessionAffinity: ClientIP): ipvsadm -Lnc | grep -F ' {real}' | grep -E ' (NONE|ASSURED) ' lists them (client port 0, state NONE or ASSURED). {}",
                if pin {
                    "With net.ipv4.vs.expire_quiescent_template=0 IPVS keeps sending those clients' new connections here; kube-proxy sets it to 1, which drops a template at its next use once its real server is at weight 0: sysctl -w net.ipv4.vs.expire_quiescent_template=1"
                } else {
                    "With net.ipv4.vs.expire_quiescent_template=1 (kube-proxy's setting) IPVS drops each at its client's next connection and schedules that one afresh: they expire on their own."
                }
            ),
        );
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::ipvs_weight_zero::{WeightZeroAge, WeightZeroAges};
    use crate::probe::ipvs::{IpvsFacts, ServiceKey};

    fn rs(protocol: &str, vip: &str, backend: &str, active: u64, inactive: u64) -> WeightZeroRealServer {
        WeightZeroRealServer {
            service: ServiceKey {
                protocol: protocol.into(),
                address: vip.into(),
                port: 53,
                fwmark: None,
            },
            address: backend.into(),
            port: 8053,
            active_connections: active,
            inactive_connections: inactive,
            ..Default::default()
        }
    }

    /// A node whose weight-0 real servers have stood so for the given seconds.
    fn node(list: &[(WeightZeroRealServer, f64)]) -> Snapshot {
        let mut s = healthy();
        let mut facts = IpvsFacts {
            source: "ipvsadm".into(),
            virtual_servers: 3,
            ..Default::default()
        };
        let mut ages = WeightZeroAges::default();
        for (r, secs) in list {
            *facts
                .weight_zero_by_protocol
                .entry(r.service.protocol.clone())
                .or_insert(0) += 1;
            facts.weight_zero.push(r.clone());
            ages.real_servers.push(WeightZeroAge {
                service: r.service.clone(),
                address: r.address.clone(),
                port: r.port,
                seconds: *secs,
                since_timestamp_seconds: 1_000_000.0 - secs,
            });
            ages.max_seconds = ages.max_seconds.max(*secs);
        }
        s.facts.ipvs = Some(facts);
        s.derived.ipvs_weight_zero = Some(ages);
        s
    }

    #[test]
    fn templates_that_still_pin_clients_make_a_real_server_without_connections_a_warning() {
        let t = crate::config::default_thresholds();
        let mut pinned = rs("TCP", "10.96.0.1", "10.244.1.7", 0, 0);
        (pinned.persistent, pinned.templates) = (true, Some(3));
        let mut s = node(&[(pinned.clone(), 1800.0)]);
        // kube-proxy's setting: the templates are dropped at their next use, an info.
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_quiescent_template", 1);
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.evidence["first"][0]["persistence_templates"], 3);
        assert!(
            f.summary.ends_with(", 3 persistence template(s) pointing at it"),
            "{}",
            f.summary
        );
        assert!(f.remediation[1].contains("expire on their own"), "{:?}", f.remediation);
        // Reset to 0: IPVS keeps sending those clients' new connections to it, a warning.
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_quiescent_template", 0);
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["held_by_active_connections"], 1);
        assert!(f.summary.contains("through persistence templates (1)"), "{}", f.summary);
        assert!(
            f.summary.contains("3 persistence template(s) still sending"),
            "{}",
            f.summary
        );
        assert!(
            f.remediation[1].contains("sysctl -w net.ipv4.vs.expire_quiescent_template=1"),
            "{:?}",
            f.remediation
        );
        // No template counted (not persistent, or none pointing at it): no such step.
        pinned.templates = Some(0);
        let mut s = node(&[(pinned, 1800.0)]);
        crate::evaluate::test_support::set_sysctl(&mut s, "net.ipv4.vs.expire_quiescent_template", 0);
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert!(f.remediation.iter().all(|r| !r.contains("persistence templates")));
    }

    #[test]
    fn tcp_with_active_connections_past_the_threshold_is_a_warning_naming_it() {
        let t = crate::config::default_thresholds();
        assert_eq!(t.ipvs_weight_zero_warning_seconds, 1800.0, "the flag's default, 30m");
        let s = node(&[(rs("TCP", "10.96.0.10", "10.244.1.5", 12, 3), 1800.0)]);
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.summary,
            "1 IPVS real server(s) at weight 0 for 30 minutes or longer, 1 of them TCP or firewall-mark with active connections (kube-proxy keeps such a real server until its connections end); the first: TCP 10.96.0.10:53 -> 10.244.1.5:8053, 30 minutes at weight 0, 12 active / 3 inactive connections"
        );
        let first = &f.evidence["first"][0];
        assert_eq!(first["virtual_server"], "TCP 10.96.0.10:53");
        assert_eq!(first["real_server"], "10.244.1.5:8053");
        assert_eq!(first["seconds_at_weight_zero"], 1800.0);
        assert_eq!(first["since_timestamp_seconds"], 998_200.0);
        assert_eq!(
            (
                first["active_connections"].as_u64(),
                first["inactive_connections"].as_u64()
            ),
            (Some(12), Some(3))
        );
        assert_eq!(f.evidence["more"], 0);
        assert!(
            f.remediation[0].contains("ipvsadm -Ln -t 10.96.0.10:53"),
            "{:?}",
            f.remediation
        );
        assert!(f.remediation[3].contains("ipvsadm -d -t 10.96.0.10:53 -r 10.244.1.5:8053"));
        // A second short of the threshold: nothing lingers yet.
        let s = node(&[(rs("TCP", "10.96.0.10", "10.244.1.5", 12, 3), 1799.0)]);
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(f.severity, Severity::Ok);
        assert_eq!(f.evidence["lingering"], 0);
        assert_eq!(f.evidence["at_weight_zero"], 1);
        assert!(f.remediation.is_empty());
        // The threshold is the flag's.
        let mut low = t.clone();
        low.ipvs_weight_zero_warning_seconds = 60.0;
        assert_eq!(
            judge(real_servers_lingering, &s, &low).unwrap().severity,
            Severity::Warning
        );
    }

    #[test]
    fn udp_sctp_and_idle_tcp_are_info() {
        let t = crate::config::default_thresholds();
        for r in [
            rs("UDP", "10.96.0.10", "10.244.1.5", 0, 40),
            rs("SCTP", "10.96.0.10", "10.244.1.5", 4, 0),
            rs("TCP", "10.96.0.10", "10.244.1.5", 0, 7),
            rs("TCP", "10.96.0.10", "10.244.1.5", 0, 0),
        ] {
            let f = judge(real_servers_lingering, &node(&[(r.clone(), 7200.0)]), &t).unwrap();
            assert_eq!(f.severity, Severity::Info, "{r:?}");
            assert_eq!(f.evidence["held_by_active_connections"], 0);
        }
        let f = judge(
            real_servers_lingering,
            &node(&[(rs("UDP", "fd00::10", "fd00:10::5", 0, 40), 7200.0)]),
            &t,
        )
        .unwrap();
        assert!(
            f.remediation[0].contains("ipvsadm -Ln -u [fd00::10]:53"),
            "{:?}",
            f.remediation
        );
        assert!(f.remediation[0].contains("grep -F '[fd00:10::5]:8053'"));
    }

    #[test]
    fn the_list_is_bounded_warnings_first_and_says_how_many_more() {
        let t = crate::config::default_thresholds();
        let mut list: Vec<(WeightZeroRealServer, f64)> = (0..14)
            .map(|i| {
                (
                    rs("UDP", "10.96.0.10", &format!("10.244.2.{i}"), 0, 1),
                    4000.0 + i as f64,
                )
            })
            .collect();
        list.push((rs("TCP", "10.96.0.11", "10.244.3.1", 2, 0), 1900.0));
        list.push((rs("TCP", "10.96.0.11", "10.244.3.2", 2, 0), 100.0));
        let f = judge(real_servers_lingering, &node(&list), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            (
                f.evidence["lingering"].as_u64(),
                f.evidence["held_by_active_connections"].as_u64()
            ),
            (Some(15), Some(1))
        );
        assert_eq!(f.evidence["at_weight_zero"], 16);
        let first = f.evidence["first"].as_array().unwrap();
        assert_eq!(first.len(), LISTED);
        assert_eq!(first[0]["real_server"], "10.244.3.1:8053", "the warning first");
        assert_eq!(first[1]["real_server"], "10.244.2.13:8053", "then the oldest");
        assert_eq!(f.evidence["more"], 5);
        assert_eq!(f.evidence["oldest_seconds"], 4013.0);
    }

    #[test]
    fn no_age_means_not_lingering_and_no_reading_means_no_finding() {
        let t = crate::config::default_thresholds();
        let mut s = node(&[(rs("TCP", "10.96.0.10", "10.244.1.5", 12, 3), 7200.0)]);
        s.derived.ipvs_weight_zero = None;
        let f = judge(real_servers_lingering, &s, &t).unwrap();
        assert_eq!(
            (f.severity, f.evidence["at_weight_zero"].as_u64()),
            (Severity::Ok, Some(1))
        );
        assert!(judge(real_servers_lingering, &healthy(), &t).is_none());
        // Firewall-mark services are judged as TCP and named by their mark.
        let mut fwm = rs("FWM", "", "10.244.1.5", 1, 0);
        fwm.service.fwmark = Some(7);
        fwm.service.port = 0;
        let f = judge(real_servers_lingering, &node(&[(fwm, 7200.0)]), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.evidence["first"][0]["virtual_server"], "FWM 7");
        assert!(f.remediation[3].contains("ipvsadm -d -f 7 -r 10.244.1.5:8053"));
    }
}
