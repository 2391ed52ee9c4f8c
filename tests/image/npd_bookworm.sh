#!/usr/bin/env bash
# The NPD plugin where NPD runs: `proxywatch npd` inside a Debian 12 "bookworm" root filesystem
# (NPD's image is built on bookworm; overlays/npd copies the plugin into it), with no proxywatch
# image around it. debootstrap --variant=minbase bookworm (its packages cached under $WORK/debs,
# reusing build.sh's runtime cache when there is one), the binary copied into the tree, and
# chroot: the plugin must print its one line for each verdict (1 problem, 0 ok, 2 cannot tell)
# against an agent serving a fixture node on loopback (a chroot shares the network).
#
#   sudo bash tests/image/npd_bookworm.sh [BINARY]    (default target/release/proxywatch, else target/debug)
#
# Needs root (debootstrap, chroot). Measured: 41 s with build.sh's package cache (the debootstrap),
# 0.5 s once the tree is there; under 20 ms per plugin run. tests/run.sh runs it after the image
# build, beside the tests, on the debug binary. Env: PROXYWATCH_IMAGE_WORK as build.sh.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (tests/run.sh installs it)"
BIN=${1:-$REPO/target/release/proxywatch}
[ -x "$BIN" ] || BIN=$REPO/target/debug/proxywatch
[ -x "$BIN" ] || die "no proxywatch binary: cargo build first"

mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock 9
ROOT=$WORK/rootfs/npd-bookworm
DEBS=$WORK/debs/npd-bookworm
mkdir -p "$DEBS"
[ -d "$WORK/debs/runtime" ] && cp -n "$WORK/debs/runtime/"*.deb "$DEBS/" 2>/dev/null || true
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -1 || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
if [ ! -f "$ROOT/.complete" ]; then
    rm -rf "$ROOT"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        --cache-dir="$DEBS" bookworm "$ROOT" "$mirror" >"$WORK/logs-npd-bookworm.log" 2>&1 ||
        { tail -5 "$WORK/logs-npd-bookworm.log" >&2; die "debootstrap bookworm failed"; }
    touch "$ROOT/.complete"
fi
grep -q '^12\.' "$ROOT/etc/debian_version" || die "not bookworm: $(cat "$ROOT/etc/debian_version")"
mkdir -p "$ROOT/opt/proxywatch"
install -m 0755 "$BIN" "$ROOT/opt/proxywatch/proxywatch"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" serve --listen="127.0.0.1:$port" --node-name fixture \
    --host-root "$REPO/tests/fixtures/nodes/conntrack-near-full-drops" \
    --kube-proxy.metrics-url http://127.0.0.1:1 --kube-proxy.healthz-url http://127.0.0.1:1 \
    >"$WORK/agent-npd-bookworm.log" 2>&1 &
agent=$!
trap 'kill "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/findings" >/dev/null 2>&1 && break
    sleep 0.1
done
plugin() { # want_exit want_line_prefix args...
    local want=$1 prefix=$2 line rc
    shift 2
    set +e
    line=$(chroot "$ROOT" /opt/proxywatch/proxywatch npd "$@")
    rc=$?
    set -e
    echo "chroot bookworm: proxywatch npd $* -> exit $rc: $line"
    [ "$rc" = "$want" ] || die "exit $rc, want $want"
    case "$line" in "$prefix"*) ;; *) die "line $line, want $prefix..." ;; esac
}
plugin 1 "critical: conntrack_table_fill" --from="http://127.0.0.1:$port" --area=conntrack
plugin 0 "ok:" --from="http://127.0.0.1:$port" --area=kube-proxy
kill "$agent"
wait "$agent" 2>/dev/null || true
plugin 2 "unknown: agent not answering" --from="http://127.0.0.1:$port"
echo "PASS: the plugin runs in bookworm ($(chroot "$ROOT" /lib/x86_64-linux-gnu/libc.so.6 | head -1))"
