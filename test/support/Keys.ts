import * as SqlClient from "@effect/sql/SqlClient"
import { Context, Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import Pg from "pg"
import type { GatewayConfig } from "../../src/Config.js"
import { KeyStore } from "../../src/services/keys/KeyStore.js"
import type { BackendUnderTest, OpenDatabase } from "./Backends.js"
import { configOf } from "./Gateway.js"

/** Tools of the KeyStore tests: a config with an admin key and one configured key, databases and replicas that end with the scope. */

export const ADMIN = "sk-admin-keystore-test-0123456789"
export const CONFIG_KEY = "sk-config-keystore-test-0123456789"

export const configFor = (dataDir: string): GatewayConfig =>
  configOf({
    accessLog: false,
    dataDir,
    listen: { host: "127.0.0.1", port: 0 },
    providers: { mock: { type: "mock" } },
    adminKey: ADMIN,
    keys: [{ key: CONFIG_KEY, app: "configured" }]
  })

/** A fresh data directory, removed with the scope. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "keystore-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** A fresh migrated database of `backend`, dropped with the scope. */
export const openDatabase = (backend: BackendUnderTest, dir: string) =>
  Effect.acquireRelease(
    Effect.promise(() => backend.open(dir)),
    (db) => Effect.promise(() => db.close())
  )

/** One KeyStore on `db` as a replica builds it (its own pool), with that SqlClient beside it; ends with the scope. */
export const replicaOn = (db: OpenDatabase, config: GatewayConfig) =>
  Effect.map(Layer.build(KeyStore.layerWithRuntime(config).pipe(Layer.provideMerge(db.layer))), (context) => ({
    keys: Context.get(context, KeyStore),
    sql: Context.get(context, SqlClient.SqlClient)
  }))

/** Real time: the reads of key changes run on the live clock. */
export const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Runs `query` on the test PostgreSQL server as its admin, outside the gateway's pools, with the name of `url`'s database. */
export const asAdmin = <A>(url: string, query: (client: Pg.Client, database: string) => Promise<A>) =>
  Effect.promise(async () => {
    const target = new URL(url)
    const database = target.pathname.slice(1)
    target.pathname = "/postgres"
    const client = new Pg.Client({ connectionString: target.toString() })
    await client.connect()
    try {
      return await query(client, database)
    } finally {
      await client.end()
    }
  })

/** Lose the database at `url` (new connections refused, open ones ended), or give it back. */
export const loseDatabase = (url: string, lost: boolean) =>
  asAdmin(url, async (client, database) => {
    await client.query(`ALTER DATABASE ${Pg.escapeIdentifier(database)} WITH ALLOW_CONNECTIONS ${lost ? "false" : "true"}`)
    if (lost) await client.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", [database])
  })
