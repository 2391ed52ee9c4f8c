#!/bin/bash
# Records the netlink answers of fixture nodes whose story is in their files
# (every node under tests/fixtures/nodes/ but recorded-netlink, unless named):
# each node keeps its files, and its kernel is a network namespace this script
# creates (and deletes on exit) in the state those files do not contradict:
# loopback up and a veth eth0 with 192.168.50.10/24, no iptables or nftables
# rule, no conntrack entry, no kube-ipvs0 (with one, the IPVS nodes' virtual servers
# would make their mode ipvs, and kube-proxy, which no fixture runs, down). Every probe runs once with its files read under the
# node (so the requests recorded are the ones the node's files make the probes
# send) and each netlink exchange recorded (agent/netlink/record.rs, test code
# only) into <node>/netlink/{netfilter,route}.txt.
#
# A node with `recorded/conntrack-S.txt` (a user's real `conntrack -S` output) gets
# the kernel's answer to the per-CPU statistics request written from it
# (tests/tools/ct_stats_answer.py): no namespace can be made to drop packets.
# The neighbour tables' counters are the machine's (they are not per namespace).
# Needs root. Then:
#   PROXYWATCH_UPDATE_GOLDEN=1 cargo test --test offline fixture_nodes::
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
nodes=("$@")
if [ ${#nodes[@]} -eq 0 ]; then
    for d in "$repo"/tests/fixtures/nodes/*/; do
        n=$(basename "$d")
        [ "$n" = recorded-netlink ] || nodes+=("$n")
    done
fi
ns=pwrec-$$
source "$repo/tests/tools/record_ns.sh"
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
# Build first: a compile error must not leave a node half rewritten.
(cd "$repo" && cargo test --lib --no-run)
for n in "${nodes[@]}"; do
    node=$repo/tests/fixtures/nodes/$n
    [ -d "$node/proc" ] || { echo "$n: not a fixture node" >&2; exit 2; }
    make_record_ns
    rm -rf "$node/netlink"
    mkdir -p "$node/netlink"
    (cd "$repo" && nse env PROXYWATCH_RECORD_DIR="$node/netlink" PROXYWATCH_RECORD_ROOT="$node" \
        PROXYWATCH_RECORD_BY=tests/tools/record_fixture_kernels.sh \
        cargo test -q --lib netlink::record::tests::record_a_fixture_node -- --ignored --exact --nocapture)
    if [ -f "$node/recorded/conntrack-S.txt" ]; then
        python3 "$repo/tests/tools/ct_stats_answer.py" "$node/netlink/netfilter.txt" "$node/recorded/conntrack-S.txt"
    fi
    ip netns del "$ns"
    ls -l "$node/netlink"
done
