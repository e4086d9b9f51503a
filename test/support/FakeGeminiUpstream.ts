/**
 * A scriptable fake native Gemini upstream for tests: a real HTTP server on 127.0.0.1 (random port)
 * that speaks Google's generateContent wire format (JSON, and SSE where every `data:` frame is a
 * whole GenerateContentResponse), records every request and can be told to misbehave (status
 * errors, an error chunk mid-stream, reset, reset mid-stream, stall).
 *
 * Usage:
 *   const up = await startFakeGeminiUpstream()
 *   up.script(
 *     generateSse({ thoughts: "Let me see.", text: ["Hel", "lo"], usage: { prompt: 12, candidates: 2, thoughts: 5 } }),
 *     generateJson({ calls: [{ name: "get_weather", args: { city: "Paris" } }] }),
 *     geminiError(429, "RESOURCE_EXHAUSTED", "Quota exceeded", { headers: { "retry-after": "7" } })
 *   )
 *   ... point the provider at up.origin ("http://127.0.0.1:PORT"; it POSTs
 *       /v1beta/models/{model}:generateContent and :streamGenerateContent?alt=sse) ...
 *   expect(up.requests[0].path).toBe("/v1beta/models/gemini-x:generateContent")
 *   expect(up.requests[0].body).toMatchObject({ contents: [{ role: "user" }] })
 *   await up.close()
 *
 * With nothing scripted, `defaultHandler` answers: `:generateContent` with generateJson(),
 * `:streamGenerateContent?alt=sse` with generateSse() ("Hello from upstream"), without `alt=sse`
 * with the chunks as one JSON array (as Google does), anything else 404 NOT_FOUND.
 */
import { startScriptedServer, type FixedReply, type RecordedRequestBase, type ScriptedHandler, type ScriptedReply, type ScriptedUpstream } from "./FakeServer.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/** As FakeServer.ts records it (`path` is e.g. "/v1beta/models/gemini-x:generateContent"), plus: */
export interface RecordedRequest extends RecordedRequestBase {
  /** The query string's parameters, e.g. { alt: "sse" }. */
  query: Record<string, string>
}

/** One SSE chunk: an object is written as `data: <JSON>\r\n\r\n`; a string is written raw. */
export type SseChunk = Record<string, unknown> | string

/** json, text, reset and stall as in FakeServer.ts's FixedReply. */
export type Reply =
  | FixedReply
  | { kind: "sse"; chunks: Array<SseChunk>; delayMs?: number; status?: number; headers?: Record<string, string> }
  /** Send SSE headers and these chunks, then destroy the socket. */
  | { kind: "resetAfter"; chunks: Array<SseChunk>; delayMs?: number }

export type Handler = ScriptedHandler<RecordedRequest, Reply>
export type Scripted = ScriptedReply<RecordedRequest, Reply>

/** The engine's controls (script, pending, onRequest, reset, requests, close...) plus: */
export interface FakeGeminiUpstream extends ScriptedUpstream<RecordedRequest, Reply> {
  /** "http://127.0.0.1:PORT" — the base URL a client appends /v1beta/models/... to. */
  origin: string
  /** "http://127.0.0.1:PORT/v1beta" — a base URL that already ends in /v1beta. */
  url: string
}

export interface CallSpec {
  name: string
  /** Default {}. */
  args?: Record<string, unknown>
  /** Sent as functionCall.id when given (Gemini 3 may send ids; older models do not). */
  id?: string
  /** This call's own thoughtSignature (overrides `signature` placement). */
  thoughtSignature?: string
}

export interface UsageSpec {
  /** promptTokenCount (cached tokens included, as Google counts them). */
  prompt?: number
  candidates?: number
  thoughts?: number
  /** cachedContentTokenCount */
  cached?: number
  toolUsePrompt?: number
}

export interface GenerateOptions {
  /** Answer text; an array gives the streamed pieces (joined in JSON). Default "Hello from upstream"; "" or [] for none. */
  text?: string | string[]
  /** Thought-summary text (parts with `thought: true`), before the answer; an array gives the streamed pieces. */
  thoughts?: string | string[]
  /** Function calls, after the text. */
  calls?: CallSpec[]
  /** A thoughtSignature where Gemini 3 puts it: on the first call, else on the last text part. */
  signature?: string
  /** Default 10 prompt / 3 candidates. */
  usage?: UsageSpec
  /** Default "STOP". */
  finishReason?: string
  /** Answer promptFeedback.blockReason with no candidates (a blocked prompt). */
  blockReason?: string
  /** Default "gemini-fake". */
  modelVersion?: string
  responseId?: string
  /** Raw parts instead of text/thoughts/calls (JSON only; SSE sends them as one chunk). */
  parts?: Array<Record<string, unknown>>
}

