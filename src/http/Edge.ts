import { Cause, Effect, Option } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Settings } from "../Config.js"
import { Errors, GatewayError, toGatewayError, type AnyGatewayError } from "../domain/Errors.js"
import { rateLimitHeaders } from "../domain/Quota.js"
import { Ids } from "../domain/Ids.js"
import { MAX_JSON_DEPTH, tooDeepPath } from "../domain/JsonDepth.js"
import { Catalog } from "../services/routing/Catalog.js"
import { isLoopbackHost, KeyStore, orDatabaseUnavailable, type Principal } from "../services/keys/KeyStore.js"
import { Limits } from "../services/runner/Limits.js"
import { isJsonContentType, readBody } from "./Body.js"
import { lingerAfterRefusal } from "./Linger.js"
import { renderError, type Family } from "./Envelopes.js"
import { Metrics } from "../services/ops/Metrics.js"
import { tracingEnabled } from "../Telemetry.js"
import { Log } from "../services/ops/Log.js"
import { familyOf, type Headers, type Mount, type Reply, type RequestContext, type Route, type Written } from "./Route.js"

/**
 * The HTTP edge, once for every route: request id, target and Host checks, the route family and
 * its error envelope, Origin and key checks per family, route matching (404 vs 405), body limits,
 * and one access-log line. Handlers only see a settled RequestContext; every failure is rendered
 * here in the family's envelope.
 */

const bearer = (value: string | undefined): string | undefined => {
  if (value === undefined) return undefined
  const match = /^Bearer\s+(.+)$/i.exec(value.trim())
  return match === null ? undefined : match[1].trim()
}

/** The candidate keys a family reads, in the order they are tried (spec section 5). */
export const presentedKeys = (family: Family, headers: Headers, query: URLSearchParams): Array<string> => {
  const keys: Array<string> = []
  const push = (k: string | undefined | null) => {
    if (k !== undefined && k !== null && k !== "" && !keys.includes(k)) keys.push(k)
  }
  push(bearer(headers["authorization"]))
  if (family === "messages") push(headers["x-api-key"])
  if (family === "gemini") {
    push(headers["x-genai-api-key"])
    push(headers["x-goog-api-key"])
    push(query.get("key"))
  }
  return keys
}

const isWildcard = (host: string) => host === "0.0.0.0" || host === "::" || host === "[::]" || host === ""

/** The Host values that name this listener (DNS-rebinding protection); undefined on a wildcard listener. */
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

type Match = { readonly route: Route; readonly params: Readonly<Record<string, string>> } | { readonly allowed: ReadonlyArray<string> } | undefined

