import { Chunk, Effect, Either, Redacted, Stream } from "effect"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { ProviderConfig } from "../../src/Config.js"
import type { CanonicalRequest, Message, ModelEvent } from "../../src/domain/Canonical.js"
import { foldEvents } from "../../src/domain/Canonical.js"
import type { UpstreamError } from "../../src/domain/Errors.js"
import { GeminiProviderFactory, generateUrl, makeGeminiProvider } from "../../src/providers/gemini/GeminiProvider.js"
import { buildGenerateRequest, foreignCallSignature, wireContents } from "../../src/providers/gemini/Request.js"
import { HttpUpstream } from "../../src/providers/HttpUpstream.js"
import type { Provider, ProviderCall, ProviderTarget } from "../../src/providers/Provider.js"
import { streamOf, wholeOf } from "../support/ProviderCalls.js"
import {
  errorBody,
  errorInfo,
  type FakeGeminiUpstream,
  generateChunks,
  generateJson,
  generateSse,
  geminiError,
  retryInfo,
  startFakeGeminiUpstream
} from "../support/FakeGeminiUpstream.js"

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
  provider: "gem",
  providerType: "gemini",
  model: "gemini-x",
  id: "gem/gemini-x",
  ...extra
})

const call = (req: CanonicalRequest = request([user("hi")]), t: ProviderTarget = target()): ProviderCall => ({
  target: t,
  request: req,
  deadline: Date.now() + 10_000
})

const secret = "AIza-gemini-test-key"
let up: FakeGeminiUpstream
let config: ProviderConfig

beforeAll(async () => {
  up = await startFakeGeminiUpstream()
  config = { type: "gemini", baseUrl: up.origin, apiKey: Redacted.make(secret), headers: { "x-extra": "1" } }
})
afterAll(() => up.close())
beforeEach(() => up.reset())

const withProvider = <A>(f: (p: Provider) => Effect.Effect<A, UpstreamError>, cfg: ProviderConfig = config) =>
  Effect.runPromise(Effect.scoped(Effect.either(Effect.flatMap(makeGeminiProvider("gem", cfg), f)).pipe(Effect.provide(HttpUpstream.layer))))

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

