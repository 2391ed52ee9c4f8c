#!/usr/bin/env bash
# Checks of the deployment files: manifests/, the Dockerfile, the alert rules and
# their runbook, the Grafana dashboard.
#
#   bash tests/manifests/check.sh
#
# Installs what it needs (pinned) on a fresh Debian 12 machine, as root:
#   - Python tools in a venv under $PROXYWATCH_CHECK_CACHE (default
#     ~/.cache/proxywatch-check), from tests/manifests/requirements.txt, with uv
#     (much faster than pip; installed by pip, pinned);
#   - promtool from Debian's prometheus package, extracted from the .deb
#     (not installed: no service is started, no dependency pulled in).
# kustomize: `kubectl kustomize` when kubectl is there (it is on this project's
# machines), else the Python renderer render_overlay.py; both when possible,
# and their outputs must agree.
#
# Exits non-zero if any check fails; the last line is "N passed, M failed".
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${PROXYWATCH_CHECK_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/proxywatch-check}
UV_VERSION=0.13.8
PROMETHEUS_DEB_VERSION=2.42.0+ds-5+deb12u1   # Debian 12 (bookworm)
KUBE_VERSIONS=(1.32.0 1.37.0)               # oldest still common, newest in kubernetes-validate
WORK=$(mktemp -d /tmp/proxywatch-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

passed=0
failed=0
failures=()
START=$(date +%s)

log() { printf '\n=== %s\n' "$*"; }
# step NAME CMD...: run a check, record the result, never abort the script.
step() {
    local name=$1
    shift
    log "$name"
    if "$@"; then
        echo "--- PASS: $name"
        passed=$((passed + 1))
    else
        echo "--- FAIL: $name"
        failed=$((failed + 1))
        failures+=("$name")
    fi
}
die() {
    echo "check.sh: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
}

# ---------------------------------------------------------------- tools
log "setting up tools in $CACHE"
mkdir -p "$CACHE"
REQ_HASH=$( (cat "$HERE/requirements.txt"; echo "uv=$UV_VERSION"; python3 --version) | sha256sum | cut -c1-12)
VENV=$CACHE/venv-$REQ_HASH
if [ ! -x "$VENV/bin/checkov" ] || [ ! -f "$VENV/.complete" ]; then
    rm -rf "$VENV"
    t0=$(date +%s)
    python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv?)"
    "$VENV/bin/pip" install -q --disable-pip-version-check --cache-dir "$CACHE/pip" "uv==$UV_VERSION" \
        || die "pip install uv failed"
    UV_CACHE_DIR="$CACHE/uv" "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -r "$HERE/requirements.txt" \
        || die "installing $HERE/requirements.txt failed"
    touch "$VENV/.complete"
    echo "venv ready in $(($(date +%s) - t0)) s"
fi
PY=$VENV/bin/python
export PATH="$VENV/bin:$PATH"

PROMTOOL=
# PROXYWATCH_CHECK_NO_SYSTEM_PROMTOOL=1 ignores a promtool on PATH (to test the download).
if [ -z "${PROXYWATCH_CHECK_NO_SYSTEM_PROMTOOL:-}" ] && command -v promtool >/dev/null 2>&1 && promtool --version 2>&1 | grep -q "revision: $PROMETHEUS_DEB_VERSION"; then
    PROMTOOL=$(command -v promtool)
elif [ -x "$CACHE/prometheus-$PROMETHEUS_DEB_VERSION/usr/bin/promtool" ]; then
    PROMTOOL=$CACHE/prometheus-$PROMETHEUS_DEB_VERSION/usr/bin/promtool
else
    t0=$(date +%s)
    dl=$WORK/deb
    mkdir -p "$dl"
    version=$PROMETHEUS_DEB_VERSION
    if ! apt-cache show "prometheus=$version" >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
    fi
    if ! apt-cache show "prometheus=$version" >/dev/null 2>&1; then
        # A Debian update superseded the pinned version: take the current one
        # of the same release, loudly.
        version=$(apt-cache policy prometheus | awk '/Candidate:/ {print $2}')
        echo "WARNING: prometheus=$PROMETHEUS_DEB_VERSION is gone from the archive, using $version; update PROMETHEUS_DEB_VERSION"
    fi
    [ -n "$version" ] && [ "$version" != "(none)" ] || die "no prometheus package in the apt sources"
    (cd "$dl" && apt-get download -q "prometheus=$version" >/dev/null 2>&1) || die "apt-get download prometheus=$version failed"
    dpkg-deb -x "$dl"/prometheus_*.deb "$WORK/prometheus" || die "dpkg-deb -x failed"
    mkdir -p "$CACHE/prometheus-$PROMETHEUS_DEB_VERSION/usr/bin"
    install -m 0755 "$WORK/prometheus/usr/bin/promtool" "$CACHE/prometheus-$PROMETHEUS_DEB_VERSION/usr/bin/promtool"
    PROMTOOL=$CACHE/prometheus-$PROMETHEUS_DEB_VERSION/usr/bin/promtool
    echo "promtool $version extracted in $(($(date +%s) - t0)) s"
fi

KUSTOMIZE=()
if command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1; then
    KUSTOMIZE=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
    KUSTOMIZE=(kustomize build)
fi

