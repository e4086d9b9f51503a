import { Effect, Schema } from "effect"
import { Settings } from "../../Config.js"
import { Errors, GatewayError } from "../../domain/Errors.js"
import { Reply, type RequestContext, type Route } from "../../http/Route.js"
import { Catalog } from "../../services/Catalog.js"
import { KeyStore, orDatabaseUnavailable } from "../../services/KeyStore.js"
import { decodeBody } from "../Decode.js"
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

const CreateBody = Schema.Struct({ app: Schema.String, expiresAt: Schema.optional(Schema.NullOr(Schema.String)) })

/** RFC 3339 with a time zone (`2026-12-31T23:59:59Z`, `...+02:00`) */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/
const decodeCreate = decodeBody(CreateBody)

const iso = (ms: number) => new Date(ms).toISOString()

export const adminRoutes = Effect.gen(function* () {
  const config = yield* Settings
  const keys = yield* KeyStore
  const catalog = yield* Catalog
  const auth = yield* makeOwnAuth

  const adminOnly = (ctx: RequestContext) =>
    Effect.flatMap(auth(ctx), (caller) =>
      caller._tag === "admin" ? Effect.void : Effect.fail(Errors.permission("admin_key_required", "Runtime keys are managed with the admin key"))
    )

  const list = (ctx: RequestContext) =>
    Effect.gen(function* () {
      yield* adminOnly(ctx)
      const live = yield* orDatabaseUnavailable(keys.listRuntime)
      return Reply.json({ data: live.map((k) => ({ id: k.id, app: k.app, created_at: iso(k.createdAt), ...(k.expiresAt !== undefined ? { expires_at: iso(k.expiresAt) } : {}) })) })
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
      let expiresAt: number | undefined
      if (body.expiresAt !== undefined && body.expiresAt !== null) {
        expiresAt = RFC3339.test(body.expiresAt) ? Date.parse(body.expiresAt) : Number.NaN
        if (!Number.isFinite(expiresAt)) {
          return yield* Errors.invalidRequest("invalid_expires_at", "expiresAt: an RFC 3339 time with a time zone, such as 2026-12-31T23:59:59Z", { param: "expiresAt" })
        }
        if (expiresAt <= Date.now()) return yield* Errors.invalidRequest("invalid_expires_at", "expiresAt: the time has passed; a key must expire in the future", { param: "expiresAt" })
      }
      // host tools are not built: no app runs them, so `app_has_host_tools` cannot occur yet
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
      const created = yield* orDatabaseUnavailable(keys.createRuntime(app, expiresAt !== undefined ? { expiresAt } : {}))
      return Reply.json(
        { id: created.id, app: created.app, key: created.key, created_at: iso(created.createdAt), ...(created.expiresAt !== undefined ? { expires_at: iso(created.expiresAt) } : {}) },
        { status: 201 }
      )
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

  const byId = (path: string) => {
    const match = /^\/gateway\/admin\/keys\/([A-Za-z0-9_-]{1,64})$/.exec(path)
    return match === null ? undefined : { id: match[1] }
  }

  const routes: ReadonlyArray<Route> = [
    { method: "GET", path: "/gateway/admin/keys", auth: "public", handler: list, label: "gateway.admin.keys.list" },
    { method: "POST", path: "/gateway/admin/keys", auth: "public", handler: create, label: "gateway.admin.keys.create" },
    { method: "DELETE", path: byId, template: "/gateway/admin/keys/{id}", auth: "public", handler: revoke, label: "gateway.admin.keys.revoke" }
  ]
  return routes
})
