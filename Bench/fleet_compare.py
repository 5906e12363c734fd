#!/usr/bin/env python3
"""Failover comparison: Gatehouse vs nginx vs HAProxy in front of a fleet of three backends.

Three backend instances (one nginx process each, one worker, answering 200 '{"id":1,"name":"hoge"}')
on 127.0.0.1:19201-19203. For each proxy, wrk runs over /users/0 … /users/99 for --seconds; after
--fault-at seconds the second backend fails in one of two ways (--mode both runs both, in turn):
  kill   SIGKILL: its connections are reset and new ones refused
  stop   SIGSTOP: a black hole (the kernel still accepts connections into the listen backlog, nothing
         answers); it gets SIGCONT and is killed after the run
The backends are started afresh before each proxy's run, so every proxy meets the same situation.
Prints per mode and proxy: requests, failed (non-2xx + wrk socket errors: connect, read, write,
timeout), failed % (of requests + connect/read/write errors), rps and p99; then per mode the rps
ratios Gatehouse/nginx and Gatehouse/HAProxy and the failed counts side by side.
All proxies: one worker (thread), connect and response timeouts 1 s, keep-alive to the backends.
  gatehouse  servers = the three backends (least_request), retry 3 tries on connect, reset, timeout,
             502-504; outlier ejection after 3 failures in a row for 10 s; envelope off, no cache
  nginx      round robin, proxy_next_upstream error timeout (passive max_fails 1 / 10 s by default)
  haproxy    leastconn, retries 2 + option redispatch, HTTP health checks every 1 s (fall 2, rise 2;
             an HTTP check, as a TCP one passes against a stopped process whose kernel accepts)
Exits 0 whatever the numbers (it is a measurement); 1 when a process does not start or answer
(the temp dir with the logs is then kept, as with --keep); 130 on Ctrl-C or SIGTERM. Every process
it started is ended on the way out (a stopped backend gets SIGCONT first).
Needs wrk, nginx and haproxy (Debian packages of those names).
Usage (from the project root, after `swift build -c release`):
    Bench/fleet_compare.py --bin .build/release/gatehouse [--mode both] [--seconds 10] [--fault-at 3]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import wait  # noqa: E402

BACKENDS = [19201, 19202, 19203]
FAULTY = 1  # index in BACKENDS of the instance that fails: the second
P = dict(gatehouse=19210, nginx=19211, haproxy=19212, admin=19214)
PROXIES = ("gatehouse", "nginx", "haproxy")
ADMIN_TOKEN = "fleet-admin"
BODY = '{"id":1,"name":"hoge"}'
LUA = 'counter = 0\nrequest = function()\n  counter = counter + 1\n  return wrk.format("GET", "/users/" .. (counter % 100))\nend\n'


class StartFailure(Exception):
    pass


def busy(port):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def parse_wrk(out):
    def num(pattern, default=0):
        m = re.search(pattern, out)
        return int(m.group(1)) if m else default
    requests = num(r"(\d+) requests in")
    non2xx = num(r"Non-2xx or 3xx responses: (\d+)")
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    connect, read, write, timeout = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    p99ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)] if p99 else None
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    failed = non2xx + connect + read + write + timeout
    return dict(requests=requests, failed=failed, attempts=requests + connect + read + write,
                non2xx=non2xx, errors=dict(connect=connect, read=read, write=write, timeout=timeout),
                rps=float(rps.group(1)) if rps else 0.0, p99_ms=p99ms)


def check_tools(args):
    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool):
            raise StartFailure(f"{tool} not found (Debian package {tool})")
    v = subprocess.run(["haproxy", "-v"], capture_output=True, text=True)
    if v.returncode != 0:
        raise StartFailure(f"haproxy -v failed:\n{v.stdout}{v.stderr}")
    if not os.access(args.bin, os.X_OK):
        raise StartFailure(f"{args.bin} is not an executable")


def run(args):
    check_tools(args)
    d = tempfile.mkdtemp(prefix="gh-fleet-"); os.chmod(d, 0o755)
    procs = {}
    keep = args.keep
    try:
        measure(args, d, procs)
    except StartFailure:
        keep = True  # the message names a log in it
        raise
    finally:
        for name in list(procs):
            stop(procs, name, signal.SIGKILL if name == "wrk" else signal.SIGTERM)
        if keep:
            print(f"logs, configs and wrk output in {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)


def signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def stop(procs, name, sig=signal.SIGTERM):
    """Ends the process group `name` started; SIGCONT first, as a stopped process cannot act on SIGTERM."""
    p = procs.pop(name, None)
    if p:
        signal_group(p, signal.SIGCONT)
        signal_group(p, sig)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            signal_group(p, signal.SIGKILL); p.wait()


def measure(args, d, procs):
    os.makedirs(f"{d}/temp"); os.chmod(f"{d}/temp", 0o777)  # nginx workers run as an unprivileged user
    open(f"{d}/paths.lua", "w").write(LUA)

    def start(name, argv, port):
        if busy(port):
            raise StartFailure(f"127.0.0.1:{port} is already in use (needed by {name})")
        procs[name] = subprocess.Popen(argv, stdout=open(f"{d}/{name}.log", "a"), stderr=subprocess.STDOUT,
                                       start_new_session=True)
        if not wait(port):
            raise StartFailure(f"{name} did not start ({d}/{name}.log)")

    def ngx(name, port, body):
        open(f"{d}/{name}.conf", "w").write(
            f"worker_processes 1; daemon off; pid {d}/{name}.pid; error_log {d}/{name}-e.log;"
            f" events {{ worker_connections 8192; }}"
            f" http {{ access_log off; client_body_temp_path {d}/temp; proxy_temp_path {d}/temp; {body} }}\n")
        start(name, ["nginx", "-e", f"{d}/{name}-e.log", "-c", f"{d}/{name}.conf"], port)

    def backends():
        for i, port in enumerate(BACKENDS):
            ngx(f"backend{i + 1}", port, f"server {{ listen 127.0.0.1:{port};"
                                         f" location / {{ default_type application/json; return 200 '{BODY}'; }} }}")

    servers = [f"127.0.0.1:{port}" for port in BACKENDS]
    cfg = {"listen": [{"address": f"127.0.0.1:{P['gatehouse']}"}], "workers": 1,
           "admin": {"listen": f"127.0.0.1:{P['admin']}", "token": ADMIN_TOKEN},
           "store": {"path": f"{d}/gh.sqlite"},
           "log": {"level": "warn", "access": "off"},
           "upstreams": {"api": {"url": f"http://{servers[0]}", "servers": [{"address": s} for s in servers],
                                 "connect_timeout_ms": 1000, "response_timeout_ms": 1000,
                                 "retry": {"attempts": 3, "on": ["connect", "reset", "timeout", "502", "503", "504"]},
                                 "outlier": {"failures": 3, "eject_ms": 10000}}},
           "routes": [{"name": "users", "match": {"path": "/users/*"}, "upstream": "api",
                       "envelope": {"enabled": False}}]}
    json.dump(cfg, open(f"{d}/gh.json", "w"), indent=1)
    chk = subprocess.run([args.bin, "check", "--config", f"{d}/gh.json"], capture_output=True, text=True)
    if chk.returncode != 0:
        raise StartFailure(f"gatehouse check --config {d}/gh.json failed:\n{chk.stdout}{chk.stderr}")
    for line in chk.stdout.splitlines():
        if "warning" in line:
            print(f"gatehouse check: {line}", file=sys.stderr)

    haproxy_cfg = "\n".join([
        "global", "  nbthread 1", "  maxconn 8192",
        "defaults", "  mode http", "  timeout connect 1s", "  timeout server 1s", "  timeout client 30s",
        "  retries 2", "  option redispatch", "  http-reuse safe",
        "frontend front", f"  bind 127.0.0.1:{P['haproxy']}", "  default_backend api",
        "backend api", "  balance leastconn", "  option httpchk GET /users/0",
        *[f"  server b{i + 1} {s} check inter 1s fall 2 rise 2" for i, s in enumerate(servers)], ""])
    open(f"{d}/haproxy.cfg", "w").write(haproxy_cfg)

    def start_proxy(proxy):
        if proxy == "gatehouse":
            start("gatehouse", [args.bin, "serve", "--config", f"{d}/gh.json"], P["gatehouse"])
        elif proxy == "nginx":
            ngx("nginx", P["nginx"], "upstream api { " + " ".join(f"server {s};" for s in servers) + " keepalive 64; }"
                f" server {{ listen 127.0.0.1:{P['nginx']}; location / {{ proxy_pass http://api;"
                f" proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_next_upstream error timeout;"
                f" proxy_connect_timeout 1s; proxy_read_timeout 1s; }} }}")
        else:
            start("haproxy", ["haproxy", "-db", "-f", f"{d}/haproxy.cfg"], P["haproxy"])
        for i in range(10):  # every proxy answers like the backend before the run
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{P[proxy]}/users/{i}", timeout=5) as r:
                    got = (r.status, r.read().decode())
            except Exception as e:  # noqa: BLE001 (any failure here means the proxy does not work)
                got = (None, repr(e))
            if got != (200, BODY):
                raise StartFailure(f"{proxy} answered /users/{i} with {got} ({d}/{proxy}.log)")

    for mode in (["kill", "stop"] if args.mode == "both" else [args.mode]):
        results = {}
        for proxy in PROXIES:
            print(f"{mode} {proxy}: running", file=sys.stderr, flush=True)
            backends()
            start_proxy(proxy)
            time.sleep(1.5)
            procs["wrk"] = wrk = subprocess.Popen(
                ["wrk", "-t1", "-c64", f"-d{args.seconds}s", "--latency", "--timeout", "10s",
                 "-s", f"{d}/paths.lua", f"http://127.0.0.1:{P[proxy]}"],
                stdout=subprocess.PIPE, text=True, start_new_session=True)
            time.sleep(args.fault_at)
            faulty = procs[f"backend{FAULTY + 1}"]
            signal_group(faulty, signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
            out = wrk.communicate()[0]
            procs.pop("wrk", None)
            open(f"{d}/wrk-{mode}-{proxy}.txt", "w").write(out)
            if proxy == "gatehouse":  # what the gateway made of it, kept for --keep
                try:
                    rq = urllib.request.Request(f"http://127.0.0.1:{P['admin']}/admin/upstreams",
                                                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
                    with urllib.request.urlopen(rq, timeout=5) as resp:
                        open(f"{d}/upstreams-{mode}.json", "wb").write(resp.read())
                except Exception as e:  # noqa: BLE001
                    open(f"{d}/upstreams-{mode}.json", "w").write(repr(e))
            stop(procs, proxy)
            stop(procs, f"backend{FAULTY + 1}", signal.SIGKILL)  # SIGCONT first, then killed
            for i in range(len(BACKENDS)):
                stop(procs, f"backend{i + 1}")
            results[proxy] = parse_wrk(out)
            report(mode, proxy, results[proxy])
            time.sleep(0.5)
        summary(mode, results)


def report(mode, proxy, r):
    p99 = f"{r['p99_ms']:.2f}" if r["p99_ms"] is not None else "n/a"
    e = r["errors"]
    print(f"{mode:4} {proxy:9} requests {r['requests']:>8}  failed {r['failed']:>6}"
          f" ({100.0 * r['failed'] / max(1, r['attempts']):.3f} %)  rps {r['rps']:>9.0f}  p99 {p99:>8} ms"
          f"  [non-2xx {r['non2xx']}, connect {e['connect']}, read {e['read']}, write {e['write']},"
          f" timeout {e['timeout']}]", flush=True)


def summary(mode, results):
    g = results["gatehouse"]

    def ratio(other):
        o = results[other]["rps"]
        return f"{g['rps'] / o:.3f}" if o else "n/a"
    print(f"{mode:4} ratio rps gatehouse/nginx = {ratio('nginx')}; ratio rps gatehouse/haproxy = {ratio('haproxy')};"
          f" failed gatehouse {g['failed']} vs nginx {results['nginx']['failed']}"
          f" vs haproxy {results['haproxy']['failed']}", flush=True)


def on_sigterm(*_):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the gatehouse binary")
    ap.add_argument("--mode", choices=["both", "kill", "stop"], default="both")
    ap.add_argument("--seconds", type=int, default=10, help="length of each wrk run")
    ap.add_argument("--fault-at", type=float, default=3, help="seconds into the run the second backend fails")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs, wrk output, "
                                                         "Gatehouse's /admin/upstreams after each run)")
    a = ap.parse_args()
    if not 0 <= a.fault_at < a.seconds:
        ap.error("--fault-at must be within the run (0 <= fault-at < seconds)")
    # SIGTERM ends the run like Ctrl-C: the finally block stops every process started
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        run(a)
    except StartFailure as e:
        print(f"fleet_compare: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
