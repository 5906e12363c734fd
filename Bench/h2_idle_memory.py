#!/usr/bin/python3
"""Gatehouse memory with many idle HTTP/2 client connections, against as many idle HTTP/1.1 ones.

Usage (from the project root, after `swift build -c release`):
    Bench/h2_idle_memory.py [--bin .build/release/gatehouse] [--connections 1000] [--rounds 2] [--tls]

For each protocol in turn (alternating over rounds, a fresh gateway each time, one worker, a
stub route so no backend is involved): one request on a throw-away connection, RSS (VmRSS) as
the baseline, then N connections that each make one GET and then stay open and idle, RSS again
after they settle, per connection, and RSS once they have closed. HTTP/2 connections send the
preface and SETTINGS, acknowledge the server's, make one request and keep the session open.
Cleartext by default (the listener has `h2c: true`, HTTP/2 with prior knowledge); --tls uses a
TLS listener (self-signed certificate made with openssl) and ALPN h2 or http/1.1, which adds
each connection's TLS state. Needs the `h2` package (Debian python3-h2) for /usr/bin/python3.
Loopback only; the gateway gets `max_connections` above N and a long idle timeout.
"""
import argparse, asyncio, json, os, resource, signal, socket, ssl, statistics, subprocess, tempfile, time

import h2.config, h2.connection, h2.events
from benchlib import wait as wait_port

