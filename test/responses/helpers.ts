/**
 * Shared helpers of the Responses-style suites: one gateway config with several apps (keys), raw
 * HTTP calls for what the SDK hides (headers, SSE frames, sequence numbers), and readers for what
 * reached the fake chat-completions upstream.
 */
import OpenAI, { APIError } from "openai"
import { expect } from "vitest"
import type { RecordedRequest } from "../support/FakeUpstream.js"
import type { TestGateway } from "../support/Gateway.js"

export type Json = Record<string, unknown>

/** Configured keys, one per app. */
export const KEYS = {
  /** the default app of the suites */
  alpha: "sk-alpha-0123456789",
  /** a second app: its ids must look unknown to alpha */
  beta: "sk-beta-0123456789",
  /** `onHostedTools: refuse` */
  strict: "sk-strict-0123456789",
  /** `reasoningOutput: true` */
  thinker: "sk-thinker-0123456789"
} as const

export const MAX_TOOLS = 6

/** The gateway config document of the suites: provider `up` (fake upstream) and `mock`, four apps. */
export const gatewayDocument = (upstreamUrl: string, extra: Json = {}): Json => ({
  providers: {
    up: { type: "openai", baseUrl: upstreamUrl, apiKey: "upstream-secret" },
    mock: { type: "mock" }
  },
  keys: [
    { key: KEYS.alpha, app: "alpha" },
    { key: KEYS.beta, app: "beta" },
    { key: KEYS.strict, app: "strict" },
    { key: KEYS.thinker, app: "thinker" }
  ],
  apps: { strict: { onHostedTools: "refuse" }, thinker: { reasoningOutput: true } },
  maxTools: MAX_TOOLS,
  ...extra
})

export const clientFor = (gateway: TestGateway, key: string = KEYS.alpha): OpenAI =>
  new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0, timeout: 15_000 })

export const RESP_ID = /^resp_[0-9a-f]{32}$/
export const MSG_ID = /^msg_[0-9a-f]{32}$/
export const FC_ID = /^fc_[0-9a-f]{32}$/
export const FCO_ID = /^fco_[0-9a-f]{32}$/
export const CTC_ID = /^ctc_[0-9a-f]{32}$/
export const SESSION = /^ses_[0-9a-f]{32}$/

/** A property of an SDK object that its types do not declare (e.g. `store`). */
export const fieldOf = (value: object, key: string): unknown => (value as Json)[key]

export const isRecord = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

export const asRecord = (value: unknown, what = "value"): Json => {
  if (!isRecord(value)) throw new Error(`${what} is not a JSON object: ${JSON.stringify(value)}`)
  return value
}

export const asArray = (value: unknown, what = "value"): Array<unknown> => {
  if (!Array.isArray(value)) throw new Error(`${what} is not an array: ${JSON.stringify(value)}`)
  return value
}

export const records = (value: unknown, what = "value"): Array<Json> => asArray(value, what).map((v) => asRecord(v, what))

/** The JSON body of a recorded upstream request. */
export const bodyOf = (req: RecordedRequest | undefined): Json => asRecord(req?.body, `upstream body ${String(req?.rawBody)}`)

/** The chat `messages` of the upstream request. */
export const messagesOf = (req: RecordedRequest | undefined): Array<Json> => records(bodyOf(req).messages, "messages")

/** The function names offered to the upstream. */
export const toolNamesOf = (req: RecordedRequest | undefined): Array<string> =>
  records(bodyOf(req).tools ?? [], "tools").map((t) => String(asRecord(t.function, "tool.function").name))

/** The function definition offered upstream under a name. */
export const upstreamTool = (req: RecordedRequest | undefined, name: string): Json => {
  const found = records(bodyOf(req).tools ?? [], "tools")
    .map((t) => asRecord(t.function, "tool.function"))
    .find((f) => f.name === name)
  if (found === undefined) throw new Error(`no upstream tool ${name} in ${JSON.stringify(bodyOf(req).tools)}`)
  return found
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP
// ---------------------------------------------------------------------------------------------

export interface Raw {
  readonly status: number
  readonly headers: Headers
  readonly text: string
}

export const rawRequest = async (gateway: TestGateway, method: string, path: string, body?: Json, key: string = KEYS.alpha): Promise<Raw> => {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(15_000)
  })
  return { status: res.status, headers: res.headers, text: await res.text() }
}

export const post = (gateway: TestGateway, body: Json, key: string = KEYS.alpha) => rawRequest(gateway, "POST", "/v1/responses", body, key)

export const jsonOf = (raw: Raw): Json => {
  try {
    return asRecord(JSON.parse(raw.text) as unknown, "body")
  } catch (error) {
    throw new Error(`not JSON (status ${raw.status}): ${raw.text.slice(0, 500)}`, { cause: error })
  }
}

