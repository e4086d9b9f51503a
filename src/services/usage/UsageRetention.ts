import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type * as Statement from "@effect/sql/Statement"
import { Cause, Clock, Context, Duration, Effect, Layer, Option, type ParseResult, Schedule, Schema } from "effect"
import { Log } from "../ops/Log.js"
import { yieldToEventLoop } from "../../sql/kit/StoredForm.js"
import { dayOf } from "./Usage.js"
import { HOUR_OF_ROW, MODEL_OF_ROW } from "./UsageReport.js"

/**
 * Bounded usage storage (`usage.retentionDays`): the raw usage rows of every whole UTC day that
 * ended `retentionDays` days ago or earlier are summed into `usage_rollups` (per hour, app, key id,
 * user and model; migration 0016) and deleted, so that reports (UsageReport.ts, which reads both
 * tables) give the same totals before and after.
 *
 * A sweep runs a minute after start, then hourly, in batches of at most `batchRows` raw rows with a
 * pause between two batches, so it never holds the database for long (SQLite: never blocks the
 * event loop for long). Each batch adds its rows to the rollups and deletes the same rows in one
 * transaction: a crash rolls back both, never counting a row twice nor losing one. On PostgreSQL a
 * batch first takes a transaction-scoped advisory lock: one replica sweeps at a time, another that
 * finds it taken leaves the run to it. The batch's rows are the ones its DELETE removed
 * (`RETURNING`), so even two sweeps at once could not count a row twice.
 */

export interface RetentionTimings {
  /** the first sweep after start (default 1 minute) */
  readonly firstAfter: Duration.DurationInput
  /** between the end of a sweep and the next (default 1 hour) */
  readonly every: Duration.DurationInput
  /** raw rows rolled up and deleted per transaction (default 1000: about 50 ms of SQLite work, commit included) */
  readonly batchRows: number
  /** between two batches of a sweep (default 50 ms) */
  readonly pause: Duration.DurationInput
}

const DEFAULT_TIMINGS: RetentionTimings = { firstAfter: "1 minute", every: "1 hour", batchRows: 1000, pause: "50 millis" }

const DAY_MS = 86_400_000

/** any 64-bit number, the same on every replica, other than the migration lock's */
const SWEEP_LOCK = 0x6c6c6d75 // "llmu"

/** What one sweep did. */
export interface SweepOutcome {
  /** raw rows rolled up and deleted */
  readonly rows: number
  readonly batches: number
  /** the days rolled up are those before this one (YYYY-MM-DD); absent without retention */
  readonly before?: string
}

const Batch = Schema.Struct({ before: Schema.String, limit: Schema.Number })
const Count = Schema.Struct({ n: Schema.Number })
const countOf = (row: Option.Option<typeof Count.Type>) => Option.match(row, { onNone: () => 0, onSome: ({ n }) => n })

/** Sums added to a rollup row when its key is rolled up again (rows of the day written late, a batch split the key). */
const SUMMED = [
  "requests",
  "errors",
  "input_tokens",
  "output_tokens",
  "cache_read_tokens",
  "cache_write_tokens",
  "reasoning_tokens",
  "cost_usd",
  "unpriced_calls",
  "latency_ms_sum",
  "ttft_ms_sum",
  "ttft_calls"
] as const
const COLUMNS = ["day", "hour", "app", "key_id", `"user"`, "model", ...SUMMED, "first_time", "first_id"].join(", ")

export class UsageRetention extends Context.Tag("gateway/UsageRetention")<
  UsageRetention,
  {
    /** absent: raw rows are kept forever and `sweep` does nothing */
    readonly retentionDays: number | undefined
    /** one sweep now (the periodic one calls this) */
    readonly sweep: Effect.Effect<SweepOutcome, SqlError | ParseResult.ParseError>
  }
