import { Effect } from "effect"
import { anchoredCodes } from "../../http/Envelopes.js"
import { Reply, type Route } from "../../http/Route.js"

/**
 * `GET /gateway/errors`: the page the `type` of a problem-details answer points at
 * (`/gateway/errors#<code>`), one anchored entry per code of spec 7.1.
 */
export const errorDescriptions: Readonly<Record<string, string>> = {
  invalid_request_target: "The request target is not a valid URL.",
  invalid_host: "The Host header is not the gateway's listen address (DNS-rebinding protection).",
  cross_origin_forbidden: "A browser Origin header on an endpoint that needs no key.",
  unsupported_media_type: "The body is not application/json.",
  invalid_api_key: "The key is missing or matches no configured or runtime key.",
  admin_key_required: "The route needs the admin key (metrics with adminKey set, runtime keys, status).",
  not_found: "No route at the path, or the option serving it is off.",
  method_not_allowed: "The path exists; the method does not (the Allow header lists those that do).",
  invalid_date: "from or to is not a real YYYY-MM-DD UTC date; param names which.",
  invalid_range: "from is after to.",
  range_too_long: "The range covers more than 366 days.",
  invalid_app: "app names no app that has or had a key or has recorded usage (usage), or is not a valid runtime key app name.",
  invalid_user: "user is not 1 to 64 characters of A-Z, a-z, 0-9, . _ @ : -.",
  app_forbidden: "An app key asked for another app's usage.",
  key_not_found: "No runtime key has that id.",
  config_key: "The key lives in the config; it cannot be revoked through the admin routes.",
  app_has_host_tools: "The app runs host tools; runtime keys are refused for it.",
  app_has_config_key: "The app already has a key in the config.",
  not_ready: "The backend cannot serve yet; detail names the first missing piece.",
  body_read_timeout: "The body stopped arriving for limits.bodyReadTimeoutMs, or was not complete within limits.bodyReadMaxMs.",
  request_body_too_large: "The body is over limits.maxBodyBytes or the app's limits.apps.<name>.maxBodyBytes.",
  server_busy: "Too many bodies are being read at once, or the app's share is taken; retry after Retry-After.",
  body_budget_insufficient: "A key for a new app was refused: limits.maxBodyBytesInFlight cannot hold one largest body for every app.",
  timeout: "The request ran past requestTimeoutMs.",
  invalid_expires_at: "A runtime key's expiresAt is not an RFC 3339 time with a time zone, or is not in the future.",
  rate_limit_exceeded: "A rate limit of the app or the key (requestsPerMinute, tokensPerMinute, concurrency) is reached; the message names which. Retry after Retry-After (the end of the minute window; 1 s for concurrency). The x-ratelimit-* headers show the limit.",
  insufficient_quota: "A budget of the app or the key (usd or tokens per day, week, month or in total) is spent; the message names which. Retry-After is the time until its period resets (none for a total budget); x-should-retry is false.",
  invalid_limits: "A runtime key's limits or budgets are not valid; the message names the field.",
  database_unavailable: "The shared database (database.url) is not answering: runtime keys, stored responses, files or usage cannot be read or written now; retry after Retry-After."
}

const escape = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c] ?? c)

export const errorsPageRoutes = Effect.sync(() => {
  const rows = [...anchoredCodes].map((code) => `<dt id="${escape(code)}"><code>${escape(code)}</code></dt><dd>${escape(errorDescriptions[code] ?? "")}</dd>`).join("")
  const html = `<!doctype html><html><head><meta charset="utf-8"><title>Gateway error codes</title></head><body><h1>Error codes of the gateway's own routes</h1><dl>${rows}</dl></body></html>`
  const routes: ReadonlyArray<Route> = [
    {
      method: "GET",
      path: "/gateway/errors",
      auth: "public",
      handler: () => Effect.succeed(Reply.text(html, "text/html; charset=utf-8", { headers: { "x-content-type-options": "nosniff" } })),
      label: "gateway.errors"
    }
  ]
  return routes
})
