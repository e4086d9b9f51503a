/**
 * A scriptable fake native Messages upstream for tests: a real HTTP server on 127.0.0.1 (random
 * port) that speaks the Anthropic Messages wire format (JSON and SSE), records every request and
 * can be told to misbehave (status errors, reset, reset mid-stream, stall).
 *
 * Usage:
 *   const up = await startFakeMessagesUpstream()
 *   up.script(messageSse({ blocks: [{ type: "text", text: "hi" }] }), messagesError(529, "overloaded_error", "Overloaded"))
 *   ... point the provider at up.origin ("http://127.0.0.1:PORT"; it POSTs /v1/messages) ...
 *   expect(up.requests[0].body).toMatchObject({ model: "claude-x" })
 *   await up.close()
 */
import { startScriptedServer, type FixedReply, type RecordedRequestBase, type ScriptedHandler, type ScriptedReply, type ScriptedUpstream } from "./FakeServer.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/** As FakeServer.ts records it; `path` is e.g. "/v1/messages". */
export type RecordedRequest = RecordedRequestBase

/** One SSE event: `event: <event>\ndata: <JSON of data>\n\n`; a string is written raw. */
export type SseEvent = { event: string; data: unknown } | string

/** json, text, reset and stall as in FakeServer.ts's FixedReply. */
export type Reply =
  | FixedReply
  | { kind: "sse"; events: Array<SseEvent>; delayMs?: number; status?: number; headers?: Record<string, string> }
  /** Send SSE headers and these events, then destroy the socket. */
  | { kind: "resetAfter"; events: Array<SseEvent>; delayMs?: number }

export type Handler = ScriptedHandler<RecordedRequest, Reply>
export type Scripted = ScriptedReply<RecordedRequest, Reply>

/** The engine's controls (script, pending, onRequest, reset, requests, close...) plus: */
export interface FakeMessagesUpstream extends ScriptedUpstream<RecordedRequest, Reply> {
  /** "http://127.0.0.1:PORT" — the base URL a client appends /v1/messages to. */
  origin: string
  /** "http://127.0.0.1:PORT/v1" — a base URL that already ends in /v1. */
  url: string
}

export type BlockSpec =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "redacted_thinking"; data: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }

export interface UsageSpec {
  input: number
  output: number
  cacheRead?: number
  cacheWrite?: number
}

export interface MessageOptions {
  /** Default: one text block "Hello from upstream". */
  blocks?: BlockSpec[]
  /** Default: "tool_use" when a tool_use block is given, else "end_turn". */
  stopReason?: string
  stopSequence?: string | null
  /** Default: 10 input / 3 output. */
  usage?: UsageSpec
  model?: string
  id?: string
}

