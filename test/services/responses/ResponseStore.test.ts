import { SqlClient, SqlError } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { randomHex } from "../../../src/domain/Ids.js"
import { Log } from "../../../src/services/ops/Log.js"
import { ResponseStore, type ResponseStoreLimits, type StoredRecord } from "../../../src/services/responses/ResponseStore.js"
import { WalSync } from "../../../src/sql/WalSync.js"
import { type BackendUnderTest, backends, type OpenDatabase } from "../../support/Backends.js"

const DAY = 24 * 60 * 60 * 1000
const MiB = 1024 * 1024

type Lines = Array<Record<string, unknown>>

type Sync = WalSync["Type"]["sync"]

/**
 * Run `body` against a store over `dir`; the store (and its database) close when `body` ends.
 * `sync` wraps the store's WAL fsync (the database's own is passed in).
 */
const withStore = <A, E>(
  dir: string,
  body: Effect.Effect<A, E, ResponseStore | SqlClient.SqlClient>,
  options: { readonly lines?: Lines; readonly limits?: Partial<ResponseStoreLimits>; readonly sync?: (sync: Sync) => Sync } = {}
) => {
  const database = databases.get(dir)
  if (database === undefined) throw new Error(`no database opened for ${dir}`)
  const wrap = options.sync
  const store = ResponseStore.layer(dir, options.limits)
  const wrapped = wrap === undefined ? store : store.pipe(Layer.provide(Layer.effect(WalSync, Effect.map(WalSync, (wal) => WalSync.of({ sync: wrap(wal.sync) })))))
  return Effect.provide(body, wrapped.pipe(Layer.provideMerge(Layer.merge(database.layer, Log.layerMemory(options.lines ?? [])))))
}

/**
 * The database of each test's directory: `withStore(dir, …)` opens a store (SQLite: over
 * `<dir>/gateway.db`; PostgreSQL: a new pool on the test's own database, as a restarted replica).
 */
const databases = new Map<string, OpenDatabase>()

/** A temporary data directory with a fresh database of `backend`; both go with the test's scope. */
const tempDirOn = (backend: BackendUnderTest) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "response-store-"))
      databases.set(dir, await backend.open(dir))
      return dir
    }),
    (dir) =>
      Effect.promise(async () => {
        await databases.get(dir)?.close()
        databases.delete(dir)
        fs.rmSync(dir, { recursive: true, force: true })
      })
  )

const recordOf = (app: string, createdAt: number, text = "hello", id = `resp_${randomHex()}`): StoredRecord => ({
  id,
  app,
  createdAt,
  response: { id, object: "response", status: "completed", output: [{ type: "message", id: `msg_${randomHex()}`, content: [{ type: "output_text", text: "hi" }] }] },
  input: [
    { type: "message", id: `msg_${randomHex()}`, role: "user", content: [{ type: "input_text", text }] },
    { type: "function_call_output", id: `fco_${randomHex()}`, call_id: "call_1", output: "line one\nline two \u2028 \"quoted\"" }
  ]
})

/** The stored form's size as the caps count it: the compact JSON of `{response, input}`. */
const sizeOf = (record: StoredRecord) => Buffer.byteLength(JSON.stringify({ response: record.response, input: record.input }))

const fileOf = (dir: string, id: string) => path.join(dir, "responses", `${id}.json`)

/** Every record kept as a file, the path of records over `maxInlineBytes`: for the tests of that path. */
const inFiles: Partial<ResponseStoreLimits> = { maxInlineBytes: 0 }

/** The tests of what both kinds of record share run with each: small records inline (the default), every record a file. */
const storages: ReadonlyArray<{ readonly kind: string; readonly limits: Partial<ResponseStoreLimits> }> = [
  { kind: "inline", limits: {} },
  { kind: "as files", limits: inFiles }
]

const rowCount = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM responses WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0].n),
    Effect.orDie
  )

