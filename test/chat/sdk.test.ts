/**
 * The chat-completions family driven through the official `openai` SDK, against an in-process
 * gateway whose `openai` providers point at scriptable fake upstreams. Every test checks both what
 * the client got and what reached the upstream.
 */
import * as net from "node:net"
import type { AddressInfo } from "node:net"
import OpenAI, { APIError } from "openai"
import type { ChatCompletionAssistantMessageParam, ChatCompletionChunk, ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming, ChatCompletionTool } from "openai/resources/chat/completions"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { auto, chatJson, chatSse, chunks, openAiError, startFakeUpstream, type FakeUpstream, type RecordedRequest, type Reply } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const SECRET = "SECRET-UPSTREAM-TEXT"
const SESSION = /^ses_[0-9a-f]{32}$/

type Json = Record<string, unknown>

/** Read a property of an SDK object that its types do not declare (e.g. `reasoning_content`). */
const field = (value: object | null | undefined, key: string): unknown => (value == null ? undefined : (value as Json)[key])

const bodyOf = (req: RecordedRequest | undefined): Json => {
  const body = req?.body
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new Error(`upstream request has no JSON object body: ${String(req?.rawBody)}`)
  return body as Json
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })

/** Await a promise that must reject with an APIError. */
const apiError = async (promise: Promise<unknown>): Promise<APIError> => {
  try {
    await promise
  } catch (error) {
    if (error instanceof APIError) return error
    throw error
  }
  throw new Error("expected the call to fail with an APIError")
}

interface RawResponse {
  readonly status: number
  readonly headers: Headers
  readonly text: string
}

const rawPost = async (base: string, path: string, body: Json, headers: Record<string, string> = {}): Promise<RawResponse> => {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body)
  })
  return { status: res.status, headers: res.headers, text: await res.text() }
}

/** The `data:` payloads of an SSE body, in order (comments dropped). */
const sseData = (text: string): Array<string> =>
  text
    .split(/\r?\n\r?\n/)
    .map((frame) =>
      frame
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5))
        .join("\n")
    )
    .filter((data) => data !== "")

interface RawChoice {
  readonly index: number
  readonly delta?: Json & {
    readonly content?: string | null
    readonly tool_calls?: ReadonlyArray<{ readonly index: number; readonly id?: string; readonly type?: string; readonly function?: { readonly name?: string; readonly arguments?: string } }>
  }
  readonly text?: string
  readonly finish_reason: string | null
}

interface RawChunk {
  readonly id?: string
  readonly object?: string
  readonly model?: string
  readonly choices?: ReadonlyArray<RawChoice>
  readonly usage?: Json
  readonly error?: { readonly message: string; readonly type: string; readonly code: string | null; readonly param: string | null }
}

/** JSON chunks of an SSE body (everything but `[DONE]`). */
const sseChunks = (text: string): Array<RawChunk> => sseData(text).filter((d) => d !== "[DONE]").map((d) => JSON.parse(d) as RawChunk)

interface Assembled {
  content: string
  reasoning: string
  contentDeltas: number
  finish: Array<string>
  toolCalls: Array<{ index: number; id: string | undefined; name: string | undefined; arguments: string | undefined }>
  usage: ChatCompletionChunk["usage"] | undefined
  chunks: Array<ChatCompletionChunk>
  ids: Set<string>
  models: Set<string>
}

const assemble = async (stream: AsyncIterable<ChatCompletionChunk>): Promise<Assembled> => {
  const out: Assembled = { content: "", reasoning: "", contentDeltas: 0, finish: [], toolCalls: [], usage: undefined, chunks: [], ids: new Set(), models: new Set() }
  for await (const chunk of stream) {
    out.chunks.push(chunk)
    out.ids.add(chunk.id)
    out.models.add(chunk.model)
    if (chunk.usage != null) out.usage = chunk.usage
    for (const choice of chunk.choices) {
      const delta = choice.delta
      if (typeof delta.content === "string" && delta.content !== "") {
        out.content += delta.content
        out.contentDeltas++
      }
      const reasoning = field(delta, "reasoning_content")
      if (typeof reasoning === "string") out.reasoning += reasoning
      for (const call of delta.tool_calls ?? []) {
        out.toolCalls.push({ index: call.index, id: call.id, name: call.function?.name, arguments: call.function?.arguments })
      }
      if (choice.finish_reason != null) out.finish.push(choice.finish_reason)
    }
  }
  return out
}

const user = (content: string) => [{ role: "user" as const, content }]

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

let upstream: FakeUpstream
let bad: FakeUpstream
let gateway: TestGateway
let client: OpenAI
/** the same providers with `reasoningOutput: true` and `dropUnsupportedParams: false` */
let reasoningGateway: TestGateway
let reasoningClient: OpenAI
/** a gateway with configured keys */
let keyGateway: TestGateway

const TEAM_A_KEY = "sk-team-a-0123456789"
const TEAM_B_KEY = "sk-team-b-0123456789"

const providersFor = (upUrl: string, badUrl: string, deadUrl: string) => ({
  up: {
    type: "openai",
    baseUrl: upUrl,
    apiKey: "upstream-secret",
    models: {
      "gpt-x": {},
      m: { variants: { high: { reasoningEffort: "high" } } },
      nosamp: { rejects: ["temperature"] },
      "allowed-1": {}
    }
  },
  bad: { type: "openai", baseUrl: badUrl, apiKey: "bad-secret" },
  dead: { type: "openai", baseUrl: deadUrl, apiKey: "dead-secret" }
})

const aliases = {
  fb: { targets: ["bad/m1", "up/m2"] },
  fbdead: { targets: ["dead/m1", "up/m2"] },
  // a first target of its own: the 429 (Retry-After) cools it down, and bad/m1 stays healthy for the other cases
  fbcool: { targets: ["bad/m-cooled", "up/m2"] },
  smart: "up/m"
}

beforeAll(async () => {
  upstream = await startFakeUpstream()
  bad = await startFakeUpstream()
  const deadUrl = `http://127.0.0.1:${await freePort()}/v1`
  const providers = providersFor(upstream.url, bad.url, deadUrl)
  gateway = await startGateway({ providers, aliases, maxChoices: 2 })
  reasoningGateway = await startGateway({ providers, aliases, reasoningOutput: true, dropUnsupportedParams: false })
  keyGateway = await startGateway({
    providers,
    aliases,
    keys: [
      { key: TEAM_A_KEY, app: "team-a" },
      { key: TEAM_B_KEY, app: "team-b" }
    ],
    apps: { "team-a": { allowedModels: ["up/allowed*"] } }
  })
  client = new OpenAI({ apiKey: "unused", baseURL: `${gateway.url}/v1`, maxRetries: 0, timeout: 10_000 })
  reasoningClient = new OpenAI({ apiKey: "unused", baseURL: `${reasoningGateway.url}/v1`, maxRetries: 0, timeout: 10_000 })
})

afterAll(async () => {
  await gateway?.close()
  await reasoningGateway?.close()
  await keyGateway?.close()
  await upstream?.close()
  await bad?.close()
})

beforeEach(() => {
  upstream.reset()
  bad.reset()
})

// ---------------------------------------------------------------------------------------------
// 1, 2. Basic answers and streaming
// ---------------------------------------------------------------------------------------------

