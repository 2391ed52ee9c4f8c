#!/usr/bin/env python3
"""Structural checks of manifests/ that the schema validators do not do.

usage: lint_files.py [RENDERED_OVERLAY.yaml]

  - every YAML file parses, with no duplicate keys;
  - every object has the app.kubernetes.io/name=proxywatch label, and an
    explicit namespace "proxywatch" when it is namespaced;
  - the DaemonSet keeps the properties the project relies on (security
    context, probes, host namespaces, resources, ...), in the base and in the
    rendered rbac-proxy overlay;
  - ServiceMonitor, PodMonitor and PrometheusRule validate against the small
    strict JSON schemas below, written from the prometheus-operator API
    reference (monitoring.coreos.com/v1) for the fields this repository uses;
    cert-manager's Issuer and Certificate likewise (cert-manager.io/v1);
  - in the rendered rbac-proxy overlay, the ServiceMonitor verifies the
    sidecar's certificate: https, no insecureSkipVerify, serverName among the
    certificate's dnsNames, the CA from the Secret the sidecar serves;
  - the Grafana dashboard is valid JSON with a datasource variable, unique panel
    ids, and a query in every panel; fit for a fleet: cluster, job (default
    proxywatch, the rules' job), instance and node variables in every selector,
    fleet time series aggregated or top/bottom-k (never one series per node),
    a "worst nodes" table, a drill-down row for $node, IPVS and nftables panels;
    no panel reads a gauge that is a rate (a `*_per_second` gauge or one whose help says
    "per second", as the agent's source declares it; nor does an alert rule: rates of rates and averages of
    windows do not aggregate; the counter beside it, under rate(), does), nor a summary's
    `quantile` (the agent's window: histogram_quantile() of the histogram instead);
    and it is what tests/tools/gen_dashboard.py writes;
  - the Dockerfile's ENTRYPOINT runs tini as a child subreaper (tini -s).
Needs PyYAML and jsonschema (both in check.sh's venv).
"""
import glob
import json
import os
import re
import sys

import jsonschema
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
errors = []


class StrictLoader(yaml.SafeLoader):
    pass


def _no_dupes(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_dupes)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]


# ---------------------------------------------------------------- CRD schemas
def obj(props, required=()):
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


STR = {"type": "string"}
STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
LABEL_SELECTOR = obj({"matchLabels": STRMAP, "matchExpressions": {"type": "array"}})
NS_SELECTOR = obj({"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": STR}})
RELABEL = obj({
    "action": {"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
                        "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
                        "keepequal", "KeepEqual", "dropequal", "DropEqual"]},
    "sourceLabels": {"type": "array", "items": STR}, "separator": STR, "targetLabel": STR,
    "regex": STR, "modulus": {"type": "integer"}, "replacement": STR})
TLS = obj({"insecureSkipVerify": {"type": "boolean"}, "serverName": STR, "caFile": STR, "certFile": STR, "keyFile": STR,
           "ca": {"type": "object"}, "cert": {"type": "object"}, "keySecret": {"type": "object"}})
ENDPOINT_COMMON = {
    "path": STR, "scheme": {"enum": ["http", "https"]}, "interval": DURATION, "scrapeTimeout": DURATION,
    "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
    "relabelings": {"type": "array", "items": RELABEL}, "metricRelabelings": {"type": "array", "items": RELABEL},
    "tlsConfig": TLS, "bearerTokenSecret": {"type": "object"}, "authorization": {"type": "object"},
    "params": {"type": "object"}, "followRedirects": {"type": "boolean"}, "enableHttp2": {"type": "boolean"},
    "filterRunning": {"type": "boolean"}, "proxyUrl": STR}
