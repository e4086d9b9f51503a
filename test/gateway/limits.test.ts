/**
 * Rate limits, concurrency and budgets (issue 17) through the wire of every model protocol: the
 * 429 in the route's envelope naming the limit, Retry-After, the x-ratelimit-* headers (and the
 * anthropic-ratelimit-* ones on Messages), runtime keys' own limits with GET and PATCH, and
 * reservations that never outlive their request (a disconnect, an upstream failure).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { ADMIN, bearer, call, chat, gemini, get, jsonType, messages, parse, pollUntil, postJson, responses, sleep, type Json } from "./helpers.js"

const KEY = "sk-limits-team-0123456789"
const BUDGET_KEY = "sk-limits-budget-0123456789"
const SLOW_KEY = "sk-limits-slow-0123456789"

/** Start a minute window's test with at least `needMs` left in the window (counters are per UTC minute). */
const freshWindow = async (needMs = 8000) => {
  const left = 60_000 - (Date.now() % 60_000)
  if (left < needMs) await sleep(left + 50)
}

const user = (text: string) => ({ messages: [{ role: "user", content: text }] })

describe("rate limits and budgets on the wire", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: KEY, app: "team" },
        { key: BUDGET_KEY, app: "thrifty" },
        { key: SLOW_KEY, app: "narrow" }
      ],
      providers: { mock: { type: "mock", price: { input: 1, output: 2 } } },
      apps: {
        team: { limits: { requestsPerMinute: 3, tokensPerMinute: 1_000_000 } },
        thrifty: { limits: { budgets: [{ tokens: 50, per: "day" }] } },
        narrow: { limits: { concurrency: 1 } }
      }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("counts requests per minute; the 4th is 429 in each protocol's envelope with Retry-After and the rate-limit headers", async () => {
    await freshWindow()
    const seen: Array<string | undefined> = []
    for (let i = 0; i < 3; i++) {
      const r = await chat(gw, KEY, "mock/echo")
      expect(r.status).toBe(200)
      expect(r.headers["x-ratelimit-limit-requests"]).toBe("3")
      expect(r.headers["x-ratelimit-limit-tokens"]).toBe("1000000")
      expect(r.headers["x-ratelimit-reset-requests"]).toMatch(/^(\d+ms|\d+(\.\d+)?s)$/)
      seen.push(r.headers["x-ratelimit-remaining-requests"] as string | undefined)
    }
    expect(seen).toEqual(["2", "1", "0"])

    const refused = await chat(gw, KEY, "mock/echo")
    expect(refused.status).toBe(429)
    const retryAfter = Number(refused.headers["retry-after"])
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(60)
    expect(refused.headers["x-ratelimit-remaining-requests"]).toBe("0")
    const error = parse(refused).error as Json
    expect(error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded", param: null })
    expect(error.message).toContain("app team: requestsPerMinute")

    const viaResponses = await responses(gw, KEY, "mock/echo")
    expect(viaResponses.status).toBe(429)
    expect((parse(viaResponses).error as Json).code).toBe("rate_limit_exceeded")

    const viaMessages = await messages(gw, KEY, "mock/echo")
    expect(viaMessages.status).toBe(429)
    expect(parse(viaMessages)).toMatchObject({ type: "error", error: { type: "rate_limit_error" } })
    expect(viaMessages.headers["retry-after"]).toBeDefined()
    expect(viaMessages.headers["anthropic-ratelimit-requests-limit"]).toBe("3")
    expect(viaMessages.headers["anthropic-ratelimit-requests-remaining"]).toBe("0")
    expect(viaMessages.headers["anthropic-ratelimit-requests-reset"]).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/)

    const viaGemini = await gemini(gw, KEY, "mock/echo")
    expect(viaGemini.status).toBe(429)
    expect(parse(viaGemini)).toMatchObject({ error: { code: 429, status: "RESOURCE_EXHAUSTED" } })
    expect(viaGemini.headers["retry-after"]).toBeDefined()

    // another app is not held back by this one's limit, and sees none of its figures
    const other = await chat(gw, SLOW_KEY, "mock/echo")
    expect(other.status).toBe(200)
    expect(other.headers["x-ratelimit-limit-requests"]).toBeUndefined()
  })

  it("a budget is spent by real usage: admitted while below it, then insufficient_quota until its period ends", async () => {
    const first = await chat(gw, BUDGET_KEY, "mock/echo", user("::usage 40 30\nhello"))
    expect(first.status).toBe(200)
    // the spend reaches the counter when the call settles: the next call finds the budget spent
    const refused = await pollUntil(
      () => chat(gw, BUDGET_KEY, "mock/echo", user("hello")),
      (r) => r.status === 429,
      5000
    )
    const error = parse(refused).error as Json
    expect(error).toMatchObject({ type: "insufficient_quota", code: "insufficient_quota" })
    expect(error.message).toContain("app thrifty: budgets[0] (tokens 50 per day) is spent")
    expect(refused.headers["x-should-retry"]).toBe("false")
    const midnight = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate() + 1)
    const retryAfter = Number(refused.headers["retry-after"])
    expect(Math.abs(retryAfter - (midnight - Date.now()) / 1000)).toBeLessThan(30)
  })

  it("concurrency: a second call while one is in flight is refused with Retry-After 1, then admitted once it ends", async () => {
    const slow = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(SLOW_KEY), ...jsonType },
      body: JSON.stringify({ model: "mock/echo", stream: true, ...user("::chunks 5\n::delay 300\nslow") })
    })
    const started = await slow
    expect(started.status).toBe(200)
    const refused = await chat(gw, SLOW_KEY, "mock/echo")
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBe("1")
    expect((parse(refused).error as Json).message).toContain("app narrow: concurrency")
    await started.text()
    const after = await pollUntil(() => chat(gw, SLOW_KEY, "mock/echo"), (r) => r.status === 200, 5000)
    expect(after.status).toBe(200)
  })

  it("a client that disconnects mid-stream gives its reservation back", async () => {
    const controller = new AbortController()
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(SLOW_KEY), ...jsonType },
      body: JSON.stringify({ model: "mock/echo", stream: true, ...user("::chunks 50\n::delay 200\nslow") }),
      signal: controller.signal
    })
    expect(r.status).toBe(200)
    controller.abort()
    await r.text().catch(() => undefined)
    const after = await pollUntil(() => chat(gw, SLOW_KEY, "mock/echo"), (x) => x.status === 200, 5000)
    expect(after.status).toBe(200)
  })
})

