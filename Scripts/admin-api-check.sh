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

. "$root/Scripts/lib/gateway-fixture.sh"
fixture_start
# The token goes to curl from a file and to Schemathesis through its environment, never
# on a command line (where `ps` shows it).
(umask 077 && printf 'Authorization: Bearer %s\n' "$token" > "$work/auth-header")

# Some traffic, so the cache has entries and the metrics have samples.
for i in 1 2 3; do curl -fsS -o /dev/null "http://$gateway/items/$i.json"; done
curl -fsS -o /dev/null "http://$gateway/hello"

exclude=""

cat > "$work/schemathesis.toml" <<'TOML'
headers = { Authorization = "Bearer ${GATEHOUSE_CHECK_TOKEN}" }
TOML

# One worker: CPython 3.11's ast module is not thread-safe under Hypothesis' lambda
# descriptions ("AST constructor recursion depth mismatch" runtime errors with several).
set -- --config-file "$work/schemathesis.toml" run "http://$admin/admin/openapi.json" \
  --phases examples,coverage,fuzzing,stateful \
  --max-examples "$max_examples" \
  --workers 1 \
  --request-timeout 10 \
  --suppress-health-check too_slow \
  --no-color
[ -n "${ADMIN_CHECK_SEED:-}" ] && set -- "$@" --seed "$ADMIN_CHECK_SEED"
# shellcheck disable=SC2086
# From $work: Schemathesis keeps a .schemathesis/ cache in its working directory.
(cd "$work" && GATEHOUSE_CHECK_TOKEN="$token" timeout 170 "$venv/bin/schemathesis" "$@" $exclude) && status=0 || status=$?
if [ "$status" -eq 124 ]; then echo "admin-api-check: schemathesis ran out of time" >&2; fi
fixture_require_alive || status=1
exit "$status"
