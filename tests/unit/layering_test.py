#!/usr/bin/env python3
"""The layering of src/ (src/README.md, rule 1; issue 13): each layer includes only itself and
the layers it declares in src/CMakeLists.txt (`sidelock_layer(NAME DEPS sidelock_X ...)`), and the
declared dependencies form no cycle. So http never includes config or lock, and api speaks to the
lock service, never to backend or redis. Fails naming each offending #include.

Usage: layering_test.py SRC_DIR
"""
import glob
import os
import re
import sys


def layer_deps(src):
    """{layer: set of the layers it declares} from src/CMakeLists.txt (also used by
    conventions_test.py, which checks src/README.md's map against it)."""
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        cmake = f.read()
    deps = {}
    for m in re.finditer(r"sidelock_layer\((\w+)\s+DEPS\s+([^)]*)\)", cmake):
        deps[m.group(1)] = {d[len("sidelock_"):] for d in m.group(2).split() if d.startswith("sidelock_")}
    return deps


def main():
    src = sys.argv[1]
    deps = layer_deps(src)
    problems = []
    if len(deps) < 8:
        problems.append("found only %d layers in src/CMakeLists.txt: %s" % (len(deps), sorted(deps)))
    for layer, ds in deps.items():
        for d in ds:
            if d not in deps:
                problems.append("%s depends on unknown layer %s" % (layer, d))

    def reaches(start, target, seen):
        for d in deps.get(start, ()):
            if d == target or (d not in seen and reaches(d, target, seen | {d})):
                return True
        return False

    for layer in deps:
        if reaches(layer, layer, set()):
            problems.append("layer %s depends on itself through its DEPS" % layer)

    checked = 0
    for layer in sorted(deps):
        allowed = deps[layer] | {layer}
        files = sorted(glob.glob(os.path.join(src, layer, "**", "*.h"), recursive=True) +
                       glob.glob(os.path.join(src, layer, "**", "*.cc"), recursive=True))
        for path in files:
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"(\w+)/', line)
                    if not m:
                        continue
                    checked += 1
                    included = m.group(1)
                    if included in deps and included not in allowed:
                        problems.append("%s:%d: layer %s includes %s, which is not in its DEPS %s"
                                        % (os.path.relpath(path, src), number, layer, line.strip(),
                                           sorted(deps[layer])))
    if checked < 100:
        problems.append("checked only %d includes: is %s the source tree?" % (checked, src))
    for p in problems:
        print("FAIL " + p)
    print("%d layers, %d project includes checked, %d problem(s)" % (len(deps), checked, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
