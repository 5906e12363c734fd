#!/usr/bin/env python3
"""Requests per second and CPU per request of a route that verifies client JWTs, against the
same route without JWT, in one run (the goal: within 10 %; see Docs/jwt.md, "Cost").

Usage (from the project root, after `swift build -c release --product gatehouse`):
    Bench/jwt_compare.py [--bin .build/release/gatehouse] [--rounds 5] [--seconds 4] [--clients 64]

One gateway (one worker) in front of an nginx backend with a fixed JSON body; three routes
with the same backend token and header rule as the `pass` scenario: `/pass/*` (no JWT),
`/es/*` (ES256 tokens) and `/rs/*` (RS256 tokens), each JWT route forwarding `sub` as a
header. Each JWT route is measured against `/pass/*` getting the same requests (the same
tokens, dropped there): `pass-es` vs `es`, `pass-rs` vs `rs`. `--clients` tokens per algorithm, one per simulated client (different subjects,
keys made at start with Debian python3-jwt / python3-cryptography), sent round-robin by wrk
(64 connections): each token is verified once, then found in the loop's cache of verified
tokens, as for real clients that send the same token with every request until it expires.
Rounds are interleaved; figures are medians. CPU per request is the gateway's user + system
time (/proc) over the requests wrk completed.
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import wait  # noqa: E402

BODY = '{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
PORTS = dict(backend=19701, gatehouse=19702, admin=19703)
MINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Tools", "jwtmint.py")
PYTHON = "/usr/bin/python3"


def run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout.strip()


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=".build/release/gatehouse")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--profile", metavar="REQUESTS",
                        help="instead of the rounds, record `perf` on the gateway under one load (pass-es, es, pass-rs, rs)"
                             " and print the top of its report")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gh-jwt-")
    procs = []
    try:
        keys = {"es": json.loads(run([PYTHON, MINT, "keys", work, "ec256", "es"])),
                "rs": json.loads(run([PYTHON, MINT, "keys", work, "rsa", "rs"]))}
        exp = int(time.time()) + 3600
        tokens = {}
        for name, alg in (("es", "ES256"), ("rs", "RS256")):
            tokens[name] = [run([PYTHON, MINT, "sign", f"{work}/{name}.pem", alg, name,
                                 json.dumps({"sub": f"user-{i}", "exp": exp, "iss": "https://id.bench/",
                                             "aud": "bench"})]) for i in range(args.clients)]
        conf = os.path.join(work, "backend.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1; daemon off; pid {work}/backend.pid; error_log {work}/backend-error.log;
events {{ worker_connections 8192; }}
http {{ access_log off; server {{ listen 127.0.0.1:{PORTS['backend']}; keepalive_requests 1000000;
  location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}""")
        procs.append(subprocess.Popen(["nginx", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
        assert wait(PORTS["backend"])
        provider = lambda name: {"issuer": "https://id.bench/", "audiences": ["bench"], "keys": {"keys": [keys[name]]},
                                 "forward_claims": {"sub": "X-User-Id"}}
        route = lambda name, extra: dict({"name": name, "match": {"path": f"/{name}/*"}, "upstream": "api",
                                          "path": "/*", "token": "bench", "envelope": {"enabled": False}}, **extra)
        config = os.path.join(work, "gatehouse.json")
        with open(config, "w") as f:
            json.dump({
                "listen": [{"address": f"127.0.0.1:{PORTS['gatehouse']}"}], "workers": 1,
                "admin": {"listen": f"127.0.0.1:{PORTS['admin']}", "token": "bench-admin"},
                "store": {"path": f"{work}/gatehouse.sqlite"},
                "headers": {"set": {"Accept": "application/json"}},
                "upstreams": {"api": {"url": f"http://127.0.0.1:{PORTS['backend']}", "max_idle_connections": 128}},
                "tokens": {"bench": {"type": "static", "value": "bench-token"}},
                "jwt": {"providers": {"es": provider("es"), "rs": provider("rs")}},
                "routes": [route("pass", {}), route("es", {"jwt": {"provider": "es"}}),
                           route("rs", {"jwt": {"provider": "rs"}})],
                "log": {"level": "warn", "access": "off"},
            }, f)
        gateway = subprocess.Popen([args.bin, "serve", "--config", config], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(gateway)
        assert wait(PORTS["gatehouse"])
        scripts = {}
        # Each JWT route is compared with the route without JWT getting the same requests
        # (the same tokens, dropped there), so only the verification differs.
        for name, route_path, alg in (("pass-es", "pass", "es"), ("es", "es", "es"), ("pass-rs", "pass", "rs"),
                                      ("rs", "rs", "rs")):
            path = os.path.join(work, name + ".lua")
            lines = [f'"{t}"' for t in tokens[alg]]
            with open(path, "w") as f:
                f.write("local tokens = {" + ",".join(lines) + "}\nlocal n = 0\n"
                        "request = function()\n  n = n % #tokens + 1\n"
                        f'  return wrk.format("GET", "/{route_path}/x", {{["Authorization"] = "Bearer " .. tokens[n]}})\nend\n')
            scripts[name] = path
        # Every token once, so the rounds measure the steady state (verified tokens cached).
        for name in ("es", "rs"):
            run(["wrk", "-t1", "-c1", f"-d1s", "-s", scripts[name], f"http://127.0.0.1:{PORTS['gatehouse']}"])
        if args.profile:
            data = os.path.join(work, "perf.data")
            perf = subprocess.Popen(["perf", "record", "-q", "-g", "-o", data, "-p", str(gateway.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            run(["wrk", "-t2", "-c64", f"-d{args.seconds}s", "-s", scripts[args.profile],
                 f"http://127.0.0.1:{PORTS['gatehouse']}"])
            perf.send_signal(signal.SIGINT)
            perf.wait(30)
            report = run(["perf", "report", "-i", data, "--no-children", "--percent-limit", "0.7", "--stdio", "-g", "none"])
            print("\n".join(l for l in report.splitlines() if l and not l.startswith("#")))
            return
        results = {name: {"rps": [], "cpu": []} for name in scripts}
        for _ in range(args.rounds):
            for name in scripts:
                before = cpu_seconds(gateway.pid)
                out = run(["wrk", "-t2", "-c64", f"-d{args.seconds}s", "-s", scripts[name],
                           f"http://127.0.0.1:{PORTS['gatehouse']}"])
                used = cpu_seconds(gateway.pid) - before
                requests = int(next(l for l in out.splitlines() if "requests in" in l).split()[0])
                non2xx = [l for l in out.splitlines() if "Non-2xx" in l]
                if non2xx:
                    raise SystemExit(f"{name}: {non2xx[0]}")
                results[name]["rps"].append(requests / args.seconds)
                results[name]["cpu"].append(used / requests * 1e6)
        print(f"{'requests':10} {'rps':>10} {'vs pass':>8} {'CPU µs/req':>11} {'vs pass':>8}")
        for name in scripts:
            base = "pass-" + name[-2:]
            rps = statistics.median(results[name]["rps"])
            cpu = statistics.median(results[name]["cpu"])
            ratio_rps = rps / statistics.median(results[base]["rps"])
            ratio_cpu = cpu / statistics.median(results[base]["cpu"])
            print(f"{name:10} {rps:10.0f} {ratio_rps:8.3f} {cpu:11.2f} {ratio_cpu:8.3f}")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
