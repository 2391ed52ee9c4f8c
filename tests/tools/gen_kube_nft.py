#!/usr/bin/env python3
"""Generate a kube-proxy-shaped nftables table (kube-proxy's nftables mode).

Writes to stdout an ``nft -f`` input modelled on kubernetes'
pkg/proxy/nftables proxier (v1.31+ layout): ``table ip kube-proxy`` (or ``ip6``
with --ipv6) with its base chains (filter-prerouting-pre-dnat,
filter-output-pre-dnat, filter-forward, filter-input, filter-output,
nat-output, nat-postrouting, nat-prerouting), its helper chains, the sets
``cluster-ips`` and ``nodeport-ips``, the verdict maps ``service-ips``,
``service-nodeports``, ``no-endpoint-services``, ``no-endpoint-nodeports`` and
``firewall-ips``, and per service port a ``service-*`` chain, one
``endpoint-*`` chain per endpoint, an ``external-*`` chain for NodePort and
LoadBalancer services and a ``firewall-*`` chain for LoadBalancer source ranges.

    python3 tests/tools/gen_kube_nft.py --services 1000 --endpoints 5 \
        --expected expected.json > table.nft
    ip netns exec NS nft -f table.nft

Service i (0-based) is:
  * ClusterIP, TCP port 80 (every 7th UDP 53), with M endpoints picked by
    ``numgen random mod M vmap { ... }`` (an anonymous map: not listed as a map);
  * NodePort when i % 5 == 0 (external chain, a service-nodeports element);
  * LoadBalancer with loadBalancerSourceRanges when i % 50 == 7 (external and
    firewall chains, a service-ips element for the LB IP, a firewall-ips element;
    the firewall rule holds an anonymous interval set);
  * with ClientIP session affinity when i % 100 == 3 (one dynamic ``affinity-*``
    set per endpoint, empty until traffic).
--service adds named Service ports (a lab's default/kubernetes, kube-system/kube-dns)
with the endpoint given, before the N generated ones.
Plus max(1, N // 100) services without endpoints (no-endpoint-services and
cluster-ips elements) and one NodePort without endpoints (no-endpoint-nodeports).

Chain names hash like kube-proxy's hashAndTruncate: base32(sha256(name))[:8]
+ "-" + name, with name "ns/svc/proto/port" (endpoints: "...__ip/port").

--expected FILE writes the exact counts ``nft list table`` shows (the crate's
NftTableCounts): chains, base_chains, rules, service/endpoint/external chains,
sets, maps, map_elements and set_elements by name; and service_table: what
the table routes, as the agent's conntrack_stale probe should read it —
service_ports (service-ips, no-endpoint-services, service-nodeports and
no-endpoint-nodeports elements), node_ports (the last two) and endpoints
(summed over service ports: every way in reaches the service's endpoints).
"""

import argparse
import base64
import hashlib
import ipaddress
import json
import sys


def hash_and_truncate(name):
    digest = hashlib.sha256(name.encode()).digest()
    return base64.b32encode(digest).decode()[:8] + "-" + name


