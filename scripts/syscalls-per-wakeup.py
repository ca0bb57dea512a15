#!/usr/bin/env python3
"""System calls per wake-up of a backend's loop, from an `strace -f -tt` log of a
`timerkit-bench run fanout` run: only the measured windows count (each between the two getrusage
calls that time a round's slice), so setting the 10,000 timers up is left out. A wake-up is a
return of the loop's wait (epoll_wait, epoll_pwait2, io_uring_enter). Prints, per window and in
all, the calls per wake-up of every system call the process made.

    strace -f -tt -o trace.txt Bench/.build/release/timerkit-bench run fanout --backend epoll --repeat 3
    python3 scripts/syscalls-per-wakeup.py trace.txt
"""
import collections, re, sys

WAITS = {"epoll_wait", "epoll_pwait", "epoll_pwait2", "io_uring_enter"}
CALL = re.compile(r"^(\d+)\s+[\d:.]+\s+(?:<\.\.\. )?([a-z0-9_]+)(\(| resumed>)")


def main(path):
    windows, current = [], None
    for line in open(path, errors="replace"):
        match = CALL.match(line)
        # A call interrupted by another thread's line is counted once, where it starts.
        if not match or match.group(3) != "(":
            continue
        name = match.group(2)
        if name == "getrusage":
            if current is None:
                current = collections.Counter()
            else:
                windows.append(current)
                current = None
            continue
        if current is not None:
            current[name] += 1
    if not windows:
        sys.exit("no measured window (no getrusage pair) in the log")
    total = collections.Counter()
    for index, window in enumerate(windows, 1):
        total.update(window)
        report(f"window {index}", window)
    report("all windows", total)


def report(title, counts):
    waits = sum(counts[name] for name in WAITS)
    if waits == 0:
        print(f"{title}: no wait")
        return
    calls = sum(counts.values())
    parts = ", ".join(f"{name} {counts[name] / waits:.3f}" for name, _ in counts.most_common())
    print(f"{title}: {waits} wake-ups, {calls / waits:.3f} system calls per wake-up ({parts})")


if __name__ == "__main__":
    main(sys.argv[1])
