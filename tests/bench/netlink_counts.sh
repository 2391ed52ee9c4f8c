#!/usr/bin/env bash
# Benchmark of the netlink rule-set counts against the tools they replace,
# side by side in one run (issue 14).
#
# iptables mode (SIZES, default 10000x5; tests/tools/gen_kube_rules.py, loaded
# with iptables-nft-restore into a throwaway namespace), one line per size:
#
#   nat_rules   rules in *nat (what the agent counted)
#   save_s      median of RUNS bare `iptables-nft-save > /dev/null`
#   count_s     median of RUNS netlink counts: `check --iptables.save-interval 0`,
#               facts.iptables.saves[ipv4].netlink.count_seconds (IPv4 nat,
#               filter, mangle, rule dump per chain)
#   ratio       count_s / save_s (target <= 0.4)
#   agent_rss   peak RSS of `proxywatch check --iptables.save-interval 0` (a default
#               probe cycle, cross-check off) from /usr/bin/time -v: the maximum
#               over the agent and the children it waited for
#   save_rss    iptables-nft-save's own peak RSS
#   reuse_ms    median probes.iptables.duration_seconds of runs that reused the
#               count at an unchanged generation (`serve`, --iptables.interval 1s)
#   equal       `check` with the cross-check on: mismatches between
#               iptables-nft-save and netlink (none = yes), and the netlink counts
#               against the generator's expected counts
#
# nftables mode (NFT_SIZES, default 10000x5; tests/tools/gen_kube_nft.py, loaded
# with nft -f):
#
#   rules       rules in table ip kube-proxy
#   list_s      median of RUNS `nft list table ip kube-proxy > /dev/null`
#   count_s     median of RUNS facts.nftables.tables[ip].netlink.count_seconds
#   speedup     list_s / count_s (target >= 10)
#   agent_rss   peak RSS of `check --iptables.save-interval 0` (as above)
#   nft_rss     nft list table's own peak RSS
#   reuse_ms    median probes.nftables.duration_seconds of reusing runs (`serve`)
#   equal       netlink counts == the generator's expected counts
#
# Needs root, iproute2, iptables (nft), nftables, python3, cargo, GNU time
# (apt-get install -y time). Only namespaces it creates (pwn-<pid>-*) are
# touched; they are deleted on exit. Loading 10,000x5 takes minutes (nft -f
# mostly kernel time).
#
# Usage: SIZES="1000x3 10000x5" NFT_SIZES="10000x5" RUNS=5 tests/bench/netlink_counts.sh

set -euo pipefail

[[ $(id -u) -eq 0 ]] || { echo "needs root" >&2; exit 1; }
for t in ip iptables-nft-save iptables-nft-restore nft python3 cargo bash timeout; do
	command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "missing /usr/bin/time (apt-get install -y time)" >&2; exit 1; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a SIZES <<<"${SIZES:-10000x5}"
read -r -a NFT_SIZES <<<"${NFT_SIZES:-10000x5}"
RUNS=${RUNS:-5}
PORT=9879

