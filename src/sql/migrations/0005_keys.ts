import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Runtime keys (spec 2.5): only the SHA-256 digest of each secret is kept. */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE runtime_keys (
    id TEXT PRIMARY KEY,
    app TEXT NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
  )`
})
