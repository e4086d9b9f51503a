/**
 * The official `@anthropic-ai/sdk` against the gateway's Messages API, through a fake
 * chat-completions upstream on loopback: answers, streams, tools, stop sequences, thinking,
 * structured output and refusals in the Messages envelope.
 */
import Anthropic from "@anthropic-ai/sdk"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-messages-test-key"

interface UpstreamMessage {
  readonly role: string
  readonly content?: unknown
  readonly tool_call_id?: string
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
}
interface UpstreamBody {
  readonly model: string
  readonly messages: ReadonlyArray<UpstreamMessage>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
  readonly tool_choice?: unknown
  readonly reasoning_effort?: string
  readonly temperature?: number
  readonly stop?: unknown
}

describe("Messages API through the @anthropic-ai/sdk", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  let client: Anthropic
  const last = (): UpstreamBody => upstream.requests[upstream.requests.length - 1].body as UpstreamBody

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "claude" }],
      providers: {
        up: {
          type: "openai",
          baseUrl: upstream.url,
          apiKey: "k",
          models: {
            thinker: { variants: { low: { reasoningEffort: "low" }, high: { reasoningEffort: "high" } } },
            cold: { rejects: ["temperature"] }
          }
        }
      },
      aliases: { "claude-*": "up/*" }
    })
    client = new Anthropic({ apiKey: KEY, baseURL: gateway.url, maxRetries: 0 })
  })
  beforeEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("answers a message, echoing the model and mapping usage", async () => {
    upstream.onRequest(() => chatJson({ content: "Hi there", usage: { prompt: 20, completion: 4, cached: 5 } }))
    const { data: message, response } = await client.messages
      .create({ model: "claude-sonnet-x", max_tokens: 100, system: "be brief", messages: [{ role: "user", content: "Hello" }] })
      .withResponse()
    expect(message.model).toBe("claude-sonnet-x")
    expect(message.id).toMatch(/^msg_/)
    expect(message.content).toEqual([{ type: "text", text: "Hi there" }])
    expect(message.stop_reason).toBe("end_turn")
    expect(message.usage).toMatchObject({ input_tokens: 15, output_tokens: 4, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 })
    expect(response.headers.get("request-id")).toMatch(/^req_/)
    expect(response.headers.get("x-gateway-session")).toMatch(/^ses_[0-9a-f]{32}$/)
    expect(last().model).toBe("sonnet-x")
    expect(last().messages[0]).toEqual({ role: "system", content: "be brief" })
  })

  it("streams the 6.2 event sequence and the SDK assembles the same message", async () => {
    upstream.onRequest(() => chatSse({ content: "Streaming works fine", split: 4 }))
    const final = await client.messages.stream({ model: "claude-a", max_tokens: 50, messages: [{ role: "user", content: "go" }] }).finalMessage()
    expect(final.content).toEqual([{ type: "text", text: "Streaming works fine" }])
    // the raw event order (the SDK does not surface ping)
    const raw = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ model: "claude-a", max_tokens: 50, stream: true, messages: [{ role: "user", content: "go" }] })
    })
    const types = [...(await raw.text()).matchAll(/^event: (\S+)$/gm)].map((m) => m[1])
    expect(types[0]).toBe("message_start")
    expect(types[1]).toBe("content_block_start")
    expect(types[2]).toBe("ping")
    expect(types.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"])
  })

  it("round-trips a tool call: tool_use out, tool_result back to the upstream", async () => {
    upstream.onRequest(() => chatJson({ toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }] }))
    const tools = [{ name: "get_weather", description: "weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }]
    const first = await client.messages.create({ model: "claude-a", max_tokens: 50, tools, messages: [{ role: "user", content: "weather?" }] })
    expect(first.stop_reason).toBe("tool_use")
    const use = first.content.find((b) => b.type === "tool_use")
    expect(use).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Paris" } })
    expect(use?.type === "tool_use" && use.id).toMatch(/^toolu_/)
    upstream.onRequest(() => chatJson({ content: "It is sunny" }))
    const id = use?.type === "tool_use" ? use.id : ""
    const second = await client.messages.create({
      model: "claude-a",
      max_tokens: 50,
      tools,
      messages: [
        { role: "user", content: "weather?" },
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: "sunny, 25C" }] }
      ]
    })
    expect(second.content).toEqual([{ type: "text", text: "It is sunny" }])
    const tool = last().messages.find((m) => m.role === "tool")
    expect(tool).toMatchObject({ tool_call_id: id, content: "sunny, 25C" })
  })

  it("passes images in tool results as user media after the results", async () => {
    upstream.onRequest(() => chatJson({ content: "I see a pixel" }))
    const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    await client.messages.create({
      model: "claude-a",
      max_tokens: 50,
      tools: [{ name: "shot", input_schema: { type: "object" as const } }],
      messages: [
        { role: "user", content: "take a screenshot" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_s1", name: "shot", input: {} }] },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_s1", content: [{ type: "text", text: "here" }, { type: "image", source: { type: "base64", media_type: "image/png", data: pixel } }] }]
        }
      ]
    })
    const messages = last().messages
    const toolAt = messages.findIndex((m) => m.role === "tool")
    expect(messages[toolAt]).toMatchObject({ tool_call_id: "toolu_s1", content: "here" })
    expect(JSON.stringify(messages[toolAt + 1])).toContain(`data:image/png;base64,${pixel}`)
    expect(messages[toolAt + 1].role).toBe("user")
  })

  it("counts tokens and lists models through this setup too", async () => {
    const counted = await client.messages.countTokens({ model: "claude-a", messages: [{ role: "user", content: "Hello there" }] })
    expect(counted.input_tokens).toBeGreaterThan(0)
    const models = await client.models.list()
    expect(Array.isArray(models.data)).toBe(true)
  })

  it("matches stop sequences itself across chunk boundaries, stream and not", async () => {
    upstream.onRequest((req) => ((req.body as { stream?: boolean }).stream ? chatSse({ content: "one two STOP three", split: 3 }) : chatJson({ content: "one two STOP three" })))
    const plain = await client.messages.create({ model: "claude-a", max_tokens: 50, stop_sequences: ["STOP"], messages: [{ role: "user", content: "count" }] })
    expect(plain.content).toEqual([{ type: "text", text: "one two " }])
    expect(plain.stop_reason).toBe("stop_sequence")
    expect(plain.stop_sequence).toBe("STOP")
    expect(last().stop).toBeUndefined()
    const streamed = await client.messages.stream({ model: "claude-a", max_tokens: 50, stop_sequences: ["STOP"], messages: [{ role: "user", content: "count" }] }).finalMessage()
    expect(streamed.content).toEqual([{ type: "text", text: "one two " }])
    expect(streamed.stop_sequence).toBe("STOP")
  })

  it("maps thinking to a variant, returns thinking blocks, and says when a model cannot think", async () => {
    upstream.onRequest(() => chatJson({ content: "done", reasoning: "let me think" }))
    const thought = await client.messages.create({ model: "claude-thinker", max_tokens: 20000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: [{ role: "user", content: "hard" }] })
    expect(last().reasoning_effort).toBe("low")
    expect(thought.content[0]).toMatchObject({ type: "thinking", thinking: "let me think" })
    const { response } = await client.messages
      .create({ model: "claude-plain", max_tokens: 20000, thinking: { type: "enabled", budget_tokens: 20000 - 1 }, messages: [{ role: "user", content: "hard" }] })
      .withResponse()
    expect(response.headers.get("x-gateway-thinking")).toBe("unavailable")
  })

  it("rewrites placeholder tool ids in returned thinking to tool names", async () => {
    upstream.onRequest(() => chatJson({ content: "done", reasoning: "I will use functions.get_weather:0 now" }))
    const thought = await client.messages.create({ model: "claude-thinker", max_tokens: 20000, thinking: { type: "enabled", budget_tokens: 2000 }, messages: [{ role: "user", content: "x" }] })
    expect(thought.content[0]).toMatchObject({ type: "thinking", thinking: "I will use get_weather now" })
  })

  it("answers structured output as one JSON text block", async () => {
    upstream.onRequest(() => chatJson({ toolCalls: [{ id: "c", name: "respond", arguments: '{"answer":42}' }] }))
    const res = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "claude-a", max_tokens: 50, messages: [{ role: "user", content: "q" }], output_config: { format: { type: "json_schema", schema: { type: "object", properties: { answer: { type: "number" } } } } } })
    })
    const body = (await res.json()) as { content: ReadonlyArray<{ type: string; text: string }>; stop_reason: string }
    expect(body.content).toEqual([{ type: "text", text: '{"answer":42}' }])
    expect(body.stop_reason).toBe("end_turn")
  })

  it("drops params the model refuses and lists them", async () => {
    upstream.onRequest(() => chatJson({ content: "ok" }))
    // SDK 1.x no longer types temperature: send the request raw
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ model: "claude-cold", max_tokens: 10, temperature: 0.5, messages: [{ role: "user", content: "x" }] })
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("x-gateway-dropped-params")).toBe("temperature")
    expect(last().temperature).toBeUndefined()
  })

  it("refuses bad requests in the Messages envelope, naming the field", async () => {
    const cases: ReadonlyArray<[Record<string, unknown>, string]> = [
      [{ model: "claude-a", messages: [{ role: "user", content: "x" }] }, "max_tokens"],
      [{ model: "claude-a", max_tokens: 10, tools: [{ type: "web_search_20250305", name: "web_search" }], messages: [{ role: "user", content: "x" }] }, "tools.0.type"],
      [{ model: "claude-a", max_tokens: 10, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "r" }] }] }, "messages.0.content.0.tool_use_id"],
      [{ model: "claude-a", max_tokens: 10, thinking: { type: "enabled", budget_tokens: 500 }, messages: [{ role: "user", content: "x" }] }, "thinking.budget_tokens"],
      [{ model: "claude-a", max_tokens: 10, mcp_servers: [{}], messages: [{ role: "user", content: "x" }] }, "mcp_servers"],
      [{ model: "claude-a", max_tokens: 10, messages: [{ role: "user", content: [{ type: "server_tool_use", id: "a", name: "b", input: {} }] }] }, "messages.0.content.0.type"],
      [{ model: "claude-a", max_tokens: 10, tool_choice: { type: "tool", name: "nope" }, messages: [{ role: "user", content: "x" }] }, "tool_choice.name"]
    ]
    for (const [body, field] of cases) {
      const res = await fetch(`${gateway.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": KEY }, body: JSON.stringify(body) })
      expect(res.status, field).toBe(400)
      const error = (await res.json()) as { type: string; error: { type: string; message: string } }
      expect(error.type).toBe("error")
      expect(error.error.type).toBe("invalid_request_error")
      expect(error.error.message).toContain(field)
    }
    const unauth = await fetch(`${gateway.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })
    expect(unauth.status).toBe(401)
    expect(((await unauth.json()) as { error: { type: string } }).error.type).toBe("authentication_error")
  })

  it("gives 529 overloaded_error for a provider overload", async () => {
    upstream.onRequest(() => ({ kind: "json", status: 529, body: { error: { message: "Overloaded" } } }))
    const res = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: "claude-a", max_tokens: 10, messages: [{ role: "user", content: "x" }] })
    })
    expect(res.status).toBe(529)
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("overloaded_error")
  })
})

describe("Messages structured output in a stream", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({ providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } } })
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("ends with an error event and no message_stop when the model returns no matching JSON", async () => {
    upstream.onRequest(() => chatSse({ content: "not json at all" }))
    const res = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "up/m",
        max_tokens: 50,
        stream: true,
        messages: [{ role: "user", content: "q" }],
        output_config: { format: { type: "json_schema", schema: { type: "object", required: ["a"] } } }
      })
    })
    const text = await res.text()
    const types = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1])
    expect(types).toEqual(["message_start", "error"])
    expect(text).toContain('"type":"api_error"')
  })
})
