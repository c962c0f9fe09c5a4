#!/usr/bin/env python3
# Circles between src/ modules (docs/notes/architecture.md). A module is a
# folder/stem: foo.c, foo.h, foo.cu, foo.cuh together.
#   includes: A -> B when a file of A includes a header of B (from the sources);
#   calls:    A -> B when A's object references a symbol B's defines (from a
#             build's object files: --objects build/CMakeFiles/minfer_obj.dir).
# Prints each group of modules that reach each other; exit status 1 if any.
import argparse, collections, os, re, subprocess, sys

def sccs(g):
    idx, low, st, on, out = {}, {}, [], set(), []
    def visit(v):
        idx[v] = low[v] = len(idx); st.append(v); on.add(v)
        for w in sorted(g[v]):
            if w not in idx: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while not c or c[-1] != v: c.append(st.pop()); on.discard(c[-1])
            if len(c) > 1: out.append(sorted(c))
    sys.setrecursionlimit(10000)
    for v in sorted(list(g)):
        if v not in idx: visit(v)
    return out

def include_graph(src):
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(('.c', '.h', '.cu', '.cuh'))]
    mod = lambda p: os.path.splitext(os.path.relpath(p, src))[0]
    mods, g = {mod(f) for f in files}, collections.defaultdict(set)
    for f in files:
        for h in inc.findall(open(f, errors='replace').read()):
            b = os.path.splitext(os.path.normpath(h))[0]
            if b in mods and b != mod(f): g[mod(f)].add(b)
    return g

def call_graph(objdir, src):
    defs, uses, g = {}, collections.defaultdict(set), collections.defaultdict(set)
    for d, _, fs in os.walk(objdir):
        for f in fs:
            o = os.path.join(d, f)
            rel = os.path.relpath(o, objdir)
            if not rel.startswith('src/') or not f.endswith('.o'): continue
            source = rel[:-2]
            if not os.path.exists(os.path.join(os.path.dirname(src), source)): continue  # stale object
            m = os.path.splitext(os.path.relpath(source, 'src'))[0]
            for line in subprocess.run(['nm', o], capture_output=True, text=True).stdout.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in 'TDBRiWV': defs[p[2]] = m
                elif len(p) == 2 and p[0] == 'U': uses[m].add(p[1])
    for a, syms in uses.items():
        for s in syms:
            if defs.get(s, a) != a: g[a].add(defs[s])
    return g

ap = argparse.ArgumentParser()
ap.add_argument('--src', default='src')
ap.add_argument('--objects', help='a build\'s object dir, e.g. build/CMakeFiles/minfer_obj.dir')
args = ap.parse_args()
found = 0
for what, g in [('include', include_graph(args.src))] + ([('call', call_graph(args.objects, args.src))] if args.objects else []):
    groups = sccs(g)
    found += len(groups)
    print(f'{what} circles: {len(groups)}')
    for c in groups: print('  ' + ' <-> '.join(c))
sys.exit(1 if found else 0)
