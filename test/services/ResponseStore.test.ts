import { NodeContext } from "@effect/platform-node"
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteMigrator } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { randomHex } from "../../src/domain/Ids.js"
import { Log } from "../../src/services/Log.js"
import { ResponseStore, type ResponseStoreLimits, type StoredRecord } from "../../src/services/ResponseStore.js"
import * as SqliteClient from "../../src/sql/SqliteClient.js"
import meta from "../../src/sql/migrations/0001_meta.js"
import responses from "../../src/sql/migrations/0002_responses.js"

const DAY = 24 * 60 * 60 * 1000
const MiB = 1024 * 1024

const databaseLayer = (dir: string) =>
  Layer.provideMerge(
    SqliteMigrator.layer({ loader: Migrator.fromRecord({ "0001_meta": meta, "0002_responses": responses }) }).pipe(Layer.provide(NodeContext.layer)),
    SqliteClient.layer({ filename: path.join(dir, "gateway.db") })
  ).pipe(Layer.orDie)

type Lines = Array<Record<string, unknown>>

/** Run `body` against a store over `dir`; the store (and its database) close when `body` ends. */
const withStore = <A, E>(
  dir: string,
  body: Effect.Effect<A, E, ResponseStore | SqlClient.SqlClient>,
  options: { readonly lines?: Lines; readonly limits?: Partial<ResponseStoreLimits> } = {}
) =>
  Effect.provide(
    body,
    ResponseStore.layer(dir, options.limits).pipe(Layer.provideMerge(Layer.merge(databaseLayer(dir), Log.layerMemory(options.lines ?? []))))
  )

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "response-store-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
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

const rowCount = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM responses WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0].n),
    Effect.orDie
  )

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

describe("ResponseStore", () => {
  it.scoped("saves and reads back what was saved; the file is one JSON document", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* withStore(
        dir,
        Effect.gen(function* () {
          const record = recordOf("team-a", 1_000)
          expect(yield* save(record)).toBe("stored")
          expect(yield* get("team-a", record.id)).toEqual(Option.some(record))
          expect(JSON.parse(fs.readFileSync(fileOf(dir, record.id), "utf8"))).toEqual({ response: record.response, input: record.input })
          expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(record) }])
          const empty = { ...recordOf("team-a", 1_000), input: [] }
          expect(yield* save(empty)).toBe("stored")
          expect(yield* get("team-a", empty.id)).toEqual(Option.some(empty))
        })
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

  it.scoped("remove deletes the row and the file; a second remove finds nothing", () =>
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
        })
      )
    }))

  it.scoped("an expired record reads as none at once; the next sweep deletes its row and file", () =>
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
        })
      )
    }))

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
          expect(fs.readdirSync(path.join(dir, "responses"))).toEqual([])
          expect(yield* stats).toEqual([])
        }),
        { lines }
      )
    }))

  it.scoped("a storage failure answers failed with a reason code, and a later save works again", () =>
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
        { lines }
      )
    }))

  it.scoped("past the record cap the app's oldest records go first; other apps keep theirs", () =>
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
        { limits: { maxRecords: 20 } }
      )
    }))

  it.scoped("concurrent saves keep the caps and the counters exact", () =>
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
          expect(fs.readdirSync(path.join(dir, "responses")).length).toBe(10)
        }),
        { limits: { maxRecords: 10 } }
      )
    }))

  it.scoped("past the byte cap the oldest records go until the new one fits; a record over maxRecordBytes is skipped", () =>
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
        { limits: { maxBytes: Math.floor(3.5 * unit), maxRecordBytes: 3 * unit } }
      )
    }))

  it.scoped("data survives a restart", () =>
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
        })
      )
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* get("team-a", kept.id)).toEqual(Option.some(kept))
          expect(yield* get("team-a", removed.id)).toEqual(Option.none())
          expect(yield* stats).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(kept) }])
        })
      )
    }))

  it.scoped("at start, rows without a file and files (or temp files) without a row are deleted", () =>
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
        })
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
        { lines }
      )
    }))

  it.scoped("expired records are deleted by the sweep at start", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const old = recordOf("team-a", 0)
      yield* withStore(dir, save(old, 1))
      yield* TestClock.adjust(2 * DAY)
      yield* withStore(
        dir,
        Effect.gen(function* () {
          expect(yield* rowCount(old.id)).toBe(0)
          expect(fs.existsSync(fileOf(dir, old.id))).toBe(false)
          expect(yield* stats).toEqual([])
        })
      )
    }))

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
          const monitored = <A, R>(effect: Effect.Effect<A, never, R>) =>
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
})
