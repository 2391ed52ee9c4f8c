#!/usr/bin/env bash
# Soak (issue 28; not in CI): one agent on a busy "node" for DURATION, under
# churn, scraped every second; samples its memory, fds, threads, children and
# probe outcomes, and judges whether memory levels off.
#
#   tests/bench/soak.sh ipt|nft [OUT_DIR]    the soak, in kube-proxy's iptables
#                                            mode (nft backend) or nftables mode
#   tests/bench/soak.sh load                 the 30 s load run of issue 8 (64
#                                            connections; tests/http/load.rs, release)
#
# Per run, one throwaway namespace (pwsk-<pid>-<mode>, deleted on exit, with
# everything started in it, each stopped by its PID):
#   rules      SERVICES x ENDPOINTS kube-proxy rules (tests/tools/gen_kube_*.py),
#              rewritten every RULE_PERIOD s, alternating ENDPOINTS and
#              ENDPOINTS+1 per service (other endpoints: the flows NATed to the
#              previous ones become stale), in one transaction each, as
#              kube-proxy's resync (iptables-nft-restore, or nft -f replacing
#              table ip kube-proxy);
#   conntrack  every CT_PERIOD s, CT_FLOWS short flows' entries deleted
#              (conntrack -D) and as many new flows to service addresses
#              sent (UDP to the dns services, TCP SYNs to the others; out a
#              veth with no peer address, so nothing answers): real DST_NAT
#              entries from the rules above; plus CT_FLOWS/2 long-lived UDP
#              flows kept alive, stale whenever the rules moved their endpoint;
#   kube-proxy a stand-in (python3 run as `kube-proxy-soak-<mode>`, found through
#              --kube-proxy.process-name: /metrics from a real
#              capture, /healthz, /proxyMode on 10249/10256), every KP_PERIOD
#              s in turn: killed (SIGKILL), terminated (SIGTERM), frozen
#              (SIGSTOP for 20 s), each time started again 5 s later;
#   agent      the release binary under nice -n 10 (--conntrack-stale.interval
#              STALE_INTERVAL, other flags default, so the history windows are
#              the production ones: full after 15 min);
#   observer   every second: GET /metrics and /snapshot on one kept-alive
#              connection each (Python's http.client, the client issue 28 saw
#              cut off at each --web.max-connection-age), and the agent's
#              /proc status: VmRSS, VmHWM, fds, threads, children, zombies.
#
# Writes OUT_DIR/samples.csv (one row a second) and OUT_DIR/report.txt, and
# prints the report: RSS at 15 min, 1 h and 2 h (when reached), the slope of
# RSS over the second half of the run (least squares, MiB/h) against
# SLOPE_BOUND (MiB/h), fds/threads (first vs second half), failed scrapes
# (apart: those right after the observer itself stalled past the agent's 5 s
# idle timeout, when the agent may close a kept-alive connection as idle),
# scrape p50/p99, probe runs and failures per probe. PASS needs: slope <=
# bound, 0 failed scrapes but those, no zombie, threads no higher in the second half
# than in the first, fds at most 2 higher (open connections vary). Exit 0 on
# PASS, 1 on FAIL. `soak_report.py OUT_DIR` prints the same for a soak still
# running.
#
# Environment: DURATION=7200 (s), SERVICES=2000, ENDPOINTS=3, RULE_PERIOD=1,
# CT_FLOWS=300, CT_PERIOD=2, KP_PERIOD=60, STALE_INTERVAL=5s, SLOPE_BOUND=0.5,
# PORT=19100 (ipt) / 19101 (nft), AGENT_ENV (extra environment for the agent,
# e.g. MALLOC_ARENA_MAX=2), TWIN_ENV (a second agent in the same namespace with
# this environment, on PORT+10, reported from OUT_DIR/twin: an A/B of one
# setting under the same churn), PW_BIN (else built), SOAK_ROOT (see below).
# Keep it nice: the churn alone takes a good part of a core at the defaults.
set -euo pipefail

