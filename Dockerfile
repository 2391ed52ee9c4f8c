# syntax=docker/dockerfile:1
#
# proxywatch node agent image.
#   docker build -t ghcr.io/proxywatch/proxywatch:0.2.0 .
# Linted by tests/manifests/check.sh (hadolint + checkov); built unchanged with
# podman and run with the DaemonSet's settings by tests/image/ (docs/image.md).

# ---------------------------------------------------------------- build stage
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Everything not excluded by .dockerignore (sources, Cargo.toml, Cargo.lock).
COPY . .
# The commit for proxywatch_build_info{revision} (.git is not in the build context):
#   docker build --build-arg PROXYWATCH_REVISION="$(git rev-parse HEAD)" ...
# Without it the revision label is the version (build.rs).
ARG PROXYWATCH_REVISION=""
# --locked: build exactly Cargo.lock. The registry and target/ are BuildKit
# cache mounts (not part of any layer), so the binary is copied out in the
# same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    PROXYWATCH_REVISION="$PROXYWATCH_REVISION" cargo build --release --locked \
    && install -D -m 0755 target/release/proxywatch /out/proxywatch

# ---------------------------------------------------------------- runtime stage
# Debian 12.12 "bookworm" slim: the same Debian release (glibc) as the builder.
FROM debian:12.12-slim

LABEL org.opencontainers.image.title="proxywatch" \
      org.opencontainers.image.description="Node agent that tells whether a Kubernetes node's kube-proxy data plane is healthy" \
      org.opencontainers.image.source="https://github.com/proxywatch/proxywatch" \
      org.opencontainers.image.licenses="Apache-2.0"

# The tools the agent runs against the node's netns:
#   iptables  iptables-save for both backends (iptables-nft-save, iptables-legacy-save)
#   nftables  nft list ruleset (kube-proxy nftables mode)
#   ipvsadm   IPVS virtual servers (kube-proxy ipvs mode)
#   conntrack conntrack -S / -C
#   tini      the entrypoint: forwards signals and reaps orphans of the commands
#             above; -s (child subreaper) because under hostPID (the DaemonSet)
#             tini is not PID 1 and orphans would otherwise go to the node's init
# Versions are bookworm's current ones; bump them when a Debian update
# supersedes one (apt-get then fails loudly instead of drifting).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        iptables=1.8.9-2 \
        nftables=1.0.6-2+deb12u2 \
        ipvsadm=1:1.31-1+b1 \
        conntrack=1:1.4.7-1+b2 \
        tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/*

COPY --from=build /out/proxywatch /usr/local/bin/proxywatch

# Root on purpose: the agent needs CAP_NET_ADMIN and CAP_NET_RAW (netfilter,
# conntrack and IPVS state), and Linux clears the capability sets on exec for a
# non-root uid, so the agent and the iptables-save/ipvsadm/conntrack children
# would lose them. The DaemonSet drops every other capability, forbids
# privilege escalation and mounts the root filesystem read-only.
# hadolint ignore=DL3002
USER 0

EXPOSE 9877

# glibc's malloc gives each thread that allocates an arena of its own (up to 8
# per CPU) and an arena keeps what it once held: as the runtime's blocking
# threads came and went, arena after arena filled and RSS crept up for an hour
# of soak. Two arenas level off several MiB lower (docs/benchmarks.md, soak).
# A fixed mmap threshold (128 KiB, glibc's starting value) keeps glibc from
# raising it after each large free, so the probes' large transient buffers are
# mapped and returned whole instead of fragmenting the heap: 1.9-3.8 MiB less
# RSS in a 2-hour soak, two agents under the same churn, the live heap ~1 MiB
# in both (heaptrack; docs/benchmarks.md, soak).
# glibc's per-thread caches (tcache: up to 7 freed blocks of each small size,
# per thread) off: each of the runtime's threads kept its own, and the blocks
# they held pinned pages the live heap had left. With them off, an agent trying
# 23 Services every 250 ms or 5 s had +66 to +342 KiB more anonymous memory
# than one that does not (median +258, 9 runs), against +458 and +552 with
# them (2 runs), at the same CPU (docs/benchmarks.md, issue 37). glibc reads
# this tunable only at start; no mallopt(3) parameter sets it.
ENV MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 GLIBC_TUNABLES=glibc.malloc.tcache_count=0

# Health is checked by the kubelet (httpGet /healthz in the DaemonSet), which
# ignores Docker HEALTHCHECKs; the image has no curl/wget to run one anyway.
HEALTHCHECK NONE

ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/local/bin/proxywatch"]
CMD ["serve", "--listen=0.0.0.0:9877"]
