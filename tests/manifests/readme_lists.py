#!/usr/bin/env python3
"""Write the agent's metric names and finding ids, as the README's tables list
them, for metric_names.py --known-list / --finding-ids.

usage: readme_lists.py README.md STAT_SAMPLE OUT_METRICS OUT_FINDING_IDS

tests/docs/readme.rs proves those tables equal what the agent emits (metrics
rendered for a node with every source) and its CHECKS, so these lists follow
the agent instead of being kept by hand. `proxywatch_conntrack_stat_<field>_total`
is expanded with the columns of STAT_SAMPLE, a captured /proc/net/stat/nf_conntrack
(the agent names the series after the kernel's header). Standard library only.
"""
import os
import re
import sys


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    readme, stat, out_metrics, out_ids = sys.argv[1:]
    # The README and the reference it links to (flags, endpoints, metrics).
    reference = os.path.join(os.path.dirname(os.path.abspath(readme)), "docs", "reference.md")
    text = open(readme, encoding="utf-8").read() + "\n" + open(reference, encoding="utf-8").read()
    fields = [f for f in open(stat, encoding="utf-8").readline().split() if f != "entries"]
    metrics = set()
    for line in text.splitlines():
        if not line.startswith("| `proxywatch_"):
            continue
        for name in re.findall(r"`(proxywatch_[a-z0-9_<>]+)`", cells(line)[0]):
            if "<field>" in name:
                metrics.update(name.replace("<field>", f) for f in fields)
            else:
                metrics.add(name)
    findings = text.split("\n## Findings\n", 1)[1].split("\n## ", 1)[0]
    ids = set()
    for line in findings.splitlines():
        c = cells(line)
        if len(c) >= 2 and re.fullmatch(r"`[a-z_]+`", c[0]) and re.search(r"info|warning|critical", c[1]):
            ids.add(c[0].strip("`"))
    if len(metrics) < 40 or len(ids) < 20:
        print(f"readme_lists.py: only {len(metrics)} metrics and {len(ids)} finding ids in {readme}", file=sys.stderr)
        return 1
    with open(out_metrics, "w", encoding="utf-8") as f:
        f.write("".join(f"{m}\n" for m in sorted(metrics)))
    with open(out_ids, "w", encoding="utf-8") as f:
        f.write("".join(f"{i}\n" for i in sorted(ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
