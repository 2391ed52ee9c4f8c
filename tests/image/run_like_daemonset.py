#!/usr/bin/env python3
"""Runs the built image the way manifests/daemonset.yaml runs it, and checks it.

    python3 tests/image/run_like_daemonset.py IMAGE HOST_BINARY [--manifest FILE]

Run by tests/image/run.sh (which sets up the private podman configuration). The
podman flags are derived from the DaemonSet, not written here: host network and
PID, user, capabilities, no-new-privileges, read-only root, seccomp, the
hostPath mounts that exist on this machine, env vars, args, resource limits and
the termination grace period. A change to the manifest changes what runs.

Checks, each printed as "ok - ..." or "FAIL - ..." (exit 1 if any failed):
  * `check --format json` in the container equals the host binary's (same env,
    container paths mapped to their hostPath), timings aside, with every probe
    ok or absent: in the node's network namespace and in one this script makes
    with kube-proxy-shaped rules (tests/tools/gen_kube_rules.py);
  * `serve` (the manifest's args) answers /healthz and /metrics; the agent's
    CapEff is exactly what the manifest adds (NET_ADMIN|NET_RAW), NoNewPrivs 1,
    a seccomp filter on; tini prints no warning; `podman stop` ends it with
    exit code 0 before the grace period (the measured time is printed);
  * without the added capabilities, the netlink probes fail naming CAP_NET_ADMIN;
  * afterwards no container of this run is left and the host's iptables and
    nftables rules (counters aside) are what they were.
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPS = {"NET_ADMIN": 12, "NET_RAW": 13}
CAP_NAMES = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
]

failures = []


T0 = time.monotonic()


def ok(what):
    print(f"ok - {what} [{time.monotonic() - T0:.1f} s]", flush=True)


def fail(what):
    print(f"FAIL - {what} [{time.monotonic() - T0:.1f} s]", flush=True)
    failures.append(what)


def check(cond, what, why=""):
    if cond:
        ok(what)
    else:
        fail(f"{what}: {why}" if why else what)
    return cond


def run(cmd, timeout=120, check_rc=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


def cap_names(mask):
    return [f"CAP_{n}" for i, n in enumerate(CAP_NAMES) if mask >> i & 1] + [
        f"cap{i}" for i in range(len(CAP_NAMES), 64) if mask >> i & 1
    ]


# ------------------------------------------------------------------ the manifest
class Pod:
    """What the DaemonSet tells the kubelet, as podman flags."""

    def __init__(self, path):
        docs = [d for d in yaml.safe_load_all(open(path)) if d]
        ds = [d for d in docs if d.get("kind") == "DaemonSet"]
        if len(ds) != 1:
            raise SystemExit(f"{path}: expected one DaemonSet, found {len(ds)}")
        spec = ds[0]["spec"]["template"]["spec"]
        ctr = spec["containers"][0]
        self.notes = []
        flags = []
        # Never podman's bridge: it would put netavark chains into the host's iptables.
        if spec.get("hostNetwork") is not True:
            raise SystemExit(f"{path}: hostNetwork is not true; the agent must see the node's network namespace")
        self.network = "host"
        if spec.get("hostPID"):
            flags.append("--pid=host")
        sc = dict(spec.get("securityContext") or {})
        sc.update(ctr.get("securityContext") or {})
        self.sc = sc
        uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
        if sc.get("runAsNonRoot") and uid == 0:
            raise SystemExit(f"{path}: runAsNonRoot with runAsUser 0: the kubelet would not start the container")
        if uid is not None:
            flags.append(f"--user={uid}:{gid}" if gid is not None else f"--user={uid}")
        if sc.get("privileged"):
            flags.append("--privileged")
        # allowPrivilegeEscalation: false is how Kubernetes sets no_new_privs.
        if sc.get("allowPrivilegeEscalation") is False:
            flags.append("--security-opt=no-new-privileges")
        if sc.get("readOnlyRootFilesystem"):
            # Kubernetes mounts no tmpfs of its own on /tmp, /run, /var/tmp.
            flags += ["--read-only", "--read-only-tmpfs=false"]
        caps = sc.get("capabilities") or {}
        for c in caps.get("drop") or []:
            flags.append(f"--cap-drop={c.lower()}")
        self.cap_add = [c.upper().removeprefix("CAP_") for c in caps.get("add") or []]
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp == "RuntimeDefault":
            pass  # podman's default profile, as containerd's is the kubelet's RuntimeDefault
        elif seccomp in (None, "Unconfined"):
            # Without a profile the kubelet runs containers unconfined (no SeccompDefault).
            flags.append("--security-opt=seccomp=unconfined")
        else:
            raise SystemExit(f"{path}: seccompProfile {seccomp} is not something this test can reproduce")
        # Env: literal values, and the node name from the downward API.
        self.env = {}
        for e in ctr.get("env") or []:
            if "value" in e:
                self.env[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                self.env[e["name"]] = socket.gethostname()
            else:
                raise SystemExit(f"{path}: env {e['name']}: only value and fieldRef spec.nodeName are reproduced")
        # hostPath volumes; the mounts whose host path exists here.
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        self.mounts = {}  # container path -> host path
        for m in ctr.get("volumeMounts") or []:
            v = vols.get(m["name"])
            if v is None or "hostPath" not in v:
                raise SystemExit(f"{path}: volumeMount {m['name']}: only hostPath volumes are reproduced")
            host = v["hostPath"]["path"]
            if not os.path.exists(host):
                self.notes.append(f"{host} does not exist on this machine: {m['mountPath']} not mounted")
                continue
            flags.append(f"--volume={host}:{m['mountPath']}:{'ro' if m.get('readOnly') else 'rw'}")
            self.mounts[m["mountPath"]] = host
        lim = (ctr.get("resources") or {}).get("limits") or {}
        self.memory = k8s_bytes(lim["memory"]) if "memory" in lim else None
        if self.memory is not None:
            flags.append(f"--memory={self.memory}b")
        if "cpu" in lim:
            flags.append(f"--cpus={k8s_cpu(lim['cpu'])}")
        # The kubelet ignores the image's HEALTHCHECK (and podman would want systemd timers).
        flags.append("--no-healthcheck")
        self.grace = int(spec.get("terminationGracePeriodSeconds", 30))
        flags.append(f"--stop-timeout={self.grace}")
        self.base_flags = flags
        self.args = [str(a) for a in ctr.get("args") or []]
        if ctr.get("command"):
            raise SystemExit(f"{path}: container command overrides the image entrypoint (tini); not reproduced")

    def flags(self, network=None, caps=None, env=None):
        """caps: the capabilities to add, the manifest's when None; env: added to the manifest's."""
        f = [f"--network={network or self.network}"] + self.base_flags
        f += [f"--cap-add={c.lower()}" for c in (self.cap_add if caps is None else caps)]
        for k, v in {**self.env, **(env or {})}.items():
            f.append(f"--env={k}={v}")
        return f

    def host_env(self, extra=None):
        """The same env for the host binary: container paths mapped to their hostPath."""
        env = dict(os.environ)
        for k, v in {**self.env, **(extra or {})}.items():
            for cpath, hpath in self.mounts.items():
                if v == cpath or v.startswith(cpath.rstrip("/") + "/"):
                    v = hpath + v[len(cpath):]
            env[k] = v
        return env


def k8s_bytes(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(q))
    return int(m.group(1)) * units.get(m.group(2), 1)


def k8s_cpu(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


# ------------------------------------------------------------------ podman
class Containers:
    """Every container this run creates, removed by ID at the end."""

    def __init__(self, image, tmp):
        self.image, self.tmp, self.ids, self.n = image, tmp, [], 0

    def run(self, flags, args, detach=False, timeout=120):
        self.n += 1
        cidfile = os.path.join(self.tmp, f"cid{self.n}")
        cmd = ["podman", "run", f"--cidfile={cidfile}"] + (["--detach"] if detach else []) + flags + [self.image] + args
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        finally:
            if os.path.exists(cidfile):
                self.ids.append(open(cidfile).read().strip())
        return p

    def remove_all(self):
        for cid in self.ids:
            subprocess.run(["podman", "rm", "--force", "--time=0", cid], capture_output=True, timeout=60)
        left = run(["podman", "ps", "--all", "--quiet", "--no-trunc"]).stdout.split()
        check(not set(left) & set(self.ids), f"the {len(self.ids)} containers of this run are removed (by ID)",
              f"still there: {sorted(set(left) & set(self.ids))}")


# ------------------------------------------------------------------ comparing checks
# Timings and timestamps; and what a running process uses from one moment to the next
# (a kube-proxy process, or another test's stand-in named kube-proxy, seen through hostPID).
# `since` is when a finding became active, as each agent saw it: one moment apart.
VOLATILE = re.compile(r"(^collected_at$|_seconds$|^at_seconds$|^since$)")
LIVE_USAGE = {"cpu_seconds_total", "resident_memory_bytes", "memory_usage_bytes", "threads", "periods_total",
              "throttled_periods_total"}


def strip_times(v):
    if isinstance(v, dict):
        return {k: strip_times(x) for k, x in v.items() if not VOLATILE.search(k) and k not in LIVE_USAGE}
    if isinstance(v, list):
        return [strip_times(x) for x in v]
    return v


def strip_saves(doc):
    """iptables-save's output size: it prints packet counters, which grow with each
    check's own connection attempts to kube-proxy's ports in that namespace; those
    attempts are also conntrack entries, so the entry count moves with them."""
    ((doc.get("facts") or {}).get("conntrack") or {}).pop("entries", None)
    # The kernel's neighbour tables are one per kernel, shared with every other
    # namespace and test: their entries and counters move between two reads.
    for t in ((doc.get("facts") or {}).get("neighbour_tables") or {}).get("tables") or []:
        t.pop("entries", None)
        t.pop("counters", None)
    ipt = (doc.get("facts") or {}).get("iptables") or {}
    for save in (ipt.get("saves") or []) + ((ipt.get("cross_check") or {}).get("saves") or []):
        if save.get("command") != "netlink":
            (save.get("counts") or {}).pop("bytes", None)
    return doc


def diff(a, b, path=""):
    if type(a) is not type(b):
        return [f"{path or '/'}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'host' if k in a else 'container'}")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}/{i}")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]


# `check` on kube-proxy-shaped rules with no kube-proxy waits --kube-proxy.down-grace
# (30 s) before it calls kube-proxy down, so that it agrees with `serve`: 30 s per
# read, twice per namespace when a read is retried. Both sides judge at once here.
CHECK_ENV = {"PROXYWATCH_KUBE_PROXY_DOWN_GRACE": "0s"}


def compare_checks(where, pod, cts, host_bin, network, netns):
    """Host binary vs container, same env; retried once, since the node is shared."""
    for attempt in (1, 2):
        # nsenter, not `ip netns exec`: that one mounts a new /sys, which hides the
        # host's /sys/fs/cgroup (the container has it at /host/sys/fs/cgroup).
        host_cmd = ([] if netns is None else ["nsenter", f"--net=/run/netns/{netns}"]) + [
            host_bin, "check", "--format", "json"]
        h = run(host_cmd, check_rc=False, env=pod.host_env(CHECK_ENV))
        c = cts.run(pod.flags(network=network, env=CHECK_ENV), ["check", "--format", "json"])
        try:
            hj, cj = json.loads(h.stdout), json.loads(c.stdout)
        except json.JSONDecodeError:
            fail(f"{where}: check --format json: host exit {h.returncode} ({h.stderr.strip()[-300:]}), "
                 f"container exit {c.returncode} ({c.stderr.strip()[-600:]})")
            return None
        d = diff(strip_saves(strip_times(hj)), strip_saves(strip_times(cj)))
        if h.returncode != c.returncode:
            d.insert(0, f"exit code host {h.returncode} != container {c.returncode}")
        if not d or attempt == 2:
            break
        print(f"# {where}: {len(d)} differences, reading both again (the node is shared): {d[:3]}", flush=True)
    check(not d, f"{where}: container `check --format json` equals the host binary's (timings aside, exit {c.returncode})",
          "; ".join(d[:8]))
    bad = {k: (p["status"], p.get("error")) for k, p in cj["probes"].items() if p["status"] not in ("ok", "absent")}
    statuses = ", ".join(f"{k}={p['status']}" for k, p in cj["probes"].items())
    check(not bad, f"{where}: every probe ok or absent ({statuses})", f"{bad}")
    return cj


# ------------------------------------------------------------------ host state
def host_rules():
    """iptables (both backends, both families) and nftables as text, counters stripped."""
    out = {}
    for cmd in ("iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"):
        p = subprocess.run([cmd], capture_output=True, text=True, timeout=60)
        lines = [re.sub(r"\[\d+:\d+\]", "", l) for l in p.stdout.splitlines() if not l.startswith("#")]
        out[cmd] = lines
    p = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True, timeout=60)
    out["nft"] = [re.sub(r"counter packets \d+ bytes \d+", "counter", l) for l in p.stdout.splitlines()]
    return out


def proc_status(pid):
    st = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        st[k] = v.strip()
    return st


def memory_limit(pid):
    """The memory limit of pid's cgroup (v1 memory controller or v2), in bytes."""
    for line in open(f"/proc/{pid}/cgroup"):
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        for f in ([f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"] if "memory" in ctrls.split(",") else
                  [f"/sys/fs/cgroup{path}/memory.max"] if ctrls == "" else []):
            if os.path.exists(f):
                v = open(f).read().strip()
                return None if v == "max" else int(v)
    return None


def http(netns, path):
    p = run(["ip", "netns", "exec", netns, "curl", "-s", "-m", "5", "-o", "-", "-w", "\n%{http_code}",
             f"http://127.0.0.1:9877{path}"], check_rc=False, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return (int(code) if code.isdigit() else 0), body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image")
    ap.add_argument("host_binary")
    ap.add_argument("--manifest", default=os.path.join(REPO, "manifests/daemonset.yaml"))
    a = ap.parse_args()
    pod = Pod(a.manifest)
    for n in pod.notes:
        print(f"# {n}")
    print("# podman run " + " ".join(pod.flags()) + f" {a.image} {' '.join(pod.args)}", flush=True)

    # Tests that read or change the host's rule sets share this lock (tests/common).
    lock = open(os.path.join(os.environ.get("PROXYWATCH_TESTS_TMPDIR", "/tmp"), "proxywatch-tests.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    before = host_rules()
    tmp = tempfile.mkdtemp(prefix="pw-image-")
    cts = Containers(a.image, tmp)
    netns = {kind: f"pwimg-{kind}-{os.getpid()}" for kind in ("nft", "legacy", "nftables")}
    try:
        for ns in netns.values():
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        try:
            tests(pod, cts, a.host_binary, netns, tmp)
        except Exception as e:  # a broken step is a failure to report, after the clean-up
            import traceback
            traceback.print_exc()
            fail(f"the run stopped: {type(e).__name__}: {e}")
    finally:
        cts.remove_all()
        shutil.rmtree(tmp, ignore_errors=True)
        for ns in netns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        after = host_rules()
        changed = [k for k in before if before[k] != after[k]]
        check(not changed, "the host's iptables and nftables rules are unchanged (counters aside)",
              "; ".join(f"{k}: +{sorted(set(after[k]) - set(before[k]))[:5]} -{sorted(set(before[k]) - set(after[k]))[:5]}"
                        for k in changed))
    if failures:
        print(f"tests/image: {len(failures)} check(s) failed:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        sys.exit(1)


def tests(pod, cts, host_bin, netns, tmp):
    net = {k: f"ns:/run/netns/{ns}" for k, ns in netns.items()}
    gen = os.path.join(REPO, "tests/tools")

    # 1. The node as it is.
    compare_checks("node netns", pod, cts, host_bin, None, None)

    # 2. kube-proxy-shaped namespaces: iptables mode in each backend, nftables mode.
    for kind, restore in (("nft", ["iptables-nft-restore"]), ("legacy", ["iptables-legacy-restore"])):
        exp = os.path.join(tmp, f"{kind}.json")
        rules = run([sys.executable, f"{gen}/gen_kube_rules.py", "--services", "40", "--endpoints", "3",
                     "--expected", exp]).stdout
        run(["ip", "netns", "exec", netns[kind]] + restore, input=rules)
        expected = json.load(open(exp))["kube"]
        where = f"iptables-{kind} netns"
        cj = compare_checks(where, pod, cts, host_bin, net[kind], netns[kind])
        if cj is not None:
            ipt = cj["facts"].get("iptables") or {}
            saves = [x for x in ipt.get("saves") or [] if x["backend"] == kind and x["family"] == "ipv4"]
            got = saves[0]["counts"]["kube"] if saves else None
            check(got == expected, f"{where}: the container counts the generated chains {expected}"
                  + (f" ({saves[0]['command']})" if saves else ""), f"got {got}")
    exp = os.path.join(tmp, "nftables.json")
    table = run([sys.executable, f"{gen}/gen_kube_nft.py", "--services", "40", "--endpoints", "3",
                 "--expected", exp]).stdout
    run(["ip", "netns", "exec", netns["nftables"], "nft", "-f", "-"], input=table)
    expected = json.load(open(exp))
    cj = compare_checks("nftables netns", pod, cts, host_bin, net["nftables"], netns["nftables"])
    if cj is not None:
        tables = [t for t in (cj["facts"]["nftables"] or {}).get("tables", []) if t["family"] == "ipv4"]
        keys = ("chains", "base_chains", "rules", "service_chains", "endpoint_chains", "external_chains", "sets", "maps")
        got = {k: tables[0]["counts"].get(k) for k in keys} if tables else None
        want = {k: expected[k] for k in keys}
        check(got == want, f"nftables netns: the container counts kube-proxy's table {want}", f"got {got}")

    # 3. serve, as the DaemonSet runs it (its args), in the iptables-nft namespace.
    p = cts.run(pod.flags(network=net["nft"]), pod.args, detach=True)
    if p.returncode != 0:
        fail(f"serve: podman run exited {p.returncode}: {p.stderr.strip()[-600:]}")
        return
    cid = p.stdout.strip()
    code, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        code, body = http(netns["nft"], "/healthz")
        if code == 200:
            break
        time.sleep(0.2)
    check(code == 200, "serve: /healthz answers 200", f"last answer {code}; logs: {podman_logs(cid)[-600:]}")
    code, body = http(netns["nft"], "/metrics")
    check(code == 200 and re.search(r"^proxywatch_probe_success\{", body, re.M) is not None,
          "serve: /metrics answers 200 with proxywatch_probe_success", f"{code} {body[:200]}")
    tini = int(run(["podman", "inspect", "--format", "{{.State.Pid}}", cid]).stdout.strip())
    tini_comm = open(f"/proc/{tini}/comm").read().strip()
    kids = open(f"/proc/{tini}/task/{tini}/children").read().split()
    agent = int(kids[0]) if kids else None
    check(tini_comm == "tini" and agent is not None and open(f"/proc/{agent}/comm").read().strip() == "proxywatch",
          "serve: the container's process is tini, its child the agent", f"{tini_comm} children {kids}")
    if agent is not None:
        st = proc_status(agent)
        want = sum(1 << CAPS[c] for c in pod.cap_add if c in CAPS) if pod.cap_add else 0
        want_exact = (1 << CAPS["NET_ADMIN"]) | (1 << CAPS["NET_RAW"])
        eff = int(st["CapEff"], 16)
        check(eff == want_exact,
              f"serve: agent CapEff is exactly {'|'.join(cap_names(want_exact))} ({st['CapEff']})",
              f"CapEff {st['CapEff']} = {cap_names(eff) or 'none'}; the manifest adds {pod.cap_add}"
              + (f" (missing {sorted(set(cap_names(want_exact)) - set(cap_names(want)))})" if want != want_exact else ""))
        check(st.get("NoNewPrivs") == "1", "serve: agent NoNewPrivs 1 (allowPrivilegeEscalation: false)",
              f"NoNewPrivs {st.get('NoNewPrivs')}")
        check(st.get("Seccomp") == "2", "serve: agent runs under a seccomp filter (Seccomp 2)",
              f"Seccomp {st.get('Seccomp')} (0 none, 1 strict, 2 filter)")
        # The malloc settings the soak measured (docs/benchmarks.md) reach the agent.
        environ = dict(kv.split("=", 1) for kv in open(f"/proc/{agent}/environ").read().split("\0") if "=" in kv)
        malloc = {k: environ.get(k) for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
        check(malloc == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
                         "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"},
              "serve: the agent runs with the image's malloc settings (MALLOC_ARENA_MAX=2, MALLOC_MMAP_THRESHOLD_=131072, "
              "GLIBC_TUNABLES=glibc.malloc.tcache_count=0)",
              f"{malloc}")
        if pod.memory is not None:
            limit = memory_limit(agent)
            check(limit == pod.memory, f"serve: the agent's cgroup has the manifest's memory limit ({pod.memory} bytes)",
                  f"got {limit}")
        print(f"# agent RSS {st.get('VmRSS')}, peak {st.get('VmHWM')}")
    t = time.monotonic()
    stop = run(["podman", "stop", f"--time={pod.grace}", cid], check_rc=False, timeout=pod.grace + 30)
    took = time.monotonic() - t
    rc = run(["podman", "inspect", "--format", "{{.State.ExitCode}}", cid]).stdout.strip()
    print(f"# podman stop took {took:.2f} s (grace period {pod.grace} s)")
    check(stop.returncode == 0 and rc == "0" and took < pod.grace,
          f"serve: podman stop ends it on SIGTERM with exit code 0 ({took:.2f} s)",
          f"podman stop rc {stop.returncode}, container exit {rc}, {took:.2f} s: {stop.stderr.strip()}")
    logs = podman_logs(cid)
    warn = [l for l in logs.splitlines() if re.search(r"tini", l, re.I)]
    check(not warn, "serve: tini prints no warning", " | ".join(warn[:3]))

    # 4. Without the two capabilities (in the nftables-mode namespace, which has a
    # table for every netlink probe to read), the netlink probes fail and say why.
    probes = probes_of(cts, pod.flags(network=net["nftables"], caps=[], env=CHECK_ENV), "no capabilities")
    if probes is not None:
        # The probes that read the kernel over netlink (nf_tables, ctnetlink); the others
        # read /proc and /sys, which need no capability.
        netlink = ["iptables", "nftables", "conntrack_stale"]
        bad = {k: probes[k] for k in netlink
               if probes[k]["status"] != "failed" or "CAP_NET_ADMIN" not in (probes[k]["error"] or "")}
        check(not bad, f"no capabilities: the netlink probes ({', '.join(netlink)}) fail naming CAP_NET_ADMIN",
              f"{bad}")
        silent = {k: p["error"] for k, p in probes.items() if p["status"] == "failed" and "CAP_" not in (p["error"] or "")}
        check(not silent, "no capabilities: every failing probe names the capability it lacks", f"{silent}")

    # 5. Without NET_RAW, iptables-legacy-save cannot read the legacy rules.
    probes = probes_of(cts, pod.flags(network=net["legacy"], caps=["NET_ADMIN"], env=CHECK_ENV), "NET_ADMIN only")
    if probes is not None:
        ipt = probes["iptables"]
        check(ipt["status"] == "failed" and "CAP_NET_RAW" in (ipt["error"] or ""),
              "NET_ADMIN only: the iptables probe fails on the legacy rules naming CAP_NET_RAW", f"{ipt}")
        others = {k: p["status"] for k, p in probes.items() if k != "iptables" and p["status"] not in ("ok", "absent")}
        check(not others, "NET_ADMIN only: every other probe ok or absent", f"{others}")


def probes_of(cts, flags, where):
    c = cts.run(flags, ["check", "--format", "json"])
    try:
        return json.loads(c.stdout)["probes"]
    except json.JSONDecodeError:
        fail(f"{where}: check --format json exited {c.returncode}: {c.stderr.strip()[-600:]}")
        return None


def podman_logs(cid):
    p = subprocess.run(["podman", "logs", cid], capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


if __name__ == "__main__":
    main()
