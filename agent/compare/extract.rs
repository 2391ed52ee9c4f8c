//! Extraction: the facts a comparison shows, read from one `/snapshot` document
//! in a fixed order (`extract`), each read defensively so that a document of
//! another agent version gives what it has.

use serde_json::Value;

use super::{round, CONNECT_TIME};

/// A named fact: its value and unit.
pub(super) type Fact = (String, Value, &'static str);

fn num(v: &Value) -> Option<Value> {
    v.is_number().then(|| v.clone())
}

/// The facts compared, in the order shown. Each reads the document defensively:
/// a field missing or of another type (another agent version) is left out.
pub(super) fn extract(doc: &Value) -> Vec<Fact> {
    let mut out = FactList::default();
    let f = &doc["facts"];
    // Values derived over time sit under `derived` since 0.2; a baseline saved
    // by 0.1 kept them inside the facts (see `either`).
    let d = &doc["derived"];
    out.put("status".into(), doc["status"].as_str().map(Value::from), "");
    out.put(
        "proxy mode".into(),
        doc["proxy_mode"]["mode"].as_str().map(Value::from),
        "",
    );
    out.conntrack(&f["conntrack"], &d["conntrack"]);
    out.node(f);
    out.iptables(&f["iptables"]);
    out.nftables(&f["nftables"]);
    out.ipvs(&f["ipvs"]);
    out.kube_proxy(&f["kube_proxy"], &d["kube_proxy"]);
    out.service_tries(&f["service_traffic"]);
    if let Some(probes) = doc["probes"].as_object() {
        for (name, o) in probes {
            out.put(format!("probe {name}"), o["status"].as_str().map(Value::from), "");
        }
    }
    out.0
}

/// A value derived over time: under `derived` since 0.2 (`new`), inside the
/// facts in a baseline saved by 0.1 (`old`). Whichever the document has.
fn either(new: &Value, old: &Value) -> Value {
    if new.is_null() {
        old.clone()
    } else {
        new.clone()
    }
}

/// The facts [`extract`] has read so far, in the order shown; one section of
/// the document per method.
#[derive(Default)]
struct FactList(Vec<Fact>);

impl FactList {
    /// Adds a fact, unless the document does not have it (`None`).
    fn put(&mut self, name: String, v: Option<Value>, unit: &'static str) {
        if let Some(v) = v {
            self.0.push((name, v, unit));
        }
    }

    /// `facts.conntrack`, with its trend from `derived.conntrack` (`d`).
    fn conntrack(&mut self, ct: &Value, d: &Value) {
        if !ct.is_object() {
            return;
        }
        let fill = match (ct["entries"].as_f64(), ct["max"].as_f64()) {
            (Some(e), Some(m)) if m > 0.0 => Some(Value::from(round(e / m * 100.0, 1))),
            _ => None,
        };
        self.put("conntrack fill".into(), fill, "%");
        self.put("conntrack entries".into(), num(&ct["entries"]), "");
        self.put("conntrack max".into(), num(&ct["max"]), "");
        self.put("conntrack buckets".into(), num(&ct["buckets"]), "");
        for stat in ["drop", "early_drop", "insert_failed"] {
            self.put(format!("conntrack {stat} (since boot)"), num(&ct["stats"][stat]), "");
        }
        let trend = either(&d["trend"], &ct["trend"]);
        self.put("conntrack growth".into(), num(&trend["slope_per_second"]), "/s");
        if trend.is_object() {
            self.put(
                "conntrack time to full".into(),
                Some(trend["seconds_to_full"].clone()),
                "s",
            );
        }
    }

    /// The node (`facts.node`), its modules and its sysctls.
    fn node(&mut self, f: &Value) {
        let node = &f["node"];
        self.put(
            "kernel release".into(),
            node["kernel_release"].as_str().map(Value::from),
            "",
        );
        self.put("cpus".into(), num(&node["cpus"]), "");

        if let Some(m) = f["modules"]["modules"].as_object() {
            for (name, state) in m {
                self.put(format!("module {name}"), state.as_str().map(Value::from), "");
            }
        }
        if let Some(values) = f["sysctls"]["values"].as_object() {
            for (name, v) in values {
                self.put(
                    format!("sysctl {name}"),
                    (v.is_number() || v.is_null()).then(|| v.clone()),
                    "",
                );
            }
        }
    }

    /// `facts.iptables`: the backend in use, and each save's counts and duration.
    fn iptables(&mut self, ipt: &Value) {
        self.put(
            "iptables backend in use".into(),
            ipt["backend_in_use"].as_str().map(Value::from),
            "",
        );
        for save in ipt["saves"].as_array().into_iter().flatten() {
            let (Some(b), Some(fam)) = (save["backend"].as_str(), save["family"].as_str()) else {
                continue;
            };
            let counts = &save["counts"];
            if let Some(tables) = counts["tables"].as_object() {
                for (table, c) in tables {
                    self.put(format!("iptables {b} {fam} {table} rules"), num(&c["rules"]), "");
                }
            }
            self.put(
                format!("iptables {b} {fam} KUBE-* rules"),
                num(&counts["kube_rules"]),
                "",
            );
            self.put(
                format!("iptables {b} {fam} KUBE-SVC chains"),
                num(&counts["kube"]["svc"]),
                "",
            );
            self.put(
                format!("iptables {b} {fam} save duration"),
                num(&save["duration_seconds"]),
                "s",
            );
        }
    }

    /// `facts.nftables`: each table's counts and list duration.
    fn nftables(&mut self, nft: &Value) {
        for table in nft["tables"].as_array().into_iter().flatten() {
            let Some(fam) = table["family"].as_str() else { continue };
            // Baselines saved by earlier builds name nft's families (`ip`, `ip6`).
            let fam = crate::probe::nftables::address_family_of_key(fam);
            let c = &table["counts"];
            self.put(format!("nftables {fam} rules"), num(&c["rules"]), "");
            self.put(format!("nftables {fam} chains"), num(&c["chains"]), "");
            self.put(format!("nftables {fam} service chains"), num(&c["service_chains"]), "");
            self.put(
                format!("nftables {fam} list duration"),
                num(&table["duration_seconds"]),
                "s",
            );
        }
    }

    /// `facts.ipvs`: the virtual and real servers.
    fn ipvs(&mut self, ipvs: &Value) {
        self.put("ipvs virtual servers".into(), num(&ipvs["virtual_servers"]), "");
        self.put("ipvs real servers".into(), num(&ipvs["real_servers"]), "");
        self.put(
            "ipvs virtual servers w/o backends".into(),
            num(&ipvs["without_backends"]),
            "",
        );
    }

    /// `facts.kube_proxy`, with its latency windows and restarts from
    /// `derived.kube_proxy` (`d`).
    fn kube_proxy(&mut self, kp: &Value, d: &Value) {
        self.put("kube-proxy mode".into(), kp["mode"].as_str().map(Value::from), "");
        self.put(
            "kube-proxy metrics up".into(),
            kp["metrics_up"].as_bool().map(Value::from),
            "",
        );
        for (key, label) in [("sync", "sync p99"), ("network_programming", "programming p99")] {
            let l = &kp[key];
            let window = &d[key];
            // The window's p99 when there is a window, else since start (as the checks do).
            let p99 = if window.is_object() {
                num(&window["p99"])
            } else if l["count_window"].is_number() {
                num(&l["p99_window"])
            } else {
                num(&l["p99_since_start"])
            };
            self.put(format!("kube-proxy {label}"), p99, "s");
        }
        self.put(
            "kube-proxy restarts".into(),
            num(&either(&d["restarts"], &kp["restarts"])),
            "",
        );
    }

    /// The service_traffic tries (`--try-services`): each target's result and time.
    fn service_tries(&mut self, st: &Value) {
        for t in st["tries"].as_array().into_iter().flatten() {
            let Some(target) = t["target"].as_str() else { continue };
            self.put(
                format!("service try {target}"),
                t["result"].as_str().map(Value::from),
                "",
            );
            if t["result"] == "ok" {
                self.put(format!("{CONNECT_TIME}{target}"), num(&t["seconds"]), "s");
            }
        }
    }
}
