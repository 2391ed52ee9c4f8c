//! Packets per second kube-proxy rejects or drops, per reason and protocol and
//! per Service, from the rule counters the iptables probe read at each run.
//!
//! A rule's counter counts from the moment the rule was written, and
//! kube-proxy rewrites its filter chains at every sync: iptables-nft-restore
//! gives the new rules new handles, iptables-legacy-restore (no `-c`) zeroes
//! them. Per rule (its handle, or for legacy its text): the increase since the
//! previous reading; a rule not seen in the previous reading of its source was
//! written since then, so its whole counter is the increase; a counter that
//! went down was reset, so its value is. Never a negative, and never a spike:
//! the first reading of a source is only a baseline. (A legacy rule zeroed and
//! grown past its old value between two readings is undercounted: its
//! text is its only identity.)

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::probe::rule_counters::{Reason, RuleCounters};

/// Rates are over this long (seconds), or over the last probe interval when that is
/// longer (`--iptables.interval`, 60 s by default): at least two readings.
pub const SERVICE_REJECT_WINDOW_SECONDS: f64 = 30.0;
/// Services listed in the snapshot, at most (the highest rates).
pub const TOP_SERVICES: usize = 20;
/// Intervals kept, at most (one per probe run).
const CAPACITY: usize = 512;
/// Distinct Services remembered per interval, at most (the rest are summed in the totals only).
const GROUPS_PER_INTERVAL: usize = 1000;

/// One reason and protocol's rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasonRate {
    pub reason: Reason,
    /// `tcp`, `udp`, `sctp` or `any`.
    pub protocol: String,
    /// Packets per second over the window.
    pub packets_per_second: f64,
    /// Packets counted since the agent started (increases only: a counter for Prometheus' rate()).
    pub packets_total: u64,
}

/// One Service's rate (all its rules of one reason and protocol together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRate {
    pub reason: Reason,
    /// `namespace/name:port` from kube-proxy's comment; None when the comment is missing or cut.
    pub service: Option<String>,
    /// What the rules match (`address:port`, `*:nodeport`), sorted.
    pub targets: Vec<String>,
    pub protocol: String,
    /// Packets per second over the window.
    pub packets_per_second: f64,
}

/// What the history derived from the reject and drop rule counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceRejects {
    /// The window covered (oldest reading kept to newest), in seconds.
    pub seconds: f64,
    /// The sources the rates cover (`nft ipv4`, `legacy ipv6`...).
    pub sources: Vec<String>,
    /// Per reason and protocol: every reason with tcp/udp/sctp (invalid: any), zeros included.
    pub totals: Vec<ReasonRate>,
    /// The Services with the highest non-zero rates, at most [`TOP_SERVICES`], highest first.
    pub services: Vec<ServiceRate>,
    /// Services with a non-zero rate not listed.
    pub services_left_out: usize,
    /// Reject/drop rules whose counter was not understood (the latest reading).
    pub undecoded: u64,
    /// What could not be read, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

type Group = (Reason, Option<String>, String);

#[derive(Debug, Default)]
struct Interval {
    end: f64,
    totals: BTreeMap<(Reason, String), u64>,
    groups: HashMap<Group, (u64, Vec<String>)>,
}

#[derive(Debug, Default)]
pub struct ServiceRejectHistory {
    /// The previous counter of each rule, by (backend, family, chain, id).
    last: HashMap<(&'static str, &'static str, &'static str, u64), u64>,
    /// Sources read at least once (their next readings are increases).
    seen: HashSet<String>,
    start: Option<f64>,
    intervals: VecDeque<Interval>,
    since_start: BTreeMap<(Reason, String), u64>,
}

fn protocols(reason: Reason) -> &'static [&'static str] {
    match reason {
        Reason::Invalid => &["any"],
        _ => &["tcp", "udp", "sctp"],
    }
}

impl ServiceRejectHistory {
    /// Takes one reading at `mono` (monotonic seconds). None until a source
    /// was read twice.
    pub fn observe(&mut self, c: &RuleCounters, mono: f64) -> Option<ServiceRejects> {
        let iv = self.increases(c, mono);
        let first = self.start.is_none();
        let had_seen = !self.seen.is_empty();
        self.seen.extend(c.sources.iter().cloned());
        for (k, v) in &iv.totals {
            *self.since_start.entry(k.clone()).or_default() += v;
        }
        if first {
            self.start = Some(mono);
            return None;
        }
        self.intervals.push_back(iv);
        self.keep_window(mono);
        if !had_seen || c.sources.is_empty() {
            return (!c.unavailable.is_empty() || !c.sources.is_empty()).then(|| ServiceRejects {
                unavailable: c.unavailable.clone(),
                undecoded: c.undecoded,
                ..Default::default()
            });
        }
        Some(self.rates(c, mono))
    }

