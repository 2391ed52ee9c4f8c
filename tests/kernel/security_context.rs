//! The DaemonSet's security context, run for real: the capabilities, user and
//! read-only root of `manifests/daemonset.yaml` (read from the file, not copied here)
//! applied to the real binary, on a network namespace holding what the probes read:
//! kube-proxy rules in both iptables backends (tests/tools/gen_kube_rules.py), a
//! kube-proxy nftables table, conntrack entries, and a fake kube-proxy on its loopback.
//!
//! The launcher does what the container runtime does for that context:
//! `unshare --mount` and a read-only remount of `/` (readOnlyRootFilesystem), then
//! `setpriv` with exactly the added capabilities in the bounding, inheritable,
//! permitted and effective sets (uid 0: exec gives a root process its bounding set),
//! ambient cleared, `--no-new-privs` (allowPrivilegeEscalation: false), the uid and gid
//! of the manifest. The test reads the agent's own /proc status and mountinfo to check
//! the launcher did that. Not modelled: seccomp `RuntimeDefault` (no profile here).
//!
//! 1. With the manifest's context, every probe reports what it reports as full root on
//!    the same namespace (ok where its source exists, ipvs absent: no IPVS here) and the
//!    same rule counts.
//! 2. Without NET_ADMIN, the iptables, nftables, conntrack_stale and node_ports probes (netlink) fail with an error naming
//!    CAP_NET_ADMIN, and every other probe reports as before.
//!
//! Needs root, `ip`, `unshare`, `setpriv`, `mount`, `conntrack`, `nft`, both
//! iptables backends' restore and save commands and `python3` with PyYAML.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::fake_kube_proxy::FakeKubeProxy;
use common::{Agent, Netns, Serve};
use serde_json::Value;

const TOOLS: &[&str] = &[
    "ip",
    "unshare",
    "setpriv",
    "mount",
    "sh",
    "conntrack",
    "nft",
    "iptables-nft-restore",
    "iptables-legacy-restore",
    "iptables-nft-save",
    "iptables-legacy-save",
    "python3",
];

/// Capability numbers (linux/capability.h), by the name Kubernetes uses.
const CAPABILITIES: &[(&str, u32)] = &[
    ("CHOWN", 0),
    ("DAC_OVERRIDE", 1),
    ("DAC_READ_SEARCH", 2),
    ("FOWNER", 3),
    ("FSETID", 4),
    ("KILL", 5),
    ("SETGID", 6),
    ("SETUID", 7),
    ("SETPCAP", 8),
    ("LINUX_IMMUTABLE", 9),
    ("NET_BIND_SERVICE", 10),
    ("NET_BROADCAST", 11),
    ("NET_ADMIN", 12),
    ("NET_RAW", 13),
    ("IPC_LOCK", 14),
    ("IPC_OWNER", 15),
    ("SYS_MODULE", 16),
    ("SYS_RAWIO", 17),
    ("SYS_CHROOT", 18),
    ("SYS_PTRACE", 19),
    ("SYS_PACCT", 20),
    ("SYS_ADMIN", 21),
    ("SYS_BOOT", 22),
    ("SYS_NICE", 23),
    ("SYS_RESOURCE", 24),
    ("SYS_TIME", 25),
    ("SYS_TTY_CONFIG", 26),
    ("MKNOD", 27),
    ("LEASE", 28),
    ("AUDIT_WRITE", 29),
    ("AUDIT_CONTROL", 30),
    ("SETFCAP", 31),
    ("MAC_OVERRIDE", 32),
    ("MAC_ADMIN", 33),
    ("SYSLOG", 34),
    ("WAKE_ALARM", 35),
    ("BLOCK_SUSPEND", 36),
    ("AUDIT_READ", 37),
    ("PERFMON", 38),
    ("BPF", 39),
    ("CHECKPOINT_RESTORE", 40),
];

/// The agent container's security context as manifests/daemonset.yaml sets it.
#[derive(Debug, Clone)]
struct Context {
    add: Vec<String>,
    uid: u32,
    gid: u32,
    read_only_root: bool,
    no_new_privs: bool,
}

