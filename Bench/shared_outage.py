#!/usr/bin/env python3
"""Shared-tier outage coverage (Docs/shared-tier.md): two gateways behind a round-robin split, each of
which saw only half of the keys before the backend went down. The share of requests answered
200 (STALE) during the outage, without and with `shared` (one redis-server for both).

Usage: Bench/shared_outage.py [--bin PATH] [--keys N] [--rounds N]
Needs /usr/bin/redis-server and a release build (swift build -c release --product gatehouse).
"""
import argparse
import http.client
import http.server
import json
import os
import random
import socket
import socketserver
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import wait  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--bin", default=".build/release/gatehouse")
ap.add_argument("--keys", type=int, default=100)
ap.add_argument("--rounds", type=int, default=4, help="outage requests per key")
ap.add_argument("--serve-backend", type=int, help=argparse.SUPPRESS)
args = ap.parse_args()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Backend(http.server.BaseHTTPRequestHandler):
    """A JSON answer per path, storable (no Cache-Control)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if args.serve_backend:
    # The backend runs as a child process, so that stopping it (SIGTERM) also ends the
    # keep-alive connections the gateways hold to it: a stopped backend, not a closed listener.
    Server(("127.0.0.1", args.serve_backend), Backend).serve_forever()
    sys.exit(0)


def get(port, path):
    """The status and X-Gatehouse-Cache of one GET (0 when the gateway did not answer)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        conn.close()
        return answer.status, answer.getheader("X-Gatehouse-Cache") or ""
    except OSError:
        return 0, ""


def gateway(directory, backend_port, redis_port):
    port = free_port()
    config = {
        "listen": [{"address": f"127.0.0.1:{port}"}],
        "admin": {"listen": "127.0.0.1:0"},
        "workers": 1,
        "store": {"path": os.path.join(directory, f"store-{port}.sqlite")},
        "upstreams": {"api": {"url": f"http://127.0.0.1:{backend_port}", "connect_timeout_ms": 200}},
        "routes": [{"name": "items", "match": {"path": "/*"}, "upstream": "api",
                    "cache": {"stale_if_error_s": 3600}}],
        "log": {"level": "warn", "access": "off"},
    }
    if redis_port:
        config["shared"] = {"url": f"redis://127.0.0.1:{redis_port}/0", "timeout_ms": 50}
    path = os.path.join(directory, f"gatehouse-{port}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    process = subprocess.Popen([args.bin, "serve", "--config", path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait(port):
        sys.exit(f"gateway on {port} did not start")
    return process, port


def run(with_shared):
    directory = tempfile.mkdtemp(prefix="gh-shared-outage-")
    backend_port = free_port()
    backend = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-backend", str(backend_port)])
    if not wait(backend_port):
        sys.exit("the backend did not start")
    redis = None
    redis_port = 0
    if with_shared:
        redis_port = free_port()
        redis = subprocess.Popen(["/usr/bin/redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait(redis_port):
            sys.exit("redis-server did not start")
    gateways = [gateway(directory, backend_port, redis_port) for _ in range(2)]
    ports = [port for _, port in gateways]
    time.sleep(0.5)  # the shared-tier connections come up
    try:
        # Before the outage: key k's first pass goes to one gateway only (k mod 2), so each
        # gateway stores half of the keys.
        for key in range(args.keys):
            status, _ = get(ports[key % 2], f"/items/{key}")
            assert status == 200, status
        time.sleep(0.5)  # the write-behind SETs land
        backend.terminate()
        backend.wait()
        # The outage: the round-robin split alternates requests between the two gateways.
        # Clients ask for the keys in a shuffled order (seeded, the same for both runs), so a
        # key's requests land on either gateway, as behind a real balancer; in key order the
        # alternation would send every key back to the gateway that stored it.
        order = [key for key in range(args.keys) for _ in range(args.rounds)]
        random.Random(14).shuffle(order)
        served = 0
        total = len(order)
        started = time.time()
        for request, key in enumerate(order):
            status, cache = get(ports[request % 2], f"/items/{key}")
            served += status == 200 and cache == "STALE"
        elapsed = time.time() - started
        return served, total, elapsed
    finally:
        for process, _ in gateways:
            process.terminate()
            process.wait()
        if backend.poll() is None:
            backend.terminate()
            backend.wait()
        if redis:
            redis.terminate()
            redis.wait()


for label, with_shared in (("without shared tier", False), ("with shared tier", True)):
    served, total, elapsed = run(with_shared)
    print(f"{label:20s}: {served}/{total} answered 200 STALE during the outage "
          f"({100 * served / total:.1f} %), {1000 * elapsed / total:.2f} ms per request")
