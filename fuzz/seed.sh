#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from tests/fixtures (corpus dirs are gitignored).
# Idempotent: files are named by content hash, so re-running adds nothing twice.
#
#   bash fuzz/seed.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
F=../tests/fixtures

# seed TARGET FILE... : copies each existing regular file into corpus/TARGET/.
seed() {
    local target=$1
    shift
    mkdir -p "corpus/$target"
    local f
    for f in "$@"; do
        [ -f "$f" ] || continue
        cp "$f" "corpus/$target/$(sha1sum "$f" | cut -c1-16)"
    done
}

# literal TARGET TEXT... : one seed per text.
literal() {
    local target=$1
    shift
    mkdir -p "corpus/$target"
    local t
    for t in "$@"; do
        printf '%b' "$t" > "corpus/$target/lit-$(printf '%s' "$t" | sha1sum | cut -c1-12)"
    done
}

shopt -s nullglob globstar

seed conntrack_stat $F/samples/proc-net-stat-nf_conntrack/* $F/nodes/*/proc/net/stat/nf_conntrack
seed conntrack_s $F/samples/conntrack-S/* $F/nodes/*/exec/conntrack-S.txt
seed proc_modules $F/samples/proc-modules/* $F/nodes/*/proc/modules $F/ipvs-nodes/*/proc/modules
seed modules_builtin $F/samples/modules-builtin/* $F/nodes/*/lib/modules/*/modules.builtin \
    $F/ipvs-nodes/*/lib/modules/*/modules.builtin
seed sysctl_value $F/samples/proc-sys-net-netfilter/debian12-kernel6.18-rootns/* \
    $F/nodes/healthy-iptables/proc/sys/**/*
