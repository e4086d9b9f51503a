import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import type { ParseError } from "effect/ParseResult"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Effect, Either, Option, Schema, type Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { WalSync, withDeferredSync } from "../../sql/WalSync.js"
import * as GroupCommit from "../../sql/kit/GroupCommit.js"
import { makeJsonWorker } from "../../sql/kit/JsonWorker.js"
import { Log } from "../ops/Log.js"
import { makeTallies, throttledSweep } from "../../sql/kit/StoreKit.js"
import {
  answeredAsFailed,
  commitDefect,
  defaultResponseStoreLimits,
  expiryOf,
  readFailed,
  storedFormOf,
  type ResponseStoreLimits,
  type ResponseStoreService,
  SAFE_ID,
  type StoredRecord,
  storeUnavailable
} from "./ResponseRecords.js"
import {
  fileName,
  joinPieces,
  parseStored,
  readFile,
  reasonOf,
  StoreFailure,
  syncDirectory,
  unlinkAll,
  writeAtomically,
  yieldToEventLoop
} from "../../sql/kit/StoredForm.js"

const SWEEP_EVERY_MS = 60_000
const BATCH = 500
/** inline bytes committed in one transaction (a batch past it is split): bounds one hold of the event loop */
const COMMIT_BYTES = 1024 * 1024
/** a row's own share of `COMMIT_BYTES` */
const ROW_WEIGHT = 1024

/** `body`: the stored form of an inline record; null for a record kept as a file */
const Row = Schema.Struct({
  id: Schema.String,
  app: Schema.String,
  created_at: Schema.Number,
  expires_at: Schema.Number,
  bytes: Schema.Number,
  body: Schema.NullOr(Schema.Uint8ArrayFromSelf)
})
type Row = typeof Row.Type
const Held = Schema.Struct({ id: Schema.String, app: Schema.String, bytes: Schema.Number, in_file: Schema.BooleanFromUnknown })
type Held = typeof Held.Type
const Removed = Schema.Struct({ ...Held.fields, expires_at: Schema.Number })
const Tally = Schema.Struct({ app: Schema.String, count: Schema.Number, bytes: Schema.Number })

const asBuffer = (bytes: Uint8Array) => (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))
const filesOf = (rows: ReadonlyArray<Held>) => rows.filter((row) => row.in_file).map((row) => row.id)

/**
 * Stored responses on SQLite: one row per record (table `responses`). A small record's stored
 * form is the row's `body`; a larger one is `<dataDir>/responses/<id>.json`, written
 * asynchronously so it never blocks other requests. Rows are written by one writer in group
 * commits: the records that finish together share one transaction and one fsync. Per-app counters
 * live in memory so saves run no COUNT or SUM (one process owns the file).
 */
