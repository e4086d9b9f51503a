import { Chunk, Effect, Either, Redacted, Stream } from "effect"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { ProviderConfig } from "../../src/Config.js"
import type { CanonicalRequest, Message, ModelEvent } from "../../src/domain/Canonical.js"
import { foldEvents } from "../../src/domain/Canonical.js"
import type { UpstreamError } from "../../src/domain/Errors.js"
import { AnthropicProviderFactory, makeAnthropicProvider, messagesUrl } from "../../src/providers/anthropic/AnthropicProvider.js"
import { buildMessagesRequest } from "../../src/providers/anthropic/Request.js"
import { HttpUpstream } from "../../src/providers/HttpUpstream.js"
import type { Provider, ProviderCall, ProviderTarget } from "../../src/providers/Provider.js"
import { streamOf, wholeOf } from "../support/ProviderCalls.js"
import {
  events,
  type FakeMessagesUpstream,
  messageJson,
  messagesError,
  messageSse,
  messageSseEvents,
  startFakeMessagesUpstream
} from "../support/FakeMessagesUpstream.js"

const request = (messages: ReadonlyArray<Message>, extra: Partial<CanonicalRequest> = {}): CanonicalRequest => ({
  system: [],
  messages,
  tools: [],
  toolChoice: { type: "auto" },
  sampling: {},
  parallelToolCalls: true,
  stream: true,
  ...extra
})

const user = (text: string): Message => ({ role: "user", parts: [{ type: "text", text }] })

const target = (extra: Partial<ProviderTarget> = {}): ProviderTarget => ({
  provider: "ant",
  providerType: "anthropic",
  model: "claude-x",
  id: "ant/claude-x",
  ...extra
})

const call = (req: CanonicalRequest = request([user("hi")]), t: ProviderTarget = target()): ProviderCall => ({
  target: t,
  request: req,
  deadline: Date.now() + 10_000
})

let up: FakeMessagesUpstream
let config: ProviderConfig

beforeAll(async () => {
  up = await startFakeMessagesUpstream()
  config = { type: "anthropic", baseUrl: up.origin, apiKey: Redacted.make("sk-ant-test"), headers: { "x-extra": "1" } }
})
afterAll(() => up.close())
beforeEach(() => up.reset())

const withProvider = <A>(f: (p: Provider) => Effect.Effect<A, UpstreamError>, cfg: ProviderConfig = config) =>
  Effect.runPromise(
    Effect.scoped(Effect.either(Effect.flatMap(makeAnthropicProvider("ant", cfg), f)).pipe(Effect.provide(HttpUpstream.layer)))
  )

const streamed = (c: ProviderCall = call(), cfg?: ProviderConfig) =>
  withProvider((p) => Stream.runCollect(streamOf(p, c)).pipe(Effect.map(Chunk.toReadonlyArray)), cfg)

const completed = (c: ProviderCall = call(), cfg?: ProviderConfig) => withProvider((p) => wholeOf(p, c), cfg)

const ok = <A>(e: Either.Either<A, UpstreamError>): A => {
  if (Either.isLeft(e)) throw new Error(`expected success, got ${e.left.reason}: ${e.left.message}`)
  return e.right
}
const err = <A>(e: Either.Either<A, UpstreamError>): UpstreamError => {
  if (Either.isRight(e)) throw new Error("expected a failure")
  return e.left
}

const body = (i = 0) => up.requests[i].body as Record<string, unknown>

