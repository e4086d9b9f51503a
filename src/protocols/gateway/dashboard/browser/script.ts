/**
 * The dashboard's browser script: sign-in, the status, usage, runtime key and budget panels, and
 * their wiring. The files of this folder are classic scripts (no import or export) that share one
 * scope: tsconfig.json checks them together with DOM types, and `npm run build` joins them in that
 * tsconfig's order, this one last, inside one function (scripts/build.mjs) that the page inlines.
 */
const STORE = "gateway.adminKey";
const STATUS_EVERY_MS = 5000;
const USAGE_EVERY_MS = 30000;
const state: { key: string | null; statusTimer: number; usageTimer: number; usage: UsageReport | null; metric: Record<Breakdown, Metric>; apps: Set<string> } =
  { key: null, statusTimer: 0, usageTimer: 0, usage: null, metric: { models: "requests", apps: "requests" }, apps: new Set() };

// ---- the JSON routes; errors carry the problem details' detail ----
const api = async <A>(method: string, path: string, decode: Decoder<A>, body?: unknown): Promise<A> => {
  const headers: Record<string, string> = { accept: "application/json" };
  if (state.key) headers.authorization = "Bearer " + state.key;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: "omit", redirect: "error" });
  } catch (e) {
    throw new ApiError(0, "network_error", "The gateway could not be reached: " + (e instanceof Error && e.message ? e.message : String(e)));
  }
  const text = await res.text();
  let data: unknown = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const problem: Readonly<Record<string, unknown>> = isRecord(data) ? data : {};
    const detail = typeof problem.detail === "string" ? problem.detail : "HTTP " + res.status + " " + res.statusText;
    throw new ApiError(res.status, typeof problem.code === "string" ? problem.code : "http_error", detail);
  }
  try { return decode(data, "the answer"); }
  catch (e) { throw new ApiError(res.status, "unexpected_answer", method + " " + path.split("?")[0] + ": " + (e instanceof Error ? e.message : String(e))); }
};
/** a key that no longer works (or is not the admin's) ends the session with its reason */
const isAuthFailure = (e: unknown): e is ApiError => e instanceof ApiError && (e.status === 401 || (e.status === 403 && e.code === "admin_key_required"));
const guard = (e: unknown, area: HTMLElement) => { if (isAuthFailure(e)) { signOut(e); return; } setError(area, asApiError(e)); };

// ---- sign in / out ----
const signOut = (error: ApiError | null) => {
  clearInterval(state.statusTimer); clearInterval(state.usageTimer);
  state.key = null; state.usage = null;
  sessionStorage.removeItem(STORE);
  for (const id of ["status-stats", "usage-stats", "requests-chart", "tokens-chart", "cost-chart", "models-chart", "apps-chart", "new-secret"]) $(id).replaceChildren();
  for (const t of $all(document, "#dash tbody", HTMLTableSectionElement)) t.replaceChildren();
  show($("new-secret"), false); show($("budgets-admin"), false);
  show($("dash"), false); show($("signout"), false); show($("live"), false);
  show($("signin"), true);
  setError($("signin-error"), error || null);
  $input("key").value = "";
  $input("key").focus();
};
const signIn = async (key: string) => {
  state.key = key;
  $button("signin-button").disabled = true;
  try {
    const status = await api("GET", "/gateway/status", Status);
    sessionStorage.setItem(STORE, key);
    show($("signin"), false); setError($("signin-error"), null);
    show($("dash"), true); show($("signout"), true);
    renderStatus(status);
    state.statusTimer = setInterval(refreshStatus, STATUS_EVERY_MS);
    state.usageTimer = setInterval(() => { if (!document.hidden) { void refreshUsage(); void refreshBudgets(); } }, USAGE_EVERY_MS);
    void refreshUsage();
    void refreshKeys();
    void refreshBudgets();
  } catch (e) {
    signOut(asApiError(e));
  } finally {
    $button("signin-button").disabled = false;
  }
};

