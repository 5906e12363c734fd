#!/usr/bin/env python3
"""TLS termination: Gatehouse against nginx, same backend, same certificate, same run.

Usage (from the project root, after `swift build -c release`):
    Bench/tls_compare.py [--bin .build/release/gatehouse] [--seconds 5] [--rounds 2]

Makes a test CA and a localhost certificate (openssl CLI), starts an nginx backend on plain
HTTP, and in front of it nginx (`listen ssl`, one worker, upstream keep-alive) and Gatehouse
(a TLS listener, one worker), both with the same certificate and TLS 1.3 defaults. Measures
keep-alive requests/s with wrk over https, and full handshakes/s for new connections with
`openssl s_time -new`. Prints both and the ratios Gatehouse/nginx. Loopback only.
"""
import argparse, json, os, re, signal, socket, statistics, subprocess, tempfile, time
from benchlib import sh, wait

P = dict(backend=19701, nginx=19702, gatehouse=19703, admin=19704)
BODY = '{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="gh-tls-")
    os.chmod(d, 0o755)
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
       "-days", "2", "-subj", "/CN=Bench CA")
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/srv.key", "-out", f"{d}/srv.csr",
       "-subj", "/CN=localhost")
    with open(f"{d}/ext.cnf", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1")
    sh("openssl", "x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
       "-CAcreateserial", "-out", f"{d}/srv.pem", "-days", "2", "-extfile", f"{d}/ext.cnf")
    procs = []

    def start(name, argv, port):
        p = subprocess.Popen(argv, stdout=open(f"{d}/{name}.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        if not wait(port):
            raise SystemExit(f"{name} did not start; see {d}/{name}.log")

    def nginx(name, body):
        with open(f"{d}/{name}.conf", "w") as f:
            f.write(f"worker_processes 1; daemon off; pid {d}/{name}.pid; error_log {d}/{name}-e.log;"
                    f" events {{ worker_connections 8192; }} http {{ access_log off; {body} }}")
        start(name, ["nginx", "-c", f"{d}/{name}.conf"], P[name])

    try:
        nginx("backend", f"server {{ listen 127.0.0.1:{P['backend']}; keepalive_requests 1000000;"
                         f" location / {{ default_type application/json; return 200 '{BODY}'; }} }}")
        nginx("nginx", f"upstream api {{ server 127.0.0.1:{P['backend']}; keepalive 128; }}"
                       f" server {{ listen 127.0.0.1:{P['nginx']} ssl; keepalive_requests 1000000;"
                       f" ssl_certificate {d}/srv.pem; ssl_certificate_key {d}/srv.key; ssl_protocols TLSv1.2 TLSv1.3;"
                       f" location / {{ proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection ''; }} }}")
        config = {
            "listen": [{"address": f"127.0.0.1:{P['gatehouse']}", "tls": {"cert": f"{d}/srv.pem", "key": f"{d}/srv.key"}}],
            "workers": 1, "admin": {"listen": f"127.0.0.1:{P['admin']}", "token": "bench"},
            "store": {"path": f"{d}/gh.sqlite"},
            "upstreams": {"api": {"url": f"http://127.0.0.1:{P['backend']}", "max_idle_connections": 128}},
            "routes": [{"name": "all", "match": {"path": "/*"}, "upstream": "api", "envelope": {"enabled": False}}],
            "log": {"level": "warn", "access": "off"},
        }
        with open(f"{d}/gh.json", "w") as f:
            json.dump(config, f)
        start("gatehouse", [args.bin, "serve", "--config", f"{d}/gh.json"], P["gatehouse"])
        rps = {"gatehouse": [], "nginx": []}
        hs = {"gatehouse": [], "nginx": []}
        for _ in range(args.rounds):
            for name in ("gatehouse", "nginx"):
                out = subprocess.run(["wrk", "-t1", "-c64", f"-d{args.seconds}s", f"https://127.0.0.1:{P[name]}/users"],
                                     capture_output=True, text=True).stdout
                rps[name].append(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)))
                out = subprocess.run(["openssl", "s_time", "-connect", f"127.0.0.1:{P[name]}", "-new", "-time",
                                      str(args.seconds)], capture_output=True, text=True).stdout
                m = re.search(r"([\d.]+) connections/user sec", out)
                hs[name].append(float(m.group(1)) if m else 0.0)
        for name in ("gatehouse", "nginx"):
            print(f"{name:10} keep-alive {statistics.median(rps[name]):>9.0f} rps   handshakes "
                  f"{statistics.median(hs[name]):>7.0f} /s (openssl s_time, per user CPU second)")
        print(f"ratio keep-alive rps gatehouse/nginx = {statistics.median(rps['gatehouse']) / statistics.median(rps['nginx']):.3f}")
        print(f"ratio handshakes gatehouse/nginx = {statistics.median(hs['gatehouse']) / max(1, statistics.median(hs['nginx'])):.3f}")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(5)
            except Exception:
                pass


if __name__ == "__main__":
    main()
