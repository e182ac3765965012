#!/usr/bin/env python3
"""Keeps src/api/openapi.json honest (issue 13): the document is a well-formed OpenAPI 3.1 whose
schemas are valid JSON Schema 2020-12; the running sidecar serves exactly it; every JSON example
in README.md validates against the route it belongs to; and real answers of a real sidecar on a
real redis-server, for every route and the errors that are cheap to provoke, validate against the
response the document gives for that route and status.

Usage: openapi_test.py --sidelock BINARY --repo REPO_ROOT
"""
import argparse
import copy
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import jsonschema

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from live_processes import free_port, wait_port  # noqa: E402  (shared with tests/examples)

FAILURES = []
CHECKED = {"responses": 0, "readme": 0}
# (METHOD, template, status) -> the top-level and nested field names seen in real answers.
HIT = {}
ADMIN_TOKEN = "OpenApiAdminToken-0123456789abcdef"


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg)


# --- the document ------------------------------------------------------------------------------

def inline_refs(node, doc, seen=()):
    """The schema with every local $ref replaced by its target (works on any jsonschema version)."""
    if isinstance(node, dict):
        if "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/") or ref in seen:
                raise ValueError("unsupported or recursive $ref " + ref)
            target = doc
            for part in ref[2:].split("/"):
                target = target[part]
            merged = inline_refs(target, doc, seen + (ref,))
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**merged, **inline_refs(rest, doc, seen)} if rest else merged
        return {k: inline_refs(v, doc, seen) for k, v in node.items()}
    if isinstance(node, list):
        return [inline_refs(v, doc, seen) for v in node]
    return node


