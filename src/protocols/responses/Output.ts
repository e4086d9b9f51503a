import type { Answer, FinishReason, ToolCall, Usage } from "../../domain/Canonical.js"
import { randomHex } from "../../domain/Ids.js"
import type { Item } from "./Input.js"
import type { ToolEntry, ToolPlan } from "./Tools.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/** Output items and the response object of the Responses-style API (spec 2.1). */

export const newResponseId = () => `resp_${randomHex()}`

export const wireUsage = (u: Usage) => ({
  input_tokens: u.inputTokens,
  input_tokens_details: { cached_tokens: u.cacheReadTokens },
  output_tokens: u.outputTokens,
  output_tokens_details: { reasoning_tokens: u.reasoningTokens },
  total_tokens: u.inputTokens + u.outputTokens
})

const parseInput = (args: string): string => {
  try {
    const value = parseJsonText(args)
    if (typeof value === "object" && value !== null && "input" in value) {
      const input = (value as { input: unknown }).input
      return typeof input === "string" ? input : JSON.stringify(input)
    }
  } catch {
    // a call without the argument gets empty input
  }
  return ""
}

/** The output item of one whole tool call, as the caller knows the tool. */
export const callItem = (call: ToolCall, entries: ReadonlyMap<string, ToolEntry>, id?: string): Item => {
  const entry = entries.get(call.name)
  if (entry?.kind === "custom") {
    return {
      id: id ?? `ctc_${randomHex()}`,
      type: "custom_tool_call",
      status: "completed",
      call_id: call.id,
      name: entry.name,
      input: parseInput(call.arguments),
      ...(entry.namespace !== undefined ? { namespace: entry.namespace } : {})
    }
  }
  return {
    id: id ?? `fc_${randomHex()}`,
    type: "function_call",
    status: "completed",
    call_id: call.id,
    name: entry?.name ?? call.name,
    arguments: call.arguments,
    ...(entry?.namespace !== undefined ? { namespace: entry.namespace } : {})
  }
}

export const reasoningItem = (text: string, id = `rs_${randomHex()}`): Item => ({ id, type: "reasoning", summary: [{ type: "summary_text", text }] })

export const messageItem = (text: string, status: "completed" | "incomplete", id = `msg_${randomHex()}`): Item => ({
  id,
  type: "message",
  status,
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [] }]
})

export const incompleteReason = (finish: FinishReason): "max_output_tokens" | "content_filter" | undefined =>
  finish === "length" ? "max_output_tokens" : finish === "content_filter" ? "content_filter" : undefined

/** Output items of a whole answer: reasoning (when shown), the message, then the calls. */
export const outputItems = (answer: Answer, plan: ToolPlan, options: { readonly reasoningOutput: boolean; readonly parallelToolCalls: boolean }): Array<Item> => {
  const items: Array<Item> = []
  if (options.reasoningOutput && answer.reasoning !== "") items.push(reasoningItem(answer.reasoning))
  const calls = options.parallelToolCalls ? answer.toolCalls : answer.toolCalls.slice(0, 1)
  // a message followed by calls is complete; only a cut answer's last item is incomplete
  const cut = incompleteReason(answer.finishReason) !== undefined && calls.length === 0
  if (answer.text !== "" || calls.length === 0) items.push(messageItem(answer.text, cut ? "incomplete" : "completed"))
  for (const call of calls) items.push(callItem(call, plan.entries))
  return items
}

/** The fields of a response object that come from the request. */
export interface ResponseFrame {
  readonly id: string
  readonly createdAt: number
  readonly model: string
  readonly instructions: string | null
  readonly maxOutputTokens: number | null
  readonly parallelToolCalls: boolean
  readonly previousResponseId: string | null
  readonly reasoning: Readonly<Record<string, unknown>>
  readonly store: boolean
  readonly temperature: number | null
  readonly topP: number | null
  readonly text: Readonly<Record<string, unknown>>
  readonly toolChoice: unknown
  readonly tools: ReadonlyArray<Item>
  readonly user: string | null
  readonly metadata: unknown
}

export const responseObject = (
  frame: ResponseFrame,
  state:
    | { readonly status: "in_progress" }
    | { readonly status: "completed" | "incomplete"; readonly output: ReadonlyArray<Item>; readonly usage: Usage; readonly finish: FinishReason }
    | { readonly status: "failed"; readonly output: ReadonlyArray<Item>; readonly error: { readonly code: string; readonly message: string } }
) => {
  const reason = state.status === "completed" || state.status === "incomplete" ? incompleteReason(state.finish) : undefined
  return {
    id: frame.id,
    object: "response",
    created_at: frame.createdAt,
    status: state.status,
    error: state.status === "failed" ? state.error : null,
    incomplete_details: reason !== undefined ? { reason } : null,
    instructions: frame.instructions,
    max_output_tokens: frame.maxOutputTokens,
    model: frame.model,
    output: state.status === "in_progress" ? [] : state.output,
    parallel_tool_calls: frame.parallelToolCalls,
    previous_response_id: frame.previousResponseId,
    reasoning: frame.reasoning,
    store: frame.store,
    temperature: frame.temperature,
    text: frame.text,
    tool_choice: frame.toolChoice,
    tools: frame.tools,
    top_p: frame.topP,
    truncation: "disabled",
    usage: state.status === "completed" || state.status === "incomplete" ? wireUsage(state.usage) : null,
    user: frame.user,
    metadata: frame.metadata ?? {}
  }
}

/** Output items as input items of a later turn (`previous_response_id`): reasoning is not replayed. */
export const outputAsInput = (output: ReadonlyArray<Item>): Array<Item> =>
  output.flatMap((item): Array<Item> => {
    if (item.type === "reasoning") return []
    if (item.type !== "message") return [item]
    const { status: _status, ...message } = item
    return [message]
  })
