#!/usr/bin/env python3
"""Generate a realistic kube-proxy (v1.28+, iptables mode) rule set.

Writes to stdout an ``iptables-restore`` input shaped like what kube-proxy
writes for N services x M endpoints, in the filter, nat and mangle tables,
plus the jumps from the builtin chains that kube-proxy adds with ``iptables -I``.

    python3 tests/tools/gen_kube_rules.py --services 100 --endpoints 2 \
        --expected expected.json > rules.txt
    ip netns exec NS iptables-restore < rules.txt      # or iptables-legacy-restore

Service i (0-based) is:
  * ClusterIP for all, TCP port 80 (every 7th is UDP port 53, port name "dns");
  * also NodePort when i % 4 == 0;
  * NodePort with externalTrafficPolicy: Local when i % 10 == 3 (KUBE-EXT + KUBE-SVL
    chains, a health-check node port in filter KUBE-NODEPORTS; its first endpoint is
    the only one on this node);
  * LoadBalancer with loadBalancerSourceRanges when i % 50 == 7 (KUBE-EXT + KUBE-FW
    chains, a DROP rule in filter KUBE-PROXY-FIREWALL);
  * without endpoints when --no-endpoints-every K and i % K == K-1 (as with --endpoints 0:
    only its "has no endpoints" REJECT in filter KUBE-SERVICES).

Chain names use kube-proxy's hashing (pkg/proxy/iptables/proxier.go):
base32(sha256(servicePortName + protocol [+ endpoint]))[:16], where
servicePortName is "namespace/name:portname" and protocol is lower case.

Addresses are only text in rules (no traffic is sent): ClusterIPs and LoadBalancer
IPs come from 10.96.0.0/12, endpoints from 10.244.0.0/16 (the pod CIDR). With --ipv6
the set is for ip6tables-restore: fd00:10:96::/108 and fd00:10:244::/64, endpoints
written [addr]:port, and no KUBE-FIREWALL localnet rule (kube-proxy adds it for IPv4 only).

--expected FILE writes the exact counts iptables-save prints after loading this
input into an empty network namespace (same for the nft and legacy backends):
per table {chains, rules} (builtin chains included), kube {svc, sep, ext, fw, svl},
hint_chain, kubelet_canary, proxy_canary and kube_rules (rules in a KUBE-* chain or
jumping to one); and service_table: what the rules route, as the agent's
conntrack_stale probe should read it — service_ports (ClusterIP and
load-balancer IP ports, NodePorts, and ports rejected for having no endpoints),
node_ports, and endpoints (summed over service ports); and health_check_node_ports:
the distinct healthCheckNodePorts in filter KUBE-NODEPORTS (the node_ports probe's).
"""

import argparse
import base64
import hashlib
import ipaddress
import json
import sys

POD_CIDR = "10.244.0.0/16"
V6 = {
    "pod_cidr": "fd00:10:244::/64",
    "cluster_ip_base": int(ipaddress.IPv6Address("fd00:10:96::a")),
    "lb_ip_base": int(ipaddress.IPv6Address("fd00:10:110::1")),
    "endpoint_base": int(ipaddress.IPv6Address("fd00:10:244::")),
    "lb_source_range": "fd00:10:100::/64",
}
MASQ_MARK = "0x4000"
BUILTINS = {
    "filter": ["INPUT", "FORWARD", "OUTPUT"],
    "nat": ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
    "mangle": ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
}
CLUSTER_IP_BASE = int(ipaddress.IPv4Address("10.96.0.10"))
LB_IP_BASE = int(ipaddress.IPv4Address("10.110.0.1"))
ENDPOINT_BASE = int(ipaddress.IPv4Address("10.244.0.0"))
LB_SOURCE_RANGE = "10.100.0.0/16"


def port_proto_hash(service_port_name, protocol):
    digest = hashlib.sha256((service_port_name + protocol).encode()).digest()
    return base64.b32encode(digest).decode()[:16]


def endpoint_hash(service_port_name, protocol, endpoint):
    digest = hashlib.sha256((service_port_name + protocol + endpoint).encode()).digest()
    return base64.b32encode(digest).decode()[:16]


