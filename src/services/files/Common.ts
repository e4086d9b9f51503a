import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { type Cause, Clock, Deferred, Effect, Option, type ParseResult, Schema, type Scope } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { acceptedKinds, makeClassifier } from "../../domain/FileKind.js"
import type { FileRecord, FileStoreLimits, StageOptions } from "./FileStore.js"

/** What both file stores share: the row, the errors, the per-upload checks and the save queue. */

/** Unfinished resumable uploads per app, and how long one lives (spec 4.4). */
export const MAX_UNFINISHED_UPLOADS = 4
export const UPLOAD_TTL_MS = 10 * 60 * 1000

export const DAY_MS = 24 * 60 * 60 * 1000
export const SWEEP_EVERY_MS = 60_000
export const FILE_ID = /^file-[0-9a-f]{32}$/

export const Row = Schema.Struct({
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
export type Row = typeof Row.Type
export const Tally = Schema.Struct({ app: Schema.String, count: Schema.Number, bytes: Schema.Number })

export const recordOf = (row: Row): FileRecord => ({
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

/** The row a commit writes. */
export const rowOf = (app: string, staged: { readonly id: string; readonly bytes: number; readonly mimeType: string }, options: { readonly filename: string; readonly purpose: string; readonly displayName?: string; readonly maxAgeDays: number }, now: number): Row => {
  const days = Number.isFinite(options.maxAgeDays) && options.maxAgeDays > 0 ? options.maxAgeDays : 30
  return {
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
}

export const tooLarge = (limit: number, what: string) =>
  Errors.payloadTooLarge("file_too_large", `The file is larger than ${limit} bytes, the most ${what}`, { param: "file", closeConnection: true })

export const storageFailed = () => Errors.internal("file_store_failed", "The file could not be stored; nothing was kept")

export const refusedKind = (why: string) => Errors.invalidRequest("invalid_file", `The file cannot be stored: ${why}; accepted are ${acceptedKinds}`, { param: "file" })

export const tooManyFiles = (max: number) => Errors.invalidRequest("file_limit_exceeded", `This app already holds ${max} files; delete some first`)
export const storageFull = (max: number) => Errors.invalidRequest("file_storage_full", `This app's files would pass ${max} bytes; delete some first`)

export const tooManyUploads = () =>
  Errors.rateLimited("too_many_uploads", `This app already has ${MAX_UNFINISHED_UPLOADS} unfinished uploads; finish or wait for them`, { retryAfter: 60 })

export const uploadBusy = () => Errors.rateLimited("file_saves_busy", "Another chunk of this upload is being written", { retryAfter: 1 })

/** The database did not answer (or answered what cannot be read): 503 in the route's envelope. */
export const databaseUnavailable = () => Errors.databaseUnavailable("Files")

/** A query's failure as the file routes answer it. */
export const fromDb = <A, E extends SqlError | ParseResult.ParseError | Cause.NoSuchElementException | GatewayError, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, GatewayError, R> => Effect.mapError(effect, (error) => (isGatewayError(error) ? error : databaseUnavailable()))

/**
 * Reading file records, the same SQL on both backends: one live record of an app (an id that is
 * no file id is none), and an app's live records in upload order. `maybeSweep` runs first.
 */
export const makeRecordReads = (sql: SqlClient.SqlClient, maybeSweep: Effect.Effect<void>) => {
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
  return {
    get: (app: string, id: string): Effect.Effect<Option.Option<FileRecord>, GatewayError> =>
      Effect.gen(function* () {
        yield* maybeSweep
        if (!FILE_ID.test(id)) return Option.none<FileRecord>()
        const now = yield* Clock.currentTimeMillis
        return Option.map(yield* fromDb(findLive({ app, id, now })), recordOf)
      }),
    list: (app: string): Effect.Effect<ReadonlyArray<FileRecord>, GatewayError> =>
      Effect.gen(function* () {
        yield* maybeSweep
        const now = yield* Clock.currentTimeMillis
        return (yield* fromDb(listLive({ app, now }))).map(recordOf)
      })
  }
}

export const isGatewayError = (error: unknown): error is GatewayError => typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "GatewayError"

/**
 * The checks an upload's bytes pass as they arrive, whatever holds them: the kind (by the first
 * bytes, text checked as it streams) and the size caps (the text cap once the kind is known).
 */
export const makeChecks = (options: StageOptions, caps: FileStoreLimits) => {
  const classifier = makeClassifier(options.declaredType, options.filename)
  const cap = Math.min(options.maxBytes, caps.maxFileBytes)
  let size = 0
  let failed: GatewayError | undefined
  const limitOf = () => (classifier.kind() === "text" ? Math.min(cap, caps.maxTextBytes) : cap)
  return {
    size: () => size,
    /** the refusal of these bytes (and of every later write), or undefined */
    push: (chunk: Uint8Array): GatewayError | undefined => {
      if (failed !== undefined) return failed
      size += chunk.length
      classifier.push(chunk)
      const limit = limitOf()
      if (size > limit) return (failed = tooLarge(limit, limit === caps.maxTextBytes ? "a text file may hold" : "one file may hold"))
      const refused = classifier.refused()
      if (refused !== undefined) return (failed = refusedKind(refused))
      return undefined
    },
    failed: () => failed,
    /** the stored type once every byte was pushed, or the refusal */
    finish: (): { readonly mimeType: string } | GatewayError => {
      if (failed !== undefined) return failed
      const result = classifier.finish()
      if (result._tag === "refused") return refusedKind(result.why)
      const limit = result.kind === "text" ? Math.min(cap, caps.maxTextBytes) : cap
      if (size > limit) return tooLarge(limit, "a text file may hold")
      return { mimeType: result.mimeType }
    }
  }
}

/** Per-app save queue state. */
interface Queue {
  running: boolean
  held: number
  readonly waiting: Array<{ readonly bytes: number; readonly go: Deferred.Deferred<void> }>
}

/**
 * The per-app save queue of this process (saves are a replica's own work, like its body budget):
 * a place at once when no save of the app runs, else after the ones before it; 429
 * `file_saves_busy` when `maxWaiting` wait or the bytes held would pass `maxQueuedBytes`.
 */
export const makeSaveQueue = (caps: FileStoreLimits) => {
  const queues = new Map<string, Queue>()
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

  return (app: string, expectedBytes: number): Effect.Effect<void, GatewayError, Scope.Scope> =>
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
}
