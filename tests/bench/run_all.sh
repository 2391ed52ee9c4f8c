#!/usr/bin/env bash
# Issue #9: every benchmark in one run, same machine, printed side by side.
#
#   1. scrape.sh            proxywatch /metrics vs node_exporter under wrk (1, 16, 64 connections)
#   2. idle.sh              idle RSS/CPU over 60 s, without scrapes and with one every 15 s
#   3. conntrack_scale.sh   the conntrack probe at 0 / 50,000 / 200,000 entries vs conntrack -C / -L
#  3b. conntrack_stale.sh   the conntrack_stale probe at 0 / 50,000 / 200,000 DST_NAT UDP entries
#  3c. stale_table.sh       its service table at 10000x5 (iptables-nft and nftables) vs the listings
#                           vs conntrack -L -p udp (issue 17)
#   4. iptables_probe.sh    (when present) the iptables probe vs iptables-save
#   5. binary size          target/release/proxywatch, as built and stripped
#   6. release profiles     variants built into target/bench-profiles/<name> with
#                           CARGO_PROFILE_RELEASE_* overrides (Cargo.toml untouched):
#                           size, stripped size, idle RSS/CPU, scrape rate and CPU per scrape
#
# Needs root (namespaces), wrk, prometheus-node-exporter, conntrack, python3, cargo;
# hyperfine and GNU time if present:
#   apt-get install -y prometheus-node-exporter wrk conntrack hyperfine time
# (Debian's prometheus-node-exporter service is never started by these scripts;
# under systemd, `systemctl disable --now prometheus-node-exporter` after installing.)
#
# Environment:
#   SKIP="..."         any of: scrape idle conntrack stale stale-table iptables profiles
#   PROFILES="base thin fat-cgu1"   variants of section 6 (also known: fat cgu1 fat-cgu1-strip
#                      thin-cgu1-strip fat-cgu1-strip-s; each non-base one is a full build)
#   PROFILE_IDLE=30    seconds of idle per variant; PROFILE_SCRAPE=5: seconds per scrape round (3 rounds)
# Other variables are passed to the scripts (DURATION, CONNS, PIN, LEVELS, RUNS...).
#
# Usage: sudo tests/bench/run_all.sh 2>&1 | tee bench.txt

set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SKIP=" ${SKIP:-} "
read -r -a PROFILES <<<"${PROFILES-base thin fat-cgu1}"
PROFILE_IDLE=${PROFILE_IDLE:-30}
PROFILE_SCRAPE=${PROFILE_SCRAPE:-5}

skipped() { [[ $SKIP == *" $1 "* ]]; }
# A failed section is reported and the run goes on; the exit code says so at the end.
FAILED=()
failed() { echo "!!! section $1 failed (exit $2)"; FAILED+=("$1"); }
section() { printf '\n=== %s\n' "$*"; }

