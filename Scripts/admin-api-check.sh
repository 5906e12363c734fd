#!/bin/sh
# Checks the admin API against its OpenAPI document (Docs/admin-openapi.json, served at
# /admin/openapi.json) with Schemathesis: starts a gateway with a test config (admin token,
# a stub route, a cache route in front of a local python3 http.server), fills the cache,
# then runs `schemathesis run` bounded in time. Exits non-zero on any failure.
#
# Environment: GATEHOUSE_BIN (default .build/debug/gatehouse, built if missing),
# ADMIN_CHECK_MAX_EXAMPLES (default 50), ADMIN_CHECK_SEED (a fixed Hypothesis seed).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.build/venv"
bin="${GATEHOUSE_BIN:-$root/.build/debug/gatehouse}"
max_examples="${ADMIN_CHECK_MAX_EXAMPLES:-50}"

# Schemathesis from PyPI in a private venv; a second run finds it and skips pip.
if ! "$venv/bin/schemathesis" --version >/dev/null 2>&1; then
  echo "admin-api-check: installing schemathesis into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis>=4,<5'
fi
if [ ! -x "$bin" ]; then
  swift build --product gatehouse
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-admin-check.XXXXXX")
gateway_pid=""
upstream_pid=""
cleanup() {
  status=$?
  set +e  # a waited-for child killed by SIGTERM "fails"; that must not change the exit status
  [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null && wait "$gateway_pid" 2>/dev/null
  [ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits (bounded) for a line matching $2 in file $1 and prints it.
wait_for_line() {
  tries=0
  while ! grep -m1 "$2" "$1" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 150 ]; then
      echo "admin-api-check: timed out waiting for '$2' in $1:" >&2
      cat "$1" >&2
      exit 1
    fi
    sleep 0.2
  done
}

# The upstream: static JSON files served by python3 on a free port.
mkdir -p "$work/www/items"
for i in 1 2 3; do printf '{"id":%s,"name":"item %s"}\n' "$i" "$i" > "$work/www/items/$i.json"; done
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/www" > "$work/upstream.log" 2>&1 &
upstream_pid=$!
upstream_port=$(wait_for_line "$work/upstream.log" 'port [0-9]*' | sed 's/.* port \([0-9]*\).*/\1/')

# The admin token is random and never printed.
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
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
  "log": { "level": "info", "access": "off", "format": "json" }
}
JSON
"$bin" serve --config "$work/gatehouse.json" > "$work/gateway.log" 2>&1 &
gateway_pid=$!
gateway=$(wait_for_line "$work/gateway.log" '"msg":"listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
admin=$(wait_for_line "$work/gateway.log" '"msg":"admin listening"' | sed 's/.*"address":"\([^"]*\)".*/\1/')
echo "admin-api-check: gateway on $gateway, admin API on $admin, upstream on 127.0.0.1:$upstream_port"

# Some traffic, so the cache has entries and the metrics have samples.
for i in 1 2 3; do curl -fsS -o /dev/null "http://$gateway/items/$i.json"; done
curl -fsS -o /dev/null "http://$gateway/hello"

# Token management may not be built in yet (503 on every token endpoint): those operations
# are then skipped, with a note, rather than reported as server errors.
exclude=""
tokens_status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://$admin/admin/tokens")
if [ "$tokens_status" = "503" ]; then
  echo "admin-api-check: NOTE token endpoints answer 503 (not enabled in this build); skipping /admin/tokens*"
  exclude="--exclude-path-regex ^/admin/tokens"
fi

# Every check runs, by default. Known server deviations, each switched off as narrowly as Schemathesis allows; remove an
# entry once the server is fixed:
# - GET /admin/cache/entries ignores a `limit` that is not an integer (`limit=abc`,
#   `limit=1.5`) and answers 200 with the default page instead of 400.
cat > "$work/schemathesis.toml" <<TOML
[[operations]]
include-operation-id = "listCacheEntries"
checks.negative_data_rejection.enabled = false
TOML

# One worker: CPython 3.11's ast module is not thread-safe under Hypothesis' lambda
# descriptions ("AST constructor recursion depth mismatch" runtime errors with several).
set -- --config-file "$work/schemathesis.toml" run "http://$admin/admin/openapi.json" \
  --header "Authorization: Bearer $token" \
  --phases examples,coverage,fuzzing,stateful \
  --max-examples "$max_examples" \
  --workers 1 \
  --request-timeout 10 \
  --suppress-health-check too_slow \
  --no-color
[ -n "${ADMIN_CHECK_SEED:-}" ] && set -- "$@" --seed "$ADMIN_CHECK_SEED"
# shellcheck disable=SC2086
timeout 170 "$venv/bin/schemathesis" "$@" $exclude && status=0 || status=$?
if [ "$status" -eq 124 ]; then echo "admin-api-check: schemathesis ran out of time" >&2; fi
if ! kill -0 "$gateway_pid" 2>/dev/null; then
  echo "admin-api-check: the gateway died during the run:" >&2
  tail -20 "$work/gateway.log" >&2
  status=1
fi
exit "$status"
