#!/usr/bin/env python3
"""Lock event streams (issue 20): latency of a change on sidecar A to a watcher on sidecar B, and
the cost (RSS, CPU) of N open event streams on B. Starts its own redis-server and two sidecars on
free loopback ports; standard library only.

  python3 tests/bench/events_bench.py --sidelock build/src/sidelock [--streams 10000] [--cycles 200]
"""
import argparse, json, os, resource, selectors, shutil, socket, subprocess, tempfile, time


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_http(port, deadline=15):
    end = time.time() + deadline
    while time.time() < end:
        try:
            if request(port, "GET", "/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("sidecar on %d never ready" % port)


def request(port, method, path, body=None):
    s = socket.create_connection(("127.0.0.1", port))
    data = body.encode() if body else b""
    s.sendall(("%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: "
               "application/json\r\nContent-Length: %d\r\n\r\n" % (method, path, len(data))).encode() + data)
    out = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        out += c
    s.close()
    head, _, rest = out.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    if b"chunked" in head.lower():
        body_out, buf = b"", rest
        while buf:
            n, _, buf = buf.partition(b"\r\n")
            n = int(n, 16)
            if n == 0:
                break
            body_out += buf[:n]; buf = buf[n + 2:]
        rest = body_out
    return status, rest.decode()


def proc_stats(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return rss, ticks / os.sysconf("SC_CLK_TCK")


def open_stream(port, name):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET /v1/locks/%s/events HTTP/1.1\r\nHost: localhost\r\n\r\n" % name).encode())
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sidelock", required=True)
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--names", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=40)
    o = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (o.streams + 1024, o.streams + 1024))
    tmp = tempfile.mkdtemp(prefix="events-bench-")
    procs = []
    try:
        rport = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL))
        ports = []
        for i in range(2):
            port = free_port(); ports.append(port)
            cfg = os.path.join(tmp, "s%d.yaml" % i)
            with open(cfg, "w") as f:
                f.write('listen:\n  tcp: "127.0.0.1:%d"\n  unix: ""\n  max_connections: %d\n'
                        'backend:\n  type: redis\n  nodes: ["127.0.0.1:%d"]\n'
                        'log:\n  level: warn\n' % (port, o.streams + 1024, rport))
            procs.append(subprocess.Popen([o.sidelock, "--config", cfg], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        for p in ports:
            wait_http(p)
        a, b = ports
        bpid = procs[2].pid
        time.sleep(0.5)
        rss0, cpu0 = proc_stats(bpid)
        socks = [open_stream(b, "bench-%d" % (i % o.names)) for i in range(o.streams)]
        time.sleep(2)
        for s in socks:
            s.setblocking(False)
            try:
                while s.recv(65536):
                    pass
            except BlockingIOError:
                pass
        rss1, cpu1 = proc_stats(bpid)
        t0 = time.time(); time.sleep(10); rss2, cpu2 = proc_stats(bpid); idle = time.time() - t0
        metrics = request(b, "GET", "/metrics")[1]
        gauge = next((l.split()[1] for l in metrics.splitlines()
                      if l.startswith("sidelock_lock_event_streams ")), "?")
        # Latency: one watcher of its own name on B; acquire + release on A.
        w = open_stream(b, "latency")
        w.settimeout(10)
        buf = b""

        def next_event():
            nonlocal buf
            while True:
                i = buf.find(b'{"event"')
                if i >= 0:
                    j = buf.find(b"}", i)
                    if j >= 0:
                        line = buf[i:j + 1]; buf = buf[j + 1:]
                        return json.loads(line)
                buf += w.recv(65536)
        assert next_event()["event"] == "state"
        lat_release, lat_acquire = [], []
        for _ in range(o.cycles):
            st, body = request(a, "POST", "/v1/locks/latency/acquire", '{"ttl_ms":30000}')
            t = time.perf_counter()
            assert st == 200, body
            e = next_event(); assert e["event"] == "acquired", e
            lat_acquire.append((time.perf_counter() - t) * 1000)
            owner = json.loads(body)["owner"]
            t = time.perf_counter()
            st, _ = request(a, "POST", "/v1/locks/latency/release", json.dumps({"owner": owner}))
            e = next_event(); assert e["event"] == "released", e
            lat_release.append((time.perf_counter() - t) * 1000)

        def pct(v, q):
            v = sorted(v); return v[min(len(v) - 1, int(q * len(v)))]
        print("events: %d streams over %d names on sidecar B (gauge %s)" % (o.streams, o.names, gauge))
        print("  RSS: %d KiB idle -> %d KiB with the streams (%.2f KiB/stream)" %
              (rss0, rss1, (rss1 - rss0) / o.streams))
        print("  CPU: %.2f s to open them; %.3f s over %.0f s idle with them open" %
              (cpu1 - cpu0, cpu2 - cpu1, idle))
        print("  release on A -> released on B (from sending the release): p50 %.2f ms, p99 %.2f ms (%d)" %
              (pct(lat_release, .5), pct(lat_release, .99), len(lat_release)))
        print("  acquire answered on A -> acquired on B (next read: not announced): p50 %.1f ms, p99 %.1f ms" %
              (pct(lat_acquire, .5), pct(lat_acquire, .99)))
        for s in socks:
            s.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill(); p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
