#!/usr/bin/env python3
"""List every proxywatch_* metric (and finding id) used by the PrometheusRule and
the Grafana dashboard, and check that each one exists.

usage:
  metric_names.py [--rules R.yaml] [--dashboard D.json] --known-list known_metrics.txt [--finding-ids known_finding_ids.txt]
  metric_names.py [--rules R.yaml] [--dashboard D.json] METRICS_TEXT_FILE
  metric_names.py --list [--rules R.yaml] [--dashboard D.json]

METRICS_TEXT_FILE is the agent's real output (curl -s localhost:9877/metrics > m.txt).
In that mode the finding ids are checked against the proxywatch_finding_severity
series of the file (the agent exposes one per known id).

Defaults: manifests/prometheusrule.yaml and manifests/dashboards/proxywatch.json of
this repository. Python standard library only (the PrometheusRule is read with a
minimal line scanner, so PyYAML is not needed). Exit 0 when everything is found,
1 when something is missing, 2 on usage errors.
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NAME_RE = re.compile(r"(?<![A-Za-z0-9_:])(proxywatch_[a-zA-Z0-9_]+)")
# id="x" / id=~"x|y" inside a proxywatch_finding_severity selector
FINDING_SEL_RE = re.compile(r"proxywatch_finding_severity\s*\{([^}]*)\}")
ID_MATCHER_RE = re.compile(r'\bid\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"')
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+\S+")


def rule_texts(path):
    """Return the PromQL and annotation text of a PrometheusRule or rules file.

    Comments are dropped; everything else under `rules:` counts (expr and
    annotations may mention metric names: both must exist)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            out.append(stripped)
    return "".join(out)


def dashboard_texts(path):
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    texts = []

    def walk(node):
        if isinstance(node, dict):
            for key, val in node.items():
                if key in ("expr", "query", "definition") and isinstance(val, str):
                    texts.append(val)
                else:
                    walk(val)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dash)
    return "\n".join(texts)


def used_names(text):
    return set(NAME_RE.findall(text))


def used_finding_matchers(text):
    matchers = []
    for sel in FINDING_SEL_RE.findall(text):
        for op, val in ID_MATCHER_RE.findall(sel):
            matchers.append((op, val.replace('\\"', '"').replace("\\\\", "\\")))
    return matchers


def read_list(path):
    with open(path, encoding="utf-8") as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")}


def read_metrics_file(path):
    """Names and finding ids present in a Prometheus text exposition."""
    names, ids = set(), set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            m = SAMPLE_RE.match(line)
            if not m:
                continue
            names.add(m.group(1))
            if m.group(1) == "proxywatch_finding_severity" and m.group(2):
                idm = re.search(r'\bid="((?:[^"\\]|\\.)*)"', m.group(2))
                if idm:
                    ids.add(idm.group(1))
    return names, ids


def present(name, names):
    """A metric is present only if the file has at least one sample of it: a
    # HELP/# TYPE line alone (a labelled family with no child yet) does not count,
    since a rule on it would never match. A histogram's `_bucket`, `_count` or `_sum` series
    counts as its family's name (the README's tables and a synthetic file list families)."""
    return name in names or histogram_family(name) in names


def histogram_family(name):
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_ids(matchers, ids, where):
    bad = []
    for op, val in matchers:
        if op == "=":
            if val not in ids:
                bad.append(f'id="{val}" is not a known finding id ({where})')
        elif op == "=~":
            rx = re.compile(r"^(?:" + val + r")$")
            if not any(rx.match(i) for i in ids):
                bad.append(f'id=~"{val}" matches no known finding id ({where})')
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics_file", nargs="?", help="Prometheus text exposition from the agent's /metrics")
    ap.add_argument("--known-list", help="file with one known metric name per line")
    ap.add_argument("--finding-ids", help="file with one known finding id per line (with --known-list)")
    ap.add_argument("--rules", default=os.path.join(ROOT, "manifests", "prometheusrule.yaml"))
    ap.add_argument("--dashboard", default=os.path.join(ROOT, "manifests", "dashboards", "proxywatch.json"))
    ap.add_argument("--list", action="store_true", help="only print the names used, one per line")
    args = ap.parse_args()

    sources = {"rules": rule_texts(args.rules), "dashboard": dashboard_texts(args.dashboard)}
    used = {}
    for src, text in sources.items():
        for name in used_names(text):
            used.setdefault(name, set()).add(src)
    matchers = {src: used_finding_matchers(text) for src, text in sources.items()}

    if args.list:
        for name in sorted(used):
            print(name)
        return 0
    if bool(args.metrics_file) == bool(args.known_list):
        ap.error("give exactly one of METRICS_TEXT_FILE or --known-list")

    if args.known_list:
        known = read_list(args.known_list)
        ids = read_list(args.finding_ids) if args.finding_ids else None
        is_present = lambda n: present(n, known)  # noqa: E731
        against = args.known_list
    else:
        names, ids = read_metrics_file(args.metrics_file)
        if not names:
            print(f"{args.metrics_file}: no samples found", file=sys.stderr)
            return 1
        is_present = lambda n: present(n, names)  # noqa: E731
        against = args.metrics_file

    problems = []
    for name in sorted(used):
        ok = is_present(name)
        print(f"  {'ok     ' if ok else 'MISSING'} {name}  (used in {', '.join(sorted(used[name]))})")
        if not ok:
            problems.append(f"{name} is used in {', '.join(sorted(used[name]))} but not in {against}")
    if ids is not None:
        for src, ms in matchers.items():
            for op, val in ms:
                print(f"  finding matcher id{op}\"{val}\" ({src})")
            problems += check_ids(ms, ids, src)
    print(f"{len(used)} proxywatch_* metric names used; checked against {against}")
    for p in problems:
        print(f"ERROR: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
