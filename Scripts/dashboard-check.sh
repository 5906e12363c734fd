#!/bin/sh
# Loads the admin dashboard (/admin/) in headless Chromium against a test gateway that has
# served some traffic, checks that the numbers the page renders match the JSON API (cache
# entries and counters, request total, per-route and per-upstream figures of the last 15
# minutes and their charts, upstream and token rows), that a page without a token sends no
# request, and saves a screenshot to .build/dashboard.png (its path is printed). Installs
# the Debian `chromium` package when it is missing.
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
# A static token and an oauth2 one (its token endpoint refuses connections: it stays in
# error, which is fine here): only the oauth2 one may get a Refresh button.
fixture_tokens='{ "fixed": { "type": "static", "value": "static-value-1" },
  "login": { "type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:9/oauth/token",
             "client_id": "c", "client_secret": "s" } }'
# Two identity providers: keys in the config (made now), and a jwks_url nobody answers (it
# shows its fetch error): only the second gets a Refresh button.
keydir=$(mktemp -d)
jwk=$(/usr/bin/python3 Tests/Tools/jwtmint.py keys "$keydir" ec256 dash-key)
rm -rf "$keydir"
fixture_jwt="{ \"providers\": { \"inline\": { \"keys\": { \"keys\": [$jwk] } },
  \"remote\": { \"issuer\": \"https://id.example/\", \"jwks_url\": \"http://127.0.0.1:9/jwks.json\" } } }"
# A shared tier nobody answers (port 9), with a password that must never reach the page.
fixture_shared='{ "url": "redis://:dash-CANARY-pw@127.0.0.1:9/0", "timeout_ms": 50 }'
fixture_start
(umask 077 && printf 'Authorization: Bearer %s\n' "$token" > "$work/auth-header")

# Traffic: 7 cached-route requests (3 distinct entries), 4 stub requests, one request that
# matches no route (404) and one the upstream answers 501 (python's http.server has no PATCH).
for i in 1 2 3 1 2 3 1; do curl -fsS -o /dev/null "http://$gateway/items/$i.json"; done
for i in 1 2 3 4; do curl -fsS -o /dev/null "http://$gateway/hello"; done
curl -sS -o /dev/null "http://$gateway/nowhere"
curl -sS -o /dev/null -X PATCH "http://$gateway/items/1.json"
# Store writes are asynchronous: wait (bounded) until all three entries are in, so the page
# and the API read the same numbers.
tries=0
until curl -fsS -H @"$work/auth-header" "http://$admin/admin/cache" | grep -q '"entries":3,'; do
  tries=$((tries + 1))
  [ "$tries" -gt 100 ] && { echo "dashboard-check: the cache never reached 3 entries" >&2; exit 1; }
  sleep 0.1
done
# The history takes a sample every 10 s: wait (bounded) for the one holding all 13 requests.
tries=0
until curl -fsS -H @"$work/auth-header" "http://$admin/admin/history" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(sum(sum(s["requests"]) for s in d["routes"]) != 13)'; do
  tries=$((tries + 1))
  [ "$tries" -gt 60 ] && { echo "dashboard-check: /admin/history never counted the 13 requests" >&2; exit 1; }
  sleep 0.5
done

# The page takes the token from the fragment (#token=...), moves it to sessionStorage and
# clears the fragment. The URL sits in a file read by the shell, so it is on Chromium's
# command line only, never printed. --virtual-time-budget lets the page run several
# refresh rounds (2 s apart in virtual time) before the DOM is dumped.
chromium_run() {
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$work/chromium" --hide-scrollbars --window-size=1400,1500 \
    --virtual-time-budget=7000 "$@" "http://$admin/admin/#token=$token" 2>>"$work/chromium.log"
}
# First without a token (its own profile, so no stored one): the page asks for it and
# sends nothing, so the gateway logs no failed authentication.
timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir="$work/chromium-no-token" --virtual-time-budget=7000 --dump-dom "http://$admin/admin/" \
  > "$work/dom-no-token.html" 2>>"$work/chromium.log"
chromium_run --dump-dom > "$work/dom.html"
mkdir -p "$root/.build"
chromium_run --screenshot="$root/.build/dashboard.png" >/dev/null
echo "dashboard-check: screenshot saved to $root/.build/dashboard.png"

