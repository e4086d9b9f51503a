import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Cause, Clock, Context, Data, Effect, Layer, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { randomHex } from "../domain/Ids.js"
import { Log } from "./Log.js"
import { makeTallies, throttledSweep } from "./StoreKit.js"
import { makeJsonWorker, type JsonWorker } from "./JsonWorker.js"

/** One stored response of the Responses-style API (spec 2.1). */
export interface StoredRecord {
  /** `resp_` + 32 hex */
  readonly id: string
  readonly app: string
  /** epoch ms */
  readonly createdAt: number
  /** the response object as first returned */
  readonly response: Readonly<Record<string, unknown>>
  /** every input item the model saw, each with an `id`, in order (history included) */
  readonly input: ReadonlyArray<Readonly<Record<string, unknown>>>
}

/** Caps of the store; tests pass smaller ones. */
export interface ResponseStoreLimits {
  /** records per app */
  readonly maxRecords: number
  /** stored bytes per app */
  readonly maxBytes: number
  /** stored form of one record; larger ones are not kept */
  readonly maxRecordBytes: number
}

export const defaultResponseStoreLimits: ResponseStoreLimits = {
  maxRecords: 1000,
  maxBytes: 128 * 1024 * 1024,
  maxRecordBytes: 8 * 1024 * 1024
}

const DAY_MS = 24 * 60 * 60 * 1000
const SWEEP_EVERY_MS = 60_000
const BATCH = 500
/** serialized or parsed bytes between two yields to the event loop */
const SLICE_BYTES = 512 * 1024
/** `{"response":,"input":[]}`: the stored form's frame around the response and the items */
const FRAME_BYTES = 24
/** ids become file names: only these are accepted */
const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/

/** A storage step that failed; `reason` is a short code for the log, never content. */
class StoreFailure extends Data.TaggedError("StoreFailure")<{ readonly reason: string }> {}

const Row = Schema.Struct({ id: Schema.String, app: Schema.String, created_at: Schema.Number, expires_at: Schema.Number, bytes: Schema.Number })
const Held = Schema.Struct({ id: Schema.String, app: Schema.String, bytes: Schema.Number })
const Tally = Schema.Struct({ app: Schema.String, count: Schema.Number, bytes: Schema.Number })
const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
/** a guard, not a decode: the parsed object is kept as is (a decode would copy it, and mishandle a `__proto__` key) */
const isObject = Schema.is(JsonObject)

const fileName = (id: string) => `${id}.json`

const reasonOf = (error: unknown, fallback: string): string => {
  const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined
  switch (code) {
    case "ENOSPC":
    case "EDQUOT":
      return "disk_full"
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return "permission"
    case "ENOENT":
    case "ENOTDIR":
      return "no_directory"
    default:
      return fallback
  }
}

/** Let timers and I/O run: a microtask yield would not. Independent of `Clock`, so TestClock does not stall it. */
const yieldToEventLoop = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

const stringify = (value: unknown) =>
  Effect.try({ try: () => JSON.stringify(value), catch: () => new StoreFailure({ reason: "serialize" }) }).pipe(
    Effect.filterOrFail((text): text is string => typeof text === "string", () => new StoreFailure({ reason: "serialize" }))
  )

/**
 * The stored form, one item per line so that neither writing nor reading parses 8 MiB in one go;
 * the file is still one JSON document `{"response":…,"input":[…]}`. `pieces` are its bytes in order
 * (strings, and the raw bytes of history items read back earlier); `bytes` is the size of the
 * compact serialization (what the caps count); `pieces` is empty when that exceeds `maxBytes`.
 */
