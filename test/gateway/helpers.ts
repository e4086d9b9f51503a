/**
 * Shared pieces of the own-route suites (usage, keys, ops): raw calls with the exact request
 * target (problem details echo it as `instance`), the problem-details check of spec 7.1, a fake
 * chat-completions upstream whose usage carries every token kind, and small readers.
 */
import { expect } from "vitest"
import { chatCompletionObject, chatSseChunks, type Handler, type Reply as UpstreamReply } from "../support/FakeUpstream.js"
import type { TestGateway } from "../support/Gateway.js"
import { rawCall, type RawCallOptions, type RawReply } from "../support/RawHttp.js"

export type Json = Record<string, unknown>

export const ADMIN = "admin-key-0123456789"

/** Configured keys, one per app. */
export const KEYS = {
  alpha: "sk-alpha-0123456789",
  beta: "sk-beta-0123456789"
} as const

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
export const jsonType = { "content-type": "application/json" } as const

/** One request on a fresh connection, the target sent exactly as written. */
export const call = (gw: TestGateway, method: string, target: string, options: RawCallOptions = {}): Promise<RawReply> =>
  rawCall(gw.port, method, target, options)

export const get = (gw: TestGateway, target: string, key?: string, headers: Readonly<Record<string, string>> = {}) =>
  call(gw, "GET", target, { headers: { ...(key !== undefined ? bearer(key) : {}), ...headers } })

export const postJson = (gw: TestGateway, target: string, body: unknown, headers: Readonly<Record<string, string>> = {}) =>
  call(gw, "POST", target, { headers: { ...jsonType, ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) })

export const parse = (r: RawReply): Json => {
  try {
    return JSON.parse(r.text) as Json
  } catch {
    throw new Error(`not JSON (${r.status}): ${r.text.slice(0, 300)}`)
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Poll `read` until `done` holds (or the deadline passes: then the last value is returned for the assertion). */
export const pollUntil = async <A>(read: () => Promise<A>, done: (value: A) => boolean, timeoutMs = 3000, everyMs = 50): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  let value = await read()
  while (!done(value) && Date.now() < deadline) {
    await sleep(everyMs)
    value = await read()
  }
  return value
}

/** HTTP reason phrases of the statuses own routes answer with. */
export const REASON: Readonly<Record<number, string>> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  429: "Too Many Requests",
  503: "Service Unavailable"
}

/** The codes of the spec 7.1 list: each has an anchor in the error list. */
const LISTED = new Set([
  "invalid_request_target", "invalid_host", "cross_origin_forbidden", "unsupported_media_type", "invalid_api_key",
  "admin_key_required", "not_found", "method_not_allowed", "invalid_date", "invalid_range", "range_too_long",
  "invalid_app", "invalid_user", "app_forbidden", "key_not_found", "config_key", "app_has_host_tools",
  "app_has_config_key", "not_ready", "body_read_timeout", "request_body_too_large", "server_busy",
  "body_budget_insufficient", "timeout",
  // added by issue 16 (the shared database not answering)
  "database_unavailable", "invalid_expires_at", "rate_limit_exceeded", "insufficient_quota", "invalid_limits"
])

const PROBLEM_FIELDS = new Set(["type", "title", "status", "detail", "instance", "code", "param", "requestId"])

export interface ProblemExpectation {
  /** the request target as sent */
  readonly instance: string
  /** the field named; omitted: the body has no `param`; "any": not checked */
  readonly param?: string
  /** strings the detail must not contain (keys) */
  readonly secrets?: ReadonlyArray<string>
}

/**
 * An RFC 9457 problem (spec 7.1): `application/problem+json`; `type` the code's anchor (or
 * about:blank for a code not in the list); `title` the reason phrase; `status`; a `detail`;
 * `instance` the target as sent; `code`; `param` when there is one; `requestId` equal to the
 * `x-gateway-request-id` header. Returns the body.
 */
