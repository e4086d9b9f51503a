import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Context, Effect, Layer, Option, Runtime, Schedule, Schema } from "effect"
import type { Usage as TokenUsage } from "../domain/Canonical.js"
import { Log } from "./Log.js"

/**
 * Usage accounting (spec 2.6, ARCHITECTURE "Usage record"): one record per model call, of every
 * protocol and every candidate. Recording only appends to an in-memory batch; a fiber writes the
 * batch to SQLite once a second (and when it grows large, and at shutdown) in one transaction, so
 * the request path never waits on the database. A crash loses at most the last second of records.
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
  readonly sessionId?: string
  /** `ok`, or the error code the call failed with */
  readonly status: string
  readonly usage: TokenUsage
  readonly latencyMs: number
  readonly ttftMs?: number
}

/** Who made a model call, for its usage record. */
export interface Caller {
  readonly keyId: string
  readonly user?: string
  readonly protocol: string
  readonly route: string
}

export interface UsageFilter {
  readonly app?: string
  readonly user?: string
  /** YYYY-MM-DD, inclusive */
  readonly from: string
  readonly to: string
}

interface Totals {
  requests: number
  errors: number
  inputTokens: number
  outputTokens: number
  cacheReadTokens: number
  cacheWriteTokens: number
  reasoningTokens: number
}

export interface UsageReport {
  readonly from: string
  readonly to: string
  readonly app: string | null
  readonly user: string | null
  readonly totals: Totals & { readonly latencyMs: Percentiles; readonly ttftMs: Percentiles }
  readonly days: ReadonlyArray<{
    readonly day: string
    readonly models: ReadonlyArray<Totals & { readonly model: string; readonly latencyMs: Percentiles }>
    readonly apps: ReadonlyArray<Totals & { readonly app: string }>
  }>
  /** hourly totals (UTC, `YYYY-MM-DDTHH`) when the range is at most 7 days, for charts over time */
  readonly hours?: ReadonlyArray<Totals & { readonly hour: string }>
  /** the users with the most requests (at most 20) */
  readonly topUsers: ReadonlyArray<Totals & { readonly user: string }>
}

export interface Percentiles {
  readonly p50: number | null
  readonly p90: number | null
  readonly p99: number | null
}

const FLUSH_EVERY = "1 second"
const FLUSH_AT = 2000
const ROWS_PER_INSERT = 40

export const dayOf = (time: number) => new Date(time).toISOString().slice(0, 10)

const percentiles = (values: Array<number>): Percentiles => {
  if (values.length === 0) return { p50: null, p90: null, p99: null }
  values.sort((a, b) => a - b)
  const at = (q: number) => Math.round(values[Math.min(values.length - 1, Math.ceil(q * values.length) - 1)] * 100) / 100
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99) }
}

const zero = (): Totals => ({ requests: 0, errors: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 })

interface Row {
  readonly time: number
  readonly day: string
  readonly app: string
  readonly user: string | null
  readonly model: string | null
  readonly requested_model: string
  readonly status: string
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cache_read_tokens: number
  readonly cache_write_tokens: number
  readonly reasoning_tokens: number
  readonly latency_ms: number
  readonly ttft_ms: number | null
}

export class UsageLog extends Context.Tag("gateway/Usage")<
  UsageLog,
  {
    readonly enabled: boolean
    /** append a record (never waits, never fails) */
    readonly record: (record: UsageRecord) => void
    /** write what is pending now */
    readonly flush: Effect.Effect<void>
    readonly report: (filter: UsageFilter) => Effect.Effect<UsageReport>
    /** whether any usage of this app is recorded (written or still pending) */
    readonly hasApp: (app: string) => Effect.Effect<boolean>
  }
