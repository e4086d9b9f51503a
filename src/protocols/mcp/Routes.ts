import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Stream } from "effect"
import { Settings } from "../../Config.js"
import { Errors } from "../../domain/Errors.js"
import { readBody } from "../../http/Body.js"
import { type Reply, type RequestContext, type Route } from "../../http/Route.js"
import { streamResponse } from "../../http/Writer.js"
import { Limits } from "../../services/runner/Limits.js"
import { makeHostToolServer } from "./HostToolServer.js"

/**
 * `POST /mcp`: the calling key's app's host tools for MCP clients (Streamable HTTP). The edge
 * authenticates it as `/v1` (a Bearer key) and answers its refusals in the OpenAI envelope; the body
 * is read under the app's limits, then the MCP answer (JSON-RPC errors included) is the SDK's. A
 * GET (the 2025 revisions' server stream) is not served: this endpoint is stateless, so it answers
 * 405 as the 2025 transport allows.
 */

/** Request headers not handed on: hop-by-hop ones, the body's own framing, and the caller's key. */
const dropped = new Set(["host", "connection", "keep-alive", "transfer-encoding", "content-length", "authorization", "upgrade"])

/** The request as the SDK's web-standard handler takes it; `signal` ends its exchange (a listen stream) when the client goes. */
const webRequest = (ctx: RequestContext, body: Uint8Array, signal: AbortSignal): Request => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(ctx.headers)) if (value !== undefined && !dropped.has(name)) headers.set(name, value)
  const query = ctx.query.toString()
  return new Request(`${ctx.origin}/mcp${query === "" ? "" : `?${query}`}`, { method: ctx.method, headers, body, signal })
}

/** The SDK's answer as the platform's: a JSON body whole, an SSE body streamed as it comes. */
const reply = (response: Response): Effect.Effect<Reply> => {
  const headers: Record<string, string> = {}
  response.headers.forEach((value, name) => {
    if (name !== "content-length") headers[name] = value
  })
  const contentType = response.headers.get("content-type") ?? ""
  if (response.body !== null && contentType.startsWith("text/event-stream")) {
    const body = Stream.fromReadableStream({ evaluate: () => response.body!, onError: () => "sse" as const }).pipe(Stream.catchAll(() => Stream.empty))
    return Effect.succeed(streamResponse(response.status, headers, body))
  }
  return Effect.map(
    Effect.promise(() => response.text()),
    (text) =>
      text === ""
        ? HttpServerResponse.empty({ status: response.status, headers })
        : HttpServerResponse.text(text, { status: response.status, headers, contentType: contentType === "" ? "application/json" : contentType })
  )
}

export const mcpRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const limits = yield* Limits
  const server = yield* makeHostToolServer

  const handler = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const app = ctx.principal.app
      const body = yield* readBody(ctx.incoming, {
        maxBytes: ctx.app.maxBodyBytes,
        idleMs: config.limits.bodyReadTimeoutMs,
        totalMs: config.limits.bodyReadMaxMs,
        reserve: (bytes) => limits.reserveBody(app, bytes)
      })
      // the exchange ends with the request: its answer written, or the client gone
      const controller = new AbortController()
      yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
      const response = yield* Effect.tryPromise({
        try: () => server.fetch(app, ctx.app.maxBodyBytes, webRequest(ctx, body, controller.signal)),
        catch: () => Errors.internal("internal_error", "The gateway's MCP server failed while handling this request")
      })
      return yield* reply(response)
    })

  const routes: ReadonlyArray<Route> = [{ method: "POST", path: "/mcp", auth: "key", label: "mcp", handler }]
  return routes
})
