import type { Answer, FinishReason, ModelEvent, Usage } from "../../domain/Canonical.js"
import { type GatewayError } from "../../domain/Errors.js"
import { renderOpenAi } from "../../http/Envelopes.js"
import { sseComment, sseFrame } from "../../http/Writer.js"

/** Chat-completions response bodies and stream chunks, in the shape the `openai` SDK reads. */

export const finishName: Record<FinishReason, string> = {
  stop: "stop",
  length: "length",
  tool_calls: "tool_calls",
  content_filter: "content_filter"
}

export const wireUsage = (u: Usage) => ({
  prompt_tokens: u.inputTokens,
  completion_tokens: u.outputTokens,
  total_tokens: u.inputTokens + u.outputTokens,
  prompt_tokens_details: { cached_tokens: u.cacheReadTokens },
  completion_tokens_details: { reasoning_tokens: u.reasoningTokens }
})

export interface ChatMeta {
  readonly id: string
  readonly created: number
  readonly model: string
  /** include reasoning text as `reasoning_content` */
  readonly reasoningOutput: boolean
}

const wireToolCalls = (answer: Answer) =>
  answer.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }))

export const chatCompletionBody = (meta: ChatMeta, answers: ReadonlyArray<Answer>, usage: Usage) => ({
  id: meta.id,
  object: "chat.completion",
  created: meta.created,
  model: meta.model,
  choices: answers.map((answer, index) => {
    const message: Record<string, unknown> = {
      role: "assistant",
      content: answer.text === "" && answer.toolCalls.length > 0 ? null : answer.text,
      refusal: null
    }
    if (answer.toolCalls.length > 0) message.tool_calls = wireToolCalls(answer)
    if (meta.reasoningOutput && answer.reasoning !== "") message.reasoning_content = answer.reasoning
    return { index, message, logprobs: null, finish_reason: finishName[answer.finishReason] }
  }),
  usage: wireUsage(usage),
  system_fingerprint: null
})

export const textCompletionBody = (meta: ChatMeta, answers: ReadonlyArray<Answer>, usage: Usage) => ({
  id: meta.id,
  object: "text_completion",
  created: meta.created,
  model: meta.model,
  choices: answers.map((answer, index) => ({ index, text: answer.text, logprobs: null, finish_reason: finishName[answer.finishReason] })),
  usage: wireUsage(usage)
})

/** Per-choice state of the chunk encoder. */
export interface ChoiceState {
  started: boolean
  toolIndex: number
  lastKeepAlive: number
  /** the chunks' JSON up to the delta, once built */
  head?: string
}

export const newChoiceState = (): ChoiceState => ({ started: false, toolIndex: 0, lastKeepAlive: 0 })

/** The JSON of a choice's chunks up to their delta: the same for every chunk, serialized once. */
const chunkHead = (meta: ChatMeta, index: number): string =>
  `{"id":${JSON.stringify(meta.id)},"object":"chat.completion.chunk","created":${meta.created},"model":${JSON.stringify(meta.model)},"system_fingerprint":null,"choices":[{"index":${index},"delta":`

/** One chunk: the bytes of the whole chunk object serialized, with the choice's constant head reused. */
const chunk = (meta: ChatMeta, index: number, state: ChoiceState, delta: Record<string, unknown>, finish: string | null) =>
  sseFrame(`${(state.head ??= chunkHead(meta, index))}${JSON.stringify(delta)},"logprobs":null,"finish_reason":${finish === null ? "null" : JSON.stringify(finish)}}]}`)

const keepAliveEveryMs = 1000

/** SSE text for one event of choice `index` (may be empty: usage is sent once at the end). */
export const encodeChatEvent = (meta: ChatMeta, index: number, state: ChoiceState, event: ModelEvent): string => {
  const role = state.started ? {} : { role: "assistant" }
  switch (event._tag) {
    case "TextDelta":
      state.started = true
      return chunk(meta, index, state, { ...role, content: event.text }, null)
    case "ReasoningDelta":
    case "RedactedReasoning": {
      if (meta.reasoningOutput && event._tag === "ReasoningDelta") {
        state.started = true
        return chunk(meta, index, state, { ...role, reasoning_content: event.text }, null)
      }
      const now = Date.now()
      if (now - state.lastKeepAlive < keepAliveEveryMs) return ""
      state.lastKeepAlive = now
      return sseComment()
    }
    case "ToolCall": {
      state.started = true
      const call = event.call
      return chunk(
        meta,
        index,
        state,
        { ...role, tool_calls: [{ index: state.toolIndex++, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } }] },
        null
      )
    }
    case "Usage":
      return ""
    case "Finish": {
      const head = state.started ? "" : chunk(meta, index, state, { role: "assistant", content: "" }, null)
      state.started = true
      return head + chunk(meta, index, state, {}, finishName[event.reason])
    }
    case "KeepAlive":
      return sseComment()
  }
}

export const usageChunk = (meta: ChatMeta, usage: Usage, object = "chat.completion.chunk") =>
  sseFrame(JSON.stringify({ id: meta.id, object, created: meta.created, model: meta.model, choices: [], usage: wireUsage(usage) }))

/** Legacy completions stream chunk. */
export const encodeTextEvent = (meta: ChatMeta, index: number, event: ModelEvent): string => {
  const frame = (text: string, finish: string | null) =>
    sseFrame(JSON.stringify({ id: meta.id, object: "text_completion", created: meta.created, model: meta.model, choices: [{ index, text, logprobs: null, finish_reason: finish }] }))
  if (event._tag === "TextDelta") return frame(event.text, null)
  if (event._tag === "Finish") return frame("", finishName[event.reason])
  if (event._tag === "KeepAlive") return sseComment()
  return ""
}

/** A failure after the stream committed: an error frame in the OpenAI envelope, and no `[DONE]`. */
export const errorFrame = (error: GatewayError): string => sseFrame(renderOpenAi(error).body)

export const doneFrame = "data: [DONE]\n\n"
