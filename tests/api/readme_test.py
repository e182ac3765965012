#!/usr/bin/env python3
"""README.md stays navigable and names only configuration keys the sidecar accepts (issue 22).

Checks, on the README as written:
  - every `[text](#anchor)` names a heading (GitHub's slug: lower case, punctuation dropped except
    '-' and '_', each space a '-', "-1", "-2"... for repeated headings), and every relative link
    `[text](path)` (and `path#anchor` into another Markdown file) exists in the repository;
  - the Contents list links every `##` and `###` heading, in order;
  - a section referred to in quotes ("Access control") is a link instead, so the check above
    covers it;
  - every table is whole: a run of `|` rows starts with a header and its `|---|` line;
  - every configuration key the README names is one the sidecar accepts: the keys of the
    Configuration table, backticked dotted names under a top-level section (`locks.max_ttl_ms`,
    `redlock.delayed_restart` for backend.redlock) and their `/ \`sibling\`` shorthands, and the
    keys of every ```yaml block. "Accepts" is asked of the real binary: `sidelock --check-config`
    on a file holding just that key must not answer "<key>: unknown key";
  - config/sidelock.yaml passes --check-config, lists every key of the Configuration table
    (commented out where a key applies to one backend type only), and lists no unknown key.
Standard library only.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FAILURES = []

# Top-level sections of the configuration (src/config/config.cc, load()), and the backend's
# subsections that the README names without their "backend." (`redlock.delayed_restart`).
SECTIONS = ("listen", "backend", "locks", "shutdown", "log", "metrics", "auth", "dapr")
BACKEND_SUBSECTIONS = ("redlock", "tls", "sentinel")
# (Not after a '/': `src/metrics/metrics.h` is a file, not the key metrics.h.)
KEY_RE = re.compile(r"(?<!/)\b((?:%s)(?:\.[a-z_]+)+)\b" % "|".join(SECTIONS + BACKEND_SUBSECTIONS))


def fail(msg):
    FAILURES.append(msg)
    print("FAIL:", msg)


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield n, line


def fenced_blocks(text, lang):
    return re.findall(r"^```%s\n(.*?)^```" % lang, text, re.S | re.M)


def slug(heading):
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def headings(text):
    """[(level, title, slug)] with GitHub's suffixes for repeated titles."""
    seen = {}
    out = []
    for _, line in prose_lines(text):
        m = re.match(r"(#{1,6}) (.*)", line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.append((len(m.group(1)), m.group(2).strip(), s if n == 0 else "%s-%d" % (s, n)))
    return out


def without_code_spans(line):
    return re.sub(r"`[^`]*`", "", line)


def check_links(text, repo, readme_name):
    anchors = {h[2] for h in headings(text)}
    count = 0
    for n, line in prose_lines(text):
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", without_code_spans(line)):
            count += 1
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            if not path:
                if anchor not in anchors:
                    fail("%s:%d: link to #%s, but no heading has that anchor" % (readme_name, n, anchor))
                continue
            full = os.path.join(repo, path)
            if not os.path.exists(full):
                fail("%s:%d: link to %s, which does not exist" % (readme_name, n, path))
            elif anchor and path.endswith(".md"):
                with open(full) as f:
                    if anchor not in {h[2] for h in headings(f.read())}:
                        fail("%s:%d: link to %s#%s: no such heading there" % (readme_name, n, path, anchor))
    return count


def check_contents(text):
    """The Contents list links every ## and ### heading after it, in order."""
    lines = text.split("\n")
    try:
        start = lines.index("## Contents")
    except ValueError:
        fail("README.md has no '## Contents' list")
        return
    listed = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\s*- \[[^\]]*\]\(#([^)]+)\)", line)
        if m:
            listed.append(m.group(1))
    wanted = [s for level, title, s in headings(text) if level in (2, 3) and title != "Contents"]
    if listed != wanted:
        missing = [s for s in wanted if s not in listed]
        extra = [s for s in listed if s not in wanted]
        fail("the Contents list does not match the headings: missing %s, not a heading %s%s"
             % (missing, extra, "" if missing or extra else ", out of order"))


def check_quoted_section_names(text):
    titles = {title for _, title, _ in headings(text)}
    for n, line in prose_lines(text):
        for quoted in re.findall(r'"([^"`]+)"', without_code_spans(line)):
            if quoted in titles:
                fail('README.md:%d: refers to the section "%s" in quotes; link it instead' % (n, quoted))


def check_tables(text):
    previous = ""
    lines = list(prose_lines(text))
    for i, (n, line) in enumerate(lines):
        if line.startswith("|") and not previous.startswith("|"):
            nxt = lines[i + 1][1] if i + 1 < len(lines) else ""
            if not re.match(r"\|\s*:?-{3,}", nxt):
                fail("README.md:%d: a table row outside a table (no header and |---| line above it): %s"
                     % (n, line[:80]))
        previous = line


# --- configuration keys ------------------------------------------------------------------------

def canonical(key):
    return "backend." + key if key.split(".")[0] in BACKEND_SUBSECTIONS else key


def log_event_names(repo):
    """Names the sidecar logs events under (`auth.tokens_reloaded`, `redlock.no_quorum`): they
    look like configuration keys and are none."""
    names = set()
    for root, _, files in os.walk(os.path.join(repo, "src")):
        for name in files:
            if name.endswith((".cc", ".h")):
                with open(os.path.join(root, name)) as f:
                    names.update(re.findall(r'\bk(?:Debug|Info|Warn|Error),\s*"([a-z_.]+)"', f.read()))
    return names


def readme_config_keys(text, log_events):
    """{key: first line naming it} for the keys the README names."""
    keys = {}

    def add(key, n):
        if key not in log_events:
            keys.setdefault(canonical(key), n)

    for n, line in prose_lines(text):
        for span in re.findall(r"`([^`]*)`", line):
            if ".proto" in span:  # protobuf names and files (`dapr.proto.runtime.v1.Dapr`, `x.proto`)
                continue
            for key in KEY_RE.findall(span):
                add(key, n)
        # `a.b.c` / `d`: d is a sibling of c (`backend.reconnect_min_ms` / `reconnect_max_ms`).
        for key, sibling in re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)` / `([a-z_]+)`", line):
            if KEY_RE.fullmatch(key):
                add(key.rsplit(".", 1)[0] + "." + sibling, n)
    for block in fenced_blocks(text, "yaml"):
        for key in yaml_keys(block):
            keys.setdefault(key, "(a yaml block)")
    return keys


def config_table_keys(text):
    """The first column of the table under '## Configuration'."""
    keys = set()
    in_section = False
    for _, line in prose_lines(text):
        if line.startswith("## "):
            in_section = line == "## Configuration"
            continue
        if in_section and line.startswith("| `"):
            cell = line.split("|")[1]
            names = re.findall(r"`([a-z_.]+)`", cell)
            if names:
                keys.add(names[0])
                parent = names[0].rsplit(".", 1)[0]
                for sibling in names[1:]:
                    keys.add(sibling if "." in sibling else parent + "." + sibling)
    return keys


