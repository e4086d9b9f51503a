import { ModelEvent, type FinishReason, type Usage } from "../../domain/Canonical.js"
import { num, obj, str } from "../Wire.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/**
 * Reading Messages API answers (a whole `message` JSON and SSE events) into canonical events. Wire
 * data stays `unknown` and is read through narrow accessors; tool calls are emitted whole.
 */


export const mapStopReason = (reason: unknown): FinishReason => {
  switch (reason) {
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length"
    case "tool_use":
      return "tool_calls"
    case "refusal":
      return "content_filter"
    default:
      return "stop"
  }
}

/** Token counts as the Messages API reports them (each field may come in a later event). */
interface WireUsage {
  input: number
  output: number
  cacheRead: number
  cacheWrite: number
}

const emptyWireUsage = (): WireUsage => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0 })

/** Update counts with the fields present in a wire usage object. */
const mergeUsage = (into: WireUsage, value: unknown): boolean => {
  const u = obj(value)
  if (u === undefined) return false
  const input = num(u.input_tokens)
  const output = num(u.output_tokens)
  const read = num(u.cache_read_input_tokens)
  const write = num(u.cache_creation_input_tokens)
  if (input !== undefined) into.input = input
  if (output !== undefined) into.output = output
  if (read !== undefined) into.cacheRead = read
  if (write !== undefined) into.cacheWrite = write
  return true
}

/** Canonical usage: input tokens include cache reads and cache writes. */
export const toUsage = (u: WireUsage): Usage => ({
  inputTokens: u.input + u.cacheRead + u.cacheWrite,
  outputTokens: u.output,
  cacheReadTokens: u.cacheRead,
  cacheWriteTokens: u.cacheWrite,
  reasoningTokens: 0
})

export const readUsage = (value: unknown): Usage | undefined => {
  const u = emptyWireUsage()
  return mergeUsage(u, value) ? toUsage(u) : undefined
}

/** The error a Messages body or SSE `error` event carries: its type only (never its text). */
export const readWireError = (value: unknown): { readonly type: string } | undefined => {
  const root = obj(value)
  if (root === undefined) return undefined
  const e = obj(root.error)
  if (root.type !== "error" && e === undefined) return undefined
  return { type: str(e?.type) ?? "" }
}

const isJson = (text: string): boolean => {
  try {
    parseJsonText(text)
    return true
  } catch {
    return false
  }
}

/** Result of reading an answer: its events, or why it cannot be read. */
export type ReadResult =
  | { readonly _tag: "Events"; readonly events: Array<ModelEvent> }
  | { readonly _tag: "Invalid"; readonly message: string }

/** A tool call's arguments as JSON text (`{}` when empty); undefined when they are not JSON. */
const toolArguments = (json: string): string | undefined => {
  const text = json.trim() === "" ? "{}" : json
  return isJson(text) ? text : undefined
}

/** Events of a whole (non-streamed) `message` answer. */
export const eventsOfMessage = (body: unknown): ReadResult => {
  const root = obj(body)
  if (root === undefined || !Array.isArray(root.content)) return { _tag: "Invalid", message: "the answer has no content" }
  const events: Array<ModelEvent> = []
  for (const raw of root.content) {
    const block = obj(raw)
    if (block === undefined) continue
    switch (block.type) {
      case "text": {
        const text = str(block.text)
        if (text) events.push(ModelEvent.text(text))
        break
      }
      case "thinking": {
        const signature = str(block.signature)
        events.push(ModelEvent.reasoning(str(block.thinking) ?? "", signature === "" ? undefined : signature, "anthropic"))
        break
      }
      case "redacted_thinking": {
        const data = str(block.data)
        if (data !== undefined) events.push(ModelEvent.redacted(data))
        break
      }
      case "tool_use": {
        const id = str(block.id)
        const name = str(block.name)
        if (id === undefined || name === undefined) return { _tag: "Invalid", message: "a tool call has no id or name" }
        const input = block.input === undefined ? {} : block.input
        events.push(ModelEvent.toolCall({ id, name, arguments: JSON.stringify(input) }))
        break
      }
      default:
        break
    }
  }
  const usage = readUsage(root.usage)
  if (usage !== undefined) events.push(ModelEvent.usage(usage))
  events.push(ModelEvent.finish(mapStopReason(root.stop_reason)))
  return { _tag: "Events", events }
}

type OpenBlock =
  | { readonly kind: "text" }
  | { readonly kind: "thinking"; signature: string }
  | { readonly kind: "redacted" }
  | { readonly kind: "tool_use"; readonly id: string; readonly name: string; json: string }
  | { readonly kind: "other" }

/** State of one streamed answer. */
export interface StreamState {
  readonly blocks: Map<number, OpenBlock>
  readonly usage: WireUsage
  stopReason: unknown
  started: boolean
  /** message_stop seen */
  done: boolean
}

export const initialStreamState = (): StreamState => ({
  blocks: new Map(),
  usage: emptyWireUsage(),
  stopReason: undefined,
  started: false,
  done: false
})

