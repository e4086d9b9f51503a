/**
 * Bytes per usage row (table and indexes) on SQLite and PostgreSQL, for issue 17's "bounded
 * storage": 100k rows shaped like real records (migrated schema, every index), then the sizes.
 * Run: npx tsx scratchpad/usage-row-bytes/measure.ts
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import Pg from "pg"
import { postgresDatabaseLayer, sqliteLayer } from "../../src/sql/Database.js"
import { startPostgres } from "../../test/support/PostgresServer.js"
import { Redacted } from "effect"

const N = 100_000
const rows = Array.from({ length: N }, (_, i) => ({
  time: 1_795_000_000_000 + i * 997,
  day: "2026-11-26",
  app: `team-${i % 7}`,
  user: i % 5 === 0 ? null : `user-${i % 113}@example.com`,
  key_id: `key_${(i % 13).toString(16).padStart(16, "0")}`,
  protocol: ["openai", "anthropic", "gemini"][i % 3],
  route: "chat.completions",
  requested_model: "claude-sonnet-4-5",
  model: "anthropic/claude-sonnet-4-5",
  provider: "anthropic",
  session_id: `ses_${(i % 997).toString(16).padStart(32, "0")}`,
  status: i % 50 === 0 ? "upstream_error" : "ok",
  input_tokens: 12_000 + (i % 5000),
  output_tokens: 300 + (i % 700),
  cache_read_tokens: 9_000 + (i % 3000),
  cache_write_tokens: i % 400,
  reasoning_tokens: i % 200,
  latency_ms: 1234.56 + (i % 1000),
  ttft_ms: 345.67 + (i % 100),
  cost_usd: 0.012345 + (i % 100) / 1e5
}))

const fill = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  for (let i = 0; i < N; i += 1000) yield* sql.withTransaction(sql`INSERT INTO usage ${sql.insert(rows.slice(i, i + 1000))}`)
})

const main = async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "usage-bytes-"))
  await Effect.runPromise(Effect.scoped(Effect.flatMap(Layer.build(sqliteLayer(dir)), (ctx) => Effect.provide(Effect.zipRight(fill, Effect.flatMap(SqlClient.SqlClient, (sql) => sql`PRAGMA wal_checkpoint(TRUNCATE)`)), ctx))))
  const sqliteBytes = fs.statSync(path.join(dir, "gateway.db")).size
  fs.rmSync(dir, { recursive: true, force: true })
  const server = await startPostgres()
  try {
    await Effect.runPromise(Effect.scoped(Effect.flatMap(Layer.build(postgresDatabaseLayer(Redacted.make(server.url), 4)), (ctx) => Effect.provide(fill, ctx))))
    const client = new Pg.Client({ connectionString: server.url })
    await client.connect()
    await client.query("VACUUM ANALYZE usage")
    const { rows: sizes } = await client.query("SELECT pg_relation_size('usage') AS heap, pg_indexes_size('usage') AS indexes, pg_total_relation_size('usage') AS total")
    await client.end()
    const s = sizes[0]
    process.stdout.write(
      `rows ${N}\nSQLite: whole database file ${sqliteBytes} bytes = ${(sqliteBytes / N).toFixed(1)} bytes/row (table and indexes; other tables empty)\n` +
        `PostgreSQL: heap ${s.heap} (${(s.heap / N).toFixed(1)}/row), indexes ${s.indexes} (${(s.indexes / N).toFixed(1)}/row), total ${s.total} (${(s.total / N).toFixed(1)}/row)\n`
    )
  } finally {
    server.stop()
  }
}
main()
