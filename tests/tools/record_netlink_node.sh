#!/bin/bash
# Records a fixture node whose goldens go through the netlink decoders
# (tests/fixtures/nodes/recorded-netlink/ unless given another directory).
#
# In a network namespace this script creates (and deletes on exit), it loads a
# kube-proxy-style iptables-nft rule set (gen_kube_rules.py, 8 services x 2
# endpoints), kube-proxy's nftables table (gen_kube_nft.py, 4 x 2), a veth
# eth0 with a node address, and 3 conntrack entries (`conntrack -I`); copies the
# node files the other fixture nodes have (/proc, /sys as the namespace shows
# them); then runs every probe once against that kernel with each netlink
# exchange recorded (agent/netlink/record.rs, test code only) into
# <node>/netlink/{netfilter,route}.txt, and keeps the generators' counts in
# <node>/recorded/ for the test that holds the goldens to them.
# Needs root, iptables-nft, nft, conntrack. Then:
#   PROXYWATCH_UPDATE_GOLDEN=1 cargo test --test offline fixture_nodes::
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
node=${1:-$repo/tests/fixtures/nodes/recorded-netlink}
ns=pwrec-$$
tmp=$(mktemp -d)
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
# Build first: a compile error must not leave the node half rewritten.
(cd "$repo" && cargo test --lib --no-run)
source "$repo/tests/tools/record_ns.sh"
make_record_ns
# As kube-proxy (and kubeadm's preflight) set them; all per namespace.
nse sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.route_localnet=1 \
    net.netfilter.nf_conntrack_tcp_timeout_established=86400 net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600

python3 "$repo/tests/tools/gen_kube_rules.py" --services 8 --endpoints 2 --expected "$tmp/iptables.json" >"$tmp/rules.txt"
nse iptables-nft-restore <"$tmp/rules.txt"
python3 "$repo/tests/tools/gen_kube_nft.py" --services 4 --endpoints 2 --expected "$tmp/nftables.json" >"$tmp/nft.txt"
nse nft -f "$tmp/nft.txt"

# A connection to svc-0's ClusterIP DNATed to one of its endpoints (10.244.0.1);
# one to svc-1's DNATed to 10.244.3.99, an endpoint no rule has (stale); one not NATed.
ct() { nse conntrack -I -p tcp -t 3600 --state ESTABLISHED "$@" >/dev/null 2>&1; }
ct -s 10.244.9.1 -d 10.96.0.10 --sport 40001 --dport 80 --dst-nat 10.244.0.1:8080
ct -s 10.244.9.1 -d 10.96.0.11 --sport 40002 --dport 80 --dst-nat 10.244.3.99:8080
ct -s 10.244.9.1 -d 10.244.9.2 --sport 40003 --dport 5000
nse conntrack -L 2>/dev/null | sort >"$tmp/conntrack.txt"

rm -rf "$node"/{proc,sys,lib,netlink,recorded}
mkdir -p "$node"/{netlink,recorded,exec}
touch "$node/exec/.keep"
# The node files the other fixture nodes have, as the namespace shows them.
for f in proc/modules proc/stat proc/net/stat/nf_conntrack proc/net/ip_vs proc/net/ip_tables_names \
    proc/net/ip6_tables_names proc/sys/kernel/osrelease proc/sys/net/bridge/bridge-nf-call-iptables \
    proc/sys/net/bridge/bridge-nf-call-ip6tables proc/sys/net/ipv4/ip_forward \
    proc/sys/net/ipv4/conf/all/route_localnet proc/sys/net/ipv4/ip_local_port_range \
    proc/sys/net/ipv4/ip_local_reserved_ports sys/devices/system/cpu/online; do
    if nse test -r "/$f"; then
        mkdir -p "$node/$(dirname "$f")"
        nse cat "/$f" >"$node/$f"
    fi
done
mkdir -p "$node/proc/sys/net/netfilter"
for f in $(nse find /proc/sys/net/netfilter -maxdepth 1 -type f -printf '%f\n'); do
    nse cat "/proc/sys/net/netfilter/$f" >"$node/proc/sys/net/netfilter/$f" 2>/dev/null || rm -f "$node/proc/sys/net/netfilter/$f"
done
# kube-proxy itself, whose rules these are: its process files, copied from
# kube-proxy-cgroup-v2-private-ns (hand-made there; a namespace has no kube-proxy to copy).
kp=$repo/tests/fixtures/nodes/kube-proxy-cgroup-v2-private-ns
for f in proc/4242/comm proc/4242/cmdline proc/4242/stat proc/stat; do
    mkdir -p "$node/$(dirname "$f")"
    cp "$kp/$f" "$node/$f"
done
for m in $(ls /sys/module); do
    mkdir -p "$node/sys/module/$m" && touch "$node/sys/module/$m/.keep"
done

cd "$repo"
nse env PROXYWATCH_RECORD_DIR="$node/netlink" cargo test --lib netlink::record::tests::record_a_fixture_node \
    -- --ignored --exact --nocapture
cp "$tmp/iptables.json" "$tmp/nftables.json" "$tmp/conntrack.txt" "$node/recorded/"
ls -l "$node/netlink"
