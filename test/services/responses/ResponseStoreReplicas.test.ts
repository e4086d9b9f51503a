import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Redacted, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import Pg from "pg"
import { randomHex } from "../../../src/domain/Ids.js"
import { Log } from "../../../src/services/ops/Log.js"
import { ResponseStore, type ResponseStoreLimits, type StoredRecord } from "../../../src/services/responses/ResponseStore.js"
import { postgresDatabaseLayer } from "../../../src/sql/Database.js"
import { postgresBackend } from "../../support/Backends.js"
import { hasPostgres } from "../../support/Postgres.js"

/**
 * Stored responses on PostgreSQL seen by two replicas: two stores, each over a pool of its own on
 * the same database and a data directory of its own, as two gateway processes would be.
 */

const DAY = 24 * 60 * 60 * 1000
type Lines = Array<Record<string, unknown>>

const recordOf = (app: string, createdAt: number, text = "hello"): StoredRecord => {
  const id = `resp_${randomHex()}`
  return {
    id,
    app,
    createdAt,
    response: { id, object: "response", status: "completed", output: [{ type: "message", id: `msg_${randomHex()}`, content: [{ type: "output_text", text: "hi" }] }] },
    input: [{ type: "message", id: `msg_${randomHex()}`, role: "user", content: [{ type: "input_text", text }] }]
  }
}
const sizeOf = (record: StoredRecord) => Buffer.byteLength(JSON.stringify({ response: record.response, input: record.input }))

/** A fresh PostgreSQL database for the test, dropped with its scope. */
const sharedDatabase = Effect.acquireRelease(
  Effect.promise(() => postgresBackend.open("")),
  (db) => Effect.promise(db.close)
)

/** One replica's store over the database at `url`, with a data directory of its own; it closes with the scope. */
const replica = (url: string, limits: Partial<ResponseStoreLimits> = {}, lines: Lines = []) =>
  Effect.gen(function* () {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "replica-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const database = postgresDatabaseLayer(Redacted.make(url), 4).pipe(Layer.orDie)
    const context = yield* Layer.build(ResponseStore.layer(dir, limits).pipe(Layer.provideMerge(Layer.merge(database, Log.layerMemory(lines)))))
    return { dir, store: Context.get(context, ResponseStore), sql: Context.get(context, SqlClient.SqlClient) }
  })

