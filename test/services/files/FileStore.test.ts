import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Layer, Option, Scope, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { acceptedKinds } from "../../../src/domain/FileKind.js"
import { randomHex } from "../../../src/domain/Ids.js"
import { Log } from "../../../src/services/ops/Log.js"
import { type CommitOptions, type FileRecord, FileStore, type FileStoreLimits, type StageOptions, type Upload, UPLOAD_TTL_MS } from "../../../src/services/files/FileStore.js"
import { Errors } from "../../../src/domain/Errors.js"
import { backends, type BackendUnderTest, type OpenDatabase } from "../../support/Backends.js"
import Pg from "pg"

const DAY = 24 * 60 * 60 * 1000
const FILE_ID = /^file-[0-9a-f]{32}$/

type Lines = Array<Record<string, unknown>>

const filesDir = (dir: string) => path.join(dir, "files")

const bytesOf = (...parts: ReadonlyArray<string | ReadonlyArray<number> | Uint8Array>): Uint8Array =>
  Uint8Array.from(parts.flatMap((part) => (typeof part === "string" ? [...Buffer.from(part, "utf8")] : [...part])))

/** A PNG header padded to `size` bytes (only the first bytes are checked). */
const pngOf = (size: number) => {
  const out = new Uint8Array(size).fill(7)
  out.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  return out
}
const textOf = (size: number) => bytesOf("x".repeat(size))

/** The bytes as an async iterable of chunks of at most `chunk` bytes. */
const chunksOf = (bytes: Uint8Array, chunk = 7): AsyncIterable<Uint8Array> => ({
  async *[Symbol.asyncIterator]() {
    for (let at = 0; at < bytes.length; at += chunk) yield bytes.slice(at, at + chunk)
  }
})

const stageOptions = (filename: string, extra: Partial<StageOptions> = {}): StageOptions => ({ filename, maxBytes: 1024 * 1024, ...extra })
const commitOptions = (filename: string, extra: Partial<CommitOptions> = {}): CommitOptions => ({ filename, purpose: "user_data", maxAgeDays: 0, ...extra })

/** stage, write, finish */
const staged = (bytes: Uint8Array, options: StageOptions) =>
  Effect.gen(function* () {
    const store = yield* FileStore
    const stage = yield* store.stage(options)
    yield* stage.write(chunksOf(bytes))
    return yield* stage.finish
  })

/** stage, write, finish, commit */
const save = (app: string, bytes: Uint8Array, filename: string, extra: { readonly stage?: Partial<StageOptions>; readonly commit?: Partial<CommitOptions> } = {}) =>
  Effect.gen(function* () {
    const store = yield* FileStore
    const file = yield* staged(bytes, stageOptions(filename, extra.stage))
    return yield* store.commit(app, file, commitOptions(filename, extra.commit))
  })

const rowCount = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM files WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0].n),
    Effect.orDie
  )

const get = (app: string, id: string) => Effect.flatMap(FileStore, (store) => store.get(app, id))
const list = (app: string) => Effect.flatMap(FileStore, (store) => store.list(app))

