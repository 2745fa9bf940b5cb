#!/usr/bin/env python3
"""ramp-profile.py: where a ramp's CPU goes, per process name, from flamegraph.py's collapsed
stacks (`comm;frame;...;leaf count`, as run-1m.sh PERF=1 writes them).

For each process name with at least 1 % of the samples: its share of the box, the part of it
under the scheduler (a stack through __schedule: the switch away and back), and its
system calls by share (the frame do_syscall_64 dispatched to; `user` is a stack that never
entered the kernel, `irq/other` softirqs, faults and timers that interrupted user code). With
--rate R (connections per second during the profile) and the box's CPU count, each share
becomes microseconds of CPU per connection: share x CPUs x 1e6 / R.

Usage: bench/ramp-profile.py FILE.collapsed.txt [--rate R] [--cpus N] [--top K]
"""
import collections
import os
import sys


def syscall_of(frames):
    """The system call a stack is in (the frame do_syscall_64 dispatched to, its prefix cut),
    `user` for a stack that never entered the kernel, `irq/other` for softirqs, faults and
    timers that interrupted user code."""
    if "do_syscall_64" not in frames:
        if any(f.startswith(("asm_", "ret_from_fork")) for f in frames):
            return "irq/other"
        return "user"
    rest = frames[frames.index("do_syscall_64") + 1 :]
    if rest and rest[0] == "x64_sys_call":
        rest = rest[1:]
    if not rest:
        return "syscall entry"
    if rest[0] == "exit_to_user_mode_loop":
        return "exit" if "do_exit" in rest else "return to user"
    name = rest[0]
    for prefix in ("__x64_sys_", "__do_sys_", "__se_sys_", "ksys_", "__sys_", "do_sys_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    opt = {}
    for name in ("--rate", "--cpus", "--top"):
        if name in args:
            i = args.index(name)
            opt[name] = float(args[i + 1])
            del args[i : i + 2]
    rate = opt.get("--rate")
    cpus = opt.get("--cpus", os.cpu_count())
    top = int(opt.get("--top", 6))
    total = 0
    by_comm = collections.Counter()
    sched = collections.Counter()
    calls = collections.defaultdict(collections.Counter)
    for line in open(args[0]):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        frames = stack.split(";")
        comm, frames = frames[0], frames[1:]
        total += n
        by_comm[comm] += n
        if any(f == "__schedule" or f.startswith("finish_task_switch") for f in frames):
            sched[comm] += n
        calls[comm][syscall_of(frames)] += n
    if not total:
        sys.exit("no samples")

    def cost(n):
        share = n / total
        out = f"{share * 100:.1f} %"
        if rate:
            out += f" ({share * cpus * 1e6 / rate:.1f} µs/conn)"
        return out

    print(f"{args[0]}: {total} samples" + (f", {rate:,.0f} connections/s, {cpus:.0f} CPUs" if rate else ""))
    for comm, n in by_comm.most_common():
        if n / total < 0.01:
            break
        parts = ", ".join(f"{c} {cost(k)}" for c, k in calls[comm].most_common(top))
        print(f"  {comm}: {cost(n)}; under the scheduler {cost(sched[comm])}; by call: {parts}")


if __name__ == "__main__":
    main()
