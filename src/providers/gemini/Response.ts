import { emptyUsage, ModelEvent, type FinishReason, type Usage } from "../../domain/Canonical.js"
import { count, obj, str } from "../Wire.js"
import { Ids } from "../../domain/Ids.js"

/**
 * Reading generateContent answers into canonical events. A non-streamed answer and every streamed
 * SSE chunk are the same GenerateContentResponse object, so both go through `readChunk`. Wire data
 * stays `unknown` and is read through narrow accessors. Calls arrive whole; a part's
 * `thoughtSignature` is emitted as an empty signed ReasoningDelta just before the part's own event,
 * so that the request builder can put it back on the same part.
 */


/** Finish reasons that mean the output was withheld by a filter. */
const filtered = new Set([
  "SAFETY",
  "RECITATION",
  "BLOCKLIST",
  "PROHIBITED_CONTENT",
  "SPII",
  "IMAGE_SAFETY",
  "IMAGE_PROHIBITED_CONTENT",
  "IMAGE_RECITATION"
])

/** A candidate's finishReason as a canonical one; a call made turns any unfiltered finish into tool_calls. */
export const mapFinishReason = (reason: string | undefined, madeCalls: boolean): FinishReason => {
  if (reason !== undefined && filtered.has(reason)) return "content_filter"
  if (madeCalls) return "tool_calls"
  return reason === "MAX_TOKENS" ? "length" : "stop"
}

/**
 * usageMetadata as canonical usage: input is the prompt (cached tokens included) plus the tool-use
 * prompt; output is the candidates plus the thoughts, which Gemini counts apart.
 */
export const readUsage = (value: unknown): Usage | undefined => {
  const u = obj(value)
  if (u === undefined) return undefined
  const thoughts = count(u.thoughtsTokenCount)
  return {
    inputTokens: count(u.promptTokenCount) + count(u.toolUsePromptTokenCount),
    outputTokens: count(u.candidatesTokenCount) + thoughts,
    cacheReadTokens: count(u.cachedContentTokenCount),
    cacheWriteTokens: 0,
    reasoningTokens: thoughts
  }
}

/** A Google error body `{error:{code,message,status,details}}`, read for classification only. */
export interface GoogleError {
  readonly code?: number
  /** the google.rpc status name: RESOURCE_EXHAUSTED, UNAVAILABLE, ... */
  readonly status?: string
  /** read only to spot overload; never shown */
  readonly message: string
  /** ErrorInfo reasons in details (API_KEY_INVALID, ...) */
  readonly reasons: ReadonlyArray<string>
  /** seconds from a RetryInfo detail */
  readonly retryDelay?: number
}

/** RetryInfo's `retryDelay` ("37s", "0.5s") in whole seconds. */
const parseDelay = (value: unknown): number | undefined => {
  const match = /^(\d+(?:\.\d+)?)s$/.exec(str(value) ?? "")
  return match === null ? undefined : Math.ceil(Number(match[1]))
}

export const readGoogleError = (value: unknown): GoogleError | undefined => {
  const e = obj(obj(value)?.error)
  if (e === undefined) return undefined
  const details = Array.isArray(e.details) ? e.details.map(obj) : []
  const reasons = details.flatMap((d) => (d !== undefined && typeof d.reason === "string" ? [d.reason] : []))
  const delay = details.map((d) => parseDelay(d?.retryDelay)).find((d) => d !== undefined)
  const code = count(e.code)
  const status = str(e.status)
  return {
    ...(code > 0 ? { code } : {}),
    ...(status !== undefined ? { status } : {}),
    message: str(e.message) ?? "",
    reasons,
    ...(delay !== undefined ? { retryDelay: delay } : {})
  }
}

/** State of one answer, streamed chunk by chunk or read whole. */
export interface StreamState {
  /** the last finishReason seen */
  finishReason: string | undefined
  /** the prompt was blocked (promptFeedback.blockReason) */
  blocked: boolean
  calls: number
  usage: Usage | undefined
  /** a candidate or prompt feedback was seen */
  answered: boolean
}

export const initialStreamState = (): StreamState => ({ finishReason: undefined, blocked: false, calls: 0, usage: undefined, answered: false })

/** Result of reading an answer or chunk: its events, an error the upstream reported, or why it cannot be read. */
export type ChunkResult =
  | { readonly _tag: "Events"; readonly events: Array<ModelEvent> }
  | { readonly _tag: "Error"; readonly error: GoogleError }
  | { readonly _tag: "Invalid"; readonly message: string }

const partEvents = (state: StreamState, part: Record<string, unknown>, out: Array<ModelEvent>): string | undefined => {
  const signature = str(part.thoughtSignature) || undefined
  const text = str(part.text)
  if (part.thought === true) {
    if (text || signature !== undefined) out.push(ModelEvent.reasoning(text ?? "", signature, "gemini"))
    return undefined
  }
  if (signature !== undefined) out.push(ModelEvent.reasoning("", signature, "gemini"))
  const call = obj(part.functionCall)
  if (call !== undefined) {
    const name = str(call.name)
    if (name === undefined || name === "") return "a function call has no name"
    state.calls++
    const id = str(call.id) || Ids.toolCall()
    out.push(ModelEvent.toolCall({ id, name, arguments: JSON.stringify(call.args ?? {}) }))
    return undefined
  }
  if (text) out.push(ModelEvent.text(text))
  return undefined
}

/** Read one GenerateContentResponse (a whole answer or one streamed chunk): events to emit now. */
export const readChunk = (state: StreamState, data: unknown): ChunkResult => {
  const root = obj(data)
  if (root === undefined) return { _tag: "Invalid", message: "a stream chunk is not an object" }
  const error = readGoogleError(root)
  if (error !== undefined) return { _tag: "Error", error }
  const usage = readUsage(root.usageMetadata)
  if (usage !== undefined) state.usage = usage
  if (str(obj(root.promptFeedback)?.blockReason) !== undefined) {
    state.blocked = true
    state.answered = true
  }
  const events: Array<ModelEvent> = []
  const candidates = Array.isArray(root.candidates) ? root.candidates : []
  // one candidate is asked for; the first is the answer
  const candidate = obj(candidates[0])
  if (candidate === undefined) return { _tag: "Events", events }
  state.answered = true
  const parts = obj(candidate.content)?.parts
  if (Array.isArray(parts)) {
    for (const raw of parts) {
      const part = obj(raw)
      if (part === undefined) continue
      const invalid = partEvents(state, part, events)
      if (invalid !== undefined) return { _tag: "Invalid", message: invalid }
    }
  }
  const finish = str(candidate.finishReason)
  if (finish !== undefined && finish !== "FINISH_REASON_UNSPECIFIED") state.finishReason = finish
  return { _tag: "Events", events }
}

/** Whether the answer is complete: a candidate finished, or the prompt was blocked. */
export const isComplete = (state: StreamState): boolean => state.finishReason !== undefined || state.blocked

/** The events that close an answer: usage, then the finish reason. */
export const finishStream = (state: StreamState): Array<ModelEvent> => [
  ModelEvent.usage(state.usage ?? emptyUsage),
  ModelEvent.finish(state.blocked ? "content_filter" : mapFinishReason(state.finishReason, state.calls > 0))
]

/** Events of a whole (non-streamed) answer. */
export const eventsOfResponse = (body: unknown): ChunkResult => {
  const state = initialStreamState()
  const result = readChunk(state, body)
  if (result._tag !== "Events") return result
  if (!state.answered) return { _tag: "Invalid", message: "the answer has no candidate" }
  return { _tag: "Events", events: [...result.events, ...finishStream(state)] }
}
