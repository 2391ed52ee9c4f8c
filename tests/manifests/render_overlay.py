#!/usr/bin/env python3
"""Render manifests/ with the rbac-proxy component, without kustomize.

usage: render_overlay.py OUT.yaml

A fallback for machines without `kubectl kustomize` / `kustomize`. It supports
exactly what this repository uses: a base kustomization with `resources:` (plain
files), and a Component with `resources:` and JSON 6902 `patches:` (path +
target kind/name) using add / replace / remove. Anything else is an error, so
the fallback cannot silently diverge from kustomize; check.sh also compares the
two renderings when kustomize is available. Needs PyYAML.
"""
import copy
import os
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = os.path.join(ROOT, "manifests")
COMPONENT = os.path.join(BASE, "overlays", "rbac-proxy")


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_kustomization(directory, kind):
    k = load_yaml_docs(os.path.join(directory, "kustomization.yaml"))[0]
    if k.get("kind") != kind:
        raise SystemExit(f"{directory}: expected kind {kind}, got {k.get('kind')}")
    allowed = {"apiVersion", "kind", "resources", "patches", "components"}
    extra = set(k) - allowed
    if extra:
        raise SystemExit(f"{directory}/kustomization.yaml: unsupported fields {sorted(extra)}")
    return k


def split_pointer(path):
    if not path.startswith("/"):
        raise SystemExit(f"bad JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def walk(doc, parts):
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def apply_op(doc, op):
    parts = split_pointer(op["path"])
    parent, last = walk(doc, parts[:-1]), parts[-1]
    kind = op["op"]
    if kind == "add":
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            parent[last] = copy.deepcopy(op["value"])
    elif kind == "replace":
        if isinstance(parent, list):
            parent[int(last)] = copy.deepcopy(op["value"])
        else:
            if last not in parent:
                raise SystemExit(f"replace: {op['path']} does not exist")
            parent[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    else:
        raise SystemExit(f"unsupported JSON patch op {kind}")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base = load_kustomization(BASE, "Kustomization")
    if base.get("patches") or base.get("components"):
        raise SystemExit("base kustomization: patches/components not supported by this renderer")
    objs = []
    for r in base.get("resources", []):
        objs += load_yaml_docs(os.path.join(BASE, r))
    comp = load_kustomization(COMPONENT, "Component")
    for r in comp.get("resources", []):
        objs += load_yaml_docs(os.path.join(COMPONENT, r))
    for p in comp.get("patches", []):
        target = p["target"]
        if set(target) - {"group", "version", "kind", "name"}:
            raise SystemExit(f"unsupported patch target {target}")
        ops = load_yaml_docs(os.path.join(COMPONENT, p["path"]))[0]
        hits = [o for o in objs if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
        if len(hits) != 1:
            raise SystemExit(f"patch {p['path']}: {len(hits)} targets")
        for op in ops:
            apply_op(hits[0], op)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        yaml.safe_dump_all(objs, f, sort_keys=True)
    print(f"rendered {len(objs)} objects to {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
