import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Effect, Option, Schema, Stream } from "effect"
import type { GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import type { FileRecord, FileStoreLimits, FileStoreService, Stage, StagedFile, StageOptions } from "./FileStore.js"
import { Log } from "../ops/Log.js"
import { throttledSweep } from "../../sql/kit/StoreKit.js"
import { FILE_ID, fromDb, makeRecordReads, isGatewayError, makeChecks, makeSaveQueue, recordOf, Row, rowOf, storageFailed, storageFull, SWEEP_EVERY_MS, Tally, tooManyFiles } from "./Common.js"
import { makeChunks } from "./PgChunks.js"
import { makePgUploads } from "./PgUploads.js"

const BATCH = 100
/** a stage this old belongs to a request or replica that is gone */
const STAGE_MAX_AGE_MS = 60 * 60 * 1000
/** advisory lock class of an app's file commits (the app's name hashed is the key) */
const FILES_LOCK = 0x66696c65 // "file"

const Tallied = Schema.Struct({ count: Schema.Number, bytes: Schema.Number })

/**
 * The file store on PostgreSQL, shared by every replica: rows in `files`, bytes in `file_chunks`.
 * A commit takes the app's advisory lock, counts the app's files and bytes and inserts the row in
 * one transaction, so the caps hold for the app as a whole; it is acknowledged once committed.
 */
export const makePgFiles = (caps: FileStoreLimits) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* Log
    const scope = yield* Effect.scope
    const chunks = makeChunks(sql)

    const insert = SqlSchema.void({ Request: Row, execute: (row) => sql`INSERT INTO files ${sql.insert(row)}` })
    const lockApp = SqlSchema.void({ Request: Schema.String, execute: (app) => sql`SELECT pg_advisory_xact_lock(${FILES_LOCK}, hashtext(${app}))` })
    const takeStage = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Struct({ file_id: Schema.String }),
      execute: (id) => sql`DELETE FROM file_stages WHERE file_id = ${id} RETURNING file_id`
    })
    const appTally = SqlSchema.single({
      Request: Schema.Struct({ app: Schema.String, now: Schema.Number }),
      Result: Tallied,
      execute: ({ app, now }) => sql`SELECT COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM files WHERE app = ${app} AND expires_at > ${now}`
    })
    const deleteOne = SqlSchema.findOne({
      Request: Schema.Struct({ app: Schema.String, id: Schema.String }),
      Result: Schema.Struct({ expires_at: Schema.Number }),
      execute: ({ app, id }) => sql`DELETE FROM files WHERE id = ${id} AND app = ${app} RETURNING expires_at`
    })
    const deleteExpired = SqlSchema.findAll({
      Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number }),
      Result: Schema.Struct({ id: Schema.String }),
      execute: ({ limit, now }) =>
        sql`DELETE FROM files WHERE id IN (SELECT id FROM files WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit} FOR UPDATE SKIP LOCKED) RETURNING id`
    })
    const deadStages = SqlSchema.findAll({
      Request: Schema.Struct({ before: Schema.Number, limit: Schema.Number }),
      Result: Schema.Struct({ file_id: Schema.String }),
      execute: ({ before, limit }) =>
        sql`SELECT s.file_id FROM file_stages s WHERE s.started_at < ${before} AND NOT EXISTS (SELECT 1 FROM uploads u WHERE u.file_id = s.file_id) LIMIT ${limit}`
    })
    const totals = SqlSchema.findAll({
      Request: Schema.Number,
      Result: Tally,
      execute: (now) => sql`SELECT app, COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM files WHERE expires_at > ${now} GROUP BY app ORDER BY app`
    })

    // the sweep: every replica may run it; each batch is one transaction, so two never fight over rows
    const sweepFiles = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const gone = yield* sql.withTransaction(
        Effect.tap(deleteExpired({ now, limit: BATCH }), (rows) => (rows.length > 0 ? chunks.deleteChunksOf(rows.map((row) => row.id)) : Effect.void))
      )
      return gone.length
    })
    const sweepStages = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const dead = yield* deadStages({ before: now - STAGE_MAX_AGE_MS, limit: BATCH })
      yield* chunks.dropStages(dead.map((row) => row.file_id))
      return dead.length
    })
    const sweep = Effect.zipRight(
      Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => sweepFiles }),
      Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => sweepStages })
    )
    const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "files.sweep_failed" })
    const reads = makeRecordReads(sql, sweeper.maybe)

    const dropStage = (id: string) => Effect.ignore(chunks.dropStages([id]))

    const stage = (options: StageOptions): Effect.Effect<Stage, GatewayError> =>
      Effect.gen(function* () {
        const id = `file-${randomHex(16)}`
        yield* fromDb(chunks.startStage(id, yield* Clock.currentTimeMillis))
        const checks = makeChecks(options, caps)
        const writer = chunks.writer(id, 0)
        const discard = dropStage(id)
        const write = (source: AsyncIterable<Uint8Array>) =>
          Effect.suspend(() => {
            const failed = checks.failed()
            if (failed !== undefined) return Effect.fail(failed)
            return Stream.runForEach(chunks.pieces(source), (chunk) => {
              const refused = checks.push(chunk)
              return refused !== undefined ? Effect.fail(refused) : writer.append(chunk)
            })
          }).pipe(Effect.tapError(() => discard))
        const finish = Effect.suspend(() => {
          const result = checks.finish()
          if (isGatewayError(result)) return Effect.zipRight(discard, Effect.fail(result))
          return writer.flush.pipe(Effect.as<StagedFile>({ id, bytes: checks.size(), mimeType: result.mimeType }), Effect.tapError(() => discard))
        })
        return { write, size: checks.size, finish, discard }
      })

    const commit: FileStoreService["commit"] = (app, staged, options) =>
      Effect.gen(function* () {
        const row = rowOf(app, staged, options, yield* Clock.currentTimeMillis)
        const committed = sql.withTransaction(
          Effect.gen(function* () {
            yield* fromDb(lockApp(app))
            // the stage row goes in the same transaction: its chunks become the file's
            if (Option.isNone(yield* fromDb(takeStage(staged.id)))) return yield* storageFailed()
            const tally = yield* fromDb(appTally({ app, now: row.created_at }))
            if (tally.count + 1 > caps.maxFiles) return yield* tooManyFiles(caps.maxFiles)
            if (tally.bytes + staged.bytes > caps.maxBytes) return yield* storageFull(caps.maxBytes)
            yield* fromDb(insert(row))
          })
        )
        yield* fromDb(committed).pipe(Effect.tapError(() => dropStage(staged.id)), Effect.uninterruptible)
        return recordOf(row)
      }).pipe(Effect.withSpan("FileStore.commit", { attributes: { "gateway.app": app, "gateway.bytes": staged.bytes } }))

    const checkRoom = (app: string) =>
      Effect.gen(function* () {
        const tally = yield* fromDb(appTally({ app, now: yield* Clock.currentTimeMillis }))
        if (tally.count >= caps.maxFiles) return yield* tooManyFiles(caps.maxFiles)
      })

    // start: expired files and stages left by replicas that died; any replica may do it, it is idempotent
    yield* sweeper.started
    yield* Effect.catchAll(sweep, () => Effect.sync(() => log.error("files.sweep_failed", { reason: "database" })))

    const content = (record: FileRecord) => chunks.read(record.id, record.bytes)

    return {
      admit: makeSaveQueue(caps),
      checkRoom,
      stage,
      commit,
      drop: (staged) => dropStage(staged.id),
      get: reads.get,
      list: reads.list,
      content,
      read: (record) =>
        Stream.runCollect(content(record)).pipe(
          Effect.map((pieces) => Buffer.concat([...pieces], record.bytes)),
          Effect.withSpan("FileStore.read", { attributes: { "gateway.bytes": record.bytes } })
        ),
      remove: (app, id) =>
        Effect.gen(function* () {
          if (!FILE_ID.test(id)) return false
          const now = yield* Clock.currentTimeMillis
          const row = yield* fromDb(
            sql.withTransaction(Effect.tap(deleteOne({ app, id }), (found) => (Option.isSome(found) ? chunks.deleteChunksOf([id]) : Effect.void)))
          )
          // an expired file not swept yet is deleted all the same, but answers as unknown (spec 3: same 404)
          return Option.isSome(row) && row.value.expires_at > now
        }),
      stats: () => Effect.flatMap(Clock.currentTimeMillis, (now) => fromDb(totals(now))),
      uploads: makePgUploads(sql, chunks, caps)
    } satisfies FileStoreService
  })
