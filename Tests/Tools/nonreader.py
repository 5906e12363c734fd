#!/usr/bin/python3
"""Clients that ask for answers and never read them, for the gateway's memory tests.

Usage: nonreader.py PORT h2 CONNECTIONS STREAMS PATH
       nonreader.py PORT h1 CONNECTIONS PATH
h2: cleartext HTTP/2 with prior knowledge, SETTINGS_INITIAL_WINDOW_SIZE=0 and no
WINDOW_UPDATE ever, STREAMS GETs on each connection. h1: one GET per connection, a 4 KiB
receive buffer that is never read. "{i}" in PATH becomes each request's number (else
every request asks for PATH itself). Prints "ready" once every request is sent, then holds the
connections until stdin closes (or 120 s pass), and exits 0.
"""
import select
import socket
import sys
import time

import h2.config
import h2.connection
import h2.settings

HOLD_S = 120


def open_socket(port):
    sock = socket.socket()
    # Set before connecting, so the window the kernel offers stays small.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def h2_connection(port, streams, path):
    sock = open_socket(port)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.initiate_connection()
    for index in range(streams):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "GET"), (":path", path.replace("{i}", str(index))), (":scheme", "http"),
                                   (":authority", "127.0.0.1")], end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock


def h1_connection(port, index, path):
    sock = open_socket(port)
    sock.sendall(f"GET {path.replace('{i}', str(index))} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def main():
    port, mode, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    if mode == "h2":
        held = [h2_connection(port, int(sys.argv[4]), sys.argv[5]) for _ in range(count)]
    else:
        held = [h1_connection(port, index, sys.argv[4]) for index in range(count)]
    print("ready", flush=True)
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        readable, _, _ = select.select([sys.stdin], [], [], 1)
        if readable and not sys.stdin.read(1):
            break
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main()
