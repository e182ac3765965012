#!/usr/bin/env python3
"""Runs the client examples of deploy/examples (Python, Node, Go) against a real sidecar and a
real redis-server on free ports, and checks what each prints (issue 22).

Per language:
  - retry: the example starts before the sidecar listens; its acquire must retry with the same
    request_id until the sidecar answers, then be granted a real (Redis-clock) fencing token,
    hand it to its fenced store, see a stale token refused and release the lock;
  - wait: the lock is held by the test; the example's acquire waits in the sidecar's queue and is
    granted when the test releases;
  - stream lost: a stream hold whose lease an operator force-releases: the example must report
    `lost` and stop working at once (exit 76);
  - stream done: a stream hold that finishes its work: closing the stream frees the lock.
"""

import argparse
import http.client
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from live_processes import free_port, start_redis, stop, wait_port  # noqa: E402

ADMIN_TOKEN = "ExamplesAdminToken-0123456789abcdef"
FAILURES = []
STARTED = []  # every example process, so none outlives the test


def fail(msg):
    FAILURES.append(msg)
    print("FAIL:", msg, flush=True)


def call(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = conn.getresponse()
    answer = json.loads(r.read() or b"{}")
    conn.close()
    return r.status, answer


class Example:
    """One run of an example program; its stdout lines arrive on a queue."""

    def __init__(self, argv, env, label):
        self.label = label
        self.lines = []
        self.queue = queue.Queue()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        STARTED.append(self.proc)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def wait_line(self, prefix, timeout_s):
        """The first line starting with prefix, within timeout_s (None if none came)."""
        end = time.time() + timeout_s
        while True:
            left = end - time.time()
            if left <= 0:
                return None
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout_s=15):
        """Exit status and every stdout line (stderr appended when it failed)."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            fail("%s: did not exit within %ds" % (self.label, timeout_s))
        while True:
            try:
                line = self.queue.get(timeout=2)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        self.stderr = self.proc.stderr.read()
        return rc

    def check(self, condition, what):
        if not condition:
            fail("%s: %s\n  stdout: %s\n  stderr: %s" % (self.label, what, self.lines,
                                                          getattr(self, "stderr", "")[-2000:]))


def commands(repo, tmp):
    """Per language, the command that runs its example (Go is built once, offline)."""
    examples = os.path.join(repo, "deploy/examples")
    go_binary = os.path.join(tmp, "sidelock_example_go")
    env = dict(os.environ, GOFLAGS="", GOTOOLCHAIN="local")  # one file, standard library only
    env.setdefault("GOCACHE", os.path.join(tmp, "gocache"))
    built = subprocess.run(["go", "build", "-o", go_binary,
                            os.path.join(examples, "go/sidelock_example.go")],
                           env=env, capture_output=True, text=True)
    if built.returncode != 0:
        fail("go build of the Go example failed:\n" + built.stderr)
    return {
        "python": [sys.executable, os.path.join(examples, "python/sidelock_example.py")],
        "node": ["node", os.path.join(examples, "node/sidelock_example.mjs")],
        "go": [go_binary],
    }


def start_retry(cmd, lang, env):
    """Started before the sidecar listens: must say it retries."""
    ex = Example(cmd + ["acquire", "orders-" + lang], env, lang + " acquire (sidecar starts late)")
    ex.check(ex.wait_line("attempt 1:", 10) is not None, "no retry line while the sidecar is down")
    return ex


def check_retry(ex, lang):
    """... and be granted once the sidecar is up."""
    name = "orders-" + lang
    line = ex.wait_line("acquired ", 20)
    ex.check(line is not None, "not acquired once the sidecar was up")
    token = int(line.rsplit("=", 1)[1]) if line else 0
    ex.check(token > 10**15, "fencing token %d is not a Redis-clock token" % token)
    ex.check(ex.wait_line("stored with fence token %d" % token, 10) is not None,
             "the token was not handed to the fenced store")
    ex.check(ex.wait_line("a stale writer with token %d is refused" % (token - 1), 10) is not None,
             "the store did not refuse a lower token")
    ex.check(ex.wait_line("released " + name, 10) is not None, "not released")
    ex.check(ex.finish() == 0, "exit status not 0")
    retries = [l for l in ex.lines if l.startswith("attempt ")]
    ex.check(all("same request_id" in l for l in retries), "a retry without its request_id")


def check_wait(cmd, lang, env, port):
    name = "busy-" + lang
    status, held = call(port, "POST", "/v1/locks/%s/acquire" % name, {"ttl_ms": 30000})
    if status != 200:
        fail("%s: the test could not take %s: %d %s" % (lang, name, status, held))
        return
    ex = Example(cmd + ["acquire", name], env, lang + " acquire (waits for a holder)")
    time.sleep(0.7)
    ex.check(not any(l.startswith("acquired") for l in ex.lines) and ex.queue.empty(),
             "granted while the test held the lock")
    before = held["token"]
    call(port, "POST", "/v1/locks/%s/release" % name, {"owner": held["owner"]})
    line = ex.wait_line("acquired ", 15)
    ex.check(line is not None, "not granted after the holder released")
    if line:
        ex.check(int(line.rsplit("=", 1)[1]) > before, "the waiter's token is not above the holder's")
    ex.check(ex.finish() == 0, "exit status not 0")


def check_stream_lost(cmd, lang, env, port, admin_port):
    name = "report-" + lang
    ex = Example(cmd + ["stream", name], dict(env, SIDELOCK_WORK_MS="60000"), lang + " stream (lost)")
    ex.check(ex.wait_line("holding %s token=" % name, 15) is not None, "no holding line")
    status, answer = call(admin_port, "POST", "/admin/v1/locks/%s/release" % name,
                          headers={"Authorization": "Bearer " + ADMIN_TOKEN})
    if status != 200:
        fail("%s: force release answered %d %s" % (lang, status, answer))
    started = time.time()
    line = ex.wait_line("lost %s:" % name, 10)
    ex.check(line is not None and line.endswith("stopping work"), "did not stop on lost")
    ex.check(ex.finish() == 76, "exit status not 76 after lost")
    ex.check(time.time() - started < 5, "took %.1fs to stop after lost" % (time.time() - started))


def check_stream_done(cmd, lang, env, port):
    name = "job-" + lang
    ex = Example(cmd + ["stream", name], dict(env, SIDELOCK_WORK_MS="300"), lang + " stream (done)")
    ex.check(ex.wait_line("holding %s token=" % name, 15) is not None, "no holding line")
    ex.check(ex.wait_line("done; closing the stream released " + name, 10) is not None, "no done line")
    ex.check(ex.finish() == 0, "exit status not 0")
    end = time.time() + 5
    held = True
    while held and time.time() < end:
        held = call(port, "GET", "/v1/locks/" + name)[1].get("held")
        time.sleep(0.05)
    ex.check(not held, "the lock is still held after the example closed its stream")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sidelock", required=True)
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()

    missing = [tool for tool in ("redis-server", "node", "go") if shutil.which(tool) is None]
    if missing:  # deploy/scripts/install-deps.sh installs them (redis-server, nodejs, golang-go)
        print("FAIL: not installed: %s (run deploy/scripts/install-deps.sh)" % ", ".join(missing))
        return 1
    tmp = tempfile.mkdtemp(prefix="sidelock-examples-")
    procs = []
    try:
        cmds = commands(args.repo, tmp)
        redis, redis_port = start_redis(tmp)
        procs.append(redis)
        if redis_port is None:
            fail("redis-server did not start")
            return 1
        lock_port, admin_port = free_port(), free_port()
        config = os.path.join(tmp, "sidelock.yaml")
        with open(config, "w") as f:
            f.write('listen:\n  tcp: "127.0.0.1:%d"\n  unix: ""\n  admin: "127.0.0.1:%d"\n'
                    'backend:\n  type: redis\n  nodes: ["127.0.0.1:%d"]\n'
                    "auth:\n  admin_tokens_env: EXAMPLES_TEST_ADMIN_TOKENS\n"
                    % (lock_port, admin_port, redis_port))
        log_path = os.path.join(tmp, "sidecar.log")

        env = dict(os.environ, SIDELOCK_URL="http://127.0.0.1:%d" % lock_port)
        env.pop("SIDELOCK_AUTH_TOKEN", None)
        # Every acquire example starts while nothing listens on the sidecar's port.
        retrying = {lang: start_retry(cmd, lang, env) for lang, cmd in cmds.items()}
        procs.append(subprocess.Popen([args.sidelock, "--config", config],
                                      env=dict(os.environ, EXAMPLES_TEST_ADMIN_TOKENS=ADMIN_TOKEN),
                                      stdout=open(log_path, "w"), stderr=subprocess.STDOUT))
        if not wait_port(lock_port) or not wait_port(admin_port):
            fail("the sidecar did not start:\n" + open(log_path).read())
            return 1
        for lang, cmd in cmds.items():
            print("== %s" % lang, flush=True)
            check_retry(retrying[lang], lang)
            check_wait(cmd, lang, env, lock_port)
            check_stream_lost(cmd, lang, env, lock_port, admin_port)
            check_stream_done(cmd, lang, env, lock_port)
    finally:
        stop(STARTED, grace_s=0)
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)

    print("every example ran" if not FAILURES else "%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
