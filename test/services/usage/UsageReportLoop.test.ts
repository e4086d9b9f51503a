import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { Log } from "../../../src/services/ops/Log.js"
import { Metrics } from "../../../src/services/ops/Metrics.js"
import { UsageLog } from "../../../src/services/usage/Usage.js"
import { makeReport } from "../../../src/services/usage/UsageReport.js"
import { sqliteLayer } from "../../../src/sql/Database.js"
import { driverModule } from "../../../src/sql/SqliteClient.js"

/**
 * The usage report on SQLite leaves the event loop free (issue 24). better-sqlite3 is
 * synchronous: a statement run on this thread holds the loop until it returns, and the report's
 * GROUP BY and percentile queries over many rows take seconds. The mechanism, counted rather than
 * timed: every statement better-sqlite3 runs on this thread is recorded with the turn of the
 * event loop it ran in (a self-renewing timer marks each turn). The report's queries run on a
 * worker thread's connection: none of them runs here, and the loop keeps turning meanwhile. The
 * same report computed the old way, on the gateway's own connection, is the contrast: every query
 * in one turn, no turn passing while it runs, and byte for byte the same answer.
 */

const ROWS = 200_000

/** `ROWS` usage rows over 30 days: 5 apps, 8 models, 200 users, 3 keys, some failures, some unpriced. */
const fill = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.unsafe(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS - 1})
    INSERT INTO usage (time, day, app, "user", key_id, protocol, route, requested_model, model, provider, session_id, status,
      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, latency_ms, ttft_ms, cost_usd)
    SELECT t, strftime('%Y-%m-%d', t / 1000, 'unixepoch'), 'app-' || (i % 5), 'user-' || (i % 200), 'key_' || (i % 3), 'openai', 'chat',
      'model-' || (i % 8), CASE WHEN i % 50 = 0 THEN NULL ELSE 'mock/model-' || (i % 8) END, 'mock', NULL,
      CASE WHEN i % 50 = 0 THEN 'upstream_error' ELSE 'ok' END,
      i % 1000, i % 700, i % 13, i % 7, i % 5, (i * 7919) % 10000 / 10.0, CASE WHEN i % 3 = 0 THEN NULL ELSE (i * 104729) % 5000 / 10.0 END,
      CASE WHEN i % 11 = 0 THEN NULL ELSE (i % 1000) * 0.000001 END
    FROM (SELECT i, 1767225600000 + i * ${(30 * 86_400_000) / ROWS} AS t FROM n)`)
).pipe(Effect.orDie)

type StatementMethod = (this: { readonly source: string }, ...params: Array<unknown>) => unknown
interface StatementPrototype {
  run: StatementMethod
  get: StatementMethod
  all: StatementMethod
  iterate: StatementMethod
}
const Database = createRequire(import.meta.url)(driverModule(Number(process.versions.napi))) as new (file: string) => {
  prepare(sql: string): object
  close(): void
}
/** The prototype of this thread's better-sqlite3 statements (a worker thread loads a module of its own). */
const statementPrototype = (): StatementPrototype => {
  const db = new Database(":memory:")
  try {
    return Object.getPrototypeOf(db.prepare("SELECT 1")) as StatementPrototype
  } finally {
    db.close()
  }
}

/** Run `effect` counting turns of the event loop and the statements run on this thread in each. */
const monitored = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const proto = statementPrototype()
    const methods = ["run", "get", "all", "iterate"] as const
    const originals = { run: proto.run, get: proto.get, all: proto.all, iterate: proto.iterate }
    let turn = 0
    const statements: Array<{ readonly turn: number; readonly sql: string }> = []
    for (const name of methods) {
      proto[name] = function (...params) {
        statements.push({ turn, sql: this.source })
        return originals[name].apply(this, params)
      }
    }
    // a timer renewed each turn marks the turns (a 1 ms timer, so as not to keep a core busy
    // beside the worker thread); a generous backstop in time: the longest gap between two
    let last = performance.now()
    let worstGap = 0
    let timer: NodeJS.Timeout | undefined
    const tick = () => {
      const now = performance.now()
      worstGap = Math.max(worstGap, now - last)
      last = now
      turn++
      timer = setTimeout(tick, 1)
    }
    timer = setTimeout(tick, 1)
    const started = performance.now()
    const result = yield* Effect.ensuring(
      effect,
      Effect.sync(() => {
        clearTimeout(timer)
        for (const name of methods) proto[name] = originals[name]
      })
    )
    const took = performance.now() - started
    worstGap = Math.max(worstGap, performance.now() - last)
    const usageStatements = statements.filter((s) => /\busage(_rollups)?\b/.test(s.sql))
    const perTurn = new Map<number, number>()
    for (const s of usageStatements) perTurn.set(s.turn, (perTurn.get(s.turn) ?? 0) + 1)
    return { result, turns: turn, usageStatements: usageStatements.length, mostInOneTurn: Math.max(0, ...perTurn.values()), worstGap, took }
  })

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "usage-report-loop-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

describe("the usage report on SQLite", () => {
  it.scopedLive(
    `over ${ROWS} rows leaves the event loop free: its queries run on a worker thread, none on this one, and the answer is the same`,
    () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const database = sqliteLayer(dir)
        yield* Effect.gen(function* () {
          yield* fill
          const filter = { from: "2026-01-01", to: "2026-01-30" }
          // the old way: the report's queries on the gateway's own connection, on this thread
          const onLoop = yield* monitored(Effect.flatMap(makeReport, (report) => report(filter)))
          // the report as served
          const log = yield* UsageLog
          const offLoop = yield* monitored(log.report(filter))

          // the same answer, byte for byte, and it covers every row
          expect(JSON.stringify(offLoop.result)).toBe(JSON.stringify(onLoop.result))
          expect(offLoop.result.totals.requests).toBe(ROWS)
          expect(offLoop.result.days).toHaveLength(30)
          expect(offLoop.result.topUsers).toHaveLength(20)

          // contrast: on this thread the whole report is one turn of the loop, all its queries in it
          expect(onLoop.turns).toBe(0)
          // per day by model, app and key; percentiles per day and model, and overall; top users and
          // top sessions (a range of 30 days has no hourly series)
          expect(onLoop.usageStatements).toBe(7)
          expect(onLoop.mostInOneTurn).toBe(onLoop.usageStatements)
          // served: no query over the usage rows runs on this thread, in any turn, and the loop
          // turned all along (it turns about once per millisecond when free)
          expect(offLoop.usageStatements).toBe(0)
          expect(offLoop.mostInOneTurn).toBe(0)
          expect(offLoop.turns).toBeGreaterThan(50)
          // backstop in time, generous for a busy machine: served, no single turn spans the whole
          // report (on this thread one turn is all of it); the counts above are the proof
          expect(onLoop.worstGap).toBeGreaterThanOrEqual(onLoop.took)
          expect(offLoop.worstGap).toBeLessThan(offLoop.took)
        }).pipe(Effect.provide(UsageLog.layer(true).pipe(Layer.provideMerge(Layer.mergeAll(database, Log.layerMemory([]), Metrics.layer)))))
      }),
    120_000
  )
})