SM_ENDPOINT = obj(dict(ENDPOINT_COMMON, port=STR, targetPort={"type": ["string", "integer"]}, bearerTokenFile=STR))
PM_ENDPOINT = obj(dict(ENDPOINT_COMMON, port=STR, targetPort={"type": ["string", "integer"]}))
META = {"type": "object", "required": ["name", "namespace"]}
SCHEMAS = {
    "ServiceMonitor": obj({"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"}, "metadata": META,
                           "spec": obj({"jobLabel": STR, "targetLabels": {"type": "array", "items": STR},
                                        "podTargetLabels": {"type": "array", "items": STR},
                                        "endpoints": {"type": "array", "minItems": 1, "items": SM_ENDPOINT},
                                        "selector": LABEL_SELECTOR, "namespaceSelector": NS_SELECTOR,
                                        "sampleLimit": {"type": "integer"}}, ["selector", "endpoints"])},
                          ["apiVersion", "kind", "metadata", "spec"]),
    "PodMonitor": obj({"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PodMonitor"}, "metadata": META,
                       "spec": obj({"jobLabel": STR, "podTargetLabels": {"type": "array", "items": STR},
                                    "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": PM_ENDPOINT},
                                    "selector": LABEL_SELECTOR, "namespaceSelector": NS_SELECTOR,
                                    "sampleLimit": {"type": "integer"}}, ["selector", "podMetricsEndpoints"])},
                      ["apiVersion", "kind", "metadata", "spec"]),
    "PrometheusRule": obj({"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"}, "metadata": META,
                           "spec": obj({"groups": {"type": "array", "minItems": 1, "items": obj({
                               "name": STR, "interval": DURATION, "limit": {"type": "integer"}, "query_offset": DURATION,
                               "labels": STRMAP, "partial_response_strategy": STR,
                               "rules": {"type": "array", "items": {"oneOf": [
                                   obj({"alert": STR, "expr": STR, "for": DURATION, "keep_firing_for": DURATION,
                                        "labels": STRMAP, "annotations": STRMAP}, ["alert", "expr"]),
                                   obj({"record": STR, "expr": STR, "labels": STRMAP}, ["record", "expr"])]}}},
                               ["name", "rules"])}}, ["groups"])},
                          ["apiVersion", "kind", "metadata", "spec"]),
}


# cert-manager (cert-manager.io/v1), the fields the rbac-proxy component uses.
ISSUER_REF = obj({"group": {"const": "cert-manager.io"}, "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "name": STR},
                 ["kind", "name"])
PRIVATE_KEY = obj({"algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                   "rotationPolicy": {"enum": ["Never", "Always"]}, "encoding": {"enum": ["PKCS1", "PKCS8"]}})
SCHEMAS["Issuer"] = obj({"apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Issuer"}, "metadata": META,
                         "spec": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                                  "properties": {"selfSigned": {"type": "object"},
                                                 "ca": obj({"secretName": STR}, ["secretName"])}}},
                        ["apiVersion", "kind", "metadata", "spec"])
SCHEMAS["Certificate"] = obj({"apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Certificate"}, "metadata": META,
                              "spec": obj({"secretName": STR, "issuerRef": ISSUER_REF, "isCA": {"type": "boolean"},
                                           "commonName": STR, "dnsNames": {"type": "array", "items": STR},
                                           "duration": STR, "renewBefore": STR, "privateKey": PRIVATE_KEY,
                                           "usages": {"type": "array", "items": STR}},
                                          ["secretName", "issuerRef"])},
                             ["apiVersion", "kind", "metadata", "spec"])


