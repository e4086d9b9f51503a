/**
 * Rate limits and budgets (issue 17) as the official SDKs see them: a refusal surfaces as each
 * SDK's rate-limit error with Retry-After and the x-ratelimit-* headers, a success exposes those
 * headers, and each SDK's retries do what their installed source says:
 *
 * - `openai` and `@anthropic-ai/sdk` (client.js `shouldRetry`): `x-should-retry: false` wins over
 *   the status, so a spent budget is never retried; a 429 without it is retried after
 *   `retry-after` seconds (`retryRequest`), which this gateway sets to 1 for concurrency.
 * - `@google/genai` (`ApiClient.apiCall`): no retries unless `httpOptions.retryOptions` is given;
 *   with it, 408/429/5xx are retried on its own backoff, ignoring Retry-After and x-should-retry.
 *
 * What reached the gateway is read from its own counter (`gateway_requests_total` by route and
 * status on /gateway/metrics); a recording `fetch` gives the SDKs' timing and genai's headers.
 */
import Anthropic, { RateLimitError as AnthropicRateLimitError } from "@anthropic-ai/sdk"
import { ApiError, GoogleGenAI, type HttpRetryOptions } from "@google/genai"
import OpenAI, { RateLimitError } from "openai"
import parsePrometheus from "parse-prometheus-text-format"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { ADMIN, bearer, chat, get, jsonType, pollUntil, sleep } from "./helpers.js"

const OPEN_KEY = "sk-sdk-limits-open-0123456789"
const CAPPED_KEY = "sk-sdk-limits-capped-0123456789"
const BUDGET_KEY = "sk-sdk-limits-budget-0123456789"
const SLOW_KEY = "sk-sdk-limits-slow-0123456789"

const MODEL = "mock/echo"
const GEMINI_MODEL = "gemini-echo"
const hello = [{ role: "user" as const, content: "hello" }]

/** Start a minute window's test with at least `needMs` left in the window (counters are per UTC minute). */
const freshWindow = async (needMs = 8000) => {
  const left = 60_000 - (Date.now() % 60_000)
  if (left < needMs) await sleep(left + 50)
}

/** One request as the SDK's `fetch` saw it. */
interface Attempt {
  readonly sentAt: number
  readonly answeredAt: number
  readonly status: number
  readonly headers: Headers
}

/** A `fetch` for an SDK that records every request it sends and the answer's status and headers. */
const recorder = () => {
  const attempts: Array<Attempt> = []
  const recording = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const sentAt = Date.now()
    const response = await fetch(input, init)
    attempts.push({ sentAt, answeredAt: Date.now(), status: response.status, headers: response.headers })
    return response
  }
  return { attempts, fetch: recording }
}

/** The error a call must be refused with, checked to be of `type`. */
const refusal = async <E>(type: abstract new (...args: never) => E, call: Promise<unknown>): Promise<E> => {
  try {
    await call
  } catch (error) {
    if (error instanceof type) return error
    throw error
  }
  throw new Error(`expected the call to be refused with ${type.name}`)
}

const RESET_DURATION = /^(\d+ms|\d+(\.\d+)?s)$/
const ISO_SECOND = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/

/** The x-ratelimit-* headers of an app with requestsPerMinute `limit` and tokensPerMinute 1,000,000. */
const expectRateLimitHeaders = (headers: Headers, limit: number, remaining?: number) => {
  expect(headers.get("x-ratelimit-limit-requests")).toBe(String(limit))
  const left = Number(headers.get("x-ratelimit-remaining-requests"))
  if (remaining !== undefined) expect(left).toBe(remaining)
  else expect(left).toBeLessThan(limit)
  expect(headers.get("x-ratelimit-reset-requests")).toMatch(RESET_DURATION)
  expect(headers.get("x-ratelimit-limit-tokens")).toBe("1000000")
  expect(headers.get("x-ratelimit-remaining-tokens")).toMatch(/^\d+$/)
  expect(headers.get("x-ratelimit-reset-tokens")).toMatch(RESET_DURATION)
}

/** Retry-After in whole seconds within the minute window. */
const expectMinuteRetryAfter = (headers: Headers) => {
  expect(headers.get("retry-after")).toMatch(/^\d+$/)
  const seconds = Number(headers.get("retry-after"))
  expect(seconds).toBeGreaterThanOrEqual(1)
  expect(seconds).toBeLessThanOrEqual(60)
  expect(headers.get("x-should-retry")).toBeNull()
}

