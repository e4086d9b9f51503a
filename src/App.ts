import { Effect, Layer } from "effect"
import { Settings, type GatewayConfig } from "./Config.js"
import { telemetryLayer } from "./Telemetry.js"
import { makeEdge } from "./http/Edge.js"
import { gatewayApp } from "./http/Router.js"
import { Log } from "./services/ops/Log.js"
import { hasMessagesVersion, type Mount, type Route } from "./http/Route.js"
import { GatewayServer, serverLayer, Shutdown } from "./http/Server.js"
import { chatRoutes } from "./protocols/chat/Routes.js"
import { probeRoutes } from "./protocols/gateway/Probes.js"
import { adminRoutes } from "./protocols/gateway/Admin.js"
import { dashboardRoutes } from "./protocols/gateway/Dashboard.js"
import { errorsPageRoutes } from "./protocols/gateway/ErrorsPage.js"
import { opsRoutes } from "./protocols/gateway/Ops.js"
import { usageRoutes } from "./protocols/gateway/Usage.js"
import { geminiRoutes } from "./protocols/gemini/Routes.js"
import { messagesRoutes } from "./protocols/messages/Routes.js"
import { responsesRoutes } from "./protocols/responses/Routes.js"
import { filesRoutes } from "./protocols/files/Routes.js"
import { mcpRoutes } from "./protocols/mcp/Routes.js"
import { AnthropicProviderFactory } from "./providers/anthropic/AnthropicProvider.js"
import { GeminiProviderFactory } from "./providers/gemini/GeminiProvider.js"
import { MockProviderFactory } from "./providers/mock/MockProvider.js"
import { OpenAiProviderFactory } from "./providers/openai/OpenAiProvider.js"
import { Catalog } from "./services/routing/Catalog.js"
import { FileStore } from "./services/files/FileStore.js"
import { HttpUpstream } from "./providers/HttpUpstream.js"
import { ItemMemory } from "./services/responses/ItemMemory.js"
import { KeyStore } from "./services/keys/KeyStore.js"
import { Limits } from "./services/runner/Limits.js"
import { Metrics } from "./services/ops/Metrics.js"
import { ModelRunner } from "./services/runner/ModelRunner.js"
import { HostTools } from "./services/tools/HostTools.js"
import { HostToolLoop } from "./services/tools/Loop.js"
import { ToolServers } from "./services/tools/ToolServers.js"
import { ProviderFactories } from "./providers/Provider.js"
import { ProviderClient } from "./services/runner/ProviderClient.js"
import { RemoteFiles } from "./services/files/RemoteFiles.js"
import { ResponseStore } from "./services/responses/ResponseStore.js"
import { UsageLog } from "./services/usage/Usage.js"
import { UsageRetention } from "./services/usage/UsageRetention.js"
import { databaseLayer } from "./sql/Database.js"
import { Replicas } from "./services/ops/Replicas.js"
import { Quota } from "./services/quota/Quota.js"
import { Health } from "./services/routing/Health.js"
import { Router } from "./services/routing/Router.js"

/** Provider factories: one per provider type. A new provider type is one more entry. */
const factoriesLayer = (config: GatewayConfig) =>
  Layer.effect(
    ProviderFactories,
    Effect.all([OpenAiProviderFactory, AnthropicProviderFactory, GeminiProviderFactory]).pipe(
      Effect.map((factories) => new Map([...factories, MockProviderFactory].map((f) => [f.type, f] as const)))
    )
    // as many connections per upstream as model calls may be in flight: an admitted call never
    // waits in a second, hidden queue
  ).pipe(Layer.provide(HttpUpstream.layerWith({ connections: config.concurrency })))

/**
 * The services of the gateway for a config, without the HTTP server. Tests replace
 * `ProviderClient` (or any other service) by providing their own layer.
 */
