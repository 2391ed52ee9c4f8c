#!/usr/bin/env bash
# Runs the image built by tests/image/build.sh the way manifests/daemonset.yaml
# runs it and checks it (tests/image/run_like_daemonset.py says what).
#
#   sudo bash tests/image/run.sh
#
# The host binary it compares with is target/debug/proxywatch (built here when
# missing; PROXYWATCH_IMAGE_HOST_BINARY to use another). PROXYWATCH_IMAGE_MANIFEST
# runs another DaemonSet file (the self-test's broken copies).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root (rootful podman, network namespaces)"
mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock 9
podman_setup
podman image exists "$IMAGE" || die "no image $IMAGE in $WORK: run tests/image/build.sh first"
# The store is this work folder's own: a container still in it was left by a run that
# was killed before its clean-up. Remove those, by ID.
for id in $(podman ps --all --quiet --no-trunc); do
    echo "# removing container $id, left by an earlier run"
    podman rm --force --time=0 "$id" >/dev/null
done
host_bin=${PROXYWATCH_IMAGE_HOST_BINARY:-}
if [ -z "$host_bin" ]; then
    (cd "$REPO" && cargo build --quiet --locked --bin proxywatch)
    host_bin=$REPO/target/debug/proxywatch
fi
exec python3 "$REPO/tests/image/run_like_daemonset.py" "$IMAGE" "$host_bin" \
    --manifest "${PROXYWATCH_IMAGE_MANIFEST:-$REPO/manifests/daemonset.yaml}"
