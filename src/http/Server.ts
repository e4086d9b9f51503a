import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, FiberRef, Layer, Scope } from "effect"
import * as http from "node:http"

/** The listening server's bound address. */
export class GatewayServer extends Context.Tag("gateway/GatewayServer")<
  GatewayServer,
  { readonly host: string; readonly port: number }
>() {}

export interface ServerOptions {
  readonly host: string
  readonly port: number
  /** how long requests in flight may take after the stop signal */
  readonly graceMs: number
}

/**
 * The platform's Node server (`NodeHttpServer`) serving the app made for its bound port (the edge
 * checks Host against it). A client that closes before its answer ends interrupts the request's
 * fiber, which cancels its upstream call. On release the server stops accepting, closes idle
 * keep-alive connections at once and the rest after `graceMs`; requests in flight meanwhile are
 * still served. The platform's own request span is off: the edge makes one per route (when
 * tracing is on), named by the route's label and without the URL's query.
 */
export const serverLayer = <E>(options: ServerOptions, appFor: (port: number) => Effect.Effect<HttpApp.Default<E, Scope.Scope>>) =>
  Layer.scoped(
    GatewayServer,
    Effect.gen(function* () {
      const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 })
      server.on("clientError", (_error, socket) => {
        if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
        else socket.destroy()
      })
      const platform = yield* NodeHttpServer.make(() => server, { host: options.host, port: options.port })
      const port = platform.address._tag === "TcpAddress" ? platform.address.port : options.port
      const app = yield* appFor(port)
      // requests run with only the scope in their context: the app needs no service from it (its
      // type says so: handlers closed over their services when they were made), and the router
      // copies the context for every request
      const scope = yield* Effect.scope
      yield* platform.serve(app).pipe(
        Effect.locally(HttpMiddleware.currentTracerDisabledWhen, () => true),
        Effect.locally(FiberRef.currentContext, Context.make(Scope.Scope, scope))
      )
      // released first: stop accepting and drain while the handlers are still installed
      yield* Effect.addFinalizer(() =>
        Effect.async<void>((resume) => {
          if (!server.listening) return resume(Effect.void)
          const timer = setTimeout(() => server.closeAllConnections(), options.graceMs)
          server.close(() => {
            clearTimeout(timer)
            resume(Effect.void)
          })
          server.closeIdleConnections()
        })
      )
      return { host: options.host, port }
    })
  )
