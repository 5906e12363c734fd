#!/usr/bin/env python3
"""CPU time per proxied request: Gatehouse, nginx and HAProxy under the same load.

Usage (from the project root, after `swift build -c release`):
    Bench/cpu_per_request.py [--bin .build/release/gatehouse] [--rounds 5] [--seconds 4]
                             [--pipeline-depth N] [--scenario pass|envelope]

Scenarios:
  pass      (default) the proxy adds Accept and a bearer token, the body passes through;
            Gatehouse, nginx and HAProxy
  envelope  an enveloped, stored route with 1 s freshness (`fresh_s: 1`, `stale_if_error_s`),
            against nginx's `proxy_cache` with `proxy_cache_valid 200 1s` and
            `proxy_cache_use_stale`: both answer most requests from their cache and ask the
            backend about once a second. HAProxy has no comparable cache, so it sits out.

`--pipeline-depth` sets the upstream's `pipeline_depth` (default: none, so the product's
default, off); the side-by-side benchmark uses the default too.

Same set-up as the shared side-by-side benchmark (one worker each, one nginx backend with a
fixed JSON body, the proxy adds Accept and a bearer token). For each proxy in turn, in
interleaved rounds, wrk drives 64 connections and `perf stat -e task-clock` reads the proxy
process's CPU time; the figure is CPU microseconds per request, median over rounds. The same
window also gives the backend's and wrk's CPU per request (a proxy that pipelines saves the
backend receives) and the whole machine's busy time per request and idle share (/proc/stat):
rps is about (cores - idle) / busy time per request.

"bound" is the rps that two cores allow when each of the three single-threaded processes can
only use one: the proxy on one core, wrk and the backend sharing the other, so rps is at most
1 / max(proxy, wrk + backend) CPU per request. Once the proxy needs less than wrk plus the
backend, the second term decides and a lighter proxy no longer raises rps on this machine;
"of bound" is the measured rps as a share of it.

Requests per second move with whatever else the machine runs, and on a small machine wrk and
the backend compete with the proxy for the same cores; CPU per request is the proxy's own
cost and varies much less between runs. Needs nginx, haproxy, wrk and perf (linux-perf).
"""
import argparse, json, os, re, shutil, signal, socket, statistics, subprocess, tempfile, time

BODY = '{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
PORTS = dict(backend=19601, nginx=19602, haproxy=19603, gatehouse=19604, admin=19605)


def wait_port(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Setup:
    def __init__(self, binary, pipeline_depth=None, scenario="pass"):
        self.scenario = scenario
        self.dir = tempfile.mkdtemp(prefix="gh-cpu-")
        os.chmod(self.dir, 0o755)
        self.binary = binary
        self.pipeline_depth = pipeline_depth
        self.procs = {}

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, name, argv, port):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if not wait_port(port):
            raise SystemExit(f"{name} did not start on port {port}; see {self.dir}/{name}.log")

    def nginx(self, name, body):
        conf = self.write(name + ".conf", f"""worker_processes 1; daemon off; pid {self.dir}/{name}.pid;
error_log {self.dir}/{name}-error.log; events {{ worker_connections 8192; }}
http {{ access_log off; {body} }}""")
        return ["nginx", "-c", conf]

    def start_all(self):
        b = PORTS["backend"]
        self.start("backend", self.nginx("backend", f"""server {{ listen 127.0.0.1:{b}; keepalive_requests 1000000;
  location / {{ default_type application/json; return 200 '{BODY}'; }} }}"""), b)
        os.makedirs(f"{self.dir}/nginx-cache", mode=0o777, exist_ok=True)
        os.chmod(f"{self.dir}/nginx-cache", 0o777)
        self.start("nginx", self.nginx("nginx", f"""upstream api {{ server 127.0.0.1:{b}; keepalive 128; }}
proxy_cache_path {self.dir}/nginx-cache levels=1:2 keys_zone=c:10m max_size=100m;
server {{ listen 127.0.0.1:{PORTS['nginx']}; keepalive_requests 1000000;
  proxy_http_version 1.1; proxy_set_header Connection "";
  proxy_set_header Authorization "Bearer bench-token"; proxy_set_header Accept "application/json";
  location /pass/ {{ proxy_pass http://api/; }}
  location /users {{ proxy_pass http://api; proxy_cache c; proxy_cache_valid 200 1s;
    proxy_cache_use_stale error timeout http_502 http_503 http_504; }} }}"""), PORTS["nginx"])
        haproxy = self.write("haproxy.cfg", f"""global
  maxconn 8192
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{PORTS['haproxy']}
  http-request set-header Authorization "Bearer bench-token"
  http-request set-header Accept "application/json"
  http-request set-path %[path,regsub(^/pass/,/)]
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:{b}
""")
        self.start("haproxy", ["haproxy", "-f", haproxy], PORTS["haproxy"])
        upstream = {"url": f"http://127.0.0.1:{b}", "max_idle_connections": 128}
        if self.pipeline_depth is not None:
            upstream["pipeline_depth"] = self.pipeline_depth
        config = self.write("gatehouse.json", json.dumps({
            "listen": [{"address": f"127.0.0.1:{PORTS['gatehouse']}"}],
            "workers": 1,
            "admin": {"listen": f"127.0.0.1:{PORTS['admin']}", "token": "bench-admin"},
            "store": {"path": f"{self.dir}/gatehouse.sqlite"},
            "headers": {"set": {"Accept": "application/json"}},
            "upstreams": {"api": upstream},
            "tokens": {"bench": {"type": "static", "value": "bench-token"}},
            "routes": [{"name": "pass", "match": {"path": "/pass/*"}, "upstream": "api", "path": "/*",
                        "token": "bench", "envelope": {"enabled": False}},
                       {"name": "users", "match": {"path": "/users"}, "upstream": "api", "token": "bench",
                        "envelope": {"enabled": True}, "cache": {"fresh_s": 1, "stale_if_error_s": 86400}}],
            "log": {"level": "warn", "access": "off"},
        }))
        self.start("gatehouse", [self.binary, "serve", "--config", config], PORTS["gatehouse"])

    def worker_pid(self, name):
        """The process doing the proxying: nginx's worker (the master's child), else the process itself."""
        pid = self.procs[name].pid
        if name not in ("nginx", "backend"):
            return pid
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        return int(children[0])

    def stop_all(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)


