import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Context, Deferred, Effect, Layer, Option, Schema, type Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { Errors, type GatewayError } from "../domain/Errors.js"
import { acceptedKinds, makeClassifier } from "../domain/FileKind.js"
import { randomHex } from "../domain/Ids.js"
import { Log } from "./Log.js"
import { makeTallies, throttledSweep } from "./StoreKit.js"

/** One uploaded file (spec 2.4); the shapes of the three Files APIs are built from it. */
export interface FileRecord {
  /** `file-` + 32 hex */
  readonly id: string
  readonly app: string
  readonly filename: string
  /** Gemini-style `displayName`, when one was given */
  readonly displayName?: string
  /** chat-style purpose (`user_data` for uploads of the other shapes) */
  readonly purpose: string
  /** the type found from the bytes */
  readonly mimeType: string
  readonly bytes: number
  /** epoch ms */
  readonly createdAt: number
  readonly expiresAt: number
}

export type FileKind = "image" | "pdf" | "text"

export const kindOf = (mimeType: string): FileKind => (mimeType.startsWith("image/") ? "image" : mimeType === "application/pdf" ? "pdf" : "text")

/** Caps of the store (spec 8); tests pass smaller ones. */
export interface FileStoreLimits {
  readonly maxFiles: number
  readonly maxBytes: number
  /** one file, never over this whatever the app's body cap */
  readonly maxFileBytes: number
  readonly maxTextBytes: number
  /** saves waiting behind the running one, per app */
  readonly maxWaiting: number
  /** bytes held by the running and waiting saves of an app */
  readonly maxQueuedBytes: number
}

export const defaultFileStoreLimits: FileStoreLimits = {
  maxFiles: 1000,
  maxBytes: 1024 * 1024 * 1024,
  maxFileBytes: 32 * 1024 * 1024,
  maxTextBytes: 4 * 1024 * 1024,
  maxWaiting: 8,
  maxQueuedBytes: 64 * 1024 * 1024
}

/** A file written to its temporary name, checked and synced, not yet visible. */
export interface StagedFile {
  readonly id: string
  readonly bytes: number
  readonly mimeType: string
}

/**
 * An upload being written: bytes are appended (one request body part, or the chunks of a
 * resumable upload over several requests), then `finish` classifies and syncs the file. Until it
 * is committed the bytes live under a temporary name that `discard`, a failed write and the next
 * start remove.
 */
export interface Stage {
  readonly write: (source: AsyncIterable<Uint8Array>) => Effect.Effect<void, GatewayError>
  readonly size: () => number
  readonly finish: Effect.Effect<StagedFile, GatewayError>
  readonly discard: Effect.Effect<void>
}

export interface StageOptions {
  readonly filename: string
  /** the type the upload declared (the file part's own Content-Type); only text needs it */
  readonly declaredType?: string
  /** the app's body cap; the store's own cap applies too */
  readonly maxBytes: number
}

export interface CommitOptions {
  readonly filename: string
  readonly purpose: string
  readonly displayName?: string
  /** retention; 0 or unset means 30 days */
  readonly maxAgeDays: number
}

const DAY_MS = 24 * 60 * 60 * 1000
const SWEEP_EVERY_MS = 60_000
const BATCH = 500
const ID = /^file-[0-9a-f]{32}$/
const MiB = 1024 * 1024

const Row = Schema.Struct({
  id: Schema.String,
  app: Schema.String,
  filename: Schema.String,
  display_name: Schema.NullOr(Schema.String),
  purpose: Schema.String,
  mime_type: Schema.String,
  bytes: Schema.Number,
  created_at: Schema.Number,
  expires_at: Schema.Number
})
type Row = typeof Row.Type
const Held = Schema.Struct({ id: Schema.String, app: Schema.String, bytes: Schema.Number })
const Tally = Schema.Struct({ app: Schema.String, count: Schema.Number, bytes: Schema.Number })

const recordOf = (row: Row): FileRecord => ({
  id: row.id,
  app: row.app,
  filename: row.filename,
  ...(row.display_name !== null ? { displayName: row.display_name } : {}),
  purpose: row.purpose,
  mimeType: row.mime_type,
  bytes: row.bytes,
  createdAt: row.created_at,
  expiresAt: row.expires_at
})

