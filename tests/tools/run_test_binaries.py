#!/usr/bin/env python3
"""Runs the test binaries cargo built, a few at a time (tests/run.sh's test stage).

    cargo test --locked --all-targets --no-run --message-format=json-render-diagnostics \
        | python3 tests/tools/run_test_binaries.py [alone|rest]

Reads cargo's JSON messages on stdin and runs every test executable of them (the lib and bin
unit tests, each harness tests/<group>/main.rs) in the package root, as `cargo test` does,
PROXYWATCH_TEST_JOBS at a time (3), the longest first, except the harnesses in ALONE, which run
first and by themselves. Each one's output is captured and printed
whole when it ends, with its wall time; the run fails naming the binaries that failed. The
environment (CI among it) is passed through. Tests that must not overlap take a lock that holds
across binaries (tests/common: global_lock, live_proc_lock, kube_proxy_process_lock).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# The longest first (their wall times in the sequential stage), so that the last one to start
# is a short one: vm, kube_proxy, e2e, kernel, stale; then the rest.
FIRST = ["vm", "kube_proxy", "e2e", "kernel", "stale", "http", "docs", "offline"]

# Run first, with nothing beside them: the vm harness boots QEMU guests whose scenarios have
# deadlines of their own, and on a CPU without vmx/svm (this 2-core machine's) QEMU emulates
# (TCG), so it is CPU-bound: beside the other harnesses its guests missed their deadlines and
# 4 of 10 tests failed (608 s, against 141 s alone).
ALONE = ["vm"]


def binaries(messages):
    out = []
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m.get("profile", {}).get("test"):
            continue
        target = m["target"]
        kind = target["kind"][0]
        name = target["name"] if kind == "test" else f"{target['name']} ({kind} unit tests)"
        out.append((name, target["name"] if kind == "test" else "", m["executable"], target["src_path"]))
    return out


def package_root(src_path):
    d = os.path.dirname(os.path.abspath(src_path))
    while not os.path.exists(os.path.join(d, "Cargo.toml")):
        parent = os.path.dirname(d)
        if parent == d:
            raise SystemExit(f"run_test_binaries: no Cargo.toml above {src_path}")
        d = parent
    return d


def main():
    found = binaries(sys.stdin)
    if not found:
        raise SystemExit("run_test_binaries: cargo named no test executable")
    order = {name: i for i, name in enumerate(FIRST)}
    found.sort(key=lambda b: (order.get(b[1], len(FIRST)), b[0]))
    jobs = int(os.environ.get("PROXYWATCH_TEST_JOBS", "3"))
    # `alone`: only the harnesses of ALONE; `rest`: only the others; no argument: both, ALONE
    # first, one at a time, then the rest `jobs` at a time.
    part = sys.argv[1] if len(sys.argv) > 1 else ""
    if part not in ("", "alone", "rest"):
        raise SystemExit(f"run_test_binaries: unknown part {part!r} (alone, rest)")
    if part == "alone":
        found = [b for b in found if b[1] in ALONE]
    elif part == "rest":
        found = [b for b in found if b[1] not in ALONE]
    pending = [b for b in found if b[1] in ALONE]
    failed, times = [], []
    lock = threading.Lock()
    started = time.monotonic()

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                name, _, exe, src = pending.pop(0)
                print(f"=== started {name} ({time.monotonic() - started:.0f} s)", flush=True)
            t0 = time.monotonic()
            with tempfile.TemporaryFile() as log:
                code = subprocess.call([exe], cwd=package_root(src), stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
                log.seek(0)
                text = log.read().decode("utf-8", "replace")
            took = time.monotonic() - t0
            with lock:
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"=== {name}: {status}, {took:.0f} s\n{text}", flush=True)
                times.append(f"{name} {took:.0f} s")
                if code != 0:
                    failed.append(name)

    worker()
    pending.extend(b for b in found if b[1] not in ALONE)
    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"=== test binaries ({jobs} at a time, {time.monotonic() - started:.0f} s): {', '.join(times)}")
    if failed:
        print(f"=== failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
