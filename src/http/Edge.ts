import { HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Cause, Effect, Option } from "effect"
import { Settings } from "../Config.js"
import { Errors, GatewayError, toGatewayError, type AnyGatewayError } from "../domain/Errors.js"
import { Ids } from "../domain/Ids.js"
import { Catalog } from "../services/Catalog.js"
import { isLoopbackHost, KeyStore, type Principal } from "../services/KeyStore.js"
import { Limits } from "../services/Limits.js"
import { isJsonContentType, readBody } from "./Body.js"
import { renderError, type Family } from "./Envelopes.js"
import { Log } from "./Log.js"
import type { RequestContext, Route } from "./Route.js"

/**
 * The HTTP edge, once for every route: request id, target and Host checks, the route family and
 * its error envelope, Origin and key checks per family, route matching (404 vs 405), body limits,
 * the request deadline, and one access-log line. Handlers only see a settled RequestContext.
 */

/** The family of a path; `/v1/models` and `/v1/files` switch to Messages on its version headers. */
export const familyOf = (path: string, headers: Readonly<Record<string, string | undefined>>): Family => {
  if (path.startsWith("/v1beta/") || path === "/v1beta" || path.startsWith("/upload/v1beta/")) return "gemini"
  if (path === "/v1/messages" || path.startsWith("/v1/messages/")) return "messages"
  if (path.startsWith("/v1/")) {
    if ((path === "/v1/models" || path.startsWith("/v1/models/") || path === "/v1/files" || path.startsWith("/v1/files/")) && hasMessagesVersion(headers)) {
      return "messages"
    }
    return "openai"
  }
  return "gateway"
}

export const hasMessagesVersion = (headers: Readonly<Record<string, string | undefined>>): boolean =>
  headers["messages-version"] !== undefined ||
  headers["anthropic-version"] !== undefined ||
  headers["messages-beta"] !== undefined ||
  headers["anthropic-beta"] !== undefined

const bearer = (value: string | undefined): string | undefined => {
  if (value === undefined) return undefined
  const match = /^Bearer\s+(.+)$/i.exec(value.trim())
  return match === null ? undefined : match[1].trim()
}

/** The candidate keys a family reads, in the order they are tried (spec section 5). */
export const presentedKeys = (family: Family, headers: Readonly<Record<string, string | undefined>>, query: URLSearchParams): Array<string> => {
  const keys: Array<string> = []
  const push = (k: string | undefined) => {
    if (k !== undefined && k !== "" && !keys.includes(k)) keys.push(k)
  }
  push(bearer(headers["authorization"]))
  if (family === "messages") push(headers["x-api-key"])
  if (family === "gemini") {
    push(headers["x-genai-api-key"])
    push(headers["x-goog-api-key"])
    push(query.get("key") ?? undefined)
  }
  return keys
}

const isWildcard = (host: string) => host === "0.0.0.0" || host === "::" || host === "[::]" || host === ""

/** The Host values that name this listener (DNS-rebinding protection). */
export const allowedHosts = (listenHost: string, port: number, extra: ReadonlyArray<string>): ReadonlySet<string> | undefined => {
  if (isWildcard(listenHost)) return undefined
  const names = new Set<string>([listenHost.includes(":") && !listenHost.startsWith("[") ? `[${listenHost}]` : listenHost])
  if (isLoopbackHost(listenHost)) for (const n of ["localhost", "127.0.0.1", "[::1]"]) names.add(n)
  const hosts = new Set<string>()
  for (const name of names) {
    hosts.add(`${name}:${port}`.toLowerCase())
    if (port === 80) hosts.add(name.toLowerCase())
  }
  for (const h of extra) hosts.add(h.toLowerCase())
  return hosts
}

interface Matched {
  readonly route: Route
  readonly params: Readonly<Record<string, string>>
}

/** Find the route for a method and path: a match, a 405 with the allowed methods, or nothing. */
const matchRoute = (routes: ReadonlyArray<Route>, method: string, path: string): Matched | { readonly allowed: Array<string> } | undefined => {
  const allowed: Array<string> = []
  for (const route of routes) {
    const params = typeof route.path === "string" ? (route.path === path ? {} : undefined) : route.path(path)
    if (params === undefined) continue
    if (route.method === method || (method === "HEAD" && route.method === "GET")) return { route, params }
    if (!allowed.includes(route.method)) allowed.push(route.method)
    if (route.method === "GET" && !allowed.includes("HEAD")) allowed.push("HEAD")
  }
  return allowed.length > 0 ? { allowed } : undefined
}

