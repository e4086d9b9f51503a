import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Socket from "@effect/platform/Socket"
import { Deferred, Effect, Fiber, Queue, Stream, type Scope } from "effect"
import type { Settings } from "../../Config.js"
import { Errors, GatewayError, toGatewayError, type AnyGatewayError } from "../../domain/Errors.js"
import { renderOpenAi } from "../../http/Envelopes.js"
import type { Reply, RequestContext } from "../../http/Route.js"
import type { Shutdown } from "../../http/Server.js"
import type { Item } from "./Input.js"

/**
 * The Responses API over WebSocket (`GET /v1/responses` with `Upgrade: websocket`, Codex's
 * WebSocket mode). The edge has settled Host, Origin, key and app before the upgrade: a refusal
 * there is an HTTP answer. Each `response.create` message is the POST body (stream implied) and
 * runs through the same function as the HTTP POST; its SSE events leave as one JSON text message
 * each. One response at a time; a few messages wait; the connection remembers its last response.
 * When the server stops, an idle socket closes with 1001 at once, a busy one when its responses
 * are done or when the grace period ends, whichever comes first.
 */

/** What one connection remembers between its responses. */
export interface Connection {
  last?: { readonly id: string; readonly input: ReadonlyArray<Item>; readonly output: ReadonlyArray<Item> }
  /** false while a `generate: false` message is answered */
  generate: boolean
}

type Answer = (ctx: RequestContext, body: unknown, connection?: Connection) => Effect.Effect<Reply, AnyGatewayError, Scope.Scope>

/** messages that may wait while one response runs */
export const MAX_WAITING = 4

const DEFAULT_IDLE_MS = 300_000
const DEFAULT_LIFETIME_MS = 3_600_000

const timersOf = (setting: Settings["Type"]["responsesWebSocket"]) =>
  setting === false
    ? undefined
    : {
        idleMs: setting === true ? DEFAULT_IDLE_MS : (setting.idleTimeoutMs ?? DEFAULT_IDLE_MS),
        lifetimeMs: setting === true ? DEFAULT_LIFETIME_MS : (setting.maxConnectionMs ?? DEFAULT_LIFETIME_MS)
      }

/** An error message before output: the OpenAI envelope with the status and Retry-After. */
export const errorMessage = (error: GatewayError): string => {
  const rendered = renderOpenAi(error)
  const body = JSON.parse(rendered.body) as { readonly error: unknown }
  const headers: Record<string, string> = {}
  if (error.retryAfter !== undefined) headers["retry-after"] = String(error.retryAfter)
  return JSON.stringify({ type: "error", status: rendered.status, error: body.error, ...(Object.keys(headers).length > 0 ? { headers } : {}) })
}

/** The `data:` lines of complete SSE frames in `buffer`, and what is left of it. */
const framesOf = (buffer: string): { readonly data: ReadonlyArray<string>; readonly rest: string } => {
  const data: Array<string> = []
  let start = 0
  for (;;) {
    const end = buffer.indexOf("\n\n", start)
    if (end < 0) break
    const frame = buffer.slice(start, end)
    start = end + 2
    const lines = frame.split("\n").filter((l) => l.startsWith("data:"))
    if (lines.length > 0) data.push(lines.map((l) => l.slice(l.startsWith("data: ") ? 6 : 5)).join("\n"))
  }
  return { data, rest: buffer.slice(start) }
}