describe("chat completions: answers, usage, headers", () => {
  const usage = { prompt: 12, completion: 7, cached: 4, reasoning: 2 }
  const wireUsage = {
    prompt_tokens: 12,
    completion_tokens: 7,
    total_tokens: 19,
    prompt_tokens_details: { cached_tokens: 4 },
    completion_tokens_details: { reasoning_tokens: 2 }
  }

  it("non-stream: content, finish_reason, usage details, model echo, session and request-id headers", async () => {
    upstream.script(chatJson({ content: "Hi there, human", usage, model: "upstream-name-x" }))
    const { data, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: [{ role: "system", content: "be brief" }, ...user("hi")], max_tokens: 50 })
      .withResponse()

    expect(data.object).toBe("chat.completion")
    expect(data.model).toBe("up/gpt-x")
    expect(data.choices).toHaveLength(1)
    expect(data.choices[0].index).toBe(0)
    expect(data.choices[0].message.role).toBe("assistant")
    expect(data.choices[0].message.content).toBe("Hi there, human")
    expect(data.choices[0].message.tool_calls ?? []).toHaveLength(0)
    expect(data.choices[0].finish_reason).toBe("stop")
    expect(data.usage).toMatchObject(wireUsage)
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(response.headers.get("x-gateway-request-id")).toMatch(/^req_/)

    expect(upstream.requests).toHaveLength(1)
    const sent = upstream.requests[0]
    expect(sent.path).toBe("/v1/chat/completions")
    expect(sent.headers.authorization).toBe("Bearer upstream-secret")
    expect(bodyOf(sent)).toMatchObject({
      model: "gpt-x",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "hi" }
      ],
      max_tokens: 50
    })
    expect(bodyOf(sent).stream).toBeUndefined()
  })

  it("every answer gets its own session id and request id", async () => {
    const a = await client.chat.completions.create({ model: "up/gpt-x", messages: user("a") }).withResponse()
    const b = await client.chat.completions.create({ model: "up/gpt-x", messages: user("b") }).withResponse()
    expect(a.response.headers.get("x-gateway-session")).not.toBe(b.response.headers.get("x-gateway-session"))
    expect(a.response.headers.get("x-gateway-request-id")).not.toBe(b.response.headers.get("x-gateway-request-id"))
  })

  it("stream: deltas, finish_reason, final usage chunk, model echo, headers; upstream asked to stream", async () => {
    upstream.script(chatSse({ content: "Streaming hello to you", usage, split: 4 }))
    const { data: stream, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("hi"), stream: true, stream_options: { include_usage: true } })
      .withResponse()
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(response.headers.get("x-gateway-request-id")).toMatch(/^req_/)
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const got = await assemble(stream)

    expect(got.content).toBe("Streaming hello to you")
    expect(got.contentDeltas).toBeGreaterThan(1)
    expect(got.finish).toEqual(["stop"])
    expect(got.models).toEqual(new Set(["up/gpt-x"]))
    expect(got.ids.size).toBe(1)
    expect(got.chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true)
    expect(got.chunks[0].choices[0]?.delta.role).toBe("assistant")
    expect(got.usage).toMatchObject(wireUsage)
    const last = got.chunks[got.chunks.length - 1]
    expect(last.choices).toEqual([])
    expect(last.usage).toMatchObject(wireUsage)

    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "gpt-x", stream: true, stream_options: { include_usage: true } })
  })

  it("stream: the SDK's assembly equals the non-stream answer for the same upstream behaviour", async () => {
    upstream.onRequest(auto({ content: "The quick brown fox jumps over the lazy dog", split: 3, usage: { prompt: 21, completion: 9, cached: 5, reasoning: 3 } }))
    const whole = await client.chat.completions.create({ model: "up/gpt-x", messages: user("fox") })
    const streamed = await assemble(
      await client.chat.completions.create({ model: "up/gpt-x", messages: user("fox"), stream: true, stream_options: { include_usage: true } })
    )
    expect(streamed.content).toBe(whole.choices[0].message.content)
    expect(streamed.finish).toEqual([whole.choices[0].finish_reason])
    expect(streamed.usage).toEqual(whole.usage)
    expect(streamed.models).toEqual(new Set([whole.model]))
    expect(upstream.requests.map((r) => bodyOf(r).stream)).toEqual([undefined, true])
  })

  it("finish_reason length and content_filter pass through (non-stream and stream)", async () => {
    for (const finish of ["length", "content_filter"]) {
      upstream.reset()
      upstream.onRequest(auto({ content: "cut sho", finish }))
      const whole = await client.chat.completions.create({ model: "up/gpt-x", messages: user("hi") })
      expect(whole.choices[0].finish_reason).toBe(finish)
      const streamed = await assemble(await client.chat.completions.create({ model: "up/gpt-x", messages: user("hi"), stream: true }))
      expect(streamed.finish).toEqual([finish])
      expect(streamed.content).toBe("cut sho")
    }
  })

  it("stream without include_usage has no usage chunk; raw SSE ends with [DONE]", async () => {
    upstream.onRequest(auto({ content: "no usage here" }))
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("hi"), stream: true })
    expect(raw.status).toBe(200)
    const data = sseData(raw.text)
    expect(data[data.length - 1]).toBe("[DONE]")
    expect(data.filter((d) => d === "[DONE]")).toHaveLength(1)
    const parsed = sseChunks(raw.text)
    expect(parsed.every((c) => c.usage === undefined || c.usage === null)).toBe(true)
    expect(parsed.map((c) => c.choices?.[0]?.delta?.content ?? "").join("")).toBe("no usage here")
    expect(raw.text.trimEnd().endsWith("data: [DONE]")).toBe(true)
  })

  it("raw stream with include_usage: one usage chunk (choices []) just before [DONE]", async () => {
    upstream.onRequest(auto({ content: "count me", usage: { prompt: 5, completion: 2 } }))
    const raw = await rawPost(gateway.url, "/v1/chat/completions", {
      model: "up/gpt-x",
      messages: user("hi"),
      stream: true,
      stream_options: { include_usage: true }
    })
    const data = sseData(raw.text)
    expect(data[data.length - 1]).toBe("[DONE]")
    const parsed = sseChunks(raw.text)
    const withUsage = parsed.filter((c) => c.usage != null)
    expect(withUsage).toHaveLength(1)
    expect(parsed[parsed.length - 1]).toBe(withUsage[0])
    expect(withUsage[0].choices).toEqual([])
    expect(withUsage[0].usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 })
  })
})

// ---------------------------------------------------------------------------------------------
// 3. Tool calls
// ---------------------------------------------------------------------------------------------