const suite = (backend: BackendUnderTest) => {
  /** the database of each test's directory (one per test, dropped with it) */
  const databases = new Map<string, OpenDatabase>()

  /** a temporary data directory and a fresh database for it; both go when the test ends */
  const tempDir = Effect.acquireRelease(
    Effect.gen(function* () {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "file-store-"))
      databases.set(dir, yield* Effect.promise(() => backend.open(dir)))
      return dir
    }),
    (dir) =>
      Effect.promise(async () => {
        await databases.get(dir)?.close()
        databases.delete(dir)
        fs.rmSync(dir, { recursive: true, force: true })
      })
  )

  /** Run `body` against a store over `dir`; the store and its database close when `body` ends (a "restart" is a second call). */
  const withStore = <A, E>(
    dir: string,
    body: Effect.Effect<A, E, FileStore | SqlClient.SqlClient>,
    options: { readonly lines?: Lines; readonly limits?: Partial<FileStoreLimits> } = {}
  ) => {
    const db = databases.get(dir)
    if (db === undefined) throw new Error("no database for this directory")
    return Effect.provide(body, FileStore.layer(dir, options.limits).pipe(Layer.provideMerge(Layer.merge(db.layer, Log.layerMemory(options.lines ?? [])))))
  }

  /**
   * What holds bytes, by name: on SQLite the files directory (temporary names end in `.tmp`); on
   * PostgreSQL the committed files' chunks by id and each stage as `<id>.stage.tmp`.
   */
  const namesIn = (dir: string): Effect.Effect<ReadonlyArray<string>> =>
    backend.kind === "sqlite"
      ? Effect.sync(() => fs.readdirSync(filesDir(dir)).sort())
      : Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: databases.get(dir)?.url })
          await client.connect()
          try {
            const rows = await client.query<{ name: string }>(
              "SELECT DISTINCT file_id AS name FROM file_chunks WHERE file_id NOT IN (SELECT file_id FROM file_stages) UNION SELECT file_id || '.stage.tmp' AS name FROM file_stages"
            )
            return rows.rows.map((row) => row.name).sort()
          } finally {
            await client.end()
          }
        })
  const tempsIn = (dir: string) => Effect.map(namesIn(dir), (names) => names.filter((name) => name.endsWith(".tmp")))
  const holds = (dir: string, id: string) => Effect.map(namesIn(dir), (names) => names.includes(id))
  const contentOf = (record: FileRecord) =>
    Effect.flatMap(FileStore, (store) => Stream.runCollect(store.content(record))).pipe(Effect.map((pieces) => Buffer.concat(Chunk.toArray(pieces))))

  describe("FileStore: save, read, remove", () => {
    it.scoped("stage, write, finish and commit give a record that get, list and read return", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            yield* TestClock.setTime(5_000)
            const image = pngOf(1000)
            const stage = yield* store.stage(stageOptions("a.txt", { declaredType: "text/plain" }))
            // two writes (as a resumable upload makes), each of several chunks
            yield* stage.write(chunksOf(image.subarray(0, 300), 64))
            expect(stage.size()).toBe(300)
            yield* stage.write(chunksOf(image.subarray(300), 100))
            expect(stage.size()).toBe(1000)
            const file = yield* stage.finish
            expect(file).toEqual({ id: expect.stringMatching(FILE_ID), bytes: 1000, mimeType: "image/png" })
            // staged but not committed: invisible, under a temporary name
            expect(yield* get("team-a", file.id)).toEqual(Option.none())
            expect((yield* tempsIn(dir))).toHaveLength(1)
            expect((yield* tempsIn(dir))[0].startsWith(`${file.id}.`)).toBe(true)

            const record = yield* store.commit("team-a", file, commitOptions("a.txt"))
            expect(record).toEqual({
              id: file.id,
              app: "team-a",
              filename: "a.txt",
              purpose: "user_data",
              mimeType: "image/png",
              bytes: 1000,
              createdAt: 5_000,
              expiresAt: 5_000 + 30 * DAY
            })
            expect((yield* namesIn(dir))).toEqual([file.id])
            expect(new Uint8Array(yield* contentOf(record))).toEqual(image)
            expect(new Uint8Array(yield* store.read(record))).toEqual(image)
            expect(yield* get("team-a", record.id)).toEqual(Option.some(record))

            yield* TestClock.adjust(1)
            const text = bytesOf("# notes\n\n\u00e9t\u00e9 \u{1F600}\n")
            const second = yield* save("team-a", text, "notes.md", { commit: { displayName: "My notes", purpose: "assistants", maxAgeDays: 2 } })
            expect(second).toMatchObject({ mimeType: "text/markdown", bytes: text.length, displayName: "My notes", purpose: "assistants", createdAt: 5_001, expiresAt: 5_001 + 2 * DAY })
            expect(second.id).not.toBe(record.id)
            expect(new Uint8Array(yield* store.read(second))).toEqual(text)
            expect(yield* list("team-a")).toEqual([record, second])
            expect(yield* store.stats()).toEqual([{ app: "team-a", count: 2, bytes: 1000 + text.length }])
          })
        )
      }))

    it.scoped("list is oldest first even when committed within the same millisecond", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const ids: Array<string> = []
            for (let i = 0; i < 5; i++) ids.push((yield* save("team-a", textOf(10 + i), `f${i}.txt`)).id)
            expect((yield* list("team-a")).map((record) => record.id)).toEqual(ids)
          })
        )
      }))

    it.scoped("another app's get, list and remove see nothing; unknown ids and non-ids give none", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const record = yield* save("team-a", textOf(20), "a.txt")
            expect(yield* get("team-b", record.id)).toEqual(Option.none())
            expect(yield* list("team-b")).toEqual([])
            expect(yield* store.remove("team-b", record.id)).toBe(false)
            expect(yield* get("team-a", `file-${randomHex()}`)).toEqual(Option.none())
            expect(yield* get("team-a", "../gateway.db")).toEqual(Option.none())
            expect(yield* get("team-a", record.id.toUpperCase())).toEqual(Option.none())
            expect(yield* store.remove("team-a", "../gateway.db")).toBe(false)
            expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
            if (backend.kind === "sqlite") expect(fs.existsSync(path.join(dir, "gateway.db"))).toBe(true)
          })
        )
      }))

    it.scoped("remove deletes the row and the file; get after remove is none; a second remove finds nothing", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const record = yield* save("team-a", pngOf(64), "a.png")
            const other = yield* save("team-a", textOf(10), "b.txt")
            expect(yield* store.remove("team-a", record.id)).toBe(true)
            expect(yield* holds(dir, record.id)).toBe(false)
            expect(yield* rowCount(record.id)).toBe(0)
            expect(yield* get("team-a", record.id)).toEqual(Option.none())
            expect(yield* list("team-a")).toEqual([other])
            expect(yield* store.remove("team-a", record.id)).toBe(false)
            expect(yield* store.stats()).toEqual([{ app: "team-a", count: 1, bytes: 10 }])
            expect(yield* store.remove("team-a", other.id)).toBe(true)
            expect(yield* store.stats()).toEqual([])
            expect((yield* namesIn(dir))).toEqual([])
          })
        )
      }))

    it.scoped("discard drops a stage's temporary file; a failing source is a 500 and leaves nothing", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const stage = yield* store.stage(stageOptions("a.txt"))
            yield* stage.write(chunksOf(textOf(30)))
            expect((yield* tempsIn(dir))).toHaveLength(1)
            yield* stage.discard
            expect((yield* namesIn(dir))).toEqual([])

            const broken = yield* store.stage(stageOptions("b.txt"))
            const failing: AsyncIterable<Uint8Array> = {
              async *[Symbol.asyncIterator]() {
                yield textOf(20)
                throw new Error("connection reset")
              }
            }
            const error = yield* Effect.flip(broken.write(failing))
            expect(error).toMatchObject({ status: 500, code: "file_store_failed" })
            expect((yield* namesIn(dir))).toEqual([])
            expect(yield* store.stats()).toEqual([])
          })
        )
      }))
  })

  // disk-specific: temporary names, stray files and rows whose file was deleted under them
  describe.runIf(backend.kind === "sqlite")("FileStore: restart", () => {
    it.scoped("uncommitted temporary files, stray files and rows whose file is gone are cleaned; committed files survive intact", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const image = pngOf(5000)
        const text = bytesOf('{"keep": true, "text": "caf\u00e9"}')
        const { gone, kept, keptText, uncommitted } = yield* withStore(
          dir,
          Effect.gen(function* () {
            const kept = yield* save("team-a", image, "keep.png")
            const keptText = yield* save("team-b", text, "keep.json")
            const gone = yield* save("team-a", textOf(40), "gone.txt")
            // finished but never committed (the request died before the commit)
            const uncommitted = yield* staged(textOf(25), stageOptions("left.txt"))
            return { gone, kept, keptText, uncommitted }
          })
        )
        // after the first store closed: a half-written temporary file, a stray file and directory, and a file deleted under a row
        fs.writeFileSync(path.join(filesDir(dir), `file-${randomHex()}.${randomHex(6)}.tmp`), "half written")
        fs.writeFileSync(path.join(filesDir(dir), "stray"), "not ours")
        fs.mkdirSync(path.join(filesDir(dir), "stray-dir"))
        fs.writeFileSync(path.join(filesDir(dir), "stray-dir", "inner"), "x")
        fs.rmSync(path.join(filesDir(dir), gone.id))
        expect((yield* namesIn(dir))).toHaveLength(6)

        const lines: Lines = []
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            expect((yield* namesIn(dir))).toEqual([kept.id, keptText.id].sort())
            expect(yield* rowCount(gone.id)).toBe(0)
            expect(yield* rowCount(uncommitted.id)).toBe(0)
            expect(yield* get("team-a", gone.id)).toEqual(Option.none())
            expect(yield* list("team-a")).toEqual([kept])
            expect(yield* list("team-b")).toEqual([keptText])
            expect(new Uint8Array(yield* store.read(kept))).toEqual(image)
            expect(new Uint8Array(yield* store.read(keptText))).toEqual(text)
            // the tallies come back from the rows left
            expect([...(yield* store.stats())].sort((a, b) => a.app.localeCompare(b.app))).toEqual([
              { app: "team-a", count: 1, bytes: image.length },
              { app: "team-b", count: 1, bytes: text.length }
            ])
            // a staged file from before the restart cannot be committed
            const error = yield* Effect.flip(store.commit("team-a", uncommitted, commitOptions("left.txt")))
            expect(error).toMatchObject({ status: 500, code: "file_store_failed" })
          }),
          { lines }
        )
        expect(lines).toContainEqual(expect.objectContaining({ event: "files.start_cleanup", rowsWithoutFile: 1, orphanFiles: 4 }))

        // a third start finds nothing to clean and everything still there
        const quiet: Lines = []
        yield* withStore(
          dir,
          Effect.gen(function* () {
            expect(yield* list("team-a")).toEqual([kept])
            expect(yield* get("team-b", keptText.id)).toEqual(Option.some(keptText))
          }),
          { lines: quiet }
        )
        expect(quiet.filter((line) => line.event === "files.start_cleanup")).toEqual([])
      }))
  })

  describe("FileStore: caps", () => {
    it.scoped("a file over maxFileBytes or over the stage's maxBytes is a 413 file_too_large and leaves no temporary file", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const over = yield* Effect.flip(staged(pngOf(101), stageOptions("a.png")))
            expect(over).toMatchObject({ status: 413, kind: "payload_too_large", code: "file_too_large", param: "file", closeConnection: true })
            expect(over.message).toContain("100")
            expect((yield* namesIn(dir))).toEqual([])
            // exactly at the cap is fine
            expect((yield* save("team-a", pngOf(100), "b.png")).bytes).toBe(100)

            const byOption = yield* Effect.flip(staged(pngOf(51), stageOptions("c.png", { maxBytes: 50 })))
            expect(byOption).toMatchObject({ status: 413, code: "file_too_large" })
            expect(byOption.message).toContain("50")
            expect((yield* tempsIn(dir))).toEqual([])
            // a write after a refused one fails the same way
            const stage = yield* store.stage(stageOptions("d.png", { maxBytes: 20 }))
            expect(yield* Effect.flip(stage.write(chunksOf(pngOf(30))))).toMatchObject({ code: "file_too_large" })
            expect(yield* Effect.flip(stage.write(chunksOf(bytesOf([7]))))).toMatchObject({ code: "file_too_large" })
            expect((yield* tempsIn(dir))).toEqual([])
            expect(yield* store.stats()).toEqual([{ app: "team-a", count: 1, bytes: 100 }])
          }),
          { limits: { maxFileBytes: 100 } }
        )
      }))

    it.scoped("text over maxTextBytes is refused while an image of the same size is accepted", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const text = yield* Effect.flip(staged(textOf(65), stageOptions("a.txt")))
            expect(text).toMatchObject({ status: 413, code: "file_too_large" })
            expect(text.message).toContain("64")
            // in one chunk, too (the kind is not known before the first chunk)
            const stage = yield* store.stage(stageOptions("a.json", { declaredType: "application/json" }))
            const one = yield* Effect.flip(stage.write(chunksOf(bytesOf(`"${"y".repeat(70)}"`), 1000)))
            expect(one).toMatchObject({ status: 413, code: "file_too_large" })
            expect((yield* tempsIn(dir))).toEqual([])

            expect(yield* save("team-a", textOf(64), "ok.txt")).toMatchObject({ mimeType: "text/plain", bytes: 64 })
            expect(yield* save("team-a", pngOf(65), "big.png")).toMatchObject({ mimeType: "image/png", bytes: 65 })
            expect(yield* save("team-a", bytesOf("%PDF-", "z".repeat(195)), "doc.txt", { stage: { declaredType: "text/plain" } })).toMatchObject({
              mimeType: "application/pdf",
              bytes: 200
            })
            expect((yield* tempsIn(dir))).toEqual([])
          }),
          { limits: { maxTextBytes: 64, maxFileBytes: 1000 } }
        )
      }))

    it.scoped("maxFiles: 400 file_limit_exceeded at commit and in checkRoom; nothing existing is deleted", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const first = yield* save("team-a", textOf(5), "1.txt")
            yield* store.checkRoom("team-a")
            const second = yield* save("team-a", textOf(6), "2.txt")
            const room = yield* Effect.flip(store.checkRoom("team-a"))
            expect(room).toMatchObject({ status: 400, kind: "invalid_request", code: "file_limit_exceeded" })
            expect(room.message).toContain("2")

            const third = yield* staged(textOf(7), stageOptions("3.txt"))
            const refused = yield* Effect.flip(store.commit("team-a", third, commitOptions("3.txt")))
            expect(refused).toMatchObject({ status: 400, code: "file_limit_exceeded" })
            expect(yield* rowCount(third.id)).toBe(0)
            expect((yield* namesIn(dir))).toEqual([first.id, second.id].sort())
            expect(yield* list("team-a")).toEqual([first, second])
            // other apps have their own count
            yield* store.checkRoom("team-b")
            yield* save("team-b", textOf(8), "b.txt")
            // room again once one is removed
            expect(yield* store.remove("team-a", first.id)).toBe(true)
            yield* store.checkRoom("team-a")
            const again = yield* save("team-a", textOf(9), "4.txt")
            expect(yield* list("team-a")).toEqual([second, again])
          }),
          { limits: { maxFiles: 2 } }
        )
      }))

    it.scoped("maxBytes: 400 file_storage_full; nothing existing is deleted to make room", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const first = yield* save("team-a", pngOf(60), "a.png")
            const big = yield* staged(pngOf(50), stageOptions("b.png"))
            const full = yield* Effect.flip(store.commit("team-a", big, commitOptions("b.png")))
            expect(full).toMatchObject({ status: 400, kind: "invalid_request", code: "file_storage_full" })
            expect(full.message).toContain("100")
            expect((yield* namesIn(dir))).toEqual([first.id])
            expect(yield* list("team-a")).toEqual([first])
            // exactly filling it is fine; another app is not affected
            const fits = yield* save("team-a", pngOf(40), "c.png")
            expect(yield* list("team-a")).toEqual([first, fits])
            expect((yield* save("team-b", pngOf(100), "d.png")).bytes).toBe(100)
            expect(yield* Effect.flip(save("team-a", textOf(1), "e.txt"))).toMatchObject({ code: "file_storage_full" })
            expect((yield* tempsIn(dir))).toEqual([])
          }),
          { limits: { maxBytes: 100 } }
        )
      }))

    it.scoped("refused kinds are a 400 invalid_file naming the accepted kinds, and leave no temporary file", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const cases: ReadonlyArray<{ readonly bytes: Uint8Array; readonly options: StageOptions; readonly why: RegExp }> = [
              { bytes: bytesOf([0x7f], "ELF", new Array(60).fill(1)), options: stageOptions("a.out"), why: /neither an image nor a PDF/ },
              { bytes: bytesOf([1, 2, 3]), options: stageOptions("tiny.bin"), why: /neither an image nor a PDF/ },
              { bytes: bytesOf("plain words, not declared"), options: stageOptions("notes", { declaredType: "application/octet-stream" }), why: /not sent as text/ },
              { bytes: bytesOf("some text", [0xff, 0xfe], "more text after it"), options: stageOptions("a.txt"), why: /not valid UTF-8/ },
              { bytes: bytesOf("text with a ", [0], " NUL in the middle"), options: stageOptions("a.txt"), why: /NUL/ },
              { bytes: bytesOf('{"a": 1,'), options: stageOptions("a.json"), why: /JSON does not parse/ },
              { bytes: new Uint8Array(0), options: stageOptions("empty.txt", { declaredType: "text/plain" }), why: /empty/ }
            ]
            for (const { bytes, options, why } of cases) {
              const error = yield* Effect.flip(staged(bytes, options))
              expect(error).toMatchObject({ status: 400, kind: "invalid_request", code: "invalid_file", param: "file" })
              expect(error.message).toMatch(why)
              expect(error.message).toContain(acceptedKinds)
              expect((yield* namesIn(dir))).toEqual([])
            }
            expect(yield* store.stats()).toEqual([])
          })
        )
      }))
  })

  describe("FileStore: retention", () => {
    it.scoped("an expired file is gone from get, list and remove at once; the sweep deletes its row and file", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const short = yield* save("team-a", textOf(10), "short.txt", { commit: { maxAgeDays: 1 } })
            const other = yield* save("team-a", textOf(11), "other.txt", { commit: { maxAgeDays: 1 } })
            const keeper = yield* save("team-a", textOf(12), "keep.txt", { commit: { maxAgeDays: 0 } })
            expect(short.expiresAt).toBe(DAY)
            expect(keeper.expiresAt).toBe(30 * DAY)

            yield* TestClock.adjust(DAY - 1)
            expect(yield* get("team-a", short.id)).toEqual(Option.some(short))
            expect(yield* list("team-a")).toEqual([short, other, keeper])

            // those reads forked a sweep (the first since start); let it finish before time moves on
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))

            yield* TestClock.adjust(1)
            expect(yield* get("team-a", short.id)).toEqual(Option.none())
            expect(yield* list("team-a")).toEqual([keeper])
            // a sweep ran less than a minute ago: the rows are still there, yet invisible
            expect(yield* rowCount(short.id)).toBe(1)
            expect(yield* rowCount(other.id)).toBe(1)
            // deleting an expired file is the same "no such file" as an unknown id (and it is gone all the same)
            expect(yield* store.remove("team-a", other.id)).toBe(false)
            expect(yield* rowCount(other.id)).toBe(0)
            expect(yield* holds(dir, other.id)).toBe(false)
            expect(yield* get("team-a", keeper.id)).toEqual(Option.some(keeper))

            // a minute on, the next read forks a sweep; wait (in real time) for it
            yield* TestClock.adjust(60_000)
            expect(yield* get("team-a", keeper.id)).toEqual(Option.some(keeper))
            yield* eventually(Effect.zipWith(rowCount(short.id), holds(dir, short.id), (n, held) => n === 0 && !held))
            expect((yield* namesIn(dir))).toEqual([keeper.id])
            expect(yield* store.stats()).toEqual([{ app: "team-a", count: 1, bytes: 12 }])
          })
        )
      }))

    it.scoped("files expired while the gateway was down are deleted at start", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const short = yield* withStore(dir, save("team-a", textOf(10), "short.txt", { commit: { maxAgeDays: 1 } }))
        yield* TestClock.adjust(DAY)
        yield* withStore(
          dir,
          Effect.gen(function* () {
            expect(yield* rowCount(short.id)).toBe(0)
            expect((yield* namesIn(dir))).toEqual([])
            expect(yield* (yield* FileStore).stats()).toEqual([])
          })
        )
      }))
  })

  /** Wait in real time (not TestClock) until `check` holds. */
  const eventually = <R>(check: Effect.Effect<boolean, never, R>) =>
    Effect.gen(function* () {
      for (let i = 0; i < 200; i++) {
        if (yield* check) return
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
      }
      expect.fail("condition never held")
    })

  describe("FileStore: resumable uploads", () => {
    const wrongOffset = (size: number) => Errors.invalidRequest("invalid_argument", `must be ${size}`)
    const sendChunk = (upload: Upload, offset: number, bytes: Uint8Array) =>
      Effect.scoped(
        Effect.gen(function* () {
          const writer = yield* (yield* FileStore).uploads.claim(upload, offset, wrongOffset)
          yield* writer.write(chunksOf(bytes, 1000))
          return writer.size()
        })
      )
    const start = (app: string, keyId: string, extra: Partial<StageOptions> = {}) =>
      Effect.flatMap(FileStore, (store) => store.uploads.start({ app, keyId, filename: "photo.png", displayName: "Photo", maxBytes: 1024 * 1024, ...extra }))

    it.scoped("chunks at the right offset, a wrong offset refused, a concurrent chunk busy, then finish and commit", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const image = pngOf(5000)
            const upload = yield* start("team-a", "key-1")
            expect(upload).toMatchObject({ app: "team-a", keyId: "key-1", filename: "photo.png", displayName: "Photo", size: 0 })
            expect(yield* sendChunk(upload, 0, image.subarray(0, 2000))).toBe(2000)
            expect(Option.map(yield* store.uploads.find(upload.id), (u) => u.size)).toEqual(Option.some(2000))
            expect(yield* Effect.flip(sendChunk(upload, 0, image.subarray(0, 10)))).toMatchObject({ status: 400, message: "must be 2000" })
            const scope = yield* Scope.make()
            const writer = yield* Scope.extend(store.uploads.claim(upload, 2000, wrongOffset), scope)
            expect(yield* Effect.flip(sendChunk(upload, 2000, image.subarray(2000)))).toMatchObject({ status: 429, code: "file_saves_busy" })
            yield* writer.write(chunksOf(image.subarray(2000)))
            const file = yield* writer.finish
            yield* Scope.close(scope, Exit.void)
            expect(file).toMatchObject({ bytes: 5000, mimeType: "image/png" })
            expect(yield* store.uploads.find(upload.id)).toEqual(Option.none())
            const record = yield* store.commit("team-a", file, commitOptions("photo.png", { displayName: "Photo" }))
            expect(new Uint8Array(yield* contentOf(record))).toEqual(image)
            expect(yield* tempsIn(dir)).toEqual([])
          })
        )
      }))

    it.scoped("a failed chunk drops the upload; 4 unfinished per app; revoking the key drops its uploads; 10 minutes end them", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const small = yield* start("team-a", "key-1", { maxBytes: 100 })
            expect(yield* Effect.flip(sendChunk(small, 0, pngOf(101)))).toMatchObject({ status: 413, code: "file_too_large" })
            expect(yield* store.uploads.find(small.id)).toEqual(Option.none())

            const ups = [yield* start("team-a", "key-1"), yield* start("team-a", "key-1"), yield* start("team-a", "key-2"), yield* start("team-a", "key-2")]
            expect(yield* Effect.flip(start("team-a", "key-3"))).toMatchObject({ status: 429, code: "too_many_uploads" })
            yield* start("team-b", "key-3")
            yield* sendChunk(ups[0], 0, pngOf(300))
            yield* store.uploads.dropKey("key-1")
            expect(yield* store.uploads.find(ups[0].id)).toEqual(Option.none())
            expect(Option.isSome(yield* store.uploads.find(ups[2].id))).toBe(true)
            yield* start("team-a", "key-3")

            yield* TestClock.adjust(UPLOAD_TTL_MS)
            yield* store.uploads.expire
            expect(yield* store.uploads.find(ups[2].id)).toEqual(Option.none())
            expect(yield* tempsIn(dir)).toEqual([])
          })
        )
      }))
  })

  describe("FileStore: save queue", () => {
    /** Let forked fibers run until they block. */
    const settle = Effect.gen(function* () {
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
    })

    /** An admit in its own scope (the request), forked; `order` records when it got its turn. */
    const request = (store: FileStore["Type"], app: string, bytes: number, order: Array<string>, name: string) =>
      Effect.gen(function* () {
        const scope = yield* Scope.make()
        const fiber = yield* Effect.fork(Scope.extend(store.admit(app, bytes), scope).pipe(Effect.tap(() => Effect.sync(() => void order.push(name)))))
        yield* settle
        return { name, scope, fiber, end: Scope.close(scope, Exit.void) }
      })

    const busy = (store: FileStore["Type"], app: string, bytes: number) =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(Effect.scoped(store.admit(app, bytes)))
        expect(error).toMatchObject({ status: 429, kind: "rate_limited", code: "file_saves_busy", retryAfter: 1 })
      })

    it.scoped("the first save of an app runs at once, whatever its size; the others wait in order", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const a = yield* request(store, "team-a", 1000, order, "a")
            expect(order).toEqual(["a"])
            yield* a.end
            // a huge one that cannot share the queue still runs when nothing else does
            const huge = yield* request(store, "team-a", 1000, order, "huge")
            expect(order).toEqual(["a", "huge"])
            // ... and then nothing can wait behind it (it holds more than the queue's bytes)
            yield* busy(store, "team-a", 0)
            yield* huge.end

            const first = yield* request(store, "team-a", 10, order, "first")
            const waiting = []
            for (const name of ["w1", "w2", "w3"]) waiting.push(yield* request(store, "team-a", 10, order, name))
            expect(order).toEqual(["a", "huge", "first"])
            expect(waiting.every((w) => w.fiber.unsafePoll() === null)).toBe(true)
            yield* first.end
            yield* settle
            expect(order).toEqual(["a", "huge", "first", "w1"])
            for (const [i, w] of waiting.entries()) {
              yield* Fiber.join(w.fiber)
              yield* w.end
              yield* settle
              expect(order.slice(3)).toEqual(["w1", "w2", "w3"].slice(0, Math.min(i + 2, 3)))
            }
            // all done: the next one runs at once
            const next = yield* request(store, "team-a", 10, order, "next")
            expect(order.at(-1)).toBe("next")
            yield* next.end
          }),
          { limits: { maxQueuedBytes: 100 } }
        )
      }))

    it.scoped("a 9th waiter, or bytes that would pass maxQueuedBytes, is a 429 file_saves_busy at once", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const running = yield* request(store, "team-a", 100, order, "running")
            const waiters = []
            for (let i = 1; i <= 8; i++) waiters.push(yield* request(store, "team-a", 10, order, `w${i}`))
            expect(order).toEqual(["running"])
            yield* busy(store, "team-a", 0)
            yield* busy(store, "team-a", 1)
            // the refused ones took no place: releasing runs the waiters in order
            for (const w of [running, ...waiters]) {
              yield* w.end
              yield* settle
            }
            expect(order).toEqual(["running", ...waiters.map((w) => w.name)])
          })
        )
      }))

    it.scoped("bytes held by the running and waiting saves are capped by maxQueuedBytes", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const running = yield* request(store, "team-a", 60, order, "running")
            const b = yield* request(store, "team-a", 30, order, "b")
            yield* busy(store, "team-a", 11)
            const c = yield* request(store, "team-a", 10, order, "c") // exactly 100 held
            yield* busy(store, "team-a", 1)
            expect(order).toEqual(["running"])
            // the running save's bytes are let go when it ends
            yield* running.end
            yield* settle
            expect(order).toEqual(["running", "b"])
            const d = yield* request(store, "team-a", 60, order, "d")
            yield* busy(store, "team-a", 1)
            for (const w of [b, c, d]) {
              yield* w.end
              yield* settle
            }
            expect(order).toEqual(["running", "b", "c", "d"])
          }),
          { limits: { maxQueuedBytes: 100 } }
        )
      }))

    it.scoped("a waiting save that is interrupted leaves the queue; a later one takes its place and the order continues", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const running = yield* request(store, "team-a", 10, order, "running")
            const waiters = []
            for (let i = 1; i <= 8; i++) waiters.push(yield* request(store, "team-a", 10, order, `w${i}`))
            yield* busy(store, "team-a", 10)
            // w3 and w6 end while waiting (their requests were cancelled)
            yield* Fiber.interrupt(waiters[2].fiber)
            yield* Fiber.interrupt(waiters[5].fiber)
            yield* waiters[2].end
            yield* waiters[5].end
            const late1 = yield* request(store, "team-a", 10, order, "late1")
            const late2 = yield* request(store, "team-a", 10, order, "late2")
            // the queue is full again (8 waiting, 90 bytes held)
            yield* busy(store, "team-a", 0)
            for (const w of [running, ...waiters.filter((_, i) => i !== 2 && i !== 5), late1]) {
              yield* w.end
              yield* settle
            }
            expect(order).toEqual(["running", "w1", "w2", "w4", "w5", "w7", "w8", "late1", "late2"])
            yield* late2.end
            // nothing is left running or held: even a save larger than the queue's bytes runs at once
            const after = yield* request(store, "team-a", 100, order, "after")
            expect(order.at(-1)).toBe("after")
            yield* after.end
          }),
          { limits: { maxQueuedBytes: 90 } }
        )
      }))

    it.scoped("a save interrupted just as its turn comes passes the turn on", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const running = yield* request(store, "team-a", 10, order, "running")
            const b = yield* request(store, "team-a", 10, order, "b")
            const c = yield* request(store, "team-a", 10, order, "c")
            // hand the turn to b and interrupt b before it could run
            yield* running.end
            yield* Fiber.interrupt(b.fiber)
            yield* b.end
            yield* settle
            expect(order).toContain("c")
            expect(order.at(-1)).toBe("c")
            yield* c.end
            const d = yield* request(store, "team-a", 10, order, "d")
            expect(order.at(-1)).toBe("d")
            yield* d.end
          })
        )
      }))

    it.scoped("different apps do not block each other", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* FileStore
            const order: Array<string> = []
            const a = yield* request(store, "team-a", 100, order, "a")
            const a2 = yield* request(store, "team-a", 0, order, "a2")
            const b = yield* request(store, "team-b", 100, order, "b")
            const c = yield* request(store, "team-c", 1, order, "c")
            expect(order).toEqual(["a", "b", "c"])
            yield* b.end
            yield* c.end
            yield* settle
            expect(order).toEqual(["a", "b", "c"])
            yield* a.end
            yield* settle
            expect(order).toEqual(["a", "b", "c", "a2"])
            yield* a2.end
          }),
          { limits: { maxQueuedBytes: 100 } }
        )
      }))
  })
}

for (const backend of backends) describe(backend.kind, () => suite(backend))
