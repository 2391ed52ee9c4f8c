#!/usr/bin/env python3
"""Exit 0 if two multi-document YAML files hold the same set of objects
(order-insensitive), else print the differing objects. Needs PyYAML."""
import json
import sys

import yaml


def objects(path):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


a, b = objects(sys.argv[1]), objects(sys.argv[2])
bad = sorted(k for k in set(a) | set(b) if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True))
for k in bad:
    print(f"differs: {k}\n  {sys.argv[1]}: {json.dumps(a.get(k), sort_keys=True)}\n  {sys.argv[2]}: {json.dumps(b.get(k), sort_keys=True)}")
sys.exit(1 if bad else 0)
