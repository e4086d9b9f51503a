/**
 * Upstream faults end to end (issue 9), over real loopback sockets: an in-process gateway in front
 * of fault-injecting upstreams (test/support/FaultyUpstream.ts), one per provider type (`openai`,
 * `anthropic`, `gemini`), each fault written in that provider's own wire, called through every
 * client protocol (chat completions, Responses, Messages, Gemini generateContent), streamed and not.
 *
 * Faults: connection refused; reset before the first byte; a stall past `requestTimeoutMs`
 * (before and after output); 400, 429 with Retry-After, 500, 503 and 529; an overload error in a
 * 200 body (or as the first frame of a stream); a body or frame that is not JSON; lines that are
 * not SSE; a tool call cut short; a reset, a frame that is not JSON and an in-band overload error
 * after output.
 *
 * For every case: before output the protocol's own error status and envelope (spec 7.2 to 7.4,
 * with Retry-After passed on and overload as 529 on Messages, 503 elsewhere), never the provider's
 * own text; after output a 200 stream ending with the protocol's failure event (spec 6: a chat
 * error frame, `response.failed`, `event: error`, a Gemini `data: {"error"}` frame) and no normal
 * end. Alias fallbacks are taken for retryable failures before output only. After each case the
 * upstream exchange is closed (a fault that holds its response open must be aborted by the
 * gateway), the upstream's sockets are back to at most one idle keep-alive connection, the
 * gateway's model requests in flight are back to 0, and every client request finished within a
 * bound.
 */
import { performance } from "node:perf_hooks"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { type FaultyUpstream, OUTPUT_TEXT, PARTIAL_TEXT, refusedPort, startFaultyUpstream, UPSTREAM_DETAIL, type Wire } from "../support/FaultyUpstream.js"

