import GatehouseHTTP

/// The dashboard page served at `GET /admin/`: one self-contained HTML document (inline CSS
/// and JavaScript, nothing loaded from elsewhere; its Content-Security-Policy forbids it).
/// The policy lets only the page's own script run, named by its SHA-256 (the script is in
/// `AdminDashboardScript.swift`), so markup injected into the page could not run any.
///
/// The page asks for the admin token, keeps it in `sessionStorage` only, and every ~2 s reads
/// `/admin/status`, `/metrics` (request rates are counter deltas computed in the page),
/// `/admin/history` (the last 15 minutes per route and upstream, drawn as inline SVG charts
/// by the script), `/admin/cache`, `/admin/tokens`, `/admin/jwt` and `/admin/upstreams`. Nothing is
/// requested before a token is entered. For scripted checks it takes a
/// token from a `#token=...` fragment, stores it and clears the fragment. Values that tests
/// read carry stable ids with the raw number in `data-value`; `body[data-ready]` turns true
/// after the first complete round. All data is rendered with `textContent`, never as HTML.
enum AdminDashboard {
  /// `'sha256-<base64>'` of the script's exact text, computed once, on first use, from the
  /// same string the page embeds, so the two cannot drift apart.
  static let scriptSource = "'sha256-" + Base64.encode(AdminAuthorizer.sha256(Array(script.utf8))) + "'"

  /// The policy in the page's `<meta>` (it also holds for a saved copy of the page): no
  /// source but this listener for `fetch`, the page's own script and its inline styles.
  static let pagePolicy =
    "default-src 'none'; script-src \(scriptSource); style-src 'unsafe-inline'; connect-src 'self'; "
    + "img-src data:; form-action 'none'; base-uri 'none'"

  /// The `Content-Security-Policy` header of the page's answer: the page's policy and
  /// `frame-ancestors 'none'`, which works only in a header (browsers ignore it in `<meta>`).
  static let contentSecurityPolicy = pagePolicy + "; frame-ancestors 'none'"

