import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Stored responses (Responses-style API): metadata only. The JSON of each record lives in
 * `<dataDir>/responses/<id>.json`, so large records never pass through the synchronous SQLite driver.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    // PostgreSQL: epoch ms need 64 bits; `seq` is the insertion order SQLite's rowid gives
    pg: () => sql`CREATE TABLE responses (
      seq BIGINT GENERATED ALWAYS AS IDENTITY,
      id TEXT PRIMARY KEY,
      app TEXT NOT NULL,
      created_at BIGINT NOT NULL,
      expires_at BIGINT NOT NULL,
      bytes BIGINT NOT NULL
    )`,
    orElse: () => sql`CREATE TABLE responses (
      id TEXT PRIMARY KEY,
      app TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      expires_at INTEGER NOT NULL,
      bytes INTEGER NOT NULL
    )`
  })
  // oldest-first eviction per app (the implicit rowid, or seq, breaks ties in insertion order)
  yield* sql`CREATE INDEX responses_app_created ON responses (app, created_at)`
  // the retention sweep
  yield* sql`CREATE INDEX responses_expires ON responses (expires_at)`
})
