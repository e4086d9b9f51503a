import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqliteMigrator from "@effect/sql-sqlite-node/SqliteMigrator"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Redacted } from "effect"
import Pg from "pg"
import * as fs from "node:fs"
import * as path from "node:path"
import type { GatewayConfig } from "../Config.js"
import meta from "./migrations/0001_meta.js"
import responses from "./migrations/0002_responses.js"
import files from "./migrations/0003_files.js"
import usage from "./migrations/0004_usage.js"
import keys from "./migrations/0005_keys.js"
import usageApp from "./migrations/0006_usage_app.js"
import responsesInline from "./migrations/0007_responses_inline.js"
import replicas from "./migrations/0008_replicas.js"
import keysChanges from "./migrations/0009_keys_changes.js"
import heldItems from "./migrations/0010_held_items.js"
import fileChunks from "./migrations/0011_file_chunks.js"
import uploads from "./migrations/0012_uploads.js"
import usageIndexes from "./migrations/0013_usage_indexes.js"
import usageCost from "./migrations/0014_usage_cost.js"
import keysExpiry from "./migrations/0015_keys_expiry.js"
import usageRollups from "./migrations/0016_usage_rollups.js"
import quota from "./migrations/0017_quota.js"
import usageKeyIndex from "./migrations/0018_usage_key_index.js"
import hostToolCalls from "./migrations/0019_host_tool_calls.js"
import usageAttribution from "./migrations/0020_usage_attribution.js"
import usageSessionIndex from "./migrations/0021_usage_session_index.js"
import { DatabaseUnreachable, migrationClient, postgresLayer } from "./Postgres.js"
import * as SqliteClient from "./SqliteClient.js"
import { WalSync } from "./WalSync.js"

/**
 * Migrations by `<id>_<name>`, run in order at start: the same list for both backends (a
 * migration states its dialect differences inside).
 */
const migrations = Migrator.fromRecord({
  "0001_meta": meta,
  "0002_responses": responses,
  "0003_files": files,
  "0004_usage": usage,
  "0005_keys": keys,
  "0006_usage_app": usageApp,
  "0007_responses_inline": responsesInline,
  "0008_replicas": replicas,
  "0009_keys_changes": keysChanges,
  "0010_held_items": heldItems,
  "0011_file_chunks": fileChunks,
  "0012_uploads": uploads,
  "0013_usage_indexes": usageIndexes,
  "0014_usage_cost": usageCost,
  "0015_keys_expiry": keysExpiry,
  "0016_usage_rollups": usageRollups,
  "0017_quota": quota,
  "0018_usage_key_index": usageKeyIndex,
  "0019_host_tool_calls": hostToolCalls,
  "0020_usage_attribution": usageAttribution,
  "0021_usage_session_index": usageSessionIndex
})

/** Which backend holds the gateway's state. */
export class Backend extends Context.Tag("gateway/Backend")<
  Backend,
  {
    readonly kind: "sqlite" | "postgres"
  }
>() {}

/**
 * The one SQLite database, `<dataDir>/gateway.db`, in WAL mode, migrated at start. Every store is
 * a Layer over its SqlClient.
 */
export const sqliteLayer = (dataDir: string) => {
  const client = Layer.unwrapEffect(
    Effect.sync(() => {
      fs.mkdirSync(dataDir, { recursive: true })
      return SqliteClient.layer({ filename: path.join(dataDir, "gateway.db") })
    })
  )
  const migrated = SqliteMigrator.layer({ loader: migrations }).pipe(Layer.provide(NodeContext.layer))
  return Layer.mergeAll(Layer.provideMerge(migrated, client), Layer.succeed(Backend, { kind: "sqlite" })).pipe(Layer.orDie)
}

/** any 64-bit number, the same on every replica: the lock migrations run under */
const MIGRATION_LOCK = 0x6c6c6d67 // "llmg"

/**
 * Migrations on PostgreSQL, on a client of their own without the statement timeout (see
 * `migrationClient`), under a session advisory lock held by another connection outside any pool:
 * replicas started together run them one after the other, and the later ones find nothing to do.
 */
const migratePostgres = (url: Redacted.Redacted<string>) =>
  Effect.scoped(
    Effect.gen(function* () {
      yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: async () => {
            const client = new Pg.Client({ connectionString: Redacted.value(url), keepAlive: true })
            client.on("error", () => {})
            await client.connect()
            await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK])
            return client
          },
          catch: (cause) => new SqlError({ cause, message: "Failed to take the migration lock" })
        }),
        // ending the session releases its advisory lock
        (client) => Effect.promise(() => client.end().catch(() => undefined))
      )
      const sql = yield* migrationClient(url)
      return yield* Effect.provideService(Migrator.make({})({ loader: migrations }), SqlClient.SqlClient, sql)
    })
  )

export interface PostgresDatabaseOptions {
  /** how long to keep trying to connect at start (default 30 s) */
  readonly connectWithinMs?: number
  /** the server's bound on one statement (`database.statementTimeoutMs`; default 30 s) */
  readonly statementTimeoutMs?: number
}

/**
 * PostgreSQL at `url`, shared by every replica: `poolSize` connections, migrated at start, each
 * statement bounded (Postgres.ts). Fails with `DatabaseUnreachable` (host only) when no
 * connection opens within `connectWithinMs` (default 30 s).
 */
export const postgresDatabaseLayer = (url: Redacted.Redacted<string>, poolSize: number, options: PostgresDatabaseOptions = {}) => {
  const client = postgresLayer({ url, poolSize, ...options })
  const migrated = Layer.effectDiscard(Effect.orDie(migratePostgres(url)))
  // commits are durable when PostgreSQL answers them: nothing to sync afterwards
  const noWal = Layer.succeed(WalSync, WalSync.of({ sync: Effect.void }))
  return Layer.mergeAll(Layer.provideMerge(migrated, client), noWal, Layer.succeed(Backend, { kind: "postgres" }))
}

/** The database of a config: PostgreSQL when `database.url` is set, else SQLite in `dataDir`. */
export const databaseLayer = (config: GatewayConfig): Layer.Layer<SqlClient.SqlClient | WalSync | Backend, DatabaseUnreachable> =>
  config.database.url === undefined
    ? sqliteLayer(config.dataDir)
    : postgresDatabaseLayer(config.database.url, config.database.poolSize, {
        statementTimeoutMs: config.database.statementTimeoutMs,
        ...(config.database.connectWithinMs !== undefined ? { connectWithinMs: config.database.connectWithinMs } : {})
      })
