import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option, type ParseResult, Runtime, Schedule, Schema } from "effect"
import type { Usage as TokenUsage } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { Log } from "../ops/Log.js"
import { Metrics } from "../ops/Metrics.js"
import { longReads } from "../../sql/SqliteReader.js"
import { type HostCallRecord, makeHostCallBuffer } from "./HostCalls.js"
import { makeReport, noPercentiles, type UsageFilter, type UsageReport, zeroTotals } from "./UsageReport.js"

export type { Percentiles, Totals, UsageFilter, UsageReport } from "./UsageReport.js"
export type { HostCallRecord, HostToolUsage } from "./HostCalls.js"

/**
 * Usage accounting (spec 2.6, ARCHITECTURE "Usage record"): one record per model call, of every
 * protocol and every candidate. Recording only appends to an in-memory buffer; a fiber writes it
 * to the database once a second (and when it grows large, and at shutdown) in transactions of at
 * most `FLUSH_AT` rows, so the request path never waits on the database. A crash loses at most the
 * last second of records. While the database does not answer the records stay buffered (up to
 * `maxPending`; past it new records are dropped and counted in `/gateway/metrics`) and are written
 * when it answers again. Every replica writes its own; reports aggregate in SQL (UsageReport.ts).
 * Host tool calls are summed beside them and written by the same flush (HostCalls.ts).
 */

export interface UsageRecord {
  /** epoch ms when the call started */
  readonly time: number
  readonly app: string
  readonly user?: string
  readonly keyId: string
  /** the protocol family the request came in on */
  readonly protocol: string
  /** the route label */
  readonly route: string
  readonly requestedModel: string
  /** `<provider>/<model>` that answered (or was last tried) */
  readonly model?: string
  readonly provider?: string
  /** which of the provider's `apiKeys` answered (absent with one key) */
  readonly keyIndex?: number
  readonly sessionId?: string
  /** the client's own session, agent and parent agent (src/http/Attribution.ts) */
  readonly clientSession?: string
  readonly agent?: string
  readonly parentAgent?: string
  /** `ok`, or the error code the call failed with */
  readonly status: string
  readonly usage: TokenUsage
  /** USD from the answering model's price; null when it has none (unknown, never 0) */
  readonly costUsd?: number | null
  readonly latencyMs: number
  readonly ttftMs?: number
}

/** Who made a model call, for its usage record. */
export interface Caller {
  readonly keyId: string
  readonly user?: string
  readonly protocol: string
  readonly route: string
  readonly session?: string
  readonly agent?: string
  readonly parentAgent?: string
}

const FLUSH_EVERY = "1 second"
const FLUSH_AT = 2000
const ROWS_PER_INSERT = 40
/** records kept while the database does not answer (about 50 MB) */
export const MAX_PENDING = 100_000

export const dayOf = (time: number) => new Date(time).toISOString().slice(0, 10)

const NullableString = Schema.NullOr(Schema.String)

/** One row of the usage table as written. */
const UsageRow = Schema.Struct({
  time: Schema.Number,
  day: Schema.String,
  app: Schema.String,
  user: NullableString,
  key_id: Schema.String,
  protocol: Schema.String,
  route: Schema.String,
  requested_model: Schema.String,
  model: NullableString,
  provider: NullableString,
  key_index: Schema.NullOr(Schema.Number),
  session_id: NullableString,
  client_session: NullableString,
  agent: NullableString,
  parent_agent: NullableString,
  status: Schema.String,
  input_tokens: Schema.Number,
  output_tokens: Schema.Number,
  cache_read_tokens: Schema.Number,
  cache_write_tokens: Schema.Number,
  reasoning_tokens: Schema.Number,
  latency_ms: Schema.Number,
  ttft_ms: Schema.NullOr(Schema.Number),
  cost_usd: Schema.NullOr(Schema.Number)
})

/** PostgreSQL text cannot hold NUL (a model name from a request body may): stored without it on both backends. */
const text = (value: string) => (value.includes("\u0000") ? value.replaceAll("\u0000", "") : value)
const optionalText = (value: string | undefined) => (value === undefined ? null : text(value))

const rowOf = (r: UsageRecord): typeof UsageRow.Type => ({
  time: r.time,
  day: dayOf(r.time),
  app: text(r.app),
  user: optionalText(r.user),
  key_id: text(r.keyId),
  protocol: text(r.protocol),
  route: text(r.route),
  requested_model: text(r.requestedModel),
  model: optionalText(r.model),
  provider: optionalText(r.provider),
  key_index: r.keyIndex ?? null,
  session_id: optionalText(r.sessionId),
  client_session: optionalText(r.clientSession),
  agent: optionalText(r.agent),
  parent_agent: optionalText(r.parentAgent),
  status: text(r.status),
  input_tokens: r.usage.inputTokens,
  output_tokens: r.usage.outputTokens,
  cache_read_tokens: r.usage.cacheReadTokens,
  cache_write_tokens: r.usage.cacheWriteTokens,
  reasoning_tokens: r.usage.reasoningTokens,
  latency_ms: r.latencyMs,
  ttft_ms: r.ttftMs ?? null,
  cost_usd: r.costUsd ?? null
})

