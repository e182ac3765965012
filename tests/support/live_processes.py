"""Real processes for the Python tests (tests/api, tests/examples): free ports, a redis-server,
and stopping whatever a test started. Standard library only."""

import os
import random
import socket
import subprocess
import time


_handed_out = set()
_random = random.Random(os.getpid() ^ int(time.time() * 1e6))


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    """A port that was free a moment ago, never the same one twice in this process (the kernel
    may give a just-closed port to the next bind(0), and a test picks several before any is
    bound), and from below the kernel's ephemeral range, which every outgoing connection's local
    port comes from (as tests/support/redis_server.cc's pickFreePort)."""
    below = _ephemeral_low()
    for _ in range(1000):
        if below - 10000 <= 1000:
            break
        port = _random.randrange(10000, below)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port that was not handed out before")


def wait_port(port, deadline_s=20):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_redis(directory):
    """A throw-away redis-server on a free port (no persistence); (process, port), or
    (process, None) when it did not come up."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, (port if wait_port(port) else None)


def stop(procs, grace_s=15):
    """SIGTERM every process, newest first, then SIGKILL what is still running after grace_s."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
