import { Effect, Either, Schema } from "effect"
import { Budget, Settings, type TrafficLimits } from "../../Config.js"
import { Errors, GatewayError } from "../../domain/Errors.js"
import { Reply, type RequestContext, type Route } from "../../http/Route.js"
import { Catalog } from "../../services/routing/Catalog.js"
import { KeyStore, orDatabaseUnavailable } from "../../services/keys/KeyStore.js"
import { decodeAt, decodeBody } from "../Decode.js"
import { Quota, type BudgetSpend } from "../../services/quota/Quota.js"
import type { RuntimeKeyInfo } from "../../services/keys/KeyStoreSql.js"
import { makeOwnAuth } from "./Usage.js"

/**
 * Runtime keys on `/gateway/admin/keys` (spec 2.5, 4.5, 5.5): list, create, revoke by key id; the
 * admin key only. A key made with `expiresAt` (RFC 3339) is refused as `invalid_api_key` from then
 * on, on every replica at once (each holds the time with the key); it is listed with `expires_at`. The secret is in the creation answer once and stored only as a digest. The
 * database lost: each answers 503 `database_unavailable` (the keys already known keep working).
 */

/** App names of runtime keys: lowercase letters, digits and `-`, not `default`. */
const APP = /^[a-z0-9-]{1,64}$/

const conflict = (code: string, message: string, param?: string) =>
  new GatewayError({ kind: "invalid_request", status: 409, code, message, ...(param !== undefined ? { param } : {}) })

const CreateBody = Schema.Struct({
  app: Schema.String,
  expiresAt: Schema.optional(Schema.NullOr(Schema.String)),
  limits: Schema.optional(Schema.Unknown),
  budgets: Schema.optional(Schema.Unknown)
})
const PatchBody = Schema.Struct({
  expiresAt: Schema.optional(Schema.NullOr(Schema.String)),
  limits: Schema.optional(Schema.Unknown),
  budgets: Schema.optional(Schema.Unknown)
})

/** A key's rate limits (its budgets are a field of their own on these routes). */
const RateLimits = Schema.Struct({
  requestsPerMinute: Schema.optional(Schema.Int.pipe(Schema.positive())),
  tokensPerMinute: Schema.optional(Schema.Int.pipe(Schema.positive())),
  concurrency: Schema.optional(Schema.Int.pipe(Schema.positive()))
})
const decodeRateLimits = decodeAt(RateLimits)
const decodeBudgets = decodeAt(Schema.Array(Budget))

const invalidLimits = (param: string, message: string) => Errors.invalidRequest("invalid_limits", message, { param })

/** `limits` or `budgets` of a body: absent (keep), null (none) or valid, else `invalid_limits` naming the field. */
const limitsField = <A>(value: unknown, name: "limits" | "budgets", decode: (v: unknown, at: string) => Either.Either<A, GatewayError>) => {
  if (value === undefined) return Effect.succeed(undefined)
  if (value === null) return Effect.succeed(null)
  if (name === "limits") {
    if (typeof value !== "object" || Array.isArray(value)) return Effect.fail(invalidLimits("limits", "limits: an object of requestsPerMinute, tokensPerMinute and concurrency"))
    const extra = Object.keys(value).find((k) => !["requestsPerMinute", "tokensPerMinute", "concurrency"].includes(k))
    if (extra !== undefined) return Effect.fail(invalidLimits(`limits.${extra}`, `limits.${extra}: not a limit; a key takes requestsPerMinute, tokensPerMinute, concurrency (and budgets as a field of its own)`))
  }
  return Either.match(decode(value, name), {
    onLeft: (e) => Effect.fail(invalidLimits(e.param ?? name, e.message)),
    onRight: (a) => Effect.succeed(a)
  })
}

/** A key's limits and budgets as stored, from what it had and what the body changes. */
const mergeLimits = (
  had: TrafficLimits | undefined,
  limits: typeof RateLimits.Type | null | undefined,
  budgets: ReadonlyArray<Budget> | null | undefined
): TrafficLimits | undefined => {
  const { budgets: hadBudgets, ...hadLimits } = had ?? {}
  const rate = limits === undefined ? hadLimits : limits === null ? {} : limits
  const spend = budgets === undefined ? hadBudgets : budgets === null || budgets.length === 0 ? undefined : budgets
  const merged: TrafficLimits = { ...rate, ...(spend !== undefined ? { budgets: spend } : {}) }
  return Object.keys(merged).length === 0 ? undefined : merged
}