def check_document(doc):
    if doc.get("openapi") != "3.1.0":
        fail("openapi must be 3.1.0")
    for key in ("info", "paths", "components"):
        if key not in doc:
            fail("document lacks " + key)
    for name, schema in doc["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(inline_refs(schema, doc))
        except Exception as e:  # noqa: BLE001 - report any schema problem
            fail("components.schemas.%s: %s" % (name, e))
    for path, item in doc["paths"].items():
        params = set(re.findall(r"{([^}]+)}", path))
        for method, op in item.items():
            where = "%s %s" % (method.upper(), path)
            if "responses" not in op or not op["responses"]:
                fail(where + ": no responses")
            declared = {p["name"] for p in op.get("parameters", []) if p.get("in") == "path"}
            if declared != params:
                fail("%s: path parameters %s declared as %s" % (where, sorted(params), sorted(declared)))
            for status, resp in op.get("responses", {}).items():
                if not re.fullmatch(r"[1-5][0-9][0-9]", status):
                    fail("%s: response key %s" % (where, status))
                if "description" not in resp:
                    fail("%s %s: no description" % (where, status))
                for ctype, media in resp.get("content", {}).items():
                    try:
                        jsonschema.Draft202012Validator.check_schema(inline_refs(media["schema"], doc))
                    except Exception as e:  # noqa: BLE001
                        fail("%s %s %s: %s" % (where, status, ctype, e))


def check_routes_documented(doc, repo):
    """Every route the C++ registers ({"METHOD", "/pattern", ...} rows) is in the document."""
    found = 0
    for source in ("src/api/lock_api.cc", "src/api/dapr_api.cc", "src/api/election_api.cc"):
        with open(os.path.join(repo, source)) as f:
            text = f.read()
        for method, pattern in re.findall(r'\{"(GET|POST|PUT|DELETE|PATCH)",\s*"(/[^"]*)"', text):
            found += 1
            if method.lower() not in doc["paths"].get(pattern, {}):
                fail("%s serves %s %s, which the document lacks" % (source, method, pattern))
    if found < 10:
        fail("found only %d route rows in the sources" % found)


def error_codes_in_sources(repo):
    """The `error` codes the C++ answers with: `NNN, "code"` in a sendError / sendRetryLater /
    error(...) call, the named code constants of the HTTP layer, {"error", "code"} bodies and
    RequestBody's fail("code", ...)."""
    codes = {}
    for sub in ("src/api", "src/http"):
        for name in sorted(os.listdir(os.path.join(repo, sub))):
            if not name.endswith((".cc", ".h")):
                continue
            with open(os.path.join(repo, sub, name)) as f:
                text = f.read()
            found = re.findall(r'\b[1-5][0-9]{2},\s*"([a-z][a-z_]+)"', text)
            found += re.findall(r'constexpr std::string_view k\w+ = "([a-z]+_[a-z_]+)";', text)
            found += re.findall(r'\{"error", "([a-z][a-z_]+)"\}', text)
            found += re.findall(r'\bfail\("([a-z]+_[a-z_]+)"', text)
            for code in found:
                codes.setdefault(code, "%s/%s" % (sub, name))
    return codes


def check_error_codes_documented(doc, readme, repo):
    """Every error code the sidecar can answer is in the document's Error schema and in README's
    error table, and the schema names no code the sources never answer."""
    codes = error_codes_in_sources(repo)
    if len(codes) < 15:
        fail("found only %d error codes in the sources" % len(codes))
    documented = set(doc["components"]["schemas"]["Error"]["properties"]["error"].get("enum", []))
    for code in sorted(documented - set(codes)):
        fail("src/api/openapi.json lists error %s, which no source answers" % code)
    text = "\n".join("`%s`" % c for c in documented)
    table = "\n".join(line for line in readme.splitlines() if line.startswith("| "))
    for code, where in sorted(codes.items()):
        if "`%s`" % code not in text:
            fail("%s answers error %s, which src/api/openapi.json never names" % (where, code))
        if "`%s`" % code not in table:
            fail("%s answers error %s, which README.md's error table lacks" % (where, code))


def find_operation(doc, method, path):
    path = path.split("?")[0]
    for template, item in doc["paths"].items():
        pattern = "^" + re.sub(r"{[^}]+}", "[^/]+", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    return None, None


def validate(instance, schema, doc):
    jsonschema.Draft202012Validator(inline_refs(schema, doc)).validate(instance)


def check_response(doc, method, path, status, ctype, body, note=""):
    template, op = find_operation(doc, method, path)
    where = "%s %s -> %d%s" % (method, path, status, " (" + note + ")" if note else "")
    if op is None:
        return fail(where + ": no such operation in the document")
    resp = op["responses"].get(str(status))
    if resp is None:
        return fail("%s: status not documented for %s %s" % (where, method, template))
    if "content" not in resp:  # 204: documented without a body, and answered without one
        if body or ctype:
            return fail("%s: documented without a body, answered %r %r" % (where, ctype, body[:100]))
        CHECKED["responses"] += 1
        HIT.setdefault((method.upper(), template, str(status)), set())
        return
    content = resp["content"]
    media = ctype.split(";")[0].strip().lower()
    if media not in content:
        return fail("%s: content type %s not documented (has %s)" % (where, media, sorted(content)))
    schema = content[media]["schema"]
    try:
        if media in ("application/json",):
            validate(json.loads(body), schema, doc)
        elif media == "application/x-ndjson":
            for line in body.splitlines():
                if line.strip():
                    validate(json.loads(line), schema, doc)
        else:
            validate(body, schema, doc)
    except Exception as e:  # noqa: BLE001
        return fail("%s: %s\n    body: %s" % (where, str(e).splitlines()[0], body[:300]))
    CHECKED["responses"] += 1
    fields = HIT.setdefault((method.upper(), template, str(status)), set())
    if media in ("application/json", "application/x-ndjson"):
        for line in body.splitlines() if media == "application/x-ndjson" else [body]:
            if line.strip():
                fields.update(field_names(json.loads(line)))


def field_names(value, prefix=""):
    """Dotted names of every object member in `value` ("leader.term")."""
    names = set()
    if isinstance(value, dict):
        for k, v in value.items():
            names.add(prefix + k)
            names.update(field_names(v, prefix + k + "."))
    return names


def schema_field_names(schema, doc, prefix=""):
    """Dotted names of every property a response schema documents (through $ref and oneOf)."""
    schema = inline_refs(schema, doc)
    names = set()
    for alt in [schema] + schema.get("oneOf", []) + schema.get("anyOf", []):
        for k, v in alt.get("properties", {}).items():
            names.add(prefix + k)
            names.update(schema_field_names(v, doc, prefix + k + "."))
    return names


# --- README examples ----------------------------------------------------------------------------

CURL_PATH = re.compile(r"(?:https?://)?(?:localhost|127\.0\.0\.1)(?::\d+)?(/[^\s'\"]*)")


def readme_examples(text):
    """(method, path, request body or None, [(status, response text)]) per curl in ```sh blocks."""
    examples = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = block.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            if "curl " not in line or line.startswith("#") and "curl" not in line[:8]:
                i += 1
                continue
            cmd = line
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
            m = CURL_PATH.search(cmd)
            if not m:
                continue
            data = re.search(r"-d '([^']*)'", cmd)
            method = "POST" if ("-XPOST" in cmd or "-X POST" in cmd or data) else "GET"
            answers = []
            while i < len(lines) and "curl " not in lines[i]:
                out = lines[i].strip()
                i += 1
                if out.startswith("# "):
                    out = out[2:]
                if not out.startswith("{"):
                    continue
                status = 200
                tail = re.search(r"#\s*(\d{3})\s*$", out)
                if tail:
                    status = int(tail.group(1))
                obj, _ = json.JSONDecoder().raw_decode(out)
                answers.append((status, obj))
            examples.append((method, m.group(1), data.group(1) if data else None, answers))
    return examples


def check_readme(doc, readme):
    examples = readme_examples(readme)
    if len(examples) < 5:
        fail("found only %d curl examples in README.md" % len(examples))
    for method, path, data, answers in examples:
        template, op = find_operation(doc, method, path)
        if op is None:
            fail("README %s %s: no such operation in the document" % (method, path))
            continue
        if data is not None:
            schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if schema is None:
                fail("README %s %s: sends a body the document does not describe" % (method, path))
            else:
                try:
                    validate(json.loads(data), schema, doc)
                    CHECKED["readme"] += 1
                except Exception as e:  # noqa: BLE001
                    fail("README %s %s body %s: %s" % (method, path, data, str(e).splitlines()[0]))
        stream = (data is not None and '"hold":"stream"' in data.replace(" ", "")) or \
            path.endswith(("/campaign", "/observe", "/events"))
        for status, obj in answers:
            resp = op["responses"].get(str(status))
            if resp is None:
                fail("README %s %s: status %d not documented" % (method, path, status))
                continue
            media = "application/x-ndjson" if stream else "application/json"
            try:
                validate(obj, resp["content"][media]["schema"], doc)
                CHECKED["readme"] += 1
            except Exception as e:  # noqa: BLE001
                fail("README %s %s answer %s: %s" % (method, path, obj, str(e).splitlines()[0]))


# --- a real sidecar -----------------------------------------------------------------------------

def call(port, method, path, body=None, headers=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Host": "localhost"}
    h.update(headers or {})
    if body is not None and "Content-Type" not in h:
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    return r.status, r.getheader("Content-Type", ""), data


def exercise(doc, lock_port, admin_port):
    def check(method, path, body=None, headers=None, expect=None, port=lock_port):
        status, ctype, data = call(port, method, path, body, headers)
        if expect is not None and status != expect:
            fail("%s %s: expected %d, got %d %s" % (method, path, expect, status, data[:200]))
        check_response(doc, method, path, status, ctype, data)
        return status, data

    check("GET", "/healthz", expect=200)
    check("GET", "/readyz", expect=200)
    _, served = check("GET", "/v1/openapi.json", expect=200)
    if json.loads(served) != doc:
        fail("GET /v1/openapi.json differs from src/api/openapi.json")
    check("GET", "/metrics", expect=200)
    check("GET", "/v1/locks", expect=200)
    check("GET", "/v1/locks/x", expect=200)
    _, grant = check("POST", "/v1/locks/x/acquire", '{"ttl_ms":30000,"auto_renew":true}', expect=200)
    owner = json.loads(grant)["owner"]
    check("GET", "/v1/locks", expect=200)
    check("GET", "/v1/locks/x", expect=200)
    check("POST", "/v1/locks/x/acquire", '{"wait_ms":0}', expect=409)
    check("POST", "/v1/locks/x/acquire", '{"ttl":1}', expect=400)
    check("POST", "/v1/locks/a%7Bb/acquire", "{}", expect=400)
    check("POST", "/v1/locks/x/acquire", "{}", {"Content-Type": "text/html"}, expect=415)
    check("POST", "/v1/locks/x/extend", json.dumps({"owner": owner, "ttl_ms": 20000}), expect=200)
    check("POST", "/v1/locks/x/extend", '{"owner":"somebody-else"}', expect=409)
    check("POST", "/v1/locks/y/extend", '{"owner":"somebody-else"}', expect=404)
    check("POST", "/v1/locks/x/release", '{"owner":"somebody-else"}', expect=409)
    check("POST", "/v1/locks/x/release", json.dumps({"owner": owner}), expect=200)
    check("POST", "/v1/locks/x/release", json.dumps({"owner": owner}), expect=404)
    # Reentrant holds and semaphores.
    _, tree = check("POST", "/v1/locks/tree/acquire", '{"reentrant":true}', expect=200)
    tree_owner = json.loads(tree)["owner"]
    check("POST", "/v1/locks/tree/acquire", json.dumps({"owner": tree_owner, "reentrant": True}), expect=200)
    check("POST", "/v1/locks/tree/release", json.dumps({"owner": tree_owner}), expect=200)
    check("POST", "/v1/locks/tree/release", json.dumps({"owner": tree_owner}), expect=200)
    # Read/write locks: readers, a writer turned away, a reader's release without and with mode.
    _, rd1 = check("POST", "/v1/locks/doc/acquire", '{"mode":"shared"}', expect=200)
    _, rd2 = check("POST", "/v1/locks/doc/acquire", '{"mode":"shared","ttl_ms":30000}', expect=200)
    check("GET", "/v1/locks/doc", expect=200)
    check("POST", "/v1/locks/doc/acquire", '{"mode":"exclusive"}', expect=409)
    check("POST", "/v1/locks/doc/acquire", '{"mode":"both"}', expect=400)
    check("POST", "/v1/locks/doc/extend", json.dumps({"owner": json.loads(rd1)["owner"], "mode": "shared"}), expect=200)
    check("POST", "/v1/locks/doc/release", json.dumps({"owner": json.loads(rd1)["owner"]}), expect=200)
    check("POST", "/v1/locks/doc/release", json.dumps({"owner": json.loads(rd2)["owner"], "mode": "shared"}), expect=200)
    # Fair locks: granted, a single try refused while held, released.
    _, fair = check("POST", "/v1/locks/turns/acquire", '{"fair":true,"ttl_ms":30000}', expect=200)
    check("POST", "/v1/locks/turns/acquire", '{"fair":true}', expect=409)
    check("POST", "/v1/locks/turns/release", json.dumps({"owner": json.loads(fair)["owner"]}), expect=200)
    # Multi-locks: granted, blocked by a held name, bad input, released, released again.
    _, ml = check("POST", "/v1/multilocks/acquire", '{"names":["acct-2","acct-1"],"ttl_ms":30000}', expect=200)
    ml_owner = json.loads(ml)["owner"]
    check("POST", "/v1/multilocks/acquire", '{"names":["acct-0","acct-2"]}', expect=409)
    check("POST", "/v1/multilocks/acquire", '{"names":[]}', expect=400)
    check("POST", "/v1/multilocks/release", json.dumps({"names": ["acct-1", "acct-2"], "owner": ml_owner}), expect=200)
    check("POST", "/v1/multilocks/release", json.dumps({"names": ["acct-1"], "owner": ml_owner}), expect=404)
    check("GET", "/v1/semaphores/sale", expect=200)
    _, sem = check("POST", "/v1/semaphores/sale/acquire", '{"limit":1,"ttl_ms":30000}', expect=200)
    permit = json.loads(sem)["permit"]
    check("GET", "/v1/semaphores/sale", expect=200)
    check("POST", "/v1/semaphores/sale/acquire", '{"limit":1}', expect=409)
    check("POST", "/v1/semaphores/sale/acquire", '{"limit":2}', expect=409)
    check("POST", "/v1/semaphores/sale/acquire", '{"limit":0}', expect=400)
    check("POST", "/v1/semaphores/sale/extend", json.dumps({"permit": permit, "ttl_ms": 20000}), expect=200)
    check("POST", "/v1/semaphores/sale/release", json.dumps({"permit": permit}), expect=200)
    check("POST", "/v1/semaphores/sale/release", json.dumps({"permit": permit}), expect=404)
    check("POST", "/v1/semaphores/sale/extend", json.dumps({"permit": permit}), expect=404)
    check("GET", "/v1/locks/x", headers={"Host": "attacker.example"}, expect=421)
    check("POST", "/v1/locks/x/acquire", "{}", {"Origin": "http://evil.example"}, expect=403)

    # 429: max_waiters_per_lock is 1 in this sidecar's config; one waiter queues, the next is refused.
    check("POST", "/v1/locks/q/acquire", '{"ttl_ms":30000}', expect=200)
    waiter = threading.Thread(target=call, args=(lock_port, "POST", "/v1/locks/q/acquire", '{"wait_ms":3000}'))
    waiter.start()
    end = time.time() + 5
    while time.time() < end and '"q"' not in json.dumps(json.loads(call(lock_port, "GET", "/v1/locks")[2])["waiters"]):
        time.sleep(0.02)
    check("POST", "/v1/locks/q/acquire", '{"wait_ms":3000}', expect=429)
    waiter.join()

    # A stream hold: its first line, then the connection closes and the lock is freed.
    conn = http.client.HTTPConnection("127.0.0.1", lock_port, timeout=10)
    conn.request("POST", "/v1/locks/s/acquire", body='{"ttl_ms":5000,"hold":"stream"}',
                 headers={"Host": "localhost", "Content-Type": "application/json"})
    r = conn.getresponse()
    first = r.readline().decode()
    check_response(doc, "POST", "/v1/locks/s/acquire", r.status, r.getheader("Content-Type", ""), first, "stream")
    conn.close()

    # Dapr's routes (dapr.stores is [lockstore] here).
    lock = lambda owner: json.dumps({"resourceId": "d1", "lockOwner": owner, "expiryInSeconds": 30})  # noqa: E731
    unlock = lambda owner: json.dumps({"resourceId": "d1", "lockOwner": owner})  # noqa: E731
    check("POST", "/v1.0-alpha1/lock/lockstore", lock("vader"), expect=200)
    check("POST", "/v1.0-alpha1/lock/lockstore", lock("luke"), expect=200)
    check("POST", "/v1.0-alpha1/unlock/lockstore", unlock("luke"), expect=200)
    check("POST", "/v1.0-alpha1/unlock/lockstore", unlock("vader"), expect=200)
    check("POST", "/v1.0-alpha1/unlock/lockstore", unlock("vader"), expect=200)
    check("POST", "/v1.0-alpha1/lock/lockstore", '{"resourceId":"d1"}', expect=400)
    check("POST", "/v1.0-alpha1/lock/elsewhere", lock("vader"), expect=400)
    check("POST", "/v1.0-alpha1/unlock/lockstore", "{}", {"Content-Type": "text/html"}, expect=415)
    _, meta = check("GET", "/v1.0/metadata", expect=200)
    if json.loads(meta)["components"] != [{"name": "lockstore", "type": "lock.redis", "version": "v1",
                                           "capabilities": []}]:
        fail("GET /v1.0/metadata: components %s" % meta)
    check("GET", "/v1.0/healthz", expect=204)
    check("GET", "/v1.0/healthz/outbound", expect=204)

    exercise_elections(doc, lock_port, check)

    # The admin listener: force release with and without the admin token.
    auth = {"Authorization": "Bearer " + ADMIN_TOKEN}
    check("POST", "/v1/locks/f/acquire", "{}", expect=200)
    check("POST", "/admin/v1/locks/f/release", port=admin_port, expect=401)
    check("POST", "/admin/v1/locks/f/release", headers=auth, port=admin_port, expect=200)
    check("POST", "/admin/v1/locks/f/release", headers=auth, port=admin_port, expect=404)
    check("POST", "/admin/v1/locks/a%7Bb/release", headers=auth, port=admin_port, expect=400)
    check("GET", "/readyz", port=admin_port, expect=200)
    check("GET", "/v1/openapi.json", headers=auth, port=admin_port, expect=200)
    # The admin listing of held locks.
    check("POST", "/v1/locks/listed/acquire", '{"holder":"openapi"}', expect=200)
    check("GET", "/admin/v1/locks", port=admin_port, expect=401)
    check("GET", "/admin/v1/locks?prefix=list&limit=5", headers=auth, port=admin_port, expect=200)
    check("GET", "/admin/v1/locks?limit=0", headers=auth, port=admin_port, expect=400)


# Statuses of the election routes a contract sidecar cannot provoke cheaply, and why; every other
# documented status of the six election paths must be answered for real (check_election_coverage).
ELECTION_NOT_PROVOKED = {
    "401": "no lock tokens in this sidecar's config (tests/integration/access_control_test.cc)",
    "501": "no backend type shipped answers it: every one holds elections",
    ("POST", "/v1/elections/{name}/campaign", "503"): "a campaign rides out an outage in line",
    ("GET", "/v1/elections/{name}/observe", "503"): "only while draining",
}


class Stream:
    """A chunked NDJSON answer read line by line (campaign, observe)."""

    def __init__(self, port, method, path, body=None, timeout=10):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        headers = {"Host": "localhost"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=body, headers=headers)
        self.resp = None  # a campaign in line has no answer yet: read when the first line is
        self.lines = []

    def line(self):
        if self.resp is None:
            self.resp = self.conn.getresponse()
        raw = self.resp.readline().decode()
        if raw:
            self.lines.append(raw)
        return json.loads(raw) if raw.strip() else None

    def check_to_end(self, doc, path, last_event):
        """Reads the rest of the stream, validates every line and expects `last_event` last."""
        while self.line() is not None:
            pass
        check_response(doc, "POST", path, self.resp.status, self.resp.getheader("Content-Type", ""),
                       "".join(self.lines), last_event)
        if not self.lines or json.loads(self.lines[-1])["event"] != last_event:
            fail("%s: the stream ended with %s, not %s" % (path, self.lines[-1:], last_event))

    def close(self):
        self.conn.close()


def exercise_elections(doc, port, check):
    """Every election route, each documented status it can answer here, validated."""
    base = "/v1/elections/"
    check("GET", base + "e", expect=200)
    check("GET", base + "e/ready?candidate=pod-a", expect=503)
    check("GET", base + "a%7Bb", expect=400)
    check("GET", base + "e/ready?candidate=%01", expect=400)
    for path in ("e/campaign", "e/proclaim", "e/resign"):
        check("POST", base + path, '{"candidate":', expect=400)
        check("POST", base + path, "{}", {"Origin": "http://evil.example"}, expect=403)
        check("POST", base + path, "{}", {"Host": "attacker.example"}, expect=421)
    for path in ("e", "e/observe", "e/ready?candidate=pod-a"):
        check("GET", base + path, headers={"Origin": "http://evil.example"}, expect=403)
        check("GET", base + path, headers={"Host": "attacker.example"}, expect=421)
    check("GET", base + "a%7Bb/observe", expect=400)

    # A leader with a short TTL (renewed every 200 ms), an observer, a candidate in line and one
    # turned away (max_waiters_per_lock is 1).
    leader = Stream(port, "POST", base + "e/campaign",
                    '{"candidate":"pod-a","value":"10.0.0.1:8080","ttl_ms":600}')
    elected = leader.line()
    owner = elected["owner"]
    watch = Stream(port, "GET", base + "e/observe")
    watch.line()
    check("GET", base + "e", expect=200)
    check("GET", base + "e/ready?candidate=pod-a", expect=200)
    check("POST", base + "e/proclaim", json.dumps({"owner": owner, "value": "10.0.0.1:9090"}), expect=200)
    watch.line()  # the value proclaimed
    check("POST", base + "e/proclaim", '{"owner":"somebody-else","value":"x"}', expect=409)
    check("POST", base + "e/resign", '{"owner":"somebody-else"}', expect=409)
    # A request_id names one request: another value proclaimed under it is 422.
    check("POST", base + "e/proclaim", '{"owner":"somebody-else","value":"x","request_id":"p1"}', expect=409)
    check("POST", base + "e/proclaim", '{"owner":"somebody-else","value":"y","request_id":"p1"}', expect=422)
    while leader.line()["event"] != "renewed":
        pass
    waiting = Stream(port, "POST", base + "e/campaign", '{"candidate":"pod-b","ttl_ms":600}')
    end = time.time() + 5
    while time.time() < end and "election/e" not in json.dumps(json.loads(call(port, "GET", "/v1/locks")[2])["waiters"]):
        time.sleep(0.02)
    check("POST", base + "e/campaign", '{"candidate":"pod-c"}', expect=429)
    check("POST", base + "e/resign", json.dumps({"owner": owner}), expect=200)
    leader.check_to_end(doc, base + "e/campaign", "resigned")
    # pod-b is elected at once; its lease is then deleted behind its back: its stream ends lost.
    waiting.line()
    watch.line()
    redis_port = RUN["redis_port"]
    subprocess.run(["redis-cli", "-p", str(redis_port), "DEL", "sidelock:{e}:el"],
                   stdout=subprocess.DEVNULL, check=False)
    waiting.check_to_end(doc, base + "e/campaign", "lost")
    watch.line()  # no_leader, once the observers read again (at most a second)
    watch.close()
    check_response(doc, "GET", base + "e/observe", watch.resp.status,
                   watch.resp.getheader("Content-Type", ""), "".join(watch.lines))
    seen = {json.loads(line)["event"] for line in watch.lines}
    if seen != {"leader", "no_leader"}:
        fail("the observer saw %s, not leader and no_leader" % sorted(seen))
    leader.close()
    waiting.close()


def exercise_step_down(doc, sidelock, redis_port, tmp):
    """SIGTERM to a sidecar whose campaign leads: the stream says `stepping_down` (with
    `resign_in_ms`), and ends `resigned` when the client closes. A sidecar of its own: the contract
    sidecar must keep serving."""
    lock_port = free_port()
    config = os.path.join(tmp, "step-down.yaml")
    with open(config, "w") as f:
        f.write('listen:\n  tcp: "127.0.0.1:%d"\n  unix: ""\n'
                'backend:\n  type: redis\n  nodes: ["127.0.0.1:%d"]\n'
                "shutdown:\n  grace_ms: 2000\n" % (lock_port, redis_port))
    log_path = os.path.join(tmp, "step-down.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sidelock, "--config", config], stdout=log, stderr=log)
    try:
        if not wait_port(lock_port):
            return fail("the step-down sidecar did not start:\n" + open(log_path).read())
        path = "/v1/elections/step/campaign"
        leader = Stream(lock_port, "POST", path, '{"candidate":"pod-a","ttl_ms":1000}')
        if leader.line()["event"] != "elected":
            return fail("step-down: the first campaign was not elected")
        proc.send_signal(signal.SIGTERM)
        event = leader.line()
        while event is not None and event["event"] == "renewed":
            event = leader.line()
        if event is None or event["event"] != "stepping_down":
            return fail("step-down: expected stepping_down after SIGTERM, got %s" % event)
        # Past resign_in_ms (1000 ms here) the sidecar resigns by itself and ends the stream.
        leader.check_to_end(doc, path, "resigned")
        leader.close()
        if proc.wait(timeout=15) != 0:
            fail("step-down: the sidecar exited %d:\n%s" % (proc.returncode, open(log_path).read()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def exercise_elections_backend_down(port, check):
    """The election routes that read or write Redis answer 503 while it is down."""
    base = "/v1/elections/"
    end = time.time() + 10
    while time.time() < end and call(port, "GET", "/readyz")[0] != 503:
        time.sleep(0.05)
    check("GET", base + "e", expect=503)
    check("GET", base + "e/ready?candidate=pod-a", expect=503)
    check("POST", base + "e/proclaim", '{"owner":"o","value":"v"}', expect=503)
    check("POST", base + "e/resign", '{"owner":"o"}', expect=503)


def check_election_coverage(doc):
    """Every documented status of the six election paths was answered for real (or is listed in
    ELECTION_NOT_PROVOKED), and every field a success answer documents appeared in one."""
    paths = [p for p in doc["paths"] if p.startswith("/v1/elections/")]
    answered = sorted(k for k in HIT if k[1] in paths)
    print("election routes: %d (method, path, status) answered: %s" % (
        len(answered), ", ".join("%s %s %s" % k for k in answered)))
    if len(paths) != 6:
        fail("expected 6 election paths in the document, found %d" % len(paths))
    for path in paths:
        for method, op in doc["paths"][path].items():
            for status, resp in op["responses"].items():
                key = (method.upper(), path, status)
                if status in ELECTION_NOT_PROVOKED or key in ELECTION_NOT_PROVOKED:
                    continue
                if key not in HIT:
                    fail("%s %s: documented status %s never answered by the contract sidecar" % key)
                    continue
                if not status.startswith("2"):
                    continue
                for media in resp.get("content", {}).values():
                    missing = schema_field_names(media["schema"], doc) - HIT[key]
                    if missing:
                        fail("%s %s %s: documented fields never answered: %s" % (key + (sorted(missing),)))


# The gRPC messages (src/api/proto/sidelock/v1/locks.proto) that carry a schema's JSON: the gateway
# bridges by protobuf's JSON mapping, so a property missing from the message can't be sent or is
# dropped from answers. Schema -> message, where the names differ.
PROTO_OF_SCHEMA = {"StreamEvent": "HoldEvent"}
# Properties a gRPC method sets itself (Hold's "hold": "stream") or that only HTTP has.
PROTO_NOT_CARRIED = {"AcquireRequest": {"hold"}, "SemaphoreAcquireRequest": {"hold"}}


def proto_json_fields(text):
    """message name -> its fields' JSON names (a flat parse: locks.proto nests no messages)."""
    out = {}
    for m in re.finditer(r"^message (\w+) \{(.*?)^\}", text, re.S | re.M):
        names = set()
        for f in re.finditer(r"^\s*(?:repeated )?[\w.]+ (\w+) = \d+(?: \[json_name = \"(\w+)\"\])?;",
                             m.group(2), re.M):
            names.add(f.group(2) or f.group(1))
        out[m.group(1)] = names
    return out


def check_proto_fields(doc, repo):
    """Every property of a schema whose message locks.proto has is a field of that message."""
    with open(os.path.join(repo, "src/api/proto/sidelock/v1/locks.proto")) as f:
        messages = proto_json_fields(f.read())
    compared = 0
    for schema_name, schema in doc["components"]["schemas"].items():
        message = PROTO_OF_SCHEMA.get(schema_name, schema_name)
        if message not in messages:
            continue
        compared += 1
        missing = (set(schema.get("properties", {})) - messages[message]
                   - PROTO_NOT_CARRIED.get(schema_name, set()))
        if missing:
            fail("locks.proto message %s lacks the fields of schema %s: %s"
                 % (message, schema_name, sorted(missing)))
    if compared < 20:
        fail("only %d schemas compared with locks.proto messages" % compared)
    print("proto fields: %d schemas compared with locks.proto" % compared)


RUN = {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sidelock", required=True)
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.repo, "src/api/openapi.json")) as f:
        doc = json.load(f)
    with open(os.path.join(args.repo, "README.md")) as f:
        readme = f.read()

    check_document(doc)
    check_routes_documented(doc, args.repo)
    check_error_codes_documented(doc, readme, args.repo)
    check_readme(doc, readme)
    check_proto_fields(doc, args.repo)

    tmp = tempfile.mkdtemp(prefix="sidelock-openapi-")
    procs = []
    try:
        redis_port, lock_port, admin_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_port(redis_port):
            fail("redis-server did not start")
            return 1
        config = os.path.join(tmp, "sidelock.yaml")
        with open(config, "w") as f:
            f.write(
                'listen:\n  tcp: "127.0.0.1:%d"\n  unix: ""\n  admin: "127.0.0.1:%d"\n'
                'backend:\n  type: redis\n  nodes: ["127.0.0.1:%d"]\n'
                "locks:\n  max_waiters_per_lock: 1\n"
                "auth:\n  admin_tokens_env: OPENAPI_TEST_ADMIN_TOKENS\n"
                'dapr:\n  stores: ["lockstore"]\n' % (lock_port, admin_port, redis_port))
        env = dict(os.environ, OPENAPI_TEST_ADMIN_TOKENS=ADMIN_TOKEN,
                   SIDELOCK_DAPR_OWNER_SECRET="openapi-test-secret-0123456789")
        log = open(os.path.join(tmp, "sidecar.log"), "w")
        procs.append(subprocess.Popen([args.sidelock, "--config", config], env=env, stdout=log, stderr=log))
        if not wait_port(lock_port) or not wait_port(admin_port):
            fail("the sidecar did not start:\n" + open(os.path.join(tmp, "sidecar.log")).read())
            return 1
        end = time.time() + 20
        while time.time() < end and call(lock_port, "GET", "/readyz")[0] != 200:
            time.sleep(0.05)
        RUN["redis_port"] = redis_port
        exercise(doc, lock_port, admin_port)
        exercise_step_down(doc, args.sidelock, redis_port, tmp)
        # Last: Redis goes away, and the election routes that need it answer 503.
        procs[0].kill()
        procs[0].wait()

        def check_down(method, path, body=None, headers=None, expect=None):
            status, ctype, data = call(lock_port, method, path, body, headers)
            if expect is not None and status != expect:
                fail("%s %s: expected %d, got %d %s" % (method, path, expect, status, data[:200]))
            check_response(doc, method, path, status, ctype, data, "Redis down")
        exercise_elections_backend_down(lock_port, check_down)
        # Dapr's probes follow /readyz.
        end = time.time() + 20
        while time.time() < end and call(lock_port, "GET", "/readyz")[0] != 503:
            time.sleep(0.05)
        check_down("GET", "/v1.0/healthz", expect=500)
        check_down("GET", "/v1.0/healthz/outbound", expect=500)
        check_election_coverage(doc)
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    print("checked %d real responses and %d README examples against the document"
          % (CHECKED["responses"], CHECKED["readme"]))
    if CHECKED["responses"] < 30:
        fail("only %d responses checked" % CHECKED["responses"])
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
