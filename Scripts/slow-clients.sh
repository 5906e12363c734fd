#!/usr/bin/env bash
# Slow clients against a release build: [connections] (default 2000) slow connections for
# [seconds] (default 60) — half send their head one byte a second (slowloris), a quarter
# trickle a body with gaps longer than the idle timeout, a quarter pipeline requests for big
# answers and never read — while wrk sends normal traffic. Each slow connection that is cut
# is opened again. Prints the served ratio and latency of the normal requests, how and when
# the slow ones were cut, and the gateway's memory and descriptors; exits non-zero when
# fewer than 99.9 % of normal requests were served, a slow connection was never cut, or the
# gateway died.
#
#   Scripts/slow-clients.sh [connections] [seconds]
#   GATEHOUSE_BIN=path/to/gatehouse  skips the build
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
connections="${1:-2000}"
seconds="${2:-60}"
# shellcheck source=Scripts/lib/reliability.sh
. "$root/Scripts/lib/reliability.sh"
rel_setup slow-clients
rel_build_release
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

mkdir -p "$work/www"
printf '{"id":1,"name":"item"}\n' >"$work/www/item.json"
head -c 262144 /dev/zero | tr '\0' 'b' >"$work/www/big.bin"
backend_port=$(rel_free_port)
rel_start_nginx "$backend_port"

cat >"$work/gatehouse.json" <<JSON
{
  "listen": [{ "address": "127.0.0.1:0" }],
  "workers": 0,
  "admin": { "listen": "127.0.0.1:0", "token": "slow-clients-admin" },
  "store": { "path": "$work/store.sqlite" },
  "limits": { "max_connections": 20000, "header_timeout_ms": 2000, "idle_timeout_ms": 2000 },
  "upstreams": { "api": { "url": "http://127.0.0.1:$backend_port", "response_timeout_ms": 5000 } },
  "routes": [ { "name": "all", "match": { "path": "/*" }, "upstream": "api", "envelope": { "enabled": false } } ],
  "log": { "level": "info", "access": "off", "format": "json" }
}
JSON
rel_start_gateway "$work/gatehouse.json"
rel_children="$gateway_pid"
echo "gateway $gateway (pid $gateway_pid), nginx on $backend_port; $connections slow connections for $seconds s"
base_rss=$(rel_rss_kb "$gateway_pid")
base_fds=$(rel_fds "$gateway_pid")

cat >"$work/slow.py" <<'PY'
import asyncio, json, sys, time

host, port = sys.argv[1].rsplit(":", 1)
count, duration = int(sys.argv[2]), float(sys.argv[3])
stats = {"opened": 0, "cut": 0, "refused": 0, "408": 0, "never_cut": 0, "cut_after": []}