export interface MessageSseOptions extends MessageOptions {
  /** Characters per text/thinking delta and per input_json_delta (default 5). */
  split?: number
  delayMs?: number
  /** Default true: a `ping` after the first content_block_start, as the real API does. */
  ping?: boolean
  /** Default true: end with message_delta + message_stop. */
  complete?: boolean
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

export const DEFAULT_MODEL = "claude-fake"
export const DEFAULT_TEXT = "Hello from upstream"
export const DEFAULT_USAGE: UsageSpec = { input: 10, output: 3 }

let idCounter = 0
const nextId = (): string => `msg_fake_${++idCounter}`

export function usageObject(u: UsageSpec): Record<string, unknown> {
  return {
    input_tokens: u.input,
    cache_creation_input_tokens: u.cacheWrite ?? 0,
    cache_read_input_tokens: u.cacheRead ?? 0,
    output_tokens: u.output,
    service_tier: "standard"
  }
}

const blocksOf = (opts: MessageOptions): BlockSpec[] => opts.blocks ?? [{ type: "text", text: DEFAULT_TEXT }]

const stopReasonOf = (opts: MessageOptions): string =>
  opts.stopReason ?? (blocksOf(opts).some((b) => b.type === "tool_use") ? "tool_use" : "end_turn")

const wireBlock = (b: BlockSpec): Record<string, unknown> => {
  switch (b.type) {
    case "text":
      return { type: "text", text: b.text }
    case "thinking":
      return { type: "thinking", thinking: b.thinking, signature: b.signature }
    case "redacted_thinking":
      return { type: "redacted_thinking", data: b.data }
    case "tool_use":
      return { type: "tool_use", id: b.id, name: b.name, input: b.input }
  }
}

/** The `message` object messageJson would send. */
export function messageObject(opts: MessageOptions = {}): Record<string, unknown> {
  return {
    id: opts.id ?? nextId(),
    type: "message",
    role: "assistant",
    model: opts.model ?? DEFAULT_MODEL,
    content: blocksOf(opts).map(wireBlock),
    stop_reason: stopReasonOf(opts),
    stop_sequence: opts.stopSequence ?? null,
    usage: usageObject(opts.usage ?? DEFAULT_USAGE)
  }
}

/** A JSON `message` reply (non-streamed call). */
export function messageJson(opts: MessageOptions = {}): Reply {
  return { kind: "json", status: 200, body: messageObject(opts) }
}

function splitText(text: string, n: number): string[] {
  if (text.length === 0) return []
  const size = Math.max(1, Math.floor(n))
  const out: string[] = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

const ev = (event: string, data: Record<string, unknown>): SseEvent => ({ event, data: { type: event, ...data } })

/** Builders for single Messages SSE events. */
export const events = {
  messageStart(opts: MessageOptions = {}): SseEvent {
    const usage = opts.usage ?? DEFAULT_USAGE
    return ev("message_start", {
      message: {
        id: opts.id ?? nextId(),
        type: "message",
        role: "assistant",
        model: opts.model ?? DEFAULT_MODEL,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: usageObject({ ...usage, output: 1 })
      }
    })
  },
  blockStart(index: number, block: Record<string, unknown>): SseEvent {
    return ev("content_block_start", { index, content_block: block })
  },
  textDelta(index: number, text: string): SseEvent {
    return ev("content_block_delta", { index, delta: { type: "text_delta", text } })
  },
  thinkingDelta(index: number, thinking: string): SseEvent {
    return ev("content_block_delta", { index, delta: { type: "thinking_delta", thinking } })
  },
  signatureDelta(index: number, signature: string): SseEvent {
    return ev("content_block_delta", { index, delta: { type: "signature_delta", signature } })
  },
  inputJsonDelta(index: number, partialJson: string): SseEvent {
    return ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: partialJson } })
  },
  blockStop(index: number): SseEvent {
    return ev("content_block_stop", { index })
  },
  messageDelta(stopReason: string, output: number, stopSequence: string | null = null): SseEvent {
    return ev("message_delta", { delta: { stop_reason: stopReason, stop_sequence: stopSequence }, usage: { output_tokens: output } })
  },
  messageStop(): SseEvent {
    return ev("message_stop", {})
  },
  ping(): SseEvent {
    return ev("ping", {})
  },
  error(type: string, message: string): SseEvent {
    return { event: "error", data: { type: "error", error: { type, message } } }
  }
}

/** The events of one content block: start, deltas, stop. */
function blockEvents(index: number, b: BlockSpec, split: number): SseEvent[] {
  switch (b.type) {
    case "text":
      return [
        events.blockStart(index, { type: "text", text: "" }),
        ...splitText(b.text, split).map((t) => events.textDelta(index, t)),
        events.blockStop(index)
      ]
    case "thinking":
      return [
        events.blockStart(index, { type: "thinking", thinking: "", signature: "" }),
        ...splitText(b.thinking, split).map((t) => events.thinkingDelta(index, t)),
        events.signatureDelta(index, b.signature),
        events.blockStop(index)
      ]
    case "redacted_thinking":
      return [events.blockStart(index, { type: "redacted_thinking", data: b.data }), events.blockStop(index)]
    case "tool_use":
      return [
        events.blockStart(index, { type: "tool_use", id: b.id, name: b.name, input: {} }),
        events.inputJsonDelta(index, ""),
        ...splitText(JSON.stringify(b.input), split).map((t) => events.inputJsonDelta(index, t)),
        events.blockStop(index)
      ]
  }
}

