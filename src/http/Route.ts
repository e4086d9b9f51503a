import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type { HttpServerRequest } from "@effect/platform/HttpServerRequest"
import type { Effect, Scope } from "effect"
import type { IncomingMessage } from "node:http"
import type { AnyGatewayError } from "../domain/Errors.js"
import type { AppSettings } from "../services/routing/Catalog.js"
import type { Principal } from "../services/keys/KeyStore.js"
import type { Family } from "./Envelopes.js"
import { type Attribution, attributionOf } from "./Attribution.js"

/** How a route authenticates its caller. */
export type RouteAuth =
  /** model and file routes: a key of the family's spellings (or keyless loopback) */
  | "key"
  /** probes and the discovery page */
  | "public"
  /**
   * resumable upload chunks: a presented key is checked as usual; with no key at all the handler
   * decides (the upload URL is the credential of its chunks)
   */
  | "upload"

export type Headers = Readonly<Record<string, string | undefined>>

/** Everything a handler knows about its request, settled by the edge. */
export interface RequestContext {
  readonly requestId: string
  /** the matched route's label (logs, metrics, usage) */
  readonly route: string
  readonly family: Family
  readonly method: string
  /** percent-decoded path */
  readonly path: string
  readonly query: URLSearchParams
  readonly headers: Headers
  /** path parameters of the matched route */
  readonly params: Readonly<Record<string, string>>
  readonly principal: Principal
  /** whether the request presented any key (false on a keyless gateway and on a key-less upload chunk) */
  readonly keyPresented: boolean
  readonly app: AppSettings
  /**
   * the origin callers reach this gateway at, for URLs in answers: the public origin a trusted
   * proxy names (`listen.trustProxy`), else the request's Host on a wildcard listener, else the
   * listen address
   */
  readonly origin: string
  /** request id headers (the edge adds them to every answer) */
  readonly idHeaders: Readonly<Record<string, string>>
  /** the platform's request */
  readonly request: HttpServerRequest
  /** the Node request under it, for the body readers that stream it (uploads) */
  readonly incoming: IncomingMessage
  /** when the request must be finished (`requestTimeoutMs`), epoch ms */
  readonly deadline: number
  /** record the model the request named, for the access log line */
  readonly noteModel: (model: string) => void
  /** record that the request was upgraded (a WebSocket): the access log and metrics say 101 */
  readonly noteUpgraded: () => void
  /** the JSON body, read once with every body limit; requires `application/json` */
  readonly json: Effect.Effect<unknown, AnyGatewayError>
}

/** An answer: the platform's response (the edge adds the request id headers). */
export type Reply = HttpServerResponse.HttpServerResponse

interface ReplyOptions {
  readonly status?: number
  readonly headers?: Readonly<Record<string, string>>
}

export const Reply = {
  /** a JSON body (`content-type` from `headers` when given there, else `application/json`) */
  json: (value: unknown, options: ReplyOptions = {}): Reply => Reply.text(JSON.stringify(value), "application/json", options),
  text: (body: string, contentType: string, options: ReplyOptions = {}): Reply =>
    HttpServerResponse.text(body, { status: options.status ?? 200, contentType: options.headers?.["content-type"] ?? contentType, ...(options.headers !== undefined ? { headers: options.headers } : {}) })
} as const

/**
 * A route's handler. It may use the request's scope (`Scope`): a streamed answer holds its model
 * calls open there until its body is written.
 */
export type Handler = (ctx: RequestContext) => Effect.Effect<Reply, AnyGatewayError, Scope.Scope>

/** A path matcher: the path parameters when the path is one of the route's, else undefined. */
export type PathMatcher = (path: string) => Readonly<Record<string, string>> | undefined

/**
 * How a route names its paths: a literal path, or a matcher with the template the discovery page
 * shows for it (`/v1/responses/{id}`; each `{name}` stands for one parameter).
 */
export type RoutePath =
  | { readonly path: string; readonly template?: undefined }
  | { readonly path: PathMatcher; readonly template: string }

/** A route: method, a path, and its handler. The family picks auth and error envelope. */
export type Route = RoutePath & {
  readonly method: string
  readonly auth: RouteAuth
  readonly handler: Handler
  /** label used in logs and metrics instead of the URL */
  readonly label: string
}

/**
 * Where a family is mounted: requests to `prefix` or below it (only below it when the prefix ends
 * with `/`) answer in that family's envelope and present keys the family's way (spec section 5).
 * `when` narrows a mount to requests with certain headers. The first mount that takes a path wins;
 * a path no mount takes is the gateway's own.
 */
export interface Mount {
  readonly prefix: string
  readonly family: Family
  readonly when?: (headers: Headers) => boolean
}

/** Whether a mount's prefix takes a path: the prefix or below it (only below it when the prefix ends with `/`). */
export const mountTakes = (prefix: string, path: string): boolean =>
  path.startsWith(prefix) && (prefix.endsWith("/") || path.length === prefix.length || path.charCodeAt(prefix.length) === 47)

/** The family of a request path under the given mounts. */
export const familyOf =
  (mounts: ReadonlyArray<Mount>) =>
  (path: string, headers: Headers): Family => {
    for (const mount of mounts) {
      if (mountTakes(mount.prefix, path) && (mount.when === undefined || mount.when(headers))) return mount.family
    }
    return "gateway"
  }

/** Whether a request carries a Messages API version or beta header (the Messages shape of shared paths). */
export const hasMessagesVersion = (headers: Headers): boolean =>
  headers["messages-version"] !== undefined ||
  headers["anthropic-version"] !== undefined ||
  headers["messages-beta"] !== undefined ||
  headers["anthropic-beta"] !== undefined

/** The path of a route as the discovery page lists it: the literal path or the matcher's template. */
export const shownPath = (route: Route): string => (route.template === undefined ? route.path : route.template)

const USER = /^[A-Za-z0-9._@:-]{1,64}$/

/**
 * Who makes a model call, for its usage record: the key, the protocol family, the route, and the
 * user (header `x-gateway-user`, else the request's own user field), kept only when it has the
 * format the usage filter accepts.
 */
export const callerOf = (ctx: RequestContext, requestUser?: string | null, model?: string, attribution: Attribution = attributionOf(ctx.headers)) => {
  if (model !== undefined) ctx.noteModel(model)
  const given = ctx.headers["x-gateway-user"] ?? requestUser ?? undefined
  const user = given !== undefined && USER.test(given) ? given : undefined
  return {
    keyId: ctx.principal.keyId,
    protocol: ctx.family,
    route: ctx.route,
    ...(user !== undefined ? { user } : {}),
    ...(attribution.session !== undefined ? { session: attribution.session } : {}),
    ...(attribution.agent !== undefined ? { agent: attribution.agent } : {}),
    ...(attribution.parentAgent !== undefined ? { parentAgent: attribution.parentAgent } : {})
  }
}
