import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted, Schema, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { emptyUsage } from "../../../src/domain/Canonical.js"
import { Log } from "../../../src/services/ops/Log.js"
import { Metrics } from "../../../src/services/ops/Metrics.js"
import { UsageLog, type UsageFilter, type UsageRecord, type UsageReport } from "../../../src/services/usage/Usage.js"
import { postgresDatabaseLayer } from "../../../src/sql/Database.js"
import { backends, type BackendUnderTest, type OpenDatabase, postgresBackend } from "../../support/Backends.js"
import { startTcpProxy } from "../../support/TcpProxy.js"
import { hasPostgres } from "../../support/Postgres.js"
import { referenceReport, sampleRecords } from "./UsageReference.js"

/**
 * The usage log on every backend, the same bodies with the database Layer swapped: when records
 * reach the database (on Effect's clock, TestClock), what a report says (the SQL aggregation
 * against an in-memory reference of the report's definition, and the same on every backend), and
 * what happens while the database refuses writes. The gateway-level tests (test/gateway/usage.test.ts)
 * check the route over sockets.
 */

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "usage-log-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** A fresh migrated database of the backend, closed (PostgreSQL: dropped) at the end of the scope. */
const openDatabase = (backend: BackendUnderTest) =>
  Effect.flatMap(tempDir, (dir) =>
    Effect.acquireRelease(
      Effect.promise(() => backend.open(dir)),
      (db) => Effect.promise(() => db.close())
    )
  )

const recordOf = (user: string, app = "team-a"): UsageRecord => ({
  time: 0,
  app,
  user,
  keyId: "key_1",
  protocol: "openai",
  route: "chat",
  requestedModel: "mock/echo",
  model: "mock/echo",
  provider: "mock",
  status: "ok",
  usage: emptyUsage,
  latencyMs: 1
})

/** Run `effect` on a connection of its own to the database (not through the log). */
const direct = <A, E>(db: OpenDatabase, effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.orDie(Effect.provide(effect, db.layer))

/** Users of the rows in the database. */
const rowsIn = (db: OpenDatabase) =>
  direct(
    db,
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT "user" AS name FROM usage ORDER BY "user"`).pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(Schema.Struct({ name: Schema.String })))),
      Effect.map((rows) => rows.map((r) => r.name))
    )
  )

const record = (r: UsageRecord) => Effect.map(UsageLog, (log) => log.record(r))

/** Wait (in real time, bounded) until the log's flush fiber has written everything. */
const settled = Effect.gen(function* () {
  const log = yield* UsageLog
  for (let i = 0; i < 500 && log.pending() > 0; i++) yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
  expect(log.pending()).toBe(0)
})

const logLayer = (db: OpenDatabase, options: { readonly maxPending?: number } = {}) =>
  UsageLog.layer(true, options).pipe(Layer.provideMerge(Layer.mergeAll(db.layer, Log.layerMemory([]), Metrics.layer)))

/** A drop counter of `/gateway/metrics`. */
const droppedCount = (reason: "buffer_full" | "refused") =>
  Effect.map(Metrics, (metrics) => {
    const prefix = `gateway_usage_records_dropped_total{reason="${reason}"} `
    const line = metrics
      .render({ modelRequestsInFlight: 0, bodyBytesInFlight: 0, requestsInFlight: 0 })
      .split("\n")
      .find((l) => l.startsWith(prefix))
    return Number(line?.slice(prefix.length))
  })

/** A trigger refusing rows of the user `poison` (the database answers, but will not store that record). */
const refusePoison = (db: OpenDatabase) =>
  direct(
    db,
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.onDialectOrElse({
        pg: () =>
          Effect.zipRight(
            sql.unsafe(`CREATE FUNCTION refuse_poison() RETURNS trigger AS $$ BEGIN IF NEW."user" = 'poison' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`),
            sql.unsafe(`CREATE TRIGGER refuse_poison BEFORE INSERT ON usage FOR EACH ROW EXECUTE FUNCTION refuse_poison()`)
          ),
        orElse: () => sql.unsafe(`CREATE TRIGGER refuse_poison BEFORE INSERT ON usage WHEN NEW."user" = 'poison' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
      })
    )
  )

