/// The dashboard's script, kept apart from the page so its exact text can be hashed for the
/// page's Content-Security-Policy (`script-src 'sha256-…'`). It must stay free of markup
/// event handlers (`onclick=…`): a hash allows this element's text only, so every handler
/// is attached here with `addEventListener`.
extension AdminDashboard {
  /// The text between `<script>` and `</script>`, byte for byte what the hash covers.
  static let script = "\n" + scriptBody + "\n"

  private static let scriptBody = #"""
    "use strict";
    (function () {
      const KEY = "gatehouse.adminToken";
      const PERIOD_MS = 2000;
      const $ = (id) => document.getElementById(id);
      let timer = null;
      let previous = null;  // the last metrics sample: {at, total, errors, routes}
      let current = null;   // the newest metrics sample
      let recent = null;    // the newest /admin/history answer (not `history`: that is the page's)
      let upstreamList = null;  // the newest /admin/upstreams answer
      const UNMATCHED = "(no route)";  // how requests that matched no route (route "") are named
      const SVG_NS = "http://www.w3.org/2000/svg";
      let generation = 0;   // bumps on sign-out so late answers of an old token are dropped

      // A token in the URL fragment (#token=...) is for scripted use: move it to sessionStorage
      // and clear the fragment so it is not kept in history or shown on screen.
      (function takeTokenFromFragment() {
        const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
        if (!match) return;
        sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
        history.replaceState(null, "", location.pathname + location.search);
      })();

      function token() { return sessionStorage.getItem(KEY); }

      class HTTPError extends Error {
        constructor(status, message) { super(message); this.status = status; }
      }

      async function api(method, path) {
        // Nothing is sent without a token: an empty one would only earn a 401 and an
        // "admin authentication failed" line in the gateway's log.
        if (!token()) throw new HTTPError(401, "no admin token");
        const response = await fetch(path, {
          method, headers: { "Authorization": "Bearer " + token() }, cache: "no-store", credentials: "omit",
        });
        const text = await response.text();
        if (!response.ok) {
          let message = response.status + " " + response.statusText;
          try { const body = JSON.parse(text); if (body && body.error) message = body.error + " (" + response.status + ")"; } catch (_) {}
          throw new HTTPError(response.status, message);
        }
        return (response.headers.get("Content-Type") || "").startsWith("application/json") ? JSON.parse(text) : text;
      }

      // Rendering helpers: every value goes through textContent, never parsed as markup.
      function el(tag, text, className) {
        const node = document.createElement(tag);
        if (text !== undefined && text !== null) node.textContent = String(text);
        if (className) node.className = className;
        return node;
      }
      function setValue(id, value, shown) {
        const node = $(id);
        node.dataset.value = value === null || value === undefined ? "" : String(value);
        node.textContent = shown !== undefined ? shown : (value === null || value === undefined ? "–" : formatCount(value));
      }
      function formatCount(n) { return typeof n === "number" ? n.toLocaleString("en-US") : String(n); }
      function formatBytes(n) {
        const units = ["B", "KiB", "MiB", "GiB", "TiB"];
        let value = n, unit = 0;
        while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
        return (unit === 0 ? value : value.toFixed(1)) + " " + units[unit];
      }
      function formatRate(r) { return r === null ? "–" : (r < 10 ? r.toFixed(2) : r.toFixed(1)); }
      function formatTime(text) {
        if (!text) return "–";
        const date = new Date(text);
        return isNaN(date) ? text : date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
      }
      function badge(text, kind) { const node = el("span", text, "badge " + kind); node.dataset.state = text; return node; }
      function fillBody(tbody, rows, columns, emptyText) {
        tbody.replaceChildren();
        if (rows.length === 0) {
          const td = el("td", emptyText, "empty"); td.colSpan = columns;
          tbody.append(el("tr")); tbody.lastChild.append(td);
          return;
        }
        for (const row of rows) tbody.append(row);
      }
      function sectionError(id, error) {
        const node = $(id);
        node.hidden = !error;
        node.textContent = error ? "Could not load: " + error.message : "";
      }

      // Prometheus text: sums counters by label. Only the families the page shows are read.
      function parseMetrics(text) {
        const sample = { at: performance.now(), total: 0, errors: 0, routes: {}, clients: null };
        const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
        const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
        for (const raw of text.split("\n")) {
          if (raw.startsWith("#")) continue;
          const m = line.exec(raw);
          if (!m) continue;
          const labels = {};
          for (const l of (m[2] || "").matchAll(label)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
          const value = Number(m[3]);
          if (m[1] === "gatehouse_requests_total") {
            const route = labels.route || "";
            const code = Number(labels.code || 0);
            const r = sample.routes[route] || (sample.routes[route] = { total: 0, c4: 0, c5: 0 });
            r.total += value;
            if (code >= 400 && code < 500) r.c4 += value;
            if (code >= 500) { r.c5 += value; sample.errors += value; }
            sample.total += value;
          } else if (m[1] === "gatehouse_connections" && labels.side === "client") {
            sample.clients = value;
          }
        }
        return sample;
      }

      function rate(now, before, pick) {
        if (!before) return null;
        const seconds = (now.at - before.at) / 1000;
        if (seconds <= 0) return null;
        // A counter that went down means the gateway restarted: no rate for this round.
        const delta = pick(now) - pick(before);
        return delta < 0 ? null : delta / seconds;
      }

      function renderMetrics(text) {
        const now = parseMetrics(text);
        const before = previous;
        previous = now;
        const total = rate(now, before, (s) => s.total);
        setValue("req-total", now.total);
        $("req-rate").dataset.value = total === null ? "" : String(total);
        $("req-rate").textContent = formatRate(total);
        const errors = rate(now, before, (s) => s.errors);
        $("req-error-rate").dataset.value = errors === null ? "" : String(errors);
        $("req-error-rate").textContent = formatRate(errors);
        setValue("conn-client", now.clients);
        current = { now, before };
      }

      function renderHistory(body) { recent = body; }

      // The figures of one /admin/history series: sums over the window and the newest
      // latencies of an interval that had requests.
      function summarize(series) {
        if (!series) return null;
        const sum = (list) => list.reduce((a, b) => a + b, 0);
        let p50 = null, p99 = null;
        for (let i = series.requests.length - 1; i >= 0; i--) {
          if (series.requests[i] > 0 && series.p99_ms[i] !== null) { p50 = series.p50_ms[i]; p99 = series.p99_ms[i]; break; }
        }
        return { requests: sum(series.requests), errors: sum(series["5xx"]), p50, p99 };
      }
      function historySeries(kind, name) {
        return recent ? (recent[kind] || []).find((s) => s.name === name) || null : null;
      }
      function formatMs(ms) { return ms === null || ms === undefined ? "–" : (ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0)); }
      function numberCell(value, shown) {
        const td = el("td", shown !== undefined ? shown : formatCount(value), "num");
        td.dataset.value = value === null || value === undefined ? "" : String(value);
        return td;
      }

      // A small chart of one series, drawn as inline SVG: a bar per 10 s of requests (5xx
      // over it in red) and the p99 latency as a line on its own scale. The window is
      // always the full 15 minutes, so an idle stretch shows as a gap.
      function chart(series) {
        const td = el("td", null, "chart");
        const width = 180, height = 30;
        const svg = document.createElementNS(SVG_NS, "svg");
        svg.setAttribute("class", "chart");
        svg.setAttribute("width", String(width));
        svg.setAttribute("height", String(height));
        svg.setAttribute("viewBox", "0 0 " + width + " " + height);
        const baseLine = document.createElementNS(SVG_NS, "line");
        baseLine.setAttribute("class", "base");
        baseLine.setAttribute("x1", "0"); baseLine.setAttribute("x2", String(width));
        baseLine.setAttribute("y1", String(height - 0.5)); baseLine.setAttribute("y2", String(height - 0.5));
        svg.append(baseLine);
        td.append(svg);
        if (!series) { td.dataset.samples = "0"; return td; }
        const capacity = recent.capacity || 90;
        const count = series.requests.length;
        const step = width / capacity;
        const offset = capacity - count;  // newest at the right edge
        const most = Math.max(1, ...series.requests);
        const slowest = Math.max(0, ...series.p99_ms.map((v) => v || 0));
        const bar = (i, value, className) => {
          if (!value) return;
          const h = Math.max(1, (value / most) * (height - 2));
          const rect = document.createElementNS(SVG_NS, "rect");
          rect.setAttribute("class", className);
          rect.setAttribute("x", ((offset + i) * step).toFixed(1));
          rect.setAttribute("y", (height - h).toFixed(1));
          rect.setAttribute("width", Math.max(1, step - 0.5).toFixed(1));
          rect.setAttribute("height", h.toFixed(1));
          svg.append(rect);
        };
        for (let i = 0; i < count; i++) { bar(i, series.requests[i], "req"); bar(i, series["5xx"][i], "err"); }
        const points = [];
        for (let i = 0; i < count; i++) {
          const v = series.p99_ms[i];
          if (v === null || slowest === 0) continue;
          points.push(((offset + i + 0.5) * step).toFixed(1) + "," + (height - 1 - (v / slowest) * (height - 4)).toFixed(1));
        }
        if (points.length > 1) {
          const line = document.createElementNS(SVG_NS, "polyline");
          line.setAttribute("class", "p99");
          line.setAttribute("points", points.join(" "));
          svg.append(line);
        }
        const figures = summarize(series);
        const title = document.createElementNS(SVG_NS, "title");
        title.textContent = "last 15 minutes: " + figures.requests + " requests, " + figures.errors + " 5xx, slowest p99 " +
          formatMs(slowest) + " ms";
        svg.append(title);
        td.dataset.samples = String(count);
        td.dataset.requests = String(figures.requests);
        return td;
      }

      // The routes table: totals and rates from /metrics, the window from /admin/history.
      // A row is highlighted when it answered 5xx in the last 15 minutes (or, before the
      // first history sample, at all).
      function renderRoutes() {
        if (!current) return;
        const { now, before } = current;
        const names = new Set(Object.keys(now.routes));
        if (recent) for (const s of recent.routes) if (s.requests.some((n) => n > 0) || names.has(s.name)) names.add(s.name);
        const ordered = [...names].sort((a, b) => (a === "" ? 1 : b === "" ? -1 : a.localeCompare(b)));
        const rows = ordered.map((name) => {
          const r = now.routes[name] || { total: 0, c4: 0, c5: 0 };
          const perSecond = rate(now, before, (s) => (s.routes[name] ? s.routes[name].total : 0));
          const series = historySeries("routes", name);
          const figures = summarize(series);
          const tr = el("tr");
          tr.dataset.route = name;
          const label = el("td", name === "" ? UNMATCHED : name, name === "" ? "unmatched" : undefined);
          tr.append(label, numberCell(r.total), el("td", formatRate(perSecond), "num"), numberCell(r.c4), numberCell(r.c5),
            numberCell(figures ? figures.errors : null, figures ? formatCount(figures.errors) : "–"),
            numberCell(figures ? figures.p50 : null, formatMs(figures ? figures.p50 : null)),
            numberCell(figures ? figures.p99 : null, formatMs(figures ? figures.p99 : null)), chart(series));
          tr.dataset.errors = String(figures ? figures.errors : r.c5);
          if ((figures ? figures.errors : r.c5) > 0) tr.classList.add("row-5xx");
          return tr;
        });
        fillBody($("routes-body"), rows, 9, "no requests yet");
      }

      function renderStatus(status) {
        $("status-line").textContent = "v" + status.version + " · up " + formatDuration(status.uptime_s) +
          " · " + status.workers + " worker" + (status.workers === 1 ? "" : "s") + " · " + status.routes + " routes · config " +
          (status.config_file || "embedded") + " loaded " + formatTime(status.config_loaded_at);
        $("status-line").dataset.version = status.version;
        renderShared(status.shared);
      }
      // The shared tier: off (not configured), up (with the slowest loop's round trip) or
      // down (with its last problem). The URL comes redacted from the API.
      function renderShared(shared) {
        const state = shared ? (shared.up ? "up" : "down") : "off";
        const node = $("shared-state");
        node.textContent = state;
        node.dataset.state = state;
        node.className = "value" + (state === "down" ? " bad" : "");
        // The problem goes in the tooltip: a connect error is long, and the card stays small.
        const detail = $("shared-detail");
        detail.textContent = shared ? shared.url + (shared.up ? " · " + formatMs(shared.latency_ms) + " ms" : "") : "not configured";
        node.title = shared && !shared.up ? (shared.last_problem || "down") : "";
      }
      function formatDuration(s) {
        if (s < 60) return s + "s";
        if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
        if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
        return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
      }

      function renderCache(stats) {
        setValue("cache-entries", stats.entries);
        setValue("cache-bytes", stats.bytes, formatBytes(stats.bytes));
        setValue("cache-max-bytes", stats.max_bytes, stats.max_bytes ? "of " + formatBytes(stats.max_bytes) + " max" : "");
        setValue("cache-hits", stats.hits);
        setValue("cache-stale", stats.stale_served);
        setValue("cache-misses", stats.misses);
        setValue("cache-writes", stats.writes);
        setValue("cache-evictions", stats.evictions);
        const lookups = stats.hits + stats.stale_served + stats.misses;
        const ratio = lookups ? (stats.hits + stats.stale_served) / lookups : null;
        setValue("cache-hit-ratio", ratio, ratio === null ? "–" : (ratio * 100).toFixed(1) + "%");
      }

      const REFRESHABLE = new Set(["oauth2_client_credentials"]);
      const TOKEN_KIND = { valid: "ok", expiring: "warn", refreshing: "warn", expired: "bad", invalid: "bad", missing: "bad", error: "bad" };
      function renderTokens(list) {
        const rows = list.tokens.map((t) => {
          const tr = el("tr");
          tr.dataset.token = t.name;
          tr.dataset.state = t.state;
          const fingerprint = el("td"); fingerprint.append(el("code", t.fingerprint || "–"));
          const state = el("td"); state.append(badge(t.state, TOKEN_KIND[t.state] || ""));
          const action = el("td");
          // Only an oauth2 token has somewhere to fetch a new value from; refreshing a static
          // or file token is refused (409), so it gets no button.
          if (REFRESHABLE.has(t.type)) {
            const button = el("button", "Refresh");
            button.type = "button";
            button.dataset.tokenRefresh = t.name;
            button.addEventListener("click", () => act(button, "POST", "/admin/tokens/" + encodeURIComponent(t.name) + "/refresh",
              "token " + t.name + " refreshed"));
            action.append(button);
          }
          tr.append(el("td", t.name), el("td", t.type), state, fingerprint, el("td", formatTime(t.expires_at)),
            el("td", formatTime(t.refreshed_at)), el("td", t.last_error || "", "err"), action);
          return tr;
        });
        fillBody($("tokens-body"), rows, 8, "no tokens configured");
        delete $("tokens-body").dataset.unavailable;
      }

      function renderJWT(list) {
        const rows = list.providers.map((p) => {
          const tr = el("tr");
          tr.dataset.provider = p.name;
          const ids = p.key_ids.length ? p.key_ids.join(", ") : p.keys + " without kid";
          const action = el("td");
          // Keys written in the config have nowhere to be fetched from.
          if (p.source !== "config") {
            const button = el("button", "Refresh");
            button.type = "button";
            button.dataset.jwtRefresh = p.name;
            button.addEventListener("click", () => act(button, "POST", "/admin/jwt/" + encodeURIComponent(p.name) + "/refresh",
              "keys of " + p.name + " fetched"));
            action.append(button);
          }
          tr.append(el("td", p.name), el("td", p.issuer || "–"), el("td", p.source), el("td", ids),
            el("td", formatTime(p.fetched_at)), el("td", p.last_error || "", "err"), action);
          return tr;
        });
        fillBody($("jwt-body"), rows, 7, "no identity providers configured");
      }

      function renderUpstreams(list) { upstreamList = list; }

      function ago(text) {
        const at = Date.parse(text);
        if (isNaN(at)) return null;
        return Math.max(0, Math.round((Date.now() - at) / 1000));
      }

      // `since` (the last health change) and `last_check` ({at, ok, status, error}) are shown
      // when the gateway reports them: an unhealthy upstream says how long it has been down.
      function renderUpstreamRows() {
        if (!upstreamList) return;
        const rows = upstreamList.upstreams.map((u) => {
          const tr = el("tr");
          tr.dataset.upstream = u.name;
          const health = el("td"); health.append(badge(u.health, u.health === "healthy" ? "ok" : u.health === "unhealthy" ? "bad" : ""));
          const circuit = el("td"); circuit.append(badge(u.circuit, u.circuit === "closed" ? "ok" : u.circuit === "open" ? "bad" : "warn"));
          // Routes whose own circuit is open, beside the upstream's.
          const openRoutes = u.open_routes || [];
          if (openRoutes.length) {
            const routes = el("span", " routes open: " + openRoutes.join(", "), "err");
            routes.dataset.openRoutes = openRoutes.join(",");
            circuit.append(routes);
          }
          const since = el("td");
          const seconds = u.since ? ago(u.since) : null;
          if (seconds !== null) {
            const down = u.health === "unhealthy";
            since.textContent = (down ? "down for " : "up for ") + formatDuration(seconds);
            since.title = formatTime(u.since);
            if (down) { since.className = "down"; since.dataset.downFor = String(seconds); }
          } else {
            since.textContent = "–";
          }
          const check = el("td");
          const c = u.last_check;
          if (c) {
            const when = ago(c.at);
            check.textContent = (c.ok ? "ok" : "failed") + (c.status ? " " + c.status : "") + (c.error ? ": " + c.error : "") +
              (when === null ? "" : " · " + formatDuration(when) + " ago");
            check.dataset.ok = String(c.ok);
            if (!c.ok) check.className = "err";
          } else {
            check.textContent = "–";
          }
          const series = historySeries("upstreams", u.name);
          const figures = summarize(series);
          tr.append(el("td", u.name), el("td", u.address), health, since, check, circuit, numberCell(u.open_connections),
            numberCell(u.idle_connections), numberCell(figures ? figures.requests : null, figures ? formatCount(figures.requests) : "–"),
            numberCell(figures ? figures.errors : null, figures ? formatCount(figures.errors) : "–"),
            numberCell(figures ? figures.p99 : null, formatMs(figures ? figures.p99 : null)), chart(series),
            el("td", u.last_error || "", "err"));
          if ((figures && figures.errors > 0) || u.health === "unhealthy") tr.classList.add("row-5xx");
          // Its endpoints, one line each under it: state, requests in flight, tries, failures.
          const lines = [tr];
          for (const e of (u.endpoints || [])) {
            const line = el("tr");
            line.className = "endpoint";
            line.dataset.endpoint = e.address;
            const state = el("td");
            state.append(badge(e.state, e.state === "healthy" ? "ok" : e.state === "draining" ? "warn" : "bad"));
            const until = e.ejected_until ? " until " + formatTime(e.ejected_until) : "";
            line.append(el("td", "↳ " + u.name), el("td", e.address + " ×" + e.weight), state, el("td", until.trim() || "–"),
              el("td", "–"), el("td", "–"), numberCell(e.in_flight), numberCell(null, "–"), numberCell(e.requests, formatCount(e.requests)),
              numberCell(e.failures, formatCount(e.failures)), numberCell(null, "–"), el("td"), el("td", e.last_error || "", "err"));
            if (e.state !== "healthy") line.classList.add("row-5xx");
            lines.push(line);
          }
          return lines;
        }).flat();
        fillBody($("upstreams-body"), rows, 13, "no upstreams configured");
      }

      function showBanner(id, text) {
        const node = $(id);
        node.hidden = !text;
        node.textContent = text || "";
      }

      function askForToken(message) {
        clearTimeout(timer);
        timer = null;
        generation += 1;
        sessionStorage.removeItem(KEY);
        $("live").dataset.live = "idle";
        $("live").textContent = "signed out";
        $("login-error").hidden = !message;
        $("login-error").textContent = message || "";
        $("login").hidden = false;
        $("token-input").value = "";
        $("token-input").focus();
      }

      // One refresh round: every panel loads on its own, so one failing endpoint does not blank
      // the others. A 401 anywhere means the token is wrong: ask again.
      async function refresh() {
        clearTimeout(timer);
        if (!token()) { askForToken(); return; }
        const round = generation;
        const parts = [
          ["/admin/status", renderStatus, null],
          ["/metrics", renderMetrics, "requests-error"],
          ["/admin/history", renderHistory, "history-error"],
          ["/admin/cache", renderCache, "cache-error"],
          ["/admin/tokens", renderTokens, "tokens-error"],
          ["/admin/jwt", renderJWT, "jwt-error"],
          ["/admin/upstreams", renderUpstreams, "upstreams-error"],
        ];
        const results = await Promise.all(parts.map(([path, render, errorId]) =>
          api("GET", path).then((body) => {
            if (round !== generation) return null;
            render(body);
            if (errorId) sectionError(errorId, null);
            return null;
          }, (error) => {
            if (round !== generation) return error;
            // Token management may be switched off in this build (503): a note, not an outage.
            if (path === "/admin/tokens" && error.status === 503) {
              sectionError(errorId, null);
              fillBody($("tokens-body"), [], 8, "token management is not enabled on this gateway");
              $("tokens-body").dataset.unavailable = "true";
              return null;
            }
            if (errorId) sectionError(errorId, error);
            return error;
          })));
        if (round !== generation) return;
        // The tables combine several answers, so they are drawn once all are in.
        renderRoutes();
        renderUpstreamRows();
        const failures = results.filter((e) => e);
        if (failures.some((e) => e.status === 401)) { askForToken("The admin token was refused. Enter it again."); return; }
        if (failures.length) {
          $("live").dataset.live = "error";
          $("live").textContent = "errors";
          showBanner("error-banner", failures.map((e) => e.message).join(" · "));
        } else {
          $("live").dataset.live = "ok";
          $("live").textContent = "live · " + new Date().toLocaleTimeString("en-GB");
          showBanner("error-banner", null);
        }
        document.body.dataset.ready = "true";
        document.body.dataset.rounds = String(Number(document.body.dataset.rounds || 0) + 1);
        timer = setTimeout(refresh, PERIOD_MS);
      }

      async function act(button, method, path, done) {
        button.disabled = true;
        try {
          const body = await api(method, path);
          showBanner("info-banner", done + (body && typeof body.purged === "number" ? ": " + body.purged + " entries purged" : ""));
          showBanner("error-banner", null);
        } catch (error) {
          if (error.status === 401) { askForToken("The admin token was refused. Enter it again."); return; }
          showBanner("error-banner", method + " " + path + " failed: " + error.message);
        } finally {
          button.disabled = false;
        }
        refresh();
      }

      $("purge-all").addEventListener("click", () => {
        if (!confirm("Purge every cache entry?")) return;
        act($("purge-all"), "DELETE", "/admin/cache", "cache purged");
      });
      $("purge-prefix-button").addEventListener("click", () => {
        const prefix = $("purge-prefix").value.trim();
        if (!prefix) { showBanner("error-banner", "Enter a path prefix to purge."); return; }
        act($("purge-prefix-button"), "DELETE", "/admin/cache/entries?prefix=" + encodeURIComponent(prefix), "prefix " + prefix + " purged");
      });
      $("refresh-now").addEventListener("click", () => refresh());
      $("sign-out").addEventListener("click", () => askForToken());
      $("login-form").addEventListener("submit", (event) => {
        event.preventDefault();
        const value = $("token-input").value.trim();
        if (!value) return;
        sessionStorage.setItem(KEY, value);
        $("token-input").value = "";
        $("login").hidden = true;
        previous = null;
        current = null;
        refresh();
      });

      if (token()) refresh(); else askForToken();
    })();
    """#
}
