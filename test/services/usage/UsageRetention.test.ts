import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Log } from "../../../src/services/ops/Log.js"
import { Metrics } from "../../../src/services/ops/Metrics.js"
import { dayOf, UsageLog, type UsageFilter, type UsageRecord, type UsageReport } from "../../../src/services/usage/Usage.js"
import { noPercentiles } from "../../../src/services/usage/UsageReport.js"
import { type RetentionTimings, UsageRetention } from "../../../src/services/usage/UsageRetention.js"
import { backends, type BackendUnderTest, type OpenDatabase, postgresBackend } from "../../support/Backends.js"
import { hasPostgres } from "../../support/Postgres.js"
import { referenceReport, sampleRecords } from "./UsageReference.js"

/**
 * Usage retention on every backend: raw rows of whole UTC days older than `retentionDays` are
 * rolled up and deleted, and reports give the same sums before and after (percentiles: the raw
 * rows left). The sweep is run directly, and on its schedule under TestClock.
 */

const NOW = Date.parse("2026-03-04T12:00:00Z")
/** with two days kept at NOW, the days before 2026-03-02 are rolled up */
const RETENTION_DAYS = 2
const CUTOFF = "2026-03-02"
/** several rows per batch, keys split between batches, and no pause (TestClock would hold it) */
const TIMINGS: Partial<RetentionTimings> = { batchRows: 37, pause: 0 }

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "usage-retention-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const openDatabase = (backend: BackendUnderTest) =>
  Effect.flatMap(tempDir, (dir) =>
    Effect.acquireRelease(
      Effect.promise(() => backend.open(dir)),
      (db) => Effect.promise(() => db.close())
    )
  )

/** The usage log and the sweep over one database, as the gateway wires them. */
const layerOf = (db: OpenDatabase, retentionDays: number | undefined, timings: Partial<RetentionTimings> = TIMINGS, lines: Array<Record<string, unknown>> = []) =>
  Layer.mergeAll(UsageLog.layer(true), UsageRetention.layer(retentionDays, timings)).pipe(
    Layer.provideMerge(Layer.mergeAll(db.layer, Log.layerMemory(lines), Metrics.layer))
  )

/** The sweep alone (no flush fiber ticking on TestClock every second of a long adjust). */
const retentionOnly = (db: OpenDatabase, retentionDays: number | undefined, timings: Partial<RetentionTimings>, lines: Array<Record<string, unknown>> = []) =>
  UsageRetention.layer(retentionDays, timings).pipe(Layer.provideMerge(Layer.mergeAll(db.layer, Log.layerMemory(lines))))

/** Write records through a usage log of its own, closed once they are written. */
const write = (db: OpenDatabase, records: ReadonlyArray<UsageRecord>) =>
  Effect.flatMap(UsageLog, (log) => Effect.zipRight(Effect.sync(() => records.forEach((r) => log.record(r))), log.flush)).pipe(
    Effect.provide(UsageLog.layer(true).pipe(Layer.provide(Layer.mergeAll(db.layer, Log.layerMemory([]), Metrics.layer))))
  )