export const makeSqliteResponseStore = (
  dataDir: string,
  limits: Partial<ResponseStoreLimits> = {}
): Effect.Effect<ResponseStoreService, StoreFailure | SqlError | ParseError, SqlClient.SqlClient | WalSync | Log | Scope.Scope> =>
  Effect.gen(function* () {
    const worker = yield* Effect.acquireRelease(Effect.sync(makeJsonWorker), (w) => w.close)
    const sql = yield* SqlClient.SqlClient
    const wal = yield* WalSync
    const log = yield* Log
    const scope = yield* Effect.scope
    const caps = { ...defaultResponseStoreLimits, ...limits }
    const maxRecordBytes = Math.min(caps.maxRecordBytes, caps.maxBytes)
    const dir = path.join(dataDir, "responses")
    const lock = yield* Effect.makeSemaphore(1)
    const tallies = makeTallies()

    const insert = SqlSchema.void({ Request: Schema.Array(Row), execute: (rows) => sql`INSERT INTO responses ${sql.insert(rows)}` })
    const findLive = SqlSchema.findOne({
      Request: Schema.Struct({ app: Schema.String, id: Schema.String, now: Schema.Number }),
      Result: Row,
      execute: ({ app, id, now }) => sql`SELECT id, app, created_at, expires_at, bytes, body FROM responses WHERE id = ${id} AND app = ${app} AND expires_at > ${now}`
    })
    const deleteOne = SqlSchema.findOne({
      Request: Schema.Struct({ app: Schema.String, id: Schema.String }),
      Result: Removed,
      execute: ({ app, id }) => sql`DELETE FROM responses WHERE id = ${id} AND app = ${app} RETURNING id, app, bytes, body IS NULL AS in_file, expires_at`
    })
    const deleteOldest = SqlSchema.findAll({
      Request: Schema.Struct({ app: Schema.String, limit: Schema.Number }),
      Result: Held,
      execute: ({ app, limit }) =>
        sql`DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses WHERE app = ${app} ORDER BY created_at, rowid LIMIT ${limit}) RETURNING id, app, bytes, body IS NULL AS in_file`
    })
    const deleteIds = SqlSchema.void({
      Request: Schema.Array(Schema.String),
      execute: (ids) => sql`DELETE FROM responses WHERE ${sql.in("id", ids)}`
    })
    const oldest = SqlSchema.findAll({
      Request: Schema.Struct({ app: Schema.String, limit: Schema.Number }),
      Result: Held,
      execute: ({ app, limit }) => sql`SELECT id, app, bytes, body IS NULL AS in_file FROM responses WHERE app = ${app} ORDER BY created_at, rowid LIMIT ${limit}`
    })
    const expired = SqlSchema.findAll({
      Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number }),
      Result: Held,
      execute: ({ now, limit }) => sql`SELECT id, app, bytes, body IS NULL AS in_file FROM responses WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}`
    })
    const fileIds = SqlSchema.findAll({
      Request: Schema.Void,
      Result: Schema.Struct({ id: Schema.String }),
      execute: () => sql`SELECT id FROM responses WHERE body IS NULL`
    })
    const totals = SqlSchema.findAll({
      Request: Schema.Void,
      Result: Tally,
      execute: () => sql`SELECT app, COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM responses GROUP BY app`
    })

    const adjust = tallies.adjust
    const dropped = (rows: ReadonlyArray<Held>) => rows.forEach((row) => adjust(row.app, -1, -row.bytes))

    /** One batch of expired rows: rows go under the lock, files after it. */
    const sweepBatch = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* lock.withPermits(1)(
        Effect.gen(function* () {
          const rows = yield* expired({ now, limit: BATCH })
          if (rows.length > 0) yield* deleteIds(rows.map((row) => row.id))
          dropped(rows)
          return rows
        })
      )
      yield* unlinkAll(dir, filesOf(rows))
      return rows.length
    })
    const sweep = Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => Effect.zipLeft(sweepBatch, yieldToEventLoop) })

    const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "responses.sweep_failed" })
    const maybeSweep = sweeper.maybe

    /**
     * One transaction for `rows`: all inserted (in order: equal timestamps keep it), then each
     * app's oldest records go until its caps hold again (rows of this same batch included).
     * Answers the rows removed. Under the lock; the counters move only once it committed.
     */
    const commit = (rows: ReadonlyArray<Row>) =>
      lock.withPermits(1)(
        Effect.gen(function* () {
          yield* insert(rows)
          const held = new Map<string, { count: number; bytes: number }>()
          for (const row of rows) {
            const app = held.get(row.app) ?? { ...tallies.of(row.app) }
            app.count++
            app.bytes += row.bytes
            held.set(row.app, app)
          }
          const victims: Array<Held> = []
          for (const [name, app] of held) {
            const gone = (rows: ReadonlyArray<Held>) => {
              victims.push(...rows)
              for (const row of rows) {
                app.count--
                app.bytes -= row.bytes
              }
            }
            if (app.count > caps.maxRecords) gone(yield* deleteOldest({ app: name, limit: app.count - caps.maxRecords }))
            while (app.bytes > caps.maxBytes && app.count > 0) {
              const chosen: Array<Held> = []
              let bytes = app.bytes
              for (const victim of yield* oldest({ app: name, limit: 16 })) {
                if (bytes <= caps.maxBytes) break
                chosen.push(victim)
                bytes -= victim.bytes
              }
              if (chosen.length === 0) break
              yield* deleteIds(chosen.map((victim) => victim.id))
              gone(chosen)
            }
          }
          return victims
        }).pipe(
          (effect) => withDeferredSync(sql.withTransaction(effect)),
          // a failed COMMIT (a full disk): SQLite has rolled it back
          Effect.catchSomeDefect(commitDefect),
          Effect.tap((victims) =>
            Effect.sync(() => {
              rows.forEach((row) => adjust(row.app, 1, row.bytes))
              dropped(victims)
            })
          )
        )
      )

    const databaseFailure = (error: unknown) => new StoreFailure({ reason: reasonOf(error instanceof SqlError ? error.cause : undefined, "database") })
    /**
     * A batch of the writer: file records' renames reach the disk (one directory fsync), then
     * every row in one transaction; then, while the writer goes on with the next batch, the WAL
     * reaches the disk (one fsync, off the event loop) and the saves are answered. If the
     * transaction fails, each row is tried alone, so that one bad row does not fail the others.
     */
    const runBatch = (rows: ReadonlyArray<Row>) =>
      Effect.gen(function* () {
        const needsDirectory = rows.some((row) => row.body === null)
        const directory = needsDirectory ? yield* Effect.either(syncDirectory(dir)) : Either.right(undefined)
        const outcomes: Array<Either.Either<ReadonlyArray<Held>, StoreFailure>> = []
        const ready: Array<number> = []
        rows.forEach((row, i) => {
          if (Either.isLeft(directory) && row.body === null) outcomes[i] = Either.left(directory.left)
          else ready.push(i)
        })
        if (ready.length === 0) return Effect.succeed(outcomes)
        // the files of the records removed are unlinked by the first saver of the transaction
        const together = yield* Effect.either(commit(ready.map((i) => rows[i])))
        if (Either.isRight(together)) ready.forEach((i, k) => (outcomes[i] = Either.right(k === 0 ? together.right : [])))
        else if (ready.length === 1) outcomes[ready[0]] = Either.left(databaseFailure(together.left))
        else {
          for (const i of ready) {
            const alone = yield* Effect.either(commit([rows[i]]))
            outcomes[i] = Either.isRight(alone) ? Either.right(alone.right) : Either.left(databaseFailure(alone.left))
          }
        }
        if (!outcomes.some(Either.isRight)) return Effect.succeed(outcomes)
        // committed, but not known to be durable: answered as failed (the rows stay readable)
        return Effect.map(Effect.either(wal.sync), (synced) =>
          Either.isRight(synced) ? outcomes : outcomes.map((outcome) => Either.flatMap(outcome, () => Either.left(new StoreFailure({ reason: "sync" }))))
        )
      })

    const writer = yield* GroupCommit.make({
      run: runBatch,
      weight: (row: Row) => ROW_WEIGHT + (row.body?.length ?? 0),
      maxWeight: COMMIT_BYTES,
      closed: () => new StoreFailure({ reason: "closed" })
    })

    const store = (record: StoredRecord, maxAgeDays: number) =>
      Effect.gen(function* () {
        const form = yield* storedFormOf(record, maxRecordBytes, log)
        if (Option.isNone(form)) return "skipped" as const
        const { bytes, pieces } = form.value
        const inline = bytes <= caps.maxInlineBytes
        if (!inline) yield* writeAtomically(dir, fileName(record.id), pieces)
        const row = { id: record.id, app: record.app, created_at: record.createdAt, expires_at: expiryOf(record, maxAgeDays), bytes, body: inline ? joinPieces(pieces) : null }
        const victims = yield* writer.submit(row).pipe(Effect.tapError(() => (inline ? Effect.void : unlinkAll(dir, [record.id]))))
        yield* unlinkAll(dir, filesOf(victims))
        return "stored" as const
      }).pipe(Effect.catchAllCause(answeredAsFailed(log, record)))

    // start: drop file rows whose file is gone, files (and leftover temp files) with no row, then expired records
    yield* Effect.tryPromise({ try: () => fs.promises.mkdir(dir, { recursive: true }), catch: (error) => new StoreFailure({ reason: reasonOf(error, "mkdir") }) })
    const names = new Set(yield* Effect.tryPromise({ try: () => fs.promises.readdir(dir), catch: (error) => new StoreFailure({ reason: reasonOf(error, "readdir") }) }))
    const ids = (yield* fileIds()).map((row) => row.id)
    const rowsWithoutFile = ids.filter((id) => !names.has(fileName(id)))
    for (let i = 0; i < rowsWithoutFile.length; i += BATCH) yield* deleteIds(rowsWithoutFile.slice(i, i + BATCH))
    const known = new Set(ids.map(fileName))
    const orphans = [...names].filter((name) => name.endsWith(".tmp") || (name.endsWith(".json") && !known.has(name)))
    yield* Effect.promise(() => Promise.all(orphans.map((name) => fs.promises.unlink(path.join(dir, name)).catch(() => undefined))))
    if (rowsWithoutFile.length + orphans.length > 0) log.info("responses.start_cleanup", { rowsWithoutFile: rowsWithoutFile.length, orphanFiles: orphans.length })
    for (const tally of yield* totals()) tallies.set(tally.app, { count: tally.count, bytes: tally.bytes })
    yield* sweeper.started
    yield* sweep

    return {
      save: Effect.fn("ResponseStore.save")(function* (record, options) {
        yield* maybeSweep
        return yield* Effect.uninterruptible(store(record, options.maxAgeDays))
      }),
      get: Effect.fn("ResponseStore.get")(function* (app, id) {
        yield* maybeSweep
        if (!SAFE_ID.test(id)) return Option.none()
        const now = yield* Clock.currentTimeMillis
        const found = yield* findLive({ app, id, now }).pipe(Effect.catchAll(storeUnavailable(log, "responses.read_failed", { app, id })))
        if (Option.isNone(found)) return Option.none()
        const row = found.value
        const bytes = row.body === null ? readFile(path.join(dir, fileName(row.id))) : Effect.succeed(asBuffer(row.body))
        return yield* Effect.flatMap(bytes, (buffer) => parseStored(buffer, worker)).pipe(
          Effect.map(({ response, input }): Option.Option<StoredRecord> => Option.some({ id: row.id, app: row.app, createdAt: row.created_at, response, input })),
          Effect.catchAll(readFailed(log, app, id))
        )
      }),
      remove: Effect.fn("ResponseStore.remove")(function* (app, id) {
        if (!SAFE_ID.test(id)) return false
        const now = yield* Clock.currentTimeMillis
        const row = yield* lock.withPermits(1)(
          Effect.tap(deleteOne({ app, id }), (row) => Effect.sync(() => Option.map(row, (held) => dropped([held])))).pipe(
            Effect.catchAll(storeUnavailable(log, "responses.remove_failed", { app, id }))
          )
        )
        if (Option.isNone(row)) return false
        yield* unlinkAll(dir, filesOf([row.value]))
        return row.value.expires_at > now
      }),
      stats: () => Effect.sync(tallies.all)
    } satisfies ResponseStoreService
  })
