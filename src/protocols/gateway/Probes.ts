import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { Settings } from "../../Config.js"
import { Reply, shownPath, type RequestContext, type Route } from "../../http/Route.js"
import { ToolServers } from "../../services/tools/ToolServers.js"

/** Readiness: the first missing piece, or undefined when the gateway can serve. */
const readiness = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const config = yield* Settings
  return Effect.gen(function* () {
    const db = yield* sql`SELECT 1 AS ok`.pipe(
      Effect.as(true),
      Effect.orElseSucceed(() => false)
    )
    if (!db) return "database"
    if (Object.keys(config.providers).length === 0) return "catalog"
    return undefined
  })
})

const json = (status: number, body: unknown) => Reply.json(body, { status })

/** One route of the route table as the discovery page lists it. */
export interface RouteListing {
  readonly method: string
  /** the literal path, or the template of a path with parameters (`/v1/responses/{id}`) */
  readonly path: string
  /** the route's label in logs and metrics */
  readonly label: string
}

/** Every entry of a route table, in its order: the discovery page lists what the router serves. */
export const routeListing = (routes: ReadonlyArray<Route>): ReadonlyArray<RouteListing> =>
  routes.map((r) => ({ method: r.method, path: shownPath(r), label: r.label }))

/**
 * Probes (`/healthz`, `/readyz`, `/gateway/health`, `/gateway/ready`) and the discovery page `/`,
 * which lists the route table the router is built from (read when asked: it includes these routes).
 *
 * Tool servers do not decide readiness: one MCP server down would take the replica out of a load
 * balancer for every app, when only the requests of the apps using that server are refused (503
 * `not_ready` naming it, until it lists its tools). With tool servers configured the readiness body
 * lists each connection's state and tool count (never its URL, headers or command).
 */
export const probeRoutes = (table: () => ReadonlyArray<Route>) =>
  Effect.gen(function* () {
    const ready = yield* readiness
    const toolServers = yield* ToolServers
    const servers = () => (toolServers.configured ? { toolServers: toolServers.status() } : {})
    const health = () => Effect.succeed(json(200, { ok: true }))
    const readyHandler = (_: RequestContext) =>
      Effect.map(ready, (missing) =>
        missing === undefined
          ? json(200, { ready: true, ...servers() })
          : json(503, { ready: false, code: "not_ready", detail: `not ready: ${missing}`, ...servers() })
      )
    const discovery = (ctx: RequestContext) =>
      Effect.sync(() => {
        const routes = routeListing(table())
        const accept = ctx.headers["accept"] ?? ""
        if (accept.includes("text/html")) {
          const rows = routes
            .map((r) => `<tr><td>${escapeHtml(r.method)}</td><td><code>${escapeHtml(r.path)}</code></td><td>${escapeHtml(r.label)}</td></tr>`)
            .join("")
          return Reply.text(
            `<!doctype html><html><head><meta charset="utf-8"><title>LLM gateway</title></head><body><h1>LLM gateway</h1><p>Paths with <code>{name}</code> take a parameter there.</p><table><thead><tr><th>Method</th><th>Path</th><th>Route</th></tr></thead><tbody>${rows}</tbody></table></body></html>`,
            "text/html; charset=utf-8"
          )
        }
        return json(200, { name: "llm-gateway", routes })
      })
    const routes: ReadonlyArray<Route> = [
      { method: "GET", path: "/healthz", auth: "public", handler: health, label: "healthz" },
      { method: "GET", path: "/readyz", auth: "public", handler: readyHandler, label: "readyz" },
      { method: "GET", path: "/gateway/health", auth: "public", handler: health, label: "gateway.health" },
      { method: "GET", path: "/gateway/ready", auth: "public", handler: readyHandler, label: "gateway.ready" },
      { method: "GET", path: "/", auth: "public", handler: discovery, label: "discovery" }
    ]
    return routes
  })

const escapeHtml = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c] ?? c)