// ---- status ----
const stat = (label: string, value: string, sub?: string | null, bad?: boolean) => el("div", { class: "stat" + (bad ? " bad" : "") }, [el("div", { class: "label" }, label), el("div", { class: "value", title: String(value) }, value), sub ? el("div", { class: "sub" }, sub) : null]);
const sum = (stores: ReadonlyArray<{ readonly count: number; readonly bytes: number }>, k: "count" | "bytes") => stores.reduce((a, x) => a + (x[k] || 0), 0);
const renderStatus = (s: Status) => {
  const live = $("live");
  live.textContent = "live · " + new Date().toLocaleTimeString();
  live.className = "pill ok"; show(live, true);
  $("status-note").textContent = "refreshed every " + STATUS_EVERY_MS / 1000 + " s";
  setError($("status-error"), null);
  const stored = s.storedResponses, files = s.files;
  $("status-stats").replaceChildren(
    stat("Version", s.version),
    stat("Uptime", duration(s.uptimeSeconds || 0)),
    stat("Requests in flight", num(s.inFlight.requests)),
    stat("Model calls in flight", num(s.inFlight.modelRequests)),
    stat("Body bytes in flight", bytes(s.inFlight.bodyBytes || 0)),
    stat("Stored responses", num(sum(stored, "count")), bytes(sum(stored, "bytes"))),
    stat("Files", num(sum(files, "count")), bytes(sum(files, "bytes")))
  );
  const body = $table("providers").tBodies[0];
  body.replaceChildren(...s.providers.map((p) => {
    const r = p.recent;
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
  try { renderStatus(await api("GET", "/gateway/status", Status)); }
  catch (e) {
    if (isAuthFailure(e)) return signOut(e);
    setError($("status-error"), asApiError(e));
    $("live").textContent = "status unavailable"; $("live").className = "pill bad";
  }
};

// ---- per model and per app, and the charts over time ----
/** A top-N table (users, sessions): most requests first, a bar scaled to the busiest, the cost where the table has its column. */
const rankTable = (id: string, key: string, ranked: ReadonlyArray<readonly [string, Totals]>, withCost: boolean, empty: string) => {
  const most = ranked.reduce((a, [, t]) => Math.max(a, t.requests), 0);
  const body = $table(id).tBodies[0];
  body.replaceChildren(...ranked.map(([name, t]) => el("tr", { [key]: name }, [
    el("td", { class: "name mono", title: name }, name), el("td", { class: "num" }, num(t.requests)),
    el("td", {}, minibar(most ? t.requests / most : 0, BLUE)),
    el("td", { class: "num" + (t.errors > 0 ? " bad" : "") }, num(t.errors)),
    el("td", { class: "num" }, num(t.inputTokens)), el("td", { class: "num" }, num(t.outputTokens)),
    ...(withCost ? [el("td", { class: "num" }, cost(t))] : [])
  ])));
  if (!ranked.length) body.appendChild(el("tr", {}, el("td", { colspan: withCost ? 7 : 6, class: "empty" }, empty)));
};
const breakdownTable = (host: HTMLTableElement, ranked: ReadonlyArray<readonly [string, Totals]>, colorOf: (name: string) => string) => {
  const body = host.tBodies[0];
  body.replaceChildren(...ranked.map(([name, t]) => el("tr", {}, [
    el("td", { class: "name", title: name }, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, rx: 2, fill: colorOf(name) })), " ", name]),
    el("td", { class: "num" }, num(t.requests)), el("td", { class: "num" + (t.errors > 0 ? " bad" : "") }, num(t.errors)),
    el("td", { class: "num" + (t.errors > 0 ? " bad" : "") }, pct(rate(t))),
    el("td", { class: "num" }, num(t.inputTokens)), el("td", { class: "num" }, num(t.outputTokens)),
    el("td", { class: "num" + (t.unpricedCalls > 0 ? " muted" : "") }, cost(t)), el("td", { class: "num" }, num(t.unpricedCalls))
  ])));
  if (!ranked.length) body.appendChild(el("tr", {}, el("td", { colspan: 8, class: "empty" }, "No requests in this range.")));
};
const renderBreakdown = (which: Breakdown) => {
  const r = state.usage; if (!r) return;
  const metric = state.metric[which], costs = metric === "cost";
  const b = breakdown(r, which, metric);
  const unknown = costs && b.unknown.some((n) => n > 0);
  legend($(which + "-legend"), b.series, unknown);
  barChart($(which + "-chart"), b.days, b.series, {
    integer: !costs, label: (which === "models" ? "Per model " : "Per app ") + metric + " per day",
    ...(costs ? { format: usd, tick: usdTick, unknown: b.unknown, empty: unknown ? "Only unpriced calls in this range: cost unknown" : "No cost in this range" } : {})
  });
  const colors = new Map(b.series.map((s) => [s.name, s.color]));
  breakdownTable($table(which + "-table"), b.ranked, (name) => colors.get(name) || PALETTE[PALETTE.length - 1]);
};
const renderCharts = () => {
  const r = state.usage; if (!r) return;
  const hours = r.hours, hourly = hours !== undefined;
  const buckets = timeBuckets(r, hourly);
  const index = new Map(buckets.map((b, i) => [b.key, i]));
  const zeros = () => buckets.map(() => 0);
  const ok = zeros(), errors = zeros(), input = zeros(), output = zeros(), usdSpent = zeros(), unpriced = zeros();
  const rows: ReadonlyArray<readonly [string, Totals]> = hours !== undefined ? hours.map((x) => [x.hour, x] as const) : r.days.map((d) => [d.day, d.models.reduce(plus, zeroTotals())] as const);
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
const renderUsage = (r: UsageReport) => {
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
    stat("Latency p50", ms(t.latencyMs.p50), "p90 " + ms(t.latencyMs.p90) + " · p99 " + ms(t.latencyMs.p99)),
    stat("Time to first token p50", ms(t.ttftMs.p50), "p90 " + ms(t.ttftMs.p90))
  );
  if (!r.app) for (const d of r.days) for (const a of d.apps) state.apps.add(a.app);
  syncApps();
  renderCharts();
  rankTable("users-table", "data-user", r.topUsers.map((u) => [u.user, u] as const), false,
    "No requests with a user in this range (users come from x-gateway-user or the request's user field).");
  rankTable("sessions-table", "data-session", r.topSessions.map((x) => [x.session, x] as const), true,
    "No requests with a client session in this range (Claude Code and Codex send theirs).");
};
const refreshUsage = async () => {
  const q = new URLSearchParams({ from: $input("from").value, to: $input("to").value });
  if ($select("app-filter").value) q.set("app", $select("app-filter").value);
  if ($input("user-filter").value.trim()) q.set("user", $input("user-filter").value.trim());
  $button("usage-apply").disabled = true;
  try { renderUsage(await api("GET", "/gateway/usage?" + q.toString(), UsageReport)); setError($("usage-error"), null); }
  catch (e) { guard(e, $("usage-error")); }
  finally { $button("usage-apply").disabled = false; }
};
const syncApps = () => {
  const select = $select("app-filter"), chosen = select.value;
  const names = [...state.apps].sort();
  select.replaceChildren(el("option", { value: "" }, "All apps"), ...names.map((a) => el("option", { value: a }, a)));
  select.value = names.includes(chosen) ? chosen : "";
};
const setRange = (days: number) => {
  const today = Date.now();
  $input("to").value = isoDay(today);
  $input("from").value = isoDay(today - (days - 1) * DAY_MS);
};

