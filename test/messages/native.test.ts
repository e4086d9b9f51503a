/**
 * The Messages API on the native `anthropic` provider type: signed thinking and tool calls stream
 * through to the client, and the client's signed thinking blocks are replayed to the upstream
 * intact; plus count_tokens with the refusals of a real request.
 */
import Anthropic from "@anthropic-ai/sdk"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { messageJson, messageSse, startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-native-messages-key"

interface NativeBody {
  readonly model: string
  readonly thinking?: { readonly type: string; readonly budget_tokens: number }
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: ReadonlyArray<Record<string, unknown>> }>
}

describe("Messages API on the native anthropic provider", () => {
  let upstream: FakeMessagesUpstream
  let gateway: TestGateway
  let client: Anthropic
  const last = () => upstream.requests[upstream.requests.length - 1]

  beforeAll(async () => {
    upstream = await startFakeMessagesUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "claude" }],
      providers: {
        ant: { type: "anthropic", baseUrl: upstream.origin, apiKey: "upstream-secret", models: { "claude-x": { variants: { low: { reasoningEffort: "low" }, high: { reasoningEffort: "high" } } } } }
      },
      aliases: { "claude-*": "ant/claude-*" },
      maxTools: 8
    })
    client = new Anthropic({ apiKey: KEY, baseURL: gateway.url, maxRetries: 0 })
  })
  beforeEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("streams signed thinking and a tool call, and replays the signed thinking on the next turn", async () => {
    upstream.onRequest(() =>
      messageSse({
        blocks: [
          { type: "thinking", thinking: "I should call the tool", signature: "sig-abc" },
          { type: "tool_use", id: "toolu_up_1", name: "run", input: { cmd: "ls" } }
        ]
      })
    )
    const tools = [{ name: "run", input_schema: { type: "object" as const, properties: { cmd: { type: "string" } } } }]
    const first = await client.messages
      .stream({ model: "claude-x", max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, tools, messages: [{ role: "user", content: "list files" }] })
      .finalMessage()
    expect(upstream.requests[0].headers["x-api-key"]).toBe("upstream-secret")
    expect((upstream.requests[0].body as NativeBody).thinking?.type).toBe("enabled")
    expect(first.content[0]).toMatchObject({ type: "thinking", thinking: "I should call the tool", signature: "sig-abc" })
    expect(first.content[1]).toMatchObject({ type: "tool_use", id: "toolu_up_1", name: "run", input: { cmd: "ls" } })
    expect(first.stop_reason).toBe("tool_use")

    upstream.onRequest(() => messageJson({ blocks: [{ type: "text", text: "two files" }] }))
    const second = await client.messages.create({
      model: "claude-x",
      max_tokens: 4000,
      thinking: { type: "enabled", budget_tokens: 2000 },
      tools,
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_up_1", content: "a.txt b.txt" }] }
      ]
    })
    expect(second.content).toEqual([{ type: "text", text: "two files" }])
    const replayed = (last().body as NativeBody).messages[1].content
    expect(replayed[0]).toEqual({ type: "thinking", thinking: "I should call the tool", signature: "sig-abc" })
    expect(replayed[1]).toMatchObject({ type: "tool_use", id: "toolu_up_1", name: "run", input: { cmd: "ls" } })
    const result = (last().body as NativeBody).messages[2].content[0]
    expect(result).toMatchObject({ type: "tool_result", tool_use_id: "toolu_up_1" })
  })

  it("returns redacted thinking as one block, streamed and not, and replays it", async () => {
    const blocks = [
      { type: "redacted_thinking" as const, data: "opaque-data" },
      { type: "text" as const, text: "answer" }
    ]
    upstream.onRequest((req) => ((req.body as { stream?: boolean }).stream ? messageSse({ blocks }) : messageJson({ blocks })))
    const params = { model: "claude-x", max_tokens: 4000, thinking: { type: "enabled" as const, budget_tokens: 2000 }, messages: [{ role: "user" as const, content: "q" }] }
    const plain = await client.messages.create(params)
    expect(plain.content).toEqual([{ type: "redacted_thinking", data: "opaque-data" }, { type: "text", text: "answer" }])
    const streamed = await client.messages.stream(params).finalMessage()
    expect(streamed.content).toEqual([{ type: "redacted_thinking", data: "opaque-data" }, { type: "text", text: "answer" }])
    await client.messages.create({ ...params, messages: [{ role: "user", content: "q" }, { role: "assistant", content: plain.content }, { role: "user", content: "more" }] })
    expect((last().body as NativeBody).messages[1].content[0]).toEqual({ type: "redacted_thinking", data: "opaque-data" })
  })

  it("sends cache breakpoints to the native upstream: the caller's and the gateway's own", async () => {
    upstream.onRequest(() => messageJson({ blocks: [{ type: "text", text: "ok" }] }))
    await client.messages.create({
      model: "claude-x",
      max_tokens: 100,
      system: [{ type: "text", text: "long instructions", cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user", content: "hello" }]
    })
    const body = last().body as { system: ReadonlyArray<Record<string, unknown>>; messages: NativeBody["messages"] }
    expect(body.system[0].cache_control).toEqual({ type: "ephemeral" })
    // the gateway's tail breakpoint on the last text of the last message
    expect(body.messages[0].content[0].cache_control).toEqual({ type: "ephemeral" })
  })

  it("lists models in the Messages shape", async () => {
    const page = await client.models.list()
    expect(page.data.map((m) => m.id)).toContain("ant/claude-x")
  })

  it("counts tokens with the refusals of a real request", async () => {
    const counted = await client.messages.countTokens({ model: "claude-x", system: "You are terse.", messages: [{ role: "user", content: "Hello there, how are you today?" }] })
    expect(counted.input_tokens).toBeGreaterThan(5)
    expect(counted.input_tokens).toBeLessThan(40)
    const withTools = await client.messages.countTokens({
      model: "claude-x",
      messages: [{ role: "user", content: "Hello there, how are you today?" }],
      tools: [{ name: "run", description: "run a command", input_schema: { type: "object" as const, properties: { cmd: { type: "string" } } } }]
    })
    // the tool-use preamble (~530) and the tool (~40) are counted
    expect(withTools.input_tokens - counted.input_tokens).toBeGreaterThan(550)
    const refused = await fetch(`${gateway.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ model: "claude-x", messages: [{ role: "user", content: "x" }], tools: [{ type: "bash_20250124", name: "bash" }] })
    })
    expect(refused.status).toBe(400)
    const unknown = await fetch(`${gateway.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": KEY },
      body: JSON.stringify({ model: "nope/nothing", messages: [{ role: "user", content: "x" }] })
    })
    expect(unknown.status).toBe(404)
    expect(((await unknown.json()) as { error: { type: string } }).error.type).toBe("not_found_error")
    // the upstream is asked for its own count first (this one answers none: the estimate answered);
    // refused requests reach nothing
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/messages/count_tokens", "/v1/messages/count_tokens"])
  })
})
