import * as HttpMultiplex from "@effect/platform/HttpMultiplex"
import * as HttpRouter from "@effect/platform/HttpRouter"
import { HttpServerRequest } from "@effect/platform/HttpServerRequest"
import type * as HttpMethod from "@effect/platform/HttpMethod"
import { Effect, type Scope } from "effect"
import { absoluteToOrigin } from "./Access.js"
import type { Edge, makeEdge, RouteError } from "./Edge.js"
import type { Family } from "./Envelopes.js"
import { mountTakes, shownPath, type Mount, type Reply, type Route } from "./Route.js"

/**
 * The gateway as one HttpApp: an `HttpRouter` per protocol family, each behind its family's edge
 * (keys read its way, errors in its envelope), mounted where the spec puts the family with
 * `HttpMultiplex` (a mount may also ask for a header: `/v1/models` with a Messages version is the
 * Messages family's). The route table stays the one list the discovery page shows.
 */

/** The edge of the bound server: each family's middleware and each route's wrapper. */
type EdgeOf = ReturnType<Effect.Effect.Success<typeof makeEdge>>

/**
 * Paths are matched as sent: case-sensitive, with no trailing or doubled slash folded away (a
 * client that asks for `/v1/chat/completions/` learns that it is not a route).
 */
const routerConfig = { ignoreTrailingSlash: false, ignoreDuplicateSlashes: false, caseSensitive: true, maxParamLength: 65_536 } as const

/**
 * A route's path in the router: a literal path as it is; a path with parameters as its template up
 * to the first parameter, then `*` (a Gemini model id holds `/` and `:`, which no segment pattern
 * takes): the route's own matcher then reads the path, as the discovery page's template shows it.
 */
const routerPath = (route: Route): string => {
  if (route.template === undefined) {
    if (/[:*]/.test(route.path)) throw new Error(`route ${route.label}: a literal path may not hold ':' or '*' (${route.path})`)
    return route.path
  }
  const open = route.template.indexOf("{")
  if (open < 0) throw new Error(`route ${route.label}: a matcher's template names its parameters ({name})`)
  return `${route.template.slice(0, open)}*`
}

/** The families a route's path can be asked of: each mount that takes it, up to the first that takes it whatever the headers. */
export const familiesOf = (mounts: ReadonlyArray<Mount>, path: string): ReadonlyArray<Family> => {
  const families: Array<Family> = []
  for (const mount of mounts) {
    if (!mountTakes(mount.prefix, path)) continue
    if (!families.includes(mount.family)) families.push(mount.family)
    if (mount.when === undefined) return families
  }
  if (!families.includes("gateway")) families.push("gateway")
  return families
}

/** The methods the routes take on a path (405's Allow header; GET brings HEAD). */
const allowedOn =
  (routes: ReadonlyArray<Route>) =>
  (rawPath: string): ReadonlyArray<string> => {
    const allowed: Array<string> = []
    for (const route of routes) {
      const takes = typeof route.path === "string" ? route.path === rawPath : route.path(rawPath) !== undefined
      if (!takes) continue
      if (!allowed.includes(route.method)) allowed.push(route.method)
      if (route.method === "GET" && !allowed.includes("HEAD")) allowed.push("HEAD")
    }
    return allowed
  }

/** One family's router: an entry per method and router path, trying that entry's routes in table order. */
const familyRouter = (routes: ReadonlyArray<Route>, edge: EdgeOf) => {
  const groups = new Map<string, { readonly method: HttpMethod.HttpMethod; readonly path: string; readonly routes: Array<Route> }>()
  for (const route of routes) {
    const path = routerPath(route)
    const key = `${route.method} ${path}`
    const group = groups.get(key)
    if (group !== undefined) group.routes.push(route)
    else groups.set(key, { method: route.method as HttpMethod.HttpMethod, path, routes: [route] })
  }
  let router: HttpRouter.HttpRouter<RouteError, Edge> = HttpRouter.empty
  for (const group of groups.values()) router = HttpRouter.route(group.method)(group.path as HttpRouter.PathInput, edge.route(group.routes))(router)
  return Effect.locally(HttpRouter.toHttpApp(router), HttpRouter.currentRouterConfig, routerConfig)
}

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q < 0 ? url : url.slice(0, q)
}

/** The whole app: each family's router behind its edge, on its mounts; the gateway's own family under no mount. */
export const gatewayApp = (routes: ReadonlyArray<Route>, mounts: ReadonlyArray<Mount>, edge: EdgeOf) =>
  Effect.gen(function* () {
    const mountedFamily = (family: Family) => {
      const own = routes.filter((route) => familiesOf(mounts, shownPath(route)).includes(family))
      return Effect.map(familyRouter(own, edge), (router) => edge.family(family, allowedOn(own))(router))
    }
    const apps: Readonly<Record<Family, Effect.Effect<Reply, never, HttpServerRequest | Scope.Scope>>> = {
      openai: yield* mountedFamily("openai"),
      messages: yield* mountedFamily("messages"),
      gemini: yield* mountedFamily("gemini"),
      gateway: yield* mountedFamily("gateway")
    }
    const mounted = HttpMultiplex.make([
      ...mounts.map(
        (mount) =>
          [
            (request: HttpServerRequest) => Effect.succeed(mountTakes(mount.prefix, pathOf(request.url)) && (mount.when === undefined || mount.when(request.headers))),
            apps[mount.family]
          ] as const
      ),
      [() => Effect.succeed(true), apps.gateway] as const
    ])
    // an absolute-form target (`GET http://host/path`) is routed by its path
    return Effect.flatMap(HttpServerRequest, (request) =>
      request.url.startsWith("/") ? mounted : Effect.provideService(mounted, HttpServerRequest, request.modify({ url: absoluteToOrigin(request.url) }))
    ).pipe(Effect.catchTag("RouteNotFound", () => Effect.die("the gateway's own family takes every path")))
  })
