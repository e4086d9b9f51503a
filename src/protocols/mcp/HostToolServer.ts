import {
  createMcpHandler,
  InMemoryServerEventBus,
  ProtocolError,
  ProtocolErrorCode,
  Server,
  type CallToolResult,
  type McpHttpHandler,
  type ServerContext,
  type Tool
} from "@modelcontextprotocol/server"
import { Effect, Either, FiberSet, Runtime, type Scope } from "effect"
import type { GatewayError } from "../../domain/Errors.js"
import { HostTools, type Offer } from "../../services/tools/HostTools.js"
import { ToolServers, type Progress } from "../../services/tools/ToolServers.js"

/**
 * The gateway as an MCP server: each app's host tools served to MCP clients (Claude Code, Codex,
 * Gemini CLI) over Streamable HTTP, by the SDK's `createMcpHandler`. It serves the 2026-07-28
 * revision (sessionless: every request carries its own envelope) and, for the 2025 revisions, the
 * SDK's stateless fallback (a fresh server instance per request, no session id): no request depends
 * on state one replica holds and another lacks. Listing and calling go through `HostTools` (the
 * names and schemas the model is offered; the same timeouts, result cap and metrics).
 *
 * List changes reach 2026-07-28 clients on their `subscriptions/listen` streams. A 2025 stateless
 * endpoint has no stream to push on (its GET answers 405), so it does not advertise `listChanged`.
 */

const serverInfo = { name: "llm-gateway", version: "0.1.0" }

/** SSE keep-alive comments on listen streams and streamed answers, as the gateway's own streams keep them. */
const KEEP_ALIVE_MS = 10_000

/** One app's endpoint: its handler, the bus its listen streams hang on, and what it last listed. */
interface AppEndpoint {
  readonly handler: McpHttpHandler
  readonly bus: InMemoryServerEventBus
  /** the tool list last listed or announced (names and schemas), to tell a real change from a reconnect */
  listed: string | undefined
  checking: boolean
  checkAgain: boolean
}

export interface HostToolServer {
  /** Serve one MCP request of an app's caller (a web Request; the key is already checked). */
  readonly fetch: (app: string, maxBodyBytes: number, request: Request) => Promise<Response>
}

/** The tools as `tools/list` gives them: the name, description and argument schema the model sees. */
const listing = (offer: Offer | undefined): Array<Tool> =>
  (offer?.tools ?? []).map((t) => ({
    name: t.name,
    ...(t.definition.description !== undefined ? { description: t.definition.description } : {}),
    inputSchema: { ...t.definition.parameters, type: "object" as const }
  }))

/** A gateway error as a JSON-RPC error inside the MCP answer (its message names a server, never a URL). */
const protocolError = (error: GatewayError) => new ProtocolError(ProtocolErrorCode.InternalError, error.message)