describe("anthropic request", () => {
  it("posts to /v1/messages with auth headers and config headers", async () => {
    up.script(messageJson())
    ok(await completed())
    const r = up.requests[0]
    expect(r.path).toBe("/v1/messages")
    expect(r.headers["x-api-key"]).toBe("sk-ant-test")
    expect(r.headers["anthropic-version"]).toBe("2023-06-01")
    expect(r.headers["content-type"]).toBe("application/json")
    expect(r.headers["x-extra"]).toBe("1")
    expect(r.headers.authorization).toBeUndefined()
    expect(body()).toMatchObject({ model: "claude-x", max_tokens: 8192, messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] })
    expect(body().stream).toBeUndefined()
  })

  it("does not double a /v1 base URL", async () => {
    expect(messagesUrl("https://api.anthropic.com")).toBe("https://api.anthropic.com/v1/messages")
    expect(messagesUrl("https://api.anthropic.com/v1/")).toBe("https://api.anthropic.com/v1/messages")
    up.script(messageJson())
    ok(await completed(call(), { ...config, baseUrl: up.url }))
    expect(up.requests[0].path).toBe("/v1/messages")
  })

  it("builds via the factory", async () => {
    up.script(messageJson())
    const result = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const factory = yield* AnthropicProviderFactory
          expect(factory.type).toBe("anthropic")
          const provider = yield* factory.make("ant", config)
          return yield* Effect.either(wholeOf(provider, call()))
        }).pipe(Effect.provide(HttpUpstream.layer))
      )
    )
    expect(foldEvents(ok(result)).text).toBe("Hello from upstream")
  })

  it("system blocks with cache_control, sampling, stop sequences", () => {
    const wire = buildMessagesRequest(
      target(),
      request([user("q")], {
        system: [{ type: "text", text: "be brief", cache: { ttl: "5m" } }, { type: "text", text: "long", cache: { ttl: "1h" } }, { type: "text", text: "plain" }],
        sampling: { temperature: 0.3, topP: 0.9, topK: 40, stop: ["END"] },
        maxOutputTokens: 100,
        stream: false
      })
    )
    expect(wire.system).toEqual([
      { type: "text", text: "be brief", cache_control: { type: "ephemeral" } },
      { type: "text", text: "long", cache_control: { type: "ephemeral", ttl: "1h" } },
      { type: "text", text: "plain" }
    ])
    expect(wire).toMatchObject({ temperature: 0.3, top_p: 0.9, top_k: 40, stop_sequences: ["END"], max_tokens: 100 })
    expect(wire.stream).toBeUndefined()
  })

  it("assistant thinking (signed kept, unsigned and other families' dropped, redacted kept), tool_use input object, tool_result, alternation", () => {
    const wire = buildMessagesRequest(
      target(),
      request([
        user("one"),
        user("two"),
        {
          role: "assistant",
          parts: [
            { type: "reasoning", text: "unsigned thought" },
            { type: "reasoning", text: "signed thought", signature: "sig-1", family: "anthropic" },
            { type: "reasoning", text: "", redacted: "opaque", family: "anthropic" },
            // signatures another family made, or that name no family, never reach this upstream
            { type: "reasoning", text: "", signature: "gemini-sig", family: "gemini" },
            { type: "reasoning", text: "mock thought", signature: "mock-sig", family: "mock" },
            { type: "reasoning", text: "untagged thought", signature: "untagged-sig" },
            { type: "reasoning", text: "", redacted: "untagged-opaque" },
            { type: "text", text: "calling" },
            { type: "tool_call", id: "toolu_1", name: "get_weather", arguments: '{"city":"Paris"}' },
            { type: "tool_call", id: "toolu_2", name: "noop", arguments: "" }
          ]
        },
        {
          role: "tool",
          parts: [
            { type: "tool_result", callId: "toolu_1", content: [{ type: "text", text: "sunny" }, { type: "image", url: "data:image/png;base64,AAAA" }] },
            { type: "tool_result", callId: "toolu_2", content: [{ type: "text", text: "boom" }], isError: true, cache: { ttl: "5m" } }
          ]
        },
        user("thanks"),
        { role: "assistant", parts: [{ type: "reasoning", text: "only unsigned" }] },
        { role: "assistant", parts: [{ type: "text", text: "done" }] }
      ])
    )
    expect(wire.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "one" }, { type: "text", text: "two" }] },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "signed thought", signature: "sig-1" },
          { type: "redacted_thinking", data: "opaque" },
          { type: "text", text: "calling" },
          { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
          { type: "tool_use", id: "toolu_2", name: "noop", input: {} }
        ]
      },
      {
        role: "user",
        content: [
          {
            type: "tool_result",
            tool_use_id: "toolu_1",
            content: [{ type: "text", text: "sunny" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }]
          },
          { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: "boom" }], is_error: true, cache_control: { type: "ephemeral" } },
          { type: "text", text: "thanks" }
        ]
      },
      { role: "assistant", content: [{ type: "text", text: "done" }] }
    ])
  })

  it("images, documents and cache_control on user parts", () => {
    const wire = buildMessagesRequest(
      target(),
      request([
        {
          role: "user",
          parts: [
            { type: "image", url: "data:image/jpeg;base64,/9j/", cache: { ttl: "1h" } },
            { type: "image", url: "https://example.com/cat.png" },
            { type: "file", mediaType: "application/pdf", data: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" },
            { type: "text", text: "describe", cache: { ttl: "5m" } }
          ]
        }
      ])
    )
    expect(wire.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "image", source: { type: "base64", media_type: "image/jpeg", data: "/9j/" }, cache_control: { type: "ephemeral", ttl: "1h" } },
          { type: "image", source: { type: "url", url: "https://example.com/cat.png" } },
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "a.pdf" },
          { type: "text", text: "describe", cache_control: { type: "ephemeral" } }
        ]
      }
    ])
  })

  it("tools and tool_choice, disable_parallel_tool_use", () => {
    const tools = [{ name: "f", description: "does f", parameters: { type: "object", properties: {} } }, { name: "g", parameters: { type: "object" } }]
    const build = (extra: Partial<CanonicalRequest>) => buildMessagesRequest(target(), request([user("q")], { tools, ...extra }))
    expect(build({}).tools).toEqual([
      { name: "f", description: "does f", input_schema: { type: "object", properties: {} } },
      { name: "g", input_schema: { type: "object" } }
    ])
    expect(build({}).tool_choice).toEqual({ type: "auto" })
    expect(build({ toolChoice: { type: "required" } }).tool_choice).toEqual({ type: "any" })
    expect(build({ toolChoice: { type: "tool", name: "g" } }).tool_choice).toEqual({ type: "tool", name: "g" })
    expect(build({ toolChoice: { type: "none" }, parallelToolCalls: false }).tool_choice).toEqual({ type: "none" })
    expect(build({ parallelToolCalls: false }).tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true })
    expect(build({ toolChoice: { type: "required" }, parallelToolCalls: false }).tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true })
    expect(buildMessagesRequest(target(), request([user("q")])).tool_choice).toBeUndefined()
  })

  it("thinking budget from reasoningEffort, max_tokens raised above it, params merged", () => {
    const build = (effort: string | undefined, maxOutputTokens?: number, params?: Record<string, unknown>) =>
      buildMessagesRequest(
        target({ ...(effort !== undefined ? { reasoningEffort: effort } : {}), ...(params !== undefined ? { params } : {}) }),
        request([user("q")], maxOutputTokens !== undefined ? { maxOutputTokens } : {})
      )
    expect(build(undefined).thinking).toBeUndefined()
    expect(build("low")).toMatchObject({ thinking: { type: "enabled", budget_tokens: 2048 }, max_tokens: 8192 })
    expect(build("medium")).toMatchObject({ thinking: { type: "enabled", budget_tokens: 8192 }, max_tokens: 8192 + 1024 })
    expect(build("high", 32000)).toMatchObject({ thinking: { type: "enabled", budget_tokens: 16384 }, max_tokens: 32000 })
    expect(build("high", 1000)).toMatchObject({ thinking: { type: "enabled", budget_tokens: 16384 }, max_tokens: 16384 + 1024 })
    expect(build("xhigh")).toMatchObject({ thinking: { type: "enabled", budget_tokens: 4096 } })
    expect(build(undefined, undefined, { metadata: { user_id: "u" } })).toMatchObject({ metadata: { user_id: "u" } })
  })

  it("streams with stream: true", async () => {
    up.script(messageSse())
    ok(await streamed())
    expect(body().stream).toBe(true)
  })
})

