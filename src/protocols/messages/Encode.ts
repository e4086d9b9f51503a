import type { Answer, FinishReason, ModelEvent, SignatureFamily, ToolCall, Usage } from "../../domain/Canonical.js"
import { emptyUsage } from "../../domain/Canonical.js"
import type { GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import { renderMessages } from "../../http/Envelopes.js"
import { sseComment } from "../../http/Writer.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/** Messages-style message objects and the 6.2 event stream. */

export const newMessageId = () => `msg_${randomHex(12)}`

/** Tool-use ids start `toolu_`; the upstream's own id is kept after the prefix. */
export const toolUseId = (id: string) => (id.startsWith("toolu_") ? id : `toolu_${id.replace(/[^a-zA-Z0-9_-]/g, "")}`)

export const stopReason = (finish: FinishReason, stopSequence: string | undefined): string => {
  if (stopSequence !== undefined) return "stop_sequence"
  switch (finish) {
    case "length":
      return "max_tokens"
    case "tool_calls":
      return "tool_use"
    case "content_filter":
      return "refusal"
    case "stop":
      return "end_turn"
  }
}

/** Messages usage: `input_tokens` excludes cached tokens. */
export const wireUsage = (u: Usage) => ({
  input_tokens: Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens),
  output_tokens: u.outputTokens,
  cache_read_input_tokens: u.cacheReadTokens,
  cache_creation_input_tokens: u.cacheWriteTokens
})

const parseInput = (call: ToolCall): unknown => {
  try {
    return parseJsonText(call.arguments)
  } catch {
    return {}
  }
}

/**
 * The signature a Messages client may see: only one this family made. Another family's (a Gemini
 * upstream's) is given as an empty signature, so that it never comes back to be sent upstream.
 */
const ownSignature = (signature: string | undefined, family: SignatureFamily | undefined): string =>
  signature !== undefined && family === "anthropic" ? signature : ""

export interface MessageMeta {
  readonly id: string
  readonly model: string
  /** thinking blocks are returned only when the request asked for thinking */
  readonly thinking: boolean
}

export const messageBody = (meta: MessageMeta, answer: Answer, stopSequence: string | undefined) => {
  const content: Array<Record<string, unknown>> = []
  if (meta.thinking && answer.reasoning !== "") content.push({ type: "thinking", thinking: answer.reasoning, signature: ownSignature(answer.reasoningSignature, answer.reasoningFamily) })
  if (meta.thinking) for (const data of answer.redacted) content.push({ type: "redacted_thinking", data })
  if (answer.text !== "" || answer.toolCalls.length === 0) content.push({ type: "text", text: answer.text })
  for (const call of answer.toolCalls) content.push({ type: "tool_use", id: toolUseId(call.id), name: call.name, input: parseInput(call) })
  return {
    id: meta.id,
    type: "message",
    role: "assistant",
    model: meta.model,
    content,
    stop_reason: stopReason(answer.finishReason, stopSequence),
    stop_sequence: stopSequence ?? null,
    usage: wireUsage(answer.usage)
  }
}

const frame = (type: string, payload: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`

export interface MessageEncoder {
  readonly start: () => string
  readonly event: (event: ModelEvent) => string
  readonly end: (stopSequence: string | undefined) => string
}

const keepAliveEveryMs = 1000

/** The 6.2 stream: message_start, blocks (thinking, text, tool_use), ping once, message_delta, message_stop. */
export const makeMessageEncoder = (meta: MessageMeta): MessageEncoder => {
  let index = -1
  let open: "thinking" | "text" | undefined
  let pinged = false
  let usage: Usage = emptyUsage
  let finish: FinishReason = "stop"
  let signature = ""
  let lastKeepAlive = 0

  const ping = () => {
    if (pinged) return ""
    pinged = true
    return frame("ping", {})
  }
  const close = (): string => {
    if (open === undefined) return ""
    const tail = open === "thinking" ? frame("content_block_delta", { index, delta: { type: "signature_delta", signature } }) : ""
    open = undefined
    signature = ""
    return tail + frame("content_block_stop", { index })
  }
  const openBlock = (kind: "thinking" | "text"): string => {
    const head = close()
    index++
    open = kind
    const block = kind === "thinking" ? { type: "thinking", thinking: "", signature: "" } : { type: "text", text: "" }
    return head + frame("content_block_start", { index, content_block: block }) + ping()
  }

  return {
    start: () =>
      frame("message_start", {
        message: { id: meta.id, type: "message", role: "assistant", model: meta.model, content: [], stop_reason: null, stop_sequence: null, usage: wireUsage(emptyUsage) }
      }),
    event: (event) => {
      switch (event._tag) {
        case "ReasoningDelta": {
          if (!meta.thinking) {
            const now = Date.now()
            if (now - lastKeepAlive < keepAliveEveryMs) return ""
            lastKeepAlive = now
            return sseComment()
          }
          const own = ownSignature(event.signature, event.family)
          // another family's signature alone opens no block
          if (event.text === "" && own === "") return ""
          const head = open === "thinking" ? "" : openBlock("thinking")
          signature += own
          return head + (event.text === "" ? "" : frame("content_block_delta", { index, delta: { type: "thinking_delta", thinking: event.text } }))
        }
        case "RedactedReasoning": {
          if (!meta.thinking) return ""
          const head = close()
          index++
          return head + frame("content_block_start", { index, content_block: { type: "redacted_thinking", data: event.data } }) + ping() + frame("content_block_stop", { index })
        }
        case "TextDelta": {
          const head = open === "text" ? "" : openBlock("text")
          return head + frame("content_block_delta", { index, delta: { type: "text_delta", text: event.text } })
        }
        case "ToolCall": {
          const head = close()
          index++
          const input = JSON.stringify(parseInput(event.call))
          return (
            head +
            frame("content_block_start", { index, content_block: { type: "tool_use", id: toolUseId(event.call.id), name: event.call.name, input: {} } }) +
            ping() +
            frame("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: input } }) +
            frame("content_block_stop", { index })
          )
        }
        case "Usage":
          usage = event.usage
          return ""
        case "Finish":
          finish = event.reason
          return ""
        case "KeepAlive":
          return sseComment()
      }
    },
    end: (stopSequence) => {
      const head = index < 0 ? openBlock("text") : ""
      return (
        head +
        close() +
        frame("message_delta", { delta: { stop_reason: stopReason(finish, stopSequence), stop_sequence: stopSequence ?? null }, usage: wireUsage(usage) }) +
        frame("message_stop", {})
      )
    }
  }
}

/** A failure after output: one `error` event, and no `message_stop`. */
export const errorEvent = (error: GatewayError): string => `event: error\ndata: ${renderMessages(error).body}\n\n`
