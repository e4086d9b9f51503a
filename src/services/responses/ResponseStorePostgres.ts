import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Effect, Either, Option, Schema, type Scope } from "effect"
import type { ParseError } from "effect/ParseResult"
import * as GroupCommit from "../../sql/kit/GroupCommit.js"
import { makeJsonWorker } from "../../sql/kit/JsonWorker.js"
import { Log } from "../ops/Log.js"
import {
  answeredAsFailed,
  commitDefect,
  defaultResponseStoreLimits,
  expiryOf,
  readFailed,
  storedFormOf,
  type ResponseStoreLimits,
  type ResponseStoreService,
  SAFE_ID,
  type StoredRecord,
  storeUnavailable
} from "./ResponseRecords.js"
import { throttledSweep } from "../../sql/kit/StoreKit.js"
import { joinPieces, parseStored, reasonOf, StoreFailure, yieldToEventLoop } from "../../sql/kit/StoredForm.js"

const SWEEP_EVERY_MS = 60_000
const BATCH = 500
/**
 * body bytes sent in one transaction (a batch past it is split). Nothing here holds the event loop
 * the way better-sqlite3 does, but a batch is one message built in memory: keep it bounded.
 */
const COMMIT_BYTES = 4 * 1024 * 1024
/** a row's own share of `COMMIT_BYTES` */
const ROW_WEIGHT = 1024

const Row = Schema.Struct({
  id: Schema.String,
  app: Schema.String,
  created_at: Schema.Number,
  expires_at: Schema.Number,
  bytes: Schema.Number,
  body: Schema.Uint8ArrayFromSelf
})
type Row = typeof Row.Type
const Live = Schema.Struct({ created_at: Schema.Number, body: Schema.Uint8ArrayFromSelf })
const Tally = Schema.Struct({ app: Schema.String, count: Schema.Number, bytes: Schema.Number })
const AppOnly = Schema.Struct({ app: Schema.String })
const AppAndId = Schema.Struct({ app: Schema.String, id: Schema.String })

const asBuffer = (bytes: Uint8Array) => (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))

/**
 * Stored responses on PostgreSQL, shared by every replica on the database: each record is its row
 * (`responses.body`, the same stored form a SQLite record file holds); nothing is on a replica's
 * disk and nothing about the store is kept in a replica's memory.
 *
 * The caps hold for the app as a whole, whichever replicas save: the records and bytes of each app
 * are counted in `response_tallies`, changed in the same transaction as the rows. A save batch is
 * one call of `save_responses` (migration 0010), one round trip and atomic: it inserts the rows and
 * upserts their apps' tallies, which locks each app's tally row (in app order, so two batches never
 * wait on each other in a cycle) until the commit and answers totals that count every committed
 * save of any replica; only an app over a cap then loses its oldest rows. A tally table rather
 * than `pg_advisory_xact_lock` and a COUNT/SUM: the common save (under the caps) reads no other
 * row, and the status page reads a few rows. Every other change to an app's rows (delete, the
 * retention sweep) takes its tally row first too, so row locks always follow tally locks.
 *
 * Saves that finish together share one statement (group commit); PostgreSQL answers a commit once
 * it is durable, so a save answers "stored" when its batch committed.
 */
