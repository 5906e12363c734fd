#!/usr/bin/env bash
# Soak test of a release gateway for [minutes] (default 10): wrk on a pass-through route and
# on an enveloped cached route whose token comes from a local OAuth2 server handing out
# 30-second tokens (so the gateway refreshes every few seconds); admin calls every second,
# POST /admin/reload every 5 s, and a stale period every 60 s (nginx stopped for 5 s, then
# started again). The gateway's RSS and open descriptors go to a CSV every 10 s. At the
# end it prints the growth after warm-up (first minute, or the first fifth of a longer run):
# the median of the last three samples against the median of the first three after warm-up.
# Exits non-zero when either grew more than 5 %, or the gateway died.
#
#   Scripts/soak.sh [minutes]
#   GATEHOUSE_BIN=path/to/gatehouse  skips the build; SOAK_CSV=file keeps the samples there
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
minutes="${1:-10}"
seconds=$((minutes * 60))
# shellcheck source=Scripts/lib/reliability.sh
. "$root/Scripts/lib/reliability.sh"
rel_setup soak
rel_build_release
csv="${SOAK_CSV:-$work/soak.csv}"

mkdir -p "$work/www"
printf '{"id":1,"name":"item","tags":["a","b","c"]}\n' >"$work/www/item.json"
backend_port=$(rel_free_port)
rel_start_nginx "$backend_port"

# The OAuth2 token endpoint: a new short-lived token for every form POST.
oauth_port=$(rel_free_port)
cat >"$work/oauth.py" <<'PY'
import json, secrets, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"access_token": secrets.token_hex(16), "token_type": "Bearer", "expires_in": 30}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print("token issued", flush=True)
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY
python3 -u "$work/oauth.py" "$oauth_port" >"$work/oauth.log" 2>&1 &
rel_children="$!"
rel_wait_for_port "$oauth_port"

cat >"$work/gatehouse.json" <<JSON
{
  "listen": [{ "address": "127.0.0.1:0" }],
  "workers": 0,
  "admin": { "listen": "127.0.0.1:0", "token": "soak-admin" },
  "store": { "path": "$work/store.sqlite", "max_bytes": 16777216 },
  "upstreams": { "api": { "url": "http://127.0.0.1:$backend_port", "response_timeout_ms": 3000,
                          "connect_timeout_ms": 500 } },
  "tokens": { "partner": { "type": "oauth2_client_credentials",
                           "token_url": "http://127.0.0.1:$oauth_port/oauth/token",
                           "client_id": "gw", "client_secret": "soak-secret", "refresh_before_s": 20 } },
  "routes": [
    { "name": "pass", "match": { "path": "/pass/*" }, "upstream": "api", "path": "/*",
      "envelope": { "enabled": false } },
    { "name": "api", "match": { "path": "/api/*" }, "upstream": "api", "path": "/*", "token": "partner",
      "cache": { "stale_if_error_s": 3600 } }
  ],
  "log": { "level": "info", "access": "off", "format": "json" }
}
JSON
printf 'Authorization: Bearer soak-admin\n' >"$work/auth"
rel_start_gateway "$work/gatehouse.json"
renice -n 10 -p "$gateway_pid" >/dev/null
echo "soak: $minutes min; gateway $gateway (pid $gateway_pid), admin $admin, nginx $backend_port, oauth $oauth_port"

nice -n 10 wrk -t1 -c8 -d"${seconds}s" "http://$gateway/pass/item.json" >"$work/wrk-pass.txt" 2>&1 &
wrk_pass=$!
nice -n 10 wrk -t1 -c8 -d"${seconds}s" "http://$gateway/api/item.json" >"$work/wrk-api.txt" 2>&1 &
wrk_api=$!
rel_children="$rel_children $wrk_pass $wrk_api"

admin_call() {
  curl -sS -m 5 -o /dev/null -w '%{http_code}' -H @"$work/auth" "$@" || echo 000
}