>() {
  static readonly make = (retentionDays: number | undefined, timings: Partial<RetentionTimings> = {}) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      const { firstAfter, every, batchRows, pause } = { ...DEFAULT_TIMINGS, ...timings }

      /**
       * The rollup rows of `rows` (raw usage rows, a FROM and WHERE clause) with a user or without
       * one, added to the rows of the same key: each partial unique index is its own conflict target.
       */
      const rollUp = (rows: Statement.Fragment, withUser: boolean) => {
        const userIs = withUser ? `"user" IS NOT NULL` : `"user" IS NULL`
        const key = `day, app, hour, key_id, model${withUser ? `, "user"` : ""}`
        const earlier = (column: string) => `${column} = CASE WHEN excluded.${column} < usage_rollups.${column} THEN excluded.${column} ELSE usage_rollups.${column} END`
        return sql`INSERT INTO usage_rollups (${sql.literal(COLUMNS)})
          SELECT day, ${sql.literal(HOUR_OF_ROW)}, app, key_id, "user", ${sql.literal(MODEL_OF_ROW)},
            COUNT(*), SUM(CASE WHEN status <> 'ok' THEN 1 ELSE 0 END),
            SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens),
            COALESCE(SUM(cost_usd), 0), SUM(CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END),
            SUM(latency_ms), COALESCE(SUM(ttft_ms), 0), COUNT(ttft_ms), MIN(time), MIN(id)
          FROM ${rows} AND ${sql.literal(userIs)}
          GROUP BY day, ${sql.literal(HOUR_OF_ROW)}, app, key_id, "user", ${sql.literal(MODEL_OF_ROW)}
          ON CONFLICT (${sql.literal(key)}) WHERE ${sql.literal(userIs)} DO UPDATE SET
            ${sql.literal(SUMMED.map((c) => `${c} = usage_rollups.${c} + excluded.${c}`).join(", "))},
            ${sql.literal(earlier("first_time"))}, ${sql.literal(earlier("first_id"))}`
      }

      /** The batch: the oldest days' rows in the order of the (day, app) index, a total order. */
      const batchIds = ({ before, limit }: typeof Batch.Type) => sql`SELECT id FROM usage WHERE day < ${before} ORDER BY day, app, id LIMIT ${limit}`

      /** PostgreSQL: one statement; the rows rolled up are exactly the rows its DELETE removed. */
      const pgBatch = SqlSchema.findOne({
        Request: Batch,
        Result: Count,
        execute: (b) => sql`WITH gone AS (DELETE FROM usage WHERE id IN (${batchIds(b)}) RETURNING *),
          named AS (${rollUp(sql`gone WHERE true`, true)}),
          anonymous AS (${rollUp(sql`gone WHERE true`, false)})
          SELECT COUNT(*) AS n FROM gone`
      })
      const pgLock = SqlSchema.findOne({
        Request: Schema.Void,
        Result: Schema.Struct({ locked: Schema.Boolean }),
        execute: () => sql`SELECT pg_try_advisory_xact_lock(${SWEEP_LOCK}) AS locked`
      })

      /**
       * SQLite: the same batch (a total order) read by each statement of one transaction, which
       * holds the one connection: nothing writes in between.
       */
      const sqliteCount = SqlSchema.findOne({
        Request: Batch,
        Result: Count,
        execute: (b) => sql`SELECT COUNT(*) AS n FROM (${batchIds(b)})`
      })
      const sqliteRollUp = SqlSchema.void({
        Request: Batch,
        execute: (b) =>
          Effect.all(
            [
              rollUp(sql`usage WHERE id IN (${batchIds(b)})`, true),
              rollUp(sql`usage WHERE id IN (${batchIds(b)})`, false),
              sql`DELETE FROM usage WHERE id IN (${batchIds(b)})`
            ],
            { discard: true }
          )
      })

      /** One batch in one transaction: the number of raw rows rolled up, `None` when another replica is sweeping. */
      const batch = (b: typeof Batch.Type) =>
        sql.withTransaction(
          sql.onDialectOrElse({
            pg: () =>
              Effect.flatMap(pgLock(undefined), (lock) =>
                Option.exists(lock, ({ locked }) => locked) ? Effect.map(pgBatch(b), (row) => Option.some(countOf(row))) : Effect.succeedNone
              ),
            orElse: () =>
              Effect.flatMap(sqliteCount(b), (row) => {
                const n = countOf(row)
                return n === 0 ? Effect.succeed(Option.some(0)) : Effect.as(sqliteRollUp(b), Option.some(n))
              })
          })
        )

      const sweep: Effect.Effect<SweepOutcome, SqlError | ParseResult.ParseError> =
        retentionDays === undefined
          ? Effect.succeed({ rows: 0, batches: 0 })
          : Effect.gen(function* () {
              const before = dayOf((yield* Clock.currentTimeMillis) - retentionDays * DAY_MS)
              let rows = 0
              let batches = 0
              for (;;) {
                const done = yield* batch({ before, limit: batchRows })
                if (Option.isNone(done) || done.value === 0) break
                rows += done.value
                batches++
                if (done.value < batchRows) break
                // let requests and the usage flush in before the next batch
                yield* yieldToEventLoop
                if (Duration.toMillis(pause) > 0) yield* Effect.sleep(pause)
              }
              return { rows, batches, before }
            }).pipe(Effect.withSpan("UsageRetention.sweep"))

      if (retentionDays !== undefined) {
        const logged = sweep.pipe(
          Effect.tap((done) => Effect.sync(() => (done.rows > 0 ? log.info("usage.rolled_up", { rows: done.rows, batches: done.batches, before: done.before }) : undefined))),
          Effect.catchAllCause((cause) => Effect.sync(() => log.error("usage.sweep_failed", { reason: Cause.isDie(cause) ? "defect" : "database" })))
        )
        yield* Effect.forkScoped(Effect.delay(Effect.repeat(logged, Schedule.spaced(every)), firstAfter))
      }

      return UsageRetention.of({ retentionDays, sweep })
    })

  /** The sweep of `retentionDays` (none when absent), forked for the Layer's lifetime. */
  static readonly layer = (retentionDays: number | undefined, timings: Partial<RetentionTimings> = {}) =>
    Layer.scoped(UsageRetention, UsageRetention.make(retentionDays, timings))
}
