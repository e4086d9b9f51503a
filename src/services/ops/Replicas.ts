import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Context, Deferred, Duration, Effect, Layer, Schedule, Schema } from "effect"
import * as os from "node:os"
import { Settings } from "../../Config.js"
import { Log } from "./Log.js"

/**
 * Which replica this is, and which replicas share its database: each writes a heartbeat row
 * (`replicas`: id, seen_at) every few seconds, and `/gateway/status` lists the ids seen in the
 * last minute. The id is `replicaId` from the config, else the host name and the bound port
 * (known once the server listens: `bind` sets it).
 */
export class Replicas extends Context.Tag("gateway/Replicas")<
  Replicas,
  {
    /** this replica's id (waits for the server to bind when the id comes from the port) */
    readonly id: Effect.Effect<string>
    /** set the bound port (called once the server listens) */
    readonly bind: (port: number) => Effect.Effect<void>
    /** ids of the replicas seen in the last minute, this one included, sorted */
    readonly seen: Effect.Effect<ReadonlyArray<string>>
  }
>() {
  static readonly layer = Layer.scoped(
    Replicas,
    Effect.gen(function* () {
      const config = yield* Settings
      const sql = yield* SqlClient.SqlClient
      const log = yield* Log
      const id = yield* Deferred.make<string>()
      if (config.replicaId !== undefined) yield* Deferred.succeed(id, config.replicaId)
      const startedAt = yield* Clock.currentTimeMillis

      const upsert = SqlSchema.void({
        Request: Schema.Struct({ id: Schema.String, started_at: Schema.Number, seen_at: Schema.Number }),
        execute: (row) =>
          sql`INSERT INTO replicas ${sql.insert(row)} ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, started_at = excluded.started_at`
      })
      const forget = SqlSchema.void({ Request: Schema.Number, execute: (before) => sql`DELETE FROM replicas WHERE seen_at < ${before}` })
      const recent = SqlSchema.findAll({
        Request: Schema.Number,
        Result: Schema.Struct({ id: Schema.String }),
        execute: (since) => sql`SELECT id FROM replicas WHERE seen_at >= ${since} ORDER BY id`
      })

      let failing = false
      const beat = Effect.gen(function* () {
        const self = yield* Deferred.await(id)
        const now = yield* Clock.currentTimeMillis
        yield* upsert({ id: self, started_at: startedAt, seen_at: now })
        yield* forget(now - 24 * 60 * 60 * 1000)
      }).pipe(
        Effect.tap(() => Effect.sync(() => (failing = false))),
        // logged once per outage: the database may be down for a while
        Effect.catchAll(() => Effect.sync(() => (failing ? undefined : ((failing = true), log.error("replicas.heartbeat_failed", { reason: "database" })))))
      )
      yield* Effect.forkScoped(Effect.repeat(beat, Schedule.spaced(Duration.seconds(5))))

      return Replicas.of({
        id: Deferred.await(id),
        bind: (port) => Effect.asVoid(Deferred.succeed(id, `${os.hostname()}:${port}`)),
        seen: Effect.gen(function* () {
          const self = yield* Deferred.await(id)
          const now = yield* Clock.currentTimeMillis
          const ids = yield* recent(now - 60_000).pipe(
            Effect.map((rows) => rows.map((row) => row.id)),
            Effect.orElseSucceed((): ReadonlyArray<string> => [])
          )
          return ids.includes(self) ? ids : [...ids, self].sort()
        })
      })
    })
  )
}