/** Make the table vanish and come back (on its own connection): writes and reads fail in between, as with the database gone. */
const renameUsage = (db: OpenDatabase, from: string, to: string) =>
  direct(db, Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`ALTER TABLE ${from} RENAME TO ${to}`)))

const FILTERS: ReadonlyArray<UsageFilter> = [
  // three days: hourly series
  { from: "2026-03-01", to: "2026-03-03" },
  // eight days: no hourly series
  { from: "2026-02-25", to: "2026-03-04" },
  { from: "2026-03-02", to: "2026-03-02" },
  { from: "2026-03-01", to: "2026-03-03", app: "team-b" },
  { from: "2026-03-01", to: "2026-03-03", user: "user-3" },
  { from: "2026-03-01", to: "2026-03-03", app: "team-a", user: "user-0" },
  // one client session: its totals, its agents
  { from: "2026-02-25", to: "2026-03-04", session: "session-0" },
  { from: "2026-03-01", to: "2026-03-03", app: "team-c", session: "session-3" },
  { from: "2026-03-01", to: "2026-03-03", session: "no-such-session" },
  // nothing in range
  { from: "2025-01-01", to: "2025-01-02" }
]

/** Reports per backend, compared with each other at the end. */
const reportsBy = new Map<string, ReadonlyArray<UsageReport>>()

