#!/usr/bin/env bash
# Issue 25: what one `proxywatch npd` run costs NPD (it runs one per rule every
# invoke_interval: 7 rules every 30 s in manifests/overlays/npd), against reading
# the node directly (`npd` without --from, which runs every probe as `check` does).
#
# A release `serve` runs on a copy of the fixture node conntrack-near-full-drops (its
# stand-in commands on PATH, kube-proxy pointed at a closed port); then RUNS runs of
#   from:    proxywatch npd --from=http://127.0.0.1:PORT --area=conntrack
#   direct:  proxywatch npd --host-root=COPY --area=conntrack
# each under GNU time: wall seconds, user+system CPU seconds, max RSS (KiB);
# printed as min / median / max over the runs.
#
# Environment: PW_BIN (default: build the release binary), RUNS=20.
# Usage: tests/bench/npd_plugin.sh

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-20}
source "$ROOT/tests/bench/lib.sh"
command -v python3 >/dev/null || { echo "missing python3" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "missing GNU time (apt-get install -y time)" >&2; exit 1; }
pw_bin

WORK=$(mktemp -d /tmp/pw-npd-bench.XXXXXX)
AGENT_PID=
cleanup() {
	[[ -n $AGENT_PID ]] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

cp -r "$ROOT/tests/fixtures/nodes/conntrack-near-full-drops" "$WORK/node"
NO_KP=(--kube-proxy.metrics-url http://127.0.0.1:9 --kube-proxy.healthz-url http://127.0.0.1:9)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -i PATH="$WORK/node/exec" "$PW_BIN" serve --listen "127.0.0.1:$PORT" --node-name bench \
	--host-root "$WORK/node" "${NO_KP[@]}" 2>"$WORK/serve.log" &
AGENT_PID=$!
for _ in $(seq 100); do
	env -i "$PW_BIN" npd --from "http://127.0.0.1:$PORT" >/dev/null 2>&1 && break
	[[ $? -eq 1 ]] && break
	sleep 0.1
done

measure() { # NAME ARGS...: RUNS runs, one "wall cpu rss" line each
	local name=$1 i
	shift
	: >"$WORK/$name.txt"
	for i in $(seq "$RUNS"); do
		env -i PATH="$WORK/node/exec" /usr/bin/time -f '%e %U %S %M' -o "$WORK/t" "$PW_BIN" npd "$@" >"$WORK/out" 2>/dev/null || true
		# GNU time puts "Command exited with non-zero status N" first when it is not 0.
		read -r wall user sys rss < <(tail -1 "$WORK/t")
		echo "$wall $(python3 -c "print($user+$sys)") $rss" >>"$WORK/$name.txt"
	done
	echo "$name: $(cat "$WORK/out")"
	python3 - "$WORK/$name.txt" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
for i, what in enumerate(["wall s", "cpu s", "max RSS KiB"]):
    col = sorted(r[i] for r in rows)
    print(f"  {what:12} min {col[0]:g}  median {statistics.median(col):g}  max {col[-1]:g}  ({len(col)} runs)")
print("  (GNU time: wall and CPU in 10 ms steps)")
PY
}

echo "proxywatch npd, $RUNS runs each, $(nproc) CPUs, $(uname -r)"
measure from --from "http://127.0.0.1:$PORT" --area=conntrack
measure direct --host-root "$WORK/node" "${NO_KP[@]}" --area=conntrack
