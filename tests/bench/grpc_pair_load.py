#!/usr/bin/python3
"""gRPC load for callgrind_pairs.sh: ONE HTTP/2 connection (prior knowledge) carrying CALLS
concurrent call chains, each running PAIRS sidelock.v1.Locks Acquire+Release pairs on names of its
own, one call at a time. The gRPC twin of pair_load.py (same names, owners, ttl). Messages are
encoded by hand (a few proto3 fields). Exits 1 if any call ends with a grpc-status other than 0.
Needs python3-h2 (Debian), hence /usr/bin/python3.

usage: grpc_pair_load.py HOST:PORT CALLS PAIRS
"""
import socket
import sys

import h2.config
import h2.connection
import h2.events
import h2.settings


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_string(number, text):
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_int(number, value):
    return varint(number << 3) + varint(value)


def call(chain, step):
    """The (path, prefixed message) of a chain's step: even steps acquire, odd ones release."""
    name = f"load-{chain}-{step // 2}"
    owner = f"owner-{chain}"
    if step % 2 == 0:
        path = "/sidelock.v1.Locks/Acquire"
        message = field_string(1, name) + field_int(2, 30000) + field_string(4, owner)
    else:
        path = "/sidelock.v1.Locks/Release"
        message = field_string(1, name) + field_string(2, owner)
    return path, b"\x00" + len(message).to_bytes(4, "big") + message


def main():
    target, calls, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    conn.increment_flow_control_window(2**31 - 1 - 65535)
    chains = {}  # stream id -> [chain, step, grpc-status]

    def start(chain, step):
        path, body = call(chain, step)
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                   (":authority", target), ("content-type", "application/grpc"),
                                   ("te", "trailers")])
        conn.send_data(stream, body, end_stream=True)
        chains[stream] = [chain, step, None]

    for chain in range(calls):
        start(chain, 0)
    sock.sendall(conn.data_to_send())
    running, failures = calls, 0
    while running:
        data = sock.recv(65536)
        if not data:
            sys.exit("the sidecar closed the connection")
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                for key, value in event.headers:
                    if key == b"grpc-status":
                        chains[event.stream_id][2] = int(value)
            elif isinstance(event, h2.events.StreamReset):
                sys.exit(f"stream {event.stream_id} reset")
            if isinstance(event, h2.events.StreamEnded):
                chain, step, status = chains.pop(event.stream_id)
                failures += status != 0
                if step + 1 == 2 * pairs:
                    running -= 1
                else:
                    start(chain, step + 1)
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    sock.close()
    print(f"pairs={calls * pairs} failed_calls={failures}")
    sys.exit(1 if failures else 0)


main()