>() {
  static readonly make = (enabled: boolean) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      // a full batch is written at once from `record`, which runs outside any fiber
      const runtime = yield* Effect.runtime<never>()
      let pending: Array<UsageRecord> = []
      const lock = yield* Effect.makeSemaphore(1)

      const write = (batch: ReadonlyArray<UsageRecord>) =>
        sql.withTransaction(
          Effect.forEach(
            Array.from({ length: Math.ceil(batch.length / ROWS_PER_INSERT) }, (_, i) => batch.slice(i * ROWS_PER_INSERT, (i + 1) * ROWS_PER_INSERT)),
            (rows) =>
              sql`INSERT INTO usage ${sql.insert(
                rows.map((r) => ({
                  time: r.time,
                  day: dayOf(r.time),
                  app: r.app,
                  user: r.user ?? null,
                  key_id: r.keyId,
                  protocol: r.protocol,
                  route: r.route,
                  requested_model: r.requestedModel,
                  model: r.model ?? null,
                  provider: r.provider ?? null,
                  session_id: r.sessionId ?? null,
                  status: r.status,
                  input_tokens: r.usage.inputTokens,
                  output_tokens: r.usage.outputTokens,
                  cache_read_tokens: r.usage.cacheReadTokens,
                  cache_write_tokens: r.usage.cacheWriteTokens,
                  reasoning_tokens: r.usage.reasoningTokens,
                  latency_ms: r.latencyMs,
                  ttft_ms: r.ttftMs ?? null
                }))
              )}`,
            { discard: true }
          )
        )

      const flush = lock.withPermits(1)(
        Effect.suspend(() => {
          if (pending.length === 0) return Effect.void
          const batch = pending
          pending = []
          return write(batch).pipe(
            Effect.catchAllCause(() =>
              Effect.sync(() => {
                // keep the records for the next flush rather than lose them (bounded)
                pending = [...batch, ...pending].slice(-50_000)
                log.error("usage.write_failed", { records: batch.length })
              })
            )
          )
        })
      )

      if (enabled) {
        yield* Effect.forkScoped(Effect.repeat(flush, Schedule.spaced(FLUSH_EVERY)))
        yield* Effect.addFinalizer(() => flush)
      }

      const record = (r: UsageRecord) => {
        if (!enabled) return
        pending.push(r)
        if (pending.length >= FLUSH_AT) Runtime.runFork(runtime)(flush)
      }

      const report = (filter: UsageFilter) =>
        Effect.gen(function* () {
          yield* flush
          const rows = yield* Effect.orDie(
            sql<Row>`SELECT time, day, app, user, model, requested_model, status, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, latency_ms, ttft_ms
              FROM usage WHERE day >= ${filter.from} AND day <= ${filter.to}
              ${filter.app !== undefined ? sql`AND app = ${filter.app}` : sql``}
              ${filter.user !== undefined ? sql`AND user = ${filter.user}` : sql``}
              ORDER BY time`
          )
          const totals = zero()
          const latencies: Array<number> = []
          const ttfts: Array<number> = []
          const days = new Map<string, Map<string, { totals: Totals; latencies: Array<number> }>>()
          const dayApps = new Map<string, Map<string, Totals>>()
          const users = new Map<string, Totals>()
          const hourly = (Date.parse(filter.to) - Date.parse(filter.from)) / 86_400_000 < 7 ? new Map<string, Totals>() : undefined
          const add = (t: Totals, r: Row) => {
            t.requests++
            if (r.status !== "ok") t.errors++
            t.inputTokens += r.input_tokens
            t.outputTokens += r.output_tokens
            t.cacheReadTokens += r.cache_read_tokens
            t.cacheWriteTokens += r.cache_write_tokens
            t.reasoningTokens += r.reasoning_tokens
          }
          for (const r of rows) {
            add(totals, r)
            latencies.push(r.latency_ms)
            if (r.ttft_ms !== null) ttfts.push(r.ttft_ms)
            const model = r.model ?? r.requested_model
            let byModel = days.get(r.day)
            if (byModel === undefined) days.set(r.day, (byModel = new Map()))
            let entry = byModel.get(model)
            if (entry === undefined) byModel.set(model, (entry = { totals: zero(), latencies: [] }))
            add(entry.totals, r)
            entry.latencies.push(r.latency_ms)
            let byApp = dayApps.get(r.day)
            if (byApp === undefined) dayApps.set(r.day, (byApp = new Map()))
            let appTotals = byApp.get(r.app)
            if (appTotals === undefined) byApp.set(r.app, (appTotals = zero()))
            add(appTotals, r)
            if (hourly !== undefined) {
              const hour = new Date(r.time).toISOString().slice(0, 13)
              let hourTotals = hourly.get(hour)
              if (hourTotals === undefined) hourly.set(hour, (hourTotals = zero()))
              add(hourTotals, r)
            }
            if (r.user !== null) {
              let userTotals = users.get(r.user)
              if (userTotals === undefined) users.set(r.user, (userTotals = zero()))
              add(userTotals, r)
            }
          }
          return {
            from: filter.from,
            to: filter.to,
            app: filter.app ?? null,
            user: filter.user ?? null,
            totals: { ...totals, latencyMs: percentiles(latencies), ttftMs: percentiles(ttfts) },
            days: [...days].map(([day, byModel]) => ({
              day,
              models: [...byModel].map(([model, e]) => ({ model, ...e.totals, latencyMs: percentiles(e.latencies) })),
              apps: [...(dayApps.get(day) ?? new Map<string, Totals>())].map(([app, t]) => ({ app, ...t }))
            })),
            ...(hourly !== undefined ? { hours: [...hourly].sort((a, b) => a[0].localeCompare(b[0])).map(([hour, t]) => ({ hour, ...t })) } : {}),
            topUsers: [...users]
              .sort((a, b) => b[1].requests - a[1].requests)
              .slice(0, 20)
              .map(([user, t]) => ({ user, ...t }))
          } satisfies UsageReport
        })

      const anyOfApp = SqlSchema.findOne({
        Request: Schema.String,
        Result: Schema.Struct({ found: Schema.Number }),
        execute: (app) => sql`SELECT 1 AS found FROM usage WHERE app = ${app} LIMIT 1`
      })
      const hasApp = (app: string) =>
        pending.some((r) => r.app === app) ? Effect.succeed(true) : Effect.orDie(Effect.map(anyOfApp(app), Option.isSome))

      return UsageLog.of({ enabled, record, flush, report, hasApp })
    })

  static readonly layer = (enabled: boolean) => Layer.scoped(UsageLog, UsageLog.make(enabled))

  /** No accounting (tests of other services; `usage.enabled: false` still uses `layer`, for its 404s). */
  static readonly disabled = Layer.succeed(
    UsageLog,
    UsageLog.of({
      enabled: false,
      record: () => undefined,
      flush: Effect.void,
      hasApp: () => Effect.succeed(false),
      report: (filter) =>
        Effect.succeed({
          from: filter.from,
          to: filter.to,
          app: filter.app ?? null,
          user: filter.user ?? null,
          totals: { ...zero(), latencyMs: percentiles([]), ttftMs: percentiles([]) },
          days: [],
          topUsers: []
        })
    })
  )
}
