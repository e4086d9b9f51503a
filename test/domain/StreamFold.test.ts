import { Stream } from "effect"
import * as fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { foldEvents, ModelEvent, type FinishReason, type Usage } from "../../src/domain/Canonical.js"
import { UpstreamError } from "../../src/domain/Errors.js"
import { ProviderClient } from "../../src/services/runner/ProviderClient.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

/**
 * The stream/fold agreement, end to end: for any canonical event sequence, a client accumulating
 * the chat-completions SSE gets the message, finish reason and usage of the non-streamed body.
 */

/** Text pieces: any grapheme, plus lone surrogate halves (a pair split across deltas), JSON and SSE syntax. */
const text = fc.string({
  unit: fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 1 }) },
    { weight: 1, arbitrary: fc.constantFrom("\uD83D", "\uDE00", "\n", "\r\n", '"', "\\", "\u0000", "\u2028", "data: [DONE]\n\n", ": x\n") }
  ),
  maxLength: 12
})

const toolCall = fc.record({
  id: fc.string({ unit: fc.constantFrom("a", "b", "0", "_"), minLength: 1, maxLength: 8 }).map((s) => `call_${s}`),
  name: fc.string({ unit: fc.constantFrom("a", "b", "_", "-"), minLength: 1, maxLength: 8 }),
  arguments: fc.oneof(fc.json({ maxDepth: 2 }), text)
})

const usage: fc.Arbitrary<Usage> = fc.record({
  inputTokens: fc.nat(100_000),
  outputTokens: fc.nat(100_000),
  cacheReadTokens: fc.nat(1000),
  cacheWriteTokens: fc.nat(1000),
  reasoningTokens: fc.nat(1000)
})

const finish = fc.constantFrom<FinishReason>("stop", "length", "tool_calls", "content_filter")

const bodyEvent = fc.oneof(
  { weight: 4, arbitrary: text.map(ModelEvent.text) },
  { weight: 2, arbitrary: fc.tuple(text, fc.option(fc.string({ maxLength: 4 }), { nil: undefined })).map(([t, sig]) => ModelEvent.reasoning(t, sig)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }).map(ModelEvent.redacted) },
  { weight: 1, arbitrary: toolCall.map(ModelEvent.toolCall) }
)

/** Text, reasoning and tool-call events, at most one usage somewhere, one finish at the end. */
const events = fc
  .tuple(fc.array(bodyEvent, { maxLength: 12 }), fc.option(usage, { nil: undefined }), fc.nat(), finish)
  .map(([body, u, at, reason]) => {
    const all: Array<ModelEvent> = [...body]
    if (u !== undefined) all.splice(at % (body.length + 1), 0, ModelEvent.usage(u))
    all.push(ModelEvent.finish(reason))
    return all
  })

/** A client-side SSE reader, independent of the gateway's: `data:` payloads of complete frames. */
const ssePayloads = (body: string): Array<string> => {
  const payloads: Array<string> = []
  let data: Array<string> = []
  for (const line of body.split(/\r?\n/)) {
    if (line === "") {
      if (data.length > 0) payloads.push(data.join("\n"))
      data = []
    } else if (line.startsWith("data:")) {
      data.push(line.slice(line.startsWith("data: ") ? 6 : 5))
    }
  }
  return payloads
}

interface WireToolCall {
  readonly index?: number
  readonly id?: string
  readonly type?: string
  readonly function?: { readonly name?: string; readonly arguments?: string }
}
interface WireChunk {
  readonly id: string
  readonly object: string
  readonly choices: ReadonlyArray<{
    readonly index: number
    readonly delta: { readonly role?: string; readonly content?: string | null; readonly reasoning_content?: string; readonly tool_calls?: ReadonlyArray<WireToolCall> }
    readonly finish_reason: string | null
  }>
  readonly usage?: unknown
}