# SOAK_ROOT: the repository, when running a copy of this script (bash reads
# a script as it goes: editing the one a soak runs breaks the soak).
ROOT=${SOAK_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
MODE=${1:?usage: soak.sh ipt|nft|load [OUT_DIR]}
if [[ $MODE == load ]]; then
	cd "$ROOT"
	PROXYWATCH_SOAK_SECONDS=${PROXYWATCH_SOAK_SECONDS:-30} \
		cargo test --release --test http load:: -- --nocapture 2>&1 | grep -E '^load:|test result'
	exit 0
fi
[[ $MODE == ipt || $MODE == nft ]] || { echo "mode: ipt, nft or load" >&2; exit 2; }
OUT=${2:-$(mktemp -d /tmp/pwsoak-$MODE.XXXX)}
mkdir -p "$OUT"
DURATION=${DURATION:-7200}
SERVICES=${SERVICES:-2000}
ENDPOINTS=${ENDPOINTS:-3}
RULE_PERIOD=${RULE_PERIOD:-1}
CT_FLOWS=${CT_FLOWS:-300}
CT_PERIOD=${CT_PERIOD:-2}
KP_PERIOD=${KP_PERIOD:-60}
STALE_INTERVAL=${STALE_INTERVAL:-5s}
SLOPE_BOUND=${SLOPE_BOUND:-0.5}
if [[ $MODE == ipt ]]; then PORT=${PORT:-19100}; else PORT=${PORT:-19101}; fi

source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore nft conntrack python3
pw_bin

NS="pwsk-$$-$MODE"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	# Each PID this script started, and the children of its loops (by parent PID).
	for p in "${PIDS[@]}"; do
		pkill -P "$p" 2>/dev/null || true
		kill -CONT "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
	done
	[[ -f $WORK/kp.pid ]] && { p=$(cat "$WORK/kp.pid"); kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; }
	wait 2>/dev/null || true
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
in_ns() { ip netns exec "$NS" "$@"; }
in_ns ip link set lo up
# Service and pod addresses routed out one end of a veth pair whose other end
# has no address: OUTPUT's DNAT sees the flows, nothing answers them. Through one
# gateway with a permanent neighbour entry (a MAC no one has, so pwd1 drops every
# frame): routed on-link, every pod address would need its own ARP entry, and the
# kernel's neighbour table and its gc_thresh3 are shared by every namespace: the
# soak would fill the machine's table and make other namespaces' neighbours fail.
in_ns ip link add pwd0 type veth peer name pwd1
in_ns ip addr add 10.250.0.1/24 dev pwd0
in_ns ip addr add 10.250.0.2/24 dev pwd0
in_ns ip link set pwd0 up
in_ns ip link set pwd1 up
in_ns ip neigh add 10.250.0.254 lladdr 02:00:00:00:00:fe dev pwd0 nud permanent
in_ns ip route add 10.96.0.0/12 via 10.250.0.254 dev pwd0 src 10.250.0.1
in_ns ip route add 10.244.0.0/16 via 10.250.0.254 dev pwd0 src 10.250.0.1

# The two rule sets the churn alternates.
for v in 0 1; do
	eps=$((ENDPOINTS + v))
	if [[ $MODE == ipt ]]; then
		python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$SERVICES" --endpoints "$eps" >"$WORK/rules$v"
	else
		{
			printf 'table ip kube-proxy {}\ndelete table ip kube-proxy\n'
			python3 "$ROOT/tests/tools/gen_kube_nft.py" --services "$SERVICES" --endpoints "$eps"
		} >"$WORK/rules$v"
	fi
done
load_rules() {
	if [[ $MODE == ipt ]]; then in_ns iptables-nft-restore <"$1"; else in_ns nft -f "$1"; fi
}
load_rules "$WORK/rules0"

# Service ports the flows go to (ClusterIPs of the generated services).
python3 - "$WORK/rules0" "$MODE" >"$WORK/services" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
if sys.argv[2] == "ipt":
    found = re.findall(r"-p (tcp|udp) -d (\d+\.\d+\.\d+\.\d+) --dport (\d+) -j KUBE-SVC-", text)
    found = [(a, p, port) for p, a, port in found]
else:
    found = re.findall(r"(\d+\.\d+\.\d+\.\d+) \. (tcp|udp) \. (\d+) : goto service-", text)
for a, p, port in found:
    print(a, p, port)
PY

# Rules churn.
(
	i=0
	while :; do
		sleep "$RULE_PERIOD"
		i=$((1 - i))
		load_rules "$WORK/rules$i" || echo "rules load failed" >&2
	done
) &
PIDS+=($!)

# Conntrack churn: delete the client's entries, send new flows.
cat >"$WORK/flows.py" <<'PY'
import random, socket, subprocess, sys, time
services = [l.split() for l in open(sys.argv[1])]
n, period = int(sys.argv[2]), float(sys.argv[3])
udp = [s for s in services if s[1] == "udp"]
# Long-lived flows (from 10.250.0.1, kept alive by a datagram every period):
# NATed when they began, stale once the rules moved their endpoint away, and
# current again when the rules come back.
kept = []
for addr, proto, port in random.sample(udp, min(n // 2, len(udp))):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("10.250.0.1", 0))
    kept.append((s, (addr, int(port))))
while True:
    for s, dst in kept:
        try:
            s.sendto(b"k", dst)
        except OSError:
            pass
    # Short flows (from 10.250.0.2): deleted, then made anew.
    subprocess.run(["conntrack", "-D", "-s", "10.250.0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    for addr, proto, port in random.sample(services, min(n, len(services))):
        try:
            if proto == "udp":
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("10.250.0.2", 0))
                s.sendto(b"q", (addr, int(port)))
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("10.250.0.2", 0))
                s.setblocking(False)
                s.connect_ex((addr, int(port)))
            socks.append(s)
        except OSError:
            pass
    time.sleep(period)
    for s in socks:
        s.close()
PY
ip netns exec "$NS" python3 "$WORK/flows.py" "$WORK/services" "$CT_FLOWS" "$CT_PERIOD" &
PIDS+=($!)

# The stand-in kube-proxy and its fate.
# A symlink: comm and argv[0] name it, Python still finds its library. Named
# kube-proxy-soak-<mode>-<pid> (comm "kube-proxy-soak"; the PID keeps two soaks of
# one mode apart), found by the agent through
# --kube-proxy.process-name: a process named kube-proxy would be taken for the
# node's by every test that reads the real /proc (CI can run beside a soak).
KP_NAME="kube-proxy-soak-$MODE-$$"
ln -s "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')" "$WORK/$KP_NAME"
cat >"$WORK/kp.py" <<'PY'
import http.server, json, sys, threading, time
metrics = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/metrics":
            body, ctype = metrics, "text/plain; version=0.0.4"
        elif self.path == "/proxyMode":
            body, ctype = sys.argv[2].encode(), "text/plain"
        elif self.path == "/healthz":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = json.dumps({"lastUpdated": now, "currentTime": now, "nodeEligible": True}).encode()
            ctype = "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
for port in (10249, 10256):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
while True:
    time.sleep(3600)
PY
KP_MODE=iptables
[[ $MODE == nft ]] && KP_MODE=nftables
start_kp() {
	ip netns exec "$NS" "$WORK/$KP_NAME" "$WORK/kp.py" \
		"$ROOT/tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom" "$KP_MODE" &
	echo $! >"$WORK/kp.pid"
}
start_kp
(
	n=0
	while :; do
		sleep "$KP_PERIOD"
		p=$(cat "$WORK/kp.pid")
		case $((n % 3)) in
			0) kill -KILL "$p" ;;
			1) kill -TERM "$p" ;;
			2) kill -STOP "$p"; sleep 20; kill -CONT "$p"; kill -TERM "$p" ;;
		esac
		wait "$p" 2>/dev/null || true
		sleep 5
		start_kp
		n=$((n + 1))
	done
) &
PIDS+=($!)

