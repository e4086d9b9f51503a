/**
 * Responses-style answers through the official `openai` SDK and raw HTTP (spec 2.1, 4.0, 4.1, 6.1):
 * response object fields, output item shapes, ids, headers, and the exact event order of a stream,
 * its terminal events and its failures.
 */
import type { FunctionTool, Response, ResponseStreamEvent, Tool } from "openai/resources/responses/responses"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, chunks, openAiError, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import {
  CTC_ID,
  FC_ID,
  KEYS,
  MSG_ID,
  RESP_ID,
  SESSION,
  apiError,
  asRecord,
  bodyOf,
  clientFor,
  customCallEvents,
  expectRefusal,
  expectWellFormedStream,
  fieldOf,
  functionCallEvents,
  gatewayDocument,
  jsonOf,
  messagesOf,
  parseSse,
  post,
  rawRequest,
  records,
  terminalResponse,
  textEvents,
  withoutParsed,
  typesOf
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

const weather: FunctionTool = {
  type: "function",
  name: "get_weather",
  description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: null
}
const time: FunctionTool = { type: "function", name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } }, strict: null }
const patchTool: Tool = { type: "custom", name: "apply_patch", description: "Apply a patch" }

const usage = { prompt: 12, completion: 7, cached: 4, reasoning: 2 }
const wireUsage = {
  input_tokens: 12,
  input_tokens_details: { cached_tokens: 4 },
  output_tokens: 7,
  output_tokens_details: { reasoning_tokens: 2 },
  total_tokens: 19
}

const weatherArgs = JSON.stringify({ city: "Paris" })
const timeArgs = JSON.stringify({ tz: "Europe/Paris" })

// ---------------------------------------------------------------------------------------------
// 1. Answers: fields, shapes, ids, headers
// ---------------------------------------------------------------------------------------------

