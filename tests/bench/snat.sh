#!/usr/bin/env bash
# Issue 31: the conntrack dump with SNAT grouping (agent/probe/snat.rs, in the
# conntrack_stale probe's run) against `conntrack -L > /dev/null`, at 0, 50,000
# and 200,000 source-NATed entries, side by side in one run, in a throwaway
# network namespace (pwsn-<pid>).
#
# The namespace gets a kube-proxy-shaped iptables-nft rule set
# (tests/tools/gen_kube_rules.py --services 100 --endpoints 2), so the stale
# check has service ports and the dump is the shared one (the whole table,
# every entry checked in user space: the kernel's status filter cannot ask for
# DST_NAT or SRC_NAT), plus `-t nat -A POSTROUTING -s 10.244.0.0/16 -p tcp -j
# MASQUERADE --to-ports 20000-29999`, the range each group is judged against.
# Per level N, loaded with `conntrack -R FILE` (`--src-nat ADDR:PORT` makes the
# kernel set up the NAT, so the entry has IPS_SRC_NAT as MASQUERADE's does):
#
#   N        TCP entries pod 10.244.x.y -> 203.0.113.D:443 (D one of DESTS,
#            default 100), ESTABLISHED, SRC_NAT to 192.168.0.2:P, P distinct per
#            destination from 20000: N / DESTS ports per group of 10,000
#   N/10     UDP entries client -> ClusterIP:53 DST_NAT to an endpoint (none
#            stale): the stale check's share of the dump
#
# Every run fails unless the facts say snat.entries = N, snat.groups = DESTS
# (N > 0), max_fill = ceil(N / DESTS) / 10000, no group dropped, range
# 20000-29999 from the rule, and dst_nat_entries = N/10.
#
# For each level, RUNS runs, agent and listing alternating; medians:
#   probe_ms   probes.conntrack_stale.duration_seconds of `proxywatch check
#              --format json` (generation, service table, the dumps with the
#              stale count and the SNAT grouping, the source NAT rules)
#   dump_ms    its dump_seconds fact (the ctnetlink dumps only)
#   list_ms    wall time of `conntrack -L > /dev/null` in the namespace
#   ratio      probe_ms / list_ms (issue 31: <= 0.6)
#   check_cpu  user + system CPU of the whole `check` (every probe), in ms
#   list_cpu   user + system CPU of `conntrack -L`; cpu_ratio = check_cpu / list_cpu
#              (wall times stretch with the machine's load; CPU times much less)
#   agent_kib  peak RSS of the whole `check` (GNU time %M); median and max
#   list_kib   peak RSS of `conntrack -L`
#
# nf_conntrack_max is global: raised when the highest level does not fit (and
# put back on exit if still at our value), else only read.
# Environment: PW_BIN, LEVELS="0 50000 200000" (increasing), RUNS=5, DESTS=100.
# Needs root, iproute2, iptables-nft(-restore), conntrack, python3.

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a LEVELS <<<"${LEVELS:-0 50000 200000}"
RUNS=${RUNS:-5}
DESTS=${DESTS:-100}

source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft iptables-nft-restore conntrack python3 bash
pw_bin

TOP=0
for n in "${LEVELS[@]}"; do if ((n > TOP)); then TOP=$n; fi; done
((TOP / DESTS <= 10000)) || { echo "more than 10,000 ports per group: raise DESTS" >&2; exit 1; }
NEED=$((TOP + TOP / 10 + 1000))

