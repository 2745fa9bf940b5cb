#!/usr/bin/env python3
"""Scheduling delay per process group from `perf sched timehist` output.

Each timehist line is one time a task ran: how long it had waited (wait time), how long it
sat runnable on a run queue before it got the CPU (sch delay: wake-up to run), and how long
it ran. A publish's acknowledgement crosses several processes in turn (the publisher, the
worker that reads it, the master that gives it an id, the worker that answers), so the
sch delays of those processes on a saturated box add up in the ack's latency.

Usage: sched-delay.py TIMEHIST.txt NAME=PID[,PID...] [NAME=PID...]
A PID stands for the process and all its threads. Prints, per group: runs, sch delay p50,
p99, p99.9, max (ms), the share of runs delayed over 1 ms and 4 ms (one tick at HZ=250),
and the mean run time. Then what held the CPU while the groups named in PATH (control,
master, probe-publisher) waited over 4 ms: CPU time of each group or command that ran on
that CPU inside those waits; and the longest single runs (over 5 ms) by group or command:
with PREEMPT_NONE a task in a long kernel path keeps the CPU from a woken one. Last, per
CPU: switches and the time in runs over 20 ms (a CPU the host took away shows as long runs
of whatever was on it, `<idle>` included, while the other CPU has a queue).
"""
import collections
import re
import sys

PATH = ("control", "master", "probe-publisher")
LONG_WAIT_MS = 4.0
LONG_RUN_MS = 5.0

LINE = re.compile(
    r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.*?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)


def pct(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    groups = {}
    for spec in sys.argv[2:]:
        name, _, pids = spec.partition("=")
        groups[name] = {int(p) for p in pids.split(",") if p.strip().isdigit()}
    delays = {name: [] for name in groups}
    runs = {name: [] for name in groups}
    # Per CPU, the runs seen so far: (start s, end s, who). A run ends at its line's time.
    per_cpu = collections.defaultdict(lambda: collections.deque(maxlen=4096))
    held_by = collections.Counter()  # who ran (ms) inside the path's long waits
    long_runs = collections.defaultdict(list)  # who -> run ms over LONG_RUN_MS
    long_waits = 0
    seen = set()
    cpu_switches = collections.Counter()
    cpu_long_ms = collections.Counter()
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            end, cpu = float(m.group(1)), int(m.group(2))
            comm, tid = m.group(3).strip(), int(m.group(4))
            pid = int(m.group(5) or m.group(4))
            delay, run = float(m.group(7)), float(m.group(8))
            who = next((n for n, pids in groups.items() if pid in pids or tid in pids), None)
            if who is not None:
                delays[who].append(delay)
                runs[who].append(run)
            # A task's first line counts its run from the start of the recording: no run.
            if tid not in seen:
                seen.add(tid)
                continue
            start = end - run / 1e3
            cpu_switches[cpu] += 1
            if run > 20.0:
                cpu_long_ms[cpu] += run
            if who in PATH and delay > LONG_WAIT_MS:
                long_waits += 1
                wait_from = start - delay / 1e3
                for s0, e0, other in per_cpu[cpu]:
                    overlap = min(e0, start) - max(s0, wait_from)
                    if overlap > 0:
                        held_by[other] += overlap * 1e3
            name = who or re.sub(r"[/:]?\d+$", "", comm) or comm
            per_cpu[cpu].append((start, end, name))
            if run > LONG_RUN_MS:
                long_runs[name].append(run)
    for name in groups:
        d = sorted(delays[name])
        if not d:
            print(f"{name}: no runs seen")
            continue
        over1 = sum(1 for x in d if x > 1.0) / len(d) * 100
        over4 = sum(1 for x in d if x > 4.0) / len(d) * 100
        mean_run = sum(runs[name]) / len(runs[name])
        print(
            f"{name}: {len(d)} runs; sch delay p50 {pct(d, 0.5):.3f} ms, p99 {pct(d, 0.99):.3f} ms, "
            f"p99.9 {pct(d, 0.999):.3f} ms, max {d[-1]:.3f} ms; over 1 ms {over1:.1f} %, "
            f"over 4 ms {over4:.2f} %; mean run {mean_run:.3f} ms"
        )
    total = sum(held_by.values())
    print(f"while {'/'.join(PATH)} waited over {LONG_WAIT_MS:g} ms ({long_waits} waits), the CPU ran:")
    for who, ms in held_by.most_common(8):
        print(f"  {who}: {ms:.1f} ms ({ms / total * 100 if total else 0:.0f} %)")
    print(f"single runs over {LONG_RUN_MS:g} ms:")
    ranked = sorted(long_runs.items(), key=lambda kv: -sum(kv[1]))
    for who, r in ranked[:8]:
        print(f"  {who}: {len(r)} runs, max {max(r):.1f} ms, total {sum(r):.0f} ms")
    for cpu in sorted(cpu_switches):
        print(f"cpu {cpu}: {cpu_switches[cpu]} switches, {cpu_long_ms[cpu]:.0f} ms in runs over 20 ms")


if __name__ == "__main__":
    main()
