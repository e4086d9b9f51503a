import { NodeContext } from "@effect/platform-node"
import { Migrator } from "@effect/sql"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-node"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import meta from "./migrations/0001_meta.js"
import responses from "./migrations/0002_responses.js"

/** Migrations by `<id>_<name>`, run in order at start. */
const migrations = Migrator.fromRecord({
  "0001_meta": meta,
  "0002_responses": responses
})

/**
 * The one SQLite database, `<dataDir>/gateway.db`, in WAL mode, migrated at start. Every store is
 * a Layer over its SqlClient.
 */
export const databaseLayer = (dataDir: string) => {
  const client = Layer.unwrapEffect(
    Effect.sync(() => {
      fs.mkdirSync(dataDir, { recursive: true })
      return SqliteClient.layer({ filename: path.join(dataDir, "gateway.db") })
    })
  )
  const migrated = SqliteMigrator.layer({ loader: migrations }).pipe(Layer.provide(NodeContext.layer))
  return Layer.provideMerge(migrated, client).pipe(Layer.orDie)
}
