/**
 * Expiring runtime keys (issue 17): `expiresAt` (RFC 3339) on creation; from that time the key is
 * refused as `invalid_api_key` on every replica at once; a bad or past time is refused naming the
 * field. On PostgreSQL, two gateways on one database.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"

const ADMIN = "admin-key-for-expiry-0123456789"
const bearer = (key: string) => ({ authorization: `Bearer ${key}` })

const create = (gw: TestGateway, body: unknown) =>
  fetch(`${gw.url}/gateway/admin/keys`, { method: "POST", headers: { ...bearer(ADMIN), "content-type": "application/json" }, body: JSON.stringify(body) })
const chat = (gw: TestGateway, key: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "hi" }] })
  })
const codeOf = async (r: Response) => ((await r.json()) as { error?: { code?: string }; code?: string })

describe("expiring runtime keys", () => {
  let db: TestDatabase | undefined
  let a: TestGateway
  let b: TestGateway
  beforeAll(async () => {
    db = hasPostgres ? await freshDatabase() : undefined
    const document = { adminKey: ADMIN, providers: { mock: { type: "mock" } }, ...(db !== undefined ? { database: { url: db.url, poolSize: 2 } } : {}) }
    a = await startGateway(document)
    // without PostgreSQL the second gateway is the same one (the expiry is still checked)
    b = db !== undefined ? await startGateway(document) : a
  })
  afterAll(async () => {
    await a?.close()
    if (b !== a) await b?.close()
    await db?.drop()
  })

  it("works until expiresAt, then is invalid_api_key on every replica", async () => {
    const expiresAt = new Date(Date.now() + 4_000).toISOString()
    const made = await create(a, { app: "temp", expiresAt })
    expect(made.status).toBe(201)
    const body = (await made.json()) as { id: string; key: string; expires_at: string }
    expect(body.expires_at).toBe(expiresAt)
    expect((await chat(a, body.key)).status).toBe(200)
    // the other replica learns of the key at once (shared store)
    expect((await chat(b, body.key)).status).toBe(200)
    const listed = (await (await fetch(`${a.url}/gateway/admin/keys`, { headers: bearer(ADMIN) })).json()) as { data: Array<{ id: string; expires_at?: string }> }
    expect(listed.data.find((k) => k.id === body.id)?.expires_at).toBe(expiresAt)
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(expiresAt) - Date.now()) + 50))
    for (const gw of [a, b]) {
      const refused = await chat(gw, body.key)
      expect(refused.status).toBe(401)
      expect((await codeOf(refused)).error?.code).toBe("invalid_api_key")
    }
  })

  it("a key without expiresAt does not expire; a bad or past expiresAt is refused naming the field", async () => {
    const made = await create(a, { app: "forever" })
    expect(made.status).toBe(201)
    expect(Object.keys((await made.json()) as object)).not.toContain("expires_at")
    for (const expiresAt of ["tomorrow", "2026-13-01T00:00:00Z", "2030-01-01", new Date(Date.now() - 1000).toISOString()]) {
      const refused = await create(a, { app: "bad", expiresAt })
      expect(refused.status, expiresAt).toBe(400)
      const problem = (await refused.json()) as { code: string; param: string }
      expect([problem.code, problem.param]).toEqual(["invalid_expires_at", "expiresAt"])
    }
  })
})