const answerBlocks = [
  { type: "thinking" as const, thinking: "Let me think about it.", signature: "EqQBsig==" },
  { type: "redacted_thinking" as const, data: "REDACTED-OPAQUE" },
  { type: "text" as const, text: "I'll check the weather." },
  { type: "tool_use" as const, id: "toolu_01", name: "get_weather", input: { city: "Paris", units: "c", nested: { a: [1, 2] } } }
]
const answerUsage = { input: 100, output: 42, cacheRead: 1000, cacheWrite: 50 }

const expectAnswer = (evs: ReadonlyArray<ModelEvent>) => {
  const answer = foldEvents(evs)
  expect(answer.text).toBe("I'll check the weather.")
  expect(answer.reasoning).toBe("Let me think about it.")
  expect(answer.reasoningSignature).toBe("EqQBsig==")
  expect(answer.redacted).toEqual(["REDACTED-OPAQUE"])
  expect(answer.toolCalls).toEqual([{ id: "toolu_01", name: "get_weather", arguments: JSON.stringify(answerBlocks[3].input) }])
  expect(JSON.parse(answer.toolCalls[0].arguments)).toEqual(answerBlocks[3].input)
  expect(answer.usage).toEqual({ inputTokens: 1150, outputTokens: 42, cacheReadTokens: 1000, cacheWriteTokens: 50, reasoningTokens: 0 })
  expect(answer.finishReason).toBe("tool_calls")
  expect(evs.filter((e) => e._tag === "ToolCall")).toHaveLength(1)
}

