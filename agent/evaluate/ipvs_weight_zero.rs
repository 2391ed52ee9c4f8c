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
    /// Held at weight 0 by active connections of a protocol kube-proxy waits for: the warning.
    held: bool,
}

pub fn real_servers_lingering(s: &Snapshot, t: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let ipvs = s.facts.ipvs.as_ref()?;
    let ages = s.derived.ipvs_weight_zero.as_ref();
    let by_real_server = ages.map(|a| a.by_real_server()).unwrap_or_default();
    let at_zero: u64 = ipvs.weight_zero_by_protocol.values().sum();
    let after = t.ipvs_weight_zero_warning_seconds;
    let mut lingering: Vec<Lingering> = ipvs
        .weight_zero
        .iter()
        .filter_map(|rs| {
            let age = by_real_server.get(&(&rs.service, rs.address.as_str(), rs.port))?;
            (age.seconds >= after).then(|| Lingering {
                rs,
                seconds: age.seconds,
                since: Some(age.since_timestamp_seconds),
                held: graceful(&rs.service.protocol) && rs.active_connections > 0,
            })
        })
        .collect();
    // The warnings first, then the oldest.
    lingering.sort_by(|a, b| b.held.cmp(&a.held).then(b.seconds.total_cmp(&a.seconds)));
    let held = lingering.iter().filter(|l| l.held).count();
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
            "{} IPVS real server(s) at weight 0 for {limit} or longer, {held} of them TCP or firewall-mark with active connections (kube-proxy keeps such a real server until its connections end); the first: {} -> {}, {} at weight 0, {} active / {} inactive connections",
            lingering.len(),
            first.rs.virtual_server(),
            first.rs.real_server(),
            human_duration(first.seconds),
            first.rs.active_connections,
            first.rs.inactive_connections,
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
        .evidence("more", lingering.len().saturating_sub(LISTED));
    if let Some(first) = lingering.first() {
        f = f.remediation_owned(steps(first.rs));
    }
    Some(f)
}

/// The runbook's steps, with the first lingering real server filled in.
fn steps(rs: &WeightZeroRealServer) -> Vec<String> {
    let svc = service_option(rs);
    let real = rs.real_server();
    vec![
        format!("Look at it: ipvsadm -Ln {svc} (Weight 0, ActiveConn, InActConn), and its connections: ipvsadm -Lnc | grep -F '{real}'"),
        format!("Is the endpoint still there? kubectl get endpointslices -A -o wide | grep -wF '{}'. A terminating pod with a long terminationGracePeriodSeconds, or long-lived connections (gRPC, WebSocket, database pools) draining as designed, is no fault: raise --ipvs.weight-zero-warning above that grace period. A ready endpoint should not be at weight 0 at all: a kube-proxy restart can leave it so (kubernetes/kubernetes#92019); removing the real server (last step) lets kube-proxy's next sync add it back.", rs.address),
        "If the pod is gone, its connections lead nowhere: kube-proxy deletes the real server only once ActiveConn + InActConn is 0, and IPVS drops an idle connection only after its timeout. See the node's timeouts with ipvsadm -Ln --timeout; kube-proxy sets them from --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and --ipvs-udp-timeout (ipvs.tcpTimeout, tcpFinTimeout, udpTimeout in its ConfigMap; 0 leaves the kernel's). A shorter TCP timeout frees idle ones sooner; a client that keeps sending is never idle: restart that client.".to_string(),
        format!("To remove this one real server now, once the endpoint is gone (or ready, above): ipvsadm -d {svc} -r {real} (its connections are dropped at their next packet with net.ipv4.vs.expire_nodest_conn=1; kube-proxy adds back only a real server its endpoints still have)."),
    ]
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