/// Reads the context with PyYAML: the container's settings over the pod's.
fn manifest_context() -> Context {
    const READ: &str = r#"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d.get("kind") == "DaemonSet"]
assert len(ds) == 1, "one DaemonSet"
spec = ds[0]["spec"]["template"]["spec"]
pod = spec.get("securityContext") or {}
c = [c for c in spec["containers"] if c["name"] == "proxywatch"]
assert len(c) == 1, "one proxywatch container"
sc = c[0].get("securityContext") or {}
caps = sc.get("capabilities") or {}
print(json.dumps({
    "add": caps.get("add") or [],
    "drop": caps.get("drop") or [],
    "uid": sc.get("runAsUser", pod.get("runAsUser")),
    "gid": sc.get("runAsGroup", pod.get("runAsGroup")),
    "read_only_root": sc.get("readOnlyRootFilesystem", False),
    "allow_privilege_escalation": sc.get("allowPrivilegeEscalation", True),
    "privileged": sc.get("privileged", False),
}))
"#;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/daemonset.yaml");
    let out = common::run("python3", &["-c", READ, manifest.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("manifests/daemonset.yaml: {v}");
    // What this test models: everything dropped but what is added, not privileged.
    assert_eq!(
        v["privileged"], false,
        "a privileged container has every capability: {v}"
    );
    assert_eq!(
        v["drop"],
        serde_json::json!(["ALL"]),
        "the test models `drop: [ALL]`: {v}"
    );
    let uid = v["uid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no runAsUser: the image's user is not modelled: {v}"));
    Context {
        add: v["add"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect(),
        uid: uid as u32,
        gid: v["gid"].as_u64().unwrap_or(0) as u32,
        read_only_root: v["read_only_root"] == true,
        no_new_privs: v["allow_privilege_escalation"] == false,
    }
}

/// `can_run(TOOLS)` and PyYAML in python3 (which reads the manifest).
fn can_run() -> bool {
    if !common::can_run(TOOLS) {
        return false;
    }
    let yaml = std::process::Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !yaml {
        assert!(!common::in_ci(), "needs PyYAML in python3 (CI=true: not skipping)");
        eprintln!("SKIPPED: needs PyYAML in python3");
    }
    yaml
}

fn cap_number(name: &str) -> u32 {
    CAPABILITIES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown capability {name}"))
        .1
}

/// The /proc/<pid>/status capability mask of these capabilities.
fn mask(caps: &[String]) -> u64 {
    caps.iter().fold(0, |m, c| m | 1 << cap_number(c))
}

fn tool(name: &str) -> PathBuf {
    common::which(name).unwrap_or_else(|| panic!("{name} not on PATH"))
}

/// The launcher that gives the agent `ctx`, as a container runtime would.
fn launcher(ctx: &Context) -> Vec<String> {
    let mut l = Vec::new();
    if ctx.read_only_root {
        // A private mount namespace whose root is read-only; /proc, /sys and /dev stay
        // what they are (separate mounts), as in a container.
        l.extend([
            tool("unshare").display().to_string(),
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
        ]);
        l.extend([
            tool("sh").display().to_string(),
            "-c".into(),
            format!("{} -o remount,bind,ro / && exec \"$@\"", tool("mount").display()),
            "sh".into(),
        ]);
    }
    let caps: String = ctx.add.iter().map(|c| format!(",+{}", c.to_lowercase())).collect();
    l.extend([
        tool("setpriv").display().to_string(),
        format!("--reuid={}", ctx.uid),
        format!("--regid={}", ctx.gid),
        "--clear-groups".into(),
        format!("--bounding-set=-all{caps}"),
        format!("--inh-caps=-all{caps}"),
        "--ambient-caps=-all".into(),
    ]);
    if ctx.no_new_privs {
        l.push("--no-new-privs".into());
    }
    l.push("--".into());
    l
}

/// One `key:\tvalue` line of /proc/<pid>/status.
fn status_field(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// The mount options of `/` as the process sees it.
fn root_mount_options(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    text.lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f.get(4) == Some(&"/"))
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| panic!("no / in /proc/{pid}/mountinfo"))
}