SETTLE_S = 2.0


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class H1:
    """One GET, read to the end of the answer, then keep the socket."""

    def __init__(self, tls):
        self.alpn = "http/1.1"

    async def request(self, reader, writer):
        writer.write(b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return False
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        return True


class H2:
    """Preface, SETTINGS (and the ack of the server's), one GET on stream 1; the session stays open."""

    def __init__(self, tls):
        self.alpn = "h2"
        self.scheme = "https" if tls else "http"

    async def request(self, reader, writer):
        conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":path", "/ping"), (":scheme", self.scheme),
                                (":authority", "bench")], end_stream=True)
        writer.write(conn.data_to_send())
        status, ended, acked = None, False, False
        while not (ended and acked):
            data = await reader.read(65536)
            if not data:
                return False
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers).get(":status")
                elif isinstance(ev, h2.events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    ended = True
                elif isinstance(ev, h2.events.SettingsAcknowledged):
                    acked = True
                elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    return False
            writer.write(conn.data_to_send())  # SETTINGS ack and window updates
        await writer.drain()
        return status == "200"


async def open_idle(kind, port, n, ctx):
    """Opens n connections that each answer one request; returns (held, writers, watchers)."""
    gate = asyncio.Semaphore(64)  # stay under the listen backlog while connecting
    writers, watchers = [], []

    async def one():
        async with gate:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost" if ctx else None), 10)
                ok = await asyncio.wait_for(kind.request(reader, writer), 10)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
                return False
        writers.append(writer)
        # A read that ends tells the connection was closed by the gateway while "idle".
        watchers.append(asyncio.ensure_future(reader.read(65536)))
        return ok

    results = await asyncio.gather(*(one() for _ in range(n)))
    return sum(results), writers, watchers


async def measure(kind, port, n, pid, ctx):
    warm = await open_idle(kind, port, 1, ctx)  # first request sets up what every connection shares
    for w in warm[1]:
        w.close()
    await asyncio.sleep(SETTLE_S)
    base = status_kib(pid, "VmRSS")
    t0 = time.monotonic()
    held, writers, watchers = await asyncio.wait_for(open_idle(kind, port, n, ctx), 120)
    open_s = time.monotonic() - t0
    await asyncio.sleep(SETTLE_S)
    rss, anon = status_kib(pid, "VmRSS"), status_kib(pid, "RssAnon")
    still_open = sum(1 for w in watchers if not w.done())
    for w in writers:
        w.close()
    for t in watchers:
        t.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    await asyncio.sleep(SETTLE_S)
    after = status_kib(pid, "VmRSS")
    return dict(answered=held, still_open=still_open, open_s=round(open_s, 2), base_kib=base, with_kib=rss,
                anon_kib=anon, closed_kib=after, per_conn_bytes=round((rss - base) * 1024 / max(1, still_open)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=19851)
    ap.add_argument("--tls", action="store_true", help="TLS listener and ALPN instead of cleartext h2c")
    args = ap.parse_args()
    want = args.connections * 2 + 1024  # client and gateway ends may share this process's limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    d = tempfile.mkdtemp(prefix="gh-h2idle-")
    listen = {"address": f"127.0.0.1:{args.port}"}
    ctx = None
    if args.tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/srv.key",
                        "-out", f"{d}/srv.pem", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        listen["tls"] = {"cert": f"{d}/srv.pem", "key": f"{d}/srv.key"}
    else:
        listen["h2c"] = True
    config = {
        "listen": [listen], "workers": 1,
        "admin": {"listen": "127.0.0.1:0", "token": "idle-admin"},
        "store": {"path": f"{d}/store.sqlite"},
        "limits": {"max_connections": args.connections + 100, "idle_timeout_ms": 600000, "header_timeout_ms": 600000},
        "routes": [{"name": "stub", "match": {"path": "/ping"}, "stub": {"mode": "always", "body": {"ok": True}}}],
        "log": {"level": "warn", "access": "off"},
    }
    with open(f"{d}/gh.json", "w") as f:
        json.dump(config, f)
    results = {"HTTP/1.1": [], "HTTP/2": []}
    for _ in range(args.rounds):
        for label, cls in (("HTTP/1.1", H1), ("HTTP/2", H2)):
            kind = cls(args.tls)
            if args.tls:
                ctx = ssl.create_default_context(cafile=f"{d}/srv.pem")
                ctx.set_alpn_protocols([kind.alpn])
            proc = subprocess.Popen([os.path.abspath(args.bin), "serve", "--config", f"{d}/gh.json"],
                                    stdout=open(f"{d}/gatehouse.log", "a"), stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (want, want)))
            try:
                if not wait_port(args.port):
                    raise SystemExit(f"gateway did not start; see {d}/gatehouse.log")
                results[label].append(asyncio.run(measure(kind, args.port, args.connections, proc.pid, ctx)))
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
                except ProcessLookupError:
                    pass
    transport = "TLS (ALPN)" if args.tls else "cleartext (h2c prior knowledge)"
    print(f"{args.connections} idle connections, {transport}, one worker, fresh gateway per run, medians of {args.rounds}")
    print(f"{'protocol':9} {'held':>5} {'RSS before':>11} {'with conns':>11} {'per conn':>10} {'RssAnon':>9} "
          f"{'after close':>12}  rounds per conn")
    med = {}
    for label, runs in results.items():
        m = {k: statistics.median(r[k] for r in runs) for k in ("still_open", "base_kib", "with_kib", "anon_kib",
                                                                "closed_kib", "per_conn_bytes")}
        med[label] = m
        print(f"{label:9} {m['still_open']:>5.0f} {m['base_kib'] / 1024:>8.1f} MiB {m['with_kib'] / 1024:>7.1f} MiB "
              f"{m['per_conn_bytes'] / 1024:>6.1f} KiB {m['anon_kib'] / 1024:>5.1f} MiB {m['closed_kib'] / 1024:>8.1f} MiB  "
              + ", ".join(f"{r['per_conn_bytes'] / 1024:.1f}" for r in runs) + " KiB")
    ratio = med["HTTP/2"]["per_conn_bytes"] / max(1, med["HTTP/1.1"]["per_conn_bytes"])
    print(f"ratio per connection HTTP/2 / HTTP/1.1 = {ratio:.2f}")
    print(json.dumps(dict(bench="h2_idle_memory", connections=args.connections, tls=args.tls, medians=med,
                          ratio_h2_h1=round(ratio, 3), runs=results)))


if __name__ == "__main__":
    main()
