#!/usr/bin/env python3
"""Checks of rendered manifests (kustomize output), one file per combination of components.

    check_rendered.py [--prometheus NAMESPACE/NAME] RENDERED.yaml

  - every DaemonSet selects Linux nodes (nodeSelector kubernetes.io/os: linux): the agent
    and NPD read netfilter, conntrack and IPVS, which a Windows node has none of, and
    tolerate every taint;
  - when NPD's DaemonSet is there, its plugin can reach the agent: PROXYWATCH_NPD_FROM is
    plain http (the plugin has no TLS client) on the agent's --listen port, at an address
    the agent listens on as NPD's pod sees it: 127.0.0.1 needs NPD on the host network
    (the agent is); with the rbac-proxy component, the node's address is kube-rbac-proxy's
    HTTPS port, so only 127.0.0.1 works;
  - with --prometheus: a Role in the agent's namespace, bound to that ServiceAccount, lets
    it get, list and watch services, endpoints, endpointslices and pods there (what
    Prometheus' service discovery needs for the ServiceMonitor and the PodMonitor); without
    it, no RoleBinding names a Prometheus ServiceAccount (the base binds nothing).

Exits 1 with one line per problem. Needs PyYAML.
"""
import re
import sys

import yaml

NEEDED = {("", "services"), ("", "endpoints"), ("", "pods"), ("discovery.k8s.io", "endpointslices")}
VERBS = {"get", "list", "watch"}


def pod_spec(ds):
    return ds["spec"]["template"]["spec"]


def check_linux(docs, errors):
    for d in docs:
        if d.get("kind") == "DaemonSet":
            sel = pod_spec(d).get("nodeSelector") or {}
            if sel.get("kubernetes.io/os") != "linux":
                errors.append(f"DaemonSet {d['metadata']['name']}: nodeSelector kubernetes.io/os is "
                              f"{sel.get('kubernetes.io/os')!r}, not 'linux' (it tolerates every taint: "
                              f"it would be scheduled on Windows nodes)")


def check_npd_reaches_agent(docs, errors):
    by_name = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "DaemonSet"}
    npd = by_name.get("proxywatch-node-problem-detector")
    if npd is None:
        return
    agent_pod = pod_spec(by_name["proxywatch"])
    agent = [c for c in agent_pod["containers"] if c["name"] == "proxywatch"][0]
    listen = [a.split("=", 1)[1] for a in agent.get("args", []) if a.startswith("--listen=")]
    if len(listen) != 1:
        errors.append(f"agent: expected one --listen, got {agent.get('args')}")
        return
    l_host, l_port = listen[0].rsplit(":", 1)
    proxied = any(c["name"] == "kube-rbac-proxy" for c in agent_pod["containers"])
    pod = pod_spec(npd)
    c = [c for c in pod["containers"] if c["name"] == "node-problem-detector"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    url = env.get("PROXYWATCH_NPD_FROM")
    m = re.fullmatch(r"(\w+)://([^/:]+|\$\(\w+\)):(\d+)/?", url or "")
    if not m:
        errors.append(f"NPD: PROXYWATCH_NPD_FROM {url!r} is not scheme://host:port")
        return
    scheme, host, port = m.groups()
    why = None
    if scheme != "http":
        why = "the plugin speaks plain http only"
    elif port != l_port:
        why = f"the agent listens on port {l_port}"
    elif host == "127.0.0.1":
        if not pod.get("hostNetwork"):
            why = "127.0.0.1 is NPD's own pod there, not the node: NPD needs hostNetwork"
        elif l_host not in ("127.0.0.1", "0.0.0.0"):
            why = f"the agent listens on {l_host} only"
    elif l_host == "127.0.0.1":
        why = ("the agent listens on the node's 127.0.0.1 only"
               + (" and the node's address is kube-rbac-proxy's HTTPS port (rbac-proxy component): every "
                  "condition would be Unknown; NPD must run on the host network and read http://127.0.0.1:"
                  + l_port if proxied else ""))
    if why:
        errors.append(f"NPD cannot read the agent: PROXYWATCH_NPD_FROM={url} but {why}")


def rules_allow(role, ns):
    allowed = set()
    for r in role.get("rules", []):
        if not VERBS <= set(r.get("verbs", [])) and "*" not in r.get("verbs", []):
            continue
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                allowed.add((g, res))
    return allowed


def check_prometheus(docs, want, errors, agent_ns="proxywatch"):
    roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if d.get("kind") == "Role"}
    bindings = [d for d in docs if d.get("kind") == "RoleBinding"]
    granted = set()
    bound_sas = set()
    for b in bindings:
        ns = b["metadata"].get("namespace")
        for s in b.get("subjects", []):
            if s.get("kind") == "ServiceAccount":
                bound_sas.add(f"{s.get('namespace')}/{s['name']}")
        if ns != agent_ns or b["roleRef"]["kind"] != "Role":
            continue
        if not any(s.get("kind") == "ServiceAccount" and f"{s.get('namespace')}/{s['name']}" == want
                   for s in b.get("subjects", [])):
            continue
        role = roles.get((ns, b["roleRef"]["name"]))
        if role is None:
            errors.append(f"RoleBinding {b['metadata']['name']}: its Role {b['roleRef']['name']} is not rendered")
            continue
        granted |= rules_allow(role, ns)
    if want is None:
        sas = sorted(s for s in bound_sas if "prometheus" in s)
        if sas:
            errors.append(f"a RoleBinding names {sas} without the kube-prometheus component")
        return
    missing = sorted(f"{g or 'core'}/{r}" for g, r in NEEDED - granted)
    if missing:
        errors.append(f"ServiceAccount {want} may not get/list/watch {missing} in namespace {agent_ns}: "
                      f"Prometheus would discover no target there")


def main():
    args = sys.argv[1:]
    want = None
    if args[:1] == ["--prometheus"]:
        want, args = args[1], args[2:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    docs = [d for d in yaml.safe_load_all(open(args[0], encoding="utf-8")) if d]
    errors = []
    check_linux(docs, errors)
    check_npd_reaches_agent(docs, errors)
    check_prometheus(docs, want, errors)
    for e in errors:
        print(f"ERROR: {args[0]}: {e}", file=sys.stderr)
    if not errors:
        n_ds = sum(d.get("kind") == "DaemonSet" for d in docs)
        print(f"{args[0]}: {n_ds} DaemonSets select Linux"
              + ("; NPD reads the agent" if any(d.get("kind") == "DaemonSet" and d["metadata"]["name"].endswith("problem-detector") for d in docs) else "")
              + (f"; {want} may discover the agents" if want else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
