import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, type ParseResult, Schema } from "effect"
import { type HostToolUsage, makeHostToolsReport } from "./HostCalls.js"

/**
 * The usage report (`/gateway/usage`), aggregated by the database: totals, per-day breakdowns,
 * hourly series, top users and latency percentiles come out of GROUP BY queries, so a report
 * over millions of rows holds only its groups in memory. The same SQL on both backends except the
 * percentiles: PostgreSQL's `percentile_disc`, SQLite's window functions picking the row at the
 * same rank.
 *
 * With `usage.retentionDays` the raw rows of old days are rolled up (UsageRetention.ts): every sum
 * reads the raw rows and the rollups together (UNION ALL), so totals, per-day, hourly and top-user
 * figures are the same before and after a sweep. Percentiles cannot be computed from sums: they
 * cover the raw rows only (null for a group whose rows are all rolled up).
 *
 * Host tool calls (`hostTools`, HostCalls.ts) are counted per app, not per user: a report
 * filtered by user leaves them out.
 */

export interface UsageFilter {
  readonly app?: string
  readonly user?: string
  /** a client session (`client_session`): raw rows only, rollups keep no session */
  readonly session?: string
  /** YYYY-MM-DD, inclusive */
  readonly from: string
  readonly to: string
}

export interface Totals {
  readonly requests: number
  readonly errors: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly cacheReadTokens: number
  readonly cacheWriteTokens: number
  readonly reasoningTokens: number
  /** USD over the priced calls (to 6 decimals); null when no call of the group has a price */
  readonly costUsd: number | null
  /** calls whose model has no price: their cost is unknown and not in `costUsd` */
  readonly unpricedCalls: number
}

/**
 * Nearest-rank percentiles: the value at rank `ceil(q * n)` (1-based, in double arithmetic) of the
 * sorted values, rounded to two decimals; null without values.
 */
export interface Percentiles {
  readonly p50: number | null
  readonly p90: number | null
  readonly p99: number | null
}

export interface UsageReport {
  readonly from: string
  readonly to: string
  readonly app: string | null
  readonly user: string | null
  readonly session: string | null
  readonly totals: Totals & { readonly latencyMs: Percentiles; readonly ttftMs: Percentiles }
  readonly days: ReadonlyArray<{
    readonly day: string
    readonly models: ReadonlyArray<Totals & { readonly model: string; readonly latencyMs: Percentiles }>
    readonly apps: ReadonlyArray<Totals & { readonly app: string }>
    /** per key id (never the key), in the order each first occurs */
    readonly keys: ReadonlyArray<Totals & { readonly keyId: string }>
  }>
  /** hourly totals (UTC, `YYYY-MM-DDTHH`) when the range is at most 7 days, for charts over time */
  readonly hours?: ReadonlyArray<Totals & { readonly hour: string }>
  /** the users with the most requests (at most 20) */
  readonly topUsers: ReadonlyArray<Totals & { readonly user: string }>
  /** the client sessions with the most requests (at most 20; raw rows only: rolled-up days keep no session) */
  readonly topSessions: ReadonlyArray<Totals & { readonly session: string }>
  /** with a `session` filter: its calls per agent (`agent` null: the session's main agent), in the order each first occurs */
  readonly agents?: ReadonlyArray<Totals & { readonly agent: string | null; readonly parentAgent: string | null }>
  /** host tool calls over the range per app, server, tool and outcome; absent with a `user` or `session` filter (they are counted per app only) */
  readonly hostTools?: ReadonlyArray<HostToolUsage>
}

export const zeroTotals: Totals = { requests: 0, errors: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0, unpricedCalls: 0 }
export const noPercentiles: Percentiles = { p50: null, p90: null, p99: null }

const TOP_USERS = 20
const TOP_SESSIONS = 20
const HOUR_MS = 3_600_000

/** The model a usage row's call is counted on: the one that answered, else the one asked for. */
export const MODEL_OF_ROW = "COALESCE(model, requested_model)"
/** A usage row's UTC hour, in hours since the epoch (floor division, whatever the sign). */
export const HOUR_OF_ROW = `(time - ((time % ${HOUR_MS}) + ${HOUR_MS}) % ${HOUR_MS}) / ${HOUR_MS}`