literal sysctl_value "1" "-1" "0\n" "262144\n" " 7 \n"
seed node_cpu_list $F/nodes/*/sys/devices/system/cpu/online
literal node_cpu_list "0-3,8,10-11\n" "0\n" "0-65535\n"
seed iptables_save $F/iptables/*.txt
seed nft_list_table $F/nft/*.txt $F/nft/*.nft
literal nft_list_table "table ip kube-proxy {\n}\n"
seed ipvsadm_list $F/ipvs/ln-* $F/ipvs/lnc-* $F/ipvs/rate-* $F/ipvs-nodes/*/exec/*
seed ipvsadm_stats $F/ipvs/stats-* $F/ipvs/ln-kube-proxy-ipvs-kind-tkng.txt
seed proc_ip_vs $F/ipvs/node_exporter-* $F/ipvs/prometheus-procfs-* $F/nodes/*/proc/net/ip_vs \
    $F/ipvs-nodes/*/proc/net/ip_vs
seed proc_ip_vs_stats $F/ipvs/ip_vs_stats-* $F/nodes/*/proc/net/ip_vs_stats $F/ipvs-nodes/*/proc/net/ip_vs_stats
seed kube_proxy_metrics $F/kube-proxy/*.prom
seed healthz $F/kube-proxy/*.json
literal healthz '{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918"}'
seed proxy_mode $F/kube-proxy/iptables.txt $F/kube-proxy/ipvs.txt
literal proxy_mode "nftables" "kernelspace\n" "404 page not found\n"

# Netlink answers, built as the kernel encodes them (see agent/netlink/nft.rs samples).
netlink_seeds() {
    mkdir -p corpus/netlink_nft corpus/netlink_ctnetlink
    python3 - <<'PY'
import struct
def pad(b): return b + b"\0" * (-len(b) % 4)
def attr(t, v): return pad(struct.pack("=HH", 4 + len(v), t) + v)
def nest(t, *a): return attr(t | 0x8000, b"".join(a))
def s(t, v): return attr(t, v.encode() + b"\0")
def be(t, v): return attr(t, struct.pack(">I", v & 0xffffffff))
def msg(ty, payload, seq=1): return pad(struct.pack("=IHHII", 16 + len(payload), ty, 2, seq, 0) + payload)
def nfgen(fam, res, *a): return bytes([fam, 0]) + struct.pack(">H", res) + b"".join(a)
imm = nest(1, s(1, "immediate"), nest(2, be(1, 0), nest(2, nest(2, be(1, -3), s(2, "KUBE-SVC-X")))))
rule = msg(0x0a06, nfgen(2, 7, s(1, "nat"), s(2, "KUBE-SERVICES"), attr(3, b"\0" * 8), nest(4, imm)))
chain = msg(0x0a03, nfgen(2, 7, s(1, "nat"), s(3, "PREROUTING"), nest(4, be(1, 0), be(2, -100)), be(5, 1)))
sets = msg(0x0a09, nfgen(2, 7, s(1, "kube-proxy"), s(2, "service-ips"), be(3, 0x88)))
elems = msg(0x0a0c, nfgen(2, 7, s(1, "kube-proxy"), s(2, "s"), nest(3, nest(1, nest(1, attr(1, b"\x0a\0\0\1"))), nest(1, be(3, 1)))))
gen = msg(0x0a0f, nfgen(0, 7, be(1, 7)))
done = msg(3, struct.pack("=i", 0))
for name, data in [("chain", chain), ("rule", rule), ("set", sets), ("elems", elems), ("gen", gen), ("all", chain + rule + sets + elems + gen + done)]:
    open("corpus/netlink_nft/seed-" + name, "wb").write(data)
cpu = msg(0x0104, nfgen(0, 1, *[be(k, k) for k in (2, 4, 8, 9, 10, 11, 12, 13, 14, 15)]))
glob = msg(0x0105, nfgen(0, 0, be(1, 52), be(2, 262144)))
open("corpus/netlink_ctnetlink/seed-stats", "wb").write(cpu + cpu + glob)
PY
    # netlink_nft: the source NAT rules captured from the kernel (agent/netlink/testdata/snat_*.hex:
    # MASQUERADE/SNAT compat targets, nft masq), one NFT_MSG_NEWRULE message each.
    python3 - ../agent/netlink/testdata/snat_*.hex <<'PY'
import struct, sys
def pad(b): return b + b"\0" * (-len(b) % 4)
for f in sys.argv[1:]:
    for i, l in enumerate(x for x in open(f) if x.strip()):
        p = bytes.fromhex(l.strip())
        name = f.rsplit("/", 1)[1][:-4]
        open(f"corpus/netlink_nft/seed-{name}-{i}", "wb").write(pad(struct.pack("=IHHII", 16 + len(p), 0x0a06, 2, 1, 0) + p))
PY
    # netlink_stale: the rules captured from the kernel (agent/netlink/testdata, the
    # payloads of NFT_MSG_NEWRULE) for udp 10.96.0.10:53 → 10.244.1.2:53, and the
    # conntrack entry captured with them (ct_dump.rs's UDP_DNAT), each wrapped in a
    # netlink header; the whole set in one datagram too.
    mkdir -p corpus/netlink_stale
    python3 - ../agent/netlink/testdata/ipt_services.hex ../agent/netlink/testdata/ipt_svc.hex \
        ../agent/netlink/testdata/ipt_sep.hex <<'PY'
import struct, sys
def pad(b): return b + b"\0" * (-len(b) % 4)
def msg(ty, payload, seq=1): return pad(struct.pack("=IHHII", 16 + len(payload), ty, 2, seq, 0) + payload)
rules = [msg(0x0a06, bytes.fromhex(l.strip())) for f in sys.argv[1:] for l in open(f) if l.strip()]
entry = msg(0x0100, bytes.fromhex(
    "020000003400018014000180080001000af40102080002000a60000a1c0002800500010011000000060002009c43000006000300003500003400028014000180080001000af40102080002000af401021c00028005000100110000000600020000350000060003009c43000008000300000001a8080008000000000008000c009f58049d08000b0000000001080007000000001b"))
# The same entry NATed to 10.244.1.9 (an endpoint the rules do not have): reply source rewritten.
stale = entry.replace(bytes.fromhex("080001000af40102080002000af40102"), bytes.fromhex("080001000af40109080002000af40102"), 1)
for i, r in enumerate(rules):
    open(f"corpus/netlink_stale/seed-rule{i}", "wb").write(r)
open("corpus/netlink_stale/seed-entry", "wb").write(entry)
open("corpus/netlink_stale/seed-all", "wb").write(b"".join(rules) + entry + stale + msg(3, struct.pack("=i", 0)))
PY
}
netlink_seeds
literal sysctl_ports "32768\t60999\n" "1024 65535\n" "\n" "9100,30000-32767\n" "30080, 30000-30010,30011"
# The IPv4 neighbour table's message as this kernel sent it (tests/fixtures/samples/netlink-neightbl).
mkdir -p corpus/netlink_neightbl
for f in $F/samples/netlink-neightbl/*.hex; do
    python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex("".join(open(sys.argv[1]).read().split())))' "$f" \
        >"corpus/netlink_neightbl/$(basename "$f" .hex)"
done

# Crashes found earlier stay in the corpus.
for f in ../tests/fixtures/fuzz-regressions/*; do
    [ -f "$f" ] || continue
    t=$(basename "$f")
    t=${t%%--*}
    [ -d "corpus/$t" ] && cp "$f" "corpus/$t/"
done

for d in corpus/*/; do
    printf '%-20s %3d files\n' "$(basename "$d")" "$(find "$d" -type f | wc -l)"
done
