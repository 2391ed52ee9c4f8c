#!/usr/bin/env bash
# The suite's promise to the machine it runs on (issue 43): it changes nothing
# outside the network namespaces it creates. This records what a test could
# change by mistake in the current network namespace (run by tests/run.sh in the
# initial one), and compares it after the suite:
#
#   - the writable netfilter, neighbour and forwarding sysctls (nf_conntrack_max
#     and _buckets, gc_thresh*, ip_forward, rp_filter, ...);
#   - the rule sets: `nft -s list ruleset` (stateless: no counters), the saves of
#     both iptables backends and both families (counters zeroed, `#` lines
#     dropped: they carry the time);
#   - the loaded kernel modules (/proc/modules, where the kernel has module support).
#
#   bash tests/tools/host_guard.sh record FILE
#   bash tests/tools/host_guard.sh compare FILE     exit 1 and the difference when changed
#
# It asks only what is there: the legacy saves run only where the legacy tables
# exist (/proc/net/ip_tables_names), nft only where nf_tables is loaded or built
# in, so that the guard itself never makes the kernel load a module.
set -euo pipefail

state() {
    local f
    echo "## sysctls"
    for f in /proc/sys/net/netfilter/* /proc/sys/net/ipv4/neigh/default/gc_thresh* \
        /proc/sys/net/ipv6/neigh/default/gc_thresh* /proc/sys/net/ipv4/ip_forward \
        /proc/sys/net/ipv6/conf/all/forwarding /proc/sys/net/ipv4/conf/all/rp_filter \
        /proc/sys/net/ipv4/conf/default/rp_filter /proc/sys/net/ipv4/conf/all/route_localnet \
        /proc/sys/net/bridge/*; do
        [ -f "$f" ] && [ -w "$f" ] || continue
        printf '%s = %s\n' "${f#/proc/sys/}" "$(tr '\t' ' ' <"$f" 2>/dev/null || echo unreadable)"
    done
    echo "## modules"
    if [ -r /proc/modules ]; then
        cut -d' ' -f1 /proc/modules | sort
    else
        echo "(no module support: nothing can load a module)"
    fi
    echo "## nft -s list ruleset"
    if [ ! -r /proc/modules ] || grep -q '^nf_tables ' /proc/modules; then
        if command -v nft >/dev/null; then nft -s list ruleset; else echo "(no nft)"; fi
    else
        echo "(nf_tables not loaded)"
    fi
    local save
    for save in iptables-nft-save ip6tables-nft-save iptables-legacy-save ip6tables-legacy-save; do
        echo "## $save"
        case $save in
        iptables-legacy-save) [ -e /proc/net/ip_tables_names ] || { echo "(no legacy IPv4 tables)"; continue; } ;;
        ip6tables-legacy-save) [ -e /proc/net/ip6_tables_names ] || { echo "(no legacy IPv6 tables)"; continue; } ;;
        *) { [ ! -r /proc/modules ] || grep -q '^nf_tables ' /proc/modules; } || { echo "(nf_tables not loaded)"; continue; } ;;
        esac
        if command -v "$save" >/dev/null; then
            "$save" 2>&1 | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]/[0:0]/g' || true
        else
            echo "(no $save)"
        fi
    done
}

case "${1:-}" in
record)
    [ $# = 2 ] || { echo "usage: host_guard.sh record FILE" >&2; exit 2; }
    state >"$2"
    ;;
compare)
    [ $# = 2 ] || { echo "usage: host_guard.sh compare FILE" >&2; exit 2; }
    now=$(mktemp)
    trap 'rm -f "$now"' EXIT
    state >"$now"
    if ! diff -u --label "before the suite" --label "after the suite" "$2" "$now"; then
        echo "host_guard: the suite changed this network namespace (above: - before, + after)" >&2
        exit 1
    fi
    ;;
*)
    echo "usage: host_guard.sh record|compare FILE" >&2
    exit 2
    ;;
esac