export const webSocketHandler =
  (config: Settings["Type"], shutdown: Shutdown["Type"], answer: Answer) =>
  (ctx: RequestContext): Effect.Effect<Reply, AnyGatewayError, Scope.Scope> =>
    Effect.gen(function* () {
      if (ctx.headers["upgrade"]?.toLowerCase() !== "websocket") {
        // the GET route is the WebSocket: without the upgrade it says how to use the path
        return yield* new GatewayError({
          kind: "invalid_request",
          status: 426,
          code: "upgrade_required",
          message: "GET /v1/responses is the Responses API over WebSocket: send it with Upgrade: websocket, or create a response with POST /v1/responses"
        })
      }
      const timers = timersOf(config.responsesWebSocket)
      if (timers === undefined) {
        return yield* new GatewayError({
          kind: "invalid_request",
          status: 426,
          code: "websocket_disabled",
          message: "The Responses WebSocket mode is switched off on this gateway; send POST /v1/responses over HTTP"
        })
      }
      const socket = yield* Effect.mapError(ctx.request.upgrade, () => Errors.invalidRequest("websocket_upgrade_failed", "The WebSocket upgrade failed"))
      ctx.noteUpgraded()
      const write = yield* socket.writer
      const send = (text: string) => Effect.catchAll(write(text), () => Effect.void)
      const close = (code: number, reason: string) => Effect.catchAll(write(new Socket.CloseEvent(code, reason)), () => Effect.void)
      const connection: Connection = { generate: true }
      const queue = yield* Queue.unbounded<Record<string, unknown>>()
      let pending = 0
      // open while no response runs or waits: what a stopping server waits for
      const idleNow = yield* Effect.makeLatch(true)
      let draining = false
      let lastActivity = Date.now()
      const maxBytes = ctx.app.maxBodyBytes

      /** one response.create: the HTTP POST's function, its SSE frames as messages */
      const run = (message: Record<string, unknown>) =>
        Effect.scoped(
          Effect.gen(function* () {
            const { type: _type, generate, ...body } = message
            connection.generate = generate !== false
            const reply = yield* answer({ ...ctx, deadline: Date.now() + config.requestTimeoutMs }, { ...body, stream: true }, connection)
            const replyBody = reply.body
            if (replyBody._tag === "Uint8Array" || replyBody._tag === "Raw" || replyBody._tag === "Stream") {
              const stream: Stream.Stream<Uint8Array | string, unknown> =
                replyBody._tag === "Stream" ? replyBody.stream : Stream.make(replyBody._tag === "Uint8Array" ? replyBody.body : String(replyBody.body))
              const decoder = new TextDecoder()
              let buffer = ""
              yield* Stream.runForEach(stream, (chunk) => {
                buffer += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true })
                const { data, rest } = framesOf(buffer)
                buffer = rest
                // one message per event, each written before the next is read (backpressure)
                return Effect.forEach(data, (d) => write(d), { discard: true })
              }).pipe(Effect.catchAll(() => Effect.void))
            }
          }).pipe(Effect.catchAll((error) => send(errorMessage(toGatewayError(error)))))
        )

      const worker = Effect.forever(
        Effect.flatMap(Queue.take(queue), (message) =>
          Effect.ensuring(
            run(message),
            Effect.sync(() => {
              pending--
              lastActivity = Date.now()
              if (pending === 0) idleNow.unsafeOpen()
            })
          )
        )
      )

      const onMessage = (data: string | Uint8Array): Effect.Effect<void> => {
        lastActivity = Date.now()
        const size = typeof data === "string" ? Buffer.byteLength(data) : data.byteLength
        if (size > maxBytes) {
          return send(errorMessage(Errors.payloadTooLarge("payload_too_large", `The message is larger than ${maxBytes} bytes`)))
        }
        let message: unknown
        try {
          message = JSON.parse(typeof data === "string" ? data : new TextDecoder().decode(data))
        } catch {
          return send(errorMessage(Errors.invalidRequest("invalid_json", "The message is not valid JSON")))
        }
        if (typeof message !== "object" || message === null || Array.isArray(message)) {
          return send(errorMessage(Errors.invalidRequest("invalid_request_error", "A message must be a JSON object")))
        }
        const typed = message as Record<string, unknown>
        if (typed["type"] === "response.processed") return Effect.void
        if (typed["type"] !== "response.create") {
          return send(errorMessage(Errors.invalidRequest("unknown_message_type", `Unknown message type ${JSON.stringify(typed["type"] ?? null).slice(0, 100)}; expected response.create`, { param: "type" })))
        }
        if (draining) {
          return send(errorMessage(Errors.unavailable("server_shutting_down", "The gateway is shutting down; open a new connection")))
        }
        if (pending > MAX_WAITING) {
          return send(errorMessage(Errors.rateLimited("too_many_queued_messages", `At most ${MAX_WAITING} messages may wait while a response runs on this connection`)))
        }
        pending++
        idleNow.unsafeClose()
        return Queue.offer(queue, typed)
      }

      const idle = Effect.gen(function* () {
        for (;;) {
          const wait = Math.max(1, lastActivity + timers.idleMs - Date.now())
          yield* Effect.sleep(wait)
          if (pending === 0 && Date.now() - lastActivity >= timers.idleMs) {
            yield* close(1000, "idle timeout")
            return
          }
          if (pending > 0) lastActivity = Date.now()
        }
      })
      const lifetime = Effect.zipRight(
        Effect.sleep(timers.lifetimeMs),
        Effect.zipRight(
          send(errorMessage(Errors.invalidRequest("websocket_connection_limit_reached", `The connection reached its ${Math.round(timers.lifetimeMs / 60_000)} minute limit; open a new one`))),
          close(1000, "connection limit reached")
        )
      )

      // the server stopping: nothing new; 1001 once the responses are done, or at the end of the grace period
      const stop = Effect.gen(function* () {
        yield* Deferred.await(shutdown.draining)
        draining = true
        yield* Effect.raceFirst(idleNow.await, Deferred.await(shutdown.stopping))
        yield* close(1001, "server shutting down")
      })

      const background = yield* Effect.fork(Effect.all([worker, idle, lifetime, stop], { concurrency: "unbounded", discard: true }))
      // until the client or a timer closes the socket; then the running response is interrupted (its upstream call aborted)
      yield* socket.runRaw(onMessage).pipe(Effect.catchAll(() => Effect.void))
      yield* Fiber.interrupt(background)
      // the platform writes nothing for an upgraded request
      return HttpServerResponse.empty()
    })
