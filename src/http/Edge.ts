import * as HttpServerError from "@effect/platform/HttpServerError"
import { HttpServerRequest } from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Cause, Context, Effect, Either, Option, type Scope } from "effect"
import type { IncomingMessage } from "node:http"
import { Settings } from "../Config.js"
import { Errors, GatewayError, toGatewayError, type AnyGatewayError } from "../domain/Errors.js"
import { Ids } from "../domain/Ids.js"
import { MAX_JSON_DEPTH, tooDeepPath } from "../domain/JsonDepth.js"
import { rateLimitHeaders } from "../domain/Quota.js"
import { tracingEnabled } from "../Telemetry.js"
import { KeyStore, orDatabaseUnavailable } from "../services/keys/KeyStore.js"
import { Log } from "../services/ops/Log.js"
import { Metrics } from "../services/ops/Metrics.js"
import { Catalog } from "../services/routing/Catalog.js"
import { Limits } from "../services/runner/Limits.js"
import { allowedHosts, lookedUp, noPrincipal, settleCaller, type Caller } from "./Access.js"
import { isJsonContentType, readBody } from "./Body.js"
import { renderError, type Family } from "./Envelopes.js"
import { lingerAfterRefusal } from "./Linger.js"
import type { Headers, Reply, RequestContext, Route } from "./Route.js"

/**
 * The HTTP edge, as the platform's middleware of each mounted family: request id, Host check,
 * Origin and key checks the family's way, one access-log line and the request metrics, and the
 * family's error envelope for every failure under its mount (404s and 405s included). Routes see
 * what the edge settled (`Edge`) and hand their handlers a RequestContext.
 */

/** What the edge settled about a request before routing. */
export interface EdgeRequest {
  readonly requestId: string
  readonly family: Family
  readonly method: string
  /** the request target in origin form (the problem `instance`) */
  readonly target: string
  /** the path as sent (route matchers read it) */
  readonly rawPath: string
  /** the path percent-decoded (messages) */
  readonly path: string
  readonly query: URLSearchParams
  readonly headers: Headers
  readonly idHeaders: Readonly<Record<string, string>>
  readonly caller: Caller
  readonly request: HttpServerRequest
  readonly incoming: IncomingMessage
  /** the access log's notes: the matched route's label, the model named, the app */
  readonly notes: { label: string; model?: string; app?: string; upgraded?: boolean }
}

export class Edge extends Context.Tag("gateway/http/Edge")<Edge, EdgeRequest>() {}

/** How a route fails: with the gateway's errors, or not found (then 404 or 405 in the family's envelope). */
export type RouteError = AnyGatewayError | HttpServerError.RouteNotFound

/** An app behind a family's edge: the family's routes. */
export type FamilyApp = Effect.Effect<Reply, RouteError, Edge | HttpServerRequest | Scope.Scope>

const defectName = (defect: unknown): string =>
  defect instanceof Error ? `${defect.name}: ${defect.message}`.slice(0, 200) : Cause.pretty(Cause.die(defect)).split("\n")[0].slice(0, 200)

const SAFE_TARGET = /[\s\u0000-\u001f]/