echo "python:     $("$PY" --version)"
echo "promtool:   $("$PROMTOOL" --version 2>&1 | head -1) ($PROMTOOL)"
echo "checkov:    $(checkov --version 2>/dev/null)"
echo "hadolint:   $(hadolint --version)"
echo "kubernetes-validate: $(kubernetes-validate --version 2>&1)"
echo "kustomize:  ${KUSTOMIZE[*]:-none (Python fallback renderer only)}"
echo "tools ready after $(($(date +%s) - START)) s"

cd "$ROOT" || die "cannot cd to $ROOT"

# ---------------------------------------------------------------- deploy steps (README)
# The README's Deploy section, step 2, on a copy of manifests/: the image the user built is
# set, and the manifests render with it. manifests/ as committed (the placeholder image)
# must not render. The copy with the image set is what the checks below render.
USER_IMAGE=registry.example.com/team/proxywatch:1.2.3
DEPLOY=$WORK/deploy/manifests
# image_of FILE: the proxywatch container's image in a rendered file; fails on an all-zero digest.
image_of() {
    "$PY" - "$1" <<'PYEOF'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch"]
images = [c["image"] for d in docs for c in ((d.get("spec") or {}).get("template", {}).get("spec") or {}).get("containers", [])]
zero = [i for i in images if re.search(r"@sha256:0{64}$", i)]
if zero:
    sys.exit(f"placeholder digest (all zeros) in {zero}")
print([c["image"] for c in ds[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "proxywatch"][0])
PYEOF
}
deploy_steps() {
    local rc=0 out got
    # manifests/ as committed: refused by both renderers, with kustomize's message, which is
    # the guard's text: what to set, where, and where the steps are.
    local want="options.index 1 is out of bounds for value the proxywatch image is not set. Set it in manifests/kustomization.yaml with an images entry"
    local want_end="See docs/deploy.md. The image needs a tag or a digest; it is now >> proxywatch"
    [ -f docs/deploy.md ] || { echo "the guard's message points to docs/deploy.md, which does not exist"; rc=1; }
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        if out=$("${KUSTOMIZE[@]}" manifests 2>&1); then
            echo "${KUSTOMIZE[*]} rendered manifests/ with the placeholder image"
            rc=1
        elif ! grep -qF "$want" <<<"$out" || ! grep -qF "$want_end" <<<"$out"; then
            echo "${KUSTOMIZE[*]} manifests failed otherwise: $out"
            rc=1
        else
            echo "${KUSTOMIZE[*]} manifests (image unset): refused: $want"
        fi
    fi
    if out=$("$PY" "$HERE/render_overlay.py" "$WORK/unset.yaml" --no-component 2>&1); then
        echo "render_overlay.py rendered manifests/ with the placeholder image"
        rc=1
    elif ! grep -qF "$want" <<<"$out" || ! grep -qF "$want_end" <<<"$out"; then
        echo "render_overlay.py failed otherwise: $out"
        rc=1
    else
        echo "render_overlay.py (image unset): refused"
    fi
    # Step 2 as the README writes it: its YAML block (REGISTRY/proxywatch:TAG substituted)
    # added to a copy's kustomization.yaml.
    rm -rf "$WORK/deploy" && mkdir -p "$WORK/deploy" && cp -r manifests "$DEPLOY" || return 1
    echo >>"$DEPLOY/kustomization.yaml"
    "$PY" - "$ROOT/README.md" "$USER_IMAGE" >>"$DEPLOY/kustomization.yaml" <<'PYEOF' || return 1
import sys
text = open(sys.argv[1], encoding="utf-8").read()
marker = "<!-- deploy-images"
if marker not in text:
    sys.exit("README.md: no <!-- deploy-images --> block in Deploy")
block = text[text.index(marker):].split("```yaml\n", 1)[1].split("```", 1)[0]
repo, tag = sys.argv[2].rsplit(":", 1)
if "REGISTRY/proxywatch" not in block or "TAG" not in block:
    sys.exit(f"README.md: the images block does not use REGISTRY/proxywatch and TAG:\n{block}")
print(block.replace("REGISTRY/proxywatch", repo).replace("TAG", tag), end="")
PYEOF
    echo "+ README step 2 (its YAML block) on a copy of manifests/:"
    sed -n '/^images:/,$p' "$DEPLOY/kustomization.yaml"
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        "${KUSTOMIZE[@]}" "$DEPLOY" >"$WORK/deploy-kustomize.yaml" || return 1
        got=$(image_of "$WORK/deploy-kustomize.yaml") || return 1
        [ "$got" = "$USER_IMAGE" ] || { echo "${KUSTOMIZE[*]}: image $got, want $USER_IMAGE"; rc=1; }
        echo "${KUSTOMIZE[*]}: the DaemonSet runs $got"
    fi
    "$PY" "$HERE/render_overlay.py" "$WORK/deploy-py.yaml" --base "$DEPLOY" --no-component || return 1
    got=$(image_of "$WORK/deploy-py.yaml") || return 1
    [ "$got" = "$USER_IMAGE" ] || { echo "render_overlay.py: image $got, want $USER_IMAGE"; rc=1; }
    echo "render_overlay.py: the DaemonSet runs $got"
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        "$PY" "$HERE/same_objects.py" "$WORK/deploy-kustomize.yaml" "$WORK/deploy-py.yaml" || rc=1
    fi
    # Step 2 with the kustomize CLI: the command line as the README writes it.
    local line
    line=$(grep -E '^kustomize edit set image proxywatch=REGISTRY/proxywatch:TAG$' "$ROOT/README.md") ||
        { echo "README.md: no 'kustomize edit set image proxywatch=REGISTRY/proxywatch:TAG' line"; return 1; }
    if command -v kustomize >/dev/null 2>&1; then
        local k=$WORK/deploy-edit
        rm -rf "$k" && cp -r manifests "$k" || return 1
        (cd "$k" && kustomize edit set image "proxywatch=$USER_IMAGE") || return 1
        kustomize build "$k" >"$WORK/deploy-edit.yaml" || return 1
        got=$(image_of "$WORK/deploy-edit.yaml") || return 1
        [ "$got" = "$USER_IMAGE" ] || { echo "kustomize edit set image: image $got, want $USER_IMAGE"; rc=1; }
        echo "kustomize edit set image: the DaemonSet runs $got"
    else
        echo "NOTE: no kustomize CLI here: '$line' not run (the YAML block above is what it writes)"
    fi
    return $rc
}
step "deploy: manifests/ with the placeholder image does not render; README step 2 renders the user's image" deploy_steps

# ---------------------------------------------------------------- local deploy steps (docs/deploy.md)
# docs/deploy.md's kind/minikube path on a copy of manifests/: the tag docker builds is the one
# kind and minikube load, its images block sets exactly that registry-less image, and both
# renderers render it with a pull policy that uses the loaded image. An image without a tag
# (newName only) must still be refused.
deploy_local() {
    local rc=0 k=$WORK/deploy-local/manifests built got
    rm -rf "$WORK/deploy-local" && mkdir -p "$WORK/deploy-local" && cp -r manifests "$k" || return 1
    built=$("$PY" - "$ROOT/docs/deploy.md" "$k/kustomization.yaml" <<'PYEOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
def block(marker, lang):
    if marker not in text:
        sys.exit(f"docs/deploy.md: no {marker} block")
    return text[text.index(marker):].split(f"```{lang}\n", 1)[1].split("```", 1)[0]
steps = block("<!-- deploy-local:", "sh")
build = re.findall(r"^docker build -t (\S+) \.$", steps, re.M)
loads = re.findall(r"^(?:kind load docker-image|minikube image load) (\S+)$", steps, re.M)
if len(build) != 1 or len(loads) != 2:
    sys.exit(f"docs/deploy.md: want one `docker build -t IMAGE .` and a kind and a minikube load, got {build} {loads}")
if any(l != build[0] for l in loads):
    sys.exit(f"docs/deploy.md: builds {build[0]} but loads {loads}")
if "/" in build[0] or ":" not in build[0]:
    sys.exit(f"docs/deploy.md: the local image {build[0]} should be registry-less and tagged")
images = block("<!-- deploy-local-images", "yaml")
with open(sys.argv[2], "a", encoding="utf-8") as f:
    f.write("\n" + images)
print(build[0])
PYEOF
) || return 1
    echo "+ docs/deploy.md: docker build -t $built; kind/minikube load $built; its images block:"
    sed -n '/^images:/,$p' "$k/kustomization.yaml"
    # check_image FILE RENDERER: the DaemonSet runs the built image, never pulled from a registry.
    check_image() {
        "$PY" - "$1" "$built" "$2" <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch"][0]
c = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "proxywatch"][0]
if c["image"] != sys.argv[2]:
    sys.exit(f"{sys.argv[3]}: the DaemonSet runs {c['image']}, docs/deploy.md built {sys.argv[2]}")
if c.get("imagePullPolicy") not in ("IfNotPresent", "Never"):
    sys.exit(f"{sys.argv[3]}: imagePullPolicy {c.get('imagePullPolicy')} would pull {c['image']} from a registry")
print(f"{sys.argv[3]}: the DaemonSet runs {c['image']} ({c['imagePullPolicy']}), as loaded")
PYEOF
    }
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        "${KUSTOMIZE[@]}" "$k" >"$WORK/local-kustomize.yaml" || return 1
        check_image "$WORK/local-kustomize.yaml" "${KUSTOMIZE[*]}" || rc=1
    fi
    "$PY" "$HERE/render_overlay.py" "$WORK/local-py.yaml" --base "$k" --no-component >/dev/null || return 1
    check_image "$WORK/local-py.yaml" render_overlay.py || rc=1
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        "$PY" "$HERE/same_objects.py" "$WORK/local-kustomize.yaml" "$WORK/local-py.yaml" || rc=1
    fi
    # An image with neither tag nor digest is refused, with the guard's message.
    local n=$WORK/deploy-notag
    rm -rf "$n" && cp -r manifests "$n" && printf '\nimages:\n  - name: proxywatch\n    newName: registry.example.com/proxywatch\n' >>"$n/kustomization.yaml"
    local out
    if out=$("$PY" "$HERE/render_overlay.py" "$WORK/notag.yaml" --base "$n" --no-component 2>&1); then
        echo "render_overlay.py rendered an image without a tag or digest"; rc=1
    elif ! grep -qF "it is now >> registry.example.com/proxywatch" <<<"$out"; then
        echo "render_overlay.py refused the untagged image otherwise: $out"; rc=1
    fi
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        if out=$("${KUSTOMIZE[@]}" "$n" 2>&1); then
            echo "${KUSTOMIZE[*]} rendered an image without a tag or digest"; rc=1
        elif ! grep -qF "it is now >> registry.example.com/proxywatch" <<<"$out"; then
            echo "${KUSTOMIZE[*]} refused the untagged image otherwise: $out"; rc=1
        else
            echo "${KUSTOMIZE[*]}: an image without a tag or digest is refused with the guard's message"
        fi
    fi
    return $rc
}
step "deploy (local, docs/deploy.md): a registry-less tag loaded into kind/minikube renders; no tag is refused" deploy_local