class V4:
    family, addr_type, match = "ip", "ipv4_addr", "ip"
    cluster_base = int(ipaddress.IPv4Address("10.96.0.10"))
    empty_base = int(ipaddress.IPv4Address("10.97.0.1"))
    lb_base = int(ipaddress.IPv4Address("10.110.0.1"))
    ep_base = int(ipaddress.IPv4Address("10.244.0.0"))
    cluster_cidr, pod_cidr = "10.96.0.0/12", "10.244.0.0/16"
    node_ip, lb_range = "192.168.0.2", "10.100.0.0/16"

    @staticmethod
    def addr(n):
        return str(ipaddress.IPv4Address(n))

    @classmethod
    def endpoint(cls, k):
        return cls.addr(cls.ep_base + (k // 254) * 256 + k % 254 + 1)

    @staticmethod
    def dnat(ip, port):
        return "%s:%d" % (ip, port)


class V6(V4):
    family, addr_type, match = "ip6", "ipv6_addr", "ip6"
    cluster_base = int(ipaddress.IPv6Address("fd00:10:96::a"))
    empty_base = int(ipaddress.IPv6Address("fd00:10:97::1"))
    lb_base = int(ipaddress.IPv6Address("fd00:10:110::1"))
    ep_base = int(ipaddress.IPv6Address("fd00:10:244::"))
    cluster_cidr, pod_cidr = "fd00:10:96::/108", "fd00:10:244::/64"
    node_ip, lb_range = "fd00:192:168::2", "fd00:10:100::/64"

    @staticmethod
    def addr(n):
        return str(ipaddress.IPv6Address(n))

    @classmethod
    def endpoint(cls, k):
        return cls.addr(cls.ep_base + k + 1)

    @staticmethod
    def dnat(ip, port):
        return "[%s]:%d" % (ip, port)


BASE_CHAINS = [
    ("filter-prerouting-pre-dnat", "type filter hook prerouting priority -110; policy accept;"),
    ("filter-output-pre-dnat", "type filter hook output priority -110; policy accept;"),
    ("filter-forward", "type filter hook forward priority filter; policy accept;"),
    ("filter-input", "type filter hook input priority filter; policy accept;"),
    ("filter-output", "type filter hook output priority filter; policy accept;"),
    ("nat-output", "type nat hook output priority -100; policy accept;"),
    ("nat-postrouting", "type nat hook postrouting priority 100; policy accept;"),
    ("nat-prerouting", "type nat hook prerouting priority -100; policy accept;"),
]
HELPER_CHAINS = [
    "cluster-ips-check", "firewall-check", "mark-for-masquerade", "masquerading",
    "nodeport-endpoints-check", "reject-chain", "services", "service-endpoints-check",
]


def generate(services, endpoints, v, named=(), node_ip=None):
    fam, m = v.family, v.match
    chains = [c for c, _ in BASE_CHAINS] + list(HELPER_CHAINS)
    rules = []
    sets = {"cluster-ips": [], "nodeport-ips": [node_ip or v.node_ip]}
    maps = {k: [] for k in ("service-ips", "service-nodeports", "no-endpoint-services",
                            "no-endpoint-nodeports", "firewall-ips")}
    # No local-* chains: every generated service has externalTrafficPolicy and
    # internalTrafficPolicy Cluster (the corpus has the Local layouts).
    counts = {"service_chains": 0, "endpoint_chains": 0, "external_chains": 0, "local_chains": 0}

    def rule(chain, text):
        rules.append((chain, text))

    rule("cluster-ips-check", '%s daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"' % m)
    rule("cluster-ips-check", '%s daddr %s drop comment "Drop traffic to unallocated ClusterIPs"' % (m, v.cluster_cidr))
    rule("filter-prerouting-pre-dnat", "ct state new jump firewall-check")
    rule("filter-output-pre-dnat", "ct state new jump firewall-check")
    rule("filter-forward", "ct state new jump service-endpoints-check")
    rule("filter-forward", "ct state new jump cluster-ips-check")
    rule("filter-input", "ct state new jump nodeport-endpoints-check")
    rule("filter-input", "ct state new jump service-endpoints-check")
    rule("filter-output", "ct state new jump service-endpoints-check")
    rule("filter-output", "ct state new jump cluster-ips-check")
    rule("firewall-check", "%s daddr . meta l4proto . th dport vmap @firewall-ips" % m)
    rule("mark-for-masquerade", "meta mark set meta mark | 0x4000")
    rule("masquerading", "meta mark & 0x4000 == 0 return")
    rule("masquerading", "meta mark set meta mark ^ 0x4000")
    rule("masquerading", "masquerade fully-random")
    rule("nat-output", "jump services")
    rule("nat-postrouting", "jump masquerading")
    rule("nat-prerouting", "jump services")
    rule("nodeport-endpoints-check", "%s daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports" % m)
    rule("reject-chain", "reject")
    rule("services", "%s daddr . meta l4proto . th dport vmap @service-ips" % m)
    rule("services", "%s daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports" % m)
    rule("service-endpoints-check", "%s daddr . meta l4proto . th dport vmap @no-endpoint-services" % m)

    set_flags = {}

    def named_service(base, proto, cluster_ip, port, eps, target, node_port=None):
        """One Service port with the given endpoints [(ip)] (a lab's: --service)."""
        svc = "service-" + hash_and_truncate(base)
        if cluster_ip not in sets["cluster-ips"]:
            sets["cluster-ips"].append(cluster_ip)
        chains.append(svc)
        counts["service_chains"] += 1
        maps["service-ips"].append("%s . %s . %d : goto %s" % (cluster_ip, proto, port, svc))
        rule(svc, "%s daddr %s %s dport %d %s saddr != %s jump mark-for-masquerade"
             % (m, cluster_ip, proto, port, m, v.pod_cidr))
        names = ["endpoint-" + hash_and_truncate("%s__%s/%d" % (base, ip.replace(":", "."), target)) for ip in eps]
        vmap = ", ".join("%d : goto %s" % (k, n) for k, n in enumerate(names))
        rule(svc, "numgen random mod %d vmap { %s }" % (len(names), vmap))
        for name, ip in zip(names, eps):
            chains.append(name)
            counts["endpoint_chains"] += 1
            rule(name, "%s saddr %s jump mark-for-masquerade" % (m, ip))
            rule(name, "meta l4proto %s dnat to %s" % (proto, v.dnat(ip, target)))
        if node_port is not None:
            ext = "external-" + hash_and_truncate(base)
            chains.append(ext)
            counts["external_chains"] += 1
            rule(ext, "jump mark-for-masquerade")
            rule(ext, "goto %s" % svc)
            maps["service-nodeports"].append("%s . %d : goto %s" % (proto, node_port, ext))

    for spec in named:
        named_service(*spec)

    ep_counter = lb_counter = 0
    for i in range(services):
        udp = i % 7 == 6
        proto, port, pname = ("udp", 53, "dns") if udp else ("tcp", 80, "http")
        target = 5353 if udp else 8080
        base = "ns%d/svc-%d/%s/%s" % (i % 50, i, proto, pname)
        svc = "service-" + hash_and_truncate(base)
        ext = "external-" + hash_and_truncate(base)
        fw = "firewall-" + hash_and_truncate(base)
        cluster_ip = v.addr(v.cluster_base + i)
        nodeport = i % 5 == 0
        lb = i % 50 == 7
        affinity = i % 100 == 3
        sets["cluster-ips"].append(cluster_ip)
        eps = []
        for _ in range(endpoints):
            ip = v.endpoint(ep_counter)
            ep_counter += 1
            name = "endpoint-" + hash_and_truncate("%s__%s/%d" % (base, ip.replace(":", "."), target))
            eps.append((name, ip))
        chains.append(svc)
        counts["service_chains"] += 1
        maps["service-ips"].append("%s . %s . %d : goto %s" % (cluster_ip, proto, port, svc))
        rule(svc, "%s daddr %s %s dport %d %s saddr != %s jump mark-for-masquerade"
             % (m, cluster_ip, proto, port, m, v.pod_cidr))
        if eps:
            vmap = ", ".join("%d : goto %s" % (k, n) for k, (n, _) in enumerate(eps))
            rule(svc, "numgen random mod %d vmap { %s }" % (len(eps), vmap))
        for name, ip in eps:
            chains.append(name)
            counts["endpoint_chains"] += 1
            if affinity:
                aff = "affinity-" + name[len("endpoint-"):]
                sets[aff] = []
                set_flags[aff] = True
                rule(name, "update @%s { %s saddr }" % (aff, m))
            rule(name, "%s saddr %s jump mark-for-masquerade" % (m, ip))
            rule(name, "meta l4proto %s dnat to %s" % (proto, v.dnat(ip, target)))
        if nodeport or lb:
            chains.append(ext)
            counts["external_chains"] += 1
            rule(ext, "jump mark-for-masquerade")
            rule(ext, "goto %s" % svc)
        if nodeport:
            maps["service-nodeports"].append("%s . %d : goto %s" % (proto, 30000 + i % 2768, ext))
        if lb:
            lb_ip = v.addr(v.lb_base + lb_counter)
            lb_counter += 1
            chains.append(fw)
            rule(fw, "%s saddr != { %s } drop" % (m, v.lb_range))
            maps["service-ips"].append("%s . %s . %d : goto %s" % (lb_ip, proto, port, ext))
            maps["firewall-ips"].append("%s . %s . %d : goto %s" % (lb_ip, proto, port, fw))

    for k in range(max(1, services // 100)):
        ip = v.addr(v.empty_base + k)
        sets["cluster-ips"].append(ip)
        maps["no-endpoint-services"].append(
            '%s . tcp . 80 comment "ns9/empty-%d:http, {no endpoints}" : goto reject-chain' % (ip, k))
    maps["no-endpoint-nodeports"].append("tcp . 32767 : drop")

    out = ["table %s kube-proxy {" % fam, '\tcomment "rules for kube-proxy"']
    for name, elems in sets.items():
        if name.startswith("affinity-"):
            out.append("\tset %s { type %s; flags dynamic,timeout; timeout 3h; }" % (name, v.addr_type))
            continue
        body = "\tset %s { type %s;" % (name, v.addr_type)
        if elems:
            body += " elements = { %s };" % ", ".join(elems)
        out.append(body + " }")
    for c, hook in BASE_CHAINS:
        out.append("\tchain %s { %s }" % (c, hook))
    for c in chains[len(BASE_CHAINS):]:
        out.append("\tchain %s { }" % c)
    types = {
        "service-ips": "%s . inet_proto . inet_service : verdict" % v.addr_type,
        "service-nodeports": "inet_proto . inet_service : verdict",
        "no-endpoint-services": "%s . inet_proto . inet_service : verdict" % v.addr_type,
        "no-endpoint-nodeports": "inet_proto . inet_service : verdict",
        "firewall-ips": "%s . inet_proto . inet_service : verdict" % v.addr_type,
    }
    for name, elems in maps.items():
        body = "\tmap %s { type %s;" % (name, types[name])
        if elems:
            body += " elements = { %s };" % ", ".join(elems)
        out.append(body + " }")
    out.append("}")
    for chain, text in rules:
        out.append("add rule %s kube-proxy %s %s" % (fam, chain, text))

    # Distinct (protocol, port) keys: beyond 2,768 NodePorts one can also be in
    # no-endpoint-nodeports (tcp . 32767), which Kubernetes would not allow.
    node_ports = len({e.split(" : ")[0] for e in maps["service-nodeports"] + maps["no-endpoint-nodeports"]})
    expected = {
        "service_table": {
            "service_ports": len(maps["service-ips"]) + len(maps["no-endpoint-services"]) + node_ports,
            "node_ports": node_ports,
            "endpoints": (len(maps["service-ips"]) + len(maps["service-nodeports"])) * endpoints,
        },
        "chains": len(chains),
        "base_chains": len(BASE_CHAINS),
        "rules": len(rules),
        "service_chains": counts["service_chains"],
        "endpoint_chains": counts["endpoint_chains"],
        "external_chains": counts["external_chains"],
        "local_chains": counts["local_chains"],
        "sets": len(sets),
        "maps": len(maps),
        "map_elements": {k: len(e) for k, e in maps.items()},
        "set_elements": {k: len(e) for k, e in sets.items()},
    }
    return "\n".join(out) + "\n", expected


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, required=True, help="number of services (N)")
    ap.add_argument("--endpoints", type=int, required=True, help="endpoints per service (M)")
    ap.add_argument("--ipv6", action="store_true", help="table ip6 kube-proxy")
    ap.add_argument("--expected", metavar="FILE", help="write the counts nft list table will show as JSON")
    ap.add_argument("--service", action="append", default=[], metavar="NS/NAME/PROTO/PORTNAME=IP:PORT@EP:TPORT[,NODEPORT]",
                    help="also a named Service port with one endpoint (a lab's kubernetes or kube-dns), "
                         "optionally a NodePort; repeatable (IPv4)")
    ap.add_argument("--node-ip", help="the nodeport-ips element (default %s)" % V4.node_ip)
    args = ap.parse_args(argv)
    named = []
    for spec in args.service:
        try:
            base, rest = spec.split("=", 1)
            front, back = rest.split("@", 1)
            ip, port = front.rsplit(":", 1)
            back, _, node_port = back.partition(",")
            ep, tport = back.rsplit(":", 1)
            named.append((base, base.split("/")[2], ip, int(port), [ep], int(tport),
                          int(node_port) if node_port else None))
        except (ValueError, IndexError):
            ap.error("--service %r: expected NS/NAME/PROTO/PORTNAME=IP:PORT@EP:TPORT[,NODEPORT]" % spec)
    if args.services < 0 or args.endpoints < 1:
        ap.error("--services must be >= 0 and --endpoints >= 1")
    text, expected = generate(args.services, args.endpoints, V6 if args.ipv6 else V4, named, args.node_ip)
    sys.stdout.write(text)
    if args.expected:
        with open(args.expected, "w") as f:
            json.dump(expected, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
