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
seed proc_modules $F/samples/proc-modules/* $F/nodes/*/proc/modules $F/ipvs-nodes/*/proc/modules
seed modules_builtin $F/samples/modules-builtin/* $F/nodes/*/lib/modules/*/modules.builtin \
    $F/ipvs-nodes/*/lib/modules/*/modules.builtin
seed sysctl_value $F/samples/proc-sys-net-netfilter/debian12-kernel6.18-rootns/* \
    $F/nodes/healthy-iptables/proc/sys/**/*
literal sysctl_value "1" "-1" "0\n" "262144\n" " 7 \n"
literal proc_locks "4: FLOCK  ADVISORY  WRITE 27474 fe:00:10059897 0 EOF\n4: -> FLOCK  ADVISORY  WRITE 27483 fe:00:10059897 0 EOF\n" "9: OFDLCK ADVISORY  READ  -1 00:06:9 0 EOF\n"
# The campaign's find (2026-12-02): a second counter prefix after the first. The probe hands
# LegacySnatText the raw line (counter included); the target used to hand it LegacyLines' rest.
literal iptables_legacy_c "*nat\n[2:120]  [0:0] -A POSTROUTING -s fd00::/8 -j MASQUERADE\nCOMMIT\n"
literal proc_net_route "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
literal proc_net_netstat "TcpExt: SyncookiesSent IPReversePathFilter\nTcpExt: 0 417\nIpExt: InNoRoutes\nIpExt: 2\n"
seed node_cpu_list $F/nodes/*/sys/devices/system/cpu/online
literal node_cpu_list "0-3,8,10-11\n" "0\n" "0-65535\n"
seed iptables_save $F/iptables/*.txt
seed ipvsadm_list $F/ipvs/ln-* $F/ipvs/lnc-* $F/ipvs/rate-* $F/ipvs-nodes/*/exec/*
seed ipvsadm_stats $F/ipvs/stats-* $F/ipvs/ln-kube-proxy-ipvs-kind-tkng.txt
seed proc_ip_vs $F/ipvs/node_exporter-* $F/ipvs/prometheus-procfs-* $F/nodes/*/proc/net/ip_vs \
    $F/ipvs-nodes/*/proc/net/ip_vs
seed ip_vs_conn $F/ipvs/ip_vs_conn-*
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

# netlink_replay: the recording of tests/fixtures/nodes/recorded-netlink (made by
# tests/tools/record_netlink_node.sh), cut into small recordings: each exchange alone,
# and the exchanges each reader asks for together (the whole netfilter.txt, 200 KB,
# would make every run slow). route.txt (14 KB) whole.
mkdir -p corpus/netlink_replay
python3 - $F/nodes/recorded-netlink/netlink/netfilter.txt <<'PY'
import struct, sys
blocks = []
for l in open(sys.argv[1]):
    l = l.strip()
    if l.startswith(">"):
        blocks.append([l])
    elif l.startswith("<") and blocks:
        blocks[-1].append(l)
def kind(b):
    req = bytes.fromhex(b[0][1:].strip())
    ty = struct.unpack("=H", req[4:6])[0]
    return ty, req[16:]
def write(name, bs):
    open(f"corpus/netlink_replay/seed-{name}", "w").write("# a cut of recorded-netlink\n\n" + "\n\n".join("\n".join(b) for b in bs) + "\n")
for i, b in enumerate(blocks):
    write(f"exchange{i}", [b])
groups = {"snat": [], "nfacct": [], "ctnetlink": [], "conntrack": [], "count-tables": []}
for b in blocks:
    ty, p = kind(b)
    if ty == 0x0a10:
        groups["snat"].append(b)
        groups["count-tables"].append(b)
    if ty == 0x0a07 and any(c in p for c in (b"POSTROUTING", b"nat-postrouting", b"masquerading", b"MASQ", b"masquerade")):
        groups["snat"].append(b)
    if ty == 0x0701:
        groups["nfacct"].append(b)
    if ty in (0x0104, 0x0105):
        groups["ctnetlink"].append(b)
    if ty == 0x0101:
        groups["conntrack"].append(b)
    if ty in (0x0a01, 0x0a04, 0x0a0a):
        groups["count-tables"].append(b)
for name, bs in groups.items():
    write(name, bs)
PY
seed netlink_replay $F/nodes/recorded-netlink/netlink/route.txt
literal netlink_replay "# empty\n" "> 1400000001\n< 00\n\n> \n"

# nfacct: kube-proxy's object as nfnetlink_acct answers it (name, packets, bytes, use),
# taken from the recording's answer to NFNL_MSG_ACCT_GET, and a made one.
mkdir -p corpus/nfacct
python3 - $F/nodes/recorded-netlink/netlink/netfilter.txt <<'PY'
import struct, sys
def pad(b): return b + b"\0" * (-len(b) % 4)
def attr(t, v): return pad(struct.pack("=HH", 4 + len(v), t) + v)
lines = [l.strip() for l in open(sys.argv[1])]
for i, l in enumerate(lines):
    if l.startswith(">") and bytes.fromhex(l[1:].strip())[4:6] == struct.pack("=H", 0x0701):
        open("corpus/nfacct/seed-recorded", "wb").write(bytes.fromhex(lines[i + 1][1:].strip()))
p = b"\0\0\0\0" + attr(1, b"ct_state_invalid_dropped_pkts\0") + attr(2, struct.pack(">Q", 12)) + attr(3, struct.pack(">Q", 720)) + attr(4, struct.pack(">I", 1))
open("corpus/nfacct/seed-made", "wb").write(pad(struct.pack("=IHHII", 16 + len(p), 0x0700, 0, 1, 0) + p))
PY

# iptables_legacy_c: saves as `iptables-legacy-save -c` prints them ([packets:bytes] before
# each rule), made from kube-proxy's own expected rules (kube-proxy-corpus, with the
# nfacct match) and a kube-proxy v1.29 node's save (iptables/, with MASQUERADE --random-fully);
# the older nat drop (KUBE-XLB/KUBE-SVL, rule_counters/nat.rs) and source NAT rules with ports.
mkdir -p corpus/iptables_legacy_c
for f in $F/kube-proxy-corpus/iptables-TestOverallIPTablesRules.txt $F/iptables/kube-20x1-no-hint-no-canary-iptables-nft-save.txt; do
    awk '/^-A /{ n++; printf "[%d:%d] %s\n", n, n * 60, $0; next } { print }' "$f" \
        >"corpus/iptables_legacy_c/seed-$(basename "$f" .txt)"
done
literal iptables_legacy_c \
    '*nat\n:KUBE-XLB-AQI2S6QIMU7PVVRP - [0:0]\n:KUBE-SVL-XPGD46QRK7WJZT7O - [0:0]\n[11:660] -A KUBE-XLB-AQI2S6QIMU7PVVRP -m comment --comment "ns1/svc1:p80 has no local endpoints" -j KUBE-MARK-DROP\n[4:240] -A KUBE-SVL-XPGD46QRK7WJZT7O -m comment --comment "ns2/svc2:p80 has no local endpoints" -j KUBE-MARK-DROP\n[2:120] -A KUBE-XLB-4N57TFCL4MD7ZTDA -m comment --comment "default/nginx: has no local endpoints" -j KUBE-MARK-DROP\nCOMMIT\n' \
    '*nat\n:POSTROUTING ACCEPT [0:0]\n[0:0] -A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING\n[3:180] -A POSTROUTING -s 10.9.0.0/16 -p tcp -j MASQUERADE --to-ports 20000-20009\n[0:0] -A KUBE-POSTROUTING -j MASQUERADE --random-fully\n[1:60] -A POSTROUTING -j OTHER\n[0:0] -A OTHER -j SNAT --to-source 192.0.2.1:1000-2000\nCOMMIT\n' \
    '\x01*nat\n[0:0] -A POSTROUTING -s fd00::/8 -j SNAT --to-source [fd00::1]:1000-2000 --random-fully\n[0:0] -A POSTROUTING -j SNAT --to-source fd00::1\nCOMMIT\n*filter\n:KUBE-FORWARD - [0:0]\n[5:300] -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP\nCOMMIT\n'

# npd_findings: the /findings of every fixture node (the findings of expected.json,
# `since` given a time as the agent writes it), and an empty list.
mkdir -p corpus/npd_findings
python3 - $F/nodes/*/expected.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    fs = json.load(open(f)).get("findings", [])
    for x in fs:
        if x.get("since") == "<since>":
            x["since"] = "2026-11-30T12:00:00.000Z"
    open("corpus/npd_findings/seed-" + f.split("/")[-2], "w").write(json.dumps(fs, indent=2))
PY
literal npd_findings "[]" '[{"id":"probe_failed","severity":"warning","summary":"probe failed: conntrack","evidence":{"conntrack":"timed out"},"remediation":[]}]'

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