def yaml_keys(block, with_comments=False):
    """Dotted key paths of an indented YAML mapping in block style (the style of the README's
    examples and config/sidelock.yaml). With `with_comments`, commented-out keys count too:
    '  #   master_name: x' is master_name at indentation 4."""
    keys = []
    stack = []  # (indent, key, whether it has a value on its line)
    for line in block.split("\n"):
        m = re.match(r"(\s*)#( ?)(\s*)([a-z_]+):(.*)", line)
        if m and with_comments:
            indent, key, rest = len(m.group(1)) + len(m.group(3)), m.group(4), m.group(5)
        else:
            m = re.match(r"(\s*)([a-z_]+):(.*)", line)
            if not m:
                continue
            indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        if rest and not rest[0].isspace():
            continue  # "host:port", not a key
        has_value = rest.split("#")[0].strip() != ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and stack[-1][2]:
            continue  # prose in a comment under a key that has a value: "# cluster: seed nodes"
        stack.append((indent, key, has_value))
        keys.append(".".join(k for _, k, _ in stack))
    return keys


def context_for(key):
    """A configuration in which `key` is read (sentinel keys need type sentinel)."""
    if key.startswith("backend.sentinel"):
        return {"backend": {"type": "sentinel", "nodes": ["127.0.0.1:26379"],
                            "sentinel": {"master_name": "mymaster"}}}
    return {}


