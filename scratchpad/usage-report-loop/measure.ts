/**
 * The event loop during one usage report over N rows on SQLite: the longest turn and the number of
 * turns while the report runs (a self-renewing setImmediate marks each turn). Run with
 * `node --import tsx scratchpad/usage-report-loop/measure.ts [rows]`.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Log } from "../../src/services/ops/Log.js"
import { Metrics } from "../../src/services/ops/Metrics.js"
import { UsageLog } from "../../src/services/usage/Usage.js"
import { sqliteLayer } from "../../src/sql/Database.js"

const rows = Number(process.argv[2] ?? 300_000)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "usage-loop-"))

/** N rows over 30 days of 2026-01: 5 apps, 8 models, 200 users, 3 keys */
export const fill = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${n - 1})
      INSERT INTO usage (time, day, app, "user", key_id, protocol, route, requested_model, model, provider, session_id, status,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, latency_ms, ttft_ms, cost_usd)
      SELECT t, strftime('%Y-%m-%d', t / 1000, 'unixepoch'), 'app-' || (i % 5), 'user-' || (i % 200), 'key_' || (i % 3), 'openai', 'chat',
        'model-' || (i % 8), 'mock/model-' || (i % 8), 'mock', NULL, CASE WHEN i % 50 = 0 THEN 'upstream_error' ELSE 'ok' END,
        i % 1000, i % 700, i % 13, i % 7, i % 5, (i * 7919) % 10000 / 10.0, CASE WHEN i % 3 = 0 THEN NULL ELSE (i * 104729) % 5000 / 10.0 END,
        CASE WHEN i % 11 = 0 THEN NULL ELSE (i % 1000) * 0.000001 END
      FROM (SELECT i, 1767225600000 + (i * 8640) % (30 * 86400000) AS t FROM n)`)
  )

const layer = UsageLog.layer(true).pipe(Layer.provideMerge(Layer.mergeAll(sqliteLayer(dir), Log.layerMemory([]), Metrics.layer)))

const program = Effect.gen(function* () {
  const started = performance.now()
  yield* Effect.orDie(fill(rows))
  console.log(`filled ${rows} rows in ${Math.round(performance.now() - started)} ms`)
  const log = yield* UsageLog
  for (let round = 0; round < 3; round++) {
    let turns = 0
    let worst = 0
    let last = performance.now()
    // setImmediate renewed each turn counts every turn (and keeps a core busy); a 1 ms timer
    // measures the longest gap without competing with the worker for the CPU
    const spin = process.env.MODE !== "timer"
    let immediate: NodeJS.Immediate | NodeJS.Timeout | undefined
    const turn = () => {
      const now = performance.now()
      worst = Math.max(worst, now - last)
      last = now
      turns++
      immediate = spin ? setImmediate(turn) : setTimeout(turn, 1)
    }
    immediate = spin ? setImmediate(turn) : setTimeout(turn, 1)
    const t0 = performance.now()
    const report = yield* log.report({ from: "2026-01-01", to: "2026-01-30" })
    const took = performance.now() - t0
    worst = Math.max(worst, performance.now() - last)
    if (spin) clearImmediate(immediate as NodeJS.Immediate)
    else clearTimeout(immediate as NodeJS.Timeout)
    console.log(`report: ${Math.round(took)} ms, ${turns} turns, longest turn ${Math.round(worst)} ms, requests ${report.totals.requests}`)
  }
})

Effect.runPromise(Effect.scoped(Effect.provide(program, layer))).finally(() => process.env.KEEP ? console.log(dir) : fs.rmSync(dir, { recursive: true, force: true }))