describe("chat completions: tool calls", () => {
  const tools: Array<ChatCompletionTool> = [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "Weather for a city",
        parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] }
      }
    },
    { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } } } }
  ]
  const wireTools = [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "Weather for a city",
        parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] }
      }
    },
    { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } } } }
  ]
  const calls = [
    { id: "call_weather_1", name: "get_weather", arguments: JSON.stringify({ city: "Paris", unit: "celsius", note: "a longer argument string" }) },
    { id: "call_time_2", name: "get_time", arguments: JSON.stringify({ tz: "Europe/Paris" }) }
  ]

  it("fragmented upstream tool calls reach the SDK whole, one chunk per call, finish_reason tool_calls", async () => {
    upstream.script(chatSse({ toolCalls: calls }))
    const got = await assemble(await client.chat.completions.create({ model: "up/gpt-x", messages: user("weather?"), tools, stream: true }))
    expect(got.toolCalls).toEqual([
      { index: 0, id: calls[0].id, name: calls[0].name, arguments: calls[0].arguments },
      { index: 1, id: calls[1].id, name: calls[1].name, arguments: calls[1].arguments }
    ])
    expect(got.finish).toEqual(["tool_calls"])
    expect(got.content).toBe("")
    expect(bodyOf(upstream.requests[0])).toMatchObject({ tools: wireTools, tool_choice: "auto", stream: true })
  })

  it("raw SSE: exactly one chunk with tool_calls per call, each holding the full arguments", async () => {
    upstream.script(chatSse({ toolCalls: calls }))
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("weather?"), tools: wireTools, stream: true })
    expect(raw.status).toBe(200)
    const parsed = sseChunks(raw.text)
    const toolChunks = parsed.filter((c) => (c.choices?.[0]?.delta?.tool_calls ?? []).length > 0)
    expect(toolChunks).toHaveLength(2)
    const seen = toolChunks.flatMap((c) => c.choices?.[0]?.delta?.tool_calls ?? [])
    expect(seen).toHaveLength(2)
    expect(seen[0]).toMatchObject({ index: 0, id: calls[0].id, type: "function", function: { name: calls[0].name, arguments: calls[0].arguments } })
    expect(seen[1]).toMatchObject({ index: 1, id: calls[1].id, type: "function", function: { name: calls[1].name, arguments: calls[1].arguments } })
    for (const call of seen) expect(() => JSON.parse(call.function?.arguments ?? "") as unknown).not.toThrow()
    expect(parsed.map((c) => c.choices?.[0]?.finish_reason).filter((f) => f != null)).toEqual(["tool_calls"])
    expect(sseData(raw.text).at(-1)).toBe("[DONE]")
  })

  it("non-stream tool calls come back whole with finish_reason tool_calls and null content", async () => {
    upstream.script(chatJson({ toolCalls: calls }))
    const res = await client.chat.completions.create({ model: "up/gpt-x", messages: user("weather?"), tools })
    const message = res.choices[0].message
    expect(message.content).toBeNull()
    expect(message.tool_calls).toEqual([
      { id: calls[0].id, type: "function", function: { name: calls[0].name, arguments: calls[0].arguments } },
      { id: calls[1].id, type: "function", function: { name: calls[1].name, arguments: calls[1].arguments } }
    ])
    expect(res.choices[0].finish_reason).toBe("tool_calls")
  })

  it("each tool_choice form reaches upstream in wire shape; parallel_tool_calls false is passed on", async () => {
    const forms: Array<{ readonly sent: ChatCompletionCreateParamsNonStreaming["tool_choice"]; readonly wire: unknown }> = [
      { sent: "auto", wire: "auto" },
      { sent: "none", wire: "none" },
      { sent: "required", wire: "required" },
      { sent: { type: "function", function: { name: "get_time" } }, wire: { type: "function", function: { name: "get_time" } } }
    ]
    for (const form of forms) {
      await client.chat.completions.create({ model: "up/gpt-x", messages: user("go"), tools, tool_choice: form.sent })
    }
    expect(upstream.requests.map((r) => bodyOf(r).tool_choice)).toEqual(forms.map((f) => f.wire))
    for (const r of upstream.requests) expect(bodyOf(r).tools).toEqual(wireTools)

    await client.chat.completions.create({ model: "up/gpt-x", messages: user("go"), tools, parallel_tool_calls: false })
    expect(bodyOf(upstream.requests.at(-1)).parallel_tool_calls).toBe(false)
  })

  it("a tool_choice naming an unknown tool is a 400 before any upstream call", async () => {
    const err = await apiError(
      client.chat.completions.create({ model: "up/gpt-x", messages: user("go"), tools, tool_choice: { type: "function", function: { name: "nope" } } })
    )
    expect(err.status).toBe(400)
    expect(err.param).toBe("tool_choice.function.name")
    expect(upstream.requests).toHaveLength(0)
  })

  it("a follow-up with the assistant tool_calls and tool messages reaches upstream as role tool with tool_call_id", async () => {
    upstream.script(chatJson({ content: "It is 21 degrees in Paris." }))
    const res = await client.chat.completions.create({
      model: "up/gpt-x",
      tools,
      messages: [
        { role: "user", content: "weather and time?" },
        {
          role: "assistant",
          content: null,
          tool_calls: calls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } }))
        },
        { role: "tool", tool_call_id: calls[0].id, content: '{"temp":21}' },
        { role: "tool", tool_call_id: calls[1].id, content: [{ type: "text", text: "10:00" }] }
      ]
    })
    expect(res.choices[0].message.content).toBe("It is 21 degrees in Paris.")
    const messages = bodyOf(upstream.requests[0]).messages
    expect(messages).toEqual([
      { role: "user", content: "weather and time?" },
      {
        role: "assistant",
        content: null,
        tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }))
      },
      { role: "tool", tool_call_id: calls[0].id, content: '{"temp":21}' },
      { role: "tool", tool_call_id: calls[1].id, content: "10:00" }
    ])
  })

  it("a tool message answering no earlier call is a 400 naming messages.N.tool_call_id", async () => {
    const err = await apiError(
      client.chat.completions.create({
        model: "up/gpt-x",
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_known", type: "function", function: { name: "get_time", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_known", content: "ok" },
          { role: "tool", tool_call_id: "call_unknown", content: "stray" }
        ]
      })
    )
    expect(err.status).toBe(400)
    expect(err.type).toBe("invalid_request_error")
    expect(err.param).toBe("messages.3.tool_call_id")

    const first = await apiError(
      client.chat.completions.create({ model: "up/gpt-x", messages: [{ role: "tool", tool_call_id: "call_x", content: "?" }, ...user("hi")] })
    )
    expect(first.status).toBe(400)
    expect(first.param).toBe("messages.0.tool_call_id")
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// 4. Fallback across alias targets
// ---------------------------------------------------------------------------------------------

