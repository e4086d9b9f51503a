import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import type { GatewayConfig } from "../Config.js"

/** Who is calling: the app a key belongs to, or the keyless loopback app `default`. */
export interface Principal {
  readonly app: string
  /** id of the key (never the key itself); "none" when no key was needed */
  readonly keyId: string
  readonly source: "config" | "runtime" | "none"
}

interface StoredKey {
  readonly digest: Buffer
  readonly principal: Principal
}

const digest = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest()

/** True for addresses only this machine can reach. */
export const isLoopbackHost = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/** A runtime key as listed (never its secret). */
export interface RuntimeKeyInfo {
  readonly id: string
  readonly app: string
  /** epoch ms */
  readonly createdAt: number
}

/** The one time a runtime key's secret is seen. */
export interface CreatedKey extends RuntimeKeyInfo {
  readonly key: string
}

/** Runtime key storage: the store of record behind the in-memory digests (SQLite in the app, nothing in tests). */
export interface RuntimeKeyPersistence {
  readonly load: Effect.Effect<ReadonlyArray<{ readonly id: string; readonly app: string; readonly digest: string; readonly createdAt: number }>>
  readonly insert: (row: { readonly id: string; readonly app: string; readonly digest: string; readonly createdAt: number }) => Effect.Effect<void>
  readonly revoke: (id: string, at: number) => Effect.Effect<void>
  /** apps of revoked runtime keys */
  readonly revokedApps: Effect.Effect<ReadonlyArray<string>>
}

const keyIdOf = (d: Buffer) => `key_${d.toString("hex", 0, 8)}`

/**
 * API keys: configured keys and runtime keys made through the admin routes. Keys are held only as
 * SHA-256 digests: a presented key is hashed, looked up by digest and compared in constant time,
 * so timing reveals neither its length nor a matching prefix. A revoked runtime key leaves the map
 * at once, so it fails on its very next request.
 */
export class KeyStore extends Context.Tag("gateway/KeyStore")<
  KeyStore,
  {
    /** the principal for a presented key, if it is one */
    readonly authenticate: (key: string) => Option.Option<Principal>
    /** whether the admin key was presented */
    readonly isAdmin: (key: string) => boolean
    /** whether an admin key is configured */
    readonly hasAdmin: boolean
    /** no keys configured on a loopback listener: requests need no credential */
    readonly keyless: boolean
    /** app names that hold a configured key */
    readonly configApps: ReadonlySet<string>
    /** every app that can make requests */
    readonly apps: () => ReadonlyArray<string>
    /** every app that can make requests or ever held a runtime key (revoked ones included) */
    readonly knownApps: () => ReadonlyArray<string>
    /** whether a key id is a live key (config or runtime) */
    readonly isLive: (keyId: string) => boolean
    /** whether a key id is a configured key's */
    readonly isConfigKey: (keyId: string) => boolean
    readonly listRuntime: () => ReadonlyArray<RuntimeKeyInfo>
    readonly createRuntime: (app: string) => Effect.Effect<CreatedKey>
    /** false when no live runtime key has that id */
    readonly revokeRuntime: (id: string) => Effect.Effect<boolean>
    /** called with the key id of every revoked key (uploads started with it are dropped) */
    readonly onRevoke: (listener: (keyId: string) => void) => void
  }
