#!/usr/bin/env bash
# Load and soak (issue #8): 64 connections on /metrics and /snapshot for 30 s
# (PROXYWATCH_SOAK_SECONDS) while the probes run, on the release build. Prints
# requests, designed 503s, errors, p50/p99 and the agent's RSS before and after.
# CI runs the same test for 3 s (tests/load.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PROXYWATCH_SOAK_SECONDS=${PROXYWATCH_SOAK_SECONDS:-30} \
    cargo test --release --test load -- --nocapture 2>&1 | grep -E '^load:|test result'