/** Result of one SSE event: events to emit now, an error event from upstream, or an unreadable stream. */
export type EventResult =
  | ReadResult
  | { readonly _tag: "Error"; readonly type: string }

const none: EventResult = { _tag: "Events", events: [] }
const emit = (...events: Array<ModelEvent>): EventResult => ({ _tag: "Events", events })

/** Read one Messages SSE event (its JSON data; `name` is the `event:` field, used when data has no type). */
export const readStreamEvent = (state: StreamState, name: string | undefined, data: unknown): EventResult => {
  const root = obj(data)
  if (root === undefined) return { _tag: "Invalid", message: "a stream event is not an object" }
  const type = str(root.type) ?? name
  switch (type) {
    case "message_start": {
      state.started = true
      mergeUsage(state.usage, obj(root.message)?.usage)
      return none
    }
    case "content_block_start": {
      const index = num(root.index) ?? state.blocks.size
      const block = obj(root.content_block)
      switch (block?.type) {
        case "text": {
          state.blocks.set(index, { kind: "text" })
          const text = str(block.text)
          return text ? emit(ModelEvent.text(text)) : none
        }
        case "thinking": {
          state.blocks.set(index, { kind: "thinking", signature: str(block.signature) ?? "" })
          const text = str(block.thinking)
          return text ? emit(ModelEvent.reasoning(text)) : none
        }
        case "redacted_thinking": {
          state.blocks.set(index, { kind: "redacted" })
          const data = str(block.data)
          return data !== undefined ? emit(ModelEvent.redacted(data)) : none
        }
        case "tool_use": {
          const id = str(block.id)
          const toolName = str(block.name)
          if (id === undefined || toolName === undefined) return { _tag: "Invalid", message: "a tool call has no id or name" }
          const input = obj(block.input)
          // the start event carries `input: {}`; the arguments follow as input_json_delta pieces
          const json = input !== undefined && Object.keys(input).length > 0 ? JSON.stringify(input) : ""
          state.blocks.set(index, { kind: "tool_use", id, name: toolName, json })
          return none
        }
        default:
          state.blocks.set(index, { kind: "other" })
          return none
      }
    }
    case "content_block_delta": {
      const block = state.blocks.get(num(root.index) ?? -1)
      const delta = obj(root.delta)
      if (block === undefined || delta === undefined) return { _tag: "Invalid", message: "a delta for a block that was not started" }
      switch (delta.type) {
        case "text_delta": {
          const text = str(delta.text)
          return text ? emit(ModelEvent.text(text)) : none
        }
        case "thinking_delta": {
          const text = str(delta.thinking)
          return text ? emit(ModelEvent.reasoning(text)) : none
        }
        case "signature_delta": {
          if (block.kind === "thinking") block.signature += str(delta.signature) ?? ""
          return none
        }
        case "input_json_delta": {
          if (block.kind === "tool_use") block.json += str(delta.partial_json) ?? ""
          return none
        }
        default:
          return none
      }
    }
    case "content_block_stop": {
      const index = num(root.index) ?? -1
      const block = state.blocks.get(index)
      if (block === undefined) return none
      state.blocks.set(index, { kind: "other" })
      if (block.kind === "thinking" && block.signature !== "") return emit(ModelEvent.reasoning("", block.signature, "anthropic"))
      if (block.kind === "tool_use") {
        const args = toolArguments(block.json)
        if (args === undefined) {
          // arguments cut short: judged at the end (dropped when the answer hit max_tokens)
          state.blocks.set(index, block)
          return none
        }
        return emit(ModelEvent.toolCall({ id: block.id, name: block.name, arguments: args }))
      }
      return none
    }
    case "message_delta": {
      const delta = obj(root.delta)
      if (delta?.stop_reason !== undefined && delta.stop_reason !== null) state.stopReason = delta.stop_reason
      mergeUsage(state.usage, root.usage)
      return none
    }
    case "message_stop": {
      state.done = true
      return none
    }
    case "error":
      return { _tag: "Error", type: readWireError(root)?.type ?? "" }
    default:
      // ping and event types added later
      return none
  }
}

/**
 * The events that close a streamed answer: usage and finish. A tool call whose arguments are not
 * JSON is dropped when the answer hit max_tokens (it was cut short) and makes the answer invalid otherwise.
 */
export const finishStream = (state: StreamState): ReadResult => {
  const events: Array<ModelEvent> = []
  const open = [...state.blocks.entries()].sort(([a], [b]) => a - b)
  for (const [, block] of open) {
    if (block.kind !== "tool_use") continue
    const args = toolArguments(block.json)
    if (args !== undefined) events.push(ModelEvent.toolCall({ id: block.id, name: block.name, arguments: args }))
    else if (mapStopReason(state.stopReason) !== "length") return { _tag: "Invalid", message: "a tool call's arguments are not JSON" }
  }
  events.push(ModelEvent.usage(toUsage(state.usage)))
  events.push(ModelEvent.finish(mapStopReason(state.stopReason)))
  return { _tag: "Events", events }
}