describe("gemini request on the wire", () => {
  it("complete posts :generateContent with the key in x-goog-api-key, never in the URL", async () => {
    up.script(generateJson())
    ok(await completed())
    const r = up.requests[0]
    expect(r.method).toBe("POST")
    expect(r.path).toBe("/v1beta/models/gemini-x:generateContent")
    expect(r.query).toEqual({})
    expect(r.url).not.toContain(secret)
    expect(r.url).not.toContain("key=")
    expect(r.headers["x-goog-api-key"]).toBe(secret)
    expect(r.headers.authorization).toBeUndefined()
    expect(r.headers["content-type"]).toBe("application/json")
    expect(r.headers["x-extra"]).toBe("1")
    expect(body()).toEqual({ contents: [{ role: "user", parts: [{ text: "hi" }] }] })
  })

  it("stream posts :streamGenerateContent?alt=sse", async () => {
    up.script(generateSse())
    ok(await streamed())
    const r = up.requests[0]
    expect(r.path).toBe("/v1beta/models/gemini-x:streamGenerateContent")
    expect(r.query).toEqual({ alt: "sse" })
    expect(r.headers["x-goog-api-key"]).toBe(secret)
    expect(body().stream).toBeUndefined()
  })

  it("does not double a /v1beta base URL; encodes the model name, keeping / literal", async () => {
    expect(generateUrl("https://generativelanguage.googleapis.com", "gemini-2.5-flash", "generateContent")).toBe(
      "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )
    expect(generateUrl("https://h/v1beta/", "models/gemini-3-pro", "streamGenerateContent")).toBe("https://h/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse")
    expect(generateUrl("https://h", "mock/echo#high", "generateContent")).toBe("https://h/v1beta/models/mock/echo%23high:generateContent")
    expect(generateUrl("https://h", "a:b?c", "generateContent")).toBe("https://h/v1beta/models/a%3Ab%3Fc:generateContent")
    up.script(generateJson())
    ok(await completed(call(), { ...config, baseUrl: up.url }))
    expect(up.requests[0].path).toBe("/v1beta/models/gemini-x:generateContent")
  })

  it("sends no key header when none is configured", async () => {
    up.script(generateJson())
    ok(await completed(call(), { type: "gemini", baseUrl: up.origin }))
    expect(up.requests[0].headers["x-goog-api-key"]).toBeUndefined()
  })

  it("builds via the factory", async () => {
    const result = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const factory = yield* GeminiProviderFactory
          expect(factory.type).toBe("gemini")
          const provider = yield* factory.make("gem", config)
          return yield* Effect.either(wholeOf(provider, call()))
        }).pipe(Effect.provide(HttpUpstream.layer))
      )
    )
    expect(foldEvents(ok(result)).text).toBe("Hello from upstream")
  })

  it("system instruction, sampling, stop sequences and max output tokens in generationConfig", () => {
    const wire = buildGenerateRequest(
      target(),
      request([user("q")], {
        system: [{ type: "text", text: "be brief" }, { type: "text", text: "" }, { type: "text", text: "and kind" }],
        sampling: { temperature: 0.3, topP: 0.9, topK: 40, seed: 7, presencePenalty: 0.1, frequencyPenalty: 0.2, stop: ["END"] },
        maxOutputTokens: 100
      })
    )
    expect(wire.systemInstruction).toEqual({ parts: [{ text: "be brief" }, { text: "and kind" }] })
    expect(wire.generationConfig).toEqual({
      temperature: 0.3,
      topP: 0.9,
      topK: 40,
      seed: 7,
      presencePenalty: 0.1,
      frequencyPenalty: 0.2,
      stopSequences: ["END"],
      maxOutputTokens: 100
    })
    expect(buildGenerateRequest(target(), request([user("q")], { sampling: { stop: [] } })).generationConfig).toBeUndefined()
    expect(buildGenerateRequest(target(), request([user("q")])).systemInstruction).toBeUndefined()
  })

  it("user media: data URLs inline, http(s) URLs as fileData, files", () => {
    const contents = wireContents([
      {
        role: "user",
        parts: [
          { type: "image", url: "data:image/png;base64,iVBORw0KGgo=" },
          { type: "image", url: "https://example.com/cat.jpg?size=2" },
          { type: "image", url: "https://example.com/render", mediaType: "image/webp" },
          { type: "image", url: "https://example.com/unknown" },
          { type: "file", mediaType: "application/pdf", data: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" },
          { type: "file", mediaType: "application/pdf", data: "https://example.com/a.pdf" },
          { type: "text", text: "describe" }
        ]
      }
    ])
    expect(contents).toEqual([
      {
        role: "user",
        parts: [
          { inlineData: { mimeType: "image/png", data: "iVBORw0KGgo=" } },
          { fileData: { mimeType: "image/jpeg", fileUri: "https://example.com/cat.jpg?size=2" } },
          { fileData: { mimeType: "image/webp", fileUri: "https://example.com/render" } },
          { fileData: { fileUri: "https://example.com/unknown" } },
          { inlineData: { mimeType: "application/pdf", data: "JVBERi0=" } },
          { fileData: { mimeType: "application/pdf", fileUri: "https://example.com/a.pdf" } },
          { text: "describe" }
        ]
      }
    ])
  })

  it("model turns: functionCall with parsed args and id, functionResponse named from the call, turns merged", () => {
    const contents = wireContents([
      user("one"),
      user("two"),
      {
        role: "assistant",
        parts: [
          { type: "text", text: "calling" },
          { type: "tool_call", id: "call_a", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "tool_call", id: "call_b", name: "noop", arguments: "" }
        ]
      },
      {
        role: "tool",
        parts: [
          { type: "tool_result", callId: "call_a", content: [{ type: "text", text: "sun" }, { type: "text", text: "ny" }, { type: "image", url: "data:image/png;base64,AAAA" }] },
          { type: "tool_result", callId: "call_b", name: "noop_named", content: [{ type: "text", text: "boom" }], isError: true }
        ]
      },
      user("thanks"),
      { role: "assistant", parts: [{ type: "text", text: "" }] },
      { role: "assistant", parts: [{ type: "text", text: "done" }] }
    ])
    expect(contents).toEqual([
      { role: "user", parts: [{ text: "one" }, { text: "two" }] },
      {
        role: "model",
        parts: [
          { text: "calling" },
          { functionCall: { id: "call_a", name: "get_weather", args: { city: "Paris" } }, thoughtSignature: foreignCallSignature },
          { functionCall: { id: "call_b", name: "noop", args: {} } }
        ]
      },
      {
        role: "user",
        parts: [
          { functionResponse: { id: "call_a", name: "get_weather", response: { output: "sunny" } } },
          { functionResponse: { id: "call_b", name: "noop_named", response: { error: "boom" } } },
          { inlineData: { mimeType: "image/png", data: "AAAA" } },
          { text: "thanks" }
        ]
      },
      { role: "model", parts: [{ text: "done" }] }
    ])
  })

  it("a tool result whose name is missing takes the name of the latest earlier call with its id", () => {
    const contents = wireContents([
      { role: "assistant", parts: [{ type: "tool_call", id: "call_0", name: "first", arguments: "{}" }] },
      { role: "tool", parts: [{ type: "tool_result", callId: "call_0", content: [] }] },
      { role: "assistant", parts: [{ type: "tool_call", id: "call_0", name: "second", arguments: "{}" }] },
      { role: "tool", parts: [{ type: "tool_result", callId: "call_0", content: [] }] }
    ])
    const names = contents.flatMap((c) => c.parts.flatMap((p) => (p.functionResponse !== undefined ? [(p.functionResponse as { name: string }).name] : [])))
    expect(names).toEqual(["first", "second"])
  })

  it("reasoning signatures go back on the part that carried them; reasoning text is not sent", () => {
    const contents = wireContents([
      user("q"),
      // as the provider emits them: a signed empty reasoning just before the signed call
      {
        role: "assistant",
        parts: [
          { type: "reasoning", text: "thought summary" },
          { type: "reasoning", text: "", signature: "sig-call", family: "gemini" },
          { type: "tool_call", id: "c1", name: "f", arguments: "{}" },
          { type: "tool_call", id: "c2", name: "g", arguments: "{}" }
        ]
      },
      { role: "tool", parts: [{ type: "tool_result", callId: "c1", content: [{ type: "text", text: "1" }] }, { type: "tool_result", callId: "c2", content: [{ type: "text", text: "2" }] }] },
      // each part keeps its own: a signed text, then a signed call
      {
        role: "assistant",
        parts: [
          { type: "reasoning", text: "t", signature: "sig-2", family: "gemini" },
          { type: "text", text: "let me check" },
          { type: "reasoning", text: "", signature: "sig-3", family: "gemini" },
          { type: "tool_call", id: "c3", name: "f", arguments: "{}" }
        ]
      },
      { role: "tool", parts: [{ type: "tool_result", callId: "c3", content: [] }] },
      // no call: the signature goes on the next text part
      { role: "assistant", parts: [{ type: "reasoning", text: "", signature: "sig-text", family: "gemini" }, { type: "text", text: "answer" }] },
      user("more"),
      // trailing signature: on the last part; redacted reasoning is dropped
      { role: "assistant", parts: [{ type: "text", text: "a" }, { type: "reasoning", text: "", redacted: "opaque" }, { type: "reasoning", text: "", signature: "sig-tail", family: "gemini" }] },
      user("again"),
      // a signature alone is nothing to send
      { role: "assistant", parts: [{ type: "reasoning", text: "only", signature: "sig-alone", family: "gemini" }] }
    ])
    expect(contents.filter((c) => c.role === "model").map((c) => c.parts)).toEqual([
      [
        { functionCall: { id: "c1", name: "f", args: {} }, thoughtSignature: "sig-call" },
        { functionCall: { id: "c2", name: "g", args: {} } }
      ],
      [{ text: "let me check", thoughtSignature: "sig-2" }, { functionCall: { id: "c3", name: "f", args: {} }, thoughtSignature: "sig-3" }],
      [{ text: "answer", thoughtSignature: "sig-text" }],
      [{ text: "a", thoughtSignature: "sig-tail" }]
    ])
  })

  it("another family's signature is never sent: its call gets the skip-validation signature", () => {
    const contents = wireContents([
      user("q"),
      {
        role: "assistant",
        parts: [
          { type: "reasoning", text: "signed thought", signature: "anthropic-sig", family: "anthropic" },
          { type: "text", text: "checking" },
          { type: "reasoning", text: "", signature: "mock-sig", family: "mock" },
          { type: "reasoning", text: "", signature: "untagged-sig" },
          { type: "tool_call", id: "c1", name: "f", arguments: "{}" }
        ]
      },
      { role: "tool", parts: [{ type: "tool_result", callId: "c1", content: [] }] },
      { role: "assistant", parts: [{ type: "reasoning", text: "t", signature: "anthropic-sig", family: "anthropic" }, { type: "text", text: "done" }] }
    ])
    expect(contents.filter((c) => c.role === "model").map((c) => c.parts)).toEqual([
      [{ text: "checking" }, { functionCall: { id: "c1", name: "f", args: {} }, thoughtSignature: foreignCallSignature }],
      [{ text: "done" }]
    ])
  })

  it("tools as functionDeclarations with parametersJsonSchema; tool choice as functionCallingConfig", () => {
    const tools = [
      { name: "f", description: "does f", parameters: { type: "object", properties: { a: { type: "string" } }, required: ["a"] } },
      { name: "g", parameters: { type: "object" } }
    ]
    const build = (extra: Partial<CanonicalRequest>) => buildGenerateRequest(target(), request([user("q")], { tools, ...extra }))
    expect(build({}).tools).toEqual([
      {
        functionDeclarations: [
          { name: "f", description: "does f", parametersJsonSchema: tools[0].parameters },
          { name: "g", parametersJsonSchema: { type: "object" } }
        ]
      }
    ])
    expect(build({}).toolConfig).toEqual({ functionCallingConfig: { mode: "AUTO" } })
    expect(build({ toolChoice: { type: "none" } }).toolConfig).toEqual({ functionCallingConfig: { mode: "NONE" } })
    expect(build({ toolChoice: { type: "required" } }).toolConfig).toEqual({ functionCallingConfig: { mode: "ANY" } })
    expect(build({ toolChoice: { type: "tool", name: "g" }, parallelToolCalls: false }).toolConfig).toEqual({
      functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["g"] }
    })
    const plain = buildGenerateRequest(target(), request([user("q")]))
    expect(plain.tools).toBeUndefined()
    expect(plain.toolConfig).toBeUndefined()
  })

  it("thinkingConfig from the reasoning effort; variant params deep-merged", () => {
    const build = (effort: string | undefined, params?: Record<string, unknown>, extra: Partial<CanonicalRequest> = {}) =>
      buildGenerateRequest(
        target({ ...(effort !== undefined ? { reasoningEffort: effort } : {}), ...(params !== undefined ? { params } : {}) }),
        request([user("q")], extra)
      )
    expect(build(undefined).generationConfig).toBeUndefined()
    expect(build("low").generationConfig).toEqual({ thinkingConfig: { thinkingLevel: "LOW", includeThoughts: true } })
    expect(build("high").generationConfig).toEqual({ thinkingConfig: { thinkingLevel: "HIGH", includeThoughts: true } })
    expect(build("minimal").generationConfig).toEqual({ thinkingConfig: { thinkingLevel: "MINIMAL", includeThoughts: true } })
    expect(build("none").generationConfig).toEqual({ thinkingConfig: { thinkingBudget: 0 } })
    const merged = build(undefined, { generationConfig: { thinkingConfig: { thinkingBudget: 2048, includeThoughts: true } }, safetySettings: [] }, { sampling: { temperature: 1 } })
    expect(merged.generationConfig).toEqual({ temperature: 1, thinkingConfig: { thinkingBudget: 2048, includeThoughts: true } })
    expect(merged.safetySettings).toEqual([])
    expect(build("high", { generationConfig: { thinkingConfig: { includeThoughts: false } } }).generationConfig).toEqual({
      thinkingConfig: { thinkingLevel: "HIGH", includeThoughts: false }
    })
  })

  it("the whole mapping reaches the upstream (streamed call)", async () => {
    up.script(generateSse())
    ok(
      await streamed(
        call(
          request([user("weather?"), { role: "assistant", parts: [{ type: "tool_call", id: "c1", name: "w", arguments: '{"c":"P"}' }] }, { role: "tool", parts: [{ type: "tool_result", callId: "c1", content: [{ type: "text", text: "sun" }] }] }], {
            tools: [{ name: "w", parameters: { type: "object" } }],
            toolChoice: { type: "required" },
            sampling: { temperature: 0.5 },
            maxOutputTokens: 64
          }),
          target({ reasoningEffort: "low" })
        )
      )
    )
    expect(body()).toEqual({
      contents: [
        { role: "user", parts: [{ text: "weather?" }] },
        { role: "model", parts: [{ functionCall: { id: "c1", name: "w", args: { c: "P" } }, thoughtSignature: foreignCallSignature }] },
        { role: "user", parts: [{ functionResponse: { id: "c1", name: "w", response: { output: "sun" } } }] }
      ],
      tools: [{ functionDeclarations: [{ name: "w", parametersJsonSchema: { type: "object" } }] }],
      toolConfig: { functionCallingConfig: { mode: "ANY" } },
      generationConfig: { temperature: 0.5, maxOutputTokens: 64, thinkingConfig: { thinkingLevel: "LOW", includeThoughts: true } }
    })
  })
})