/** RFC 3339 with a time zone (`2026-12-31T23:59:59Z`, `...+02:00`) */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/
const decodeCreate = decodeBody(CreateBody)
const decodePatch = decodeBody(PatchBody)

const iso = (ms: number) => new Date(ms).toISOString()

/** A budget's spending as the admin routes show it. */
const shownSpend = (spend: ReadonlyArray<BudgetSpend>) =>
  spend.map((b) => ({
    ...(b.usd !== undefined ? { usd: b.usd } : { tokens: b.tokens }),
    per: b.per,
    limit: b.limit,
    used: b.used,
    reserved: b.reserved,
    period_end: b.periodEnd !== undefined ? iso(b.periodEnd) : null
  }))

export const adminRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const keys = yield* KeyStore
  const catalog = yield* Catalog
  const auth = yield* makeOwnAuth
  const quota = yield* Quota

  /** A runtime key as the admin routes show it (never its secret). */
  const shown = (k: RuntimeKeyInfo) => {
    const { budgets, ...limits } = k.limits ?? {}
    return {
      id: k.id,
      app: k.app,
      created_at: iso(k.createdAt),
      ...(k.expiresAt !== undefined ? { expires_at: iso(k.expiresAt) } : {}),
      ...(Object.keys(limits).length > 0 ? { limits } : {}),
      ...(budgets !== undefined ? { budgets } : {})
    }
  }

  /** `expiresAt` of a body: absent, null (never) or an RFC 3339 time in the future. */
  const expiryField = (value: string | null | undefined) => {
    if (value === undefined || value === null) return Effect.succeed(value)
    const at = RFC3339.test(value) ? Date.parse(value) : Number.NaN
    if (!Number.isFinite(at)) {
      return Effect.fail(Errors.invalidRequest("invalid_expires_at", "expiresAt: an RFC 3339 time with a time zone, such as 2026-12-31T23:59:59Z", { param: "expiresAt" }))
    }
    if (at <= Date.now()) return Effect.fail(Errors.invalidRequest("invalid_expires_at", "expiresAt: the time has passed; a key must expire in the future", { param: "expiresAt" }))
    return Effect.succeed(at)
  }

  const adminOnly = (ctx: RequestContext) =>
    Effect.flatMap(auth(ctx), (caller) =>
      caller._tag === "admin" ? Effect.void : Effect.fail(Errors.permission("admin_key_required", "Runtime keys are managed with the admin key"))
    )

  const list = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      const live = yield* orDatabaseUnavailable(keys.listRuntime)
      return Reply.json({ data: live.map(shown) })
    })

  const create = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      // without an admin key nobody could list or revoke the key made here (the first one ends keyless access)
      if (!keys.hasAdmin) return yield* Errors.permission("admin_key_required", "Set adminKey in the config to create runtime keys; without it no one could revoke them")
      const body = yield* decodeCreate(yield* ctx.json)
      const app = body.app
      if (!APP.test(app) || app === "default") {
        return yield* Errors.invalidRequest("invalid_app", "app: a runtime key's app is 1 to 64 lowercase letters, digits or -, and not default", { param: "app" })
      }
      if (keys.configApps.has(app)) return yield* conflict("app_has_config_key", `app: ${app} has a key in the config; give it config keys only`, "app")
      const expiresAt = (yield* expiryField(body.expiresAt)) ?? undefined
      const limits = mergeLimits(undefined, yield* limitsField(body.limits, "limits", decodeRateLimits), yield* limitsField(body.budgets, "budgets", decodeBudgets))
      // an app that runs host tools is reached through its config keys only (spec 5.5)
      if ((config.apps[app]?.hostTools?.length ?? 0) > 0) {
        return yield* conflict("app_has_host_tools", `app: ${app} runs host tools; give it config keys only`, "app")
      }
      const known = keys.apps().includes(app)
      if (!known) {
        // every app must be able to read one largest body at once
        const apps = [...keys.apps().filter((a) => a !== "default" || !keys.keyless), app]
        const needed = apps.reduce((sum, name) => sum + catalog.app(name).maxBodyBytes, 0)
        if (needed > config.limits.maxBodyBytesInFlight) {
          return yield* conflict(
            "body_budget_insufficient",
            `limits.maxBodyBytesInFlight (${config.limits.maxBodyBytesInFlight} bytes) cannot hold one largest body for each of ${apps.length} apps (${needed} bytes); nothing was created`
          )
        }
      }
      const created = yield* orDatabaseUnavailable(
        keys.createRuntime(app, { ...(expiresAt !== undefined ? { expiresAt } : {}), ...(limits !== undefined ? { limits } : {}) })
      )
      const { id, ...rest } = shown(created)
      return Reply.json({ id, key: created.key, ...rest }, { status: 201 })
    })

  /** The key with its spending per budget: used, reserved, limit and the end of the period. */
  const withSpend = (k: RuntimeKeyInfo) =>
    Effect.map(quota.budgets({ keyId: k.id, limits: k.limits }), (spend) => ({ ...shown(k), spend: shownSpend(spend) }))

  const live = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const id = ctx.params.id
      if (keys.isConfigKey(id)) return yield* conflict("config_key", `${id} is a key from the config; its app's limits are in the config`)
      const found = yield* orDatabaseUnavailable(keys.getRuntime(id))
      if (found._tag === "None") return yield* Errors.notFound("key_not_found", `No runtime key ${id}`)
      return found.value
    })

  const get = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      return Reply.json(yield* withSpend(yield* live(ctx)))
    })

  const patch = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      const body = yield* decodePatch(yield* ctx.json)
      const limits = yield* limitsField(body.limits, "limits", decodeRateLimits)
      const budgets = yield* limitsField(body.budgets, "budgets", decodeBudgets)
      const expiry = yield* expiryField(body.expiresAt)
      const had = yield* live(ctx)
      const expiresAt = expiry === undefined ? had.expiresAt : (expiry ?? undefined)
      const changed = yield* orDatabaseUnavailable(keys.updateRuntime(had.id, { expiresAt, limits: mergeLimits(had.limits, limits, budgets) }))
      if (changed._tag === "None") return yield* Errors.notFound("key_not_found", `No runtime key ${had.id}`)
      return Reply.json(yield* withSpend(changed.value))
    })

  const revoke = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      const id = ctx.params.id
      if (keys.isConfigKey(id)) return yield* conflict("config_key", `${id} is a key from the config; remove it there`)
      const revoked = yield* orDatabaseUnavailable(keys.revokeRuntime(id))
      if (!revoked) return yield* Errors.notFound("key_not_found", `No runtime key ${id}`)
      return Reply.json({ id, revoked: true })
    })

  /** Every budget of every app (config) and runtime key, with its spending now: the dashboard's budget panel. */
  const allBudgets = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      const apps: Array<unknown> = []
      for (const [app, settings] of Object.entries(config.apps)) {
        if (settings.limits?.budgets === undefined || settings.limits.budgets.length === 0) continue
        apps.push({ app, budgets: shownSpend(yield* quota.budgets({ app })) })
      }
      const runtime: Array<unknown> = []
      for (const k of yield* orDatabaseUnavailable(keys.listRuntime)) {
        if (k.limits?.budgets === undefined || k.limits.budgets.length === 0) continue
        runtime.push({ id: k.id, app: k.app, budgets: shownSpend(yield* quota.budgets({ keyId: k.id, limits: k.limits })) })
      }
      return Reply.json({ apps, keys: runtime })
    })

  const byId = (path: string) => {
    const match = /^\/gateway\/admin\/keys\/([A-Za-z0-9_-]{1,64})$/.exec(path)
    return match === null ? undefined : { id: match[1] }
  }

  const routes: ReadonlyArray<Route> = [
    { method: "GET", path: "/gateway/admin/keys", auth: "public", handler: list, label: "gateway.admin.keys.list" },
    { method: "POST", path: "/gateway/admin/keys", auth: "public", handler: create, label: "gateway.admin.keys.create" },
    { method: "GET", path: "/gateway/admin/budgets", auth: "public", handler: allBudgets, label: "gateway.admin.budgets" },
    { method: "GET", path: byId, template: "/gateway/admin/keys/{id}", auth: "public", handler: get, label: "gateway.admin.keys.get" },
    { method: "PATCH", path: byId, template: "/gateway/admin/keys/{id}", auth: "public", handler: patch, label: "gateway.admin.keys.update" },
    { method: "DELETE", path: byId, template: "/gateway/admin/keys/{id}", auth: "public", handler: revoke, label: "gateway.admin.keys.revoke" }
  ]
  return routes
})
