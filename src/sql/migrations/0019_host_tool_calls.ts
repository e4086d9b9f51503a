import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Host tool calls (the host tool loop, src/services/tools/HostTools.ts) for `/gateway/usage`,
 * already summed when written: one row per UTC day, app, server, tool and outcome, holding the
 * calls and their latency sum. Each replica adds its calls to the row of their key (an upsert), so
 * the table grows with the days and the tools used, never with the calls: it needs no rollup.
 * The key, led by day and app, serves the report's range and app filters.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql`CREATE TABLE host_tool_calls (
      day TEXT NOT NULL,
      app TEXT NOT NULL,
      server TEXT NOT NULL,
      tool TEXT NOT NULL,
      outcome TEXT NOT NULL,
      calls BIGINT NOT NULL,
      latency_ms_sum DOUBLE PRECISION NOT NULL,
      PRIMARY KEY (day, app, server, tool, outcome)
    )`,
    orElse: () => sql`CREATE TABLE host_tool_calls (
      day TEXT NOT NULL,
      app TEXT NOT NULL,
      server TEXT NOT NULL,
      tool TEXT NOT NULL,
      outcome TEXT NOT NULL,
      calls INTEGER NOT NULL,
      latency_ms_sum REAL NOT NULL,
      PRIMARY KEY (day, app, server, tool, outcome)
    )`
  })
})