const serialize = (record: StoredRecord, maxBytes: number) =>
  Effect.gen(function* () {
    const response = yield* stringify(record.response)
    let bytes = FRAME_BYTES + Buffer.byteLength(response)
    let pieces: Array<string | Buffer> = [`{"response":${response},\n"input":[\n`]
    let sinceYield = bytes
    const last = record.input.length - 1
    for (let i = 0; i <= last; i++) {
      const raw = itemBytes.get(record.input[i])
      const item = raw ?? (yield* stringify(record.input[i]))
      const size = raw?.length ?? Buffer.byteLength(item)
      bytes += size + (i > 0 ? 1 : 0)
      if (bytes > maxBytes) pieces = []
      else pieces.push(item, i < last ? ",\n" : "\n")
      sinceYield += size
      if (sinceYield >= SLICE_BYTES) {
        sinceYield = 0
        yield* yieldToEventLoop
      }
    }
    if (bytes <= maxBytes) pieces.push("]}\n")
    return { bytes, pieces }
  })

/** Small pieces joined into writes of about `SLICE_BYTES`; large ones and raw bytes written as they are. */
function* chunked(pieces: ReadonlyArray<string | Buffer>): Generator<string | Buffer> {
  let group: Array<string> = []
  let size = 0
  const flush = function* () {
    if (group.length > 0) yield group.join("")
    group = []
    size = 0
  }
  for (const piece of pieces) {
    if (typeof piece !== "string" || piece.length >= SLICE_BYTES) {
      yield* flush()
      yield piece
      continue
    }
    group.push(piece)
    size += piece.length
    if (size >= SLICE_BYTES) yield* flush()
  }
  yield* flush()
}

/** Write to a temporary name in the same directory, fsync, then rename: a crash never leaves a half-written file. */
const writeAtomically = (dir: string, name: string, pieces: ReadonlyArray<string | Buffer>) =>
  Effect.tryPromise({
    try: async () => {
      const temp = path.join(dir, `${name}.${randomHex(6)}.tmp`)
      const open = () => fs.promises.open(temp, "wx")
      // the directory may have been removed under us: recreate it once
      const handle = await open().catch(async (error: unknown) => {
        if (reasonOf(error, "") !== "no_directory") throw error
        await fs.promises.mkdir(dir, { recursive: true })
        return open()
      })
      try {
        await fs.promises.writeFile(handle, chunked(pieces))
        await handle.sync()
        await handle.close()
        await fs.promises.rename(temp, path.join(dir, name))
      } catch (error) {
        await handle.close().catch(() => undefined)
        await fs.promises.unlink(temp).catch(() => undefined)
        throw error
      }
    },
    catch: (error) => new StoreFailure({ reason: reasonOf(error, "write") })
  })

const unlinkAll = (dir: string, ids: ReadonlyArray<string>) =>
  Effect.promise(() => Promise.all(ids.map((id) => fs.promises.unlink(path.join(dir, fileName(id))).catch(() => undefined))))

/**
 * The stored bytes of large items read back from a file. A chained request passes its history
 * items through by reference, so saving the new record writes those bytes as they are instead of
 * serializing the items again.
 */
const itemBytes = new WeakMap<object, Buffer>()