>() {
  static readonly make = (config: GatewayConfig, persistence?: RuntimeKeyPersistence) =>
    Effect.gen(function* () {
      const byDigest = new Map<string, StoredKey>()
      const configIds = new Set<string>()
      for (const entry of config.keys) {
        const d = digest(Redacted.value(entry.key))
        const id = keyIdOf(d)
        configIds.add(id)
        byDigest.set(d.toString("hex"), { digest: d, principal: { app: entry.app, keyId: id, source: "config" } })
      }
      const runtime = new Map<string, { readonly info: RuntimeKeyInfo; readonly digest: string }>()
      for (const row of persistence === undefined ? [] : yield* persistence.load) {
        runtime.set(row.id, { info: { id: row.id, app: row.app, createdAt: row.createdAt }, digest: row.digest })
        byDigest.set(row.digest, { digest: Buffer.from(row.digest, "hex"), principal: { app: row.app, keyId: row.id, source: "runtime" } })
      }
      // apps whose runtime keys were revoked: their past usage stays reportable
      const formerApps = new Set(persistence === undefined ? [] : yield* persistence.revokedApps)
      const admin = config.adminKey === undefined ? undefined : digest(Redacted.value(config.adminKey))
      // no keys at all on a loopback listener: the first runtime key ends that
      const isKeyless = () => config.keys.length === 0 && isLoopbackHost(config.listen.host) && runtime.size === 0
      const configApps = new Set(config.keys.map((k) => k.app))
      const listeners: Array<(keyId: string) => void> = []

      const authenticate = (key: string): Option.Option<Principal> => {
        const d = digest(key)
        const found = byDigest.get(d.toString("hex"))
        return found !== undefined && timingSafeEqual(found.digest, d) ? Option.some(found.principal) : Option.none()
      }
      const apps = (): ReadonlyArray<string> => {
        if (isKeyless()) return ["default"]
        const names = new Set(configApps)
        for (const { info } of runtime.values()) names.add(info.app)
        return [...names]
      }

      return KeyStore.of({
        authenticate,
        isAdmin: (key) => admin !== undefined && timingSafeEqual(admin, digest(key)),
        hasAdmin: admin !== undefined,
        get keyless() {
          return isKeyless()
        },
        configApps,
        apps,
        knownApps: () => [...new Set([...apps(), ...formerApps])],
        isLive: (keyId) => configIds.has(keyId) || runtime.has(keyId) || keyId === "none",
        isConfigKey: (keyId) => configIds.has(keyId),
        listRuntime: () => [...runtime.values()].map((r) => r.info),
        createRuntime: (app) =>
          Effect.gen(function* () {
            const secret = `sk-gw-${randomBytes(24).toString("hex")}`
            const d = digest(secret)
            const row = { id: keyIdOf(d), app, digest: d.toString("hex"), createdAt: Date.now() }
            if (persistence !== undefined) yield* persistence.insert(row)
            runtime.set(row.id, { info: { id: row.id, app, createdAt: row.createdAt }, digest: row.digest })
            byDigest.set(row.digest, { digest: d, principal: { app, keyId: row.id, source: "runtime" } })
            return { id: row.id, app, createdAt: row.createdAt, key: secret }
          }),
        revokeRuntime: (id) =>
          Effect.gen(function* () {
            const found = runtime.get(id)
            if (found === undefined) return false
            // out of the map first: the key fails on its very next request, whatever the database does
            runtime.delete(id)
            byDigest.delete(found.digest)
            formerApps.add(found.info.app)
            for (const listener of listeners) listener(id)
            if (persistence !== undefined) yield* persistence.revoke(id, Date.now())
            return true
          }),
        onRevoke: (listener) => void listeners.push(listener)
      })
    })

  /** Configured keys only (tests of other services). */
  static readonly layer = (config: GatewayConfig) => Layer.effect(KeyStore, KeyStore.make(config))

  /** Configured keys and runtime keys kept in the database. */
  static readonly layerWithRuntime = (config: GatewayConfig) =>
    Layer.effect(
      KeyStore,
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const persistence: RuntimeKeyPersistence = {
          load: Effect.orDie(
            Effect.map(sql<{ id: string; app: string; digest: string; created_at: number }>`SELECT id, app, digest, created_at FROM runtime_keys WHERE revoked_at IS NULL`, (rows) =>
              rows.map((r) => ({ id: r.id, app: r.app, digest: r.digest, createdAt: r.created_at }))
            )
          ),
          insert: (row) => Effect.orDie(sql`INSERT INTO runtime_keys ${sql.insert({ id: row.id, app: row.app, digest: row.digest, created_at: row.createdAt })}`),
          revoke: (id, at) => Effect.orDie(sql`UPDATE runtime_keys SET revoked_at = ${at} WHERE id = ${id}`),
          revokedApps: Effect.orDie(
            Effect.map(
              SqlSchema.findAll({
                Request: Schema.Void,
                Result: Schema.Struct({ app: Schema.String }),
                execute: () => sql`SELECT DISTINCT app FROM runtime_keys WHERE revoked_at IS NOT NULL`
              })(undefined),
              (rows) => rows.map((r) => r.app)
            )
          )
        }
        return yield* KeyStore.make(config, persistence)
      })
    )
}