for (const backend of backends) {
  describe(`UsageLog (${backend.kind})`, () => {
    it.scoped("a record is written by the flush a second later, without anyone reading usage", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          yield* record(recordOf("first"))
          yield* TestClock.adjust("1 second")
          yield* settled
          expect(yield* rowsIn(db)).toEqual(["first"])
          // half-way between two flushes (at 2 s and 3 s)
          yield* TestClock.adjust("1500 millis")
          yield* record(recordOf("second"))
          expect(yield* rowsIn(db)).not.toContain("second")
          yield* TestClock.adjust("499 millis")
          expect(yield* rowsIn(db)).not.toContain("second")
          yield* TestClock.adjust("1 millis")
          yield* settled
          expect(yield* rowsIn(db)).toEqual(["first", "second"])
        }).pipe(Effect.provide(logLayer(db)))
      }))

    it.scoped("records of the last second are written when the log is closed", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          yield* TestClock.adjust("1 second")
          yield* record(recordOf("last-second"))
          expect(yield* rowsIn(db)).toEqual([])
        }).pipe(Effect.provide(logLayer(db)))
        expect(yield* rowsIn(db)).toEqual(["last-second"])
      }))

    it.scoped("a report aggregated in SQL says what the report's definition says of the same rows", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        const records = sampleRecords()
        const reports = yield* Effect.gen(function* () {
          const log = yield* UsageLog
          for (const r of records) log.record(r)
          return yield* Effect.forEach(FILTERS, (filter) => log.report(filter))
        }).pipe(Effect.provide(logLayer(db)))
        FILTERS.forEach((filter, i) => expect(reports[i], JSON.stringify(filter)).toEqual(referenceReport(records, filter)))
        // the sample reaches every part of the report
        expect(reports[0].hours?.length).toBeGreaterThan(24)
        expect(reports[0].topUsers).toHaveLength(20)
        expect(reports[0].totals.ttftMs.p50).not.toBeNull()
        expect(reports[1].hours).toBeUndefined()
        // the session filters: a session's totals with its agents (the main one and its subagents)
        expect(reports[0].topSessions).toHaveLength(20)
        expect(reports[6].session).toBe("session-0")
        expect(reports[6].totals.requests).toBeGreaterThan(0)
        expect(reports[6].agents?.map((a) => a.agent)).toEqual(expect.arrayContaining([null, "agent-0", "agent-1"]))
        expect(reports[8].totals.requests).toBe(0)
        expect(reports[9].totals.requests).toBe(0)
        reportsBy.set(backend.kind, reports)
      }))

    it.scoped("nearest-rank percentiles rounded to two decimals; a failed call counts on the model it asked for", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        const report = yield* Effect.gen(function* () {
          const log = yield* UsageLog
          for (let i = 1; i <= 10; i++) log.record({ ...recordOf("u"), latencyMs: i + 0.004, ttftMs: i % 2 === 0 ? i / 3 : undefined })
          log.record({ ...recordOf("u"), model: undefined, requestedModel: "alias/fast", status: "upstream_error", latencyMs: 0.5 })
          return yield* log.report({ from: "1970-01-01", to: "1970-01-01" })
        }).pipe(Effect.provide(logLayer(db)))
        expect(report.totals).toMatchObject({ requests: 11, errors: 1, latencyMs: { p50: 5, p90: 9, p99: 10 }, ttftMs: { p50: 2, p90: 3.33, p99: 3.33 } })
        expect(report.days).toHaveLength(1)
        expect(report.days[0].models.map((m) => [m.model, m.requests, m.errors, m.latencyMs])).toEqual([
          ["mock/echo", 10, 0, { p50: 5, p90: 9, p99: 10 }],
          ["alias/fast", 1, 1, { p50: 0.5, p90: 0.5, p99: 0.5 }]
        ])
        expect(report.hours).toEqual([{ hour: "1970-01-01T00", requests: 11, errors: 1, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: null, unpricedCalls: 11 }])
      }))

    it.scoped("while the database refuses writes records stay buffered up to the bound (the rest counted), and are written when it is back", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          yield* renameUsage(db, "usage", "usage_away")
          for (const user of ["a", "b", "c"]) log.record(recordOf(user))
          yield* TestClock.adjust("1 second")
          // the report's own flush fails too, then its query: 503, the records kept
          const down = yield* Effect.flip(log.report({ from: "1970-01-01", to: "1970-01-01" }))
          expect([down.status, down.code]).toEqual([503, "database_unavailable"])
          expect(log.pending()).toBe(3)
          const lookup = yield* Effect.flip(log.hasApp("team-z"))
          expect(lookup.status).toBe(503)
          // pending records answer without the database
          expect(yield* log.hasApp("team-a")).toBe(true)
          for (const user of ["d", "e", "f", "g"]) log.record(recordOf(user))
          expect(log.pending()).toBe(5)
          expect(yield* droppedCount("buffer_full")).toBe(2)
          yield* TestClock.adjust("1 second")
          expect(log.pending()).toBe(5)
          yield* renameUsage(db, "usage_away", "usage")
          yield* TestClock.adjust("1 second")
          yield* settled
          expect(yield* rowsIn(db)).toEqual(["a", "b", "c", "d", "e"])
          const back = yield* log.report({ from: "1970-01-01", to: "1970-01-01" })
          expect(back.totals.requests).toBe(5)
          expect(yield* droppedCount("buffer_full")).toBe(2)
        }).pipe(Effect.provide(logLayer(db, { maxPending: 5 })))
        // nothing written twice
        expect(yield* rowsIn(db)).toEqual(["a", "b", "c", "d", "e"])
      }))

    it.scoped("a record the database refuses is dropped and counted, the records around it are written; NUL is left out of text", () =>
      Effect.gen(function* () {
        const db = yield* openDatabase(backend)
        yield* refusePoison(db)
        yield* Effect.gen(function* () {
          const log = yield* UsageLog
          for (const user of ["a", "poison", "b"]) log.record(recordOf(user))
          log.record({ ...recordOf("c"), requestedModel: "alias/\u0000x", model: undefined, status: "invalid_model" })
          yield* TestClock.adjust("1 second")
          yield* settled
          expect(yield* rowsIn(db)).toEqual(["a", "b", "c"])
          expect(yield* droppedCount("refused")).toBe(1)
          expect(yield* droppedCount("buffer_full")).toBe(0)
          const report = yield* log.report({ from: "1970-01-01", to: "1970-01-01" })
          expect(report.days[0].models.map((m) => m.model)).toEqual(["mock/echo", "alias/x"])
          // later records are written as usual, in one transaction again
          log.record(recordOf("d"))
          yield* TestClock.adjust("1 second")
          yield* settled
          expect(yield* rowsIn(db)).toEqual(["a", "b", "c", "d"])
        }).pipe(Effect.provide(logLayer(db)))
      }))
  })
}