/** Read a stored form back: lines found by byte offset, parsed one by one with yields in between (large ones on the worker). */
const readStored = (file: string, worker: JsonWorker) =>
  Effect.gen(function* () {
    const buffer = yield* Effect.tryPromise({
      try: () => fs.promises.readFile(file),
      catch: (error) => new StoreFailure({ reason: reasonOf(error, "read") === "no_directory" ? "missing" : "read" })
    })
    const corrupt = () => new StoreFailure({ reason: "corrupt" })
    // small lines parse inline (no Effect per line: a long chain has hundreds); large ones on the worker
    const parseSmall = (line: Buffer): Readonly<Record<string, unknown>> | undefined => {
      try {
        const value: unknown = JSON.parse(line.toString("utf8"))
        return isObject(value) ? value : undefined
      } catch {
        return undefined
      }
    }
    const parse = (line: Buffer) =>
      line.length >= SLICE_BYTES
        ? Effect.mapError(worker.parse(line), corrupt).pipe(Effect.filterOrFail(isObject, corrupt))
        : Effect.suspend(() => {
            const value = parseSmall(line)
            return value === undefined ? Effect.fail(corrupt()) : Effect.succeed(value)
          })
    const lines: Array<Buffer> = []
    for (let start = 0; start < buffer.length; ) {
      const end = buffer.indexOf(10, start)
      const stop = end < 0 ? buffer.length : end
      lines.push(buffer.subarray(start, stop))
      start = stop + 1
    }
    const head = lines[0]?.toString("utf8") ?? ""
    if (!head.startsWith(`{"response":`) || !head.endsWith(",") || lines[1]?.toString("utf8") !== `"input":[`) return yield* corrupt()
    const response = yield* parse(lines[0].subarray(`{"response":`.length, lines[0].length - 1))
    let end = lines.length - 1
    while (end > 1 && lines[end].toString("utf8") !== "]}") end--
    if (end < 2) return yield* corrupt()
    const input: Array<Readonly<Record<string, unknown>>> = []
    let sinceYield = 0
    for (let i = 2; i < end; i++) {
      const line = i < end - 1 ? lines[i].subarray(0, lines[i].length - 1) : lines[i]
      const small = line.length < SLICE_BYTES ? parseSmall(line) : undefined
      if (line.length < SLICE_BYTES && small === undefined) return yield* corrupt()
      const item = small ?? (yield* parse(line))
      if (line.length >= SLICE_BYTES) itemBytes.set(item, line)
      input.push(item)
      sinceYield += line.length
      if (sinceYield >= SLICE_BYTES) {
        sinceYield = 0
        yield* yieldToEventLoop
      }
    }
    return { response, input }
  })

/**
 * Stored responses: metadata rows in SQLite (table `responses`), the JSON of each record in
 * `<dataDir>/responses/<id>.json`, written asynchronously so a large record never blocks other
 * requests. Per-app counters live in memory so saves run no COUNT or SUM.
 */
export class ResponseStore extends Context.Tag("gateway/ResponseStore")<
  ResponseStore,
  {
    /** store a finished response; never fails: returns what happened */
    readonly save: (record: StoredRecord, options: { readonly maxAgeDays: number }) => Effect.Effect<"stored" | "skipped" | "failed">
    /** a live record of this app, or none (unknown, deleted, expired, other app) */
    readonly get: (app: string, id: string) => Effect.Effect<Option.Option<StoredRecord>>
    /** delete a record of this app; false when there was none */
    readonly remove: (app: string, id: string) => Effect.Effect<boolean>
    /** records and bytes held per app (for status pages) */
    readonly stats: () => Effect.Effect<ReadonlyArray<{ readonly app: string; readonly count: number; readonly bytes: number }>>
  }
