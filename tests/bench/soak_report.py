#!/usr/bin/env python3
"""The report of a soak (tests/bench/soak.sh), from its OUT_DIR; also on a
soak still running (it reads the samples so far).

    python3 tests/bench/soak_report.py OUT_DIR [SLOPE_BOUND_MIB_PER_H] [TITLE]
"""
import csv, json, os, sys

out = sys.argv[1]
bound = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
title = sys.argv[3] if len(sys.argv) > 3 else out
rows = list(csv.DictReader(open(os.path.join(out, "samples.csv"))))
if len(rows) < 10:
    print(f"FAIL: only {len(rows)} samples")
    sys.exit(0)
t = [float(r["t"]) for r in rows]
rss = [int(r["rss_kib"]) / 1024 for r in rows]
end = t[-1]
half = [i for i, x in enumerate(t) if x >= end / 2]
first = [i for i, x in enumerate(t) if x < end / 2]


# RssAnon and RssFile (newer samples): a leak is anonymous memory; file pages are the
# binary's text touched so far (bounded by its size, shared, reclaimable).
anon = [int(r["anon_kib"]) / 1024 if r.get("anon_kib") else None for r in rows]
filep = [int(r["file_kib"]) / 1024 if r.get("file_kib") else None for r in rows]


def slope(idx, series=None):
    series = series or rss
    idx = [i for i in idx if series[i] is not None]
    if len(idx) < 2:
        return 0.0
    xs = [t[i] / 3600 for i in idx]
    ys = [series[i] for i in idx]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def at(seconds):
    """Mean RSS over the minute before `seconds` (None when not reached)."""
    idx = [i for i, x in enumerate(t) if seconds - 60 <= x <= seconds]
    return sum(rss[i] for i in idx) / len(idx) if idx and end >= seconds else None


def col(name, idx):
    return [int(rows[i][name]) for i in idx]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


s = slope(half)
failed = sum(int(r["failed"]) for r in rows)
# A scrape that failed right after the observer itself stalled (no sample for
# more than the agent's idle timeout, 5 s by default: a starved or paused
# machine) met a kept-alive connection the agent closed as idle, which any
# HTTP/1.1 server may do; counted apart, and printed.
stalled = sum(int(rows[i]["failed"]) for i in range(1, len(rows)) if t[i] - t[i - 1] > 5)
gaps = [(t[i - 1], t[i]) for i in range(1, len(rows)) if t[i] - t[i - 1] > 5]
zombies = max(int(r["zombies"]) for r in rows)
lines = [f"soak: {title}", f"duration {end / 60:.1f} min, {len(rows)} samples"]
for label, sec in (("1 min", 60), ("15 min", 900), ("30 min", 1800), ("1 h", 3600), ("2 h", 7200)):
    v = at(sec)
    if v is not None:
        lines.append(f"RSS at {label}: {v:.2f} MiB")
lines.append(f"RSS at the end: {rss[-1]:.2f} MiB; min/max over the second half {min(rss[i] for i in half):.2f}/{max(rss[i] for i in half):.2f} MiB")
lines.append(f"VmHWM: at 15 min {rows[min(len(rows) - 1, 900)]['hwm_kib']} KiB, at the end {rows[-1]['hwm_kib']} KiB")
lines.append(f"RSS slope over the second half ({end / 2 / 60:.0f}-{end / 60:.0f} min): {s:+.3f} MiB/h (bound {bound} MiB/h)")
if all(v is not None for v in anon):
    lines.append(f"RssAnon slope over the second half: {slope(half, anon):+.3f} MiB/h; RssFile {slope(half, filep):+.3f} MiB/h (at 15 min / end: anon {anon[min(len(rows) - 1, 900)]:.2f} / {anon[-1]:.2f}, file {filep[min(len(rows) - 1, 900)]:.2f} / {filep[-1]:.2f} MiB)")
    h2 = [i for i, x in enumerate(t) if x >= 3600]
    if end >= 7000 and h2:
        lines.append(f"second hour: RSS {slope(h2):+.3f} MiB/h, RssAnon {slope(h2, anon):+.3f} MiB/h, RssFile {slope(h2, filep):+.3f} MiB/h")
for name in ("fds", "threads", "children"):
    a, b = col(name, first), col(name, half)
    lines.append(f"{name}: first half {min(a)}-{max(a)}, second half {min(b)}-{max(b)}")
ms = [float(r["metrics_ms"]) for r in rows]
ss = [float(r["snapshot_ms"]) for r in rows]
lines.append(f"observer stalls (> 5 s without a sample): {len(gaps)}" + "".join(f" [{a:.0f}-{b:.0f} s]" for a, b in gaps[:5]))
lines.append(f"scrapes: {2 * len(rows)}, failed {failed} ({stalled} of them right after an observer stall); /metrics p50 {pct(ms, .5):.1f} ms p99 {pct(ms, .99):.1f} ms; /snapshot p50 {pct(ss, .5):.1f} ms p99 {pct(ss, .99):.1f} ms")
lines.append(f"zombies seen: {zombies}")
stale = [float(r["stale_entries"]) for r in rows if r["stale_entries"] not in ("", None)]
if stale:
    lines.append(f"stale gauge (sum over protocols): min {min(stale):.0f}, max {max(stale):.0f}, samples at 0: {sum(1 for v in stale if v == 0)} of {len(stale)}")
absent = sum(1 for r in rows if r["stale_entries"] in ("", None) and r["failed"] == "0")
lines.append(f"stale gauges absent from a good /metrics scrape: {absent} of {len(rows)} samples")
try:
    probes = json.load(open(os.path.join(out, "probes.json")))
    for name, p in sorted(probes.items()):
        lines.append(f"probe {name}: {p['runs']} runs seen, {p['ok']} ok, {p['absent']} absent, {p['failed']} failed")
        for e, n in sorted(p["errors"].items(), key=lambda kv: -kv[1])[:3]:
            lines.append(f"    {n} x {e}")
except (OSError, ValueError):
    pass
ok = (
    s <= bound
    and failed - stalled == 0
    and zombies == 0
    # fds follow the connections open at the sample (scrapes, kube-proxy's,
    # netlink sockets of a running probe): flat means no higher than 2 above.
    and max(col("fds", half)) <= max(col("fds", first)) + 2
    and max(col("threads", half)) <= max(col("threads", first))
)
lines.insert(0, "PASS" if ok else "FAIL")
print("\n".join(lines))
