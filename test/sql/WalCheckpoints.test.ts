import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope, TestClock } from "effect"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { driverModule, layer as sqliteClientLayer } from "../../src/sql/SqliteClient.js"
import { WalCheckpoints } from "../../src/sql/WalCheckpoints.js"

/**
 * WAL checkpoints off the event loop (issue 24): the gateway's connection runs with
 * `wal_autocheckpoint = 0`, so no COMMIT on the event loop copies pages into the database; a
 * connection on a worker thread checkpoints on a timer (Effect's clock: TestClock here, so each
 * checkpoint happens exactly when the test moves the clock), and the WAL holds at most what was
 * written between two checkpoints. Evidence read from the files: the database file grows only
 * when the thread checkpoints.
 */

const PAGE = 4096
const FRAME = PAGE + 24

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "wal-checkpoints-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const sizeOf = (file: string) => (fs.existsSync(file) ? fs.statSync(file).size : 0)
const range = (n: number) => Array.from({ length: n }, (_, i) => i)

/** About `pages` pages of rows (one 3000-byte row fills a page), in transactions of ten rows. */
const write = (sql: SqlClient.SqlClient, pages: number) =>
  Effect.forEach(range(pages / 10), () => sql.withTransaction(Effect.forEach(range(10), () => sql`INSERT INTO t (b) VALUES (randomblob(3000))`)), {
    discard: true
  }).pipe(Effect.orDie)

/** Wait in real time (bounded) until the checkpoint thread has answered `runs` checkpoints. */
const checkpointed = (checkpoints: WalCheckpoints["Type"], runs: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < 1000 && checkpoints.stats().runs < runs; i++) yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    expect(checkpoints.stats().runs).toBe(runs)
    const last = checkpoints.stats().last
    if (last._tag === "None") throw new Error("no checkpoint answer")
    return last.value
  })

describe("WAL checkpoints", () => {
  it.scoped("the gateway's connection never checkpoints; the thread does, on its timer, and the WAL stays bounded", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const file = path.join(dir, "test.db")
      const context = yield* Layer.build(sqliteClientLayer({ filename: file }))
      const sql = Context.get(context, SqlClient.SqlClient)
      const checkpoints = Context.get(context, WalCheckpoints)
      expect(yield* Effect.orDie(sql`PRAGMA wal_autocheckpoint`)).toEqual([{ wal_autocheckpoint: 0 }])
      expect(yield* Effect.orDie(sql`PRAGMA journal_mode`)).toEqual([{ journal_mode: "wal" }])
      yield* Effect.orDie(sql`CREATE TABLE t (b BLOB)`)

      // 1500 pages, past the 1000 at which SQLite's own checkpoint would run inside a COMMIT: none
      // runs, the database file is as it was (nothing copied), every page is in the WAL
      const before = sizeOf(file)
      yield* write(sql, 1500)
      expect(sizeOf(file)).toBe(before)
      const burst = sizeOf(`${file}-wal`)
      expect(burst).toBeGreaterThan(32 + 1500 * FRAME)
      expect(checkpoints.stats().runs).toBe(0)

      // the timer: the thread copies every page into the database
      yield* TestClock.adjust("1 second")
      const first = yield* checkpointed(checkpoints, 1)
      expect(first.busy).toBe(false)
      expect(first.walFrames).toBeGreaterThan(1500)
      expect(first.checkpointed).toBe(first.walFrames)
      expect(sizeOf(file)).toBeGreaterThan(1500 * PAGE)

      // 2500 more pages with a checkpoint every 500: the writer starts the WAL over after each, so
      // it never holds more than one round's pages and its file never grows past the first burst
      for (const round of range(5)) {
        yield* write(sql, 500)
        yield* TestClock.adjust("1 second")
        const answer = yield* checkpointed(checkpoints, 2 + round)
        expect(answer.walFrames).toBeGreaterThanOrEqual(500)
        expect(answer.walFrames).toBeLessThan(1000)
        expect(answer.checkpointed).toBe(answer.walFrames)
        expect(sizeOf(`${file}-wal`)).toBeLessThanOrEqual(burst)
      }
      expect(yield* Effect.orDie(sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM t`)).toEqual([{ n: 4000 }])
    }))

  it.scoped("the thread's connection closes after the gateway's: the last one, it makes the final checkpoint and removes the WAL", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const file = path.join(dir, "test.db")
      // the WAL right after the gateway's connection closed, seen by wrapping that close
      const Database: { prototype: { close(this: unknown): unknown } } = createRequire(import.meta.url)(driverModule(Number(process.versions.napi)))
      const close = Database.prototype.close
      const walAfterMainClose: Array<boolean> = []
      Database.prototype.close = function (this: unknown) {
        const result = close.call(this)
        walAfterMainClose.push(fs.existsSync(`${file}-wal`))
        return result
      }
      yield* Effect.addFinalizer(() => Effect.sync(() => (Database.prototype.close = close)))

      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(sqliteClientLayer({ filename: file }), scope)
      const sql = Context.get(context, SqlClient.SqlClient)
      const checkpoints = Context.get(context, WalCheckpoints)
      yield* Effect.orDie(sql`CREATE TABLE t (b BLOB)`)
      yield* write(sql, 100)
      yield* TestClock.adjust("1 second")
      yield* checkpointed(checkpoints, 1)
      // pages the final checkpoint must copy
      yield* write(sql, 100)
      yield* Scope.close(scope, Exit.void)

      // the gateway's connection was not the last: the WAL was still there when it closed
      expect(walAfterMainClose).toEqual([true])
      // the thread's was: checkpointed and removed
      expect(fs.existsSync(`${file}-wal`)).toBe(false)
      expect(sizeOf(file)).toBeGreaterThan(200 * PAGE)
      const reopened = yield* Layer.build(sqliteClientLayer({ filename: file }))
      expect(yield* Effect.orDie(Context.get(reopened, SqlClient.SqlClient)<{ readonly n: number }>`SELECT COUNT(*) AS n FROM t`)).toEqual([{ n: 200 }])
    }))
})
