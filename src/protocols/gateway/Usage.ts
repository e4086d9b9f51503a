import { Effect, Option } from "effect"
import { Settings } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { Reply, type RequestContext, type Route } from "../../http/Route.js"
import { KeyStore, orDatabaseUnavailable } from "../../services/keys/KeyStore.js"
import { dayOf, UsageLog } from "../../services/usage/Usage.js"
import { boundedId, MAX_ID } from "../../http/Attribution.js"

/**
 * `GET /gateway/usage` (spec 4.5): totals and a per-day, per-model breakdown for `app`, `user`,
 * `from`, `to`, and `session` (a coding agent's session: its totals with its agents listed). The
 * admin key reads any app; an app key only its own (`app_forbidden`), sessions included.
 */

/** Who calls an own route: the admin, or one app's key. */
export type OwnCaller = { readonly _tag: "admin" } | { readonly _tag: "app"; readonly app: string }

const bearer = (value: string | undefined): string | undefined => {
  const match = value === undefined ? null : /^Bearer\s+(.+)$/i.exec(value.trim())
  return match === null ? undefined : match[1].trim()
}

/** A browser `Origin` naming another site than the `Host` it reached (as the edge checks model routes). */
const crossSite = (ctx: RequestContext): boolean => {
  const origin = ctx.headers["origin"]?.toLowerCase()
  if (origin === undefined) return false
  const host = ctx.headers["host"]?.toLowerCase()
  return host === undefined || (origin !== `http://${host}` && origin !== `https://${host}`)
}

/**
 * The caller of an own route, from `Authorization: Bearer`: the admin key, or an app key. On a
 * keyless loopback gateway with no admin key a caller without a key acts as the admin, unless a
 * browser sent it from another origin (`cross_origin_forbidden`, spec 5.3 and 7.1: these routes
 * are then keyless endpoints).
 */
export const makeOwnAuth = Effect.map(KeyStore, (keys) => (ctx: RequestContext): Effect.Effect<OwnCaller, GatewayError> => {
  const key = bearer(ctx.headers["authorization"])
  if (key === undefined) {
    if (keys.keyless && !keys.hasAdmin) {
      if (crossSite(ctx)) return Effect.fail(Errors.permission("cross_origin_forbidden", "Browser requests from another origin are refused on a gateway that needs no key"))
      return Effect.succeed({ _tag: "admin" })
    }
    return Effect.fail(Errors.authentication("invalid_api_key", "Missing API key: send Authorization: Bearer <key>"))
  }
  if (keys.isAdmin(key)) return Effect.succeed({ _tag: "admin" })
  const known = keys.authenticate(key)
  // a key unknown here may have been made on another replica a moment ago: asked of the database's key changes
  const principal = Option.isNone(known) && keys.shared ? orDatabaseUnavailable(keys.lookup([key])) : Effect.succeed(known)
  return Effect.flatMap(principal, (found) =>
    Option.match(found, {
      onNone: () => Effect.fail(Errors.authentication("invalid_api_key", "Invalid API key")),
      onSome: (p) => Effect.succeed({ _tag: "app", app: p.app } as const)
    })
  )
})

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/
const USER = /^[A-Za-z0-9._@:-]{1,64}$/
const DAY_MS = 86_400_000

/** A real UTC calendar date `YYYY-MM-DD`, as epoch ms at midnight; undefined otherwise. */
const realDate = (text: string): number | undefined => {
  const match = DATE.exec(text)
  if (match === null) return undefined
  const date = new Date(0)
  // setUTCFullYear, not Date.UTC: the latter reads years 0 to 99 as 1900 to 1999
  date.setUTCFullYear(Number(match[1]), Number(match[2]) - 1, Number(match[3]))
  const ms = date.getTime()
  return dayOf(ms) === text ? ms : undefined
}

export const usageRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const keys = yield* KeyStore
  const usage = yield* UsageLog
  const auth = yield* makeOwnAuth

  const handler = (ctx: RequestContext) =>
    Effect.gen(function* () {
      if (!config.usage.enabled) return yield* Errors.notFound("not_found", "Usage accounting is switched off on this gateway (usage.enabled: false)")
      const caller = yield* auth(ctx)
      const q = ctx.query
      const dates: Record<"from" | "to", number> = { from: 0, to: 0 }
      const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate())
      for (const name of ["to", "from"] as const) {
        const text = q.get(name)
        if (text === null || text === "") {
          dates[name] = name === "to" ? today : dates.to - 29 * DAY_MS
          continue
        }
        const ms = realDate(text)
        if (ms === undefined) return yield* Errors.invalidRequest("invalid_date", `${name} must be a real UTC date as YYYY-MM-DD`, { param: name })
        dates[name] = ms
      }
      if (dates.from > dates.to) return yield* Errors.invalidRequest("invalid_range", "from is after to")
      if ((dates.to - dates.from) / DAY_MS + 1 > 366) return yield* Errors.invalidRequest("range_too_long", "A usage range covers at most 366 days")
      const app = q.get("app")
      // an app whose keys are gone (revoked, or removed from the config) keeps its usage reportable
      if (app !== null && !keys.knownApps().includes(app) && !(yield* usage.hasApp(app))) {
        return yield* Errors.invalidRequest("invalid_app", `app: ${app} has no key on this gateway, revoked or live, and no recorded usage`, { param: "app" })
      }
      const user = q.get("user")
      if (user !== null && !USER.test(user)) {
        return yield* Errors.invalidRequest("invalid_user", "user must be 1 to 64 characters of A-Z, a-z, 0-9, . _ @ : -", { param: "user" })
      }
      const session = q.get("session")
      if (session !== null && boundedId(session) !== session) {
        return yield* Errors.invalidRequest("invalid_session", `session must be 1 to ${MAX_ID} printable ASCII characters without spaces, as clients send it`, { param: "session" })
      }
      let scope: string | undefined = app ?? undefined
      if (caller._tag === "app") {
        if (app !== null && app !== caller.app) return yield* Errors.permission("app_forbidden", "An app key may read only its own app's usage", { param: "app" })
        scope = caller.app
      }
      const report = yield* usage.report({ from: dayOf(dates.from), to: dayOf(dates.to), ...(scope !== undefined ? { app: scope } : {}), ...(user !== null ? { user } : {}), ...(session !== null ? { session } : {}) })
      return Reply.json(report)
    })

  const routes: ReadonlyArray<Route> = [{ method: "GET", path: "/gateway/usage", auth: "public", handler, label: "gateway.usage" }]
  return routes
})
