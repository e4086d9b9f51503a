import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, Option, Stream, TestClock } from "effect"
import type { CanonicalRequest, Message, ModelEvent } from "../../src/domain/Canonical.js"
import { foldEvents } from "../../src/domain/Canonical.js"
import { UpstreamError } from "../../src/domain/Errors.js"
import { chunkText, MockProviderFactory, sampleFromSchema } from "../../src/providers/mock/MockProvider.js"
import { parseScript } from "../../src/providers/mock/Script.js"
import type { ProviderCall } from "../../src/providers/Provider.js"
import { streamOf } from "../support/ProviderCalls.js"

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

const call = (text: string, extra: Partial<CanonicalRequest> = {}): ProviderCall => ({
  target: { provider: "m", providerType: "mock", model: "echo", id: "m/echo" },
  request: request([user(text)], extra),
  deadline: Number.MAX_SAFE_INTEGER
})

const stream = (c: ProviderCall) =>
  Effect.flatMap(MockProviderFactory.make("m", { type: "mock" }), (provider) => Effect.succeed(streamOf(provider, c)))

const collect = (c: ProviderCall) =>
  Effect.flatMap(stream(c), (s) => Stream.runCollect(s)).pipe(Effect.map(Chunk.toReadonlyArray))

const tags = (events: ReadonlyArray<ModelEvent>) => events.map((e) => e._tag)

describe("parseScript", () => {
  it("separates directives from text", () => {
    const script = parseScript("hello\n::text one\n::text two\nworld\n::finish length\n::usage 3 4")
    expect(script.text).toBe("hello\nworld")
    expect(script.answer).toBe("one\ntwo")
    expect(script.finish).toBe("length")
    expect(script.usage).toEqual({ input: 3, output: 4 })
  })

  it("reads every directive", () => {
    const script = parseScript(
      [
        "::reason think",
        "::reason more",
        "::signature sig-1",
        "::tool get_weather {\"city\": \"Paris\"}",
        "::tool ping",
        "::chunks 250000",
        "::delay 20",
        "::error overloaded after"
      ].join("\r\n")
    )
    expect(script).toEqual({
      text: "",
      reasoning: "think\nmore",
      signature: "sig-1",
      tools: [
        { name: "get_weather", arguments: "{\"city\": \"Paris\"}" },
        { name: "ping", arguments: "{}" }
      ],
      chunks: 100_000,
      delayMs: 20,
      error: { kind: "overloaded", after: true }
    })
  })

  it("drops unknown and malformed directives", () => {
    const script = parseScript("::nope x\n::error teapot\n::finish maybe\n::chunks many\n:: spaced\n  ::indented stays text")
    expect(script).toEqual({ text: "::indented stays text", tools: [] })
  })
})

