import { HttpClient, HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import { Settings, type GatewayConfig } from "./Config.js"
import { makeEdge } from "./http/Edge.js"
import { Log } from "./http/Log.js"
import type { Route } from "./http/Route.js"
import { chatRoutes } from "./protocols/chat/Routes.js"
import { probeRoutes } from "./protocols/gateway/Probes.js"
import { MockProviderFactory } from "./providers/mock/MockProvider.js"
import { OpenAiProviderFactory } from "./providers/openai/OpenAiProvider.js"
import { Catalog } from "./services/Catalog.js"
import { KeyStore } from "./services/KeyStore.js"
import { Limits } from "./services/Limits.js"
import { ModelRunner } from "./services/ModelRunner.js"
import { ProviderClient, ProviderFactories } from "./services/ProviderClient.js"
import { databaseLayer } from "./sql/Database.js"

/** Provider factories: one per provider type. A new provider type is one more entry. */
const factoriesLayer = Layer.effect(
  ProviderFactories,
  Effect.map(OpenAiProviderFactory, (openai) => new Map([[openai.type, openai], [MockProviderFactory.type, MockProviderFactory]]))
).pipe(Layer.provide(NodeHttpClient.layerUndici))

/**
 * The services of the gateway for a config, without the HTTP server. Tests replace
 * `ProviderClient` (or any other service) by providing their own layer first.
 */
export const servicesLayer = (config: GatewayConfig, providers?: Layer.Layer<ProviderClient>) => {
  const settings = Layer.succeed(Settings, config)
  const base = Layer.mergeAll(settings, KeyStore.layer(config), Catalog.layer(config), Log.layer(config.accessLog))
  const limits = Limits.layer(config).pipe(Layer.provide(base))
  const providerClient = providers ?? ProviderClient.layer(config.providers).pipe(Layer.provide(factoriesLayer))
  const runner = ModelRunner.layer.pipe(Layer.provide(Layer.mergeAll(base, limits, providerClient)))
  return Layer.mergeAll(base, limits, providerClient, runner, databaseLayer(config.dataDir))
}

/** Every route of the gateway. */
const allRoutes = Effect.gen(function* () {
  const routes: Array<Route> = []
  routes.push(...(yield* chatRoutes))
  routes.push(...(yield* probeRoutes(() => routes.filter((r) => typeof r.path === "string").map((r) => ({ method: r.method, path: r.path as string })))))
  return routes
})

/** Serve the edge over the HttpServer in context; prints `listening on http://HOST:PORT`. */
const serveLayer = (config: GatewayConfig) =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const routes = yield* allRoutes
      const app = yield* makeEdge(routes)
      const served = HttpServer.serve(app)
      return config.telemetry?.otlpEndpoint !== undefined ? served : HttpMiddleware.withTracerDisabledWhen(served, () => true)
    })
  )

const announce = Layer.effectDiscard(
  Effect.gen(function* () {
    const server = yield* HttpServer.HttpServer
    const address = server.address
    const line = address._tag === "TcpAddress" ? `listening on http://${address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname}:${address.port}` : `listening on ${address.path}`
    yield* Effect.sync(() => process.stdout.write(line + "\n"))
  })
)

/** Graceful stop: idle keep-alive connections close at once, the rest after a grace period. */
const shutdownGrace = (server: http.Server, graceMs: number) =>
  Layer.scopedDiscard(
    Effect.addFinalizer(() =>
      Effect.sync(() => {
        server.closeIdleConnections()
        const timer = setTimeout(() => server.closeAllConnections(), graceMs)
        timer.unref()
        server.once("close", () => clearTimeout(timer))
      })
    )
  )

export interface ServeOptions {
  /** test double for the providers */
  readonly providers?: Layer.Layer<ProviderClient>
  /** how long in-flight requests may take after a stop signal (default 10 s) */
  readonly shutdownGraceMs?: number
}

/** The whole gateway: services, HTTP server on the configured address, and the edge. Outputs the HttpServer (its bound address). */
export const gatewayLayer = (config: GatewayConfig, options: ServeOptions = {}) => {
  const nodeServer = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 })
  const serverLayer = NodeHttpServer.layer(() => nodeServer, { host: config.listen.host, port: config.listen.port })
  const services = servicesLayer(config, options.providers)
  const layer = Layer.mergeAll(serveLayer(config), announce, shutdownGrace(nodeServer, options.shutdownGraceMs ?? 10_000)).pipe(
    Layer.provide(services),
    Layer.provideMerge(serverLayer)
  )
  // tracing off when no exporter is configured: no spans per request, no trace headers upstream
  return config.telemetry?.otlpEndpoint !== undefined
    ? layer
    : layer.pipe(
        Layer.locally(HttpClient.currentTracerDisabledWhen, () => true),
        Layer.locally(HttpClient.currentTracerPropagation, false)
      )
}