describe("chat completions: alias fallback", () => {
  it("a 503 from the first target falls back to the second (non-stream)", async () => {
    bad.script(openAiError(503, SECRET, "server_error"))
    upstream.script(chatJson({ content: "from the second target" }))
    const { data, response } = await client.chat.completions.create({ model: "fb", messages: user("hi") }).withResponse()
    expect(data.choices[0].message.content).toBe("from the second target")
    expect(data.model).toBe("fb")
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(bad.requests).toHaveLength(1)
    expect(bodyOf(bad.requests[0]).model).toBe("m1")
    expect(bad.requests[0].headers.authorization).toBe("Bearer bad-secret")
    expect(upstream.requests).toHaveLength(1)
    expect(bodyOf(upstream.requests[0]).model).toBe("m2")
    expect(upstream.requests[0].headers.authorization).toBe("Bearer upstream-secret")
  })

  it("a 503 from the first target falls back to the second (stream)", async () => {
    bad.script(openAiError(503, SECRET, "server_error"))
    upstream.onRequest(auto({ content: "streamed from the second target" }))
    const got = await assemble(await client.chat.completions.create({ model: "fb", messages: user("hi"), stream: true }))
    expect(got.content).toBe("streamed from the second target")
    expect(got.finish).toEqual(["stop"])
    expect(got.models).toEqual(new Set(["fb"]))
    expect(bad.requests).toHaveLength(1)
    expect(upstream.requests).toHaveLength(1)
    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "m2", stream: true })
  })

  it("connection refused on the first target falls back (non-stream and stream)", async () => {
    upstream.onRequest(auto({ content: "alive" }))
    const res = await client.chat.completions.create({ model: "fbdead", messages: user("hi") })
    expect(res.choices[0].message.content).toBe("alive")
    const got = await assemble(await client.chat.completions.create({ model: "fbdead", messages: user("hi"), stream: true }))
    expect(got.content).toBe("alive")
    expect(upstream.requests.map((r) => bodyOf(r).model)).toEqual(["m2", "m2"])
  })

  it("a reset connection and a 429 from the first target also fall back", async () => {
    bad.script({ kind: "reset" }, openAiError(429, SECRET, "rate_limit_error"))
    upstream.onRequest(auto({ content: "second" }))
    const a = await client.chat.completions.create({ model: "fbcool", messages: user("hi") })
    const b = await client.chat.completions.create({ model: "fbcool", messages: user("hi") })
    expect([a.choices[0].message.content, b.choices[0].message.content]).toEqual(["second", "second"])
    expect(bad.requests).toHaveLength(2)
    expect(upstream.requests).toHaveLength(2)
  })

  it("a non-retryable 400 from the first target is not retried on the second", async () => {
    bad.script(openAiError(400, SECRET, "invalid_request_error"))
    const err = await apiError(client.chat.completions.create({ model: "fb", messages: user("hi") }))
    expect(err.status).toBe(400)
    expect(JSON.stringify(err.error)).not.toContain(SECRET)
    expect(bad.requests).toHaveLength(1)
    expect(upstream.requests).toHaveLength(0)

    bad.script(openAiError(400, SECRET, "invalid_request_error"))
    const streamed = await apiError(client.chat.completions.create({ model: "fb", messages: user("hi"), stream: true }))
    expect(streamed.status).toBe(400)
    expect(upstream.requests).toHaveLength(0)
  })

  it("when the first target fails after output began: no fallback, an error frame and no [DONE]", async () => {
    bad.script({ kind: "resetAfter", chunks: [chunks.role(), chunks.text("Partial "), chunks.text("answer")] })
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "fb", messages: user("hi"), stream: true })
    expect(raw.status).toBe(200)
    const data = sseData(raw.text)
    expect(data).not.toContain("[DONE]")
    const parsed = sseChunks(raw.text)
    const last = parsed[parsed.length - 1]
    expect(last.error).toBeDefined()
    expect(last.error?.type).toBe("server_error")
    expect(typeof last.error?.message).toBe("string")
    expect(Object.keys(last)).toEqual(["error"])
    expect(parsed.slice(0, -1).map((c) => c.choices?.[0]?.delta?.content ?? "").join("")).toBe("Partial answer")
    expect(raw.text).toMatch(/\ndata: \{"error":/)
    expect(bad.requests).toHaveLength(1)
    expect(upstream.requests).toHaveLength(0)
  })

  it("the SDK sees the partial text and then an APIError for a failure after output began", async () => {
    bad.script({ kind: "resetAfter", chunks: [chunks.role(), chunks.text("Partial ")] })
    const stream = await client.chat.completions.create({ model: "fb", messages: user("hi"), stream: true })
    let text = ""
    const err = await apiError(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ""
      })()
    )
    expect(text).toBe("Partial ")
    expect(err.error).toMatchObject({ type: "server_error" })
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// 5. Upstream errors
// ---------------------------------------------------------------------------------------------

describe("chat completions: upstream errors through the SDK", () => {
  interface ErrorCase {
    readonly name: string
    readonly reply: (stream: boolean) => Reply
    readonly status: number
    readonly type: string
    readonly code?: string
    readonly retryAfter?: string
  }
  const cases: ReadonlyArray<ErrorCase> = [
    {
      name: "429 with Retry-After",
      reply: () => ({ ...openAiError(429, SECRET, "rate_limit_error", "rate_limit_exceeded"), headers: { "retry-after": "7" } }),
      status: 429,
      type: "rate_limit_error",
      retryAfter: "7"
    },
    { name: "500", reply: () => openAiError(500, SECRET, "server_error"), status: 502, type: "server_error" },
    { name: "503", reply: () => openAiError(503, SECRET, "server_error"), status: 503, type: "server_error" },
    { name: "529", reply: () => openAiError(529, SECRET, "overloaded_error"), status: 503, type: "server_error", code: "provider_overloaded" },
    {
      name: "200 whose body/first chunk is an overload error",
      reply: (stream) =>
        stream ? { kind: "sse", chunks: [{ error: { message: "Overloaded" } }] } : { kind: "json", status: 200, body: { error: { message: "Overloaded" } } },
      status: 503,
      type: "server_error",
      code: "provider_overloaded"
    },
    {
      name: "200 SSE with a role chunk and then an overload error chunk",
      reply: (stream) =>
        stream ? { kind: "sse", chunks: [chunks.role(), { error: { message: "Overloaded" } }] } : { kind: "json", status: 200, body: { error: { message: "Overloaded" } } },
      status: 503,
      type: "server_error",
      code: "provider_overloaded"
    },
    {
      name: "invalid JSON body",
      reply: (stream) =>
        stream ? { kind: "sse", chunks: [`data: {not json ${SECRET}\n\n`] } : { kind: "text", status: 200, body: `{not json ${SECRET}` },
      status: 502,
      type: "server_error"
    },
    { name: "connection reset", reply: () => ({ kind: "reset" }), status: 502, type: "server_error" },
    {
      name: "200 with an error object that is not an overload",
      reply: (stream) =>
        stream ? { kind: "sse", chunks: [{ error: { message: SECRET } }] } : { kind: "json", status: 200, body: { error: { message: SECRET } } },
      status: 502,
      type: "server_error"
    }
  ]

  for (const c of cases) {
    for (const stream of [false, true]) {
      it(`${c.name} (${stream ? "stream, before output" : "non-stream"}) -> ${c.status}${c.code ? ` ${c.code}` : ""}`, async () => {
        upstream.script(c.reply(stream))
        const params = { model: "up/gpt-x", messages: user("hi") }
        const err = await apiError(
          stream ? client.chat.completions.create({ ...params, stream: true }) : client.chat.completions.create(params)
        )
        expect(err.status).toBe(c.status)
        expect(err.type).toBe(c.type)
        if (c.code !== undefined) expect(err.code).toBe(c.code)
        expect(typeof err.code).toBe("string")
        expect(err.headers?.get("x-gateway-request-id")).toMatch(/^req_/)
        if (c.retryAfter !== undefined) expect(err.headers?.get("retry-after")).toBe(c.retryAfter)
        expect(JSON.stringify(err.error)).not.toContain(SECRET)
        expect(err.message).not.toContain(SECRET)
        expect(upstream.requests).toHaveLength(1)
        expect(bodyOf(upstream.requests[0]).stream).toBe(stream ? true : undefined)
      })
    }
  }

  it("raw error bodies are the OpenAI envelope and carry no provider text", async () => {
    upstream.script(openAiError(500, SECRET, "server_error"), openAiError(503, SECRET, "server_error"))
    for (const stream of [false, true]) {
      const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("hi"), stream })
      expect(raw.text).not.toContain(SECRET)
      expect(raw.headers.get("content-type")).toMatch(/^application\/json/)
      const body = JSON.parse(raw.text) as { error: Json }
      expect(Object.keys(body)).toEqual(["error"])
      expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"])
    }
  })
})