const direct = <A, E>(db: OpenDatabase, effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.orDie(Effect.provide(effect, db.layer))

const Days = Schema.Array(Schema.Struct({ day: Schema.String, n: Schema.Number }))
/** raw rows per day */
const rawDays = (db: OpenDatabase) =>
  direct(db, Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT day, COUNT(*) AS n FROM usage GROUP BY day ORDER BY day`).pipe(Effect.flatMap(Schema.decodeUnknown(Days))))

/** every rollup row, in key order */
const rollups = (db: OpenDatabase) =>
  direct(
    db,
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`SELECT * FROM usage_rollups ORDER BY day, app, hour, key_id, model, COALESCE("user", ''), "user" IS NULL`
    )
  )

/** a few more records: an app and a user seen only on an old day, and calls a month before */
const extraRecords = (): ReadonlyArray<UsageRecord> =>
  [0, 1, 2, 3].map((i) => ({
    time: Date.parse("2026-02-03T22:15:00Z") + i * 1_800_000,
    app: i < 2 ? "team-old" : "team-a",
    ...(i % 2 === 0 ? { user: "user-old" } : {}),
    keyId: "key_9",
    protocol: "openai",
    route: "chat",
    requestedModel: "p/m1",
    model: "p/m1",
    provider: "p",
    status: i === 3 ? "timeout" : "ok",
    costUsd: i === 1 ? null : 0.000125 * (i + 1),
    usage: { inputTokens: 100 * i, outputTokens: 7, cacheReadTokens: i, cacheWriteTokens: 0, reasoningTokens: 3 },
    latencyMs: 120 + i,
    ttftMs: 40
  }))

const FILTERS: ReadonlyArray<UsageFilter> = [
  // every day, no hourly series
  { from: "2026-02-01", to: "2026-03-04" },
  // hourly, reaching rolled-up days
  { from: "2026-02-26", to: "2026-03-02" },
  { from: "2026-03-01", to: "2026-03-03" },
  { from: "2026-02-01", to: "2026-03-04", app: "team-b" },
  { from: "2026-02-26", to: "2026-03-02", user: "user-3" },
  { from: "2026-02-01", to: "2026-03-04", app: "team-a", user: "user-0" },
  // rolled-up days only, and raw days only
  { from: "2026-02-03", to: "2026-02-03" },
  { from: "2026-03-02", to: "2026-03-03" }
]

/** A report without its percentiles and top sessions (the parts raw rows alone decide: rollups keep no session). */
const sumsOf = (report: UsageReport) => ({
  ...report,
  topSessions: undefined,
  totals: { ...report.totals, latencyMs: undefined, ttftMs: undefined },
  days: report.days.map((d) => ({ ...d, models: d.models.map((m) => ({ ...m, latencyMs: undefined })) }))
})

/** What a report says after the sweep: the sums of every record, the percentiles of the raw rows left. */
const expectedAfter = (all: ReadonlyArray<UsageRecord>, filter: UsageFilter): UsageReport => {
  const full = referenceReport(all, filter)
  const raw = referenceReport(
    all.filter((r) => dayOf(r.time) >= CUTOFF),
    filter
  )
  const rawModels = new Map(raw.days.flatMap((d) => d.models.map((m) => [`${d.day} ${m.model}`, m.latencyMs] as const)))
  return {
    ...full,
    totals: { ...full.totals, latencyMs: raw.totals.latencyMs, ttftMs: raw.totals.ttftMs },
    topSessions: raw.topSessions,
    days: full.days.map((d) => ({ ...d, models: d.models.map((m) => ({ ...m, latencyMs: rawModels.get(`${d.day} ${m.model}`) ?? noPercentiles })) }))
  }
}

const reportsOf = Effect.flatMap(UsageLog, (log) => Effect.forEach(FILTERS, (filter) => log.report(filter)))

for (const backend of backends) {
  describe(`UsageRetention (${backend.kind})`, () => {
    it.scoped("old days are rolled up and deleted in batches; every sum of every report is the same as before, percentiles are the raw rows'", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const db = yield* openDatabase(backend)
        const records = [...sampleRecords(), ...extraRecords()]
        const oldRecords = records.filter((r) => dayOf(r.time) < CUTOFF)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          for (const r of records) log.record(r)
          const before = yield* reportsOf
          FILTERS.forEach((filter, i) => expect(before[i], JSON.stringify(filter)).toEqual(referenceReport(records, filter)))
          const rawBefore = yield* rawDays(db)

          const done = yield* (yield* UsageRetention).sweep
          expect(done).toEqual({ rows: oldRecords.length, batches: Math.ceil(oldRecords.length / 37), before: CUTOFF })

          // raw rows of the old days are gone, the others untouched
          expect(yield* rawDays(db)).toEqual(rawBefore.filter((d) => d.day >= CUTOFF))
          expect(rawBefore.some((d) => d.day < CUTOFF)).toBe(true)
          // the rollups hold every call rolled up, each key once
          const rows = (yield* rollups(db)) as ReadonlyArray<Record<string, unknown>>
          expect(rows.length).toBeGreaterThan(0)
          expect(rows.length).toBeLessThan(oldRecords.length)
          expect(rows.reduce((n, r) => n + Number(r.requests), 0)).toBe(oldRecords.length)
          expect(new Set(rows.map((r) => r.day))).toEqual(new Set(["2026-02-03", "2026-02-26", "2026-03-01"]))

          const after = yield* reportsOf
          FILTERS.forEach((filter, i) => {
            expect(sumsOf(after[i]), JSON.stringify(filter)).toEqual(sumsOf(before[i]))
            expect(after[i], JSON.stringify(filter)).toEqual(expectedAfter(records, filter))
          })
          // the parts the comparison covers are there
          expect(after[0].totals.costUsd).toBeGreaterThan(0)
          expect(after[0].totals.unpricedCalls).toBeGreaterThan(0)
          expect(after[0].totals.errors).toBeGreaterThan(0)
          expect(after[0].topUsers).toHaveLength(20)
          expect(after[1].hours?.length).toBeGreaterThan(24)
          expect(after[6].totals).toMatchObject({ requests: 4, errors: 1, unpricedCalls: 1, costUsd: 0.001, latencyMs: noPercentiles, ttftMs: noPercentiles })
          // a report of raw days only is unchanged, percentiles included
          expect(after[7]).toEqual(before[7])
          // an app whose usage is all rolled up is still known
          expect(yield* log.hasApp("team-old")).toBe(true)
        }).pipe(Effect.provide(layerOf(db, RETENTION_DAYS)))
      }))

    it.scoped("a second sweep changes nothing; rows of an old day written late are added to their rollup row", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const db = yield* openDatabase(backend)
        const records = [...sampleRecords(), ...extraRecords()]
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          const retention = yield* UsageRetention
          for (const r of records) log.record(r)
          yield* log.flush
          expect((yield* retention.sweep).rows).toBeGreaterThan(0)
          const rolled = yield* rollups(db)
          const raw = yield* rawDays(db)
          const reports = yield* reportsOf

          expect(yield* retention.sweep).toEqual({ rows: 0, batches: 0, before: CUTOFF })
          expect(yield* rollups(db)).toEqual(rolled)
          expect(yield* rawDays(db)).toEqual(raw)
          expect(yield* reportsOf).toEqual(reports)

          // a replica's buffered records of an old day, written after the sweep (a database outage)
          const late = extraRecords().map((r) => ({ ...r, time: r.time + 60_000 }))
          for (const r of late) log.record(r)
          yield* log.flush
          expect(yield* retention.sweep).toEqual({ rows: late.length, batches: 1, before: CUTOFF })
          expect((yield* rollups(db)).length).toBe(rolled.length)
          const all = [...records, ...late]
          const after = yield* reportsOf
          FILTERS.forEach((filter, i) => expect(after[i], JSON.stringify(filter)).toEqual(expectedAfter(all, filter)))
        }).pipe(Effect.provide(layerOf(db, RETENTION_DAYS)))
      }))

    it.scoped("the sweep runs a minute after start, then hourly, and logs counts only", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const db = yield* openDatabase(backend)
        const lines: Array<Record<string, unknown>> = []
        const oldRaw = Effect.map(rawDays(db), (days) => days.filter((d) => d.day < CUTOFF).reduce((n, d) => n + d.n, 0))
        /** until the forked sweep has run (bounded, in real time: PostgreSQL answers asynchronously) */
        const swept = Effect.gen(function* () {
          for (let i = 0; i < 500 && (yield* oldRaw) > 0; i++) yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
        })
        const aWhile = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))
        yield* write(db, extraRecords())
        yield* Effect.gen(function* () {
          yield* TestClock.adjust("59 seconds")
          yield* aWhile
          expect(yield* oldRaw).toBe(4)
          yield* TestClock.adjust("1 second")
          yield* swept
          expect(yield* oldRaw).toBe(0)

          yield* write(
            db,
            extraRecords().map((r) => ({ ...r, time: r.time + 1 }))
          )
          yield* TestClock.adjust("59 minutes")
          yield* aWhile
          expect(yield* oldRaw).toBe(4)
          yield* TestClock.adjust("1 minute")
          yield* swept
          expect(yield* oldRaw).toBe(0)
        }).pipe(Effect.provide(retentionOnly(db, RETENTION_DAYS, { pause: 0 }, lines)))
        const report = yield* Effect.flatMap(UsageLog, (log) => log.report({ from: "2026-02-03", to: "2026-02-03" })).pipe(Effect.provide(layerOf(db, undefined)))
        expect(report.totals.requests).toBe(8)
        expect(lines.map(({ time: _, ...l }) => l)).toEqual([
          { level: "info", event: "usage.rolled_up", rows: 4, batches: 1, before: CUTOFF },
          { level: "info", event: "usage.rolled_up", rows: 4, batches: 1, before: CUTOFF }
        ])
      }))

    it.scoped("without retentionDays nothing is rolled up", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const db = yield* openDatabase(backend)
        yield* write(db, extraRecords())
        yield* Effect.gen(function* () {
          yield* TestClock.adjust("2 hours")
          expect(yield* (yield* UsageRetention).sweep).toEqual({ rows: 0, batches: 0 })
          expect(yield* rawDays(db)).toEqual([{ day: "2026-02-03", n: 4 }])
          expect(yield* rollups(db)).toEqual([])
        }).pipe(Effect.provide(retentionOnly(db, undefined, {})))
      }))
  })
}

describe.skipIf(!hasPostgres)("UsageRetention on two replicas of one PostgreSQL", () => {
  it.scoped("sweeps at once on two replicas roll every old row up once", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const db = yield* openDatabase(postgresBackend)
      const records = [...sampleRecords(), ...extraRecords()]
      // each build is a replica of its own: its own pool and sweep
      const replicas = [yield* Layer.build(layerOf(db, RETENTION_DAYS, { batchRows: 10, pause: 0 })), yield* Layer.build(layerOf(db, RETENTION_DAYS, { batchRows: 10, pause: 0 }))]
      const log = Context.get(replicas[0], UsageLog)
      for (const r of records) log.record(r)
      yield* log.flush
      const outcomes = yield* Effect.all(
        replicas.map((replica) => Context.get(replica, UsageRetention).sweep),
        { concurrency: "unbounded" }
      )
      expect(outcomes.reduce((n, o) => n + o.rows, 0)).toBe(records.filter((r) => dayOf(r.time) < CUTOFF).length)
      expect((yield* rawDays(db)).every((d) => d.day >= CUTOFF)).toBe(true)
      for (const replica of replicas) {
        const reports = yield* Effect.provide(reportsOf, replica)
        FILTERS.forEach((filter, i) => expect(reports[i], JSON.stringify(filter)).toEqual(expectedAfter(records, filter)))
      }
    }))
})
