#!/usr/bin/env bash
# Scrape benchmark: proxywatch `/metrics` against node_exporter, same load
# generator (wrk), same machine, interleaved.
#
# For each server and each connection count, runs `wrk --latency` for
# DURATION seconds against /metrics on loopback and prints:
#
#   rps         successful (2xx) responses/s: (wrk's completed requests - non-2xx) /
#               wrk's duration. node_exporter answers 503 beyond --web.max-requests
#               (default 40) concurrent scrapes; those count in err, not in rps.
#   p50_ms      p99_ms  max_ms   latency percentiles from wrk (HdrHistogram)
#   err         socket errors (connect+read+write+timeout) + non-2xx responses
#   cpu_s/1k    the server's CPU seconds (utime+stime of every thread, from
#               /proc/<pid>/stat) per 1,000 successful scrapes = ms per scrape
#   rss_mib     the server's VmRSS after the run; hwm_mib: VmHWM (peak) so far
#
# then the ratios proxywatch / node_exporter. Both servers run throughout and
# the rows alternate (per connection count: proxywatch, then node_exporter).
#
# node_exporter is Debian's prometheus-node-exporter, run as our own process on
# loopback with only the collectors proxywatch overlaps with: conntrack, sysctl
# (the sysctls proxywatch reads that exist on this kernel) and ipvs. The Debian
# systemd unit is never started.
#
# Environment:
#   PW_BIN=path        proxywatch binary (default: cargo build --release, target/release/proxywatch)
#   DURATION=10        seconds per wrk run
#   CONNS="1 16 64"    connection counts
#   WRK_THREADS=1      wrk threads (capped at the connection count)
#   SERVERS="proxywatch node_exporter"
#   PIN=0              1: server on CPU 0, wrk on CPU 1 (taskset); 0: scheduler decides
#
# Usage: tests/bench/scrape.sh            (needs wrk, curl, python3; node_exporter unless SERVERS=proxywatch)

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DURATION=${DURATION:-10}
read -r -a CONNS <<<"${CONNS:-1 16 64}"
read -r -a SERVERS <<<"${SERVERS:-proxywatch node_exporter}"
WRK_THREADS=${WRK_THREADS:-1}
PIN=${PIN:-0}
NE_BIN=${NE_BIN:-prometheus-node-exporter}
CLK_TCK=$(getconf CLK_TCK)

for t in wrk curl python3; do
	command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y wrk curl python3)" >&2; exit 1; }
done
if [[ " ${SERVERS[*]} " == *" node_exporter "* ]] && ! command -v "$NE_BIN" >/dev/null; then
	echo "missing $NE_BIN (apt-get install -y prometheus-node-exporter)" >&2
	exit 1
fi

source "$ROOT/tests/bench/lib.sh"
pw_bin

WORK=$(mktemp -d /tmp/pw-scrape.XXXXXX)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# CPU ticks (utime+stime) of a process, all threads; fields after the ")" of comm.
cpu_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

pin_server=() pin_wrk=()
if [[ $PIN == 1 ]]; then
	pin_server=(taskset -c 0) pin_wrk=(taskset -c 1)
fi

# The sysctls proxywatch reads (agent/probe/sysctl.rs), those that exist here:
# node_exporter's sysctl collector fails as a whole on a missing one.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_buckets
	net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait
	net.ipv4.conf.all.route_localnet net.ipv4.vs.conntrack net.ipv4.vs.conn_reuse_mode
	net.ipv4.vs.expire_nodest_conn net.ipv4.vs.expire_quiescent_template)