describe("responses: non-stream answers", () => {
  it("text answer: output_text, one message item with one output_text part, usage, echoes, ids, session header", async () => {
    upstream.script(chatJson({ content: "Hello there, human", usage }))
    const client = clientFor(gateway)
    const { data, response } = await client.responses.create({ model: "up/gpt-x", input: "hi", instructions: "be brief" }).withResponse()

    expect(data.id).toMatch(RESP_ID)
    expect(data.object).toBe("response")
    expect(data.status).toBe("completed")
    expect(data.model).toBe("up/gpt-x")
    expect(data.output_text).toBe("Hello there, human")
    expect(data.output).toHaveLength(1)
    const message = data.output[0]
    expect(message).toMatchObject({ type: "message", role: "assistant", status: "completed" })
    if (message.type !== "message") throw new Error("not a message")
    expect(message.id).toMatch(MSG_ID)
    expect(message.content).toEqual([{ type: "output_text", text: "Hello there, human", annotations: [] }])
    expect(data.usage).toEqual(wireUsage)
    expect(fieldOf(data, "store")).toBe(true)
    expect(data.parallel_tool_calls).toBe(true)
    expect(data.previous_response_id).toBeNull()
    expect(data.incomplete_details).toBeNull()
    expect(data.error).toBeNull()
    expect(data.instructions).toBe("be brief")
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(response.headers.get("x-gateway-parallel-tools")).toBeNull()
    expect(response.headers.get("x-gateway-dropped-tools")).toBeNull()

    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0].path).toBe("/v1/chat/completions")
    expect(upstream.requests[0].headers.authorization).toBe("Bearer upstream-secret")
    const sent = bodyOf(upstream.requests[0])
    expect(sent.model).toBe("gpt-x")
    expect(sent.stream).toBeUndefined()
    expect(sent.tools).toBeUndefined()
    expect(messagesOf(upstream.requests[0])).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "hi" }
    ])
  })

  it("function_call and custom_tool_call items: ids, call_id, name, arguments / input; no message without text", async () => {
    upstream.script(
      chatJson({
        toolCalls: [
          { id: "call_w1", name: "get_weather", arguments: weatherArgs },
          { id: "call_p1", name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch\n*** End Patch" }) }
        ],
        usage
      })
    )
    const res = await clientFor(gateway).responses.create({ model: "up/gpt-x", input: "go", tools: [weather, patchTool] })
    expect(res.status).toBe("completed")
    expect(res.output_text).toBe("")
    expect(res.output).toHaveLength(2)
    const [call, custom] = res.output
    expect(call).toEqual({ id: expect.stringMatching(FC_ID), type: "function_call", status: "completed", call_id: "call_w1", name: "get_weather", arguments: weatherArgs })
    expect(custom).toEqual({
      id: expect.stringMatching(CTC_ID),
      type: "custom_tool_call",
      status: "completed",
      call_id: "call_p1",
      name: "apply_patch",
      input: "*** Begin Patch\n*** End Patch"
    })
    expect(res.usage).toEqual(wireUsage)
    expect(res.tools).toEqual([weather, patchTool])
  })

  it("text then a call: the message comes first, then the call", async () => {
    upstream.script(chatJson({ content: "Let me check.", toolCalls: [{ id: "call_t", name: "get_time", arguments: timeArgs }] }))
    const res = await clientFor(gateway).responses.create({ model: "up/gpt-x", input: "time?", tools: [time] })
    expect(res.output.map((o) => o.type)).toEqual(["message", "function_call"])
    expect(res.output_text).toBe("Let me check.")
  })

  it("store and parallel_tool_calls echo the request (true when omitted); previous_response_id is echoed", async () => {
    const client = clientFor(gateway)
    const first = await client.responses.create({ model: "up/gpt-x", input: "one" })
    expect(fieldOf(first, "store")).toBe(true)
    expect(first.parallel_tool_calls).toBe(true)
    const second = await client.responses.create({ model: "up/gpt-x", input: "two", previous_response_id: first.id, store: false, parallel_tool_calls: false })
    expect(fieldOf(second, "store")).toBe(false)
    expect(second.parallel_tool_calls).toBe(false)
    expect(second.previous_response_id).toBe(first.id)
    const third = await client.responses.create({ model: "up/gpt-x", input: "three", store: true, parallel_tool_calls: true })
    expect(fieldOf(third, "store")).toBe(true)
    expect(third.parallel_tool_calls).toBe(true)
    expect(new Set([first.id, second.id, third.id]).size).toBe(3)
  })

  it("every answer gets its own response id, item ids and session id", async () => {
    const client = clientFor(gateway)
    const answers = await Promise.all(
      [1, 2, 3].map(async (n) => {
        const { data, response } = await client.responses.create({ model: "up/gpt-x", input: `q${n}` }).withResponse()
        return { data, session: response.headers.get("x-gateway-session") }
      })
    )
    expect(new Set(answers.map((a) => a.data.id)).size).toBe(3)
    expect(new Set(answers.map((a) => a.data.output[0]?.id)).size).toBe(3)
    expect(new Set(answers.map((a) => a.session)).size).toBe(3)
    for (const a of answers) expect(a.session).toMatch(SESSION)
  })

  it("max_output_tokens, temperature and top_p are passed to the model and echoed", async () => {
    const res = await clientFor(gateway).responses.create({ model: "up/gpt-x", input: "hi", max_output_tokens: 33, temperature: 0.5, top_p: 0.9 })
    expect(res.max_output_tokens).toBe(33)
    expect(res.temperature).toBe(0.5)
    expect(res.top_p).toBe(0.9)
    expect(bodyOf(upstream.requests[0])).toMatchObject({ max_tokens: 33, temperature: 0.5, top_p: 0.9 })
  })
})

describe("responses: input content reaching the upstream", () => {
  const png = "data:image/png;base64,iVBORw0KGgo="
  const pdf = "data:application/pdf;base64,JVBERi0xLjQK"

  it("input_text, input_image (URL and data URL), chat-style image_url and input_file file_data parts", async () => {
    const raw = await post(gateway, {
      model: "up/gpt-x",
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "look at these" },
            { type: "input_image", image_url: png, detail: "high" },
            { type: "image_url", image_url: { url: "https://example.com/cat.png" } },
            { type: "input_file", file_data: pdf, filename: "doc.pdf" }
          ]
        }
      ]
    })
    expect(raw.status).toBe(200)
    expect(messagesOf(upstream.requests[0])).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "look at these" },
          { type: "image_url", image_url: { url: png, detail: "high" } },
          { type: "image_url", image_url: { url: "https://example.com/cat.png" } },
          { type: "file", file: { file_data: pdf, filename: "doc.pdf" } }
        ]
      }
    ])
  })

  it("assistant output_text parts and system/developer items: assistant turns and the system prompt after instructions", async () => {
    await post(gateway, {
      model: "up/gpt-x",
      instructions: "INSTR",
      input: [
        { role: "system", content: "SYS" },
        { role: "user", content: [{ type: "input_text", text: "q" }] },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "a" }] },
        { role: "developer", content: [{ type: "input_text", text: "DEV" }] },
        { role: "user", content: "q2" }
      ]
    })
    expect(messagesOf(upstream.requests[0])).toEqual([
      { role: "system", content: "INSTR\n\nSYS\n\nDEV" },
      { role: "user", content: "q" },
      { role: "assistant", content: "a" },
      { role: "user", content: "q2" }
    ])
  })

  it("reasoning input items are accepted and dropped", async () => {
    const raw = await post(gateway, {
      model: "up/gpt-x",
      input: [
        { role: "user", content: "q" },
        { type: "reasoning", id: "rs_old", summary: [{ type: "summary_text", text: "earlier thoughts" }] },
        { type: "message", role: "assistant", content: "a" },
        { role: "user", content: "q2" }
      ]
    })
    expect(raw.status).toBe(200)
    expect(upstream.requests[0].rawBody).not.toContain("earlier thoughts")
    expect(messagesOf(upstream.requests[0])).toHaveLength(3)
  })
})

