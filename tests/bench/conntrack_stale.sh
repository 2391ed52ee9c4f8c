#!/usr/bin/env bash
# Issues 17 and 38: the conntrack_stale probe (agent/probe/conntrack_stale.rs),
# with its SNAT grouping on and off, against `conntrack -L > /dev/null`, at 0,
# 50,000 and 200,000 entries, side by side in one run, in a throwaway network
# namespace (pwst-<pid>).
#
# The namespace gets a kube-proxy-shaped iptables-nft rule set
# (tests/tools/gen_kube_rules.py --services SERVICES --endpoints ENDPOINTS,
# loaded with iptables-nft-restore), so the probe has a real service table:
# ClusterIPs 10.96.0.x, TCP port 80 (every 7th service UDP port 53), endpoints
# 10.244.0.x. Then, per level N, loaded with `conntrack -R FILE` (one process,
# one netlink request per line; `--dst-nat ADDR:PORT` makes the kernel set up
# the NAT, so the entry's status has IPS_DST_NAT, as kube-proxy's DNAT does):
#
#   N        UDP entries client -> ClusterIP:53, DST_NAT to an endpoint; one in
#            STALE_EVERY (default 100: 1 %) NATed to one of DEAD (default 2)
#            addresses 10.244.250.x, which are no endpoint (pods gone): the
#            stale entries the probe must count
#   N/10     TCP entries client -> ClusterIP:80, ESTABLISHED, DST_NAT to an
#            endpoint:8080, one in STALE_EVERY stale as well (the probe dumps
#            TCP too, the services have TCP ports)
#   N/10     UDP entries without NAT (client -> 10.200.0.1:53): in the listing,
#            not in the probe's dumps if the kernel's status filter works
#
# "entries" below is N. Every run checks the probe's facts against what was
# inserted (stale_entries.udp and draining_entries.tcp exactly, dst_nat_entries = DST_NAT UDP +
# TCP) and fails on a difference. Once per level (not timed) the script sends
# a DST_NAT + UDP dump request (status DST_NAT + mask, CTA_FILTER on the L4
# protocol: what the probe sends, with --conntrack.snat false, for a family
# whose service ports have one protocol; here they have two, so it filters on
# status only; with the SNAT grouping, the default, on nothing) from
# python and counts the messages the kernel answers with:
# `k_udp` = N means the kernel applied both filters; more (up to the whole
# table, N + 2 N/10) means it ignored one, which is only noted: the agent
# re-checks every entry in user space, so its facts cannot tell.
#
#   N/10     UDP entries SRC_NAT only (pod 10.3.x.y -> 198.18.x.y:53, --src-nat
#            192.168.50.1): what the SNAT grouping (--conntrack.snat, on by
#            default) reads in its second dump, and the stale count never sees
#
# For each level, RUNS runs, alternating: `check` with the stale check off
# (--conntrack-stale.interval 0: the other probes' cost), with it and the SNAT
# grouping on (the default), with it and SNAT off, and `conntrack -L` (the
# whole table, as a user would list it). Medians:
#   on_ms / off_ms  probes.conntrack_stale.duration_seconds (wall) of `check
#              --format json`, SNAT on / off (generation, service table over
#              netlink, the dumps, generation again)
#   list_ms    wall time of `conntrack -L > /dev/null` in the namespace
#   w_on / w_off  on_ms / list_ms, off_ms / list_ms (issue 38: <= 0.5 with SNAT on)
#   on_cpu / off_cpu  the stale check's CPU: user + system time (wait4 rusage,
#              microseconds) of `check` with it, SNAT on / off, minus that of
#              `check` with it off, in ms
#   list_cpu   user + system time of `conntrack -L`
#   c_on / c_off  on_cpu / list_cpu, off_cpu / list_cpu
#   on_kib / off_kib  peak RSS (wait4 ru_maxrss) of the whole `check`, SNAT on
#              / off; d_kib = on_kib - off_kib (issue 38: within 512 KiB)
#   list_kib   peak RSS of `conntrack -L`
#
# nf_conntrack_max is global and never changed here: it is read, and a level
# whose entries (1.3 N + 1000) do not fit under it in the namespace is lowered to
# what fits, and said so.
#
# Environment: PW_BIN, LEVELS="0 50000 200000" (increasing), RUNS=5,
# SERVICES=100 ENDPOINTS=2, STALE_EVERY=100, DEAD=2 (dead endpoints per
# service: the probe keeps one count per (service, dead endpoint), up to
# 10,000 of them, so DEAD=250 shows that map's memory too).
# Needs root, iproute2, iptables-nft-restore, conntrack, python3.
# Only the namespace it creates is touched (deleted on exit).

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a LEVELS <<<"${LEVELS:-0 50000 200000}"
RUNS=${RUNS:-5}
SERVICES=${SERVICES:-100}
ENDPOINTS=${ENDPOINTS:-2}
STALE_EVERY=${STALE_EVERY:-100}
DEAD=${DEAD:-2}