>() {
  static readonly make = (dataDir: string, limits: Partial<ResponseStoreLimits> = {}) =>
    Effect.gen(function* () {
      const worker = yield* Effect.acquireRelease(Effect.sync(makeJsonWorker), (w) => w.close)
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      const scope = yield* Effect.scope
      const caps = { ...defaultResponseStoreLimits, ...limits }
      const maxRecordBytes = Math.min(caps.maxRecordBytes, caps.maxBytes)
      const dir = path.join(dataDir, "responses")
      const lock = yield* Effect.makeSemaphore(1)
      const tallies = makeTallies()

      const insert = SqlSchema.void({ Request: Row, execute: (row) => sql`INSERT INTO responses ${sql.insert(row)}` })
      const findLive = SqlSchema.findOne({
        Request: Schema.Struct({ app: Schema.String, id: Schema.String, now: Schema.Number }),
        Result: Row,
        execute: ({ app, id, now }) => sql`SELECT id, app, created_at, expires_at, bytes FROM responses WHERE id = ${id} AND app = ${app} AND expires_at > ${now}`
      })
      const deleteOne = SqlSchema.findOne({
        Request: Schema.Struct({ app: Schema.String, id: Schema.String }),
        Result: Row,
        execute: ({ app, id }) => sql`DELETE FROM responses WHERE id = ${id} AND app = ${app} RETURNING id, app, created_at, expires_at, bytes`
      })
      const deleteIds = SqlSchema.void({
        Request: Schema.Array(Schema.String),
        execute: (ids) => sql`DELETE FROM responses WHERE ${sql.in("id", ids)}`
      })
      const oldest = SqlSchema.findAll({
        Request: Schema.Struct({ app: Schema.String, limit: Schema.Number }),
        Result: Held,
        execute: ({ app, limit }) => sql`SELECT id, app, bytes FROM responses WHERE app = ${app} ORDER BY created_at, rowid LIMIT ${limit}`
      })
      const expired = SqlSchema.findAll({
        Request: Schema.Struct({ now: Schema.Number, limit: Schema.Number }),
        Result: Held,
        execute: ({ now, limit }) => sql`SELECT id, app, bytes FROM responses WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}`
      })
      const allIds = SqlSchema.findAll({ Request: Schema.Void, Result: Schema.Struct({ id: Schema.String }), execute: () => sql`SELECT id FROM responses` })
      const totals = SqlSchema.findAll({
        Request: Schema.Void,
        Result: Tally,
        execute: () => sql`SELECT app, COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM responses GROUP BY app`
      })

      const tallyOf = tallies.of
      const adjust = tallies.adjust
      const dropped = (rows: ReadonlyArray<typeof Held.Type>) => rows.forEach((row) => adjust(row.app, -1, -row.bytes))

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
        yield* unlinkAll(dir, rows.map((row) => row.id))
        return rows.length
      })
      const sweep = Effect.iterate(BATCH, { while: (n) => n === BATCH, body: () => Effect.zipLeft(sweepBatch, yieldToEventLoop) })

      const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "responses.sweep_failed" })
      const maybeSweep = sweeper.maybe

      /** Under the lock: remove the app's oldest records until one more of `bytes` fits, then insert. */
      const commit = (row: typeof Row.Type) =>
        Effect.gen(function* () {
          const tally = tallyOf(row.app)
          let count = tally.count
          let held = tally.bytes
          const victims: Array<typeof Held.Type> = []
          const fits = () => count + 1 <= caps.maxRecords && held + row.bytes <= caps.maxBytes
          while (!fits() && count > 0) {
            const batch = yield* oldest({ app: row.app, limit: Math.max(count + 1 - caps.maxRecords, 16) })
            const chosen: Array<typeof Held.Type> = []
            for (const victim of batch) {
              if (fits()) break
              chosen.push(victim)
              count--
              held -= victim.bytes
            }
            if (chosen.length === 0) break
            yield* deleteIds(chosen.map((victim) => victim.id))
            victims.push(...chosen)
          }
          yield* insert(row)
          return victims
        }).pipe((effect) => sql.withTransaction(effect))

      const store = (record: StoredRecord, maxAgeDays: number) =>
        Effect.gen(function* () {
          if (!SAFE_ID.test(record.id)) return yield* new StoreFailure({ reason: "bad_id" })
          const { bytes, pieces } = yield* serialize(record, maxRecordBytes)
          if (bytes > maxRecordBytes) {
            log.info("responses.store_skipped", { app: record.app, id: record.id, bytes })
            return "skipped" as const
          }
          yield* writeAtomically(dir, fileName(record.id), pieces)
          const days = Number.isFinite(maxAgeDays) && maxAgeDays > 0 ? maxAgeDays : 30
          const row = { id: record.id, app: record.app, created_at: record.createdAt, expires_at: record.createdAt + days * DAY_MS, bytes }
          const victims = yield* lock.withPermits(1)(
            commit(row).pipe(
              Effect.tap((victims) =>
                Effect.sync(() => {
                  dropped(victims)
                  adjust(row.app, 1, bytes)
                })
              )
            )
          ).pipe(Effect.tapError(() => unlinkAll(dir, [record.id])), Effect.mapError(() => new StoreFailure({ reason: "database" })))
          yield* unlinkAll(dir, victims.map((victim) => victim.id))
          return "stored" as const
        }).pipe(
          Effect.catchAllCause((cause) => {
            const reason = Option.match(Cause.failureOption(cause), { onNone: () => "defect", onSome: (failure) => failure.reason })
            log.error("responses.store_failed", { app: record.app, id: record.id, reason })
            return Effect.succeed("failed" as const)
          })
        )

      const readFailed = (app: string, id: string) => (failure: StoreFailure) =>
        Effect.sync(() => log.error("responses.read_failed", { app, id, reason: failure.reason })).pipe(Effect.as(Option.none<StoredRecord>()))

      // start: drop rows whose file is gone, files (and leftover temp files) with no row, then expired records
      yield* Effect.tryPromise({ try: () => fs.promises.mkdir(dir, { recursive: true }), catch: (error) => new StoreFailure({ reason: reasonOf(error, "mkdir") }) })
      const names = new Set(yield* Effect.tryPromise({ try: () => fs.promises.readdir(dir), catch: (error) => new StoreFailure({ reason: reasonOf(error, "readdir") }) }))
      const ids = (yield* allIds()).map((row) => row.id)
      const rowsWithoutFile = ids.filter((id) => !names.has(fileName(id)))
      for (let i = 0; i < rowsWithoutFile.length; i += BATCH) yield* deleteIds(rowsWithoutFile.slice(i, i + BATCH))
      const known = new Set(ids.map(fileName))
      const orphans = [...names].filter((name) => name.endsWith(".tmp") || (name.endsWith(".json") && !known.has(name)))
      yield* Effect.promise(() => Promise.all(orphans.map((name) => fs.promises.unlink(path.join(dir, name)).catch(() => undefined))))
      if (rowsWithoutFile.length + orphans.length > 0) log.info("responses.start_cleanup", { rowsWithoutFile: rowsWithoutFile.length, orphanFiles: orphans.length })
      for (const tally of yield* totals()) tallies.set(tally.app, { count: tally.count, bytes: tally.bytes })
      yield* sweeper.started
      yield* sweep

      return ResponseStore.of({
        save: Effect.fn("ResponseStore.save")(function* (record, options) {
          yield* maybeSweep
          return yield* Effect.uninterruptible(store(record, options.maxAgeDays))
        }),
        get: Effect.fn("ResponseStore.get")(function* (app, id) {
          yield* maybeSweep
          if (!SAFE_ID.test(id)) return Option.none()
          const now = yield* Clock.currentTimeMillis
          const found = yield* Effect.orDie(findLive({ app, id, now }))
          if (Option.isNone(found)) return Option.none()
          const row = found.value
          return yield* readStored(path.join(dir, fileName(row.id)), worker).pipe(
            Effect.map(({ response, input }): Option.Option<StoredRecord> => Option.some({ id: row.id, app: row.app, createdAt: row.created_at, response, input })),
            Effect.catchAll(readFailed(app, id))
          )
        }),
        remove: Effect.fn("ResponseStore.remove")(function* (app, id) {
          if (!SAFE_ID.test(id)) return false
          const now = yield* Clock.currentTimeMillis
          const row = yield* lock.withPermits(1)(
            Effect.tap(Effect.orDie(deleteOne({ app, id })), (row) => Effect.sync(() => Option.map(row, (held) => dropped([held]))))
          )
          if (Option.isNone(row)) return false
          yield* unlinkAll(dir, [id])
          return row.value.expires_at > now
        }),
        stats: () =>
          Effect.sync(tallies.all)
      })
    })

  /** The store over `<dataDir>/responses` and the database's `responses` table; sweeps stop with the scope. */
  static readonly layer = (dataDir: string, limits: Partial<ResponseStoreLimits> = {}) =>
    Layer.scoped(ResponseStore, ResponseStore.make(dataDir, limits)).pipe(Layer.orDie)
}
