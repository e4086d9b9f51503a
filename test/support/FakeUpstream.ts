/**
 * A scriptable fake upstream for tests: a real HTTP server on 127.0.0.1 (random port) that speaks
 * the OpenAI chat-completions wire format (JSON and SSE), records every request, and can be told to
 * misbehave (reset, stall, reset mid-stream, malformed SSE, arbitrary status codes).
 *
 * Usage:
 *   const up = await startFakeUpstream()
 *   up.script(chatSse({ content: "hi" }), { kind: "json", status: 429, body: { error: {...} } })
 *   ... point the gateway at up.url ("http://127.0.0.1:PORT/v1") ...
 *   expect(up.requests[0].body).toMatchObject({ model: "gpt-4o" })
 *   await up.close()
 */
import { startScriptedServer, type FixedReply, type RecordedRequestBase, type ScriptedHandler, type ScriptedReply, type ScriptedUpstream } from "./FakeServer.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/** As FakeServer.ts records it (`path` is e.g. "/v1/chat/completions"), plus: */
export interface RecordedRequest extends RecordedRequestBase {
  /** Parsed JSON when the content-type is JSON and the body parses; otherwise the raw string; undefined when empty. */
  body: unknown
  /** Client port of the TCP connection that carried this request (to check connection reuse). */
  remotePort: number | undefined
}

/** json, text, reset and stall as in FakeServer.ts's FixedReply. */
export type Reply =
  | FixedReply
  | {
      kind: "sse"
      /** Each chunk is JSON.stringified into `data: ...\n\n` unless it is a string (written raw). */
      chunks: Array<unknown>
      /** Default true: finish with `data: [DONE]\n\n`. */
      done?: boolean
      /** Delay before each chunk (and before [DONE]); headers are flushed immediately. */
      delayMs?: number
      status?: number
      headers?: Record<string, string>
    }
  /** Send SSE headers + these chunks (same encoding as "sse"), then destroy the socket. */
  | { kind: "resetAfter"; chunks: Array<unknown>; delayMs?: number }

export type Handler = ScriptedHandler<RecordedRequest, Reply>

/** What `script` accepts: a fixed reply, or a handler used for exactly one request. */
export type Scripted = ScriptedReply<RecordedRequest, Reply>

/** The engine's controls (script, pending, onRequest, reset, requests, close...) plus: */
export interface FakeUpstream extends ScriptedUpstream<RecordedRequest, Reply> {
  /** "http://127.0.0.1:PORT/v1" — the base URL a client appends /chat/completions to. */
  url: string
  /** "http://127.0.0.1:PORT" */
  origin: string
}

export interface UsageSpec {
  prompt: number
  completion: number
  cached?: number
  reasoning?: number
}

export interface ToolCallSpec {
  id: string
  name: string
  arguments: string
}

export interface ChatJsonOptions {
  /** Assistant text. Default: "Hello from upstream" unless toolCalls are given (then null). */
  content?: string | null
  toolCalls?: ToolCallSpec[]
  /** Emitted as `reasoning_content` (DeepSeek / vLLM style). */
  reasoning?: string
  /** Default: "tool_calls" when toolCalls are given, else "stop". */
  finish?: string
  /** Default: 10 prompt / 3 completion. */
  usage?: UsageSpec
  model?: string
  id?: string
}

export interface ChatSseOptions extends ChatJsonOptions {
  /** Characters per content/reasoning chunk (default 5), or "words" to split on word boundaries. */
  split?: number | "words"
  /** Delay before each chunk. */
  delayMs?: number
  /** Emit the usage chunk (`choices: []`). Default true for chatSse. */
  includeUsage?: boolean
  /** Emit `data: [DONE]`. Default true. */
  done?: boolean
}

