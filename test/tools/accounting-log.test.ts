import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Log } from "../../src/services/ops/Log.js"
import { Metrics } from "../../src/services/ops/Metrics.js"
import { type HostCallRecord, UsageLog } from "../../src/services/usage/Usage.js"
import { backends, type BackendUnderTest, type OpenDatabase } from "../support/Backends.js"

/**
 * Host tool calls in the usage log, on every backend: summed per day, app, server, tool and
 * outcome by the log's flush (one row per group, however many calls), reported per app with
 * count and total and mean latency, left out of a report by user; while the database refuses the
 * write the sums wait in memory, and calls that come meanwhile join them: each call is written
 * once. The route over sockets is test/tools/accounting.test.ts.
 */

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "host-calls-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const openDatabase = (backend: BackendUnderTest) =>
  Effect.flatMap(tempDir, (dir) =>
    Effect.acquireRelease(
      Effect.promise(() => backend.open(dir)),
      (db) => Effect.promise(() => db.close())
    )
  )

const logLayer = (db: OpenDatabase) => UsageLog.layer(true).pipe(Layer.provideMerge(Layer.mergeAll(db.layer, Log.layerMemory([]), Metrics.layer)))

/** Run `effect` on a connection of its own to the database (not through the log). */
const direct = <A, E>(db: OpenDatabase, effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.orDie(Effect.provide(effect, db.layer))

const StoredRow = Schema.Struct({ app: Schema.String, tool: Schema.String, outcome: Schema.String, calls: Schema.Number, latency_ms_sum: Schema.Number })

/** The stored groups, as written. */
const storedRows = (db: OpenDatabase) =>
  direct(
    db,
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT app, tool, outcome, calls, latency_ms_sum FROM host_tool_calls ORDER BY app, tool, outcome`).pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(StoredRow)))
    )
  )

const renameTable = (db: OpenDatabase, from: string, to: string) =>
  direct(db, Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`ALTER TABLE ${from} RENAME TO ${to}`)))

const call = (app: string, tool: string, outcome: string, latencyMs: number): HostCallRecord => ({ app, server: "files", tool, outcome, latencyMs })

/** Days around today: a call's day is the day it ended. */
const DAY_MS = 86_400_000
const range = () => ({ from: new Date(Date.now() - DAY_MS).toISOString().slice(0, 10), to: new Date(Date.now() + DAY_MS).toISOString().slice(0, 10) })

for (const backend of backends) {
  describe(`host tool calls in the usage log (${backend.kind})`, () => {
    it.scoped("are summed per app, server, tool and outcome, with count, total and mean latency", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          log.recordHostCall(call("team-a", "read_text_file", "ok", 10))
          log.recordHostCall(call("team-a", "read_text_file", "ok", 20.126))
          log.recordHostCall(call("team-a", "read_text_file", "timeout", 30_000))
          log.recordHostCall(call("team-a", "list_directory", "error", 0))
          log.recordHostCall(call("team-b", "read_text_file", "failed", 3))
          const all = yield* log.report(range())
          expect(all.hostTools).toEqual([
            { app: "team-a", server: "files", tool: "list_directory", outcome: "error", calls: 1, latencyMs: { total: 0, avg: 0 } },
            { app: "team-a", server: "files", tool: "read_text_file", outcome: "ok", calls: 2, latencyMs: { total: 30.13, avg: 15.06 } },
            { app: "team-a", server: "files", tool: "read_text_file", outcome: "timeout", calls: 1, latencyMs: { total: 30_000, avg: 30_000 } },
            { app: "team-b", server: "files", tool: "read_text_file", outcome: "failed", calls: 1, latencyMs: { total: 3, avg: 3 } }
          ])
          // one row per group, written once
          expect((yield* storedRows(db)).map((r) => r.calls)).toEqual([1, 2, 1, 1])

          // more calls of a group add to its row
          log.recordHostCall(call("team-b", "read_text_file", "failed", 5))
          const teamB = yield* log.report({ ...range(), app: "team-b" })
          expect(teamB.hostTools).toEqual([{ app: "team-b", server: "files", tool: "read_text_file", outcome: "failed", calls: 2, latencyMs: { total: 8, avg: 4 } }])
          expect(yield* storedRows(db)).toHaveLength(4)

          // counted per app, not per user; another range has none
          expect(yield* log.report({ ...range(), user: "someone" })).not.toHaveProperty("hostTools")
          expect((yield* log.report({ from: "2020-01-01", to: "2020-01-02" })).hostTools).toEqual([])
        }).pipe(Effect.provide(logLayer(db)))
      }))

    it.scoped("while the database refuses the write the sums wait, calls that come meanwhile join them, and each call is written once", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          // past the periodic flushes at 0 and 1 s (TestClock): only this test's flushes run
          yield* TestClock.adjust("1 second")
          yield* renameTable(db, "host_tool_calls", "host_tool_calls_away")
          log.recordHostCall(call("team-a", "search", "ok", 1))
          log.recordHostCall(call("team-a", "search", "ok", 2))
          yield* log.flush
          log.recordHostCall(call("team-a", "search", "ok", 4))
          log.recordHostCall(call("team-a", "fetch", "ok", 8))
          yield* log.flush
          yield* renameTable(db, "host_tool_calls_away", "host_tool_calls")
          expect(yield* storedRows(db)).toEqual([])
          yield* log.flush
          expect(yield* storedRows(db)).toEqual([
            { app: "team-a", tool: "fetch", outcome: "ok", calls: 1, latency_ms_sum: 8 },
            { app: "team-a", tool: "search", outcome: "ok", calls: 3, latency_ms_sum: 7 }
          ])
          yield* log.flush
        }).pipe(Effect.provide(logLayer(db)))
        // nothing left to write at close, nothing written twice
        expect((yield* storedRows(db)).map((r) => r.calls)).toEqual([1, 3])
      }))

    it.scoped("calls of the last second are written when the log is closed", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          // after the periodic flush at 1 s (TestClock), before the one at 2 s
          yield* TestClock.adjust("1 second")
          log.recordHostCall(call("team-a", "search", "ok", 1))
          expect(yield* storedRows(db)).toEqual([])
        }).pipe(Effect.provide(logLayer(db)))
        expect(yield* storedRows(db)).toEqual([{ app: "team-a", tool: "search", outcome: "ok", calls: 1, latency_ms_sum: 1 }])
      }))
  })
}

describe("host tool calls with accounting off", () => {
  it.effect("are not kept; the report of the disabled log has none", () =>
    Effect.gen(function* () {
      const log = yield* UsageLog
      log.recordHostCall(call("team-a", "search", "ok", 1))
      expect((yield* log.report(range())).hostTools).toEqual([])
    }).pipe(Effect.provide(UsageLog.disabled))
  )
})
