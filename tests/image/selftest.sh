#!/usr/bin/env bash
# Deliberate breaks: each must make the image stage fail, with a message that names
# the break. Run after build.sh and run.sh (it reuses their cache: the broken builds
# share every layer before the break).
#   1. a package pin that does not exist   -> "package pin tini=... does not exist"
#   2. a COPY from a path that does not exist -> the COPY step and "does not exist"
#   3. a capability removed from the DaemonSet -> "CapEff ... missing ['CAP_NET_RAW']"
#   4. tini without -s (the entrypoint)  -> "tini prints no warning: [WARN  tini ..."
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dir="$WORK/selftest"
rm -rf "$dir" && mkdir -p "$dir"
failed=0

expect_failure() { # name expected-message-regex command...
    local name=$1 want=$2 t0=$SECONDS
    shift 2
    if "$@" > "$dir/$name.log" 2>&1; then
        echo "FAIL - break '$name' was not detected: the command succeeded (log: $dir/$name.log)"
        failed=1
    elif grep -qE "$want" "$dir/$name.log"; then
        echo "ok - break '$name' detected ($((SECONDS - t0)) s): $(grep -oE "$want" "$dir/$name.log" | head -1)"
    else
        echo "FAIL - break '$name' failed without saying so (wanted /$want/):"
        tail -5 "$dir/$name.log" | sed 's/^/    /'
        failed=1
    fi
}

broken() { # sed-expression file -> path of the broken copy (must differ from the original)
    local out="$dir/$(basename "$2").$3"
    sed -E "$1" "$2" > "$out"
    cmp -s "$2" "$out" && { echo "tests/image/selftest: '$1' changes nothing in $2" >&2; exit 1; }
    echo "$out"
}

df=$(broken 's/tini=[^ ]+/tini=0.0.0-no-such-version/' "$REPO/Dockerfile" pin)
expect_failure package-pin "package pin tini=0.0.0-no-such-version does not exist" \
    env PROXYWATCH_IMAGE_DOCKERFILE="$df" PROXYWATCH_IMAGE=localhost/proxywatch:selftest bash "$REPO/tests/image/build.sh"

df=$(broken 's|^COPY --from=build /out/proxywatch |COPY --from=build /out/no-such-file |' "$REPO/Dockerfile" copy)
expect_failure copy-path 'COPY --from=build /out/no-such-file [^"]*"?: the source path does not exist' \
    env PROXYWATCH_IMAGE_DOCKERFILE="$df" PROXYWATCH_IMAGE=localhost/proxywatch:selftest bash "$REPO/tests/image/build.sh"

ds=$(broken '/^ +- NET_RAW$/d' "$REPO/manifests/daemonset.yaml" nocap)
expect_failure capability "CapEff [0-9a-f]+ = .*missing \['CAP_NET_RAW'\]" \
    env PROXYWATCH_IMAGE_MANIFEST="$ds" bash "$REPO/tests/image/run.sh"

# tini without -s under hostPID: not PID 1 and no subreaper, so it warns (and orphans
# would go to the node's init). The image builds; running it must fail.
df=$(broken 's|"/usr/bin/tini", "-s", "--"|"/usr/bin/tini", "--"|' "$REPO/Dockerfile" nosub)
if PROXYWATCH_IMAGE_DOCKERFILE="$df" PROXYWATCH_IMAGE=localhost/proxywatch:selftest \
    bash "$REPO/tests/image/build.sh" > "$dir/tini-build.log" 2>&1; then
    expect_failure tini-subreaper "FAIL - serve: tini prints no warning: .WARN  tini" \
        env PROXYWATCH_IMAGE=localhost/proxywatch:selftest bash "$REPO/tests/image/run.sh"
else
    echo "FAIL - the image without tini -s did not build (log: $dir/tini-build.log)"
    failed=1
fi
podman image rm localhost/proxywatch:selftest localhost/proxywatch-build:selftest > /dev/null 2>&1 || true

[ $failed = 0 ] || die "a deliberate break went unnoticed (see above)"
