#!/usr/bin/env bash
# Benchmark: the iptables probe with kube-proxy's reject/drop rule counters decoded (issue 30)
# against the probe before them, side by side in the same run.
#
# The baseline binary is built from BASE (a commit before the counters; default: the
# parent of the first commit that added agent/probe/rule_counters.rs) in a temporary
# export, with the same target directory (so only the crate rebuilds). For each size
# (default 10000x5, services x endpoints, one service in 10 without endpoints: their
# filter KUBE-SERVICES REJECT rules are what the counters read), loaded per backend (nft,
# legacy) into a throwaway namespace, RUNS `proxywatch check --format json
# --iptables.save-interval 0` of each binary are interleaved (base, new, base, new...) and
# their `probes.iptables.duration_seconds` medians printed with the ratio; then each
# binary's peak RSS (/usr/bin/time -v, max over the agent and the children it waits for:
# for legacy the save is replaced by `cat` of its captured output, `-c` output for the new
# binary, so the figure is the agent's own), and for the new binary the counted rules.
#
# Needs root, iproute2, iptables (both backends), python3, cargo, git, GNU time.
# Only namespaces it creates (pwrc-<pid>-*) are touched; deleted on exit.
#
# Usage: tests/bench/rule_counters.sh [SIZES...]
#   env: RUNS (default 15), BASE (a commit), BACKENDS (default "nft legacy"),
#        BASE_BIN and NEW_BIN (two built binaries: no build), KEEP_BINS (a directory to copy them to)

set -euo pipefail

[[ $(id -u) -eq 0 ]] || { echo "needs root" >&2; exit 1; }
for t in ip iptables-nft-restore iptables-legacy-restore iptables-legacy-save python3 cargo git; do
	command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "missing /usr/bin/time (apt-get install -y time)" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=("${@:-10000x5}")
read -r -a SIZES <<<"${SIZES[*]}"
RUNS=${RUNS:-15}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

WORK=$(mktemp -d /tmp/pw-rcbench.XXXXXX)
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

BACKENDS=(${BACKENDS:-nft legacy})
if [[ -n ${BASE_BIN:-} && -n ${NEW_BIN:-} ]]; then
	cp "$BASE_BIN" "$WORK/proxywatch-base"
	cp "$NEW_BIN" "$WORK/proxywatch-new"
else
BASE=${BASE:-$(git -C "$ROOT" log --diff-filter=A --format=%H -- agent/probe/rule_counters.rs | tail -1)^}
echo "baseline: $(git -C "$ROOT" log -1 --format='%h %s' "$BASE")" >&2
mkdir -p "$WORK/base" "$WORK/base-target"
git -C "$ROOT" archive "$BASE" | tar -x -C "$WORK/base"
# The base builds in a copy of the release directory (its dependencies are reused). The
# crate's own fingerprints are removed in both: cargo would otherwise find the other
# tree's build of the same package "fresh" (same unit hash, unchanged sources) and reuse it.
[[ -d $TARGET/release ]] && cp -a "$TARGET/release" "$WORK/base-target/"
rm -rf "$WORK"/base-target/release/.fingerprint/proxywatch-* "$TARGET"/release/.fingerprint/proxywatch-*
(cd "$WORK/base" && CARGO_TARGET_DIR="$WORK/base-target" cargo build --release --quiet)
cp "$WORK/base-target/release/proxywatch" "$WORK/proxywatch-base"
rm -rf "$WORK/base-target"
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET" cargo build --release --quiet)
cp "$TARGET/release/proxywatch" "$WORK/proxywatch-new"
fi
cmp -s "$WORK/proxywatch-base" "$WORK/proxywatch-new" && { echo "the two binaries are the same" >&2; exit 1; }
[[ -n ${KEEP_BINS:-} ]] && cp "$WORK/proxywatch-base" "$WORK/proxywatch-new" "$KEEP_BINS/"

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
rss_mib() { awk -F: '/Maximum resident set size/ {printf "%.1f", $2/1024}'; }
probe_s() { # ns path bin -> duration_seconds of the iptables probe
	ip netns exec "$1" env PATH="$2" "$3" check --format json --node-name bench \
		--iptables.timeout 10m --iptables.save-interval 0 >"$WORK/out.json" || true
	python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["probes"]["iptables"]
if p["status"] != "ok":
    sys.exit("iptables probe: %s: %s" % (p["status"], p["error"]))
print(p["duration_seconds"])
' "$WORK/out.json"
}

printf '%-8s %-6s %8s %8s %6s %9s %9s %7s\n' size backend base_s new_s ratio base_rss new_rss counted
for size in "${SIZES[@]}"; do
	svc=${size%x*}
	eps=${size#*x}
	rules="$WORK/$size.rules"
	python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$svc" --endpoints "$eps" --no-endpoints-every 10 >"$rules"
	for backend in "${BACKENDS[@]}"; do
		ns="pwrc-$$-$backend-$size"
		NAMESPACES+=("$ns")
		ip netns add "$ns"
		ip netns exec "$ns" ip link set lo up
		ip netns exec "$ns" "iptables-$backend-restore" <"$rules"
		save="iptables-$backend-save"
		only="$WORK/path-$backend"
		mkdir -p "$only"
		ln -sf "$(command -v "$save")" "$only/$save"

		base=() new=()
		for ((i = 0; i < RUNS; i++)); do
			base+=("$(probe_s "$ns" "$only" "$WORK/proxywatch-base")")
			new+=("$(probe_s "$ns" "$only" "$WORK/proxywatch-new")")
		done
		base_s=$(printf '%s\n' "${base[@]}" | median)
		new_s=$(printf '%s\n' "${new[@]}" | median)
		ratio=$(python3 -c "print('%.3f' % ($new_s / $base_s))")
		counted=$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["facts"]["iptables"].get("rule_counters") or {}
print(c.get("counted_rules", "-"))
' "$WORK/out.json")

		# Peak RSS: for legacy, the save is `cat` of its captured output (what each binary asks for).
		rss() { # bin save-args
			local dir="$WORK/cat-$backend-$size-$2"
			mkdir -p "$dir"
			if [[ $backend == legacy ]]; then
				ip netns exec "$ns" "$save" $2 >"$dir/out"
				printf '#!/bin/sh\nexec /bin/cat %s\n' "$dir/out" >"$dir/$save"
				chmod +x "$dir/$save"
			else
				ln -sf "$(command -v "$save")" "$dir/$save"
			fi
			ip netns exec "$ns" env PATH="$dir" /usr/bin/time -v -o "$WORK/time" "$1" check --format json \
				--node-name bench --iptables.timeout 10m --iptables.save-interval 0 >/dev/null 2>&1 || true
			rss_mib <"$WORK/time"
		}
		base_rss=$(for i in 1 2 3; do rss "$WORK/proxywatch-base" ""; echo; done | median)
		new_rss=$(for i in 1 2 3; do rss "$WORK/proxywatch-new" "-c"; echo; done | median)

		printf '%-8s %-6s %8.3f %8.3f %6s %5s MiB %5s MiB %7s\n' \
			"$size" "$backend" "$base_s" "$new_s" "$ratio" "$base_rss" "$new_rss" "$counted"
		ip netns del "$ns"
	done
done
