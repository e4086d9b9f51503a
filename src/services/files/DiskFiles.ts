import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Effect, Option, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import type { FileRecord, FileStoreLimits, FileStoreService, Stage, StagedFile, StageOptions } from "./FileStore.js"
import { Log } from "../ops/Log.js"
import { makeTallies, throttledSweep } from "../../sql/kit/StoreKit.js"
import {
  FILE_ID,
  fromDb,
  makeRecordReads,
  isGatewayError,
  makeChecks,
  makeSaveQueue,
  recordOf,
  Row,
  rowOf,
  storageFailed,
  storageFull,
  SWEEP_EVERY_MS,
  Tally,
  tooManyFiles
} from "./Common.js"
import { makeMemoryUploads } from "./MemoryUploads.js"

const BATCH = 500
const Held = Schema.Struct({ id: Schema.String, app: Schema.String, bytes: Schema.Number })

/**
 * The file store on SQLite: metadata rows in `files`, bytes in `<dataDir>/files/<id>`. A save
 * writes to a temporary name, fsyncs, renames, then commits the row: an acknowledged upload
 * survives a crash, and a failed one leaves nothing visible. The per-app tallies are kept in
 * memory (one process owns the database), so saves run no COUNT or SUM.
 */
export const makeDiskFiles = (dataDir: string, caps: FileStoreLimits) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* Log
    const scope = yield* Effect.scope
    const dir = path.join(dataDir, "files")
    const lock = yield* Effect.makeSemaphore(1)
    const tallies = makeTallies()

    const insert = SqlSchema.void({ Request: Row, execute: (row) => sql`INSERT INTO files ${sql.insert(row)}` })
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
    const reads = makeRecordReads(sql, sweeper.maybe)

    /** temporary names of finished stages, by id, until committed or dropped */
    const stagedTemps = new Map<string, string>()

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
          const checks = makeChecks(options, caps)
          let closed = false
          const close = async () => {
            if (closed) return
            closed = true
            await handle.close().catch(() => undefined)
          }
          const discard = Effect.promise(async () => {
            await close()
            await fs.promises.unlink(temp).catch(() => undefined)
          })
          const write = (source: AsyncIterable<Uint8Array>) =>
            Effect.tryPromise({
              try: async () => {
                const failed = checks.failed()
                if (failed !== undefined) throw failed
                for await (const chunk of source) {
                  const refused = checks.push(chunk)
                  if (refused !== undefined) throw refused
                  await handle.write(chunk)
                }
              },
              catch: (error) => (isGatewayError(error) ? error : storageFailed())
            }).pipe(Effect.tapError(() => discard))
          const finish = Effect.suspend(() => {
            const result = checks.finish()
            if (isGatewayError(result)) return Effect.zipRight(discard, Effect.fail(result))
            return Effect.tryPromise({
              try: async () => {
                await handle.sync()
                await close()
              },
              catch: () => storageFailed()
            }).pipe(
              Effect.tap(() => Effect.sync(() => stagedTemps.set(id, temp))),
              Effect.as<StagedFile>({ id, bytes: checks.size(), mimeType: result.mimeType }),
              Effect.tapError(() => discard)
            )
          })
          return { write, size: checks.size, finish, discard }
        })
      )

    const drop = (staged: StagedFile) =>
      Effect.promise(async () => {
        const temp = stagedTemps.get(staged.id)
        stagedTemps.delete(staged.id)
        if (temp !== undefined) await fs.promises.unlink(temp).catch(() => undefined)
      })

    const commit: FileStoreService["commit"] = (app, staged, options) =>
      Effect.gen(function* () {
        const temp = stagedTemps.get(staged.id)
        if (temp === undefined) return yield* storageFailed()
        stagedTemps.delete(staged.id)
        const unlinkTemp = Effect.promise(() => fs.promises.unlink(temp).catch(() => undefined))
        const row = rowOf(app, staged, options, yield* Clock.currentTimeMillis)
        return yield* lock.withPermits(1)(
          Effect.gen(function* () {
            const tally = tallies.of(app)
            if (tally.count + 1 > caps.maxFiles) return yield* tooManyFiles(caps.maxFiles)
            if (tally.bytes + staged.bytes > caps.maxBytes) return yield* storageFull(caps.maxBytes)
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
        ).pipe(Effect.tapError(() => unlinkTemp), Effect.uninterruptible)
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

    const pathOf = (record: FileRecord) => path.join(dir, record.id)

    return {
      admit: makeSaveQueue(caps),
      checkRoom: (app) => Effect.suspend(() => (tallies.of(app).count >= caps.maxFiles ? Effect.fail(tooManyFiles(caps.maxFiles)) : Effect.void)),
      stage,
      commit,
      drop,
      get: reads.get,
      list: reads.list,
      content: (record) =>
        Stream.fromAsyncIterable(
          { [Symbol.asyncIterator]: () => fs.createReadStream(pathOf(record), { highWaterMark: 256 * 1024 })[Symbol.asyncIterator]() as AsyncIterator<Uint8Array> },
          () => storageFailed()
        ),
      read: (record) =>
        Effect.tryPromise({ try: () => fs.promises.readFile(pathOf(record)), catch: () => storageFailed() }).pipe(
          Effect.withSpan("FileStore.read", { attributes: { "gateway.bytes": record.bytes } })
        ),
      remove: (app, id) =>
        Effect.gen(function* () {
          if (!FILE_ID.test(id)) return false
          const now = yield* Clock.currentTimeMillis
          const row = yield* lock.withPermits(1)(
            fromDb(deleteOne({ app, id })).pipe(Effect.tap((found) => Effect.sync(() => Option.map(found, (r) => adjust(r.app, -1, -r.bytes)))))
          )
          if (Option.isNone(row)) return false
          yield* unlinkAll([id])
          // an expired file not swept yet is deleted all the same, but answers as unknown (spec 3: same 404)
          return row.value.expires_at > now
        }),
      stats: () => Effect.sync(tallies.all),
      uploads: yield* makeMemoryUploads(stage)
    } satisfies FileStoreService
  })
