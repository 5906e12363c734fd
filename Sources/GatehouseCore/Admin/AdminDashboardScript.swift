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
        const rows = Object.keys(now.routes).sort().map((name) => {
          const r = now.routes[name];
          const perSecond = rate(now, before, (s) => (s.routes[name] ? s.routes[name].total : 0));
          const tr = el("tr");
          tr.dataset.route = name;
          tr.append(el("td", name), el("td", formatCount(r.total), "num"), el("td", formatRate(perSecond), "num"),
            el("td", formatCount(r.c4), "num"), el("td", formatCount(r.c5), "num"));
          tr.children[1].dataset.value = String(r.total);
          return tr;
        });
        fillBody($("routes-body"), rows, 5, "no requests yet");
      }

      function renderStatus(status) {
        $("status-line").textContent = "v" + status.version + " · up " + formatDuration(status.uptime_s) +
          " · " + status.workers + " worker" + (status.workers === 1 ? "" : "s") + " · " + status.routes + " routes · config " +
          (status.config_file || "embedded") + " loaded " + formatTime(status.config_loaded_at);
        $("status-line").dataset.version = status.version;
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

      const TOKEN_KIND = { valid: "ok", expiring: "warn", refreshing: "warn", expired: "bad", invalid: "bad", missing: "bad", error: "bad" };
      function renderTokens(list) {
        const rows = list.tokens.map((t) => {
          const tr = el("tr");
          tr.dataset.token = t.name;
          tr.dataset.state = t.state;
          const button = el("button", "Refresh");
          button.type = "button";
          button.dataset.tokenRefresh = t.name;
          button.addEventListener("click", () => act(button, "POST", "/admin/tokens/" + encodeURIComponent(t.name) + "/refresh",
            "token " + t.name + " refreshed"));
          const fingerprint = el("td"); fingerprint.append(el("code", t.fingerprint || "–"));
          const state = el("td"); state.append(badge(t.state, TOKEN_KIND[t.state] || ""));
          const action = el("td"); action.append(button);
          tr.append(el("td", t.name), el("td", t.type), state, fingerprint, el("td", formatTime(t.expires_at)),
            el("td", formatTime(t.refreshed_at)), el("td", t.last_error || "", "err"), action);
          return tr;
        });
        fillBody($("tokens-body"), rows, 8, "no tokens configured");
        delete $("tokens-body").dataset.unavailable;
      }

      function renderUpstreams(list) {
        const rows = list.upstreams.map((u) => {
          const tr = el("tr");
          tr.dataset.upstream = u.name;
          const health = el("td"); health.append(badge(u.health, u.health === "healthy" ? "ok" : u.health === "unhealthy" ? "bad" : ""));
          const circuit = el("td"); circuit.append(badge(u.circuit, u.circuit === "closed" ? "ok" : u.circuit === "open" ? "bad" : "warn"));
          tr.append(el("td", u.name), el("td", u.address), health, circuit, el("td", formatCount(u.open_connections), "num"),
            el("td", formatCount(u.idle_connections), "num"), el("td", u.last_error || "", "err"));
          tr.children[4].dataset.value = String(u.open_connections);
          tr.children[5].dataset.value = String(u.idle_connections);
          return tr;
        });
        fillBody($("upstreams-body"), rows, 7, "no upstreams configured");
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
          ["/admin/cache", renderCache, "cache-error"],
          ["/admin/tokens", renderTokens, "tokens-error"],
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
        refresh();
      });

      if (token()) refresh(); else askForToken();
    })();
    """#
}