const usage = { prompt: 120, candidates: 30, thoughts: 12, cached: 100 }
const expectedUsage = { inputTokens: 120, outputTokens: 42, cacheReadTokens: 100, cacheWriteTokens: 0, reasoningTokens: 12 }

const tags = (evs: ReadonlyArray<ModelEvent>) => evs.map((e) => e._tag)

describe("gemini answers", () => {
  it("text and usage (JSON and SSE); Usage then Finish close the stream", async () => {
    up.script(generateJson({ text: "Hello there", usage }), generateSse({ text: ["Hel", "lo", " there"], usage }))
    const json = ok(await completed())
    expect(foldEvents(json)).toMatchObject({ text: "Hello there", usage: expectedUsage, finishReason: "stop" })
    expect(tags(json)).toEqual(["TextDelta", "Usage", "Finish"])
    const sse = ok(await streamed())
    expect(foldEvents(sse)).toMatchObject({ text: "Hello there", usage: expectedUsage, finishReason: "stop" })
    expect(tags(sse)).toEqual(["TextDelta", "TextDelta", "TextDelta", "Usage", "Finish"])
  })

  it("thought parts are reasoning; signatures ride on an empty signed reasoning before their part", async () => {
    const opts = { thoughts: ["Let me ", "think."], text: "It is sunny.", signature: "sig-text==", usage }
    up.script(generateJson(opts), generateSse(opts))
    const json = ok(await completed())
    expect(json.slice(0, 3)).toEqual([
      { _tag: "ReasoningDelta", text: "Let me think." },
      { _tag: "ReasoningDelta", text: "", signature: "sig-text==", family: "gemini" },
      { _tag: "TextDelta", text: "It is sunny." }
    ])
    const sse = ok(await streamed())
    expect(sse.slice(0, 4)).toEqual([
      { _tag: "ReasoningDelta", text: "Let me " },
      { _tag: "ReasoningDelta", text: "think." },
      { _tag: "ReasoningDelta", text: "", signature: "sig-text==", family: "gemini" },
      { _tag: "TextDelta", text: "It is sunny." }
    ])
    for (const evs of [json, sse]) {
      const answer = foldEvents(evs)
      expect(answer).toMatchObject({ reasoning: "Let me think.", reasoningSignature: "sig-text==", reasoningFamily: "gemini", text: "It is sunny.", finishReason: "stop" })
      expect(answer.usage.reasoningTokens).toBe(12)
    }
  })

  it("a signed thought part keeps its signature", async () => {
    up.script(generateJson({ parts: [{ text: "pondering", thought: true, thoughtSignature: "sig-t" }, { text: "ok" }] }))
    const evs = ok(await completed())
    expect(evs[0]).toEqual({ _tag: "ReasoningDelta", text: "pondering", signature: "sig-t", family: "gemini" })
  })

  it("function calls come whole: the part's id, else a generated unique one; finish tool_calls", async () => {
    const calls = [
      { name: "get_weather", args: { city: "Paris", nested: { a: [1, 2] } }, id: "fc_1" },
      { name: "noop" }
    ]
    up.script(generateJson({ text: "", calls, signature: "sig-call" }), generateSse({ text: "Checking.", calls, signature: "sig-call" }), generateJson({ calls: [{ name: "noop" }] }))
    const json = ok(await completed())
    expect(json.filter((e) => e._tag !== "Usage")).toEqual([
      { _tag: "ReasoningDelta", text: "", signature: "sig-call", family: "gemini" },
      { _tag: "ToolCall", call: { id: "fc_1", name: "get_weather", arguments: JSON.stringify(calls[0].args) } },
      { _tag: "ToolCall", call: expect.objectContaining({ name: "noop", arguments: "{}" }) },
      { _tag: "Finish", reason: "tool_calls" }
    ])
    const answer = foldEvents(ok(await streamed()))
    expect(answer.text).toBe("Checking.")
    expect(answer.toolCalls.map((c) => c.name)).toEqual(["get_weather", "noop"])
    expect(answer.finishReason).toBe("tool_calls")
    const generated = [answer.toolCalls[1].id, foldEvents(json).toolCalls[1].id, foldEvents(ok(await completed())).toolCalls[0].id]
    for (const id of generated) expect(id).toMatch(/^call_[0-9a-f]+$/)
    expect(new Set(generated).size).toBe(3)
  })

  it("a streamed answer replayed as the next request puts the signature back on the call", async () => {
    up.script(generateSse({ thoughts: "hmm", text: "", calls: [{ name: "f", args: { x: 1 } }], signature: "sig-replay" }))
    const evs = ok(await streamed())
    const parts = evs.flatMap((e): Array<Message["parts"][number]> => {
      if (e._tag === "ReasoningDelta") return [{ type: "reasoning", text: e.text, ...(e.signature !== undefined ? { signature: e.signature, family: e.family } : {}) }]
      if (e._tag === "ToolCall") return [{ type: "tool_call", ...e.call }]
      return []
    })
    const contents = wireContents([user("q"), { role: "assistant", parts } as Message])
    expect(contents[1].parts).toEqual([{ functionCall: { id: expect.stringMatching(/^call_/), name: "f", args: { x: 1 } }, thoughtSignature: "sig-replay" }])
  })

  it.each([
    ["STOP", "stop"],
    ["MAX_TOKENS", "length"],
    ["SAFETY", "content_filter"],
    ["RECITATION", "content_filter"],
    ["BLOCKLIST", "content_filter"],
    ["PROHIBITED_CONTENT", "content_filter"],
    ["SPII", "content_filter"],
    ["OTHER", "stop"],
    ["MALFORMED_FUNCTION_CALL", "stop"]
  ] as const)("finishReason %s -> %s (JSON and SSE)", async (finishReason, finish) => {
    up.script(generateJson({ finishReason }), generateSse({ finishReason }))
    expect(foldEvents(ok(await completed())).finishReason).toBe(finish)
    expect(foldEvents(ok(await streamed())).finishReason).toBe(finish)
  })

  it("a safety stop with no content is content_filter with no text", async () => {
    const filtered = { candidates: [{ finishReason: "SAFETY", index: 0, safetyRatings: [{ category: "HARM_CATEGORY_HARASSMENT", probability: "HIGH", blocked: true }] }], usageMetadata: { promptTokenCount: 8, totalTokenCount: 8 } }
    up.script({ kind: "json", body: filtered }, { kind: "sse", chunks: [filtered] })
    for (const evs of [ok(await completed()), ok(await streamed())]) {
      expect(foldEvents(evs)).toMatchObject({ text: "", finishReason: "content_filter", usage: { inputTokens: 8, outputTokens: 0 } })
    }
  })

  it("a blocked prompt (promptFeedback.blockReason, no candidates) is content_filter", async () => {
    up.script(generateJson({ blockReason: "SAFETY" }), generateSse({ blockReason: "PROHIBITED_CONTENT" }))
    expect(foldEvents(ok(await completed())).finishReason).toBe("content_filter")
    const evs = ok(await streamed())
    expect(tags(evs)).toEqual(["Usage", "Finish"])
    expect(foldEvents(evs).finishReason).toBe("content_filter")
  })

  it("the latest usageMetadata wins, even after the chunk with finishReason", async () => {
    const chunks: Array<Record<string, unknown>> = generateChunks({ text: ["a", "b"], usage: { prompt: 5, candidates: 2 } })
    chunks.push({ usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 9, totalTokenCount: 14 }, modelVersion: "x", responseId: "r" })
    up.script({ kind: "sse", chunks })
    expect(foldEvents(ok(await streamed())).usage).toMatchObject({ inputTokens: 5, outputTokens: 9 })
  })

  it("SSE comments and frames split across writes are read", async () => {
    const [first, last] = generateChunks({ text: ["x", "y"] })
    const text = `data: ${JSON.stringify(last)}\r\n\r\n`
    up.script({ kind: "sse", chunks: [": keep-alive\r\n\r\n", first, text.slice(0, 17), text.slice(17)], delayMs: 5 })
    expect(foldEvents(ok(await streamed())).text).toBe("xy")
  })
})