def check_crd(o, where):
    schema = SCHEMAS.get(o.get("kind"))
    if schema is None:
        return False
    for e in jsonschema.Draft7Validator(schema).iter_errors(o):
        errors.append(f"{where}: {o['kind']}/{o['metadata'].get('name')}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    return True


# ---------------------------------------------------------------- DaemonSet policy
def get(o, path):
    for p in path.split("."):
        if isinstance(o, list):
            o = o[int(p)]
        elif isinstance(o, dict):
            o = o.get(p)
        else:
            return None
    return o


def check_daemonset(ds, where, overlay):
    pod = ds["spec"]["template"]["spec"]
    agent = [c for c in pod["containers"] if c["name"] == "proxywatch"][0]
    expect = {
        "spec.updateStrategy.type": "RollingUpdate",
        "spec.template.spec.hostNetwork": True,
        "spec.template.spec.hostPID": True,
        "spec.template.spec.dnsPolicy": "ClusterFirstWithHostNet",
        "spec.template.spec.priorityClassName": "system-node-critical",
        "spec.template.spec.automountServiceAccountToken": False,
        "spec.template.spec.tolerations": [{"operator": "Exists"}],
    }
    for path, want in expect.items():
        if get(ds, path) != want:
            errors.append(f"{where}: DaemonSet {path} = {get(ds, path)!r}, expected {want!r}")
    if not get(ds, "spec.updateStrategy.rollingUpdate.maxUnavailable"):
        errors.append(f"{where}: DaemonSet needs rollingUpdate.maxUnavailable")
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        n = c["name"]
        for key, want in (("allowPrivilegeEscalation", False), ("readOnlyRootFilesystem", True)):
            if sc.get(key) != want:
                errors.append(f"{where}: container {n}: securityContext.{key} must be {want}")
        if sc.get("privileged"):
            errors.append(f"{where}: container {n} must not be privileged")
        if get(sc, "seccompProfile.type") != "RuntimeDefault":
            errors.append(f"{where}: container {n}: seccompProfile must be RuntimeDefault")
        if get(sc, "capabilities.drop") != ["ALL"]:
            errors.append(f"{where}: container {n}: capabilities.drop must be [ALL]")
        if not get(c, "resources.requests.memory") or not get(c, "resources.limits.memory"):
            errors.append(f"{where}: container {n}: memory request and limit required")
    sc = agent["securityContext"]
    if sorted(get(sc, "capabilities.add") or []) != ["NET_ADMIN", "NET_RAW"]:
        errors.append(f"{where}: agent capabilities.add must be exactly NET_ADMIN, NET_RAW")
    if sc.get("runAsUser") != 0:
        errors.append(f"{where}: agent must run as uid 0 (capabilities)")
    for probe in ("livenessProbe", "readinessProbe"):
        if get(agent, f"{probe}.httpGet.path") != "/healthz":
            errors.append(f"{where}: agent {probe} must be httpGet /healthz (never /readyz)")
    listen = [a for a in agent.get("args", []) if a.startswith("--listen=")]
    want_listen = "--listen=127.0.0.1:9877" if overlay else "--listen=0.0.0.0:9877"
    if agent.get("args", [None])[0] != "serve" or listen != [want_listen]:
        errors.append(f"{where}: agent args must be serve {want_listen}, got {agent.get('args')}")
    env = {e["name"]: e for e in agent.get("env", [])}
    if get(env.get("PROXYWATCH_NODE_NAME", {}), "valueFrom.fieldRef.fieldPath") != "spec.nodeName":
        errors.append(f"{where}: PROXYWATCH_NODE_NAME must come from spec.nodeName")
    cgroup_mounts = [m["mountPath"] for m in agent.get("volumeMounts", []) if m["name"] == "host-cgroup"]
    if env.get("PROXYWATCH_HOST_CGROUP_ROOT", {}).get("value") not in cgroup_mounts:
        errors.append(f"{where}: PROXYWATCH_HOST_CGROUP_ROOT must be the host-cgroup volume's mountPath")
    host_paths = [v for v in pod.get("volumes", []) if "hostPath" in v]
    # /lib/modules for modules.builtin; the host's cgroupfs for kube-proxy's cgroup (the
    # container's own /sys/fs/cgroup shows only its subtree); the xtables lock file, stat'ed
    # to find its holder in /proc/locks. All read-only, below.
    if [v["hostPath"]["path"] for v in host_paths] != ["/lib/modules", "/sys/fs/cgroup", "/run/xtables.lock"]:
        errors.append(f"{where}: the only hostPath volumes must be /lib/modules, /sys/fs/cgroup and /run/xtables.lock, got {host_paths}")
    # FileOrCreate: an empty type would let the runtime make a directory of a missing lock file.
    for v in host_paths:
        if v["hostPath"]["path"] == "/run/xtables.lock" and v["hostPath"].get("type") != "FileOrCreate":
            errors.append(f"{where}: the /run/xtables.lock hostPath must be type FileOrCreate, got {v['hostPath']}")
    for m in agent.get("volumeMounts", []):
        if m["name"] in {v["name"] for v in host_paths} and not m.get("readOnly"):
            errors.append(f"{where}: hostPath mount {m['mountPath']} must be readOnly")
    if overlay:
        names = [c["name"] for c in pod["containers"]]
        if "kube-rbac-proxy" not in names:
            errors.append(f"{where}: overlay must add the kube-rbac-proxy sidecar")
        ports = [p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])]
        if len(ports) != len(set(ports)):
            errors.append(f"{where}: duplicate containerPorts under hostNetwork: {ports}")