describe("responses: stream through the SDK", () => {
  it("create(stream) yields the 6.1 events; the completed response carries output, usage and echoes; session header", async () => {
    upstream.script(chatSse({ content: "Streaming hello to you", usage, split: 6, toolCalls: [{ id: "call_w", name: "get_weather", arguments: weatherArgs }] }))
    const client = clientFor(gateway)
    const { data: stream, response } = await client.responses
      .create({ model: "up/gpt-x", input: "hi", tools: [weather], stream: true, store: false, parallel_tool_calls: true })
      .withResponse()
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const events: Array<ResponseStreamEvent> = []
    for await (const event of stream) events.push(event)
    expect(events[0].type).toBe("response.created")
    expect(events[1].type).toBe("response.in_progress")
    const last = events[events.length - 1]
    if (last.type !== "response.completed") throw new Error(`last event is ${last.type}`)
    const done = last.response
    expect(done.id).toMatch(RESP_ID)
    expect(done.status).toBe("completed")
    expect(fieldOf(done, "store")).toBe(false)
    expect(done.parallel_tool_calls).toBe(true)
    expect(done.usage).toEqual(wireUsage)
    expect(done.output.map((o) => o.type)).toEqual(["message", "function_call"])
    expect(done.output[1]).toMatchObject({ type: "function_call", call_id: "call_w", name: "get_weather", arguments: weatherArgs, id: expect.stringMatching(FC_ID) })
    const text = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : [])).join("")
    expect(text).toBe("Streaming hello to you")
    for (const e of events) if (e.type === "response.created" || e.type === "response.in_progress") expect(e.response.id).toBe(done.id)
    expect(bodyOf(upstream.requests[0])).toMatchObject({ stream: true, stream_options: { include_usage: true } })
  })

  it("responses.stream(): finalResponse equals the stored response; previous_response_id echoed in the stream", async () => {
    const client = clientFor(gateway)
    const first = await client.responses.create({ model: "up/gpt-x", input: "first" })
    upstream.onRequest(() => chatSse({ content: "A streamed follow-up answer", split: 4 }))
    const runner = client.responses.stream({ model: "up/gpt-x", input: "second", previous_response_id: first.id })
    const deltas: Array<string> = []
    runner.on("response.output_text.delta", (e) => deltas.push(e.delta))
    const final: Response = await runner.finalResponse()
    expect(final.output_text).toBe("A streamed follow-up answer")
    expect(deltas.join("")).toBe("A streamed follow-up answer")
    expect(final.previous_response_id).toBe(first.id)
    const stored = await client.responses.retrieve(final.id)
    // the SDK adds client-side `parsed` fields to a streamed final response; the rest must be equal
    expect(withoutParsed(stored)).toEqual(withoutParsed(final))
  })
})

// ---------------------------------------------------------------------------------------------
// 2. The exact event order of 6.1 on raw SSE
// ---------------------------------------------------------------------------------------------

