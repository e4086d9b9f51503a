import * as Reactivity from "@effect/experimental/Reactivity"
import * as Client from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import * as Statement from "@effect/sql/Statement"
import { SqliteClient } from "@effect/sql-sqlite-node/SqliteClient"
import { Effect, Option, Scope } from "effect"
import { driverPath } from "./SqliteClient.js"
import * as SqliteThread from "./kit/SqliteThread.js"

/**
 * An `SqlClient` for long reads (the usage report over months of rows): on SQLite, a read-only
 * connection of its own on a worker thread, so that a query scanning hundreds of thousands of rows
 * runs while the event loop goes on serving (WAL: it reads the last commit made before its
 * transaction began, beside the writer); on PostgreSQL, and for an in-memory database, the
 * client itself (its queries already run off the event loop, or there is no file to share).
 *
 * Its statements run one at a time (a transaction holds the connection), and only statements
 * made with this client run there: inside its `withTransaction`, use no other client.
 */
export const longReads: Effect.Effect<Client.SqlClient, never, Client.SqlClient | Scope.Scope> = Effect.gen(function* () {
  const sql = yield* Client.SqlClient
  const sqlite = yield* Effect.serviceOption(SqliteClient)
  if (Option.isNone(sqlite)) return sql
  const filename = sqlite.value.config.filename
  if (filename === "" || filename === ":memory:" || filename.startsWith("file::memory:")) return sql
  return yield* make(filename)
})

/** A read-only client over `filename` on a worker thread of its own (started on first use, closed with the scope). */
export const make = (filename: string): Effect.Effect<Client.SqlClient, never, Scope.Scope> =>
  Effect.gen(function* () {
    const thread = yield* SqliteThread.make({ driver: driverPath(), filename, readonly: true })
    const safeIntegers = Client.SafeIntegers
    const rows = (sql: string, params: ReadonlyArray<unknown>) =>
      Effect.flatMap(safeIntegers, (safe) => thread.query(sql, params, { safeIntegers: safe })).pipe(Effect.map((rows) => rows.filter(isRow)))
    const connection: Connection = {
      execute: (sql, params, transformRows) => (transformRows ? Effect.map(rows(sql, params), transformRows) : rows(sql, params)),
      executeRaw: (sql, params) => rows(sql, params),
      executeValues: (sql, params) =>
        Effect.map(
          Effect.flatMap(safeIntegers, (safe) => thread.query(sql, params, { values: true, safeIntegers: safe })),
          (rows) => rows.filter((row): row is ReadonlyArray<unknown> => Array.isArray(row))
        ),
      executeUnprepared: (sql, params, transformRows) => (transformRows ? Effect.map(rows(sql, params), transformRows) : rows(sql, params)),
      executeStream: () => Effect.dieMessage("executeStream not implemented")
    }
    const semaphore = yield* Effect.makeSemaphore(1)
    // a transaction holds the connection until its scope closes (waiting for it stays interruptible)
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.as(Effect.zipRight(restore(semaphore.take(1)), Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))), connection)
    )
    return yield* Client.make({
      acquirer: semaphore.withPermits(1)(Effect.succeed(connection)),
      transactionAcquirer,
      compiler: Statement.makeCompilerSqlite(),
      spanAttributes: [
        ["db.system.name", "sqlite"],
        ["gateway.sqlite.thread", "reader"]
      ]
    }).pipe(Effect.provide(Reactivity.layer))
  })

const isRow = (row: unknown): row is object => typeof row === "object" && row !== null
