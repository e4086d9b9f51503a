import * as PgClient from "@effect/sql-pg/PgClient"
import * as Reactivity from "@effect/experimental/Reactivity"
import * as SqlClient from "@effect/sql/SqlClient"
import type * as Client from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Duration, Effect, Layer, Redacted, Schedule, type Scope } from "effect"
import * as net from "node:net"
import Pg from "pg"
import { STATEMENT_TIMEOUT_MS } from "../Config.js"

/**
 * The PostgreSQL client of the gateway: `@effect/sql-pg` over a pool of `poolSize` connections,
 * connected at start with retries, numbers read as numbers, every statement bounded on both sides:
 *
 * - the server: `statement_timeout` on every connection, so PostgreSQL stops a statement that
 *   runs (or waits for a lock) longer, and answers the error `57014`; an open transaction left
 *   idle as long is ended too (`idle_in_transaction_session_timeout`), so that a client that
 *   vanished mid-transaction does not hold its locks;
 * - the client: a connection that sent something and heard nothing back for `clientTimeoutMs`
 *   (the statement timeout and a grace for the server's answer to arrive) is closed, failing
 *   whatever it was running: a network that silently stopped delivering (no reset, no FIN: the
 *   server's timeout fires, but its answer never arrives) holds no request, no shutdown and no
 *   pooled connection longer than that. TCP keepalive finds dead idle connections too.
 */

export interface PostgresOptions {
  readonly url: Redacted.Redacted<string>
  readonly poolSize: number
  /** how long to keep trying to connect at start (default 30 s) */
  readonly connectWithinMs?: number
  /** the server's bound on one statement (default `STATEMENT_TIMEOUT_MS`) */
  readonly statementTimeoutMs?: number
}

/**
 * The client's bound: the statement timeout and a grace for the server's answer (the timeout
 * itself, at most 5 s): 35 s by default. A connection silent that long after a statement is lost.
 */
export const clientTimeoutMs = (statementTimeoutMs: number): number => statementTimeoutMs + Math.min(statementTimeoutMs, 5_000)

/** Opening a connection (TCP and PostgreSQL's handshake): at most 5 s, and never longer than the client's bound. */
const connectTimeoutMs = (statementTimeoutMs: number): number => Math.min(5_000, clientTimeoutMs(statementTimeoutMs))

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

/** The error a connection closed for silence fails its statement with (and the pool drops it for). */
export class DatabaseSilent extends Error {
  constructor(readonly silentMs: number) {
    super(`PostgreSQL answered nothing for ${silentMs} ms after a statement: connection closed`)
  }
}

/**
 * Close `socket` once it has sent bytes and received none for `ms`. The socket's idle timer fires
 * after `ms` without traffic either way; the connection is then lost only if something was written
 * since the last bytes arrived (a pooled connection waiting for work is silent and fine).
 */
export const closeWhenSilent = (socket: net.Socket, ms: number): void => {
  let answeredUpTo = socket.bytesWritten
  socket.on("data", () => {
    answeredUpTo = socket.bytesWritten
  })
  socket.setTimeout(ms)
  socket.on("timeout", () => {
    if (socket.bytesWritten > answeredUpTo) socket.destroy(new DatabaseSilent(ms))
  })
}

/** One connection opened and closed: whether the server takes connections yet. */
const probe = (url: Redacted.Redacted<string>) =>
  Effect.tryPromise({
    try: async () => {
      const client = new Pg.Client({ connectionString: Redacted.value(url), connectionTimeoutMillis: 5_000, query_timeout: 5_000, keepAlive: true })
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

/** A pooled connection: no per-query timer (see `boundedPool`). */
class Pooled extends Pg.Client {
  constructor(config?: Pg.ClientConfig) {
    super({ ...config, query_timeout: undefined })
  }
}

/** The pool, every connection bounded on both sides (see above), ended with the scope (waiting at most 1 s). */
const boundedPool = (options: PostgresOptions): Effect.Effect<Pg.Pool, never, Scope.Scope> => {
  const statementTimeoutMs = options.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS
  return Effect.acquireRelease(
    Effect.sync(() => {
      const pool = new Pg.Pool({
        connectionString: Redacted.value(options.url),
        max: options.poolSize,
        connectionTimeoutMillis: connectTimeoutMs(statementTimeoutMs),
        idleTimeoutMillis: 60_000,
        application_name: "llm-gateway",
        types,
        statement_timeout: statementTimeoutMs,
        idle_in_transaction_session_timeout: statementTimeoutMs,
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000,
        // The pool's options also make the one connection opened outside it, for LISTEN (notices
        // of runtime keys): pg's own per-query timer bounds its LISTEN and UNLISTEN, which take
        // milliseconds. Pooled connections run without that timer (`Pooled`): it fails the
        // query but leaves the connection waiting and back in the pool; the watch closes it.
        query_timeout: connectTimeoutMs(statementTimeoutMs),
        Client: Pooled
      })
      // an idle connection's error: the pool drops it
      pool.on("error", () => {})
      pool.on("connect", (client) => {
        const stream = client.connection.stream
        if (stream instanceof net.Socket) closeWhenSilent(stream, clientTimeoutMs(statementTimeoutMs))
      })
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(Duration.seconds(1)))
  )
}

/**
 * A client of one connection for the migrations at start, without the statement timeout: a
 * migration over a large table may rightly take longer, and a start is not a request (TCP
 * keepalive still finds a lost server).
 */
export const migrationClient = (url: Redacted.Redacted<string>): Effect.Effect<PgClient.PgClient, SqlError, Scope.Scope> =>
  PgClient.fromPool({
    acquire: Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new Pg.Pool({ connectionString: Redacted.value(url), max: 1, connectionTimeoutMillis: 5_000, application_name: "llm-gateway", types, keepAlive: true })
        pool.on("error", () => {})
        return pool
      }),
      (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(Duration.seconds(1)))
    ),
    applicationName: "llm-gateway",
    types
  }).pipe(Effect.provide(Reactivity.layer))

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
    PgClient.fromPool({ acquire: boundedPool(options), applicationName: "llm-gateway", types })
  ).pipe(Effect.mapError(() => new DatabaseUnreachable(target)))
  return Layer.scopedContext(Effect.map(client, (pg) => Context.make(PgClient.PgClient, pg).pipe(Context.add(SqlClient.SqlClient, pg)))).pipe(
    Layer.provide(Reactivity.layer)
  )
}
