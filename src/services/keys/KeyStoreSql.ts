import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Data, Effect, Option, Schema, type Stream } from "effect"
import { TrafficLimits } from "../../Config.js"
import { Backend } from "../../sql/Database.js"

/**
 * Runtime keys in the database (`runtime_keys`, migrations 0005 and 0009), for `KeyStore`: every
 * statement through `SqlSchema`, every failure the typed `KeyStoreUnavailable`. Each change takes
 * the next change number so that replicas can read the changes since the last they saw; on
 * PostgreSQL each is also announced with `NOTIFY`.
 */

/** A runtime key as listed (never its secret). */
export interface RuntimeKeyInfo {
  readonly id: string
  readonly app: string
  /** epoch ms */
  readonly createdAt: number
  /** epoch ms past which the key is refused; absent: never */
  readonly expiresAt?: number
  /** the key's own rate limits and budgets; absent: only its app's apply */
  readonly limits?: TrafficLimits
}

/** The runtime keys could not be read or written (database lost): the admin routes answer 503. */
export class KeyStoreUnavailable extends Data.TaggedError("KeyStoreUnavailable")<{ readonly cause: unknown }> {}

/** A row of `runtime_keys`: the key's digest, never the key. */
export const KeyRow = Schema.Struct({
  id: Schema.String,
  app: Schema.String,
  /** SHA-256 of the secret, hex */
  digest: Schema.String,
  /** epoch ms */
  created_at: Schema.Number,
  /** epoch ms; null while the key is live */
  revoked_at: Schema.NullOr(Schema.Number),
  /** epoch ms past which the key is refused (migration 0015); null: never */
  expires_at: Schema.NullOr(Schema.Number),
  /** number of the last change to the row (migration 0009): replicas read changes in this order */
  version: Schema.Number,
  /** the key's limits and budgets as JSON (migration 0017); null: none */
  controls: Schema.NullOr(Schema.String)
})
export type KeyRow = typeof KeyRow.Type

/** Runtime key storage: the store of record behind the in-memory digests (the database in the app, nothing in tests of other services). */
export interface RuntimeKeyPersistence {
  /** every runtime key, revoked ones included (their apps stay reportable) */
  readonly loadAll: Effect.Effect<ReadonlyArray<KeyRow>, KeyStoreUnavailable>
  /** the keys changed after change number `after`, in change order */
  readonly changedSince: (after: number) => Effect.Effect<ReadonlyArray<KeyRow>, KeyStoreUnavailable>
  /** stores a new key: its row as stored */
  readonly insert: (key: {
    readonly id: string
    readonly app: string
    readonly digest: string
    readonly created_at: number
    readonly expires_at: number | null
    readonly controls: string | null
  }) => Effect.Effect<KeyRow, KeyStoreUnavailable>
  /** changes a live key's expiry and limits: its row as changed; none when no live key has that id */
  readonly update: (id: string, change: { readonly expires_at: number | null; readonly controls: string | null }) => Effect.Effect<Option.Option<KeyRow>, KeyStoreUnavailable>
  /** revokes a live key: its row as revoked; none when no live key has that id */
  readonly revoke: (id: string, at: number) => Effect.Effect<Option.Option<KeyRow>, KeyStoreUnavailable>
  /** live runtime keys in creation order */
  readonly listLive: Effect.Effect<ReadonlyArray<RuntimeKeyInfo>, KeyStoreUnavailable>
  /** other processes change the keys too (PostgreSQL); false: this process is the only writer (SQLite) and its memory the whole truth */
  readonly shared: boolean
  /** notices of changes other processes made (PostgreSQL `LISTEN`), when there are any */
  readonly notices: Option.Option<Stream.Stream<unknown, unknown>>
}

/** A stored key's limits (none when the JSON is absent or no longer reads as limits). */
export const controlsOf = (controls: string | null): TrafficLimits | undefined => {
  if (controls === null) return undefined
  try {
    const decoded = Schema.decodeUnknownOption(TrafficLimits)(JSON.parse(controls))
    return Option.getOrUndefined(decoded)
  } catch {
    return undefined
  }
}

/** A key as listed, from its row. */
export const infoOf = (r: { readonly id: string; readonly app: string; readonly created_at: number; readonly expires_at: number | null; readonly controls: string | null }): RuntimeKeyInfo => {
  const limits = controlsOf(r.controls)
  return { id: r.id, app: r.app, createdAt: r.created_at, ...(r.expires_at !== null ? { expiresAt: r.expires_at } : {}), ...(limits !== undefined ? { limits } : {}) }
}

/** the PostgreSQL channel a key change is announced on (its change number as payload) */
const CHANNEL = "gateway_keys"

const unavailable = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, KeyStoreUnavailable, R> =>
  Effect.mapError(self, (cause) => new KeyStoreUnavailable({ cause }))