type Json = Record<string, any>

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Polls `check` until it holds; on timeout the error says `what` (evaluated then). */
const until = async (what: () => string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for: ${what()}`)
    await sleep(5)
  }
}

// ---------------------------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------------------------

interface ProviderCase {
  readonly wire: Wire
  /** provider name in the gateway config; `<name>-dead` points at a refused port */
  readonly name: string
}

const PROVIDERS: ReadonlyArray<ProviderCase> = [
  { wire: "openai", name: "oa" },
  { wire: "anthropic", name: "an" },
  { wire: "gemini", name: "ge" }
]

type Protocol = "chat" | "responses" | "messages" | "gemini"
const PROTOCOLS: ReadonlyArray<Protocol> = ["chat", "responses", "messages", "gemini"]
const MODES = [
  { stream: true, mode: "stream" },
  { stream: false, mode: "non-stream" }
] as const

/** What the gateway answers a failure with, in the OpenAI-shaped terms (status, code). */
interface Failure {
  readonly status: number
  readonly code: string
  readonly overloaded?: boolean
  readonly retryAfter?: string
}

const UNREACHABLE: Failure = { status: 502, code: "upstream_unreachable" }
const TIMEOUT: Failure = { status: 504, code: "timeout" }
const RATE: Failure = { status: 429, code: "rate_limit_exceeded", retryAfter: "7" }
const SERVER: Failure = { status: 502, code: "upstream_error" }
const UNAVAILABLE: Failure = { status: 503, code: "provider_unavailable" }
const OVERLOADED: Failure = { status: 503, code: "provider_overloaded", overloaded: true }
const BAD: Failure = { status: 502, code: "upstream_bad_response" }
const REFUSED: Failure = { status: 400, code: "upstream_bad_request" }

/** A fault (the upstream model name, or `refused` for the dead provider) and what it must give. */
interface FaultCase {
  readonly fault: string
  readonly failure: Failure
  /** the stream fails after output (stream mode only; without streaming it is an HTTP error) */
  readonly afterOutput?: boolean
}

/** Faults that need no deadline; the two stalls run on their own (below). */
const FAULTS: ReadonlyArray<FaultCase> = [
  { fault: "refused", failure: UNREACHABLE },
  { fault: "reset", failure: UNREACHABLE },
  { fault: "status-400", failure: REFUSED },
  { fault: "status-429", failure: RATE },
  { fault: "status-500", failure: SERVER },
  { fault: "status-503", failure: UNAVAILABLE },
  { fault: "status-529", failure: OVERLOADED },
  { fault: "overload-200", failure: OVERLOADED },
  { fault: "bad-json", failure: BAD },
  { fault: "bad-sse", failure: BAD },
  { fault: "truncated-tool", failure: BAD },
  { fault: "deep-tool", failure: BAD },
  { fault: "mid-reset", failure: UNREACHABLE, afterOutput: true },
  { fault: "mid-bad-json", failure: BAD, afterOutput: true },
  { fault: "mid-overload", failure: OVERLOADED, afterOutput: true }
]

const STALLS: ReadonlyArray<FaultCase> = [
  { fault: "stall", failure: TIMEOUT },
  { fault: "mid-stall", failure: TIMEOUT, afterOutput: true }
]

/** Retryable failures before output (README: connection refused, 429, 5xx, overload): an alias falls back to its next target. */
const FALLBACK_FAULTS = ["refused", "reset", "status-429", "status-500", "status-503", "status-529", "overload-200"]
/** Failures after output: no fallback. */
const AFTER_OUTPUT_FAULTS = ["mid-reset", "mid-bad-json", "mid-overload"]

const modelOf = (p: ProviderCase, fault: string) => (fault === "refused" ? `${p.name}-dead/ok` : `${p.name}/${fault}`)
/** the alias of one fallback case: its first target is that case's alone */
const fallbackAlias = (p: ProviderCase, fault: string, protocol: string, mode: string) => `fb-${p.name}-${fault}-${protocol}-${mode}`

// ---------------------------------------------------------------------------------------------
// Calling the gateway in each protocol
// ---------------------------------------------------------------------------------------------

interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly ms: number
}

/** Every client request must finish within this (the stalls end at the short requestTimeoutMs). */
const CLIENT_BOUND_MS = 15_000

/** `array`: Gemini's `:streamGenerateContent` without `alt=sse`, answered as one JSON array */
const call = async (gw: TestGateway, protocol: Protocol, model: string, stream: boolean, array = false): Promise<Reply> => {
  let path: string
  let body: Json
  switch (protocol) {
    case "chat":
      path = "/v1/chat/completions"
      body = { model, messages: [{ role: "user", content: "Say hello" }], stream }
      break
    case "responses":
      path = "/v1/responses"
      body = { model, input: "Say hello", stream, store: false }
      break
    case "messages":
      path = "/v1/messages"
      body = { model, max_tokens: 64, messages: [{ role: "user", content: "Say hello" }], stream }
      break
    case "gemini":
      path = `/v1beta/models/${model}:${array ? "streamGenerateContent" : stream ? "streamGenerateContent?alt=sse" : "generateContent"}`
      body = { contents: [{ role: "user", parts: [{ text: "Say hello" }] }] }
      break
  }
  const t0 = performance.now()
  const res = await fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(CLIENT_BOUND_MS)
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, ms: performance.now() - t0 }
}

interface SseEvent {
  readonly event?: string
  readonly data: string
}

const parseSse = (text: string): Array<SseEvent> => {
  const out: Array<SseEvent> = []
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event: string | undefined
    const data: Array<string> = []
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("event:")) event = line.slice(6).trim()
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""))
    }
    if (data.length > 0) out.push(event === undefined ? { data: data.join("\n") } : { event, data: data.join("\n") })
  }
  return out
}

const json = (text: string): Json => {
  try {
    return JSON.parse(text) as Json
  } catch {
    throw new Error(`not JSON: ${text.slice(0, 300)}`)
  }
}

const messagesErrorType = (status: number): string =>
  ({ 400: "invalid_request_error", 429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error" })[status] ?? "api_error"

const geminiStatusName = (status: number): string =>
  ({ 400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED" })[status] ?? (status >= 500 ? "INTERNAL" : "?")

const openAiType = (f: Failure): string => (f.status >= 500 ? "server_error" : f.status === 429 ? "rate_limit_error" : "invalid_request_error")

/** The error object of each protocol's envelope for a failure (spec 7.2 to 7.4). */
const checkEnvelope = (protocol: Protocol, f: Failure, body: Json) => {
  switch (protocol) {
    case "chat":
    case "responses":
      expect(Object.keys(body)).toEqual(["error"])
      expect(body.error).toMatchObject({ type: openAiType(f), code: f.code, param: null })
      expect(typeof body.error.message).toBe("string")
      expect(body.error.message.length).toBeGreaterThan(0)
      return
    case "messages": {
      const status = f.overloaded === true ? 529 : f.status
      expect(body.type).toBe("error")
      expect(Object.keys(body.error).sort()).toEqual(["message", "type"])
      expect(body.error.type).toBe(messagesErrorType(status))
      expect(body.error.message.length).toBeGreaterThan(0)
      return
    }
    case "gemini":
      expect(Object.keys(body)).toEqual(["error"])
      expect(body.error).toMatchObject({ code: f.status, status: geminiStatusName(f.status) })
      expect(body.error.message.length).toBeGreaterThan(0)
      return
  }
}

/** An HTTP error before any output, in the protocol's own envelope and status. */
const expectHttpError = (protocol: Protocol, f: Failure, reply: Reply) => {
  const status = protocol === "messages" && f.overloaded === true ? 529 : f.status
  expect({ status: reply.status, body: reply.text.slice(0, 300) }).toMatchObject({ status })
  expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
  if (f.retryAfter !== undefined) expect(reply.headers.get("retry-after")).toBe(f.retryAfter)
  expect(reply.text).not.toContain(UPSTREAM_DETAIL)
  checkEnvelope(protocol, f, json(reply.text))
}

/** A 200 stream that shows the partial output, then ends with the protocol's failure event and nothing else. */
const expectFailureEvent = (protocol: Protocol, f: Failure, reply: Reply) => {
  expect({ status: reply.status, body: reply.text.slice(0, 300) }).toMatchObject({ status: 200 })
  expect(reply.headers.get("content-type")).toMatch(/^text\/event-stream/)
  expect(reply.text).not.toContain(UPSTREAM_DETAIL)
  const events = parseSse(reply.text)
  expect(events.length).toBeGreaterThan(1)
  const last = events[events.length - 1]
  const before = events.slice(0, -1)
  switch (protocol) {
    case "chat": {
      expect(reply.text).not.toContain("[DONE]")
      const text = before.map((e) => json(e.data).choices?.[0]?.delta?.content ?? "").join("")
      expect(text).toBe(PARTIAL_TEXT)
      checkEnvelope(protocol, f, json(last.data))
      return
    }
    case "responses": {
      const types = events.map((e) => e.event)
      expect(types).not.toContain("response.completed")
      expect(types).not.toContain("response.incomplete")
      expect(before.filter((e) => e.event === "response.output_text.delta").map((e) => json(e.data).delta).join("")).toBe(PARTIAL_TEXT)
      expect(last.event).toBe("response.failed")
      const failed = json(last.data)
      expect(failed.type).toBe("response.failed")
      expect(failed.response.status).toBe("failed")
      expect(failed.response.error.code).toBe(f.code)
      expect(typeof failed.response.error.message).toBe("string")
      return
    }
    case "messages": {
      const types = events.map((e) => e.event)
      expect(types[0]).toBe("message_start")
      expect(types).not.toContain("message_stop")
      const deltas = before.filter((e) => e.event === "content_block_delta").map((e) => json(e.data).delta)
      expect(deltas.map((d: Json) => d.text ?? "").join("")).toBe(PARTIAL_TEXT)
      expect(last.event).toBe("error")
      checkEnvelope(protocol, f, json(last.data))
      return
    }
    case "gemini": {
      const text = before.flatMap((e) => (json(e.data).candidates?.[0]?.content?.parts ?? []).map((p: Json) => p.text ?? "")).join("")
      expect(text).toBe(PARTIAL_TEXT)
      for (const e of before) expect(json(e.data).error).toBeUndefined()
      checkEnvelope(protocol, f, json(last.data))
      return
    }
  }
}

/** A whole, successful answer: its text, and in a stream the protocol's normal end. */
const answerText = (protocol: Protocol, stream: boolean, reply: Reply): string => {
  expect({ status: reply.status, body: reply.text.slice(0, 300) }).toMatchObject({ status: 200 })
  if (!stream) {
    const body = json(reply.text)
    switch (protocol) {
      case "chat":
        return body.choices[0].message.content
      case "responses":
        return body.output
          .filter((o: Json) => o.type === "message")
          .flatMap((o: Json) => o.content)
          .map((c: Json) => c.text)
          .join("")
      case "messages":
        return body.content.map((c: Json) => c.text ?? "").join("")
      case "gemini":
        return body.candidates[0].content.parts.map((p: Json) => p.text ?? "").join("")
    }
  }
  const events = parseSse(reply.text)
  const last = events[events.length - 1]
  switch (protocol) {
    case "chat":
      expect(last.data).toBe("[DONE]")
      return events
        .slice(0, -1)
        .map((e) => json(e.data).choices?.[0]?.delta?.content ?? "")
        .join("")
    case "responses":
      expect(last.event).toBe("response.completed")
      return events
        .filter((e) => e.event === "response.output_text.delta")
        .map((e) => json(e.data).delta)
        .join("")
    case "messages":
      expect(last.event).toBe("message_stop")
      return events
        .filter((e) => e.event === "content_block_delta")
        .map((e) => json(e.data).delta.text ?? "")
        .join("")
    case "gemini":
      for (const e of events) expect(json(e.data).error).toBeUndefined()
      expect(json(last.data).candidates[0].finishReason).toBe("STOP")
      return events.flatMap((e) => (json(e.data).candidates?.[0]?.content?.parts ?? []).map((p: Json) => p.text ?? "")).join("")
  }
}

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

const upstreams = new Map<Wire, FaultyUpstream>()
/** the gateway for every case but the stalls: a deadline far away */
let gw: TestGateway
/** the gateway for the stalls: requestTimeoutMs short */
let fastGw: TestGateway
const FAST_TIMEOUT_MS = 1_500

const aliasesFor = (p: ProviderCase): Record<string, { targets: Array<string> }> => {
  const out: Record<string, { targets: Array<string> }> = {}
  // each case's failing target is a target of its own (`<fault>~<case>`): the gateway cools a target
  // down after a few failures, and each case must find its first target healthy
  for (const fault of [...FALLBACK_FAULTS, ...AFTER_OUTPUT_FAULTS, "status-400"]) {
    for (const protocol of PROTOCOLS) {
      for (const { mode } of MODES) out[fallbackAlias(p, fault, protocol, mode)] = { targets: [`${modelOf(p, fault)}~${protocol}-${mode}`, `${p.name}/ok`] }
    }
  }
  return out
}

const configFor = async (requestTimeoutMs: number): Promise<Record<string, unknown>> => {
  const dead = await refusedPort()
  const providers: Record<string, unknown> = {}
  let aliases: Record<string, unknown> = {}
  for (const p of PROVIDERS) {
    const up = upstreams.get(p.wire)!
    providers[p.name] = { type: p.wire, baseUrl: up.baseUrl }
    providers[`${p.name}-dead`] = { type: p.wire, baseUrl: `http://127.0.0.1:${dead}${p.wire === "openai" ? "/v1" : ""}` }
    aliases = { ...aliases, ...aliasesFor(p) }
  }
  return { providers, aliases, requestTimeoutMs }
}