/** The edge of a server bound to `port`: the middleware of each family, and the wrapper of each route. */
export const makeEdge = Effect.gen(function* () {
  const config = yield* Settings
  const keys = yield* KeyStore
  const catalog = yield* Catalog
  const limits = yield* Limits
  const log = yield* Log
  const metrics = yield* Metrics
  const tracing = tracingEnabled(config)

  return (port: number) => {
    const hosts = allowedHosts(config.listen.host, port, config.listen.hosts)
    const publicHosts = new Set(config.listen.hosts.map((h) => h.toLowerCase()))
    const listenOrigin = `http://${config.listen.host.includes(":") && !config.listen.host.startsWith("[") ? `[${config.listen.host}]` : config.listen.host}:${port}`
    /** the origin callers reach the gateway at (URLs in answers: upload URLs, file uris) */
    const originOf = (headers: Headers): string => {
      if (config.listen.trustProxy) {
        const forwardedHost = headers["x-forwarded-host"]?.split(",")[0].trim()
        const forwardedProto = headers["x-forwarded-proto"]?.split(",")[0].trim().toLowerCase()
        if (forwardedHost !== undefined && forwardedHost !== "" && /^[A-Za-z0-9.:[\]-]+$/.test(forwardedHost)) {
          return `${forwardedProto === "https" ? "https" : "http"}://${forwardedHost}`
        }
      }
      const host = headers["host"]
      if (host !== undefined && /^[A-Za-z0-9.:[\]-]+$/.test(host)) {
        if (hosts === undefined) return `http://${host}`
        // a public name from `listen.hosts` (a replica behind a load balancer) is where the
        // caller reached the gateway; the listen address would name this replica
        if (publicHosts.has(host.toLowerCase())) return `http://${host}`
      }
      return listenOrigin
    }

    /** A refusal in the family's envelope, with the headers its error carries. */
    const refusal = (edge: EdgeRequest, error: GatewayError): Reply => {
      const rendered = renderError(edge.family, error, edge.target, edge.requestId)
      const headers: Record<string, string> = { ...edge.idHeaders }
      if (error.retryAfter !== undefined) headers["retry-after"] = String(error.retryAfter)
      // a refusal that leaves a body unread closes the connection rather than wait for the body
      const { incoming } = edge
      if (error.closeConnection === true || bodyPending(incoming)) headers["connection"] = "close"
      if (error.allow !== undefined) headers["allow"] = error.allow
      if (error.rateLimit !== undefined) rateLimitHeaders(error.rateLimit, edge.family === "messages", Date.now(), headers)
      if (error.shouldRetry !== undefined) headers["x-should-retry"] = String(error.shouldRetry)
      // the client may still be sending: read on (bounded) so the close does not lose the answer
      if (headers["connection"] === "close" && !incoming.complete) {
        const response = NodeHttpServerRequest.toServerResponse(edge.request)
        if (!response.headersSent) lingerAfterRefusal(incoming, response)
      }
      return HttpServerResponse.text(rendered.body, { status: rendered.status, headers, contentType: rendered.contentType })
    }

    /**
     * The middleware of a family's mount. `allowed` names the methods the family's routes take on
     * a path (405 and its Allow header when the router found none for this method).
     */
    const family =
      (name: Family, allowed: (rawPath: string) => ReadonlyArray<string>) =>
      (app: FamilyApp): Effect.Effect<Reply, never, HttpServerRequest | Scope.Scope> =>
        Effect.flatMap(HttpServerRequest, (request) => {
          const started = performance.now()
          const requestId = Ids.request()
          const incoming = NodeHttpServerRequest.toIncomingMessage(request)
          const response = NodeHttpServerRequest.toServerResponse(request)
          const headers = request.headers as Headers
          const method = request.method
          const target = request.url
          const q = target.indexOf("?")
          const rawPath = q < 0 ? target : target.slice(0, q)
          const query = new URLSearchParams(q < 0 ? "" : target.slice(q + 1))
          const idHeaders: Record<string, string> = name === "messages" ? { "x-gateway-request-id": requestId, "request-id": requestId } : { "x-gateway-request-id": requestId }
          const notes: EdgeRequest["notes"] = { label: "unmatched" }

          metrics.requestStarted()
          // one line and one observation when the answer is over, or the client left before it was
          response.once("close", () => {
            // an upgraded request (a WebSocket) ends when its socket closes: 101, not a client that left
            const status = notes.upgraded === true ? 101 : response.writableEnded ? response.statusCode : 499
            metrics.requestFinished(name, notes.label, status, (performance.now() - started) / 1000)
            if (log.requests) {
              const { label, app, model } = notes
              log.info("request", { requestId, route: label, method, status, app, ...(model !== undefined ? { model } : {}), ms: Math.round((performance.now() - started) * 100) / 100 })
            }
          })

          const edge = (path: string, caller: Caller): EdgeRequest => ({ requestId, family: name, method, target, rawPath, path, query, headers, idHeaders, caller, request, incoming, notes })
          const refuse = (error: GatewayError, caller: Caller = { principal: noPrincipal, keyPresented: false }) => Effect.succeed(refusal(edge(rawPath, caller), error))

          if (!rawPath.startsWith("/") || SAFE_TARGET.test(rawPath)) return refuse(Errors.invalidRequest("invalid_request_target", "The request target is not a valid URL path"))
          let path: string
          try {
            path = decodeURI(rawPath)
          } catch {
            return refuse(Errors.invalidRequest("invalid_request_target", "The request target has invalid percent-encoding"))
          }
          if (hosts !== undefined) {
            const host = headers["host"]?.toLowerCase()
            if (host === undefined || !hosts.has(host)) return refuse(Errors.invalidRequest("invalid_host", "The Host header does not name this gateway's listen address"))
          }

          const serve = (caller: Caller): Effect.Effect<Reply, never, HttpServerRequest | Scope.Scope> => {
            const settled = edge(path, caller)
            return app.pipe(
              Effect.provideService(Edge, settled),
              Effect.map((reply) => HttpServerResponse.setHeaders(reply, idHeaders)),
              Effect.catchAllCause((cause) => {
                const failure = Cause.failureOption(cause)
                if (Option.isSome(failure)) {
                  const error = failure.value
                  if (!(error instanceof HttpServerError.RouteNotFound)) return Effect.succeed(refusal(settled, toGatewayError(error)))
                  // an unauthenticated caller learns nothing of the route table
                  if (caller.refused !== undefined) return Effect.succeed(refusal(settled, caller.refused))
                  return Effect.succeed(refusal(settled, notFound(name, method, rawPath, path, allowed(rawPath))))
                }
                if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
                log.error("request.defect", { requestId, route: notes.label, defect: defectName(Cause.squash(cause)) })
                return Effect.succeed(refusal(settled, Errors.internal("internal_error", "The gateway failed while handling this request")))
              })
            )
          }

          const settled = settleCaller(keys, name, headers, query)
          if (!("lookup" in settled)) return serve(settled)
          return Effect.flatMap(Effect.either(orDatabaseUnavailable(keys.lookup(settled.lookup))), (found) =>
            Either.isLeft(found) ? refuse(found.left) : serve(lookedUp(found.right))
          )
        })

    /**
     * The handler of one router entry: the first route of `group` (one method, one router path)
     * whose matcher takes the path, run with the RequestContext its caller and path give.
     */
    const route = (group: ReadonlyArray<Route>): Effect.Effect<Reply, RouteError, Edge | Scope.Scope> =>
      Effect.flatMap(Edge, (edge): Effect.Effect<Reply, RouteError, Scope.Scope> => {
        let matched: Route | undefined
        let params: Readonly<Record<string, string>> | undefined
        for (const candidate of group) {
          params = typeof candidate.path === "string" ? {} : candidate.path(edge.rawPath)
          if (params !== undefined) {
            matched = candidate
            break
          }
        }
        if (matched === undefined || params === undefined) return Effect.fail(new HttpServerError.RouteNotFound({ request: edge.request }))
        const { caller } = edge
        let principal = caller.principal
        if (caller.refused !== undefined && matched.auth === "key") return Effect.fail(caller.refused)
        // an upload chunk with no key at all: its upload URL is the credential, the handler checks it
        if (caller.refused !== undefined && matched.auth === "upload") {
          if (caller.keyMissing !== true) return Effect.fail(caller.refused)
          principal = noPrincipal
        }
        const { label } = matched
        edge.notes.label = label
        edge.notes.app = principal.app
        const settings = catalog.app(principal.app)
        const ctx: RequestContext = {
          requestId: edge.requestId,
          route: label,
          family: edge.family,
          method: edge.method,
          path: edge.path,
          query: edge.query,
          headers: edge.headers,
          params,
          principal,
          keyPresented: caller.keyPresented,
          app: settings,
          origin: originOf(edge.headers),
          idHeaders: edge.idHeaders,
          request: edge.request,
          incoming: edge.incoming,
          deadline: Date.now() + config.requestTimeoutMs,
          noteModel: (model) => void (edge.notes.model = model.slice(0, 200)),
          noteUpgraded: () => void (edge.notes.upgraded = true),
          json: Effect.suspend(() => readJson(edge.incoming, settings.maxBodyBytes, principal.app))
        }
        const handled = matched.handler(ctx)
        if (!tracing) return handled
        return Effect.withSpan(handled, `${edge.method} ${label}`, {
          kind: "server",
          attributes: { "http.request.method": edge.method, "http.route": label, "gateway.family": edge.family, "gateway.app": principal.app }
        })
      })

    const readJson = (incoming: IncomingMessage, maxBytes: number, appName: string): Effect.Effect<unknown, AnyGatewayError> => {
      if (!isJsonContentType(incoming.headers["content-type"])) {
        return Effect.fail(
          Errors.unsupportedMediaType("unsupported_media_type", "The request body must be sent as Content-Type: application/json", { closeConnection: bodyPending(incoming) })
        )
      }
      return Effect.flatMap(
        readBody(incoming, {
          maxBytes,
          idleMs: config.limits.bodyReadTimeoutMs,
          totalMs: config.limits.bodyReadMaxMs,
          reserve: (bytes) => limits.reserveBody(appName, bytes)
        }),
        (body) => {
          if (body.length === 0) return Effect.fail(Errors.invalidRequest("invalid_request", "The request body is empty; a JSON object is required"))
          let value: unknown
          try {
            value = JSON.parse(body.toString("utf8"))
          } catch {
            return Effect.fail(Errors.invalidRequest("invalid_json", "The request body is not valid JSON"))
          }
          const deep = tooDeepPath(value)
          if (deep === undefined) return Effect.succeed(value)
          const param = deep.join(".")
          return Effect.fail(
            Errors.invalidRequest("invalid_request_error", `${param === "" ? "body" : param}: the value nests deeper than ${MAX_JSON_DEPTH} levels of arrays and objects`, param === "" ? undefined : { param })
          )
        }
      )
    }

    return { family, route }
  }
})

/** Whether the request still has body bytes to come (a refusal then closes the connection). */
const bodyPending = (incoming: IncomingMessage) =>
  !incoming.complete && ((incoming.headers["content-length"] !== undefined && incoming.headers["content-length"] !== "0") || incoming.headers["transfer-encoding"] !== undefined)

/** No route of the family serves the path with this method: 405 naming the methods it takes, else 404. */
const notFound = (family: Family, method: string, rawPath: string, path: string, allowed: ReadonlyArray<string>): GatewayError => {
  if (allowed.length > 0) {
    return Errors.methodNotAllowed("method_not_allowed", `Method ${method} is not allowed on ${path}; allowed: ${allowed.join(", ")}`, { allow: allowed.join(", ") })
  }
  // Gemini clients build paths themselves: name the shape they should have used
  const expected = family === "gemini" && !rawPath.startsWith("/upload/") ? "; model requests take the form /v1beta/models/{model}:generateContent" : ""
  return Errors.notFound("not_found", `No route for ${method} ${path}${expected}`)
}
