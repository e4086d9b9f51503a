import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Effect, Exit, Option, type ParseResult, Schema, Stream } from "effect"
import { Errors } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import type { FileStoreLimits, StagedFile, Upload, Uploads } from "./FileStore.js"
import { fromDb, isGatewayError, makeChecks, MAX_UNFINISHED_UPLOADS, tooLarge, tooManyUploads, UPLOAD_TTL_MS, uploadBusy } from "./Common.js"
import type { Chunks } from "./PgChunks.js"

/** advisory lock class of an app's upload starts */
const UPLOADS_LOCK = 0x75706c64 // "upld"
/**
 * a chunk claimed this long ago belongs to a request or replica that is gone (no body read lasts
 * this long): its expired upload is dropped all the same
 */
const STALE_WRITE_MS = UPLOAD_TTL_MS

const UploadRow = Schema.Struct({
  id: Schema.String,
  file_id: Schema.String,
  app: Schema.String,
  key_id: Schema.String,
  filename: Schema.String,
  display_name: Schema.NullOr(Schema.String),
  declared_type: Schema.NullOr(Schema.String),
  max_bytes: Schema.Number,
  size: Schema.Number,
  chunks: Schema.Number,
  writing_since: Schema.NullOr(Schema.Number),
  created_at: Schema.Number,
  expires_at: Schema.Number
})
type UploadRow = typeof UploadRow.Type

const uploadOf = (row: UploadRow): Upload => ({
  id: row.id,
  app: row.app,
  keyId: row.key_id,
  filename: row.filename,
  ...(row.display_name !== null ? { displayName: row.display_name } : {}),
  size: row.size
})

const COLUMNS = "id, file_id, app, key_id, filename, display_name, declared_type, max_bytes, size, chunks, writing_since, created_at, expires_at"

/**
 * Unfinished resumable uploads in PostgreSQL: a row in `uploads` per upload, its bytes the chunks
 * of its stage. Any replica takes the next chunk: a request claims the row (`writing_since`, so a
 * second chunk meanwhile is refused as on one process, and no connection is held while the body
 * arrives), writes its chunks, then records the new size. 4 per app (counted under the app's
 * advisory lock) and 10 minutes hold for the app as a whole.
 */