# The API's own answers, read after the page (no traffic in between, and the admin API's
# own requests are not counted in gatehouse_requests_total).
curl -fsS -H @"$work/auth-header" "http://$admin/admin/cache" > "$work/cache.json"
curl -fsS -H @"$work/auth-header" "http://$admin/metrics" > "$work/metrics.txt"
curl -fsS -H @"$work/auth-header" "http://$admin/admin/upstreams" > "$work/upstreams.json"
curl -fsS -H @"$work/auth-header" "http://$admin/admin/history" > "$work/history.json"
curl -fsS -H @"$work/auth-header" "http://$admin/admin/status" > "$work/status.json"
curl -sS -H @"$work/auth-header" "http://$admin/admin/tokens" > "$work/tokens.json"
curl -sS -o /dev/null -w '%{http_code}' -H @"$work/auth-header" "http://$admin/admin/tokens" > "$work/tokens.status"
curl -sS -H @"$work/auth-header" "http://$admin/admin/jwt" > "$work/jwt.json"

python3 - "$work" <<'PY'
import json, re, sys
from html.parser import HTMLParser

work = sys.argv[1]

class Collect(HTMLParser):
    """Every element's attributes by id, rows carrying data-upstream / data-token /
    data-route with their cells (attributes and text), and the token refresh buttons."""
    def __init__(self):
        super().__init__()
        self.by_id, self.upstreams, self.tokens, self.body = {}, [], [], {}
        self.rows = {"route": {}, "upstream": {}}
        self.refresh_buttons, self.row, self.cell = [], None, None
        self.providers, self.jwt_buttons, self.endpoints = [], [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.by_id[a["id"]] = a
        if tag == "body": self.body = a
        if tag == "tr" and "data-upstream" in a: self.upstreams.append(a["data-upstream"])
        if tag == "tr" and "data-token" in a: self.tokens.append((a["data-token"], a.get("data-state")))
        if tag == "button" and "data-token-refresh" in a: self.refresh_buttons.append(a["data-token-refresh"])
        if tag == "tr" and "data-provider" in a: self.providers.append(a["data-provider"])
        if tag == "tr" and "data-endpoint" in a: self.endpoints.append(a["data-endpoint"])
        if tag == "button" and "data-jwt-refresh" in a: self.jwt_buttons.append(a["data-jwt-refresh"])
        if tag == "tr":
            self.row = None
            for kind in ("route", "upstream"):
                if f"data-{kind}" in a:
                    self.row = {"attrs": a, "cells": []}
                    self.rows[kind][a[f"data-{kind}"]] = self.row
        if tag == "td" and self.row is not None:
            self.cell = {"attrs": a, "text": ""}
            self.row["cells"].append(self.cell)
        if tag in ("rect", "polyline") and self.cell is not None:
            self.cell.setdefault("shapes", []).append(tag)
    def handle_endtag(self, tag):
        if tag == "td": self.cell = None
        if tag == "tr": self.row = None
    def handle_data(self, data):
        if self.cell is not None: self.cell["text"] += data

dom = Collect()
dom.feed(open(f"{work}/dom.html", encoding="utf-8").read())
no_token = Collect()
no_token.feed(open(f"{work}/dom-no-token.html", encoding="utf-8").read())
history = json.load(open(f"{work}/history.json"))
gateway_log = open(f"{work}/gateway.log", encoding="utf-8").read()
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
status = json.load(open(f"{work}/status.json"))
shared = status.get("shared")
check("#shared-state = /admin/status shared", dom.by_id.get("shared-state", {}).get("data-state"),
      "off" if shared is None else ("up" if shared["up"] else "down"))
dom_text = open(f"{work}/dom.html", encoding="utf-8").read()
detail = re.search(r'id="shared-detail"[^>]*>([^<]*)<', dom_text)
check("#shared-detail shows the redacted url", bool(detail and shared and shared["url"] in detail.group(1)), True)
check("the shared tier's password is nowhere on the page", "dash-CANARY-pw" in dom_text, False)
check("request total is the traffic sent", int(requests_total), 13)

def newest_latencies(series):
    for i in range(len(series["requests"]) - 1, -1, -1):
        if series["requests"][i] > 0 and series["p99_ms"][i] is not None:
            return series["p50_ms"][i], series["p99_ms"][i]
    return None, None
def same_number(shown, expected):
    return (shown in (None, "") and expected is None) or (shown not in (None, "") and expected is not None
                                                          and abs(float(shown) - float(expected)) < 1e-9)

# Route rows: columns Route, Total, Req/s, 4xx, 5xx, 5xx 15m, p50, p99, chart.
for series in history["routes"]:
    if sum(series["requests"]) == 0: continue
    name = series["name"]
    row = dom.rows["route"].get(name)
    if row is None:
        check(f"route row for {name!r}", None, "present"); continue
    cells = row["cells"]
    label = "(no route)" if name == "" else name
    check(f"route {label}: name shown", cells[0]["text"], label)
    check(f"route {label}: 5xx 15m = /admin/history", cells[5]["attrs"].get("data-value"), str(sum(series["5xx"])))
    p50, p99 = newest_latencies(series)
    check(f"route {label}: p50 = /admin/history", same_number(cells[6]["attrs"].get("data-value"), p50), True)
    check(f"route {label}: p99 = /admin/history", same_number(cells[7]["attrs"].get("data-value"), p99), True)
    check(f"route {label}: chart requests = /admin/history", cells[8]["attrs"].get("data-requests"), str(sum(series["requests"])))
    check(f"route {label}: chart draws bars", "rect" in cells[8].get("shapes", []), True)
    highlighted = "row-5xx" in (row["attrs"].get("class") or "")
    check(f"route {label}: highlighted iff 5xx in the window", highlighted, sum(series["5xx"]) > 0)
check("a 5xx route is highlighted", any("row-5xx" in (r["attrs"].get("class") or "") for r in dom.rows["route"].values()), True)

# Upstream rows: columns Name, Address, Health, Since, Last check, Circuit, Open, Idle,
# Req 15m, 5xx 15m, p99, chart, Last error.
for series in history["upstreams"]:
    row = dom.rows["upstream"].get(series["name"])
    if row is None:
        check(f"upstream row for {series['name']}", None, "present"); continue
    cells = row["cells"]
    check(f"upstream {series['name']}: req 15m = /admin/history", cells[8]["attrs"].get("data-value"), str(sum(series["requests"])))
    check(f"upstream {series['name']}: 5xx 15m = /admin/history", cells[9]["attrs"].get("data-value"), str(sum(series["5xx"])))
    check(f"upstream {series['name']}: p99 = /admin/history", same_number(cells[10]["attrs"].get("data-value"), newest_latencies(series)[1]), True)

# Health since / last check, when the gateway reports them (`since`, `last_check`).
for u in upstreams["upstreams"]:
    cells = dom.rows["upstream"].get(u["name"], {}).get("cells", [])
    if len(cells) < 5: continue
    if u.get("since") and u.get("health") == "unhealthy":
        check(f"upstream {u['name']}: down for shown", "data-down-for" in cells[3]["attrs"], True)
    if u.get("last_check"):
        check(f"upstream {u['name']}: last check = /admin/upstreams", cells[4]["attrs"].get("data-ok"),
              str(bool(u["last_check"].get("ok"))).lower())

# Without a token: the prompt shows and nothing was asked of the API.
check("without a token the prompt shows", "hidden" in no_token.by_id.get("login", {}), False)
check("without a token no request failed authentication", "admin authentication failed" in gateway_log, False)
check("#req-rate computed (two samples)", value("req-rate") not in (None, ""), True)
check("upstream rows = /admin/upstreams", sorted(dom.upstreams), sorted(u["name"] for u in upstreams["upstreams"]))
check("endpoint rows = /admin/upstreams endpoints", sorted(dom.endpoints),
      sorted(e["address"] for u in upstreams["upstreams"] for e in u.get("endpoints", [])))
if tokens_status == "200":
    tokens = json.load(open(f"{work}/tokens.json"))["tokens"]
    check("token rows = /admin/tokens", sorted(dom.tokens), sorted((t["name"], t["state"]) for t in tokens))
    check("Refresh only on oauth2 tokens", sorted(dom.refresh_buttons),
          sorted(t["name"] for t in tokens if t["type"] == "oauth2_client_credentials"))
else:
    check(f"tokens panel notes the {tokens_status}", dom.by_id.get("tokens-body", {}).get("data-unavailable"), "true")
providers = json.load(open(f"{work}/jwt.json"))["providers"]
check("provider rows = /admin/jwt", sorted(dom.providers), sorted(p["name"] for p in providers))
check("Refresh only on providers with a jwks_url", sorted(dom.jwt_buttons),
      sorted(p["name"] for p in providers if p["source"] != "config"))
if failures:
    print(f"dashboard-check: {len(failures)} mismatch(es)")
    sys.exit(1)
print("dashboard-check: all values match")
PY
fixture_require_alive
