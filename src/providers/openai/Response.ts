import { ModelEvent, type FinishReason, type ToolCall, type Usage } from "../../domain/Canonical.js"
import { count, obj, str } from "../Wire.js"

/**
 * Reading chat-completions answers (JSON and SSE chunks) into canonical events. Wire data stays
 * `unknown` and is read through the narrow accessors below; anything unexpected is ignored or,
 * when it makes the answer unreadable, reported as `undefined` so the caller can fail.
 */


export const mapFinish = (reason: unknown, hasToolCalls: boolean): FinishReason => {
  if (hasToolCalls) return "tool_calls"
  switch (reason) {
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      return "tool_calls"
    case "content_filter":
      return "content_filter"
    default:
      return "stop"
  }
}

export const readUsage = (value: unknown): Usage | undefined => {
  const u = obj(value)
  if (u === undefined) return undefined
  const prompt = obj(u.prompt_tokens_details)
  const completion = obj(u.completion_tokens_details)
  return {
    inputTokens: count(u.prompt_tokens),
    outputTokens: count(u.completion_tokens),
    cacheReadTokens: count(prompt?.cached_tokens),
    cacheWriteTokens: count(prompt?.cache_write_tokens ?? prompt?.cache_creation_tokens),
    reasoningTokens: count(completion?.reasoning_tokens)
  }
}

/** The error object some upstreams put in a 200 body or SSE chunk. */
export const readInlineError = (value: unknown): { readonly message: string } | undefined => {
  const e = obj(obj(value)?.error)
  if (e === undefined) return undefined
  return { message: str(e.message) ?? "" }
}

const reasoningText = (m: Record<string, unknown>): string | undefined => str(m.reasoning_content) ?? str(m.reasoning)

/** Events of a whole (non-streamed) chat.completion answer; undefined when it has no choice. */
export const eventsOfCompletion = (body: unknown): Array<ModelEvent> | undefined => {
  const root = obj(body)
  const choices = root?.choices
  const choice = Array.isArray(choices) ? obj(choices[0]) : undefined
  const message = obj(choice?.message)
  if (root === undefined || choice === undefined || message === undefined) return undefined
  const events: Array<ModelEvent> = []
  const reasoning = reasoningText(message)
  if (reasoning) events.push(ModelEvent.reasoning(reasoning))
  const content = str(message.content)
  if (content) events.push(ModelEvent.text(content))
  const calls: Array<ToolCall> = []
  if (Array.isArray(message.tool_calls)) {
    for (const raw of message.tool_calls) {
      const call = obj(raw)
      const fn = obj(call?.function)
      const name = str(fn?.name)
      if (call === undefined || name === undefined) continue
      calls.push({ id: str(call.id) ?? `call_${calls.length}`, name, arguments: str(fn?.arguments) || "{}" })
    }
  }
  for (const call of calls) events.push(ModelEvent.toolCall(call))
  const usage = readUsage(root.usage)
  if (usage !== undefined) events.push(ModelEvent.usage(usage))
  events.push(ModelEvent.finish(mapFinish(choice.finish_reason, calls.length > 0)))
  return events
}

interface PartialCall {
  id: string
  name: string
  arguments: string
}

/** State of one streamed answer: tool calls are assembled here and emitted whole at the end. */
export interface StreamState {
  readonly calls: Map<number, PartialCall>
  finish: unknown
  usage: Usage | undefined
  done: boolean
}

export const initialStreamState = (): StreamState => ({ calls: new Map(), finish: undefined, usage: undefined, done: false })

/** Read one `chat.completion.chunk`; returns the events it completes now. */
export const readChunk = (state: StreamState, chunk: unknown): Array<ModelEvent> => {
  const root = obj(chunk)
  if (root === undefined) return []
  const events: Array<ModelEvent> = []
  const usage = readUsage(root.usage)
  if (usage !== undefined) state.usage = usage
  const choices = root.choices
  if (!Array.isArray(choices)) return events
  for (const rawChoice of choices) {
    const choice = obj(rawChoice)
    if (choice === undefined || count(choice.index) !== 0) continue
    const delta = obj(choice.delta)
    if (delta !== undefined) {
      const reasoning = reasoningText(delta)
      if (reasoning) events.push(ModelEvent.reasoning(reasoning))
      const content = str(delta.content)
      if (content) events.push(ModelEvent.text(content))
      if (Array.isArray(delta.tool_calls)) {
        for (const rawCall of delta.tool_calls) {
          const call = obj(rawCall)
          if (call === undefined) continue
          const index = typeof call.index === "number" ? call.index : state.calls.size
          const fn = obj(call.function)
          const existing = state.calls.get(index)
          if (existing === undefined) {
            state.calls.set(index, { id: str(call.id) ?? "", name: str(fn?.name) ?? "", arguments: str(fn?.arguments) ?? "" })
          } else {
            if (str(call.id)) existing.id = str(call.id)!
            if (str(fn?.name)) existing.name += str(fn?.name)
            existing.arguments += str(fn?.arguments) ?? ""
          }
        }
      }
    }
    if (choice.finish_reason !== undefined && choice.finish_reason !== null) state.finish = choice.finish_reason
  }
  return events
}

/** The events that close a streamed answer: whole tool calls, usage, finish. */
export const finishStream = (state: StreamState): Array<ModelEvent> => {
  const events: Array<ModelEvent> = []
  const indexes = [...state.calls.keys()].sort((a, b) => a - b)
  for (const index of indexes) {
    const call = state.calls.get(index)!
    if (call.name === "") continue
    events.push(ModelEvent.toolCall({ id: call.id || `call_${index}`, name: call.name, arguments: call.arguments || "{}" }))
  }
  if (state.usage !== undefined) events.push(ModelEvent.usage(state.usage))
  events.push(ModelEvent.finish(mapFinish(state.finish, events.some((e) => e._tag === "ToolCall"))))
  return events
}
