/**
 * Stored responses and item references through two gateways on one PostgreSQL database (issue 16):
 * every request of a conversation may reach either replica.
 */
import Pg from "pg"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { KEYS, clientFor, errorOf, expectRefusal, gatewayDocument, jsonOf, messagesOf, post, rawRequest, type Raw } from "./helpers.js"

const model = "up/gpt-x"

describe.runIf(hasPostgres)("two replicas on one PostgreSQL", () => {
  let upstream: FakeUpstream
  let database: TestDatabase
  let a: TestGateway
  let b: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    database = await freshDatabase()
    const document = gatewayDocument(upstream.url, { database: { url: "env:DATABASE_URL", poolSize: 4 } })
    a = await startGateway(document, { env: { DATABASE_URL: database.url } })
    b = await startGateway(document, { env: { DATABASE_URL: database.url } })
  })

  afterAll(async () => {
    await a?.close()
    await b?.close()
    await database?.drop()
    await upstream?.close()
  })

  beforeEach(() => upstream.reset())

  const get = (gateway: TestGateway, path: string, key: string = KEYS.alpha): Promise<Raw> => rawRequest(gateway, "GET", path, undefined, key)
  const del = (gateway: TestGateway, path: string): Promise<Raw> => rawRequest(gateway, "DELETE", path)

  it("created on one, read, listed, chained and deleted on the other", async () => {
    upstream.script(chatJson({ content: "A1" }), chatJson({ content: "A2" }), chatJson({ content: "A3" }))
    const r1 = await clientFor(a).responses.create({ model, input: "Q1" })
    const read = await get(b, `/v1/responses/${r1.id}`)
    expect(read.status).toBe(200)
    expect(jsonOf(read).id).toBe(r1.id)
    expect((await get(b, `/v1/responses/${r1.id}`, KEYS.beta)).status).toBe(404)
    const items = jsonOf(await get(b, `/v1/responses/${r1.id}/input_items`))
    expect(items.data).toHaveLength(1)

    const r2 = await clientFor(b).responses.create({ model, input: "Q2", previous_response_id: r1.id })
    const r3 = await clientFor(a).responses.create({ model, input: "Q3", previous_response_id: r2.id })
    expect(r3.output_text).toBe("A3")
    expect(messagesOf(upstream.requests[2])).toEqual([
      { role: "user", content: "Q1" },
      { role: "assistant", content: "A1" },
      { role: "user", content: "Q2" },
      { role: "assistant", content: "A2" },
      { role: "user", content: "Q3" }
    ])

    expect((await del(b, `/v1/responses/${r2.id}`)).status).toBe(200)
    expect((await get(a, `/v1/responses/${r2.id}`)).status).toBe(404)
    expect((await del(a, `/v1/responses/${r2.id}`)).status).toBe(404)
    expectRefusal(await post(a, { model, input: "x", previous_response_id: r2.id }), 400, "previous_response_not_found", "previous_response_id")
    // its child still holds the whole history
    expect(jsonOf(await get(b, `/v1/responses/${r3.id}/input_items`)).data).toHaveLength(5)
  })

  it("an output item returned by one replica is referenced on the other", async () => {
    upstream.script(chatJson({ content: "remember me" }), chatJson({ content: "ok" }))
    const first = await clientFor(a).responses.create({ model, input: "hi" })
    const itemId = first.output[0].id ?? ""
    const second = await post(b, { model, input: [{ type: "item_reference", id: itemId }, { role: "user", content: "again" }] })
    expect(second.status).toBe(200)
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "assistant", content: "remember me" },
      { role: "user", content: "again" }
    ])
    // deleting the response forgets its items on every replica
    expect((await del(b, `/v1/responses/${first.id}`)).status).toBe(200)
    expectRefusal(await post(a, { model, input: [{ type: "item_reference", id: itemId }] }), 400, "item_not_found")
  })

  it("with the stored responses unreadable: the answer is still returned, reads and deletes are 503 in the OpenAI envelope", async () => {
    upstream.script(chatJson({ content: "A1" }), chatJson({ content: "A2" }))
    const kept = await clientFor(a).responses.create({ model, input: "Q1" })
    const admin = new Pg.Client({ connectionString: database.url })
    await admin.connect()
    try {
      await admin.query("ALTER TABLE responses RENAME TO responses_away")
      const answered = await post(b, { model, input: "Q2" })
      expect(answered.status).toBe(200)
      expect(jsonOf(answered).output).toHaveLength(1)
      for (const raw of [await get(a, `/v1/responses/${kept.id}`), await del(b, `/v1/responses/${kept.id}`)]) {
        expect(raw.status).toBe(503)
        expect(errorOf(raw)).toMatchObject({ code: "database_unavailable" })
      }
    } finally {
      await admin.query("ALTER TABLE responses_away RENAME TO responses")
      await admin.end()
    }
    expect((await get(b, `/v1/responses/${kept.id}`)).status).toBe(200)
  })
})
