import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { backends, type OpenDatabase } from "../support/Backends.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { ADMIN, chat, expectProblem, get, KEYS, parse, pollUntil } from "./helpers.js"

/**
 * `/gateway/usage` while the database does not answer (issue 16): the report is a 503 problem,
 * model calls keep working and their usage stays buffered, and once the database answers again
 * the report has every call, with no restart. The usage table is renamed away and back on a
 * connection of the test's own, which the gateway sees as its table gone.
 */

const MODEL = "mock/echo"
const document = { providers: { mock: { type: "mock" } }, adminKey: ADMIN, keys: [{ key: KEYS.alpha, app: "alpha" }] }

for (const backend of backends) {
  describe(`usage with the database gone and back (${backend.kind})`, () => {
    let dir = ""
    let db: OpenDatabase | undefined
    let gw: TestGateway | undefined

    beforeAll(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-usage-db-"))
      db = await backend.open(dir)
      gw = await startGateway({ ...document, ...(db.url !== undefined ? { database: { url: db.url, poolSize: 2 } } : {}) }, { dataDir: dir })
    })
    afterAll(async () => {
      await gw?.close()
      await db?.close()
      fs.rmSync(dir, { recursive: true, force: true })
    })

    const rename = (from: string, to: string) =>
      Effect.runPromise(Effect.provide(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`ALTER TABLE ${from} RENAME TO ${to}`)), db!.layer))

    const requests = async () => {
      const r = await get(gw!, "/gateway/usage", ADMIN)
      return r.status === 200 ? ((parse(r).totals as { readonly requests: number }).requests) : -r.status
    }

    it("503 problem details while the table is gone; buffered calls are reported once it is back", async () => {
      expect((await chat(gw!, KEYS.alpha, MODEL)).status).toBe(200)
      expect(await pollUntil(requests, (n) => n === 1)).toBe(1)

      await rename("usage", "usage_away")
      const call = await chat(gw!, KEYS.alpha, MODEL)
      expect(call.status, call.text).toBe(200)
      const r = await get(gw!, "/gateway/usage", ADMIN)
      expectProblem(r, 503, "database_unavailable", { instance: "/gateway/usage" })
      expect(r.headers["retry-after"]).toBeDefined()
      // an app the gateway has no key for is looked up in the table: 503 too
      expectProblem(await get(gw!, "/gateway/usage?app=gone", ADMIN), 503, "database_unavailable", { instance: "/gateway/usage?app=gone" })

      await rename("usage_away", "usage")
      expect(await pollUntil(requests, (n) => n === 2, 5000)).toBe(2)
      const metrics = await get(gw!, "/gateway/metrics", ADMIN)
      expect(metrics.text).toMatch(/^gateway_usage_records_dropped_total\{reason="buffer_full"\} 0$/m)
    })
  })
}
