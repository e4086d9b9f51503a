import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Effect, Exit, Layer, Option, Scope, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import Pg from "pg"
import { Errors } from "../../../src/domain/Errors.js"
import { Log } from "../../../src/services/ops/Log.js"
import { type FileRecord, FileStore, type FileStoreLimits, type Upload, UPLOAD_TTL_MS } from "../../../src/services/files/FileStore.js"
import { postgresDatabaseLayer } from "../../../src/sql/Database.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../../support/Postgres.js"

/**
 * Two file stores on one PostgreSQL database, as two replicas of the gateway: each has its own
 * connection pool and data directory, and shares nothing with the other but the database.
 */

const pngOf = (size: number) => {
  const out = new Uint8Array(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + 7) % 251
  out.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  return out
}
const textOf = (size: number) => new Uint8Array(Buffer.from("x".repeat(size)))

const chunksOf = (bytes: Uint8Array, chunk = 64 * 1024): AsyncIterable<Uint8Array> => ({
  async *[Symbol.asyncIterator]() {
    for (let at = 0; at < bytes.length; at += chunk) yield bytes.slice(at, at + chunk)
  }
})

const KiB = 1024

/** A fresh database, dropped when the test ends. */
const database = Effect.acquireRelease(
  Effect.promise(() => freshDatabase()),
  (db) => Effect.promise(() => db.drop())
)

/** One replica's file store on `db`, open until the test ends. */
const replica = (db: TestDatabase, limits?: Partial<FileStoreLimits>) =>
  Effect.gen(function* () {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "file-replica-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const context = yield* Layer.build(FileStore.layer(dir, limits).pipe(Layer.provide(Layer.merge(postgresDatabaseLayer(db.redacted, 4), Log.layerMemory([])))))
    return Context.get(context, FileStore)
  })

const two = (limits?: Partial<FileStoreLimits>) =>
  Effect.gen(function* () {
    const db = yield* database
    return { db, a: yield* replica(db, limits), b: yield* replica(db, limits) }
  })

const save = (store: FileStore["Type"], app: string, bytes: Uint8Array, filename: string) =>
  Effect.gen(function* () {
    const stage = yield* store.stage({ filename, maxBytes: 32 * 1024 * 1024 })
    yield* stage.write(chunksOf(bytes))
    return yield* store.commit(app, yield* stage.finish, { filename, purpose: "user_data", maxAgeDays: 0 })
  })

const piecesOf = (store: FileStore["Type"], record: FileRecord) => Effect.map(Stream.runCollect(store.content(record)), Chunk.toArray)

