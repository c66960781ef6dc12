#!/usr/bin/env python3
"""The import graph of include/ckpt against the layers spec/LAYOUT.md section 1 draws.

Reads the layer table between the `layers:` markers of spec/LAYOUT.md (one line per layer, lowest
first: `name: what it may use besides the layers below`), resolves every `#include "..."` of every
header, implementation files included, and fails (exit 1) naming each include from a lower layer to a
higher one, and each header outside any layer. Exit 0 prints the graph's floor count. ctest
`layers_no_upward_include` runs it.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INC = os.path.join(ROOT, 'include', 'ckpt')


def layer_table():
    text = open(os.path.join(ROOT, 'spec', 'LAYOUT.md'), encoding='utf-8').read()
    m = re.search(r'<!-- layers: -->\n```\n(.*?)```\n<!-- :layers -->', text, re.S)
    if not m:
        sys.exit('spec/LAYOUT.md: no layer table between <!-- layers: --> and <!-- :layers -->')
    rank = {}
    for level, line in enumerate(l for l in m.group(1).splitlines() if l.strip()):
        names, _, _ = line.partition(':')
        for name in names.split('='):  # a = b: two layers on one floor, neither uses the other
            rank[name.strip()] = level
    return rank


def layer_of(rel, rank):
    first = rel.split('/')[0] if '/' in rel else rel
    return first if first in rank else None


def main():
    rank = layer_table()
    problems = []
    edges = 0
    for d, _, files in os.walk(INC):
        for f in sorted(files):
            path = os.path.join(d, f)
            rel = os.path.relpath(path, INC)
            if rel == 'ckpt.hpp':  # the umbrella sits above every layer (spec/LAYOUT.md 2)
                continue
            me = layer_of(rel, rank)
            if me is None:
                problems.append(f'include/ckpt/{rel}: in no layer of spec/LAYOUT.md 1')
                continue
            for n, line in enumerate(open(path, encoding='utf-8'), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                target = os.path.relpath(os.path.normpath(os.path.join(d, m.group(1))), INC)
                to = layer_of(target, rank)
                edges += 1
                if to is None:
                    problems.append(f'include/ckpt/{rel}:{n}: includes {target}, in no layer')
                elif rank[to] > rank[me] or (rank[to] == rank[me] and to != me):
                    problems.append(f'include/ckpt/{rel}:{n}: {me} includes {target} of {to}, a higher layer')
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} include(s) against spec/LAYOUT.md 1')
        return 1
    print(f'{edges} includes, none upward, across {len(set(rank.values()))} floors')
    return 0


if __name__ == '__main__':
    sys.exit(main())
