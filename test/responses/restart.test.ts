/**
 * Stored responses survive a restart (two gateways built one after the other on the same dataDir);
 * the item_reference memory does not (spec 3, 4.1, 8: "process only").
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { clientFor, expectRefusal, gatewayDocument, jsonOf, messagesOf, post, rawRequest, records, type Json } from "./helpers.js"

/** A gateway on a dataDir the test owns: closing it leaves the directory in place. */
const buildGateway = (document: Json, dataDir: string): Promise<TestGateway> => startGateway(document, { dataDir })

let upstream: FakeUpstream
let dataDir: string
const gateways: Array<TestGateway> = []

beforeAll(async () => {
  upstream = await startFakeUpstream()
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-responses-restart-"))
})

afterAll(async () => {
  for (const g of gateways) await g.close()
  await upstream?.close()
  if (dataDir !== undefined) fs.rmSync(dataDir, { recursive: true, force: true })
})

const model = "up/gpt-x"

describe("restart on the same dataDir", () => {
  it("a chain stays retrievable, listable and chainable; item_reference to an item from before the restart is item_not_found", async () => {
    const document = gatewayDocument(upstream.url)
    upstream.onRequest((req) => chatJson({ content: `answer to ${messagesOf(req).length} messages` }))

    const before = await buildGateway(document, dataDir)
    gateways.push(before)
    const client1 = clientFor(before)
    const r1 = await client1.responses.create({ model, input: "first question", instructions: "old instructions" })
    const r2 = await client1.responses.create({ model, input: "second question", previous_response_id: r1.id })
    const stored2 = jsonOf(await rawRequest(before, "GET", `/v1/responses/${r2.id}`))
    const items2 = jsonOf(await rawRequest(before, "GET", `/v1/responses/${r2.id}/input_items?order=asc`))
    // before the restart the item is referenceable
    expect((await post(before, { model, input: [{ type: "item_reference", id: r2.output[0].id }], store: false })).status).toBe(200)
    await before.close()

    const after = await buildGateway(document, dataDir)
    gateways.push(after)
    expect(after.url).not.toBe(before.url)
    const client2 = clientFor(after)

    // retrievable, exactly as first returned
    expect(jsonOf(await rawRequest(after, "GET", `/v1/responses/${r2.id}`))).toEqual(stored2)
    expect(await client2.responses.retrieve(r1.id)).toEqual(r1)
    // listable
    expect(jsonOf(await rawRequest(after, "GET", `/v1/responses/${r2.id}/input_items?order=asc`))).toEqual(items2)
    expect(records(items2.data).map((d) => d.role)).toEqual(["user", "assistant", "user"])

    // chainable, with the whole history and without the old instructions
    upstream.requests.length = 0
    const r3 = await client2.responses.create({ model, input: "third question", previous_response_id: r2.id })
    expect(r3.previous_response_id).toBe(r2.id)
    expect(messagesOf(upstream.requests[0])).toEqual([
      { role: "user", content: "first question" },
      { role: "assistant", content: r1.output_text },
      { role: "user", content: "second question" },
      { role: "assistant", content: r2.output_text },
      { role: "user", content: "third question" }
    ])

    // the item_reference memory is process-only
    const refused = expectRefusal(await post(after, { model, input: [{ type: "item_reference", id: r2.output[0].id }] }), 400, "item_not_found")
    expect(refused.message).toContain(String(r2.output[0].id))
    // items of answers given after the restart are referenceable
    expect((await post(after, { model, input: [{ type: "item_reference", id: r3.output[0].id }] })).status).toBe(200)

    // and deletion works on records from before the restart
    await client2.responses.delete(r1.id)
    expect((await rawRequest(after, "GET", `/v1/responses/${r1.id}`)).status).toBe(404)
    expect((await rawRequest(after, "GET", `/v1/responses/${r2.id}`)).status).toBe(200)
  })
})
