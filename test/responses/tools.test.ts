/**
 * Responses-style tools (spec 4.1 "Tool handling", 7.2, 8) and structured answers through the
 * forced `respond` tool: what the upstream is offered and forced to, and what the client gets back.
 */
import type { FunctionTool, NamespaceTool } from "openai/resources/responses/responses"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import {
  KEYS,
  MAX_TOOLS,
  apiError,
  asRecord,
  bodyOf,
  clientFor,
  expectRefusal,
  expectWellFormedStream,
  gatewayDocument,
  jsonOf,
  messagesOf,
  parseSse,
  post,
  records,
  terminalResponse,
  textEvents,
  toolNamesOf,
  typesOf,
  upstreamTool,
  type Json
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

const fn = (name: string, extra: Json = {}): Json => ({ type: "function", name, parameters: { type: "object", properties: {} }, ...extra })
const namespace = (name: string, tools: ReadonlyArray<Json>): Json => ({ type: "namespace", name, description: `${name} tools`, tools })
const model = "up/gpt-x"

const lookupParams = { type: "object", properties: { id: { type: "string" } }, required: ["id"] }
const crm = namespace("crm", [fn("lookup", { description: "Find a customer", parameters: lookupParams }), fn("update")])

/** `crm` as the SDK types it */
const crmTool: NamespaceTool = {
  type: "namespace",
  name: "crm",
  description: "crm tools",
  tools: [
    { type: "function", name: "lookup", description: "Find a customer", parameters: lookupParams },
    { type: "function", name: "update", parameters: { type: "object", properties: {} } }
  ]
}

const weather: FunctionTool = {
  type: "function",
  name: "get_weather",
  description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: true
}

// ---------------------------------------------------------------------------------------------
// 3. Tools
// ---------------------------------------------------------------------------------------------

describe("responses tools: function and namespace", () => {
  it("a function tool is offered as is (strict dropped); parameters null means no arguments; tool_choice auto by default", async () => {
    const res = await clientFor(gateway).responses.create({
      model,
      input: "hi",
      tools: [weather, { type: "function", name: "ping", parameters: null, strict: null }]
    })
    expect(res.tools).toEqual([weather, { type: "function", name: "ping", parameters: null, strict: null }])
    const sent = bodyOf(upstream.requests[0])
    expect(sent.tools).toEqual([
      { type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: weather.parameters } },
      { type: "function", function: { name: "ping", parameters: { type: "object", properties: {} } } }
    ])
    expect(sent.tool_choice).toBe("auto")
    expect(sent.parallel_tool_calls).toBeUndefined()
  })

  it("a namespace is flattened to <namespace>__<name>; a call comes back with the bare name and the namespace", async () => {
    upstream.script(chatJson({ toolCalls: [{ id: "call_l", name: "crm__lookup", arguments: '{"id":"c-1"}' }] }))
    const res = await post(gateway, { model, input: "find c-1", tools: [crm, fn("plain")] })
    expect(res.status).toBe(200)
    expect(toolNamesOf(upstream.requests[0])).toEqual(["crm__lookup", "crm__update", "plain"])
    expect(upstreamTool(upstream.requests[0], "crm__lookup")).toEqual({ name: "crm__lookup", description: "Find a customer", parameters: lookupParams })
    const body = jsonOf(res)
    expect(records(body.output)).toEqual([
      { id: expect.stringMatching(/^fc_/), type: "function_call", status: "completed", call_id: "call_l", name: "lookup", arguments: '{"id":"c-1"}', namespace: "crm" }
    ])
    // a non-namespaced call has no namespace field
    upstream.script(chatJson({ toolCalls: [{ id: "call_p", name: "plain", arguments: "{}" }] }))
    const plain = jsonOf(await post(gateway, { model, input: "plain", tools: [crm, fn("plain")] }))
    expect(records(plain.output)[0]).not.toHaveProperty("namespace")
    expect(body.tools).toEqual([crm, fn("plain")])
  })

  it("a function_call with a namespace in input reaches the upstream under the flattened name; its output as role tool", async () => {
    upstream.script(chatJson({ content: "Found Ada." }))
    const res = await clientFor(gateway).responses.create({
      model,
      tools: [crmTool],
      input: [
        { role: "user", content: "find c-1" },
        { type: "function_call", call_id: "call_l", name: "lookup", namespace: "crm", arguments: '{"id":"c-1"}' },
        { type: "function_call_output", call_id: "call_l", output: '{"name":"Ada"}' }
      ]
    })
    expect(res.output_text).toBe("Found Ada.")
    expect(messagesOf(upstream.requests[0])).toEqual([
      { role: "user", content: "find c-1" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_l", type: "function", function: { name: "crm__lookup", arguments: '{"id":"c-1"}' } }] },
      { role: "tool", tool_call_id: "call_l", content: '{"name":"Ada"}' }
    ])
  })

  it("a namespace + name over 64 characters: 55 characters, `_`, 8 hex of a hash; stable across requests; mapped back", async () => {
    const ns = `ns_${"n".repeat(37)}`
    const name = `tool_${"t".repeat(35)}`
    const flat = `${ns}__${name}`
    expect(flat.length).toBeGreaterThan(64)
    const tools = [namespace(ns, [fn(name)]), fn("short")]
    await post(gateway, { model, input: "one", tools })
    await post(gateway, { model, input: "two", tools })
    const [first, second] = upstream.requests.map((r) => toolNamesOf(r)[0])
    expect(first).toHaveLength(64)
    expect(first).toMatch(/^[a-zA-Z0-9_-]{55}_[0-9a-f]{8}$/)
    expect(first.slice(0, 55)).toBe(flat.slice(0, 55))
    expect(second).toBe(first)
    expect(toolNamesOf(upstream.requests[0])[1]).toBe("short")

    // the same long namespace with another tool name gets another hash
    await post(gateway, { model, input: "three", tools: [namespace(ns, [fn(`${name}x`)])] })
    const other = toolNamesOf(upstream.requests[2])[0]
    expect(other.slice(0, 55)).toBe(first.slice(0, 55))
    expect(other).not.toBe(first)

    upstream.reset()
    upstream.script(chatJson({ toolCalls: [{ id: "call_long", name: first, arguments: "{}" }] }))
    const res = jsonOf(await post(gateway, { model, input: "call it", tools }))
    expect(records(res.output)[0]).toMatchObject({ type: "function_call", name, namespace: ns, call_id: "call_long" })

    upstream.script(chatJson({ content: "ok" }))
    await post(gateway, {
      model,
      tools,
      input: [
        { role: "user", content: "again" },
        { type: "function_call", call_id: "call_long", name, namespace: ns, arguments: "{}" },
        { type: "function_call_output", call_id: "call_long", output: "done" }
      ]
    })
    const assistant = messagesOf(upstream.requests[1])[1]
    expect(records(assistant.tool_calls)[0]).toMatchObject({ id: "call_long", function: { name: first } })
  })
})

describe("responses tools: custom (freeform)", () => {
  const grammar = 'start: "*** Begin Patch" NEWLINE body "*** End Patch"'
  const patch: Json = { type: "custom", name: "apply_patch", description: "Apply a patch", format: { type: "grammar", syntax: "lark", definition: grammar } }

  it("is offered as a function with one string argument `input` whose description holds the grammar", async () => {
    await post(gateway, { model, input: "patch", tools: [patch, { type: "custom", name: "note" }] })
    const offered = upstreamTool(upstream.requests[0], "apply_patch")
    const parameters = asRecord(offered.parameters)
    expect(parameters.type).toBe("object")
    expect(parameters.required).toEqual(["input"])
    const properties = asRecord(parameters.properties)
    expect(Object.keys(properties)).toEqual(["input"])
    const input = asRecord(properties.input)
    expect(input.type).toBe("string")
    expect(String(input.description)).toContain(grammar)
    expect(String(offered.description)).toContain("Apply a patch")
    expect(String(offered.description)).toContain(grammar)
    // a custom tool with no format is still one string argument
    const note = asRecord(asRecord(upstreamTool(upstream.requests[0], "note").parameters).properties)
    expect(asRecord(note.input).type).toBe("string")
  })

  it("a call comes back as custom_tool_call; a call without the argument gets empty input", async () => {
    upstream.script(
      chatJson({
        toolCalls: [
          { id: "call_1", name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch\n*** End Patch" }) },
          { id: "call_2", name: "apply_patch", arguments: "{}" }
        ]
      })
    )
    const res = jsonOf(await post(gateway, { model, input: "patch", tools: [patch] }))
    expect(records(res.output).map((o) => [o.type, o.call_id, o.name, o.input])).toEqual([
      ["custom_tool_call", "call_1", "apply_patch", "*** Begin Patch\n*** End Patch"],
      ["custom_tool_call", "call_2", "apply_patch", ""]
    ])
    for (const o of records(res.output)) expect(o).not.toHaveProperty("arguments")
  })

  it("custom_tool_call and custom_tool_call_output in input reach upstream as a call with {input} and a tool message", async () => {
    upstream.script(chatJson({ content: "Patched." }))
    await post(gateway, {
      model,
      tools: [patch],
      input: [
        { role: "user", content: "patch" },
        { type: "custom_tool_call", call_id: "call_c", name: "apply_patch", input: "diff text" },
        { type: "custom_tool_call_output", call_id: "call_c", output: "applied" }
      ]
    })
    expect(messagesOf(upstream.requests[0]).slice(1)).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: "call_c", type: "function", function: { name: "apply_patch", arguments: JSON.stringify({ input: "diff text" }) } }] },
      { role: "tool", tool_call_id: "call_c", content: "applied" }
    ])
  })
})

