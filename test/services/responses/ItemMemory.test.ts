import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, type Scope, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ItemMemory } from "../../../src/services/responses/ItemMemory.js"
import { Log } from "../../../src/services/ops/Log.js"
import { type BackendUnderTest, backends, type OpenDatabase, postgresBackend } from "../../support/Backends.js"
import { hasPostgres } from "../../support/Postgres.js"

const HOUR = 60 * 60 * 1000

const message = (id: string, text = "hi") => ({ type: "message", id, role: "assistant", content: [{ type: "output_text", text }] })
const call = (id: string) => ({ type: "function_call", id, call_id: `call_${id}`, name: "lookup", arguments: "{}" })

type Lines = Array<Record<string, unknown>>

/** A fresh database of `backend` for one test (a temporary directory for SQLite), closed with the test's scope. */
const openDatabase = (backend: BackendUnderTest) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "item-memory-"))
      return { dir, db: await backend.open(dir) }
    }),
    ({ dir, db }) =>
      Effect.promise(async () => {
        await db.close()
        fs.rmSync(dir, { recursive: true, force: true })
      })
  )

/** One memory (as one replica would build it) over `database`; it closes with the scope. */
const memoryOn = (database: OpenDatabase["layer"], lines: Lines = []) =>
  Effect.map(Layer.build(ItemMemory.layer().pipe(Layer.provideMerge(Layer.merge(database, Log.layerMemory(lines))))), (context) => ({
    memory: Context.get(context, ItemMemory),
    sql: Context.get(context, SqlClient.SqlClient)
  }))

for (const backend of backends) describe(`ItemMemory (${backend.kind})`, () => {
  const withMemory = <A, E>(body: (memory: ItemMemory["Type"]) => Effect.Effect<A, E>): Effect.Effect<A, E, Scope.Scope> =>
    Effect.gen(function* () {
      const { db } = yield* openDatabase(backend)
      const { memory } = yield* memoryOn(db.layer)
      return yield* body(memory)
    })

  it.scoped("remembers the items of an answer, finds them by id, and forgets them with their answer", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1"), call("fc_1")])
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        expect(yield* memory.lookup("team-a", "fc_1")).toEqual(Option.some(call("fc_1")))
        expect(yield* memory.lookup("team-a", "msg_unknown")).toEqual(Option.none())
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "fc_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
        yield* memory.forget("team-a", "resp_unknown")
        yield* memory.forget("team-b", "resp_2")
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
      })
    ))

  it.scoped("keeps apps apart", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1", "for a")])
        yield* memory.remember("team-b", "resp_1", [message("msg_1", "for b")])
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1", "for a")))
        expect(yield* memory.lookup("team-b", "msg_1")).toEqual(Option.some(message("msg_1", "for b")))
        expect(yield* memory.lookup("team-c", "msg_1")).toEqual(Option.none())
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-b", "msg_1")).toEqual(Option.some(message("msg_1", "for b")))
      })
    ))

  it.scoped("an item id reused by a later answer survives forgetting the earlier one", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_same", "old")])
        yield* memory.remember("team-a", "resp_2", [message("msg_same", "new")])
        expect(yield* memory.lookup("team-a", "msg_same")).toEqual(Option.some(message("msg_same", "new")))
        yield* memory.forget("team-a", "resp_1")
        expect(yield* memory.lookup("team-a", "msg_same")).toEqual(Option.some(message("msg_same", "new")))
      })
    ))

  it.scoped("keeps the last 1000 answers of an app", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        for (let i = 0; i < 1001; i++) yield* memory.remember("team-a", `resp_${i}`, [message(`msg_${i}`)])
        yield* memory.remember("team-b", "resp_b", [message("msg_b")])
        expect(yield* memory.lookup("team-a", "msg_0")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        expect(yield* memory.lookup("team-a", "msg_1000")).toEqual(Option.some(message("msg_1000")))
        expect(yield* memory.lookup("team-b", "msg_b")).toEqual(Option.some(message("msg_b")))
      })
    ))

  it.scoped("keeps an answer one hour", () =>
    withMemory((memory) =>
      Effect.gen(function* () {
        yield* memory.remember("team-a", "resp_1", [message("msg_1")])
        yield* TestClock.adjust(HOUR / 2)
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        yield* TestClock.adjust(HOUR / 2 - 1)
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
        yield* TestClock.adjust(1)
        expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.none())
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
        yield* TestClock.adjust(HOUR / 2)
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.none())
        // remembering again starts a new hour
        yield* memory.remember("team-a", "resp_2", [message("msg_2")])
        expect(yield* memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
      })
    ))

  it.scoped("is a layer", () =>
    Effect.gen(function* () {
      const { db } = yield* openDatabase(backend)
      yield* Effect.gen(function* () {
        const memory = yield* ItemMemory
        yield* memory.remember("team-a", "resp_1", [message("msg_1")])
        expect(Option.isSome(yield* memory.lookup("team-a", "msg_1"))).toBe(true)
      }).pipe(Effect.provide(ItemMemory.layer().pipe(Layer.provide(Layer.merge(db.layer, Log.layerMemory([]))))))
    }))
})

