#!/usr/bin/env bash
# Issue 36: who changed the rules and how soon the agent knows, notification vs
# poll, side by side in one run; and what listening costs while kube-proxy
# commits every second and while nothing commits.
#
# One throwaway namespace (pwcd-<pid>, deleted on exit, everything started in it
# stopped by its PID) with kube-proxy's iptables-nft rule set
# (tests/tools/gen_kube_rules.py, SERVICES x ENDPOINTS, 2000 x 3), a stand-in
# kube-proxy (bash under the name kube-proxy-cd, writing every second through a
# child `iptables-nft-restore --noflush`, as kube-proxy does; its jumps from the
# built-in chains written once), and three agents. What the stand-in writes, SYNC:
#   partial  (the default) kube-proxy's partial sync (MinimizeIPTablesRestore, on by
#            default since Kubernetes 1.27): the chains it always writes (filter's
#            KUBE-* chains, nat's KUBE-SERVICES, KUBE-NODEPORTS, KUBE-POSTROUTING,
#            KUBE-MARK-MASQ) and one changed Service's SVC/EXT/SEP chains, the next
#            Service each time (pkg/proxy/iptables/proxier.go skips the chains of
#            Services unchanged since the last sync)
#   full     every chain of kube-proxy's, flushed and rewritten: its full sync, done at
#            start, after a failed sync and periodically (proxyutil.FullSyncPeriod)
# The agents:
#   watch  the defaults: nf_tables notifications, conntrack statistics every 1 s
#   poll   --nftables-watch.enabled false --conntrack-stats.interval 0: what the
#          agent was before issue 36, the iptables probe every 60 s (its default)
#   poll2  the same as poll, the control: what two agents doing the same work differ by
# Both listen to kube-proxy's process events in the bench's starting network namespace
# (the initial one, the DaemonSet's: --proc-events.netns), as a hostNetwork agent does; so
# the watching agent's socket filter drops the stand-in's commits but their NEWGEN
# (--nftables-watch.skip-kube-proxy). PROC_EVENTS=0: in the bench's namespace only, where
# they cannot be listened to (nothing dropped: every notification read), as before.
# Phases:
#   busy   BUSY s (600) of the stand-in's rewrites only: the watching agent must
#          journal them as kube-proxy's and never raise rules_changed_by_other_process
#          (checked every second, each agent's /findings asked alike); CPU of each
#          agent over the phase (and of the watching agent's own threads,
#          nftables-watch and conntrack-stats), their median VmRSS sampled every
#          second over its second half
#   idle   IDLE s (600) with the stand-in paused (SIGSTOP): nothing commits; the same
#   trials WATCH_TRIALS (20) times: another process (an iptables-nft-restore, the
#          bench's child, kept running until it is named) removes kube-proxy's
#          service portals (flushes nat PREROUTING and OUTPUT, which kube-proxy's
#          --noflush rewrites do not put back, as a firewalld reload does); the time
#          from its commit (seen in nat OUTPUT, polled every ms) to (a) the finding in
#          the watching agent's /findings naming that PID, (b) the watching agent's
#          iptables reading showing the removal; then the portals put back
#   poll   POLL_TRIALS (5) more, each also timed to (c) the polling agent's first
#          iptables reading that began after the removal (it has no way to name the
#          writer)
#   kill   KILL_TRIALS (5) times: the stand-in (the first time the one above, then
#          a new one, once the watching agent's kube_proxy probe has found it) is
#          SIGKILLed; the time from the kill to kube_proxy_down in the watching agent's
#          /findings naming that PID, and how far the exit time in its evidence is
#          from the kill; the same for a third agent, "host", started for these trials
#          in the initial network namespace (the DaemonSet's: hostNetwork), where the
#          kernel's process events time the exit; in the bench's namespace they cannot
#          be listened to and the exit is timed when the pidfd is seen. No poll row: both agents watch kube-proxy's exit (there is
#          no flag to turn the pidfd off); without it the agent learns of a death
#          at its kube_proxy probe's next run, every 15 s by default.
# Prints one table: latency p50 / p99 / max per row, the CPU ms and RSS KiB per
# phase per agent, and the ratios.
#
# Needs root, ip, iptables-nft-restore, python3. Only the namespace it creates is
# touched; nothing host-global is changed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVICES=${SERVICES:-2000}
ENDPOINTS=${ENDPOINTS:-3}
BUSY=${BUSY:-600}
IDLE=${IDLE:-600}
WATCH_TRIALS=${WATCH_TRIALS:-20}
POLL_TRIALS=${POLL_TRIALS:-5}
KILL_TRIALS=${KILL_TRIALS:-5}
SYNC=${SYNC:-partial}
PROC_EVENTS=${PROC_EVENTS:-1}
source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore python3
pw_bin

