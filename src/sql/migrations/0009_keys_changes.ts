import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Runtime key changes in order, so that every replica can keep its key cache current: each change
 * (create, revoke) takes the next number of a one-row counter inside its transaction and stamps
 * the row with it. The counter row stays locked until the change commits, so changes commit in
 * number order and a replica that has read every row up to a number has missed none below it.
 * The same statements on both dialects.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runtime_keys ADD COLUMN version BIGINT NOT NULL DEFAULT 0`
  yield* sql`CREATE INDEX runtime_keys_by_version ON runtime_keys (version)`
  yield* sql`CREATE TABLE runtime_keys_counter (id INTEGER PRIMARY KEY, version BIGINT NOT NULL)`
  yield* sql`INSERT INTO runtime_keys_counter (id, version) VALUES (1, 0)`
})
