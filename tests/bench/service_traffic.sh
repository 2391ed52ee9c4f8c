#!/usr/bin/env bash
# Issue 37: what the service_traffic probe costs with 20 targets, side by side
# with what a user would run instead (20 `curl -w %{time_connect}`), in one run.
#
# Two throwaway namespaces (pwsv-<pid>-node, pwsv-<pid>-ep, deleted on exit),
# joined by a veth: the node gets kube-proxy-shaped iptables-nft rules (the
# layout of tests/service_traffic.rs): default/kubernetes 10.96.0.1:443,
# kube-system/kube-dns 10.96.0.10:53 (UDP and TCP) and TARGETS (20) Services
# default/web<i> 10.96.1.<i+1>:80, each DNATed to one endpoint in the ep
# namespace (10.77.0.2: TCP listeners on 6443 and 8080, a DNS responder on 53;
# python3, accept and close).
#
# Two `proxywatch serve` (started by `ip netns exec` and env(1), which exec it, so $! is the agent) run side by side in the node namespace for SECONDS
# (SECONDS_WINDOW, 60), the same flags but one tries every INTERVAL (250ms) the 23 built-in
# and flag targets (--service-traffic.target default/web<i>:80, each its one
# ClusterIP try) and the other never (the default). Columns:
# A third agent (ren) tries nothing either but re-reads its sysctls every INTERVAL: it
# publishes (snapshot, metrics, page rendered) as often as the trying agent does, so its
# CPU, less the idle agent's, is the cost of a probe run and its publication without tries.
#   runs       service_traffic runs in the window (the API server's tries, from /snapshot)
#   on_cpu / off_cpu  user + system CPU of each agent over the window (/proc/PID/stat, 10 ms ticks), ms
#   cpu_per_run  (on_cpu - off_cpu) / runs, ms (issue 37: <= 5)
#   probe_ms   the probe's wall time, probes.service_traffic.duration_seconds at the end
#   on_kib / off_kib / d_kib  VmRSS of each agent, the median of samples every 0.5 s over the
#              window's second half (issue 37: within 0.3 MiB = 307 KiB); each agent's
#              RssAnon and RssFile medians are printed before the table
#   ren_cpu    CPU of the third agent over the window, ms; pubs_on / pubs_ren the
#              publications of the trying and of the third agent in the window
#              (proxywatch_publications_total)
#   pub_ms     (ren_cpu - off_cpu) / pubs_ren: one sysctls run and its publication, ms
#   try_ms     cpu_per_run less pub_ms per publication of the trying agent: the 23 tries
#              themselves and their history, ms per run
#   ren_kib    VmRSS of the third agent, sampled as on_kib
# and, on a line of its own, the size in KiB of what the trying and the idle agent serve
# at the end (/snapshot, /metrics, the status page): each is rendered and kept per
# publication, so it is part of the trying agent's RSS.
#   curl_cpu   user + system CPU of 20 `curl -s -o /dev/null -w %{time_connect}` to the
#              web Services, one after the other (wait4 rusage of the bash that runs them),
#              median of RUNS (5), ms; curl_ms their wall time
#
# The three agents run with the image's allocator settings (lib.sh's image_env: the
# Dockerfile's ENV, glibc's per-thread caches off among them), as the DaemonSet's does.
#
# Needs root, iproute2, iptables-nft-restore, conntrack, curl, python3.
# Only the namespaces it creates are touched; nothing host-global is changed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGETS=${TARGETS:-20}
SECONDS_=${SECONDS_WINDOW:-60}
INTERVAL=${INTERVAL:-250ms}
RUNS=${RUNS:-5}
source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore conntrack curl python3
pw_bin
image_env

