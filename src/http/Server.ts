import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Deferred, Effect, Exit, FiberRef, Layer, Scope } from "effect"
import * as http from "node:http"

/** The listening server's bound address. */
export class GatewayServer extends Context.Tag("gateway/GatewayServer")<
  GatewayServer,
  {
    readonly host: string
    readonly port: number
    /**
     * Stop accepting and drain: idle connections close at once, requests in flight may finish
     * within the grace period, WebSockets follow `Shutdown`. Run by the layer released first (the
     * platform's WebSocket server, made at the first upgrade, would otherwise wait for its clients
     * before this server's own release); safe to run again.
     */
    readonly drain: Effect.Effect<void>
  }
>() {}

/**
 * The server's stop, as connections that outlive an HTTP exchange see it (WebSockets): `draining`
 * is done when the stop begins (finish what runs, start nothing new), `stopping` when the grace
 * period is over (close now). Both never fail.
 */
export class Shutdown extends Context.Tag("gateway/Shutdown")<
  Shutdown,
  { readonly draining: Deferred.Deferred<void>; readonly stopping: Deferred.Deferred<void> }
>() {
  /** A fresh pair for one server (a function, so that no two servers in a process share one through layer memoization). */
  static readonly layer = () =>
    Layer.effect(
      Shutdown,
      Effect.map(Effect.all([Deferred.make<void>(), Deferred.make<void>()]), ([draining, stopping]) => Shutdown.of({ draining, stopping }))
    )
}

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
 * still served. Upgraded connections, which the HTTP server no longer closes, follow `Shutdown`.
 * The platform's own request span is off: the edge makes one per route (when tracing is on),
 * named by the route's label and without the URL's query.
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
      const shutdown = yield* Shutdown
      const drain = Effect.zipRight(
        Deferred.succeed(shutdown.draining, undefined),
        Effect.async<void>((resume) => {
          if (!server.listening) return resume(Effect.void)
          const timer = setTimeout(() => {
            server.closeAllConnections()
            Deferred.unsafeDone(shutdown.stopping, Exit.void)
          }, options.graceMs)
          server.close(() => {
            clearTimeout(timer)
            resume(Effect.void)
          })
          server.closeIdleConnections()
        })
      )
      // released first in this scope: stop accepting and drain while the handlers are still installed
      yield* Effect.addFinalizer(() => drain)
      return { host: options.host, port, drain }
    })
  )