// ---------------------------------------------------------------------------------------------
// 6. Structured output
// ---------------------------------------------------------------------------------------------

describe("chat completions: structured output", () => {
  const schema = {
    type: "object",
    properties: { name: { type: "string" }, age: { type: "integer" } },
    required: ["name", "age"]
  }
  const responseFormat = { type: "json_schema" as const, json_schema: { name: "person", schema } }
  const answer = JSON.stringify({ name: "Ada", age: 36 })

  it("the schema becomes a forced respond tool upstream; the respond arguments are the content", async () => {
    upstream.script(chatJson({ toolCalls: [{ id: "call_r", name: "respond", arguments: answer }] }))
    const { data, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("who?"), response_format: responseFormat })
      .withResponse()
    expect(data.choices[0].message.content).toBe(answer)
    expect(data.choices[0].message.tool_calls ?? []).toHaveLength(0)
    expect(data.choices[0].finish_reason).toBe("stop")
    expect(response.headers.get("x-gateway-structured-fallback")).toBeNull()

    const sent = bodyOf(upstream.requests[0])
    expect(sent.tools).toEqual([{ type: "function", function: expect.objectContaining({ name: "respond", parameters: schema }) }])
    expect(sent.tool_choice).toEqual({ type: "function", function: { name: "respond" } })
    expect(sent.response_format).toBeUndefined()
  })

  it("text fallback: plain JSON text matching the schema is the content, flagged with the header", async () => {
    upstream.script(chatJson({ content: answer }))
    const { data, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("who?"), response_format: responseFormat })
      .withResponse()
    expect(data.choices[0].message.content).toBe(answer)
    expect(data.choices[0].finish_reason).toBe("stop")
    expect(response.headers.get("x-gateway-structured-fallback")).toBe("text")
  })

  it("text fallback strips one markdown code fence", async () => {
    upstream.script(chatJson({ content: "```json\n" + answer + "\n```" }))
    const { data, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("who?"), response_format: responseFormat })
      .withResponse()
    expect(JSON.parse(data.choices[0].message.content ?? "") as unknown).toEqual({ name: "Ada", age: 36 })
    expect(response.headers.get("x-gateway-structured-fallback")).toBe("text")
  })

  it("neither a respond call nor matching text: 502 structured_output_missing", async () => {
    upstream.script(chatJson({ content: "I would rather not." }), chatJson({ content: JSON.stringify({ name: "Ada" }) }), chatJson({ content: JSON.stringify({ name: "Ada", age: "old" }) }))
    for (let i = 0; i < 3; i++) {
      const err = await apiError(client.chat.completions.create({ model: "up/gpt-x", messages: user("who?"), response_format: responseFormat }))
      expect(err.status).toBe(502)
      expect(err.code).toBe("structured_output_missing")
      expect(err.type).toBe("server_error")
    }
  })

  it("a caller tool named respond with json_schema is 400 reserved_tool_name", async () => {
    const err = await apiError(
      client.chat.completions.create({
        model: "up/gpt-x",
        messages: user("who?"),
        response_format: responseFormat,
        tools: [{ type: "function", function: { name: "respond", parameters: { type: "object" } } }]
      })
    )
    expect(err.status).toBe(400)
    expect(err.code).toBe("reserved_tool_name")
    expect(upstream.requests).toHaveLength(0)
  })

  it("stream: exactly one content delta holding the whole JSON, finish_reason stop", async () => {
    upstream.script(chatSse({ toolCalls: [{ id: "call_r", name: "respond", arguments: answer }] }))
    const { data: stream, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("who?"), response_format: responseFormat, stream: true, stream_options: { include_usage: true } })
      .withResponse()
    const got = await assemble(stream)
    expect(got.contentDeltas).toBe(1)
    expect(got.content).toBe(answer)
    expect(got.toolCalls).toEqual([])
    expect(got.finish).toEqual(["stop"])
    expect(got.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 3 })
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(bodyOf(upstream.requests[0])).toMatchObject({ stream: true, tool_choice: { type: "function", function: { name: "respond" } } })
  })

  it("stream with text fallback: one content delta, no fallback header", async () => {
    upstream.script(chatSse({ content: answer, split: 4 }))
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("who?"), response_format: responseFormat, stream: true })
    expect(raw.status).toBe(200)
    expect(raw.headers.get("x-gateway-structured-fallback")).toBeNull()
    const contents = sseChunks(raw.text)
      .map((c) => c.choices?.[0]?.delta?.content)
      .filter((t): t is string => typeof t === "string" && t !== "")
    expect(contents).toEqual([answer])
    expect(sseData(raw.text).at(-1)).toBe("[DONE]")
  })

  it("stream with neither respond call nor matching text fails with structured_output_missing and no [DONE]", async () => {
    upstream.script(chatSse({ content: "I would rather not." }))
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("who?"), response_format: responseFormat, stream: true })
    expect(raw.text).not.toContain("[DONE]")
    expect(raw.text).not.toContain("rather not")
    expect(raw.text).toContain("structured_output_missing")
    // Nothing was output before the failure (the structured answer is held back), so the failure
    // is an HTTP error rather than a committed 200 stream with an error frame (spec 6.1 / 6.3).
    expect(raw.status).toBe(502)
  })
})

// ---------------------------------------------------------------------------------------------
// 7. n > 1
// ---------------------------------------------------------------------------------------------

