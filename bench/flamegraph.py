#!/usr/bin/env python3
"""flamegraph.py: `perf script` output -> collapsed stacks and a flame graph SVG (Brendan
Gregg's layout: root at the bottom, width = samples), standard library only.

  perf script -i perf.data | bench/flamegraph.py OUT.svg [TITLE] [--collapsed OUT.txt] [--top N]

Also prints the N (default 25) functions with the most samples anywhere on the stack
(inclusive) and at the leaf (self), as percentages of all samples.
"""
import collections, html, sys, zlib

def collapse(lines):
    stacks, frames = collections.Counter(), []
    comm = None
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if comm is not None and frames:
                stacks[";".join([comm] + frames[::-1])] += 1
            comm, frames = None, []
        elif not line.startswith((" ", "\t")):
            comm = line.split()[0]
        else:
            parts = line.strip().split(None, 1)
            sym = parts[1] if len(parts) > 1 else parts[0]
            sym = sym.rsplit(" (", 1)[0]  # drop "(dso)"
            sym = sym.split("+0x")[0]
            frames.append(sym or "[unknown]")
    if comm is not None and frames:
        stacks[";".join([comm] + frames[::-1])] += 1
    return stacks

def svg(stacks, title, width=1600, row=16):
    total = sum(stacks.values()) or 1
    tree = {}
    for stack, n in stacks.items():
        node = tree
        for f in stack.split(";"):
            e = node.setdefault(f, [0, {}])
            e[0] += n
            node = e[1]
    rects, depth_max = [], 0
    def walk(node, x, depth):
        nonlocal depth_max
        for name, (n, kids) in sorted(node.items()):
            w = n / total * width
            if w >= 0.3:
                rects.append((x, depth, w, name, n))
                depth_max = max(depth_max, depth)
                walk(kids, x, depth + 1)
            x += w
    walk(tree, 0.0, 0)
    height = (depth_max + 3) * row
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">',
           f'<text x="4" y="13">{html.escape(title)} ({total} samples)</text>']
    for x, d, w, name, n in rects:
        y = height - (d + 1) * row
        hue = zlib.crc32(name.encode()) % 60
        label = html.escape(name[: int(w / 7)]) if w > 21 else ""
        out.append(f'<g><title>{html.escape(name)}: {n} samples ({100 * n / total:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" fill="hsl({hue},80%,60%)"/>'
                   f'<text x="{x + 2:.1f}" y="{y + row - 4}">{label}</text></g>')
    out.append("</svg>")
    return "\n".join(out)

def main():
    args = sys.argv[1:]
    collapsed = top = None
    if "--collapsed" in args:
        i = args.index("--collapsed"); collapsed = args[i + 1]; del args[i:i + 2]
    if "--top" in args:
        i = args.index("--top"); top = int(args[i + 1]); del args[i:i + 2]
    out, title = args[0], (args[1] if len(args) > 1 else "perf")
    stacks = collapse(sys.stdin)
    open(out, "w").write(svg(stacks, title))
    if collapsed:
        open(collapsed, "w").write("".join(f"{s} {n}\n" for s, n in stacks.most_common()))
    total = sum(stacks.values()) or 1
    incl, leaf = collections.Counter(), collections.Counter()
    for s, n in stacks.items():
        fs = s.split(";")[1:]
        for f in set(fs):
            incl[f] += n
        if fs:
            leaf[fs[-1]] += n
    print(f"{title}: {total} samples")
    for name, c in (("inclusive", incl), ("self", leaf)):
        print(f"  top {name}:")
        for f, n in c.most_common(top or 25):
            print(f"    {100 * n / total:5.1f}%  {f}")

if __name__ == "__main__":
    main()
