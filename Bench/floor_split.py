#!/usr/bin/env python3
"""CPU per proxied request split into user and kernel time: the floor (nullproxy.c, a blind
byte copy), Gatehouse and nginx, with the set-up of ../shared/bench/floor.py (same backend,
wrk -t1 -c64, one worker each, the `pass` rules: Accept and a bearer token).

Usage (from the project root, after `swift build -c release`):
    /usr/bin/python3 Bench/floor_split.py [--bin .build/release/gatehouse] [--rounds 5] [--seconds 5]

floor.py gives the total (perf's task-clock); this reads each proxy's utime and stime from
/proc/<pid>/stat before and after a round, so it shows where the time goes: the kernel's
share is the sockets' work (a proxy cannot do less than the byte copy's system calls), the
user share is the proxy's own code. With clock ticks of 10 ms, a 5 s round at about 50,000
requests per second measures each share to about 1 %. Medians over interleaved rounds.
"""
import argparse, json, os, re, signal, statistics, subprocess, tempfile

from benchlib import wait

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "bench")
P = dict(backend=19721, null=19722, nginx=19723, gatehouse=19724, admin=19725)
BODY = '{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'


def ticks(pid):
    """(user, system) clock ticks of every thread of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=".build/release/gatehouse")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--nullproxy", default=os.path.join(SHARED, "nullproxy.c"))
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="gh-split-")
    os.chmod(d, 0o755)
    null = os.path.join(d, "nullproxy")
    subprocess.run(["cc", "-O2", "-o", null, a.nullproxy], check=True)
    with open(f"{d}/backend.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/b.pid; error_log {d}/b.err;
events {{ worker_connections 4096; }}
http {{ access_log off; server {{ listen 127.0.0.1:{P['backend']}; keepalive_requests 1000000;
location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}""")
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/n.pid; error_log {d}/n.err;
events {{ worker_connections 4096; }}
http {{ access_log off; upstream api {{ server 127.0.0.1:{P['backend']}; keepalive 128; }}
server {{ listen 127.0.0.1:{P['nginx']}; keepalive_requests 1000000;
location / {{ proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection "";
proxy_set_header Accept application/json; proxy_set_header Authorization "Bearer bench-token"; }} }} }}""")
    with open(f"{d}/g.json", "w") as f:
        json.dump({"listen": [{"address": f"127.0.0.1:{P['gatehouse']}"}], "workers": 1,
                   "admin": {"listen": f"127.0.0.1:{P['admin']}", "token": "bench-admin-token"},
                   "store": {"path": f"{d}/store.sqlite"}, "log": {"access": "off"},
                   "upstreams": {"api": {"url": f"http://127.0.0.1:{P['backend']}", "max_idle_connections": 128}},
                   "tokens": {"t": {"type": "static", "value": "bench-token"}},
                   "headers": {"set": {"Accept": "application/json"}},
                   "routes": [{"name": "pass", "match": {"path": "/*"}, "upstream": "api", "token": "t",
                               "envelope": {"enabled": False}}]}, f)
    procs = {}

    def start(name, argv, port):
        procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
        if not wait(port):
            raise SystemExit(f"{name} did not start")

    hz = os.sysconf("SC_CLK_TCK")
    try:
        start("backend", ["nginx", "-c", f"{d}/backend.conf"], P["backend"])
        start("null", [null, str(P["null"]), str(P["backend"])], P["null"])
        start("nginx", ["nginx", "-c", f"{d}/nginx.conf"], P["nginx"])
        start("gatehouse", [os.path.abspath(a.bin), "serve", "--config", f"{d}/g.json"], P["gatehouse"])

        def worker_pid(name):
            if name == "nginx":
                out = subprocess.run(["pgrep", "-P", str(procs[name].pid)], capture_output=True, text=True)
                return int(out.stdout.split()[0])
            return procs[name].pid

        names = ("null", "gatehouse", "nginx")
        results = {n: [] for n in names}
        for _ in range(a.rounds):
            for n in names:
                pid = worker_pid(n)
                before = ticks(pid)
                out = subprocess.run(["wrk", "-t1", "-c64", f"-d{a.seconds}s", f"http://127.0.0.1:{P[n]}/users"],
                                     capture_output=True, text=True).stdout
                after = ticks(pid)
                requests = int(re.search(r"(\d+) requests in", out).group(1))
                user = (after[0] - before[0]) / hz * 1e6 / requests
                system = (after[1] - before[1]) / hz * 1e6 / requests
                results[n].append((user, system))
        medians = {}
        for n in names:
            user = statistics.median(r[0] for r in results[n])
            system = statistics.median(r[1] for r in results[n])
            total = statistics.median(r[0] + r[1] for r in results[n])
            medians[n] = (user, system, total)
            print(f"{n:10s} user {user:6.2f} us  kernel {system:6.2f} us  total {total:6.2f} us per request")
        floor = medians["null"][2]
        for n in ("gatehouse", "nginx"):
            print(f"{n} over floor = {medians[n][2] / floor:.3f}  (kernel alone {medians[n][1] / floor:.3f})")
    finally:
        for p in procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
            p.wait()


if __name__ == "__main__":
    main()
