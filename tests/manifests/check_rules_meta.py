#!/usr/bin/env python3
"""Consistency checks that promtool does not do. Needs PyYAML.

  - every alert has a severity label (info|warning|critical), summary,
    description and a runbook_url pointing at an existing heading of
    docs/alerts.md;
  - every selector of up / proxywatch_* in an expr carries job="proxywatch";
  - the job label that the ServiceMonitor and PodMonitor produce (jobLabel ->
    Service / pod label value) is "proxywatch";
  - every alert has promtool tests in alerts_test.yaml where it fires and where
    it does not.
"""
import os
import re
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUNBOOK = "docs/alerts.md#"  # render-rules.py's default RUNBOOK_URL_PATTERN, %s = the anchor
SEVERITIES = {"info", "warning", "critical"}
SEL_RE = re.compile(r"(?<![A-Za-z0-9_:])(up|proxywatch_[A-Za-z0-9_]+)\b(\s*\{[^}]*\})?")


def load(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def github_anchors(md_path):
    anchors = set()
    with open(os.path.join(ROOT, md_path), encoding="utf-8") as f:
        in_code = False
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code or not line.startswith("#"):
                continue
            text = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            anchors.add(slug)
    return anchors


def main():
    errors = []
    anchors = github_anchors("docs/alerts.md")
    rule = [d for d in load("manifests/prometheusrule.yaml") if d["kind"] == "PrometheusRule"][0]
    alerts = set()
    for group in rule["spec"]["groups"]:
        if group["name"] != "proxywatch":
            errors.append(f"group {group['name']!r}: expected 'proxywatch'")
        for r in group["rules"]:
            name = r.get("alert") or r.get("record")
            alerts.add(r["alert"]) if "alert" in r else None
            sev = r.get("labels", {}).get("severity", "")
            if "alert" in r and sev not in SEVERITIES and "{{" not in sev:
                errors.append(f"{name}: severity {sev!r} not in {sorted(SEVERITIES)}")
            ann = r.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if "alert" in r and not ann.get(key):
                    errors.append(f"{name}: missing annotation {key}")
            url = ann.get("runbook_url", "")
            if url:
                if not url.startswith(RUNBOOK):
                    errors.append(f"{name}: runbook_url {url} does not start with {RUNBOOK}")
                elif url[len(RUNBOOK):] not in anchors:
                    errors.append(f"{name}: runbook anchor #{url[len(RUNBOOK):]} is not a heading of docs/alerts.md")
            for metric, sel in SEL_RE.findall(r["expr"]):
                if 'job="proxywatch"' not in sel.replace(" ", ""):
                    errors.append(f"{name}: selector {metric}{sel.strip()} lacks job=\"proxywatch\"")

    # job label produced by the ServiceMonitor / PodMonitor
    svc = load("manifests/service.yaml")[0]
    ds = load("manifests/daemonset.yaml")[0]
    for path, labels in (("manifests/servicemonitor.yaml", svc["metadata"]["labels"]),
                         ("manifests/podmonitor.yaml", ds["spec"]["template"]["metadata"]["labels"])):
        mon = load(path)[0]
        job_label = mon["spec"].get("jobLabel")
        if labels.get(job_label) != "proxywatch":
            errors.append(f"{path}: jobLabel {job_label!r} gives job={labels.get(job_label)!r}, expected 'proxywatch'")

    # tests
    tests = load("tests/manifests/alerts_test.yaml")[0]
    fired, quiet = set(), set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            (fired if a.get("exp_alerts") else quiet).add(a["alertname"])
    for a in sorted(alerts):
        if a not in fired:
            errors.append(f"{a}: no promtool test where it fires")
        if a not in quiet:
            errors.append(f"{a}: no promtool test where it must not fire")
    for a in sorted((fired | quiet) - alerts):
        errors.append(f"alerts_test.yaml tests unknown alert {a}")

    print(f"{len(alerts)} alerts: severity, annotations, runbook anchors, job selectors and test coverage checked")
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
