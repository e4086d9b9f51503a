import * as os from "node:os"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

/** `/gateway/status` names the replica that answered and the replicas seen in the last minute (issue 16). */

const admin = "admin-key-for-replicas"
const status = async (gw: TestGateway) => {
  const r = await fetch(`${gw.url}/gateway/status`, { headers: { authorization: `Bearer ${admin}` } })
  expect(r.status).toBe(200)
  return (await r.json()) as { replica: string; replicas: ReadonlyArray<string> }
}

const until = async <A>(read: () => Promise<A>, done: (a: A) => boolean, ms = 10_000): Promise<A> => {
  const end = Date.now() + ms
  for (;;) {
    const value = await read()
    if (done(value) || Date.now() > end) return value
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

describe("replicas on /gateway/status", () => {
  it("SQLite: one replica, named by host name and bound port", async () => {
    const gw = await startGateway({ adminKey: admin, providers: { mock: { type: "mock" } } })
    try {
      const body = await status(gw)
      expect(body.replica).toBe(`${os.hostname()}:${gw.port}`)
      expect(body.replicas).toEqual([body.replica])
    } finally {
      await gw.close()
    }
  })

  describe.skipIf(!hasPostgres)("PostgreSQL: two replicas on one database", () => {
    let db: TestDatabase
    let a: TestGateway
    let b: TestGateway
    beforeAll(async () => {
      db = await freshDatabase()
      const document = { adminKey: admin, providers: { mock: { type: "mock" } }, database: { url: db.url, poolSize: 2 } }
      a = await startGateway({ ...document, replicaId: "replica-a" })
      b = await startGateway(document)
    })
    afterAll(async () => {
      await a?.close()
      await b?.close()
      await db?.drop()
    })

    it("each names itself and both list the two", async () => {
      const expected = ["replica-a", `${os.hostname()}:${b.port}`].sort()
      const fromA = await until(() => status(a), (s) => s.replicas.length === 2)
      const fromB = await until(() => status(b), (s) => s.replicas.length === 2)
      expect(fromA.replica).toBe("replica-a")
      expect(fromB.replica).toBe(`${os.hostname()}:${b.port}`)
      expect(fromA.replicas).toEqual(expected)
      expect(fromB.replicas).toEqual(expected)
    })
  })
})
