#!/usr/bin/env python3
"""Writes manifests/dashboards/proxywatch.json, the Grafana dashboard (the JSON is generated:
edit this file, run it, commit both; tests/manifests/lint_files.py checks they agree).

    python3 tests/tools/gen_dashboard.py [OUT]      (default: manifests/dashboards/proxywatch.json)
    python3 tests/tools/gen_dashboard.py --runbook-url-pattern 'https://git.example.com/ops/proxywatch/-/blob/main/docs/alerts.md#%s' OUT

The runbook links (the dashboard's link, the panels that name an alert) follow the same pattern as
manifests/render-rules.py's --runbook-url-pattern, with the same default (docs/alerts.md#%s).

Built for a fleet: every query selects by the cluster, job and instance variables; fleet rows
show counts, quantiles across nodes, top-10 nodes and "worst nodes" tables, never one line per
node; the last row drills down into one node ($node), where per-node series belong.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DS = {"type": "prometheus", "uid": "${datasource}"}
# The fleet selector, and the drill-down one (a single node).
S = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
N = 'cluster=~"$cluster", job=~"$job", instance="$node"'
TOP = 10
# The runbook links: render-rules.py's pattern (the mixins' runbookURLPattern), %s = the alert's
# anchor in docs/alerts.md; the dashboard's own link is the page without an anchor.
sys.path.insert(0, os.path.join(ROOT, "manifests"))
_rules = __import__("render-rules")
sys.path.pop(0)
_args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_args.add_argument("--runbook-url-pattern", default=_rules.RUNBOOK_URL_PATTERN, metavar="PATTERN",
                   help="as render-rules.py's: %%s = the alert's anchor in docs/alerts.md")
_args.add_argument("out", nargs="?", default=os.path.join(ROOT, "manifests", "dashboards", "proxywatch.json"))
ARGS = _args.parse_args()
RUNBOOK_URL_PATTERN = ARGS.runbook_url_pattern
try:
    _rules.render_runbooks("", RUNBOOK_URL_PATTERN)
except ValueError as e:
    sys.exit(f"gen_dashboard.py: {e}")


def runbook(anchor):
    url = RUNBOOK_URL_PATTERN.replace("%s", anchor)
    return url if anchor else url.rstrip("#")

panels = []
_y = [0]
_x = [0]
_row_h = [0]
_id = [0]


def next_id():
    _id[0] += 1
    return _id[0]


def row(title):
    newline()
    panels.append({"id": next_id(), "type": "row", "title": title, "collapsed": False,
                   "gridPos": {"x": 0, "y": _y[0], "w": 24, "h": 1}, "panels": []})
    _y[0] += 1


def newline():
    if _x[0]:
        _y[0] += _row_h[0]
        _x[0], _row_h[0] = 0, 0


def place(w, h):
    if _x[0] + w > 24:
        newline()
    pos = {"x": _x[0], "y": _y[0], "w": w, "h": h}
    _x[0] += w
    _row_h[0] = max(_row_h[0], h)
    return pos


def target(ref, expr, legend="", instant=False):
    t = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend}
    if instant:
        t.update({"instant": True, "format": "table"})
    return t


def thresholds(*steps):
    out = [{"color": "green", "value": None}]
    out += [{"color": c, "value": v} for v, c in steps]
    return {"mode": "absolute", "steps": out}


def stat(title, desc, expr, w=4, h=4, red_at=1, unit=None):
    defaults = {"thresholds": thresholds((red_at, "red"))}
    if unit:
        defaults["unit"] = unit
    panels.append({
        "id": next_id(), "type": "stat", "title": title, "description": desc, "datasource": DS,
        "gridPos": place(w, h), "targets": [target("A", expr)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "none", "textMode": "value"},
    })


def timeseries(title, desc, exprs, unit=None, w=12, h=8, steps=None, minmax=None):
    """exprs: [(expr, legend)]."""
    defaults = {"custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never"}}
    if unit:
        defaults["unit"] = unit
    if minmax:
        defaults["min"], defaults["max"] = minmax
    if steps:
        defaults["thresholds"] = thresholds(*steps)
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    panels.append({
        "id": next_id(), "type": "timeseries", "title": title, "description": desc, "datasource": DS,
        "gridPos": place(w, h),
        "targets": [target(chr(65 + i), e, l) for i, (e, l) in enumerate(exprs)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    })


def table(title, desc, exprs, w=12, h=8, rename=None, sort=None, merge=False, limit=None):
    """exprs: [expr] (instant queries, one column each when merged)."""
    transformations = []
    if merge:
        transformations.append({"id": "merge", "options": {}})
    transformations.append({"id": "organize", "options": {
        "excludeByName": {"Time": True, "__name__": True, "job": True},
        "renameByName": rename or {}}})
    if sort:
        transformations.append({"id": "sortBy", "options": {"sort": [{"field": sort, "desc": True}]}})
    if limit:
        transformations.append({"id": "limit", "options": {"limitField": limit}})
    panels.append({
        "id": next_id(), "type": "table", "title": title, "description": desc, "datasource": DS,
        "gridPos": place(w, h),
        "targets": [target(chr(65 + i), e, instant=True) for i, e in enumerate(exprs)],
        "fieldConfig": {"defaults": {"thresholds": thresholds()}, "overrides": []},
        "options": {"showHeader": True},
        "transformations": transformations,
    })


def top(expr):
    return f"topk({TOP}, {expr})"


# ------------------------------------------------------------------ fleet
row("Fleet")
stat("Nodes not ready", "Nodes whose agent reports a critical finding (proxywatch_node_ready == 0).",
     f"count(proxywatch_node_ready{{{S}}} == 0) or vector(0)")
stat("Agents scraped", "Agents Prometheus scrapes (up == 1).", f"sum(up{{{S}}})", red_at=None)
panels[-1]["fieldConfig"]["defaults"]["thresholds"] = thresholds()
stat("Agents down", "Agents Prometheus cannot scrape (up == 0): their nodes are not watched.",
     f"count(up{{{S}}} == 0) or vector(0)")
stat("Critical findings", "Findings at severity 3 over all nodes (proxywatch_finding_severity == 3).",
     f"count(proxywatch_finding_severity{{{S}}} == 3) or vector(0)")
stat("Warning findings", "Findings at severity 2 over all nodes.",
     f"count(proxywatch_finding_severity{{{S}}} == 2) or vector(0)")
stat("Probes failing", "(node, probe) pairs whose latest run failed (proxywatch_probe_success == 0).",
     f"count(proxywatch_probe_success{{{S}}} == 0) or vector(0)")
timeseries("Nodes not ready", "Nodes with a critical finding, over time.",
           [(f"count(proxywatch_node_ready{{{S}}} == 0) or vector(0)", "not ready")], w=8, h=7)
timeseries("Active findings by severity", "Active findings over all nodes (proxywatch_active_findings).",
           [(f"sum by (severity) (proxywatch_active_findings{{{S}}})", "{{severity}}")], w=8, h=7)
timeseries("Nodes per kube-proxy mode", "Nodes by the mode kube-proxy's /proxyMode reports (a state set: the 1s).",
           [(f"count by (mode) (proxywatch_kube_proxy_mode{{{S}}} == 1)", "{{mode}}")], w=8, h=7)
table("Worst nodes", f"The {25} nodes with the most severe finding first; a column per concern. "
      "Severity 3 critical, 2 warning, 1 info. Pick one in $node for the drill-down row.",
      [f"max by (cluster, instance) (proxywatch_finding_severity{{{S}}})",
       f"max by (cluster, instance) (proxywatch_conntrack_entries{{{S}}} / proxywatch_conntrack_entries_limit{{{S}}})",
       f"sum by (cluster, instance) (proxywatch_conntrack_stale_entries{{{S}}})",
       f"histogram_quantile(0.99, sum by (cluster, instance, le) (rate(proxywatch_kube_proxy_sync_latency_seconds_bucket{{{S}}}[5m])))",
       f"count by (cluster, instance) (proxywatch_probe_success{{{S}}} == 0)"],
      w=12, h=9, merge=True, sort="worst severity", limit=25,
      rename={"Value #A": "worst severity", "Value #B": "conntrack fill", "Value #C": "stale entries",
              "Value #D": "sync p99 5m (s)", "Value #E": "probes failing"})
table("Active findings (severity >= 2)", "One row per node and finding id, most severe first; "
      f"2 = warning, 3 = critical. See {runbook('')}.",
      [f"sort_desc(proxywatch_finding_severity{{{S}}} >= 2)"], w=12, h=9,
      rename={"Value": "severity"})

# ------------------------------------------------------------------ conntrack
row("Conntrack")
fill = f"proxywatch_conntrack_entries{{{S}}} / proxywatch_conntrack_entries_limit{{{S}}}"
timeseries(f"Conntrack table fill: top {TOP} nodes",
           "nf_conntrack_count / nf_conntrack_max of the fullest nodes. Alerts: 80% for 5m (warning), 95% for 2m (critical).",
           [(top(fill), "{{instance}}")], unit="percentunit", minmax=(0, 1),
           steps=((0.8, "orange"), (0.95, "red")))
timeseries("Conntrack table fill across nodes", "Distribution over the selected nodes: max, p90, median.",
           [(f"max({fill})", "max"), (f"quantile(0.9, {fill})", "p90"), (f"quantile(0.5, {fill})", "median")],
           unit="percentunit", minmax=(0, 1))
timeseries(f"Conntrack time to full: soonest {TOP} nodes",
           "Projected time until the table is full at its fitted growth rate (nodes that are not growing are left out). "
           "Alerts below 1h (warning) and 10m (critical).",
           [(f"bottomk({TOP}, proxywatch_conntrack_seconds_to_full{{{S}}} < +Inf)", "{{instance}}")], unit="s")
timeseries(f"Conntrack drops per second: top {TOP} nodes",
           "New flows dropped (drop + early_drop) and insertions that failed (insert_failed).",
           [(top(f"rate(proxywatch_conntrack_stat_drop_total{{{S}}}[5m]) + rate(proxywatch_conntrack_stat_early_drop_total{{{S}}}[5m])"),
             "{{instance}} drop"),
            (top(f"rate(proxywatch_conntrack_stat_insert_failed_total{{{S}}}[5m])"), "{{instance}} insert_failed")],
           unit="ops")
timeseries(f"Stale conntrack entries: top {TOP} nodes",
           "Entries NATed to an endpoint their service no longer has (flows to removed pods).",
           [(top(f"sum by (cluster, instance) (proxywatch_conntrack_stale_entries{{{S}}})"), "{{instance}}")])
timeseries("Nodes with a conntrack limit below kube-proxy's sizing",
           "Nodes whose nf_conntrack_max is below max(131072, 32768 x CPUs).",
           [(f"count(proxywatch_conntrack_entries_limit{{{S}}} < on (cluster, job, instance) "
             f"proxywatch_conntrack_recommended_limit{{{S}}}) or vector(0)", "nodes")])

# ------------------------------------------------------------------ iptables
row("iptables")
timeseries(f"iptables rules: top {TOP} nodes", "Rules over every backend, family and table.",
           [(top(f"sum by (cluster, instance) (proxywatch_iptables_rules{{{S}}})"), "{{instance}}")])
timeseries(f"iptables-save duration: top {TOP} nodes", "Slowest iptables-save per node (kube-proxy pays the same cost).",
           [(top(f"max by (cluster, instance) (proxywatch_iptables_save_duration_seconds{{{S}}})"), "{{instance}}")],
           unit="s")
timeseries("Nodes per iptables backend", "Nodes by the backend kube-proxy's rules are in (a state set: the 1s).",
           [(f"count by (backend) (proxywatch_iptables_backend_in_use{{{S}}} == 1)", "{{backend}}")])
timeseries("Nodes where iptables-nft-save and netlink disagree", "Nodes with count mismatches at the latest cross-check.",
           [(f"count(proxywatch_iptables_count_mismatches{{{S}}} > 0) or vector(0)", "nodes")])

timeseries(f"Service traffic rejected or dropped by kube-proxy: top {TOP} nodes",
           "Packets per second (rate over 5m of proxywatch_service_rejected_packets_total) kube-proxy's iptables rules rejected (Service without endpoints) or dropped "
           "(externalTrafficPolicy: Local without a local endpoint; conntrack-invalid), per node and reason. "
           "The Services are named in the finding service_traffic_rejected and in /snapshot. "
           f"Not available in kube-proxy's nftables mode. See {runbook('proxywatchservicetrafficrejected')}.",
           [(top(f"sum by (cluster, instance, reason) (rate(proxywatch_service_rejected_packets_total{{{S}}}[5m])) > 0"),
             "{{instance}} {{reason}}")], unit="pps")

# ------------------------------------------------------------------ nftables
row("nftables")
timeseries(f"nftables rules: top {TOP} nodes", "Rules in kube-proxy's nftables tables (ipv4 + ipv6).",
           [(top(f"sum by (cluster, instance) (proxywatch_nftables_rules{{{S}}})"), "{{instance}}")])
timeseries(f"nftables service-ips elements: top {TOP} nodes", "Elements of kube-proxy's service-ips map (one per service IP and port).",
           [(top(f"sum by (cluster, instance) (proxywatch_nftables_map_elements{{{S}, map=\"service-ips\"}})"), "{{instance}}")])
timeseries(f"nftables endpoint chains: top {TOP} nodes", "endpoint-* chains (one per endpoint).",
           [(top(f"sum by (cluster, instance) (proxywatch_nftables_endpoint_chains{{{S}}})"), "{{instance}}")])
timeseries(f"nftables read duration: top {TOP} nodes", "Wall time of reading kube-proxy's table over netlink.",
           [(top(f"max by (cluster, instance) (proxywatch_nftables_list_duration_seconds{{{S}}})"), "{{instance}}")],
           unit="s")

# ------------------------------------------------------------------ IPVS
row("IPVS")
timeseries(f"IPVS virtual servers: top {TOP} nodes", "Virtual servers over every protocol and scheduler.",
           [(top(f"sum by (cluster, instance) (proxywatch_ipvs_virtual_servers{{{S}}})"), "{{instance}}")])
timeseries(f"IPVS virtual servers without backends: top {TOP} nodes",
           "Virtual servers with no real server or only weight-0 ones (traffic to them is dropped).",
           [(top(f"proxywatch_ipvs_virtual_servers_without_backends{{{S}}} > 0"), "{{instance}}")])
timeseries(f"IPVS real servers at weight 0, the longest: top {TOP} nodes",
           "How long the oldest real server now at weight 0 has been so, from the agent's first reading of it: "
           "kube-proxy keeps a removed TCP endpoint's real server at weight 0 until its connections end. "
           f"See {runbook('proxywatchipvsrealserverslingering')}.",
           [(top(f"proxywatch_ipvs_weight_zero_max_seconds{{{S}}} > 0"), "{{instance}}")], unit="s")
timeseries(f"IPVS real servers at weight 0: top {TOP} nodes", "Real servers at weight 0, by protocol of their virtual server.",
           [(top(f"sum by (cluster, instance, protocol) (proxywatch_ipvs_weight_zero_real_servers{{{S}}}) > 0"),
             "{{instance}} {{protocol}}")])
timeseries(f"IPVS connections per second: top {TOP} nodes", "Connections IPVS scheduled (/proc/net/ip_vs_stats).",
           [(top(f"rate(proxywatch_ipvs_connections_total{{{S}}}[5m])"), "{{instance}}")], unit="ops")
timeseries("IPVS real servers across nodes", "Real servers per node over the selected nodes: max and median.",
           [(f"max(proxywatch_ipvs_real_servers{{{S}}})", "max"),
            (f"quantile(0.5, proxywatch_ipvs_real_servers{{{S}}})", "median")])

# ------------------------------------------------------------------ node limits
row("Node limits")
timeseries(f"Neighbour table fill (entries / gc_thresh3): top {TOP} nodes",
           "The kernel's ARP (ipv4) and NDP (ipv6) tables: entries over gc_thresh3, past which new neighbours are "
           "refused. One table per kernel for every namespace; per-device ARP counts do not show it. "
           f"See {runbook('proxywatchneighbourtableoverflow')}.",
           [(top(f"proxywatch_neighbour_entries{{{S}}} / on (cluster, job, instance, family) "
                 f"proxywatch_neighbour_gc_thresh{{{S}, level=\"3\"}}"), "{{instance}} {{family}}")],
           unit="percentunit")
timeseries(f"Neighbours refused per second: top {TOP} nodes",
           "New neighbours the kernel refused because the table was full: \"neighbour table overflow\", new flows "
           "failing with ENOBUFS.",
           [(top(f"rate(proxywatch_neighbour_table_fulls_total{{{S}}}[5m]) > 0"), "{{instance}} {{family}}")],
           unit="ops")
timeseries(f"NodePorts an outgoing connection can take: top {TOP} nodes",
           "NodePorts and healthCheckNodePorts inside net.ipv4.ip_local_port_range and not reserved; the finding "
           "node_ports_in_ephemeral_range prints the value that reserves them.",
           [(top(f"proxywatch_node_ports_in_ephemeral_range{{{S}}} > 0"), "{{instance}}")])
timeseries(f"SNAT source ports in use, fullest group: top {TOP} nodes",
           "Per node, the fullest (translated source, destination, port, protocol) group of source-NATed "
           "connections: ports in use over the ports the rule allows (its --to-ports, else 1024-65535). At 1 new "
           f"connections to that destination fail. See {runbook('proxywatchsnatportsnearexhaustion')}; the "
           "groups are in /snapshot (facts.conntrack_stale.snat.top).",
           [(top(f"proxywatch_snat_ports_fill_ratio{{{S}}}"), "{{instance}}")],
           unit="percentunit", steps=[(0.8, "orange"), (1, "red")])

# ------------------------------------------------------------------ kube-proxy
row("kube-proxy")
SYNC_H = "proxywatch_kube_proxy_sync_latency_seconds_bucket"
PROG_H = "proxywatch_kube_proxy_network_programming_latency_seconds_bucket"


def p99(metric, by):
    """The p99 over 5m of a re-exported kube-proxy histogram: buckets summed, then the quantile."""
    return f"histogram_quantile(0.99, sum by ({by}) (rate({metric}{{{S}}}[5m])))"


timeseries("kube-proxy rule sync p99 across nodes",
           "p99 over 5 minutes of every sync of the selected nodes (kube-proxy's buckets, summed across nodes), "
           "and of the worst node. Within one of kube-proxy's buckets (they double from 1 ms to 16.384 s).",
           [(p99(SYNC_H, "le"), "fleet p99"), (f"max({p99(SYNC_H, 'cluster, instance, le')})", "worst node p99")],
           unit="s")
timeseries(f"kube-proxy rule sync p99: top {TOP} nodes", "Each node's p99 over 5 minutes, from its syncs' buckets.",
           [(top(p99(SYNC_H, "cluster, instance, le")), "{{instance}}")], unit="s")
timeseries("kube-proxy network programming p99 across nodes",
           "Service change to rules programmed: p99 over 5 minutes of the selected nodes, and of the worst node.",
           [(p99(PROG_H, "le"), "fleet p99"), (f"max({p99(PROG_H, 'cluster, instance, le')})", "worst node p99")],
           unit="s")
timeseries(f"kube-proxy network programming p99: top {TOP} nodes", "Each node's p99 over 5 minutes.",
           [(top(p99(PROG_H, "cluster, instance, le")), "{{instance}}")], unit="s")
timeseries(f"kube-proxy last sync age: top {TOP} nodes", "Seconds since kube-proxy's last successful sync.",
           [(top(f"proxywatch_kube_proxy_last_sync_age_seconds{{{S}}}"), "{{instance}}")], unit="s")
timeseries("kube-proxy down, throttled, restarted (nodes)",
           "Nodes where kube-proxy is down where it belongs (kube_proxy_down critical; a node without kube-proxy is not counted), "
           "whose kube-proxy is CPU-throttled in more than 10% of periods, "
           "or restarted in the last hour.",
           [(f"count(proxywatch_finding_severity{{{S}, id=\"kube_proxy_down\"}} == 3) or vector(0)", "down"),
            (f"count(proxywatch_kube_proxy_cpu_throttled_ratio{{{S}}} > 0.1) or vector(0)", "throttled > 10%"),
            (f"count(increase(proxywatch_kube_proxy_restarts_total{{{S}}}[1h]) > 0) or vector(0)", "restarted (1h)")])

# ------------------------------------------------------------------ probes and agent
row("Probes and agent")
timeseries("Probe failures", "Nodes where each probe's latest run failed.",
           [(f"count by (probe) (proxywatch_probe_success{{{S}}} == 0)", "{{probe}}")])
timeseries("Probe duration (slowest node)", "Wall time of each probe's latest run, on the slowest node.",
           [(f"max by (probe) (proxywatch_probe_duration_seconds{{{S}}})", "{{probe}}")], unit="s")
table("Agent versions", "Agents per version and revision (proxywatch_build_info).",
      [f"count by (version, revision) (proxywatch_build_info{{{S}}})"], h=6, rename={"Value": "agents"})
table("Failing probes", "Seconds since each failing probe last succeeded, per node.",
      [f"(time() - proxywatch_probe_last_success_timestamp_seconds{{{S}}}) and on (cluster, job, instance, probe) "
       f"(proxywatch_probe_success{{{S}}} == 0)"], h=6, rename={"Value": "seconds since success"})

# ------------------------------------------------------------------ one node
row("Node drill-down: $node")
table("Findings on $node", "Every finding not ok on this node: 1 info, 2 warning, 3 critical.",
      [f"sort_desc(proxywatch_finding_severity{{{N}}} > 0)"], w=8, h=8, rename={"Value": "severity"})
timeseries("Conntrack entries and limits", "Entries, the kernel's limit, kube-proxy's recommended limit.",
           [(f"proxywatch_conntrack_entries{{{N}}}", "entries"),
            (f"proxywatch_conntrack_entries_limit{{{N}}}", "limit"),
            (f"proxywatch_conntrack_recommended_limit{{{N}}}", "recommended")], w=8, h=8)
timeseries("Conntrack drops and stale entries", "Drops per second, and entries to removed endpoints by protocol.",
           [(f"rate(proxywatch_conntrack_stat_drop_total{{{N}}}[5m]) + rate(proxywatch_conntrack_stat_early_drop_total{{{N}}}[5m])", "drops/s"),
            (f"rate(proxywatch_conntrack_stat_insert_failed_total{{{N}}}[5m])", "insert_failed/s"),
            (f"proxywatch_conntrack_stale_entries{{{N}}}", "stale {{protocol}}")], w=8, h=8)
timeseries("iptables rules by backend, family, table", "Rules per table as iptables-save shows them.",
           [(f"proxywatch_iptables_rules{{{N}}}", "{{backend}} {{family}} {{table}}")], w=8, h=8)
timeseries("nftables and IPVS sizes", "kube-proxy's nftables rules and chains per family; IPVS virtual and real servers.",
           [(f"proxywatch_nftables_rules{{{N}}}", "nft rules {{family}}"),
            (f"proxywatch_nftables_chains{{{N}}}", "nft chains {{family}}"),
            (f"sum(proxywatch_ipvs_virtual_servers{{{N}}})", "ipvs virtual servers"),
            (f"proxywatch_ipvs_real_servers{{{N}}}", "ipvs real servers")], w=8, h=8)
timeseries("kube-proxy sync and programming latency", "p50 and p99 over 5 minutes, from kube-proxy's buckets.",
           [(f"histogram_quantile({q}, sum by (le) (rate({m}{{{N}}}[5m])))", f"{what} p{q * 100:g}")
            for m, what in ((SYNC_H, "sync"), (PROG_H, "programming")) for q in (0.5, 0.99)],
           unit="s", w=8, h=8)
timeseries("Probe durations", "Wall time of each probe's latest run on this node.",
           [(f"proxywatch_probe_duration_seconds{{{N}}}", "{{probe}}")], unit="s", w=12, h=8)
timeseries("Probe success", "1 when the probe's latest run succeeded or found its source absent, 0 when it failed.",
           [(f"proxywatch_probe_success{{{N}}}", "{{probe}}")], w=12, h=8, minmax=(0, 1))


def var(name, label, query, multi=True, include_all=True, current=None, desc=""):
    v = {"name": name, "label": label, "description": desc, "type": "query", "datasource": DS,
         "query": {"query": query, "refId": name}, "definition": query,
         "multi": multi, "includeAll": include_all, "current": current or {}, "refresh": 2, "sort": 1,
         "hide": 0, "regex": "", "options": []}
    if include_all:
        v["allValue"] = ".*"
    return v


dashboard = {
    "title": "proxywatch / kube-proxy data plane",
    "uid": "proxywatch-fleet",
    "description": "Fleet view of the proxywatch node agent: the worst nodes first, top-10 nodes per concern "
                   "(conntrack, iptables, nftables, IPVS, kube-proxy), and a drill-down row for one node.",
    "tags": ["proxywatch", "kube-proxy", "kubernetes"],
    "timezone": "browser",
    "editable": True,
    "graphTooltip": 1,
    "schemaVersion": 39,
    "version": 2,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "links": [{"title": "Runbook", "type": "link",
               "url": runbook(""), "targetBlank": True}],
    "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                              "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                              "name": "Annotations & Alerts", "type": "dashboard"}]},
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []},
        var("cluster", "Cluster", "label_values(proxywatch_build_info, cluster)",
            desc="The cluster label your Prometheus adds (external or relabelled); All when there is none."),
        var("job", "Job", 'label_values(proxywatch_build_info{cluster=~"$cluster"}, job)', multi=False,
            include_all=False, current={"text": "proxywatch", "value": "proxywatch"},
            desc="The agents' scrape job: proxywatch, as the alert rules select (the ServiceMonitor's jobLabel)."),
        var("instance", "Nodes", 'label_values(proxywatch_build_info{cluster=~"$cluster", job=~"$job"}, instance)',
            desc="Restricts every fleet panel to these nodes."),
        var("node", "Drill-down node",
            'label_values(proxywatch_build_info{cluster=~"$cluster", job=~"$job", instance=~"$instance"}, instance)',
            multi=False, include_all=False, desc="The node of the drill-down row."),
    ]},
    "panels": panels,
}


def main():
    with open(ARGS.out, "w", encoding="utf-8") as f:
        json.dump(dashboard, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