describe("responses: raw SSE event order (6.1)", () => {
  it("text: created, in_progress, message events with one delta per model chunk, completed; sequence 0..n; no [DONE]", async () => {
    upstream.script(chatSse({ content: "Hello there friend", split: 5, usage }))
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    expect(raw.status).toBe(200)
    expect(raw.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(raw.headers.get("x-gateway-session")).toMatch(SESSION)
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    // "Hello there friend" in 5-character chunks: 4 model text chunks
    expect(typesOf(sse.events)).toEqual(["response.created", "response.in_progress", ...textEvents(4), "response.completed"])
    const [created, inProgress] = sse.events
    const createdResponse = asRecord(created.data.response)
    expect(createdResponse).toMatchObject({ object: "response", status: "in_progress", output: [], usage: null })
    expect(asRecord(inProgress.data.response).id).toBe(createdResponse.id)
    const added = asRecord(sse.events[2].data.item)
    expect(added).toMatchObject({ type: "message", role: "assistant", status: "in_progress", content: [] })
    expect(added.id).toMatch(MSG_ID)
    const deltas = sse.events.filter((e) => e.event === "response.output_text.delta")
    expect(deltas.map((e) => e.data.delta)).toEqual(["Hello", " ther", "e fri", "end"])
    for (const e of sse.events.slice(2, -1)) {
      expect(e.data.output_index).toBe(0)
      if (e.data.item_id !== undefined) expect(e.data.item_id).toBe(added.id)
    }
    expect(sse.events.find((e) => e.event === "response.output_text.done")?.data.text).toBe("Hello there friend")
    expect(sse.events.find((e) => e.event === "response.content_part.done")?.data.part).toEqual({ type: "output_text", text: "Hello there friend", annotations: [] })
    const final = terminalResponse(sse)
    expect(final).toMatchObject({ id: createdResponse.id, status: "completed", usage: wireUsage, incomplete_details: null })
    expect(final.output).toEqual([{ id: added.id, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hello there friend", annotations: [] }] }])
    expect(asRecord(sse.events.find((e) => e.event === "response.output_item.done")?.data.item)).toEqual(records(final.output)[0])
  })

  it("text + two function calls: the message closes, then per call added, one full-arguments delta, done, item done", async () => {
    upstream.script(
      chatSse({
        content: "Checking both",
        split: 7,
        toolCalls: [
          { id: "call_w", name: "get_weather", arguments: weatherArgs },
          { id: "call_t", name: "get_time", arguments: timeArgs }
        ]
      })
    )
    const raw = await post(gateway, { model: "up/gpt-x", input: "weather and time", tools: [weather, time], stream: true })
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events)).toEqual([
      "response.created",
      "response.in_progress",
      ...textEvents(2),
      ...functionCallEvents,
      ...functionCallEvents,
      "response.completed"
    ])
    const calls = sse.events.filter((e) => e.event.startsWith("response.function_call_arguments") || (e.event.startsWith("response.output_item") && asRecord(e.data.item).type === "function_call"))
    expect(calls).toHaveLength(8)
    const [added1, delta1, done1, itemDone1, added2, delta2, done2, itemDone2] = calls
    expect(asRecord(added1.data.item)).toMatchObject({ type: "function_call", call_id: "call_w", name: "get_weather", arguments: "", status: "in_progress" })
    expect(added1.data.output_index).toBe(1)
    expect(delta1.data).toMatchObject({ delta: weatherArgs, output_index: 1, item_id: asRecord(added1.data.item).id })
    expect(done1.data).toMatchObject({ arguments: weatherArgs, name: "get_weather", output_index: 1 })
    expect(asRecord(itemDone1.data.item)).toMatchObject({ type: "function_call", call_id: "call_w", arguments: weatherArgs, status: "completed" })
    expect(asRecord(added2.data.item)).toMatchObject({ call_id: "call_t", name: "get_time" })
    expect(added2.data.output_index).toBe(2)
    expect(delta2.data.delta).toBe(timeArgs)
    expect(done2.data.arguments).toBe(timeArgs)
    expect(asRecord(itemDone2.data.item).id).toMatch(FC_ID)
    const final = terminalResponse(sse)
    expect(records(final.output).map((o) => o.type)).toEqual(["message", "function_call", "function_call"])
    expect(records(final.output)[2]).toEqual(asRecord(itemDone2.data.item))
  })

  it("a custom tool call: custom_tool_call_input.delta and .done with the whole input instead of arguments events", async () => {
    const input = "*** Begin Patch\n*** Update File: a.txt\n-old\n+new\n*** End Patch"
    upstream.script(chatSse({ toolCalls: [{ id: "call_p", name: "apply_patch", arguments: JSON.stringify({ input }) }] }))
    const raw = await post(gateway, { model: "up/gpt-x", input: "patch it", tools: [patchTool], stream: true })
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events)).toEqual(["response.created", "response.in_progress", ...customCallEvents, "response.completed"])
    const [added, delta, done, itemDone] = sse.events.slice(2, 6)
    expect(asRecord(added.data.item)).toMatchObject({ type: "custom_tool_call", call_id: "call_p", name: "apply_patch", input: "" })
    expect(asRecord(added.data.item).id).toMatch(CTC_ID)
    expect(delta.data.delta).toBe(input)
    expect(done.data.input).toBe(input)
    expect(asRecord(itemDone.data.item)).toEqual({ id: asRecord(added.data.item).id, type: "custom_tool_call", status: "completed", call_id: "call_p", name: "apply_patch", input })
    expect(terminalResponse(sse).output).toEqual([asRecord(itemDone.data.item)])
  })

  it("reasoning with reasoningOutput: a reasoning item (summary_text) comes before the message", async () => {
    upstream.script(chatSse({ reasoning: "Think first", content: "Then answer", split: 6 }))
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true }, KEYS.thinker)
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
      "response.output_item.done",
      ...textEvents(2),
      "response.completed"
    ])
    expect(asRecord(sse.events[2].data.item).type).toBe("reasoning")
    const final = terminalResponse(sse)
    const output = records(final.output)
    expect(output.map((o) => o.type)).toEqual(["reasoning", "message"])
    expect(output[0].summary).toEqual([{ type: "summary_text", text: "Think first" }])
    expect(output[1].content).toEqual([{ type: "output_text", text: "Then answer", annotations: [] }])
  })

  it("reasoning with reasoningOutput (non-stream; with or without reasoning.summary) and without it (no reasoning item)", async () => {
    upstream.onRequest(() => chatJson({ reasoning: "Private thoughts", content: "Answer" }))
    const thinker = clientFor(gateway, KEYS.thinker)
    for (const reasoning of [undefined, { summary: "auto" as const }]) {
      const res = await thinker.responses.create({ model: "up/gpt-x", input: "hi", ...(reasoning !== undefined ? { reasoning } : {}) })
      expect(res.output.map((o) => o.type)).toEqual(["reasoning", "message"])
      expect(res.output[0]).toMatchObject({ type: "reasoning", summary: [{ type: "summary_text", text: "Private thoughts" }] })
      expect(res.output_text).toBe("Answer")
    }
    const plain = await clientFor(gateway).responses.create({ model: "up/gpt-x", input: "hi" })
    expect(plain.output.map((o) => o.type)).toEqual(["message"])
    upstream.onRequest(() => chatSse({ reasoning: "Private thoughts", content: "Answer" }))
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events).filter((t) => t.includes("reasoning"))).toEqual([])
    expect(records(terminalResponse(sse).output).map((o) => o.type)).toEqual(["message"])
    // the hidden reasoning keeps the connection alive with an SSE comment
    expect(raw.text.split("\n").some((line) => line.startsWith(":"))).toBe(true)
  })

  for (const [finish, reason] of [
    ["length", "max_output_tokens"],
    ["content_filter", "content_filter"]
  ] as const) {
    it(`finish_reason ${finish}: response.incomplete with incomplete_details.reason ${reason}; the message is incomplete (stream and not)`, async () => {
      upstream.onRequest((req) => (bodyOf(req).stream === true ? chatSse({ content: "cut sho", finish, split: 4 }) : chatJson({ content: "cut sho", finish })))
      const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true, max_output_tokens: 16 })
      const sse = parseSse(raw.text)
      expectWellFormedStream(sse)
      expect(typesOf(sse.events)).toEqual(["response.created", "response.in_progress", ...textEvents(2), "response.incomplete"])
      const final = terminalResponse(sse)
      expect(final.status).toBe("incomplete")
      expect(final.incomplete_details).toEqual({ reason })
      expect(records(final.output)[0]).toMatchObject({ type: "message", status: "incomplete" })
      expect(asRecord(sse.events.find((e) => e.event === "response.output_item.done")?.data.item).status).toBe("incomplete")

      const whole = await clientFor(gateway).responses.create({ model: "up/gpt-x", input: "hi", max_output_tokens: 16 })
      expect(whole.status).toBe("incomplete")
      expect(whole.incomplete_details).toEqual({ reason })
      expect(whole.output[0]).toMatchObject({ type: "message", status: "incomplete" })
      expect(whole.output_text).toBe("cut sho")
    })
  }

  for (const [finish, reason] of [
    ["length", "max_output_tokens"],
    ["content_filter", "content_filter"]
  ] as const) {
    it(`an answer of only a tool call ending ${finish} (mock provider): status incomplete with incomplete_details, stream and not`, async () => {
      const input = `::text\n::tool get_weather {}\n::finish ${finish}`
      const whole = jsonOf(await post(gateway, { model: "mock/any", input, tools: [weather] }))
      const sse = parseSse((await post(gateway, { model: "mock/any", input, tools: [weather], stream: true })).text)
      expect(typesOf(sse.events).at(-1)).toBe("response.incomplete")
      expect(terminalResponse(sse)).toMatchObject({ status: "incomplete", incomplete_details: { reason } })
      expect(records(whole.output).map((o) => o.type)).toEqual(["function_call"])
      // spec 2.1: incomplete_details is given when the status is incomplete; stream and non-stream agree
      expect({ status: whole.status, incomplete_details: whole.incomplete_details }).toEqual({ status: "incomplete", incomplete_details: { reason } })
    })
  }

  const failingAfterOutput = () =>
    upstream.script({
      kind: "sse",
      delayMs: 15,
      chunks: [chunks.role(), chunks.text("Partial "), chunks.text("answer"), { error: { message: "SECRET-UPSTREAM-TEXT exploded", type: "server_error" } }]
    })

  it("a failure after output: response.failed with error.code and error.message, the response is not kept", async () => {
    failingAfterOutput()
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    expect(raw.status).toBe(200)
    const sse = parseSse(raw.text)
    expect(sse.rawData).not.toContain("[DONE]")
    const types = typesOf(sse.events)
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"])
    expect(types.at(-1)).toBe("response.failed")
    expect(types.filter((t) => t === "response.completed" || t === "response.incomplete")).toEqual([])
    expect(types.filter((t) => t === "response.output_text.delta").length).toBeGreaterThanOrEqual(1)
    const failed = terminalResponse(sse)
    expect(failed.status).toBe("failed")
    const error = asRecord(failed.error)
    expect(error.code).toBe("upstream_error")
    expect(typeof error.message).toBe("string")
    expect(String(error.message).length).toBeGreaterThan(0)
    expect(raw.text).not.toContain("SECRET-UPSTREAM-TEXT")
    // a failed answer is never stored
    const id = String(asRecord(sse.events[0].data.response).id)
    expect((await rawRequest(gateway, "GET", `/v1/responses/${id}`)).status).toBe(404)
  })

  it("a failure after output: response.failed keeps sequence_number strictly consecutive", async () => {
    failingAfterOutput()
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    const sse = parseSse(raw.text)
    expect(typesOf(sse.events).at(-1)).toBe("response.failed")
    expectWellFormedStream(sse)
  })

  it("a failure before any output is a real HTTP error: upstream 500 -> 502 JSON, nothing streamed", async () => {
    upstream.onRequest(() => openAiError(500, "SECRET-UPSTREAM-TEXT internal", "server_error"))
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    const error = expectRefusal(raw, 502, "upstream_error", null)
    expect(error.type).toBe("server_error")
    expect(raw.text).not.toContain("event:")
    expect(raw.text).not.toContain("SECRET-UPSTREAM-TEXT")

    const viaSdk = await apiError(clientFor(gateway).responses.create({ model: "up/gpt-x", input: "hi", stream: true }))
    expect(viaSdk.status).toBe(502)
    expect(viaSdk.code).toBe("upstream_error")
  })

  it("an upstream stream that fails before its first token is also an HTTP error", async () => {
    upstream.script({ kind: "sse", chunks: [chunks.role(), { error: { message: "boom", type: "server_error" } }] })
    const raw = await post(gateway, { model: "up/gpt-x", input: "hi", stream: true })
    expect(raw.status).toBe(502)
    expect(jsonOf(raw).error).toBeDefined()
    expect(raw.text).not.toContain("response.created")
  })

  it("a namespaced call in a stream carries the bare name and the namespace", async () => {
    upstream.script(chatSse({ toolCalls: [{ id: "call_n", name: "crm__lookup", arguments: "{}" }] }))
    const raw = await post(gateway, {
      model: "up/gpt-x",
      input: "find",
      stream: true,
      tools: [{ type: "namespace", name: "crm", description: "CRM", tools: [{ type: "function", name: "lookup", parameters: { type: "object", properties: {} } }] }]
    })
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events)).toEqual(["response.created", "response.in_progress", ...functionCallEvents, "response.completed"])
    expect(asRecord(sse.events[2].data.item)).toMatchObject({ name: "lookup", namespace: "crm" })
    expect(sse.events[4].data.name).toBe("lookup")
    expect(records(terminalResponse(sse).output)[0]).toMatchObject({ type: "function_call", name: "lookup", namespace: "crm", call_id: "call_n" })
  })
})
