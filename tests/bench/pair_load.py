#!/usr/bin/env python3
"""Keep-alive load for callgrind_pairs.sh: CLIENTS connections, each running PAIRS acquire+release
pairs on names of its own, one request at a time. Exits 1 if any answer is not 200.

usage: pair_load.py HOST:PORT|unix:PATH CLIENTS PAIRS
"""
import selectors
import socket
import sys


def request(client, step):
    name = f"load-{client}-{step // 2}"
    if step % 2 == 0:
        path, body = f"/v1/locks/{name}/acquire", f'{{"owner":"owner-{client}","ttl_ms":30000}}'
    else:
        path, body = f"/v1/locks/{name}/release", f'{{"owner":"owner-{client}"}}'
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


def main():
    target, clients, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    selector = selectors.DefaultSelector()
    for client in range(clients):
        if target.startswith("unix:"):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(target[5:])
        else:
            host, port = target.rsplit(":", 1)
            sock = socket.create_connection((host, int(port)))
        sock.sendall(request(client, 0))
        selector.register(sock, selectors.EVENT_READ, {"client": client, "step": 0, "input": b""})
    running, failures = clients, 0
    while running:
        for key, _ in selector.select():
            sock, state = key.fileobj, key.data
            data = sock.recv(65536)
            if not data:
                sys.exit("the sidecar closed a connection")
            state["input"] += data
            while (head_end := state["input"].find(b"\r\n\r\n")) >= 0:
                head = state["input"][:head_end].decode().lower()
                length = int(head.split("content-length:")[1].split("\r\n")[0])
                if len(state["input"]) < head_end + 4 + length:
                    break
                failures += not head.startswith("http/1.1 200")
                state["input"] = state["input"][head_end + 4 + length:]
                state["step"] += 1
                if state["step"] == 2 * pairs:
                    selector.unregister(sock)
                    sock.close()
                    running -= 1
                else:
                    sock.sendall(request(state["client"], state["step"]))
    print(f"pairs={clients * pairs} non_200={failures}")
    sys.exit(1 if failures else 0)


main()
