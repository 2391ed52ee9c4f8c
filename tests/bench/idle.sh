#!/usr/bin/env bash
# Idle footprint: proxywatch `serve` with its default probe intervals against
# node_exporter (conntrack, sysctl, ipvs collectors), both running at the same
# time on this host, for DURATION seconds:
#
#   phase "none":  no scrapes at all
#   phase "15s":   one /metrics scrape every 15 s (a Prometheus-like scraper; curl)
#
# Each phase starts fresh processes, waits until proxywatch has published its
# first snapshot (every probe ran once), then measures over DURATION seconds:
#
#   cpu_s       the process's own CPU seconds (utime+stime, all threads)
#   child_s     CPU seconds of the commands it ran and waited for (cutime+cstime:
#               iptables-save, nft, ipvsadm... for proxywatch; none for node_exporter)
#   cpu_%       (cpu_s + child_s) / DURATION
#   rss_*       VmRSS sampled every second: at the start, mean, max, at the end
#   hwm_mib     VmHWM (peak RSS since start) at the end
#   thr         threads at the end
#
# Environment: PW_BIN, NE_BIN, DURATION=60, PHASES="none 15s", SERVERS="proxywatch node_exporter".
#
# Usage: tests/bench/idle.sh

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DURATION=${DURATION:-60}
read -r -a PHASES <<<"${PHASES:-none 15s}"
read -r -a SERVERS <<<"${SERVERS:-proxywatch node_exporter}"
NE_BIN=${NE_BIN:-prometheus-node-exporter}
CLK_TCK=$(getconf CLK_TCK)

for t in curl python3; do
	command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
done
if [[ " ${SERVERS[*]} " == *" node_exporter "* ]] && ! command -v "$NE_BIN" >/dev/null; then
	echo "missing $NE_BIN (apt-get install -y prometheus-node-exporter)" >&2
	exit 1
fi
source "$ROOT/tests/bench/lib.sh"
pw_bin

WORK=$(mktemp -d /tmp/pw-idle.XXXXXX)
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
# Fields 14-17 of /proc/<pid>/stat: utime stime cutime cstime (after the ")" of comm: 12-15).
self_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }
child_ticks() { awk '{sub(/.*\) /, ""); print $14 + $15}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

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
	local port i
	port=$(free_port)
	case $1 in
	proxywatch)
		"$PW_BIN" serve --listen "127.0.0.1:$port" --node-name bench --log.level error >"$WORK/proxywatch.log" 2>&1 &
		;;
	node_exporter)
		"$NE_BIN" --web.listen-address="127.0.0.1:$port" --collector.disable-defaults \
			--collector.conntrack --collector.sysctl --collector.ipvs "${NE_SYSCTL_FLAGS[@]}" \
			--log.level=error >"$WORK/node_exporter.log" 2>&1 &
		;;
	esac
	PID[$1]=$!
	PIDS+=("$!")
	URL[$1]="http://127.0.0.1:$port/metrics"
	# Ready = listening; for proxywatch, first snapshot published (HEAD /readyz may be 503
	# on a node with critical findings, so look at /metrics, which is 200 once published).
	for ((i = 0; i < 300; i++)); do
		if [[ $1 == node_exporter ]]; then
			# Do not scrape node_exporter before the "none" phase: only check the port.
			python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" \
				2>/dev/null && return 0
		elif curl -fsS -o /dev/null "${URL[$1]}" 2>/dev/null; then
			return 0
		fi
		kill -0 "${PID[$1]}" 2>/dev/null || { cat "$WORK/$1.log" >&2; echo "$1 exited" >&2; exit 1; }
		sleep 0.1
	done
	echo "$1: not ready after 30 s" >&2
	exit 1
}

printf '%-13s %-5s %4s %7s %7s %6s %8s %8s %8s %8s %8s %4s %7s\n' \
	server phase secs cpu_s child_s cpu_% rss_start rss_mean rss_max rss_end hwm_mib thr scrapes
for phase in "${PHASES[@]}"; do
	PIDS=()
	for s in "${SERVERS[@]}"; do start_server "$s"; done
	declare -A S0 C0 RSUM RMAX RSTART
	for s in "${SERVERS[@]}"; do
		p=${PID[$s]}
		S0[$s]=$(self_ticks "$p") C0[$s]=$(child_ticks "$p")
		RSTART[$s]=$(status_kib "$p" VmRSS) RSUM[$s]=0 RMAX[$s]=0
	done
	scrapes=0
	for ((t = 0; t < DURATION; t++)); do
		if [[ $phase == 15s ]] && ((t % 15 == 0)); then
			for s in "${SERVERS[@]}"; do curl -fsS -o /dev/null "${URL[$s]}"; done
			scrapes=$((scrapes + 1))
		fi
		sleep 1
		for s in "${SERVERS[@]}"; do
			r=$(status_kib "${PID[$s]}" VmRSS)
			RSUM[$s]=$((RSUM[$s] + r))
			if ((r > RMAX[$s])); then RMAX[$s]=$r; fi
		done
	done
	for s in "${SERVERS[@]}"; do
		p=${PID[$s]}
		ds=$(($(self_ticks "$p") - S0[$s]))
		dc=$(($(child_ticks "$p") - C0[$s]))
		awk -v s="$s" -v ph="$phase" -v d="$DURATION" -v ds="$ds" -v dc="$dc" -v hz="$CLK_TCK" \
			-v r0="${RSTART[$s]}" -v rs="${RSUM[$s]}" -v rm="${RMAX[$s]}" -v re="$(status_kib "$p" VmRSS)" \
			-v hwm="$(status_kib "$p" VmHWM)" -v thr="$(status_kib "$p" Threads)" -v n="$scrapes" \
			'BEGIN {printf "%-13s %-5s %4d %7.2f %7.2f %6.2f %8.1f %8.1f %8.1f %8.1f %8.1f %4d %7d\n",
				s, ph, d, ds / hz, dc / hz, (ds + dc) / hz / d * 100, r0 / 1024, rs / d / 1024,
				rm / 1024, re / 1024, hwm / 1024, thr, n}'
	done
	for s in "${SERVERS[@]}"; do
		kill "${PID[$s]}"
		wait "${PID[$s]}" 2>/dev/null || true
	done
done
