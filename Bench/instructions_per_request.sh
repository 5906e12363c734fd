#!/bin/sh
# Instructions per proxied request (user space), counted by valgrind's callgrind, nginx
# as the backend, wrk -t1 -c16 as the load. Scenarios (SCENARIO=…, as in side_by_side.py):
#   pass      a pass-through GET with a static token and a header rule (the default)
#   envelope  the answer wrapped in the envelope and kept in the store (stale_if_error)
#   stale     the same route with the backend stopped: answers from the store
#   fresh     the envelope route with 1 s freshness (`fresh_s: 1`): answers from the store
#             while fresh, the backend asked about once a second (cpu_per_request.py's
#             `--scenario envelope`)
#   h2        the pass route over HTTP/2 (h2c prior knowledge), h2load -c16 -m10 as the load
#   jwt       the pass route verifying ES256 client JWTs (64 tokens, one per simulated client,
#             round-robin: verified once each, then found in the loop's cache), `sub` forwarded
#   jwtpass   the pass route getting the same requests as `jwt` (the token dropped): the
#             difference between the two is the cost of a JWT check (Debian python3-jwt)
#   collapsed the envelope route with a slow backend (nginx's limit_rate): most requests
#             wait for another's exchange, as under side_by_side.py's load. How many share
#             one depends on timing, so compare the per-call cost of the waiter's functions
#             (PROFILES, callgrind_annotate --inclusive=yes) rather than the total.
# Unlike CPU time, the count does not move with the machine's load, so two builds can be
# compared on a busy machine and a 1% difference is real.
#
# Usage: [SCENARIO=pass|envelope|stale|fresh|collapsed|h2|jwt|jwtpass] [PROFILES=dir] Bench/instructions_per_request.sh BIN [BIN ...]
# With PROFILES, each run's callgrind profile is kept there (for callgrind_annotate).
# Needs valgrind, nginx, wrk, curl (h2load for h2). Debug info is stripped from a copy of each binary
# first (valgrind 3.19 cannot read Swift's DWARF 5).
set -eu
PORT=19940
SCENARIO=${SCENARIO:-pass}
case "$SCENARIO" in
pass | h2 | jwtpass) ROUTE='"token":"t","envelope":{"enabled":false}' ;;
jwt) ROUTE='"token":"t","envelope":{"enabled":false},"jwt":{"provider":"app"}' ;;
envelope | stale | collapsed) ROUTE='"envelope":{"enabled":true},"cache":{"stale_if_error_s":86400}' ;;
fresh) ROUTE='"envelope":{"enabled":true},"cache":{"fresh_s":1,"stale_if_error_s":86400}' ;;
*) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
BODY='{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
RATE=""
[ "$SCENARIO" = collapsed ] && RATE="limit_rate 4k;"
for BIN in "$@"; do
  D=$(mktemp -d)
  chmod 755 "$D"
  strip --strip-debug -o "$D/gatehouse" "$BIN"
  cat >"$D/backend.conf" <<EOC
worker_processes 1; daemon off; pid $D/b.pid; error_log $D/b.err;
events { worker_connections 4096; }
http { access_log off; $RATE server { listen 127.0.0.1:$PORT; keepalive_requests 1000000;
location / { default_type application/json; return 200 '$BODY'; } } }
EOC
  JWT=""
  LOAD=""
  case "$SCENARIO" in
  jwt | jwtpass)
    MINT="$(dirname "$0")/../Tests/Tools/jwtmint.py"
    JWK=$(/usr/bin/python3 "$MINT" keys "$D" ec256 k1)
    JWT=',"jwt":{"providers":{"app":{"keys":{"keys":['"$JWK"']},"forward_claims":{"sub":"X-User-Id"}}}}'
    EXP=$(($(date +%s) + 3600))
    {
      printf 'local tokens = {'
      for I in $(seq 1 64); do
        printf '"%s",' "$(/usr/bin/python3 "$MINT" sign "$D/k1.pem" ES256 k1 "{\"sub\":\"user-$I\",\"exp\":$EXP}")"
      done
      printf '}\nlocal n = 0\nrequest = function()\n  n = n %% #tokens + 1\n'
      printf '  return wrk.format("GET", "/users", {["Authorization"] = "Bearer " .. tokens[n]})\nend\n'
    } >"$D/tokens.lua"
    LOAD="-s $D/tokens.lua"
    ;;
  esac
  cat >"$D/g.json" <<EOC
{"listen":[{"address":"127.0.0.1:$((PORT + 1))","h2c":true}],"workers":1,
"admin":{"listen":"127.0.0.1:$((PORT + 2))","token":"bench-admin-token"},
"store":{"path":"$D/s.sqlite"},"log":{"access":"off"},
"upstreams":{"api":{"url":"http://127.0.0.1:$PORT","max_idle_connections":128}},
"tokens":{"t":{"type":"static","value":"bench-token"}},"headers":{"set":{"Accept":"application/json"}},
"routes":[{"name":"r","match":{"path":"/*"},"upstream":"api",$ROUTE}]$JWT}
EOC
  nginx -c "$D/backend.conf" &
  NGINX=$!
  # Counting starts after a warm-up: start-up and the first connections are not per request.
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$D/cg.out" \
    "$D/gatehouse" serve --config "$D/g.json" >/dev/null 2>"$D/valgrind.err" &
  GATEHOUSE=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$((PORT + 1))/users" && break
    sleep 0.3
  done
  # shellcheck disable=SC2086 # LOAD is empty or two words
  wrk -t1 -c16 -d3s $LOAD "http://127.0.0.1:$((PORT + 1))/users" >/dev/null
  if [ "$SCENARIO" = stale ]; then
    kill "$NGINX"
    wait "$NGINX" 2>/dev/null || true
    wrk -t1 -c16 -d2s "http://127.0.0.1:$((PORT + 1))/users" >/dev/null
  fi
  callgrind_control -i on "$GATEHOUSE" >/dev/null 2>&1
  if [ "$SCENARIO" = h2 ]; then
    REQUESTS=$(h2load -c16 -m10 -D8 "http://127.0.0.1:$((PORT + 1))/users" | awk '/^requests:/ {print $8}')
  else
    # shellcheck disable=SC2086
    REQUESTS=$(wrk -t1 -c16 -d8s $LOAD "http://127.0.0.1:$((PORT + 1))/users" | awk '/requests in/ {print $1}')
  fi
  callgrind_control -i off "$GATEHOUSE" >/dev/null 2>&1
  callgrind_control -d "$GATEHOUSE" >/dev/null 2>&1
  sleep 1
  INSTRUCTIONS=$(cat "$D"/cg.out* | awk '/^totals:/ {s += $2} END {print s}')
  echo "$BIN ($SCENARIO): $REQUESTS requests, $(echo "$INSTRUCTIONS $REQUESTS" | awk '{printf "%.0f", $1 / $2}') instructions per request"
  if [ -n "${PROFILES:-}" ]; then
    mkdir -p "$PROFILES"
    cat "$D"/cg.out.1 >"$PROFILES/$(basename "$BIN")-$SCENARIO.callgrind"
  fi
  kill "$GATEHOUSE" "$NGINX" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$D"
done
