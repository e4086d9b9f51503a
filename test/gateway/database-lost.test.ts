/**
 * PostgreSQL lost while serving (issue 16): model requests that need no shared state keep working
 * (keys already seen stay valid), a Responses answer is still returned (its store failed and
 * logged), file and admin routes answer 503 in their envelope, usage rows stay buffered, `/readyz`
 * names `database`; once the database answers again everything recovers, with no restart, and
 * the buffered usage is written.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { formBody } from "../files/uploadWire.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { startTcpProxy, type TcpProxy } from "../support/TcpProxy.js"

const ADMIN = "admin-key-database-lost-0123"
const KEY = "sk-config-key-database-lost-0123"

describe.skipIf(!hasPostgres)("PostgreSQL lost while serving", () => {
  let db: TestDatabase
  let proxy: TcpProxy
  let gw: TestGateway
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
  const post = (path: string, key: string, body: unknown) =>
    fetch(`${gw.url}${path}`, { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body) })
  const chat = (key: string, text: string) => post("/v1/chat/completions", key, { model: "mock/echo", messages: [{ role: "user", content: text }] })
  const upload = () => {
    const form = formBody({ filename: "a.txt", type: "text/plain", data: Buffer.from("hello file\n") })
    return fetch(`${gw.url}/v1/files`, { method: "POST", headers: { ...bearer(KEY), "content-type": form.contentType }, body: form.body })
  }
  const until = async (check: () => Promise<boolean>, ms = 15_000) => {
    const end = Date.now() + ms
    while (!(await check())) {
      if (Date.now() > end) throw new Error("timed out")
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  beforeAll(async () => {
    db = await freshDatabase()
    const url = new URL(db.url)
    proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) })
    url.port = String(proxy.port)
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: KEY, app: "team" }],
      providers: { mock: { type: "mock" } },
      database: { url: url.toString(), poolSize: 3 }
    })
  })
  afterAll(async () => {
    await gw?.close()
    await proxy?.close()
    await db?.drop()
  })

  it("serves what needs no shared state, refuses the rest cleanly, and recovers without a restart", async () => {
    const made = await post("/gateway/admin/keys", ADMIN, { app: "bots" })
    expect(made.status).toBe(201)
    const runtime = ((await made.json()) as { key: string }).key
    expect((await chat(runtime, "seen once")).status).toBe(200)

    proxy.cut()

    // model requests: a configured key and a runtime key seen before
    const byConfig = await chat(KEY, "while down")
    expect(byConfig.status).toBe(200)
    expect((await chat(runtime, "while down too")).status).toBe(200)
    // a Responses answer is still returned (not stored)
    const answered = await post("/v1/responses", KEY, { model: "mock/echo", input: "store me", store: true })
    expect(answered.status).toBe(200)
    expect(((await answered.json()) as { status: string }).status).toBe("completed")
    // files: 503 in the OpenAI envelope
    const refused = await upload()
    expect(refused.status).toBe(503)
    const envelope = (await refused.json()) as { error?: { type?: string; message?: string } }
    expect(envelope.error?.message).toBeTypeOf("string")
    expect(JSON.stringify(envelope)).not.toMatch(/postgres:|127\.0\.0\.1:\d+\/gw_test/)
    // admin routes: 503 problem details
    const keys = await fetch(`${gw.url}/gateway/admin/keys`, { headers: bearer(ADMIN) })
    expect(keys.status).toBe(503)
    expect(keys.headers.get("content-type")).toContain("application/problem+json")
    // readiness names the database
    const ready = await fetch(`${gw.url}/readyz`)
    expect(ready.status).toBe(503)
    expect(await ready.text()).toContain("database")

    proxy.restore()

    await until(async () => (await fetch(`${gw.url}/readyz`)).status === 200)
    await until(async () => (await upload()).status === 200)
    expect((await fetch(`${gw.url}/gateway/admin/keys`, { headers: bearer(ADMIN) })).status).toBe(200)
    // the usage rows of the outage were kept and written once the database was back
    await until(async () => {
      const usage = await fetch(`${gw.url}/gateway/usage?app=team`, { headers: bearer(ADMIN) })
      if (usage.status !== 200) return false
      const body = (await usage.json()) as { totals?: { requests?: number; calls?: number } }
      const calls = body.totals?.requests ?? body.totals?.calls ?? 0
      return calls >= 2
    })
  }, 60_000)
})