describe("anthropic answers", () => {
  it("JSON answer to events", async () => {
    up.script(messageJson({ blocks: answerBlocks, usage: answerUsage }))
    const evs = ok(await completed())
    expectAnswer(evs)
    expect(evs[0]).toEqual({ _tag: "ReasoningDelta", text: "Let me think about it.", signature: "EqQBsig==", family: "anthropic" })
  })

  it("SSE answer to events: thinking deltas, signature on a final empty delta, one assembled tool call", async () => {
    up.script(messageSse({ blocks: answerBlocks, usage: answerUsage, split: 3 }))
    const evs = ok(await streamed())
    expectAnswer(evs)
    const reasoning = evs.filter((e) => e._tag === "ReasoningDelta")
    expect(reasoning.length).toBeGreaterThan(2)
    expect(reasoning[reasoning.length - 1]).toEqual({ _tag: "ReasoningDelta", text: "", signature: "EqQBsig==", family: "anthropic" })
    expect(reasoning.slice(0, -1).every((e) => e._tag === "ReasoningDelta" && e.signature === undefined)).toBe(true)
    expect(evs.filter((e) => e._tag === "TextDelta").length).toBeGreaterThan(1)
    expect(evs.slice(-2).map((e) => e._tag)).toEqual(["Usage", "Finish"])
  })

  it("a tool call with no arguments is {}", async () => {
    up.script(messageSse({ blocks: [{ type: "tool_use", id: "t1", name: "noop", input: {} }] }))
    const answer = foldEvents(ok(await streamed()))
    expect(answer.toolCalls).toEqual([{ id: "t1", name: "noop", arguments: "{}" }])
  })

  it("usage reported in message_delta replaces message_start's", async () => {
    const evs = messageSseEvents({ usage: { input: 7, output: 9 } })
    up.script({ kind: "sse", events: evs })
    const answer = foldEvents(ok(await streamed()))
    expect(answer.usage).toMatchObject({ inputTokens: 7, outputTokens: 9 })
  })

  it.each([
    ["end_turn", "stop"],
    ["stop_sequence", "stop"],
    ["max_tokens", "length"],
    ["tool_use", "tool_calls"],
    ["refusal", "content_filter"]
  ] as const)("stop reason %s -> %s (JSON and SSE)", async (stopReason, finish) => {
    up.script(messageJson({ stopReason }), messageSse({ stopReason }))
    expect(foldEvents(ok(await completed())).finishReason).toBe(finish)
    expect(foldEvents(ok(await streamed())).finishReason).toBe(finish)
  })

  it("a tool call cut short by max_tokens is dropped, not an error", async () => {
    up.script({
      kind: "sse",
      events: [
        events.messageStart(),
        events.blockStart(0, { type: "tool_use", id: "t1", name: "f", input: {} }),
        events.inputJsonDelta(0, '{"a": "unfinis'),
        events.blockStop(0),
        events.messageDelta("max_tokens", 5),
        events.messageStop()
      ]
    })
    const answer = foldEvents(ok(await streamed()))
    expect(answer.toolCalls).toEqual([])
    expect(answer.finishReason).toBe("length")
  })

  it("broken tool JSON without max_tokens is bad_response", async () => {
    up.script({
      kind: "sse",
      events: [
        events.messageStart(),
        events.blockStart(0, { type: "tool_use", id: "t1", name: "f", input: {} }),
        events.inputJsonDelta(0, '{"a": '),
        events.blockStop(0),
        events.messageDelta("tool_use", 5),
        events.messageStop()
      ]
    })
    expect(err(await streamed()).reason).toBe("bad_response")
  })
})

