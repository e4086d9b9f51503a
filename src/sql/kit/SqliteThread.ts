import { SqlError } from "@effect/sql/SqlError"
import { Effect, type Scope } from "effect"
import { Worker } from "node:worker_threads"

/**
 * A better-sqlite3 connection of its own on a worker thread, for work that must not hold the event
 * loop: better-sqlite3 is synchronous, so a statement run on the main thread stops everything else
 * until it returns. In WAL mode this connection runs beside the gateway's own (readers never wait
 * for the writer, nor the writer for them). Statements are run one at a time in the order sent;
 * the thread starts on first use, starts again after it died, and is closed with the scope.
 */

const source = `
const { parentPort, workerData } = require("node:worker_threads")
const Database = require(workerData.driver)
let db
let openError
try {
  db = new Database(workerData.filename, { readonly: workerData.readonly, fileMustExist: true })
  for (const pragma of workerData.pragmas) db.pragma(pragma)
} catch (e) {
  openError = e
}
const cache = new Map()
const prepare = (sql) => {
  let statement = cache.get(sql)
  if (statement === undefined) {
    statement = db.prepare(sql)
    if (cache.size >= 100) cache.delete(cache.keys().next().value)
    cache.set(sql, statement)
  }
  return statement
}
const failure = (id, e) => ({ id, ok: false, message: String(e && e.message), code: e && typeof e.code === "string" ? e.code : undefined })
parentPort.on("message", (m) => {
  if (m.close) {
    try {
      if (db !== undefined) db.close()
    } finally {
      parentPort.close()
    }
    return
  }
  if (openError !== undefined) return parentPort.postMessage(failure(m.id, openError))
  try {
    const statement = prepare(m.sql)
    statement.safeIntegers(m.safeIntegers)
    let rows = []
    if (!statement.reader) statement.run(...m.params)
    else if (!m.values) rows = statement.all(...m.params)
    else {
      statement.raw(true)
      try {
        rows = statement.all(...m.params)
      } finally {
        statement.raw(false)
      }
    }
    parentPort.postMessage({ id: m.id, ok: true, rows })
  } catch (e) {
    parentPort.postMessage(failure(m.id, e))
  }
})
`

interface Reply {
  readonly id: number
  readonly ok: boolean
  readonly rows?: ReadonlyArray<unknown>
  readonly message?: string
  readonly code?: string
}

export interface SqliteThreadOptions {
  /** the resolved path of the better-sqlite3 module to load */
  readonly driver: string
  readonly filename: string
  readonly readonly: boolean
  /** run when the connection opens, e.g. `synchronous = FULL` */
  readonly pragmas?: ReadonlyArray<string>
}

export interface QueryOptions {
  /** rows as arrays of values rather than objects */
  readonly values?: boolean
  /** integers as bigint */
  readonly safeIntegers?: boolean
}

export interface SqliteThread {
  /** rows of a reader statement; no rows for any other */
  readonly query: (sql: string, params: ReadonlyArray<unknown>, options?: QueryOptions) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
}

/** The error of the worker thread as the main thread sees it: the message and SQLite's code, as better-sqlite3 throws them. */
class ThreadError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined
  ) {
    super(message)
  }
}

export const make = (options: SqliteThreadOptions): Effect.Effect<SqliteThread, never, Scope.Scope> =>
  Effect.gen(function* () {
    let worker: Worker | undefined
    let closed = false
    let next = 0
    const pending = new Map<number, (reply: Reply) => void>()
    const start = (): Worker => {
      const w = new Worker(source, {
        eval: true,
        workerData: { driver: options.driver, filename: options.filename, readonly: options.readonly, pragmas: options.pragmas ?? [] }
      })
      // the scope closes it; an exiting process does not wait for it
      w.unref()
      const died = (error?: unknown) => {
        if (worker === w) worker = undefined
        for (const [id, resolve] of pending) resolve({ id, ok: false, message: `the SQLite thread stopped${error instanceof Error ? `: ${error.message}` : ""}` })
        pending.clear()
      }
      w.on("message", (reply: Reply) => {
        const resolve = pending.get(reply.id)
        pending.delete(reply.id)
        resolve?.(reply)
      })
      w.on("error", died)
      w.on("exit", () => died())
      return w
    }
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        const w = worker
        worker = undefined
        closed = true
        if (w === undefined) return resume(Effect.void)
        // closed by its own thread, after whatever it is running: the last connection to close
        // checkpoints the WAL and removes it
        w.once("exit", () => resume(Effect.void))
        w.postMessage({ close: true })
      })
    )
    const query = (sql: string, params: ReadonlyArray<unknown>, queryOptions: QueryOptions = {}) =>
      Effect.async<ReadonlyArray<unknown>, SqlError>((resume) => {
        if (closed) return resume(Effect.fail(new SqlError({ cause: new ThreadError("the SQLite thread is closed", undefined), message: "Failed to execute statement" })))
        const id = next++
        pending.set(id, (reply) =>
          resume(
            reply.ok
              ? Effect.succeed(reply.rows ?? [])
              : Effect.fail(new SqlError({ cause: new ThreadError(reply.message ?? "unknown error", reply.code), message: "Failed to execute statement" }))
          )
        )
        worker ??= start()
        worker.postMessage({ id, sql, params, values: queryOptions.values === true, safeIntegers: queryOptions.safeIntegers === true })
        // an interrupted caller leaves the statement to finish on the thread; its rows are dropped
        return Effect.sync(() => void pending.delete(id))
      })
    return { query }
  })
