#!/usr/bin/env python3
"""HTTP/2 over TLS: Gatehouse against nginx with h2load, same backend, same certificate, same run.

Usage (from the project root, after `swift build -c release`):
    Bench/h2_compare.py [--bin .build/release/gatehouse] [--rounds 3] [--seconds 10] [--warm-up 2]
                        [--clients 32] [--streams 10] [--upstream-idle 128] [--perf]

Makes a test CA and a localhost certificate (openssl CLI) and starts the nginx backend of the
side-by-side benchmark (fixed JSON body). In front of it, each with one worker: nginx
(`listen ssl http2`, upstream keep-alive) and Gatehouse (a TLS listener, ALPN h2), both doing
the `pass` scenario: /pass/* goes to /* with `Authorization: Bearer bench-token` injected and
`Accept: application/json` set; both also drop the client's `X-Debug` (h2load sends one).
A curl request checks that each proxy negotiates h2 and the backend sees those headers.

Each round runs `h2load -c 32 -m 10` per proxy for --seconds after --warm-up, alternating.
h2load prints no percentiles, so p99 comes from its --log-file (per-request latency) over
the requests started after the warm-up. The proxy's CPU per request comes from /proc.
Reports median requests/s and p99 per proxy, the ratios Gatehouse/nginx (goals: rps >= 1.0,
p99 <= 1.2) and a JSON line. --perf adds one run per proxy counting socket calls per request
(perf stat) and one Gatehouse run under `perf record -g`, and prints the top symbols.
Needs nginx (with http_v2), h2load (nghttp2-client), curl, openssl; perf for --perf.
Loopback only; nothing is pinned, as in the other benchmarks.
"""
import argparse, json, os, re, shutil, signal, socket, statistics, subprocess, tempfile, time
from benchlib import sh, wait

