/**
 * KeyStore over each storage backend (the same test bodies, the database Layer swapped): runtime
 * keys work at once, are stored only as SHA-256 digests, are refused at once after revocation
 * with the `onRevoke` listeners told exactly once, and survive a restart. On PostgreSQL also:
 * keys already known keep working while the database is lost, and the admin operations fail with
 * the typed `KeyStoreUnavailable` (the routes' 503) rather than die.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Option, Schema } from "effect"
import { createHash } from "node:crypto"
import { KeyStoreUnavailable } from "../../../src/services/keys/KeyStore.js"
import { backends } from "../../support/Backends.js"
import { ADMIN, CONFIG_KEY, configFor, loseDatabase, openDatabase, realSleep, replicaOn, tempDir } from "../../support/Keys.js"

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex")

const StoredRow = Schema.Struct({ id: Schema.String, app: Schema.String, digest: Schema.String, created_at: Schema.Number, revoked_at: Schema.NullOr(Schema.Number) })

const storedRows = (sql: SqlClient.SqlClient) =>
  Effect.flatMap(sql`SELECT id, app, digest, created_at, revoked_at FROM runtime_keys ORDER BY created_at, id`, (rows) =>
    Effect.all(rows.map((row) => Schema.decodeUnknown(StoredRow)(row)))
  )

for (const backend of backends) {
  describe(`KeyStore on ${backend.kind}`, () => {
    it.scopedLive("create: usable at once, listed without the secret, stored only as its SHA-256 digest", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const db = yield* openDatabase(backend, dir)
        const { keys, sql } = yield* replicaOn(db, configFor(dir))
        expect(keys.shared).toBe(backend.kind === "postgres")
        expect(yield* keys.listRuntime).toEqual([])

        const created = yield* keys.createRuntime("team-a")
        expect(created.key).toMatch(/^sk-gw-[0-9a-f]{48}$/)
        expect(created.id).toBe(`key_${sha256(created.key).slice(0, 16)}`)
        const principal = { app: "team-a", keyId: created.id, source: "runtime" }
        expect(keys.authenticate(created.key)).toEqual(Option.some(principal))
        expect(yield* keys.lookup(["sk-not-a-key", created.key])).toEqual(Option.some(principal))
        expect(keys.isLive(created.id)).toBe(true)
        expect(keys.apps()).toEqual(expect.arrayContaining(["configured", "team-a"]))
        expect(yield* keys.listRuntime).toEqual([{ id: created.id, app: "team-a", createdAt: created.createdAt }])

        const rows = yield* storedRows(sql)
        expect(rows).toEqual([{ id: created.id, app: "team-a", digest: sha256(created.key), created_at: created.createdAt, revoked_at: null }])
        expect(JSON.stringify(yield* sql`SELECT * FROM runtime_keys`)).not.toContain(created.key)
      })
    )

    it.scopedLive("revoke: refused at once, listeners told exactly once, revoking again is false; the app stays known", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const db = yield* openDatabase(backend, dir)
        const { keys } = yield* replicaOn(db, configFor(dir))
        const told: Array<string> = []
        keys.onRevoke((id) => told.push(id))
        const kept = yield* keys.createRuntime("team-kept")
        const created = yield* keys.createRuntime("team-gone")

        expect(yield* keys.revokeRuntime(created.id)).toBe(true)
        expect(keys.authenticate(created.key)).toEqual(Option.none())
        expect(yield* keys.lookup([created.key])).toEqual(Option.none())
        expect(told).toEqual([created.id])
        expect(keys.isLive(created.id)).toBe(false)
        expect(yield* keys.revokeRuntime(created.id)).toBe(false)
        expect(yield* keys.revokeRuntime("key_0000000000000000")).toBe(false)
        expect(keys.apps()).not.toContain("team-gone")
        expect(keys.knownApps()).toContain("team-gone")
        expect(yield* keys.listRuntime).toEqual([{ id: kept.id, app: "team-kept", createdAt: kept.createdAt }])
        expect(Option.isSome(keys.authenticate(kept.key))).toBe(true)
        // the change read back from the database (PostgreSQL's poll) tells no one twice
        yield* realSleep(backend.kind === "postgres" ? 600 : 0)
        expect(told).toEqual([created.id])
        expect(keys.authenticate(created.key)).toEqual(Option.none())
      })
    )

    it.scopedLive("config keys: authenticated, never runtime, never revoked here", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const db = yield* openDatabase(backend, dir)
        const { keys } = yield* replicaOn(db, configFor(dir))
        const id = `key_${sha256(CONFIG_KEY).slice(0, 16)}`
        expect(keys.authenticate(CONFIG_KEY)).toEqual(Option.some({ app: "configured", keyId: id, source: "config" }))
        expect(keys.isConfigKey(id)).toBe(true)
        expect(yield* keys.revokeRuntime(id)).toBe(false)
        expect(Option.isSome(keys.authenticate(CONFIG_KEY))).toBe(true)
        expect(keys.isAdmin(ADMIN)).toBe(true)
        expect(keys.isAdmin(CONFIG_KEY)).toBe(false)
        expect(keys.authenticate(ADMIN)).toEqual(Option.none())
        expect(yield* keys.lookup(["sk-unknown-0123456789"])).toEqual(Option.none())
      })
    )

    it.scopedLive("restart: live keys are loaded, revoked ones stay revoked and their apps known", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const db = yield* openDatabase(backend, dir)
        const config = configFor(dir)
        const [live, gone] = yield* Effect.scoped(
          Effect.gen(function* () {
            const { keys } = yield* replicaOn(db, config)
            const live = yield* keys.createRuntime("team-live")
            const gone = yield* keys.createRuntime("team-revoked")
            expect(yield* keys.revokeRuntime(gone.id)).toBe(true)
            return [live, gone] as const
          })
        )
        const { keys } = yield* replicaOn(db, config)
        const told: Array<string> = []
        keys.onRevoke((id) => told.push(id))
        expect(keys.authenticate(live.key)).toEqual(Option.some({ app: "team-live", keyId: live.id, source: "runtime" }))
        expect(keys.authenticate(gone.key)).toEqual(Option.none())
        expect(keys.knownApps()).toEqual(expect.arrayContaining(["configured", "team-live", "team-revoked"]))
        expect(keys.apps()).not.toContain("team-revoked")
        expect(yield* keys.listRuntime).toEqual([{ id: live.id, app: "team-live", createdAt: live.createdAt }])
        expect(yield* keys.revokeRuntime(gone.id)).toBe(false)
        // a revocation from before the start is nothing to tell
        yield* realSleep(backend.kind === "postgres" ? 600 : 0)
        expect(told).toEqual([])
      })
    )
  })
}

describe.skipIf(!backends.some((b) => b.kind === "postgres"))("KeyStore on postgres: the database lost while serving", () => {
  const backend = backends.find((b) => b.kind === "postgres")!

  it.scopedLive("known keys keep working; create, revoke, list and unknown keys fail typed; all recover with the database", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const db = yield* openDatabase(backend, dir)
      const { keys } = yield* replicaOn(db, configFor(dir))
      const known = yield* keys.createRuntime("team-known")
      yield* Effect.addFinalizer(() => loseDatabase(db.url!, false))
      yield* loseDatabase(db.url!, true)

      expect(Option.isSome(keys.authenticate(known.key))).toBe(true)
      expect(Option.isSome(keys.authenticate(CONFIG_KEY))).toBe(true)
      const failures: ReadonlyArray<Exit.Exit<unknown, KeyStoreUnavailable>> = [
        yield* Effect.exit(keys.createRuntime("team-new")),
        yield* Effect.exit(keys.revokeRuntime(known.id)),
        yield* Effect.exit(keys.listRuntime)
      ]
      for (const exit of failures) {
        expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error instanceof KeyStoreUnavailable, String(exit)).toBe(true)
      }
      // an unknown key needs the database: a typed failure, bounded in time (never a hang)
      const started = Date.now()
      const unknown = yield* Effect.exit(keys.lookup(["sk-gw-unknown-while-lost"]))
      expect(Exit.isFailure(unknown) && unknown.cause._tag === "Fail" && unknown.cause.error instanceof KeyStoreUnavailable).toBe(true)
      expect(Date.now() - started).toBeLessThan(5_000)
      // the key survived the failed revocation, here and in the database
      expect(Option.isSome(keys.authenticate(known.key))).toBe(true)
      expect(yield* keys.lookup([known.key])).toEqual(Option.some({ app: "team-known", keyId: known.id, source: "runtime" }))

      yield* loseDatabase(db.url!, false)
      // recovers by itself: the pool reconnects on the next query
      let listed = yield* Effect.exit(keys.listRuntime)
      for (let i = 0; i < 50 && Exit.isFailure(listed); i++) {
        yield* realSleep(100)
        listed = yield* Effect.exit(keys.listRuntime)
      }
      expect(listed).toEqual(Exit.succeed([{ id: known.id, app: "team-known", createdAt: known.createdAt }]))
      expect(yield* keys.revokeRuntime(known.id)).toBe(true)
      const again = yield* keys.createRuntime("team-new")
      expect(Option.isSome(keys.authenticate(again.key))).toBe(true)
    })
  )
})
