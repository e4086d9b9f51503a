import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Rate-limit and budget counters shared by the replicas (src/domain/Quota.ts): each counter's
 * settled use, the slice of what remains each replica holds (its lease, forgotten when the
 * replica stops renewing it), and a runtime key's own limits and budgets (JSON; null: none).
 * Counters are whole numbers: calls, tokens, nano-USD.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE quota_counters (key TEXT PRIMARY KEY, used BIGINT NOT NULL, keep_until BIGINT)`
  yield* sql`CREATE TABLE quota_leases (replica TEXT NOT NULL, key TEXT NOT NULL, amount BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (replica, key))`
  yield* sql`CREATE INDEX quota_leases_key ON quota_leases (key, expires_at)`
  yield* sql`ALTER TABLE runtime_keys ADD COLUMN controls TEXT`
})