describe("responses tools: hosted tools", () => {
  it("are dropped when a function tool is present: x-gateway-dropped-tools, not offered, not echoed", async () => {
    const raw = await post(gateway, { model, input: "hi", tools: [fn("f"), { type: "web_search" }] })
    expect(raw.status).toBe(200)
    expect(raw.headers.get("x-gateway-dropped-tools")).toBe("web_search")
    expect(toolNamesOf(upstream.requests[0])).toEqual(["f"])
    expect(jsonOf(raw).tools).toEqual([fn("f")])
    // the same on a stream
    const streamed = await post(gateway, { model, input: "hi", tools: [{ type: "web_search" }, fn("f")], stream: true })
    expect(streamed.status).toBe(200)
    expect(streamed.headers.get("x-gateway-dropped-tools")).toBe("web_search")
    expect(terminalResponse(parseSse(streamed.text)).tools).toEqual([fn("f")])
  })

  it("every listed hosted type is dropped and named in the header", async () => {
    const hosted = ["web_search_preview", "file_search", "code_interpreter", "image_generation", "mcp"]
    const raw = await post(gateway, { model, input: "hi", tools: [...hosted.map((type) => ({ type })), fn("f")] })
    expect(raw.status).toBe(200)
    expect((raw.headers.get("x-gateway-dropped-tools") ?? "").split(",").map((s) => s.trim())).toEqual(hosted)
    expect(toolNamesOf(upstream.requests[0])).toEqual(["f"])
  })

  it("are refused with no function tool (400 unsupported_parameter, param tools), whatever the tool_choice", async () => {
    for (const tool_choice of [undefined, "auto", "none"]) {
      const raw = await post(gateway, { model, input: "hi", tools: [{ type: "web_search" }], ...(tool_choice !== undefined ? { tool_choice } : {}) })
      expectRefusal(raw, 400, "unsupported_parameter", "tools")
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it("are refused always for an app with onHostedTools: refuse", async () => {
    const raw = await post(gateway, { model, input: "hi", tools: [fn("f"), { type: "web_search" }] }, KEYS.strict)
    expectRefusal(raw, 400, "unsupported_parameter", "tools")
    const sdk = await apiError(
      clientFor(gateway, KEYS.strict).responses.create({ model, input: "hi", tools: [weather, { type: "web_search" }] })
    )
    expect(sdk.status).toBe(400)
    expect(sdk.code).toBe("unsupported_parameter")
    expect(sdk.param).toBe("tools")
    expect(upstream.requests).toHaveLength(0)
    // without hosted tools the strict app works
    expect((await post(gateway, { model, input: "hi", tools: [fn("f")] }, KEYS.strict)).status).toBe(200)
  })
})

describe("responses tools: limits and duplicates", () => {
  const many = (n: number, prefix = "f") => Array.from({ length: n }, (_, i) => fn(`${prefix}${i}`))

  it(`maxTools (${MAX_TOOLS}): one more is 400 too_many_tools; a namespace counts each tool; hosted tools count none`, async () => {
    expect((await post(gateway, { model, input: "hi", tools: many(MAX_TOOLS) })).status).toBe(200)
    expectRefusal(await post(gateway, { model, input: "hi", tools: many(MAX_TOOLS + 1) }), 400, "too_many_tools", "tools")
    const ns = namespace("big", many(MAX_TOOLS - 2, "t"))
    expect((await post(gateway, { model, input: "hi", tools: [ns, ...many(2)] })).status).toBe(200)
    expectRefusal(await post(gateway, { model, input: "hi", tools: [ns, ...many(3)] }), 400, "too_many_tools", "tools")
    expect((await post(gateway, { model, input: "hi", tools: [...many(MAX_TOOLS), { type: "web_search" }, { type: "file_search" }] })).status).toBe(200)
    // additional_tools count too
    const extra = { type: "additional_tools", role: "developer", tools: many(1, "extra") }
    expectRefusal(await post(gateway, { model, tools: many(MAX_TOOLS), input: [extra, { role: "user", content: "hi" }] }), 400, "too_many_tools")
    expect(upstream.requests).toHaveLength(3)
  })

  it("duplicate names are 400 Duplicate tool name: within tools, after flattening, tools vs additional_tools, twice in one additional list", async () => {
    const cases: ReadonlyArray<Json> = [
      { tools: [fn("f"), fn("f")], input: "hi" },
      { tools: [fn("crm__lookup"), namespace("crm", [fn("lookup")])], input: "hi" },
      // `<namespace>__<name>` makes these two the same name: a duplicate, not a silent merge
      { tools: [namespace("a_", [fn("b")]), namespace("a", [fn("_b")])], input: "hi" },
      { tools: [fn("f"), { type: "custom", name: "f" }], input: "hi" },
      { tools: [fn("f")], input: [{ type: "additional_tools", role: "developer", tools: [fn("f")] }, { role: "user", content: "hi" }] },
      { tools: [], input: [{ type: "additional_tools", role: "developer", tools: [fn("g"), fn("g")] }, { role: "user", content: "hi" }] }
    ]
    for (const c of cases) {
      const error = expectRefusal(await post(gateway, { model, ...c }), 400, "invalid_request_error")
      expect(error.type).toBe("invalid_request_error")
      expect(error.message).toContain("Duplicate tool name")
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it("additional_tools are joined with tools; a name in several additional_tools items takes the newest declaration", async () => {
    const input = [
      { type: "additional_tools", role: "developer", tools: [fn("lookup", { description: "old lookup" }), fn("older_only")] },
      { role: "user", content: "hi" },
      { type: "additional_tools", role: "developer", tools: [fn("lookup", { description: "new lookup" })] }
    ]
    const res = jsonOf(await post(gateway, { model, tools: [fn("f")], input }))
    expect(toolNamesOf(upstream.requests[0]).sort()).toEqual(["f", "lookup", "older_only"])
    expect(upstreamTool(upstream.requests[0], "lookup").description).toBe("new lookup")
    // the echo includes the additional tools
    const echoed = records(res.tools).map((t) => t.name)
    expect(echoed).toContain("f")
    expect(echoed).toContain("lookup")
    expect(echoed).toContain("older_only")
    // additional_tools items are not messages
    expect(messagesOf(upstream.requests[0])).toEqual([{ role: "user", content: "hi" }])
  })
})

describe("responses tools: tool_choice and parallel_tool_calls", () => {
  const patch: Json = { type: "custom", name: "apply_patch" }
  const tools = [fn("f"), crm, patch]

  it("auto, none, required, a function by name, a namespaced function, a custom tool: each reaches upstream in chat shape", async () => {
    const forms: ReadonlyArray<{ readonly sent: unknown; readonly wire: unknown }> = [
      { sent: "auto", wire: "auto" },
      { sent: "none", wire: "none" },
      { sent: "required", wire: "required" },
      { sent: { type: "function", name: "f" }, wire: { type: "function", function: { name: "f" } } },
      { sent: { type: "function", name: "lookup", namespace: "crm" }, wire: { type: "function", function: { name: "crm__lookup" } } },
      { sent: { type: "custom", name: "apply_patch" }, wire: { type: "function", function: { name: "apply_patch" } } }
    ]
    for (const form of forms) {
      const raw = await post(gateway, { model, input: "go", tools, tool_choice: form.sent })
      expect(raw.status).toBe(200)
      expect(jsonOf(raw).tool_choice).toEqual(form.sent)
    }
    expect(upstream.requests.map((r) => bodyOf(r).tool_choice)).toEqual(forms.map((f) => f.wire))
  })

  it("unsupported tool_choice types are 400 unsupported_parameter naming tool_choice", async () => {
    const forms: ReadonlyArray<Json> = [
      { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "f" }] },
      { type: "web_search_preview" },
      { type: "file_search" },
      { type: "mcp", server_label: "deepwiki" },
      { type: "code_interpreter" }
    ]
    for (const tool_choice of forms) expectRefusal(await post(gateway, { model, input: "go", tools, tool_choice }), 400, "unsupported_parameter", "tool_choice")
    expect(upstream.requests).toHaveLength(0)
  })

  it("a tool_choice naming no offered tool (or the wrong kind) is a 400 before any upstream call", async () => {
    for (const tool_choice of [
      { type: "function", name: "nope" },
      { type: "function", name: "lookup" },
      { type: "custom", name: "f" },
      { type: "function", name: "apply_patch" }
    ]) {
      const raw = await post(gateway, { model, input: "go", tools, tool_choice })
      expect(raw.status).toBe(400)
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it("parallel_tool_calls false: passed upstream, only the first call kept, x-gateway-parallel-tools: limited (stream and not)", async () => {
    const calls = [
      { id: "call_1", name: "f", arguments: '{"n":1}' },
      { id: "call_2", name: "f", arguments: '{"n":2}' }
    ]
    upstream.onRequest((req) => (bodyOf(req).stream === true ? chatSse({ toolCalls: calls }) : chatJson({ toolCalls: calls })))
    const { data, response } = await clientFor(gateway)
      .responses.create({ model, input: "twice", tools: [weather, { type: "function", name: "f", parameters: {}, strict: null }], parallel_tool_calls: false })
      .withResponse()
    expect(response.headers.get("x-gateway-parallel-tools")).toBe("limited")
    expect(data.parallel_tool_calls).toBe(false)
    expect(data.output).toHaveLength(1)
    expect(data.output[0]).toMatchObject({ type: "function_call", call_id: "call_1", arguments: '{"n":1}' })
    expect(bodyOf(upstream.requests[0]).parallel_tool_calls).toBe(false)

    const raw = await post(gateway, { model, input: "twice", tools: [fn("f")], parallel_tool_calls: false, stream: true })
    expect(raw.headers.get("x-gateway-parallel-tools")).toBe("limited")
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events).filter((t) => t === "response.function_call_arguments.done")).toHaveLength(1)
    expect(records(terminalResponse(sse).output).map((o) => o.call_id)).toEqual(["call_1"])

    // with parallel calls allowed both are kept and no header is sent
    const both = await post(gateway, { model, input: "twice", tools: [fn("f")] })
    expect(both.headers.get("x-gateway-parallel-tools")).toBeNull()
    expect(records(jsonOf(both).output)).toHaveLength(2)
  })
})

// ---------------------------------------------------------------------------------------------
// 4. Structured answers
// ---------------------------------------------------------------------------------------------

describe("responses: text.format json_schema", () => {
  const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false }
  const format = { type: "json_schema", name: "person", schema, strict: true } as const
  const answer = '{"name":"Ada","age":36}'

  it("upstream sees the respond tool (the schema) forced; the answer text is the respond arguments", async () => {
    upstream.script(chatJson({ toolCalls: [{ id: "call_r", name: "respond", arguments: answer }] }))
    const { data, response } = await clientFor(gateway).responses.create({ model, input: "who?", text: { format } }).withResponse()
    expect(data.output_text).toBe(answer)
    expect(data.output).toHaveLength(1)
    expect(data.output[0]).toMatchObject({ type: "message", status: "completed" })
    expect(data.status).toBe("completed")
    expect(data.text?.format).toEqual(format)
    expect(response.headers.get("x-gateway-structured-fallback")).toBeNull()
    const sent = bodyOf(upstream.requests[0])
    expect(toolNamesOf(upstream.requests[0])).toEqual(["respond"])
    expect(upstreamTool(upstream.requests[0], "respond").parameters).toEqual(schema)
    expect(sent.tool_choice).toEqual({ type: "function", function: { name: "respond" } })
  })

  it("with caller tools: respond is added and tool_choice is required; a caller tool call is returned as a call", async () => {
    upstream.script(chatJson({ toolCalls: [{ id: "call_f", name: "f", arguments: "{}" }] }))
    const res = jsonOf(await post(gateway, { model, input: "who?", tools: [fn("f")], text: { format } }))
    expect(toolNamesOf(upstream.requests[0])).toEqual(["f", "respond"])
    expect(bodyOf(upstream.requests[0]).tool_choice).toBe("required")
    expect(records(res.output).map((o) => [o.type, o.name])).toEqual([["function_call", "f"]])
  })

  it("text fallback: JSON matching the schema in final text is the answer, flagged x-gateway-structured-fallback: text", async () => {
    upstream.script(chatJson({ content: `\`\`\`json\n${answer}\n\`\`\`` }))
    const { data, response } = await clientFor(gateway).responses.create({ model, input: "who?", text: { format } }).withResponse()
    expect(response.headers.get("x-gateway-structured-fallback")).toBe("text")
    expect(JSON.parse(data.output_text)).toEqual({ name: "Ada", age: 36 })
  })

  it("neither a respond call nor matching text: 502 structured_output_missing (any finish reason), nothing stored", async () => {
    for (const reply of [chatJson({ content: "I would rather not." }), chatJson({ content: '{"name":"Ada"}' }), chatJson({ content: "cut", finish: "length" })]) {
      upstream.script(reply)
      const raw = await post(gateway, { model, input: "who?", text: { format } })
      const error = expectRefusal(raw, 502, "structured_output_missing")
      expect(error.type).toBe("server_error")
    }
    upstream.script(chatSse({ content: "no json here" }))
    expectRefusal(await post(gateway, { model, input: "who?", text: { format }, stream: true }), 502, "structured_output_missing")
  })

  it("a structured stream is exactly one output_text.delta holding the whole answer", async () => {
    upstream.script(chatSse({ toolCalls: [{ id: "call_r", name: "respond", arguments: answer }] }))
    const raw = await post(gateway, { model, input: "who?", text: { format }, stream: true })
    const sse = parseSse(raw.text)
    expectWellFormedStream(sse)
    expect(typesOf(sse.events)).toEqual(["response.created", "response.in_progress", ...textEvents(1), "response.completed"])
    expect(sse.events.find((e) => e.event === "response.output_text.delta")?.data.delta).toBe(answer)
    expect(raw.headers.get("x-gateway-structured-fallback")).toBeNull()

    // a streamed text fallback is one delta too, even when the model sent many chunks
    upstream.script(chatSse({ content: answer, split: 3 }))
    const fallback = parseSse((await post(gateway, { model, input: "who?", text: { format }, stream: true })).text)
    expectWellFormedStream(fallback)
    expect(typesOf(fallback.events).filter((t) => t === "response.output_text.delta")).toHaveLength(1)
    expect(records(terminalResponse(fallback).output)[0]).toMatchObject({ content: [{ type: "output_text", text: answer }] })
  })

  it("a tool named respond with json_schema is 400 reserved_tool_name; without json_schema it is an ordinary tool", async () => {
    expectRefusal(await post(gateway, { model, input: "who?", tools: [fn("respond")], text: { format } }), 400, "reserved_tool_name")
    expect(upstream.requests).toHaveLength(0)
    expect((await post(gateway, { model, input: "who?", tools: [fn("respond")] })).status).toBe(200)
  })

  it("a named tool_choice with json_schema is 400 unsupported_parameter", async () => {
    const raw = await post(gateway, { model, input: "who?", tools: [fn("f")], tool_choice: { type: "function", name: "f" }, text: { format } })
    expectRefusal(raw, 400, "unsupported_parameter", "tool_choice")
    expect(upstream.requests).toHaveLength(0)
  })

  it("a non-object schema is wrapped in `value` for the tool and unwrapped in the answer", async () => {
    const list = { type: "json_schema", name: "names", schema: { type: "array", items: { type: "string" } } }
    upstream.script(chatJson({ toolCalls: [{ id: "call_r", name: "respond", arguments: '{"value":["a","b"]}' }] }))
    const res = jsonOf(await post(gateway, { model, input: "names", text: { format: list } }))
    expect(asRecord(upstreamTool(upstream.requests[0], "respond").parameters)).toMatchObject({ type: "object", required: ["value"] })
    expect(records(records(res.output)[0].content)[0].text).toBe('["a","b"]')
  })
})
