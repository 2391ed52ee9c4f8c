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
