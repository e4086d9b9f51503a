/**
 * Stored responses (spec 3, 4.1, 7.2): retrieve, delete, input_items, chaining through
 * previous_response_id, item_reference, per-app isolation and `store: false`.
 */
import type { FunctionTool } from "openai/resources/responses/responses"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import {
  FCO_ID,
  FC_ID,
  KEYS,
  MSG_ID,
  apiError,
  asRecord,
  bodyOf,
  clientFor,
  errorOf,
  expectRefusal,
  fieldOf,
  gatewayDocument,
  jsonOf,
  messagesOf,
  parseSse,
  post,
  rawRequest,
  records,
  terminalResponse,
  type Json,
  type Raw
} from "./helpers.js"

let upstream: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gateway = await startGateway(gatewayDocument(upstream.url))
})

afterAll(async () => {
  await gateway?.close()
  await upstream?.close()
})

beforeEach(() => upstream.reset())

const model = "up/gpt-x"
const f: FunctionTool = { type: "function", name: "f", parameters: { type: "object", properties: { n: { type: "integer" } } }, strict: null }

const get = (path: string, key: string = KEYS.alpha): Promise<Raw> => rawRequest(gateway, "GET", path, undefined, key)
const del = (path: string, key: string = KEYS.alpha): Promise<Raw> => rawRequest(gateway, "DELETE", path, undefined, key)

/** The 404 of a stored-response route: OpenAI shape, message naming the id. */
const expectMissing = (raw: Raw, id: string) => {
  expect(raw.status).toBe(404)
  const error = errorOf(raw)
  expect(error.message).toContain(id)
  return error
}

const inputItems = async (id: string, query = "", key: string = KEYS.alpha): Promise<Json> => {
  const raw = await get(`/v1/responses/${id}/input_items${query}`, key)
  if (raw.status !== 200) throw new Error(`input_items ${query}: ${raw.status} ${raw.text}`)
  return jsonOf(raw)
}

// ---------------------------------------------------------------------------------------------
// 5. Stored responses
// ---------------------------------------------------------------------------------------------