beforeAll(async () => {
  for (const p of PROVIDERS) upstreams.set(p.wire, await startFaultyUpstream(p.wire, { keepAliveTimeoutMs: 2_000 }))
  gw = await startGateway(await configFor(60_000))
  fastGw = await startGateway(await configFor(FAST_TIMEOUT_MS))
})

afterAll(async () => {
  await gw?.close()
  await fastGw?.close()
  for (const up of upstreams.values()) await up.close()
})

/** The gateway's gauges from /gateway/metrics, by name. */
const gauges = async (g: TestGateway): Promise<Record<string, number>> => {
  const res = await fetch(`${g.url}/gateway/metrics`, { signal: AbortSignal.timeout(5_000) })
  const out: Record<string, number> = {}
  for (const line of (await res.text()).split("\n")) {
    const match = /^(gateway_[a-z_]+_in_flight) (\d+)$/.exec(line)
    if (match !== null) out[match[1]] = Number(match[2])
  }
  return out
}

const gauge = async (g: TestGateway, name: string): Promise<number> => {
  const value = (await gauges(g))[name]
  if (value === undefined) throw new Error(`no ${name} in /gateway/metrics`)
  return value
}

/**
 * Nothing left behind by a case: every upstream exchange closed (the gateway aborted what the
 * upstream held open), at most one idle keep-alive connection per upstream (the gateway's pool
 * keeps the connection of an answer read to its end; calls here run one at a time), and no model
 * request left holding a concurrency slot in the gateway.
 */
