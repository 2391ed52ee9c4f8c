#!/usr/bin/env python3
"""Extract .spec of a PrometheusRule manifest into a plain Prometheus rules file.

usage: extract_rules.py PROMETHEUSRULE.yaml OUT.yaml

Needs PyYAML (installed in check.sh's venv).
"""
import sys

import yaml


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if len(rules) != 1:
        print(f"{src}: expected exactly one PrometheusRule, found {len(rules)}", file=sys.stderr)
        return 1
    spec = rules[0].get("spec") or {}
    if not spec.get("groups"):
        print(f"{src}: PrometheusRule has no spec.groups", file=sys.stderr)
        return 1
    with open(out, "w", encoding="utf-8") as f:
        yaml.safe_dump(spec, f, sort_keys=False, width=1000)
    n = sum(len(g.get("rules", [])) for g in spec["groups"])
    print(f"extracted {len(spec['groups'])} group(s), {n} rule(s) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