describe("a runtime key's own limits and budgets", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      providers: { mock: { type: "mock", price: { input: 1, output: 2 } } },
      apps: { shop: { limits: { requestsPerMinute: 100 } } }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const admin = (method: string, target: string, body?: unknown) =>
    call(gw, method, target, { headers: { ...bearer(ADMIN), ...(body !== undefined ? jsonType : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) })

  it("is bound by the tighter of its own limits and its app's; GET shows the spend, PATCH changes it at once", async () => {
    await freshWindow()
    const created = await postJson(gw, "/gateway/admin/keys", { app: "shop", limits: { requestsPerMinute: 2 }, budgets: [{ usd: 1, per: "month" }] }, bearer(ADMIN))
    expect(created.status).toBe(201)
    const key = parse(created)
    expect(key).toMatchObject({ app: "shop", limits: { requestsPerMinute: 2 }, budgets: [{ usd: 1, per: "month" }] })
    const secret = key.key as string

    const a = await chat(gw, secret, "mock/echo", user("::usage 1000 500\nhi"))
    expect(a.status).toBe(200)
    // the key's limit is the tighter one: its figures in the headers
    expect(a.headers["x-ratelimit-limit-requests"]).toBe("2")
    expect((await chat(gw, secret, "mock/echo")).status).toBe(200)
    const refused = await chat(gw, secret, "mock/echo")
    expect(refused.status).toBe(429)
    expect((parse(refused).error as Json).message).toContain(`key ${key.id as string}: requestsPerMinute`)

    const shown = await pollUntil(
      async () => parse(await get(gw, `/gateway/admin/keys/${key.id as string}`, ADMIN)),
      (k) => ((k.spend as Array<Json>)[0].used as number) > 0,
      5000
    )
    const spend = (shown.spend as Array<Json>)[0]
    expect(spend).toMatchObject({ usd: 1, per: "month", limit: 1, reserved: 0 })
    // 1000 input at $1/M and 500 output at $2/M, plus the second call's small usage
    expect(spend.used as number).toBeGreaterThanOrEqual(0.002)
    expect(spend.period_end).toMatch(/^\d{4}-\d{2}-01T00:00:00.000Z$/)

    const patched = await admin("PATCH", `/gateway/admin/keys/${key.id as string}`, { limits: { requestsPerMinute: 10 } })
    expect(patched.status).toBe(200)
    expect(parse(patched)).toMatchObject({ limits: { requestsPerMinute: 10 }, budgets: [{ usd: 1, per: "month" }] })
    expect((await chat(gw, secret, "mock/echo")).status).toBe(200)

    const bad = await admin("PATCH", `/gateway/admin/keys/${key.id as string}`, { limits: { requestPerMinute: 10 } })
    expect(bad.status).toBe(400)
    expect(parse(bad)).toMatchObject({ code: "invalid_limits", param: "limits.requestPerMinute" })
    const badBudget = await admin("PATCH", `/gateway/admin/keys/${key.id as string}`, { budgets: [{ usd: 1, per: "year" }] })
    expect(badBudget.status).toBe(400)
    expect(parse(badBudget)).toMatchObject({ code: "invalid_limits", param: "budgets.0.per" })

    // the budget spent: a month budget refuses with insufficient_quota until the month ends
    await admin("PATCH", `/gateway/admin/keys/${key.id as string}`, { budgets: [{ usd: 0.000001, per: "month" }] })
    const spent = await chat(gw, secret, "mock/echo")
    expect(spent.status).toBe(429)
    expect((parse(spent).error as Json).code).toBe("insufficient_quota")
    // cleared: no budget binds it any more
    await admin("PATCH", `/gateway/admin/keys/${key.id as string}`, { budgets: null })
    expect((await chat(gw, secret, "mock/echo")).status).toBe(200)
    expect(parse(await get(gw, `/gateway/admin/keys/${key.id as string}`, ADMIN)).budgets).toBeUndefined()
  })

  it("GET and PATCH of an unknown key are key_not_found", async () => {
    const r = await get(gw, "/gateway/admin/keys/key_0000000000000000", ADMIN)
    expect(r.status).toBe(404)
    expect(parse(r).code).toBe("key_not_found")
  })
})

