"""Where each process's anonymous resident memory is, from /proc/PID/smaps: glibc's main heap
([heap]), its other arenas (the 64 MiB regions glibc reserves per arena), thread stacks (a
read-write mapping just above a guard page, of the size threads are given), and the rest
(large blocks glibc mapped on their own, above its mmap threshold, and anything else).

    anon_by_mapping.py NAME=PID...   prints one line per process, KiB
"""
import os
import sys

ARENA_KIB = 64 * 1024


def mappings(pid):
    cur = None
    for line in open(f"/proc/{pid}/smaps"):
        first = line.split()[0]
        if "-" in first and not first.endswith(":"):
            if cur:
                yield cur
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            cur = {"lo": lo, "hi": hi, "perms": f[1], "path": f[5] if len(f) > 5 else "", "anon": 0}
        elif first == "Anonymous:":
            cur["anon"] = int(line.split()[1])
    if cur:
        yield cur


def split(pid):
    maps = list(mappings(pid))
    out = {"heap": 0, "arenas": 0, "stacks": 0, "other": 0}
    for i, m in enumerate(maps):
        if not m["anon"]:
            continue
        prev = maps[i - 1] if i else None
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if m["path"] == "[heap]":
            out["heap"] += m["anon"]
        elif m["path"].startswith("[stack"):
            out["stacks"] += m["anon"]
        elif (m["lo"] % (ARENA_KIB * 1024) == 0 and nxt and nxt["perms"] == "---p" and nxt["lo"] == m["hi"]
              and (nxt["hi"] - m["lo"]) // 1024 == ARENA_KIB):
            out["arenas"] += m["anon"]
        elif prev and prev["perms"] == "---p" and prev["hi"] == m["lo"] and (prev["hi"] - prev["lo"]) // 1024 == 4:
            out["stacks"] += m["anon"]
        else:
            out["other"] += m["anon"]
    return out


for arg in sys.argv[1:]:
    name, pid = arg.split("=", 1)
    s = split(int(pid))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    print(f"{name}: anonymous KiB " + " ".join(f"{k} {v}" for k, v in s.items())
          + f" (total {sum(s.values())}); threads {threads}")