const tooLarge = (limit: number, what: string) =>
  Errors.payloadTooLarge("file_too_large", `The file is larger than ${limit} bytes, the most ${what}`, { param: "file", closeConnection: true })

const storageFailed = () => Errors.internal("file_store_failed", "The file could not be stored; nothing was kept")

/** Per-app save queue state. */
interface Queue {
  running: boolean
  held: number
  readonly waiting: Array<{ readonly bytes: number; readonly go: Deferred.Deferred<void> }>
}

/**
 * Uploaded files: metadata rows in SQLite (table `files`), bytes in `<dataDir>/files/<id>`.
 * A save writes to a temporary name, fsyncs, renames, then commits the row: an acknowledged upload
 * survives a crash, and a failed one leaves nothing visible. Per app: 1000 files and 1 GiB (nothing
 * is ever deleted to make room), saves one at a time with a bounded queue, retention by age.
 */
export class FileStore extends Context.Tag("gateway/FileStore")<
  FileStore,
  {
    /**
     * A place in the app's save queue for the scope's lifetime: at once when no save of the app
     * runs, else after the ones before it; 429 `file_saves_busy` at once when 8 already wait or the
     * bytes held would pass 64 MiB. Leaving the scope (the request ended) leaves the queue.
     */
    readonly admit: (app: string, expectedBytes: number) => Effect.Effect<void, GatewayError, Scope.Scope>
    /** refuse early when the app already holds its most files */
    readonly checkRoom: (app: string) => Effect.Effect<void, GatewayError>
    readonly stage: (options: StageOptions) => Effect.Effect<Stage, GatewayError>
    /** remove a finished stage that will not be committed */
    readonly drop: (staged: StagedFile) => Effect.Effect<void>
    /** make a staged file visible; 400 `file_limit_exceeded` / `file_storage_full` when it does not fit */
    readonly commit: (app: string, staged: StagedFile, options: CommitOptions) => Effect.Effect<FileRecord, GatewayError>
    /** a live file of this app, or none (unknown, deleted, expired, other app) */
    readonly get: (app: string, id: string) => Effect.Effect<Option.Option<FileRecord>>
    /** the app's live files, oldest first */
    readonly list: (app: string) => Effect.Effect<ReadonlyArray<FileRecord>>
    /** the path of a live file's bytes, for streaming a download */
    readonly path: (record: FileRecord) => string
    /** a live file's bytes, for delivery to a model */
    readonly read: (record: FileRecord) => Effect.Effect<Buffer, GatewayError>
    readonly remove: (app: string, id: string) => Effect.Effect<boolean>
    /** files and bytes held per app (status pages) */
    readonly stats: () => Effect.Effect<ReadonlyArray<{ readonly app: string; readonly count: number; readonly bytes: number }>>
  }
