#!/usr/bin/env bash
# Regenerates the screenshots in docs/screenshots/ (not run by CI; needs tmux,
# chromium and python3: apt-get install tmux chromium python3):
#   check.png        `proxywatch check` on a fixture node, in an 80-column tmux pane,
#                    with a fake kube-proxy (real v1.21.1 metrics, IPVS mode) on loopback
#   status-page.png  the status page in headless Chromium, as tests/http/status_page.rs
#                    leaves it (a fixture node whose conntrack table grows, a fake
#                    kube-proxy whose syncs vary)
# Beside each PNG, its source: check.txt (the pane's text, the command on its first line)
# and status-page.findings.txt (each finding the page shows: its id, then its remediation
# steps, from the DOM the screenshot was taken of). tests/docs/screenshots.rs fails when the
# binary no longer prints those, so a stale picture is found. Look at both before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in tmux chromium python3; do
    command -v "$tool" >/dev/null || { echo "docs/screenshots.sh: $tool is not installed" >&2; exit 1; }
done
out=docs/screenshots
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() {
    tmux -L proxywatch-shots kill-server 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

cargo build --quiet
bin=$PWD/target/debug/proxywatch

chromium_shot() { # URL PNG WIDTH HEIGHT
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --user-data-dir="$work/profile" \
        --screenshot="$2" --window-size="$3,$4" "$1" 2>/dev/null
}

# A fake kube-proxy: its /metrics, /healthz and /proxyMode as files on a loopback port.
kp=$work/kube-proxy
mkdir -p "$kp"
cp tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom "$kp/metrics"
cp tests/fixtures/kube-proxy/v1.30-kind-nodeEligible-raesene-2024-06-16.json "$kp/healthz"
cp tests/fixtures/kube-proxy/ipvs.txt "$kp/proxyMode"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$kp" "$port" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/proxyMode')" 2>/dev/null && break
    sleep 0.1
done

# check, in a real terminal: 80 columns, as an SRE would run it.
node=ipvs-mode-sysctls-off
nodes=$PWD/tests/fixtures/nodes
tmux -L proxywatch-shots -f /dev/null new-session -d -s shot -x 80 -y 80 \
    "cd $nodes && env -i PATH=$nodes/$node/exec $bin check --host-root $node --node-name node-a \
     --kube-proxy.metrics-url http://127.0.0.1:$port --kube-proxy.healthz-url http://127.0.0.1:$port; \
     echo '[exit '\$?']'; sleep 600"
for _ in $(seq 100); do
    tmux -L proxywatch-shots capture-pane -p -t shot | grep -q '^\[exit ' && break
    sleep 0.1
done
tmux -L proxywatch-shots capture-pane -p -S - -t shot >"$work/check.txt"
tmux -L proxywatch-shots kill-server
python3 - "$work/check.txt" "$work/check.html" "$node" <<'PY'
import html, sys
lines = open(sys.argv[1]).read().rstrip("\n").split("\n")
while lines and not lines[-1].strip():
    lines.pop()
prompt = f"$ proxywatch check --host-root {sys.argv[3]} --node-name node-a ..."
body = html.escape("\n".join([prompt] + lines))
open(sys.argv[2], "w").write(
    "<!doctype html><meta charset=utf-8><style>html,body{margin:0;background:#1e1e1e}"
    "pre{margin:0;padding:12px 14px;color:#e8e8e8;font:14px/17px 'DejaVu Sans Mono',monospace}</style>"
    f"<pre>{body}</pre>")
PY
{ echo "$ proxywatch check --host-root $node --node-name node-a (kube-proxy: tests/fixtures/kube-proxy/v1.21.1-iptables-kind-datadog-integrations-core.prom, v1.30-kind-nodeEligible-raesene-2024-06-16.json, ipvs.txt)"
  python3 -c 'import sys; l=open(sys.argv[1]).read().rstrip("\n").split("\n")
while l and (not l[-1].strip() or l[-1].startswith("[exit ")): l.pop()
print("\n".join(x.rstrip() for x in l))' "$work/check.txt"; } >"$out/check.txt"
rows=$(python3 -c 'import sys; print(len(open(sys.argv[1]).read().rstrip().split("\n")) + 1)' "$work/check.txt")
chromium_shot "file://$work/check.html" "$out/check.png" 704 $((rows * 17 + 24))

# The status page: the browser test draws it from a live agent and leaves a screenshot.
cargo test --quiet --test http status_page::status_page_charts_equal_the_snapshot_history_in_chromium >/dev/null
cp "${CARGO_TARGET_DIR:-target}/status-page-charts.png" "$out/status-page.png"
python3 - "${CARGO_TARGET_DIR:-target}/status-page-charts.html" "$out/status-page.findings.txt" <<'PY'
import html, re, sys
dom = open(sys.argv[1]).read()
out = []
for art in re.findall(r'<article[^>]*>(.*?)</article>', dom, re.S):
    fid = re.search(r'<code>([a-z0-9_]+)</code>', art)
    if not fid:
        continue
    out.append(fid.group(1))
    ol = re.search(r'<ol class="remediation">(.*?)</ol>', art, re.S)
    for li in re.findall(r'<li>(.*?)</li>', ol.group(1) if ol else "", re.S):
        out.append("- " + html.unescape(li))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
echo "docs/screenshots.sh: wrote $out/check.png, $out/status-page.png and their sources"
