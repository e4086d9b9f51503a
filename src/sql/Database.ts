import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Migrator from "@effect/sql/Migrator"
import * as SqliteMigrator from "@effect/sql-sqlite-node/SqliteMigrator"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import meta from "./migrations/0001_meta.js"
import responses from "./migrations/0002_responses.js"
import files from "./migrations/0003_files.js"
import usage from "./migrations/0004_usage.js"
import keys from "./migrations/0005_keys.js"
import * as SqliteClient from "./SqliteClient.js"
import usageApp from "./migrations/0006_usage_app.js"
import responsesInline from "./migrations/0007_responses_inline.js"

/** Migrations by `<id>_<name>`, run in order at start. */
const migrations = Migrator.fromRecord({
  "0001_meta": meta,
  "0002_responses": responses,
  "0003_files": files,
  "0004_usage": usage,
  "0005_keys": keys,
  "0006_usage_app": usageApp,
  "0007_responses_inline": responsesInline
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