const Filter = Schema.Struct({
  from: Schema.String,
  to: Schema.String,
  app: Schema.optional(Schema.String),
  user: Schema.optional(Schema.String),
  session: Schema.optional(Schema.String)
})

/** A group's sums, and where its first row is (groups are listed in the order they first occur). */
const GroupColumns = {
  requests: Schema.Number,
  errors: Schema.Number,
  input_tokens: Schema.Number,
  output_tokens: Schema.Number,
  cache_read_tokens: Schema.Number,
  cache_write_tokens: Schema.Number,
  reasoning_tokens: Schema.Number,
  cost_usd: Schema.NullOr(Schema.Number),
  unpriced_calls: Schema.Number,
  first_time: Schema.Number,
  first_id: Schema.Number
}
type Group = Schema.Struct.Type<typeof GroupColumns>

const DayModelRow = Schema.Struct({ day: Schema.String, model: Schema.String, ...GroupColumns })
const DayAppRow = Schema.Struct({ day: Schema.String, app: Schema.String, ...GroupColumns })
const DayKeyRow = Schema.Struct({ day: Schema.String, key_id: Schema.String, ...GroupColumns })
/** hours since the epoch */
const HourRow = Schema.Struct({ hour: Schema.Number, ...GroupColumns })
const UserRow = Schema.Struct({ name: Schema.String, ...GroupColumns })
const AgentRow = Schema.Struct({ agent: Schema.NullOr(Schema.String), parent_agent: Schema.NullOr(Schema.String), ...GroupColumns })

const Value = Schema.NullOr(Schema.Number)
const OverallPercentilesRow = Schema.Struct({ l50: Value, l90: Value, l99: Value, t50: Value, t90: Value, t99: Value })
const DayModelPercentilesRow = Schema.Struct({ day: Schema.String, model: Schema.String, p50: Value, p90: Value, p99: Value })

/** USD to the micro-dollar */
const round6 = (value: number) => Math.round(value * 1e6) / 1e6

/** a group's cost: null when every one of its calls is unpriced (unknown, never $0) */
const costOrNull = (requests: number, unpriced: number, usd: number): number | null => (requests > 0 && unpriced === requests ? null : round6(usd))

const totalsOf = (g: Group): Totals => ({
  requests: g.requests,
  errors: g.errors,
  inputTokens: g.input_tokens,
  outputTokens: g.output_tokens,
  cacheReadTokens: g.cache_read_tokens,
  cacheWriteTokens: g.cache_write_tokens,
  reasoningTokens: g.reasoning_tokens,
  costUsd: costOrNull(g.requests, g.unpriced_calls, g.cost_usd ?? 0),
  unpricedCalls: g.unpriced_calls
})

const add = (a: Totals, b: Totals): Totals => ({
  requests: a.requests + b.requests,
  errors: a.errors + b.errors,
  inputTokens: a.inputTokens + b.inputTokens,
  outputTokens: a.outputTokens + b.outputTokens,
  cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
  cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
  reasoningTokens: a.reasoningTokens + b.reasoningTokens,
  costUsd: costOrNull(a.requests + b.requests, a.unpricedCalls + b.unpricedCalls, (a.costUsd ?? 0) + (b.costUsd ?? 0)),
  unpricedCalls: a.unpricedCalls + b.unpricedCalls
})

const groupBy = <A>(rows: ReadonlyArray<A>, key: (row: A) => string): Map<string, Array<A>> => {
  const groups = new Map<string, Array<A>>()
  for (const row of rows) {
    const group = groups.get(key(row))
    if (group === undefined) groups.set(key(row), [row])
    else group.push(row)
  }
  return groups
}

/** first occurrence: earliest time, then earliest written */
const byFirst = (a: Group, b: Group) => a.first_time - b.first_time || a.first_id - b.first_id

