import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Reply, type Route } from "../../http/Route.js"

/**
 * `GET /gateway/dashboard` (spec 4.5; ARCHITECTURE "Dashboard: one HTML page with charts"): one
 * self-contained page for operators. It holds no data, so it is served without a key; the page asks
 * for the admin key, keeps it in `sessionStorage` only and sends it as `Authorization: Bearer` to
 * `/gateway/status`, `/gateway/usage`, `/gateway/admin/keys` and `/gateway/admin/budgets`. Charts are
 * inline SVG drawn by the page's own script; it loads nothing from elsewhere. A cost is shown only as
 * far as it is known: calls to a model without a price are counted as unpriced, never costed at $0.
 *
 * The Content-Security-Policy admits only the page's own `<style>` and `<script>` (a nonce per
 * response), talks only to this origin, forbids framing, and turns on Trusted Types so that no HTML
 * string can reach the DOM: the script builds every node with `createElement` and `textContent`.
 */

const STYLE = `
:root{--bg:#f5f6f8;--card:#fff;--text:#17202b;--muted:#5d6876;--line:#e2e5ea;--grid:#eef0f3;--accent:#2f6fdf;--bad:#d23f3f;--ok:#1b9a59;--chip:#eef3fd}
@media (prefers-color-scheme:dark){:root{--bg:#0e1217;--card:#161b22;--text:#e5e9ee;--muted:#98a2ae;--line:#29313b;--grid:#1f262f;--accent:#5b8def;--bad:#f06868;--ok:#3fbf7f;--chip:#1b2533}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;background:var(--bg);color:var(--text)}
header{display:flex;align-items:center;gap:12px;padding:10px 24px;background:var(--card);border-bottom:1px solid var(--line);position:sticky;top:0;z-index:2}
header h1{font-size:16px;margin:0;font-weight:650}
header h1 span{font-weight:400;color:var(--muted)}
.spacer{flex:1}
main{max-width:1320px;margin:0 auto;padding:18px 24px 48px}
#dash{display:grid;gap:16px}
[hidden]{display:none!important}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;min-width:0}
.card>h2{font-size:14px;margin:0 0 10px;font-weight:650;display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.card>h2 .note{font-weight:400;font-size:12px;color:var(--muted)}
.card>h2 .spacer{flex:1}
.row{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:16px}
.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px;margin-bottom:12px}
.stat{border:1px solid var(--line);border-radius:8px;padding:8px 12px}
.stat .label{color:var(--muted);font-size:12px}
.stat .value{font-size:20px;font-weight:650;font-variant-numeric:tabular-nums;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.stat .sub{color:var(--muted);font-size:12px}
.stat.bad .value{color:var(--bad)}
table{width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
th{color:var(--muted);font-weight:500;font-size:12px}
.num{text-align:right}
td.name{max-width:220px;overflow:hidden;text-overflow:ellipsis}
td.bad{color:var(--bad)}
.scroll{overflow-x:auto}
.empty{color:var(--muted);padding:10px 0}
.muted{color:var(--muted)}
.small{font-size:12px}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.alert{border:1px solid var(--bad);color:var(--bad);border-radius:8px;padding:8px 12px;margin:8px 0;background:rgba(210,63,63,.07)}
.notice{border:1px solid var(--ok);border-radius:8px;padding:8px 12px;margin:8px 0;background:rgba(27,154,89,.07)}
.secret{border:1px solid var(--accent);border-radius:8px;padding:10px 12px;margin:8px 0;background:var(--chip)}
.secret code{display:block;margin:6px 0;padding:6px 8px;background:var(--card);border:1px solid var(--line);border-radius:6px;word-break:break-all;user-select:all}
.toolbar{display:flex;flex-wrap:wrap;gap:8px 12px;align-items:end;margin-bottom:12px}
.field{display:grid;gap:2px}
.field label{font-size:12px;color:var(--muted)}
input,select,button{font:inherit;color:inherit}
input,select{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:5px 8px;min-height:32px}
input:focus,select:focus,button:focus-visible{outline:2px solid var(--accent);outline-offset:1px}
button{border:1px solid var(--line);background:var(--card);border-radius:6px;padding:5px 12px;min-height:32px;cursor:pointer}
button:hover{border-color:var(--accent)}
button.primary{background:var(--accent);border-color:var(--accent);color:#fff}
button.danger{color:var(--bad)}
button.danger:hover{border-color:var(--bad)}
button:disabled{opacity:.55;cursor:default}
.seg{display:inline-flex;border:1px solid var(--line);border-radius:6px;overflow:hidden}
.seg button{border:0;border-radius:0;min-height:26px;padding:2px 10px;font-size:12px}
.seg button[aria-pressed=true]{background:var(--chip);color:var(--accent);font-weight:600}
.presets{display:flex;gap:4px}
.presets button{padding:5px 9px}
.pill{font-size:12px;border-radius:999px;padding:3px 10px;border:1px solid var(--line);color:var(--muted);white-space:nowrap}
.pill.ok{color:var(--ok);border-color:var(--ok)}
.pill.bad{color:var(--bad);border-color:var(--bad)}
.signin{max-width:460px;margin:48px auto 0;width:100%}
.signin form{display:grid;gap:8px;margin-top:10px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:6px 0 4px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.chart{display:block;width:100%;overflow:visible}
.chart text{fill:var(--muted);font-size:11px}
.chart .gridline{stroke:var(--grid)}
.chart .baseline{stroke:var(--line)}
.chart .bar:hover{opacity:.8}
.chart .none{font-size:13px}
.minibar .track,.spendbar .track{fill:var(--grid)}
svg .unknown{fill:none;stroke:var(--muted);stroke-dasharray:2 2}
.budget .sub{color:var(--muted);font-size:12px;margin-top:2px;white-space:normal}
.budget td{vertical-align:top}
table.breakdown th{white-space:normal;vertical-align:bottom}
.budget .over{color:var(--bad);font-weight:600}
`