echo "elapsed_s,rss_kb,fds" >"$csv"
start=$(date +%s)
reloads=0
reload_failures=0
admin_failures=0
stale_periods=0
paths=(/admin/status /admin/cache /admin/tokens /metrics /admin/upstreams "/admin/cache/entries?limit=5")
tick=0
while :; do
  now=$(date +%s)
  elapsed=$((now - start))
  [ "$elapsed" -lt "$seconds" ] || break
  kill -0 "$gateway_pid" 2>/dev/null || { echo "soak: the gateway died" >&2; break; }
  if [ $((tick % 10)) -eq 0 ]; then
    echo "$elapsed,$(rel_rss_kb "$gateway_pid"),$(rel_fds "$gateway_pid")" >>"$csv"
  fi
  code=$(admin_call "http://$admin${paths[$((tick % ${#paths[@]}))]}")
  [ "$code" = 200 ] || admin_failures=$((admin_failures + 1))
  if [ $((tick % 5)) -eq 4 ]; then
    reloads=$((reloads + 1))
    [ "$(admin_call -X POST "http://$admin/admin/reload")" = 200 ] || reload_failures=$((reload_failures + 1))
  fi
  if [ $((tick % 60)) -eq 30 ]; then
    stale_periods=$((stale_periods + 1))
    rel_stop_nginx
  elif [ $((tick % 60)) -eq 35 ]; then
    rel_start_nginx "$backend_port"
  fi
  tick=$((tick + 1))
  sleep 1
done
[ -n "$nginx_pid" ] || rel_start_nginx "$backend_port"
alive=yes
kill -0 "$gateway_pid" 2>/dev/null || alive=no
# wrk stops by itself at the end of its duration.
wait "$wrk_pass" "$wrk_api" || true

warmup=$((seconds / 5 > 60 ? seconds / 5 : 60))
summary=$(awk -F, -v warmup="$warmup" '
  NR > 1 && $1 >= warmup { n++; rss[n] = $2; fds[n] = $3 }
  function median3(a, i,  x, y, z, t) {
    x = a[i]; y = a[i + 1]; z = a[i + 2]
    if (x > y) { t = x; x = y; y = t }
    if (y > z) { t = y; y = z; z = t }
    if (x > y) { t = x; x = y; y = t }
    return y
  }
  END {
    if (n < 6) { print "too-few-samples"; exit }
    r0 = median3(rss, 1); r1 = median3(rss, n - 2); f0 = median3(fds, 1); f1 = median3(fds, n - 2)
    printf "%d %d %.2f %d %d %.2f %d\n", r0, r1, 100 * (r1 - r0) / r0, f0, f1, 100 * (f1 - f0) / f0, n
  }' "$csv")

requests() { awk '/requests in/ { print $1 }' "$1"; }
non2xx() { awk '/Non-2xx/ { print $NF }' "$1"; }
echo "load: pass route $(requests "$work/wrk-pass.txt") requests ($(non2xx "$work/wrk-pass.txt") non-2xx)," \
  "api route $(requests "$work/wrk-api.txt") requests ($(non2xx "$work/wrk-api.txt") non-2xx)"
echo "control: $reloads reloads ($reload_failures failed), $stale_periods stale periods," \
  "$(grep -c 'token issued' "$work/oauth.log") tokens issued, $admin_failures failed admin calls"
echo "samples: $csv"
cat "$csv"
if [ "$summary" = too-few-samples ]; then
  echo "soak: too few samples after the ${warmup} s warm-up for a growth figure (run longer)"
  [ "$alive" = yes ] || exit 1
  exit 0
fi
read -r r0 r1 rg f0 f1 fg n <<<"$summary"
echo "after ${warmup} s warm-up ($n samples): RSS $((r0 / 1024)) -> $((r1 / 1024)) MiB (${rg} %)," \
  "descriptors $f0 -> $f1 (${fg} %)"
echo "gateway alive: $alive"
if [ "$alive" != yes ] || awk -v r="$rg" -v f="$fg" 'BEGIN { exit !(r > 5 || f > 5) }'; then
  echo "soak: FAILED"
  exit 1
fi
echo "soak: passed"