/// The agent runs with exactly `ctx` (read from its /proc, not assumed).
fn assert_runs_with(agent: &Agent, ctx: &Context) {
    let pid = agent.pid();
    let want = format!("{:016x}", mask(&ctx.add));
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd"] {
        assert_eq!(status_field(pid, set), want, "{set} of the agent ({:?})", ctx.add);
    }
    assert_eq!(status_field(pid, "CapAmb"), "0000000000000000", "CapAmb");
    let nnp = if ctx.no_new_privs { "1" } else { "0" };
    assert_eq!(status_field(pid, "NoNewPrivs"), nnp, "NoNewPrivs");
    let uid = ctx.uid.to_string();
    assert!(
        status_field(pid, "Uid").split_whitespace().all(|u| u == uid),
        "Uid {}",
        status_field(pid, "Uid")
    );
    let gid = ctx.gid.to_string();
    assert!(status_field(pid, "Gid").split_whitespace().all(|g| g == gid), "Gid");
    let opts = root_mount_options(pid);
    let ro = opts.split(',').any(|o| o == "ro");
    assert_eq!(ro, ctx.read_only_root, "the agent's / is mounted {opts}");
}

/// A namespace with kube-proxy's state in it: iptables rules in both backends, its
/// nftables table, conntrack entries.
fn node_netns(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    let dir = tempfile::tempdir().unwrap();
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/gen_kube_rules.py");
    let rules = common::run(
        "python3",
        &[gen.to_str().unwrap(), "--services", "20", "--endpoints", "2"],
    )
    .stdout;
    let file = dir.path().join("rules");
    std::fs::write(&file, rules).unwrap();
    for restore in ["iptables-nft-restore", "iptables-legacy-restore"] {
        let out = ns
            .command(restore, &[])
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{restore}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let table = common::fixtures().join("nft/pwgen-50svc-input.nft");
    ns.exec_ok("nft", &["-f", table.to_str().unwrap()]);
    common::insert_conntrack_entries(&ns, 40000, 5, 0);
    ns
}

/// `serve` in `ns` through `launcher` (none: full root); its first complete /snapshot.
fn snapshot_in(ns: &Netns, kube_proxy: &FakeKubeProxy, launcher: &[String]) -> (Agent, Value) {
    let agent = Serve::new()
        .in_netns(ns)
        .wrap(launcher)
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["--node-name", "secctx"])
        .args(["--kube-proxy.metrics-url", &kube_proxy.url()])
        .args(["--kube-proxy.healthz-url", &kube_proxy.url()])
        .start();
    let doc: Value = serde_json::from_str(&agent.get_ok("/snapshot")).unwrap();
    (agent, doc)
}

fn statuses(doc: &Value) -> BTreeMap<String, String> {
    doc["probes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, o)| (p.clone(), o["status"].as_str().unwrap().to_string()))
        .collect()
}

/// A fact without its wall times (which differ from run to run).
/// `v` without what varies between two reads of the same table: wall times and when
/// (and how) the netlink count was made.
fn without_durations(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !["duration_seconds", "netlink"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), without_durations(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_durations).collect()),
        other => other.clone(),
    }
}

/// Rules per backend, family and table, as the iptables probe counted them.
fn rule_counts(doc: &Value) -> Vec<(String, String, Value)> {
    doc["facts"]["iptables"]["saves"]
        .as_array()
        .unwrap_or_else(|| panic!("no iptables facts: {}", doc["probes"]["iptables"]))
        .iter()
        .map(|s| {
            (
                s["backend"].as_str().unwrap().to_string(),
                s["family"].as_str().unwrap().to_string(),
                s["counts"]["tables"].clone(),
            )
        })
        .collect()
}

