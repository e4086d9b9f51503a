import * as PgClient from "@effect/sql-pg/PgClient"
import * as Reactivity from "@effect/experimental/Reactivity"
import * as SqlClient from "@effect/sql/SqlClient"
import type * as Client from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Duration, Effect, Layer, Redacted, Schedule } from "effect"
import Pg from "pg"

/**
 * The PostgreSQL client of the gateway: `@effect/sql-pg` over a pool of `poolSize` connections,
 * connected at start with retries, numbers read as numbers.
 */

export interface PostgresOptions {
  readonly url: Redacted.Redacted<string>
  readonly poolSize: number
  /** how long to keep trying to connect at start (default 30 s) */
  readonly connectWithinMs?: number
}

/** int8 (COUNT, BIGINT columns: epoch ms, byte counts) and numeric (SUM) as JS numbers: every value here is below 2^53. */
const NUMBER_TYPES = new Set([20, 1700])
const types: Pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    NUMBER_TYPES.has(oid) && format !== "binary" ? (value: string) => Number(value) : Pg.types.getTypeParser(oid, format)) as Pg.CustomTypesConfig["getTypeParser"]
}

/** Where a URL points, for messages: host and port only (never the user, password, path or query). */
export const safeTarget = (url: Redacted.Redacted<string>): string => {
  try {
    const parsed = new URL(Redacted.value(url))
    return parsed.port ? `${parsed.hostname}:${parsed.port}` : parsed.hostname
  } catch {
    return "(unparsable URL)"
  }
}

/** A database failure at start: the process exits 2 with this one line. */
export class DatabaseUnreachable extends Error {
  constructor(readonly target: string) {
    super(`database.url: cannot connect to PostgreSQL at ${target}`)
  }
}

/** One connection opened and closed: whether the server takes connections yet. */
const probe = (url: Redacted.Redacted<string>) =>
  Effect.tryPromise({
    try: async () => {
      const client = new Pg.Client({ connectionString: Redacted.value(url), connectionTimeoutMillis: 5_000 })
      client.on("error", () => {})
      try {
        await client.connect()
        await client.query("SELECT 1")
      } finally {
        await client.end().catch(() => undefined)
      }
    },
    catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
  })

/**
 * The client Layer: waits for the server (a database started together with the gateway comes up
 * within `connectWithinMs`), then opens the pool; fails with `DatabaseUnreachable`, which names
 * the host only.
 */
export const postgresLayer = (options: PostgresOptions): Layer.Layer<PgClient.PgClient | Client.SqlClient, DatabaseUnreachable> => {
  const within = options.connectWithinMs ?? 30_000
  const target = safeTarget(options.url)
  const client = Effect.zipRight(
    probe(options.url).pipe(Effect.retry(Schedule.spaced(Duration.millis(500)).pipe(Schedule.upTo(Duration.millis(within))))),
    PgClient.make({
      url: options.url,
      maxConnections: options.poolSize,
      connectTimeout: Duration.seconds(5),
      idleTimeout: Duration.seconds(60),
      applicationName: "llm-gateway",
      types
    })
  ).pipe(Effect.mapError(() => new DatabaseUnreachable(target)))
  return Layer.scopedContext(Effect.map(client, (pg) => Context.make(PgClient.PgClient, pg).pipe(Context.add(SqlClient.SqlClient, pg)))).pipe(
    Layer.provide(Reactivity.layer)
  )
}