export interface ChunkMeta {
  model?: string
  id?: string
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

export const DEFAULT_MODEL = "fake-model"
export const DEFAULT_CONTENT = "Hello from upstream"
export const DEFAULT_USAGE: UsageSpec = { prompt: 10, completion: 3 }

let idCounter = 0
const nextId = (): string => `chatcmpl-fake-${++idCounter}`
const now = (): number => Math.floor(Date.now() / 1000)

export function usageObject(u: UsageSpec): Record<string, unknown> {
  return {
    prompt_tokens: u.prompt,
    completion_tokens: u.completion,
    total_tokens: u.prompt + u.completion,
    prompt_tokens_details: { cached_tokens: u.cached ?? 0 },
    completion_tokens_details: { reasoning_tokens: u.reasoning ?? 0 },
  }
}

function chunkEnvelope(
  meta: ChunkMeta | undefined,
  choices: unknown[],
  extra?: Record<string, unknown>,
): Record<string, unknown> {
  return {
    id: meta?.id ?? "chatcmpl-fake",
    object: "chat.completion.chunk",
    created: now(),
    model: meta?.model ?? DEFAULT_MODEL,
    system_fingerprint: "fp_fake",
    choices,
    ...extra,
  }
}

function deltaChunk(delta: Record<string, unknown>, meta?: ChunkMeta, finishReason: string | null = null) {
  return chunkEnvelope(meta, [{ index: 0, delta, logprobs: null, finish_reason: finishReason }])
}

/** Builders for single `chat.completion.chunk` objects (use inside `{ kind: "sse", chunks: [...] }`). */
export const chunks = {
  role(meta?: ChunkMeta): unknown {
    return deltaChunk({ role: "assistant", content: "", refusal: null }, meta)
  },
  text(text: string, opts?: ChunkMeta): unknown {
    return deltaChunk({ content: text }, opts)
  },
  reasoning(text: string, opts?: ChunkMeta): unknown {
    return deltaChunk({ reasoning_content: text }, opts)
  },
  toolCallStart(index: number, id: string, name: string, args = "", opts?: ChunkMeta): unknown {
    return deltaChunk(
      { tool_calls: [{ index, id, type: "function", function: { name, arguments: args } }] },
      opts,
    )
  },
  toolCallArgs(index: number, args: string, opts?: ChunkMeta): unknown {
    return deltaChunk({ tool_calls: [{ index, function: { arguments: args } }] }, opts)
  },
  finish(reason: string, opts?: ChunkMeta): unknown {
    return deltaChunk({}, opts, reason)
  },
  usage(u: UsageSpec, opts?: ChunkMeta): unknown {
    return chunkEnvelope(opts, [], { usage: usageObject(u) })
  },
}

function finishFor(opts: ChatJsonOptions): string {
  return opts.finish ?? (opts.toolCalls && opts.toolCalls.length > 0 ? "tool_calls" : "stop")
}

function contentFor(opts: ChatJsonOptions): string | null {
  if (opts.content !== undefined) return opts.content
  return opts.toolCalls && opts.toolCalls.length > 0 ? null : DEFAULT_CONTENT
}

/** The `chat.completion` object chatJson would send (handy for assertions). */
export function chatCompletionObject(opts: ChatJsonOptions = {}): Record<string, unknown> {
  const message: Record<string, unknown> = {
    role: "assistant",
    content: contentFor(opts),
    refusal: null,
  }
  if (opts.reasoning !== undefined) message.reasoning_content = opts.reasoning
  if (opts.toolCalls && opts.toolCalls.length > 0) {
    message.tool_calls = opts.toolCalls.map((t) => ({
      id: t.id,
      type: "function",
      function: { name: t.name, arguments: t.arguments },
    }))
  }
  return {
    id: opts.id ?? nextId(),
    object: "chat.completion",
    created: now(),
    model: opts.model ?? DEFAULT_MODEL,
    system_fingerprint: "fp_fake",
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishFor(opts) }],
    usage: usageObject(opts.usage ?? DEFAULT_USAGE),
  }
}

/** A JSON `chat.completion` reply. */
export function chatJson(opts: ChatJsonOptions = {}): Reply {
  return { kind: "json", status: 200, body: chatCompletionObject(opts) }
}

function splitText(text: string, split: number | "words"): string[] {
  if (text.length === 0) return []
  if (split === "words") return text.match(/\s*\S+|\s+/g) ?? [text]
  const n = Math.max(1, Math.floor(split))
  const out: string[] = []
  for (let i = 0; i < text.length; i += n) out.push(text.slice(i, i + n))
  return out
}

