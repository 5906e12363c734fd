#!/usr/bin/env bash
# kill -9 of a release gateway during heavy store writes, [runs] times (default 200) on the
# same store file. Each run: start the gateway in front of nginx, drive cache writes with
# wrk (every request a new cache key), kill -9 after a random 50–1000 ms; then start a
# gateway on the same store with the backend unreachable and check that it opened the store
# without repairing it and serves the anchor entry (stored before the first run) as STALE;
# The keys cycle through 20 000 paths and the body changes every run, so rows are inserted
# and rewritten while the store stays under max_bytes (no eviction of the anchor).
# then check the file with the store crash writer's verify mode (integrity_check, and that
# opening needed no repair). Exits non-zero on the first failed run.
#
#   Scripts/crash-loop.sh [runs]
#   GATEHOUSE_BIN=... GATEHOUSE_CRASH_WRITER=...  skip the build
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
runs="${1:-200}"
# shellcheck source=Scripts/lib/reliability.sh
. "$root/Scripts/lib/reliability.sh"
rel_setup crash-loop
rel_build_release

mkdir -p "$work/www"
pad=$(head -c 1000 /dev/zero | tr '\0' 'p')
printf '{"run":0,"pad":"%s"}\n' "$pad" >"$work/www/item.json"
backend_port=$(rel_free_port)
rel_start_nginx "$backend_port"
down_port=$(rel_free_port)
store="$work/store.sqlite"

write_config() {
  cat >"$2" <<JSON
{
  "listen": [{ "address": "127.0.0.1:0" }],
  "workers": 2,
  "admin": { "listen": "127.0.0.1:0", "token": "crash-loop-admin" },
  "store": { "path": "$store", "max_bytes": 67108864 },
  "upstreams": { "api": { "url": "http://127.0.0.1:$1", "response_timeout_ms": 2000, "connect_timeout_ms": 500 } },
  "routes": [ { "name": "cached", "match": { "path": "/cached/*" }, "upstream": "api",
                "cache": { "stale_if_error_s": 86400 } } ],
  "log": { "level": "info", "access": "off", "format": "json" }
}
JSON
}
write_config "$backend_port" "$work/up.json"
write_config "$down_port" "$work/down.json"
printf 'Authorization: Bearer crash-loop-admin\n' >"$work/auth"

cat >"$work/unique.lua" <<'LUA'
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "/cached/w/" .. ((counter * 7919 + math.random(1, 20000)) % 20000))
end
LUA

# The anchor, stored by a gateway that stops cleanly.
rel_start_gateway "$work/up.json"
curl -fsS -o /dev/null "http://$gateway/cached/anchor"
tries=0
until curl -fsS -H @"$work/auth" "http://$admin/admin/cache/entries?prefix=/cached/anchor" | grep -q '"id"'; do
  tries=$((tries + 1))
  [ "$tries" -lt 100 ] || { echo "the anchor was never stored" >&2; exit 1; }
  sleep 0.1
done
kill "$gateway_pid"
wait "$gateway_pid"

killed_writing=0
for run in $(seq 1 "$runs"); do
  printf '{"run":%d,"pad":"%s"}\n' "$run" "$pad" >"$work/www/item.json.new"
  mv "$work/www/item.json.new" "$work/www/item.json"
  chmod a+r "$work/www/item.json"
  rel_start_gateway "$work/up.json" "$work/run.log"
  wrk -t1 -c4 -d5s -s "$work/unique.lua" "http://$gateway" >"$work/wrk.txt" 2>&1 &
  wrk_pid=$!
  sleep "$(awk -v seed="$RANDOM$run" 'BEGIN { srand(seed); printf "%.3f", 0.05 + rand() * 0.95 }')"
  writes=$(curl -fsS -H @"$work/auth" "http://$admin/admin/cache" 2>/dev/null \
    | sed -n 's/.*"writes":\([0-9]*\).*/\1/p' || true)
  kill -9 "$gateway_pid"
  wait "$gateway_pid" 2>/dev/null || true
  kill "$wrk_pid" 2>/dev/null || true
  wait "$wrk_pid" 2>/dev/null || true
  [ "${writes:-0}" -gt 0 ] && killed_writing=$((killed_writing + 1))

  rel_start_gateway "$work/down.json" "$work/next.log"
  headers=$(curl -sS -D - -o "$work/body" "http://$gateway/cached/anchor" || true)
  kill "$gateway_pid"
  wait "$gateway_pid" || { echo "run $run: the next gateway did not exit cleanly" >&2; exit 1; }
  if ! grep -qi '^X-Gatehouse-Cache: STALE' <<<"$headers" || ! grep -q '"pad"' "$work/body"; then
    echo "run $run: no stale anchor; headers:" >&2
    echo "$headers" >&2
    exit 1
  fi
  if grep -q 'moved it to' "$work/next.log"; then
    echo "run $run: the store had to be replaced:" >&2
    grep 'moved it to' "$work/next.log" >&2
    exit 1
  fi
  if ! result=$("$crash_writer" verify "$store" 0 -1 2>&1); then
    echo "run $run: verify failed: $result" >&2
    exit 1
  fi
  if [ $((run % 20)) -eq 0 ]; then
    echo "run $run: ok (store $(du -k "$store" | cut -f1) KiB, ${writes:-0} writes before the kill)"
  fi
done

echo "crash loop: $runs kill -9 runs passed ($killed_writing killed after store writes had begun)"