const round2 = (value: number | null) => (value === null ? null : Math.round(value * 100) / 100)
const percentilesOf = (p50: number | null, p90: number | null, p99: number | null): Percentiles => ({ p50: round2(p50), p90: round2(p90), p99: round2(p99) })

/** The report queries over the usage table, for a `UsageLog` to run. */
export const makeReport = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient

  const where = (f: typeof Filter.Encoded) =>
    sql`WHERE day >= ${f.from} AND day <= ${f.to}${f.app !== undefined ? sql` AND app = ${f.app}` : sql``}${f.user !== undefined ? sql` AND "user" = ${f.user}` : sql``}${
      f.session !== undefined ? sql` AND client_session = ${f.session}` : sql``
    }`
  // a failed call is counted on the model it asked for
  const model = sql.literal(MODEL_OF_ROW)

  /**
   * The rows of a filter as one relation `u` of partial sums: a raw row is one call, a rollup row
   * the sums of many. `key` is the group key as read from each table; `extra` narrows both. A
   * session filter, or a key only raw rows have (`rollup` undefined), reads the raw rows alone.
   */
  const rowsOf = (f: typeof Filter.Encoded, key: { readonly raw: string; readonly rollup?: string }, extra = "") => {
    const raw = sql`
      SELECT ${sql.literal(key.raw)}, 1 AS requests, CASE WHEN status <> 'ok' THEN 1 ELSE 0 END AS errors,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
        cost_usd, CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END AS unpriced_calls, time AS first_time, id AS first_id
      FROM usage ${where(f)}${sql.literal(extra)}`
    if (key.rollup === undefined || f.session !== undefined) return sql`(${raw}) u`
    return sql`(${raw}
      UNION ALL
      SELECT ${sql.literal(key.rollup)}, requests, errors,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
        cost_usd, unpriced_calls, first_time, first_id
      FROM usage_rollups ${where(f)}${sql.literal(extra)}
    ) u`
  }
  const sums = sql`SUM(requests) AS requests, SUM(errors) AS errors,
    SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
    SUM(cache_write_tokens) AS cache_write_tokens, SUM(reasoning_tokens) AS reasoning_tokens,
    SUM(cost_usd) AS cost_usd, SUM(unpriced_calls) AS unpriced_calls, MIN(first_time) AS first_time, MIN(first_id) AS first_id`

  const dayModels = SqlSchema.findAll({
    Request: Filter,
    Result: DayModelRow,
    execute: (f) => sql`SELECT day, model, ${sums} FROM ${rowsOf(f, { raw: `day, ${MODEL_OF_ROW} AS model`, rollup: "day, model" })} GROUP BY day, model`
  })
  const dayApps = SqlSchema.findAll({
    Request: Filter,
    Result: DayAppRow,
    execute: (f) => sql`SELECT day, app, ${sums} FROM ${rowsOf(f, { raw: "day, app", rollup: "day, app" })} GROUP BY day, app`
  })
  const dayKeys = SqlSchema.findAll({
    Request: Filter,
    Result: DayKeyRow,
    execute: (f) => sql`SELECT day, key_id, ${sums} FROM ${rowsOf(f, { raw: "day, key_id", rollup: "day, key_id" })} GROUP BY day, key_id`
  })
  const hours = SqlSchema.findAll({
    Request: Filter,
    Result: HourRow,
    execute: (f) => sql`SELECT hour, ${sums} FROM ${rowsOf(f, { raw: `${HOUR_OF_ROW} AS hour`, rollup: "hour" })} GROUP BY hour`
  })
  const users = SqlSchema.findAll({
    Request: Filter,
    Result: UserRow,
    execute: (f) =>
      sql`SELECT name, ${sums} FROM ${rowsOf(f, { raw: `"user" AS name`, rollup: `"user" AS name` }, ` AND "user" IS NOT NULL`)}
        GROUP BY name ORDER BY requests DESC, first_time, first_id LIMIT ${sql.literal(String(TOP_USERS))}`
  })
  const sessions = SqlSchema.findAll({
    Request: Filter,
    Result: UserRow,
    execute: (f) =>
      sql`SELECT name, ${sums} FROM ${rowsOf(f, { raw: "client_session AS name" }, " AND client_session IS NOT NULL")}
        GROUP BY name ORDER BY requests DESC, first_time, first_id LIMIT ${sql.literal(String(TOP_SESSIONS))}`
  })
  const agents = SqlSchema.findAll({
    Request: Filter,
    Result: AgentRow,
    execute: (f) => sql`SELECT agent, parent_agent, ${sums} FROM ${rowsOf(f, { raw: "agent, parent_agent" })} GROUP BY agent, parent_agent`
  })

  const QUANTILES = [["50", "0.5"], ["90", "0.9"], ["99", "0.99"]] as const

  /**
   * PostgreSQL: the nearest-rank percentile is `percentile_disc` (the row at rank `ceil(q * n)`,
   * computed in float8 as JavaScript would); `percentile_cont` interpolates between two rows,
   * which is not the report's definition.
   */
  const pgPercentiles = (column: string, prefix: string) =>
    sql.literal(
      QUANTILES.map(([name, q]) => `percentile_disc(CAST(${q} AS double precision)) WITHIN GROUP (ORDER BY ${column}) AS ${prefix}${name}`).join(", ")
    )

  /**
   * SQLite: the value at rank `min(n, ceil(q * n))` of each group, found with ROW_NUMBER over the
   * group sorted by `column` (SQLite sorts, spilling to disk if need be; nothing comes back but
   * the three rows per group). `ceil` in the same double arithmetic as PostgreSQL's.
   */
  const sqlitePercentiles = (f: typeof Filter.Encoded, column: string, prefix: string, keys: ReadonlyArray<readonly [string, string]>) => {
    const keyList = keys.map(([, alias]) => alias).join(", ")
    const partition = keys.length === 0 ? "" : `PARTITION BY ${keys.map(([expr]) => expr).join(", ")}`
    const rank = (q: string) => `MIN(n, CAST(${q} * n AS INTEGER) + (${q} * n > CAST(${q} * n AS INTEGER)))`
    return sql`SELECT ${sql.literal(keys.length === 0 ? "" : `${keyList}, `)}${sql.literal(
      QUANTILES.map(([name]) => `MAX(CASE WHEN rn = k${name} THEN v END) AS ${prefix}${name}`).join(", ")
    )}
      FROM (SELECT *, ${sql.literal(QUANTILES.map(([name, q]) => `${rank(q)} AS k${name}`).join(", "))}
        FROM (SELECT ${sql.literal(keys.map(([expr, alias]) => `${expr} AS ${alias}, `).join(""))}${sql.literal(column)} AS v,
            ROW_NUMBER() OVER (${sql.literal(partition)} ORDER BY ${sql.literal(column)}) AS rn,
            COUNT(*) OVER (${sql.literal(partition)}) AS n
          FROM usage ${where(f)} AND ${sql.literal(column)} IS NOT NULL))
      WHERE rn IN (k50, k90, k99)
      ${sql.literal(keys.length === 0 ? "" : `GROUP BY ${keyList}`)}`
  }

  const overallPercentiles = SqlSchema.findAll({
    Request: Filter,
    Result: OverallPercentilesRow,
    execute: (f) =>
      sql.onDialectOrElse({
        pg: () => sql`SELECT ${pgPercentiles("latency_ms", "l")}, ${pgPercentiles("ttft_ms", "t")} FROM usage ${where(f)}`,
        orElse: () => sql`SELECT * FROM (${sqlitePercentiles(f, "latency_ms", "l", [])}), (${sqlitePercentiles(f, "ttft_ms", "t", [])})`
      })
  })
  const dayModelPercentiles = SqlSchema.findAll({
    Request: Filter,
    Result: DayModelPercentilesRow,
    execute: (f) =>
      sql.onDialectOrElse({
        pg: () => sql`SELECT day, ${model} AS model, ${pgPercentiles("latency_ms", "p")} FROM usage ${where(f)} GROUP BY day, ${model}`,
        orElse: () => sqlitePercentiles(f, "latency_ms", "p", [["day", "day"], [MODEL_OF_ROW, "model"]])
      })
  })

  const hostTools = makeHostToolsReport(sql)

  /** Every query of one report reads the same snapshot (PostgreSQL: repeatable read; SQLite: one read transaction). */
  const snapshot = sql.onDialectOrElse({
    pg: () => Effect.asVoid(sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`),
    orElse: () => Effect.void
  })

  return (filter: UsageFilter): Effect.Effect<UsageReport, SqlError | ParseResult.ParseError> =>
    sql.withTransaction(
      Effect.gen(function* () {
        yield* snapshot
        const hourly = (Date.parse(filter.to) - Date.parse(filter.from)) / 86_400_000 < 7
        const models = yield* dayModels(filter)
        const apps = yield* dayApps(filter)
        const keys = yield* dayKeys(filter)
        const modelPercentiles = new Map((yield* dayModelPercentiles(filter)).map((p) => [`${p.day}\u0000${p.model}`, percentilesOf(p.p50, p.p90, p.p99)]))
        const [overall] = yield* overallPercentiles(filter)
        const hourRows = hourly ? yield* hours(filter) : []
        const userRows = yield* users(filter)
        const sessionRows = yield* sessions(filter)
        const agentRows = filter.session !== undefined ? yield* agents(filter) : undefined
        // host tool calls are counted per app: a report of one user or one session leaves them out
        const hostRows = filter.user === undefined && filter.session === undefined ? yield* hostTools({ from: filter.from, to: filter.to, ...(filter.app !== undefined ? { app: filter.app } : {}) }) : undefined

        const modelsOf = groupBy(models, (m) => m.day)
        const appsOf = groupBy(apps, (a) => a.day)
        const keysOf = groupBy(keys, (k) => k.day)
        const totals = models.reduce((sum, m) => add(sum, totalsOf(m)), zeroTotals)
        return {
          from: filter.from,
          to: filter.to,
          app: filter.app ?? null,
          user: filter.user ?? null,
          session: filter.session ?? null,
          totals: {
            ...totals,
            latencyMs: overall === undefined ? noPercentiles : percentilesOf(overall.l50, overall.l90, overall.l99),
            ttftMs: overall === undefined ? noPercentiles : percentilesOf(overall.t50, overall.t90, overall.t99)
          },
          days: [...modelsOf.keys()].sort().map((day) => ({
            day,
            models: (modelsOf.get(day) ?? [])
              .sort(byFirst)
              .map((m) => ({ model: m.model, ...totalsOf(m), latencyMs: modelPercentiles.get(`${day}\u0000${m.model}`) ?? noPercentiles })),
            apps: (appsOf.get(day) ?? []).sort(byFirst).map((a) => ({ app: a.app, ...totalsOf(a) })),
            keys: (keysOf.get(day) ?? []).sort(byFirst).map((k) => ({ keyId: k.key_id, ...totalsOf(k) }))
          })),
          ...(hourly
            ? { hours: [...hourRows].sort((a, b) => a.hour - b.hour).map((h) => ({ hour: new Date(h.hour * HOUR_MS).toISOString().slice(0, 13), ...totalsOf(h) })) }
            : {}),
          topUsers: [...userRows]
            .sort((a, b) => b.requests - a.requests || byFirst(a, b))
            .map((u) => ({ user: u.name, ...totalsOf(u) })),
          topSessions: [...sessionRows].sort((a, b) => b.requests - a.requests || byFirst(a, b)).map((s) => ({ session: s.name, ...totalsOf(s) })),
          ...(agentRows !== undefined ? { agents: [...agentRows].sort(byFirst).map((a) => ({ agent: a.agent, parentAgent: a.parent_agent, ...totalsOf(a) })) } : {}),
          ...(hostRows !== undefined ? { hostTools: hostRows } : {})
        } satisfies UsageReport
      })
    ).pipe(Effect.withSpan("UsageLog.report", { attributes: { from: filter.from, to: filter.to } }))
})
