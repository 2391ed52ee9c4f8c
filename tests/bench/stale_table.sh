#!/usr/bin/env bash
# The stale check's service table at scale (issue 17): what reading every
# service port's current endpoints costs on a big node, side by side with the
# listing an SRE would read them from instead, in one run.
#
# Per mode, one throwaway namespace (pwtb-<pid>-<mode>, deleted on exit) with
# a generated rule set of SIZE = SERVICESxENDPOINTS (default 10000x5):
#   ipt   gen_kube_rules.py through iptables-nft-restore (kube-proxy's iptables
#         mode on the nft backend); the listing: `iptables-nft-save -t nat`
#   nft   gen_kube_nft.py through nft -f (kube-proxy's nftables mode); the
#         listing: `nft list table ip kube-proxy`
#   leg   gen_kube_rules.py through iptables-legacy-restore (iptables mode on
#         the legacy backend: the table is decoded from the iptables probe's
#         own iptables-legacy-save); the listing: that same `iptables-legacy-save`
# and no conntrack entries (the dump's cost is conntrack_stale.sh's subject).
#
# Columns, medians of RUNS runs of `proxywatch check --format json
# --iptables.save-interval 0` (every probe; the nftables probe counts the
# same rules too):
#   ports, endpoints   the probe's service_ports and endpoints facts (they must
#                      equal the generator's service_table, else the run fails)
#   stale_s            probes.conntrack_stale.duration_seconds: the service table
#                      read over netlink (a fresh process: nothing reused)
#   on_kib / off_kib   peak RSS (GNU time %M) of the whole check with the stale
#                      check on (default) and off (--conntrack-stale.interval 0)
#   list_s / list_kib  wall time and peak RSS of the listing above (> /dev/null)
#   psave_s            leg: the iptables probe's iptables-legacy-save run inside
#                      the check (facts.iptables.saves, legacy ipv4), its lines
#                      also decoded into the service table; `-` in other modes
#
# Environment: PW_BIN, SIZE=10000x5, RUNS=3, MODES="ipt nft leg", EXPECT_TABLE=1
# (0: do not require the generator's table, to time an older binary that does
# not read a mode, e.g. leg before issue 24).
# Needs root, iproute2, iptables-nft-restore, iptables-legacy-restore, nft,
# python3, GNU time.

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZE=${SIZE:-10000x5}
RUNS=${RUNS:-3}
read -r -a MODES <<<"${MODES:-ipt nft leg}"
SERVICES=${SIZE%x*}
ENDPOINTS=${SIZE#*x}

source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore iptables-legacy-restore nft python3 /usr/bin/time
pw_bin

WORK=$(mktemp -d)
NAMESPACES=()
cleanup() {
	for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# check NS INTERVAL: one check; prints "stale_s ports endpoints peak_kib psave_s".
check() {
	/usr/bin/time -f %M -o "$WORK/rss" ip netns exec "$1" "$PW_BIN" check --format json \
		--iptables.save-interval 0 --conntrack-stale.interval "$2" \
		--kube-proxy.metrics-url http://127.0.0.1:9 --kube-proxy.healthz-url http://127.0.0.1:9 \
		>"$WORK/out.json" 2>/dev/null || true
	python3 - "$WORK/out.json" "$(tail -n 1 "$WORK/rss")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["probes"].get("conntrack_stale") or {}
f = (d.get("facts") or {}).get("conntrack_stale") or {}
saves = ((d.get("facts") or {}).get("iptables") or {}).get("saves") or []
leg = [s["duration_seconds"] for s in saves if s["backend"] == "legacy" and s["family"] == "ipv4"]
print(p.get("duration_seconds", 0), f.get("service_ports", "-"), f.get("endpoints", "-"), sys.argv[2],
      leg[0] if leg else "-")
PY
}

printf '%-5s %-8s %7s %9s %8s %8s %8s %8s %9s %8s\n' mode size ports endpoints stale_s on_kib off_kib list_s list_kib psave_s
for mode in "${MODES[@]}"; do
	ns="pwtb-$$-$mode"
	ip netns add "$ns"
	NAMESPACES+=("$ns")
	if [[ $mode == ipt ]]; then
		python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$SERVICES" --endpoints "$ENDPOINTS" \
			--expected "$WORK/expected.json" >"$WORK/rules"
		ip netns exec "$ns" iptables-nft-restore <"$WORK/rules"
		list=(iptables-nft-save -t nat)
	elif [[ $mode == leg ]]; then
		python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$SERVICES" --endpoints "$ENDPOINTS" \
			--expected "$WORK/expected.json" >"$WORK/rules"
		ip netns exec "$ns" iptables-legacy-restore <"$WORK/rules"
		# What the probe runs (never -t: a legacy save with -t creates the table).
		list=(iptables-legacy-save)
	else
		python3 "$ROOT/tests/tools/gen_kube_nft.py" --services "$SERVICES" --endpoints "$ENDPOINTS" \
			--expected "$WORK/expected.json" >"$WORK/rules"
		ip netns exec "$ns" nft -f "$WORK/rules"
		list=(nft list table ip kube-proxy)
	fi
	read -r want_ports want_eps < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["service_table"]
print(t["service_ports"], t["endpoints"])' "$WORK/expected.json")
	: >"$WORK/on" ; : >"$WORK/off" ; : >"$WORK/list"
	for _ in $(seq "$RUNS"); do
		read -r s ports eps kib psave < <(check "$ns" 60s)
		if [[ ${EXPECT_TABLE:-1} == 1 && ($ports != "$want_ports" || $eps != "$want_eps") ]]; then
			echo "$mode: the probe read $ports service ports / $eps endpoints, the generator says $want_ports / $want_eps" >&2
			exit 1
		fi
		echo "$s $kib ${psave/-/0}" >>"$WORK/on"
		read -r _ _ _ kib _ < <(check "$ns" 0)
		echo "$kib" >>"$WORK/off"
		/usr/bin/time -f "%e %M" -o "$WORK/lt" ip netns exec "$ns" "${list[@]}" >/dev/null
		tail -n 1 "$WORK/lt" >>"$WORK/list"
	done
	psave_col=-
	[[ $mode == leg ]] && psave_col=$(cut -d' ' -f3 "$WORK/on" | median)
	printf '%-5s %-8s %7s %9s %8.2f %8.0f %8.0f %8.2f %9.0f %8s\n' "$mode" "$SIZE" "$want_ports" "$want_eps" \
		"$(cut -d' ' -f1 "$WORK/on" | median)" "$(cut -d' ' -f2 "$WORK/on" | median)" \
		"$(median <"$WORK/off")" "$(cut -d' ' -f1 "$WORK/list" | median)" "$(cut -d' ' -f2 "$WORK/list" | median)" \
		"$psave_col"
	ip netns del "$ns"
done
echo "(medians of $RUNS; on/off: the whole check with the stale check on / off)"