source "$ROOT/tests/bench/lib.sh"
need_root_and ip iptables-nft-restore conntrack python3 bash
pw_bin

# N DST_NAT UDP + N/10 TCP + N/10 plain UDP + N/10 SNAT UDP, and some room: the
# count is the namespace's, the limit (nf_conntrack_max) the host's, not changed.
CT_MAX=$(cat /proc/sys/net/netfilter/nf_conntrack_max)
FITS=$(((CT_MAX - 1000) * 10 / 13))
for i in "${!LEVELS[@]}"; do
	if ((LEVELS[i] > FITS)); then
		echo "level ${LEVELS[i]} needs $((LEVELS[i] * 13 / 10 + 1000)) entries, nf_conntrack_max is $CT_MAX: measured at $FITS instead" >&2
		LEVELS[i]=$FITS
	fi
done
echo "nf_conntrack_max $CT_MAX (read, not changed); levels ${LEVELS[*]}" >&2

WORK=$(mktemp -d /tmp/pw-stale.XXXXXX)
NS="pwst-$$"
cleanup() {
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
inns() { ip netns exec "$NS" "$@"; }
inns ip link set lo up

# The service table: ClusterIP services of the generated rules, with endpoints.
python3 "$ROOT/tests/tools/gen_kube_rules.py" --services "$SERVICES" --endpoints "$ENDPOINTS" >"$WORK/rules.txt"
inns iptables-nft-restore <"$WORK/rules.txt"

cat >"$WORK/gen.py" <<'EOF'
"""services RULES > services.json | fill SERVICES.json LO HI STALE_EVERY DEAD > load.txt"""
import json, shlex, sys

def services(path):
    svc, seps, dest = {}, {}, {}
    for line in open(path):
        if not line.startswith("-A KUBE-"):
            continue
        a = shlex.split(line)
        chain = a[1]
        target = a[a.index("-j") + 1] if "-j" in a else ""
        if chain.startswith("KUBE-SVC-"):
            comment = a[a.index("--comment") + 1] if "--comment" in a else ""
            if comment.endswith("cluster IP"):
                svc[chain] = (a[a.index("-p") + 1], a[a.index("-d") + 1].split("/")[0], int(a[a.index("--dport") + 1]))
            elif target.startswith("KUBE-SEP-"):
                seps.setdefault(chain, []).append(target)
        elif chain.startswith("KUBE-SEP-") and target == "DNAT":
            dest[chain] = a[a.index("--to-destination") + 1]
    out = {"udp": [], "tcp": []}
    for chain, (proto, ip, port) in sorted(svc.items(), key=lambda kv: kv[1]):
        eps = [dest[s] for s in seps.get(chain, [])]
        if eps and proto in out:
            out[proto].append({"ip": ip, "port": port, "endpoints": eps})
    json.dump(out, sys.stdout)

def fill(path, lo, hi, every, dead):
    """Entries [lo, hi) of the UDP DST_NAT series, [lo/10, hi/10) of the TCP
    and plain UDP ones. Prints the stale counts made (udp tcp) on stderr."""
    s = json.load(open(path))
    out = sys.stdout
    stale = {"udp": 0, "tcp": 0}

    def nat(proto, i, client, extra):
        svcs = s[proto]
        sv = svcs[i % len(svcs)]
        if i % every == 0:
            ep_ip, ep_port = "10.244.250.%d" % (1 + (i // every) % dead), sv["endpoints"][0].split(":")[1]
            stale[proto] += 1
        else:
            ep_ip, ep_port = sv["endpoints"][(i // len(svcs)) % len(sv["endpoints"])].split(":")
        out.write("-I -p %s -s %s -d %s --sport %d --dport %d -t 3600%s --dst-nat %s:%s\n"
                  % (proto, client, sv["ip"], 1024 + i % 60000, sv["port"], extra, ep_ip, ep_port))

    def addr(first, i):
        return "%d.%d.%d.%d" % (first[0], first[1] + (i >> 16), (i >> 8) & 255, i & 255)

    for i in range(lo, hi):
        nat("udp", i, addr((10, 1), i), "")
    for j in range(lo // 10, hi // 10):
        nat("tcp", j, addr((172, 16), j), " --state ESTABLISHED")
        out.write("-I -p udp -s %s -d 10.200.0.1 --sport %d --dport 53 -t 3600\n"
                  % (addr((100, 64), j), 1024 + j % 60000))
        out.write("-I -p udp -s %s -d %s --sport %d --dport 53 -t 3600 --src-nat 192.168.50.1\n"
                  % (addr((10, 3), j), addr((198, 18), j), 1024 + j % 60000))
    print(stale["udp"], stale["tcp"], file=sys.stderr)

if sys.argv[1] == "services":
    services(sys.argv[2])
else:
    fill(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
EOF
python3 "$WORK/gen.py" services "$WORK/rules.txt" >"$WORK/services.json"
read -r n_udp_svc n_tcp_svc < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["udp"]), len(d["tcp"]))' "$WORK/services.json")
((n_udp_svc > 0 && n_tcp_svc > 0)) || { echo "no UDP or TCP ClusterIP services parsed from the rules" >&2; exit 1; }
echo "rules: gen_kube_rules.py --services $SERVICES --endpoints $ENDPOINTS ($n_udp_svc UDP, $n_tcp_svc TCP ClusterIP services)" >&2

# The probe's UDP dump request, sent from python: prints the messages the
# kernel answered with and how many of them are DST_NAT UDP.
cat >"$WORK/kfilter.py" <<'EOF'
import socket, struct, sys
def attr(kind, value):
    n = 4 + len(value)
    return struct.pack("=HH", n, kind) + value + b"\0" * ((4 - n % 4) % 4)
def attrs(b):
    off = 0
    while off + 4 <= len(b):
        n, k = struct.unpack_from("=HH", b, off)
        if n < 4:
            break
        yield k & 0x3fff, b[off + 4:off + n]
        off += (n + 3) & ~3
proto, NESTED, DST_NAT = int(sys.argv[1]), 0x8000, 1 << 5
body = (attr(3, struct.pack(">I", DST_NAT)) + attr(26, struct.pack(">I", DST_NAT))  # CTA_STATUS, CTA_STATUS_MASK
        + attr(1 | NESTED, attr(2 | NESTED, attr(1, bytes([proto]))))  # CTA_TUPLE_ORIG/PROTO/NUM
        + attr(25 | NESTED, attr(1, struct.pack("=I", 1 << 3))))  # CTA_FILTER: ORIG_FLAGS = PROTO_NUM
payload = struct.pack("=BBH", 2, 0, 0) + body
sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
sk.bind((0, 0))
sk.send(struct.pack("=IHHII", 16 + len(payload), (1 << 8) | 1, 0x301, 1, 0) + payload)
msgs = match = 0
while True:
    data, off = sk.recv(1 << 20), 0
    while off + 16 <= len(data):
        length, ty = struct.unpack_from("=IH", data, off)
        if ty == 3:
            print(msgs, match)
            sys.exit(0)
        if ty == 2:
            err = struct.unpack_from("=i", data, off + 16)[0]
            if err:
                sys.exit("error %d" % err)
            print(msgs, match)
            sys.exit(0)
        msgs += 1
        status, l4 = 0, None
        for k, v in attrs(data[off + 20:off + length]):
            if k == 3:
                status = struct.unpack(">I", v)[0]
            elif k == 1:
                for k2, v2 in attrs(v):
                    if k2 == 2:
                        l4 = dict(attrs(v2)).get(1, b"\0")[0]
        match += bool(status & DST_NAT) and l4 == proto
        off += (length + 3) & ~3
EOF

# Peak RSS (KiB) and CPU (user + system, seconds) of a command, from wait4's rusage.
cat >"$WORK/peak.py" <<'EOF'
import os, sys
out, cmd = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
open(out, "w").write("%d %.6f\n" % (ru.ru_maxrss, ru.ru_utime + ru.ru_stime))
sys.exit(os.waitstatus_to_exitcode(status))
EOF
PEAK=(python3 "$WORK/peak.py")

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

# Runs one timed command in the namespace: prints "seconds peak_kib".
# $EPOCHREALTIME is read by a bash inside the namespace, around the command.
timed() { # out-file command...
	local out=$1
	shift
	inns bash -c 't0=$EPOCHREALTIME; "${@:2}" >"$1" 2>/dev/null; rc=$?; t1=$EPOCHREALTIME; echo "$t0 $t1 $rc"' \
		_ "$out" "${PEAK[@]}" "$WORK/peak" "$@" >"$WORK/t"
	read -r t0 t1 rc <"$WORK/t"
	read -r k c <"$WORK/peak"
	awk -v a="$t0" -v b="$t1" -v k="$k" -v c="$c" 'BEGIN {printf "%.6f %d %s\n", b - a, k, c}'
	return "$rc"
}

printf '%8s %8s %6s %8s %9s %6s %8s %8s %8s %6s %6s %7s %7s %8s %5s %5s %7s %7s %6s %8s\n' \
	entries table fill_s k_udp stale_u/t groups on_ms off_ms list_ms w_on w_off on_cpu off_cpu list_cpu c_on c_off on_kib off_kib d_kib list_kib
have=0 udp_stale=0 tcp_stale=0
for n in "${LEVELS[@]}"; do
	fill_s="-"
	if ((n > have)); then
		t0=$(now)
		python3 "$WORK/gen.py" fill "$WORK/services.json" "$have" "$n" "$STALE_EVERY" "$DEAD" \
			>"$WORK/load.txt" 2>"$WORK/stale.txt"
		inns conntrack -R "$WORK/load.txt" >/dev/null 2>"$WORK/load.err" || { tail -3 "$WORK/load.err" >&2; exit 1; }
		t1=$(now)
		fill_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
		read -r su st <"$WORK/stale.txt"
		udp_stale=$((udp_stale + su)) tcp_stale=$((tcp_stale + st))
		have=$n
	elif ((n < have)); then
		echo "LEVELS must be increasing" >&2
		exit 1
	fi
	extra=$((n / 10))
	total=$((n + 3 * extra))
	count=$(inns conntrack -C)
	if [[ $count != "$total" ]]; then
		echo "expected $total entries, conntrack -C says $count (nf_conntrack_max $CT_MAX)" >&2
		exit 1
	fi
	# Not timed: what the kernel answers to the probe's UDP request, and what
	# the compared listing prints.
	read -r k_udp k_match < <(inns python3 "$WORK/kfilter.py" 17)
	if ((k_match != n)); then
		echo "the kernel sent $k_match DST_NAT UDP entries, $n were inserted" >&2
		exit 1
	fi
	lines=$(inns bash -c 'conntrack -L 2>/dev/null | wc -l')
	if ((lines != total)); then
		echo "conntrack -L printed $lines lines, $total entries were inserted" >&2
		exit 1
	fi

	on=() off=() list=() base_c=() on_c=() off_c=() list_c=() on_k=() off_k=() list_k=()
	check_args=(check --format json --node-name bench --log.level error --conntrack-stale.timeout 10m)
	for ((i = 0; i < RUNS; i++)); do
		read -r _ _ c < <(timed "$WORK/out.json" "$PW_BIN" "${check_args[@]}" --conntrack-stale.interval 0 || true)
		base_c+=("$c")
		for snat in true false; do
			read -r _ k c < <(timed "$WORK/out.json" "$PW_BIN" "${check_args[@]}" --conntrack.snat "$snat" || true)
			vals=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p = d["probes"]["conntrack_stale"]
if p["status"] != "ok":
    sys.exit("conntrack_stale probe: %s: %s" % (p["status"], p.get("error")))
f = d["facts"]["conntrack_stale"]
want = {"udp": int(sys.argv[2]), "tcp": int(sys.argv[3])}
# UDP is stale, TCP draining (kube-proxy reconciles UDP only).
got = {"udp": f["stale_entries"].get("udp", 0), "tcp": f.get("draining_entries", {}).get("tcp", 0)}
if got != want:
    sys.exit("stale_entries %s, inserted stale %s" % (got, want))
if f["dst_nat_entries"] != int(sys.argv[4]):
    sys.exit("dst_nat_entries %d, inserted %s DST_NAT UDP+TCP" % (f["dst_nat_entries"], sys.argv[4]))
snat = f.get("snat")
if sys.argv[5] == "true":
    if not snat or snat.get("entries") != int(sys.argv[6]):
        sys.exit("snat %s, inserted %s SRC_NAT-only UDP" % (snat and snat.get("entries"), sys.argv[6]))
elif snat:
    sys.exit("--conntrack.snat false, yet SNAT facts")
print(p["duration_seconds"], f["stale_groups"] + f.get("draining_groups", 0))
' "$WORK/out.json" "$udp_stale" "$tcp_stale" "$((n + extra))" "$snat" "$extra")
			read -r s groups <<<"$vals"
			if [[ $snat == true ]]; then on+=("$s") on_c+=("$c") on_k+=("$k"); else off+=("$s") off_c+=("$c") off_k+=("$k"); fi
		done
		read -r s k c < <(timed /dev/null conntrack -L)
		list+=("$s") list_c+=("$c") list_k+=("$k")
	done
	med() { printf '%s\n' "$@" | median; }
	awk -v n="$n" -v t="$total" -v f="$fill_s" -v ku="$k_udp" -v su="$udp_stale/$tcp_stale" -v g="$groups" \
		-v on="$(med "${on[@]}")" -v off="$(med "${off[@]}")" -v l="$(med "${list[@]}")" \
		-v bc="$(med "${base_c[@]}")" -v oc="$(med "${on_c[@]}")" -v fc="$(med "${off_c[@]}")" -v lc="$(med "${list_c[@]}")" \
		-v ok="$(med "${on_k[@]}")" -v fk="$(med "${off_k[@]}")" -v lk="$(med "${list_k[@]}")" \
		'BEGIN {
			oncpu = oc - bc; offcpu = fc - bc
			printf "%8d %8d %6s %8d %9s %6d %8.1f %8.1f %8.1f %6.2f %6.2f %7.1f %7.1f %8.1f %5.2f %5.2f %7d %7d %6d %8d\n",
				n, t, f, ku, su, g, on * 1000, off * 1000, l * 1000, (l > 0 ? on / l : 0), (l > 0 ? off / l : 0),
				oncpu * 1000, offcpu * 1000, lc * 1000, (lc > 0 ? oncpu / lc : 0), (lc > 0 ? offcpu / lc : 0),
				ok, fk, ok - fk, lk}'
done
echo "(medians of $RUNS; issue 38: w_on <= 0.50 (wall time), d_kib within 512; c_on shown beside; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