# The agent.
# ip netns exec and nice exec the agent: $! is its PID.
# AGENT_ENV: extra environment for the agent (e.g. MALLOC_ARENA_MAX=2).
read -r -a AGENT_ENV <<<"${AGENT_ENV:-}"
ip netns exec "$NS" env "${AGENT_ENV[@]}" nice -n 10 "$PW_BIN" serve --listen "127.0.0.1:$PORT" \
	--conntrack-stale.interval "$STALE_INTERVAL" --kube-proxy.process-name "$KP_NAME" 2>"$OUT/agent.log" >/dev/null &
AGENT=$!
PIDS+=("$AGENT")
# TWIN_ENV: a second agent in the same namespace, under the same churn, with this
# environment instead of AGENT_ENV (an A/B of one setting), on PORT+10, observed
# into OUT/twin.
if [[ -n ${TWIN_ENV:-} ]]; then
	read -r -a TWIN <<<"$TWIN_ENV"
	mkdir -p "$OUT/twin"
	ip netns exec "$NS" env "${TWIN[@]}" nice -n 10 "$PW_BIN" serve --listen "127.0.0.1:$((PORT + 10))" \
		--conntrack-stale.interval "$STALE_INTERVAL" --kube-proxy.process-name "$KP_NAME" 2>"$OUT/twin/agent.log" >/dev/null &
	TWIN_PID=$!
	PIDS+=("$TWIN_PID")
fi
echo "soak $MODE${AGENT_ENV:+ (${AGENT_ENV[*]})}: $SERVICES x $ENDPOINTS services, rules every ${RULE_PERIOD}s, $CT_FLOWS flows every ${CT_PERIOD}s," \
	"kube-proxy fate every ${KP_PERIOD}s; agent pid $AGENT on $PORT for ${DURATION}s; samples in $OUT" >&2

cat >"$WORK/observe.py" <<'PY'
import http.client, json, os, sys, time
port, pid, duration, out, ns = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
conns = {p: http.client.HTTPConnection("127.0.0.1", port, timeout=10) for p in ("/metrics", "/snapshot")}