/** A report or lookup the database could not answer: 503, the caller may retry. */
const databaseDown = () => Errors.databaseUnavailable("Usage", 5)
const unreadable = () => Errors.internal("usage_unreadable", "The usage table holds rows the gateway could not read")
const toGatewayError = (error: { readonly _tag: "SqlError" | "ParseError" }): GatewayError => (error._tag === "SqlError" ? databaseDown() : unreadable())

/**
 * Whether a write failed for the values of the records it carried (a constraint, a value out of
 * range, text the database cannot hold), which writing them again cannot cure; not for the
 * database being unreachable, full, busy or missing the table, which passes.
 */
const refusedForItsValues = (error: SqlError | ParseResult.ParseError): boolean => {
  if (error._tag === "ParseError") return true
  const code: unknown = typeof error.cause === "object" && error.cause !== null && "code" in error.cause ? error.cause.code : undefined
  if (typeof code !== "string") return false
  // SQLite result codes; PostgreSQL SQLSTATE classes 22 (data exception), 23 (integrity), P0 (raised by a trigger)
  return /^SQLITE_(CONSTRAINT|MISMATCH|TOOBIG|RANGE)/.test(code) || /^(22|23|P0)[0-9A-Z]{3}$/.test(code)
}

export interface UsageOptions {
  /** records kept in memory while the database does not answer (default MAX_PENDING) */
  readonly maxPending?: number
}

export class UsageLog extends Context.Tag("gateway/Usage")<
  UsageLog,
  {
    readonly enabled: boolean
    /** append a record (never waits, never fails; dropped and counted past the buffer's bound) */
    readonly record: (record: UsageRecord) => void
    /** count a host tool call (never waits, never fails): in the report's `hostTools` */
    readonly recordHostCall: (call: HostCallRecord) => void
    /** write what is pending now (what the database refuses stays pending) */
    readonly flush: Effect.Effect<void>
    /** records not yet written */
    readonly pending: () => number
    /** the report of a filter, aggregated by the database; 503 when it does not answer */
    readonly report: (filter: UsageFilter) => Effect.Effect<UsageReport, GatewayError>
    /** whether any usage of this app is recorded (written or still pending) */
    readonly hasApp: (app: string) => Effect.Effect<boolean, GatewayError>
  }
