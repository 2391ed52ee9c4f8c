//! Reverse-path filtering: packets it drops now, and strict mode on the interfaces of the
//! node's routes (Service traffic arriving by another interface than its reply's is dropped).

use super::{Finding, ModeDecision, Severity, Thresholds};
use crate::probe::rp_filter::RpFilterFacts;
use crate::snapshot::Snapshot;

/// Drops per second over `--rp-filter.window` that raise rp_filter_drops: a chosen floor, the
/// same as service_traffic_rejected's (`SERVICE_REJECT_WARNING_PPS`), above the odd spoofed
/// packet an exposed node gets.
pub const DROPS_PER_SECOND_WARNING: f64 = 1.0;

/// A drop-in of the agent's own name: appended to, never replaced.
pub const DROP_IN: &str = "/etc/sysctl.d/90-proxywatch-rp-filter.conf";

fn strict_interfaces(f: &RpFilterFacts) -> Vec<String> {
    f.interfaces
        .iter()
        .filter(|i| i.effective == 1)
        .map(|i| i.name.clone())
        .collect()
}

/// How to make the strict interfaces loose. Only the interfaces named: the kernel applies the
/// larger of conf.all and the interface's own value, and loose (2) is larger than strict (1), so
/// conf.all and every other interface keep theirs.
fn loosen(interfaces: &[String]) -> Vec<String> {
    let set: Vec<String> = interfaces
        .iter()
        .map(|i| format!("net.ipv4.conf.{i}.rp_filter=2"))
        .collect();
    let lines: Vec<String> = interfaces
        .iter()
        .map(|i| format!("echo 'net.ipv4.conf.{i}.rp_filter = 2' | sudo tee -a {DROP_IN}"))
        .collect();
    vec![
        format!("Loose mode (2) accepts a packet when any route leads back to its source, which asymmetric Service paths need (the kernel's documentation recommends it for asymmetric routing). Until the next reboot: sudo sysctl -w {}. conf.all is left as it is: the kernel takes the larger of conf.all and the interface's value, so 2 on the interface is enough and no other interface changes.", set.join(" ")),
        format!("To keep it, first see who sets it: grep -r rp_filter /etc/sysctl.conf /etc/sysctl.d/ /usr/lib/sysctl.d/ /run/sysctl.d/ (systemd's 50-default.conf sets net.ipv4.conf.*.rp_filter = 2 at boot and on each new interface); then fix that line, or append to a file of its own, never replacing one: {} (a file later in name order wins).", lines.join("; ")),
        "CNIs: Cilium sets 0 on its own interfaces (lxc*, cilium_*) and needs it (cilium#10645: systemd's wildcard set them to 2): leave those as Cilium sets them. Calico checks its pods' source addresses with an iptables rule of its own since January 2020 (projectcalico/felix#2189), so loose mode on the uplink opens no spoofing from pods; Calico releases before it refuse to start when conf.all is 2, which is why conf.all is not changed here.".to_string(),
    ]
}

