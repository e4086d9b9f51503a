import { Context, Effect, Layer } from "effect"
import { Backend } from "../../sql/Database.js"
import type { ResponseStoreLimits, ResponseStoreService } from "./ResponseRecords.js"
import { makePostgresResponseStore } from "./ResponseStorePostgres.js"
import { makeSqliteResponseStore } from "./ResponseStoreSqlite.js"

export { defaultResponseStoreLimits, type ResponseStoreLimits, type StoredRecord } from "./ResponseRecords.js"

/**
 * Stored responses of the Responses-style API (spec 2.1), over the gateway's database: on SQLite
 * rows (small records inline) and files in `<dataDir>/responses`, with per-app tallies in memory;
 * on PostgreSQL every record in its row and the per-app tallies in the database too, so that any
 * number of replicas on one database keep one store with one set of caps.
 */
export class ResponseStore extends Context.Tag("gateway/ResponseStore")<ResponseStore, ResponseStoreService>() {
  static readonly make = (dataDir: string, limits: Partial<ResponseStoreLimits> = {}) =>
    Effect.flatMap(Backend, (backend) => (backend.kind === "postgres" ? makePostgresResponseStore(limits) : makeSqliteResponseStore(dataDir, limits)))

  /** The store of the database's backend; sweeps stop with the scope. */
  static readonly layer = (dataDir: string, limits: Partial<ResponseStoreLimits> = {}) =>
    Layer.scoped(ResponseStore, ResponseStore.make(dataDir, limits)).pipe(Layer.orDie)
}