export interface GenerateSseOptions extends GenerateOptions {
  /** Characters per streamed piece for string text/thoughts (default: one piece each). */
  split?: number
  delayMs?: number
  /** Default true: the last chunk carries finishReason and the final usage. */
  complete?: boolean
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

export const DEFAULT_MODEL = "gemini-fake"
export const DEFAULT_TEXT = "Hello from upstream"
export const DEFAULT_USAGE: UsageSpec = { prompt: 10, candidates: 3 }

let idCounter = 0
const nextId = (): string => `resp_fake_${++idCounter}`

/** A usageMetadata object as Google sends it (zero counts left out, totalTokenCount the sum). */
export function usageMetadata(u: UsageSpec = DEFAULT_USAGE): Record<string, unknown> {
  const prompt = u.prompt ?? 0
  const out: Record<string, unknown> = { promptTokenCount: prompt }
  if (u.candidates !== undefined) out.candidatesTokenCount = u.candidates
  if (u.cached !== undefined && u.cached > 0) out.cachedContentTokenCount = u.cached
  if (u.toolUsePrompt !== undefined && u.toolUsePrompt > 0) out.toolUsePromptTokenCount = u.toolUsePrompt
  if (u.thoughts !== undefined && u.thoughts > 0) out.thoughtsTokenCount = u.thoughts
  out.totalTokenCount = prompt + (u.candidates ?? 0) + (u.thoughts ?? 0) + (u.toolUsePrompt ?? 0)
  out.promptTokensDetails = [{ modality: "TEXT", tokenCount: prompt }]
  return out
}

const pieces = (value: string | string[] | undefined, split: number | undefined): string[] => {
  if (value === undefined) return []
  if (Array.isArray(value)) return value.filter((p) => p !== "")
  if (value === "") return []
  if (split === undefined) return [value]
  const size = Math.max(1, Math.floor(split))
  const out: string[] = []
  for (let i = 0; i < value.length; i += size) out.push(value.slice(i, i + size))
  return out
}

const joined = (value: string | string[] | undefined): string => (Array.isArray(value) ? value.join("") : (value ?? ""))
const textOf = (opts: GenerateOptions) => (opts.text === undefined ? DEFAULT_TEXT : opts.text)

const callPart = (c: CallSpec, signature: string | undefined): Record<string, unknown> => {
  const part: Record<string, unknown> = { functionCall: { ...(c.id !== undefined ? { id: c.id } : {}), name: c.name, args: c.args ?? {} } }
  const sig = c.thoughtSignature ?? signature
  if (sig !== undefined) part.thoughtSignature = sig
  return part
}

/** Call parts, the signature (if any) on the first one, as Gemini 3 sends parallel calls. */
const callParts = (opts: GenerateOptions): Array<Record<string, unknown>> =>
  (opts.calls ?? []).map((c, i) => callPart(c, i === 0 ? opts.signature : undefined))

/** The parts of a whole answer: thoughts, text, calls. */
export function answerParts(opts: GenerateOptions = {}): Array<Record<string, unknown>> {
  if (opts.parts !== undefined) return opts.parts
  const parts: Array<Record<string, unknown>> = []
  const thoughts = joined(opts.thoughts)
  if (thoughts !== "") parts.push({ text: thoughts, thought: true })
  const text = joined(textOf(opts))
  const calls = callParts(opts)
  if (text !== "") parts.push(calls.length === 0 && opts.signature !== undefined ? { text, thoughtSignature: opts.signature } : { text })
  parts.push(...calls)
  return parts
}

const candidate = (parts: Array<Record<string, unknown>>, finishReason: string | undefined): Record<string, unknown> => ({
  content: { parts, role: "model" },
  ...(finishReason !== undefined ? { finishReason } : {}),
  index: 0
})

/** A whole GenerateContentResponse, as generateJson sends it. */
export function generateObject(opts: GenerateOptions = {}): Record<string, unknown> {
  const meta = { usageMetadata: usageMetadata(opts.usage ?? DEFAULT_USAGE), modelVersion: opts.modelVersion ?? DEFAULT_MODEL, responseId: opts.responseId ?? nextId() }
  if (opts.blockReason !== undefined) return { promptFeedback: { blockReason: opts.blockReason }, ...meta }
  return { candidates: [candidate(answerParts(opts), opts.finishReason ?? "STOP")], ...meta }
}

/** A JSON reply to :generateContent. */
export function generateJson(opts: GenerateOptions = {}): Reply {
  return { kind: "json", status: 200, body: generateObject(opts) }
}

/**
 * The chunks generateSse would stream, in the real API's order: thought pieces, text pieces, then
 * the calls in one chunk. Every chunk carries usageMetadata (the prompt count only until the last,
 * which has the final counts and finishReason), modelVersion and one responseId.
 */
export function generateChunks(opts: GenerateSseOptions = {}): Array<Record<string, unknown>> {
  const responseId = opts.responseId ?? nextId()
  const modelVersion = opts.modelVersion ?? DEFAULT_MODEL
  const usage = opts.usage ?? DEFAULT_USAGE
  const complete = opts.complete ?? true
  const running = { promptTokenCount: usage.prompt ?? 0, totalTokenCount: usage.prompt ?? 0 }
  const chunk = (parts: Array<Record<string, unknown>>, last: boolean): Record<string, unknown> => ({
    candidates: [candidate(parts, last && complete ? (opts.finishReason ?? "STOP") : undefined)],
    usageMetadata: last && complete ? usageMetadata(usage) : running,
    modelVersion,
    responseId
  })
  if (opts.blockReason !== undefined) return [{ promptFeedback: { blockReason: opts.blockReason }, usageMetadata: usageMetadata(usage), modelVersion, responseId }]
  const groups: Array<Array<Record<string, unknown>>> = []
  if (opts.parts !== undefined) groups.push(opts.parts)
  else {
    for (const t of pieces(opts.thoughts, opts.split)) groups.push([{ text: t, thought: true }])
    const text = pieces(textOf(opts), opts.split)
    const calls = callParts(opts)
    text.forEach((t, i) => groups.push([i === text.length - 1 && calls.length === 0 && opts.signature !== undefined ? { text: t, thoughtSignature: opts.signature } : { text: t }]))
    if (calls.length > 0) groups.push(calls)
  }
  // an answer with no content still ends with a chunk holding finishReason (and an empty text part)
  if (groups.length === 0) groups.push([{ text: "" }])
  return groups.map((parts, i) => chunk(parts, i === groups.length - 1))
}

/** An SSE reply to :streamGenerateContent?alt=sse. */
export function generateSse(opts: GenerateSseOptions = {}): Reply {
  const reply: Reply = { kind: "sse", chunks: generateChunks(opts) }
  if (opts.delayMs !== undefined) reply.delayMs = opts.delayMs
  return reply
}

/** A Google error body `{error:{code,message,status}}` (with `details` when given). */
export function errorBody(code: number, status: string, message: string, details?: unknown[]): Record<string, unknown> {
  return { error: { code, message, status, ...(details !== undefined ? { details } : {}) } }
}

/** A Google-shaped error reply, e.g. geminiError(429, "RESOURCE_EXHAUSTED", "Quota exceeded"). */
export function geminiError(
  status: number,
  statusText: string,
  message: string,
  options: { headers?: Record<string, string>; details?: unknown[] } = {}
): Reply {
  const reply: Reply = { kind: "json", status, body: errorBody(status, statusText, message, options.details) }
  if (options.headers !== undefined) reply.headers = options.headers
  return reply
}

/** A RetryInfo detail, as Google puts in a 429: retryDelay like "37s". */
export const retryInfo = (retryDelay: string) => ({ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay })

/** An ErrorInfo detail, e.g. errorInfo("API_KEY_INVALID") as Google sends with a 400 for a bad key. */
export const errorInfo = (reason: string) => ({ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason, domain: "googleapis.com" })

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined
}