>() {
  static readonly make = (dataDir: string, limits: Partial<FileStoreLimits> = {}) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      const scope = yield* Effect.scope
      const caps = { ...defaultFileStoreLimits, ...limits }
      const dir = path.join(dataDir, "files")
      const lock = yield* Effect.makeSemaphore(1)
      const tallies = makeTallies()
      const queues = new Map<string, Queue>()

      const insert = SqlSchema.void({ Request: Row, execute: (row) => sql`INSERT INTO files ${sql.insert(row)}` })
      const findLive = SqlSchema.findOne({
        Request: Schema.Struct({ app: Schema.String, id: Schema.String, now: Schema.Number }),
        Result: Row,
        execute: ({ app, id, now }) =>
          sql`SELECT id, app, filename, display_name, purpose, mime_type, bytes, created_at, expires_at FROM files WHERE id = ${id} AND app = ${app} AND expires_at > ${now}`
      })
      const listLive = SqlSchema.findAll({
        Request: Schema.Struct({ app: Schema.String, now: Schema.Number }),
        Result: Row,
        execute: ({ app, now }) =>
          sql`SELECT id, app, filename, display_name, purpose, mime_type, bytes, created_at, expires_at FROM files WHERE app = ${app} AND expires_at > ${now} ORDER BY seq`
      })
      const deleteOne = SqlSchema.findOne({
        Request: Schema.Struct({ app: Schema.String, id: Schema.String }),
        Result: Schema.Struct({ ...Held.fields, expires_at: Schema.Number }),
        execute: ({ app, id }) => sql`DELETE FROM files WHERE id = ${id} AND app = ${app} RETURNING id, app, bytes, expires_at`
      })
      const deleteIds = SqlSchema.void({ Request: Schema.Array(Schema.String), execute: (ids) => sql`DELETE FROM files WHERE ${sql.in("id", ids)}` })
      const expired = SqlSchema.findAll({
        Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number }),
        Result: Held,
        execute: ({ now, limit }) => sql`SELECT id, app, bytes FROM files WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}`
      })
      const allIds = SqlSchema.findAll({ Request: Schema.Void, Result: Schema.Struct({ id: Schema.String }), execute: () => sql`SELECT id FROM files` })
      const totals = SqlSchema.findAll({
        Request: Schema.Void,
        Result: Tally,
        execute: () => sql`SELECT app, COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM files GROUP BY app`
      })

      const tallyOf = tallies.of
      const adjust = tallies.adjust
      const unlinkAll = (ids: ReadonlyArray<string>) => Effect.promise(() => Promise.all(ids.map((id) => fs.promises.unlink(path.join(dir, id)).catch(() => undefined))))

      const sweepBatch = Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* lock.withPermits(1)(
          Effect.gen(function* () {
            const rows = yield* expired({ now, limit: BATCH })
            if (rows.length > 0) yield* deleteIds(rows.map((row) => row.id))
            for (const row of rows) adjust(row.app, -1, -row.bytes)
            return rows
          })
        )
        yield* unlinkAll(rows.map((row) => row.id))
        return rows.length
      })
      const sweep = Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => sweepBatch })

      const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "files.sweep_failed" })
      const maybeSweep = sweeper.maybe

      // --- the save queue -------------------------------------------------------------------------

      const queueOf = (app: string): Queue => {
        let queue = queues.get(app)
        if (queue === undefined) {
          queue = { running: false, held: 0, waiting: [] }
          queues.set(app, queue)
        }
        return queue
      }
      const busy = () => Errors.rateLimited("file_saves_busy", "Too many uploads of this app are being saved; retry shortly", { retryAfter: 1 })

      const release = (app: string, bytes: number) =>
        Effect.suspend(() => {
          const queue = queueOf(app)
          queue.held -= bytes
          const next = queue.waiting.shift()
          if (next === undefined) {
            queue.running = false
            if (queue.held <= 0) queues.delete(app)
            return Effect.void
          }
          // the next waiting save runs now; `running` stays true
          return Deferred.succeed(next.go, undefined)
        })

      const admit = (app: string, expectedBytes: number): Effect.Effect<void, GatewayError, Scope.Scope> =>
        Effect.uninterruptibleMask((restore) =>
          Effect.gen(function* () {
            const queue = queueOf(app)
            const bytes = Math.max(0, expectedBytes)
            if (!queue.running) {
              // an app with no save running takes any upload
              queue.running = true
              queue.held += bytes
              yield* Effect.addFinalizer(() => release(app, bytes))
              return
            }
            if (queue.waiting.length >= caps.maxWaiting || queue.held + bytes > caps.maxQueuedBytes) return yield* busy()
            const go = yield* Deferred.make<void>()
            const entry = { bytes, go }
            queue.waiting.push(entry)
            queue.held += bytes
            const waited = yield* Effect.exit(restore(Deferred.await(go)))
            if (waited._tag === "Failure") {
              // the request ended while waiting: leave the queue, or pass on a turn just given
              const at = queue.waiting.indexOf(entry)
              if (at >= 0) {
                queue.waiting.splice(at, 1)
                queue.held -= bytes
              } else yield* release(app, bytes)
              return yield* Effect.failCause(waited.cause)
            }
            yield* Effect.addFinalizer(() => release(app, bytes))
          })
        )

      // --- staging -----------------------------------------------------------------------------------

      const stage = (options: StageOptions): Effect.Effect<Stage, GatewayError> =>
        Effect.tryPromise({
          try: async () => {
            const id = `file-${randomHex(16)}`
            const temp = path.join(dir, `${id}.${randomHex(6)}.tmp`)
            await fs.promises.mkdir(dir, { recursive: true })
            const handle = await fs.promises.open(temp, "wx")
            return { id, temp, handle }
          },
          catch: () => storageFailed()
        }).pipe(
          Effect.map(({ handle, id, temp }): Stage => {
            const classifier = makeClassifier(options.declaredType, options.filename)
            const cap = Math.min(options.maxBytes, caps.maxFileBytes)
            let size = 0
            let closed = false
            let failed: GatewayError | undefined
            const close = async () => {
              if (closed) return
              closed = true
              await handle.close().catch(() => undefined)
            }
            const discard = Effect.promise(async () => {
              await close()
              await fs.promises.unlink(temp).catch(() => undefined)
            })
            const limitOf = () => (classifier.kind() === "text" ? Math.min(cap, caps.maxTextBytes) : cap)
            const write = (source: AsyncIterable<Uint8Array>) =>
              Effect.tryPromise({
                try: async () => {
                  if (failed !== undefined) throw failed
                  for await (const chunk of source) {
                    size += chunk.length
                    classifier.push(chunk)
                    const limit = limitOf()
                    if (size > limit) throw (failed = tooLarge(limit, limit === caps.maxTextBytes ? "a text file may hold" : "one file may hold"))
                    if (classifier.refused() !== undefined) throw (failed = refusedKind(classifier.refused() ?? ""))
                    await handle.write(chunk)
                  }
                },
                catch: (error) => (isGatewayError(error) ? error : storageFailed())
              }).pipe(Effect.tapError(() => discard))
            const finish = Effect.suspend(() => {
              const result = classifier.finish()
              if (result._tag === "refused") return Effect.zipRight(discard, Effect.fail(refusedKind(result.why)))
              const limit = result.kind === "text" ? Math.min(cap, caps.maxTextBytes) : cap
              if (size > limit) return Effect.zipRight(discard, Effect.fail(tooLarge(limit, "a text file may hold")))
              return Effect.tryPromise({
                try: async () => {
                  await handle.sync()
                  await close()
                  return { id, bytes: size, mimeType: result.mimeType, temp }
                },
                catch: () => storageFailed()
              }).pipe(
                Effect.tap((staged) => Effect.sync(() => stagedTemps.set(staged.id, staged.temp))),
                Effect.map(({ bytes, id, mimeType }): StagedFile => ({ id, bytes, mimeType })),
                Effect.tapError(() => discard)
              )
            })
            return { write, size: () => size, finish, discard }
          })
        )

      /** temporary names of finished stages, by id, until committed or dropped */
      const stagedTemps = new Map<string, string>()

      const commit = (app: string, staged: StagedFile, options: CommitOptions): Effect.Effect<FileRecord, GatewayError> =>
        Effect.gen(function* () {
          const temp = stagedTemps.get(staged.id)
          if (temp === undefined) return yield* storageFailed()
          stagedTemps.delete(staged.id)
          const drop = Effect.promise(() => fs.promises.unlink(temp).catch(() => undefined))
          const now = yield* Clock.currentTimeMillis
          const days = Number.isFinite(options.maxAgeDays) && options.maxAgeDays > 0 ? options.maxAgeDays : 30
          const row: Row = {
            id: staged.id,
            app,
            filename: options.filename,
            display_name: options.displayName ?? null,
            purpose: options.purpose,
            mime_type: staged.mimeType,
            bytes: staged.bytes,
            created_at: now,
            expires_at: now + days * DAY_MS
          }
          return yield* lock.withPermits(1)(
            Effect.gen(function* () {
              const tally = tallyOf(app)
              if (tally.count + 1 > caps.maxFiles) return yield* Errors.invalidRequest("file_limit_exceeded", `This app already holds ${caps.maxFiles} files; delete some first`)
              if (tally.bytes + staged.bytes > caps.maxBytes) {
                return yield* Errors.invalidRequest("file_storage_full", `This app's files would pass ${caps.maxBytes} bytes; delete some first`)
              }
              yield* Effect.tryPromise({
                try: async () => {
                  await fs.promises.rename(temp, path.join(dir, staged.id))
                  // the rename itself must reach the disk before the row says the file exists
                  const folder = await fs.promises.open(dir, "r")
                  try {
                    await folder.sync()
                  } finally {
                    await folder.close()
                  }
                },
                catch: () => storageFailed()
              })
              yield* insert(row).pipe(
                Effect.catchAll(() => Effect.zipRight(unlinkAll([staged.id]), Effect.fail(storageFailed()))),
                Effect.catchAllDefect(() => Effect.zipRight(unlinkAll([staged.id]), Effect.fail(storageFailed())))
              )
              adjust(app, 1, staged.bytes)
              return recordOf(row)
            })
          ).pipe(Effect.tapError(() => drop), Effect.uninterruptible)
        }).pipe(Effect.withSpan("FileStore.commit", { attributes: { "gateway.app": app, "gateway.bytes": staged.bytes } }))

      // start: drop rows whose file is gone, files (and leftover temporary files) with no row, then expired files
      yield* Effect.promise(() => fs.promises.mkdir(dir, { recursive: true }))
      const names = new Set(yield* Effect.promise(() => fs.promises.readdir(dir)))
      const ids = (yield* Effect.orDie(allIds())).map((row) => row.id)
      const rowsWithoutFile = ids.filter((id) => !names.has(id))
      for (let i = 0; i < rowsWithoutFile.length; i += BATCH) yield* Effect.orDie(deleteIds(rowsWithoutFile.slice(i, i + BATCH)))
      const known = new Set(ids)
      const orphans = [...names].filter((name) => !known.has(name))
      yield* Effect.promise(() => Promise.all(orphans.map((name) => fs.promises.rm(path.join(dir, name), { force: true, recursive: true }).catch(() => undefined))))
      if (rowsWithoutFile.length + orphans.length > 0) log.info("files.start_cleanup", { rowsWithoutFile: rowsWithoutFile.length, orphanFiles: orphans.length })
      for (const tally of yield* Effect.orDie(totals())) tallies.set(tally.app, { count: tally.count, bytes: tally.bytes })
      yield* sweeper.started
      yield* Effect.orDie(sweep)

      const live = (app: string, id: string) =>
        Effect.gen(function* () {
          yield* maybeSweep
          if (!ID.test(id)) return Option.none<FileRecord>()
          const now = yield* Clock.currentTimeMillis
          return Option.map(yield* Effect.orDie(findLive({ app, id, now })), recordOf)
        })

      return FileStore.of({
        admit,
        checkRoom: (app) =>
          Effect.suspend(() =>
            tallyOf(app).count >= caps.maxFiles ? Effect.fail(Errors.invalidRequest("file_limit_exceeded", `This app already holds ${caps.maxFiles} files; delete some first`)) : Effect.void
          ),
        stage,
        commit,
        drop: (staged) =>
          Effect.promise(async () => {
            const temp = stagedTemps.get(staged.id)
            stagedTemps.delete(staged.id)
            if (temp !== undefined) await fs.promises.unlink(temp).catch(() => undefined)
          }),
        get: live,
        list: (app) =>
          Effect.gen(function* () {
            yield* maybeSweep
            const now = yield* Clock.currentTimeMillis
            return (yield* Effect.orDie(listLive({ app, now }))).map(recordOf)
          }),
        path: (record) => path.join(dir, record.id),
        read: (record) =>
          Effect.tryPromise({ try: () => fs.promises.readFile(path.join(dir, record.id)), catch: () => storageFailed() }).pipe(
            Effect.withSpan("FileStore.read", { attributes: { "gateway.bytes": record.bytes } })
          ),
        remove: (app, id) =>
          Effect.gen(function* () {
            if (!ID.test(id)) return false
            const now = yield* Clock.currentTimeMillis
            const row = yield* lock.withPermits(1)(
              Effect.orDie(deleteOne({ app, id })).pipe(Effect.tap((found) => Effect.sync(() => Option.map(found, (r) => adjust(r.app, -1, -r.bytes)))))
            )
            if (Option.isNone(row)) return false
            yield* unlinkAll([id])
            // an expired file not swept yet is deleted all the same, but answers as unknown (spec 3: same 404)
            return row.value.expires_at > now
          }),
        stats: () => Effect.sync(tallies.all)
      })
    })

  static readonly layer = (dataDir: string, limits?: Partial<FileStoreLimits>) => Layer.scoped(FileStore, FileStore.make(dataDir, limits))
}

const refusedKind = (why: string) => Errors.invalidRequest("invalid_file", `The file cannot be stored: ${why}; accepted are ${acceptedKinds}`, { param: "file" })

const isGatewayError = (error: unknown): error is GatewayError => typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "GatewayError"

export { MiB }
