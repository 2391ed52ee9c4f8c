#!/usr/bin/env bash
# Conntrack at scale: the agent's conntrack probe against conntrack-tools, with
# 0, 50,000 and 200,000 entries in a throwaway network namespace.
#
# Entries are inserted with `conntrack -R FILE` (--load-file: one process, one
# netlink request per line; ~3 s for 200,000 here, where `conntrack -I` per
# entry spawns a process each): UDP 10.x.y.z:sport -> 10.200.0.1:53, each with a
# distinct source address, timeout 3600 s. The conntrack table is per
# namespace; nf_conntrack_max is global (262144 on the test machine) and is
# only read, never changed.
#
# For each level, medians of RUNS runs, all inside the namespace:
#   probe_ms   `probes.conntrack.duration_seconds` of `proxywatch check --format json`
#              (reads nf_conntrack_count/max/buckets and /proc/net/stat/nf_conntrack:
#              no per-entry work, so it must not grow with the table)
#   check_ms   wall time of that whole `check` (every probe, process start included)
#   C_ms       `conntrack -C` (hyperfine -N; the kernel's counter over netlink)
#   L_ms       `conntrack -L | wc -l` (dumps every entry; hyperfine with bash)
#
# Environment: PW_BIN, LEVELS="0 50000 200000", RUNS=5.
# Needs root, iproute2, conntrack, python3; hyperfine if present.
# Only the namespace it creates (pwct-<pid>) is touched; deleted on exit.

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a LEVELS <<<"${LEVELS:-0 50000 200000}"
RUNS=${RUNS:-5}

source "$ROOT/tests/bench/lib.sh"
need_root_and ip conntrack python3
pw_bin

# nf_conntrack_max is global and never changed here; another test on the
# machine may lower it for a while (tests/e2e/e2e_prometheus.rs does, ~1 min):
# wait for it to be back above the highest level, up to WAIT_MAX seconds.
WAIT_MAX=${WAIT_MAX:-600}
TOP=0
for n in "${LEVELS[@]}"; do if ((n > TOP)); then TOP=$n; fi; done
wait_for_max() {
	local waited=0 max
	while max=$(cat /proc/sys/net/netfilter/nf_conntrack_max); ((max < TOP)); do
		((waited == 0)) && echo "nf_conntrack_max is $max < $TOP (lowered by someone else?): waiting up to ${WAIT_MAX} s" >&2
		((waited >= WAIT_MAX)) && { echo "nf_conntrack_max still $max after ${WAIT_MAX} s; not changing it" >&2; exit 1; }
		sleep 5
		waited=$((waited + 5))
	done
}
wait_for_max

WORK=$(mktemp -d /tmp/pw-ct.XXXXXX)
NS="pwct-$$"
cleanup() {
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
inns() { ip netns exec "$NS" "$@"; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

# Median seconds of a command run in the namespace; shell=1 runs it through bash.
time_median() { # shell command
	local shell=$1 cmd=$2 i t0 t1
	if command -v hyperfine >/dev/null; then
		local mode=(-N)
		[[ $shell == 1 ]] && mode=(-S bash)
		# stderr (outlier warnings) is shown only when hyperfine fails.
		inns hyperfine "${mode[@]}" --style none --warmup 1 --runs "$RUNS" --export-json "$WORK/hf.json" "$cmd" \
			>/dev/null 2>"$WORK/hf.err" || { cat "$WORK/hf.err" >&2; return 1; }
		python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"])' "$WORK/hf.json"
	else
		for ((i = 0; i < RUNS; i++)); do
			t0=$(now)
			if [[ $shell == 1 ]]; then inns bash -c "$cmd" >/dev/null; else inns $cmd >/dev/null; fi
			t1=$(now)
			awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'
		done | median
	fi
}

# Appends entries [from, to) to the namespace's table.
fill() { # from to
	python3 - "$1" "$2" >"$WORK/load.txt" <<'EOF'
import sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout
for i in range(lo, hi):
    out.write("-I -p udp -s 10.%d.%d.%d -d 10.200.0.1 --sport %d --dport 53 -t 3600\n"
              % (1 + (i >> 16), (i >> 8) & 255, i & 255, 1024 + i % 60000))
EOF
	inns conntrack -R "$WORK/load.txt" >/dev/null 2>&1
}

printf '%8s %8s %9s %9s %8s %8s %9s %9s\n' entries fill_s probe_ms probe_max check_ms C_ms L_ms L_lines
have=0
for n in "${LEVELS[@]}"; do
	fill_s="-"
	if ((n > have)); then
		wait_for_max
		t0=$(now)
		fill "$have" "$n"
		t1=$(now)
		fill_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
		have=$n
	elif ((n < have)); then
		echo "LEVELS must be increasing" >&2
		exit 1
	fi
	count=$(inns conntrack -C)
	if [[ $count != "$n" ]]; then
		echo "expected $n entries, conntrack -C says $count (nf_conntrack_max now $(cat /proc/sys/net/netfilter/nf_conntrack_max))" >&2
		exit 1
	fi

	probe=() wall=()
	for ((i = 0; i < RUNS; i++)); do
		t0=$(now)
		inns "$PW_BIN" check --format json --node-name bench --log.level error >"$WORK/out.json" || true
		t1=$(now)
		vals=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p = d["probes"]["conntrack"]
if p["status"] != "ok":
    sys.exit("conntrack probe: %s: %s" % (p["status"], p.get("error")))
e = d["facts"]["conntrack"]["entries"]
if e != int(sys.argv[2]):
    sys.exit("probe saw %d entries, expected %s" % (e, sys.argv[2]))
print(p["duration_seconds"])
' "$WORK/out.json" "$n")
		probe+=("$vals")
		wall+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
	done
	probe_ms=$(printf '%s\n' "${probe[@]}" | median)
	probe_max=$(printf '%s\n' "${probe[@]}" | sort -g | tail -1)
	check_s=$(printf '%s\n' "${wall[@]}" | median)
	c_s=$(time_median 0 "conntrack -C")
	l_s=$(time_median 1 "conntrack -L 2>/dev/null | wc -l")
	lines=$(inns bash -c 'conntrack -L 2>/dev/null | wc -l')
	awk -v n="$n" -v f="$fill_s" -v p="$probe_ms" -v pm="$probe_max" -v w="$check_s" -v c="$c_s" -v l="$l_s" -v ln="$lines" \
		'BEGIN {printf "%8d %8s %9.3f %9.3f %8.1f %8.2f %9.1f %9d\n", n, f, p * 1000, pm * 1000, w * 1000, c * 1000, l * 1000, ln}'
done
