#!/usr/bin/env python3
"""Print, as hex, the payloads (after the netlink header) of the kernel's
answer to one nfnetlink dump: the bytes the crate's decoder tests are built
from ("captured from the real kernel").

    nl_capture.py rules FAMILY TABLE CHAIN     # NFT_MSG_GETRULE of one chain
    nl_capture.py setelems FAMILY TABLE SET    # NFT_MSG_GETSETELEM of one set
    nl_capture.py ct FAMILY                    # IPCTNL_MSG_CT_GET dump
FAMILY is 2 (ip) or 10 (ip6). One line per message: "TYPE HEX".
"""
import socket
import struct
import sys


def attr(kind, value):
    n = 4 + len(value)
    return struct.pack("=HH", n, kind) + value + b"\0" * ((4 - n % 4) % 4)


def s(kind, text):
    return attr(kind, text.encode() + b"\0")


def main():
    what, fam = sys.argv[1], int(sys.argv[2])
    if what == "rules":
        ty, body = (10 << 8) | 7, s(1, sys.argv[3]) + s(2, sys.argv[4])
    elif what == "setelems":
        ty, body = (10 << 8) | 13, s(1, sys.argv[3]) + s(2, sys.argv[4])
    elif what == "ct":
        ty, body = (1 << 8) | 1, b""
    else:
        sys.exit(__doc__)
    payload = struct.pack("=BBH", fam, 0, 0) + body
    msg = struct.pack("=IHHII", 16 + len(payload), ty, 0x301, 1, 0) + payload
    sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
    sk.bind((0, 0))
    sk.send(msg)
    while True:
        data = sk.recv(65536)
        off = 0
        while off + 16 <= len(data):
            length, mty, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, off)
            if mty == 3:
                return
            if mty == 2:
                err = struct.unpack_from("=i", data, off + 16)[0]
                if err:
                    sys.exit(f"error {err}")
                return
            print(f"{mty} {data[off + 16:off + length].hex()}")
            off += (length + 3) & ~3


main()
