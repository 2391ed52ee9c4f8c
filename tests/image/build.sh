#!/usr/bin/env bash
# Builds the repository's Dockerfile, unchanged, with podman, without any registry.
#
#   sudo bash tests/image/build.sh        # -> localhost/proxywatch:ci in $WORK's store
#
# The base images the FROM lines name are made here, from the Debian mirror this
# machine's apt uses, and tagged with those names (docker.io/library/...):
#   debian:<12.x>-slim            debootstrap --variant=minbase, trimmed like the
#                                 official slim image (debuerreotype's slimify list)
#   rust:<X.Y>-slim-bookworm      debootstrap with gcc, libc6-dev, ca-certificates,
#                                 plus the host's rustup toolchain X.Y in the official
#                                 image's layout (RUSTUP_HOME=/usr/local/rustup,
#                                 CARGO_HOME=/usr/local/cargo) and the host's CA bundle
#                                 (a TLS-intercepting network would otherwise make
#                                 cargo fail with "self-signed certificate in chain")
# Both are made once (in parallel) and reused while they are in $WORK; the build
# then runs with --pull=never --network=host. Idempotent: a second run reuses the
# base images, podman's layer cache and the cargo cache mounts.
#
# Env: PROXYWATCH_IMAGE_WORK (work folder, default /var/tmp/proxywatch-image),
#      PROXYWATCH_IMAGE (tag, default localhost/proxywatch:ci),
#      PROXYWATCH_IMAGE_DOCKERFILE (default: the repository's Dockerfile; the
#      self-test points it at broken copies), PROXYWATCH_IMAGE_WORK_MAX_MB (4096),
#      PROXYWATCH_IMAGE_MAX_MB (100: the runtime image's size budget, 10^6 bytes).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DOCKERFILE=${PROXYWATCH_IMAGE_DOCKERFILE:-$REPO/Dockerfile}
MAX_MB=${PROXYWATCH_IMAGE_WORK_MAX_MB:-4096}
IMAGE_MAX_MB=${PROXYWATCH_IMAGE_MAX_MB:-100}

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and rootful podman)"
need=()
for p in podman runc debootstrap; do command -v "$p" >/dev/null || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
    echo "=== tests/image: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock 9
podman_setup

# ------------------------------------------------------------ base images
# The mirror this machine's apt uses (deb822 or one-line sources).
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -1 || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
security=${mirror%/debian}/debian-security
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

suite_of() { # debian version or suite name in a tag -> suite
    case "$1" in 12* | *bookworm*) echo bookworm ;; 13* | *trixie*) echo trixie ;; *) return 1 ;; esac
}