WORK=$(mktemp -d /tmp/pw-all.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

section "machine"
echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpus:      $(nproc) x $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
echo "kernel:    $(uname -r)"
echo "memory:    $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "rustc:     $(rustc --version)"
echo "node_exp:  $(prometheus-node-exporter --version 2>&1 | head -1)"
echo "wrk:       $(wrk --version 2>&1 | head -1)"
echo "conntrack: $(conntrack --version 2>&1 | head -1)"
echo "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, before the run)"

# The sources can change while this runs (the tree is shared): fingerprint them
# here and at the end, with the binary measured.
src_hash() { (cd "$ROOT" && find Cargo.toml Cargo.lock agent -type f -name '*' | sort | xargs cat | sha256sum | cut -c1-12); }
SRC0=$(src_hash)
echo "source:    git $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?') + $(cd "$ROOT" && git status --short 2>/dev/null | wc -l) changed/untracked paths; sources sha256 $SRC0"

echo "building the release binary..." >&2
(cd "$ROOT" && cargo build --release --quiet)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/proxywatch"
# A private copy: a concurrent `cargo build` must not swap the binary mid-run.
cp "$BIN" "$WORK/proxywatch"
BIN_SRC=$BIN
BIN=$WORK/proxywatch
export PW_BIN=$BIN
echo "binary:    $BIN_SRC sha256 $(sha256sum "$BIN" | cut -c1-12)"

if ! skipped scrape; then
	section "1. scrape: /metrics under wrk (${DURATION:-10} s per row)"
	"$HERE/scrape.sh" || failed scrape $?
fi
if ! skipped idle; then
	section "2. idle footprint (${DURATION:-60} s per phase, default probe intervals)"
	"$HERE/idle.sh" || failed idle $?
fi
if ! skipped conntrack; then
	section "3. conntrack at scale (medians of ${RUNS:-5})"
	"$HERE/conntrack_scale.sh" || failed conntrack $?
fi
if ! skipped stale; then
	section "3b. stale conntrack check vs conntrack -L -p udp (medians of ${RUNS:-5})"
	"$HERE/conntrack_stale.sh" || failed stale $?
fi
if ! skipped stale-table; then
	section "3c. the stale check's service table at ${SIZE:-10000x5} vs the rule listings (medians of ${RUNS:-3})"
	"$HERE/stale_table.sh" || failed stale-table $?
fi
if ! skipped iptables; then
	if [[ -x $HERE/iptables_probe.sh ]]; then
		section "4. iptables probe vs iptables-save"
		"$HERE/iptables_probe.sh" || failed iptables $?
	else
		section "4. iptables probe: tests/bench/iptables_probe.sh not present, skipped"
	fi
fi

stripped_size() { # binary
	strip --strip-all -o "$WORK/stripped" "$1"
	stat -c %s "$WORK/stripped"
}

section "5. binary size"
echo "$(stat -c %s "$BIN") bytes  $BIN_SRC (as built: [profile.release] of Cargo.toml)"
echo "stripped (strip --strip-all): $(stripped_size "$BIN") bytes"

if ! skipped profiles && ((${#PROFILES[@]})); then
	section "6. release profile variants (Cargo.toml [profile.release] + env overrides)"
	# name -> CARGO_PROFILE_RELEASE_* overrides. panic=abort is excluded: probes rely on catching panics.
	declare -A ENVS=(
		[base]=""
		[thin]="CARGO_PROFILE_RELEASE_LTO=thin"
		[fat]="CARGO_PROFILE_RELEASE_LTO=fat"
		[cgu1]="CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1"
		[fat-cgu1]="CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1"
		[fat-cgu1-strip]="CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=symbols"
		[thin-cgu1-strip]="CARGO_PROFILE_RELEASE_LTO=thin CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=symbols"
		[fat-cgu1-strip-s]="CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_PROFILE_RELEASE_OPT_LEVEL=s"
	)
	declare -A VBIN BUILD_S
	for v in "${PROFILES[@]}"; do
		[[ -v ENVS[$v] ]] || { echo "unknown profile variant $v (known: ${!ENVS[*]})" >&2; exit 1; }
		if [[ $v == base ]]; then
			VBIN[$v]=$BIN BUILD_S[$v]="-"
			continue
		fi
		dir="$ROOT/target/bench-profiles/$v"
		echo "building $v (${ENVS[$v]})..." >&2
		t0=$(date +%s)
		# shellcheck disable=SC2086 # ENVS values are NAME=value words
		(cd "$ROOT" && env ${ENVS[$v]} CARGO_TARGET_DIR="$dir" cargo build --release --quiet)
		BUILD_S[$v]=$(($(date +%s) - t0))
		VBIN[$v]="$dir/release/proxywatch"
	done
	printf '%-18s %7s %10s %10s %8s %8s %8s %8s %8s %9s\n' \
		variant build_s size_B stripped_B idle_rss idle_hwm idle_cpu rps_c16 p99_ms cpu_ms/scr
	for v in "${PROFILES[@]}"; do
		b=${VBIN[$v]}
		# idle: rss_end (col 11) hwm (col 12) cpu_s+child_s (cols 4, 5)
		idle=$(SERVERS=proxywatch PHASES=none DURATION=$PROFILE_IDLE PW_BIN=$b "$HERE/idle.sh" |
			awk '$1 == "proxywatch" {print $10, $11, $4 + $5}')
		# scrape: 3 rounds at 16 connections; medians of rps (col 3), p99 (col 5), cpu_s/1k (col 8)
		scrape=$(SERVERS=proxywatch CONNS="16 16 16" DURATION=$PROFILE_SCRAPE PW_BIN=$b "$HERE/scrape.sh" |
			awk '$1 == "proxywatch" {r[NR] = $3; p[NR] = $5; c[NR] = $8; n++}
				function med(a,   k, i, j, t, x) {k = 0; for (i in a) x[++k] = a[i]
					for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (x[j] < x[i]) {t = x[i]; x[i] = x[j]; x[j] = t}
					return x[int((k + 1) / 2)]}
				END {print med(r), med(p), med(c)}')
		read -r rss hwm cpu <<<"$idle"
		read -r rps p99 cps <<<"$scrape"
		printf '%-18s %7s %10d %10d %8s %8s %8s %8.0f %8s %9s\n' "$v" "${BUILD_S[$v]}" "$(stat -c %s "$b")" \
			"$(stripped_size "$b")" "$rss" "$hwm" "$cpu" "$rps" "$p99" "$cps"
	done
	echo "(idle_*: MiB and CPU s over ${PROFILE_IDLE} s without scrapes; rps/p99/cpu: median of 3 x ${PROFILE_SCRAPE} s wrk -c16)"
fi

SRC1=$(src_hash)
if [[ $SRC1 != "$SRC0" ]]; then
	printf '\nNOTE: the sources changed during the run (sha256 %s -> %s): variants built late may differ.\n' "$SRC0" "$SRC1"
fi
if ((${#FAILED[@]})); then
	echo "FAILED sections: ${FAILED[*]}"
	exit 1
fi