const expectSettled = async (g: TestGateway) => {
  for (const up of upstreams.values()) {
    await until(() => `${up.wire} upstream exchanges closed (in flight: ${up.inFlight()})`, () => up.inFlight() === 0, 3_000)
    await until(() => `${up.wire} upstream sockets back to idle (open: ${up.openConnections()})`, () => up.openConnections() <= 1, 3_000)
  }
  // no model request holding a slot, and no HTTP request in flight but the metrics request itself
  let last: Record<string, number> = {}
  await until(
    () => `nothing in flight in the gateway (${JSON.stringify(last)})`,
    async () => {
      last = await gauges(g)
      return last.gateway_model_requests_in_flight === 0 && last.gateway_requests_in_flight <= 1
    },
    3_000
  )
}

// ---------------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------------

const matrix = <T>(rows: ReadonlyArray<T>) =>
  PROVIDERS.flatMap((p) => PROTOCOLS.flatMap((protocol) => MODES.flatMap((m) => rows.map((row) => ({ p, provider: p.wire, protocol, ...m, ...row })))))

describe("each fault, each provider wire, each client protocol, stream and not", () => {
  it.each(matrix(FAULTS))("$provider upstream, $protocol $mode: $fault", async ({ p, protocol, stream, fault, failure, afterOutput }) => {
    const up = upstreams.get(p.wire)!
    const seen = up.exchanges.length
    const reply = await call(gw, protocol, modelOf(p, fault), stream)
    expect(reply.ms).toBeLessThan(CLIENT_BOUND_MS)
    if (stream && afterOutput === true) expectFailureEvent(protocol, failure, reply)
    else expectHttpError(protocol, failure, reply)
    // exactly one upstream call (none for the refused connection): no retry of a failed model call
    expect(up.exchanges.slice(seen).map((e) => e.model)).toEqual(fault === "refused" ? [] : [fault])
    await expectSettled(gw)
  })
})