/**
 * A change in one transaction. `withTransaction` dies when its COMMIT or ROLLBACK fails (a
 * connection lost mid-change): that too is the database being lost, so it fails typed like any
 * other statement. (A lost COMMIT leaves the change unknown: the caller retries, and the reads of
 * changes settle what this process holds.)
 */
const inTransaction = <A, E, R>(sql: SqlClient.SqlClient, change: Effect.Effect<A, E, R>): Effect.Effect<A, KeyStoreUnavailable, R> =>
  unavailable(sql.withTransaction(change)).pipe(
    Effect.catchSomeDefect((defect) => (defect instanceof SqlError ? Option.some(Effect.fail(new KeyStoreUnavailable({ cause: defect }))) : Option.none()))
  )

/** Runtime keys in the gateway's database, through `SqlSchema`; on PostgreSQL every change is announced with `NOTIFY`. */
export const sqlPersistence = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const backend = yield* Backend
  const pg = backend.kind === "postgres" ? yield* Effect.serviceOption(PgClient.PgClient) : Option.none<PgClient.PgClient>()

  const all = SqlSchema.findAll({
    Request: Schema.Void,
    Result: KeyRow,
    execute: () => sql`SELECT id, app, digest, created_at, revoked_at, expires_at, version, controls FROM runtime_keys ORDER BY version, created_at, id`
  })
  const since = SqlSchema.findAll({
    Request: Schema.Number,
    Result: KeyRow,
    execute: (after) => sql`SELECT id, app, digest, created_at, revoked_at, expires_at, version, controls FROM runtime_keys WHERE version > ${after} ORDER BY version`
  })
  const live = SqlSchema.findAll({
    Request: Schema.Void,
    Result: Schema.Struct({ id: Schema.String, app: Schema.String, created_at: Schema.Number, expires_at: Schema.NullOr(Schema.Number), controls: Schema.NullOr(Schema.String) }),
    execute: () => sql`SELECT id, app, created_at, expires_at, controls FROM runtime_keys WHERE revoked_at IS NULL ORDER BY version, created_at, id`
  })
  // the counter row stays locked until the change commits: changes commit in number order
  const nextVersion = SqlSchema.single({
    Request: Schema.Void,
    Result: Schema.Struct({ version: Schema.Number }),
    execute: () => sql`UPDATE runtime_keys_counter SET version = version + 1 WHERE id = 1 RETURNING version`
  })
  const insertRow = SqlSchema.void({ Request: KeyRow, execute: (row) => sql`INSERT INTO runtime_keys ${sql.insert(row)}` })
  const revokeRow = SqlSchema.findOne({
    Request: Schema.Struct({ id: Schema.String, at: Schema.Number, version: Schema.Number }),
    Result: KeyRow,
    execute: ({ at, id, version }) =>
      sql`UPDATE runtime_keys SET revoked_at = ${at}, version = ${version} WHERE id = ${id} AND revoked_at IS NULL RETURNING id, app, digest, created_at, revoked_at, expires_at, version, controls`
  })
  const updateRow = SqlSchema.findOne({
    Request: Schema.Struct({ id: Schema.String, expires_at: Schema.NullOr(Schema.Number), controls: Schema.NullOr(Schema.String), version: Schema.Number }),
    Result: KeyRow,
    execute: ({ controls, expires_at, id, version }) =>
      sql`UPDATE runtime_keys SET expires_at = ${expires_at}, controls = ${controls}, version = ${version} WHERE id = ${id} AND revoked_at IS NULL RETURNING id, app, digest, created_at, revoked_at, expires_at, version, controls`
  })
  // inside the transaction: delivered when (and only if) the change commits
  const notify = SqlSchema.void({ Request: Schema.Number, execute: (version) => sql`SELECT pg_notify(${CHANNEL}, ${String(version)})` })
  const announce = (version: number) => (Option.isSome(pg) ? notify(version) : Effect.void)

  return {
    loadAll: unavailable(all(undefined)),
    changedSince: (after) => unavailable(since(after)),
    insert: (key) =>
      inTransaction(
        sql,
        Effect.gen(function* () {
          const { version } = yield* nextVersion(undefined)
          const row: KeyRow = { ...key, revoked_at: null, version }
          yield* insertRow(row)
          yield* announce(version)
          return row
        })
      ),
    revoke: (id, at) =>
      inTransaction(
        sql,
        Effect.gen(function* () {
          const { version } = yield* nextVersion(undefined)
          const row = yield* revokeRow({ id, at, version })
          if (Option.isSome(row)) yield* announce(version)
          return row
        })
      ),
    update: (id, change) =>
      inTransaction(
        sql,
        Effect.gen(function* () {
          const { version } = yield* nextVersion(undefined)
          const row = yield* updateRow({ id, ...change, version })
          if (Option.isSome(row)) yield* announce(version)
          return row
        })
      ),
    listLive: unavailable(Effect.map(live(undefined), (rows) => rows.map(infoOf))),
    shared: backend.kind === "postgres",
    notices: Option.map(pg, (client) => client.listen(CHANNEL))
  } satisfies RuntimeKeyPersistence
})