NS="pwcd-$$"
WORK=$(mktemp -d /tmp/pw-cd.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$SERVICES" --endpoints "$ENDPOINTS" >"$WORK/full.rules"
# kube-proxy's own chains (each declared: flushed and rewritten by --noflush), without the
# built-in chains and the jumps kube-proxy adds to them once.
grep -vE '^(:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) |-A (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) )' \
	"$WORK/full.rules" >"$WORK/kube.rules"
# The nat portals alone, to put back after each removal.
python3 - "$WORK/full.rules" >"$WORK/portals.rules" <<'EOF'
import sys
table, out = None, []
for l in open(sys.argv[1]):
    if l.startswith("*"):
        table = l.strip()[1:]
    elif table == "nat" and (l.startswith("-A PREROUTING ") or l.startswith("-A OUTPUT ")):
        out.append(l)
print("*nat\n" + "".join(out) + "COMMIT")
EOF
ip netns exec "$NS" iptables-nft-restore <"$WORK/full.rules"

# kube-proxy's partial syncs: sync.<i>.rules writes the chains it always writes and
# Service i's chains (16 files, taken in turn); a full sync writes kube.rules.
python3 - "$WORK/kube.rules" "$WORK" <<'PY'
import re, sys
kube, work = sys.argv[1], sys.argv[2]
per_service = re.compile(r"^KUBE-(SVC|SVL|EXT|FW|SEP)-")
tables, order, table = {}, [], None
for l in open(kube):
    if l.startswith("*"):
        table = l.strip()[1:]
        tables[table] = {"decl": [], "rules": {}}
        order.append(table)
    elif l.startswith(":"):
        tables[table]["decl"].append(l)
    elif l.startswith("-A "):
        tables[table]["rules"].setdefault(l.split()[1], []).append(l)
def service_of(chain, rules):
    m = re.search(r"ns\d+/svc-(\d+):", "".join(rules.get(chain, [])))
    return int(m.group(1)) if m else None
for i in range(16):
    out = []
    for t in order:
        if t not in ("filter", "nat"):
            continue
        d, rules = tables[t], tables[t]["rules"]
        keep = [c.split()[0][1:] for c in d["decl"]
                if not per_service.match(c[1:]) or service_of(c.split()[0][1:], rules) == i]
        out.append(f"*{t}\n")
        out += [f":{c} - [0:0]\n" for c in keep]
        for c in keep:
            out += rules.get(c, [])
        out.append("COMMIT\n")
    open(f"{work}/sync.{i}.rules", "w").write("".join(out))
PY
case $SYNC in
partial) LOOP="i=0; while :; do iptables-nft-restore --noflush < '$WORK/sync.'\$((i % 16))'.rules'; i=\$((i + 1)); sleep 1; done" ;;
full) LOOP="while :; do iptables-nft-restore --noflush < '$WORK/kube.rules'; sleep 1; done" ;;
*) echo "SYNC is partial or full, not $SYNC" >&2; exit 2 ;;
esac
echo "SYNC=$SYNC: $(grep -c '^-A' "$WORK/sync.0.rules") rules per partial sync, $(grep -c '^-A' "$WORK/kube.rules") per full one"
ln -s "$(command -v bash)" "$WORK/kube-proxy-cd"
ip netns exec "$NS" "$WORK/kube-proxy-cd" -c "$LOOP" >/dev/null 2>&1 &
PIDS+=($!)
KP=$!
common=(--log.level warn --node-name bench-cd --kube-proxy.process-name kube-proxy-cd --kube-proxy.down-grace 0s)
[ "$PROC_EVENTS" = 1 ] && common+=(--proc-events.netns "/proc/$$/ns/net")
echo "PROC_EVENTS=$PROC_EVENTS"
ip netns exec "$NS" "$PW_BIN" serve --listen 127.0.0.1:19881 "${common[@]}" 2>"$WORK/watch.log" &
PIDS+=($!)
WATCH=$!
ip netns exec "$NS" "$PW_BIN" serve --listen 127.0.0.1:19882 "${common[@]}" \
	--nftables-watch.enabled false --conntrack-stats.interval 0 2>"$WORK/poll.log" &
