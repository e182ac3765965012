#!/usr/bin/env python3
"""Keeps src/README.md (the architecture map and the code conventions) true to the tree (issue 18):
  - every directory under src/ has a row in the map;
  - each layer's "May include" cell is exactly the DEPS that src/CMakeLists.txt declares for it
    (the rules tests/unit/layering_test.py enforces);
  - the rules are numbered 1..N once each, and every "src/README.md, rule N" cited in src/, tests/
    or CMake files (and every "rule N" inside src/README.md) names one of them;
  - no comment cites the old out-of-tree style guide ("STYLE rule 3", "STYLE: Metrics"): the
    conventions live in the repository now.
Fails naming each offending file and line.

Usage: conventions_test.py REPO_ROOT
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layering_test import layer_deps  # noqa: E402

SOURCE_SUFFIXES = (".h", ".cc", ".c", ".py", ".cmake", ".txt", ".sh", ".md")
# A citation may wrap across comment lines: "src/README.md,\n// rule 4".
CITATION = re.compile(r"src/README\.md(?:,?\s+(?:(?://+|#+|\*)\s*)?rule\s+|#rule-)(\d+)", re.I)
OLD_GUIDE = re.compile(r"\bSTYLE\b")
RULE_HEADING = re.compile(r"^#+\s+Rule\s+(\d+):", re.M)
MAP_ROW = re.compile(r"^\|\s*`src/(\w+)/`\s*\|(.*)\|(.*)\|\s*$", re.M)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def source_files(root):
    yield os.path.join(root, "CMakeLists.txt")
    for top in ("src", "tests"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in ("corpus", "golden")]
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(dirpath, name)


def main():
    root = sys.argv[1]
    src = os.path.join(root, "src")
    readme_path = os.path.join(src, "README.md")
    with open(readme_path) as f:
        readme = f.read()
    problems = []

    # The map.
    rows = {m.group(1): m.group(3) for m in MAP_ROW.finditer(readme)}
    dirs = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for d in dirs:
        if d not in rows:
            problems.append("src/README.md: no row for src/%s/ in the architecture map" % d)
    for d in sorted(set(rows) - set(dirs)):
        problems.append("src/README.md: the map names src/%s/, which does not exist" % d)
    deps = layer_deps(src)
    for layer, declared in sorted(deps.items()):
        if layer not in rows:
            continue
        documented = set(re.findall(r"\b[a-z]+\b", rows[layer])) - {"nothing"}
        if documented != declared:
            problems.append("src/README.md: src/%s/ may include %s, but src/CMakeLists.txt declares %s"
                            % (layer, sorted(documented), sorted(declared)))

    # The rules.
    numbers = [int(n) for n in RULE_HEADING.findall(readme)]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append("src/README.md: rules are numbered %s, not 1..N once each" % numbers)
    rules = set(numbers)
    for m in re.finditer(r"\(rule (\d+)\)|, rule (\d+)\b", readme):
        n = int(m.group(1) or m.group(2))
        if n not in rules:
            problems.append("src/README.md:%d: cites rule %d, which does not exist"
                            % (line_of(readme, m.start()), n))

    # The citations.
    citations = 0
    this_file = os.path.abspath(__file__)
    for path in source_files(root):
        if os.path.abspath(path) in (this_file, os.path.abspath(readme_path)):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        rel = os.path.relpath(path, root)
        for m in CITATION.finditer(text):
            citations += 1
            if int(m.group(1)) not in rules:
                problems.append("%s:%d: cites src/README.md rule %s, which does not exist"
                                % (rel, line_of(text, m.start()), m.group(1)))
        for m in OLD_GUIDE.finditer(text):
            problems.append("%s:%d: cites the out-of-tree style guide (%s); cite src/README.md, rule N"
                            % (rel, line_of(text, m.start()), text[m.start():].split("\n", 1)[0][:40]))

    if len(rules) < 10:
        problems.append("src/README.md: found only %d rules: is %s the repository?" % (len(rules), root))
    if citations < 5:
        problems.append("found only %d citations of src/README.md rules under %s" % (citations, root))
    for p in problems:
        print("FAIL " + p)
    print("%d directories mapped, %d rules, %d citations checked, %d problem(s)"
          % (len(rows), len(rules), citations, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