WORK=$(mktemp -d /tmp/pw-nlbench.XXXXXX)
NAMESPACES=()
SERVER=
cleanup() {
	[[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
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
NOKP=(--kube-proxy.metrics-url http://127.0.0.1:9 --kube-proxy.healthz-url http://127.0.0.1:9)

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }
rss_mib() { awk -F: '/Maximum resident set size/ {printf "%.1f", $2/1024}'; }
# Median wall time of RUNS runs of a command inside a namespace, output discarded.
wall_median() {
	local ns=$1 i t0 t1
	shift
	for ((i = 0; i < RUNS; i++)); do
		t0=$(now)
		ip netns exec "$ns" "$@" >/dev/null
		t1=$(now)
		python3 -c "print($t1 - $t0)"
	done | median
}
# Prints one JSON value of `check --format json` (python expression on d).
check_json() {
	local ns=$1 expr=$2
	shift 2
	ip netns exec "$ns" "$BIN" check --format json --node-name bench "${NOKP[@]}" --iptables.timeout 10m \
		--nftables.timeout 10m "$@" >"$WORK/out.json" || true
	python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($expr)" "$WORK/out.json"
}
# Peak RSS (MiB) of a default check cycle with the cross-check off.
agent_rss() {
	ip netns exec "$1" /usr/bin/time -v -o "$WORK/time-agent" "$BIN" check --format json --node-name bench \
		"${NOKP[@]}" --iptables.save-interval 0 --iptables.timeout 10m --nftables.timeout 10m >/dev/null 2>&1 || true
	rss_mib <"$WORK/time-agent"
}
# Median duration (ms) of PROBE's runs that reused their count, from a served agent.
reuse_ms() {
	local ns=$1 probe=$2 i body
	ip netns exec "$ns" "$BIN" serve --listen "127.0.0.1:$PORT" "${NOKP[@]}" --iptables.save-interval 0 \
		--iptables.interval 1s --nftables.interval 1s --iptables.timeout 10m --nftables.timeout 10m \
		>/dev/null 2>&1 &
	SERVER=$!
	: >"$WORK/reuse"
	for ((i = 0; i < 120 && $(wc -l <"$WORK/reuse") < RUNS; i++)); do
		sleep 1
		ip netns exec "$ns" timeout 10 bash -c \
			"exec 3<>/dev/tcp/127.0.0.1/$PORT && printf 'GET /snapshot HTTP/1.0\r\n\r\n' >&3 && cat <&3" 2>/dev/null |
			sed '1,/^\r$/d' >"$WORK/snap.json" || continue
		# One line per distinct run (its end time), when every count of it was reused.
		python3 - "$probe" "$WORK/snap.json" >>"$WORK/reuse" 2>/dev/null <<'PY' || true
import json, sys
probe = sys.argv[1]
d = json.load(open(sys.argv[2]))
f = d["facts"][probe]
runs = [r for r in (f["saves"] if probe == "iptables" else f["tables"]) if r.get("netlink")]
if runs and all(r["netlink"]["reused"] for r in runs):
    p = d["probes"][probe]
    print(p["last_run_timestamp_seconds"], p["duration_seconds"] * 1000)
PY
		sort -u -o "$WORK/reuse" "$WORK/reuse"
	done
	kill "$SERVER" 2>/dev/null
	wait "$SERVER" 2>/dev/null || true
	SERVER=
	awk '{print $2}' "$WORK/reuse" | median
}

echo "== iptables mode, nft backend (netlink count vs iptables-nft-save)"
printf '%-8s %9s %8s %8s %6s %10s %10s %9s %s\n' size nat_rules save_s count_s ratio agent_rss save_rss reuse_ms equal
for size in "${SIZES[@]}"; do
	svc=${size%x*} eps=${size#*x}
	ns="pwn-$$-ipt-$size"
	NAMESPACES+=("$ns")
	ip netns add "$ns"
	ip netns exec "$ns" ip link set lo up
	python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$svc" --endpoints "$eps" \
		--expected "$WORK/$size.json" >"$WORK/$size.rules"
	ip netns exec "$ns" iptables-nft-restore <"$WORK/$size.rules"

	save_s=$(wall_median "$ns" iptables-nft-save)
	counts=()
	for ((i = 0; i < RUNS; i++)); do
		counts+=("$(check_json "$ns" '[s for s in d["facts"]["iptables"]["saves"] if s["family"]=="ipv4"][0]["netlink"]["count_seconds"]' \
			--iptables.save-interval 0)")
	done
	count_s=$(printf '%s\n' "${counts[@]}" | median)
	ratio=$(python3 -c "print('%.2f' % ($count_s / $save_s))")
	rss=$(agent_rss "$ns")
	ip netns exec "$ns" /usr/bin/time -v -o "$WORK/time-save" iptables-nft-save >/dev/null
	save_rss=$(rss_mib <"$WORK/time-save")
	equal=$(check_json "$ns" "'yes' if not d['facts']['iptables']['cross_check']['mismatches'] and [s for s in d['facts']['iptables']['saves'] if s['family']=='ipv4'][0]['counts']['tables'] == json.load(open('$WORK/$size.json'))['tables'] else 'NO: %s' % d['facts']['iptables']['cross_check']")
	nat=$(python3 -c "import json; print(json.load(open('$WORK/$size.json'))['tables']['nat']['rules'])")
	reuse=$(reuse_ms "$ns" iptables)
	printf '%-8s %9s %8.3f %8.3f %6s %6s MiB %6s MiB %9.3f %s\n' \
		"$size" "$nat" "$save_s" "$count_s" "$ratio" "$rss" "$save_rss" "$reuse" "$equal"
	ip netns del "$ns"
done

echo "== nftables mode (netlink count vs nft list table ip kube-proxy)"
printf '%-8s %9s %8s %8s %8s %10s %10s %9s %s\n' size rules list_s count_s speedup agent_rss nft_rss reuse_ms equal
for size in "${NFT_SIZES[@]}"; do
	svc=${size%x*} eps=${size#*x}
	ns="pwn-$$-nft-$size"
	NAMESPACES+=("$ns")
	ip netns add "$ns"
	ip netns exec "$ns" ip link set lo up
	python3 "$ROOT/tests/tools/gen_kube_nft.py" --services "$svc" --endpoints "$eps" \
		--expected "$WORK/nft-$size.json" >"$WORK/nft-$size.nft"
	echo "loading $size with nft -f (minutes at 10000x5)..." >&2
	ip netns exec "$ns" nft -f "$WORK/nft-$size.nft"

	list_s=$(wall_median "$ns" nft list table ip kube-proxy)
	counts=()
	for ((i = 0; i < RUNS; i++)); do
		counts+=("$(check_json "$ns" 'd["facts"]["nftables"]["tables"][0]["netlink"]["count_seconds"]' --iptables.save-interval 0)")
	done
	count_s=$(printf '%s\n' "${counts[@]}" | median)
	speedup=$(python3 -c "print('%.1f' % ($list_s / $count_s))")
	rss=$(agent_rss "$ns")
	ip netns exec "$ns" /usr/bin/time -v -o "$WORK/time-nft" nft list table ip kube-proxy >/dev/null
	nft_rss=$(rss_mib <"$WORK/time-nft")
	equal=$(check_json "$ns" "'yes' if d['facts']['nftables']['tables'][0]['counts'] == json.load(open('$WORK/nft-$size.json')) else 'NO'" \
		--iptables.save-interval 0)
	rules=$(python3 -c "import json; print(json.load(open('$WORK/nft-$size.json'))['rules'])")
	reuse=$(reuse_ms "$ns" nftables)
	printf '%-8s %9s %8.3f %8.3f %8s %6s MiB %6s MiB %9.3f %s\n' \
		"$size" "$rules" "$list_s" "$count_s" "$speedup" "$rss" "$nft_rss" "$reuse" "$equal"
	ip netns del "$ns"
done
