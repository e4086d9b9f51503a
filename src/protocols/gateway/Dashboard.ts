import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"
import { Reply, type Route } from "../../http/Route.js"
import { page } from "./dashboard/Page.js"

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
 *
 * The page lives in dashboard/: its markup (Page.ts), its style (Style.ts) and its browser script
 * in TypeScript (browser/, checked with DOM types by its own tsconfig, never by the Node one).
 */

/**
 * The browser script as the page inlines it, read once when the routes are built. `npm run build`
 * (scripts/build.mjs) compiles dashboard/browser/ with its tsconfig and joins its files into one
 * script, dist/protocols/gateway/dashboard/script.js, beside this module's own compiled file: the
 * built gateway (`npm start`, a production install with dist/ only and no compiler) reads it there.
 * Run from the TypeScript sources (the tests: this module is then a .ts file) it reads the same
 * file from dist/, which test/support/global-setup.ts builds before any test, and refuses one older
 * than a browser source rather than serve a stale page.
 */
const builtScript = (): string => {
  const fromSources = import.meta.url.endsWith(".ts")
  const built = new URL(fromSources ? "../../../dist/protocols/gateway/dashboard/script.js" : "./dashboard/script.js", import.meta.url)
  if (!fs.existsSync(built)) throw new Error(`the dashboard's script is not built (${fileURLToPath(built)} is missing): run npm run build`)
  if (fromSources) {
    const sources = new URL("./dashboard/browser/", import.meta.url)
    const builtAt = fs.statSync(built).mtimeMs
    const newer = fs.readdirSync(sources).filter((name) => fs.statSync(new URL(name, sources)).mtimeMs > builtAt)
    if (newer.length > 0) throw new Error(`the dashboard's built script is older than dashboard/browser/${newer.join(", ")}: run npm run build`)
  }
  return fs.readFileSync(built, "utf8")
}

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
  const script = builtScript()
  const handler = () =>
    Effect.sync(() => {
      const nonce = randomBytes(18).toString("base64")
      return Reply.text(page(nonce, script), "text/html; charset=utf-8", { headers: headersFor(nonce) })
    })
  const routes: ReadonlyArray<Route> = [{ method: "GET", path: "/gateway/dashboard", auth: "public", handler, label: "gateway.dashboard" }]
  return routes
})