describe("MockProvider", () => {
  it.effect("echoes the last user message in chunks, then usage and finish", () =>
    Effect.gen(function* () {
      const text = "The quick brown fox jumps over the lazy dog, twice: 🦊🦊 — done."
      const events = yield* collect(call(text))
      const deltas = events.filter((e) => e._tag === "TextDelta")
      expect(deltas.length).toBeGreaterThan(2)
      expect(tags(events).slice(-2)).toEqual(["Usage", "Finish"])
      const answer = foldEvents(events)
      expect(answer.text).toBe(text)
      expect(answer.finishReason).toBe("stop")
      expect(answer.usage).toEqual({
        inputTokens: Math.ceil(Array.from(text).length / 4),
        outputTokens: Math.ceil(Array.from(text).length / 4),
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0
      })
    }))

  it("chunks on code point boundaries", () => {
    const text = "a😀".repeat(40)
    const chunks = chunkText(text)
    expect(chunks.join("")).toBe(text)
    for (const chunk of chunks) expect(chunk).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/)
    expect(Array.from(chunks[0]).length).toBe(16)
  })

  it.effect("uses the last user message and answers (empty) without text", () =>
    Effect.gen(function* () {
      const c: ProviderCall = {
        target: { provider: "m", providerType: "mock", model: "x", id: "m/x" },
        request: request([user("first"), { role: "assistant", parts: [{ type: "text", text: "a" }] }, user("second")]),
        deadline: Number.MAX_SAFE_INTEGER
      }
      expect(foldEvents(yield* collect(c)).text).toBe("second")
      expect(foldEvents(yield* collect(call("  \n::finish stop"))).text).toBe("(empty)")
    }))

  it.effect("::text replaces the echo", () =>
    Effect.gen(function* () {
      const answer = foldEvents(yield* collect(call("ignored\n::text Hello\n::text World")))
      expect(answer.text).toBe("Hello\nWorld")
    }))

  it.effect("::reason comes before the text and carries the signature last", () =>
    Effect.gen(function* () {
      const reasoning = "Let me think about this carefully."
      const events = yield* collect(call(`hi\n::reason ${reasoning}\n::signature abc`))
      const kinds = tags(events)
      expect(kinds.lastIndexOf("ReasoningDelta")).toBeLessThan(kinds.indexOf("TextDelta"))
      const deltas = events.flatMap((e) => (e._tag === "ReasoningDelta" ? [e] : []))
      expect(deltas.length).toBeGreaterThan(1)
      expect(deltas.slice(0, -1).every((d) => d.signature === undefined)).toBe(true)
      const answer = foldEvents(events)
      expect(answer.reasoning).toBe(reasoning)
      expect(answer.reasoningSignature).toBe("abc")
      expect(answer.usage.reasoningTokens).toBe(Math.ceil(reasoning.length / 4))
      expect(answer.usage.outputTokens).toBe(Math.ceil((reasoning.length + 2) / 4))
    }))

  it.effect("::tool emits whole tool calls and finishes with tool_calls", () =>
    Effect.gen(function* () {
      const events = yield* collect(call("::tool get_weather {\"city\":\"Paris\"}\n::tool now"))
      const answer = foldEvents(events)
      expect(answer.text).toBe("")
      expect(answer.toolCalls).toEqual([
        { id: "call_mock_0", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
        { id: "call_mock_1", name: "now", arguments: "{}" }
      ])
      expect(answer.finishReason).toBe("tool_calls")
    }))

  it.effect("::chunks streams n numbered deltas", () =>
    Effect.gen(function* () {
      const events = yield* collect(call("::chunks 1000"))
      const deltas = events.flatMap((e) => (e._tag === "TextDelta" ? [e.text] : []))
      expect(deltas.length).toBe(1000)
      expect(deltas[0]).toBe("chunk 0 ")
      expect(deltas[999]).toBe("chunk 999 ")
      expect(foldEvents(events).finishReason).toBe("stop")
      const count = yield* Effect.flatMap(stream(call("::chunks 100000")), Stream.runCount)
      expect(count).toBe(100_002)
    }))

  it.effect("::finish and ::usage override the defaults", () =>
    Effect.gen(function* () {
      const answer = foldEvents(yield* collect(call("hi\n::finish content_filter\n::usage 10 20")))
      expect(answer.finishReason).toBe("content_filter")
      expect(answer.usage).toEqual({ inputTokens: 10, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 })
    }))

  it.effect("maxOutputTokens cuts the answer and finishes with length", () =>
    Effect.gen(function* () {
      const answer = foldEvents(yield* collect(call("abcdefghijklmnopqrstuvwxyz", { maxOutputTokens: 2 })))
      expect(answer.text).toBe("abcdefgh")
      expect(answer.finishReason).toBe("length")
      const chunks = foldEvents(yield* collect(call("::chunks 10", { maxOutputTokens: 3 })))
      expect(chunks.text).toBe("chunk 0 chun")
      expect(chunks.finishReason).toBe("length")
    }))

  it.effect("::error fails before any event", () =>
    Effect.gen(function* () {
      const result = yield* Effect.either(collect(call("hello\n::error rate_limited")))
      expect(Either.isLeft(result)).toBe(true)
      if (Either.isLeft(result)) {
        expect(result.left).toBeInstanceOf(UpstreamError)
        expect(result.left).toMatchObject({ reason: "rate_limited", upstreamStatus: 429, retryAfter: 1, provider: "m" })
      }
    }))

  it.effect("::error after fails once the text was streamed", () =>
    Effect.gen(function* () {
      const s = yield* stream(call("hello there\n::error overloaded after"))
      const seen: Array<ModelEvent> = []
      const exit = yield* Effect.exit(Stream.runForEach(s, (e) => Effect.sync(() => seen.push(e))))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(tags(seen)).toEqual(["TextDelta"])
      expect(foldEvents(seen).text).toBe("hello there")
      const failure = yield* Effect.flip(Stream.runDrain(s))
      expect(failure).toMatchObject({ _tag: "UpstreamError", reason: "overloaded", upstreamStatus: 529 })
    }))

  it.effect("maps every error kind to its status", () =>
    Effect.gen(function* () {
      const expected = { rate_limited: 429, overloaded: 529, unavailable: 503, server_error: 500, bad_request: 400, timeout: undefined, connection: undefined, bad_response: 200 }
      for (const [kind, status] of Object.entries(expected)) {
        const failure = yield* Effect.flip(collect(call(`::error ${kind}`)))
        expect(failure.reason).toBe(kind)
        expect(failure.upstreamStatus).toBe(status)
      }
    }))

  it.effect("::delay waits before each event (TestClock)", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(collect(call("hi\n::delay 1000")))
      yield* TestClock.adjust("2999 millis")
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* TestClock.adjust("1 millis")
      const events = yield* Fiber.join(fiber)
      expect(tags(events)).toEqual(["TextDelta", "Usage", "Finish"])
    }))

  it.effect("::delay is interruptible", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(collect(call("::chunks 100\n::delay 60000")))
      yield* TestClock.adjust("1 minute")
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
    }))

  it.effect("answers structured output with a respond tool call from the schema", () =>
    Effect.gen(function* () {
      const schema = {
        type: "object",
        properties: {
          name: { type: "string" },
          age: { type: "integer" },
          score: { type: "number" },
          ok: { type: "boolean" },
          tags: { type: "array", items: { type: "string" } },
          meta: { type: "object" },
          nothing: { type: "null" },
          maybe: { type: ["string", "null"] },
          level: { type: "string", enum: ["low", "high"] }
        },
        required: ["name", "age", "extra"]
      }
      const answer = foldEvents(yield* collect(call("Extract it", { structured: { name: "person", schema, jsonObject: false } })))
      expect(answer.text).toBe("")
      expect(answer.finishReason).toBe("tool_calls")
      expect(answer.toolCalls.map((t) => [t.id, t.name])).toEqual([["call_mock_0", "respond"]])
      expect(JSON.parse(answer.toolCalls[0].arguments)).toEqual(
        { name: "text", age: 0, score: 0, ok: false, tags: [], meta: {}, nothing: null, maybe: "text", level: "low", extra: null }
      )
      expect(sampleFromSchema({ type: "string" })).toEqual({})
      const scripted = foldEvents(yield* collect(call("::text {\"a\":1}", { structured: { name: "x", schema, jsonObject: false } })))
      expect(scripted.text).toBe("{\"a\":1}")
      expect(scripted.toolCalls).toEqual([])
    }))

  it.effect("counts system and message text as input", () =>
    Effect.gen(function* () {
      const answer = foldEvents(yield* collect(call("12345678", { system: [{ type: "text", text: "abcd" }] })))
      expect(answer.usage.inputTokens).toBe(3)
    }))
})