KNOWN = {}  # key -> accepted, so a key named in both files is asked once


def unknown_keys(sidelock, keys, tmp):
    """The keys `sidelock --check-config` reports as unknown (or under an unknown parent)."""
    path = os.path.join(tmp, "key.yaml")
    for key in sorted(set(keys) - set(KNOWN)):
        doc = context_for(key)
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = None
        with open(path, "w") as f:
            json.dump(doc, f)  # JSON is YAML
        r = subprocess.run([sidelock, "--check-config", path], capture_output=True, text=True)
        out = r.stdout + r.stderr
        prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        KNOWN[key] = not any("%s: unknown key" % p in out for p in prefixes)
    return [key for key in sorted(keys) if not KNOWN[key]]


def check_config_keys(sidelock, repo, readme):
    with tempfile.TemporaryDirectory(prefix="sidelock-readme-") as tmp:
        # The check itself must tell an unknown key from a known one.
        if unknown_keys(sidelock, ["locks.max_ttl_ms"], tmp) or \
                not unknown_keys(sidelock, ["locks.no_such_key"], tmp):
            fail("sidelock --check-config does not report unknown keys as this test expects")
            return
        named = readme_config_keys(readme, log_event_names(repo))
        for key in unknown_keys(sidelock, named, tmp):
            fail("README.md:%s names `%s`, which is no configuration key (--check-config: unknown key)"
                 % (named[key], key))

        sample = os.path.join(repo, "config/sidelock.yaml")
        # --check-config also checks that the Unix socket's directory exists (/run/sidelock on the
        # target host, made by systemd or a pod volume): point it into the temp dir here.
        with open(sample) as f:
            here = re.sub(r'(?m)^(\s*unix:)\s*"?/run/sidelock/([^"\s]+)"?',
                          lambda m: m.group(1) + " " + os.path.join(tmp, m.group(2)), f.read())
        checked = os.path.join(tmp, "sidelock-sample.yaml")
        with open(checked, "w") as f:
            f.write(here)
        r = subprocess.run([sidelock, "--check-config", checked], capture_output=True, text=True)
        if r.returncode != 0:
            fail("config/sidelock.yaml does not pass --check-config: " + r.stderr.strip())
        with open(sample) as f:
            listed = set(yaml_keys(f.read(), with_comments=True))
        for key in unknown_keys(sidelock, listed, tmp):
            fail("config/sidelock.yaml lists `%s`, which is no configuration key" % key)
        table = config_table_keys(readme)
        if len(table) < 40:
            fail("found only %d keys in the README's Configuration table" % len(table))
        for key in sorted(table - listed):
            fail("config/sidelock.yaml does not list `%s` (the README says it lists every key)" % key)
        print("checked %d configuration keys named in README.md, %d in config/sidelock.yaml"
              % (len(named), len(listed)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sidelock", required=True)
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.repo, "README.md")) as f:
        readme = f.read()

    links = check_links(readme, args.repo, "README.md")
    if links < 10:
        fail("found only %d links in README.md" % links)
    check_contents(readme)
    check_quoted_section_names(readme)
    check_tables(readme)
    check_config_keys(args.sidelock, args.repo, readme)
    print("checked %d links" % links)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