/** A trigger named `name` that refuses every insert into `responses` for which `when` (SQL over NEW) holds. */
const refuseInserts = (name: string, when: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.onDialectOrElse({
      pg: () =>
        Effect.zipRight(
          sql.unsafe(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF ${when} THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$`),
          sql.unsafe(`CREATE TRIGGER ${name} BEFORE INSERT ON responses FOR EACH ROW EXECUTE FUNCTION ${name}()`)
        ),
      orElse: () => sql.unsafe(`CREATE TEMP TRIGGER ${name} BEFORE INSERT ON responses WHEN ${when} BEGIN SELECT RAISE(ABORT, 'refused'); END`)
    })
  ).pipe(Effect.orDie)

/** The row's inline body (the stored form of a record kept in the database), null for a record file. */
const bodyOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly body: Uint8Array | null }>`SELECT body FROM responses WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0]?.body ?? null),
    Effect.orDie
  )

/** The record files in `dir` (none, and no directory, on PostgreSQL). */
const filesIn = (dir: string) => (fs.existsSync(path.join(dir, "responses")) ? fs.readdirSync(path.join(dir, "responses")).sort() : [])

/** The stored form of a record as kept: its row's body, or its file. */
const storedFormOf = (dir: string, id: string) =>
  Effect.map(bodyOf(id), (body): unknown => JSON.parse(body === null ? fs.readFileSync(fileOf(dir, id), "utf8") : Buffer.from(body).toString("utf8")))

/**
 * Commits that reached the database's WAL since it was last reset, read from the file itself
 * (https://sqlite.org/fileformat2.html#walformat): frames carrying the WAL header's salts whose
 * "database size after commit" field is set. With `synchronous=FULL` each one was an fsync.
 */
const walCommits = (dir: string): number => {
  const wal = fs.readFileSync(path.join(dir, "gateway.db-wal"))
  if (wal.length < 32) return 0
  const pageSize = wal.readUInt32BE(8)
  const salts = [wal.readUInt32BE(16), wal.readUInt32BE(20)]
  let commits = 0
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    if (wal.readUInt32BE(at + 8) !== salts[0] || wal.readUInt32BE(at + 12) !== salts[1]) break
    if (wal.readUInt32BE(at + 4) !== 0) commits++
  }
  return commits
}

/** Wait in real time (not TestClock) until `check` holds: the sweep runs in a forked fiber. */
const eventually = <R>(check: Effect.Effect<boolean, never, R>) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200; i++) {
      if (yield* check) return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    }
    expect.fail("condition never held")
  })

const save = (record: StoredRecord, maxAgeDays = 30) => Effect.flatMap(ResponseStore, (store) => store.save(record, { maxAgeDays }))
const get = (app: string, id: string) => Effect.flatMap(ResponseStore, (store) => store.get(app, id))
const stats = Effect.flatMap(ResponseStore, (store) => store.stats())