def check_npd_daemonset(ds, where):
    """overlays/npd: NPD running proxywatch's plugin only, with less than NPD's own privileges."""
    pod = ds["spec"]["template"]["spec"]
    for key in ("hostPID", "hostIPC"):
        if pod.get(key):
            errors.append(f"{where}: NPD DaemonSet must not set {key}")
    # The host network, to read the agent on the node's loopback (tests/manifests/check_rendered.py):
    # NPD's own server then binds 127.0.0.1, its Prometheus exporter is off.
    npd = [c for c in pod["containers"] if c["name"] == "node-problem-detector"][0]
    cmd = npd.get("command", [])
    if not pod.get("hostNetwork") or "--address=127.0.0.1" not in cmd or "--prometheus-port=0" not in cmd:
        errors.append(f"{where}: NPD DaemonSet: hostNetwork, --address=127.0.0.1 and --prometheus-port=0, got {cmd}")
    if any("hostPath" in v for v in pod.get("volumes", [])):
        errors.append(f"{where}: NPD DaemonSet must mount no hostPath")
    if get(pod, "securityContext.runAsNonRoot") is not True:
        errors.append(f"{where}: NPD pod must run as non-root")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc, n = c.get("securityContext", {}), c["name"]
        for key, want in (("allowPrivilegeEscalation", False), ("readOnlyRootFilesystem", True), ("runAsNonRoot", True)):
            if sc.get(key) != want:
                errors.append(f"{where}: container {n}: securityContext.{key} must be {want}")
        if sc.get("privileged") or get(sc, "capabilities.add"):
            errors.append(f"{where}: container {n} must not be privileged nor add capabilities")
        if get(sc, "capabilities.drop") != ["ALL"] or get(sc, "seccompProfile.type") != "RuntimeDefault":
            errors.append(f"{where}: container {n}: drop ALL capabilities, seccomp RuntimeDefault")
        if not get(c, "resources.requests.memory") or not get(c, "resources.limits.memory"):
            errors.append(f"{where}: container {n}: memory request and limit required")
    init = [c for c in pod.get("initContainers", []) if c["name"] == "install-proxywatch"]
    if not init or init[0].get("command", [None])[0] != "cp":
        errors.append(f"{where}: the install-proxywatch init container must copy the plugin binary")


# ---------------------------------------------------------------- dashboard
def check_dashboard(path):
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except ValueError as e:
        errors.append(f"{path}: invalid JSON: {e}")
        return 0
    vars_ = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    if vars_.get("datasource", {}).get("type") != "datasource" or vars_["datasource"].get("query") != "prometheus":
        errors.append(f"{path}: needs a 'datasource' template variable of type datasource (prometheus)")
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in d:
            errors.append(f"{path}: missing {key}")
    ids, n = set(), 0
    for p in d.get("panels", []):
        if p["id"] in ids:
            errors.append(f"{path}: duplicate panel id {p['id']}")
        ids.add(p["id"])
        if p.get("type") == "row":
            continue
        n += 1
        if get(p, "datasource.uid") != "${datasource}":
            errors.append(f"{path}: panel {p.get('title')!r} does not use the $datasource variable")
        if not p.get("targets") or not all(t.get("expr") for t in p["targets"]):
            errors.append(f"{path}: panel {p.get('title')!r} has no query")
        if "gridPos" not in p:
            errors.append(f"{path}: panel {p.get('title')!r} has no gridPos")
    check_dashboard_fleet(path, d, vars_)
    check_dashboard_no_rate_gauges(path, d)
    fill = [p for p in d.get("panels", []) if "conntrack_entries_limit" in json.dumps(p.get("targets", [])) and "fill" in p.get("title", "").lower()]
    steps = [s.get("value") for p in fill for s in get(p, "fieldConfig.defaults.thresholds.steps") or []]
    if not fill or 0.8 not in steps or 0.95 not in steps:
        errors.append(f"{path}: the conntrack fill panel needs 0.8 and 0.95 thresholds")
    return n


