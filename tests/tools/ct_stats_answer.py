#!/usr/bin/env python3
"""Writes per-CPU conntrack statistics into a fixture node's netlink recording.

A network namespace's ctnetlink statistics start at zero and no namespace can be
made to drop or fail inserts on demand, so a node whose story is a user's real
`conntrack -S` output gets the kernel's answer to IPCTNL_MSG_CT_GET_STATS_CPU
written from that output: one NLM_F_MULTI message per `cpu=N` line (nfgenmsg
AF_UNSPEC, version 0, res_id N), each counter a big-endian u32 attribute of
`enum ctattr_stats_cpu` (include/uapi/linux/netfilter/nfnetlink_conntrack.h),
in the line's order, then the NLMSG_DONE the kernel sent when it was recorded.

usage: ct_stats_answer.py NETFILTER_TXT CONNTRACK_S_TXT   (rewrites NETFILTER_TXT)
"""
import struct
import sys

# enum ctattr_stats_cpu, by the names conntrack -S prints.
CTA_STATS = {
    "searched": 1, "found": 2, "new": 3, "invalid": 4, "ignore": 5, "delete": 6,
    "delete_list": 7, "insert": 8, "insert_failed": 9, "drop": 10, "early_drop": 11,
    "error": 12, "search_restart": 13, "clash_resolve": 14, "chaintoolong": 15,
}
# (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET_STATS_CPU
GET_STATS_CPU = (1 << 8) | 4
NLM_F_MULTI = 2
NLMSG_DONE = 3


def messages(datagram):
    """(type, whole message bytes) of each message in a datagram."""
    out, i = [], 0
    while i + 16 <= len(datagram):
        length, ty = struct.unpack_from("<IH", datagram, i)
        if length < 16:
            raise SystemExit(f"bad netlink length {length}")
        out.append((ty, datagram[i:i + length]))
        i += (length + 3) & ~3
    return out


def cpu_message(cpu, counters):
    attrs = b""
    for name, value in counters:
        if name not in CTA_STATS:
            raise SystemExit(f"unknown conntrack -S counter {name!r}")
        attrs += struct.pack("<HH", 8, CTA_STATS[name]) + struct.pack(">I", value)
    payload = struct.pack("<BB", 0, 0) + struct.pack(">H", cpu) + attrs
    return struct.pack("<IHHII", 16 + len(payload), GET_STATS_CPU, NLM_F_MULTI, 0, 0) + payload


def main(recording, text):
    body = b""
    for line in open(text):
        fields = line.split()
        if not fields:
            continue
        if not fields[0].startswith("cpu="):
            raise SystemExit(f"{text}: a line without cpu=N: {line!r}")
        cpu = int(fields[0][4:])
        counters = [(k, int(v)) for k, v in (f.split("=", 1) for f in fields[1:])]
        body += cpu_message(cpu, counters)
    blocks = open(recording).read().split("\n\n")
    done, hit = None, False
    for n, block in enumerate(blocks):
        lines = block.split("\n")
        req = [l for l in lines if l.startswith("> ")]
        if not req:
            continue
        if struct.unpack_from("<H", bytes.fromhex(req[0][2:]), 4)[0] != GET_STATS_CPU:
            continue
        for l in lines:
            if l.startswith("< "):
                for ty, m in messages(bytes.fromhex(l[2:])):
                    if ty == NLMSG_DONE:
                        done = m
        if done is None:
            raise SystemExit("the recorded statistics answer has no NLMSG_DONE")
        kept = [l for l in lines if l and not l.startswith("< ")]
        blocks[n] = "\n".join(kept + ["< " + body.hex(), "< " + done.hex()])
        hit = True
    if not hit:
        raise SystemExit(f"{recording}: no IPCTNL_MSG_CT_GET_STATS_CPU request recorded")
    open(recording, "w").write("\n\n".join(b.strip("\n") for b in blocks) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
