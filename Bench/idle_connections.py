#!/usr/bin/env python3
"""Gatehouse start-up time and memory with many idle keep-alive client connections.

Usage (from the project root, after `swift build -c release`):
    Bench/idle_connections.py [--bin .build/release/gatehouse] [--connections 10000]

Starts the gateway on a stub route (no backend needed), measures the time from exec to the
first answered request, then opens N client connections, sends one request on each, keeps
them open and idle, and reports the gateway's RSS (VmRSS) before and after, per connection.
Only loopback is used; the gateway gets `max_connections` above N.
"""
import argparse, json, os, resource, selectors, socket, subprocess, tempfile, time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--port", type=int, default=19504)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    d = tempfile.mkdtemp(prefix="gh-idle-")
    config = {
        "listen": [{"address": f"127.0.0.1:{args.port}"}], "workers": 1,
        "admin": {"listen": "127.0.0.1:0", "token": "idle-admin"},
        "store": {"path": f"{d}/store.sqlite"},
        "limits": {"max_connections": args.connections + 100, "idle_timeout_ms": 600000, "header_timeout_ms": 600000},
        "routes": [{"name": "stub", "match": {"path": "/ping"}, "stub": {"mode": "always", "body": {"ok": True}}}],
        "log": {"level": "warn", "access": "off"},
    }
    with open(f"{d}/gh.json", "w") as f:
        json.dump(config, f)
    started = time.monotonic()
    proc = subprocess.Popen([args.bin, "serve", "--config", f"{d}/gh.json"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=lambda: resource.setrlimit(
                                resource.RLIMIT_NOFILE, (want, want)))
    request = b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n"
    try:
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", args.port), 0.5)
                s.sendall(request)
                if s.recv(4096).startswith(b"HTTP/1.1 200"):
                    s.close()
                    break
                s.close()
            except OSError:
                time.sleep(0.005)
            if time.monotonic() - started > 30:
                raise SystemExit("gateway did not answer within 30 s")
        startup_ms = (time.monotonic() - started) * 1000
        time.sleep(0.5)
        base = rss_kib(proc.pid)
        sel = selectors.DefaultSelector()
        socks = []
        for _ in range(args.connections):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", args.port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        pending = set(socks)
        answered = 0
        deadline = time.monotonic() + 120
        while (pending or answered < args.connections) and time.monotonic() < deadline:
            for key, events in sel.select(timeout=1):
                s = key.fileobj
                if events & selectors.EVENT_WRITE and s in pending:
                    try:
                        s.send(request)
                    except OSError:
                        continue
                    pending.discard(s)
                    sel.modify(s, selectors.EVENT_READ)
                elif events & selectors.EVENT_READ:
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    sel.unregister(s)
                    if data.startswith(b"HTTP/1.1 200"):
                        answered += 1
        time.sleep(1)
        after = rss_kib(proc.pid)
        print(f"start-up to first answer: {startup_ms:.1f} ms")
        print(f"idle keep-alive connections: {answered} of {args.connections} answered and held open")
        print(f"RSS before: {base / 1024:.1f} MiB, with connections: {after / 1024:.1f} MiB, "
              f"per connection: {(after - base) * 1024 / max(1, answered):.0f} bytes")
        for s in socks:
            s.close()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
