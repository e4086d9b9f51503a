import type * as SqlClient from "@effect/sql/SqlClient"
import type { Layer } from "effect"
import { type Backend, postgresDatabaseLayer, sqliteLayer } from "../../src/sql/Database.js"
import type { WalSync } from "../../src/sql/WalSync.js"
import { freshDatabase, hasPostgres } from "./Postgres.js"

/**
 * The storage backends a store's tests run against: the same test bodies, the database Layer
 * swapped. SQLite always; PostgreSQL when the test server is there (always under CI), each
 * `open` on a database of its own, dropped by `close`.
 */
export interface BackendUnderTest {
  readonly kind: "sqlite" | "postgres"
  /** a fresh, migrated database (SQLite: in `dataDir`) */
  readonly open: (dataDir: string) => Promise<OpenDatabase>
}

export interface OpenDatabase {
  readonly layer: Layer.Layer<SqlClient.SqlClient | WalSync | Backend>
  /** PostgreSQL: the database's URL (several replicas can open it) */
  readonly url?: string
  readonly close: () => Promise<void>
}

export const sqliteBackend: BackendUnderTest = {
  kind: "sqlite",
  open: async (dataDir) => ({ layer: sqliteLayer(dataDir), close: async () => {} })
}

export const postgresBackend: BackendUnderTest = {
  kind: "postgres",
  open: async () => {
    const db = await freshDatabase()
    return { layer: postgresDatabaseLayer(db.redacted, 4) as Layer.Layer<SqlClient.SqlClient | WalSync | Backend>, url: db.url, close: db.drop }
  }
}

export const backends: ReadonlyArray<BackendUnderTest> = hasPostgres ? [sqliteBackend, postgresBackend] : [sqliteBackend]