# A gauge as the agent declares it: out.gauge("name", "help", ...) or a one("name", "help", v)
# helper (which sets a gauge), in agent/expose/.
GAUGE_DECL_RE = re.compile(r'\b(?:gauge|one)\(\s*"(proxywatch_[a-z0-9_]+)",\s*"((?:[^"\\]|\\.)*)"', re.S)


def rate_gauges():
    """The agent's gauges that are rates: named *_per_second or described as per second."""
    out = {}
    for f in glob.glob(os.path.join(ROOT, "agent", "expose", "**", "*.rs"), recursive=True):
        for name, help_ in GAUGE_DECL_RE.findall(open(f, encoding="utf-8").read()):
            if name.endswith("_per_second") or "per second" in help_:
                out[name] = os.path.relpath(f, ROOT)
    return out


def check_dashboard_no_rate_gauges(path, d):
    gauges = rate_gauges()
    # The declarations are found at all (else the check would pass on nothing).
    if "proxywatch_service_rejected_packets_per_second" not in gauges:
        errors.append("lint_files.py: no rate gauge found in agent/expose/ (the declaration pattern is stale)")
    exprs = [(f"panel {p.get('title')!r}", t.get("expr", "")) for p in d.get("panels", []) for t in p.get("targets", [])]
    rules = yaml.safe_load(open(os.path.join(ROOT, "manifests", "prometheusrule.yaml"), encoding="utf-8"))
    exprs += [(f"alert {r.get('alert') or r.get('record')!r}", r["expr"])
              for g in rules["spec"]["groups"] for r in g["rules"]]
    for where, expr in exprs:
        for metric in re.findall(r"\bproxywatch_[a-z0-9_]+", expr):
            if metric in gauges:
                errors.append(f"{path}: {where} reads {metric}, a gauge that is a rate "
                              f"({gauges[metric]}): use rate() of its counter")
        # A summary's quantile is a window of one agent: it averages and adds to nothing.
        for metric, sel in SELECTOR_RE.findall(expr):
            if re.search(r"\bquantile\s*=", sel):
                errors.append(f"{path}: {where} reads a summary's quantile ({metric}{{{sel}}}): "
                              "use histogram_quantile() of the re-exported histogram")


SELECTOR_RE = re.compile(r"\b((?:proxywatch_[a-z0-9_]+)|up)\{([^}]*)\}")
AGG_RE = re.compile(r"^\s*(sort_desc\(|sort\(|histogram_quantile\(\s*[0-9.]+\s*,)?\s*(topk|bottomk|count|sum|max|min|avg|quantile)\b\s*(by\s*\(([^)]*)\))?\s*\(")


