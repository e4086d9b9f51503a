import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Exit, Layer, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { postgresDatabaseLayer } from "../../src/sql/Database.js"
import { DatabaseUnreachable } from "../../src/sql/Postgres.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"

describe.skipIf(!hasPostgres)("PostgreSQL backend: start", () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await freshDatabase()
  })
  afterAll(async () => {
    await db?.drop()
  })

  const tables = Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ table_name: string }>`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name`
    return rows.map((r) => r.table_name)
  })

  it("replicas started together migrate once, under the advisory lock, and none fails", async () => {
    const start = () => Effect.runPromise(Effect.scoped(Effect.flatMap(Layer.build(postgresDatabaseLayer(db.redacted, 2)), (ctx) => Effect.provide(tables, ctx))))
    const all = await Promise.all([start(), start(), start(), start()])
    for (const names of all) expect(names).toEqual(expect.arrayContaining(["effect_sql_migrations", "files", "replicas", "responses", "runtime_keys", "usage", "usage_rollups"]))
    const migrations = await Effect.runPromise(
      Effect.scoped(
        Effect.flatMap(Layer.build(postgresDatabaseLayer(db.redacted, 1)), (ctx) =>
          Effect.provide(
            Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ migration_id: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`),
            ctx
          )
        )
      )
    )
    // each migration of the list ran once
    expect(migrations.map((m) => m.migration_id)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21])
  })

  it("an unreachable server fails after the retry window with one message naming the host only", async () => {
    const url = Redacted.make("postgres://someone:hunter2-secret@127.0.0.1:1/private_db?sslmode=disable")
    const started = Date.now()
    const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(postgresDatabaseLayer(url, 1, { connectWithinMs: 1_200 }))))
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000)
    expect(Exit.isFailure(exit)).toBe(true)
    if (Exit.isFailure(exit)) {
      const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
      expect(error).toBeInstanceOf(DatabaseUnreachable)
      expect((error as DatabaseUnreachable).message).toBe("database.url: cannot connect to PostgreSQL at 127.0.0.1:1")
      expect(String((error as Error).message)).not.toMatch(/hunter2|someone|private_db|sslmode/)
    }
  })
})
