#!/usr/bin/python3
"""Gatehouse memory with many open WebSocket tunnels (Docs/websockets.md).

Usage (from the project root, after `swift build -c release`; needs Debian's
python3-websockets, which Scripts/install-deps.sh installs, hence /usr/bin/python3):
    Bench/websocket_many.py [--bin .build/release/gatehouse] [--tunnels 1000]

Starts an echo WebSocket server (python `websockets`) and the gateway in front of it with a
`websocket` route, opens N tunnels through the gateway, sends one message on each and waits
for its echo, keeps them all open, and reports the gateway's RSS (VmRSS) before and with
the tunnels open, per tunnel, then one more round of echoes over every tunnel. Loopback only.
"""
import argparse, asyncio, json, os, resource, subprocess, tempfile, time

import websockets

from benchlib import wait


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def echo(ws, *_):
    async for message in ws:
        await ws.send(message)


async def run(args, gateway):
    url = f"ws://127.0.0.1:{args.port}/ws/bench"
    before = rss_kib(gateway.pid)
    started = time.time()
    sem = asyncio.Semaphore(100)

    async def one(i):
        async with sem:
            ws = await websockets.connect(url, max_size=None, ping_interval=None, open_timeout=30)
            await ws.send(f"hello {i}")
            assert await ws.recv() == f"hello {i}"
            return ws

    tunnels = await asyncio.gather(*(one(i) for i in range(args.tunnels)))
    opened = time.time() - started
    await asyncio.sleep(1)
    held = rss_kib(gateway.pid)
    started = time.time()
    await asyncio.gather(*(ws.send(b"x" * 1024) for ws in tunnels))
    replies = await asyncio.gather(*(ws.recv() for ws in tunnels))
    assert all(len(r) == 1024 for r in replies)
    round_trip = time.time() - started
    await asyncio.gather(*(ws.close() for ws in tunnels))
    print(json.dumps({
        "tunnels": args.tunnels,
        "open_s": round(opened, 2),
        "echo_round_s": round(round_trip, 3),
        "rss_before_kib": before,
        "rss_with_tunnels_kib": held,
        "kib_per_tunnel": round((held - before) / args.tunnels, 1),
    }))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--tunnels", type=int, default=1000)
    ap.add_argument("--port", type=int, default=19521)
    ap.add_argument("--backend-port", type=int, default=19522)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * args.tunnels + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    d = tempfile.mkdtemp(prefix="gh-ws-")
    config = {
        "listen": [{"address": f"127.0.0.1:{args.port}"}], "workers": 1,
        "admin": {"listen": "127.0.0.1:0", "token": "ws-admin"},
        "store": {"path": f"{d}/store.sqlite"},
        "limits": {"max_connections": 2 * args.tunnels + 100, "max_websockets": args.tunnels + 10},
        "upstreams": {"echo": {"url": f"http://127.0.0.1:{args.backend_port}", "max_connections": 2 * args.tunnels}},
        "routes": [{"name": "ws", "match": {"path": "/ws/*"}, "upstream": "echo", "websocket": True}],
        "log": {"level": "warn", "access": "off"},
    }
    with open(f"{d}/config.json", "w") as f:
        json.dump(config, f)

    async def serve_and_run():
        async with websockets.serve(echo, "127.0.0.1", args.backend_port, max_size=None, ping_interval=None,
                                    backlog=2048):
            gateway = subprocess.Popen([os.path.abspath(args.bin), "serve", "--config", f"{d}/config.json"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=d)
            try:
                if not await asyncio.to_thread(wait, args.port):
                    raise SystemExit("gateway did not start")
                await run(args, gateway)
            finally:
                gateway.terminate()
                gateway.wait(timeout=30)

    asyncio.run(serve_and_run())


if __name__ == "__main__":
    main()