describe.runIf(hasPostgres)("ResponseStore shared by replicas (postgres)", () => {
  it.scoped("saved on one replica: read, listed and deleted on the other; deleted or expired on one is gone on the other at once", () =>
    Effect.gen(function* () {
      const db = yield* sharedDatabase
      const a = yield* replica(db.url!)
      const b = yield* replica(db.url!)
      const record = recordOf("team-a", 1_000)
      expect(yield* a.store.save(record, { maxAgeDays: 30 })).toBe("stored")
      expect(yield* b.store.get("team-a", record.id)).toEqual(Option.some(record))
      expect(yield* b.store.get("team-b", record.id)).toEqual(Option.none())
      expect(yield* b.store.stats()).toEqual([{ app: "team-a", count: 1, bytes: sizeOf(record) }])
      // nothing on either replica's disk
      expect(fs.readdirSync(a.dir)).toEqual([])
      expect(fs.readdirSync(b.dir)).toEqual([])

      expect(yield* b.store.remove("team-a", record.id)).toBe(true)
      expect(yield* a.store.get("team-a", record.id)).toEqual(Option.none())
      expect(yield* a.store.remove("team-a", record.id)).toBe(false)

      const other = recordOf("team-a", 2_000)
      yield* b.store.save(other, { maxAgeDays: 30 })
      expect(yield* a.store.remove("team-a", other.id)).toBe(true)
      expect(yield* b.store.get("team-a", other.id)).toEqual(Option.none())
      expect(yield* a.store.stats()).toEqual([])

      // a chain: each turn saved by the other replica, the whole history read back by either
      let previous = recordOf("team-a", 3_000)
      yield* a.store.save(previous, { maxAgeDays: 30 })
      for (let turn = 1; turn <= 6; turn++) {
        const reader = turn % 2 === 0 ? a : b
        const found = yield* reader.store.get("team-a", previous.id)
        expect(Option.isSome(found)).toBe(true)
        const history = Option.getOrThrow(found).input
        const next: StoredRecord = { ...recordOf("team-a", 3_000 + turn, `turn ${turn}`), input: [...history, ...recordOf("team-a", 0, `turn ${turn}`).input] }
        expect(yield* reader.store.save(next, { maxAgeDays: 30 })).toBe("stored")
        previous = next
      }
      expect(Option.getOrThrow(yield* b.store.get("team-a", previous.id)).input.length).toBe(7)

      const shortLived = recordOf("team-a", 0)
      yield* a.store.save(shortLived, { maxAgeDays: 1 })
      yield* TestClock.adjust(DAY)
      expect(yield* b.store.get("team-a", shortLived.id)).toEqual(Option.none())
      expect(yield* b.store.remove("team-a", shortLived.id)).toBe(false)
    }))

  it.scoped("the caps hold for the app as a whole while both replicas save at once", () =>
    Effect.gen(function* () {
      const db = yield* sharedDatabase
      const limits = { maxRecords: 10 }
      const a = yield* replica(db.url!, limits)
      const b = yield* replica(db.url!, limits)
      const records = Array.from({ length: 60 }, (_, i) => recordOf(i % 3 === 0 ? "team-b" : "team-a", 1_000 + i, "x".repeat(i * 10)))
      const results = yield* Effect.forEach(records, (record, i) => (i % 2 === 0 ? a : b).store.save(record, { maxAgeDays: 30 }), { concurrency: "unbounded" })
      expect(results).toEqual(records.map(() => "stored"))
      for (const app of ["team-a", "team-b"]) {
        // whatever order the saves committed in, the oldest ones went: the newest 10 of each app are kept
        const mine = records.filter((record) => record.app === app)
        const kept = mine.slice(-10)
        for (const record of mine) expect(Option.isSome(yield* b.store.get(app, record.id))).toBe(kept.includes(record))
      }
      const rows = yield* Effect.orDie(
        a.sql<{ readonly app: string; readonly count: number; readonly bytes: number }>`SELECT app, COUNT(*) AS count, SUM(bytes) AS bytes FROM responses GROUP BY app ORDER BY app`
      )
      expect(rows).toEqual([
        { app: "team-a", count: 10, bytes: records.filter((r) => r.app === "team-a").slice(-10).reduce((sum, r) => sum + sizeOf(r), 0) },
        { app: "team-b", count: 10, bytes: records.filter((r) => r.app === "team-b").slice(-10).reduce((sum, r) => sum + sizeOf(r), 0) }
      ])
      expect(yield* a.store.stats()).toEqual(rows)
      expect(yield* b.store.stats()).toEqual(rows)
    }))

  it.scoped("the byte cap holds for the app as a whole while both replicas save at once", () =>
    Effect.gen(function* () {
      const db = yield* sharedDatabase
      const unit = sizeOf(recordOf("team-a", 0, "a".repeat(1000)))
      const limits = { maxBytes: 5 * unit }
      const a = yield* replica(db.url!, limits)
      const b = yield* replica(db.url!, limits)
      const records = Array.from({ length: 30 }, (_, i) => recordOf("team-a", 1_000 + i, "a".repeat(1000)))
      const results = yield* Effect.forEach(records, (record, i) => (i % 2 === 0 ? a : b).store.save(record, { maxAgeDays: 30 }), { concurrency: "unbounded" })
      expect(results).toEqual(records.map(() => "stored"))
      expect(yield* a.store.stats()).toEqual([{ app: "team-a", count: 5, bytes: 5 * unit }])
      for (const record of records) expect(Option.isSome(yield* a.store.get("team-a", record.id))).toBe(records.slice(-5).includes(record))
    }))

  it.scoped("connections cut while saving: every save answered stored is readable on the other replica, and the tallies match the rows", () =>
    Effect.gen(function* () {
      const db = yield* sharedDatabase
      const limits = { maxRecords: 50 }
      const a = yield* replica(db.url!, limits)
      const b = yield* replica(db.url!, limits)
      const admin = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: db.url!, application_name: "cutter" })
          await client.connect()
          return client
        }),
        (client) => Effect.promise(() => client.end())
      )
      const cut = Effect.promise(() =>
        admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'llm-gateway'")
      )
      const records = Array.from({ length: 120 }, (_, i) => recordOf(`team-${i % 3}`, 1_000 + i))
      const cutter = yield* Effect.fork(
        Effect.forEach(Array.from({ length: 5 }), () => Effect.zipRight(Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 15))), cut), { discard: true })
      )
      const results = yield* Effect.forEach(records, (record) => a.store.save(record, { maxAgeDays: 30 }), { concurrency: 8 })
      yield* cutter.await
      // the pools recover by themselves
      const later = recordOf("team-0", 5_000)
      expect(yield* a.store.save(later, { maxAgeDays: 30 })).toBe("stored")
      const newest = new Set(
        ["team-0", "team-1", "team-2"].flatMap((app) =>
          [...records, later]
            .filter((record) => record.app === app)
            .slice(-50)
            .map((record) => record.id)
        )
      )
      for (const [i, record] of records.entries()) {
        // a save answered stored was committed (and, here under the cap, is kept)
        if (results[i] === "stored" && newest.has(record.id)) expect(yield* b.store.get(record.app, record.id)).toEqual(Option.some(record))
      }
      const rows = yield* Effect.orDie(
        b.sql<{ readonly app: string; readonly count: number; readonly bytes: number }>`SELECT app, COUNT(*) AS count, SUM(bytes) AS bytes FROM responses GROUP BY app ORDER BY app`
      )
      expect(yield* b.store.stats()).toEqual(rows)
      expect(results.filter((result) => result === "stored").length).toBeGreaterThan(0)
    }))

  it.scoped("a database that stops answering: a save answers failed (logged), a read or delete fails with a 503, and all work again once it is back", () =>
    Effect.gen(function* () {
      const db = yield* sharedDatabase
      const lines: Lines = []
      const a = yield* replica(db.url!, {}, lines)
      const record = recordOf("team-a", 1_000)
      yield* a.store.save(record, { maxAgeDays: 30 })
      yield* Effect.orDie(a.sql`ALTER TABLE responses RENAME TO responses_away`)
      expect(yield* a.store.save(recordOf("team-a", 2_000), { maxAgeDays: 30 })).toBe("failed")
      expect(lines).toContainEqual(expect.objectContaining({ event: "responses.store_failed", reason: "database" }))
      const unavailable = { _tag: "GatewayError", status: 503, code: "database_unavailable" }
      expect(yield* Effect.flip(a.store.get("team-a", record.id))).toMatchObject(unavailable)
      expect(yield* Effect.flip(a.store.remove("team-a", record.id))).toMatchObject(unavailable)
      yield* Effect.orDie(a.sql`ALTER TABLE responses_away RENAME TO responses`)
      expect(yield* a.store.get("team-a", record.id)).toEqual(Option.some(record))
      expect(yield* a.store.remove("team-a", record.id)).toBe(true)
    }))
})