    /// The interval ending at `mono`: each rule's increase since the previous reading
    /// of its source, summed per reason and protocol and per Service. Each rule's
    /// counter is kept for the next reading (those of the sources read, only).
    fn increases(&mut self, c: &RuleCounters, mono: f64) -> Interval {
        let mut iv = Interval {
            end: mono,
            ..Default::default()
        };
        let read: HashSet<&str> = c.sources.iter().map(String::as_str).collect();
        let mut next = HashMap::with_capacity(c.rules.len());
        for r in c.rules.iter() {
            let source = format!("{} {}", r.backend, r.family);
            if !read.contains(source.as_str()) {
                continue;
            }
            let key = (r.backend, r.family, r.chain, r.id);
            let inc = match self.last.get(&key) {
                Some(&before) if r.packets >= before => r.packets - before,
                // Reset (rewritten in place): counted from 0.
                Some(_) => r.packets,
                // Written since the source's previous reading: all of it is new.
                None if self.seen.contains(&source) => r.packets,
                // The source's first reading: a baseline.
                None => 0,
            };
            next.insert(key, r.packets);
            if inc == 0 {
                continue;
            }
            *iv.totals.entry((r.reason, r.protocol.clone())).or_default() += inc;
            let g = (r.reason, r.service.clone(), r.protocol.clone());
            // Bounded: past GROUPS_PER_INTERVAL Services in one interval, the rest are in the totals only.
            if iv.groups.len() < GROUPS_PER_INTERVAL || iv.groups.contains_key(&g) {
                let e = iv.groups.entry(g).or_default();
                e.0 += inc;
                if !e.1.contains(&r.target) {
                    e.1.push(r.target.clone());
                }
            }
        }
        self.last
            .retain(|k, _| !read.contains(format!("{} {}", k.0, k.1).as_str()));
        self.last.extend(next);
        iv
    }

    /// Keep what covers the window; the start moves to the end of what leaves it.
    fn keep_window(&mut self, mono: f64) {
        while self.intervals.len() > CAPACITY
            || self
                .intervals
                .front()
                .is_some_and(|f| f.end <= mono - SERVICE_REJECT_WINDOW_SECONDS && self.intervals.len() > 1)
        {
            if let Some(f) = self.intervals.pop_front() {
                self.start = Some(f.end);
            }
        }
    }

    /// The rates over the intervals kept, from the start to `mono`.
    fn rates(&self, c: &RuleCounters, mono: f64) -> ServiceRejects {
        let seconds = mono - self.start.unwrap_or(mono);
        let rate = |n: u64| if seconds > 0.0 { n as f64 / seconds } else { 0.0 };
        let mut totals = BTreeMap::<(Reason, String), u64>::new();
        let mut groups = HashMap::<&Group, (u64, Vec<&String>)>::new();
        for iv in &self.intervals {
            for (k, v) in &iv.totals {
                *totals.entry(k.clone()).or_default() += v;
            }
            for (g, (n, targets)) in &iv.groups {
                let e = groups.entry(g).or_default();
                e.0 += n;
                for t in targets {
                    if !e.1.contains(&t) {
                        e.1.push(t);
                    }
                }
            }
        }
        for reason in Reason::ALL {
            for p in protocols(reason) {
                totals.entry((reason, p.to_string())).or_default();
            }
        }
        let totals = totals
            .into_iter()
            .map(|((reason, protocol), n)| ReasonRate {
                packets_total: self.since_start.get(&(reason, protocol.clone())).copied().unwrap_or(0),
                reason,
                protocol,
                packets_per_second: rate(n),
            })
            .collect();
        let (services, left_out) = top_services(groups, rate);
        ServiceRejects {
            seconds,
            sources: c.sources.clone(),
            totals,
            services,
            services_left_out: left_out,
            undecoded: c.undecoded,
            unavailable: c.unavailable.clone(),
        }
    }
}

