#!/usr/bin/env python3
"""sidelock from Python, standard library only.

  python3 sidelock_example.py acquire [NAME]   wait for a lock (retrying safely with a request_id),
                                               pass its fencing token on, release it
  python3 sidelock_example.py stream [NAME]    hold a lock for as long as a connection stays open,
                                               and stop working the moment the sidecar says "lost"

Environment: SIDELOCK_URL (default http://127.0.0.1:7411), SIDELOCK_AUTH_TOKEN (when the sidecar
has bearer tokens), SIDELOCK_WORK_MS (how long the stream example works, default 3000).
"""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

SIDECAR = os.environ.get("SIDELOCK_URL", "http://127.0.0.1:7411").rstrip("/")


def request(method, path, body=None, timeout=10.0):
    """Sends one request; returns (status, parsed JSON answer). Raises OSError when no answer
    came (connection refused, reset, timed out)."""
    headers = {"Content-Type": "application/json"}
    if os.environ.get("SIDELOCK_AUTH_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["SIDELOCK_AUTH_TOKEN"]
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(SIDECAR + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:  # 4xx / 5xx still carry a JSON answer
        return e.code, json.load(e)


def acquire(name, ttl_ms, wait_ms, attempts=8):
    """Waits up to wait_ms for the lock. A request that got no answer may still have been
    granted, so it is sent again with the same request_id: the sidecar then answers with the
    grant it already made instead of making a second one (or finding the lock held by us)."""
    body = {"ttl_ms": ttl_ms, "wait_ms": wait_ms, "request_id": str(uuid.uuid4())}
    for attempt in range(1, attempts + 1):
        try:
            # The sidecar answers within wait_ms; give it a little more before calling it lost.
            status, answer = request("POST", "/v1/locks/%s/acquire" % name, body,
                                     timeout=wait_ms / 1000 + 5)
        except OSError as e:
            status, answer = None, {"error": str(e)}
        if status == 200:
            return answer
        if status == 409:
            return None  # somebody else held it for all of wait_ms
        if status is not None and status not in (429, 503):
            raise RuntimeError("acquire refused: %d %s" % (status, answer))
        # No answer, a queue limit (429) or the backend down (503): try again, same request_id.
        delay = answer.get("retry_after_ms", 200 * attempt) / 1000
        print("attempt %d: %s; retrying in %.1fs with the same request_id"
              % (attempt, answer.get("error"), delay), flush=True)
        time.sleep(delay)
    raise RuntimeError("no answer from the sidecar at %s" % SIDECAR)


class FencedStore:
    """Stands in for the resource the lock protects (a database row, a file on shared storage):
    it remembers the highest fencing token it has seen and refuses writes with a lower one, so a
    holder that was paused past its TTL cannot overwrite the work of the next holder. In SQL:
    UPDATE ... SET fence = :token WHERE id = :id AND fence <= :token."""

    def __init__(self):
        self.fence = 0
        self.value = None

    def write(self, token, value):
        if token < self.fence:
            return False
        self.fence, self.value = token, value
        return True


def acquire_example(name):
    grant = acquire(name, ttl_ms=10000, wait_ms=30000)
    if grant is None:
        print("%s is busy; try later" % name)
        return 75
    token = grant["token"]
    print("acquired %s token=%d" % (name, token), flush=True)
    store = FencedStore()
    if store.write(token, "report of %s" % time.strftime("%F")):
        print("stored with fence token %d" % token)
    if not store.write(token - 1, "a late write"):
        print("a stale writer with token %d is refused" % (token - 1))
    status, answer = request("POST", "/v1/locks/%s/release" % name, {"owner": grant["owner"]})
    print("released %s" % name if status == 200 else "release: %d %s" % (status, answer), flush=True)
    return 0


def stream_example(name):
    work_s = int(os.environ.get("SIDELOCK_WORK_MS", "3000")) / 1000
    headers = {"Content-Type": "application/json"}
    if os.environ.get("SIDELOCK_AUTH_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["SIDELOCK_AUTH_TOKEN"]
    body = json.dumps({"ttl_ms": 5000, "wait_ms": 30000, "hold": "stream"}).encode()
    req = urllib.request.Request(SIDECAR + "/v1/locks/%s/acquire" % name, data=body,
                                 method="POST", headers=headers)
    try:
        # The timeout bounds each read: renewals arrive every ttl × renew_fraction (1.7 s here).
        stream = urllib.request.urlopen(req, timeout=60)
    except urllib.error.HTTPError as e:
        print("not acquired: %d %s" % (e.code, json.load(e)))
        return 75
    first = json.loads(stream.readline())
    print("holding %s token=%d" % (name, first["token"]), flush=True)

    lost = threading.Event()
    why = []

    def watch():  # the sidecar renews the lease and reports on this stream
        for line in stream:
            event = json.loads(line)
            if event["event"] in ("lost", "released"):
                why.append(event.get("reason", event["event"]))
                lost.set()
                return
        why.append("the stream ended")
        lost.set()

    threading.Thread(target=watch, daemon=True).start()
    deadline = time.monotonic() + work_s
    while time.monotonic() < deadline:
        if lost.wait(0.1):  # one step of work, checking between steps
            print("lost %s: %s; stopping work" % (name, why[0]), flush=True)
            return 76
    stream.close()  # closing the connection releases the lock at once
    print("done; closing the stream released %s" % name, flush=True)
    return 0


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "acquire"
    name = sys.argv[2] if len(sys.argv) > 2 else ("nightly-report" if mode == "stream" else "orders-42")
    if mode == "acquire":
        return acquire_example(name)
    if mode == "stream":
        return stream_example(name)
    print(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main())