/** The chunk objects chatSse would stream (without [DONE]). */
export function chatSseChunks(opts: ChatSseOptions = {}): unknown[] {
  const meta: ChunkMeta = { id: opts.id ?? nextId(), model: opts.model ?? DEFAULT_MODEL }
  const split = opts.split ?? 5
  const out: unknown[] = [chunks.role(meta)]
  if (opts.reasoning !== undefined) {
    for (const piece of splitText(opts.reasoning, split)) out.push(chunks.reasoning(piece, meta))
  }
  const content = contentFor(opts)
  if (content !== null) {
    for (const piece of splitText(content, split)) out.push(chunks.text(piece, meta))
  }
  ;(opts.toolCalls ?? []).forEach((t, index) => {
    out.push(chunks.toolCallStart(index, t.id, t.name, "", meta))
    for (const piece of splitText(t.arguments, 8)) out.push(chunks.toolCallArgs(index, piece, meta))
  })
  out.push(chunks.finish(finishFor(opts), meta))
  if (opts.includeUsage ?? true) out.push(chunks.usage(opts.usage ?? DEFAULT_USAGE, meta))
  return out
}

/** An SSE reply streamed the way OpenAI does: role, reasoning, content, tool calls, finish, usage, [DONE]. */
export function chatSse(opts: ChatSseOptions = {}): Reply {
  const reply: Reply = { kind: "sse", chunks: chatSseChunks(opts), done: opts.done ?? true }
  if (opts.delayMs !== undefined) reply.delayMs = opts.delayMs
  return reply
}

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined
}

/**
 * A handler answering chatSse(opts) when the request has `stream: true`, else chatJson(opts).
 * `model` echoes the request's model unless opts.model is set. In stream mode the usage chunk is
 * sent only when the request asked for it (`stream_options.include_usage`), unless
 * opts.includeUsage is set explicitly. Non-object bodies get a 400.
 */
export function auto(opts: ChatSseOptions = {}): Handler {
  return (req) => {
    const body = asRecord(req.body)
    if (body === undefined) {
      return openAiError(400, "We could not parse the JSON body of your request.", "invalid_request_error")
    }
    const model = opts.model ?? (typeof body.model === "string" ? body.model : DEFAULT_MODEL)
    if (body.stream === true) {
      const includeUsage = opts.includeUsage ?? asRecord(body.stream_options)?.include_usage === true
      return chatSse({ ...opts, model, includeUsage })
    }
    return chatJson({ ...opts, model })
  }
}

/** An OpenAI-shaped error reply. */
export function openAiError(status: number, message: string, type = "api_error", code: string | null = null): Reply {
  return { kind: "json", status, body: { error: { message, type, param: null, code } } }
}

const chatHandler = auto({ split: "words" })

/** The default handler: chat completions via auto(), 404 for everything else. */
export const defaultHandler: Handler = (req, index) => {
  if (req.method === "POST" && req.path === "/v1/chat/completions") return chatHandler(req, index)
  return openAiError(404, `Unknown request URL: ${req.method} ${req.path}`, "invalid_request_error", "unknown_url")
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

const MAX_BODY_BYTES = 32 * 1024 * 1024

function encodeSse(chunk: unknown): string {
  if (typeof chunk === "string") return chunk
  return `data: ${JSON.stringify(chunk)}\n\n`
}

function isJsonContentType(ct: string | undefined): boolean {
  return ct !== undefined && /\bjson\b/i.test(ct)
}

export function startFakeUpstream(): Promise<FakeUpstream> {
  return startScriptedServer<RecordedRequest, Reply, unknown>({
    basePath: "/v1",
    defaultHandler,
    handlerFailed: (e) =>
      openAiError(500, `fake upstream handler threw: ${e instanceof Error ? e.message : String(e)}`, "fake_upstream_error"),
    sseItems: (reply) => reply.chunks,
    encodeSseItem: encodeSse,
    sseTrailer: (reply) => ((reply.done ?? true) ? "data: [DONE]\n\n" : undefined),
    sseContentType: "text/event-stream; charset=utf-8",
    jsonContentType: "application/json",
    commonHeaders: { "x-fake-upstream": "1" },
    jsonBody: isJsonContentType,
    maxBodyBytes: MAX_BODY_BYTES,
    recordExtras: (req) => ({ remotePort: req.socket.remotePort }),
    failureBody: (message) => ({ error: { message, type: "fake_upstream_error" } })
  })
}
