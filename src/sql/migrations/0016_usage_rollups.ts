import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Usage rollups (`usage.retentionDays`, UsageRetention.ts): the raw usage rows of old days summed
 * per UTC hour, app, key id, user and model (the answering model, else the requested one: the
 * model a report counts a call on), one row per key. Each holds every sum a report shows
 * (requests, failed calls, tokens by kind, cost of the priced calls, unpriced calls), the latency
 * and TTFT sums, and where its first raw row was (`first_time`, `first_id`: a report lists groups
 * in the order they first occur). `day` is the hour's UTC day, for the report's range filter.
 *
 * A call without a user has a NULL `user`, and NULLs are distinct in a unique index: two partial
 * unique indexes (with a user, without one) make the key unique either way, and a sweep's upsert
 * names the one it targets.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql`CREATE TABLE usage_rollups (
      day TEXT NOT NULL,
      hour BIGINT NOT NULL,
      app TEXT NOT NULL,
      key_id TEXT NOT NULL,
      "user" TEXT,
      model TEXT NOT NULL,
      requests BIGINT NOT NULL,
      errors BIGINT NOT NULL,
      input_tokens BIGINT NOT NULL,
      output_tokens BIGINT NOT NULL,
      cache_read_tokens BIGINT NOT NULL,
      cache_write_tokens BIGINT NOT NULL,
      reasoning_tokens BIGINT NOT NULL,
      cost_usd DOUBLE PRECISION NOT NULL,
      unpriced_calls BIGINT NOT NULL,
      latency_ms_sum DOUBLE PRECISION NOT NULL,
      ttft_ms_sum DOUBLE PRECISION NOT NULL,
      ttft_calls BIGINT NOT NULL,
      first_time BIGINT NOT NULL,
      first_id BIGINT NOT NULL
    )`,
    orElse: () => sql`CREATE TABLE usage_rollups (
      day TEXT NOT NULL,
      hour INTEGER NOT NULL,
      app TEXT NOT NULL,
      key_id TEXT NOT NULL,
      user TEXT,
      model TEXT NOT NULL,
      requests INTEGER NOT NULL,
      errors INTEGER NOT NULL,
      input_tokens INTEGER NOT NULL,
      output_tokens INTEGER NOT NULL,
      cache_read_tokens INTEGER NOT NULL,
      cache_write_tokens INTEGER NOT NULL,
      reasoning_tokens INTEGER NOT NULL,
      cost_usd REAL NOT NULL,
      unpriced_calls INTEGER NOT NULL,
      latency_ms_sum REAL NOT NULL,
      ttft_ms_sum REAL NOT NULL,
      ttft_calls INTEGER NOT NULL,
      first_time INTEGER NOT NULL,
      first_id INTEGER NOT NULL
    )`
  })
  // the key; led by day and app, it also serves the report's range and app filters
  yield* sql`CREATE UNIQUE INDEX usage_rollups_key ON usage_rollups (day, app, hour, key_id, model, "user") WHERE "user" IS NOT NULL`
  yield* sql`CREATE UNIQUE INDEX usage_rollups_key_no_user ON usage_rollups (day, app, hour, key_id, model) WHERE "user" IS NULL`
  // the report filtered by user, and whether an app has any usage (as on the usage table)
  yield* sql`CREATE INDEX usage_rollups_user_day ON usage_rollups ("user", day)`
  yield* sql`CREATE INDEX usage_rollups_app ON usage_rollups (app)`
})
