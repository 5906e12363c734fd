#!/bin/sh
# Loads the admin dashboard (/admin/) in headless Chromium against a test gateway that has
# served some traffic, checks that the numbers the page renders match the JSON API (cache
# entries and counters, request total, upstream and token rows), and saves a screenshot to
# .build/dashboard.png. Installs the Debian `chromium` package when it is missing.
#
# Environment: GATEHOUSE_BIN (default .build/debug/gatehouse, built if missing).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
bin="${GATEHOUSE_BIN:-$root/.build/debug/gatehouse}"

if ! command -v chromium >/dev/null 2>&1; then
  echo "dashboard-check: installing chromium"
  # Waits for another apt run (a shared machine) instead of failing on its lock.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
fi

. "$root/Scripts/lib/gateway-fixture.sh"
fixture_start
(umask 077 && printf 'Authorization: Bearer %s\n' "$token" > "$work/auth-header")

# Traffic: 7 cached-route requests (3 distinct entries) and 4 stub requests.
for i in 1 2 3 1 2 3 1; do curl -fsS -o /dev/null "http://$gateway/items/$i.json"; done
for i in 1 2 3 4; do curl -fsS -o /dev/null "http://$gateway/hello"; done
# Store writes are asynchronous: wait (bounded) until all three entries are in, so the page
# and the API read the same numbers.
tries=0
until curl -fsS -H @"$work/auth-header" "http://$admin/admin/cache" | grep -q '"entries":3,'; do
  tries=$((tries + 1))
  [ "$tries" -gt 100 ] && { echo "dashboard-check: the cache never reached 3 entries" >&2; exit 1; }
  sleep 0.1
done

# The page takes the token from the fragment (#token=...), moves it to sessionStorage and
# clears the fragment. The URL sits in a file read by the shell, so it is on Chromium's
# command line only, never printed. --virtual-time-budget lets the page run several
# refresh rounds (2 s apart in virtual time) before the DOM is dumped.
chromium_run() {
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$work/chromium" --hide-scrollbars --window-size=1280,1000 \
    --virtual-time-budget=7000 "$@" "http://$admin/admin/#token=$token" 2>>"$work/chromium.log"
}
chromium_run --dump-dom > "$work/dom.html"
mkdir -p "$root/.build"
chromium_run --screenshot="$root/.build/dashboard.png" >/dev/null
echo "dashboard-check: screenshot saved to .build/dashboard.png"

# The API's own answers, read after the page (no traffic in between, and the admin API's
# own requests are not counted in gatehouse_requests_total).
curl -fsS -H @"$work/auth-header" "http://$admin/admin/cache" > "$work/cache.json"
curl -fsS -H @"$work/auth-header" "http://$admin/metrics" > "$work/metrics.txt"
curl -fsS -H @"$work/auth-header" "http://$admin/admin/upstreams" > "$work/upstreams.json"
curl -sS -H @"$work/auth-header" "http://$admin/admin/tokens" > "$work/tokens.json"
curl -sS -o /dev/null -w '%{http_code}' -H @"$work/auth-header" "http://$admin/admin/tokens" > "$work/tokens.status"

python3 - "$work" <<'PY'
import json, re, sys
from html.parser import HTMLParser

work = sys.argv[1]

class Collect(HTMLParser):
    """Every element's attributes by id, plus rows carrying data-upstream / data-token."""
    def __init__(self):
        super().__init__()
        self.by_id, self.upstreams, self.tokens, self.body = {}, [], [], {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.by_id[a["id"]] = a
        if tag == "body": self.body = a
        if tag == "tr" and "data-upstream" in a: self.upstreams.append(a["data-upstream"])
        if tag == "tr" and "data-token" in a: self.tokens.append((a["data-token"], a.get("data-state")))

dom = Collect()
dom.feed(open(f"{work}/dom.html", encoding="utf-8").read())
cache = json.load(open(f"{work}/cache.json"))
upstreams = json.load(open(f"{work}/upstreams.json"))
tokens_status = open(f"{work}/tokens.status").read().strip()
metrics = open(f"{work}/metrics.txt").read()
requests_total = sum(float(m.group(1)) for m in re.finditer(r"^gatehouse_requests_total\{[^}]*\} (\S+)$", metrics, re.M))

failures = []
def check(label, shown, expected):
    ok = shown == expected
    print(f"  {'ok  ' if ok else 'FAIL'} {label}: page {shown!r}, API {expected!r}")
    if not ok: failures.append(label)

def value(element_id):
    return dom.by_id.get(element_id, {}).get("data-value")

print("dashboard-check: DOM vs API")
check("page finished a refresh round", dom.body.get("data-ready"), "true")
check("no error banner", "hidden" in dom.by_id.get("error-banner", {}), True)
check("token prompt hidden", "hidden" in dom.by_id.get("login", {}), True)
for element_id, key in [("cache-entries", "entries"), ("cache-bytes", "bytes"), ("cache-hits", "hits"),
                        ("cache-stale", "stale_served"), ("cache-misses", "misses"), ("cache-writes", "writes"),
                        ("cache-evictions", "evictions")]:
    check(f"#{element_id} = /admin/cache {key}", value(element_id), str(cache[key]))
check("#req-total = sum of gatehouse_requests_total", value("req-total"), str(int(requests_total)))
check("request total is the traffic sent", int(requests_total), 11)
check("#req-rate computed (two samples)", value("req-rate") not in (None, ""), True)
check("upstream rows = /admin/upstreams", sorted(dom.upstreams), sorted(u["name"] for u in upstreams["upstreams"]))
if tokens_status == "200":
    tokens = json.load(open(f"{work}/tokens.json"))["tokens"]
    check("token rows = /admin/tokens", sorted(dom.tokens), sorted((t["name"], t["state"]) for t in tokens))
else:
    check(f"tokens panel notes the {tokens_status}", dom.by_id.get("tokens-body", {}).get("data-unavailable"), "true")
if failures:
    print(f"dashboard-check: {len(failures)} mismatch(es)")
    sys.exit(1)
print("dashboard-check: all values match")
PY
fixture_require_alive