describe("UsageLog across backends", () => {
  afterAll(() => reportsBy.clear())
  it.skipIf(backends.length < 2)("the same rows give the same report on every backend", () => {
    const [first, ...others] = [...reportsBy.values()]
    expect(reportsBy.size).toBe(backends.length)
    for (const reports of others) expect(reports).toEqual(first)
  })
})

describe.skipIf(!hasPostgres)("UsageLog with PostgreSQL lost while serving", () => {
  it.scoped("records wait in memory while the server is unreachable and are written when it is back, with no restart", () =>
    Effect.gen(function* () {
      const db = yield* openDatabase(postgresBackend)
      const target = new URL(db.url ?? "")
      const proxy = yield* Effect.acquireRelease(
        Effect.promise(() => startTcpProxy({ host: target.hostname, port: Number(target.port) })),
        (p) => Effect.promise(() => p.close())
      )
      const via = new URL(target)
      via.hostname = "127.0.0.1"
      via.port = String(proxy.port)
      const proxied: OpenDatabase = { layer: Layer.orDie(postgresDatabaseLayer(Redacted.make(via.toString()), 2)), close: async () => {} }
      yield* Effect.gen(function* () {
        const log = yield* UsageLog
        log.record(recordOf("a"))
        yield* TestClock.adjust("1 second")
        yield* settled
        expect(yield* rowsIn(db)).toEqual(["a"])

        yield* Effect.sync(() => proxy.cut())
        log.record(recordOf("b"))
        log.record(recordOf("c"))
        yield* TestClock.adjust("1 second")
        const down = yield* Effect.flip(log.report({ from: "1970-01-01", to: "1970-01-01" }))
        expect([down.status, down.code]).toEqual([503, "database_unavailable"])
        expect(log.pending()).toBe(2)

        yield* Effect.sync(() => proxy.restore())
        yield* TestClock.adjust("1 second")
        yield* settled
        expect(yield* rowsIn(db)).toEqual(["a", "b", "c"])
        expect((yield* log.report({ from: "1970-01-01", to: "1970-01-01" })).totals.requests).toBe(3)
        expect(yield* droppedCount("buffer_full")).toBe(0)
      }).pipe(Effect.provide(logLayer(proxied)))
    }))
})

describe.skipIf(!hasPostgres)("UsageLog on two replicas of one PostgreSQL", () => {
  it.scoped("each replica writes its own records; a report from either has them all", () =>
    Effect.gen(function* () {
      const db = yield* openDatabase(postgresBackend)
      // each build is a replica of its own: its own pool, buffer and flush fiber
      const replicas = [yield* Layer.build(logLayer(db)), yield* Layer.build(logLayer(db))]
      const records = sampleRecords()
      records.forEach((r, i) => Context.get(replicas[i % 2], UsageLog).record(r))
      const filter = FILTERS[0]
      // a report flushes only its own replica's buffer: the other's records arrive with its flush
      yield* TestClock.adjust("1 second")
      for (const replica of replicas) yield* Effect.provide(settled, replica)
      for (const replica of replicas) expect(yield* Context.get(replica, UsageLog).report(filter)).toEqual(referenceReport(records, filter))
    }))
})