describe("chat completions: several choices", () => {
  it("n: 2 makes two upstream calls; choices 0 and 1, summed usage, two session ids", async () => {
    upstream.onRequest(auto({ content: "one of two", usage: { prompt: 10, completion: 3, cached: 2, reasoning: 1 } }))
    const { data, response } = await client.chat.completions.create({ model: "up/gpt-x", messages: user("hi"), n: 2 }).withResponse()
    expect(data.choices.map((c) => c.index)).toEqual([0, 1])
    expect(data.choices.map((c) => c.message.content)).toEqual(["one of two", "one of two"])
    expect(data.usage).toMatchObject({
      prompt_tokens: 20,
      completion_tokens: 6,
      total_tokens: 26,
      prompt_tokens_details: { cached_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 2 }
    })
    const sessions = (response.headers.get("x-gateway-session") ?? "").split(",")
    expect(sessions).toHaveLength(2)
    for (const s of sessions) expect(s).toMatch(SESSION)
    expect(new Set(sessions).size).toBe(2)
    expect(upstream.requests).toHaveLength(2)
    for (const r of upstream.requests) expect(bodyOf(r).n).toBeUndefined()
  })

  it("n: 2 stream: both indexes, each with its own finish, summed usage", async () => {
    upstream.onRequest(auto({ content: "streamed twice", split: 4, usage: { prompt: 10, completion: 3 } }))
    const { data: stream, response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("hi"), n: 2, stream: true, stream_options: { include_usage: true } })
      .withResponse()
    const texts = ["", ""]
    const finishes: Array<Array<string>> = [[], []]
    let usage: ChatCompletionChunk["usage"] | undefined
    for await (const chunk of stream as AsyncIterable<ChatCompletionChunk>) {
      if (chunk.usage != null) usage = chunk.usage
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.delta.content ?? ""
        if (choice.finish_reason != null) finishes[choice.index].push(choice.finish_reason)
      }
    }
    expect(texts).toEqual(["streamed twice", "streamed twice"])
    expect(finishes).toEqual([["stop"], ["stop"]])
    expect(usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 6, total_tokens: 26 })
    expect((response.headers.get("x-gateway-session") ?? "").split(",")).toHaveLength(2)
    expect(upstream.requests).toHaveLength(2)
  })

  it("n above maxChoices is a 400 naming n, with no upstream call", async () => {
    const err = await apiError(client.chat.completions.create({ model: "up/gpt-x", messages: user("hi"), n: 3 }))
    expect(err.status).toBe(400)
    expect(err.param).toBe("n")
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// 8. Unsupported params
// ---------------------------------------------------------------------------------------------

describe("chat completions: dropUnsupportedParams", () => {
  it("a param the model rejects is not sent upstream and is listed in x-gateway-dropped-params", async () => {
    const { response } = await client.chat.completions
      .create({ model: "up/nosamp", messages: user("hi"), temperature: 0.5, top_p: 0.9 })
      .withResponse()
    expect(response.headers.get("x-gateway-dropped-params")).toBe("temperature")
    const sent = bodyOf(upstream.requests[0])
    expect(sent.temperature).toBeUndefined()
    expect(sent.top_p).toBe(0.9)
    expect(sent.model).toBe("nosamp")
  })

  it("the same param on a model that takes it is passed on, with no header", async () => {
    const { response } = await client.chat.completions
      .create({ model: "up/gpt-x", messages: user("hi"), temperature: 0.5, seed: 7, presence_penalty: 0.1, frequency_penalty: 0.2, stop: ["END"] })
      .withResponse()
    expect(response.headers.get("x-gateway-dropped-params")).toBeNull()
    expect(bodyOf(upstream.requests[0])).toMatchObject({ temperature: 0.5, seed: 7, presence_penalty: 0.1, frequency_penalty: 0.2, stop: ["END"] })
  })

  it("the header is also set on streams", async () => {
    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/nosamp", messages: user("hi"), temperature: 0.5, stream: true })
    expect(raw.status).toBe(200)
    expect(raw.headers.get("x-gateway-dropped-params")).toBe("temperature")
    expect(bodyOf(upstream.requests[0]).temperature).toBeUndefined()
  })

  it("with dropUnsupportedParams false the rejected param is sent as is", async () => {
    const { response } = await reasoningClient.chat.completions.create({ model: "up/nosamp", messages: user("hi"), temperature: 0.5 }).withResponse()
    expect(response.headers.get("x-gateway-dropped-params")).toBeNull()
    expect(bodyOf(upstream.requests[0]).temperature).toBe(0.5)
  })

  it("top_k, which the openai provider type never sends, is not sent upstream and is listed as dropped", async () => {
    const params: ChatCompletionCreateParamsNonStreaming & { top_k: number } = { model: "up/gpt-x", messages: user("hi"), top_k: 40 }
    const { response } = await client.chat.completions.create(params).withResponse()
    expect(bodyOf(upstream.requests[0]).top_k).toBeUndefined()
    // spec 4.0: x-gateway-dropped-params lists params dropped because "the model or its provider
    // does not take them"; spec 4.2: top_k is "dropped (and listed) for models ... whose provider never sends it"
    expect((response.headers.get("x-gateway-dropped-params") ?? "").split(",")).toContain("top_k")
  })
})

// ---------------------------------------------------------------------------------------------
// 9. Variants and model ids
// ---------------------------------------------------------------------------------------------

describe("chat completions: variants and model ids", () => {
  it("up/m#high sends reasoning_effort high for model m; model echoes the id with its variant", async () => {
    const res = await client.chat.completions.create({ model: "up/m#high", messages: user("think") })
    expect(res.model).toBe("up/m#high")
    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "m", reasoning_effort: "high" })
  })

  it("reasoning_effort high in the request picks the high variant of up/m", async () => {
    await client.chat.completions.create({ model: "up/m", messages: user("think"), reasoning_effort: "high" })
    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "m", reasoning_effort: "high" })
  })

  it("no variant and no reasoning_effort: nothing is sent", async () => {
    await client.chat.completions.create({ model: "up/m", messages: user("think") })
    expect(bodyOf(upstream.requests[0]).reasoning_effort).toBeUndefined()
  })

  it("a variant in the id wins over the request's reasoning_effort", async () => {
    await client.chat.completions.create({ model: "up/m#high", messages: user("think"), reasoning_effort: "low" })
    expect(bodyOf(upstream.requests[0]).reasoning_effort).toBe("high")
  })

  it("an alias carries a variant suffix to its target", async () => {
    const res = await client.chat.completions.create({ model: "smart#high", messages: user("think"), stream: true })
    const got = await assemble(res)
    expect(got.models).toEqual(new Set(["smart#high"]))
    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "m", reasoning_effort: "high" })
  })

  it("an unknown variant is a 400 naming model", async () => {
    const err = await apiError(client.chat.completions.create({ model: "up/m#nope", messages: user("hi") }))
    expect(err.status).toBe(400)
    expect(err.param).toBe("model")
    expect(err.type).toBe("invalid_request_error")
    expect(upstream.requests).toHaveLength(0)
  })

  it("an unknown model is a 404 model_not_found (non-stream and stream)", async () => {
    const err = await apiError(client.chat.completions.create({ model: "nope/x", messages: user("hi") }))
    expect(err.status).toBe(404)
    expect(err.code).toBe("model_not_found")
    expect(err.param).toBe("model")
    const bare = await apiError(client.chat.completions.create({ model: "gpt-x", messages: user("hi") }))
    expect(bare.status).toBe(404)
    expect(bare.code).toBe("model_not_found")
    const streamed = await apiError(client.chat.completions.create({ model: "no-such-alias", messages: user("hi"), stream: true }))
    expect(streamed.status).toBe(404)
    expect(streamed.code).toBe("model_not_found")
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// 10. Reasoning text
// ---------------------------------------------------------------------------------------------

describe("chat completions: reasoning output", () => {
  const reasoning = "Let me think about this carefully."
  const content = "The answer is 42."

  it("reasoningOutput true: reasoning_content deltas reach the client before the content", async () => {
    upstream.onRequest(auto({ reasoning, content, split: 6 }))
    const got = await assemble(await reasoningClient.chat.completions.create({ model: "up/gpt-x", messages: user("q"), stream: true }))
    expect(got.reasoning).toBe(reasoning)
    expect(got.content).toBe(content)
    expect(got.finish).toEqual(["stop"])
    const reasoningAt = got.chunks.flatMap((c, i) => (typeof field(c.choices[0]?.delta, "reasoning_content") === "string" ? [i] : []))
    const contentAt = got.chunks.flatMap((c, i) => (typeof c.choices[0]?.delta.content === "string" && c.choices[0].delta.content !== "" ? [i] : []))
    expect(reasoningAt.length).toBeGreaterThan(1)
    expect(Math.max(...reasoningAt)).toBeLessThan(Math.min(...contentAt))
  })

  it("reasoningOutput true: non-stream message carries reasoning_content", async () => {
    upstream.onRequest(auto({ reasoning, content }))
    const res = await reasoningClient.chat.completions.create({ model: "up/gpt-x", messages: user("q") })
    expect(res.choices[0].message.content).toBe(content)
    expect(field(res.choices[0].message, "reasoning_content")).toBe(reasoning)
  })

  it("reasoningOutput false: no reasoning_content anywhere, the stream still works", async () => {
    upstream.onRequest(auto({ reasoning, content, split: 6 }))
    const got = await assemble(await client.chat.completions.create({ model: "up/gpt-x", messages: user("q"), stream: true }))
    expect(got.reasoning).toBe("")
    expect(got.content).toBe(content)
    expect(got.finish).toEqual(["stop"])

    const raw = await rawPost(gateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("q"), stream: true })
    expect(raw.text).not.toContain("reasoning_content")
    expect(raw.text).not.toContain("carefully")
    expect(sseData(raw.text).at(-1)).toBe("[DONE]")

    const whole = await client.chat.completions.create({ model: "up/gpt-x", messages: user("q") })
    expect(whole.choices[0].message.content).toBe(content)
    expect(field(whole.choices[0].message, "reasoning_content")).toBeUndefined()
  })

  it("an assistant turn's reasoning_content in the request is accepted", async () => {
    upstream.onRequest(auto({ content: "ok" }))
    const earlier: ChatCompletionAssistantMessageParam & { reasoning_content: string } = { role: "assistant", content: "earlier", reasoning_content: "I thought" }
    const params: ChatCompletionCreateParamsStreaming = {
      model: "up/gpt-x",
      stream: true,
      messages: [{ role: "user", content: "q" }, earlier, { role: "user", content: "again" }]
    }
    const got = await assemble(await reasoningClient.chat.completions.create(params))
    expect(got.content).toBe("ok")
    expect(bodyOf(upstream.requests[0]).messages).toMatchObject([
      { role: "user", content: "q" },
      { role: "assistant", content: "earlier" },
      { role: "user", content: "again" }
    ])
  })
})

// ---------------------------------------------------------------------------------------------
// 11. Keys
// ---------------------------------------------------------------------------------------------

describe("chat completions: API keys", () => {
  const clientWith = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${keyGateway.url}/v1`, maxRetries: 0, timeout: 10_000 })

  it("a missing key is 401 invalid_api_key in the OpenAI envelope", async () => {
    const raw = await rawPost(keyGateway.url, "/v1/chat/completions", { model: "up/allowed-1", messages: user("hi") })
    expect(raw.status).toBe(401)
    const body = JSON.parse(raw.text) as { error: Json }
    expect(body.error).toMatchObject({ type: "authentication_error", code: "invalid_api_key", param: null })
    expect(typeof body.error.message).toBe("string")
    expect(upstream.requests).toHaveLength(0)
  })

  it("a wrong key is 401 through the SDK", async () => {
    const err = await apiError(clientWith("sk-wrong-0123456789").chat.completions.create({ model: "up/allowed-1", messages: user("hi") }))
    expect(err.status).toBe(401)
    expect(err.code).toBe("invalid_api_key")
    expect(err.type).toBe("authentication_error")
    expect(JSON.stringify(err.error)).not.toContain("sk-wrong")
    expect(upstream.requests).toHaveLength(0)
  })

  it("the right key works, and the upstream sees the provider key, not the caller's", async () => {
    const res = await clientWith(TEAM_A_KEY).chat.completions.create({ model: "up/allowed-1", messages: user("hi") })
    expect(res.choices[0].message.content).toBe("Hello from upstream")
    expect(upstream.requests[0].headers.authorization).toBe("Bearer upstream-secret")
    expect(upstream.requests[0].rawBody).not.toContain(TEAM_A_KEY)
  })

  it("allowedModels: another model is 403 for team-a, allowed for team-b", async () => {
    const err = await apiError(clientWith(TEAM_A_KEY).chat.completions.create({ model: "up/gpt-x", messages: user("hi") }))
    expect(err.status).toBe(403)
    expect(err.type).toBe("permission_error")
    expect(upstream.requests).toHaveLength(0)
    const streamed = await apiError(clientWith(TEAM_A_KEY).chat.completions.create({ model: "smart", messages: user("hi"), stream: true }))
    expect(streamed.status).toBe(403)
    expect(upstream.requests).toHaveLength(0)

    const ok = await clientWith(TEAM_B_KEY).chat.completions.create({ model: "up/gpt-x", messages: user("hi") })
    expect(ok.choices[0].message.content).toBe("Hello from upstream")
  })

  it("the model list is filtered by allowedModels", async () => {
    const a: Array<string> = []
    for await (const m of clientWith(TEAM_A_KEY).models.list()) a.push(m.id)
    expect(a).toEqual(["up/allowed-1"])
    const b: Array<string> = []
    for await (const m of clientWith(TEAM_B_KEY).models.list()) b.push(m.id)
    expect(b).toEqual(expect.arrayContaining(["up/gpt-x", "up/allowed-1", "smart"]))
  })
})

// ---------------------------------------------------------------------------------------------
// 12. Legacy completions
// ---------------------------------------------------------------------------------------------

describe("legacy /v1/completions", () => {
  it("non-stream: text, finish_reason, usage, model echo; upstream gets one user message", async () => {
    upstream.script(chatJson({ content: "Hello, legacy world", usage: { prompt: 4, completion: 5 } }))
    const { data, response } = await client.completions.create({ model: "up/gpt-x", prompt: "Say hi", max_tokens: 20 }).withResponse()
    expect(data.object).toBe("text_completion")
    expect(data.model).toBe("up/gpt-x")
    expect(data.choices).toHaveLength(1)
    expect(data.choices[0]).toMatchObject({ index: 0, text: "Hello, legacy world", finish_reason: "stop" })
    expect(data.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 })
    expect(response.headers.get("x-gateway-session")).toMatch(SESSION)
    expect(bodyOf(upstream.requests[0])).toMatchObject({ model: "gpt-x", messages: [{ role: "user", content: "Say hi" }], max_tokens: 20 })
  })

  it("stream: text deltas, finish_reason, usage chunk, [DONE]", async () => {
    upstream.onRequest(auto({ content: "Streaming legacy text", split: 5, usage: { prompt: 4, completion: 5 } }))
    const stream = await client.completions.create({ model: "up/gpt-x", prompt: "Say hi", stream: true, stream_options: { include_usage: true } })
    let text = ""
    const finishes: Array<string> = []
    let usage: Json | undefined
    for await (const chunk of stream) {
      expect(chunk.model).toBe("up/gpt-x")
      for (const choice of chunk.choices) {
        text += choice.text
        if (choice.finish_reason != null) finishes.push(choice.finish_reason)
      }
      if (chunk.usage != null) usage = { ...chunk.usage }
    }
    expect(text).toBe("Streaming legacy text")
    expect(finishes).toEqual(["stop"])
    expect(usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 })
    expect(bodyOf(upstream.requests[0])).toMatchObject({ stream: true, messages: [{ role: "user", content: "Say hi" }] })

    const raw = await rawPost(gateway.url, "/v1/completions", { model: "up/gpt-x", prompt: "Say hi", stream: true })
    expect(raw.status).toBe(200)
    expect(sseData(raw.text).at(-1)).toBe("[DONE]")
    expect(sseChunks(raw.text).every((c) => c.object === "text_completion")).toBe(true)
  })

  it("an upstream failure is an APIError in the OpenAI envelope", async () => {
    upstream.script(openAiError(529, SECRET, "overloaded_error"))
    const err = await apiError(client.completions.create({ model: "up/gpt-x", prompt: "Say hi" }))
    expect(err.status).toBe(503)
    expect(err.code).toBe("provider_overloaded")
    expect(JSON.stringify(err.error)).not.toContain(SECRET)
  })
})

// ---------------------------------------------------------------------------------------------
// 13. Model list
// ---------------------------------------------------------------------------------------------

describe("GET /v1/models", () => {
  it("lists configured models and aliases", async () => {
    const ids: Array<string> = []
    for await (const m of client.models.list()) {
      expect(m.object).toBe("model")
      expect(typeof m.owned_by).toBe("string")
      ids.push(m.id)
    }
    expect(ids).toEqual(expect.arrayContaining(["up/gpt-x", "up/m", "up/nosamp", "up/allowed-1", "fb", "fbdead", "smart"]))
    expect(new Set(ids).size).toBe(ids.length)
    expect(upstream.requests).toHaveLength(0)
  })
})

// ---------------------------------------------------------------------------------------------
// Request deadline (requestTimeoutMs)
// ---------------------------------------------------------------------------------------------

describe("chat completions: request deadline", () => {
  let slowGateway: TestGateway
  let slowClient: OpenAI
  beforeAll(async () => {
    slowGateway = await startGateway({ providers: providersFor(upstream.url, bad.url, "http://127.0.0.1:9/v1"), requestTimeoutMs: 1_000 })
    slowClient = new OpenAI({ apiKey: "unused", baseURL: `${slowGateway.url}/v1`, maxRetries: 0, timeout: 10_000 })
  })
  afterAll(async () => {
    await slowGateway?.close()
  })

  it("an upstream that never answers is a 504 timeout (non-stream and stream before output)", async () => {
    // the upstream would give up only after 20 s: the answers come at the deadline (generous backstops)
    upstream.script({ kind: "stall", ms: 20_000 }, { kind: "stall", ms: 20_000 })
    let started = Date.now()
    const err = await apiError(slowClient.chat.completions.create({ model: "up/gpt-x", messages: user("hi") }))
    expect(err.status).toBe(504)
    expect(err.code).toBe("timeout")
    const nonStreamMs = Date.now() - started
    started = Date.now()
    const streamed = await apiError(slowClient.chat.completions.create({ model: "up/gpt-x", messages: user("hi"), stream: true }))
    expect(streamed.status).toBe(504)
    expect(streamed.code).toBe("timeout")
    const streamMs = Date.now() - started
    // the answer comes at the deadline, not when the upstream finally gives up
    expect({ nonStreamMs: nonStreamMs < 9_000, streamMs: streamMs < 9_000 }).toEqual({ nonStreamMs: true, streamMs: true })
  })

  it("a deadline hit after output began ends the stream with a timeout error frame and no [DONE]", async () => {
    // the first chunk comes long before the deadline (120 ms of 1 s), the last long after it (4 s)
    upstream.script(chatSse({ content: "abcdefghijklmnopqrstuvwxyzABCDEF", split: 1, delayMs: 120 }))
    const raw = await rawPost(slowGateway.url, "/v1/chat/completions", { model: "up/gpt-x", messages: user("hi"), stream: true })
    expect(raw.status).toBe(200)
    expect(raw.text).not.toContain("[DONE]")
    const parsed = sseChunks(raw.text)
    expect(parsed.length).toBeGreaterThan(1)
    expect(parsed[parsed.length - 1].error).toMatchObject({ code: "timeout" })
  })
})

// ---------------------------------------------------------------------------------------------
// Client disconnects
// ---------------------------------------------------------------------------------------------

describe("chat completions: a client that goes away cancels the upstream call", () => {
  const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

  /** A fresh upstream and gateway, so that no pooled keep-alive socket muddies the connection count. */
  const fresh = async <A>(f: (up: FakeUpstream, sdk: OpenAI) => Promise<A>): Promise<A> => {
    const up = await startFakeUpstream()
    const gw = await startGateway({ providers: { up: { type: "openai", baseUrl: up.url } } })
    try {
      return await f(up, new OpenAI({ apiKey: "unused", baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 }))
    } finally {
      await gw.close()
      await up.close()
    }
  }

  /**
   * ms until the upstream has no open connection (an aborted call destroys its socket), or undefined after `within` ms.
   * The upstream answers take a minute or more, so only a cancel closes the connection within the (generous) bound.
   */
  const closedWithin = async (up: FakeUpstream, within: number): Promise<number | undefined> => {
    const started = Date.now()
    while (Date.now() - started < within) {
      if (up.openConnections() === 0) return Date.now() - started
      await sleep(20)
    }
    return undefined
  }

  const untilRequested = async (up: FakeUpstream) => {
    const started = Date.now()
    while (up.requests.length === 0 && Date.now() - started < 10_000) await sleep(10)
    expect(up.requests).toHaveLength(1)
  }

  it("stream, before any output: the upstream connection is closed", async () => {
    await fresh(async (up, sdk) => {
      up.script({ kind: "stall", ms: 60_000 })
      const controller = new AbortController()
      const pending = sdk.chat.completions.create({ model: "up/x", messages: user("hi"), stream: true }, { signal: controller.signal }).catch(() => undefined)
      await untilRequested(up)
      controller.abort()
      await pending
      expect(await closedWithin(up, 10_000)).toBeDefined()
    })
  })

  it("non-stream: the upstream connection is closed", async () => {
    await fresh(async (up, sdk) => {
      up.script({ kind: "stall", ms: 60_000 })
      const controller = new AbortController()
      const pending = sdk.chat.completions.create({ model: "up/x", messages: user("hi") }, { signal: controller.signal }).catch(() => undefined)
      await untilRequested(up)
      controller.abort()
      await pending
      expect(await closedWithin(up, 10_000)).toBeDefined()
    })
  })

  it("stream, after output began: the upstream connection is closed and the answer is not read to its end", async () => {
    await fresh(async (up, sdk) => {
      up.script(chatSse({ content: "x".repeat(600), split: 1, delayMs: 100 }))
      const stream = await sdk.chat.completions.create({ model: "up/x", messages: user("hi"), stream: true })
      let seen = ""
      for await (const chunk of stream) {
        seen += chunk.choices[0]?.delta?.content ?? ""
        if (seen.length > 0) break // the SDK aborts the request
      }
      expect(seen).toBe("x")
      expect(await closedWithin(up, 10_000)).toBeDefined()
    })
  })
})
