import type { FinishReason, ModelEvent, Usage } from "../../domain/Canonical.js"
import { emptyUsage } from "../../domain/Canonical.js"
import { randomHex } from "../../domain/Ids.js"
import { sseComment } from "../../http/Writer.js"
import type { Item } from "./Input.js"
import { callItem, incompleteReason, messageItem, reasoningItem } from "./Output.js"
import type { ToolPlan } from "./Tools.js"

/**
 * The Responses-style event stream (spec 6.1): created, in_progress, then per output item its
 * added / delta / done events, each with `sequence_number`. One encoder per request; it collects
 * the finished output items for the terminal event.
 */

export interface EncoderOptions {
  readonly plan: ToolPlan
  readonly reasoningOutput: boolean
  readonly parallelToolCalls: boolean
}

export interface Encoder {
  /** frames for the first event (`response.created`, `response.in_progress`) */
  readonly start: (inProgress: unknown) => string
  /** frames for one model event */
  readonly event: (event: ModelEvent) => string
  /** close open items (an answer with neither text nor calls gets an empty message): their frames and the whole output */
  readonly close: () => {
    readonly frames: string
    readonly output: ReadonlyArray<Item>
    readonly usage: Usage
    readonly finish: FinishReason
    readonly droppedCalls: boolean
  }
  /** the terminal frame with the whole response */
  readonly terminal: (type: "response.completed" | "response.incomplete" | "response.failed", response: unknown) => string
}

const keepAliveEveryMs = 1000

export const makeEncoder = (options: EncoderOptions): Encoder => {
  let sequence = 0
  const frame = (type: string, payload: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...payload })}\n\n`
  const output: Array<Item> = []
  let usage: Usage = emptyUsage
  let finish: FinishReason = "stop"
  let calls = 0
  let droppedCalls = false
  let lastKeepAlive = 0
  let reasoning: { id: string; index: number; text: string } | undefined
  let message: { id: string; index: number; text: string } | undefined

  const closeReasoning = (): string => {
    if (reasoning === undefined) return ""
    const { id, index, text } = reasoning
    reasoning = undefined
    const item = reasoningItem(text, id)
    output.push(item)
    return (
      frame("response.reasoning_summary_text.done", { item_id: id, output_index: index, summary_index: 0, text }) +
      frame("response.reasoning_summary_part.done", { item_id: id, output_index: index, summary_index: 0, part: { type: "summary_text", text } }) +
      frame("response.output_item.done", { output_index: index, item })
    )
  }

  const closeMessage = (status: "completed" | "incomplete"): string => {
    if (message === undefined) return ""
    const { id, index, text } = message
    message = undefined
    const item = messageItem(text, status, id)
    output.push(item)
    const part = { type: "output_text", text, annotations: [] }
    return (
      frame("response.output_text.done", { item_id: id, output_index: index, content_index: 0, text, logprobs: [] }) +
      frame("response.content_part.done", { item_id: id, output_index: index, content_index: 0, part }) +
      frame("response.output_item.done", { output_index: index, item })
    )
  }

  const openMessage = (): string => {
    const id = `msg_${randomHex()}`
    message = { id, index: output.length, text: "" }
    return (
      frame("response.output_item.added", { output_index: message.index, item: { id, type: "message", status: "in_progress", role: "assistant", content: [] } }) +
      frame("response.content_part.added", { item_id: id, output_index: message.index, content_index: 0, part: { type: "output_text", text: "", annotations: [] } })
    )
  }

  const event = (e: ModelEvent): string => {
    switch (e._tag) {
      case "ReasoningDelta": {
        if (!options.reasoningOutput || message !== undefined || output.length > 0) {
          const now = Date.now()
          if (now - lastKeepAlive < keepAliveEveryMs) return ""
          lastKeepAlive = now
          return sseComment()
        }
        let head = ""
        if (reasoning === undefined) {
          const id = `rs_${randomHex()}`
          reasoning = { id, index: output.length, text: "" }
          head =
            frame("response.output_item.added", { output_index: reasoning.index, item: { id, type: "reasoning", summary: [] } }) +
            frame("response.reasoning_summary_part.added", { item_id: id, output_index: reasoning.index, summary_index: 0, part: { type: "summary_text", text: "" } })
        }
        reasoning.text += e.text
        return head + frame("response.reasoning_summary_text.delta", { item_id: reasoning.id, output_index: reasoning.index, summary_index: 0, delta: e.text })
      }
      case "RedactedReasoning":
        return ""
      case "TextDelta": {
        let head = closeReasoning()
        if (message === undefined) head += openMessage()
        const m = message!
        m.text += e.text
        return head + frame("response.output_text.delta", { item_id: m.id, output_index: m.index, content_index: 0, delta: e.text, logprobs: [] })
      }
      case "ToolCall": {
        if (!options.parallelToolCalls && calls > 0) {
          droppedCalls = true
          return ""
        }
        calls++
        const head = closeReasoning() + closeMessage("completed")
        const item = callItem(e.call, options.plan.entries)
        const index = output.length
        output.push(item)
        const id = item.id
        if (item.type === "custom_tool_call") {
          return (
            head +
            frame("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", input: "" } }) +
            frame("response.custom_tool_call_input.delta", { item_id: id, output_index: index, delta: item.input }) +
            frame("response.custom_tool_call_input.done", { item_id: id, output_index: index, input: item.input }) +
            frame("response.output_item.done", { output_index: index, item })
          )
        }
        return (
          head +
          frame("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", arguments: "" } }) +
          frame("response.function_call_arguments.delta", { item_id: id, output_index: index, delta: item.arguments }) +
          frame("response.function_call_arguments.done", { item_id: id, output_index: index, name: item.name, arguments: item.arguments }) +
          frame("response.output_item.done", { output_index: index, item })
        )
      }
      case "Usage":
        usage = e.usage
        return ""
      case "Finish":
        finish = e.reason
        return ""
      case "KeepAlive":
        return sseComment()
    }
  }

  return {
    start: (inProgress) => frame("response.created", { response: inProgress }) + frame("response.in_progress", { response: inProgress }),
    event,
    close: () => {
      let frames = closeReasoning()
      if (message === undefined && calls === 0 && !output.some((i) => i.type === "message")) frames += openMessage()
      frames += closeMessage(incompleteReason(finish) !== undefined ? "incomplete" : "completed")
      return { frames, output, usage, finish, droppedCalls }
    },
    terminal: (type, response) => frame(type, { response })
  }
}