async def read_until_cut(reader, limit):
    """Reads until EOF or reset; True when the gateway ended the connection within limit."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            data = await asyncio.wait_for(reader.read(65536), timeout=0.5)
        except asyncio.TimeoutError:
            continue
        except (ConnectionError, OSError):
            return True
        if not data:
            return True
        if data.startswith(b"HTTP/1.1 408"):
            stats["408"] += 1
    return False

async def one(kind, stop_at):
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            stats["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        start = time.monotonic()
        cut = False
        try:
            if kind == "head":
                writer.write(b"GET /item.json HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while time.monotonic() < stop_at and not cut:
                    writer.write(b"s")
                    await writer.drain()
                    try:
                        data = await asyncio.wait_for(reader.read(4096), timeout=1.0)
                        if data.startswith(b"HTTP/1.1 408"):
                            stats["408"] += 1
                        cut = not data or await read_until_cut(reader, 5)
                    except asyncio.TimeoutError:
                        pass
            elif kind == "body":
                writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nb")
                while time.monotonic() < stop_at and not cut:
                    await writer.drain()
                    try:
                        data = await asyncio.wait_for(reader.read(4096), timeout=3.0)
                        cut = not data or await read_until_cut(reader, 5)
                    except asyncio.TimeoutError:
                        writer.write(b"b")
            else:
                writer.write(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
                await writer.drain()
                # Never reads for 3 idle timeouts, then drains what is left: it must end.
                await asyncio.sleep(min(6.0, max(0.0, stop_at - time.monotonic())))
                if time.monotonic() < stop_at:
                    cut = await read_until_cut(reader, 10)
        except (ConnectionError, OSError):
            cut = True
        if cut:
            stats["cut"] += 1
            stats["cut_after"].append(time.monotonic() - start)
        elif time.monotonic() - start > 8:
            stats["never_cut"] += 1
        writer.close()
        await asyncio.sleep(0.1)

async def main():
    stop_at = time.monotonic() + duration
    kinds = ["head", "head", "body", "nonreader"]
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(one(kinds[i % 4], stop_at)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    cuts = sorted(stats["cut_after"])
    pick = lambda q: round(cuts[min(len(cuts) - 1, int(q * len(cuts)))], 2) if cuts else None
    del stats["cut_after"]
    stats["cut_after_p50_s"] = pick(0.5)
    stats["cut_after_p99_s"] = pick(0.99)
    print(json.dumps(stats))

asyncio.run(main())
PY

# RSS and descriptors every second.
(
  while kill -0 "$gateway_pid" 2>/dev/null; do
    echo "$(rel_rss_kb "$gateway_pid") $(rel_fds "$gateway_pid")"
    sleep 1
  done
) >"$work/samples" &
rel_children="$rel_children $!"

python3 "$work/slow.py" "$gateway" "$connections" "$seconds" >"$work/slow.json" &
slow_pid=$!
rel_children="$rel_children $slow_pid"
sleep 3  # the slow connections open first
wrk -t1 -c16 -d"$((seconds - 5))s" --latency "http://$gateway/item.json" >"$work/wrk.txt" 2>&1 || true
wait "$slow_pid" || true

alive=yes
kill -0 "$gateway_pid" 2>/dev/null || alive=no
requests=$(awk '/requests in/ { print $1 }' "$work/wrk.txt")
non2xx=$(awk '/Non-2xx/ { print $NF }' "$work/wrk.txt")
errors=$(awk -F'[ ,]+' '/Socket errors/ { print $4 + $6 + $8 + $10 }' "$work/wrk.txt")
p99=$(awk '$1 == "99%" { print $2 }' "$work/wrk.txt")
served=$((${requests:-0} - ${non2xx:-0} - ${errors:-0}))
ratio=$(awk -v s="$served" -v r="${requests:-0}" 'BEGIN { if (r == 0) print 0; else printf "%.4f", 100 * s / r }')
peak_rss=$(sort -n "$work/samples" | tail -1 | cut -d' ' -f1)
peak_fds=$(sort -n -k2 "$work/samples" | tail -1 | cut -d' ' -f2)
end_rss=$(rel_rss_kb "$gateway_pid")
sleep 3
end_fds=$(rel_fds "$gateway_pid")

echo "normal requests: ${requests:-0} sent, $served served (${ratio} %), p99 latency ${p99:-?}"
echo "slow connections: $(cat "$work/slow.json")"
echo "gateway RSS: start $((base_rss / 1024)) MiB, peak $((peak_rss / 1024)) MiB, end $((end_rss / 1024)) MiB"
echo "gateway descriptors: start $base_fds, peak $peak_fds, 3 s after the end $end_fds"
echo "gateway alive: $alive"

never_cut=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["never_cut"])' "$work/slow.json")
if [ "$alive" != yes ] || [ "${requests:-0}" -eq 0 ] || [ "$never_cut" -gt 0 ] \
  || awk -v r="$ratio" 'BEGIN { exit !(r < 99.9) }'; then
  echo "slow-clients: FAILED"
  exit 1
fi
echo "slow-clients: passed"