export const makeHostToolServer: Effect.Effect<HostToolServer, never, HostTools | ToolServers | Scope.Scope> = Effect.gen(function* () {
  const hostTools = yield* HostTools
  const servers = yield* ToolServers
  const runtime = yield* Effect.runtime<never>()
  const background = yield* FiberSet.makeRuntime<never>()
  const endpoints = new Map<string, AppEndpoint>()

  const run = <A>(effect: Effect.Effect<A, ProtocolError>, signal?: AbortSignal): Promise<A> =>
    Runtime.runPromise(runtime)(Effect.either(effect), signal === undefined ? undefined : { signal }).then((result) =>
      Either.getOrThrowWith(result, (error) => error)
    )

  const offerOf = (app: string) => Effect.mapError(hostTools.offerAll(app), protocolError)

  const listTools = (app: string, endpoint: AppEndpoint) =>
    Effect.map(offerOf(app), (offer) => {
      const tools = listing(offer)
      endpoint.listed = JSON.stringify(tools)
      return { tools }
    })

  const callTool = (app: string, server: Server, name: string, args: Record<string, unknown>, onProgress?: (progress: Progress) => void): Effect.Effect<CallToolResult, ProtocolError> =>
    Effect.flatMap(offerOf(app), (offer) => {
      const tool = offer?.byName.get(name)
      if (offer === undefined || tool === undefined) return Effect.fail(new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool: ${name}`))
      return Effect.map(hostTools.callTool(offer, tool, args, onProgress), (result) => server.projectCallToolResult(result, undefined))
    })

  /** The server's progress, relayed to a client that asked for it (a `progressToken`) as its own notifications. */
  const relayProgress = (ctx: ServerContext): ((progress: Progress) => void) | undefined => {
    const progressToken = ctx.mcpReq._meta?.progressToken
    if (progressToken === undefined) return undefined
    return (progress) =>
      void ctx.mcpReq
        .notify({
          method: "notifications/progress",
          params: { progressToken, progress: progress.progress, ...(progress.total !== undefined ? { total: progress.total } : {}), ...(progress.message !== undefined ? { message: progress.message } : {}) }
        })
        .catch(() => undefined)
  }

  /**
   * A fresh server instance for one request of the app (the SDK's factory). The low-level `Server`,
   * not `McpServer`: a proxy hands on the JSON Schemas its servers gave, where `McpServer` wants a
   * schema object of its own and checks the arguments itself.
   */
  const serverFor = (app: string, endpoint: AppEndpoint, era: "legacy" | "modern") => {
    const server = new Server(serverInfo, { capabilities: { tools: { listChanged: era === "modern" } } })
    server.setRequestHandler("tools/list", (_request, ctx) => run(listTools(app, endpoint), ctx.mcpReq.signal))
    server.setRequestHandler("tools/call", (request, ctx) =>
      run(callTool(app, server, request.params.name, request.params.arguments ?? {}, relayProgress(ctx)), ctx.mcpReq.signal)
    )
    return server
  }

  const endpointOf = (app: string, maxBodyBytes: number): AppEndpoint => {
    const existing = endpoints.get(app)
    if (existing !== undefined) return existing
    const bus = new InMemoryServerEventBus()
    const endpoint: AppEndpoint = {
      handler: createMcpHandler((ctx) => serverFor(app, endpoint, ctx.era), {
        legacy: "stateless",
        bus,
        keepAliveMs: KEEP_ALIVE_MS,
        // the edge read the body under the app's limit already
        maxRequestBodySize: Math.max(1, maxBodyBytes)
      }),
      bus,
      listed: undefined,
      checking: false,
      checkAgain: false
    }
    endpoints.set(app, endpoint)
    return endpoint
  }

  /**
   * A tool server's list or state changed: each app with a client listening lists its tools again
   * and announces `notifications/tools/list_changed` when they differ from what it last listed
   * (a reconnect with the same tools announces nothing; a server not ready announces nothing).
   */
  const check = (app: string, endpoint: AppEndpoint): Effect.Effect<void> =>
    Effect.gen(function* () {
      do {
        endpoint.checkAgain = false
        const listed = yield* Effect.either(offerOf(app))
        if (Either.isLeft(listed)) continue
        const now = JSON.stringify(listing(listed.right))
        if (now === endpoint.listed) continue
        endpoint.listed = now
        endpoint.handler.notify.toolsChanged()
      } while (endpoint.checkAgain)
    }).pipe(Effect.ensuring(Effect.sync(() => (endpoint.checking = false))))

  const unsubscribe = servers.onChange(() => {
    for (const [app, endpoint] of endpoints) {
      if (endpoint.bus.listenerCount === 0) continue
      if (endpoint.checking) {
        endpoint.checkAgain = true
        continue
      }
      endpoint.checking = true
      background(check(app, endpoint))
    }
  })
  yield* Effect.addFinalizer(() =>
    Effect.promise(() => {
      unsubscribe()
      return Promise.all([...endpoints.values()].map((e) => e.handler.close().catch(() => undefined)))
    })
  )

  return { fetch: (app, maxBodyBytes, request) => endpointOf(app, maxBodyBytes).handler.fetch(request) }
})