describe("stored responses: retrieve and delete", () => {
  const shapes: ReadonlyArray<{ readonly name: string; readonly key?: string; readonly reply: () => ReturnType<typeof chatJson>; readonly body: Json }> = [
    { name: "plain text", reply: () => chatJson({ content: "Plain answer", usage: { prompt: 3, completion: 2, cached: 1 } }), body: { input: "hi" } },
    {
      name: "text and two calls",
      reply: () => chatJson({ content: "Calling", toolCalls: [{ id: "c1", name: "f", arguments: '{"n":1}' }, { id: "c2", name: "f", arguments: '{"n":2}' }] }),
      body: { input: "go", tools: [f], instructions: "be quick", temperature: 0.2, metadata: { trace: "t-1" } }
    },
    {
      name: "custom call in a namespace",
      reply: () => chatJson({ toolCalls: [{ id: "c3", name: "ed__patch", arguments: '{"input":"x"}' }] }),
      body: { input: "patch", tools: [{ type: "namespace", name: "ed", description: "editor", tools: [{ type: "custom", name: "patch" }] }], tool_choice: "required" }
    },
    { name: "incomplete", reply: () => chatJson({ content: "cut", finish: "length" }), body: { input: "long", max_output_tokens: 5, parallel_tool_calls: false } },
    { name: "reasoning shown", key: KEYS.thinker, reply: () => chatJson({ reasoning: "hmm", content: "ok" }), body: { input: "think" } },
    {
      name: "structured",
      reply: () => chatJson({ toolCalls: [{ id: "r", name: "respond", arguments: '{"a":1}' }] }),
      body: { input: "json", text: { format: { type: "json_schema", name: "x", schema: { type: "object", properties: { a: { type: "integer" } } } } } }
    }
  ]

  for (const shape of shapes) {
    it(`retrieve returns the response exactly as first returned: ${shape.name}`, async () => {
      upstream.script(shape.reply())
      const key = shape.key ?? KEYS.alpha
      const created = await post(gateway, { model, ...shape.body }, key)
      expect(created.status).toBe(200)
      const first = jsonOf(created)
      const again = await get(`/v1/responses/${String(first.id)}`, key)
      expect(again.status).toBe(200)
      expect(jsonOf(again)).toEqual(first)
      // and through the SDK
      const client = clientFor(gateway, key)
      expect(await client.responses.retrieve(String(first.id))).toEqual({ ...first, output_text: expect.any(String) })
    })
  }

  it("a streamed response is stored as its terminal event's response", async () => {
    upstream.script(chatSse({ content: "streamed answer", toolCalls: [{ id: "c9", name: "f", arguments: "{}" }] }))
    const sse = parseSse((await post(gateway, { model, input: "s", tools: [f], stream: true })).text)
    const final = terminalResponse(sse)
    expect(jsonOf(await get(`/v1/responses/${String(final.id)}`))).toEqual(final)
  })

  it("delete answers {id, object: response.deleted, deleted: true}; then retrieve, delete and input_items are 404 naming the id", async () => {
    const client = clientFor(gateway)
    const res = await client.responses.create({ model, input: "to delete" })
    const raw = await del(`/v1/responses/${res.id}`)
    expect(raw.status).toBe(200)
    expect(jsonOf(raw)).toEqual({ id: res.id, object: "response.deleted", deleted: true })
    expectMissing(await get(`/v1/responses/${res.id}`), res.id)
    expectMissing(await del(`/v1/responses/${res.id}`), res.id)
    expectMissing(await get(`/v1/responses/${res.id}/input_items`), res.id)
    const sdk = await apiError(client.responses.retrieve(res.id))
    expect(sdk.status).toBe(404)
    expect(sdk.message).toContain(res.id)
    // the SDK's delete resolves on 200
    const other = await client.responses.create({ model, input: "to delete via sdk" })
    await client.responses.delete(other.id)
    expect((await get(`/v1/responses/${other.id}`)).status).toBe(404)
  })

  it("an id that never existed is 404 on every route", async () => {
    const id = `resp_${"0".repeat(32)}`
    expectMissing(await get(`/v1/responses/${id}`), id)
    expectMissing(await del(`/v1/responses/${id}`), id)
    expectMissing(await get(`/v1/responses/${id}/input_items`), id)
  })

  it("another app's id gives the same 404 as an unknown id, and chaining from it is 400 previous_response_not_found", async () => {
    const mine = await clientFor(gateway).responses.create({ model, input: "alpha's" })
    const unknown = `resp_${"f".repeat(32)}`
    const strange = errorOf(await get(`/v1/responses/${unknown}`, KEYS.beta))
    const foreign = expectMissing(await get(`/v1/responses/${mine.id}`, KEYS.beta), mine.id)
    expect({ ...foreign, message: foreign.message.replace(mine.id, "<id>") }).toEqual({ ...strange, message: strange.message.replace(unknown, "<id>") })
    expectMissing(await get(`/v1/responses/${mine.id}/input_items`, KEYS.beta), mine.id)
    expectMissing(await del(`/v1/responses/${mine.id}`, KEYS.beta), mine.id)
    expectRefusal(await post(gateway, { model, input: "x", previous_response_id: mine.id }, KEYS.beta), 400, "previous_response_not_found", "previous_response_id")
    const itemId = mine.output[0].id ?? ""
    expectRefusal(await post(gateway, { model, input: [{ type: "item_reference", id: itemId }] }, KEYS.beta), 400, "item_not_found")
    // beta's delete did not touch it
    expect((await get(`/v1/responses/${mine.id}`)).status).toBe(200)
  })

  it("store: false -> not retrievable; chaining is 400 previous_response_not_found; item_reference is 400 item_not_found", async () => {
    const client = clientFor(gateway)
    const res = await client.responses.create({ model, input: "ephemeral", store: false })
    expect(fieldOf(res, "store")).toBe(false)
    expectMissing(await get(`/v1/responses/${res.id}`), res.id)
    expectMissing(await get(`/v1/responses/${res.id}/input_items`), res.id)
    const chained = await apiError(client.responses.create({ model, input: "next", previous_response_id: res.id }))
    expect(chained.status).toBe(400)
    expect(chained.code).toBe("previous_response_not_found")
    expect(chained.param).toBe("previous_response_id")
    const ref = expectRefusal(await post(gateway, { model, input: [{ type: "item_reference", id: res.output[0].id }] }), 400, "item_not_found")
    expect(ref.message).toContain(String(res.output[0].id))
    expect(upstream.requests).toHaveLength(1)
  })

  it("GET with ?stream=true is 400 unsupported_parameter param stream; ?include= is ignored", async () => {
    const res = await clientFor(gateway).responses.create({ model, input: "hi" })
    expectRefusal(await get(`/v1/responses/${res.id}?stream=true`), 400, "unsupported_parameter", "stream")
    expect((await get(`/v1/responses/${res.id}?include=reasoning.encrypted_content`)).status).toBe(200)
  })
})