const noPrincipal: Principal = { app: "default", keyId: "none", source: "none" }

export const makeEdge = (routes: ReadonlyArray<Route>) =>
  Effect.gen(function* () {
    const config = yield* Settings
    const keys = yield* KeyStore
    const catalog = yield* Catalog
    const limits = yield* Limits
    const log = yield* Log
    const server = yield* HttpServer.HttpServer
    const port = server.address._tag === "TcpAddress" ? server.address.port : 0
    const hosts = allowedHosts(config.listen.host, port, config.listen.hosts)

    return Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const started = performance.now()
      const requestId = Ids.request()
      const incoming = NodeHttpServerRequest.toIncomingMessage(request)
      const response = NodeHttpServerRequest.toServerResponse(request)
      const headers = request.headers as Readonly<Record<string, string | undefined>>
      const target = absoluteToOrigin(request.url)
      const q = target.indexOf("?")
      const rawPath = q < 0 ? target : target.slice(0, q)
      const query = new URLSearchParams(q < 0 ? "" : target.slice(q + 1))
      const family = familyOf(rawPath, headers)
      const logged: { label: string; app?: string; model?: string } = { label: "unmatched" }

      const bodyPending = () =>
        !incoming.complete && ((headers["content-length"] !== undefined && headers["content-length"] !== "0") || headers["transfer-encoding"] !== undefined)

      const respondError = (error: GatewayError) => {
        const rendered = renderError(family, error, target, requestId)
        const out: Record<string, string> = { "x-gateway-request-id": requestId }
        if (family === "messages") out["request-id"] = requestId
        if (error.retryAfter !== undefined) out["retry-after"] = String(error.retryAfter)
        // a refusal that leaves a body unread closes the connection rather than wait for the body
        if (error.closeConnection === true || bodyPending()) out["connection"] = "close"
        if (error.kind === "method_not_allowed" && error.param !== undefined) out["allow"] = error.param
        return HttpServerResponse.text(rendered.body, { status: rendered.status, contentType: rendered.contentType, headers: out })
      }

      const handle = Effect.gen(function* () {
        if (!rawPath.startsWith("/") || /[\s\u0000-\u001f]/.test(rawPath)) {
          return yield* Errors.invalidRequest("invalid_request_target", "The request target is not a valid URL path")
        }
        let path: string
        try {
          path = decodeURI(rawPath)
        } catch {
          return yield* Errors.invalidRequest("invalid_request_target", "The request target has invalid percent-encoding")
        }
        if (hosts !== undefined) {
          const host = headers["host"]?.toLowerCase()
          if (host === undefined || !hosts.has(host)) {
            return yield* Errors.invalidRequest("invalid_host", "The Host header does not name this gateway's listen address")
          }
        }
        const matched = matchRoute(routes, request.method, rawPath)
        const route = matched !== undefined && "route" in matched ? matched : undefined
        const isPublic = route !== undefined && route.route.auth === "public"
        let principal = noPrincipal
        if (!isPublic && family !== "gateway") {
          if (keys.keyless) {
            const origin = headers["origin"]
            if (origin !== undefined && !sameOrigin(origin, headers["host"])) {
              return yield* Errors.permission("cross_origin_forbidden", "Browser requests from another origin are refused on a gateway that needs no key")
            }
          } else {
            const candidates = presentedKeys(family, headers, query)
            // Gemini reads the first key present; Messages tries x-api-key when the bearer is not a key
            const found = yield* authenticate(family === "gemini" ? candidates.slice(0, 1) : candidates)
            if (Option.isNone(found)) {
              const none = candidates.length === 0
              return yield* Errors.authentication("invalid_api_key", none ? "Missing API key" : "Invalid API key")
            }
            principal = found.value
          }
        }
        if (matched === undefined) {
          return yield* Errors.notFound(family === "gateway" ? "not_found" : "not_found", `No route for ${request.method} ${path}`)
        }
        if (!("route" in matched)) {
          return yield* Errors.methodNotAllowed("method_not_allowed", `Method ${request.method} is not allowed on ${path}; allowed: ${matched.allowed.join(", ")}`, {
            param: matched.allowed.join(", ")
          })
        }
        logged.label = matched.route.label
        logged.app = principal.app
        const app = catalog.app(principal.app)
        const ctx: RequestContext = {
          requestId,
          family,
          method: request.method,
          path,
          query,
          params: matched.params,
          principal,
          app,
          request,
          incoming,
          response,
          deadline: Date.now() + config.requestTimeoutMs,
          json: readJson(headers, app.maxBodyBytes, principal.app)
        }
        return yield* matched.route.handler(ctx)
      })

      const authenticate = (candidates: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          for (const key of candidates) {
            const found = yield* keys.authenticate(key)
            if (Option.isSome(found)) return found
          }
          return Option.none<Principal>()
        })

      const readJson = (h: Readonly<Record<string, string | undefined>>, maxBytes: number, app: string): Effect.Effect<unknown, AnyGatewayError> =>
        Effect.gen(function* () {
          if (!isJsonContentType(h["content-type"])) {
            return yield* Errors.unsupportedMediaType("unsupported_media_type", "The request body must be sent as Content-Type: application/json", {
              closeConnection: h["content-length"] !== "0"
            })
          }
          const body = yield* readBody(incoming, {
            maxBytes,
            idleMs: config.limits.bodyReadTimeoutMs,
            totalMs: config.limits.bodyReadMaxMs,
            reserve: (bytes) => limits.reserveBody(app, bytes)
          })
          if (body.length === 0) return yield* Errors.invalidRequest("invalid_request", "The request body is empty; a JSON object is required")
          try {
            return JSON.parse(body.toString("utf8")) as unknown
          } catch {
            return yield* Errors.invalidRequest("invalid_json", "The request body is not valid JSON")
          }
        })

      // the platform runs handlers uninterruptibly: let timeouts and client disconnects cancel ours
      const result = yield* handle.pipe(
        Effect.interruptible,
        Effect.map((res) => withIdHeaders(res, requestId, family)),
        Effect.catchAll((e: AnyGatewayError) => Effect.succeed(respondError(toGatewayError(e)))),
        Effect.catchAllDefect((defect) => {
          log.error("request.defect", { requestId, route: logged.label, defect: defectName(defect) })
          return Effect.succeed(respondError(Errors.internal("internal_error", "The gateway failed while handling this request")))
        }),
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            if (log.requests) log.info("request", { requestId, route: logged.label, method: request.method, status: 499, app: logged.app, ms: elapsed(started) })
          })
        )
      )
      if (log.requests) {
        const status = response.headersSent ? response.statusCode : result.status
        log.info("request", { requestId, route: logged.label, method: request.method, status, app: logged.app, ms: elapsed(started) })
      }
      return result
    })
  })

