import { Chunk, Duration, Effect, Option, Stream } from "effect"
import type { CanonicalRequest, FinishReason, JsonSchema, Message, ToolCall, ToolResultPart, Usage } from "../../domain/Canonical.js"
import { ModelEvent } from "../../domain/Canonical.js"
import { UpstreamError } from "../../domain/Errors.js"
import { streamSource, type ProviderCall, type ProviderFactory } from "../Provider.js"
import { mockErrors, parseScript, type MockErrorKind, type Script } from "./Script.js"

/** Characters (code points) per streamed delta. */
const chunkSize = 16

const surrogatePair = /[\uD800-\uDBFF][\uDC00-\uDFFF]/g

/** Length in code points, so a surrogate pair counts once (a native scan: inputs can be megabytes). */
const charCount = (s: string): number => {
  if (!/[\uD800-\uDBFF]/.test(s)) return s.length
  return s.length - (s.match(surrogatePair)?.length ?? 0)
}

/** Split on code point boundaries into pieces of `chunkSize` characters. */
export const chunkText = (s: string): Array<string> => {
  const points = Array.from(s)
  const out: Array<string> = []
  for (let i = 0; i < points.length; i += chunkSize) out.push(points.slice(i, i + chunkSize).join(""))
  return out
}

const tokens = (chars: number): number => Math.ceil(chars / 4)

const messageChars = (message: Message): number => {
  let n = 0
  for (const part of message.parts) {
    switch (part.type) {
      case "text":
      case "reasoning":
        n += charCount(part.text)
        break
      case "tool_call":
        n += charCount(part.arguments)
        break
      case "tool_result":
        for (const c of part.content) if (c.type === "text") n += charCount(c.text)
        break
    }
  }
  return n
}

const inputChars = (request: CanonicalRequest): number =>
  request.system.reduce((n, p) => n + charCount(p.text), 0) + request.messages.reduce((n, m) => n + messageChars(m), 0)

const lastUserText = (request: CanonicalRequest): string => {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]
    if (message.role === "user") return message.parts.map((p) => (p.type === "text" ? p.text : "")).join("")
  }
  return ""
}

const toolResultsText = (results: ReadonlyArray<ToolResultPart>): string =>
  results.map((r) => `${r.name ?? r.callId}: ${r.content.map((c) => (c.type === "text" ? c.text : "[image]")).join("")}`).join("; ")

const isRecord = (u: unknown): u is { readonly [key: string]: unknown } =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** A sample value for one property schema: its first `enum` value, else one by `type`. */
const sampleValue = (schema: unknown): unknown => {
  if (!isRecord(schema)) return null
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  const types: ReadonlyArray<unknown> = Array.isArray(schema.type) ? schema.type : [schema.type]
  switch (types.find((t) => t !== "null") ?? types[0]) {
    case "string":
      return "text"
    case "number":
    case "integer":
      return 0
    case "boolean":
      return false
    case "array":
      return []
    case "object":
      return {}
    default:
      return null
  }
}

/** The deterministic `respond` arguments for a structured-output schema. */
export const sampleFromSchema = (schema: JsonSchema): { readonly [key: string]: unknown } => {
  const properties = isRecord(schema.properties) ? schema.properties : {}
  const out: Record<string, unknown> = {}
  for (const [key, property] of Object.entries(properties)) out[key] = sampleValue(property)
  if (Array.isArray(schema.required)) {
    for (const key of schema.required) if (typeof key === "string" && !(key in out)) out[key] = null
  }
  return out
}

const chunkDelta = (i: number): string => `chunk ${i} `

/** `::chunks n` deltas, produced lazily (a few hundred per pull) and cut at `limit` characters. */
const chunkStream = (n: number, limit: number): Stream.Stream<ModelEvent> =>
  Stream.unfoldChunk({ i: 0, budget: limit }, (state) => {
    if (state.i >= n || state.budget <= 0) return Option.none()
    const batch: Array<ModelEvent> = []
    let { i, budget } = state
    for (; i < n && budget > 0 && batch.length < 256; i++) {
      const piece = chunkDelta(i).slice(0, budget)
      batch.push(ModelEvent.text(piece))
      budget -= piece.length
    }
    return Option.some([Chunk.unsafeFromArray(batch), { i, budget }] as const)
  })

/** The answer text as a stream, with its length in characters and whether `maxOutputTokens` cut it. */
interface AnswerPlan {
  readonly events: Stream.Stream<ModelEvent>
  readonly chars: number
  readonly cut: boolean
}

const textAnswer = (text: string, limit: number): AnswerPlan => {
  const full = Array.from(text)
  const kept = full.length > limit ? full.slice(0, limit).join("") : text
  return { events: Stream.fromIterable(chunkText(kept).map(ModelEvent.text)), chars: Math.min(full.length, limit), cut: full.length > limit }
}