describe("the budgets of every app and key", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: KEY, app: "team" }],
      providers: { mock: { type: "mock", price: { input: 1, output: 2 } } },
      apps: { team: { limits: { budgets: [{ usd: 5, per: "week" }, { tokens: 1000, per: "total" }] } } }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("GET /gateway/admin/budgets lists each budget with used, reserved, limit and the period's end (admin only)", async () => {
    expect((await chat(gw, KEY, "mock/echo", user("::usage 100 50\nhi"))).status).toBe(200)
    const body = await pollUntil(
      async () => parse(await get(gw, "/gateway/admin/budgets", ADMIN)),
      (b) => (((b.apps as Array<Json>)[0]?.budgets as Array<Json> | undefined)?.[1]?.used as number) === 150,
      5000
    )
    const [week, total] = (body.apps as Array<Json>)[0].budgets as Array<Json>
    expect(week).toMatchObject({ usd: 5, per: "week", limit: 5, used: 0.0002, reserved: 0 })
    expect(new Date(week.period_end as string).getUTCDay()).toBe(1)
    expect(total).toMatchObject({ tokens: 1000, per: "total", limit: 1000, used: 150, reserved: 0, period_end: null })
    expect((await get(gw, "/gateway/admin/budgets", KEY)).status).toBe(403)
  })
})

describe("reservations settle with real usage however a call ends", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: KEY, app: "team" }],
      providers: { mock: { type: "mock" }, dead: { type: "openai", baseUrl: "http://127.0.0.1:1" } },
      aliases: { fallback: { targets: ["dead/model", "mock/echo"] } },
      apps: { team: { limits: { budgets: [{ tokens: 1_000_000, per: "total" }] } } }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const spend = async () => ((parse(await get(gw, "/gateway/admin/budgets", ADMIN)).apps as Array<Json>)[0].budgets as Array<Json>)[0]
  const settledAt = (used: number) => pollUntil(spend, (s) => s.used === used && s.reserved === 0, 5000)

  it("an upstream failure before output takes nothing; after output, what it produced; a fallback, the target that answered", async () => {
    const before = await chat(gw, KEY, "mock/echo", user("::error server_error\nhi"))
    expect(before.status).toBe(502)
    expect(await settledAt(0)).toMatchObject({ used: 0, reserved: 0 })

    const viaFallback = await chat(gw, KEY, "fallback", user("::usage 10 5\nhi"))
    expect(viaFallback.status).toBe(200)
    expect(await settledAt(15)).toMatchObject({ used: 15, reserved: 0 })

    const after = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(KEY), ...jsonType },
      body: JSON.stringify({ model: "mock/echo", stream: true, stream_options: { include_usage: true }, ...user("::usage 20 7\n::error server_error after\nhi") })
    })
    expect(after.status).toBe(200)
    await after.text()
    const settled = await pollUntil(spend, (s) => s.reserved === 0 && (s.used as number) >= 15, 5000)
    // what the failed stream reported before failing is what it took: the mock fails before its usage event, so nothing
    expect(settled.used).toBe(15)
  })
})