WORK=$(mktemp -d /tmp/pw-snat.XXXXXX)
NS="pwsn-$$"
cleanup() {
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
	conntrack_max_restore
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conntrack_max_at_least "$NEED"

ip netns add "$NS"
inns() { ip netns exec "$NS" "$@"; }
inns ip link set lo up
python3 "$ROOT/tests/tools/gen_kube_rules.py" --services 100 --endpoints 2 >"$WORK/rules.txt"
inns iptables-nft-restore <"$WORK/rules.txt"
inns iptables-nft -t nat -A POSTROUTING -s 10.244.0.0/16 -p tcp -j MASQUERADE --to-ports 20000-29999
# One UDP ClusterIP service of the rules and its first endpoint, for the DST_NAT entries.
read -r SVC EP < <(python3 - "$WORK/rules.txt" <<'EOF'
import shlex, sys
svc = sep = None
dest = {}
for line in open(sys.argv[1]):
    a = shlex.split(line)
    if len(a) < 2 or a[0] != "-A":
        continue
    if a[1].startswith("KUBE-SVC-") and "-p" in a and a[a.index("-p") + 1] == "udp" and "--comment" in a \
            and a[a.index("--comment") + 1].endswith("cluster IP") and svc is None:
        svc, chain = a[a.index("-d") + 1].split("/")[0], a[1]
    if a[1].startswith("KUBE-SEP-") and "--to-destination" in a:
        dest[a[1]] = a[a.index("--to-destination") + 1]
for line in open(sys.argv[1]):
    a = shlex.split(line)
    if svc and len(a) > 3 and a[1] == chain and a[a.index("-j") + 1].startswith("KUBE-SEP-"):
        sep = dest[a[a.index("-j") + 1]]
        break
print(svc, sep)
EOF
)
[[ -n $SVC && -n $EP ]] || { echo "no UDP service with an endpoint in the rules" >&2; exit 1; }

gen() { # lo hi: entries [lo, hi) of the SNAT series, [lo/10, hi/10) of the DST_NAT one
	python3 - "$1" "$2" "$DESTS" "$SVC" "$EP" <<'EOF'
import sys
lo, hi, dests, svc, ep = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
out = sys.stdout
for i in range(lo, hi):
    d, k = i % dests, i // dests
    out.write("-I -p tcp -s 10.244.%d.%d -d 203.0.113.%d --sport %d --dport 443 -t 3600 --state ESTABLISHED"
              " --src-nat 192.168.0.2:%d\n" % (i >> 16 & 255, i >> 8 & 255, 1 + d, 1024 + i % 60000, 20000 + k))
for j in range(lo // 10, hi // 10):
    out.write("-I -p udp -s 10.1.%d.%d -d %s --sport %d --dport 53 -t 3600 --dst-nat %s\n"
              % (j >> 8 & 255, j & 255, svc, 1024 + j % 60000, ep))
EOF
}

if [[ -x /usr/bin/time ]]; then
	PEAK=(/usr/bin/time -f "%M %U %S" -o)
else
	cat >"$WORK/peak.py" <<'EOF'
import os, sys
out, cmd = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
open(out, "w").write("%d %.2f %.2f\n" % (ru.ru_maxrss, ru.ru_utime, ru.ru_stime))
sys.exit(os.waitstatus_to_exitcode(status))
EOF
	PEAK=(python3 "$WORK/peak.py")
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
timed() { # out-file command...: prints "seconds peak_kib cpu_seconds"
	local out=$1
	shift
	inns bash -c 't0=$EPOCHREALTIME; "${@:2}" >"$1" 2>/dev/null; rc=$?; t1=$EPOCHREALTIME; echo "$t0 $t1 $rc"' \
		_ "$out" "${PEAK[@]}" "$WORK/peak" "$@" >"$WORK/t"
	read -r t0 t1 rc <"$WORK/t"
	read -r k u sy < <(tail -1 "$WORK/peak")
	awk -v a="$t0" -v b="$t1" -v k="$k" -v c="$(awk -v u="$u" -v s="$sy" 'BEGIN {print u + s}')" 'BEGIN {printf "%.6f %d %.2f\n", b - a, k, c}'
	return "$rc"
}

printf '%8s %8s %6s %8s %9s %8s %9s %6s %9s %8s %9s %10s %10s %10s\n' \
	entries table groups max_fill probe_ms dump_ms list_ms ratio check_cpu list_cpu cpu_ratio agent_kib agent_max list_kib
have=0
AGENT_KIB=()
for n in "${LEVELS[@]}"; do
	if ((n > have)); then
		gen "$have" "$n" >"$WORK/load.txt"
		inns conntrack -R "$WORK/load.txt" >/dev/null 2>"$WORK/load.err" || { tail -3 "$WORK/load.err" >&2; exit 1; }
		have=$n
	fi
	total=$((n + n / 10))
	count=$(inns conntrack -C)
	[[ $count == "$total" ]] || { echo "expected $total entries, conntrack -C says $count" >&2; exit 1; }
	probe=() dump=() list=() akib=() lkib=() acpu=() lcpu=()
	for ((i = 0; i < RUNS; i++)); do
		read -r s k c < <(timed "$WORK/out.json" "$PW_BIN" check --format json --node-name bench --log.level error \
			--conntrack-stale.timeout 10m || true)
		akib+=("$k") acpu+=("$c")
		vals=$(python3 -c '
import json, math, sys
d = json.load(open(sys.argv[1]))
n, dests = int(sys.argv[2]), int(sys.argv[3])
p = d["probes"]["conntrack_stale"]
if p["status"] != "ok":
    sys.exit("conntrack_stale probe: %s: %s" % (p["status"], p.get("error")))
f = d["facts"]["conntrack_stale"]
s = f["snat"]
want_groups = min(n, dests)
want_fill = math.ceil(n / dests) / 10000 if n else None
if (s["entries"], s["groups"], s["groups_dropped"]) != (n, want_groups, 0):
    sys.exit("snat entries/groups/dropped %s, inserted %d in %d groups" % ((s["entries"], s["groups"], s["groups_dropped"]), n, want_groups))
if s["max_fill"] != want_fill or (n and (s["top"][0]["range"], s["top"][0]["range_from"]) != ("20000-29999", "rule")):
    sys.exit("max_fill %s (top %s), want %s" % (s["max_fill"], s["top"][:1], want_fill))
if f["dst_nat_entries"] != n // 10 or sum(f["stale_entries"].values()):
    sys.exit("dst_nat_entries %d (want %d), stale %s" % (f["dst_nat_entries"], n // 10, f["stale_entries"]))
print(p["duration_seconds"], f["dump_seconds"], s["groups"], s["max_fill"] or 0)
' "$WORK/out.json" "$n" "$DESTS")
		read -r s d groups fill <<<"$vals"
		probe+=("$s") dump+=("$d")
		read -r s k c < <(timed /dev/null conntrack -L)
		list+=("$s") lkib+=("$k") lcpu+=("$c")
	done
	med() { printf '%s\n' "$@" | median; }
	p_s=$(med "${probe[@]}")
	l_s=$(med "${list[@]}")
	a_k=$(med "${akib[@]}")
	AGENT_KIB+=("$a_k")
	awk -v n="$n" -v t="$total" -v g="$groups" -v f="$fill" -v p="$p_s" -v d="$(med "${dump[@]}")" -v l="$l_s" \
		-v a="$a_k" -v am="$(printf '%s\n' "${akib[@]}" | sort -g | tail -1)" -v lk="$(med "${lkib[@]}")" \
		-v ac="$(med "${acpu[@]}")" -v lc="$(med "${lcpu[@]}")" \
		'BEGIN {printf "%8d %8d %6d %8.4f %9.1f %8.1f %9.1f %6.2f %9.0f %8.0f %9.2f %10d %10d %10d\n",
			n, t, g, f, p * 1000, d * 1000, l * 1000, (l > 0 ? p / l : 0), ac * 1000, lc * 1000, (lc > 0 ? ac / lc : 0), a, am, lk}'
done
lo=$(printf '%s\n' "${AGENT_KIB[@]}" | sort -g | head -1)
hi=$(printf '%s\n' "${AGENT_KIB[@]}" | sort -g | tail -1)
echo "(medians of $RUNS; target ratio <= 0.60; agent peak RSS median across levels: $lo..$hi KiB, spread $((hi - lo)) KiB)"