export const makePostgresResponseStore = (
  limits: Partial<ResponseStoreLimits> = {}
): Effect.Effect<ResponseStoreService, SqlError | ParseError, SqlClient.SqlClient | Log | Scope.Scope> =>
  Effect.gen(function* () {
    const worker = yield* Effect.acquireRelease(Effect.sync(makeJsonWorker), (w) => w.close)
    const sql = yield* SqlClient.SqlClient
    const log = yield* Log
    const scope = yield* Effect.scope
    const caps = { ...defaultResponseStoreLimits, ...limits }
    const maxRecordBytes = Math.min(caps.maxRecordBytes, caps.maxBytes)

    /** a batch saved: rows inserted, tallies moved, apps over a cap evicted (`save_responses`, migration 0010), in one statement */
    const saveBatch = SqlSchema.void({
      Request: Schema.Array(Row),
      execute: (rows) =>
        sql`SELECT save_responses(${rows.map((row) => row.id)}, ${rows.map((row) => row.app)}, ${rows.map((row) => row.created_at)}, ${rows.map(
          (row) => row.expires_at
        )}, ${rows.map((row) => row.bytes)}, ${rows.map((row) => row.body)}, ${caps.maxRecords}, ${caps.maxBytes})`
    })
    const findLive = SqlSchema.findOne({
      Request: Schema.Struct({ ...AppAndId.fields, now: Schema.Number }),
      Result: Live,
      execute: ({ app, id, now }) => sql`SELECT created_at, body FROM responses WHERE id = ${id} AND app = ${app} AND expires_at > ${now}`
    })
    const lockApps = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: AppOnly,
      execute: (apps) => sql`SELECT app FROM response_tallies WHERE ${sql.in("app", apps)} ORDER BY app FOR UPDATE`
    })
    const deleteOne = SqlSchema.findOne({
      Request: AppAndId,
      Result: Schema.Struct({ expires_at: Schema.Number }),
      execute: ({ app, id }) => sql`WITH gone AS (DELETE FROM responses WHERE id = ${id} AND app = ${app} RETURNING bytes, expires_at),
        counted AS (UPDATE response_tallies SET count = count - 1, bytes = response_tallies.bytes - gone.bytes FROM gone WHERE response_tallies.app = ${app})
        SELECT expires_at FROM gone`
    })
    /** the apps of the next expired rows (a sweep batch locks their tallies first) */
    const expiredApps = SqlSchema.findAll({
      Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number }),
      Result: AppOnly,
      execute: ({ now, limit }) => sql`SELECT DISTINCT app FROM (SELECT app FROM responses WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}) e`
    })
    const deleteExpired = SqlSchema.findOne({
      Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number, apps: Schema.Array(Schema.String) }),
      Result: Schema.Struct({ n: Schema.Number }),
      execute: ({ now, limit, apps }) => sql`WITH gone AS (
          DELETE FROM responses WHERE seq IN (SELECT seq FROM responses WHERE expires_at <= ${now} AND ${sql.in("app", apps)} ORDER BY expires_at LIMIT ${limit})
          RETURNING app, bytes
        ), per AS (SELECT app, COUNT(*) AS n, SUM(bytes) AS b FROM gone GROUP BY app),
        counted AS (UPDATE response_tallies SET count = response_tallies.count - per.n, bytes = response_tallies.bytes - per.b FROM per WHERE response_tallies.app = per.app)
        SELECT COALESCE(SUM(n), 0) AS n FROM per`
    })
    const totals = SqlSchema.findAll({
      Request: Schema.Void,
      Result: Tally,
      execute: () => sql`SELECT app, count, bytes FROM response_tallies WHERE count > 0 ORDER BY app COLLATE "C"`
    })

    /** One batch of expired rows, in one transaction: their apps' tallies locked, then the rows deleted and counted off. */
    const sweepBatch = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      return yield* sql.withTransaction(
        Effect.gen(function* () {
          const expired = yield* expiredApps({ now, limit: BATCH })
          if (expired.length === 0) return 0
          const apps = (yield* lockApps(expired.map((row) => row.app))).map((row) => row.app)
          if (apps.length === 0) return 0
          return Option.match(yield* deleteExpired({ now, limit: BATCH, apps }), { onNone: () => 0, onSome: (row) => row.n })
        })
      )
    })
    const sweep = Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => Effect.zipLeft(sweepBatch, yieldToEventLoop) })
    const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "responses.sweep_failed" })

    /** One statement for `rows` (atomic on its own): all inserted, then each app over a cap loses its oldest rows (this batch's included). */
    const commit = (rows: ReadonlyArray<Row>) => saveBatch(rows)

    const databaseFailure = (error: unknown) => new StoreFailure({ reason: reasonOf(error instanceof SqlError ? error.cause : undefined, "database") })
    /** A batch of the writer: every row in one transaction; if it fails, each row alone, so that one bad row fails no other. */
    const runBatch = (rows: ReadonlyArray<Row>) =>
      Effect.gen(function* () {
        const together = yield* Effect.either(commit(rows))
        if (Either.isRight(together)) return Effect.succeed(rows.map(() => Either.right<void>(undefined)))
        if (rows.length === 1) return Effect.succeed([Either.left(databaseFailure(together.left))])
        const outcomes: Array<Either.Either<void, StoreFailure>> = []
        for (const row of rows) outcomes.push(Either.mapLeft(yield* Effect.either(commit([row])), databaseFailure))
        return Effect.succeed(outcomes)
      })
    const writer = yield* GroupCommit.make({
      run: runBatch,
      weight: (row: Row) => ROW_WEIGHT + row.body.length,
      maxWeight: COMMIT_BYTES,
      closed: () => new StoreFailure({ reason: "closed" })
    })

    const store = (record: StoredRecord, maxAgeDays: number) =>
      Effect.gen(function* () {
        const form = yield* storedFormOf(record, maxRecordBytes, log)
        if (Option.isNone(form)) return "skipped" as const
        const { bytes, pieces } = form.value
        const row = { id: record.id, app: record.app, created_at: record.createdAt, expires_at: expiryOf(record, maxAgeDays), bytes, body: joinPieces(pieces) }
        yield* writer.submit(row)
        return "stored" as const
      }).pipe(Effect.catchAllCause(answeredAsFailed(log, record)))

    yield* sweeper.started
    yield* sweep

    return {
      save: Effect.fn("ResponseStore.save")(function* (record, options) {
        yield* sweeper.maybe
        return yield* Effect.uninterruptible(store(record, options.maxAgeDays))
      }),
      get: Effect.fn("ResponseStore.get")(function* (app, id) {
        yield* sweeper.maybe
        if (!SAFE_ID.test(id)) return Option.none()
        const now = yield* Clock.currentTimeMillis
        const found = yield* findLive({ app, id, now }).pipe(Effect.catchAll(storeUnavailable(log, "responses.read_failed", { app, id })))
        if (Option.isNone(found)) return Option.none()
        const row = found.value
        return yield* parseStored(asBuffer(row.body), worker).pipe(
          Effect.map(({ response, input }): Option.Option<StoredRecord> => Option.some({ id, app, createdAt: row.created_at, response, input })),
          Effect.catchAll(readFailed(log, app, id))
        )
      }),
      remove: Effect.fn("ResponseStore.remove")(function* (app, id) {
        if (!SAFE_ID.test(id)) return false
        const now = yield* Clock.currentTimeMillis
        const row = yield* sql
          .withTransaction(Effect.zipRight(lockApps([app]), deleteOne({ app, id })))
          .pipe(Effect.catchSomeDefect(commitDefect), Effect.catchAll(storeUnavailable(log, "responses.remove_failed", { app, id })))
        return Option.isSome(row) && row.value.expires_at > now
      }),
      stats: () => totals().pipe(Effect.catchAll(storeUnavailable(log, "responses.stats_failed", {})))
    } satisfies ResponseStoreService
  })