def cpu_times():
    """The machine's (busy, idle) clock ticks so far, over all CPUs."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, idle


def measure(setup, name, seconds):
    """Runs wrk for `seconds` + 2 and perf over the middle `seconds`; returns (rps, proxy µs per
    request, backend µs per request, machine busy µs per request, idle %, wrk µs per request)."""
    path = "/users" if setup.scenario == "envelope" else "/pass/users"
    url = f"http://127.0.0.1:{PORTS[name]}{path}"
    wrk = subprocess.Popen(["wrk", "-t1", "-c64", f"-d{seconds + 2}s", url], stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    outs = {who: os.path.join(setup.dir, f"perf-{who}.txt") for who in ("proxy", "backend", "wrk")}
    pids = {"proxy": setup.worker_pid(name), "backend": setup.worker_pid("backend"), "wrk": wrk.pid}
    before = cpu_times()
    perfs = [subprocess.Popen(["perf", "stat", "-e", "task-clock", "-p", str(pids[who]), "-o", outs[who],
                               "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for who in outs]
    for p in perfs:
        p.wait()
    after = cpu_times()
    report = wrk.communicate()[0]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", report).group(1))
    requests = rps * seconds
    per_request = {}
    for who, out in outs.items():
        with open(out) as f:
            msec = float(re.search(r"([\d,.]+)\s+msec task-clock", f.read()).group(1).replace(",", ""))
        per_request[who] = msec * 1000 / requests
    hz = os.sysconf("SC_CLK_TCK")
    busy, idle = after[0] - before[0], after[1] - before[1]
    return (rps, per_request["proxy"], per_request["backend"], busy / hz * 1e6 / requests,
            100 * idle / max(1, busy + idle), per_request["wrk"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--pipeline-depth", type=int, default=None)
    ap.add_argument("--scenario", choices=("pass", "envelope"), default="pass")
    args = ap.parse_args()
    missing = [t for t in ("nginx", "haproxy", "wrk", "perf") if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
    if missing:
        raise SystemExit("missing tools: " + ", ".join(missing) + " (apt-get install nginx-light haproxy wrk linux-perf)")
    setup = Setup(os.path.abspath(args.bin), args.pipeline_depth, args.scenario)
    names = ("gatehouse", "nginx") if args.scenario == "envelope" else ("gatehouse", "nginx", "haproxy")
    results = {n: [] for n in names}
    try:
        setup.start_all()
        for _ in range(args.rounds):
            for name in names:
                results[name].append(measure(setup, name, args.seconds))
    finally:
        setup.stop_all()
    medians = {n: statistics.median(run[1] for run in runs) for n, runs in results.items()}
    for name, runs in results.items():
        cpus = ", ".join(f"{run[1]:.2f}" for run in runs)
        rps, backend, busy, idle, wrk = (statistics.median(run[i] for run in runs) for i in (0, 2, 3, 4, 5))
        bound = statistics.median(1e6 / max(run[1], run[2] + run[5]) for run in runs)
        print(f"{name:10} CPU/request median {medians[name]:6.2f} µs  (rounds: {cpus})  rps median {rps:.0f}  "
              f"backend {backend:.2f} µs  wrk {wrk:.2f} µs  machine busy {busy:.2f} µs/request, idle {idle:.1f} %  "
              f"bound {bound:.0f} rps ({'proxy' if medians[name] > backend + wrk else 'wrk + backend'}), "
              f"of bound {100 * rps / bound:.0f} %")
    for peer in names[1:]:
        print(f"ratio cpu {peer}/gatehouse = {medians[peer] / medians['gatehouse']:.3f}  "
              f"(gatehouse/{peer} = {medians['gatehouse'] / medians[peer]:.3f})")


if __name__ == "__main__":
    main()