export const servicesLayer = (config: GatewayConfig, providers?: Layer.Layer<ProviderClient>, random?: () => number) => {
  const settings = Layer.succeed(Settings, config)
  const database = databaseLayer(config)
  const base = Layer.mergeAll(
    settings,
    KeyStore.layerWithRuntime(config).pipe(Layer.provide(database)),
    Catalog.layer(config),
    Log.layer(config.accessLog),
    Metrics.layer,
    Shutdown.layer()
  )
  const limits = Limits.layer(config).pipe(Layer.provide(base))
  const providerClient = providers ?? ProviderClient.layer(config.providers).pipe(Layer.provide(factoriesLayer(config)))
  const usage = UsageLog.layer(config.usage.enabled).pipe(Layer.provide(Layer.merge(database, base)))
  const quota = Quota.layer.pipe(Layer.provide(Layer.merge(database, base)))
  // old raw rows are rolled up even with accounting off: storage stays bounded
  const retention = UsageRetention.layer(config.usage.retentionDays).pipe(Layer.provide(Layer.merge(database, base)))
  // one Health for the router, the runner and the status page (layers are memoized)
  const router = (random === undefined ? Router.layer : Router.layerWith(random)).pipe(Layer.provide(Health.layer))
  const runner = ModelRunner.layer.pipe(Layer.provide(Layer.mergeAll(base, limits, providerClient, usage, quota, Health.layer, router)))
  const responseStore = ResponseStore.layer(config.dataDir).pipe(Layer.provide(Layer.merge(database, base)))
  const fileStore = FileStore.layer(config.dataDir).pipe(Layer.provide(Layer.merge(database, base)))
  const itemMemory = ItemMemory.layer().pipe(Layer.provide(Layer.merge(database, base)))
  const remoteFiles = RemoteFiles.layer.pipe(Layer.provide(settings))
  const replicas = Replicas.layer.pipe(Layer.provide(Layer.merge(database, base)))
  const toolServers = ToolServers.layer.pipe(Layer.provide(settings))
  const hostTools = HostTools.layer.pipe(Layer.provide(Layer.mergeAll(base, toolServers, usage)))
  const loop = HostToolLoop.layer.pipe(Layer.provide(Layer.mergeAll(runner, hostTools, settings)))
  return Layer.mergeAll(
    base,
    limits,
    providerClient,
    runner,
    database,
    usage,
    retention,
    responseStore,
    fileStore,
    itemMemory,
    remoteFiles,
    replicas,
    quota,
    Health.layer,
    toolServers,
    hostTools,
    loop
  )
}

/**
 * Where each protocol family is mounted: the envelope its errors (404s and 405s included) are
 * written in and how its keys are presented. `/v1/models` and `/v1/files` serve the Messages shape
 * to a request with a Messages version header.
 */
export const mounts: ReadonlyArray<Mount> = [
  { prefix: "/v1beta", family: "gemini" },
  { prefix: "/upload/v1beta/", family: "gemini" },
  { prefix: "/v1/messages", family: "messages" },
  { prefix: "/v1/models", family: "messages", when: hasMessagesVersion },
  { prefix: "/v1/files", family: "messages", when: hasMessagesVersion },
  { prefix: "/v1/", family: "openai" },
  // the gateway's MCP server: keys and refusals as on /v1
  { prefix: "/mcp", family: "openai" }
]

/** Every route of the gateway: the table the routers are built from and the discovery page lists. */
export const allRoutes = Effect.gen(function* () {
  const routes: Array<Route> = []
  routes.push(...(yield* chatRoutes))
  routes.push(...(yield* responsesRoutes))
  routes.push(...(yield* messagesRoutes))
  routes.push(...(yield* geminiRoutes))
  routes.push(...(yield* filesRoutes))
  routes.push(...(yield* mcpRoutes))
  routes.push(...(yield* usageRoutes))
  routes.push(...(yield* adminRoutes))
  routes.push(...(yield* opsRoutes))
  routes.push(...(yield* errorsPageRoutes))
  routes.push(...(yield* dashboardRoutes))
  routes.push(...(yield* probeRoutes(() => routes)))
  return routes
})

const announce = Layer.scopedDiscard(
  Effect.gen(function* () {
    const { host, port, drain } = yield* GatewayServer
    // released before the server's layer: the drain runs before anything of the server's own waits for its clients
    yield* Effect.addFinalizer(() => drain)
    yield* (yield* Replicas).bind(port)
    yield* Effect.sync(() => process.stdout.write(`listening on http://${host.includes(":") ? `[${host}]` : host}:${port}\n`))
  })
)

export interface ServeOptions {
  /** test double for the providers */
  readonly providers?: Layer.Layer<ProviderClient>
  /** how long in-flight requests may take after a stop signal (default 10 s) */
  readonly shutdownGraceMs?: number
  /** the routing strategies' random source (a seeded one in tests; default Math.random) */
  readonly random?: () => number
}

/** The whole gateway: services, the HTTP server on the configured address, and the edge. Outputs its bound address. */
export const gatewayLayer = (config: GatewayConfig, options: ServeOptions = {}) => {
  const server = Layer.unwrapScoped(
    Effect.gen(function* () {
      const routes = yield* allRoutes
      const edgeFor = yield* makeEdge
      return serverLayer({ host: config.listen.host, port: config.listen.port, graceMs: options.shutdownGraceMs ?? 10_000 }, (port) => gatewayApp(routes, mounts, edgeFor(port)))
    })
  )
  return Layer.provideMerge(announce, server).pipe(Layer.provide(servicesLayer(config, options.providers, options.random)), Layer.provide(telemetryLayer(config)))
}