# ---------------------------------------------------------------- render the overlay
OVERLAY=$WORK/overlay.yaml
render_overlay() {
    # The rbac-proxy overlay is a kustomize Component: render it from a
    # kustomization outside the repository (kustomize refuses relative roots
    # that contain each other, and absolute resource paths), on the copy of
    # manifests/ whose image the deploy step set.
    [ -f "$DEPLOY/kustomization.yaml" ] || { echo "no $DEPLOY (the deploy step failed)"; return 1; }
    local k=$WORK/kz
    mkdir -p "$k"
    local rel
    rel=$("$PY" -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$DEPLOY" "$k")
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s/overlays/rbac-proxy\n' \
        "$rel" "$rel" >"$k/kustomization.yaml"
    "$PY" "$HERE/render_overlay.py" "$WORK/overlay-py.yaml" --base "$DEPLOY" || return 1
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        echo "+ ${KUSTOMIZE[*]} (manifests/ with the image set + component overlays/rbac-proxy)"
        "${KUSTOMIZE[@]}" "$k" >"$OVERLAY" || return 1
        echo "+ comparing with render_overlay.py"
        "$PY" "$HERE/same_objects.py" "$OVERLAY" "$WORK/overlay-py.yaml" || return 1
        echo "kustomize and render_overlay.py agree ($(grep -c '^kind:' "$OVERLAY") objects)"
    else
        echo "NOTE: no kubectl/kustomize on this machine: using render_overlay.py's output only"
        cp "$WORK/overlay-py.yaml" "$OVERLAY"
    fi
    # Every image of the overlay is a real reference (no all-zero digest).
    image_of "$OVERLAY" >/dev/null
}
step "render manifests/ + overlays/rbac-proxy (kustomize and Python renderer)" render_overlay
[ -s "$OVERLAY" ] || cp "$WORK/overlay-py.yaml" "$OVERLAY" 2>/dev/null || true

# ---------------------------------------------------------------- render the npd component
# overlays/npd is rendered the same way (a kustomization outside the repository
# with the image set in the base). It uses a configMapGenerator, which the Python
# renderer does not model: kustomize is required here, and its absence fails.
NPD_OVERLAY=$WORK/npd-overlay.yaml
render_npd() {
    [ ${#KUSTOMIZE[@]} -gt 0 ] || { echo "no kubectl/kustomize: overlays/npd needs kustomize (configMapGenerator)"; return 1; }
    [ -f "$DEPLOY/kustomization.yaml" ] || { echo "no $DEPLOY (the deploy step failed)"; return 1; }
    local k=$WORK/kz-npd rel
    mkdir -p "$k"
    rel=$("$PY" -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$DEPLOY" "$k")
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s/overlays/npd\n' \
        "$rel" "$rel" >"$k/kustomization.yaml"
    echo "+ ${KUSTOMIZE[*]} (manifests/ with the image set + component overlays/npd)"
    "${KUSTOMIZE[@]}" "$k" >"$NPD_OVERLAY" || return 1
    "$PY" - "$NPD_OVERLAY" "$USER_IMAGE" "$ROOT/manifests/overlays/npd/proxywatch-monitor.json" <<'PYEOF'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
want_image, monitor = sys.argv[2], open(sys.argv[3]).read()
ds = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch-node-problem-detector"][0]
pod = ds["spec"]["template"]["spec"]
init = [c for c in pod["initContainers"] if c["name"] == "install-proxywatch"][0]
assert init["image"] == want_image, f"init container image {init['image']}, want {want_image} (the agent's)"
cm_name = [v for v in pod["volumes"] if v["name"] == "config"][0]["configMap"]["name"]
cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name][0]
assert cm["data"]["proxywatch-monitor.json"] == monitor, "the ConfigMap is not proxywatch-monitor.json"
rules = json.loads(monitor)["rules"]
npd = [c for c in pod["containers"] if c["name"] == "node-problem-detector"][0]
mounts = {m["name"]: m["mountPath"] for m in npd["volumeMounts"]}
assert all(r["path"].startswith(mounts["plugin"] + "/") for r in rules), "a rule's path is outside the plugin volume"
print(f"NPD DaemonSet: plugin from {init['image']}, ConfigMap {cm_name} = proxywatch-monitor.json ({len(rules)} rules)")
PYEOF
}
step "render manifests/ + overlays/npd (kustomize; the init container runs the agent's image)" render_npd

# ---------------------------------------------------------------- image guard
# The guard wants a tag or a digest after the image's last '/': a registry port is no tag
# (host:5000/name is :latest). Both renderers, the same verdicts and messages.
image_guard() {
    local rc=0 d spec out want r ren got
    d=$(printf 'a%.0s' $(seq 64))
    local renderers=(py)
    [ ${#KUSTOMIZE[@]} -gt 0 ] && renderers+=(kustomize)
    # newName|newTag|digest|expected: ok, or the text the refusal must contain
    while IFS='|' read -r g_name tag dig want; do
        r=$WORK/guard && rm -rf "$r" && cp -r manifests "$r" || return 1
        {
            printf '\nimages:\n  - name: proxywatch\n'
            [ -n "$g_name" ] && echo "    newName: $g_name"
            [ -n "$tag" ] && echo "    newTag: \"$tag\""
            [ -n "$dig" ] && echo "    digest: sha256:$d"
        } >>"$r/kustomization.yaml"
        spec="newName=${g_name:--} newTag=${tag:--} digest=${dig:+sha256:...}"
        for ren in "${renderers[@]}"; do
            if [ "$ren" = py ]; then
                out=$("$PY" "$HERE/render_overlay.py" "$WORK/guard.yaml" --base "$r" --no-component 2>&1)
            else
                out=$("${KUSTOMIZE[@]}" "$r" 2>&1 >"$WORK/guard.yaml")
            fi
            got=$?
            if [ "$want" = ok ]; then
                if [ $got -ne 0 ]; then
                    echo "$ren refused $spec: $out"
                    rc=1
                elif ! image_of "$WORK/guard.yaml" >/dev/null; then
                    rc=1
                fi
            elif [ $got -eq 0 ]; then
                echo "$ren rendered $spec (no tag or digest after the last /)"
                rc=1
            elif ! grep -qF -- "$want" <<<"$out"; then
                echo "$ren refused $spec without \"$want\": $out"
                rc=1
            fi
        done
        echo "$spec: ${renderers[*]}: ${want}"
    done <<'GUARDS'
registry.local:5000/proxywatch|||After the registry the image is now >> /proxywatch
registry.local:5000/team/proxywatch|||After the registry the image is now >> /team/proxywatch
registry.local:5000/proxywatch|1.2.3||ok
registry.local:5000/proxywatch||d|ok
registry.local:5000/team/proxywatch|1.2.3|d|ok
localhost:5000/proxywatch|dev||ok
registry.example.com/proxywatch|||it is now >> registry.example.com/proxywatch
registry.example.com/team/proxywatch||d|ok
|dev||ok
GUARDS
    return $rc
}
step "image guard: a tag or digest after the last / (host:5000/name refused, :tag and @sha256: rendered)" image_guard

# ---------------------------------------------------------------- combinations
# The base alone, each component, and the components together (both orders), rendered by
# kustomize from a kustomization outside the repository, then checked by check_rendered.py:
# DaemonSets on Linux only, NPD able to read the agent, Prometheus' discovery RBAC. The same
# checker must refuse the broken variants built below from those renders.
COMBOS=$WORK/combos
PROM_SA=monitoring/prometheus-k8s
# name:components (comma-separated, in order):checker args
COMBO_LIST=(
    "base::"
    "rbac-proxy:rbac-proxy:"
    "npd:npd:"
    "kube-prometheus:kube-prometheus:--prometheus $PROM_SA"
    "npd+rbac-proxy:npd,rbac-proxy:"
    "rbac-proxy+npd:rbac-proxy,npd:"
    "all:rbac-proxy,npd,kube-prometheus:--prometheus $PROM_SA"
)
render_combo() { # NAME COMPONENTS [EXTRA-KUSTOMIZATION-TEXT]: renders to $COMBOS/NAME.yaml
    local name=$1 comps=$2 extra=${3:-} k=$COMBOS/kz-$1 rel c
    mkdir -p "$k"
    rel=$("$PY" -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$DEPLOY" "$k")
    {
        printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n' "$rel"
        if [ -n "$comps" ]; then
            echo "components:"
            for c in ${comps//,/ }; do echo "  - $rel/overlays/$c"; done
        fi
        printf '%s' "$extra"
    } >"$k/kustomization.yaml"
    "${KUSTOMIZE[@]}" "$k" >"$COMBOS/$name.yaml"
}
combinations() {
    [ ${#KUSTOMIZE[@]} -gt 0 ] || { echo "no kubectl/kustomize: the npd component needs kustomize"; return 1; }
    [ -f "$DEPLOY/kustomization.yaml" ] || { echo "no $DEPLOY (the deploy step failed)"; return 1; }
    mkdir -p "$COMBOS"
    local rc=0 entry name comps cargs
    for entry in "${COMBO_LIST[@]}"; do
        IFS=: read -r name comps cargs <<<"$entry"
        echo "+ render ${name} (components: ${comps:-none})"
        render_combo "$name" "$comps" || { rc=1; continue; }
        # shellcheck disable=SC2086
        "$PY" "$HERE/check_rendered.py" $cargs "$COMBOS/$name.yaml" || rc=1
    done
    # Another Prometheus ServiceAccount, by the patch overlays/kube-prometheus documents.
    local patch
    patch=$("$PY" - "$ROOT/manifests/overlays/kube-prometheus/kustomization.yaml" <<'PYEOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
i = lines.index("#     patches:")
out = []
for l in lines[i:]:
    if not l.startswith("#     "):
        break
    out.append(l[6:])
print("\n".join(out))
PYEOF
) || return 1
    render_combo kube-prometheus-other-sa kube-prometheus "$patch"$'\n' || return 1
    "$PY" "$HERE/check_rendered.py" --prometheus observability/prometheus "$COMBOS/kube-prometheus-other-sa.yaml" || rc=1
    if "$PY" "$HERE/check_rendered.py" --prometheus "$PROM_SA" "$COMBOS/kube-prometheus-other-sa.yaml" 2>/dev/null; then
        echo "the documented patch left $PROM_SA bound"
        rc=1
    fi
    # Every render is valid Kubernetes.
    local v f out
    for v in "${KUBE_VERSIONS[@]}"; do
        for entry in "${COMBO_LIST[@]}"; do
            f=$COMBOS/${entry%%:*}.yaml
            out=$(kubernetes-validate --strict --quiet -k "$v" "$f" 2>&1) || true
            echo "$out" | grep -v "Couldn't find schema for kind \(ServiceMonitor\|PodMonitor\|PrometheusRule\|Issuer\|Certificate\)" || true
            if echo "$out" | grep -q "^ERROR"; then rc=1; fi
        done
        echo "${#COMBO_LIST[@]} renders validated against Kubernetes $v"
    done
    return $rc
}
step "render base, each component and components together; DaemonSets on Linux, NPD reaches the agent, Prometheus RBAC" combinations

broken_combinations() {
    # check_rendered.py refuses what the issue found broken, each with its message.
    [ -s "$COMBOS/all.yaml" ] || { echo "no renders (the combinations step failed)"; return 1; }
    local rc=0 name edit want out
    while IFS='|' read -r name want edit; do
        "$PY" - "$COMBOS/all.yaml" "$COMBOS/broken-$name.yaml" "$edit" <<'PYEOF' || return 1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    exec(sys.argv[3], {"d": d})
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PYEOF
        if out=$("$PY" "$HERE/check_rendered.py" --prometheus "$PROM_SA" "$COMBOS/broken-$name.yaml" 2>&1); then
            echo "check_rendered.py accepted $name"
            rc=1
        elif ! grep -qF -- "$want" <<<"$out"; then
            echo "check_rendered.py refused $name without \"$want\": $out"
            rc=1
        else
            echo "$name: refused: ...$want..."
        fi
    done <<'BROKEN'
npd-via-node-address-behind-rbac-proxy|kube-rbac-proxy's HTTPS port|if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch-node-problem-detector": s = d["spec"]["template"]["spec"]; s.pop("hostNetwork"); [e.update(value="http://$(HOST_IP):9877") for e in s["containers"][0]["env"] if e["name"] == "PROXYWATCH_NPD_FROM"]
npd-loopback-off-host-network|NPD needs hostNetwork|if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch-node-problem-detector": d["spec"]["template"]["spec"].pop("hostNetwork")
npd-over-https|plain http only|if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch-node-problem-detector": [e.update(value="https://127.0.0.1:9877") for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "PROXYWATCH_NPD_FROM"]
windows-too|would be scheduled on Windows nodes|if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "proxywatch": d["spec"]["template"]["spec"].pop("nodeSelector")
no-endpointslices|may not get/list/watch ['discovery.k8s.io/endpointslices']|if d["kind"] == "Role": d["rules"] = d["rules"][:1]
no-watch|may not get/list/watch|if d["kind"] == "Role": [r.update(verbs=["get", "list"]) for r in d["rules"]]
BROKEN
    return $rc
}
step "check_rendered.py refuses the broken combinations (NPD on the node address behind rbac-proxy, Windows, RBAC short)" broken_combinations

# ---------------------------------------------------------------- YAML / structure
step "YAML/JSON syntax, labels, namespaces, DaemonSet policy, CRD schemas, dashboard structure" \
    "$PY" "$HERE/lint_files.py" "$OVERLAY"

# ---------------------------------------------------------------- kubernetes-validate
BASE_FILES=(manifests/namespace.yaml manifests/serviceaccount.yaml manifests/daemonset.yaml manifests/service.yaml
    manifests/overlays/rbac-proxy/clusterrole.yaml manifests/overlays/rbac-proxy/clusterrolebinding.yaml
    manifests/overlays/rbac-proxy/clusterrole-metrics-reader.yaml
    manifests/overlays/npd/serviceaccount.yaml manifests/overlays/npd/clusterrole.yaml
    manifests/overlays/npd/clusterrolebinding.yaml manifests/overlays/npd/daemonset.yaml
    manifests/overlays/kube-prometheus/role.yaml manifests/overlays/kube-prometheus/rolebinding.yaml)
k8s_validate() {
    local v out rc=0
    echo "NOTE: ServiceMonitor, PodMonitor, PrometheusRule, Issuer and Certificate are CRDs without a schema in"
    echo "      kubernetes-validate; they are checked by lint_files.py's schemas and by promtool instead (skipped here)."
    for v in "${KUBE_VERSIONS[@]}"; do
        echo "+ kubernetes-validate --strict --quiet -k $v ${BASE_FILES[*]} <rendered overlay> <rendered npd overlay>"
        out=$(kubernetes-validate --strict --quiet -k "$v" "${BASE_FILES[@]}" "$OVERLAY" "$NPD_OVERLAY" 2>&1) || rc=1
        echo "$out" | grep -v "Couldn't find schema for kind \(ServiceMonitor\|PodMonitor\|PrometheusRule\|Issuer\|Certificate\)" || true
        if echo "$out" | grep -q "^ERROR"; then rc=1; fi
        echo "$((${#BASE_FILES[@]} + 2)) files validated against Kubernetes $v"
    done
    return $rc
}
step "kubernetes-validate --strict (Kubernetes ${KUBE_VERSIONS[*]})" k8s_validate

# ---------------------------------------------------------------- rules
RULES_DIR=$WORK/rules
mkdir -p "$RULES_DIR"
extract_and_check_rules() {
    "$PY" "$HERE/extract_rules.py" manifests/prometheusrule.yaml "$RULES_DIR/proxywatch-rules.yaml" &&
        "$PROMTOOL" check rules "$RULES_DIR/proxywatch-rules.yaml"
}
step "promtool check rules (spec of manifests/prometheusrule.yaml)" extract_and_check_rules
test_rules() {
    cp "$HERE/alerts_test.yaml" "$RULES_DIR/alerts_test.yaml" &&
        (cd "$RULES_DIR" && "$PROMTOOL" test rules alerts_test.yaml)
}
step "promtool test rules tests/manifests/alerts_test.yaml" test_rules
step "alerts: severity, summary/description, runbook anchors in docs/alerts.md, job selectors, test coverage" \
    "$PY" "$HERE/check_rules_meta.py"
render_rules() {
    # The shipped rules are render-rules.py's rendering of its defaults; another runbook URL
    # pattern reaches every alert (its anchor kept), and promtool accepts the result.
    local out=$WORK/rules-rendered.yaml n want
    python3 manifests/render-rules.py >"$out" || return 1
    if ! diff -u manifests/prometheusrule.yaml "$out" >/dev/null; then
        echo "manifests/prometheusrule.yaml is not render-rules.py's rendering of its defaults:"
        diff -u manifests/prometheusrule.yaml "$out" | head -20
        return 1
    fi
    python3 manifests/render-rules.py --runbook-url-pattern 'https://git.example.com/ops/proxywatch/-/blob/v1/docs/alerts.md#%s' >"$out" || return 1
    want=$(grep -c 'runbook_url:' manifests/prometheusrule.yaml)
    n=$(grep -cE 'runbook_url: https://git\.example\.com/ops/proxywatch/-/blob/v1/docs/alerts\.md#proxywatch[a-z0-9-]+$' "$out")
    [ "$n" = "$want" ] || { echo "$n of $want runbook_url follow the pattern"; return 1; }
    "$PY" "$HERE/extract_rules.py" "$out" "$RULES_DIR/rendered-rules.yaml" || return 1
    "$PROMTOOL" check rules "$RULES_DIR/rendered-rules.yaml" >/dev/null || return 1
    if python3 manifests/render-rules.py --runbook-url-pattern 'https://example.com/runbooks' >/dev/null 2>&1; then
        echo "render-rules.py accepted a pattern without %s"
        return 1
    fi
    echo "the shipped rules are the default rendering; --runbook-url-pattern reaches all $want alerts"
}
step "render-rules.py: defaults give the shipped rules, --runbook-url-pattern every runbook_url" render_rules
dashboard_queries() {
    # Every query of the dashboard, as a recording rule: promtool parses each expression (the
    # $variables sit inside label-matcher strings, so they parse as Grafana sends them).
    "$PY" - manifests/dashboards/proxywatch.json "$RULES_DIR/dashboard-queries.yaml" <<'PYEOF' || return 1
import json, sys, yaml
d = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", []) if t.get("expr")]
rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"))
print(f"{len(exprs)} dashboard queries")
PYEOF
    "$PROMTOOL" check rules "$RULES_DIR/dashboard-queries.yaml" || return 1
    # Some fleet queries evaluated on three nodes, with the variables as Grafana fills them
    # (All = .*): the state sets are counted by their 1s, top-k picks the fullest node, the
    # worst-nodes table ranks by severity, the drill-down sees one node only.
    "$PY" - manifests/dashboards/proxywatch.json "$RULES_DIR/dashboard_test.yaml" <<'PYEOF' || return 1
import json, sys, yaml
d = json.load(open(sys.argv[1]))
def expr(title, ref="A"):
    p = [p for p in d["panels"] if p.get("title") == title]
    assert len(p) == 1, f"no single panel {title!r}"
    e = [t["expr"] for t in p[0]["targets"] if t["refId"] == ref][0]
    for var, val in (("$cluster", ".*"), ("$job", "proxywatch"), ("$instance", ".*"), ("$node", "node-b")):
        e = e.replace(var, val)
    return e
L = 'job="proxywatch",instance="node-%s"'
series = []
for n, mode, backend, entries, sev in (("a", "iptables", "nft", 100, 0), ("b", "ipvs", "legacy", 900, 3), ("c", "iptables", "nft", 500, 2)):
    for m in ("iptables", "ipvs", "nftables", "kernelspace"):
        series.append({"series": f'proxywatch_kube_proxy_mode{{{L % n},mode="{m}"}}', "values": "1" if m == mode else "0"})
    for b in ("nft", "legacy", "default", "none"):
        series.append({"series": f'proxywatch_iptables_backend_in_use{{{L % n},backend="{b}"}}', "values": "1" if b == backend else "0"})
    series.append({"series": f"proxywatch_conntrack_entries{{{L % n}}}", "values": str(entries)})
    series.append({"series": f"proxywatch_conntrack_entries_limit{{{L % n}}}", "values": "1000"})
    series.append({"series": f'proxywatch_finding_severity{{{L % n},id="conntrack_table_fill"}}', "values": str(sev)})
tests = [
    (expr("Nodes per kube-proxy mode"), [({"mode": "iptables"}, 2), ({"mode": "ipvs"}, 1)]),
    (expr("Nodes per iptables backend"), [({"backend": "legacy"}, 1), ({"backend": "nft"}, 2)]),
    (expr("Conntrack table fill: top 10 nodes"), [({"job": "proxywatch", "instance": f"node-{n}"}, v) for n, v in (("a", 0.1), ("b", 0.9), ("c", 0.5))]),
    (expr("Conntrack table fill across nodes", "A"), [({}, 0.9)]),
    (expr("Worst nodes", "A"), [({"instance": f"node-{n}"}, v) for n, v in (("a", 0), ("b", 3), ("c", 2))]),
    (expr("Conntrack entries and limits", "A"), [({"__name__": "proxywatch_conntrack_entries", "job": "proxywatch", "instance": "node-b"}, 900)]),
]
# The rejected-traffic panel: rate() of the counters, summed over protocols per node and reason;
# a node that rejects nothing is left out (evaluated at 10m, after 10 one-minute samples).
for n, proto, per_min in (("a", "tcp", 60), ("a", "udp", 30), ("b", "tcp", 0)):
    series.append({"series": f'proxywatch_service_rejected_packets_total{{{L % n},reason="no_endpoints",protocol="{proto}"}}',
                   "values": f"0+{per_min}x10"})
late = [(expr("Service traffic rejected or dropped by kube-proxy: top 10 nodes"), [({"instance": "node-a", "reason": "no_endpoints"}, 1.5)])]
def sample(labels, v):
    return {"labels": "{" + ",".join(f'{k}="{x}"' for k, x in sorted(labels.items())) + "}" if labels else "{}", "value": v}
doc = {"tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
    {"expr": e, "eval_time": t, "exp_samples": [sample(l, v) for l, v in want]}
    for t, cases in (("0m", tests), ("10m", late)) for e, want in cases]}]}
for t in doc["tests"][0]["promql_expr_test"]:
    for s in t["exp_samples"]:
        name = [x for x in s["labels"][1:-1].split(",") if x.startswith("__name__=")]
        if name:
            rest = ",".join(x for x in s["labels"][1:-1].split(",") if not x.startswith("__name__="))
            s["labels"] = name[0].split("=", 1)[1].strip('"') + "{" + rest + "}"
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
print(f"{len(tests) + len(late)} dashboard queries evaluated by promtool")
PYEOF
    (cd "$RULES_DIR" && "$PROMTOOL" test rules dashboard_test.yaml)
}
step "promtool parses every dashboard query" dashboard_queries

# ---------------------------------------------------------------- metric names
# The agent's metric names and finding ids as the README lists them (tests/docs/readme.rs proves
# those tables equal what the agent emits and its CHECKS): no hand-kept copy to go stale.
KNOWN_METRICS=$WORK/known_metrics.txt
KNOWN_IDS=$WORK/known_finding_ids.txt
readme_lists() {
    "$PY" "$HERE/readme_lists.py" "$ROOT/README.md" \
        "$ROOT/tests/fixtures/samples/proc-net-stat-nf_conntrack/debian12-kernel6.18-rootns-idle-17col-clashres-chainlength.txt" \
        "$KNOWN_METRICS" "$KNOWN_IDS" &&
        "$PY" "$HERE/metric_names.py" --known-list "$KNOWN_METRICS" --finding-ids "$KNOWN_IDS"
}
step "metric names and finding ids of the rules and the dashboard are the agent's (README tables)" readme_lists
metric_names_selftest() {
    # metric_names.py against a synthetic /metrics built from the known lists
    # must pass, and must fail once one metric used by the rules is missing.
    local m=$WORK/metrics.txt
    "$PY" - "$KNOWN_METRICS" "$KNOWN_IDS" >"$m" <<'EOF'
import sys
names = [l.strip() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
ids = [l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
for n in names:
    base = n[:-len("_total")] if n.endswith("_total") else n
    print(f"# HELP {n} synthetic\n# TYPE {base} {'counter' if n.endswith('_total') else 'gauge'}")
    if n == "proxywatch_finding_severity":
        for i in ids:
            print(f'{n}{{id="{i}"}} 0')
    else:
        print(f"{n} 1")
EOF
    "$PY" "$HERE/metric_names.py" "$m" >/dev/null || { echo "complete synthetic /metrics was rejected"; return 1; }
    grep -v 'proxywatch_conntrack_stat_drop_total' "$m" >"$m.missing"
    if "$PY" "$HERE/metric_names.py" "$m.missing" >/dev/null 2>&1; then
        echo "metric_names.py accepted a /metrics without proxywatch_conntrack_stat_drop_total"
        return 1
    fi
    echo "metric_names.py: accepts a complete /metrics, rejects one with a missing metric"
}
step "metric_names.py self-test (/metrics file mode)" metric_names_selftest

# ---------------------------------------------------------------- checkov, hadolint
run_checkov() {
    # --skip-download: no calls to the Prisma Cloud API (no network in CI).
    checkov --quiet --compact --skip-download --framework kubernetes dockerfile \
        -f manifests/*.yaml manifests/overlays/rbac-proxy/*.yaml manifests/overlays/npd/*.yaml manifests/overlays/kube-prometheus/*.yaml "$OVERLAY" "$NPD_OVERLAY" Dockerfile
}
step "checkov (manifests, rendered overlay, Dockerfile; suppressions only inline)" run_checkov
step "hadolint Dockerfile" hadolint --failure-threshold style Dockerfile

# ---------------------------------------------------------------- summary
log "summary ($(($(date +%s) - START)) s)"
for f in "${failures[@]+"${failures[@]}"}"; do
    echo "FAILED: $f"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
