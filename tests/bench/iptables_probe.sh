#!/usr/bin/env bash
# Benchmark of the iptables probe against a bare iptables-save.
#
# For kube-proxy rule sets of 100x2, 1000x3, 5000x3 and 10000x5 (services x
# endpoints, from tests/tools/gen_kube_rules.py), loaded into a throwaway
# network namespace per backend (nft and legacy), prints side by side:
#
#   save_s      median of 5 bare `iptables-<backend>-save > /dev/null` (hyperfine,
#               run inside the namespace; a date loop without hyperfine)
#   probe_s     median of 5 `probes.iptables.duration_seconds` of
#               `proxywatch check --format json`, run in the namespace with a PATH
#               holding only that backend's iptables-save (so the probe runs
#               exactly one save, the same one)
#   in_save_s   median of 5 of that save's own `duration_seconds` (spawn to exit,
#               with the streaming parse)
#   ratio       probe_s / save_s
#   agent_rss   the agent's peak RSS (/usr/bin/time -v "Maximum resident set
#               size"), with the save replaced by `cat` of the same captured output:
#               time -v reports the max over the process and the children it
#               waits for, and cat stays at ~1-2 MiB, so this is the agent's own
#   save_rss    iptables-save's own peak RSS
#   nft_lt_s    (nft backend only) one `nft list tables`, which the agent's
#               nftables probe runs first; nft 1.0.6 dumps every rule to build
#               its cache, so it grows with the iptables-nft rule set
#
# Needs root, iproute2, iptables (both backends), nftables, python3, cargo;
# hyperfine and GNU time if present (apt-get install -y hyperfine time).
# Only namespaces it creates (pwb-<pid>-*) are touched; they are deleted on exit.
#
# Usage: tests/bench/iptables_probe.sh [SIZES...]   (default: 100x2 1000x3 5000x3 10000x5)

set -euo pipefail

[[ $(id -u) -eq 0 ]] || { echo "needs root" >&2; exit 1; }
for t in ip iptables-nft-save iptables-legacy-save iptables-nft-restore iptables-legacy-restore nft python3 cargo; do
	command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "missing /usr/bin/time (apt-get install -y time)" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=("${@:-100x2 1000x3 5000x3 10000x5}")
read -r -a SIZES <<<"${SIZES[*]}"
RUNS=5

WORK=$(mktemp -d /tmp/pw-bench.XXXXXX)
NAMESPACES=()
cleanup() {
	local ns
	for ns in "${NAMESPACES[@]}"; do
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the release binary..." >&2
(cd "$ROOT" && cargo build --release --quiet)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/proxywatch"
[[ -x $BIN ]] || { echo "no binary at $BIN" >&2; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }
# Peak RSS in MiB from `time -v` output on stdin.
rss_mib() { awk -F: '/Maximum resident set size/ {printf "%.1f", $2/1024}'; }

bare_save_median() { # ns command
	local ns=$1 cmd=$2
	if command -v hyperfine >/dev/null; then
		ip netns exec "$ns" hyperfine -N --style none --warmup 1 --runs "$RUNS" \
			--export-json "$WORK/hf.json" "$cmd" >/dev/null 2>"$WORK/hf.err" || { cat "$WORK/hf.err" >&2; exit 1; }
		python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"])' "$WORK/hf.json"
	else
		local i t0 t1
		for ((i = 0; i < RUNS; i++)); do
			t0=$(now)
			ip netns exec "$ns" "$cmd" >/dev/null
			t1=$(now)
			echo "$t1 - $t0" | bc -l
		done | median
	fi
}

printf '%-8s %-6s %9s %10s %8s %8s %9s %6s %10s %9s %9s\n' \
	size backend nat_rules save_bytes save_s probe_s in_save_s ratio agent_rss save_rss nft_lt_s
for size in "${SIZES[@]}"; do
	svc=${size%x*}
	eps=${size#*x}
	rules="$WORK/$size.rules"
	python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$svc" --endpoints "$eps" >"$rules"
	for backend in nft legacy; do
		ns="pwb-$$-$backend-$size"
		NAMESPACES+=("$ns")
		ip netns add "$ns"
		ip netns exec "$ns" ip link set lo up
		ip netns exec "$ns" "iptables-$backend-restore" <"$rules"
		save="iptables-$backend-save"

		# A PATH with only this backend's save, and one whose save is `cat` of its output.
		only="$WORK/path-$backend"
		catdir="$WORK/cat-$backend-$size"
		mkdir -p "$only" "$catdir"
		ln -sf "$(command -v "$save")" "$only/$save"
		ip netns exec "$ns" "$save" >"$WORK/$size-$backend.save"
		printf '#!/bin/sh\nexec /bin/cat %s\n' "$WORK/$size-$backend.save" >"$catdir/$save"
		chmod +x "$catdir/$save"

		save_s=$(bare_save_median "$ns" "$save")

		probe=() in_save=()
		for ((i = 0; i < RUNS; i++)); do
			ip netns exec "$ns" env PATH="$only" "$BIN" check --format json --node-name bench \
				--iptables.timeout 10m >"$WORK/out.json" || true
			vals=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p = d["probes"]["iptables"]
if p["status"] != "ok":
    sys.exit("iptables probe: %s: %s" % (p["status"], p["error"]))
s = d["facts"]["iptables"]["saves"][0]
print(p["duration_seconds"], s["duration_seconds"], s["counts"]["tables"].get("nat", {}).get("rules", 0), s["counts"]["bytes"])
' "$WORK/out.json")
			read -r p s n b <<<"$vals"
			probe+=("$p") in_save+=("$s")
		done
		probe_s=$(printf '%s\n' "${probe[@]}" | median)
		in_save_s=$(printf '%s\n' "${in_save[@]}" | median)
		ratio=$(python3 -c "print('%.2f' % ($probe_s / $save_s))")

		# check exits 1 or 2 on findings; only the RSS matters here.
		ip netns exec "$ns" env PATH="$catdir" /usr/bin/time -v -o "$WORK/time-agent" "$BIN" check \
			--format json --node-name bench --iptables.timeout 10m >/dev/null 2>&1 || true
		agent_rss=$(rss_mib <"$WORK/time-agent")
		ip netns exec "$ns" /usr/bin/time -v -o "$WORK/time-save" "$save" >/dev/null
		save_rss=$(rss_mib <"$WORK/time-save")

		nft_lt="-"
		if [[ $backend == nft ]]; then
			t0=$(now)
			ip netns exec "$ns" nft list tables >/dev/null
			t1=$(now)
			nft_lt=$(python3 -c "print('%.2f' % ($t1 - $t0))")
		fi

		printf '%-8s %-6s %9s %10s %8.3f %8.3f %9.3f %6s %7s MiB %5s MiB %9s\n' \
			"$size" "$backend" "$n" "$b" "$save_s" "$probe_s" "$in_save_s" "$ratio" "$agent_rss" "$save_rss" "$nft_lt"

		ip netns del "$ns"
	done
done
