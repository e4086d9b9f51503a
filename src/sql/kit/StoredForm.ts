import { Data, Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { randomHex } from "../../domain/Ids.js"
import type { JsonWorker } from "./JsonWorker.js"

/**
 * The stored form of a Responses record, one JSON document `{"response":…,"input":[…]}` written one
 * item per line, so that neither writing nor reading parses a large record in one go; and the file
 * operations of the records kept as files. The same bytes are a record file or a row's inline body.
 */

/** serialized or parsed bytes between two yields to the event loop */
export const SLICE_BYTES = 512 * 1024
/** `{"response":,"input":[]}`: the stored form's frame around the response and the items */
const FRAME_BYTES = 24

/** A storage step that failed; `reason` is a short code for the log, never content. */
export class StoreFailure extends Data.TaggedError("StoreFailure")<{ readonly reason: string }> {}

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
/** a guard, not a decode: the parsed object is kept as is (a decode would copy it, and mishandle a `__proto__` key) */
const isObject = Schema.is(JsonObject)

type JsonRecord = Readonly<Record<string, unknown>>

export const fileName = (id: string) => `${id}.json`

export const reasonOf = (error: unknown, fallback: string): string => {
  const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined
  switch (code) {
    case "ENOSPC":
    case "EDQUOT":
    case "SQLITE_FULL":
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
export const yieldToEventLoop = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

const stringify = (value: unknown) =>
  Effect.try({ try: () => JSON.stringify(value), catch: () => new StoreFailure({ reason: "serialize" }) }).pipe(
    Effect.filterOrFail((text): text is string => typeof text === "string", () => new StoreFailure({ reason: "serialize" }))
  )

/**
 * The stored bytes of large items read back from a file. A chained request passes its history
 * items through by reference, so saving the new record writes those bytes as they are instead of
 * serializing the items again.
 */
const itemBytes = new WeakMap<object, Buffer>()

/**
 * The stored form's bytes in order, `pieces` (strings, and the raw bytes of history items read
 * back earlier); `bytes` is the size of the compact serialization (what the caps count); `pieces`
 * is empty when that exceeds `maxBytes`.
 */
export const serialize = (record: { readonly response: JsonRecord; readonly input: ReadonlyArray<JsonRecord> }, maxBytes: number) =>
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

/** The pieces as one buffer: for small records only (one synchronous copy). */
export const joinPieces = (pieces: ReadonlyArray<string | Buffer>): Buffer =>
  pieces.every((piece) => typeof piece === "string")
    ? Buffer.from(pieces.join(""), "utf8")
    : Buffer.concat(pieces.map((piece) => (typeof piece === "string" ? Buffer.from(piece, "utf8") : piece)))

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

/**
 * Write to a temporary name in the same directory, fsync, then rename: a crash never leaves a
 * half-written file. The rename reaches the disk with the next `syncDirectory`.
 */
export const writeAtomically = (dir: string, name: string, pieces: ReadonlyArray<string | Buffer>) =>
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

/** fsync a directory: the renames into it reach the disk (one call covers every rename made before it). */
export const syncDirectory = (dir: string) =>
  Effect.tryPromise({
    try: async () => {
      const handle = await fs.promises.open(dir, "r")
      try {
        await handle.sync()
      } finally {
        await handle.close()
      }
    },
    catch: (error) => new StoreFailure({ reason: reasonOf(error, "write") })
  })

export const unlinkAll = (dir: string, ids: ReadonlyArray<string>) =>
  Effect.promise(() => Promise.all(ids.map((id) => fs.promises.unlink(path.join(dir, fileName(id))).catch(() => undefined))))

export const readFile = (file: string) =>
  Effect.tryPromise({
    try: () => fs.promises.readFile(file),
    catch: (error) => new StoreFailure({ reason: reasonOf(error, "read") === "no_directory" ? "missing" : "read" })
  })

/** Parse a stored form back: lines found by byte offset, parsed one by one with yields in between (large ones on the worker). */
export const parseStored = (buffer: Buffer, worker: JsonWorker) =>
  Effect.gen(function* () {
    const corrupt = () => new StoreFailure({ reason: "corrupt" })
    // small lines parse inline (no Effect per line: a long chain has hundreds); large ones on the worker
    const parseSmall = (line: Buffer): JsonRecord | undefined => {
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
    const input: Array<JsonRecord> = []
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
