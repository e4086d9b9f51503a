import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Cause, Effect, Option, type ParseResult, Schema } from "effect"
import type { Log } from "../ops/Log.js"

/**
 * Host tool calls in the usage report (`/gateway/usage`, field `hostTools`): what the host tool
 * loop ran for each app, by server, tool and outcome, with the calls' count and latency.
 *
 * Calls are summed in memory as they come, per UTC day, app, server, tool and outcome (the
 * buffer holds one entry per group, never one per call), and the usage log's flush adds the sums
 * to the rows of the same key in `host_tool_calls` (migration 0019) in one transaction, so the
 * request path never waits on the database and the table grows with the days and tools used,
 * not with the calls: it needs no retention sweep. A write the database does not take puts the
 * sums back for the next flush.
 */

/** One host tool call, as the loop reports it (the same fields as its metrics). */
export interface HostCallRecord {
  readonly app: string
  /** the `toolServers` entry */
  readonly server: string
  /** the tool's name on its server */
  readonly tool: string
  /** `ok`, `error` (an `isError` result, or arguments that are not a JSON object), `timeout`, `failed` (the server failed the call) */
  readonly outcome: string
  readonly latencyMs: number
}

/** The host tool calls of one app, server, tool and outcome over a report's range. */
export interface HostToolUsage {
  readonly app: string
  readonly server: string
  readonly tool: string
  readonly outcome: string
  readonly calls: number
  /** milliseconds, to two decimals: the calls' sum and their mean */
  readonly latencyMs: { readonly total: number; readonly avg: number }
}

/** One group of calls, as stored. */
const Row = Schema.Struct({
  day: Schema.String,
  app: Schema.String,
  server: Schema.String,
  tool: Schema.String,
  outcome: Schema.String,
  calls: Schema.Number,
  latency_ms_sum: Schema.Number
})
type Row = typeof Row.Type

const ROWS_PER_INSERT = 100

const keyOf = (r: Row) => `${r.day}\u0000${r.app}\u0000${r.server}\u0000${r.tool}\u0000${r.outcome}`

type Group = { -readonly [K in keyof Row]: Row[K] }

/** Add a row's sums to the group of its key. */
const merge = (groups: Map<string, Group>, row: Row) => {
  const key = keyOf(row)
  const group = groups.get(key)
  if (group === undefined) groups.set(key, { ...row })
  else {
    group.calls += row.calls
    group.latency_ms_sum += row.latency_ms_sum
  }
}

/**
 * The buffer of a usage log and its write. `add` takes a call already made storable (the day of
 * its end, text without NUL); `drain` writes every group pending now; `refused` says whether a
 * failed write failed for the values it carried (writing them again cannot cure it: dropped).
 */
export const makeHostCallBuffer = (sql: SqlClient.SqlClient, log: Log["Type"], refused: (error: SqlError | ParseResult.ParseError) => boolean) => {
  let pending = new Map<string, Group>()
  let failing = false

  const add = (day: string, call: HostCallRecord) =>
    merge(pending, { day, app: call.app, server: call.server, tool: call.tool, outcome: call.outcome, calls: 1, latency_ms_sum: call.latencyMs })

  /** Each group once per statement: PostgreSQL refuses an upsert that updates a row twice. */
  const upsert = SqlSchema.void({
    Request: Schema.Array(Row),
    execute: (rows) =>
      sql`INSERT INTO host_tool_calls ${sql.insert(rows)} ON CONFLICT (day, app, server, tool, outcome) DO UPDATE SET
        calls = host_tool_calls.calls + excluded.calls, latency_ms_sum = host_tool_calls.latency_ms_sum + excluded.latency_ms_sum`
  })
  const write = (rows: ReadonlyArray<Row>) =>
    sql.withTransaction(
      Effect.forEach(
        Array.from({ length: Math.ceil(rows.length / ROWS_PER_INSERT) }, (_, i) => rows.slice(i * ROWS_PER_INSERT, (i + 1) * ROWS_PER_INSERT)),
        upsert,
        { discard: true }
      )
    )

  /** The groups of a write that failed, back with what came meanwhile. */
  const putBack = (rows: ReadonlyArray<Row>) => {
    const since = pending
    pending = new Map()
    for (const row of rows) merge(pending, row)
    for (const row of since.values()) merge(pending, row)
  }

  const drain: Effect.Effect<void> = Effect.suspend(() => {
    if (pending.size === 0) return Effect.void
    const rows = [...pending.values()]
    pending = new Map()
    // the rows have left the buffer: a write cut short would lose them, a failed one puts them back
    return Effect.uninterruptible(
      write(rows).pipe(
        Effect.matchCauseEffect({
          onSuccess: () =>
            Effect.sync(() => {
              if (failing) log.info("usage.host_calls_write_recovered", {})
              failing = false
            }),
          onFailure: (cause) =>
            Effect.sync(() => {
              if (Option.exists(Cause.failureOption(cause), refused)) {
                log.error("usage.host_calls_refused", { groups: rows.length })
                return
              }
              putBack(rows)
              // once per outage; the sums wait for the next flush
              if (!failing) log.error("usage.host_calls_write_failed", { groups: pending.size })
              failing = true
            })
        })
      )
    )
  })

  return {
    add,
    drain,
    /** groups of calls not yet written */
    pending: () => pending.size
  }
}

const Filter = Schema.Struct({ from: Schema.String, to: Schema.String, app: Schema.optional(Schema.String) })
const SumRow = Schema.Struct({ app: Schema.String, server: Schema.String, tool: Schema.String, outcome: Schema.String, calls: Schema.Number, latency_ms_sum: Schema.Number })

const round2 = (value: number) => Math.round(value * 100) / 100
const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** The `hostTools` of a report (days `from` to `to`, one app or all), ordered by app, server, tool and outcome. */
export const makeHostToolsReport = (sql: SqlClient.SqlClient) => {
  const sums = SqlSchema.findAll({
    Request: Filter,
    Result: SumRow,
    execute: (f) =>
      sql`SELECT app, server, tool, outcome, SUM(calls) AS calls, SUM(latency_ms_sum) AS latency_ms_sum FROM host_tool_calls
        WHERE day >= ${f.from} AND day <= ${f.to}${f.app !== undefined ? sql` AND app = ${f.app}` : sql``}
        GROUP BY app, server, tool, outcome`
  })
  return (filter: typeof Filter.Type): Effect.Effect<ReadonlyArray<HostToolUsage>, SqlError | ParseResult.ParseError> =>
    Effect.map(sums(filter), (rows) =>
      // sorted here: the databases' collations differ
      [...rows]
        .sort((a, b) => compare(a.app, b.app) || compare(a.server, b.server) || compare(a.tool, b.tool) || compare(a.outcome, b.outcome))
        .map((r) => ({
          app: r.app,
          server: r.server,
          tool: r.tool,
          outcome: r.outcome,
          calls: r.calls,
          latencyMs: { total: round2(r.latency_ms_sum), avg: r.calls === 0 ? 0 : round2(r.latency_ms_sum / r.calls) }
        }))
    )
}