NE_SYSCTL_FLAGS=()
for s in "${SYSCTLS[@]}"; do
	[[ -e /proc/sys/${s//.//} ]] && NE_SYSCTL_FLAGS+=("--collector.sysctl.include=$s")
done

declare -A URL PID
start_server() { # name
	local port
	port=$(free_port)
	case $1 in
	proxywatch)
		"${pin_server[@]}" "$PW_BIN" serve --listen "127.0.0.1:$port" --node-name bench --log.level error \
			>"$WORK/proxywatch.log" 2>&1 &
		;;
	node_exporter)
		"${pin_server[@]}" "$NE_BIN" --web.listen-address="127.0.0.1:$port" --collector.disable-defaults \
			--collector.conntrack --collector.sysctl --collector.ipvs "${NE_SYSCTL_FLAGS[@]}" \
			--log.level=error >"$WORK/node_exporter.log" 2>&1 &
		;;
	esac
	PID[$1]=$!
	PIDS+=("$!")
	URL[$1]="http://127.0.0.1:$port/metrics"
	# proxywatch answers 503 until every probe has run once.
	local i
	for ((i = 0; i < 300; i++)); do
		if curl -fsS -o /dev/null "${URL[$1]}" 2>/dev/null; then
			return 0
		fi
		kill -0 "${PID[$1]}" 2>/dev/null || { cat "$WORK/$1.log" >&2; echo "$1 exited" >&2; exit 1; }
		sleep 0.1
	done
	echo "$1: /metrics not ready after 30 s" >&2
	exit 1
}

cat >"$WORK/report.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.timeout, e.status, summary.bytes))
end
EOF

declare -A R BODY
# Both servers run for the whole benchmark (the idle one costs nothing); rows
# alternate between them so that machine noise hits both alike.
for server in "${SERVERS[@]}"; do
	start_server "$server"
	BODY[$server]=$(curl -fsS "${URL[$server]}" | wc -c)
	# Warm-up, not counted.
	"${pin_wrk[@]}" wrk -t1 -c16 -d2s "${URL[$server]}" >/dev/null
done
printf '%-13s %5s %9s %8s %8s %8s %5s %9s %8s %8s %8s\n' \
	server conns rps p50_ms p99_ms max_ms err cpu_s/1k rss_mib hwm_mib body_B
for c in "${CONNS[@]}"; do
	for server in "${SERVERS[@]}"; do
		pid=${PID[$server]}
		threads=$((WRK_THREADS < c ? WRK_THREADS : c))
		t0=$(cpu_ticks "$pid")
		out=$("${pin_wrk[@]}" wrk -t"$threads" -c"$c" -d"${DURATION}s" --latency -s "$WORK/report.lua" "${URL[$server]}")
		t1=$(cpu_ticks "$pid")
		read -r _ n dur_us p50 p99 max err non2xx _bytes <<<"$(grep '^RESULT' <<<"$out")"
		rss=$(status_kib "$pid" VmRSS)
		hwm=$(status_kib "$pid" VmHWM)
		line=$(awk -v n="$n" -v d="$dur_us" -v p50="$p50" -v p99="$p99" -v max="$max" -v dt=$((t1 - t0)) \
			-v hz="$CLK_TCK" -v err=$((err + non2xx)) -v non2xx="$non2xx" -v rss="$rss" -v hwm="$hwm" -v body="${BODY[$server]}" \
			'BEGIN {ok = n - non2xx; printf "%9.0f %8.3f %8.3f %8.2f %5d %9.4f %8.1f %8.1f %8d",
				ok / (d / 1e6), p50 / 1000, p99 / 1000, max / 1000, err, (ok > 0 ? dt / hz / ok * 1000 : 0),
				rss / 1024, hwm / 1024, body}')
		printf '%-13s %5s %s\n' "$server" "$c" "$line"
		R[$server,$c]=$line
	done
done

if [[ -n ${R[proxywatch,${CONNS[0]}]:-} && -n ${R[node_exporter,${CONNS[0]}]:-} ]]; then
	echo
	echo "ratios (proxywatch vs node_exporter; >1 means proxywatch is better):"
	printf '%5s %10s %10s %10s %12s\n' conns rps_x p50_x p99_x cpu/scrape_x
	for c in "${CONNS[@]}"; do
		read -r a_rps a_p50 a_p99 _ _ a_cpu _ <<<"${R[proxywatch,$c]}"
		read -r b_rps b_p50 b_p99 _ _ b_cpu _ <<<"${R[node_exporter,$c]}"
		awk -v c="$c" -v ar="$a_rps" -v br="$b_rps" -v a5="$a_p50" -v b5="$b_p50" -v a9="$a_p99" -v b9="$b_p99" \
			-v ac="$a_cpu" -v bc="$b_cpu" 'function r(x, y) {return y > 0 ? sprintf("%.1f", x / y) : "inf"}
			BEGIN {printf "%5s %10s %10s %10s %12s\n", c, r(ar, br), r(b5, a5), r(b9, a9), r(bc, ac)}'
	done
fi