const chunksAnswer = (n: number, limit: number): AnswerPlan => {
  let total = 0
  for (let i = 0; i < n; i++) total += chunkDelta(i).length
  return { events: chunkStream(n, limit), chars: Math.min(total, limit), cut: total > limit }
}

const upstreamError = (provider: string, kind: MockErrorKind): UpstreamError => {
  const entry: { readonly status?: number; readonly retryAfter?: number } = mockErrors[kind]
  return new UpstreamError({
    reason: kind,
    provider,
    message: `mock provider error: ${kind}`,
    ...(entry.status !== undefined ? { upstreamStatus: entry.status } : {}),
    ...(entry.retryAfter !== undefined ? { retryAfter: entry.retryAfter } : {})
  })
}

/** `::chunks`, else `::text`, else the echo: none for a structured answer, "(empty)" when nothing else is said. */
const answerOf = (script: Script, request: CanonicalRequest, structured: boolean, calls: number): AnswerPlan => {
  const limit = request.maxOutputTokens !== undefined ? request.maxOutputTokens * 4 : Number.POSITIVE_INFINITY
  if (script.chunks !== undefined) return chunksAnswer(script.chunks, limit)
  if (script.answer !== undefined) return textAnswer(script.answer, limit)
  if (structured) return textAnswer("", limit)
  return textAnswer(script.text === "" && calls === 0 ? "(empty)" : script.text, limit)
}

/** The whole event stream for one call: reasoning, answer text, tool calls, usage, finish. */
const respond = (provider: string, call: ProviderCall): Stream.Stream<ModelEvent, UpstreamError> => {
  const { request } = call
  // after a tool round trip the mock reports the results instead of replaying the user's directives
  const last = request.messages[request.messages.length - 1]
  const script = last?.role === "tool" ? { ...parseScript(""), text: `tool results: ${toolResultsText(last.parts)}` } : parseScript(lastUserText(request))
  if (script.error !== undefined && !script.error.after) return Stream.fail(upstreamError(provider, script.error.kind))

  const structured = request.structured !== undefined && script.tools.length === 0 && script.answer === undefined && script.chunks === undefined
  const scripted = structured ? [{ name: "respond", arguments: JSON.stringify(sampleFromSchema(request.structured?.schema ?? {})) }] : script.tools
  const toolCalls: Array<ToolCall> = scripted.map((t, n) => ({ id: `call_mock_${n}`, name: t.name, arguments: t.arguments }))
  const answer = answerOf(script, request, structured, toolCalls.length)

  const reasoning = script.reasoning !== undefined ? chunkText(script.reasoning) : []
  const reasoningEvents = reasoning.map((text, i) => ModelEvent.reasoning(text, i === reasoning.length - 1 ? script.signature : undefined, "mock"))
  const reasoningChars = script.reasoning !== undefined ? charCount(script.reasoning) : 0

  const outputChars = reasoningChars + answer.chars + toolCalls.reduce((n, t) => n + charCount(t.arguments), 0)
  const computedOutput = Math.max(1, tokens(outputChars))
  const usage: Usage = {
    inputTokens: script.usage?.input ?? tokens(inputChars(request)),
    outputTokens: script.usage?.output ?? computedOutput,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: Math.min(tokens(reasoningChars), script.usage?.output ?? computedOutput)
  }
  const finish: FinishReason = script.finish ?? (answer.cut ? "length" : toolCalls.length > 0 ? "tool_calls" : "stop")

  const tail: Stream.Stream<ModelEvent, UpstreamError> =
    script.error !== undefined
      ? Stream.fail(upstreamError(provider, script.error.kind))
      : Stream.fromIterable([...toolCalls.map(ModelEvent.toolCall), ModelEvent.usage(usage), ModelEvent.finish(finish)])
  const events = Stream.fromIterable(reasoningEvents).pipe(Stream.concat(answer.events), Stream.concat(tail))

  const delay = script.delayMs ?? 0
  return delay > 0 ? events.pipe(Stream.mapEffect((event) => Effect.as(Effect.sleep(Duration.millis(delay)), event))) : events
}

const noParams: ReadonlyArray<string> = []

/**
 * The `mock` provider: deterministic and offline. It echoes the last user message in deltas of 16
 * characters, or follows the `::` directives in it (see `parseScript`), and answers a structured-output
 * request with a `respond` tool call built from the schema. Any model name is accepted.
 */
export const MockProviderFactory: ProviderFactory = {
  type: "mock",
  make: (name) => Effect.succeed({ open: (call) => streamSource(Stream.suspend(() => respond(name, call)), call) }),
  // the mock reads no sampling param, so it refuses none
  refusedParams: () => noParams
}