# Trims a debootstrapped tree like the official slim images (debuerreotype-slimify)
# and gives it the official image's apt configuration.
slim_and_configure() {
    local root=$1 suite=$2
    cat > "$root/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
CFG
    find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/{groff,info,linda,lintian,man}/*
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
    echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/docker-no-languages"
    printf 'Acquire::GzipIndexes "true";\nAcquire::CompressionTypes::Order:: "gz";\n' > "$root/etc/apt/apt.conf.d/docker-gzip-indexes"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
    rm -f "$root/etc/apt/sources.list"
    cat > "$root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/* "$root"/var/tmp/*
    find "$root/var/log" -type f -delete
    rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
    : > "$root/etc/machine-id"
}

debootstrap_into() { # name suite include
    local name=$1 suite=$2 include=$3 root="$WORK/rootfs/$1"
    rm -rf "$root" && mkdir -p "$root" "$WORK/debs/$name"
    debootstrap --variant=minbase ${include:+--include="$include"} --keyring="$keyring" \
        --cache-dir="$WORK/debs/$name" "$suite" "$root" "$mirror" > "$WORK/logs/debootstrap-$name.log" 2>&1 \
        || { tail -5 "$WORK/logs/debootstrap-$name.log" >&2; return 1; }
    slim_and_configure "$root" "$suite"
}

import_rootfs() { # name tag [--change ...]
    local name=$1 tag=$2 root="$WORK/rootfs/$1"
    shift 2
    tar --numeric-owner --xattrs -C "$root" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf - . \
        | podman import --quiet "$@" - "$tag" >/dev/null
    rm -rf "$root"
}

make_runtime_base() { # tag suite
    debootstrap_into runtime "$2" ""
    import_rootfs runtime "$1" --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
}

make_builder_base() { # tag suite rust-version
    local tag=$1 suite=$2 have sysroot tc root="$WORK/rootfs/builder"
    debootstrap_into builder "$suite" gcc,libc6-dev,ca-certificates
    # The host's toolchain, as rustup-init lays it out in the official image.
    sysroot=$(rustc --print sysroot)
    have=$(rustc -V | awk '{print $2}')
    tc=$have-x86_64-unknown-linux-gnu
    mkdir -p "$root/usr/local/rustup/toolchains/$tc" "$root/usr/local/cargo/bin"
    tar -C "$sysroot/" --exclude=./share/doc --exclude=./share/man --exclude=./share/zsh -cf - . \
        | tar -C "$root/usr/local/rustup/toolchains/$tc" -xf -
    printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$tc" > "$root/usr/local/rustup/settings.toml"
    local b rustup_bin
    rustup_bin=$(command -v rustup || true)
    for b in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver; do
        if [ -n "$rustup_bin" ]; then
            [ -e "$root/usr/local/cargo/bin/rustup" ] || install -m 0755 "$rustup_bin" "$root/usr/local/cargo/bin/rustup"
            ln -f "$root/usr/local/cargo/bin/rustup" "$root/usr/local/cargo/bin/$b"
        elif [ -e "$root/usr/local/rustup/toolchains/$tc/bin/$b" ]; then
            ln -sf "/usr/local/rustup/toolchains/$tc/bin/$b" "$root/usr/local/cargo/bin/$b"
        fi
    done
    # The host's CA bundle: cargo must trust whatever the network presents for crates.io.
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    import_rootfs builder "$tag" \
        --change 'ENV RUSTUP_HOME=/usr/local/rustup' --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change "ENV RUST_VERSION=$have" \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
}

t0=$(date +%s)
pids=()
names=()
for ref in $(awk 'toupper($1) == "FROM" {print $2}' "$DOCKERFILE"); do
    case "$ref" in
        rust:*-slim-*)
            tag=docker.io/library/$ref
            rv=${ref#rust:}
            rv=${rv%%-*}
            suite=$(suite_of "${ref##*-}") || die "Dockerfile FROM $ref: unknown Debian suite"
            case "$(rustc -V 2>/dev/null | awk '{print $2}')" in
                "$rv" | "$rv".*) ;;
                *) die "Dockerfile FROM $ref wants Rust $rv; the host has $(rustc -V 2>&1) to copy into the builder image" ;;
            esac
            podman image exists "$tag" && continue
            echo "=== tests/image: making $tag (debootstrap $suite + host Rust $(rustc -V | awk '{print $2}'))"
            make_builder_base "$tag" "$suite" &
            pids+=($!) names+=("$tag")
            ;;
        debian:*-slim)
            tag=docker.io/library/$ref
            v=${ref#debian:}
            suite=$(suite_of "${v%-slim}") || die "Dockerfile FROM $ref: unknown Debian version"
            podman image exists "$tag" && continue
            echo "=== tests/image: making $tag (debootstrap --variant=minbase $suite from $mirror)"
            make_runtime_base "$tag" "$suite" &
            pids+=($!) names+=("$tag")
            ;;
        *) die "Dockerfile FROM $ref: build.sh only knows how to make rust:*-slim-<suite> and debian:*-slim locally" ;;
    esac
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || die "making base image ${names[$i]} failed (logs in $WORK/logs/)"
done
t1=$(date +%s)
[ ${#pids[@]} -gt 0 ] && echo "=== tests/image: base images made in $((t1 - t0)) s"

# ------------------------------------------------------------ the build
log="$WORK/logs/build.log"
echo "=== tests/image: podman build -f ${DOCKERFILE#"$REPO"/} -t $IMAGE (log: $log)"
set +e
# The commit built, for proxywatch_build_info{revision} (the image has no .git): the same
# revision as the host binary built from this checkout.
revision=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || true)
podman build --pull=never --network=host --format=docker --layers \
    --build-arg PROXYWATCH_REVISION="$revision" \
    --file "$DOCKERFILE" --tag "$IMAGE" "$REPO" > "$log" 2>&1
rc=$?
set -e
grep -E '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+:|^--> Using cache' "$log" | sed 's/^/    /' | cut -c1-150 || true
if [ $rc != 0 ]; then
    echo "--- last lines of $log" >&2
    tail -15 "$log" >&2
    why=$(grep -oE "E: Version '[^']*' for '[^']*' was not found" "$log" | head -1 || true)
    if [ -n "$why" ]; then
        pkg=$(sed -E "s/.*for '([^']*)'.*/\1/" <<< "$why")
        ver=$(sed -E "s/E: Version '([^']*)'.*/\1/" <<< "$why")
        die "image build: package pin $pkg=$ver does not exist in the Debian archive ($mirror); bump it in the Dockerfile"
    fi
    why=$(grep -oE "E: Unable to locate package [^ ]*" "$log" | head -1 || true)
    [ -n "$why" ] && die "image build: ${why#E: }"
    step=$(grep -oE 'building at STEP "[^"]*"' "$log" | head -1 | sed 's/building at STEP //' || true)
    if grep -qE 'no such file or directory|no items matching glob' "$log" && [[ "$step" == *COPY* ]]; then
        die "image build: $step: the source path does not exist ($(grep -oE '(stat|glob)[^"]*"[^"]*"[^:]*: no such file or directory|no items matching glob "[^"]*"' "$log" | head -1))"
    fi
    die "image build failed at ${step:-an unknown step} (exit $rc)"
fi
t2=$(date +%s)
echo "=== tests/image: built $IMAGE in $((t2 - t1)) s"

# ------------------------------------------------------------ bounded work folder
# The build stage's last layer is no parent of the runtime image (COPY --from), so
# untagged it is dangling and the prune below would drop it: every later build of
# this source (the self-test's broken Dockerfiles) would then compile the agent
# again (132 s of CI's 2005 s, for the first break alone). Tagged, it stays until a
# newer build stage takes the tag. Cached, this build takes a second.
podman build --pull=never --network=host --format=docker --layers --target build \
    --build-arg PROXYWATCH_REVISION="$revision" \
    --file "$DOCKERFILE" --tag "${IMAGE%:*}-build:${IMAGE##*:}" "$REPO" >> "$log" 2>&1 \
    || die "image build: tagging the build stage failed (log: $log)"
# Old builds' layers become dangling images when the tags move: drop them. If the
# folder still outgrows the bound, drop the cargo cache mounts (the next build is
# then a cold cargo build, nothing else is lost).
podman image prune --force >/dev/null
mb=$(du -sm "$WORK" | cut -f1)
if [ "$mb" -gt "$MAX_MB" ]; then
    echo "=== tests/image: $WORK is $mb MB > $MAX_MB MB: dropping the build cache mounts"
    rm -rf "$TMPDIR"/buildah-cache*
    mb=$(du -sm "$WORK" | cut -f1)
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "=== tests/image: $IMAGE $((size / 1000000)) MB ($size bytes), work folder $mb MB"
podman history --format '    {{.Size}}\t{{.CreatedBy}}' "$IMAGE" | cut -c1-150
# The runtime image's budget (docs/image.md): a dependency that drags in a toolchain
# or a forgotten apt cache fails here, not on the nodes' disks.
[ "$size" -le $((IMAGE_MAX_MB * 1000000)) ] \
    || die "image $IMAGE is $((size / 1000000)) MB, over its budget of $IMAGE_MAX_MB MB (docs/image.md)"