  static let html = #"""
    <!doctype html>
    <html lang="en">
    <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <meta name="referrer" content="no-referrer">
    <meta http-equiv="Content-Security-Policy" content="\#(pagePolicy)">
    <title>Gatehouse admin</title>
    <style>
      :root {
        --bg: #f4f6f8; --panel: #fff; --ink: #1d2733; --muted: #5f6b7a; --line: #dde3ea;
        --accent: #2563eb; --ok: #15803d; --warn: #b45309; --bad: #b91c1c; --idle: #64748b;
        font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
        font-size: 14px; color: var(--ink); background: var(--bg);
      }
      * { box-sizing: border-box; }
      body { margin: 0; }
      header {
        display: flex; align-items: center; gap: 16px; padding: 12px 24px;
        background: #111827; color: #f9fafb;
      }
      header h1 { font-size: 18px; margin: 0; font-weight: 600; letter-spacing: .02em; }
      header .meta { color: #cbd5e1; font-size: 13px; flex: 1; min-width: 0; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
      header button, #live { white-space: nowrap; }
      header button { background: transparent; color: #e5e7eb; border-color: #4b5563; }
      #live { display: inline-flex; align-items: center; gap: 6px; font-size: 13px; color: #cbd5e1; }
      #live::before { content: ""; width: 8px; height: 8px; border-radius: 50%; background: var(--idle); }
      #live[data-live="ok"]::before { background: #22c55e; }
      #live[data-live="error"]::before { background: #ef4444; }
      main { padding: 20px 24px 40px; display: grid; gap: 16px; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); }
      section { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px; min-width: 0; }
      section.wide { grid-column: 1 / -1; }
      h2 { font-size: 15px; margin: 0 0 12px; display: flex; align-items: center; gap: 8px; }
      h2 .note { font-weight: 400; color: var(--muted); font-size: 12px; }
      .stats { display: grid; grid-template-columns: repeat(auto-fill, minmax(110px, 1fr)); gap: 10px; margin-bottom: 12px; }
      .stat { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; }
      .stat .label { color: var(--muted); font-size: 12px; }
      .stat .sub { color: var(--muted); font-size: 11px; margin-top: 2px; }
      .stat .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; margin-top: 2px; }
      .stat .value.bad { color: var(--bad); }
      #shared-detail { overflow-wrap: anywhere; }
      table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
      th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
      th { color: var(--muted); font-weight: 500; font-size: 12px; }
      td.num, th.num { text-align: right; }
      td.err { color: var(--bad); max-width: 260px; overflow-wrap: anywhere; }
      td.empty { color: var(--muted); text-align: center; padding: 14px; }
      tr.row-5xx td { background: #fef2f2; }
      tr.row-5xx td:first-child { box-shadow: inset 3px 0 0 var(--bad); }
      td.chart { padding: 2px 8px; width: 190px; }
      svg.chart { display: block; }
      svg.chart .req { fill: #93c5fd; }
      svg.chart .err { fill: var(--bad); }
      svg.chart .p99 { fill: none; stroke: var(--warn); stroke-width: 1.5; }
      svg.chart .base { stroke: var(--line); }
      .legend { color: var(--muted); font-size: 12px; margin: 8px 0 0; }
      .legend .key { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; vertical-align: -1px; }
      .unmatched { color: var(--muted); font-style: italic; }
      .down { color: var(--bad); font-weight: 600; }
      code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12px; }
      .badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; background: #e2e8f0; color: var(--idle); }
      .badge.ok { background: #dcfce7; color: var(--ok); }
      .badge.warn { background: #fef3c7; color: var(--warn); }
      .badge.bad { background: #fee2e2; color: var(--bad); }
      button {
        font: inherit; font-size: 13px; padding: 5px 12px; border-radius: 6px; cursor: pointer;
        border: 1px solid var(--line); background: #fff; color: var(--ink);
      }
      button:hover { border-color: var(--accent); }
      button.danger { color: #fff; background: var(--bad); border-color: var(--bad); }
      button.primary { color: #fff; background: var(--accent); border-color: var(--accent); }
      button:disabled { opacity: .5; cursor: default; }
      input[type=text], input[type=password] {
        font: inherit; padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; min-width: 0;
      }
      .actions { display: flex; gap: 8px; flex-wrap: wrap; align-items: center; }
      .actions input { flex: 1; }
      .banner { margin: 16px 24px 0; padding: 10px 14px; border-radius: 6px; border: 1px solid; }
      .banner.error { background: #fef2f2; border-color: #fecaca; color: var(--bad); }
      .banner.info { background: #eff6ff; border-color: #bfdbfe; color: #1e40af; }
      .section-error { color: var(--bad); font-size: 13px; margin: 0 0 8px; }
      [hidden] { display: none !important; }
      #login {
        position: fixed; inset: 0; background: rgba(15, 23, 42, .55); display: flex; align-items: center; justify-content: center;
      }
      #login form { background: #fff; padding: 24px; border-radius: 10px; width: 360px; display: grid; gap: 12px; box-shadow: 0 10px 30px rgba(0,0,0,.25); }
      #login h2 { margin: 0; font-size: 17px; }
      #login p { margin: 0; color: var(--muted); }
      #login-error { color: var(--bad) !important; }
    </style>
    </head>
    <body data-ready="false">
    <header>
      <h1>Gatehouse</h1>
      <span class="meta" id="status-line">not connected</span>
      <span id="live" data-live="idle">idle</span>
      <button type="button" id="refresh-now">Refresh</button>
      <button type="button" id="sign-out">Forget token</button>
    </header>

    <div id="error-banner" class="banner error" role="alert" hidden></div>
    <div id="info-banner" class="banner info" role="status" hidden></div>

    <main>
      <section id="requests-panel" class="wide">
        <h2>Requests <span class="note">totals and rates from /metrics; latency and charts from /admin/history (last 15 minutes, 10 s samples)</span></h2>
        <p class="section-error" id="requests-error" hidden></p>
        <p class="section-error" id="history-error" hidden></p>
        <div class="stats">
          <div class="stat"><div class="label">Total</div><div class="value" id="req-total" data-value="">–</div></div>
          <div class="stat"><div class="label">Requests/s</div><div class="value" id="req-rate" data-value="">–</div></div>
          <div class="stat"><div class="label">Errors/s (5xx)</div><div class="value" id="req-error-rate" data-value="">–</div></div>
          <div class="stat"><div class="label">Connections</div><div class="value" id="conn-client" data-value="">–</div></div>
        </div>
        <table>
          <thead><tr><th>Route</th><th class="num">Total</th><th class="num">Req/s</th><th class="num">4xx</th><th class="num">5xx</th><th class="num">5xx 15m</th><th class="num">p50 ms</th><th class="num">p99 ms</th><th>Last 15 minutes</th></tr></thead>
          <tbody id="routes-body"><tr><td class="empty" colspan="9">no requests yet</td></tr></tbody>
        </table>
        <p class="legend">p50/p99: the newest 10 s with requests. Chart:<span class="key" style="background:#93c5fd"></span>requests<span class="key" style="background:#b91c1c"></span>5xx<span class="key" style="background:#b45309"></span>p99 latency</p>
      </section>

      <section id="cache-panel">
        <h2>Cache</h2>
        <p class="section-error" id="cache-error" hidden></p>
        <div class="stats">
          <div class="stat"><div class="label">Entries</div><div class="value" id="cache-entries" data-value="">–</div></div>
          <div class="stat"><div class="label">Size</div><div class="value" id="cache-bytes" data-value="">–</div><div class="sub" id="cache-max-bytes" data-value=""></div></div>
          <div class="stat"><div class="label">Hits</div><div class="value" id="cache-hits" data-value="">–</div></div>
          <div class="stat"><div class="label">Stale served</div><div class="value" id="cache-stale" data-value="">–</div></div>
          <div class="stat"><div class="label">Misses</div><div class="value" id="cache-misses" data-value="">–</div></div>
          <div class="stat"><div class="label">Writes</div><div class="value" id="cache-writes" data-value="">–</div></div>
          <div class="stat"><div class="label">Evictions</div><div class="value" id="cache-evictions" data-value="">–</div></div>
          <div class="stat"><div class="label">Hit ratio</div><div class="value" id="cache-hit-ratio" data-value="">–</div></div>
          <div class="stat" title="The shared tier (Redis/Valkey) of /admin/status"><div class="label">Shared tier</div><div class="value" id="shared-state" data-state="">–</div><div class="sub" id="shared-detail"></div></div>
        </div>
        <div class="actions">
          <input type="text" id="purge-prefix" placeholder="upstream path prefix, e.g. /users/" aria-label="Purge prefix">
          <button type="button" id="purge-prefix-button">Purge prefix</button>
          <button type="button" id="purge-all" class="danger">Purge all</button>
        </div>
      </section>

      <section id="tokens-panel" class="wide">
        <h2>Tokens</h2>
        <p class="section-error" id="tokens-error" hidden></p>
        <table>
          <thead><tr><th>Name</th><th>Type</th><th>State</th><th>Fingerprint</th><th>Expires</th><th>Refreshed</th><th>Last error</th><th></th></tr></thead>
          <tbody id="tokens-body"><tr><td class="empty" colspan="8">loading…</td></tr></tbody>
        </table>
      </section>

      <section id="jwt-panel" class="wide">
        <h2>Identity providers (JWT)</h2>
        <p class="section-error" id="jwt-error" hidden></p>
        <table>
          <thead><tr><th>Name</th><th>Issuer</th><th>Keys from</th><th>Key ids</th><th>Fetched</th><th>Last error</th><th></th></tr></thead>
          <tbody id="jwt-body"><tr><td class="empty" colspan="7">loading…</td></tr></tbody>
        </table>
      </section>

      <section id="upstreams-panel" class="wide">
        <h2>Upstreams</h2>
        <p class="section-error" id="upstreams-error" hidden></p>
        <table>
          <thead><tr><th>Name</th><th>Address</th><th>Health</th><th>Since</th><th>Last check</th><th>Circuit</th><th class="num">Open</th><th class="num">Idle</th><th class="num">Req 15m</th><th class="num">5xx 15m</th><th class="num">p99 ms</th><th>Last 15 minutes</th><th>Last error</th></tr></thead>
          <tbody id="upstreams-body"><tr><td class="empty" colspan="13">loading…</td></tr></tbody>
        </table>
      </section>
    </main>

    <div id="login" hidden>
      <form id="login-form" autocomplete="off">
        <h2>Admin token</h2>
        <p>Enter the gateway's admin token (<code>admin.token</code>). It is kept in this tab only.</p>
        <p id="login-error" hidden></p>
        <input type="password" id="token-input" aria-label="Admin token" required>
        <button type="submit" class="primary">Connect</button>
      </form>
    </div>

    <script>\#(script)</script>
    </body>
    </html>
    """#
}
