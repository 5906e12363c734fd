#!/usr/bin/env python3
"""Circuit attack: does one client finding a failing endpoint take the upstream from the others?
Usage: Bench/circuit_attack.py [--bin PATH] [--example-circuit]"""
import os, socket, tempfile, threading, subprocess, json, time, sys, http.server, socketserver, urllib.request, urllib.error
import argparse
ap = argparse.ArgumentParser(description="A legitimate client's success rate on one route while 3 attackers hit another route of the same upstream with 500s (10 s).")
ap.add_argument("--bin", default=".build/release/gatehouse")
ap.add_argument("--legit-interval", type=float, default=0.5, help="seconds between the legitimate client's requests")
ap.add_argument("--seconds", type=float, default=20)
ap.add_argument("--example-circuit", action="store_true", help="the circuit of Config/example.json (5 failures, 5000 ms) instead of the default")
a = ap.parse_args()
binary = a.bin; example = a.example_circuit
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        code = 500 if self.path.startswith("/pub/") else 200
        body = b'{"ok":true}'
        self.send_response(code); self.send_header("Content-Type","application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
srv = S(("127.0.0.1", 0), H); bport = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
s = socket.socket(); s.bind(("127.0.0.1",0)); gport = s.getsockname()[1]; s.close()
up = {"url":f"http://127.0.0.1:{bport}"}
if example: up["circuit"] = {"failures": 5, "open_ms": 5000}
cfg = {"listen":[{"address":f"127.0.0.1:{gport}"}],"admin":{"listen":"127.0.0.1:0"},"workers":1,"upstreams":{"api":up},
 "routes":[{"name":"pub","match":{"path":"/pub/*"},"upstream":"api"},{"name":"legit","match":{"path":"/*"},"upstream":"api"}],
 "log":{"level":"warn","access":"off"}}
cfgpath = os.path.join(tempfile.mkdtemp(prefix="gh-circuit-"), "config.json")
open(cfgpath,"w").write(json.dumps(cfg))
p = subprocess.Popen([binary,"serve","--config",cfgpath], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.5)
stop = False
def get(path):
    try: return urllib.request.urlopen(f"http://127.0.0.1:{gport}{path}", timeout=5).status
    except urllib.error.HTTPError as e: return e.code
    except Exception: return 0
def attacker():
    while not stop: get("/pub/anything"); time.sleep(0.5)
ts = [threading.Thread(target=attacker) for _ in range(3)]
for t in ts: t.start()
ok = total = 0; end = time.time() + a.seconds
while time.time() < end:
    total += 1; ok += get("/legit/me") == 200; time.sleep(a.legit_interval)
stop = True
for t in ts: t.join()
print(f"{'example circuit 5/5000ms' if example else 'default circuit'}: legit {ok}/{total} OK under 3 attackers x 2 req/s of 500s, {a.seconds:.0f} s")
p.terminate(); p.wait()