// ---- runtime keys ----
const refreshKeys = async () => {
  try {
    const keys = (await api("GET", "/gateway/admin/keys", KeyList)).data;
    for (const k of keys) state.apps.add(k.app);
    syncApps();
    const body = $table("keys-table").tBodies[0];
    body.replaceChildren(...keys.map((k) => {
      const revoke = el("button", { type: "button", class: "danger", "data-revoke": k.id }, "Revoke");
      revoke.addEventListener("click", () => void revokeKey(k, revoke));
      return el("tr", { "data-key-id": k.id }, [el("td", { class: "mono" }, k.id), el("td", {}, k.app), el("td", { title: k.created_at }, new Date(k.created_at).toLocaleString()), el("td", { class: "num" }, revoke)]);
    }));
    if (!keys.length) body.appendChild(el("tr", {}, el("td", { colspan: 4, class: "empty" }, "No runtime keys yet.")));
    setError($("keys-error"), null);
  } catch (e) { guard(e, $("keys-error")); }
};
const notice = (text: string) => { const n = $("keys-notice"); n.textContent = text; show(n, !!text); };
const createKey = async (app: string) => {
  $button("key-create").disabled = true; notice(""); show($("new-secret"), false); $("new-secret").replaceChildren();
  try {
    const k = await api("POST", "/gateway/admin/keys", CreatedKey, { app });
    const code = el("code", { id: "new-secret-value" }, k.key);
    const copy = el("button", { type: "button" }, "Copy");
    copy.addEventListener("click", async () => {
      try { await navigator.clipboard.writeText(k.key); copy.textContent = "Copied"; }
      catch { getSelection()?.selectAllChildren(code); copy.textContent = "Selected: press Ctrl+C"; }
    });
    const done = el("button", { type: "button" }, "I have stored it");
    done.addEventListener("click", () => { $("new-secret").replaceChildren(); show($("new-secret"), false); });
    $("new-secret").replaceChildren(el("div", {}, [el("strong", {}, "New key for app " + k.app + " (" + k.id + ")"), ". Copy it now: it is shown only this once."]), code, copy, " ", done);
    show($("new-secret"), true);
    $input("key-app").value = "";
    setError($("keys-error"), null);
    await refreshKeys();
  } catch (e) { guard(e, $("keys-error")); }
  finally { $button("key-create").disabled = false; }
};
const revokeKey = async (k: RuntimeKey, revoke: HTMLButtonElement) => {
  if (!confirm("Revoke key " + k.id + " of app " + k.app + "? Clients using it are refused at once.")) return;
  revoke.disabled = true;
  try { await api("DELETE", "/gateway/admin/keys/" + encodeURIComponent(k.id), ignored); notice("Revoked key " + k.id + " of app " + k.app + "."); await refreshKeys(); void refreshBudgets(); }
  catch (e) { revoke.disabled = false; guard(e, $("keys-error")); }
};

