import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** The first migration: a key/value table for the gateway's own bookkeeping (schema version, start count). */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE gateway_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`
})
