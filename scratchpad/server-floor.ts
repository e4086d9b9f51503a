// Floor of per-request cost: bare node:http, node:http + Runtime.runFork of an Effect, and the
// @effect/platform server, each answering a small JSON on /healthz. Run: node --import tsx scratchpad/server-floor.ts <mode>
import { HttpServer, HttpServerResponse, HttpMiddleware } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Runtime } from "effect"
import http from "node:http"

const mode = process.argv[2] ?? "bare"
const body = JSON.stringify({ ok: true })
if (mode === "bare") {
  http.createServer((_req, res) => { res.writeHead(200, { "content-type": "application/json" }); res.end(body) }).listen(4301, "127.0.0.1")
} else if (mode === "runtime") {
  const program = Effect.gen(function* () {
    const runtime = yield* Effect.runtime<never>()
    const run = Runtime.runFork(runtime)
    const server = http.createServer((req, res) => {
      const fiber = run(Effect.sync(() => { res.writeHead(200, { "content-type": "application/json" }); res.end(body) }))
      res.on("close", () => { if (!res.writableEnded) fiber.unsafeInterruptAsFork(fiber.id()) })
      void req
    })
    yield* Effect.async<never>(() => { server.listen(4301, "127.0.0.1") })
  })
  NodeRuntime.runMain(program)
} else {
  const app = Effect.succeed(HttpServerResponse.text(body, { contentType: "application/json" }))
  const layer = HttpMiddleware.withTracerDisabledWhen(HttpServer.serve(app), () => true).pipe(Layer.provide(NodeHttpServer.layer(() => http.createServer(), { port: 4301, host: "127.0.0.1" })))
  NodeRuntime.runMain(Layer.launch(layer))
}