/** The OpenAI-shaped error body of a refusal. */
export interface WireError {
  readonly message: string
  readonly type: string
  readonly param: string | null
  readonly code: string | null
}

export const errorOf = (raw: Raw): WireError => {
  const error = asRecord(jsonOf(raw).error, "error")
  return {
    message: String(error.message),
    type: String(error.type),
    param: typeof error.param === "string" ? error.param : null,
    code: typeof error.code === "string" ? error.code : null
  }
}

/** Assert a refusal's status, code and param (and that it is JSON, not a stream). */
export const expectRefusal = (raw: Raw, status: number, code: string, param?: string | null): WireError => {
  if (raw.status !== status) throw new Error(`expected ${status} ${code}, got ${raw.status}: ${raw.text.slice(0, 500)}`)
  expect(raw.headers.get("content-type") ?? "").toMatch(/^application\/json/)
  const error = errorOf(raw)
  expect(error.code).toBe(code)
  if (param !== undefined) expect(error.param).toBe(param)
  return error
}

/** Await a promise that must reject with an APIError. */
export const apiError = async (promise: Promise<unknown>): Promise<APIError> => {
  try {
    await promise
  } catch (error) {
    if (error instanceof APIError) return error
    throw error
  }
  throw new Error("expected the call to fail with an APIError")
}

// ---------------------------------------------------------------------------------------------
// SSE
// ---------------------------------------------------------------------------------------------

export interface SseEvent {
  /** the `event:` line */
  readonly event: string
  readonly data: Json
}

export interface ParsedSse {
  readonly events: ReadonlyArray<SseEvent>
  /** every `data:` payload as sent, `[DONE]` included if any */
  readonly rawData: ReadonlyArray<string>
}

/** Frames of an SSE body: `event:` and `data:` lines; comment frames (keep-alives) dropped. */
export const parseSse = (text: string): ParsedSse => {
  const events: Array<SseEvent> = []
  const rawData: Array<string> = []
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const lines = frame.split(/\r?\n/).filter((l) => l !== "" && !l.startsWith(":"))
    if (lines.length === 0) continue
    const event = lines.find((l) => l.startsWith("event:"))?.slice(6).trim() ?? ""
    const data = lines
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(l.startsWith("data: ") ? 6 : 5))
      .join("\n")
    rawData.push(data)
    if (data === "[DONE]") continue
    events.push({ event, data: asRecord(JSON.parse(data) as unknown, "sse data") })
  }
  return { events, rawData }
}

export const typesOf = (events: ReadonlyArray<SseEvent>): Array<string> => events.map((e) => e.event)

/** Checks every stream must pass: event line equals data.type, sequence 0..n-1, no [DONE]. */
export const expectWellFormedStream = (sse: ParsedSse): void => {
  expect(sse.rawData).not.toContain("[DONE]")
  expect(sse.events.length).toBeGreaterThan(2)
  for (const e of sse.events) expect(e.data.type).toBe(e.event)
  expect(sse.events.map((e) => e.data.sequence_number)).toEqual(sse.events.map((_, i) => i))
}

/** A value with the SDK's client-side parse fields (`parsed`, `output_parsed`) removed, JSON-normalised. */
export const withoutParsed = (value: unknown): unknown =>
  JSON.parse(JSON.stringify(value, (key, v: unknown) => (key === "parsed" || key === "output_parsed" ? undefined : v))) as unknown

/** The `response` object of the last (terminal) event. */
export const terminalResponse = (sse: ParsedSse): Json => asRecord(sse.events[sse.events.length - 1]?.data.response, "terminal response")

/** Events of the text message part of 6.1 (item 3) for n deltas. */
export const textEvents = (deltas: number): Array<string> => [
  "response.output_item.added",
  "response.content_part.added",
  ...Array.from({ length: deltas }, () => "response.output_text.delta"),
  "response.output_text.done",
  "response.content_part.done",
  "response.output_item.done"
]

export const functionCallEvents = [
  "response.output_item.added",
  "response.function_call_arguments.delta",
  "response.function_call_arguments.done",
  "response.output_item.done"
]

export const customCallEvents = [
  "response.output_item.added",
  "response.custom_tool_call_input.delta",
  "response.custom_tool_call_input.done",
  "response.output_item.done"
]

/** Poll until `check` passes or the time is up (for effects that finish after a stream ends). */
export const eventually = async <A>(check: () => Promise<A>, ms = 3_000): Promise<A> => {
  const until = Date.now() + ms
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (Date.now() > until) throw error
      await new Promise((r) => setTimeout(r, 25))
    }
  }
}