>() {
  static readonly make = (enabled: boolean, options: UsageOptions = {}) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      const metrics = yield* Metrics
      const maxPending = options.maxPending ?? MAX_PENDING
      // a full batch is written at once from `record`, which runs outside any fiber
      const runtime = yield* Effect.runtime<never>()
      // oldest first; a flush removes what it wrote from the front, `record` appends at the end
      const pending: Array<UsageRecord> = []
      let kicked = false
      let failing = false
      const lock = yield* Effect.makeSemaphore(1)

      const insert = SqlSchema.void({
        Request: Schema.Array(UsageRow),
        execute: (rows) => sql`INSERT INTO usage ${sql.insert(rows)}`
      })
      const write = (batch: ReadonlyArray<UsageRecord>) =>
        sql.withTransaction(
          Effect.forEach(
            Array.from({ length: Math.ceil(batch.length / ROWS_PER_INSERT) }, (_, i) => batch.slice(i * ROWS_PER_INSERT, (i + 1) * ROWS_PER_INSERT)),
            (rows) => insert(rows.map(rowOf)),
            { discard: true }
          )
        )

      /** One transaction of the oldest pending records; they leave the buffer only once committed. */
      const writeOldest = Effect.suspend(() => {
        const batch = pending.slice(0, FLUSH_AT)
        // not interrupted between the commit and the removal: a record is never written twice
        return Effect.uninterruptible(Effect.tap(write(batch), () => Effect.sync(() => pending.splice(0, batch.length))))
      })

      /**
       * Some record of the batch is at fault (a value the database will not store): write the
       * batch's records one by one, dropping (and counting) the ones refused for what they hold,
       * rather than hold everything behind them. Any other failure stops here, the rest kept.
       */
      const writeOneByOne = Effect.suspend(() =>
        Effect.forEach(
          pending.slice(0, FLUSH_AT),
          (r) =>
            Effect.uninterruptible(
              write([r]).pipe(
                Effect.catchIf(refusedForItsValues, () =>
                  Effect.sync(() => {
                    metrics.usageRecordsDropped("refused", 1)
                    log.error("usage.record_refused", { app: r.app, route: r.route })
                  })
                ),
                Effect.zipRight(Effect.sync(() => pending.shift()))
              )
            ),
          { discard: true }
        )
      )

      const drain: Effect.Effect<void> = Effect.suspend(() =>
        pending.length === 0
          ? Effect.void
          : writeOldest.pipe(
              Effect.catchIf(refusedForItsValues, () => writeOneByOne),
              Effect.matchCauseEffect({
                onFailure: () =>
                  Effect.sync(() => {
                    // once per outage; the records wait for the next flush
                    if (!failing) log.error("usage.write_failed", { pending: pending.length })
                    failing = true
                  }),
                onSuccess: () => {
                  if (failing) log.info("usage.write_recovered", { pending: pending.length })
                  failing = false
                  return drain
                }
              })
            )
      )
      const hostCalls = makeHostCallBuffer(sql, log, refusedForItsValues)
      const flush = lock.withPermits(1)(Effect.zipRight(drain, hostCalls.drain))

      if (enabled) {
        yield* Effect.forkScoped(Effect.repeat(flush, Schedule.spaced(FLUSH_EVERY)))
        yield* Effect.addFinalizer(() =>
          Effect.tap(flush, () =>
            Effect.sync(() => {
              // the database did not answer the last flush: these are gone with the process
              if (pending.length > 0) log.error("usage.lost_at_shutdown", { records: pending.length })
              if (hostCalls.pending() > 0) log.error("usage.host_calls_lost_at_shutdown", { groups: hostCalls.pending() })
            })
          )
        )
      }

      const record = (r: UsageRecord) => {
        if (!enabled) return
        if (pending.length >= maxPending) return metrics.usageRecordsDropped("buffer_full", 1)
        pending.push(r)
        // one early flush at a time, none while the database is failing (the timer retries)
        if (pending.length >= FLUSH_AT && !kicked && !failing) {
          kicked = true
          Runtime.runFork(runtime)(Effect.ensuring(flush, Effect.sync(() => (kicked = false))))
        }
      }

      const recordHostCall = (call: HostCallRecord) => {
        if (!enabled) return
        hostCalls.add(dayOf(Date.now()), { ...call, app: text(call.app), server: text(call.server), tool: text(call.tool), outcome: text(call.outcome) })
      }

      // a report reads months of rows: on SQLite on a connection of its own, off the event loop
      const makeReportOf = yield* Effect.provideService(makeReport, SqlClient.SqlClient, yield* longReads)
      const report = (filter: UsageFilter) => Effect.zipRight(flush, Effect.mapError(makeReportOf(filter), toGatewayError))

      const anyOfApp = SqlSchema.findOne({
        Request: Schema.String,
        Result: Schema.Struct({ found: Schema.Number }),
        // rolled-up usage (usage.retentionDays) counts as recorded usage too
        execute: (app) => sql`SELECT 1 AS found FROM usage WHERE app = ${app} UNION ALL SELECT 1 AS found FROM usage_rollups WHERE app = ${app} LIMIT 1`
      })
      const hasApp = (app: string) =>
        pending.some((r) => r.app === app) ? Effect.succeed(true) : anyOfApp(app).pipe(Effect.map(Option.isSome), Effect.mapError(toGatewayError))

      return UsageLog.of({ enabled, record, recordHostCall, flush, pending: () => pending.length, report, hasApp })
    })

  static readonly layer = (enabled: boolean, options: UsageOptions = {}) => Layer.scoped(UsageLog, UsageLog.make(enabled, options))

  /** No accounting (tests of other services; `usage.enabled: false` still uses `layer`, for its 404s). */
  static readonly disabled = Layer.succeed(
    UsageLog,
    UsageLog.of({
      enabled: false,
      record: () => undefined,
      recordHostCall: () => undefined,
      flush: Effect.void,
      pending: () => 0,
      hasApp: () => Effect.succeed(false),
      report: (filter) =>
        Effect.succeed({
          from: filter.from,
          to: filter.to,
          app: filter.app ?? null,
          user: filter.user ?? null,
          session: filter.session ?? null,
          totals: { ...zeroTotals, latencyMs: noPercentiles, ttftMs: noPercentiles },
          days: [],
          topUsers: [],
          topSessions: [],
          ...(filter.session !== undefined ? { agents: [] } : {}),
          ...(filter.user === undefined && filter.session === undefined ? { hostTools: [] } : {})
        })
    })
  )
}