/** Rows of a table, counted over a connection of the test's own. */
const countIn = (db: TestDatabase, table: "file_chunks" | "file_stages" | "uploads" | "files") =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: db.url })
    await client.connect()
    try {
      return Number((await client.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table}`)).rows[0].n)
    } finally {
      await client.end()
    }
  })

const wrongOffset = (size: number) => Errors.invalidRequest("invalid_argument", `X-Goog-Upload-Offset: must be ${size}`)

/** One request's chunk: claim, write, leave; the bytes received after it. */
const sendChunk = (store: FileStore["Type"], upload: Upload, offset: number, bytes: Uint8Array) =>
  Effect.scoped(
    Effect.gen(function* () {
      const writer = yield* store.uploads.claim(upload, offset, wrongOffset)
      yield* writer.write(chunksOf(bytes, 16 * KiB))
      return writer.size()
    })
  )

describe.skipIf(!hasPostgres)("FileStore on PostgreSQL: two replicas, one database", () => {
  it.scoped("a file uploaded on A is listed, read, downloaded chunk by chunk and deleted on B; A sees it gone", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const image = pngOf(700 * KiB)
      const record = yield* save(a, "team-a", image, "big.png")
      expect(record).toMatchObject({ app: "team-a", mimeType: "image/png", bytes: image.length })
      // about 256 KiB a chunk row: three rows for 700 KiB
      expect(yield* countIn(db, "file_chunks")).toBe(3)
      expect(yield* countIn(db, "file_stages")).toBe(0)

      expect(yield* b.get("team-a", record.id)).toEqual(Option.some(record))
      expect(yield* b.list("team-a")).toEqual([record])
      expect(yield* b.get("team-b", record.id)).toEqual(Option.none())
      const pieces = yield* piecesOf(b, record)
      expect(pieces.length).toBe(3)
      expect(new Uint8Array(Buffer.concat(pieces))).toEqual(image)
      expect(new Uint8Array(yield* b.read(record))).toEqual(image)
      expect(yield* b.stats()).toEqual([{ app: "team-a", count: 1, bytes: image.length }])

      expect(yield* b.remove("team-a", record.id)).toBe(true)
      expect(yield* a.get("team-a", record.id)).toEqual(Option.none())
      expect(yield* a.list("team-a")).toEqual([])
      expect(yield* a.remove("team-a", record.id)).toBe(false)
      expect(yield* countIn(db, "file_chunks")).toBe(0)
      // a download of a file deleted meanwhile fails typed, never a defect
      expect(yield* Effect.flip(a.read(record))).toMatchObject({ status: 500, code: "file_store_failed" })
    }))

  it.scoped("the caps hold for the app as a whole: commits racing on both replicas never pass maxFiles or maxBytes", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two({ maxFiles: 3, maxBytes: 1000 })
      const staged = (store: FileStore["Type"], size: number) =>
        Effect.gen(function* () {
          const stage = yield* store.stage({ filename: "f.txt", maxBytes: 10_000 })
          yield* stage.write(chunksOf(textOf(size)))
          return { store, file: yield* stage.finish }
        })
      const ready = [...(yield* Effect.all([0, 1, 2].map(() => staged(a, 10)))), ...(yield* Effect.all([0, 1, 2].map(() => staged(b, 10))))]
      const results = yield* Effect.all(
        ready.map(({ file, store }) => Effect.either(store.commit("team-a", file, { filename: "f.txt", purpose: "user_data", maxAgeDays: 0 }))),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r._tag === "Right")).toHaveLength(3)
      for (const r of results) if (r._tag === "Left") expect(r.left).toMatchObject({ status: 400, code: "file_limit_exceeded" })
      expect(yield* a.list("team-a")).toHaveLength(3)
      expect(yield* Effect.flip(b.checkRoom("team-a"))).toMatchObject({ code: "file_limit_exceeded" })
      // refused commits leave no bytes behind
      expect(yield* countIn(db, "file_stages")).toBe(0)
      expect(yield* countIn(db, "file_chunks")).toBe(3)
      // another app has its own caps, by bytes too: 600 on A, then 500 on B does not fit
      yield* save(a, "team-b", textOf(600), "b.txt")
      expect(yield* Effect.flip(save(b, "team-b", textOf(500), "c.txt"))).toMatchObject({ status: 400, code: "file_storage_full" })
      yield* save(b, "team-b", textOf(400), "d.txt")
      expect((yield* a.stats()).find((s) => s.app === "team-b")).toEqual({ app: "team-b", count: 2, bytes: 1000 })
    }))

  it.scoped("a resumable upload started on A takes its chunks alternately on A and B and is finalized on B", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const image = pngOf(600 * KiB)
      const upload = yield* a.uploads.start({ app: "team-a", keyId: "key-1", filename: "photo", displayName: "Photo", maxBytes: 32 * 1024 * 1024 })
      expect(upload).toMatchObject({ app: "team-a", keyId: "key-1", size: 0, displayName: "Photo" })
      const parts = [image.subarray(0, 200 * KiB), image.subarray(200 * KiB, 300 * KiB), image.subarray(300 * KiB, 550 * KiB), image.subarray(550 * KiB)]

      expect(yield* sendChunk(a, upload, 0, parts[0])).toBe(200 * KiB)
      const onB = yield* b.uploads.find(upload.id)
      expect(Option.map(onB, (u) => u.size)).toEqual(Option.some(200 * KiB))
      expect(yield* sendChunk(b, Option.getOrThrow(onB), 200 * KiB, parts[1])).toBe(300 * KiB)
      // a chunk at the wrong offset is refused, and the upload goes on
      expect(yield* Effect.flip(sendChunk(a, upload, 200 * KiB, parts[2]))).toMatchObject({ status: 400, message: expect.stringContaining(String(300 * KiB)) })
      expect(yield* sendChunk(a, upload, 300 * KiB, parts[2])).toBe(550 * KiB)

      // while A writes a chunk, B's chunk to the same upload is refused as busy
      const scope = yield* Scope.make()
      const writing = yield* Scope.extend(a.uploads.claim(upload, 550 * KiB, wrongOffset), scope)
      expect(yield* Effect.flip(Effect.scoped(b.uploads.claim(upload, 550 * KiB, wrongOffset)))).toMatchObject({ status: 429, code: "file_saves_busy" })
      yield* Scope.close(scope, Exit.void)
      expect(writing.size()).toBe(550 * KiB)

      // the last chunk and the finalize on B
      const record = yield* Effect.scoped(
        Effect.gen(function* () {
          const writer = yield* b.uploads.claim(upload, 550 * KiB, wrongOffset)
          yield* writer.write(chunksOf(parts[3]))
          const staged = yield* writer.finish
          return yield* b.commit("team-a", staged, { filename: upload.filename, purpose: "user_data", displayName: "Photo", maxAgeDays: 0 })
        })
      )
      expect(record).toMatchObject({ bytes: image.length, mimeType: "image/png", displayName: "Photo" })
      expect(yield* a.uploads.find(upload.id)).toEqual(Option.none())
      expect(new Uint8Array(yield* a.read(record))).toEqual(image)
      expect(yield* countIn(db, "uploads")).toBe(0)
      expect(yield* countIn(db, "file_stages")).toBe(0)
    }))

  it.scoped("4 unfinished uploads per app across replicas; revoking a key on B drops what it started on A; expiry on B drops A's", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const start = (store: FileStore["Type"], keyId: string, app = "team-a") => store.uploads.start({ app, keyId, filename: "f.txt", declaredType: "text/plain", maxBytes: 1024 * 1024 })
      const first = yield* start(a, "key-1")
      yield* sendChunk(a, first, 0, textOf(1000))
      yield* start(b, "key-1")
      yield* start(a, "key-2")
      yield* start(b, "key-2")
      expect(yield* Effect.flip(start(a, "key-3"))).toMatchObject({ status: 429, code: "too_many_uploads" })
      expect(yield* Effect.flip(start(b, "key-3"))).toMatchObject({ status: 429, code: "too_many_uploads" })
      yield* start(b, "key-3", "team-b")

      // key-1 revoked: both of its uploads go, with their bytes, whichever replica started them
      yield* b.uploads.dropKey("key-1")
      expect(yield* a.uploads.find(first.id)).toEqual(Option.none())
      expect(yield* countIn(db, "uploads")).toBe(3)
      expect(yield* countIn(db, "file_chunks")).toBe(0)
      const again = yield* start(a, "key-3")
      expect(yield* Effect.flip(Effect.scoped(b.uploads.claim(first, 1000, wrongOffset)))).toMatchObject({ status: 404 })

      // ten minutes on, any replica's expiry drops every upload
      yield* TestClock.adjust(UPLOAD_TTL_MS)
      expect(yield* b.uploads.find(again.id)).toEqual(Option.none())
      yield* b.uploads.expire
      expect(yield* countIn(db, "uploads")).toBe(0)
      expect(yield* countIn(db, "file_stages")).toBe(0)
      yield* start(a, "key-3")
    }))

  it.scoped("an upload whose chunk was being written by a replica that died is busy, then expires like any other", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const upload = yield* a.uploads.start({ app: "team-a", keyId: "key-1", filename: "f.txt", declaredType: "text/plain", maxBytes: 1024 * 1024 })
      // A claims a chunk and never comes back (its scope stays open: the replica is gone)
      yield* TestClock.adjust(1000)
      const dead = yield* Scope.make()
      const writer = yield* Scope.extend(a.uploads.claim(upload, 0, wrongOffset), dead)
      yield* writer.write(chunksOf(textOf(300 * KiB)))
      expect(yield* Effect.flip(sendChunk(b, upload, 0, textOf(10)))).toMatchObject({ status: 429, code: "file_saves_busy" })
      // at its 10 minutes the upload no longer answers, but its claim is still fresh: kept until the claim is stale
      yield* TestClock.adjust(UPLOAD_TTL_MS - 1000)
      expect(yield* b.uploads.find(upload.id)).toEqual(Option.none())
      yield* b.uploads.expire
      expect(yield* countIn(db, "uploads")).toBe(1)
      yield* TestClock.adjust(UPLOAD_TTL_MS)
      yield* b.uploads.expire
      expect(yield* countIn(db, "uploads")).toBe(0)
      expect(yield* countIn(db, "file_chunks")).toBe(0)
      expect(yield* countIn(db, "file_stages")).toBe(0)
      yield* Scope.close(dead, Exit.void)
    }))

  it.scoped("a resumable upload whose bytes are not what it declared is refused at the finalize on the other replica, and leaves nothing", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const upload = yield* a.uploads.start({ app: "team-a", keyId: "key-1", filename: "notes.txt", declaredType: "text/plain", maxBytes: 1024 * 1024 })
      yield* sendChunk(a, upload, 0, textOf(100))
      const refused = yield* Effect.flip(
        Effect.scoped(
          Effect.gen(function* () {
            const writer = yield* b.uploads.claim(upload, 100, wrongOffset)
            yield* writer.write(chunksOf(new Uint8Array([0x41, 0, 0x42])))
            return yield* writer.finish
          })
        )
      )
      expect(refused).toMatchObject({ status: 400, code: "invalid_file" })
      expect(yield* a.uploads.find(upload.id)).toEqual(Option.none())
      expect(yield* countIn(db, "file_chunks")).toBe(0)
      expect(yield* countIn(db, "file_stages")).toBe(0)
    }))

  it.scoped("retention is for the whole database: B sweeps A's expired files, and a new replica sweeps the stages of one that died", () =>
    Effect.gen(function* () {
      const { a, b, db } = yield* two()
      const short = yield* Effect.gen(function* () {
        const stage = yield* a.stage({ filename: "short.txt", maxBytes: 1024 })
        yield* stage.write(chunksOf(textOf(10)))
        return yield* a.commit("team-a", yield* stage.finish, { filename: "short.txt", purpose: "user_data", maxAgeDays: 1 })
      })
      const kept = yield* save(a, "team-a", textOf(20), "kept.txt")
      // A stages a file and dies before committing it (nothing discards it)
      const orphan = yield* a.stage({ filename: "orphan.txt", maxBytes: 1024 * 1024 })
      yield* orphan.write(chunksOf(textOf(300 * KiB)))
      expect(yield* countIn(db, "file_stages")).toBe(1)

      yield* TestClock.adjust(24 * 60 * 60 * 1000)
      expect(yield* b.list("team-a")).toEqual([kept])
      // the read forked B's first sweep since its start
      for (let i = 0; i < 100 && (yield* countIn(db, "files")) > 1; i++) yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
      expect(yield* countIn(db, "files")).toBe(1)
      expect(yield* b.get("team-a", short.id)).toEqual(Option.none())
      // a day on, the stage is older than any upload lasts: a replica starting now removes it and its chunks
      yield* replica(db)
      expect(yield* countIn(db, "file_stages")).toBe(0)
      expect(yield* countIn(db, "file_chunks")).toBe(1)
    }))

  it.scoped("with the database gone, every file operation fails 503 database_unavailable (typed, never a defect)", () =>
    Effect.gen(function* () {
      const { a, db } = yield* two()
      const record = yield* save(a, "team-a", textOf(10), "a.txt")
      const upload = yield* a.uploads.start({ app: "team-a", keyId: "key-1", filename: "f.txt", maxBytes: 1024 })
      yield* Effect.promise(() => db.drop())
      const unavailable = { status: 503, kind: "unavailable", code: "database_unavailable" }
      expect(yield* Effect.flip(a.get("team-a", record.id))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.list("team-a"))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.remove("team-a", record.id))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.checkRoom("team-a"))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.stage({ filename: "b.txt", maxBytes: 1024 }))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.read(record))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.stats())).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.uploads.find(upload.id))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.uploads.start({ app: "team-a", keyId: "key-1", filename: "g.txt", maxBytes: 1024 }))).toMatchObject(unavailable)
      expect(yield* Effect.flip(Effect.scoped(a.uploads.claim(upload, 0, wrongOffset)))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.uploads.expire)).toMatchObject(unavailable)
    }))
})