describe.runIf(hasPostgres)("ItemMemory shared by replicas (postgres)", () => {
  it.scoped("an item remembered on one replica is found on another; forgotten on either, it is gone on both at once", () =>
    Effect.gen(function* () {
      const { db } = yield* openDatabase(postgresBackend)
      const a = yield* memoryOn(db.layer)
      const b = yield* memoryOn(db.layer)
      yield* a.memory.remember("team-a", "resp_1", [message("msg_1"), call("fc_1")])
      yield* b.memory.remember("team-a", "resp_2", [message("msg_2")])
      expect(yield* b.memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
      expect(yield* b.memory.lookup("team-a", "fc_1")).toEqual(Option.some(call("fc_1")))
      expect(yield* a.memory.lookup("team-a", "msg_2")).toEqual(Option.some(message("msg_2")))
      expect(yield* b.memory.lookup("team-b", "msg_1")).toEqual(Option.none())
      yield* b.memory.forget("team-a", "resp_1")
      expect(yield* a.memory.lookup("team-a", "msg_1")).toEqual(Option.none())
      yield* a.memory.forget("team-a", "resp_2")
      expect(yield* b.memory.lookup("team-a", "msg_2")).toEqual(Option.none())
    }))

  it.scoped("the last 1000 answers are counted for the app as a whole, whichever replica remembered them", () =>
    Effect.gen(function* () {
      const { db } = yield* openDatabase(postgresBackend)
      const replicas = [yield* memoryOn(db.layer), yield* memoryOn(db.layer)]
      yield* Effect.forEach(
        Array.from({ length: 1001 }, (_, i) => i),
        (i) => replicas[i % 2].memory.remember("team-a", `resp_${i}`, [message(`msg_${i}`)]),
        { concurrency: 8 }
      )
      // which answers were last depends on the order the 8 at a time reached the database: count them
      const found = yield* Effect.forEach(Array.from({ length: 1001 }, (_, i) => i), (i) => replicas[(i + 1) % 2].memory.lookup("team-a", `msg_${i}`), {
        concurrency: 8
      })
      expect(found.filter(Option.isSome).length).toBe(1000)
      // a sweep deletes the answer no lookup can see any more
      yield* TestClock.adjust(60_000)
      yield* replicas[0].memory.remember("team-b", "resp_b", [message("msg_b")])
      const rows = () => Effect.orDie(replicas[0].sql<{ readonly n: number }>`SELECT COUNT(DISTINCT response_id) AS n FROM held_items WHERE app = 'team-a'`)
      for (let i = 0; i < 200 && (yield* rows())[0].n !== 1000; i++) yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
      expect((yield* rows())[0].n).toBe(1000)
    }))

  it.scoped("a database failure: remember and forget log it and succeed (the answer goes out), lookup fails with a 503", () =>
    Effect.gen(function* () {
      const { db } = yield* openDatabase(postgresBackend)
      const lines: Lines = []
      const { memory, sql } = yield* memoryOn(db.layer, lines)
      yield* Effect.orDie(sql`ALTER TABLE held_items RENAME TO held_items_away`)
      yield* memory.remember("team-a", "resp_1", [message("msg_1")])
      yield* memory.forget("team-a", "resp_1")
      expect(lines.map((line) => line.event)).toEqual(["responses.remember_failed", "responses.forget_failed"])
      expect(lines.every((line) => line.reason === "database")).toBe(true)
      const failed = yield* Effect.flip(memory.lookup("team-a", "msg_1"))
      expect(failed).toMatchObject({ _tag: "GatewayError", status: 503, code: "database_unavailable" })
      yield* Effect.orDie(sql`ALTER TABLE held_items_away RENAME TO held_items`)
      yield* memory.remember("team-a", "resp_1", [message("msg_1")])
      expect(yield* memory.lookup("team-a", "msg_1")).toEqual(Option.some(message("msg_1")))
    }))
})