describe("anthropic errors", () => {
  it("529 is overloaded (JSON and SSE calls)", async () => {
    up.script(messagesError(529, "overloaded_error", "Overloaded"), messagesError(529, "overloaded_error", "Overloaded"))
    const a = err(await completed())
    expect(a.reason).toBe("overloaded")
    expect(a.upstreamStatus).toBe(529)
    expect(err(await streamed()).reason).toBe("overloaded")
  })

  it("overloaded_error in the body of another status is overloaded", async () => {
    up.script(messagesError(500, "overloaded_error", "Overloaded"), messagesError(400, "overloaded_error", "x"))
    expect(err(await completed()).reason).toBe("overloaded")
    expect(err(await completed()).reason).toBe("overloaded")
  })

  it("an SSE error event with overloaded_error is overloaded; provider text stays out", async () => {
    up.script({
      kind: "sse",
      events: [events.messageStart(), events.blockStart(0, { type: "text", text: "" }), events.error("overloaded_error", "SECRET provider text")]
    })
    const e = err(await streamed())
    expect(e.reason).toBe("overloaded")
    expect(e.message).not.toContain("SECRET")
  })

  it("an SSE error event of another type is server_error", async () => {
    up.script({ kind: "sse", events: [events.messageStart(), events.error("api_error", "Internal")] })
    expect(err(await streamed()).reason).toBe("server_error")
  })

  it("429 is rate_limited with retry-after", async () => {
    up.script(messagesError(429, "rate_limit_error", "slow down", { "retry-after": "17" }))
    const e = err(await completed())
    expect(e.reason).toBe("rate_limited")
    expect(e.retryAfter).toBe(17)
    expect(e.upstreamStatus).toBe(429)
  })

  it("other statuses follow statusError; provider text stays out", async () => {
    up.script(
      messagesError(401, "authentication_error", "SECRET bad key"),
      messagesError(400, "invalid_request_error", "SECRET bad field"),
      messagesError(500, "api_error", "SECRET boom"),
      messagesError(503, "api_error", "SECRET down")
    )
    const reasons: Array<string> = []
    for (let i = 0; i < 4; i++) {
      const e = err(await completed())
      expect(e.message).not.toContain("SECRET")
      reasons.push(e.reason)
    }
    expect(reasons).toEqual(["auth", "bad_request", "server_error", "unavailable"])
  })

  it("a stream ending without message_stop is bad_response", async () => {
    up.script({ kind: "sse", events: messageSseEvents({ complete: false }) })
    expect(err(await streamed()).reason).toBe("bad_response")
  })

  it("a connection reset mid-stream is a connection error", async () => {
    up.script({ kind: "resetAfter", events: messageSseEvents({ complete: false }) })
    const e = err(await streamed())
    expect(["connection", "bad_response"]).toContain(e.reason)
  })

  it("a non-JSON answer is bad_response", async () => {
    up.script({ kind: "text", body: "not json" })
    expect(err(await completed()).reason).toBe("bad_response")
  })
})