describe("gemini errors", () => {
  it("429 RESOURCE_EXHAUSTED is rate_limited with Retry-After (JSON and SSE calls)", async () => {
    up.script(
      geminiError(429, "RESOURCE_EXHAUSTED", "SECRET quota text", { headers: { "retry-after": "17" } }),
      geminiError(429, "RESOURCE_EXHAUSTED", "SECRET quota text", { headers: { "retry-after": "3" } })
    )
    const a = err(await completed())
    expect(a).toMatchObject({ reason: "rate_limited", retryAfter: 17, upstreamStatus: 429 })
    expect(a.retryable).toBe(true)
    expect(a.message).not.toContain("SECRET")
    expect(err(await streamed())).toMatchObject({ reason: "rate_limited", retryAfter: 3 })
  })

  it("a RetryInfo delay stands in for a missing Retry-After", async () => {
    up.script(geminiError(429, "RESOURCE_EXHAUSTED", "Quota exceeded", { details: [retryInfo("36.2s")] }))
    expect(err(await completed())).toMatchObject({ reason: "rate_limited", retryAfter: 37 })
  })

  it("503: overloaded when Google says so, else unavailable", async () => {
    up.script(geminiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), geminiError(503, "UNAVAILABLE", "The service is currently unavailable."))
    expect(err(await streamed())).toMatchObject({ reason: "overloaded", upstreamStatus: 503 })
    expect(err(await completed())).toMatchObject({ reason: "unavailable", upstreamStatus: 503 })
  })

  it("other statuses: 400 bad_request, 401/403 auth, 404 bad_request, 500 server_error, 504 timeout; provider text stays out", async () => {
    up.script(
      geminiError(400, "INVALID_ARGUMENT", "SECRET bad field"),
      geminiError(401, "UNAUTHENTICATED", "SECRET no key"),
      geminiError(403, "PERMISSION_DENIED", "SECRET denied"),
      geminiError(404, "NOT_FOUND", "SECRET models/x is not found"),
      geminiError(500, "INTERNAL", "SECRET boom"),
      geminiError(504, "DEADLINE_EXCEEDED", "SECRET slow")
    )
    const reasons: Array<string> = []
    for (let i = 0; i < 6; i++) {
      const e = err(await completed())
      expect(e.message).not.toContain("SECRET")
      reasons.push(e.reason)
    }
    expect(reasons).toEqual(["bad_request", "auth", "auth", "bad_request", "server_error", "timeout"])
  })

  it("a refused key (400 with ErrorInfo API_KEY_INVALID) is auth, not retryable", async () => {
    up.script(geminiError(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", { details: [errorInfo("API_KEY_INVALID")] }))
    const e = err(await completed())
    expect(e).toMatchObject({ reason: "auth", upstreamStatus: 400 })
    expect(e.retryable).toBe(false)
  })

  it("an error chunk mid-stream fails the stream after the output so far; its text stays out", async () => {
    const [first] = generateChunks({ text: ["partial", "rest"], complete: false })
    up.script({ kind: "sse", chunks: [first, errorBody(503, "UNAVAILABLE", "SECRET The model is overloaded.")] })
    const collected: Array<ModelEvent> = []
    const result = await withProvider((p) => Stream.runForEach(streamOf(p, call()), (e) => Effect.sync(() => void collected.push(e))))
    const e = err(result)
    expect(e.reason).toBe("overloaded")
    expect(e.message).not.toContain("SECRET")
    expect(collected).toEqual([{ _tag: "TextDelta", text: "partial" }])
  })

  it("an error chunk by status name alone, and an error object in a 200 JSON answer", async () => {
    up.script(
      { kind: "sse", chunks: [{ error: { message: "x", status: "INTERNAL" } }] },
      { kind: "json", body: errorBody(429, "RESOURCE_EXHAUSTED", "quota") }
    )
    expect(err(await streamed()).reason).toBe("server_error")
    expect(err(await completed()).reason).toBe("rate_limited")
  })

  it("a stream ending without finishReason is bad_response", async () => {
    up.script(generateSse({ text: ["a", "b"], complete: false }), { kind: "sse", chunks: [] })
    expect(err(await streamed())).toMatchObject({ reason: "bad_response", message: "the stream ended before the answer was complete" })
    expect(err(await streamed()).reason).toBe("bad_response")
  })

  it("a connection reset before the answer is a connection error; mid-stream it fails the stream", async () => {
    up.script({ kind: "reset" }, { kind: "resetAfter", chunks: generateChunks({ text: ["a", "b"], complete: false }) })
    expect(err(await completed()).reason).toBe("connection")
    expect(["connection", "bad_response"]).toContain(err(await streamed()).reason)
  })

  it("non-JSON answers and chunks, a function call without a name, no candidate: bad_response", async () => {
    up.script(
      { kind: "text", body: "not json" },
      { kind: "sse", chunks: ["data: {not json\r\n\r\n"] },
      { kind: "json", body: { candidates: [{ content: { parts: [{ functionCall: { args: {} } }] }, finishReason: "STOP" }] } },
      { kind: "json", body: { usageMetadata: { promptTokenCount: 1 } } }
    )
    expect(err(await completed()).reason).toBe("bad_response")
    expect(err(await streamed()).reason).toBe("bad_response")
    expect(err(await completed()).reason).toBe("bad_response")
    expect(err(await completed())).toMatchObject({ reason: "bad_response", message: "the answer has no candidate" })
  })

  it("an unreachable upstream is a connection error", async () => {
    expect(err(await completed(call(), { ...config, baseUrl: "http://127.0.0.1:1" })).reason).toBe("connection")
  })
})
