import { NodeContext } from "@effect/platform-node"
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteMigrator } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { emptyUsage } from "../../src/domain/Canonical.js"
import { Log } from "../../src/services/Log.js"
import { UsageLog, type UsageRecord } from "../../src/services/Usage.js"
import meta from "../../src/sql/migrations/0001_meta.js"
import * as SqliteClient from "../../src/sql/SqliteClient.js"
import usage from "../../src/sql/migrations/0004_usage.js"

/**
 * When usage records reach the database, on Effect's clock (TestClock): the gateway-level tests
 * (test/gateway/usage.test.ts) check the same over sockets with generous time bounds only.
 */

const databaseLayer = (dir: string) =>
  Layer.provideMerge(
    SqliteMigrator.layer({ loader: Migrator.fromRecord({ "0001_meta": meta, "0004_usage": usage }) }).pipe(Layer.provide(NodeContext.layer)),
    SqliteClient.layer({ filename: path.join(dir, "gateway.db") })
  ).pipe(Layer.orDie)

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "usage-log-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const recordOf = (user: string): UsageRecord => ({
  time: 0,
  app: "team-a",
  user,
  keyId: "key_1",
  protocol: "openai",
  route: "chat",
  requestedModel: "mock/echo",
  model: "mock/echo",
  provider: "mock",
  status: "ok",
  usage: emptyUsage,
  latencyMs: 1
})

/** Users of the rows in the database, read over its own connection (not through the log). */
const rowsIn = (dir: string) =>
  Effect.provide(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly user: string }>`SELECT user FROM usage ORDER BY user`).pipe(
      Effect.map((rows) => rows.map((r) => r.user)),
      Effect.orDie
    ),
    databaseLayer(dir)
  )

const record = (r: UsageRecord) => Effect.map(UsageLog, (log) => log.record(r))

describe("UsageLog", () => {
  it.scoped("a record is written by the flush a second later, without anyone reading usage", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* Effect.gen(function* () {
        yield* record(recordOf("first"))
        yield* TestClock.adjust("1 second")
        expect(yield* rowsIn(dir)).toEqual(["first"])
        // half-way between two flushes (at 2 s and 3 s)
        yield* TestClock.adjust("1500 millis")
        yield* record(recordOf("second"))
        expect(yield* rowsIn(dir)).not.toContain("second")
        yield* TestClock.adjust("499 millis")
        expect(yield* rowsIn(dir)).not.toContain("second")
        yield* TestClock.adjust("1 millis")
        expect(yield* rowsIn(dir)).toEqual(["first", "second"])
      }).pipe(Effect.provide(UsageLog.layer(true).pipe(Layer.provideMerge(Layer.merge(databaseLayer(dir), Log.layerMemory([]))))))
    }))

  it.scoped("records of the last second are written when the log is closed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* Effect.gen(function* () {
        yield* TestClock.adjust("1 second")
        yield* record(recordOf("last-second"))
        expect(yield* rowsIn(dir)).toEqual([])
      }).pipe(Effect.provide(UsageLog.layer(true).pipe(Layer.provideMerge(Layer.merge(databaseLayer(dir), Log.layerMemory([]))))))
      expect(yield* rowsIn(dir)).toEqual(["last-second"])
    }))
})