export const expectProblem = (r: RawReply, status: number, code: string, expected: ProblemExpectation): Json => {
  const where = `${expected.instance} -> ${r.status} ${r.text.slice(0, 300)}`
  expect(r.status, where).toBe(status)
  expect(r.headers["content-type"], where).toMatch(/^application\/problem\+json(\s*;|$)/)
  const body = parse(r)
  for (const key of Object.keys(body)) expect(PROBLEM_FIELDS.has(key), `unexpected field ${key} in ${where}`).toBe(true)
  expect(body.type, where).toBe(LISTED.has(code) ? `/gateway/errors#${code}` : "about:blank")
  expect(body.title, where).toBe(REASON[status])
  expect(body.status, where).toBe(status)
  expect(typeof body.detail, where).toBe("string")
  expect((body.detail as string).length, where).toBeGreaterThan(0)
  expect(body.instance, where).toBe(expected.instance)
  expect(body.code, where).toBe(code)
  if (expected.param === undefined) expect(body, where).not.toHaveProperty("param")
  else if (expected.param !== "any") expect(body.param, where).toBe(expected.param)
  const id = r.headers["x-gateway-request-id"]
  expect(id, where).toMatch(/^req_[0-9a-f]+$/)
  expect(body.requestId, where).toBe(id)
  for (const secret of expected.secrets ?? []) expect(r.text, where).not.toContain(secret)
  return body
}

// ---------------------------------------------------------------------------------------------
// A chat-completions upstream whose usage carries every token kind
// ---------------------------------------------------------------------------------------------

/** Usage of every answer of `fullUsage`: input 100 (30 cached reads, 7 cache writes), output 20 (5 reasoning). */
export const TOKENS = { input: 100, output: 20, cacheRead: 30, cacheWrite: 7, reasoning: 5 } as const

const wireUsage = () => ({
  prompt_tokens: TOKENS.input,
  completion_tokens: TOKENS.output,
  total_tokens: TOKENS.input + TOKENS.output,
  prompt_tokens_details: { cached_tokens: TOKENS.cacheRead, cache_write_tokens: TOKENS.cacheWrite },
  completion_tokens_details: { reasoning_tokens: TOKENS.reasoning }
})

/** Answers every chat completion (JSON or SSE, as asked) with text and the full usage of TOKENS. */
export const fullUsage = (options: { readonly content?: string; readonly delayMs?: number } = {}): Handler => (req) => {
  const body = (typeof req.body === "object" && req.body !== null ? req.body : {}) as Json
  const model = typeof body.model === "string" ? body.model : "fake-model"
  const content = options.content ?? "Hello from upstream"
  if (body.stream === true) {
    const chunks = chatSseChunks({ model, content, split: "words", includeUsage: true }) as Array<Json>
    chunks[chunks.length - 1].usage = wireUsage()
    const reply: UpstreamReply = { kind: "sse", chunks }
    if (options.delayMs !== undefined) reply.delayMs = options.delayMs
    return reply
  }
  const completion = chatCompletionObject({ model, content })
  completion.usage = wireUsage()
  return { kind: "json", status: 200, body: completion }
}

// ---------------------------------------------------------------------------------------------
// Requests of each protocol
// ---------------------------------------------------------------------------------------------

export const chatBody = (model: string, extra: Json = {}) => ({ model, messages: [{ role: "user", content: "hello" }], ...extra })

export const chat = (gw: TestGateway, key: string, model: string, extra: Json = {}, headers: Readonly<Record<string, string>> = {}) =>
  postJson(gw, "/v1/chat/completions", chatBody(model, extra), { ...bearer(key), ...headers })

export const responses = (gw: TestGateway, key: string, model: string, extra: Json = {}, headers: Readonly<Record<string, string>> = {}) =>
  postJson(gw, "/v1/responses", { model, input: "hello", ...extra }, { ...bearer(key), ...headers })

export const messages = (gw: TestGateway, key: string, model: string, extra: Json = {}, headers: Readonly<Record<string, string>> = {}) =>
  postJson(gw, "/v1/messages", { model, max_tokens: 64, messages: [{ role: "user", content: "hello" }], ...extra }, {
    "x-api-key": key,
    "anthropic-version": "2023-06-01",
    ...headers
  })

export const geminiBody = (extra: Json = {}) => ({ contents: [{ role: "user", parts: [{ text: "hello" }] }], ...extra })

/** `:generateContent`, or `:streamGenerateContent?alt=sse` with `stream`; the key in `x-goog-api-key`. */
export const gemini = (gw: TestGateway, key: string, model: string, options: { readonly stream?: boolean; readonly body?: Json; readonly headers?: Readonly<Record<string, string>> } = {}) =>
  postJson(gw, `/v1beta/models/${model}:${options.stream === true ? "streamGenerateContent?alt=sse" : "generateContent"}`, geminiBody(options.body), {
    "x-goog-api-key": key,
    ...options.headers
  })

/** A UTC day `YYYY-MM-DD`, `offset` days from today. */
export const dayFromToday = (offset: number): string => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10)

export const addDays = (day: string, n: number): string => new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10)