NODE="pwsv-$$-node" EP="pwsv-$$-ep"
WORK=$(mktemp -d /tmp/pw-svc.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del "$NODE" 2>/dev/null || true
	ip netns del "$EP" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NODE"
ip netns add "$EP"
innode() { ip netns exec "$NODE" "$@"; }
inep() { ip netns exec "$EP" "$@"; }
innode ip link set lo up
inep ip link set lo up
innode ip link add pwsv-n type veth peer name pwsv-e
innode ip link set pwsv-e netns "$EP"
innode ip addr add 10.77.0.1/24 dev pwsv-n
innode ip link set pwsv-n up
innode ip route add 10.96.0.0/12 dev pwsv-n
inep ip addr add 10.77.0.2/24 dev pwsv-e
inep ip link set pwsv-e up

python3 - "$TARGETS" >"$WORK/rules.txt" <<'EOF'
import sys
n = int(sys.argv[1])
ep = "10.77.0.2"
svcs = [("default/kubernetes:https", "10.96.0.1", "tcp", 443, 6443),
        ("kube-system/kube-dns:dns", "10.96.0.10", "udp", 53, 53),
        ("kube-system/kube-dns:dns-tcp", "10.96.0.10", "tcp", 53, 53)]
svcs += [("default/web%d:http" % i, "10.96.1.%d" % (i + 1), "tcp", 80, 8080) for i in range(n)]
chains, rules = [], []
for k, (name, ip, p, port, to) in enumerate(svcs):
    svc, sep = "KUBE-SVC-BENCH%010d" % k, "KUBE-SEP-BENCH%010d" % k
    chains += [svc, sep]
    rules.append('-A KUBE-SERVICES -d %s/32 -p %s -m comment --comment "%s cluster IP" -m %s --dport %d -j %s' % (ip, p, name, p, port, svc))
    rules.append('-A %s -m comment --comment "%s -> %s:%d" -j %s' % (svc, name, ep, to, sep))
    rules.append('-A %s -p %s -m comment --comment "%s" -m %s -j DNAT --to-destination %s:%d' % (sep, p, name, p, ep, to))
print("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]")
for c in chains:
    print(":%s - [0:0]" % c)
print('-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
print("\n".join(rules))
print("COMMIT")
EOF
innode iptables-nft-restore <"$WORK/rules.txt"

cat >"$WORK/server.py" <<'EOF'
import socket, struct, threading
def answer(q):
    end = 12
    while q[end] != 0:
        end += q[end] + 1
    return q[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + q[12:end + 5] + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x1e\x00\x04" + socket.inet_aton("10.96.0.1")
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.2", port)); s.listen(256)
    return s
def accept_close(s):
    while True:
        c, _ = s.accept(); c.close()
def dns_tcp(s):
    while True:
        c, _ = s.accept()
        try:
            n = struct.unpack("!H", c.recv(2))[0]
            q = b""
            while len(q) < n:
                q += c.recv(n - len(q))
            a = answer(q)
            c.sendall(struct.pack("!H", len(a)) + a)
        except Exception:
            pass
        c.close()
for port in (6443, 8080):
    threading.Thread(target=accept_close, args=(listen(port),), daemon=True).start()
threading.Thread(target=dns_tcp, args=(listen(53),), daemon=True).start()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.77.0.2", 53))
while True:
    q, peer = u.recvfrom(512)
    u.sendto(answer(q), peer)
EOF
# Started by `ip netns exec` directly (not the inep function, a subshell) and as the
# interpreter itself (not a wrapper such as a pyenv shim, which forks it): $! is then the
# server, which cleanup kills; otherwise it outlived the run and its namespace.
PY=$(python3 -c 'import sys; print(sys.executable)')
ip netns exec "$EP" "$PY" "$WORK/server.py" &
PIDS+=($!)
sleep 1

common=(--log.level error --node-name bench --kube-proxy.down-grace 0s --service-traffic.try-timeout 2s)
targets=()
for ((i = 0; i < TARGETS; i++)); do targets+=(--service-traffic.target "default/web$i:80"); done
ip netns exec "$NODE" env "${IMAGE_ENV[@]}" "$PW_BIN" serve --listen 127.0.0.1:19871 "${common[@]}" "${targets[@]}" --service-traffic.interval "$INTERVAL" 2>"$WORK/on.log" &
PIDS+=($!)
ON=$!
ip netns exec "$NODE" env "${IMAGE_ENV[@]}" "$PW_BIN" serve --listen 127.0.0.1:19872 "${common[@]}" "${targets[@]}" 2>"$WORK/off.log" &
PIDS+=($!)
OFF=$!
ip netns exec "$NODE" env "${IMAGE_ENV[@]}" "$PW_BIN" serve --listen 127.0.0.1:19873 "${common[@]}" "${targets[@]}" --sysctls.interval "$INTERVAL" 2>"$WORK/ren.log" &
PIDS+=($!)
REN=$!

snap() { innode curl -sf "http://127.0.0.1:$1/snapshot"; }
api_tries() { # port: the API server's tries so far
	snap "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = [t for t in (d.get("derived", {}).get("service_traffic") or {}).get("targets", []) if t["target"] == "default/kubernetes:443/tcp"]
print(sum(t[0]["tries"].values()) if t else 0)'
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
pubs() { innode curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "proxywatch_publications_total" {print $2}'; }

for _ in $(seq 100); do
	if snap 19871 >/dev/null 2>&1 && snap 19872 >/dev/null 2>&1 && snap 19873 >/dev/null 2>&1 && (($(api_tries 19871) > 0)); then break; fi
	sleep 0.2
done
# Every target tried and reached once before the window: the figures are of successes.
snap 19871 | python3 -c '
import json, sys
d = json.load(sys.stdin)
tries = d["facts"]["service_traffic"]["tries"]
bad = [t["target"] + ": " + t["result"] for t in tries if t["result"] != "ok"]
if len(tries) != int(sys.argv[1]) + 3 or bad:
    sys.exit("%d tries, failing: %s" % (len(tries), bad))
' "$TARGETS"

TICK=$(getconf CLK_TCK)
r0=$(api_tries 19871) on0=$(cpu "$ON") off0=$(cpu "$OFF") ren0=$(cpu "$REN") pon0=$(pubs 19871) pren0=$(pubs 19873)
# RSS sampled every 0.5 s over the window's second half, the three agents at the same instants:
# one end-of-window sample spread between runs by more than the bar.
python3 "$ROOT/tests/bench/rss_sample.py" "$SECONDS_" "$WORK/rss.txt" on="$ON" off="$OFF" ren="$REN"
r1=$(api_tries 19871) on1=$(cpu "$ON") off1=$(cpu "$OFF") ren1=$(cpu "$REN") pon1=$(pubs 19871) pren1=$(pubs 19873)
read -r on_kib off_kib ren_kib <"$WORK/rss.txt"
# Where each agent's anonymous memory is at the window's end (heap, other arenas, thread stacks).
python3 "$ROOT/tests/bench/anon_by_mapping.py" on="$ON" off="$OFF" ren="$REN" >&2
probe_ms=$(snap 19871 | python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["probes"]["service_traffic"]["duration_seconds"] * 1000))')

# What a user would run instead: 20 curls, each its connect time.
cat >"$WORK/peak.py" <<'EOF'
import os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
open(out, "w").write("%.6f %.6f\n" % (ru.ru_utime + ru.ru_stime, time.monotonic() - t0))
EOF
cat >"$WORK/curls.sh" <<EOF
for ((i = 1; i <= $TARGETS; i++)); do curl -s -o /dev/null -w '%{time_connect}\n' "http://10.96.1.\$i:80/" || true; done
EOF
cc=() cw=()
for ((i = 0; i < RUNS; i++)); do
	innode python3 "$WORK/peak.py" "$WORK/c" bash "$WORK/curls.sh" >"$WORK/connects.txt"
	read -r c w <"$WORK/c"
	cc+=("$c") cw+=("$w")
done
n_connects=$(grep -c . "$WORK/connects.txt")
median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%6s %8s %8s %11s %9s %7s %7s %6s %9s %8s %8s %8s %8s %7s %7s %7s\n' runs on_cpu off_cpu cpu_per_run probe_ms on_kib off_kib d_kib curl_cpu curl_ms \
	ren_cpu pubs_on pubs_ren pub_ms try_ms ren_kib
awk -v r=$((r1 - r0)) -v on=$((on1 - on0)) -v off=$((off1 - off0)) -v ren=$((ren1 - ren0)) -v t="$TICK" -v p="$probe_ms" \
	-v pon="$(awk -v a="$pon0" -v b="$pon1" 'BEGIN {print b - a}')" -v pren="$(awk -v a="$pren0" -v b="$pren1" 'BEGIN {print b - a}')" \
	-v ok="$on_kib" -v fk="$off_kib" -v rk="$ren_kib" -v cc="$(printf '%s\n' "${cc[@]}" | median)" -v cw="$(printf '%s\n' "${cw[@]}" | median)" \
	'BEGIN {
		onms = on * 1000 / t; offms = off * 1000 / t; renms = ren * 1000 / t
		per_run = (r > 0 ? (onms - offms) / r : 0)
		pub = (pren > 0 ? (renms - offms) / pren : 0)
		tries = (r > 0 ? per_run - pub * pon / r : 0)
		printf "%6d %8.0f %8.0f %11.2f %9s %7d %7d %6d %9.1f %8.1f %8.0f %8d %8d %7.2f %7.2f %7d\n", r, onms, offms, per_run, p, ok, fk, ok - fk, cc * 1000, cw * 1000, renms, pon, pren, pub, tries, rk
	}'
size() { innode curl -sf -H "Accept: ${3:-*/*}" -o /dev/null -w '%{size_download}' "http://127.0.0.1:$1$2"; }
sizes=""
for path in /snapshot /metrics; do sizes+=" $path $(($(size 19871 $path) / 1024)) / $(($(size 19872 $path) / 1024))"; done
sizes+=" page $(($(size 19871 / text/html) / 1024)) / $(($(size 19872 / text/html) / 1024))"
echo "served KiB, trying / idle agent:$sizes"
# Where the trying agent's snapshot is bigger: its service_traffic sections.
snap 19871 | python3 -c '
import json, sys
d = json.load(sys.stdin)
k = lambda v: len(json.dumps(v)) // 1024
print("of its /snapshot, KiB: facts.service_traffic %d, derived.service_traffic %d (recent points %d), findings %d"
      % (k(d["facts"].get("service_traffic")), k(d["derived"].get("service_traffic")),
         sum(len(t.get("recent", [])) for t in (d["derived"].get("service_traffic") or {}).get("targets", [])), k(d.get("findings"))))
print("  by section, KiB:", ", ".join("%s %d" % (n, k(v)) for n, v in sorted(d.items(), key=lambda kv: -len(json.dumps(kv[1])))[:6]))'
echo "($TARGETS targets + the 3 built-in tries per run, every $INTERVAL for ${SECONDS_}s; curl: $n_connects connect times printed per run, medians of $RUNS; load average $(cut -d' ' -f1-3 /proc/loadavg))"
