import * as Reactivity from "@effect/experimental/Reactivity"
import * as Client from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import { SqliteClient, TypeId } from "@effect/sql-sqlite-node/SqliteClient"
import { Cache, Context, Duration, Effect, FiberRef, Layer, Scope } from "effect"
import { createRequire } from "node:module"
import { WalCheckpoints } from "./WalCheckpoints.js"
import { deferredSync, WalSync } from "./WalSync.js"

/**
 * The SQLite client of `@effect/sql-sqlite-node` (same tag, same behaviour), with the driver chosen
 * for the running Node:
 *
 * - Node-API 10 and later (Node 22.14+, 24): better-sqlite3 13, a Node-API addon.
 * - older (Node 20): better-sqlite3 12.
 *
 * better-sqlite3 12 derives its Database and Statement from `node::ObjectWrap`. Built with Node
 * 24.19+ headers, that class registers an environment cleanup hook per object and removes it in its
 * destructor, which CHECKs that a Node context is entered. V8 runs a garbage-collected Statement's
 * destructor inside whatever GC collects it, including one finished by a platform task with no
 * context entered, and then the process aborts (`Assertion failed: (env) != nullptr` in
 * `node::RemoveEnvironmentCleanupHook`). Statements become garbage all the time here (every
 * transaction prepares its BEGIN and COMMIT, the prepare cache expires entries), so on Node 24
 * version 12 brings the gateway down soon after start. Version 13 uses Node-API wrappers, which
 * have no such hook, but needs Node-API 10, which Node 20 lacks.
 */

/** What the client uses of a better-sqlite3 statement (the same in versions 12 and 13). */
interface DriverStatement {
  readonly reader: boolean
  safeIntegers(on: boolean): DriverStatement
  raw(on: boolean): DriverStatement
  all(...params: ReadonlyArray<unknown>): Array<object>
  run(...params: ReadonlyArray<unknown>): unknown
}

/** What the client uses of a better-sqlite3 database. */
interface DriverDatabase {
  readonly inTransaction: boolean
  prepare(sql: string): DriverStatement
  pragma(source: string): unknown
  serialize(): Uint8Array
  backup(destination: string): Promise<{ readonly totalPages: number; readonly remainingPages: number }>
  loadExtension(path: string): void
  close(): void
}

type Driver = new (filename: string, options: { readonly readonly: boolean }) => DriverDatabase

/** The module name of the driver for this Node: `better-sqlite3-napi` is better-sqlite3 13. */
export const driverModule = (napiVersion: number): string => (napiVersion >= 10 ? "better-sqlite3-napi" : "better-sqlite3")

/** The resolved path of the driver module for this Node (worker threads load it by path). */
export const driverPath = (): string => createRequire(import.meta.url).resolve(driverModule(Number(process.versions.napi)))

const loadDriver = (): Driver => {
  const require = createRequire(import.meta.url)
  const driver: Driver = require(driverModule(Number(process.versions.napi)))
  return driver
}

/** The options of `@effect/sql-sqlite-node`'s `SqliteClient.layer` that this gateway uses. */
export interface SqliteClientConfig {
  readonly filename: string
  readonly readonly?: boolean | undefined
  readonly prepareCacheSize?: number | undefined
  readonly prepareCacheTTL?: Duration.DurationInput | undefined
  readonly disableWAL?: boolean | undefined
  /** how often the WAL is checkpointed (default `CHECKPOINT_EVERY_MS`) */
  readonly checkpointEveryMs?: number | undefined
}

interface SqliteConnection extends Connection {
  readonly export: Effect.Effect<Uint8Array, SqlError>
  readonly backup: (destination: string) => Effect.Effect<{ readonly totalPages: number; readonly remainingPages: number }, SqlError>
  readonly loadExtension: (path: string) => Effect.Effect<void, SqlError>
}

const failed = (message: string) => (cause: unknown) => new SqlError({ cause, message })

