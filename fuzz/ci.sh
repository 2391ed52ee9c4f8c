#!/usr/bin/env bash
# CI smoke run of the fuzz targets: every target for a small fixed number of
# runs, seeded from tests/fixtures. A crash fails the run and leaves its input
# in fuzz/artifacts/<target>/ (see README.md for what to do with it).
#
#   bash fuzz/ci.sh                      # from anywhere; as tests/run.sh calls it
#   FUZZ_RUNS=50000 bash fuzz/ci.sh      # more runs per target
#
# CI builds the targets with plain cargo and the instrumentation flags
# cargo-fuzz would pass (no sanitizer, the `-s none` of cargo-fuzz): installing
# cargo-fuzz costs minutes on a new machine, and the flags are stable rustc
# flags. For long runs by hand, use cargo fuzz (README.md). A cheaper profile
# than cargo-fuzz's (opt-level 1, no debug info) keeps the cold build short;
# enough to find panics in a few thousand runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

RUNS=${FUZZ_RUNS:-5000}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
TARGET_DIR=${PROXYWATCH_FUZZ_TARGET_DIR:-target/ci}

started=$(date +%s)
bash seed.sh >/dev/null

# What cargo-fuzz passes for libFuzzer's coverage feedback (cargo-fuzz 0.13, -s none).
# --target keeps these flags off build scripts and proc macros, as cargo-fuzz does.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
export CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
echo "=== building the fuzz targets ($TRIPLE, target dir fuzz/$TARGET_DIR)"
cargo build --release --locked --target "$TRIPLE" --target-dir "$TARGET_DIR" --bins
built=$(date +%s)

bins=$TARGET_DIR/$TRIPLE/release
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^proxywatch-fuzz$')
failed=()
for t in $targets; do
    log=$(mktemp)
    mkdir -p "corpus/$t" "artifacts/$t"
    s=$(date +%s%N)
    # -max_total_time bounds a target whose inputs got slow; -runs is the fixed budget.
    if "$bins/$t" "corpus/$t" -runs="$RUNS" -max_total_time=30 -rss_limit_mb=1024 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
        # The runs libFuzzer actually executed: the time limit can cut a slow target short.
        ran=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        ran=${ran:-0}
        note=""
        [ "$ran" -lt "$RUNS" ] && note=" (cut short by the 30 s limit: $RUNS requested)"
        printf '%-20s ok    %6d runs %5d ms%s\n' "$t" "$ran" $(( ($(date +%s%N) - s) / 1000000 )) "$note"
    else
        printf '%-20s CRASH\n' "$t"
        grep -E "panicked at|SUMMARY|Test unit written" "$log" | head -5 | sed 's/^/    /'
        failed+=("$t")
    fi
    rm -f "$log"
done

echo "fuzz: build $((built - started)) s, total $(( $(date +%s) - started )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in ${failed[*]}; inputs under fuzz/artifacts/" >&2
    exit 1
fi
echo "fuzz: $(echo "$targets" | wc -w) passed, 0 failed"