export const makePgUploads = (sql: SqlClient.SqlClient, chunks: Chunks, caps: FileStoreLimits): Uploads => {
  const columns = sql.literal(COLUMNS)
  const lockApp = SqlSchema.void({ Request: Schema.String, execute: (app) => sql`SELECT pg_advisory_xact_lock(${UPLOADS_LOCK}, hashtext(${app}))` })
  const countLive = SqlSchema.single({
    Request: Schema.Struct({ app: Schema.String, now: Schema.Number }),
    Result: Schema.Struct({ count: Schema.Number }),
    execute: ({ app, now }) => sql`SELECT COUNT(*) AS count FROM uploads WHERE app = ${app} AND expires_at > ${now}`
  })
  const insert = SqlSchema.void({ Request: UploadRow, execute: (row) => sql`INSERT INTO uploads ${sql.insert(row)}` })
  const findLive = SqlSchema.findOne({
    Request: Schema.Struct({ id: Schema.String, now: Schema.Number }),
    Result: UploadRow,
    execute: ({ id, now }) => sql`SELECT ${columns} FROM uploads WHERE id = ${id} AND expires_at > ${now}`
  })
  const claimRow = SqlSchema.findOne({
    Request: Schema.Struct({ id: Schema.String, now: Schema.Number }),
    Result: UploadRow,
    execute: ({ id, now }) => sql`UPDATE uploads SET writing_since = ${now} WHERE id = ${id} AND writing_since IS NULL AND expires_at > ${now} RETURNING ${columns}`
  })
  const unclaim = SqlSchema.void({
    Request: Schema.Struct({ id: Schema.String, since: Schema.Number }),
    execute: ({ id, since }) => sql`UPDATE uploads SET writing_since = NULL WHERE id = ${id} AND writing_since = ${since}`
  })
  const progress = SqlSchema.void({
    Request: Schema.Struct({ id: Schema.String, size: Schema.Number, chunks: Schema.Number }),
    execute: ({ chunks, id, size }) => sql`UPDATE uploads SET size = ${size}, chunks = ${chunks} WHERE id = ${id}`
  })
  const deleteOne = SqlSchema.void({ Request: Schema.String, execute: (id) => sql`DELETE FROM uploads WHERE id = ${id}` })
  const Dropped = Schema.Struct({ file_id: Schema.String })
  const deleteOfKey = SqlSchema.findAll({ Request: Schema.String, Result: Dropped, execute: (keyId) => sql`DELETE FROM uploads WHERE key_id = ${keyId} RETURNING file_id` })
  const deleteExpired = SqlSchema.findAll({
    Request: Schema.Number,
    Result: Dropped,
    execute: (now) =>
      sql`DELETE FROM uploads WHERE expires_at <= ${now} AND (writing_since IS NULL OR writing_since <= ${now - STALE_WRITE_MS}) RETURNING file_id`
  })

  /** uploads' rows and their bytes, gone in one transaction */
  const dropAll = <R>(rows: Effect.Effect<ReadonlyArray<{ readonly file_id: string }>, SqlError | ParseResult.ParseError, R>) =>
    fromDb(sql.withTransaction(Effect.flatMap(rows, (gone) => chunks.dropStages(gone.map((row) => row.file_id)))))

  const dropOne = (row: UploadRow) => Effect.ignore(fromDb(sql.withTransaction(Effect.zipRight(deleteOne(row.id), chunks.dropStages([row.file_id])))))

  return {
    start: (options) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const row: UploadRow = {
          id: randomHex(16),
          file_id: `file-${randomHex(16)}`,
          app: options.app,
          key_id: options.keyId,
          filename: options.filename,
          display_name: options.displayName ?? null,
          declared_type: options.declaredType ?? null,
          max_bytes: options.maxBytes,
          size: 0,
          chunks: 0,
          writing_since: null,
          created_at: now,
          expires_at: now + UPLOAD_TTL_MS
        }
        yield* fromDb(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* lockApp(options.app)
              if ((yield* countLive({ app: options.app, now })).count >= MAX_UNFINISHED_UPLOADS) return yield* tooManyUploads()
              yield* chunks.startStage(row.file_id, now)
              yield* insert(row)
            })
          )
        )
        return uploadOf(row)
      }),
    find: (id) => Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.map(fromDb(findLive({ id, now })), Option.map(uploadOf))),
    claim: (upload, offset, wrongOffset) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const claimed = yield* fromDb(claimRow({ id: upload.id, now }))
        if (Option.isNone(claimed)) {
          const still = yield* fromDb(findLive({ id: upload.id, now }))
          return yield* Option.isSome(still) ? uploadBusy() : Errors.notFound("not_found", `No upload ${upload.id} is in progress`)
        }
        const row = claimed.value
        let finished = false
        yield* Effect.addFinalizer((exit) =>
          finished ? Effect.void : Exit.isFailure(exit) ? dropOne(row) : Effect.ignore(unclaim({ id: row.id, since: now }))
        )
        if (offset !== undefined && offset !== row.size) {
          yield* Effect.ignore(unclaim({ id: row.id, since: now }))
          finished = true
          return yield* wrongOffset(row.size)
        }
        // chunks past the recorded size were written by a request that failed before recording them
        yield* fromDb(chunks.deleteChunksFrom({ file_id: row.file_id, n: row.chunks }))
        const writer = chunks.writer(row.file_id, row.chunks)
        const cap = Math.min(row.max_bytes, caps.maxFileBytes)
        let size = row.size
        const write = (source: AsyncIterable<Uint8Array>) =>
          Effect.gen(function* () {
            yield* Stream.runForEach(chunks.pieces(source), (chunk) => {
              size += chunk.length
              return size > cap ? Effect.fail(tooLarge(cap, "one file may hold")) : writer.append(chunk)
            })
            yield* writer.flush
            // acknowledged means recorded: the next chunk, on any replica, starts here
            yield* fromDb(progress({ id: row.id, size, chunks: writer.chunks() }))
          })
        const finish = Effect.gen(function* () {
          yield* writer.flush
          // the kind is checked on the whole upload, read back: its chunks may have come through several replicas
          const options = { filename: row.filename, ...(row.declared_type !== null ? { declaredType: row.declared_type } : {}), maxBytes: row.max_bytes }
          const checks = makeChecks(options, caps)
          yield* Stream.runForEach(chunks.read(row.file_id, size), (chunk) => {
            const refused = checks.push(chunk)
            return refused !== undefined ? Effect.fail(refused) : Effect.void
          })
          const result = checks.finish()
          if (isGatewayError(result)) return yield* result
          yield* fromDb(deleteOne(row.id))
          finished = true
          return { id: row.file_id, bytes: size, mimeType: result.mimeType } satisfies StagedFile
        })
        return { size: () => size, write, finish }
      }),
    dropKey: (keyId) => dropAll(deleteOfKey(keyId)),
    expire: Effect.flatMap(Clock.currentTimeMillis, (now) => dropAll(deleteExpired(now)))
  }
}
