#!/bin/sh
# Heap allocations per request of a built gateway (release by default), counted by the
# GatehouseAllocationCounter shim (LD_PRELOAD) under wrk load, for the pass, envelope and
# stored scenarios of AllocationTests, and h2 (the pass route over h2c, h2load -c4 -m10).
# The tests assert bounds on the debug build; this reports what the binary operators run
# makes.
#
# Usage: [SCENARIOS="pass envelope stored h2"] Bench/allocations_per_request.sh [BIN] [SHIM]
#   (defaults: .build/release/gatehouse, .build/release/libGatehouseAllocationCounter.so;
#    build them with: swift build -c release --product gatehouse &&
#    swift build -c release --product GatehouseAllocationCounter)
set -eu
BIN=${1:-.build/release/gatehouse}
SHIM=$(readlink -f "${2:-.build/release/libGatehouseAllocationCounter.so}")
PORT=19960
BODY='{"id":1,"name":"hoge","users":[{"id":1,"name":"hoge"},{"id":2,"name":"foo"}]}'
for SCENARIO in ${SCENARIOS:-pass envelope stored h2}; do
  case $SCENARIO in
  pass | h2) ROUTE='"match":{"path":"/users"},"token":"t","envelope":{"enabled":false}' ;;
  envelope) ROUTE='"match":{"path":"/users"},"token":"t","envelope":{"enabled":true},"cache":{"stale_if_error_s":86400}' ;;
  stored) ROUTE='"match":{"path":"/users"},"envelope":{"enabled":true},"cache":{"fresh_s":3600}' ;;
  esac
  D=$(mktemp -d)
  chmod 755 "$D"
  cat >"$D/backend.conf" <<EOC
worker_processes 1; daemon off; pid $D/b.pid; error_log $D/b.err;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$PORT; keepalive_requests 1000000;
location / { default_type application/json; return 200 '$BODY'; } } }
EOC
  cat >"$D/g.json" <<EOC
{"listen":[{"address":"127.0.0.1:$((PORT + 1))","h2c":true}],"workers":1,
"admin":{"listen":"127.0.0.1:$((PORT + 2))","token":"bench-admin-token"},
"store":{"path":"$D/s.sqlite"},"log":{"access":"off"},
"upstreams":{"api":{"url":"http://127.0.0.1:$PORT","max_idle_connections":128}},
"tokens":{"t":{"type":"static","value":"bench-token"}},"headers":{"set":{"Accept":"application/json"}},
"routes":[{"name":"r","upstream":"api",$ROUTE}]}
EOC
  nginx -c "$D/backend.conf" &
  NGINX=$!
  LD_PRELOAD="$SHIM" GATEHOUSE_ALLOCATION_COUNTER="$D/count" "$BIN" serve --config "$D/g.json" >/dev/null 2>&1 &
  GATEHOUSE=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$((PORT + 1))/users" && break
    sleep 0.1
  done
  URL="http://127.0.0.1:$((PORT + 1))/users"
  if [ "$SCENARIO" = h2 ]; then
    # One h2load run: its connections open during the warm-up, and only the measured
    # part is counted.
    h2load -c4 -m10 -D6 --warm-up-time=2 "$URL" >"$D/h2load.out" &
    LOAD=$!
    sleep 2.5
    BEFORE=$(od -An -t u8 -N 8 "$D/count" | tr -d ' ')
    STARTED=$(date +%s.%N)
    sleep 4
    AFTER=$(od -An -t u8 -N 8 "$D/count" | tr -d ' ')
    ENDED=$(date +%s.%N)
    wait "$LOAD"
    RATE=$(awk '/finished in/ {gsub(",", ""); print $4}' "$D/h2load.out")
    REQUESTS=$(echo "$RATE $STARTED $ENDED" | awk '{printf "%.0f", $1 * ($3 - $2)}')
    echo "$SCENARIO: about $REQUESTS requests, $(echo "$AFTER $BEFORE $REQUESTS" | awk '{printf "%.2f", ($1 - $2) / $3}') allocations per request"
    kill "$GATEHOUSE" "$NGINX" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
    continue
  fi
  wrk -t1 -c4 -d2s "$URL" >/dev/null
  BEFORE=$(od -An -t u8 -N 8 "$D/count" | tr -d ' ')
  REQUESTS=$(wrk -t1 -c4 -d4s "$URL" | awk '/requests in/ {print $1}')
  AFTER=$(od -An -t u8 -N 8 "$D/count" | tr -d ' ')
  echo "$SCENARIO: $REQUESTS requests, $(echo "$AFTER $BEFORE $REQUESTS" | awk '{printf "%.2f", ($1 - $2) / $3}') allocations per request"
  kill "$GATEHOUSE" "$NGINX" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$D"
done