def check_dashboard_fleet(path, d, vars_):
    """Fit for a fleet: cluster/job/instance variables (job defaulting to the rules' job), every
    selector filtered by them, fleet panels that aggregate or pick the top nodes instead of
    drawing one series per node, a drill-down row for one node ($node), IPVS and nftables."""
    for name in ("cluster", "job", "instance", "node"):
        if vars_.get(name, {}).get("type") != "query":
            errors.append(f"{path}: needs a '{name}' query variable")
    if get(vars_.get("job", {}), "current.value") != "proxywatch":
        errors.append(f"{path}: the job variable must default to proxywatch, the job the alert rules select")
    if vars_.get("node", {}).get("multi") or vars_.get("node", {}).get("includeAll"):
        errors.append(f"{path}: the drill-down variable 'node' must select one node")
    drill, rows = False, []
    for p in d.get("panels", []):
        if p.get("type") == "row":
            drill = "$node" in p.get("title", "")
            rows.append(p.get("title", ""))
            continue
        for t in p.get("targets", []):
            expr = t.get("expr", "")
            sels = SELECTOR_RE.findall(expr)
            if not sels:
                errors.append(f"{path}: panel {p.get('title')!r}: no proxywatch selector in {expr!r}")
            for metric, sel in sels:
                m = sel.replace(" ", "")
                want = ['cluster=~"$cluster"', 'job=~"$job"', 'instance="$node"' if drill else 'instance=~"$instance"']
                for w in want:
                    if w not in m:
                        errors.append(f"{path}: panel {p.get('title')!r}: {metric}{{{sel}}} lacks {w}")
            if drill or p.get("type") != "timeseries":
                continue
            # A fleet time series: aggregated without instance, or the top/bottom k nodes.
            agg = AGG_RE.match(expr)
            if not agg:
                errors.append(f"{path}: fleet panel {p.get('title')!r} draws one series per node: {expr!r}")
            elif agg.group(2) not in ("topk", "bottomk") and "instance" in (agg.group(4) or ""):
                errors.append(f"{path}: fleet panel {p.get('title')!r} keeps one series per node: {expr!r}")
    if not any("$node" in r for r in rows):
        errors.append(f"{path}: no drill-down row (a row titled with $node)")
    text = json.dumps(d)
    for family in ("proxywatch_ipvs_", "proxywatch_nftables_"):
        if family not in text:
            errors.append(f"{path}: no panel on {family}*")
    if not any(p.get("type") == "table" and "worst" in p.get("title", "").lower() for p in d.get("panels", [])):
        errors.append(f"{path}: no 'worst nodes' table")
    # The JSON is generated: it must be what tests/tools/gen_dashboard.py writes.
    import subprocess, tempfile
    with tempfile.NamedTemporaryFile("r", suffix=".json") as tmp:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_dashboard.py"), tmp.name], check=True)
        if json.load(open(tmp.name)) != d:
            errors.append(f"{path}: differs from what tests/tools/gen_dashboard.py writes (edit the generator, run it)")


