import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Settings } from "../../Config.js"
import { Errors } from "../../domain/Errors.js"
import { Reply, type RequestContext, type Route } from "../../http/Route.js"
import { FileStore } from "../../services/files/FileStore.js"
import { KeyStore } from "../../services/keys/KeyStore.js"
import { Limits } from "../../services/runner/Limits.js"
import { Metrics } from "../../services/ops/Metrics.js"
import { Replicas } from "../../services/ops/Replicas.js"
import { Health } from "../../services/routing/Health.js"
import { ResponseStore } from "../../services/responses/ResponseStore.js"
import { ToolServers } from "../../services/tools/ToolServers.js"
import { makeOwnAuth } from "./Usage.js"

/** `/gateway/metrics` (Prometheus text) and `/gateway/status` (spec 4.5). */

/** The package version, from the nearest package.json above this module (src/ or dist/). */
const packageVersion = (): string => {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 6; i++) {
    const file = path.join(dir, "package.json")
    if (fs.existsSync(file)) return String((JSON.parse(fs.readFileSync(file, "utf8")) as { version?: unknown }).version ?? "unknown")
    dir = path.dirname(dir)
  }
  return "unknown"
}

export const opsRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const keys = yield* KeyStore
  const metrics = yield* Metrics
  const limits = yield* Limits
  const responses = yield* ResponseStore
  const files = yield* FileStore
  const replicas = yield* Replicas
  const health = yield* Health
  const toolServers = yield* ToolServers
  const auth = yield* makeOwnAuth
  const version = packageVersion()
  const startedAt = Date.now()

  const gauges = () => {
    const inFlight = limits.inFlight()
    return { requestsInFlight: metrics.requestsInFlight(), modelRequestsInFlight: inFlight.modelRequests, bodyBytesInFlight: inFlight.bodyBytes }
  }

  /** With an admin key set only the admin reads metrics; otherwise any key (or none on a keyless gateway). */
  const metricsHandler = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const caller = yield* auth(ctx)
      if (keys.hasAdmin && caller._tag !== "admin") return yield* Errors.permission("admin_key_required", "Metrics are read with the admin key on this gateway")
      return Reply.text(metrics.render({ ...gauges(), targets: yield* health.states, toolServers: toolServers.status() }), "text/plain; version=0.0.4; charset=utf-8")
    })

  const statusHandler = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const caller = yield* auth(ctx)
      if (caller._tag !== "admin") return yield* Errors.permission("admin_key_required", "The status page is read with the admin key")
      const recent = new Map(metrics.recentProviders().map((p) => [p.provider, p]))
      const g = gauges()
      return Reply.json({
        version,
        replica: yield* replicas.id,
        replicas: yield* replicas.seen,
        uptimeSeconds: Math.round((Date.now() - startedAt) / 1000),
        providers: Object.entries(config.providers).map(([name, p]) => ({
          name,
          type: p.type,
          recent: { windowSeconds: 300, calls: recent.get(name)?.calls ?? 0, failures: recent.get(name)?.failures ?? 0, errorRate: recent.get(name)?.errorRate ?? 0 }
        })),
        // each target called on this replica (keys by index, never the key): state, calls in flight, moving error rate and latencies
        targets: (yield* health.states).map(({ cooledUntil, ...t }) => ({ ...t, ...(cooledUntil !== undefined ? { cooledUntil: new Date(cooledUntil).toISOString() } : {}) })),
        inFlight: { requests: g.requestsInFlight, modelRequests: g.modelRequestsInFlight, bodyBytes: g.bodyBytesInFlight },
        storedResponses: yield* responses.stats(),
        files: yield* files.stats(),
        // each MCP server connection of this replica (a per-app one with its app): state, tool count, why it is down; never its URL, headers or command
        toolServers: toolServers.status()
      })
    })

  const routes: ReadonlyArray<Route> = [
    { method: "GET", path: "/gateway/metrics", auth: "public", handler: metricsHandler, label: "gateway.metrics" },
    { method: "GET", path: "/gateway/status", auth: "public", handler: statusHandler, label: "gateway.status" }
  ]
  return routes
})
