# Sourced by tests/image/*.sh: one private podman set-up under one work folder.
#
# Everything podman writes lives under $WORK (default /var/tmp/proxywatch-image,
# PROXYWATCH_IMAGE_WORK to change it): its containers.conf, storage.conf and
# registries.conf, the image store, the run state, TMPDIR (where buildah keeps the
# RUN --mount=type=cache directories) and the debootstrap package caches. The host's
# /etc/containers and /var/lib/containers are neither read nor written, so the
# set-up cannot disturb another podman user on the machine, and `rm -rf $WORK`
# is a cold start.

# The tests' shared lock file lives in the TMPDIR they run with, not in ours.
export PROXYWATCH_TESTS_TMPDIR=${PROXYWATCH_TESTS_TMPDIR:-${TMPDIR:-/tmp}}
WORK=${PROXYWATCH_IMAGE_WORK:-/var/tmp/proxywatch-image}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The tag the built image gets (local storage only; nothing is pushed).
IMAGE=${PROXYWATCH_IMAGE:-localhost/proxywatch:ci}

die() {
    echo "tests/image: FAIL: $*" >&2
    exit 1
}

podman_setup() {
    mkdir -p "$WORK"/{conf,storage,run,tmp,logs}
    # runc, not crun: crun refuses a hybrid cgroup v1/v2 layout ("cgroups in hybrid
    # mode not supported"); cgroupfs: no systemd to talk to. default_ulimits: podman's
    # default (nofile 1048576) is above the hard limits processes get on some CI
    # machines and runc's setrlimit then fails with EPERM ("setrlimit type 6/7"), so
    # the container gets this shell's hard limits, nproc at most kernel.pid_max
    # (measured on the CI machine: hard nproc 96364 and 65536 failed, 32768 =
    # pid_max worked).
    local nofile nproc pid_max ulimits=()
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    pid_max=$(cat /proc/sys/kernel/pid_max)
    if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
    [ "$nofile" != unlimited ] && ulimits+=("\"nofile=$nofile:$nofile\"")
    [ "$nproc" != unlimited ] && ulimits+=("\"nproc=$nproc:$nproc\"")
    local IFS=,
    cat > "$WORK/conf/containers.conf" <<CONF
[containers]
default_ulimits = [${ulimits[*]}]
# Never podman's bridge: its netavark chains would land in the host's iptables.
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$WORK/run/events.log"
tmp_dir = "$WORK/run/libpod"
CONF
    unset IFS
    cat > "$WORK/conf/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$WORK/storage"
runroot = "$WORK/run/storage"
CONF
    # Short names (FROM debian:12.12-slim) resolve to docker.io/library/..., where
    # build.sh puts the locally made base images; builds use --pull=never.
    cat > "$WORK/conf/registries.conf" <<CONF
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
CONF
    export CONTAINERS_CONF="$WORK/conf/containers.conf"
    export CONTAINERS_STORAGE_CONF="$WORK/conf/storage.conf"
    export CONTAINERS_REGISTRIES_CONF="$WORK/conf/registries.conf"
    export TMPDIR="$WORK/tmp"
    command -v podman >/dev/null || die "podman is not installed (tests/run.sh installs it: podman runc)"
    command -v runc >/dev/null || die "runc is not installed"
}
