#!/bin/sh
# Instructions per proxied request (user space), counted by valgrind's callgrind: a
# pass-through GET with a static token, nginx as the backend, wrk -t1 -c16 as the load.
# Unlike CPU time, the count does not move with the machine's load, so two builds can be
# compared on a busy machine and a 1% difference is real.
#
# Usage: Bench/instructions_per_request.sh BIN [BIN ...]   (release builds)
# Needs valgrind, nginx, wrk, curl. Debug info is stripped from a copy of each binary
# first (valgrind 3.19 cannot read Swift's DWARF 5).
set -eu
PORT=19940
BODY='{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
for BIN in "$@"; do
  D=$(mktemp -d)
  chmod 755 "$D"
  strip --strip-debug -o "$D/gatehouse" "$BIN"
  cat >"$D/backend.conf" <<EOC
worker_processes 1; daemon off; pid $D/b.pid; error_log $D/b.err;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$PORT; keepalive_requests 1000000;
location / { default_type application/json; return 200 '$BODY'; } } }
EOC
  cat >"$D/g.json" <<EOC
{"listen":[{"address":"127.0.0.1:$((PORT + 1))"}],"workers":1,
"admin":{"listen":"127.0.0.1:$((PORT + 2))","token":"bench-admin-token"},
"store":{"path":"$D/s.sqlite"},"log":{"access":"off"},
"upstreams":{"api":{"url":"http://127.0.0.1:$PORT","max_idle_connections":128}},
"tokens":{"t":{"type":"static","value":"bench-token"}},"headers":{"set":{"Accept":"application/json"}},
"routes":[{"name":"pass","match":{"path":"/*"},"upstream":"api","token":"t","envelope":{"enabled":false}}]}
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
  wrk -t1 -c16 -d3s "http://127.0.0.1:$((PORT + 1))/users" >/dev/null
  callgrind_control -i on "$GATEHOUSE" >/dev/null 2>&1
  REQUESTS=$(wrk -t1 -c16 -d8s "http://127.0.0.1:$((PORT + 1))/users" | awk '/requests in/ {print $1}')
  callgrind_control -i off "$GATEHOUSE" >/dev/null 2>&1
  callgrind_control -d "$GATEHOUSE" >/dev/null 2>&1
  sleep 1
  INSTRUCTIONS=$(cat "$D"/cg.out* | awk '/^totals:/ {s += $2} END {print s}')
  echo "$BIN: $REQUESTS requests, $(echo "$INSTRUCTIONS $REQUESTS" | awk '{printf "%.0f", $1 / $2}') instructions per request"
  kill "$GATEHOUSE" "$NGINX" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$D"
done