describe("Gemini's streamGenerateContent without alt=sse (one JSON array)", () => {
  const rows = PROVIDERS.flatMap((p) =>
    FAULTS.filter((f) => ["reset", "status-429", "status-529", "bad-json", "mid-reset", "mid-bad-json", "mid-overload"].includes(f.fault)).map((f) => ({ p, provider: p.wire, ...f }))
  )
  it.each(rows)("$provider upstream: $fault", async ({ p, fault, failure, afterOutput }) => {
    const reply = await call(gw, "gemini", modelOf(p, fault), true, true)
    expect(reply.text).not.toContain(UPSTREAM_DETAIL)
    if (afterOutput !== true) expectHttpError("gemini", failure, reply)
    else {
      // spec 6.3: after the first chunk the error object is the array's last element, the array closed
      expect({ status: reply.status, body: reply.text.slice(0, 300) }).toMatchObject({ status: 200 })
      expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
      const array = JSON.parse(reply.text) as Array<Json>
      expect(Array.isArray(array)).toBe(true)
      const last = array[array.length - 1]
      const before = array.slice(0, -1)
      expect(before.flatMap((c) => (c.candidates?.[0]?.content?.parts ?? []).map((part: Json) => part.text ?? "")).join("")).toBe(PARTIAL_TEXT)
      for (const c of before) expect(c.error).toBeUndefined()
      checkEnvelope("gemini", failure, last)
    }
    await expectSettled(gw)
  })
})