/** Accumulate a chat-completions stream the way a client does. */
const accumulate = (body: string) => {
  const payloads = ssePayloads(body)
  expect(payloads.at(-1)).toBe("[DONE]")
  const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p) as WireChunk)
  let role: string | undefined
  let roles = 0
  let content = ""
  let reasoning = ""
  let finishReason: string | null = null
  let usage: unknown = undefined
  const calls: Array<{ id: string; type: string; function: { name: string; arguments: string } }> = []
  for (const chunk of chunks) {
    expect(chunk.object).toBe("chat.completion.chunk")
    expect(chunk.id).toBe(chunks[0].id)
    if (chunk.usage !== undefined && chunk.usage !== null) usage = chunk.usage
    for (const choice of chunk.choices) {
      expect(choice.index).toBe(0)
      const delta = choice.delta
      if (delta.role !== undefined) {
        role = delta.role
        roles++
      }
      if (typeof delta.content === "string") content += delta.content
      if (delta.reasoning_content !== undefined) reasoning += delta.reasoning_content
      for (const tc of delta.tool_calls ?? []) {
        const index = tc.index ?? 0
        const call = (calls[index] ??= { id: "", type: "function", function: { name: "", arguments: "" } })
        if (tc.id !== undefined) call.id = tc.id
        if (tc.type !== undefined) call.type = tc.type
        call.function.name += tc.function?.name ?? ""
        call.function.arguments += tc.function?.arguments ?? ""
      }
      if (choice.finish_reason !== null) finishReason = choice.finish_reason
    }
  }
  expect(roles).toBe(1)
  const message: Record<string, unknown> = {
    role,
    // what the non-streamed body says for a turn of tool calls and no text
    content: content === "" && calls.length > 0 ? null : content,
    refusal: null
  }
  if (calls.length > 0) message.tool_calls = calls
  if (reasoning !== "") message.reasoning_content = reasoning
  return { message, finishReason, usage }
}

describe("chat completions: the accumulated stream equals the non-streamed answer", () => {
  /** The events the provider double answers with in the current run, and a failure after them. */
  let current: { readonly events: ReadonlyArray<ModelEvent>; readonly failWith?: UpstreamError } | undefined
  let gateway: TestGateway

  beforeAll(async () => {
    gateway = await startGateway(
      { providers: { p: { type: "mock" } }, reasoningOutput: true },
      {
        providers: ProviderClient.layerTest((call) =>
          current === undefined || call.target.id !== "p/m"
            ? Stream.dieMessage(`provider double: unexpected call for ${call.target.id}`)
            : Stream.fromIterable(current.events).pipe(Stream.concat(current.failWith === undefined ? Stream.empty : Stream.fail(current.failWith)))
        )
      }
    )
  })
  afterAll(async () => {
    await gateway?.close()
  })

  const send = (stream: boolean) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "p/m",
        messages: [{ role: "user", content: "hi" }],
        stream,
        ...(stream ? { stream_options: { include_usage: true } } : {})
      })
    })

  const post = async (stream: boolean) => {
    const res = await send(stream)
    const body = await res.text()
    expect(res.status, body).toBe(200)
    expect(res.headers.get("content-type")).toContain(stream ? "text/event-stream" : "application/json")
    return body
  }

  it("for arbitrary event sequences", async () => {
    await fc.assert(
      fc.asyncProperty(events, async (evs) => {
        current = { events: evs }
        const streamed = accumulate(await post(true))
        const whole = JSON.parse(await post(false)) as {
          readonly object: string
          readonly choices: ReadonlyArray<{ readonly index: number; readonly message: unknown; readonly finish_reason: string }>
          readonly usage: unknown
        }
        expect(whole.object).toBe("chat.completion")
        expect(whole.choices).toHaveLength(1)
        expect(streamed.message).toEqual(whole.choices[0].message)
        expect(streamed.finishReason).toBe(whole.choices[0].finish_reason)
        expect(streamed.usage).toEqual(whole.usage)

        // and both are the canonical fold of the events
        const answer = foldEvents(evs)
        expect(streamed.message.content).toBe(answer.text === "" && answer.toolCalls.length > 0 ? null : answer.text)
        expect(streamed.message.reasoning_content).toBe(answer.reasoning === "" ? undefined : answer.reasoning)
        expect(streamed.message.tool_calls ?? []).toEqual(answer.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })))
        expect(streamed.finishReason).toBe(answer.finishReason)
        expect(whole.usage).toMatchObject({
          prompt_tokens: answer.usage.inputTokens,
          completion_tokens: answer.usage.outputTokens,
          total_tokens: answer.usage.inputTokens + answer.usage.outputTokens
        })
      }),
      { numRuns: 50 }
    )
  })

  it("a provider failure after the first event ends the stream with an error frame and no [DONE]; unstreamed it is a 502", async () => {
    current = {
      events: [ModelEvent.text("partial")],
      failWith: new UpstreamError({ reason: "server_error", provider: "p", message: "scripted failure" })
    }
    const res = await send(true)
    expect(res.status).toBe(200)
    const payloads = ssePayloads(await res.text())
    expect(payloads).not.toContain("[DONE]")
    expect(JSON.parse(payloads[0])).toMatchObject({ choices: [{ delta: { content: "partial" } }] })
    expect(JSON.parse(payloads.at(-1) ?? "null")).toMatchObject({ error: { code: "upstream_error" } })
    const whole = await send(false)
    expect(whole.status).toBe(502)
    expect(await whole.json()).toMatchObject({ error: { code: "upstream_error" } })
  })
})
