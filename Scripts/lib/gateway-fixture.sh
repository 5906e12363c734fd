# Sourced by the admin check scripts: starts a test gateway with a random admin token, a stub
# route (/hello) and a cache route (/items/*) in front of a python3 http.server serving three
# JSON files, all on free loopback ports, and stops both on exit.
#
# After `fixture_start`: $work (temp dir), $gateway and $admin (host:port), $token (never
# print it), $upstream_port. Needs $root (the repository) and $bin (the gatehouse binary).
# $fixture_tokens, when set, is the config's "tokens" object (JSON); $fixture_jwt, its "jwt";
# $fixture_shared, its "shared".

work=""
gateway_pid=""
upstream_pid=""

fixture_cleanup() {
  status=$?
  set +e  # a waited-for child killed by SIGTERM "fails"; that must not change the exit status
  [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null && wait "$gateway_pid" 2>/dev/null
  [ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
  [ -n "$work" ] && rm -rf "$work"
  exit "$status"
}

# Waits (bounded, 30 s) for a line matching $2 in file $1 and prints it.
fixture_wait_for_line() {
  tries=0
  while ! grep -a -m1 "$2" "$1" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 150 ]; then
      echo "fixture: timed out waiting for '$2' in $1:" >&2
      cat "$1" >&2
      exit 1
    fi
    sleep 0.2
  done
}

fixture_start() {
  if [ ! -x "$bin" ]; then
    (cd "$root" && swift build --product gatehouse)
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-admin-check.XXXXXX")
  trap fixture_cleanup EXIT
  trap 'exit 130' INT TERM

  mkdir -p "$work/www/items"
  for i in 1 2 3; do printf '{"id":%s,"name":"item %s"}\n' "$i" "$i" > "$work/www/items/$i.json"; done
  python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/www" > "$work/upstream.log" 2>&1 &
  upstream_pid=$!
  upstream_port=$(fixture_wait_for_line "$work/upstream.log" 'port [0-9]*' | sed 's/.* port \([0-9]*\).*/\1/')

  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  tokens_member=""
  if [ -n "${fixture_tokens:-}" ]; then tokens_member="\"tokens\": $fixture_tokens,"; fi
  jwt_member=""
  if [ -n "${fixture_jwt:-}" ]; then jwt_member="\"jwt\": $fixture_jwt,"; fi
  shared_member=""
  if [ -n "${fixture_shared:-}" ]; then shared_member="\"shared\": $fixture_shared,"; fi
  cat > "$work/gatehouse.json" <<JSON
{
  "listen": [{ "address": "127.0.0.1:0" }],
  "workers": 1,
  "admin": { "listen": "127.0.0.1:0", "token": "$token" },
  "store": { "path": "$work/store.sqlite" },
  "upstreams": { "api": { "url": "http://127.0.0.1:$upstream_port" } },
  "routes": [
    { "name": "hello", "match": { "path": "/hello" },
      "stub": { "mode": "always", "status": 200, "body": { "hello": "world" } } },
    { "name": "items", "match": { "path": "/items/*" }, "upstream": "api",
      "cache": { "stale_if_error_s": 3600 } }
  ],
  $tokens_member
  $jwt_member
  $shared_member
  "log": { "level": "info", "access": "off", "format": "json" }
}
JSON
  "$bin" serve --config "$work/gatehouse.json" > "$work/gateway.log" 2>&1 &
  gateway_pid=$!
  gateway=$(fixture_wait_for_line "$work/gateway.log" '"msg":"listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
  admin=$(fixture_wait_for_line "$work/gateway.log" '"msg":"admin listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
  echo "fixture: gateway on $gateway, admin API on $admin, upstream on 127.0.0.1:$upstream_port"
}

# Fails unless the gateway is still running (call at the end of a check).
fixture_require_alive() {
  if ! kill -0 "$gateway_pid" 2>/dev/null; then
    echo "fixture: the gateway died during the check:" >&2
    tail -20 "$work/gateway.log" >&2
    return 1
  fi
}