describe("a stall past requestTimeoutMs", () => {
  // the stalls run together (they all wait for the deadline), one provider wire at a time
  it.each(PROVIDERS.map((p) => ({ p, provider: p.wire })))("$provider upstream: every protocol and mode, before and after output", async ({ p }) => {
    const up = upstreams.get(p.wire)!
    const cases = PROTOCOLS.flatMap((protocol) => MODES.flatMap((m) => STALLS.map((s) => ({ protocol, ...m, ...s }))))
    const replies = await Promise.all(cases.map((c) => call(fastGw, c.protocol, modelOf(p, c.fault), c.stream)))
    cases.forEach((c, i) => {
      const reply = replies[i]
      const label = `${c.protocol} ${c.stream ? "stream" : "non-stream"} ${c.fault}`
      // ended by the deadline, neither long before it nor long after
      expect(reply.ms, label).toBeGreaterThan(FAST_TIMEOUT_MS - 300)
      expect(reply.ms, label).toBeLessThan(FAST_TIMEOUT_MS + 8_000)
      if (c.stream && c.afterOutput === true) expectFailureEvent(c.protocol, c.failure, reply)
      else expectHttpError(c.protocol, c.failure, reply)
    })
    await expectSettled(fastGw)
    // every held exchange was closed by the gateway, not left to the upstream
    expect(up.exchanges.filter((e) => e.closedAt === undefined)).toEqual([])
  })
})

describe("alias fallback", () => {
  const before = PROVIDERS.flatMap((p) => PROTOCOLS.flatMap((protocol) => MODES.flatMap((m) => FALLBACK_FAULTS.map((fault) => ({ p, provider: p.wire, protocol, ...m, fault })))))
  it.each(before)("$provider upstream, $protocol $mode: $fault before output falls back to the next target", async ({ p, protocol, stream, fault }) => {
    const up = upstreams.get(p.wire)!
    const seen = up.exchanges.length
    const reply = await call(gw, protocol, fallbackAlias(p, fault, protocol, stream ? "stream" : "non-stream"), stream)
    expect(answerText(protocol, stream, reply)).toBe(OUTPUT_TEXT)
    expect(up.exchanges.slice(seen).map((e) => e.model)).toEqual(fault === "refused" ? ["ok"] : [fault, "ok"])
    await expectSettled(gw)
  })

  const after = PROVIDERS.flatMap((p) => PROTOCOLS.flatMap((protocol) => AFTER_OUTPUT_FAULTS.map((fault) => ({ p, provider: p.wire, protocol, fault }))))
  it.each(after)("$provider upstream, $protocol stream: $fault after output does not fall back", async ({ p, protocol, fault }) => {
    const up = upstreams.get(p.wire)!
    const seen = up.exchanges.length
    const reply = await call(gw, protocol, fallbackAlias(p, fault, protocol, "stream"), true)
    expectFailureEvent(protocol, FAULTS.find((f) => f.fault === fault)!.failure, reply)
    expect(up.exchanges.slice(seen).map((e) => e.model)).toEqual([fault])
    await expectSettled(gw)
  })

  const refused = PROVIDERS.flatMap((p) => PROTOCOLS.flatMap((protocol) => MODES.map((m) => ({ p, provider: p.wire, protocol, ...m }))))
  it.each(refused)("$provider upstream, $protocol $mode: a 400 refusal does not fall back", async ({ p, protocol, stream }) => {
    const up = upstreams.get(p.wire)!
    const seen = up.exchanges.length
    const reply = await call(gw, protocol, fallbackAlias(p, "status-400", protocol, stream ? "stream" : "non-stream"), stream)
    expectHttpError(protocol, REFUSED, reply)
    expect(up.exchanges.slice(seen).map((e) => e.model)).toEqual(["status-400"])
    await expectSettled(gw)
  })
})

describe("after every case", () => {
  it("the upstreams' connections all close once idle (nothing kept but the keep-alive pool)", async () => {
    // the fakes' keep-alive timeout is 2 s (so the gateway's pool lets an idle connection go after
    // about 1 s): every socket left now must close by itself, while both gateways still run
    for (const up of upstreams.values()) {
      expect(up.inFlight()).toBe(0)
      await until(() => `${up.wire} upstream sockets at 0 (open: ${up.openConnections()})`, () => up.openConnections() === 0, 5_000)
    }
    expect(await gauge(gw, "gateway_model_requests_in_flight")).toBe(0)
    expect(await gauge(fastGw, "gateway_model_requests_in_flight")).toBe(0)
  })
})
