#!/usr/bin/env python3
"""Render manifests/ (with the rbac-proxy component), without kustomize.

usage: render_overlay.py OUT.yaml [--base DIR] [--no-component]

A fallback for machines without `kubectl kustomize` / `kustomize`. It supports
exactly what this repository uses: a base kustomization with `resources:` (plain
files), `images:` (name, newName, newTag, digest, applied as kustomize's image
transformer does) and `replacements:` (one source and target fieldPaths of the
form a.b.[key=value].c, with delimiter/index options, which fail as kustomize's
do when the index is out of bounds); and a Component with `resources:` and JSON
6902 `patches:` (path + target kind/name) using add / replace / remove. Anything
else is an error, so the fallback cannot silently diverge from kustomize;
check.sh also compares the two renderings when kustomize is available.

--base DIR renders that copy of manifests/ (e.g. one whose image was set, as the
README's Deploy section does) instead of the repository's; --no-component
renders the base alone. Exits 1 with kustomize's message when the base does not
render (the image not set). Needs PyYAML.
"""
import copy
import os
import re
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_kustomization(directory, kind):
    k = load_yaml_docs(os.path.join(directory, "kustomization.yaml"))[0]
    if k.get("kind") != kind:
        raise SystemExit(f"{directory}: expected kind {kind}, got {k.get('kind')}")
    allowed = {"apiVersion", "kind", "resources", "patches", "components", "images", "replacements"}
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


# ---------------------------------------------------------------- images
def split_image(value):
    """kustomize's image.Split: (name, tag, digest), a registry port not taken for a tag."""
    slash = value.find("/")
    search, offset = (value[slash:], slash) if slash > 0 else (value, 0)
    at, colon = search.find("@"), search.find(":")
    if colon < 0 and at < 0:
        return value, "", ""
    if at >= 0 and (at < colon or colon < 0):
        at += offset
        return value[:at], "", value[at + 1:]
    if at >= 0 and colon >= 0:
        at, colon = at + offset, colon + offset
        return value[:colon], value[colon + 1:at], value[at + 1:]
    colon += offset
    return value[:colon], value[colon + 1:], ""


def image_matches(value, name):
    """kustomize's image.IsImageMatched."""
    return re.match("^" + name + r"(@sha256)?(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9]*)?$", value) is not None


def set_images(objs, images):
    for im in images:
        extra = set(im) - {"name", "newName", "newTag", "digest"}
        if extra:
            raise SystemExit(f"images: unsupported fields {sorted(extra)}")
        for o in objs:
            pod = (o.get("spec") or {}).get("template", {}).get("spec") or {}
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                if not image_matches(c.get("image", ""), im["name"]):
                    continue
                name, tag, digest = split_image(c["image"])
                name = im.get("newName") or name
                new_tag, new_digest = str(im.get("newTag", "") or ""), im.get("digest", "") or ""
                if new_tag and new_digest:
                    tag, digest = new_tag, new_digest
                elif new_tag:
                    tag, digest = new_tag, ""
                elif new_digest:
                    tag, digest = "", new_digest
                c["image"] = name + (":" + tag if tag else "") + ("@" + digest if digest else "")


# ---------------------------------------------------------------- replacements
def field(obj, path, where):
    """(parent, key) of a fieldPath like spec.template.spec.containers.[name=x].image."""
    parts = path.split(".")
    node = obj
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        m = re.fullmatch(r"\[(\w+)=([^\]]+)\]", p)
        if m:
            if not isinstance(node, list):
                raise SystemExit(f"{where}: {path}: {p} on a non-list")
            hits = [x for x in node if isinstance(x, dict) and str(x.get(m.group(1))) == m.group(2)]
            if len(hits) != 1:
                raise SystemExit(f"{where}: {path}: {len(hits)} items match {p}")
            if last:
                raise SystemExit(f"{where}: {path}: unsupported")
            node = hits[0]
            continue
        if not isinstance(node, dict) or p not in node:
            raise SystemExit(f"{where}: fieldPath {path} not found")
        if last:
            return node, p
        node = node[p]
    raise SystemExit(f"{where}: {path}: empty")