// ---------------------------------------------------------------------------------------------
// 6. Chaining
// ---------------------------------------------------------------------------------------------

describe("chaining with previous_response_id", () => {
  it("a 3-deep chain: each turn's upstream request holds the whole history in order; instructions are not carried over", async () => {
    const client = clientFor(gateway)
    upstream.script(chatJson({ content: "A1" }), chatJson({ content: "A2" }), chatJson({ content: "A3" }))
    const r1 = await client.responses.create({
      model,
      instructions: "I1",
      input: [
        { role: "developer", content: "D1" },
        { role: "user", content: "Q1" }
      ]
    })
    const r2 = await client.responses.create({ model, instructions: "I2", previous_response_id: r1.id, input: "Q2" })
    const r3 = await client.responses.create({
      model,
      previous_response_id: r2.id,
      input: [
        { role: "system", content: "S3" },
        { role: "user", content: "Q3" }
      ]
    })
    expect([r1.output_text, r2.output_text, r3.output_text]).toEqual(["A1", "A2", "A3"])
    expect(r2.previous_response_id).toBe(r1.id)
    expect(r3.previous_response_id).toBe(r2.id)
    expect(r3.instructions).toBeNull()
    const [m1, m2, m3] = upstream.requests.map(messagesOf)
    expect(m1).toEqual([
      { role: "system", content: "I1\n\nD1" },
      { role: "user", content: "Q1" }
    ])
    expect(m2).toEqual([
      { role: "system", content: "I2\n\nD1" },
      { role: "user", content: "Q1" },
      { role: "assistant", content: "A1" },
      { role: "user", content: "Q2" }
    ])
    expect(m3).toEqual([
      { role: "system", content: "D1\n\nS3" },
      { role: "user", content: "Q1" },
      { role: "assistant", content: "A1" },
      { role: "user", content: "Q2" },
      { role: "assistant", content: "A2" },
      { role: "user", content: "Q3" }
    ])
  })

  it("a function_call answered with function_call_output in the next turn reaches upstream as a tool message", async () => {
    const client = clientFor(gateway)
    upstream.script(chatJson({ content: "Let me look.", toolCalls: [{ id: "call_42", name: "f", arguments: '{"n":42}' }] }), chatJson({ content: "It is 42." }))
    const r1 = await client.responses.create({ model, input: "what is n?", tools: [f] })
    const call = r1.output.find((o) => o.type === "function_call")
    if (call?.type !== "function_call") throw new Error("no function call")
    const r2 = await client.responses.create({
      model,
      tools: [f],
      previous_response_id: r1.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "42" }]
    })
    expect(r2.output_text).toBe("It is 42.")
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "user", content: "what is n?" },
      { role: "assistant", content: "Let me look.", tool_calls: [{ id: "call_42", type: "function", function: { name: "f", arguments: '{"n":42}' } }] },
      { role: "tool", tool_call_id: "call_42", content: "42" }
    ])
    // tools are the new request's own: without them the upstream is offered none
    upstream.script(chatJson({ content: "done" }))
    await client.responses.create({ model, previous_response_id: r2.id, input: "thanks" })
    expect(bodyOf(upstream.requests[2]).tools).toBeUndefined()
  })

  it("after deleting the middle response its child still chains with the whole history; the deleted one cannot be chained", async () => {
    const client = clientFor(gateway)
    upstream.onRequest((req) => chatJson({ content: `answer ${messagesOf(req).length}` }))
    const r1 = await client.responses.create({ model, input: "one" })
    const r2 = await client.responses.create({ model, input: "two", previous_response_id: r1.id })
    const r3 = await client.responses.create({ model, input: "three", previous_response_id: r2.id })
    await client.responses.delete(r2.id)
    const r4 = await client.responses.create({ model, input: "four", previous_response_id: r3.id })
    expect(r4.previous_response_id).toBe(r3.id)
    expect(messagesOf(upstream.requests[3]).map((m) => m.content)).toEqual(["one", r1.output_text, "two", r2.output_text, "three", r3.output_text, "four"])
    const gone = await apiError(client.responses.create({ model, input: "x", previous_response_id: r2.id }))
    expect(gone.status).toBe(400)
    expect(gone.code).toBe("previous_response_not_found")
    // the chain's input items survive the deletion of its middle
    const listed = records((await inputItems(r4.id, "?order=asc")).data)
    expect(listed).toHaveLength(7)
  })

  it("namespaced function and custom calls in a stored output are answered in the next turn under their flattened names", async () => {
    const tools = [
      { type: "namespace", name: "crm", description: "crm", tools: [{ type: "function", name: "lookup", parameters: { type: "object", properties: {} } }] },
      { type: "namespace", name: "ed", description: "editor", tools: [{ type: "custom", name: "patch" }] }
    ]
    upstream.script(
      chatJson({
        toolCalls: [
          { id: "call_l", name: "crm__lookup", arguments: '{"id":1}' },
          { id: "call_p", name: "ed__patch", arguments: '{"input":"diff"}' }
        ]
      }),
      chatJson({ content: "all done" })
    )
    const r1 = jsonOf(await post(gateway, { model, input: "do both", tools }))
    expect(records(r1.output).map((o) => [o.type, o.name, o.namespace])).toEqual([
      ["function_call", "lookup", "crm"],
      ["custom_tool_call", "patch", "ed"]
    ])
    const r2 = await post(gateway, {
      model,
      tools,
      previous_response_id: r1.id,
      input: [
        { type: "function_call_output", call_id: "call_l", output: "found" },
        { type: "custom_tool_call_output", call_id: "call_p", output: "patched" }
      ]
    })
    expect(r2.status).toBe(200)
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "user", content: "do both" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_l", type: "function", function: { name: "crm__lookup", arguments: '{"id":1}' } },
          { id: "call_p", type: "function", function: { name: "ed__patch", arguments: JSON.stringify({ input: "diff" }) } }
        ]
      },
      { role: "tool", tool_call_id: "call_l", content: "found" },
      { role: "tool", tool_call_id: "call_p", content: "patched" }
    ])
  })

  it("a shown reasoning item is not replayed to the model nor listed as input of the next turn", async () => {
    const thinker = clientFor(gateway, KEYS.thinker)
    upstream.script(chatJson({ reasoning: "secret chain of thought", content: "A1" }), chatJson({ content: "A2" }))
    const r1 = await thinker.responses.create({ model, input: "Q1" })
    expect(r1.output.map((o) => o.type)).toEqual(["reasoning", "message"])
    const r2 = await thinker.responses.create({ model, input: "Q2", previous_response_id: r1.id })
    expect(upstream.requests[1].rawBody).not.toContain("secret chain of thought")
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "user", content: "Q1" },
      { role: "assistant", content: "A1" },
      { role: "user", content: "Q2" }
    ])
    const listed = records((await inputItems(r2.id, "?order=asc", KEYS.thinker)).data)
    expect(listed.map((d) => d.type)).toEqual(["message", "message", "message"])
  })

  it("the model may change between turns", async () => {
    const client = clientFor(gateway)
    const r1 = await client.responses.create({ model: "up/model-a", input: "one" })
    const r2 = await client.responses.create({ model: "up/model-b", input: "two", previous_response_id: r1.id })
    expect(r2.model).toBe("up/model-b")
    expect(upstream.requests.map((r) => bodyOf(r).model)).toEqual(["model-a", "model-b"])
    expect(messagesOf(upstream.requests[1])).toHaveLength(3)
  })

  it("an unknown previous_response_id is 400 previous_response_not_found before any upstream call", async () => {
    expectRefusal(await post(gateway, { model, input: "x", previous_response_id: `resp_${"a".repeat(32)}` }), 400, "previous_response_not_found", "previous_response_id")
    expectRefusal(await post(gateway, { model, input: "x", previous_response_id: "not/an id" }), 400, "previous_response_not_found", "previous_response_id")
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// 7. input_items
// ---------------------------------------------------------------------------------------------

describe("input_items", () => {
  const input: ReadonlyArray<Json> = [
    { role: "user", content: "first" },
    { type: "message", role: "assistant", content: "an earlier answer" },
    { type: "function_call", call_id: "call_a", name: "f", arguments: "{}" },
    { type: "function_call_output", call_id: "call_a", output: "done" },
    { type: "message", role: "developer", content: [{ type: "input_text", text: "dev note" }] },
    { type: "message", role: "user", id: "msg_caller_1", content: [{ type: "input_text", text: "second" }] }
  ]

  let response: { readonly id: string }
  beforeAll(async () => {
    const raw = await post(gateway, { model, input, tools: [f] })
    if (raw.status !== 200) throw new Error(`create: ${raw.status} ${raw.text}`)
    response = { id: String(jsonOf(raw).id) }
  })

  it("every item is listed in full shape with an id (generated msg_/fc_/fco_ or the caller's), oldest first with order=asc", async () => {
    const list = await inputItems(response.id, "?order=asc")
    expect(list.object).toBe("list")
    expect(list.has_more).toBe(false)
    const data = records(list.data)
    expect(data).toEqual([
      { id: expect.stringMatching(MSG_ID), type: "message", role: "user", content: [{ type: "input_text", text: "first" }] },
      { id: expect.stringMatching(MSG_ID), type: "message", role: "assistant", content: [{ type: "output_text", text: "an earlier answer" }] },
      { id: expect.stringMatching(FC_ID), type: "function_call", call_id: "call_a", name: "f", arguments: "{}" },
      { id: expect.stringMatching(FCO_ID), type: "function_call_output", call_id: "call_a", output: "done" },
      { id: expect.stringMatching(MSG_ID), type: "message", role: "developer", content: [{ type: "input_text", text: "dev note" }] },
      { id: "msg_caller_1", type: "message", role: "user", content: [{ type: "input_text", text: "second" }] }
    ])
    expect(list.first_id).toBe(data[0].id)
    expect(list.last_id).toBe("msg_caller_1")
    expect(new Set(data.map((d) => d.id)).size).toBe(data.length)
  })

  it("default order is desc (newest first); the SDK lists the same", async () => {
    const asc = records((await inputItems(response.id, "?order=asc")).data)
    const desc = await inputItems(response.id)
    expect(records(desc.data)).toEqual([...asc].reverse())
    expect(desc.first_id).toBe("msg_caller_1")
    const viaSdk = []
    for await (const item of clientFor(gateway).responses.inputItems.list(response.id, { order: "asc" })) viaSdk.push(item)
    expect(viaSdk).toEqual(asc)
  })

  it("limit pages with has_more, first_id and last_id; after continues in the listing order", async () => {
    for (const order of ["asc", "desc"]) {
      const all = records((await inputItems(response.id, `?order=${order}`)).data).map((d) => String(d.id))
      const seen: Array<string> = []
      let after: string | undefined
      for (let page = 0; page < 10; page++) {
        const list = await inputItems(response.id, `?order=${order}&limit=4${after !== undefined ? `&after=${after}` : ""}`)
        const ids = records(list.data).map((d) => String(d.id))
        expect(ids.length).toBeLessThanOrEqual(4)
        expect(list.first_id).toBe(ids[0])
        expect(list.last_id).toBe(ids[ids.length - 1])
        seen.push(...ids)
        if (list.has_more !== true) break
        after = String(list.last_id)
      }
      expect(seen).toEqual(all)
    }
    const one = await inputItems(response.id, "?limit=1")
    expect(records(one.data)).toHaveLength(1)
    expect(one.has_more).toBe(true)
    const full = await inputItems(response.id, "?limit=100")
    expect(records(full.data)).toHaveLength(input.length)
    expect(full.has_more).toBe(false)
    const exact = await inputItems(response.id, `?limit=${input.length}`)
    expect(exact.has_more).toBe(false)
    const last = await inputItems(response.id, `?order=asc&after=msg_caller_1`)
    expect(last).toMatchObject({ data: [], has_more: false })
  })

  it("bad limit, order or after are 400 naming the parameter", async () => {
    for (const limit of ["0", "101", "x", "1.5", "-1", ""]) {
      const raw = await get(`/v1/responses/${response.id}/input_items?limit=${limit}`)
      expect(raw.status).toBe(400)
      expect(errorOf(raw).param).toBe("limit")
    }
    const order = await get(`/v1/responses/${response.id}/input_items?order=sideways`)
    expect(order.status).toBe(400)
    expect(errorOf(order).param).toBe("order")
    const after = await get(`/v1/responses/${response.id}/input_items?after=msg_nope`)
    expect(after.status).toBe(400)
    expect(errorOf(after).param).toBe("after")
  })

  it("a chained response lists the earlier input and output first (history included)", async () => {
    const client = clientFor(gateway)
    upstream.script(chatJson({ content: "R1" }), chatJson({ content: "R2" }))
    const r1 = await client.responses.create({ model, input: "u1" })
    const r2 = await client.responses.create({ model, input: "u2", previous_response_id: r1.id })
    const data = records((await inputItems(r2.id, "?order=asc")).data)
    expect(data.map((d) => [d.role, records(d.content)[0].text])).toEqual([
      ["user", "u1"],
      ["assistant", "R1"],
      ["user", "u2"]
    ])
    // the history's answer keeps the id of the output item it was
    expect(data[1].id).toBe(r1.output[0].id)
    expect(data[1]).toEqual({ id: r1.output[0].id, type: "message", role: "assistant", content: [{ type: "output_text", text: "R1" }] })
  })
})

// ---------------------------------------------------------------------------------------------
// 8. item_reference
// ---------------------------------------------------------------------------------------------

describe("item_reference", () => {
  it("an output item of an earlier answer resolves by id and reaches upstream as that item", async () => {
    const client = clientFor(gateway)
    upstream.script(chatJson({ content: "Let me check.", toolCalls: [{ id: "call_9", name: "f", arguments: '{"n":9}' }] }), chatJson({ content: "Nine." }))
    const r1 = await client.responses.create({ model, input: "n?", tools: [f] })
    const [message, call] = r1.output
    const r2 = await post(gateway, {
      model,
      tools: [f],
      input: [
        { role: "user", content: "n?" },
        { type: "item_reference", id: message.id },
        { type: "item_reference", id: call.id },
        { type: "function_call_output", call_id: "call_9", output: "9" }
      ]
    })
    expect(r2.status).toBe(200)
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "user", content: "n?" },
      { role: "assistant", content: "Let me check.", tool_calls: [{ id: "call_9", type: "function", function: { name: "f", arguments: '{"n":9}' } }] },
      { role: "tool", tool_call_id: "call_9", content: "9" }
    ])
    // the referenced items are listed as themselves
    const listed = records((await inputItems(String(jsonOf(r2).id), "?order=asc")).data)
    expect(listed.map((d) => d.id)).toContain(message.id)
    expect(listed.find((d) => d.id === call.id)).toMatchObject({ type: "function_call", call_id: "call_9", name: "f", arguments: '{"n":9}' })
  })

  it("a streamed answer's items can be referenced", async () => {
    upstream.script(chatSse({ content: "streamed" }), chatJson({ content: "ok" }))
    const sse = parseSse((await post(gateway, { model, input: "s", stream: true })).text)
    const item = records(terminalResponse(sse).output)[0]
    expect((await post(gateway, { model, input: [{ type: "item_reference", id: item.id }, { role: "user", content: "more" }] })).status).toBe(200)
    expect(messagesOf(upstream.requests[1])).toEqual([
      { role: "assistant", content: "streamed" },
      { role: "user", content: "more" }
    ])
  })

  it("an unknown id is 400 item_not_found; so is an item of a deleted response", async () => {
    const error = expectRefusal(await post(gateway, { model, input: [{ type: "item_reference", id: "msg_unknown" }] }), 400, "item_not_found")
    expect(error.param).toBe("input.0.id")
    expect(error.message).toContain("msg_unknown")
    const client = clientFor(gateway)
    const res = await client.responses.create({ model, input: "soon deleted" })
    await client.responses.delete(res.id)
    expectRefusal(await post(gateway, { model, input: [{ role: "user", content: "x" }, { type: "item_reference", id: res.output[0].id }] }), 400, "item_not_found", "input.1.id")
    expect(upstream.requests).toHaveLength(1)
  })

  it("input item with a caller id is kept; an item referencing an input (not output) id is not found", async () => {
    const res = jsonOf(await post(gateway, { model, input: [{ type: "message", role: "user", id: "msg_mine_7", content: "hello" }] }))
    expect(res.status).toBe("completed")
    expectRefusal(await post(gateway, { model, input: [{ type: "item_reference", id: "msg_mine_7" }] }), 400, "item_not_found")
    expect(asRecord(records((await inputItems(String(res.id))).data)[0]).id).toBe("msg_mine_7")
  })
})
