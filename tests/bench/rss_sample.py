"""Sleeps SECONDS, sampling the resident memory of each PID every 0.5 s over the second half;
writes to OUT the median VmRSS of each (KiB, in the order given) on one line, and prints, per PID,
the medians of VmRSS, RssAnon and RssFile (the binary's pages the process touched: the same file
for every agent, counted in each one's VmRSS) and the samples' range.

    rss_sample.py SECONDS OUT NAME=PID...
"""
import statistics
import sys
import time

seconds, out = float(sys.argv[1]), sys.argv[2]
agents = [(name, int(pid)) for name, pid in (a.split("=", 1) for a in sys.argv[3:])]
pids = [pid for _, pid in agents]
KEYS = ("VmRSS", "RssAnon", "RssFile")


def status(pid):
    v = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, rest = line.partition(":")
        if k in KEYS:
            v[k] = int(rest.split()[0])
    return v


t0 = time.monotonic()
samples = {p: [] for p in pids}
time.sleep(seconds / 2)
while time.monotonic() - t0 < seconds:
    for p in pids:
        samples[p].append(status(p))
    time.sleep(0.5)
med = {p: {k: statistics.median(s[k] for s in samples[p]) for k in KEYS} for p in pids}
open(out, "w").write(" ".join(str(int(med[p]["VmRSS"])) for p in pids) + "\n")
for name, p in agents:
    rss = [s["VmRSS"] for s in samples[p]]
    print(f"{name} (pid {p}): median KiB VmRSS {med[p]['VmRSS']:.0f} RssAnon {med[p]['RssAnon']:.0f} "
          f"RssFile {med[p]['RssFile']:.0f}; VmRSS {min(rss)}-{max(rss)} over {len(rss)} samples", file=sys.stderr)