for (const backend of backends) describe(`ResponseStore (${backend.kind})`, () => {
  const tempDir = tempDirOn(backend)
  const sqlite = backend.kind === "sqlite"
  /** SQLite only: the files that hold records (on PostgreSQL every record is in its row: no files) */
  const filesExpected = (names: ReadonlyArray<string>) => (sqlite ? [...names].sort() : [])

  it.scoped("saves and reads back what was saved; the file is one JSON document (records kept as files)", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const record = recordOf("team-a", 1_000)
          expect(yield* save(record)).toBe("stored")
          expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect(yield* storedFormOf(dir, record.id)).toEqual({ response: record.response, input: record.input })
          expect(filesIn(dir)).toEqual(filesExpected([`${record.id}.json`]))
          expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(record) }])
          const empty = { ...recordOf("team-a", 1_000), input: [] }
          expect(yield* save(empty)).toBe("stored")
          expect(yield* get("team-a", empty.id)).toEqual(Option.some(empty))
        }),
        { limits: inFiles }
      )
    }))

  it.scoped("gives none for another app's id, an unknown id and an id that is not a file name", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const record = recordOf("team-a", 1_000)
          yield* save(record)
          expect(yield* get("team-b", record.id)).toEqual(Option.none())
          expect(yield* get("team-a", `resp_${randomHex()}`)).toEqual(Option.none())
          expect(yield* get("team-a", "../gateway.db")).toEqual(Option.none())
          const store = yield* ResponseStore
          expect(yield* store.remove("team-b", record.id)).toBe(false)
          expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
        })
      )
    }))

  for (const storage of storages) {
    it.scoped(`remove deletes the row and the file; a second remove finds nothing (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* ResponseStore
            const record = recordOf("team-a", 1_000)
            const other = recordOf("team-a", 2_000)
            yield* save(record)
            yield* save(other)
            expect(yield* store.remove("team-a", record.id)).toBe(true)
            expect(yield* get("team-a", record.id)).toEqual(Option.none())
            expect(fs.existsSync(fileOf(dir, record.id))).toBe(false)
            expect(yield* rowCount(record.id)).toBe(0)
            expect(yield* store.remove("team-a", record.id)).toBe(false)
            expect(yield* get("team-a", other.id)).toEqual(Option.some(other))
            expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(other) }])
          }),
          { limits: storage.limits }
        )
      }))
  }

  for (const storage of storages) {
    it.scoped(`an expired record reads as none at once; the next sweep deletes its row and file (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const store = yield* ResponseStore
            const record = recordOf("team-a", 0)
            const keeper = recordOf("team-a", 0)
            expect(yield* save(record, 1)).toBe("stored")
            expect(yield* save(keeper, 30)).toBe("stored")
            yield* TestClock.adjust(DAY - 1)
            expect(Option.isSome(yield* get("team-a", record.id))).toBe(true)
            // that read forked a sweep (the first since start); let it finish before time moves on
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))
            yield* TestClock.adjust(1)
            expect(yield* get("team-a", record.id)).toEqual(Option.none())
            // a sweep ran less than a minute ago: the row is still there, yet invisible
            expect(yield* rowCount(record.id)).toBe(1)
            expect(yield* store.remove("team-a", record.id)).toBe(false)
            const next = recordOf("team-a", DAY)
            yield* save(next, 1)
            yield* TestClock.adjust(DAY + 60_000)
            expect(yield* get("team-a", next.id)).toEqual(Option.none())
            yield* eventually(Effect.map(rowCount(next.id), (n) => n === 0 && !fs.existsSync(fileOf(dir, next.id))))
            expect(yield* rowCount(record.id)).toBe(0)
            expect(fs.existsSync(fileOf(dir, record.id))).toBe(false)
            expect(yield* get("team-a", keeper.id)).toEqual(Option.some(keeper))
            expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(keeper) }])
          }),
          { limits: storage.limits }
        )
      }))
  }

  it.scoped("a stored form over 8 MiB is skipped and logged without its content", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const record = recordOf("team-a", 1_000, "x".repeat(8 * MiB))
          expect(yield* save(record)).toBe("skipped")
          expect(lines).toEqual([expect.objectContaining({ event: "responses.store_skipped", app: "team-a", id: record.id, bytes: sizeOf(record) })])
          expect(yield* get("team-a", record.id)).toEqual(Option.none())
          expect(filesIn(dir)).toEqual([])
          expect(yield* stats).toEqual([])
        }),
        { lines }
      )
    }))

  if (sqlite) it.scoped("a storage failure of a record file answers failed with a reason code, and a later save works again", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      const responsesDir = path.join(dir, "responses")
      yield* withStore(
        dir,
        Effect.gen(function* () {
          fs.rmSync(responsesDir, { recursive: true })
          fs.writeFileSync(responsesDir, "not a directory")
          const record = recordOf("team-a", 1_000, "secret words")
          expect(yield* save(record)).toBe("failed")
          const failed = lines.find((line) => line.event === "responses.store_failed")
          expect(failed).toMatchObject({ app: "team-a", id: record.id, reason: expect.any(String) })
          expect(JSON.stringify(lines)).not.toContain("secret words")
          expect(yield* rowCount(record.id)).toBe(0)
          expect(yield* get("team-a", record.id)).toEqual(Option.none())

          const unserializable = { ...recordOf("team-a", 1_000), response: { big: 1n } }
          expect(yield* save(unserializable)).toBe("failed")
          expect(lines.at(-1)).toMatchObject({ event: "responses.store_failed", reason: "serialize" })

          fs.rmSync(responsesDir)
          const later = recordOf("team-a", 2_000)
          expect(yield* save(later)).toBe("stored")
          expect(yield* get("team-a", later.id)).toEqual(Option.some(later))
          expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(later) }])
        }),
        { lines, limits: inFiles }
      )
    }))

  for (const storage of storages) {
    it.scoped(`past the record cap the app's oldest records go first; other apps keep theirs (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const others = [recordOf("team-b", 0), recordOf("team-b", 1)]
            for (const record of others) yield* save(record)
            // equal timestamps: insertion order decides
            const records = Array.from({ length: 21 }, (_, i) => recordOf("team-a", 100 + Math.floor(i / 2)))
            for (const record of records) expect(yield* save(record)).toBe("stored")
            expect(yield* get("team-a", records[0].id)).toEqual(Option.none())
            expect(fs.existsSync(fileOf(dir, records[0].id))).toBe(false)
            expect(yield* rowCount(records[0].id)).toBe(0)
            for (const record of records.slice(1)) expect(Option.isSome(yield* get("team-a", record.id))).toBe(true)
            for (const record of others) expect(Option.isSome(yield* get("team-b", record.id))).toBe(true)
            const counts = (yield* stats).map(({ app, count }) => ({ app, count }))
            expect(counts).toEqual([{ app: "team-a", count: 20 }, { app: "team-b", count: 2 }])
          }),
          { limits: { ...storage.limits, maxRecords: 20 } }
        )
      }))
  }

  it.scoped("concurrent saves keep the caps and the counters exact (records kept as files)", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const records = Array.from({ length: 30 }, (_, i) => recordOf("team-a", i))
          const results = yield* Effect.forEach(records, (record) => save(record), { concurrency: "unbounded" })
          expect(results.every((result) => result === "stored")).toBe(true)
          const sql = yield* SqlClient.SqlClient
          const rows = yield* Effect.orDie(sql<{ readonly n: number; readonly bytes: number }>`SELECT COUNT(*) AS n, SUM(bytes) AS bytes FROM responses`)
          expect(yield* stats).toEqual([{ app: "team-a", count: 10, bytes: rows[0].bytes }])
          expect(rows[0].n).toBe(10)
          expect(filesIn(dir).length).toBe(sqlite ? 10 : 0)
        }),
        { limits: { ...inFiles, maxRecords: 10 } }
      )
    }))

  for (const storage of storages) {
    it.scoped(`past the byte cap the oldest records go until the new one fits; a record over maxRecordBytes is skipped (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const unit = sizeOf(recordOf("team-a", 0, "a".repeat(1000)))
        yield* withStore(
          dir,
          Effect.gen(function* () {
            const small = Array.from({ length: 3 }, (_, i) => recordOf("team-a", i, "a".repeat(1000)))
            for (const record of small) yield* save(record)
            expect((yield* stats)[0]).toEqual({ app: "team-a", count: 3, bytes: 3 * unit })
            // about two units: the two oldest must go for it to fit under 3.5 units
            const large = recordOf("team-a", 10, "a".repeat(unit + 1000))
            expect(yield* save(large)).toBe("stored")
            expect(yield* get("team-a", small[0].id)).toEqual(Option.none())
            expect(yield* get("team-a", small[1].id)).toEqual(Option.none())
            expect(Option.isSome(yield* get("team-a", small[2].id))).toBe(true)
            expect((yield* stats)[0]).toEqual({ app: "team-a", count: 2, bytes: unit + sizeOf(large) })
            expect(yield* save(recordOf("team-a", 11, "a".repeat(4 * unit)))).toBe("skipped")
          }),
          { limits: { ...storage.limits, maxBytes: Math.floor(3.5 * unit), maxRecordBytes: 3 * unit } }
        )
      }))
  }

  for (const storage of storages) {
    it.scoped(`data survives a restart (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const kept = recordOf("team-a", 1_000)
        const removed = recordOf("team-a", 2_000)
        yield* withStore(
          dir,
          Effect.gen(function* () {
            yield* save(kept)
            yield* save(removed)
            yield* Effect.flatMap(ResponseStore, (store) => store.remove("team-a", removed.id))
          }),
          { limits: storage.limits }
        )
        yield* withStore(
          dir,
          Effect.gen(function* () {
            expect(yield* get("team-a", kept.id)).toEqual(Option.some(kept))
            expect(yield* get("team-a", removed.id)).toEqual(Option.none())
            expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(kept) }])
          }),
          { limits: storage.limits }
        )
      }))
  }

  if (sqlite) it.scoped("at start, rows without a file and files (or temp files) without a row are deleted", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      const kept = recordOf("team-a", 1_000)
      const lost = recordOf("team-a", 2_000)
      yield* withStore(
        dir,
        Effect.gen(function* () {
          yield* save(kept)
          yield* save(lost)
        }),
        { limits: inFiles }
      )
      fs.rmSync(fileOf(dir, lost.id))
      const orphan = `resp_${randomHex()}`
      fs.writeFileSync(fileOf(dir, orphan), "{}")
      const temp = path.join(dir, "responses", `${orphan}.json.abc123.tmp`)
      fs.writeFileSync(temp, "{\"response\":")
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* rowCount(lost.id)).toBe(0)
          expect(fs.existsSync(fileOf(dir, orphan))).toBe(false)
          expect(fs.existsSync(temp)).toBe(false)
          expect(yield* get("team-a", kept.id)).toEqual(Option.some(kept))
          expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(kept) }])
          expect(lines).toContainEqual(expect.objectContaining({ event: "responses.start_cleanup", rowsWithoutFile: 1, orphanFiles: 2 }))
        }),
        { lines, limits: inFiles }
      )
    }))

  for (const storage of storages) {
    it.scoped(`expired records are deleted by the sweep at start (${storage.kind})`, () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const old = recordOf("team-a", 0)
        yield* withStore(dir, save(old, 1), { limits: storage.limits })
        yield* TestClock.adjust(2 * DAY)
        yield* withStore(
          dir,
          Effect.gen(function* () {
            expect(yield* rowCount(old.id)).toBe(0)
            expect(fs.existsSync(fileOf(dir, old.id))).toBe(false)
            expect(yield* stats).toEqual([])
          }),
          { limits: storage.limits }
        )
      }))
  }

  it.scopedLive("saving and reading a record just under 8 MiB leaves the event loop free", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          // one large item (an inline image) and many history items
          const record: StoredRecord = {
            ...recordOf("team-a", Date.now()),
            input: [
              { type: "message", id: "msg_image", role: "user", content: [{ type: "input_image", image_url: `data:image/png;base64,${"QUJD".repeat(MiB / 2)}` }] },
              ...Array.from({ length: 400 }, (_, i) => ({ type: "message", id: `msg_${i}`, role: "user", content: [{ type: "input_text", text: `"${i}"\n`.repeat(1500) }] }))
            ]
          }
          const bytes = sizeOf(record)
          expect(bytes).toBeGreaterThan(7 * MiB)
          expect(bytes).toBeLessThan(8 * MiB)
          // The mechanism, counted rather than timed: the JSON work done on this thread between two
          // turns of the event loop (a self-renewing setImmediate marks each turn). Parsing on the
          // worker thread does not count here; a step over the whole record would.
          const monitored = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
            Effect.gen(function* () {
              const { parse, stringify } = JSON
              let inTurn = 0
              let worstTurn = 0
              let turns = 0
              const count = (bytes: number) => {
                inTurn += bytes
                worstTurn = Math.max(worstTurn, inTurn)
              }
              JSON.parse = (text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown): unknown => {
                count(Buffer.byteLength(text))
                return parse(text, reviver)
              }
              JSON.stringify = ((value: unknown, replacer?: (this: unknown, key: string, value: unknown) => unknown, space?: string | number) => {
                const text = stringify(value, replacer, space)
                if (typeof text === "string") count(Buffer.byteLength(text))
                return text
              }) as typeof JSON.stringify
              let immediate: NodeJS.Immediate | undefined
              const turn = () => {
                turns++
                inTurn = 0
                immediate = setImmediate(turn)
              }
              immediate = setImmediate(turn)
              // a generous backstop in time: no step holds the loop for seconds
              let last = performance.now()
              let worstGap = 0
              const timer = setInterval(() => {
                const now = performance.now()
                worstGap = Math.max(worstGap, now - last)
                last = now
              }, 2)
              const result = yield* Effect.ensuring(
                effect,
                Effect.sync(() => {
                  JSON.parse = parse
                  JSON.stringify = stringify
                  clearImmediate(immediate)
                  clearInterval(timer)
                })
              )
              return { result, worstTurn, turns, worstGap }
            })
          const saved = yield* monitored(save(record))
          expect(saved.result).toBe("stored")
          const read = yield* monitored(get("team-a", record.id))
          expect(read.result).toEqual(Option.some(record))
          // saving: item by item, yielding every 512 KiB; the largest step is the 2 MiB image item plus one slice
          expect(saved.worstTurn).toBeGreaterThan(2 * MiB)
          expect(saved.worstTurn).toBeLessThan(3 * MiB)
          expect(saved.turns).toBeGreaterThan(7)
          // reading: the image line is parsed on the worker; the history in slices of about 512 KiB
          expect(read.worstTurn).toBeLessThan(MiB)
          expect(read.turns).toBeGreaterThan(7)
          expect(saved.worstGap).toBeLessThan(5_000)
          expect(read.worstGap).toBeLessThan(5_000)
        })
      )
    }))

  it.scoped("a small record is kept in its row: no file; it reads back the same after the store and its database are closed and reopened", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const record = recordOf("team-a", 1_000)
      const empty = { ...recordOf("team-a", 2_000), input: [] }
      const spoiled = recordOf("team-a", 3_000)
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* save(record)).toBe("stored")
          expect(yield* save(empty)).toBe("stored")
          expect(yield* save(spoiled)).toBe("stored")
          expect(filesIn(dir)).toEqual([])
          // the same stored form a record file holds
          const body = yield* bodyOf(record.id)
          expect(body).not.toBeNull()
          expect(JSON.parse(Buffer.from(body ?? []).toString("utf8"))).toEqual({ response: record.response, input: record.input })
          expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
        })
      )
      const lines: Lines = []
      yield* withStore(
        dir,
        Effect.gen(function* () {
          // the start's clean-up looks for files of file records only
          expect(lines.filter((line) => line.event === "responses.start_cleanup")).toEqual([])
          expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect(yield* get("team-a", empty.id)).toEqual(Option.some(empty))
          expect(yield* stats).toEqual([{ app: "team-a", count: 3, bytes: sizeOf(record) + sizeOf(empty) + sizeOf(spoiled) }])
          // a body that is not a stored form reads as none, logged without content
          const sql = yield* SqlClient.SqlClient
          yield* Effect.orDie(sql`UPDATE responses SET body = ${Buffer.from('{"response":{"id":')} WHERE id = ${spoiled.id}`)
          expect(yield* get("team-a", spoiled.id)).toEqual(Option.none())
          expect(lines).toContainEqual(expect.objectContaining({ event: "responses.read_failed", id: spoiled.id, reason: "corrupt" }))
          const store = yield* ResponseStore
          expect(yield* store.remove("team-a", record.id)).toBe(true)
          expect(yield* get("team-a", record.id)).toEqual(Option.none())
          expect(yield* rowCount(record.id)).toBe(0)
        }),
        { lines }
      )
    }))

  it.scoped("saves that finish together share one commit; a save alone commits at once; every commit is fsynced", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          // WAL mode commits are fsynced only with synchronous=FULL (2); SQLite as built here defaults to NORMAL
          if (sqlite) expect(yield* Effect.orDie(sql<{ readonly synchronous: number }>`PRAGMA synchronous`)).toEqual([{ synchronous: 2 }])
          // the commits that wrote these records' rows: SQLite, those added to the WAL while they
          // were saved; PostgreSQL, the transactions their rows were inserted by
          const commitsOf = <A, R>(saving: Effect.Effect<A, never, R>, ids: ReadonlyArray<string>) =>
            Effect.gen(function* () {
              const before = sqlite ? walCommits(dir) : 0
              const result = yield* saving
              if (sqlite) return { result, commits: walCommits(dir) - before }
              const rows = yield* Effect.orDie(sql<{ readonly n: number }>`SELECT COUNT(DISTINCT xmin::text) AS n FROM responses WHERE ${sql.in("id", ids)}`)
              return { result, commits: rows[0].n }
            })
          // one at a time: a commit each, at once (the TestClock never moves here: a save waiting
          // for a timer would hang)
          const first = Array.from({ length: 3 }, (_, i) => recordOf("team-a", i))
          const alone = yield* commitsOf(Effect.forEach(first, (record) => save(record)), first.map((record) => record.id))
          expect(alone.result).toEqual(first.map(() => "stored"))
          expect(alone.commits).toBe(3)
          // together: without group commit each save would be a commit of its own
          const n = 40
          const records = Array.from({ length: n }, (_, i) => recordOf(i % 2 === 0 ? "team-a" : "team-b", 10 + i, `turn ${i}`))
          const together = yield* commitsOf(
            Effect.forEach(records, (record) => save(record), { concurrency: "unbounded" }),
            records.map((record) => record.id)
          )
          expect(together.result).toEqual(records.map(() => "stored"))
          expect(together.commits).toBeGreaterThanOrEqual(1)
          expect(together.commits).toBeLessThanOrEqual(n / 8)
          for (const record of records) expect(yield* get(record.app, record.id)).toEqual(Option.some(record))
          // those commits deferred their fsync to the WAL sync; every other commit is fsynced as before
          if (sqlite) expect(yield* Effect.orDie(sql<{ readonly synchronous: number }>`PRAGMA synchronous`)).toEqual([{ synchronous: 2 }])
          const held = (app: string) => [...first, ...records].filter((record) => record.app === app).reduce((sum, record) => sum + sizeOf(record), 0)
          expect(yield* stats).toEqual([
            { app: "team-a", count: 23, bytes: held("team-a") },
            { app: "team-b", count: 20, bytes: held("team-b") }
          ])
        })
      )
    }))

  it.scoped("past the record cap the oldest go first, inline and file records alike, within one batch too", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      // small ones inline, ones with a long text as files
      const mixed = (createdAt: number) => (createdAt % 2 === 0 ? recordOf("team-a", createdAt) : recordOf("team-a", createdAt, "b".repeat(2000)))
      const limits = { maxRecords: 4, maxInlineBytes: 1000 }
      expect(sizeOf(mixed(0))).toBeLessThanOrEqual(limits.maxInlineBytes)
      expect(sizeOf(mixed(1))).toBeGreaterThan(limits.maxInlineBytes)
      const fileNames = (records: ReadonlyArray<StoredRecord>) => filesExpected(records.filter((r) => sizeOf(r) > limits.maxInlineBytes).map((r) => `${r.id}.json`))
      const first = Array.from({ length: 6 }, (_, i) => mixed(i))
      const second = Array.from({ length: 6 }, (_, i) => mixed(10 + i))
      yield* withStore(
        dir,
        Effect.gen(function* () {
          for (const record of first) expect(yield* save(record)).toBe("stored")
          for (const gone of first.slice(0, 2)) {
            expect(yield* get("team-a", gone.id)).toEqual(Option.none())
            expect(yield* rowCount(gone.id)).toBe(0)
          }
          for (const kept of first.slice(2)) expect(yield* get("team-a", kept.id)).toEqual(Option.some(kept))
          expect(filesIn(dir)).toEqual(fileNames(first.slice(2)))
          // at once: the batch evicts the older records and its own first members
          const results = yield* Effect.forEach(second, (record) => save(record), { concurrency: "unbounded" })
          expect(results).toEqual(second.map(() => "stored"))
          const kept = second.slice(2)
          for (const record of [...first, ...second.slice(0, 2)]) expect(yield* rowCount(record.id)).toBe(0)
          for (const record of kept) expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect(filesIn(dir)).toEqual(fileNames(kept))
          expect(yield* stats).toEqual([{ app: "team-a", count: 4, bytes: kept.reduce((sum, record) => sum + sizeOf(record), 0) }])
        }),
        { limits }
      )
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(lines.filter((line) => line.event === "responses.start_cleanup")).toEqual([])
          for (const record of second.slice(2)) expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect(filesIn(dir)).toEqual(fileNames(second.slice(2)))
        }),
        { lines, limits }
      )
    }))

  if (!sqlite) it.scoped("every record is kept in its row whatever its size (maxInlineBytes is SQLite's): nothing on the replica's disk", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const small = recordOf("team-a", 1)
      const large = recordOf("team-a", 2, "L".repeat(64 * 1024))
      const larger = recordOf("team-a", 3, "M".repeat(3 * MiB))
      yield* withStore(
        dir,
        Effect.gen(function* () {
          for (const record of [small, large, larger]) {
            expect(yield* save(record)).toBe("stored")
            const body = yield* bodyOf(record.id)
            expect(body).not.toBeNull()
            expect(JSON.parse(Buffer.from(body ?? []).toString("utf8"))).toEqual({ response: record.response, input: record.input })
            expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          }
          expect(fs.readdirSync(dir)).toEqual([])
        }),
        { limits: { maxInlineBytes: 0 } }
      )
    }))

  if (sqlite) it.scoped("a record over maxInlineBytes (64 KiB unless set) is a file; one up to it stays in its row", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const small = recordOf("team-a", 1)
      const larger = recordOf("team-a", 2, "hello, a little longer")
      const large = recordOf("team-a", 3, "L".repeat(64 * 1024))
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* save(large)).toBe("stored")
          expect(yield* bodyOf(large.id)).toBeNull()
          expect(JSON.parse(fs.readFileSync(fileOf(dir, large.id), "utf8"))).toEqual({ response: large.response, input: large.input })
          expect(yield* get("team-a", large.id)).toEqual(Option.some(large))
        })
      )
      expect(sizeOf(larger)).toBeGreaterThan(sizeOf(small))
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* save(small)).toBe("stored")
          expect(yield* save(larger)).toBe("stored")
          expect(yield* bodyOf(small.id)).not.toBeNull()
          expect(fs.existsSync(fileOf(dir, small.id))).toBe(false)
          expect(yield* bodyOf(larger.id)).toBeNull()
          expect(fs.existsSync(fileOf(dir, larger.id))).toBe(true)
          expect(yield* get("team-a", small.id)).toEqual(Option.some(small))
          expect(yield* get("team-a", larger.id)).toEqual(Option.some(larger))
          expect(yield* get("team-a", large.id)).toEqual(Option.some(large))
        }),
        { limits: { maxInlineBytes: sizeOf(small) } }
      )
    }))

  it.scoped("a database failure answers failed for every save of its batch, a failing row fails no other, and later saves work", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      const mixed = (createdAt: number) => (createdAt % 2 === 0 ? recordOf("team-a", createdAt) : recordOf("team-a", createdAt, "b".repeat(2000)))
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const failures = () => lines.filter((line) => line.event === "responses.store_failed")
          // one row the database refuses, among others committed with it
          const poison = mixed(3)
          const batch = Array.from({ length: 6 }, (_, i) => (i === 3 ? poison : mixed(i)))
          yield* refuseInserts("poison", `NEW.id = '${poison.id}'`)
          const results = yield* Effect.forEach(batch, (record) => save(record), { concurrency: "unbounded" })
          expect(results).toEqual(batch.map((record) => (record === poison ? "failed" : "stored")))
          expect(failures()).toEqual([expect.objectContaining({ app: "team-a", id: poison.id, reason: "database" })])
          expect(fs.existsSync(fileOf(dir, poison.id))).toBe(false)
          for (const record of batch) expect(yield* get("team-a", record.id)).toEqual(record === poison ? Option.none() : Option.some(record))
          // every row refused: every save of the batch answers failed, nothing is left behind
          yield* refuseInserts("refuse", "true")
          const refused = Array.from({ length: 6 }, (_, i) => mixed(10 + i))
          expect(yield* Effect.forEach(refused, (record) => save(record), { concurrency: "unbounded" })).toEqual(refused.map(() => "failed"))
          const logged = failures().slice(1)
          expect(logged.map((line) => line.id).sort()).toEqual(refused.map((record) => record.id).sort())
          expect(logged.every((line) => line.reason === "database")).toBe(true)
          for (const record of refused) expect(yield* rowCount(record.id)).toBe(0)
          const stored = batch.filter((record) => record !== poison)
          expect(filesIn(dir)).toEqual(filesExpected(stored.filter((record) => sizeOf(record) > 1000).map((record) => `${record.id}.json`)))
          expect(yield* stats).toEqual([{ app: "team-a", count: 5, bytes: stored.reduce((sum, record) => sum + sizeOf(record), 0) }])
          // the failed transactions left the connection fsyncing every other commit, as before
          if (sqlite) expect(yield* Effect.orDie(sql<{ readonly synchronous: number }>`PRAGMA synchronous`)).toEqual([{ synchronous: 2 }])
          yield* Effect.orDie(sql.unsafe(sqlite ? "DROP TRIGGER refuse" : "DROP TRIGGER refuse ON responses"))
          const later = [mixed(20), mixed(21)]
          for (const record of later) expect(yield* save(record)).toBe("stored")
          for (const record of later) expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect((yield* stats)[0].count).toBe(7)
        }),
        { lines, limits: { maxInlineBytes: 1000 } }
      )
    }))

  if (sqlite) it.scoped("a save answers stored only once the WAL is synced, one sync per commit; a failed sync answers failed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const lines: Lines = []
      let syncs = 0
      let gate: Deferred.Deferred<void> | undefined
      let failing = false
      const sync = (real: Sync): Sync =>
        Effect.suspend(() => {
          syncs++
          if (failing) return Effect.fail(new SqlError.SqlError({ cause: new Error("EIO"), message: "sync failed" }))
          return gate === undefined ? real : Effect.zipRight(Deferred.await(gate), real)
        })
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const alone = syncs
          const first = recordOf("team-a", 1)
          expect(yield* save(first)).toBe("stored")
          expect(syncs - alone).toBe(1)
          // held at the sync: the row is committed (and visible) but the save has not answered
          gate = yield* Deferred.make<void>()
          const held = recordOf("team-a", 2)
          const saving = yield* Effect.fork(save(held))
          yield* eventually(Effect.map(rowCount(held.id), (n) => n === 1))
          expect(yield* Fiber.poll(saving)).toEqual(Option.none())
          yield* Deferred.succeed(gate, undefined)
          expect(yield* Fiber.join(saving)).toBe("stored")
          gate = undefined
          // many at once: one sync per commit, far fewer than saves
          const before = syncs
          const commits = walCommits(dir)
          const records = Array.from({ length: 40 }, (_, i) => recordOf("team-a", 10 + i))
          expect(yield* Effect.forEach(records, (record) => save(record), { concurrency: "unbounded" })).toEqual(records.map(() => "stored"))
          expect(syncs - before).toBe(walCommits(dir) - commits)
          expect(syncs - before).toBeLessThanOrEqual(5)
          // a sync that fails: not known to be on disk, so not acknowledged
          failing = true
          const unsynced = recordOf("team-a", 100)
          expect(yield* save(unsynced)).toBe("failed")
          expect(lines).toContainEqual(expect.objectContaining({ event: "responses.store_failed", id: unsynced.id, reason: "sync" }))
          failing = false
          const later = recordOf("team-a", 101)
          expect(yield* save(later)).toBe("stored")
          expect(yield* get("team-a", later.id)).toEqual(Option.some(later))
        }),
        { lines, sync }
      )
    }))
})