pub fn drops(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let f = s.facts.rp_filter.as_ref()?;
    let d = s.derived.rp_filter_drops.as_ref()?;
    let severity = if d.per_second >= DROPS_PER_SECOND_WARNING {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let strict = strict_interfaces(f);
    let on = if strict.is_empty() {
        String::new()
    } else {
        format!(" (strict on {})", strict.join(", "))
    };
    let mut steps = vec![
        format!("The kernel dropped {} packet(s) in {:.0} s whose source it would not route back through the interface they came in by{on}: asymmetric routing (several uplinks, policy routing, a load balancer's direct return, a CNI's path back to a NodePort's local endpoint: cilium#13130), or spoofed traffic.", d.increase, d.seconds),
        "See which: nstat -az TcpExt:IPReversePathFilter (the counter: every protocol despite its name); sysctl -a -r '\\.rp_filter$' (every interface's value: the kernel takes the larger of conf.all and the interface's); ip route get <node address> from <client address> iif <interface> answers 'Invalid cross-device link' for a packet strict mode drops; sudo sysctl -w net.ipv4.conf.all.log_martians=1 logs each drop ('martian source ... on dev <interface>') to dmesg, until set back to 0.".to_string(),
    ];
    if !strict.is_empty() {
        steps.extend(loosen(&strict));
    }
    Some(
        Finding::new(
            severity,
            format!(
                "reverse-path filtering dropped {:.1} packets/s over the last {:.0} s{on}",
                d.per_second, d.seconds
            ),
        )
        .evidence("packets_per_second", d.per_second)
        .evidence("packets", d.increase)
        .evidence("window_seconds", d.seconds)
        .evidence("packets_total", f.drops_total)
        .evidence("strict_interfaces", strict)
        .evidence("warning_packets_per_second", DROPS_PER_SECOND_WARNING)
        .remediation_owned(steps),
    )
}

pub fn strict(s: &Snapshot, _: &Thresholds, _: &ModeDecision) -> Option<Finding> {
    let f = s.facts.rp_filter.as_ref()?;
    let strict = strict_interfaces(f);
    let severity = if strict.is_empty() {
        Severity::Ok
    } else {
        Severity::Info
    };
    let mut steps = Vec::new();
    if !strict.is_empty() {
        steps.push(format!("Strict reverse-path filtering (1) on {}: a packet is dropped unless the reply to its source would leave by the interface it came in by. Fine with one uplink and symmetric routes; with several uplinks, policy routing, a load balancer's direct return or a CNI that brings NodePort traffic back another way (cilium#13130), Service traffic is dropped without a trace but a counter: rp_filter_drops says when it is.", strict.join(", ")));
        steps.extend(loosen(&strict));
    }
    let values: serde_json::Map<String, serde_json::Value> = f
        .interfaces
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                serde_json::json!({"value": i.value, "effective": i.effective}),
            )
        })
        .collect();
    Some(
        Finding::new(
            severity,
            if strict.is_empty() {
                "no interface of the node's routes filters strictly".to_string()
            } else {
                format!("strict reverse-path filtering on {}", strict.join(", "))
            },
        )
        .evidence("all", f.all)
        .evidence("interfaces", serde_json::Value::Object(values))
        .evidence("interfaces_not_read", f.more_interfaces)
        .evidence("strict_interfaces", strict)
        .remediation_owned(steps),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::test_support::{healthy, judge};
    use crate::history::rp_filter::RpFilterDrops;
    use crate::probe::rp_filter::InterfaceFilter;

    fn node(all: i64, eth0: i64, rate: Option<f64>) -> Snapshot {
        let mut s = healthy();
        s.facts.rp_filter = Some(RpFilterFacts {
            all,
            interfaces: vec![InterfaceFilter {
                name: "eth0".into(),
                value: eth0,
                effective: all.max(eth0),
                default_route: true,
            }],
            more_interfaces: 0,
            drops_total: Some(1000),
        });
        s.derived.rp_filter_drops = rate.map(|r| RpFilterDrops {
            increase: (r * 60.0) as u64,
            seconds: 60.0,
            per_second: r,
        });
        s
    }

    #[test]
    fn strict_is_info_loose_or_off_is_not() {
        let t = crate::config::default_thresholds();
        let f = judge(strict, &node(0, 1, None), &t).unwrap();
        assert_eq!(
            (f.severity, f.summary.as_str()),
            (Severity::Info, "strict reverse-path filtering on eth0")
        );
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("sudo sysctl -w net.ipv4.conf.eth0.rp_filter=2.")));
        assert!(
            !f.remediation.iter().any(|r| r.contains("conf.all.rp_filter=")),
            "conf.all is never changed: 2 on the interface is enough"
        );
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("| sudo tee -a /etc/sysctl.d/90-proxywatch-rp-filter.conf")));
        // max(all, if): all=2 makes eth0's 1 loose.
        assert_eq!(judge(strict, &node(2, 1, None), &t).unwrap().severity, Severity::Ok);
        assert_eq!(judge(strict, &node(1, 0, None), &t).unwrap().severity, Severity::Info);
        assert!(judge(strict, &healthy(), &t).is_none());
    }

    #[test]
    fn drops_rising_past_the_floor_warn() {
        let t = crate::config::default_thresholds();
        let f = judge(drops, &node(0, 1, Some(200.0)), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.summary,
            "reverse-path filtering dropped 200.0 packets/s over the last 60 s (strict on eth0)"
        );
        assert_eq!(f.evidence["packets_per_second"], 200.0);
        assert_eq!(f.evidence["strict_interfaces"], serde_json::json!(["eth0"]));
        // Loose everywhere, drops anyway (no route back at all): no sysctl to change is offered.
        let f = judge(drops, &node(2, 2, Some(5.0)), &t).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(!f.remediation.iter().any(|r| r.contains(".rp_filter=2")));
        assert_eq!(judge(drops, &node(0, 1, Some(0.5)), &t).unwrap().severity, Severity::Ok);
        assert!(judge(drops, &node(0, 1, None), &t).is_none(), "one reading: no rate");
    }
}
