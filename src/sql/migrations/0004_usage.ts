import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Usage accounting: one row per model call (every protocol, every candidate). */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE usage (
    id INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    day TEXT NOT NULL,
    app TEXT NOT NULL,
    user TEXT,
    key_id TEXT NOT NULL,
    protocol TEXT NOT NULL,
    route TEXT NOT NULL,
    requested_model TEXT NOT NULL,
    model TEXT,
    provider TEXT,
    session_id TEXT,
    status TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    reasoning_tokens INTEGER NOT NULL,
    latency_ms REAL NOT NULL,
    ttft_ms REAL
  )`
  yield* sql`CREATE INDEX usage_day_app ON usage (day, app)`
})