/** One connection behind a semaphore, statements prepared once and cached, as in `@effect/sql-sqlite-node`. */
export const make = (options: SqliteClientConfig): Effect.Effect<SqliteClient, never, Scope.Scope | Reactivity.Reactivity> =>
  Effect.gen(function* () {
    const compiler = Statement.makeCompilerSqlite()
    const Sqlite = loadDriver()
    const db = new Sqlite(options.filename, { readonly: options.readonly ?? false })
    yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
    if (options.disableWAL !== true) db.pragma("journal_mode = WAL")
    // Every commit fsynced: an acknowledged write (a stored response, a file's row, a key) is on
    // disk. better-sqlite3 builds SQLite with SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, so in WAL mode a
    // connection runs NORMAL unless told otherwise: commits reach the disk only at the next
    // checkpoint, and a power loss may roll back ones already acknowledged. (Group commits defer
    // their fsync to `WalSync.sync`, off the event loop: see WalSync.ts.)
    db.pragma("synchronous = FULL")
    const wal = options.disableWAL !== true
    // no checkpoint inside a COMMIT on the event loop: a worker thread runs them (WalCheckpoints.ts,
    // started by `layer`; this connection alone would let the WAL grow)
    if (wal) db.pragma("wal_autocheckpoint = 0")

    const cache = yield* Cache.make({
      capacity: options.prepareCacheSize ?? 200,
      timeToLive: options.prepareCacheTTL ?? Duration.minutes(10),
      lookup: (sql: string) => Effect.try({ try: () => db.prepare(sql), catch: failed("Failed to prepare statement ") })
    })
    // a Cache keeps failed lookups too: a statement that failed to prepare (a table missing, the
    // database busy or unreadable) is prepared again next time rather than failing until its TTL
    const prepareCache = {
      get: (sql: string) => Effect.tapError(cache.get(sql), () => cache.invalidate(sql)),
      invalidateAll: cache.invalidateAll
    }

    /** rows of a reader, the run result of a writer for `raw`, else no rows */
    const runStatement = (statement: DriverStatement, params: ReadonlyArray<unknown>, raw: boolean) =>
      Effect.withFiberRuntime<ReadonlyArray<object> | unknown, SqlError>((fiber) => {
        if (Context.get(fiber.currentContext, Client.SafeIntegers)) statement.safeIntegers(true)
        try {
          if (statement.reader) return Effect.succeed(statement.all(...params))
          const result = statement.run(...params)
          return Effect.succeed(raw ? result : [])
        } catch (cause) {
          return Effect.fail(new SqlError({ cause, message: "Failed to execute statement" }))
        }
      })
    const rows = (statement: DriverStatement, params: ReadonlyArray<unknown>) =>
      Effect.map(runStatement(statement, params, false), (result) => (Array.isArray(result) ? result : []))

    const prepared = (sql: string, params: ReadonlyArray<unknown>) => Effect.flatMap(prepareCache.get(sql), (s) => rows(s, params))

    const runValues = (sql: string, params: ReadonlyArray<unknown>) =>
      Effect.acquireUseRelease(
        prepareCache.get(sql),
        (statement) =>
          Effect.try({
            try: () => {
              if (!statement.reader) {
                statement.run(...params)
                return []
              }
              statement.raw(true)
              return statement.all(...params).filter((row): row is ReadonlyArray<unknown> => Array.isArray(row))
            },
            catch: failed("Failed to execute statement")
          }),
        (statement) => Effect.sync(() => statement.reader && statement.raw(false))
      )

    /**
     * A transaction under `withDeferredSync` runs with `synchronous=NORMAL` from its BEGIN to its
     * end (SQLite refuses to change it inside a transaction), FULL again after whatever happened.
     * A COMMIT that failed and left the transaction open is rolled back first.
     */
    const deferringSync = (sql: string, run: Effect.Effect<ReadonlyArray<object>, SqlError>) => {
      const restore = Effect.try({
        try: () => {
          if (db.inTransaction) {
            try {
              db.prepare("ROLLBACK").run()
            } catch {
              // nothing left to roll back
            }
          }
          db.pragma("synchronous = FULL")
        },
        catch: failed("Failed to restore synchronous = FULL")
      }).pipe(Effect.orDie)
      switch (sql) {
        case "BEGIN":
          return Effect.zipRight(
            Effect.try({ try: () => db.pragma("synchronous = NORMAL"), catch: failed("Failed to set synchronous = NORMAL") }),
            Effect.tapErrorCause(run, () => restore)
          )
        case "COMMIT":
        case "ROLLBACK":
          return Effect.ensuring(run, restore)
        default:
          return run
      }
    }

    const connection: SqliteConnection = {
      execute: (sql, params, transformRows) => (transformRows ? Effect.map(prepared(sql, params), transformRows) : prepared(sql, params)),
      executeRaw: (sql, params) => Effect.flatMap(prepareCache.get(sql), (s) => runStatement(s, params, true)),
      executeValues: (sql, params) => runValues(sql, params),
      executeUnprepared: (sql, params, transformRows) => {
        const run = Effect.flatMap(Effect.try({ try: () => db.prepare(sql), catch: failed("Failed to prepare statement ") }), (s) => rows(s, params ?? []))
        const effect = wal ? Effect.flatMap(FiberRef.get(deferredSync), (deferred) => (deferred ? deferringSync(sql, run) : run)) : run
        return transformRows ? Effect.map(effect, transformRows) : effect
      },
      executeStream: () => Effect.dieMessage("executeStream not implemented"),
      export: Effect.try({ try: () => db.serialize(), catch: failed("Failed to export database") }),
      backup: (destination) => Effect.tryPromise({ try: () => db.backup(destination), catch: failed("Failed to backup database") }),
      loadExtension: (path) =>
        Effect.tap(Effect.try({ try: () => db.loadExtension(path), catch: failed("Failed to load extension") }), () => prepareCache.invalidateAll)
    }

    const semaphore = yield* Effect.makeSemaphore(1)
    const acquirer = semaphore.withPermits(1)(Effect.succeed(connection))
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.as(
        Effect.zipRight(
          restore(semaphore.take(1)),
          Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))
        ),
        connection
      )
    )
    const client = yield* Client.make({ acquirer, compiler, transactionAcquirer, spanAttributes: [["db.system.name", "sqlite"]] })
    // `updateValues` is `never` on SQLite: the cast the library makes too
    const sqliteClient: SqliteClient = Object.assign(client, {
      [TypeId]: TypeId,
      config: options,
      export: Effect.flatMap(acquirer, (_) => _.export),
      backup: (destination: string) => Effect.flatMap(acquirer, (_) => _.backup(destination)),
      loadExtension: (path: string) => Effect.flatMap(acquirer, (_) => _.loadExtension(path))
    }) as SqliteClient
    return sqliteClient
  })

/**
 * `SqliteClient` and `SqlClient` for one database file, closed with the Layer's scope, its
 * `WalSync`, and (in WAL mode) its `WalCheckpoints`, made on a worker thread.
 */
export const layer = (config: SqliteClientConfig): Layer.Layer<SqliteClient | Client.SqlClient | WalSync | WalCheckpoints> =>
  Layer.scopedContext(
    Effect.gen(function* () {
      const wal = config.disableWAL !== true
      // made first, closed last: see WalCheckpoints.make
      const checkpoints = wal ? yield* WalCheckpoints.make(driverPath(), config.filename, { everyMs: config.checkpointEveryMs }) : undefined
      const client = yield* make(config)
      const walSync = yield* WalSync.make(config.filename, { wal })
      if (checkpoints !== undefined) yield* checkpoints.start
      const context = Context.make(SqliteClient, client).pipe(Context.add(Client.SqlClient, client), Context.add(WalSync, walSync))
      return Context.add(context, WalCheckpoints, checkpoints?.service ?? WalCheckpoints.none)
    })
  ).pipe(Layer.provide(Reactivity.layer))
