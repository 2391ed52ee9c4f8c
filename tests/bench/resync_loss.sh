#!/usr/bin/env bash
# Issue 36: a full resync of a large rule set through the nf_tables watcher loses no
# change: either every notification arrives, or the loss is counted and the counts after
# the re-read equal iptables-nft-save's.
#
# One throwaway namespace (pwrl-<pid>, deleted on exit), one agent serving in it with the
# watcher (the default) and the iptables probe's own poll pushed out to an hour, so that
# only the watcher moves its counts. Then, one after the other, with kube-proxy's rule set
# from tests/tools/gen_kube_rules.py:
#   load     SIZE (10000x5) into empty tables (iptables-nft-restore)
#   replace  the same again without --noflush: each table flushed and written anew in one
#            commit (what a plain iptables-restore of a saved rule set does): every rule
#            and chain deleted and added
#   change   SIZE2 (10000x4) the same way: the counts change
#   resync   SIZE again with --noflush: kube-proxy's full sync (every chain it declares
#            flushed and written anew). iptables-nft-restore 1.8.9 itself took 37 minutes
#            of it at 10000x5 here (docs/benchmarks.md): stopped after RESYNC_LIMIT s
#            (600), and then said so instead of a row
# and after each, until the agent's counts equal iptables-nft-save's (at most TIMEOUT s):
#   rules_nat/filter/mangle  iptables-nft-save's rules per table (-A lines)
#   agent_equal   the agent's counts (facts.iptables.saves[ipv4].counts) equal them
#   lost          derived.nftables_watch.notifications_lost_total, added by this step
#   commits       commits the watcher journaled in this step (kube-proxy's + others')
#   converge_s    from the restore's return to the agent's equal counts
#   restore_s     the restore's own wall time
#
# Needs root, iproute2, iptables-nft-restore/-save, python3. Only the namespace it creates
# is touched. Loading 10000x5 takes a minute or more.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore iptables-nft-save python3
pw_bin
SIZE=${SIZE:-10000x5}
SIZE2=${SIZE2:-10000x4}
TIMEOUT=${TIMEOUT:-300}
RESYNC_LIMIT=${RESYNC_LIMIT:-600}
PORT=9881
NS="pwrl-$$"
WORK=$(mktemp -d /tmp/pw-resync.XXXXXX)
AGENT=
cleanup() {
	if [[ -n $AGENT ]]; then
		kill "$AGENT" 2>/dev/null || true
		wait "$AGENT" 2>/dev/null || true
	fi
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gen() { python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "${1%x*}" --endpoints "${1#*x}"; }
gen "$SIZE" >"$WORK/a.rules"
gen "$SIZE2" >"$WORK/b.rules"
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" "$PW_BIN" serve --listen "127.0.0.1:$PORT" --node-name bench --log.level warn \
	--kube-proxy.metrics-url http://127.0.0.1:9 --kube-proxy.healthz-url http://127.0.0.1:9 \
	--iptables.interval 1h --iptables.save-interval 0 --iptables.timeout 10m --nftables.interval 1h \
	2>"$WORK/agent.log" &
AGENT=$!

snapshot() {
	ip netns exec "$NS" timeout 20 bash -c \
		"exec 3<>/dev/tcp/127.0.0.1/$PORT && printf 'GET /snapshot HTTP/1.0\r\n\r\n' >&3 && cat <&3" 2>/dev/null |
		sed '1,/^\r$/d' >"$WORK/snap.json"
}
# Until the first publication (before it, /snapshot answers 503 and no JSON).
for _ in $(seq 1 120); do snapshot && python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$WORK/snap.json" 2>/dev/null && break; sleep 1; done

# save_counts: "nat filter mangle" rules of iptables-nft-save.
save_counts() {
	ip netns exec "$NS" iptables-nft-save | awk '/^\*/ {t=substr($1,2)} /^-A/ {n[t]++} END {print n["nat"]+0, n["filter"]+0, n["mangle"]+0}'
}
# agent: "nat filter mangle lost commits" from the served snapshot.
agent() {
	snapshot || { echo "- - - - -"; return; }
	python3 - "$WORK/snap.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    print("- - - - -"); sys.exit()
t = {}
for s in d["facts"].get("iptables", {}).get("saves", []):
    if s.get("family") == "ipv4" and s.get("backend") == "nft":
        t = s.get("counts", {}).get("tables", {})
w = d["derived"].get("nftables_watch") or {}
r = lambda n: t.get(n, {}).get("rules", 0)
print(r("nat"), r("filter"), r("mangle"), w.get("notifications_lost_total", 0),
      w.get("commits_kube_proxy_total", 0) + w.get("commits_other_total", 0))
PY
}

printf '%-7s %9s %11s %11s %11s %5s %7s %10s %9s\n' step size rules_nat rules_filter rules_mangle lost commits converge_s restore_s
read -r _ _ _ lost0 commits0 <<<"$(agent)"
step() {
	local name=$1 size=$2 file=$3 t0 t1 want got
	shift 3
	t0=$(date +%s.%N)
	if ! timeout "$RESTORE_LIMIT" ip netns exec "$NS" iptables-nft-restore "$@" <"$file"; then
		printf '%-7s %9s  iptables-nft-restore %s did not finish within %s s (stopped); no row\n' \
			"$name" "$size" "$*" "$RESTORE_LIMIT"
		return
	fi
	t1=$(date +%s.%N)
	want=$(save_counts)
	local equal=no i a
	for ((i = 0; i < TIMEOUT * 2; i++)); do
		a=$(agent)
		got=$(cut -d' ' -f1-3 <<<"$a")
		[[ $got == "$want" ]] && { equal=yes; break; }
		sleep 0.5
	done
	local t2 lost commits
	t2=$(date +%s.%N)
	read -r _ _ _ lost commits <<<"$a"
	read -r wn wf wm <<<"$want"
	printf '%-7s %9s %11s %11s %11s %5s %7s %10s %9s  agent_equal=%s (agent: %s)\n' "$name" "$size" "$wn" "$wf" "$wm" \
		"$((lost - lost0))" "$((commits - commits0))" "$(python3 -c "print(round($t2 - $t1, 1))")" \
		"$(python3 -c "print(round($t1 - $t0, 1))")" "$equal" "$got"
	lost0=$lost commits0=$commits
}
RESTORE_LIMIT=3600
step load "$SIZE" "$WORK/a.rules"
step replace "$SIZE" "$WORK/a.rules"
step change "$SIZE2" "$WORK/b.rules"
RESTORE_LIMIT=$RESYNC_LIMIT
step resync "$SIZE" "$WORK/a.rules" --noflush
echo "agent log (warnings):"
cat "$WORK/agent.log"