PIDS+=($!)
POLL=$!
# The control: a second polling agent, the same flags as the first. Two agents doing the same
# work differ by more than the bars (their polls' rule dumps, the bulk of either's CPU, meet
# each other and the stand-in on 2 CPUs): poll2 against poll is that noise, side by side.
ip netns exec "$NS" "$PW_BIN" serve --listen 127.0.0.1:19884 "${common[@]}" \
	--nftables-watch.enabled false --conntrack-stats.interval 0 2>"$WORK/poll2.log" &
PIDS+=($!)
POLL2=$!

ip netns exec "$NS" python3 - "$WATCH" "$POLL" "$POLL2" "$KP" "$BUSY" "$IDLE" "$WATCH_TRIALS" "$POLL_TRIALS" \
	"$WORK/portals.rules" "$SERVICES" "$ENDPOINTS" "$KILL_TRIALS" "$WORK/kube-proxy-cd" "$LOOP" "$PW_BIN" "/proc/$$/ns/net" <<'EOF'
import json, os, signal, statistics, subprocess, sys, time, urllib.request

watch_pid, poll_pid, poll2_pid, kp_pid = (int(a) for a in sys.argv[1:5])
busy, idle, n_watch, n_poll = (int(a) for a in sys.argv[5:9])
portals, services, endpoints = sys.argv[9], sys.argv[10], sys.argv[11]
n_kill, kp_path, loop, pw_bin, host_net = int(sys.argv[12]), sys.argv[13], sys.argv[14], sys.argv[15], sys.argv[16]
AGENTS = (watch_pid, poll_pid, poll2_pid)
TICK = os.sysconf("SC_CLK_TCK")

def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())

def cpu_ms(pid, tid=None):
    """User + system CPU of the process (or of its thread tid), ms."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    f = open(path).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / TICK

def rss_kib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1])

def watch_state():
    return get(19881, "/snapshot")["derived"].get("nftables_watch") or {}

def other_finding():
    return next((f for f in get(19881, "/findings") if f["id"] == "rules_changed_by_other_process"), None)

def nat_reading(port):
    """(start, end) of the agent's latest iptables reading and its nft ipv4 nat rule count."""
    d = get(port, "/snapshot")
    p = d["probes"].get("iptables") or {}
    end = p.get("last_run_timestamp_seconds")
    run = next((s for s in (d["facts"].get("iptables") or {}).get("saves", [])
                if s["backend"] == "nft" and s["family"] == "ipv4"), None)
    if end is None or run is None:
        return None
    return end - p.get("duration_seconds", 0), end, run["counts"]["tables"]["nat"]["rules"]

def wait(what, cond, limit, step=0.01, or_none=False):
    t0, err = time.monotonic(), None
    while time.monotonic() - t0 < limit:
        try:
            v = cond()
        except (OSError, ValueError, KeyError) as e:
            v, err = None, e
        if v:
            return v
        time.sleep(step)
    if or_none:
        return None
    sys.exit(f"timed out after {limit} s: {what} (last error: {err!r})")

