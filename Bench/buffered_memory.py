#!/usr/bin/env python3
"""Memory held for clients that do not read: RSS before, at the peak, and after they close.
Usage: Bench/buffered_memory.py [--bin PATH] [--clients 120] [--buffered-bytes N]"""
import socket, threading, subprocess, json, time, os, sys, http.server, socketserver
import argparse, os, tempfile
ap = argparse.ArgumentParser(description="Gateway RSS while N clients do not read a large enveloped answer, and after they leave.")
ap.add_argument("--bin", default=".build/release/gatehouse")
ap.add_argument("--clients", type=int, default=120)
ap.add_argument("--hold-seconds", type=float, default=30, help="how long the clients hold their answers unread")
ap.add_argument("--buffered-bytes", type=int, help="limits.buffered_bytes (default: the gateway's)")
a = ap.parse_args()
binary = a.bin; N = a.clients
doc = b"[" + b'{"id":12345,"name":"gatehouse","tags":["a","b"]},' * 140000 + b"null]"
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type","application/json")
        self.send_header("Content-Length", str(len(doc))); self.end_headers(); self.wfile.write(doc)
    def log_message(self, *a): pass
    def handle(self):
        try: super().handle()
        except (ConnectionResetError, BrokenPipeError): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
srv = S(("127.0.0.1", 0), H); bport = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
s = socket.socket(); s.bind(("127.0.0.1",0)); gport = s.getsockname()[1]; s.close()
s = socket.socket(); s.bind(("127.0.0.1",0)); aport = s.getsockname()[1]; s.close()
cfg = {"listen":[{"address":f"127.0.0.1:{gport}"}],"admin":{"listen":f"127.0.0.1:{aport}","token":"t"*32},"workers":1,
 "upstreams":{"api":{"url":f"http://127.0.0.1:{bport}","response_timeout_ms":30000}},
 "routes":[{"name":"big","match":{"path":"/*"},"upstream":"api","envelope":{"enabled":True,"max_bytes":16777216}}],
 "log":{"level":"warn","access":"stdout"}}
if a.buffered_bytes is not None: cfg["limits"] = {"buffered_bytes": a.buffered_bytes}
cfgpath = os.path.join(tempfile.mkdtemp(prefix="gh-rss-"), "config.json")
open(cfgpath,"w").write(json.dumps(cfg))
p = subprocess.Popen([binary,"serve","--config",cfgpath], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])//1024
time.sleep(1.5); base = rss()
conns = []
for i in range(N):
    c = socket.create_connection(("127.0.0.1", gport)); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); conns.append(c)
peak = base
for _ in range(int(a.hold_seconds * 2)):
    time.sleep(0.5); peak = max(peak, rss())
for c in conns: c.close()
time.sleep(20); after = rss()
print(f"doc {len(doc)/1e6:.1f} MB, {N} clients not reading: RSS base {base} MiB, peak {peak} MiB, after close {after} MiB")
import urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{aport}/metrics", headers={"Authorization":"Bearer "+"t"*32})
print([l for l in urllib.request.urlopen(req).read().decode().splitlines() if l.startswith("gatehouse_buffered")])
p.terminate(); p.wait()
