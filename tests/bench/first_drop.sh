#!/usr/bin/env bash
# Issue 36: from the first conntrack drop to the conntrack_drops finding, with the 1 s
# conntrack statistics (the default) and without them (--conntrack-stats.interval 0: the
# conntrack probe's own 5 s poll), in one run of the test VM (tests/vm, scenario
# conntrack-first-drop: Debian 12's kernel, whose nf_conntrack_max can be lowered there
# and never on this machine).
#
# In the guest: the table held full (nf_conntrack_max 64, ASSURED entries), one agent
# serving per mode (--conntrack.window 4s); TRIALS (10) times: wait until /findings has no
# conntrack_drops and a second more, one new UDP flow (dropped), /findings every 50 ms
# until conntrack_drops appears. Latency = guest uptime at the finding - at the drop (10 ms
# resolution; each poll's own time, a wget under emulation, is part of it).
#
# Prints one line per trial and, per mode, nearest-rank p50 and p99 and the max, in ms.
# Needs root and what tests/vm/vm.sh needs; PW_BIN (default: the release build).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/bench/lib.sh"
need_root_and qemu-system-x86_64 python3
pw_bin
OUT=$(mktemp -d /tmp/pw-first-drop.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bash "$ROOT/tests/vm/vm.sh" build "$PW_BIN" "$OUT"
# Two agents' ten trials each, at least 5 s apiece, under emulation.
PROXYWATCH_VM_TIMEOUT=${PROXYWATCH_VM_TIMEOUT:-900} bash "$ROOT/tests/vm/vm.sh" boot "$OUT" conntrack-first-drop
LOG="$OUT/conntrack-first-drop.log"
grep -q '@@PW-DONE rc=0@@' "$LOG" || { echo "the scenario did not finish: see $LOG" >&2; trap - EXIT; exit 1; }
python3 - "$LOG" <<'PY'
import math, sys
trials = {}
for line in open(sys.argv[1]):
    t = line.split()
    if len(t) == 5 and t[0] == "trial":
        ms = round((float(t[4]) - float(t[3])) * 1000)
        trials.setdefault(t[1], []).append(ms)
        print(f"{t[1]:6} trial {t[2]:>2}: {ms} ms")
def rank(v, q):
    s = sorted(v)
    return s[max(0, math.ceil(q * len(s)) - 1)]
print(f"\n{'mode':6} {'trials':>6} {'p50_ms':>7} {'p99_ms':>7} {'max_ms':>7}")
for mode, v in trials.items():
    print(f"{mode:6} {len(v):>6} {rank(v, 0.5):>7} {rank(v, 0.99):>7} {max(v):>7}")
PY