def select(objs, sel, where):
    if set(sel) - {"kind", "name"}:
        raise SystemExit(f"{where}: unsupported selector {sel}")
    hits = [o for o in objs if o["kind"] == sel["kind"] and o["metadata"]["name"] == sel["name"]]
    if not hits:
        raise SystemExit(f"{where}: nothing selected by {sel}")
    return hits


def part(value, options, index_value=None):
    """kustomize's delimiter/index options: read (index_value None) or replace a part.

    As kustomize (api/filters/replacement): reading a part that does not exist is an
    error; writing one past the end appends it (before the first: prepends it)."""
    delim, index = options.get("delimiter", ""), options.get("index", 0)
    if not delim:
        return value if index_value is None else index_value
    parts = value.split(delim)
    if index_value is not None:
        if index < 0:
            parts.insert(0, index_value)
        elif index >= len(parts):
            parts.append(index_value)
        else:
            parts[index] = index_value
        return delim.join(parts)
    if index < 0 or index >= len(parts):
        # kustomize's own message (api/filters/replacement), so the two renderers agree.
        print(f"Error: options.index {index} is out of bounds for value {value}", file=sys.stderr)
        raise SystemExit(1)
    return parts[index]


def replace(objs, replacements):
    for r in replacements:
        src = r["source"]
        if set(src) - {"kind", "name", "fieldPath", "options"} or set(src.get("options", {})) - {"delimiter", "index"}:
            raise SystemExit(f"replacements: unsupported source {src}")
        o = select(objs, {"kind": src["kind"], "name": src["name"]}, "replacement source")
        parent, key = field(o[0], src["fieldPath"], "replacement source")
        value = part(parent[key], src.get("options", {}))
        for t in r["targets"]:
            if set(t) - {"select", "fieldPaths", "options"}:
                raise SystemExit(f"replacements: unsupported target {t}")
            for obj in select(objs, t["select"], "replacement target"):
                for fp in t["fieldPaths"]:
                    parent, key = field(obj, fp, "replacement target")
                    parent[key] = part(parent[key], t.get("options", {}), value)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out, base_dir, component = args[0], os.path.join(ROOT, "manifests"), True
    rest = args[1:]
    while rest:
        a = rest.pop(0)
        if a == "--base" and rest:
            base_dir = os.path.abspath(rest.pop(0))
        elif a == "--no-component":
            component = False
        else:
            print(__doc__, file=sys.stderr)
            return 2
    base = load_kustomization(base_dir, "Kustomization")
    if base.get("patches") or base.get("components"):
        raise SystemExit("base kustomization: patches/components not supported by this renderer")
    objs = []
    for r in base.get("resources", []):
        objs += load_yaml_docs(os.path.join(base_dir, r))
    # kustomize's order within one kustomization: images, then replacements.
    set_images(objs, base.get("images", []))
    replace(objs, base.get("replacements", []))
    if component:
        comp_dir = os.path.join(base_dir, "overlays", "rbac-proxy")
        comp = load_kustomization(comp_dir, "Component")
        for r in comp.get("resources", []):
            objs += load_yaml_docs(os.path.join(comp_dir, r))
        for p in comp.get("patches", []):
            target = p["target"]
            if set(target) - {"group", "version", "kind", "name"}:
                raise SystemExit(f"unsupported patch target {target}")
            ops = load_yaml_docs(os.path.join(comp_dir, p["path"]))[0]
            hits = [o for o in objs if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
            if len(hits) != 1:
                raise SystemExit(f"patch {p['path']}: {len(hits)} targets")
            for op in ops:
                apply_op(hits[0], op)
    with open(out, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(objs, f, sort_keys=True)
    print(f"rendered {len(objs)} objects to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
