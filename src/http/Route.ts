import type { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { Effect } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AnyGatewayError } from "../domain/Errors.js"
import type { AppSettings } from "../services/Catalog.js"
import type { Principal } from "../services/KeyStore.js"
import type { Family } from "./Envelopes.js"

/** How a route authenticates its caller. */
export type RouteAuth =
  /** model and file routes: a key of the family's spellings (or keyless loopback) */
  | "key"
  /** probes and the discovery page */
  | "public"

/** Everything a handler knows about its request, settled by the edge. */
export interface RequestContext {
  readonly requestId: string
  readonly family: Family
  readonly method: string
  readonly path: string
  readonly query: URLSearchParams
  /** path parameters of the matched route */
  readonly params: Readonly<Record<string, string>>
  readonly principal: Principal
  readonly app: AppSettings
  readonly request: HttpServerRequest.HttpServerRequest
  readonly incoming: IncomingMessage
  readonly response: ServerResponse
  /** when the request must be finished (`requestTimeoutMs`) */
  readonly deadline: number
  /** the JSON body, read once with every body limit; requires `application/json` */
  readonly json: Effect.Effect<unknown, AnyGatewayError>
}

export type Handler = (ctx: RequestContext) => Effect.Effect<HttpServerResponse.HttpServerResponse, AnyGatewayError>

/** A route: method, a path matcher, and its handler. The family picks auth and error envelope. */
export interface Route {
  readonly method: string
  /** a literal path, or a matcher returning the path parameters */
  readonly path: string | ((path: string) => Readonly<Record<string, string>> | undefined)
  readonly auth: RouteAuth
  /** the family's error envelope; "dynamic" families are decided by the edge from headers */
  readonly handler: Handler
  /** label used in logs and metrics instead of the URL */
  readonly label: string
}
