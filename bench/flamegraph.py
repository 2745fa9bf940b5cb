#!/usr/bin/env python3
"""flamegraph.py: `perf script` output -> collapsed stacks -> a flame graph SVG (no deps).

Usage: perf script -i perf.data | bench/flamegraph.py OUT.svg [TITLE] [--collapsed OUT.txt] [--top N]

Each sample's stack becomes "comm;outermost;...;leaf count" (the collapsed format of Brendan
Gregg's stackcollapse-perf.pl); the SVG draws one box per frame, its width the share of samples
under it, with a <title> tooltip giving the count and percentage. Process names are folded:
digits are dropped so the 53 serve workers (and bench's workers) add up to one tower each.
Also prints the top frames by self time and the share per process name, for the text record.
"""
import collections
import html
import re
import sys


def collapse(lines):
    stacks = collections.Counter()
    comm, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if comm is not None:
                stacks[";".join([comm] + frames[::-1])] += 1
            comm, frames = None, []
            continue
        if not line.startswith((" ", "\t")):
            comm = re.sub(r"[0-9]+", "", line.split()[0]) or "?"
            frames = []
            continue
        parts = line.strip().split(" ", 1)
        sym = parts[1] if len(parts) > 1 else parts[0]
        sym = re.sub(r"\+0x[0-9a-f]+", "", sym)
        sym = re.sub(r" \(.*\)$", "", sym).strip() or "[unknown]"
        frames.append(sym.replace(";", ":"))
    if comm is not None:
        stacks[";".join([comm] + frames[::-1])] += 1
    return stacks


def tree(stacks):
    root = {"n": 0, "kids": {}}
    for stack, n in stacks.items():
        node = root
        node["n"] += n
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += n
    return root


def color(name):
    h = sum(ord(c) for c in name)
    if "[k]" in name or name.startswith(("__x64", "entry_SYSCALL", "do_syscall", "tcp_", "__sys", "sys_")):
        return f"rgb(230,{120 + h % 80},{40 + h % 40})"  # kernel: orange
    return f"rgb({200 + h % 55},{60 + h % 90},{50 + h % 40})"


def svg(root, title, width=1400, row=16):
    total = root["n"] or 1
    boxes, depth_max = [], 0

    def walk(node, name, x, depth):
        nonlocal depth_max
        depth_max = max(depth_max, depth)
        w = node["n"] / total * width
        if w < 0.3:
            return
        boxes.append((x, depth, w, name, node["n"]))
        cx = x
        for kname, kid in sorted(node["kids"].items()):
            walk(kid, kname, cx, depth + 1)
            cx += kid["n"] / total * width

    walk(root, "all", 0.0, 0)
    height = (depth_max + 3) * row
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f'<text x="4" y="12">{html.escape(title)} ({total} samples)</text>',
    ]
    for x, depth, w, name, n in boxes:
        y = height - (depth + 1) * row
        label = html.escape(name)
        tip = f"{label}: {n} samples, {n / total * 100:.2f} %"
        out.append(
            f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="{color(name)}"/>'
        )
        chars = int(w / 7)
        if chars >= 3:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    collapsed_out = None
    if "--collapsed" in args:
        i = args.index("--collapsed")
        collapsed_out = args[i + 1]
        del args[i : i + 2]
    top = 12
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i : i + 2]
    if not args:
        sys.exit(__doc__)
    out_svg = args[0]
    title = args[1] if len(args) > 1 else "flame graph"
    stacks = collapse(sys.stdin)
    total = sum(stacks.values()) or 1
    if collapsed_out:
        with open(collapsed_out, "w") as f:
            for stack, n in stacks.most_common():
                f.write(f"{stack} {n}\n")
    with open(out_svg, "w") as f:
        f.write(svg(tree(stacks), title))
    by_comm, by_leaf = collections.Counter(), collections.Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        by_comm[frames[0]] += n
        by_leaf[frames[-1]] += n
    print(f"{title}: {total} samples -> {out_svg}")
    print("share by process: " + ", ".join(f"{c} {n / total * 100:.1f} %" for c, n in by_comm.most_common(8)))
    print("top self frames: " + ", ".join(f"{c} {n / total * 100:.1f} %" for c, n in by_leaf.most_common(top)))


if __name__ == "__main__":
    main()