// ---- budgets ----
const PER: Readonly<Record<string, string>> = { day: "per day (UTC)", week: "per week (UTC, from Monday)", month: "per month (UTC)", total: "in total" };
const budgetRow = (holder: { readonly id: string; readonly title: string; readonly cell: ReadonlyArray<Child> }, b: Budget) => {
  const money = b.usd !== undefined, amount = money ? usd : (n: number) => num(n) + " tokens";
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
const renderBudgets = (all: Budgets) => {
  const rows: Array<HTMLTableRowElement> = [];
  for (const a of all.apps) for (const b of a.budgets) rows.push(budgetRow({ id: a.app, title: "app " + a.app, cell: ["app ", el("strong", {}, a.app)] }, b));
  for (const k of all.keys) for (const b of k.budgets) rows.push(budgetRow({ id: k.id, title: "key " + k.id + " of app " + k.app, cell: [el("span", { class: "mono" }, k.id), " ", el("span", { class: "muted small" }, k.app)] }, b));
  const body = $table("budgets-table").tBodies[0];
  body.replaceChildren(...rows);
  if (!rows.length) body.appendChild(el("tr", {}, el("td", { colspan: 3, class: "empty" }, "No budgets: set limits.budgets on an app in the config, or budgets on a runtime key.")));
};
const refreshBudgets = async () => {
  try {
    renderBudgets(await api("GET", "/gateway/admin/budgets", Budgets));
    setError($("budgets-error"), null); show($("budgets-admin"), false); show($("budgets-wrap"), true);
  } catch (e) {
    // a key that reads the rest of the page but not budgets keeps its session: only this panel says so
    if (e instanceof ApiError && e.status === 403) {
      $table("budgets-table").tBodies[0].replaceChildren();
      setError($("budgets-error"), null); show($("budgets-wrap"), false); show($("budgets-admin"), true);
      return;
    }
    guard(e, $("budgets-error"));
  }
};

// ---- wiring ----
$("signin-form").addEventListener("submit", (ev) => { ev.preventDefault(); void signIn($input("key").value.trim()); });
$("signout").addEventListener("click", () => signOut(null));
$("usage-form").addEventListener("submit", (ev) => { ev.preventDefault(); void refreshUsage(); });
$("key-form").addEventListener("submit", (ev) => { ev.preventDefault(); void createKey($input("key-app").value.trim()); });
for (const b of $all(document, ".presets button", HTMLButtonElement)) b.addEventListener("click", () => { setRange(Number(b.dataset.days)); void refreshUsage(); });
for (const seg of $all(document, "[data-metric-for]", HTMLElement)) for (const b of $all(seg, "button", HTMLButtonElement)) b.addEventListener("click", () => {
  const which = seg.dataset.metricFor, metric = b.dataset.metric;
  if (!isBreakdown(which) || !isMetric(metric)) return;
  state.metric[which] = metric;
  for (const o of $all(seg, "button", HTMLButtonElement)) o.setAttribute("aria-pressed", String(o === b));
  renderBreakdown(which);
});
let resizing = 0;
addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(renderCharts, 150); });
document.addEventListener("visibilitychange", () => { if (!document.hidden && state.key !== null) void refreshStatus(); });

setRange(7);
const saved = sessionStorage.getItem(STORE);
if (saved !== null) void signIn(saved); else signOut(null);