# ---------------------------------------------------------------- overlay TLS
def check_overlay_tls(objs, where):
    """Prometheus sends its token only to a server whose certificate it verifies:
    the ServiceMonitor's serverName is a name of the certificate the sidecar
    serves, and its CA is the issuer of that certificate."""
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    sm = by_kind.get("ServiceMonitor", [None])[0]
    if sm is None:
        errors.append(f"{where}: no ServiceMonitor")
        return
    ds = by_kind["DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    sidecar = [c for c in pod["containers"] if c["name"] == "kube-rbac-proxy"]
    certs = {c["spec"]["secretName"]: c for c in by_kind.get("Certificate", [])}
    issuers = {i["metadata"]["name"]: i for i in by_kind.get("Issuer", [])}
    for ep in sm["spec"]["endpoints"]:
        tls = ep.get("tlsConfig", {})
        if ep.get("scheme") != "https" or tls.get("insecureSkipVerify"):
            errors.append(f"{where}: ServiceMonitor endpoint {ep.get('port')}: must be https and verify the certificate")
            continue
        secret = get(tls, "ca.secret.name")
        cert = certs.get(secret)
        if cert is None or get(tls, "ca.secret.key") != "ca.crt":
            errors.append(f"{where}: ServiceMonitor CA must be ca.crt of a Certificate's Secret, got {tls.get('ca')}")
            continue
        if tls.get("serverName") not in cert["spec"].get("dnsNames", []):
            errors.append(f"{where}: serverName {tls.get('serverName')!r} is not in {secret}'s dnsNames")
        issuer = issuers.get(cert["spec"]["issuerRef"]["name"], {})
        if "ca" not in issuer.get("spec", {}):
            errors.append(f"{where}: {secret} must be issued by a CA Issuer (ca.crt is then that CA)")
        # The sidecar serves exactly that Secret's certificate.
        mounts = {v["name"]: get(v, "secret.secretName") for v in pod.get("volumes", []) if "secret" in v}
        paths = [m["mountPath"] for c in sidecar for m in c.get("volumeMounts", []) if mounts.get(m["name"]) == secret]
        args = [a for c in sidecar for a in c.get("args", [])]
        for flag, key in (("--tls-cert-file", "tls.crt"), ("--tls-private-key-file", "tls.key")):
            if not any(a == f"{flag}={p}/{key}" for p in paths for a in args):
                errors.append(f"{where}: kube-rbac-proxy must serve {flag}=<mount of {secret}>/{key}, args {args}")


# ---------------------------------------------------------------- Dockerfile
def check_dockerfile(path):
    """tini runs as a child subreaper (-s): under hostPID it is not PID 1."""
    with open(path, encoding="utf-8") as f:
        entry = [l for l in f if l.startswith("ENTRYPOINT")]
    if len(entry) != 1:
        errors.append(f"{path}: expected one ENTRYPOINT, found {len(entry)}")
        return
    argv = json.loads(entry[0][len("ENTRYPOINT"):])
    if argv[:3] != ["/usr/bin/tini", "-s", "--"]:
        errors.append(f"{path}: ENTRYPOINT must start with tini -s -- (a subreaper under hostPID), got {argv}")


def main():
    overlay_file = sys.argv[1] if len(sys.argv) > 1 else None
    yaml_files = sorted(glob.glob(os.path.join(ROOT, "manifests", "**", "*.yaml"), recursive=True)
                        + glob.glob(os.path.join(ROOT, "tests", "manifests", "*.yaml")))
    n_obj = n_crd = 0
    for path in yaml_files:
        rel = os.path.relpath(path, ROOT)
        try:
            docs = load(path)
        except yaml.YAMLError as e:
            errors.append(f"{rel}: {e}")
            continue
        if not rel.startswith("manifests/") or rel.endswith("kustomization.yaml") or not all(isinstance(d, dict) for d in docs):
            continue  # tests, kustomizations and JSON 6902 patches (lists)
        for o in docs:
            n_obj += 1
            kind, meta = o.get("kind"), o.get("metadata", {})
            if get(o, "metadata.labels")  is None or meta["labels"].get("app.kubernetes.io/name") != "proxywatch":
                errors.append(f"{rel}: {kind}/{meta.get('name')}: missing label app.kubernetes.io/name=proxywatch")
            if kind not in CLUSTER_SCOPED and meta.get("namespace") != "proxywatch":
                errors.append(f"{rel}: {kind}/{meta.get('name')}: namespace must be set explicitly to proxywatch")
            if check_crd(o, rel):
                n_crd += 1
            if kind == "DaemonSet" and meta.get("name") == "proxywatch-node-problem-detector":
                check_npd_daemonset(o, rel)
            elif kind == "DaemonSet":
                check_daemonset(o, rel, overlay=False)
    if overlay_file:
        rendered = load(overlay_file)
        for o in rendered:
            if check_crd(o, "rendered overlay"):
                n_crd += 1
            if o["kind"] == "DaemonSet":
                check_daemonset(o, "rendered overlay", overlay=True)
        check_overlay_tls(rendered, "rendered overlay")
    check_dockerfile(os.path.join(ROOT, "Dockerfile"))
    n_panels = check_dashboard(os.path.join(ROOT, "manifests", "dashboards", "proxywatch.json"))
    print(f"{len(yaml_files)} YAML files parsed (no duplicate keys); {n_obj} objects labelled and namespaced; "
          f"{n_crd} prometheus-operator and cert-manager objects schema-checked; DaemonSet policy checked"
          f"{' (base + overlay)' if overlay_file else ''}; Dockerfile entrypoint checked; dashboard: {n_panels} panels")
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