/** An absolute-form request target (`http://host/path?q`) as its origin form (`/path?q`). */
const absoluteToOrigin = (target: string): string => {
  if (target.startsWith("/")) return target
  const match = /^https?:\/\/[^/?#]*([^#]*)/i.exec(target)
  if (match === null) return target
  return match[1] === "" ? "/" : match[1].startsWith("/") ? match[1] : `/${match[1]}`
}

const elapsed = (started: number) => Math.round((performance.now() - started) * 100) / 100

const defectName = (defect: unknown): string =>
  defect instanceof Error ? `${defect.name}: ${defect.message}`.slice(0, 200) : Cause.pretty(Cause.die(defect)).split("\n")[0].slice(0, 200)

const sameOrigin = (origin: string, host: string | undefined): boolean => {
  if (host === undefined) return false
  return origin.toLowerCase() === `http://${host.toLowerCase()}` || origin.toLowerCase() === `https://${host.toLowerCase()}`
}

const withIdHeaders = (res: HttpServerResponse.HttpServerResponse, requestId: string, family: Family) =>
  family === "messages"
    ? HttpServerResponse.setHeaders(res, { "x-gateway-request-id": requestId, "request-id": requestId })
    : HttpServerResponse.setHeader(res, "x-gateway-request-id", requestId)

export { GatewayError }
