import type { Answer, FinishReason, ModelEvent, SignatureFamily, ToolCall, Usage } from "../../domain/Canonical.js"
import { emptyUsage } from "../../domain/Canonical.js"
import type { GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import { geminiErrorObject } from "../../http/Envelopes.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/** Generate-content responses (spec 2.3) and the two stream forms (spec 6.3). */

export interface GeminiMeta {
  /** the `{model}` path segment, echoed as `modelVersion` */
  readonly modelVersion: string
  readonly responseId: string
  /** several candidates: each carries its `index` */
  readonly multi: boolean
}

export const newResponseId = (): string => randomHex(12)

const finishReasons: Record<FinishReason, string> = { stop: "STOP", tool_calls: "STOP", length: "MAX_TOKENS", content_filter: "SAFETY" }

export const usageMetadata = (usage: Usage): Record<string, number> => {
  const out: Record<string, number> = {
    promptTokenCount: usage.inputTokens,
    candidatesTokenCount: Math.max(0, usage.outputTokens - usage.reasoningTokens),
    totalTokenCount: usage.inputTokens + usage.outputTokens
  }
  if (usage.reasoningTokens > 0) out.thoughtsTokenCount = usage.reasoningTokens
  if (usage.cacheReadTokens > 0) out.cachedContentTokenCount = usage.cacheReadTokens
  return out
}

/** Function-call arguments as an object (the model's JSON text, or `{}` when it is not an object). */
const argsOf = (text: string): Record<string, unknown> => {
  try {
    const value = parseJsonText(text)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

const candidate = (meta: GeminiMeta, index: number, parts: ReadonlyArray<Record<string, unknown>>, finishReason?: FinishReason): Record<string, unknown> => ({
  content: { role: "model", parts },
  ...(finishReason !== undefined ? { finishReason: finishReasons[finishReason] } : {}),
  ...(meta.multi ? { index } : {})
})

const callPart = (call: ToolCall): Record<string, unknown> => ({ functionCall: { name: call.name, args: argsOf(call.arguments) } })

/**
 * A signature a Gemini client may carry back: only one a Gemini upstream made (another family's
 * would reach a Gemini upstream as a `thoughtSignature`, spec 4.2).
 */
const ownSignature = (signature: string | undefined, family: SignatureFamily | undefined): string | undefined =>
  family === "gemini" && signature !== undefined && signature !== "" ? signature : undefined

/**
 * The whole answer of `:generateContent`: one candidate per answer, usage summed over them. The
 * upstream's signature goes where Gemini puts it: on the first functionCall, else on the text part.
 */
export const responseBody = (meta: GeminiMeta, answers: ReadonlyArray<Answer>, usage: Usage): Record<string, unknown> => ({
  candidates: answers.map((answer, index) => {
    const parts: Array<Record<string, unknown>> = []
    if (answer.text !== "" || answer.toolCalls.length === 0) parts.push({ text: answer.text })
    for (const call of answer.toolCalls) parts.push(callPart(call))
    const signature = ownSignature(answer.reasoningSignature, answer.reasoningFamily)
    if (signature !== undefined) (parts.find((p) => p.functionCall !== undefined) ?? parts[0]).thoughtSignature = signature
    return candidate(meta, index, parts, answer.finishReason)
  }),
  usageMetadata: usageMetadata(usage),
  modelVersion: meta.modelVersion,
  responseId: meta.responseId
})

/** One stream element: a chunk object, or a keep-alive while the model reasons. */
export type StreamItem = { readonly _tag: "Chunk"; readonly chunk: Record<string, unknown> } | { readonly _tag: "KeepAlive" }

const keepAliveEveryMs = 1000

/**
 * The chunks of one candidate: a chunk per text delta and per tool call, keep-alives (at most one a
 * second) while it reasons, and at the end a chunk with an empty text part and `finishReason`,
 * holding the usage too when it is the only candidate. A Gemini upstream's signature, emitted just
 * before its part's event, goes on that part (or on the last chunk's part when none follows).
 */
export const makeCandidateEncoder = (meta: GeminiMeta, index: number) => {
  let usage: Usage = emptyUsage
  let finish: FinishReason = "stop"
  let lastKeepAlive = 0
  let signature: string | undefined
  const signed = (part: Record<string, unknown>): Record<string, unknown> => {
    if (signature === undefined) return part
    part.thoughtSignature = signature
    signature = undefined
    return part
  }
  const keepAlive = (): ReadonlyArray<StreamItem> => {
    const now = Date.now()
    if (now - lastKeepAlive < keepAliveEveryMs) return []
    lastKeepAlive = now
    return [{ _tag: "KeepAlive" }]
  }
  const chunk = (parts: ReadonlyArray<Record<string, unknown>>, finishReason?: FinishReason, withUsage?: Usage): StreamItem => ({
    _tag: "Chunk",
    chunk: {
      candidates: [candidate(meta, index, parts, finishReason)],
      ...(withUsage !== undefined ? { usageMetadata: usageMetadata(withUsage) } : {}),
      modelVersion: meta.modelVersion,
      responseId: meta.responseId
    }
  })
  return {
    event: (event: ModelEvent): ReadonlyArray<StreamItem> => {
      switch (event._tag) {
        case "TextDelta":
          return event.text === "" ? [] : [chunk([signed({ text: event.text })])]
        case "ToolCall":
          return [chunk([signed(callPart(event.call))])]
        case "ReasoningDelta":
          // reasoning is never shown, only kept alive; its signature waits for its part
          signature = ownSignature(event.signature, event.family) ?? signature
          return keepAlive()
        case "RedactedReasoning":
          return keepAlive()
        case "Usage":
          usage = event.usage
          return []
        case "Finish":
          finish = event.reason
          return []
        case "KeepAlive":
          return [{ _tag: "KeepAlive" }]
      }
    },
    end: (): StreamItem => chunk([signed({ text: "" })], finish, meta.multi ? undefined : usage),
    usage: (): Usage => usage
  }
}

/** The last chunk of a multi-candidate stream: only the summed usage. */
export const usageChunk = (meta: GeminiMeta, usage: Usage): StreamItem => ({
  _tag: "Chunk",
  chunk: { usageMetadata: usageMetadata(usage), modelVersion: meta.modelVersion, responseId: meta.responseId }
})

/** Writes stream items as `alt=sse` frames or as one progressively written JSON array. */
export interface StreamForm {
  readonly contentType: string
  readonly open: string
  readonly item: (item: StreamItem) => string
  readonly close: string
  readonly error: (error: GatewayError) => string
}

/**
 * Keep-alive on the SSE form is a blank line, not a `: comment` line: the Gemini CLI's bundled
 * @google/genai 1.x reads events with `/^\s*data: (.*)\r\n\r\n/` on the whole buffer, so one
 * comment line stalls every later event. A blank line is whitespace to that parser and an empty
 * event (nothing dispatched) to a standard SSE parser.
 */
const sseKeepAlive = "\r\n"

export const sseForm = (): StreamForm => ({
  contentType: "text/event-stream; charset=utf-8",
  open: "",
  item: (item) => (item._tag === "Chunk" ? `data: ${JSON.stringify(item.chunk)}\r\n\r\n` : sseKeepAlive),
  close: "",
  error: (error) => `data: ${JSON.stringify({ error: geminiErrorObject(error).error })}\r\n\r\n`
})

export const arrayForm = (): StreamForm => {
  let first = true
  const separator = () => {
    if (!first) return ",\r\n"
    first = false
    return ""
  }
  return {
    contentType: "application/json; charset=utf-8",
    open: "[",
    // whitespace between array elements keeps the connection alive and the array valid JSON
    item: (item) => (item._tag === "Chunk" ? separator() + JSON.stringify(item.chunk) : "\n"),
    close: "]",
    error: (error) => `${separator()}${JSON.stringify({ error: geminiErrorObject(error).error })}]`
  }
}