const BODY = `
<header>
  <h1>LLM gateway <span>operator dashboard</span></h1>
  <span class="spacer"></span>
  <span id="live" class="pill" hidden></span>
  <button id="signout" type="button" hidden>Sign out</button>
</header>
<main>
  <section id="signin" class="card signin" hidden>
    <h2>Sign in</h2>
    <p class="muted small">Enter this gateway's admin key. It stays in this browser tab only (session storage, never a cookie or a URL) and is sent as <code>Authorization: Bearer</code> to the gateway's own routes.</p>
    <form id="signin-form" method="post" autocomplete="off">
      <label class="small muted" for="key">Admin key</label>
      <input id="key" type="password" autocomplete="current-password" spellcheck="false" placeholder="admin key">
      <button id="signin-button" type="submit" class="primary">Open dashboard</button>
    </form>
    <div id="signin-error" class="alert" role="alert" hidden></div>
    <p class="muted small">A gateway on loopback with no keys and no admin key needs none: leave the field empty.</p>
  </section>

  <div id="dash" hidden>
    <section class="card" id="status-card">
      <h2>Status <span class="note" id="status-note"></span></h2>
      <div id="status-error" class="alert" role="alert" hidden></div>
      <div class="stats" id="status-stats"></div>
      <div class="scroll"><table id="providers"><thead><tr><th>Provider</th><th>Type</th><th class="num">Calls (5 min)</th><th class="num">Failures</th><th class="num">Error rate</th><th></th></tr></thead><tbody></tbody></table></div>
    </section>

    <section class="card" id="usage-card">
      <h2>Usage <span class="note" id="usage-note"></span></h2>
      <form class="toolbar" id="usage-form" method="post">
        <div class="field"><label for="from">From (UTC)</label><input id="from" type="date" required></div>
        <div class="field"><label for="to">To (UTC)</label><input id="to" type="date" required></div>
        <div class="presets" role="group" aria-label="Range presets">
          <button type="button" data-days="1">Today</button>
          <button type="button" data-days="7">7 days</button>
          <button type="button" data-days="30">30 days</button>
          <button type="button" data-days="90">90 days</button>
        </div>
        <div class="field"><label for="app-filter">App</label><select id="app-filter"><option value="">All apps</option></select></div>
        <div class="field"><label for="user-filter">User</label><input id="user-filter" type="text" placeholder="any user" maxlength="64" spellcheck="false"></div>
        <button type="submit" class="primary" id="usage-apply">Show</button>
      </form>
      <div id="usage-error" class="alert" role="alert" hidden></div>
      <div class="stats" id="usage-stats"></div>
    </section>

    <div class="row">
      <section class="card" id="requests-card"><h2>Requests over time <span class="note" id="requests-note"></span></h2><div class="legend" id="requests-legend"></div><div id="requests-chart"></div></section>
      <section class="card" id="tokens-card"><h2>Tokens over time <span class="note" id="tokens-note"></span></h2><div class="legend" id="tokens-legend"></div><div id="tokens-chart"></div></section>
    </div>

    <div class="row">
      <section class="card" id="cost-card"><h2>Cost over time <span class="note" id="cost-note"></span></h2><div class="legend" id="cost-legend"></div><div id="cost-chart"></div></section>
      <section class="card" id="budgets-card">
        <h2>Budgets <span class="note">spending in the current period against each limit</span></h2>
        <div id="budgets-error" class="alert" role="alert" hidden></div>
        <p id="budgets-admin" class="empty" hidden>Budgets are read with the admin key: sign in with it to see spending against each budget.</p>
        <div class="scroll" id="budgets-wrap"><table id="budgets-table"><thead><tr><th>Budget</th><th>Spent</th><th>Period ends</th></tr></thead><tbody></tbody></table></div>
      </section>
    </div>

    <div class="row">
      <section class="card" id="models-card">
        <h2>Per model <span class="note">daily, UTC</span><span class="spacer"></span><span class="seg" data-metric-for="models"><button type="button" data-metric="requests" aria-pressed="true">Requests</button><button type="button" data-metric="tokens" aria-pressed="false">Tokens</button><button type="button" data-metric="cost" aria-pressed="false">Cost</button></span></h2>
        <div class="legend" id="models-legend"></div><div id="models-chart"></div>
        <div class="scroll"><table id="models-table" class="breakdown"><thead><tr><th>Model</th><th class="num">Requests</th><th class="num">Errors</th><th class="num">Error rate</th><th class="num">Input tokens</th><th class="num">Output tokens</th><th class="num">Cost</th><th class="num" title="calls to a model without a price: their cost is unknown">Unpriced</th></tr></thead><tbody></tbody></table></div>
      </section>
      <section class="card" id="apps-card">
        <h2>Per app <span class="note">daily, UTC</span><span class="spacer"></span><span class="seg" data-metric-for="apps"><button type="button" data-metric="requests" aria-pressed="true">Requests</button><button type="button" data-metric="tokens" aria-pressed="false">Tokens</button><button type="button" data-metric="cost" aria-pressed="false">Cost</button></span></h2>
        <div class="legend" id="apps-legend"></div><div id="apps-chart"></div>
        <div class="scroll"><table id="apps-table" class="breakdown"><thead><tr><th>App</th><th class="num">Requests</th><th class="num">Errors</th><th class="num">Error rate</th><th class="num">Input tokens</th><th class="num">Output tokens</th><th class="num">Cost</th><th class="num" title="calls to a model without a price: their cost is unknown">Unpriced</th></tr></thead><tbody></tbody></table></div>
      </section>
    </div>

    <div class="row">
      <section class="card" id="users-card">
        <h2>Top users <span class="note">by requests, at most 20</span></h2>
        <div class="scroll"><table id="users-table"><thead><tr><th>User</th><th class="num">Requests</th><th></th><th class="num">Errors</th><th class="num">Input tokens</th><th class="num">Output tokens</th></tr></thead><tbody></tbody></table></div>
      </section>
      <section class="card" id="keys-card">
        <h2>Runtime keys <span class="note">keys from the config file are not listed</span></h2>
        <form class="toolbar" id="key-form" method="post">
          <div class="field"><label for="key-app">App</label><input id="key-app" type="text" required maxlength="64" pattern="[a-z0-9\\-]+" placeholder="team-name" spellcheck="false" autocomplete="off"></div>
          <button type="submit" class="primary" id="key-create">Create key</button>
        </form>
        <div id="keys-error" class="alert" role="alert" hidden></div>
        <div id="keys-notice" class="notice" role="status" hidden></div>
        <div id="new-secret" class="secret" role="status" hidden></div>
        <div class="scroll"><table id="keys-table"><thead><tr><th>Key id</th><th>App</th><th>Created</th><th></th></tr></thead><tbody></tbody></table></div>
      </section>
    </div>
  </div>
</main>
<noscript><p class="card">This dashboard needs JavaScript.</p></noscript>
`

