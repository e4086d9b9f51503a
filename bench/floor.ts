/**
 * The floor contestant: what the @effect/platform HTTP server costs by itself. `HttpServer.serve`
 * on `NodeHttpServer.layer`, an `HttpRouter` with one POST route, doing only the steps no gateway
 * on that server can skip, the way the passthrough (bench/passthrough.ts) does them: the JSON body
 * read and parsed (the platform's `request.json`), `JSON.stringify` of it forwarded to the upstream
 * over an undici keep-alive pool (the passthrough's settings), and the upstream's answer as the
 * response: its bytes whole, or for a stream `HttpServerResponse.stream` of its body as it comes
 * (`NodeStream.fromReadable` of undici's body: on 64 streams at once it cost about 3.2-3.4 ms of CPU
 * per stream against 4-8.8 ms for `Stream.fromAsyncIterable` of the same body, a noisy 2-round check).
 * No tracing spans (`withTracerDisabledWhen`: the gateway traces only with OpenTelemetry set up),
 * no logger middleware. A client that goes away interrupts the request's fiber, which aborts the
 * upstream call.
 *
 * `node bench/.build/floor.js <upstreamUrl>` prints `listening on http://127.0.0.1:PORT`.
 */
import { HttpMiddleware, HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer, NodeRuntime, NodeStream } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import { Agent, request } from "undici"

const upstream = `${(process.argv[2] ?? "").replace(/\/+$/, "")}/v1/chat/completions`
const agent = new Agent({ keepAliveTimeout: 60_000, keepAliveMaxTimeout: 120_000, headersTimeout: 0, bodyTimeout: 0 })

class UpstreamError {
  readonly _tag = "UpstreamError"
  constructor(readonly cause: unknown) {}
}

const chat = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const wire = (yield* req.json) as { readonly stream?: unknown }
  const body = JSON.stringify(wire)
  const up = yield* Effect.tryPromise({
    try: (signal) => request(upstream, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer sk-bench" }, body, dispatcher: agent, signal }),
    catch: (e) => new UpstreamError(e)
  })
  const type = up.headers["content-type"]
  const contentType = typeof type === "string" ? type : undefined
  if (wire.stream === true) {
    return HttpServerResponse.stream(
      NodeStream.fromReadable<UpstreamError, Uint8Array>(() => up.body, (e) => new UpstreamError(e)),
      { status: up.statusCode, ...(contentType !== undefined ? { contentType } : {}) }
    )
  }
  const bytes = yield* Effect.tryPromise({ try: () => up.body.arrayBuffer(), catch: (e) => new UpstreamError(e) })
  return HttpServerResponse.uint8Array(new Uint8Array(bytes), { status: up.statusCode, ...(contentType !== undefined ? { contentType } : {}) })
}).pipe(
  Effect.catchAll((e) =>
    HttpServerResponse.json({ error: { message: String(e instanceof UpstreamError ? e.cause : e), type: "floor_error" } }, { status: 502 })
  )
)

const router = HttpRouter.empty.pipe(HttpRouter.post("/v1/chat/completions", chat))

const server = http.createServer({ keepAliveTimeout: 120_000, headersTimeout: 130_000, requestTimeout: 0 })
const listening = Layer.effectDiscard(HttpServer.addressWith((address) => Effect.sync(() => process.stdout.write(`listening on http://127.0.0.1:${address._tag === "TcpAddress" ? address.port : 0}\n`))))

const app = HttpMiddleware.withTracerDisabledWhen(
  Layer.mergeAll(HttpServer.serve(router), listening),
  () => true
).pipe(Layer.provide(NodeHttpServer.layer(() => server, { port: 0, host: "127.0.0.1" })))

process.once("SIGTERM", () => process.exit(0))
NodeRuntime.runMain(Layer.launch(app))