/** The SSE events messageSse would stream, in the real API's order. */
export function messageSseEvents(opts: MessageSseOptions = {}): SseEvent[] {
  const split = opts.split ?? 5
  const out: SseEvent[] = [events.messageStart(opts)]
  blocksOf(opts).forEach((b, index) => {
    const block = blockEvents(index, b, split)
    out.push(block[0])
    if (index === 0 && (opts.ping ?? true)) out.push(events.ping())
    out.push(...block.slice(1))
  })
  if (opts.complete ?? true) {
    out.push(events.messageDelta(stopReasonOf(opts), (opts.usage ?? DEFAULT_USAGE).output, opts.stopSequence ?? null))
    out.push(events.messageStop())
  }
  return out
}

/** An SSE reply streamed the way the Messages API does. */
export function messageSse(opts: MessageSseOptions = {}): Reply {
  const reply: Reply = { kind: "sse", events: messageSseEvents(opts) }
  if (opts.delayMs !== undefined) reply.delayMs = opts.delayMs
  return reply
}

/** A Messages-shaped error reply. */
export function messagesError(status: number, type: string, message: string, headers?: Record<string, string>): Reply {
  const reply: Reply = { kind: "json", status, body: { type: "error", error: { type, message } } }
  if (headers !== undefined) reply.headers = headers
  return reply
}

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined
}

const thinkingDocs = "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking"

/**
 * The 400 the real Messages API answers a request with thinking on (enabled or adaptive) that it
 * refuses, or undefined. Per Anthropic's extended-thinking guide: a forced tool choice (`any`,
 * `tool`), `temperature` other than 1, any `top_k`, and `top_p` below 0.95. Messages as the real
 * API words them (seen in public bug reports); the top_p one is not documented word for word.
 */
export function thinkingRefusal(body: unknown): Reply | undefined {
  const request = asRecord(body)
  const thinking = asRecord(request?.thinking)
  if (request === undefined || (thinking?.type !== "enabled" && thinking?.type !== "adaptive")) return undefined
  const refuse = (message: string): Reply => ({ kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message }, request_id: "req_fake_thinking" } })
  const choice = asRecord(request.tool_choice)?.type
  if (choice === "any" || choice === "tool") return refuse("Thinking may not be enabled when tool_choice forces tool use.")
  if (request.temperature !== undefined && request.temperature !== 1) return refuse(`\`temperature\` may only be set to 1 when thinking is enabled. ${thinkingDocs}`)
  if (request.top_k !== undefined) return refuse(`\`top_k\` must be unset when thinking is enabled. ${thinkingDocs}`)
  if (typeof request.top_p === "number" && request.top_p < 0.95) return refuse(`\`top_p\` must be greater than or equal to 0.95 or unset when thinking is enabled. ${thinkingDocs}`)
  return undefined
}

/**
 * A handler answering messageSse(opts) when the request has `stream: true`, else messageJson(opts);
 * a request the real API refuses with thinking on gets its 400 (thinkingRefusal).
 */
export function auto(opts: MessageSseOptions = {}): Handler {
  return (req) => {
    const body = asRecord(req.body)
    if (body === undefined) return messagesError(400, "invalid_request_error", "There was an issue with the JSON body")
    const refused = thinkingRefusal(body)
    if (refused !== undefined) return refused
    const model = opts.model ?? (typeof body.model === "string" ? body.model : DEFAULT_MODEL)
    return body.stream === true ? messageSse({ ...opts, model }) : messageJson({ ...opts, model })
  }
}

/** The default handler: /v1/messages via auto(), 404 for everything else. */
export const defaultHandler: Handler = (req, index) => {
  if (req.method === "POST" && req.path === "/v1/messages") return auto()(req, index)
  return messagesError(404, "not_found_error", `Unknown request URL: ${req.method} ${req.path}`)
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

function encodeSse(item: SseEvent): string {
  if (typeof item === "string") return item
  return `event: ${item.event}\ndata: ${JSON.stringify(item.data)}\n\n`
}

export function startFakeMessagesUpstream(): Promise<FakeMessagesUpstream> {
  return startScriptedServer<RecordedRequest, Reply, SseEvent>({
    basePath: "/v1",
    defaultHandler,
    handlerFailed: () => messagesError(500, "api_error", "fake upstream handler threw"),
    sseItems: (reply) => reply.events,
    encodeSseItem: encodeSse,
    sseContentType: "text/event-stream; charset=utf-8",
    jsonContentType: "application/json"
  })
}