def status():
    v = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("VmRSS", "VmHWM", "Threads", "RssAnon", "RssFile"):
                v[k] = int(rest.split()[0])
    v["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    kids = zombies = 0
    try:
        for c in open(f"/proc/{pid}/task/{pid}/children").read().split():
            kids += 1
            if open(f"/proc/{c}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                zombies += 1
    except OSError:
        pass
    v["children"], v["zombies"] = kids, zombies
    return v

def series(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None

runs = {}
f = open(os.path.join(out, "samples.csv"), "w")
f.write("t,rss_kib,hwm_kib,fds,threads,children,zombies,metrics_ms,snapshot_ms,failed,stale_entries,probes_failed,anon_kib,file_kib\n")
start = time.monotonic()
while time.monotonic() - start < duration:
    tick = time.monotonic()
    try:
        st = status()
    except OSError:
        print("the agent is gone", file=sys.stderr)
        sys.exit(1)
    ms, failed, bodies = {}, 0, {}
    for path, c in conns.items():
        t0 = time.monotonic()
        try:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}")
            bodies[path] = body
        except Exception as e:
            failed += 1
            print(f"{time.monotonic() - start:.0f}s {path}: {type(e).__name__}: {e}", file=sys.stderr)
            c.close()
        ms[path] = (time.monotonic() - t0) * 1000
    stale = pf = ""
    if "/metrics" in bodies:
        text = bodies["/metrics"].decode()
        # A gauge the scrape did not carry (the stale check not run yet, or failed) is
        # absent, not 0: the column stays empty unless at least one of them was there.
        present = [v for v in (series(text, f'proxywatch_conntrack_{k}_entries{{protocol="{p}"}}')
                               for k, p in (("draining", "tcp"), ("stale", "udp"), ("draining", "sctp"))) if v is not None]
        stale = sum(present) if present else ""
    if "/snapshot" in bodies:
        doc = json.loads(bodies["/snapshot"])
        pf = 0
        for name, o in doc.get("probes", {}).items():
            r = runs.setdefault(name, {"runs": 0, "ok": 0, "absent": 0, "failed": 0, "last": None, "errors": {}})
            if o.get("status") == "failed":
                pf += 1
            # The JSON key is last_run_timestamp_seconds (last_run_seconds before the rename:
            # a soak that read only the old key saw no run at all).
            last = o.get("last_run_timestamp_seconds", o.get("last_run_seconds"))
            if last is not None and last != r["last"]:
                r["last"] = last
                r["runs"] += 1
                r[o.get("status", "failed")] += 1
                if o.get("status") == "failed":
                    e = (o.get("error") or "")[:160]
                    r["errors"][e] = r["errors"].get(e, 0) + 1
    f.write(f"{tick - start:.1f},{st['VmRSS']},{st['VmHWM']},{st['fds']},{st['Threads']},{st['children']},{st['zombies']},"
            f"{ms['/metrics']:.2f},{ms['/snapshot']:.2f},{failed},{stale},{pf},{st.get('RssAnon', '')},{st.get('RssFile', '')}\n")
    f.flush()
    json.dump({k: {kk: vv for kk, vv in v.items() if kk != "last"} for k, v in runs.items()},
              open(os.path.join(out, "probes.json"), "w"), indent=1)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
PY

# Wait for the first answer, then observe.
for _ in $(seq 100); do
	in_ns python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/metrics', timeout=1)" 2>/dev/null && break
	sleep 0.3
done
if [[ -n ${TWIN_ENV:-} ]]; then
	in_ns python3 "$WORK/observe.py" "$((PORT + 10))" "$TWIN_PID" "$DURATION" "$OUT/twin" "$NS" 2>"$OUT/twin/observer.log" &
	PIDS+=($!)
fi
in_ns python3 "$WORK/observe.py" "$PORT" "$AGENT" "$DURATION" "$OUT" "$NS" 2>"$OUT/observer.log" || true
if [[ -n ${TWIN_ENV:-} ]]; then
	wait "${PIDS[-1]}" 2>/dev/null || true
	python3 "$ROOT/tests/bench/soak_report.py" "$OUT/twin" "$SLOPE_BOUND" "twin ($TWIN_ENV) of mode $MODE" | tee "$OUT/twin/report.txt"
fi

python3 "$ROOT/tests/bench/soak_report.py" "$OUT" "$SLOPE_BOUND" \
	"mode $MODE, $SERVICES x $ENDPOINTS services, rules every ${RULE_PERIOD}s, $CT_FLOWS flows every ${CT_PERIOD}s, kube-proxy fate every ${KP_PERIOD}s, stale check every $STALE_INTERVAL" \
	| tee "$OUT/report.txt"
grep -q '^PASS' "$OUT/report.txt"