const SCRIPT = `
"use strict";
(() => {
  const STORE = "gateway.adminKey";
  const SVGNS = "http://www.w3.org/2000/svg";
  const RED = "#d23f3f", GREEN = "#1b9a59", BLUE = "#2f6fdf";
  const PALETTE = ["#2f6fdf", "#e8590c", "#12a182", "#9c36b5", "#f0a202", "#1098ad", "#d6336c", "#5c7cfa", "#74b816", "#8a94a0"];
  const STATUS_EVERY_MS = 5000;
  const USAGE_EVERY_MS = 30000;
  const DAY_MS = 86400000;
  const $ = (id) => document.getElementById(id);
  const state = { key: null, statusTimer: 0, usageTimer: 0, usage: null, metric: { models: "requests", apps: "requests" }, apps: new Set() };

  // ---- DOM helpers: text only ever enters the page as text nodes or attribute values ----
  const add = (node, children) => {
    for (const c of Array.isArray(children) ? children : [children]) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return node;
  };
  const el = (tag, attrs, children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    return add(node, children);
  };
  const svg = (tag, attrs, children) => {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    return add(node, children);
  };
  const show = (node, on) => { node.hidden = !on; };
  const setError = (node, error) => {
    node.replaceChildren();
    if (!error) return show(node, false);
    add(node, [el("strong", {}, error.detail), " ", el("span", { class: "small" }, "(" + [error.code, error.status ? "HTTP " + error.status : null].filter(Boolean).join(", ") + ")")]);
    show(node, true);
  };

  // ---- formatting ----
  const fmtInt = new Intl.NumberFormat("en");
  const fmtCompact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });
  const fmtDay = new Intl.DateTimeFormat("en", { month: "short", day: "numeric", timeZone: "UTC" });
  const num = (n) => fmtInt.format(n || 0);
  const compact = (n) => fmtCompact.format(n || 0);
  const pct = (rate) => (rate * 100).toFixed(rate > 0 && rate < 0.1 ? 1 : 0) + "%";
  const rate = (t) => (t.requests > 0 ? t.errors / t.requests : 0);
  const fmtUsd = new Intl.NumberFormat("en", { style: "currency", currency: "USD", minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const fmtUsdSmall = new Intl.NumberFormat("en", { style: "currency", currency: "USD", maximumSignificantDigits: 3 });
  const fmtWhen = new Intl.DateTimeFormat("en", { month: "short", day: "numeric", year: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: "UTC" });
  /** cents when they matter, else three significant digits: one call often costs a fraction of a cent */
  const usd = (n) => (!n ? fmtUsd.format(0) : n >= 0.1 ? fmtUsd.format(n) : fmtUsdSmall.format(n));
  const usdTick = (n) => (n >= 1000 ? "$" + compact(n) : usd(n));
  /** a cost as far as it is known: calls without a price have an unknown cost, never shown as $0, so a cost with some is a lower bound */
  const cost = (t) => (t.unpricedCalls > 0 ? (t.costUsd > 0 ? "≥ " + usd(t.costUsd) : "unknown") : usd(t.costUsd));
  const share = (f) => (f <= 0 ? "0%" : f < 0.001 ? "<0.1%" : (f * 100).toFixed(f < 0.1 ? 1 : 0) + "%");
  const zeroTotals = () => ({ requests: 0, errors: 0, inputTokens: 0, outputTokens: 0, costUsd: 0, unpricedCalls: 0 });
  const plus = (a, t) => { for (const k of Object.keys(a)) a[k] += t[k] || 0; return a; };
  const bytes = (n) => { const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0; while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return (i === 0 ? n : n.toFixed(1)) + " " + u[i]; };
  const ms = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : Math.round(v) + " ms");
  const duration = (s) => {
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d > 0) return d + " d " + h + " h";
    if (h > 0) return h + " h " + m + " min";
    if (m > 0) return m + " min " + (s % 60) + " s";
    return s + " s";
  };
  const isoDay = (t) => new Date(t).toISOString().slice(0, 10);
  const dayLabel = (key) => fmtDay.format(new Date(key.slice(0, 10) + "T00:00:00Z"));

  // ---- the JSON routes; errors carry the problem details' detail ----
  class ApiError extends Error {
    constructor(status, code, detail) { super(detail); this.status = status; this.code = code; this.detail = detail; }
  }
  const api = async (method, path, body) => {
    const headers = { accept: "application/json" };
    if (state.key) headers.authorization = "Bearer " + state.key;
    if (body !== undefined) headers["content-type"] = "application/json";
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: "omit", redirect: "error" });
    } catch (e) {
      throw new ApiError(0, "network_error", "The gateway could not be reached: " + (e && e.message ? e.message : String(e)));
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!res.ok) {
      const detail = data && typeof data.detail === "string" ? data.detail : "HTTP " + res.status + " " + res.statusText;
      throw new ApiError(res.status, data && typeof data.code === "string" ? data.code : "http_error", detail);
    }
    return data;
  };
  /** a key that no longer works (or is not the admin's) ends the session with its reason */
  const isAuthFailure = (e) => e instanceof ApiError && (e.status === 401 || (e.status === 403 && e.code === "admin_key_required"));
  const guard = (e, area) => { if (isAuthFailure(e)) { signOut(e); return; } setError(area, e); };

  // ---- sign in / out ----
  const signOut = (error) => {
    clearInterval(state.statusTimer); clearInterval(state.usageTimer);
    state.key = null; state.usage = null;
    sessionStorage.removeItem(STORE);
    for (const id of ["status-stats", "usage-stats", "requests-chart", "tokens-chart", "cost-chart", "models-chart", "apps-chart", "new-secret"]) $(id).replaceChildren();
    for (const t of document.querySelectorAll("#dash tbody")) t.replaceChildren();
    show($("new-secret"), false); show($("budgets-admin"), false);
    show($("dash"), false); show($("signout"), false); show($("live"), false);
    show($("signin"), true);
    setError($("signin-error"), error || null);
    $("key").value = "";
    $("key").focus();
  };
  const signIn = async (key) => {
    state.key = key;
    $("signin-button").disabled = true;
    try {
      const status = await api("GET", "/gateway/status");
      sessionStorage.setItem(STORE, key);
      show($("signin"), false); setError($("signin-error"), null);
      show($("dash"), true); show($("signout"), true);
      renderStatus(status);
      state.statusTimer = setInterval(refreshStatus, STATUS_EVERY_MS);
      state.usageTimer = setInterval(() => { if (!document.hidden) { refreshUsage(); refreshBudgets(); } }, USAGE_EVERY_MS);
      refreshUsage();
      refreshKeys();
      refreshBudgets();
    } catch (e) {
      signOut(e);
    } finally {
      $("signin-button").disabled = false;
    }
  };

  // ---- status ----
  const stat = (label, value, sub, bad) => el("div", { class: "stat" + (bad ? " bad" : "") }, [el("div", { class: "label" }, label), el("div", { class: "value", title: String(value) }, value), sub ? el("div", { class: "sub" }, sub) : null]);
  const sum = (list, k) => (list || []).reduce((a, x) => a + (x[k] || 0), 0);
  const minibar = (fraction, color) => svg("svg", { class: "minibar", width: 80, height: 8, "aria-hidden": "true" }, [
    svg("rect", { class: "track", x: 0, y: 0, width: 80, height: 8, rx: 3 }),
    svg("rect", { x: 0, y: 0, width: Math.max(fraction > 0 ? 2 : 0, Math.round(80 * Math.min(1, fraction))), height: 8, rx: 3, fill: color })
  ]);
  const renderStatus = (s) => {
    const live = $("live");
    live.textContent = "live · " + new Date().toLocaleTimeString();
    live.className = "pill ok"; show(live, true);
    $("status-note").textContent = "refreshed every " + STATUS_EVERY_MS / 1000 + " s";
    setError($("status-error"), null);
    const stored = s.storedResponses || [], files = s.files || [];
    $("status-stats").replaceChildren(
      stat("Version", s.version),
      stat("Uptime", duration(s.uptimeSeconds || 0)),
      stat("Requests in flight", num(s.inFlight && s.inFlight.requests)),
      stat("Model calls in flight", num(s.inFlight && s.inFlight.modelRequests)),
      stat("Body bytes in flight", bytes((s.inFlight && s.inFlight.bodyBytes) || 0)),
      stat("Stored responses", num(sum(stored, "count")), bytes(sum(stored, "bytes"))),
      stat("Files", num(sum(files, "count")), bytes(sum(files, "bytes")))
    );
    const body = $("providers").tBodies[0];
    body.replaceChildren(...(s.providers || []).map((p) => {
      const r = p.recent || { calls: 0, failures: 0, errorRate: 0 };
      return el("tr", { "data-provider": p.name }, [
        el("td", { class: "name" }, p.name), el("td", {}, p.type),
        el("td", { class: "num" }, num(r.calls)), el("td", { class: "num" }, num(r.failures)),
        el("td", { class: "num" + (r.errorRate > 0 ? " bad" : "") }, pct(r.errorRate || 0)),
        el("td", {}, minibar(r.errorRate || 0, r.errorRate > 0 ? RED : GREEN))
      ]);
    }));
    if (!body.rows.length) body.appendChild(el("tr", {}, el("td", { colspan: 6, class: "empty" }, "No providers configured.")));
  };
  const refreshStatus = async () => {
    if (document.hidden || state.key === null) return;
    try { renderStatus(await api("GET", "/gateway/status")); }
    catch (e) {
      if (isAuthFailure(e)) return signOut(e);
      setError($("status-error"), e);
      $("live").textContent = "status unavailable"; $("live").className = "pill bad";
    }
  };

  // ---- charts: stacked bars in inline SVG ----
  const niceStep = (raw, integer) => {
    if (raw <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    const step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
    return integer ? Math.max(1, Math.ceil(step)) : step;
  };
  /**
   * buckets: [{label, title}]; series: [{name, color, values}] stacked bottom-up in order; options:
   * label, integer, format (values, default a count), empty (the text without values), unknown (per
   * bucket, calls whose cost is unknown: a dashed mark above the bar, since they cannot be a height)
   */
  const barChart = (host, buckets, series, options) => {
    const format = options.format || num, tick = options.tick || compact;
    const width = Math.max(300, Math.floor(host.clientWidth || 600)), height = 210;
    const m = { top: 8, right: 6, bottom: 24, left: options.format ? 62 : 46 };
    const w = width - m.left - m.right, h = height - m.top - m.bottom;
    const totals = buckets.map((_, i) => series.reduce((a, s) => a + (s.values[i] || 0), 0));
    const max = Math.max(0, ...totals);
    const step = niceStep(max / 4, options.integer);
    const top = Math.max(step, Math.ceil(max / step) * step);
    const root = svg("svg", { class: "chart", width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": options.label });
    for (let v = 0; v <= top + step / 2; v += step) {
      const y = m.top + h - (h * v) / top;
      root.appendChild(svg("line", { class: v === 0 ? "baseline" : "gridline", x1: m.left, x2: width - m.right, y1: y, y2: y }));
      root.appendChild(svg("text", { x: m.left - 6, y: y + 4, "text-anchor": "end" }, tick(v)));
    }
    const slot = w / Math.max(1, buckets.length);
    const bw = Math.max(2, Math.min(40, slot * (slot > 6 ? 0.72 : 0.9)));
    buckets.forEach((b, i) => {
      const x = m.left + slot * i + (slot - bw) / 2;
      let y = m.top + h;
      for (const s of series) {
        const v = s.values[i] || 0;
        if (v <= 0) continue;
        const bh = Math.max(1, (h * v) / top);
        y -= bh;
        root.appendChild(svg("rect", { class: "bar", "data-series": s.name, x: x.toFixed(1), y: y.toFixed(1), width: bw.toFixed(1), height: bh.toFixed(1), fill: s.color }, svg("title", {}, b.title + " · " + s.name + ": " + format(v))));
      }
      const unknown = options.unknown ? options.unknown[i] : 0;
      if (unknown > 0) root.appendChild(svg("rect", { class: "unknown", "data-unpriced": unknown, x: x.toFixed(1), y: (y - 8).toFixed(1), width: bw.toFixed(1), height: 6 }, svg("title", {}, b.title + " · " + num(unknown) + " unpriced " + (unknown === 1 ? "call" : "calls") + ": cost unknown")));
      if (b.label) root.appendChild(svg("text", { x: (m.left + slot * i + slot / 2).toFixed(1), y: height - 6, "text-anchor": "middle" }, b.label));
    });
    if (max === 0) root.appendChild(svg("text", { class: "none", x: m.left + w / 2, y: m.top + h / 2, "text-anchor": "middle" }, options.empty || "No requests in this range"));
    host.replaceChildren(root);
  };
  const legend = (host, series, unknown) => host.replaceChildren(...series.map((s) => el("span", {}, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, rx: 2, fill: s.color })), s.name])),
    ...(unknown ? [el("span", {}, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { class: "unknown", x: 0.5, y: 2.5, width: 9, height: 5 })), "unpriced calls (cost unknown)"])] : []));

  /** every day of the range, or every hour up to now when the report has hours */
  const timeBuckets = (report, hourly) => {
    const from = Date.parse(report.from + "T00:00:00Z"), to = Date.parse(report.to + "T00:00:00Z");
    const keys = [];
    if (!hourly) { for (let t = from; t <= to; t += DAY_MS) keys.push(isoDay(t)); }
    else {
      const now = new Date(); const last = Math.min(to + 23 * 3600000, Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), now.getUTCHours()));
      for (let t = from; t <= Math.max(last, from); t += 3600000) keys.push(new Date(t).toISOString().slice(0, 13));
    }
    const n = keys.length;
    if (hourly) {
      const every = [1, 2, 3, 6, 12, 24, 48].find((s) => n / s <= 8) || 48;
      return keys.map((k) => {
        const hour = Number(k.slice(11, 13)), dayIndex = Math.round((Date.parse(k.slice(0, 10)) - from) / DAY_MS);
        const labelled = every <= 24 ? hour % every === 0 : hour === 0 && dayIndex % (every / 24) === 0;
        return { key: k, title: dayLabel(k) + " " + k.slice(11, 13) + ":00 UTC", label: labelled ? (hour === 0 ? dayLabel(k) : k.slice(11, 13) + ":00") : null };
      });
    }
    const every = [1, 2, 7, 14, 30, 61].find((s) => n / s <= 8) || 61;
    return keys.map((k, i) => ({ key: k, title: dayLabel(k), label: i % every === 0 ? dayLabel(k) : null }));
  };
  const metricOf = (metric) => (t) => (metric === "tokens" ? (t.inputTokens || 0) + (t.outputTokens || 0) : metric === "cost" ? t.costUsd || 0 : t.requests || 0);

  /** per-day stacked series for a breakdown (days[].models or days[].apps), biggest first, the rest as "other" */
  const breakdown = (report, field, nameKey, metric) => {
    const days = timeBuckets(report, false);
    const value = metricOf(metric);
    const totals = new Map();
    for (const d of report.days) for (const e of d[field]) totals.set(e[nameKey], plus(totals.get(e[nameKey]) || zeroTotals(), e));
    const ranked = [...totals].sort((a, b) => value(b[1]) - value(a[1]) || b[1].requests - a[1].requests);
    const named = ranked.slice(0, PALETTE.length - 1).map((r) => r[0]);
    const index = new Map(days.map((d, i) => [d.key, i]));
    const series = named.map((name, i) => ({ name, color: PALETTE[i], values: days.map(() => 0) }));
    const other = { name: "other", color: PALETTE[PALETTE.length - 1], values: days.map(() => 0) };
    const unknown = days.map(() => 0);
    for (const d of report.days) for (const e of d[field]) {
      const i = index.get(d.day); if (i === undefined) continue;
      const k = named.indexOf(e[nameKey]);
      (k < 0 ? other : series[k]).values[i] += value(e);
      unknown[i] += e.unpricedCalls || 0;
    }
    if (ranked.length > named.length) series.push(other);
    return { days, series, ranked, unknown };
  };
  const breakdownTable = (table, ranked, colorOf) => {
    const body = table.tBodies[0];
    body.replaceChildren(...ranked.map(([name, t]) => el("tr", {}, [
      el("td", { class: "name", title: name }, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, rx: 2, fill: colorOf(name) })), " ", name]),
      el("td", { class: "num" }, num(t.requests)), el("td", { class: "num" + (t.errors > 0 ? " bad" : "") }, num(t.errors)),
      el("td", { class: "num" + (t.errors > 0 ? " bad" : "") }, pct(rate(t))),
      el("td", { class: "num" }, num(t.inputTokens)), el("td", { class: "num" }, num(t.outputTokens)),
      el("td", { class: "num" + (t.unpricedCalls > 0 ? " muted" : "") }, cost(t)), el("td", { class: "num" }, num(t.unpricedCalls))
    ])));
    if (!ranked.length) body.appendChild(el("tr", {}, el("td", { colspan: 8, class: "empty" }, "No requests in this range.")));
  };
  const renderBreakdown = (which) => {
    const r = state.usage; if (!r) return;
    const field = which === "models" ? "models" : "apps", nameKey = which === "models" ? "model" : "app";
    const metric = state.metric[which], costs = metric === "cost";
    const b = breakdown(r, field, nameKey, metric);
    const unknown = costs && b.unknown.some((n) => n > 0);
    legend($(which + "-legend"), b.series, unknown);
    barChart($(which + "-chart"), b.days, b.series, {
      integer: !costs, label: (which === "models" ? "Per model " : "Per app ") + metric + " per day",
      ...(costs ? { format: usd, tick: usdTick, unknown: b.unknown, empty: unknown ? "Only unpriced calls in this range: cost unknown" : "No cost in this range" } : {})
    });
    const colors = new Map(b.series.map((s) => [s.name, s.color]));
    breakdownTable($(which + "-table"), b.ranked, (name) => colors.get(name) || PALETTE[PALETTE.length - 1]);
  };
  const renderCharts = () => {
    const r = state.usage; if (!r) return;
    const hourly = Array.isArray(r.hours);
    const buckets = timeBuckets(r, hourly);
    const index = new Map(buckets.map((b, i) => [b.key, i]));
    const zeros = () => buckets.map(() => 0);
    const ok = zeros(), errors = zeros(), input = zeros(), output = zeros(), usdSpent = zeros(), unpriced = zeros();
    const rows = hourly ? r.hours.map((x) => [x.hour, x]) : r.days.map((d) => [d.day, d.models.reduce(plus, zeroTotals())]);
    for (const [key, t] of rows) {
      const i = index.get(key); if (i === undefined) continue;
      ok[i] += t.requests - t.errors; errors[i] += t.errors; input[i] += t.inputTokens; output[i] += t.outputTokens;
      usdSpent[i] += t.costUsd || 0; unpriced[i] += t.unpricedCalls || 0;
    }
    const note = hourly ? "hourly, UTC" : "daily, UTC";
    $("requests-note").textContent = note; $("tokens-note").textContent = note;
    const all = r.totals;
    $("cost-note").textContent = note + " · " + cost(all) + (all.unpricedCalls > 0 ? " · " + num(all.unpricedCalls) + " unpriced " + (all.unpricedCalls === 1 ? "call" : "calls") + " not in the bars" : "");
    const spent = [{ name: "priced calls (USD)", color: GREEN, values: usdSpent }];
    legend($("cost-legend"), spent, all.unpricedCalls > 0);
    barChart($("cost-chart"), buckets, spent, { label: "Cost over time in USD", format: usd, tick: usdTick, unknown: unpriced, empty: all.unpricedCalls > 0 ? "Only unpriced calls in this range: cost unknown" : "No cost in this range" });
    const req = [{ name: "succeeded", color: BLUE, values: ok }, { name: "failed", color: RED, values: errors }];
    const tok = [{ name: "input", color: "#1098ad", values: input }, { name: "output", color: "#9c36b5", values: output }];
    legend($("requests-legend"), req); legend($("tokens-legend"), tok);
    barChart($("requests-chart"), buckets, req, { integer: true, label: "Requests over time" });
    barChart($("tokens-chart"), buckets, tok, { integer: true, label: "Tokens over time" });
    renderBreakdown("models"); renderBreakdown("apps");
  };

  // ---- usage ----
  const renderUsage = (r) => {
    state.usage = r;
    const t = r.totals;
    $("usage-note").textContent = r.from + " to " + r.to + (r.app ? " · app " + r.app : "") + (r.user ? " · user " + r.user : "");
    $("usage-stats").replaceChildren(
      stat("Requests", num(t.requests)),
      stat("Failed", num(t.errors), pct(rate(t)) + " error rate", t.errors > 0),
      stat("Input tokens", compact(t.inputTokens), num(t.inputTokens)),
      stat("Output tokens", compact(t.outputTokens), num(t.outputTokens)),
      stat("Cache read tokens", compact(t.cacheReadTokens), num(t.cacheReadTokens)),
      stat("Cost", cost(t), t.unpricedCalls > 0 ? num(t.unpricedCalls) + " unpriced " + (t.unpricedCalls === 1 ? "call" : "calls") + ": cost unknown" : "USD"),
      stat("Latency p50", ms(t.latencyMs && t.latencyMs.p50), "p90 " + ms(t.latencyMs && t.latencyMs.p90) + " · p99 " + ms(t.latencyMs && t.latencyMs.p99)),
      stat("Time to first token p50", ms(t.ttftMs && t.ttftMs.p50), "p90 " + ms(t.ttftMs && t.ttftMs.p90))
    );
    if (!r.app) for (const d of r.days) for (const a of d.apps) state.apps.add(a.app);
    syncApps();
    renderCharts();
    const users = r.topUsers || [];
    const most = users.reduce((a, u) => Math.max(a, u.requests), 0);
    const body = $("users-table").tBodies[0];
    body.replaceChildren(...users.map((u) => el("tr", { "data-user": u.user }, [
      el("td", { class: "name mono", title: u.user }, u.user), el("td", { class: "num" }, num(u.requests)),
      el("td", {}, minibar(most ? u.requests / most : 0, BLUE)),
      el("td", { class: "num" + (u.errors > 0 ? " bad" : "") }, num(u.errors)),
      el("td", { class: "num" }, num(u.inputTokens)), el("td", { class: "num" }, num(u.outputTokens))
    ])));
    if (!users.length) body.appendChild(el("tr", {}, el("td", { colspan: 6, class: "empty" }, "No requests with a user in this range (users come from x-gateway-user or the request's user field).")));
  };
  const refreshUsage = async () => {
    const q = new URLSearchParams({ from: $("from").value, to: $("to").value });
    if ($("app-filter").value) q.set("app", $("app-filter").value);
    if ($("user-filter").value.trim()) q.set("user", $("user-filter").value.trim());
    $("usage-apply").disabled = true;
    try { renderUsage(await api("GET", "/gateway/usage?" + q.toString())); setError($("usage-error"), null); }
    catch (e) { guard(e, $("usage-error")); }
    finally { $("usage-apply").disabled = false; }
  };
  const syncApps = () => {
    const select = $("app-filter"), chosen = select.value;
    const names = [...state.apps].sort();
    select.replaceChildren(el("option", { value: "" }, "All apps"), ...names.map((a) => el("option", { value: a }, a)));
    select.value = names.includes(chosen) ? chosen : "";
  };
  const setRange = (days) => {
    const today = Date.now();
    $("to").value = isoDay(today);
    $("from").value = isoDay(today - (days - 1) * DAY_MS);
  };

  // ---- runtime keys ----
  const refreshKeys = async () => {
    try {
      const list = await api("GET", "/gateway/admin/keys");
      const keys = (list && list.data) || [];
      for (const k of keys) state.apps.add(k.app);
      syncApps();
      const body = $("keys-table").tBodies[0];
      body.replaceChildren(...keys.map((k) => {
        const revoke = el("button", { type: "button", class: "danger", "data-revoke": k.id }, "Revoke");
        revoke.addEventListener("click", () => revokeKey(k, revoke));
        return el("tr", { "data-key-id": k.id }, [el("td", { class: "mono" }, k.id), el("td", {}, k.app), el("td", { title: k.created_at }, new Date(k.created_at).toLocaleString()), el("td", { class: "num" }, revoke)]);
      }));
      if (!keys.length) body.appendChild(el("tr", {}, el("td", { colspan: 4, class: "empty" }, "No runtime keys yet.")));
      setError($("keys-error"), null);
    } catch (e) { guard(e, $("keys-error")); }
  };
  const notice = (text) => { const n = $("keys-notice"); n.textContent = text; show(n, !!text); };
  const createKey = async (app) => {
    $("key-create").disabled = true; notice(""); show($("new-secret"), false); $("new-secret").replaceChildren();
    try {
      const k = await api("POST", "/gateway/admin/keys", { app });
      const code = el("code", { id: "new-secret-value" }, k.key);
      const copy = el("button", { type: "button" }, "Copy");
      copy.addEventListener("click", async () => {
        try { await navigator.clipboard.writeText(k.key); copy.textContent = "Copied"; }
        catch { getSelection().selectAllChildren(code); copy.textContent = "Selected: press Ctrl+C"; }
      });
      const done = el("button", { type: "button" }, "I have stored it");
      done.addEventListener("click", () => { $("new-secret").replaceChildren(); show($("new-secret"), false); });
      $("new-secret").replaceChildren(el("div", {}, [el("strong", {}, "New key for app " + k.app + " (" + k.id + ")"), ". Copy it now: it is shown only this once."]), code, copy, " ", done);
      show($("new-secret"), true);
      $("key-app").value = "";
      setError($("keys-error"), null);
      await refreshKeys();
    } catch (e) { guard(e, $("keys-error")); }
    finally { $("key-create").disabled = false; }
  };
  const revokeKey = async (k, button) => {
    if (!confirm("Revoke key " + k.id + " of app " + k.app + "? Clients using it are refused at once.")) return;
    button.disabled = true;
    try { await api("DELETE", "/gateway/admin/keys/" + encodeURIComponent(k.id)); notice("Revoked key " + k.id + " of app " + k.app + "."); await refreshKeys(); refreshBudgets(); }
    catch (e) { button.disabled = false; guard(e, $("keys-error")); }
  };

  // ---- budgets ----
  const PER = { day: "per day (UTC)", week: "per week (UTC, from Monday)", month: "per month (UTC)", total: "in total" };
  /** used, then reserved (calls under way), against the limit; past the limit the bar turns red */
  const spendbar = (used, reserved, limit) => {
    const W = 150, f = limit > 0 ? used / limit : 1, r = limit > 0 ? reserved / limit : 0;
    const uw = Math.round(W * Math.min(1, f)), rw = Math.round(W * Math.min(1 - Math.min(1, f), r));
    return svg("svg", { class: "spendbar", width: W, height: 10, "aria-hidden": "true" }, [
      svg("rect", { class: "track", x: 0, y: 0, width: W, height: 10, rx: 3 }),
      svg("rect", { class: "used", x: 0, y: 0, width: Math.max(f > 0 ? 2 : 0, uw), height: 10, rx: 3, fill: f >= 1 ? RED : f >= 0.8 ? "#e8590c" : BLUE }),
      rw > 0 ? svg("rect", { class: "reserved", x: uw, y: 0, width: rw, height: 10, fill: BLUE, opacity: 0.35 }) : null
    ]);
  };
  const budgetRow = (holder, b) => {
    const money = b.usd !== undefined, amount = money ? usd : (n) => num(n) + " tokens";
    const f = b.limit > 0 ? b.used / b.limit : 1;
    return el("tr", { class: "budget", "data-holder": holder.id, "data-budget": money ? "usd" : "tokens" }, [
      el("td", { class: "name", title: holder.title }, [el("div", { class: "holder" }, holder.cell), el("div", { class: "sub kind" }, (money ? "USD " : "tokens ") + (PER[b.per] || "per " + b.per))]),
      el("td", { title: "used " + amount(b.used) + ", reserved " + amount(b.reserved) + " of " + amount(b.limit) }, [
        spendbar(b.used, b.reserved, b.limit),
        el("div", { class: "sub spent" + (f >= 1 ? " over" : "") }, amount(b.used) + " of " + amount(b.limit) + " · " + share(f) + (b.reserved > 0 ? " · " + amount(b.reserved) + " reserved" : ""))
      ]),
      el("td", { class: "ends", title: b.period_end || "" }, b.period_end ? fmtWhen.format(new Date(b.period_end)) + " UTC" : "never (a total)")
    ]);
  };
  const renderBudgets = (all) => {
    const rows = [];
    for (const a of all.apps || []) for (const b of a.budgets) rows.push(budgetRow({ id: a.app, title: "app " + a.app, cell: ["app ", el("strong", {}, a.app)] }, b));
    for (const k of all.keys || []) for (const b of k.budgets) rows.push(budgetRow({ id: k.id, title: "key " + k.id + " of app " + k.app, cell: [el("span", { class: "mono" }, k.id), " ", el("span", { class: "muted small" }, k.app)] }, b));
    const body = $("budgets-table").tBodies[0];
    body.replaceChildren(...rows);
    if (!rows.length) body.appendChild(el("tr", {}, el("td", { colspan: 3, class: "empty" }, "No budgets: set limits.budgets on an app in the config, or budgets on a runtime key.")));
  };
  const refreshBudgets = async () => {
    try {
      renderBudgets(await api("GET", "/gateway/admin/budgets"));
      setError($("budgets-error"), null); show($("budgets-admin"), false); show($("budgets-wrap"), true);
    } catch (e) {
      // a key that reads the rest of the page but not budgets keeps its session: only this panel says so
      if (e instanceof ApiError && e.status === 403) {
        $("budgets-table").tBodies[0].replaceChildren();
        setError($("budgets-error"), null); show($("budgets-wrap"), false); show($("budgets-admin"), true);
        return;
      }
      guard(e, $("budgets-error"));
    }
  };

  // ---- wiring ----
  $("signin-form").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("key").value.trim()); });
  $("signout").addEventListener("click", () => signOut(null));
  $("usage-form").addEventListener("submit", (ev) => { ev.preventDefault(); refreshUsage(); });
  $("key-form").addEventListener("submit", (ev) => { ev.preventDefault(); createKey($("key-app").value.trim()); });
  for (const b of document.querySelectorAll(".presets button")) b.addEventListener("click", () => { setRange(Number(b.dataset.days)); refreshUsage(); });
  for (const seg of document.querySelectorAll("[data-metric-for]")) for (const b of seg.querySelectorAll("button")) b.addEventListener("click", () => {
    state.metric[seg.dataset.metricFor] = b.dataset.metric;
    for (const o of seg.querySelectorAll("button")) o.setAttribute("aria-pressed", String(o === b));
    renderBreakdown(seg.dataset.metricFor);
  });
  let resizing = 0;
  addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(renderCharts, 150); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden && state.key !== null) refreshStatus(); });

  setRange(7);
  const saved = sessionStorage.getItem(STORE);
  if (saved !== null) signIn(saved); else signOut(null);
})();
`

const page = (nonce: string) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="referrer" content="no-referrer"><title>LLM gateway · dashboard</title><link rel="icon" href="data:,"><style nonce="${nonce}">${STYLE}</style></head><body>${BODY}<script nonce="${nonce}">${SCRIPT}</script></body></html>`

/** The response headers: only the page's own inline code runs, only this origin is reached, no framing. */
const headersFor = (nonce: string): Record<string, string> => ({
  "content-security-policy": [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
    "trusted-types 'none'"
  ].join("; "),
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store"
})

export const dashboardRoutes = Effect.sync(() => {
  const handler = () =>
    Effect.sync(() => {
      const nonce = randomBytes(18).toString("base64")
      return Reply.text(page(nonce), "text/html; charset=utf-8", { headers: headersFor(nonce) })
    })
  const routes: ReadonlyArray<Route> = [{ method: "GET", path: "/gateway/dashboard", auth: "public", handler, label: "gateway.dashboard" }]
  return routes
})