/** Find the route for a method and path: a match, the methods the path allows (405), or nothing. */
const matchRoute = (routes: ReadonlyArray<Route>, method: string, path: string): Match => {
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

/** An absolute-form request target (`http://host/path?q`) as its origin form (`/path?q`). */
const absoluteToOrigin = (target: string): string => {
  if (target.startsWith("/")) return target
  const match = /^https?:\/\/[^/?#]*([^#]*)/i.exec(target)
  if (match === null) return target
  return match[1] === "" ? "/" : match[1].startsWith("/") ? match[1] : `/${match[1]}`
}

const sameOrigin = (origin: string, host: string | undefined): boolean => {
  if (host === undefined) return false
  const o = origin.toLowerCase()
  const h = host.toLowerCase()
  return o === `http://${h}` || o === `https://${h}`
}

const noPrincipal: Principal = { app: "default", keyId: "none", source: "none" }

const defectName = (defect: unknown): string =>
  defect instanceof Error ? `${defect.name}: ${defect.message}`.slice(0, 200) : Cause.pretty(Cause.die(defect)).split("\n")[0].slice(0, 200)

/** Build the request handler for a server bound to `port`. */
export const makeEdge = (routes: ReadonlyArray<Route>, mounts: ReadonlyArray<Mount>) =>
  Effect.gen(function* () {
    const config = yield* Settings
    const keys = yield* KeyStore
    const catalog = yield* Catalog
    const limits = yield* Limits
    const familyOfPath = familyOf(mounts)
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

      return (incoming: IncomingMessage, response: ServerResponse): Effect.Effect<void> =>
        Effect.suspend(() => {
          const started = performance.now()
          const requestId = Ids.request()
          const headers = incoming.headers as Headers
          const method = incoming.method ?? "GET"
          const target = absoluteToOrigin(incoming.url ?? "/")
          const q = target.indexOf("?")
          const rawPath = q < 0 ? target : target.slice(0, q)
          const query = new URLSearchParams(q < 0 ? "" : target.slice(q + 1))
          const family = familyOfPath(rawPath, headers)
          let label = "unmatched"
          let matchedRoute: Route | undefined
          let app: string | undefined

          let finished = false
          let model: string | undefined
          metrics.requestStarted()
          const finish = (status: number) => {
            if (finished) return
            finished = true
            metrics.requestFinished(family, label, status, (performance.now() - started) / 1000)
            if (log.requests) {
              log.info("request", { requestId, route: label, method, status, app, ...(model !== undefined ? { model } : {}), ms: Math.round((performance.now() - started) * 100) / 100 })
            }
          }

          const idHeaders: Record<string, string> = family === "messages" ? { "x-gateway-request-id": requestId, "request-id": requestId } : { "x-gateway-request-id": requestId }

          const write = (reply: Reply | Written) => {
            if (reply._tag === "Written") return finish(response.statusCode)
            if (response.headersSent) {
              if (!response.writableEnded) response.end()
              return finish(response.statusCode)
            }
            try {
              response.writeHead(reply.status, { ...reply.headers, ...idHeaders })
            } catch (defect) {
              // a header value Node refuses (a character it cannot carry): a 500 rather than no answer
              log.error("request.defect", { requestId, route: label, defect: defectName(defect) })
              if (reply.status !== 500) return writeError(Errors.internal("internal_error", "The gateway failed while handling this request"))
              throw defect
            }
            response.end(method === "HEAD" ? undefined : reply.body)
            finish(reply.status)
          }

          // a refusal that leaves a body unread closes the connection rather than wait for the body
          const bodyPending = () =>
            !incoming.complete && ((headers["content-length"] !== undefined && headers["content-length"] !== "0") || headers["transfer-encoding"] !== undefined)

          const writeError = (error: GatewayError) => {
            const rendered = renderError(family, error, target, requestId)
            const out: Record<string, string> = { "content-type": rendered.contentType }
            if (error.retryAfter !== undefined) out["retry-after"] = String(error.retryAfter)
            if (error.closeConnection === true || bodyPending()) out["connection"] = "close"
            if (error.allow !== undefined) out["allow"] = error.allow
            if (error.rateLimit !== undefined) rateLimitHeaders(error.rateLimit, family === "messages", Date.now(), out)
            if (error.shouldRetry !== undefined) out["x-should-retry"] = String(error.shouldRetry)
            // the client may still be sending: read on (bounded) so the close does not lose the answer
            if (out["connection"] === "close" && !incoming.complete && !response.headersSent) lingerAfterRefusal(incoming, response)
            write({ _tag: "Reply", status: rendered.status, headers: out, body: rendered.body })
          }

          const settle = (): GatewayError | RequestContext | Effect.Effect<GatewayError | RequestContext> => {
            if (!rawPath.startsWith("/") || /[\s\u0000-\u001f]/.test(rawPath)) {
              return Errors.invalidRequest("invalid_request_target", "The request target is not a valid URL path")
            }
            try {
              decodedPath = decodeURI(rawPath)
            } catch {
              return Errors.invalidRequest("invalid_request_target", "The request target has invalid percent-encoding")
            }
            if (hosts !== undefined) {
              const host = headers["host"]?.toLowerCase()
              if (host === undefined || !hosts.has(host)) {
                return Errors.invalidRequest("invalid_host", "The Host header does not name this gateway's listen address")
              }
            }
            const matched = matchRoute(routes, method, rawPath)
            const route = matched !== undefined && "route" in matched ? matched : undefined
            let principal = noPrincipal
            if (!(route !== undefined && route.route.auth === "public") && family !== "gateway") {
              if (keys.keyless) {
                const origin = headers["origin"]
                if (origin !== undefined && !sameOrigin(origin, headers["host"])) {
                  return Errors.permission("cross_origin_forbidden", "Browser requests from another origin are refused on a gateway that needs no key")
                }
              } else {
                const candidates = presentedKeys(family, headers, query)
                keyPresented = candidates.length > 0
                // an upload chunk with no key at all: its upload URL is the credential, the handler checks it
                if (candidates.length === 0 && route?.route.auth === "upload") return settleMatched(route, noPrincipal)
                // Gemini reads the first key present; Messages tries x-api-key when the bearer is not a key
                let found: Option.Option<Principal> = Option.none()
                for (const key of family === "gemini" ? candidates.slice(0, 1) : candidates) {
                  found = keys.authenticate(key)
                  if (Option.isSome(found)) break
                }
                if (Option.isNone(found)) {
                  if (candidates.length === 0) return Errors.authentication("invalid_api_key", "Missing API key")
                  if (!keys.shared) return Errors.authentication("invalid_api_key", "Invalid API key")
                  // perhaps a key made on another replica a moment ago: asked of the database's key changes
                  return orDatabaseUnavailable(keys.lookup(family === "gemini" ? candidates.slice(0, 1) : candidates)).pipe(
                    Effect.match({
                      onFailure: (error) => error,
                      onSuccess: (known) => (Option.isSome(known) ? settleMatched(matched, known.value) : Errors.authentication("invalid_api_key", "Invalid API key"))
                    })
                  )
                }
                principal = found.value
              }
            }
            return settleMatched(matched, principal)
          }

          let keyPresented = false
          let decodedPath = rawPath

          const settleMatched = (matched: Match, principal: Principal): GatewayError | RequestContext => {
            if (matched === undefined) {
              // Gemini clients build paths themselves: name the shape they should have used
              const expected = family === "gemini" && !rawPath.startsWith("/upload/") ? "; model requests take the form /v1beta/models/{model}:generateContent" : ""
              return Errors.notFound("not_found", `No route for ${method} ${decodedPath}${expected}`)
            }
            if (!("route" in matched)) {
              return Errors.methodNotAllowed("method_not_allowed", `Method ${method} is not allowed on ${decodedPath}; allowed: ${matched.allowed.join(", ")}`, {
                allow: matched.allowed.join(", ")
              })
            }
            label = matched.route.label
            matchedRoute = matched.route
            app = principal.app
            const settings = catalog.app(principal.app)
            return {
              requestId,
              route: matched.route.label,
              family,
              method,
              path: decodedPath,
              query,
              headers,
              params: matched.params,
              principal,
              keyPresented,
              app: settings,
              origin: originOf(headers),
              idHeaders,
              incoming,
              response,
              deadline: Date.now() + config.requestTimeoutMs,
              noteModel: (name) => void (model = name.slice(0, 200)),
              json: Effect.suspend(() => readJson(settings.maxBodyBytes, principal.app))
            }
          }

          const readJson = (maxBytes: number, appName: string): Effect.Effect<unknown, AnyGatewayError> => {
            if (!isJsonContentType(headers["content-type"])) {
              return Effect.fail(
                Errors.unsupportedMediaType("unsupported_media_type", "The request body must be sent as Content-Type: application/json", { closeConnection: bodyPending() })
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

          const run = (settled: GatewayError | RequestContext): Effect.Effect<void> => {
            if (settled instanceof GatewayError || matchedRoute === undefined) {
              if (settled instanceof GatewayError) writeError(settled)
              return Effect.void
            }
            const handled = tracing
              ? matchedRoute.handler(settled).pipe(
                  Effect.withSpan(`${method} ${label}`, { kind: "server", attributes: { "http.request.method": method, "http.route": label, "gateway.family": family, "gateway.app": app ?? "" } })
                )
              : matchedRoute.handler(settled)
            return handled.pipe(
              Effect.matchCause({
                onSuccess: write,
                onFailure: (cause) => {
                  const failure = Cause.failureOption(cause)
                  if (Option.isSome(failure)) return writeError(toGatewayError(failure.value))
                  if (Cause.isInterruptedOnly(cause)) return finish(499)
                  log.error("request.defect", { requestId, route: label, defect: defectName(Cause.squash(cause)) })
                  writeError(Errors.internal("internal_error", "The gateway failed while handling this request"))
                }
              }),
              Effect.onInterrupt(() => Effect.sync(() => finish(499)))
            )
          }

          const settled = settle()
          // a GatewayError is an Effect too: it is answered, not run
          if (settled instanceof GatewayError || !Effect.isEffect(settled)) return run(settled)
          return Effect.flatMap(settled, run).pipe(Effect.onInterrupt(() => Effect.sync(() => finish(499))))
        })
    }
  })