P = dict(backend=19801, nginx=19802, gatehouse=19803, admin=19804)
BODY = '{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
NAMES = ("gatehouse", "nginx")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def p99_ms(log_path, not_before_us):
    """p99 of the successful requests started after not_before_us; h2load 1.52 logs only the
    measured phase, the bound keeps warm-up rows out should a version log them."""
    rows = []
    with open(log_path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    if not rows:
        return None, 0
    lat = sorted(r[2] for r in rows if r[0] >= not_before_us and r[1] == 200)
    if not lat:
        return None, 0
    return lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000.0, len(lat)


class Bench:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="gh-h2-")
        os.chmod(self.dir, 0o755)  # nginx workers run as an unprivileged user
        self.procs = {}

    def start(self, name, argv, port):
        log = open(f"{self.dir}/{name}.log", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if not wait(port):
            raise SystemExit(f"{name} did not start on port {port}; see {self.dir}/{name}.log")

    def stop_all(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
            except ProcessLookupError:
                pass

    def nginx(self, name, body):
        with open(f"{self.dir}/{name}.conf", "w") as f:
            f.write(f"worker_processes 1; daemon off; pid {self.dir}/{name}.pid; error_log {self.dir}/{name}-e.log;"
                    f" events {{ worker_connections 8192; }} http {{ access_log off; {body} }}")
        self.start(name, ["nginx", "-c", f"{self.dir}/{name}.conf"], P[name])

    def worker_pid(self, name):
        """nginx proxies in its master's child; Gatehouse in its own process."""
        pid = self.procs[name].pid
        if name == "gatehouse":
            return pid
        return int(subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=5).stdout.split()[0])

    def certs(self):
        d = self.dir
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
           "-days", "2", "-subj", "/CN=Bench CA")
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/srv.key", "-out", f"{d}/srv.csr",
           "-subj", "/CN=localhost")
        with open(f"{d}/ext.cnf", "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1")
        sh("openssl", "x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
           "-CAcreateserial", "-out", f"{d}/srv.pem", "-days", "2", "-extfile", f"{d}/ext.cnf")

    def start_all(self):
        d, b = self.dir, P["backend"]
        # /echo is only for the header check; the load goes to the fixed body.
        self.nginx("backend", f"server {{ listen 127.0.0.1:{b}; keepalive_requests 1000000;"
                              f" location = /echo {{ default_type text/plain;"
                              f" return 200 '$http_authorization|$http_accept|$http_x_debug'; }}"
                              f" location / {{ default_type application/json; return 200 '{BODY}'; }} }}")
        # keepalive_requests also bounds requests per h2 connection in nginx; raise it like the h1 runs.
        self.nginx("nginx", f"upstream api {{ server 127.0.0.1:{b}; keepalive {self.args.upstream_idle}; }}"
                            f" server {{ listen 127.0.0.1:{P['nginx']} ssl http2; keepalive_requests 1000000;"
                            f" ssl_certificate {d}/srv.pem; ssl_certificate_key {d}/srv.key; ssl_protocols TLSv1.2 TLSv1.3;"
                            f" proxy_http_version 1.1; proxy_set_header Connection '';"
                            f" proxy_set_header Authorization 'Bearer bench-token'; proxy_set_header Accept 'application/json';"
                            f" proxy_set_header X-Debug '';"
                            f" location /pass/ {{ proxy_pass http://api/; }} }}")
        config = {
            "listen": [{"address": f"127.0.0.1:{P['gatehouse']}", "tls": {"cert": f"{d}/srv.pem", "key": f"{d}/srv.key"}}],
            "workers": 1,
            "admin": {"listen": f"127.0.0.1:{P['admin']}", "token": "bench-admin"},
            "store": {"path": f"{d}/gatehouse.sqlite"},
            "headers": {"set": {"Accept": "application/json"}, "remove": ["X-Debug"]},
            "upstreams": {"api": {"url": f"http://127.0.0.1:{b}", "max_idle_connections": self.args.upstream_idle}},
            "tokens": {"bench": {"type": "static", "value": "bench-token"}},
            "routes": [{"name": "pass", "match": {"path": "/pass/*"}, "upstream": "api", "path": "/*",
                        "token": "bench", "envelope": {"enabled": False}}],
            "log": {"level": "warn", "access": "off"},
        }
        with open(f"{d}/gatehouse.json", "w") as f:
            json.dump(config, f, indent=1)
        self.start("gatehouse", [self.args.bin, "serve", "--config", f"{d}/gatehouse.json"], P["gatehouse"])

    def check(self, name):
        out = subprocess.run(["curl", "-s", "--http2", "--cacert", f"{self.dir}/ca.pem", "-H", "X-Debug: 1",
                              "-w", "\n%{http_version}", f"https://localhost:{P[name]}/pass/echo"],
                             capture_output=True, text=True, timeout=10).stdout
        body, _, version = out.rpartition("\n")
        want = "Bearer bench-token|application/json|"
        if version != "2" or body != want:
            raise SystemExit(f"{name}: check failed: HTTP version {version!r}, backend saw {body!r}, want {want!r}")
        return version

    def h2load(self, name, log_path, seconds=None):
        a = self.args
        seconds = seconds or a.seconds
        argv = ["h2load", "-t1", f"-c{a.clients}", f"-m{a.streams}", f"--warm-up-time={a.warm_up}", f"-D{seconds}",
                "-H", "x-debug: 1", f"--log-file={log_path}", f"https://127.0.0.1:{P[name]}/pass/users"]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def measure(self, name, i):
        a = self.args
        log_path = f"{self.dir}/h2load-{name}-{i}.tsv"
        pid = self.worker_pid(name)
        launched_us = int(time.time() * 1e6)
        h = self.h2load(name, log_path)
        # CPU over the measured part only: skip connection set-up and the warm-up.
        time.sleep(a.warm_up + 0.2)
        t0 = cpu_ticks(pid)
        time.sleep(a.seconds - 0.4)
        t1 = cpu_ticks(pid)
        out = h.communicate(timeout=a.seconds + a.warm_up + 30)[0]
        m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
        if not m:
            raise SystemExit(f"h2load against {name} printed no result:\n{out}")
        rps = float(m.group(3))
        codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
        reqs = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
        proto = re.search(r"Application protocol: (\S+)", out)
        p99, n = p99_ms(log_path, launched_us + a.warm_up * 1_000_000)
        os.unlink(log_path)  # hundreds of thousands of rows per run
        cpu_us = (t1 - t0) / os.sysconf("SC_CLK_TCK") * 1e6 / max(1.0, rps * (a.seconds - 0.4))
        return dict(rps=rps, p99_ms=p99, logged=n, cpu_us_per_req=round(cpu_us, 2),
                    non2xx=sum(int(x) for x in codes.groups()[1:]) if codes else None,
                    failed=int(reqs.group(2)) + int(reqs.group(3)) if reqs else None,
                    protocol=proto.group(1) if proto else None)

    def syscalls(self, name):
        """Socket calls per request in the proxy's loop during one run: frames not coalesced into
        one write, or upstream connections not reused, show here before they show in a profile."""
        a = self.args
        calls = ("sendto", "sendmsg", "write", "writev", "recvfrom", "recvmsg", "read", "readv", "connect")
        h = self.h2load(name, f"{self.dir}/h2load-sys-{name}.tsv")
        time.sleep(a.warm_up + 0.2)
        window = max(1, a.seconds - 2)
        out = subprocess.run(["perf", "stat", "-x", ",", "-e", ",".join("syscalls:sys_enter_" + c for c in calls),
                              "-p", str(self.worker_pid(name)), "--", "sleep", str(window)],
                             capture_output=True, text=True, timeout=a.seconds + 30).stderr
        rps = float(re.search(r"([\d.]+) req/s", h.communicate(timeout=a.seconds + a.warm_up + 30)[0]).group(1))
        per = {}
        for line in out.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[2].startswith("syscalls:sys_enter_") and f[0].isdigit() and int(f[0]):
                per[f[2][len("syscalls:sys_enter_"):]] = round(int(f[0]) / (rps * window), 3)
        return per

    def profile(self):
        """One Gatehouse run under perf; returns the top of its self time by dso, symbol, own symbol."""
        a = self.args
        data = f"{self.dir}/perf.data"
        h = self.h2load("gatehouse", f"{self.dir}/h2load-perf.tsv")
        time.sleep(a.warm_up + 0.2)
        perf = subprocess.run(["perf", "record", "-g", "-F", "999", "-o", data, "-p", str(self.procs["gatehouse"].pid),
                               "--", "sleep", str(max(1, a.seconds - 2))],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=a.seconds + 30)
        h.communicate(timeout=a.seconds + a.warm_up + 30)
        if perf.returncode != 0:
            return "perf record failed"
        lines = []
        for fields, limit, dsos in (("overhead,dso", "1", None), ("overhead,dso,sym", "0.7", None),
                                    ("overhead,sym", "0.3", os.path.basename(a.bin))):
            argv = ["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none", "-F", fields,
                    "--percent-limit", limit] + (["--dsos", dsos] if dsos else [])
            rep = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
            lines += ([f"  in {dsos} itself:"] if dsos else []) + \
                [l.rstrip() for l in rep.splitlines() if l.strip() and not l.startswith("#")] + [""]
        text = "\n".join(lines)
        if shutil.which("swift-demangle"):  # Swift symbols are unreadable mangled
            text = subprocess.run(["swift-demangle", "--simplified"], input=text, capture_output=True, text=True,
                                  timeout=60).stdout
        return "\n".join(l.rstrip()[:160] for l in text.splitlines())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--warm-up", type=int, default=2)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--streams", type=int, default=10, help="h2load -m: concurrent streams per connection")
    # 128 as in the HTTP/1.1 benchmarks; -c32 -m10 keeps up to 320 requests in flight, so both
    # proxies open and close upstream connections past it unless this is raised.
    ap.add_argument("--upstream-idle", type=int, default=128,
                    help="idle upstream connections kept (nginx keepalive, Gatehouse max_idle_connections)")
    ap.add_argument("--perf", action="store_true", help="also profile Gatehouse for one run (perf record -g)")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    missing = [t for t in ("nginx", "h2load", "curl", "openssl") + (("perf",) if args.perf else ())
               if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
    if missing:
        raise SystemExit("missing tools: " + ", ".join(missing) + " (apt-get install nginx-light nghttp2-client curl linux-perf)")
    bench = Bench(args)
    results = {n: [] for n in NAMES}
    profile, sys_calls = None, None
    try:
        bench.certs()
        bench.start_all()
        for name in NAMES:
            bench.check(name)
        for i in range(args.rounds):
            for name in NAMES:
                results[name].append(bench.measure(name, i))
        if args.perf:
            sys_calls = {name: bench.syscalls(name) for name in NAMES}
            profile = bench.profile()
    finally:
        bench.stop_all()
    med = {}
    print(f"h2load -c{args.clients} -m{args.streams} -D{args.seconds} (warm-up {args.warm_up} s), TLS + ALPN h2, "
          f"one worker each, {args.upstream_idle} idle upstream connections, {args.rounds} rounds, medians")
    print(f"{'proxy':10} {'req/s':>9} {'p99 ms':>8} {'CPU µs/req':>11} {'non-2xx':>8} {'failed':>7}  rounds req/s | p99")
    for name in NAMES:
        runs = results[name]
        med[name] = dict(rps=statistics.median(r["rps"] for r in runs),
                         p99_ms=statistics.median(r["p99_ms"] for r in runs if r["p99_ms"] is not None),
                         cpu_us_per_req=statistics.median(r["cpu_us_per_req"] for r in runs))
        print(f"{name:10} {med[name]['rps']:>9.0f} {med[name]['p99_ms']:>8.2f} {med[name]['cpu_us_per_req']:>11.2f} "
              f"{sum(r['non2xx'] or 0 for r in runs):>8} {sum(r['failed'] or 0 for r in runs):>7}  "
              + ", ".join(f"{r['rps']:.0f}" for r in runs) + " | " + ", ".join(f"{r['p99_ms']:.2f}" for r in runs))
    ratios = {"rps": round(med["gatehouse"]["rps"] / med["nginx"]["rps"], 3),
              "p99": round(med["gatehouse"]["p99_ms"] / med["nginx"]["p99_ms"], 3),
              "cpu": round(med["gatehouse"]["cpu_us_per_req"] / med["nginx"]["cpu_us_per_req"], 3)}
    print(f"ratio rps gatehouse/nginx = {ratios['rps']:.3f} (goal >= 1.0: {'met' if ratios['rps'] >= 1.0 else 'missed'})")
    print(f"ratio p99 gatehouse/nginx = {ratios['p99']:.3f} (goal <= 1.2: {'met' if ratios['p99'] <= 1.2 else 'missed'})")
    print(f"ratio CPU/request gatehouse/nginx = {ratios['cpu']:.3f}")
    if sys_calls is not None:
        for name in NAMES:
            print(f"syscalls per request, {name}: " + ", ".join(f"{k} {v}" for k, v in sys_calls[name].items()))
    if profile is not None:
        print("perf, Gatehouse self time by dso, then by symbol:\n" + profile)
    print(json.dumps(dict(bench="h2_compare", clients=args.clients, streams=args.streams, seconds=args.seconds,
                          upstream_idle=args.upstream_idle, rounds=args.rounds, medians=med, ratios=ratios, runs=results,
                          syscalls_per_request=sys_calls)))


if __name__ == "__main__":
    main()
