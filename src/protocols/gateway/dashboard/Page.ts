import { STYLE } from "./Style.js"

/**
 * The dashboard's markup: a sign-in card and the dashboard's cards, empty until the script fills
 * them from the JSON routes. The script finds every node by its id; the tests do too.
 */
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
      <section class="card" id="sessions-card">
        <h2>Top sessions <span class="note">coding agents' sessions, by requests, at most 20</span></h2>
        <div class="scroll"><table id="sessions-table"><thead><tr><th>Session</th><th class="num">Requests</th><th></th><th class="num">Errors</th><th class="num">Input tokens</th><th class="num">Output tokens</th><th class="num">Cost</th></tr></thead><tbody></tbody></table></div>
      </section>
    </div>

    <div class="row">
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

/** The whole page: the style, the markup and the compiled browser script, inline under one nonce. */
export const page = (nonce: string, script: string): string =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="referrer" content="no-referrer"><title>LLM gateway · dashboard</title><link rel="icon" href="data:,"><style nonce="${nonce}">${STYLE}</style></head><body>${BODY}<script nonce="${nonce}">\n${script}</script></body></html>`