const methodPath = /^\/(?:v1beta|v1)\/models\/(.+):(generateContent|streamGenerateContent)$/

/**
 * A handler answering generateSse(opts) on :streamGenerateContent?alt=sse, the same chunks as a
 * JSON array without alt=sse, and generateJson(opts) on :generateContent. modelVersion defaults
 * to the model named in the path.
 */
export function auto(opts: GenerateSseOptions = {}): Handler {
  return (req) => {
    const match = methodPath.exec(req.path)
    if (asRecord(req.body) === undefined) return geminiError(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    const model = opts.modelVersion ?? (match !== null ? decodeURIComponent(match[1]) : DEFAULT_MODEL)
    if (match?.[2] === "streamGenerateContent") {
      const streamed = { ...opts, modelVersion: model }
      return req.query.alt === "sse" ? generateSse(streamed) : { kind: "json", status: 200, body: generateChunks(streamed) }
    }
    return generateJson({ ...opts, modelVersion: model })
  }
}

/** The default handler: the two generate methods via auto(), 404 NOT_FOUND for everything else. */
export const defaultHandler: Handler = (req, index) => {
  if (req.method === "POST" && methodPath.test(req.path)) return auto()(req, index)
  return geminiError(404, "NOT_FOUND", `Requested entity was not found: ${req.method} ${req.path}`)
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

function encodeChunk(item: SseChunk): string {
  return typeof item === "string" ? item : `data: ${JSON.stringify(item)}\r\n\r\n`
}

export function startFakeGeminiUpstream(): Promise<FakeGeminiUpstream> {
  return startScriptedServer<RecordedRequest, Reply, SseChunk>({
    basePath: "/v1beta",
    defaultHandler,
    handlerFailed: () => geminiError(500, "INTERNAL", "fake upstream handler threw"),
    sseItems: (reply) => reply.chunks,
    encodeSseItem: encodeChunk,
    sseContentType: "text/event-stream",
    jsonContentType: "application/json; charset=UTF-8",
    recordExtras: (_req, search) => ({ query: Object.fromEntries(new URLSearchParams(search)) })
  })
}