wait("the agents up, kube-proxy found and 3 of its commits journaled",
     lambda: get(19882, "/snapshot") and get(19884, "/snapshot") and watch_state().get("state") == "watching"
     and watch_state().get("commits_kube_proxy_total", 0) >= 3, 120, 0.5)
full = wait("a first reading", lambda: nat_reading(19881), 60, 0.2)[2]
n_portals = sum(1 for l in open(portals) if l.startswith("-A "))

def thread_cpu_ms(pid, names):
    """CPU of the threads of pid named in names (the watching agent's own: its nf_tables
    watcher and conntrack statistics reader), ms."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{tid}/comm").read().strip() in names:
                total += cpu_ms(pid, tid)
        except OSError:
            continue  # the thread ended meanwhile
    return total

WATCH_THREADS = ("nftables-watch", "conntrack-stats")

def phase(seconds, check):
    """CPU over the phase, the median VmRSS of samples every second over its second half, and
    the watching agent's own threads' CPU."""
    c0 = {p: cpu_ms(p) for p in AGENTS}
    own0 = thread_cpu_ms(watch_pid, WATCH_THREADS)
    rss = {p: [] for p in AGENTS}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        check()
        if time.monotonic() - t0 >= seconds / 2:
            for p in rss:
                rss[p].append(rss_kib(p))
        time.sleep(1)
    for p in rss:
        rss[p] = rss[p] or [rss_kib(p)]
    res = {p: (cpu_ms(p) - c0[p], int(statistics.median(rss[p]))) for p in AGENTS}
    res["own"] = thread_cpu_ms(watch_pid, WATCH_THREADS) - own0
    return res

w0 = watch_state()
def busy_check():
    f = other_finding()
    if f is not None:
        sys.exit(f"kube-proxy's own rewrites raised rules_changed_by_other_process: {f}")
    # The polling agents are asked as often (their answers unread): an HTTP request and the
    # render of /findings cost CPU, and only the watching agent's would have paid it.
    for port in (19882, 19884):
        get(port, "/findings")
busy_res = phase(busy, busy_check)
w1 = watch_state()
kp_journal = [e["commit"] for e in w1.get("journal", []) if e.get("commit") and e.get("writer_class") == "kube-proxy"]
dropped = sum(1 for c in kp_journal if c.get("filtered"))
kp_commits = w1["commits_kube_proxy_total"] - w0["commits_kube_proxy_total"]
other_commits = w1["commits_other_total"] - w0["commits_other_total"]
if other_commits != 0:
    sys.exit(f"{other_commits} commits in the busy phase attributed to another process")

os.kill(kp_pid, signal.SIGSTOP)
time.sleep(3)  # a commit under way ends, its re-read settles
idle_res = phase(idle, lambda: None)
os.kill(kp_pid, signal.SIGCONT)

unnamed = []  # trials whose writer the watching agent did not name: what it said instead

def trial(timed_poll):
    before = nat_reading(19881)
    lost0 = watch_state().get("notifications_lost_total", 0)
    t_start = time.time()
    # Kept running (stdin open) until the agent has named it: iptables-nft-restore commits at
    # COMMIT, and the agent in this namespace reads its writer from /proc.
    p = subprocess.Popen(["iptables-nft-restore", "--noflush"], stdin=subprocess.PIPE)
    p.stdin.write(b"*nat\n-F PREROUTING\n-F OUTPUT\nCOMMIT\n")
    p.stdin.flush()
    wait("the removal's commit", lambda: portals_gone(), 30, 0.001)
    t_done = time.time()
    f = wait("the finding naming the writer",
             lambda: (lambda f: f if f and f["evidence"].get("writer_pid") == p.pid else None)(other_finding()), 30,
             or_none=True)
    seen = time.time() - t_done
    if f is None:
        # Not named within 30 s: recorded with what the agent said (a loss at that commit
        # leaves no writer to name: its journal says "notifications lost, rules re-read").
        o = other_finding()
        unnamed.append((watch_state().get("notifications_lost_total", 0) - lost0,
                        o["evidence"].get("writer_pid") if o else None, p.pid))
        f = {"evidence": {"writer_name": None}}
        seen = None
    r = wait("the watching agent's reading of the removal",
             lambda: (lambda r: r if r and r[0] >= t_start and r[2] == full - n_portals else None)(nat_reading(19881)), 30)
    p.stdin.close()
    p.wait()
    out = [seen, max(0.0, r[1] - t_done), f["evidence"].get("writer_name")]
    if timed_poll:
        r = wait("the polling agent's reading of the removal",
                 lambda: (lambda r: r if r and r[0] >= t_start and r[2] == full - n_portals else None)(nat_reading(19882)),
                 200, 0.1)
        out.append(max(0.0, r[1] - t_done))
    subprocess.run(["iptables-nft-restore", "--noflush"], stdin=open(portals), check=True)
    wait("the watching agent's reading of the portals back",
         lambda: (lambda r: r and r[2] == full)(nat_reading(19881)), 30)
    time.sleep(1)
    return out

# The other writer's commit, seen by listing the two small chains it empties. (A writer
# that exits at once is told apart from kube-proxy's children by the kernel's process
# events, which exist in the initial network namespace only: the agents here run in the
# bench's namespace, where such a writer named as kube-proxy's tools would be taken for
# kube-proxy's; so the bench's writer stays until it is named, as firewalld does.)
def portals_gone():
    out = subprocess.run(["nft", "list", "chain", "ip", "nat", "OUTPUT"], capture_output=True, text=True).stdout
    return "jump" not in out
res = [trial(False) for _ in range(n_watch)] + [trial(True) for _ in range(n_poll)]
names = {r[2] for r in res if r[2]}

def kp_seen(port):
    return ((get(port, "/snapshot")["facts"].get("kube_proxy") or {}).get("process") or {}).get("pid")

def down_finding(port, pid):
    f = next((f for f in get(port, "/findings") if f["id"] == "kube_proxy_down"), None)
    return f if f and f["evidence"].get("exited_pid") == pid else None

# The host agent, in the network namespace the bench was started in (the initial one, on a
# node; this python runs in the bench's: the agent and its HTTP client enter the bench
# script's through nsenter). It only reads, as every agent does. Its namespace holds none of
# the stand-in's rules: `--kube-proxy.mode iptables` says kube-proxy belongs there.
NSENTER = ["nsenter", f"--net={host_net}"]
host = None
if n_kill:
    host = subprocess.Popen(NSENTER + [pw_bin, "serve", "--listen", "127.0.0.1:19883", "--log.level", "warn",
                                       "--node-name", "bench-cd-host", "--kube-proxy.process-name", "kube-proxy-cd",
                                       "--kube-proxy.down-grace", "0s", "--kube-proxy.mode", "iptables"],
                            stderr=subprocess.DEVNULL)
def host_get(path):
    code = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
            f"'http://127.0.0.1:19883{path}', timeout=10).read().decode())")
    return json.loads(subprocess.run(NSENTER + ["python3", "-c", code], capture_output=True, text=True,
                                     timeout=20).stdout)
def host_kp_seen():
    return ((host_get("/snapshot")["facts"].get("kube_proxy") or {}).get("process") or {}).get("pid")
def host_down(pid):
    f = next((f for f in host_get("/findings") if f["id"] == "kube_proxy_down"), None)
    return f if f and f["evidence"].get("exited_pid") == pid else None

kills = []
try:
    for i in range(n_kill):
        child = None
        if i > 0:
            child = subprocess.Popen([kp_path, "-c", loop], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = child.pid if child else kp_pid
        try:
            wait("the watching agent's kube_proxy probe finds the stand-in", lambda: kp_seen(19881) == pid, 60, 0.2)
            wait("the host agent's kube_proxy probe finds the stand-in", lambda: host_kp_seen() == pid, 60, 0.2)
            time.sleep(1)  # the exit watch opens its pidfd once a publication names the process
            t_kill = time.time()
        finally:
            os.kill(pid, signal.SIGKILL)  # also when the wait failed: a stand-in of this script never outlives it
            if child:
                child.wait()
        f = wait("kube_proxy_down naming the killed PID", lambda: down_finding(19881, pid), 30, 0.005)
        t_f = time.time()
        h = wait("the host agent's kube_proxy_down naming the killed PID", lambda: host_down(pid), 30, 0.05)
        kills.append((t_f - t_kill, abs(f["evidence"]["exited_timestamp_seconds"] - t_kill), f["severity"],
                      abs(h["evidence"]["exited_timestamp_seconds"] - t_kill)))
finally:
    if host:
        host.terminate()
        host.wait()

def stats(v):
    v = sorted(v)
    q = lambda x: v[min(len(v) - 1, max(0, int(-(-x * len(v) // 1)) - 1))]
    return f"{q(0.5) * 1000:9.0f} {q(0.99) * 1000:9.0f} {v[-1] * 1000:9.0f}"

print(f"rules: {services} x {endpoints} services, nat {full} rules ({n_portals} portals removed per trial); stand-in: {loop}")
print(f"{'latency, ms (commit seen ->)':52} {'trials':>6} {'p50':>9} {'p99':>9} {'max':>9}")
named = [r[0] for r in res if r[0] is not None]
print(f"{'watch: finding in /findings naming the writer':52} {len(named):6d} {stats(named)}")
for lost, other_pid, pid in unnamed:
    print(f"  not named within 30 s (writer {pid}): notifications lost meanwhile {lost}; the finding's writer_pid {other_pid}")
print(f"{'watch: its iptables reading shows the removal':52} {len(res):6d} {stats([r[1] for r in res])}")
print(f"{'poll:  its iptables reading shows the removal':52} {n_poll:6d} {stats([r[3] for r in res[n_watch:]])}")
if kills:
    print(f"{'watch: kube_proxy_down in /findings after a SIGKILL':52} {len(kills):6d} {stats([k[0] for k in kills])}")
    print(f"{'watch: exit time in its evidence, off the kill by':52} {len(kills):6d} {stats([k[1] for k in kills])}")
    print(f"{'host:  exit time in its evidence, off the kill by':52} {len(kills):6d} {stats([k[3] for k in kills])}")
    print(f"kube_proxy_down severity at once (--kube-proxy.down-grace 0s): {', '.join(sorted({k[2] for k in kills}))}")
print(f"writer named by the watching agent: {', '.join(sorted(names))}; the polling agent names none")
print(f"busy phase: {busy} s, {kp_commits} commits journaled as kube-proxy's, 0 as another's, the finding never raised")
print(f"of kube-proxy's last {len(kp_journal)} commits journaled at the busy phase's end, {dropped} dropped in the kernel but their NEWGEN (socket filter)")
print(f"{'phase':8} {'watch_cpu_ms':>12} {'poll_cpu_ms':>12} {'poll2_cpu_ms':>12} {'cpu_ratio':>9} {'control':>7} {'own_ms':>7} {'watch_kib':>9} {'poll_kib':>9} {'poll2_kib':>9} {'d_kib':>6}")
for name, r in (("busy", busy_res), ("idle", idle_res)):
    (wc, wk), (pc, pk), (qc, qk) = r[watch_pid], r[poll_pid], r[poll2_pid]
    ratio = wc / ((pc + qc) / 2) if pc + qc else float("nan")
    control = qc / pc if pc else float("nan")
    print(f"{name:8} {wc:12.0f} {pc:12.0f} {qc:12.0f} {ratio:9.2f} {control:7.2f} {r['own']:7.0f} {wk:9d} {pk:9d} {qk:9d} {wk - (pk + qk) // 2:6d}")
print("cpu_ratio: watch against the two polling agents' mean; control: poll2 against poll (the same work: the noise);"
      " own_ms: the watching agent's nftables-watch and conntrack-stats threads; *_kib: median VmRSS of samples every"
      " second over the phase's second half, d_kib against the polling agents' mean")
print(f"load average at the end: {open('/proc/loadavg').read().split()[:3]}")
EOF