/// The Services with a non-zero rate (`rate` of their packets over the window),
/// highest first, at most [`TOP_SERVICES`]; and how many more there were.
fn top_services(groups: HashMap<&Group, (u64, Vec<&String>)>, rate: impl Fn(u64) -> f64) -> (Vec<ServiceRate>, usize) {
    let mut services: Vec<ServiceRate> = groups
        .into_iter()
        .filter(|(g, (n, _))| *n > 0 && g.0 != Reason::Invalid)
        .map(|((reason, service, protocol), (n, targets))| {
            let mut targets: Vec<String> = targets.into_iter().cloned().collect();
            targets.sort();
            ServiceRate {
                reason: *reason,
                service: service.clone(),
                targets,
                protocol: protocol.clone(),
                packets_per_second: rate(n),
            }
        })
        .collect();
    services.sort_by(|a, b| {
        b.packets_per_second
            .total_cmp(&a.packets_per_second)
            .then_with(|| a.service.cmp(&b.service))
            .then_with(|| a.targets.cmp(&b.targets))
    });
    let left_out = services.len().saturating_sub(TOP_SERVICES);
    services.truncate(TOP_SERVICES);
    (services, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::rule_counters::CountedRule;

    fn rule(id: &str, reason: Reason, service: Option<&str>, packets: u64) -> CountedRule {
        CountedRule {
            backend: "nft",
            family: "ipv4",
            chain: "KUBE-SERVICES",
            id: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                id.hash(&mut h);
                h.finish()
            },
            reason,
            protocol: "tcp".into(),
            service: service.map(str::to_string),
            target: format!("10.0.0.{}:80", id.len()),
            packets,
            bytes: 0,
        }
    }

    fn reading(rules: Vec<CountedRule>) -> RuleCounters {
        RuleCounters {
            rules: rules.into(),
            sources: vec!["nft ipv4".into()],
            ..Default::default()
        }
    }

    fn rate(r: &ServiceRejects, service: &str) -> f64 {
        r.services
            .iter()
            .find(|s| s.service.as_deref() == Some(service))
            .map_or(0.0, |s| s.packets_per_second)
    }

    #[test]
    fn rates_resets_rewrites_and_quiet() {
        let mut h = ServiceRejectHistory::default();
        let a = |n| rule("h1", Reason::NoEndpoints, Some("ns/a:p"), n);
        assert_eq!(
            h.observe(&reading(vec![a(1_000_000)]), 0.0),
            None,
            "a baseline, not a spike"
        );
        let r = h.observe(&reading(vec![a(1_000_100)]), 10.0).unwrap();
        assert_eq!(rate(&r, "ns/a:p"), 10.0);
        let tcp = r
            .totals
            .iter()
            .find(|t| t.reason == Reason::NoEndpoints && t.protocol == "tcp")
            .unwrap();
        assert_eq!((tcp.packets_per_second, tcp.packets_total), (10.0, 100));
        assert_eq!(r.totals.len(), 7, "every reason and protocol, zeros included");
        // kube-proxy rewrote the chain: a new handle counting from 0 (+50), and a reset in place.
        let b = rule("h2", Reason::NoEndpoints, Some("ns/a:p"), 50);
        let r = h.observe(&reading(vec![b.clone()]), 20.0).unwrap();
        assert_eq!(rate(&r, "ns/a:p"), 150.0 / 20.0);
        let r = h
            .observe(&reading(vec![CountedRule { packets: 10, ..b }]), 30.0)
            .unwrap();
        assert!(r.totals.iter().all(|t| t.packets_per_second >= 0.0));
        assert_eq!(rate(&r, "ns/a:p"), 160.0 / 30.0);
        // No traffic: the window empties and the rate is 0 (and the Service leaves the list).
        let mut r = r;
        for t in 4..10 {
            r = h
                .observe(
                    &reading(vec![rule("h2", Reason::NoEndpoints, Some("ns/a:p"), 10)]),
                    t as f64 * 10.0,
                )
                .unwrap();
        }
        assert!(r.services.is_empty(), "{r:?}");
        assert!(r.seconds >= SERVICE_REJECT_WINDOW_SECONDS);
        assert_eq!(
            r.totals
                .iter()
                .find(|t| t.protocol == "tcp" && t.reason == Reason::NoEndpoints)
                .unwrap()
                .packets_total,
            160
        );
    }

    #[test]
    fn an_unread_source_keeps_its_counters_and_a_new_source_starts_with_a_baseline() {
        let mut h = ServiceRejectHistory::default();
        let a = |n| rule("h1", Reason::NoLocalEndpoints, None, n);
        h.observe(&reading(vec![a(10)]), 0.0);
        // The read failed: nothing is known, the previous counters stay.
        let failed = RuleCounters {
            unavailable: vec!["iptables-nft: EPERM".into()],
            ..Default::default()
        };
        let r = h.observe(&failed, 5.0).unwrap();
        assert!(
            r.totals.is_empty() && r.unavailable.len() == 1,
            "no rate, never a 0: {r:?}"
        );
        let r = h.observe(&reading(vec![a(40)]), 10.0).unwrap();
        let s = &r.services[0];
        assert_eq!((s.service.clone(), s.packets_per_second), (None, 3.0));
        // Legacy appears with old counters: a baseline for it.
        let mut legacy = rule("text #1", Reason::NoEndpoints, Some("ns/b:p"), 1_000_000);
        legacy.backend = "legacy";
        let mut c = reading(vec![a(40), legacy]);
        c.sources.push("legacy ipv4".into());
        let r = h.observe(&c, 20.0).unwrap();
        assert_eq!(rate(&r, "ns/b:p"), 0.0);
    }

    #[test]
    fn the_list_is_capped_highest_first() {
        let mut h = ServiceRejectHistory::default();
        let many = |k: u64| {
            (0..50)
                .map(|i| {
                    rule(
                        &format!("h{i}"),
                        Reason::NoEndpoints,
                        Some(&format!("ns/s{i:02}:p")),
                        k * i,
                    )
                })
                .collect::<Vec<_>>()
        };
        h.observe(&reading(many(0)), 0.0);
        let r = h.observe(&reading(many(1)), 1.0).unwrap();
        assert_eq!(r.services.len(), TOP_SERVICES);
        assert_eq!(r.services_left_out, 49 - TOP_SERVICES, "s00 had no traffic");
        assert_eq!(r.services[0].service.as_deref(), Some("ns/s49:p"));
    }
}
