import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Redacted } from "effect"
import Pg from "pg"
import { postgresDatabaseLayer } from "../../src/sql/Database.js"
import { clientTimeoutMs, DatabaseSilent, migrationClient } from "../../src/sql/Postgres.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { startTcpProxy, type TcpProxy } from "../support/TcpProxy.js"

/**
 * Every PostgreSQL statement bounded on both sides (issue 24). The server: `statement_timeout` on
 * every connection, so a statement running (or waiting for a lock) past `statementTimeoutMs` is
 * stopped by PostgreSQL with its error 57014. The client: a network that silently stops
 * delivering (a proxy that accepts bytes and forwards none: no reset, no FIN) is met by the
 * gateway closing a connection that has heard nothing for `clientTimeoutMs` after sending, with
 * its own error; the pool drops that connection, and opening a new one is bounded too. Times are
 * checked as generous backstops only: the errors say which mechanism fired.
 */

const STATEMENT_MS = 500
const CLIENT_MS = clientTimeoutMs(STATEMENT_MS)

/** The error a failed statement carries from the driver. */
const causeOf = (error: unknown): unknown => (error instanceof SqlError ? error.cause : undefined)
const codeOf = (error: unknown): unknown => {
  const cause = causeOf(error)
  return typeof cause === "object" && cause !== null && "code" in cause ? cause.code : undefined
}

/** `effect` and how long it took (ms, for backstops). */
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const started = performance.now()
    const exit = yield* Effect.exit(effect)
    return { exit, ms: performance.now() - started }
  })

const failureOf = <A, E>(exit: Exit.Exit<A, E>): unknown => (Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined)

describe.skipIf(!hasPostgres)("PostgreSQL: every statement bounded", () => {
  let db: TestDatabase
  let proxy: TcpProxy
  beforeAll(async () => {
    db = await freshDatabase()
  })
  afterAll(async () => {
    await proxy?.close()
    await db?.drop()
  })

  /** The gateway's client for `url` with the test's statement timeout, closed with the test's scope. */
  const clientFor = (url: string, poolSize: number) =>
    Effect.map(Layer.build(postgresDatabaseLayer(Redacted.make(url), poolSize, { statementTimeoutMs: STATEMENT_MS })), (context) =>
      Context.get(context, SqlClient.SqlClient)
    ).pipe(Effect.orDie)

  it.scopedLive("a statement over statementTimeoutMs is stopped by the server with its own error; the connection goes on serving", () =>
    Effect.gen(function* () {
      const sql = yield* clientFor(db.url, 2)
      expect(yield* Effect.orDie(sql`SHOW statement_timeout`)).toEqual([{ statement_timeout: `${STATEMENT_MS}ms` }])
      expect(yield* Effect.orDie(sql`SHOW idle_in_transaction_session_timeout`)).toEqual([{ idle_in_transaction_session_timeout: `${STATEMENT_MS}ms` }])
      const slow = yield* timed(sql`SELECT pg_sleep(5)`)
      // 57014: canceling statement due to statement timeout (the server's, not the client's)
      expect(codeOf(failureOf(slow.exit))).toBe("57014")
      expect(slow.ms).toBeLessThan(4_000)
      // a lock wait counts too: another session holds the table
      yield* Effect.orDie(sql`CREATE TABLE locked (n INTEGER)`)
      const holder = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: db.url })
          await client.connect()
          await client.query("BEGIN")
          await client.query("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
          return client
        }),
        (client) => Effect.promise(() => client.end())
      )
      const waited = yield* timed(sql`SELECT COUNT(*) FROM locked`)
      expect(codeOf(failureOf(waited.exit))).toBe("57014")
      expect(waited.ms).toBeLessThan(4_000)
      yield* Effect.promise(() => holder.query("ROLLBACK"))
      expect(yield* Effect.orDie(sql`SELECT 1 AS one`)).toEqual([{ one: 1 }])
      // migrations at start are not bound by it: a migration over a large table may rightly take longer
      const migrations = yield* Effect.orDie(migrationClient(Redacted.make(db.url)))
      expect(yield* Effect.orDie(migrations`SHOW statement_timeout`)).toEqual([{ statement_timeout: "0" }])
    }))

  it.scopedLive("a silent network: the statement fails once the connection heard nothing for the client's bound; the pool drops it and recovers", () =>
    Effect.gen(function* () {
      const target = new URL(db.url)
      proxy = yield* Effect.promise(() => startTcpProxy({ host: target.hostname, port: Number(target.port) }))
      const via = new URL(db.url)
      via.port = String(proxy.port)
      // one connection, so that every statement below meets the stalled one first
      const sql = yield* clientFor(via.toString(), 1)
      expect(yield* Effect.orDie(sql`SELECT 1 AS one`)).toEqual([{ one: 1 }])

      proxy.stall()
      const lost = yield* timed(sql`SELECT 1 AS one`)
      const silent = causeOf(failureOf(lost.exit))
      expect(silent).toBeInstanceOf(DatabaseSilent)
      expect((silent as DatabaseSilent).silentMs).toBe(CLIENT_MS)
      expect(lost.ms).toBeLessThan(CLIENT_MS + 5_000)
      // that connection is gone; a new one is never answered: bounded by the connect timeout
      const opening = yield* timed(sql`SELECT 1 AS one`)
      expect(Exit.isFailure(opening.exit)).toBe(true)
      expect(String(failureOf(opening.exit))).not.toContain(new URL(db.url).password)
      expect(opening.ms).toBeLessThan(CLIENT_MS + 5_000)
      // mid-transaction: the same bound, and the transaction's connection is dropped too
      proxy.restore()
      const inTransaction = yield* timed(sql.withTransaction(Effect.zipRight(Effect.zipRight(sql`SELECT 1`, Effect.sync(() => proxy.stall())), sql`SELECT 2`)))
      expect(Exit.isFailure(inTransaction.exit)).toBe(true)
      expect(inTransaction.ms).toBeLessThan(CLIENT_MS + 5_000)

      proxy.restore()
      expect(yield* Effect.orDie(sql`SELECT 1 AS one`)).toEqual([{ one: 1 }])
    }))
})