#[test]
fn the_manifest_security_context_sees_what_root_sees() {
    if !can_run() {
        return;
    }
    let ctx = manifest_context();
    let ns = node_netns("secctx");
    let kube_proxy = FakeKubeProxy::start_in(Some(&ns.name));

    // Full root: the reference.
    let (root_agent, root) = snapshot_in(&ns, &kube_proxy, &[]);
    root_agent.stop_cleanly();
    let want = statuses(&root);
    for (probe, status) in [
        ("conntrack", "ok"),
        ("sysctls", "ok"),
        ("node", "ok"),
        ("modules", "ok"),
        ("iptables", "ok"),
        ("nftables", "ok"),
        ("kube_proxy", "ok"),
        ("conntrack_stale", "ok"),
        ("node_ports", "ok"),
        ("neighbour_tables", "ok"),
        ("ipvs", "absent"),
    ] {
        assert_eq!(want[probe], status, "{probe} as root: {}", root["probes"][probe]);
    }
    // Every probe but service_traffic, which runs only when asked (--try-services, an interval):
    // the one probe that sends packets.
    let default_on = proxywatch::probe::PROBES
        .iter()
        .filter(|p| p.as_str() != "service_traffic")
        .count();
    assert_eq!(want.len(), default_on, "{want:?}");
    assert!(!want.contains_key("service_traffic"), "{want:?}");
    // Both backends hold the generated rules.
    let counts = rule_counts(&root);
    for backend in ["nft", "legacy"] {
        assert!(
            counts
                .iter()
                .any(|(b, f, t)| b == backend && f == "ipv4" && t["nat"]["rules"].as_u64() > Some(100)),
            "{backend}: {counts:?}"
        );
    }

    // The manifest's context.
    let (agent, doc) = snapshot_in(&ns, &kube_proxy, &launcher(&ctx));
    assert_runs_with(&agent, &ctx);
    assert_eq!(statuses(&doc), want, "probes with {ctx:?}: {:#}", doc["probes"]);
    assert_eq!(rule_counts(&doc), counts, "rule counts with {ctx:?}");
    assert_eq!(
        without_durations(&doc["facts"]["nftables"]),
        without_durations(&root["facts"]["nftables"]),
        "kube-proxy's nftables table with {ctx:?}"
    );
    assert!(
        doc["facts"]["conntrack"]["entries"].as_u64() >= Some(5),
        "{}",
        doc["facts"]["conntrack"]
    );
    let log = agent.log();
    agent.stop_cleanly();
    assert!(!log.contains("panicked"), "{log}");
    drop(kube_proxy);
}

#[test]
fn without_net_admin_only_the_netlink_probes_fail_and_say_why() {
    if !can_run() {
        return;
    }
    let ctx = manifest_context();
    assert!(
        ctx.add.iter().any(|c| c == "NET_ADMIN"),
        "the manifest adds NET_ADMIN: {ctx:?}"
    );
    let ns = node_netns("secctx-noadm");
    let kube_proxy = FakeKubeProxy::start_in(Some(&ns.name));
    let (root_agent, root) = snapshot_in(&ns, &kube_proxy, &[]);
    root_agent.stop_cleanly();
    let want = statuses(&root);

    let mut less = ctx.clone();
    less.add.retain(|c| c != "NET_ADMIN");
    let (agent, doc) = snapshot_in(&ns, &kube_proxy, &launcher(&less));
    assert_runs_with(&agent, &less);
    for (probe, status) in statuses(&doc) {
        let o = &doc["probes"][&probe];
        // The probes that talk nf_tables or ctnetlink over netlink.
        if ["iptables", "nftables", "conntrack_stale", "node_ports"].contains(&probe.as_str()) {
            assert_eq!(status, "failed", "{probe} without NET_ADMIN: {o}");
            let err = o["error"].as_str().unwrap();
            assert!(
                err.contains("CAP_NET_ADMIN"),
                "{probe}: the error names the capability: {err}"
            );
        } else {
            assert_eq!(status, want[&probe], "{probe} without NET_ADMIN: {o}");
        }
    }
    let failed = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "probe_failed")
        .unwrap_or_else(|| panic!("no probe_failed: {}", doc["findings"]));
    for probe in ["iptables", "nftables", "conntrack_stale", "node_ports"] {
        assert!(failed["evidence"][probe].is_string(), "{failed:#}");
    }
    agent.stop_cleanly();
}