def endpoint_ip(k, ipv6=False):
    """k-th endpoint address in 10.244.0.0/16, skipping .0 and .255 host parts."""
    if ipv6:
        return str(ipaddress.IPv6Address(V6["endpoint_base"] + k + 1))
    if k >= 256 * 254:
        raise SystemExit("too many endpoints for 10.244.0.0/16")
    return str(ipaddress.IPv4Address(ENDPOINT_BASE + (k // 254) * 256 + k % 254 + 1))


class Table:
    def __init__(self, name):
        self.name = name
        self.chains = []  # user chains, in declaration order
        self.rules = []

    def chain(self, name):
        self.chains.append(name)

    def rule(self, chain, args):
        self.rules.append((chain, args))

    def render(self, out):
        out.append("*" + self.name)
        for c in BUILTINS[self.name]:
            out.append(":%s ACCEPT [0:0]" % c)
        for c in self.chains:
            out.append(":%s - [0:0]" % c)
        for chain, args in self.rules:
            out.append("-A %s %s" % (chain, args))
        out.append("COMMIT")

    def counts(self):
        return {"chains": len(BUILTINS[self.name]) + len(self.chains), "rules": len(self.rules)}

    def kube_rules(self):
        n = 0
        for chain, args in self.rules:
            words = args.split()
            target = words[words.index("-j") + 1] if "-j" in words else ""
            if chain.startswith("KUBE-") or target.startswith("KUBE-"):
                n += 1
        return n


def generate(services, endpoints, hint=True, canary=True, ipv6=False, no_endpoints_every=0):
    pod_cidr = V6["pod_cidr"] if ipv6 else POD_CIDR
    lb_source_range = V6["lb_source_range"] if ipv6 else LB_SOURCE_RANGE

    def address(base4, base6, i):
        if ipv6:
            return str(ipaddress.IPv6Address(base6 + i))
        return str(ipaddress.IPv4Address(base4 + i))

    filt, nat, mangle = Table("filter"), Table("nat"), Table("mangle")
    kube = {"svc": 0, "sep": 0, "ext": 0, "fw": 0, "svl": 0}

    if canary:
        for t in (mangle, nat, filt):
            t.chain("KUBE-KUBELET-CANARY")
            t.chain("KUBE-PROXY-CANARY")
    if hint:
        mangle.chain("KUBE-IPTABLES-HINT")

    # filter: fixed chains and jumps from builtins (kube-proxy inserts them first).
    for c in ("KUBE-EXTERNAL-SERVICES", "KUBE-FIREWALL", "KUBE-FORWARD", "KUBE-NODEPORTS",
              "KUBE-PROXY-FIREWALL", "KUBE-SERVICES"):
        filt.chain(c)
    lbfw = '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL'
    filt.rule("INPUT", lbfw)
    filt.rule("INPUT", '-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS')
    filt.rule("INPUT", '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES')
    filt.rule("INPUT", "-j KUBE-FIREWALL")
    filt.rule("FORWARD", lbfw)
    filt.rule("FORWARD", '-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD')
    filt.rule("FORWARD", '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
    filt.rule("FORWARD", '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES')
    filt.rule("OUTPUT", lbfw)
    filt.rule("OUTPUT", '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
    filt.rule("OUTPUT", "-j KUBE-FIREWALL")
    if not ipv6:
        filt.rule("KUBE-FIREWALL", '-m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP')
    filt.rule("KUBE-FORWARD", "-m conntrack --ctstate INVALID -j DROP")
    filt.rule("KUBE-FORWARD", '-m comment --comment "kubernetes forwarding rules" -m mark --mark %s/%s -j ACCEPT' % (MASQ_MARK, MASQ_MARK))
    filt.rule("KUBE-FORWARD", '-m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT')

    # nat: fixed chains.
    for c in ("KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"):
        nat.chain(c)
    nat.rule("PREROUTING", '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
    nat.rule("OUTPUT", '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
    nat.rule("POSTROUTING", '-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING')
    nat.rule("KUBE-POSTROUTING", "-m mark ! --mark %s/%s -j RETURN" % (MASQ_MARK, MASQ_MARK))
    nat.rule("KUBE-POSTROUTING", "-j MARK --xor-mark %s" % MASQ_MARK)
    nat.rule("KUBE-POSTROUTING", '-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully')
    nat.rule("KUBE-MARK-MASQ", "-j MARK --or-mark %s" % MASQ_MARK)

    # Per-service rules are written chain by chain, like kube-proxy's buffers.
    services_rules, nodeports_rules = [], []
    filter_nodeports, filter_fw = [], []
    ep_counter = 0
    lb_counter = 0
    table = {"service_ports": 0, "node_ports": 0, "endpoints": 0}
    node_port_keys = set()
    health_check_ports = set()
    for i in range(services):
        udp = i % 7 == 6
        proto = "udp" if udp else "tcp"
        port = 53 if udp else 80
        port_name = "dns" if udp else "http"
        spn = "ns%d/svc-%d:%s" % (i % 50, i, port_name)
        cluster_ip = address(CLUSTER_IP_BASE, V6["cluster_ip_base"], i)
        local = i % 10 == 3
        lb_fw = i % 50 == 7
        nodeport = None
        if i % 4 == 0 or local or lb_fw:
            nodeport = 30000 + i % 2768
        external = nodeport is not None
        h = port_proto_hash(spn, proto)
        svc_chain, ext_chain = "KUBE-SVC-" + h, "KUBE-EXT-" + h
        svl_chain, fw_chain = "KUBE-SVL-" + h, "KUBE-FW-" + h
        target_port = 5353 if udp else 8080
        eps = []
        empty = no_endpoints_every > 0 and i % no_endpoints_every == no_endpoints_every - 1
        for _ in range(0 if empty else endpoints):
            ip = endpoint_ip(ep_counter, ipv6)
            ep_counter += 1
            eps.append((("[%s]:%d" if ipv6 else "%s:%d") % (ip, target_port), ip))
        sep_chains = ["KUBE-SEP-" + endpoint_hash(spn, proto, ep) for ep, _ in eps]
        has_endpoints = len(eps) > 0
        # Local endpoints: the first one, for externalTrafficPolicy: Local services.
        local_eps = eps[:1] if local else []
        local_seps = sep_chains[:1] if local else []
        match = "-m %s -p %s" % (proto, proto)

        # Every way in (ClusterIP, LB IP, NodePort) reaches every endpoint:
        # KUBE-EXT of an externalTrafficPolicy: Local service also goes to KUBE-SVC.
        # Beyond 2,768 NodePorts two services share one (30000 + i % 2768: not
        # something Kubernetes allows): one service port whose endpoints are both
        # services' (they never share an endpoint), so endpoints still add up.
        ways = 1 + (1 if lb_fw else 0)
        if nodeport and has_endpoints:
            table["endpoints"] += len(eps)
            if (proto, nodeport) not in node_port_keys:
                node_port_keys.add((proto, nodeport))
                table["service_ports"] += 1
                table["node_ports"] += 1
        if not has_endpoints:
            ways = 1
        table["service_ports"] += ways
        table["endpoints"] += ways * len(eps)
        if not has_endpoints:
            filt.rule("KUBE-SERVICES", '-m comment --comment "%s has no endpoints" %s -d %s --dport %d -j REJECT'
                      % (spn, match, cluster_ip, port))
            continue

        nat.chain(svc_chain)
        kube["svc"] += 1
        if external:
            nat.chain(ext_chain)
            kube["ext"] += 1
        lb_ip = None
        if lb_fw:
            lb_ip = address(LB_IP_BASE, V6["lb_ip_base"], lb_counter)
            lb_counter += 1
            nat.chain(fw_chain)
            kube["fw"] += 1
        if local and local_eps:
            nat.chain(svl_chain)
            kube["svl"] += 1
        for c in sep_chains:
            nat.chain(c)
            kube["sep"] += 1

        services_rules.append('-m comment --comment "%s cluster IP" %s -d %s --dport %d -j %s'
                              % (spn, match, cluster_ip, port, svc_chain))
        if lb_ip:
            services_rules.append('-m comment --comment "%s loadbalancer IP" %s -d %s --dport %d -j %s'
                                  % (spn, match, lb_ip, port, fw_chain))
            filter_fw.append('-m comment --comment "%s traffic not accepted by %s" %s -d %s --dport %d -j DROP'
                             % (spn, fw_chain, match, lb_ip, port))
        if nodeport:
            nodeports_rules.append("-m comment --comment %s %s --dport %d -j %s" % (spn, match, nodeport, ext_chain))
        if local:
            health_check_ports.add(32000 + i % 700)
            filter_nodeports.append('-m comment --comment "%s health check node port" -m tcp -p tcp --dport %d -j ACCEPT'
                                    % (spn, 32000 + i % 700))

        # KUBE-SVC: masquerade off-cluster traffic, then pick an endpoint at random.
        nat.rule(svc_chain, '-m comment --comment "%s cluster IP" %s -d %s --dport %d ! -s %s -j KUBE-MARK-MASQ'
                 % (spn, match, cluster_ip, port, pod_cidr))
        for k, ((ep, _), sep) in enumerate(zip(eps, sep_chains)):
            left = len(eps) - k
            if left > 1:
                nat.rule(svc_chain, '-m comment --comment "%s -> %s" -m statistic --mode random --probability %0.10f -j %s'
                         % (spn, ep, 1.0 / left, sep))
            else:
                nat.rule(svc_chain, '-m comment --comment "%s -> %s" -j %s' % (spn, ep, sep))

        if external:
            if local:
                nat.rule(ext_chain, '-m comment --comment "pod traffic for %s external destinations" -s %s -j %s'
                         % (spn, pod_cidr, svc_chain))
                nat.rule(ext_chain, '-m comment --comment "masquerade LOCAL traffic for %s external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ' % spn)
                nat.rule(ext_chain, '-m comment --comment "route LOCAL traffic for %s external destinations" -m addrtype --src-type LOCAL -j %s'
                         % (spn, svc_chain))
                nat.rule(ext_chain, "-j %s" % svl_chain)
            else:
                nat.rule(ext_chain, '-m comment --comment "masquerade traffic for %s external destinations" -j KUBE-MARK-MASQ' % spn)
                nat.rule(ext_chain, "-j %s" % svc_chain)

        if lb_ip:
            nat.rule(fw_chain, '-m comment --comment "%s loadbalancer IP" -s %s -j %s' % (spn, lb_source_range, ext_chain))
            nat.rule(fw_chain, '-m comment --comment "other traffic to %s will be dropped by KUBE-PROXY-FIREWALL"' % spn)

        if local_eps:
            for k, ((ep, _), sep) in enumerate(zip(local_eps, local_seps)):
                left = len(local_eps) - k
                if left > 1:
                    nat.rule(svl_chain, '-m comment --comment "%s -> %s" -m statistic --mode random --probability %0.10f -j %s'
                             % (spn, ep, 1.0 / left, sep))
                else:
                    nat.rule(svl_chain, '-m comment --comment "%s -> %s" -j %s' % (spn, ep, sep))

        for (ep, ip), sep in zip(eps, sep_chains):
            nat.rule(sep, "-m comment --comment %s -s %s -j KUBE-MARK-MASQ" % (spn, ip))
            nat.rule(sep, "-m comment --comment %s %s -j DNAT --to-destination %s" % (spn, match, ep))

    for r in services_rules:
        nat.rule("KUBE-SERVICES", r)
    nat.rule("KUBE-SERVICES", '-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS')
    for r in nodeports_rules:
        nat.rule("KUBE-NODEPORTS", r)
    for r in filter_nodeports:
        filt.rule("KUBE-NODEPORTS", r)
    for r in filter_fw:
        filt.rule("KUBE-PROXY-FIREWALL", r)

    tables = [filt, nat]
    if mangle.chains:
        # With neither hint nor canaries kube-proxy never touches mangle.
        tables.insert(0, mangle)
    out = []
    for t in tables:
        t.render(out)
    expected = {
        "tables": {t.name: t.counts() for t in tables},
        "kube": kube,
        "hint_chain": hint,
        "kubelet_canary": canary,
        "proxy_canary": canary,
        "kube_rules": sum(t.kube_rules() for t in tables),
        "service_table": table,
        "health_check_node_ports": len(health_check_ports),
    }
    return "\n".join(out) + "\n", expected


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, required=True, help="number of services (N)")
    ap.add_argument("--endpoints", type=int, required=True, help="endpoints per service (M)")
    ap.add_argument("--expected", metavar="FILE", help="write the counts iptables-save will show as JSON")
    ap.add_argument("--no-hint", action="store_true", help="leave out KUBE-IPTABLES-HINT (mangle)")
    ap.add_argument("--no-canary", action="store_true",
                    help="leave out KUBE-KUBELET-CANARY and KUBE-PROXY-CANARY (all tables)")
    ap.add_argument("--ipv6", action="store_true", help="IPv6 addresses, for ip6tables-restore")
    ap.add_argument("--no-endpoints-every", type=int, default=0, metavar="K",
                    help="service i has no endpoints when i %% K == K-1 (its filter KUBE-SERVICES REJECT)")
    args = ap.parse_args(argv)
    if args.services < 0 or args.endpoints < 0:
        ap.error("--services and --endpoints must be >= 0")
    text, expected = generate(args.services, args.endpoints, hint=not args.no_hint, canary=not args.no_canary,
                              ipv6=args.ipv6, no_endpoints_every=args.no_endpoints_every)
    sys.stdout.write(text)
    if args.expected:
        with open(args.expected, "w") as f:
            json.dump(expected, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