/** A spent day budget: don't retry, and Retry-After runs to the end of the UTC day. */
const expectBudgetHeaders = (headers: Headers) => {
  expect(headers.get("x-should-retry")).toBe("false")
  const midnight = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate() + 1)
  expect(Math.abs(Number(headers.get("retry-after")) - (midnight - Date.now()) / 1000)).toBeLessThan(30)
}

describe("rate limits and budgets through the official SDKs", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: OPEN_KEY, app: "open" },
        { key: CAPPED_KEY, app: "capped" },
        { key: BUDGET_KEY, app: "thrifty" },
        { key: SLOW_KEY, app: "narrow" }
      ],
      providers: { mock: { type: "mock", price: { input: 1, output: 2 } } },
      aliases: { [GEMINI_MODEL]: MODEL },
      apps: {
        open: { limits: { requestsPerMinute: 100, tokensPerMinute: 1_000_000 } },
        capped: { limits: { requestsPerMinute: 1, tokensPerMinute: 1_000_000 } },
        thrifty: { limits: { budgets: [{ tokens: 50, per: "day" }] } },
        narrow: { limits: { concurrency: 1 } }
      }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const openai = (apiKey: string, maxRetries: number, fetch?: ReturnType<typeof recorder>["fetch"]) =>
    new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries, timeout: 10_000, ...(fetch !== undefined ? { fetch } : {}) })
  const anthropic = (apiKey: string, maxRetries: number, fetch?: ReturnType<typeof recorder>["fetch"]) =>
    new Anthropic({ apiKey, baseURL: gw.url, maxRetries, timeout: 10_000, ...(fetch !== undefined ? { fetch } : {}) })
  /** without `retryOptions` the genai SDK's default: no retries */
  const genai = (apiKey: string, fetch?: ReturnType<typeof recorder>["fetch"], retryOptions?: HttpRetryOptions) =>
    new GoogleGenAI({ apiKey, httpOptions: { baseUrl: gw.url, timeout: 10_000, ...(fetch !== undefined ? { fetch } : {}), ...(retryOptions !== undefined ? { retryOptions } : {}) } })

  /** The gateway's own count of its answers on `route`, by status. */
  const answers = async (route: string): Promise<Record<string, number>> => {
    const r = await get(gw, "/gateway/metrics", ADMIN)
    expect(r.status).toBe(200)
    const counted: Record<string, number> = {}
    for (const sample of parsePrometheus(r.text).find((f) => f.name === "gateway_requests_total")?.metrics ?? []) {
      const labels = sample.labels ?? {}
      if (labels.route === route) counted[labels.status] = (counted[labels.status] ?? 0) + Number(sample.value)
    }
    return counted
  }

  /** Run `call` and return what reached the gateway on `route` meanwhile, by status. */
  const reaching = async <A>(route: string, call: () => Promise<A>): Promise<{ readonly outcome: A; readonly reached: Record<string, number> }> => {
    const before = await answers(route)
    const outcome = await call()
    const after = await answers(route)
    const reached: Record<string, number> = {}
    for (const [status, n] of Object.entries(after)) if (n !== (before[status] ?? 0)) reached[status] = n - (before[status] ?? 0)
    return { outcome, reached }
  }

  it("a successful call exposes the rate-limit headers through each SDK", async () => {
    const viaChat = await openai(OPEN_KEY, 0).chat.completions.create({ model: MODEL, messages: hello }).withResponse()
    expect(viaChat.data.choices[0].message.content).toBe("hello")
    expectRateLimitHeaders(viaChat.response.headers, 100)

    const viaResponses = await openai(OPEN_KEY, 0).responses.create({ model: MODEL, input: "hello" }).withResponse()
    expect(viaResponses.data.output_text).toBe("hello")
    expectRateLimitHeaders(viaResponses.response.headers, 100)

    const viaMessages = await anthropic(OPEN_KEY, 0).messages.create({ model: MODEL, max_tokens: 64, messages: hello }).withResponse()
    expect(viaMessages.data.content).toEqual([{ type: "text", text: "hello" }])
    const headers = viaMessages.response.headers
    expectRateLimitHeaders(headers, 100)
    expect(headers.get("anthropic-ratelimit-requests-limit")).toBe("100")
    expect(headers.get("anthropic-ratelimit-requests-remaining")).toBe(headers.get("x-ratelimit-remaining-requests"))
    expect(headers.get("anthropic-ratelimit-requests-reset")).toMatch(ISO_SECOND)
    expect(headers.get("anthropic-ratelimit-tokens-limit")).toBe("1000000")
    expect(headers.get("anthropic-ratelimit-tokens-reset")).toMatch(ISO_SECOND)

    // genai keeps the answer's headers on `sdkHttpResponse`
    const viaGemini = await genai(OPEN_KEY).models.generateContent({ model: GEMINI_MODEL, contents: "hello" })
    expect(viaGemini.text).toBe("hello")
    expectRateLimitHeaders(new Headers(viaGemini.sdkHttpResponse?.headers), 100)
  })

  it("requestsPerMinute: each SDK's rate-limit error carries Retry-After and the headers; genai does not retry by default", async () => {
    await freshWindow()
    expect((await chat(gw, CAPPED_KEY, MODEL)).status).toBe(200)

    const viaChat = await reaching("chat.completions", () =>
      refusal(RateLimitError, openai(CAPPED_KEY, 0).chat.completions.create({ model: MODEL, messages: hello }))
    )
    expect(viaChat.reached).toEqual({ "429": 1 })
    expect(viaChat.outcome).toMatchObject({ status: 429, code: "rate_limit_exceeded", type: "rate_limit_error" })
    expect(viaChat.outcome.message).toContain("app capped: requestsPerMinute")
    expectMinuteRetryAfter(viaChat.outcome.headers)
    expectRateLimitHeaders(viaChat.outcome.headers, 1, 0)

    const viaResponses = await reaching("responses.create", () =>
      refusal(RateLimitError, openai(CAPPED_KEY, 0).responses.create({ model: MODEL, input: "hello" }))
    )
    expect(viaResponses.reached).toEqual({ "429": 1 })
    expect(viaResponses.outcome).toMatchObject({ status: 429, code: "rate_limit_exceeded", type: "rate_limit_error" })
    expectMinuteRetryAfter(viaResponses.outcome.headers)
    expectRateLimitHeaders(viaResponses.outcome.headers, 1, 0)

    const viaMessages = await reaching("messages.create", () =>
      refusal(AnthropicRateLimitError, anthropic(CAPPED_KEY, 0).messages.create({ model: MODEL, max_tokens: 64, messages: hello }))
    )
    expect(viaMessages.reached).toEqual({ "429": 1 })
    expect(viaMessages.outcome).toMatchObject({ status: 429, type: "rate_limit_error", error: { type: "error", error: { type: "rate_limit_error" } } })
    const headers = viaMessages.outcome.headers
    expectMinuteRetryAfter(headers)
    expectRateLimitHeaders(headers, 1, 0)
    expect(headers.get("anthropic-ratelimit-requests-limit")).toBe("1")
    expect(headers.get("anthropic-ratelimit-requests-remaining")).toBe("0")
    expect(headers.get("anthropic-ratelimit-requests-reset")).toMatch(ISO_SECOND)

    // genai's ApiError holds the status and the body (as its message), not the headers: the recording fetch has them
    const seen = recorder()
    const viaGemini = await reaching("gemini.generate_content", () =>
      refusal(ApiError, genai(CAPPED_KEY, seen.fetch).models.generateContent({ model: GEMINI_MODEL, contents: "hello" }))
    )
    expect(viaGemini.reached).toEqual({ "429": 1 })
    expect(viaGemini.outcome.status).toBe(429)
    const body: unknown = JSON.parse(viaGemini.outcome.message)
    expect(body).toMatchObject({ error: { code: 429, status: "RESOURCE_EXHAUSTED" } })
    expect(seen.attempts.map((a) => a.status)).toEqual([429])
    expectMinuteRetryAfter(seen.attempts[0].headers)
    expectRateLimitHeaders(seen.attempts[0].headers, 1, 0)
  }, 30_000)

  it("a spent budget (x-should-retry: false) is not retried by openai or anthropic even with maxRetries 2; genai retries it only when told to", async () => {
    expect((await chat(gw, BUDGET_KEY, MODEL, { messages: [{ role: "user", content: "::usage 40 30\nhello" }] })).status).toBe(200)
    // the spend reaches the counter when the call settles
    expect((await pollUntil(() => chat(gw, BUDGET_KEY, MODEL), (r) => r.status === 429, 5000)).status).toBe(429)

    const viaChat = await reaching("chat.completions", () =>
      refusal(RateLimitError, openai(BUDGET_KEY, 2).chat.completions.create({ model: MODEL, messages: hello }))
    )
    expect(viaChat.reached).toEqual({ "429": 1 })
    expect(viaChat.outcome).toMatchObject({ status: 429, code: "insufficient_quota", type: "insufficient_quota" })
    expectBudgetHeaders(viaChat.outcome.headers)

    const viaResponses = await reaching("responses.create", () =>
      refusal(RateLimitError, openai(BUDGET_KEY, 2).responses.create({ model: MODEL, input: "hello" }))
    )
    expect(viaResponses.reached).toEqual({ "429": 1 })
    expect(viaResponses.outcome).toMatchObject({ status: 429, code: "insufficient_quota" })
    expectBudgetHeaders(viaResponses.outcome.headers)

    const viaMessages = await reaching("messages.create", () =>
      refusal(AnthropicRateLimitError, anthropic(BUDGET_KEY, 2).messages.create({ model: MODEL, max_tokens: 64, messages: hello }))
    )
    expect(viaMessages.reached).toEqual({ "429": 1 })
    expect(viaMessages.outcome.message).toContain("app thrifty: budgets[0] (tokens 50 per day) is spent")
    expectBudgetHeaders(viaMessages.outcome.headers)

    const once = await reaching("gemini.generate_content", () =>
      refusal(ApiError, genai(BUDGET_KEY).models.generateContent({ model: GEMINI_MODEL, contents: "hello" }))
    )
    expect(once.reached).toEqual({ "429": 1 })

    // with retryOptions genai retries every 429 on its own backoff: neither x-should-retry nor a Retry-After of hours stops it
    const seen = recorder()
    const retried = await reaching("gemini.generate_content", () =>
      refusal(ApiError, genai(BUDGET_KEY, seen.fetch, { attempts: 3, initialDelay: 0.05, maxDelay: 0.1 }).models.generateContent({ model: GEMINI_MODEL, contents: "hello" }))
    )
    expect(retried.reached).toEqual({ "429": 3 })
    expect(retried.outcome.status).toBe(429)
    expect(seen.attempts).toHaveLength(3)
    for (const attempt of seen.attempts) expectBudgetHeaders(attempt.headers)
  }, 20_000)

  describe("concurrency: a refusal with Retry-After 1 is retried after that second and succeeds once the slot is free", () => {
    /** Take narrow's only slot with a slow stream (on /v1/responses, so the counted routes see none of it); the result frees it. */
    const holdSlot = async (): Promise<() => Promise<void>> => {
      const controller = new AbortController()
      const held = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { ...bearer(SLOW_KEY), ...jsonType },
        body: JSON.stringify({ model: MODEL, stream: true, input: "::chunks 100\n::delay 100\nslow" }),
        signal: controller.signal
      })
      expect(held.status).toBe(200)
      return async () => {
        controller.abort()
        await held.text().catch(() => undefined)
      }
    }

    /** The SDK's requests: refused until the slot was freed, then one success; each retry waited Retry-After. */
    const expectRetriedAfterRetryAfter = (attempts: ReadonlyArray<Attempt>, reached: Record<string, number>) => {
      expect(attempts.length).toBeGreaterThanOrEqual(2)
      expect(attempts.map((a) => a.status)).toEqual([...attempts.slice(0, -1).map(() => 429), 200])
      expect(reached).toEqual({ "429": attempts.length - 1, "200": 1 })
      for (const refused of attempts.slice(0, -1)) expect(refused.headers.get("retry-after")).toBe("1")
      // the SDK's own first backoff is at most 0.5 s: a wait of a second is Retry-After's
      for (let i = 1; i < attempts.length; i++) expect(attempts[i].sentAt - attempts[i - 1].answeredAt).toBeGreaterThanOrEqual(900)
    }

    it("openai chat completions", async () => {
      const release = await holdSlot()
      const seen = recorder()
      const call = reaching("chat.completions", () => openai(SLOW_KEY, 3, seen.fetch).chat.completions.create({ model: MODEL, messages: hello }))
      await pollUntil(async () => seen.attempts.length, (n) => n >= 1, 10_000)
      await release()
      const { outcome, reached } = await call
      expect(outcome.choices[0].message.content).toBe("hello")
      expectRetriedAfterRetryAfter(seen.attempts, reached)
    }, 20_000)

    it("anthropic messages", async () => {
      const release = await holdSlot()
      const seen = recorder()
      const call = reaching("messages.create", () => anthropic(SLOW_KEY, 3, seen.fetch).messages.create({ model: MODEL, max_tokens: 64, messages: hello }))
      await pollUntil(async () => seen.attempts.length, (n) => n >= 1, 10_000)
      await release()
      const { outcome, reached } = await call
      expect(outcome.content).toEqual([{ type: "text", text: "hello" }])
      expectRetriedAfterRetryAfter(seen.attempts, reached)
    }, 20_000)
  })
})
