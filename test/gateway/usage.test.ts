import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { driverModule } from "../../src/sql/SqliteClient.js"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import {
  addDays,
  ADMIN,
  bearer,
  call,
  chat,
  dayFromToday,
  expectProblem,
  fullUsage,
  gemini,
  get,
  KEYS,
  messages,
  parse,
  pollUntil,
  responses,
  sleep,
  TOKENS,
  type Json
} from "./helpers.js"

/**
 * `GET /gateway/usage` (spec 2.6, 4.5, 7.1; ARCHITECTURE "Usage record"): one record per model call
 * of every protocol and candidate, totals and per-day per-model breakdowns, filters, who may read
 * what, the problem details of every refusal, the once-a-second batch and the flush at shutdown.
 */

interface Totals {
  readonly requests: number
  readonly errors: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly cacheReadTokens: number
  readonly cacheWriteTokens: number
  readonly reasoningTokens: number
}
interface Percentiles {
  readonly p50: number | null
  readonly p90: number | null
  readonly p99: number | null
}
interface Report {
  readonly from: string
  readonly to: string
  readonly app: string | null
  readonly user: string | null
  readonly totals: Totals & { readonly latencyMs: Percentiles; readonly ttftMs: Percentiles }
  readonly days: ReadonlyArray<{
    readonly day: string
    readonly models: ReadonlyArray<Totals & { readonly model: string; readonly latencyMs: Percentiles }>
    readonly apps: ReadonlyArray<Totals & { readonly app: string }>
  }>
  readonly hours?: ReadonlyArray<Totals & { readonly hour: string }>
  readonly topUsers: ReadonlyArray<Totals & { readonly user: string }>
  readonly session: string | null
  readonly topSessions: ReadonlyArray<Totals & { readonly session: string }>
  readonly agents?: ReadonlyArray<Totals & { readonly agent: string | null; readonly parentAgent: string | null }>
}

const MODEL = "up/fake-model"
const GEM = "up/gem-model"

/** Totals of `ok` successful calls and `errors` failed ones (a failed call has no tokens). */
const expected = (ok: number, errors = 0): Totals => ({
  requests: ok + errors,
  errors,
  inputTokens: ok * TOKENS.input,
  outputTokens: ok * TOKENS.output,
  cacheReadTokens: ok * TOKENS.cacheRead,
  cacheWriteTokens: ok * TOKENS.cacheWrite,
  reasoningTokens: ok * TOKENS.reasoning
})

const totalsOf = (t: Totals): Totals => ({
  requests: t.requests,
  errors: t.errors,
  inputTokens: t.inputTokens,
  outputTokens: t.outputTokens,
  cacheReadTokens: t.cacheReadTokens,
  cacheWriteTokens: t.cacheWriteTokens,
  reasoningTokens: t.reasoningTokens
})

const sum = (list: ReadonlyArray<Totals>): Totals =>
  list.reduce<Totals>(
    (a, t) => ({
      requests: a.requests + t.requests,
      errors: a.errors + t.errors,
      inputTokens: a.inputTokens + t.inputTokens,
      outputTokens: a.outputTokens + t.outputTokens,
      cacheReadTokens: a.cacheReadTokens + t.cacheReadTokens,
      cacheWriteTokens: a.cacheWriteTokens + t.cacheWriteTokens,
      reasoningTokens: a.reasoningTokens + t.reasoningTokens
    }),
    expected(0)
  )

/** A model's totals summed over the days of a report. */
const modelTotals = (report: Report, model: string): Totals => sum(report.days.flatMap((d) => d.models.filter((m) => m.model === model)))
const appTotals = (report: Report, app: string): Totals => sum(report.days.flatMap((d) => d.apps.filter((a) => a.app === app)))

const expectPercentiles = (p: Percentiles) => {
  for (const q of [p.p50, p.p90, p.p99]) {
    expect(typeof q).toBe("number")
    expect(q as number).toBeGreaterThanOrEqual(0)
  }
  expect(p.p50 as number).toBeLessThanOrEqual(p.p90 as number)
  expect(p.p90 as number).toBeLessThanOrEqual(p.p99 as number)
}

const usageDocument = (upstreamUrl: string, extra: Json = {}): Json => ({
  providers: { up: { type: "openai", baseUrl: upstreamUrl, apiKey: "upstream-secret" } },
  adminKey: ADMIN,
  keys: [
    { key: KEYS.alpha, app: "alpha" },
    { key: KEYS.beta, app: "beta" }
  ],
  apps: { alpha: { maxChoices: 3 } },
  ...extra
})

/** A report read with a key, the status checked. */
const report = async (gw: TestGateway, query: string, key: string = ADMIN): Promise<Report> => {
  const r = await get(gw, `/gateway/usage${query}`, key)
  expect(r.status, r.text).toBe(200)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  return parse(r) as unknown as Report
}

const must = async (what: string, answer: Promise<{ readonly status: number; readonly text: string }>, status = 200) => {
  const r = await answer
  if (r.status !== status) throw new Error(`${what}: expected ${status}, got ${r.status}: ${r.text.slice(0, 300)}`)
  return r
}

/** yesterday to tomorrow: every record of the run whatever the clock does around midnight (and hours are listed). */
const WIDE = () => `?from=${dayFromToday(-1)}&to=${dayFromToday(1)}`

// the run below: alpha makes 13 successful calls and 1 failing one; beta one successful call
const ALPHA_OK = 13
const ALPHA_ERRORS = 1
const BETA_OK = 1

describe("usage records of every protocol", () => {
  let upstream: FakeUpstream
  let gw: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
    gw = await startGateway(usageDocument(upstream.url))
    const a = KEYS.alpha
    // chat completions: JSON with the body's `user`; SSE with the header (which wins over the body)
    await must("chat", chat(gw, a, MODEL, { user: "chat-user" }))
    await must("chat stream", chat(gw, a, MODEL, { stream: true, user: "ignored-user" }, { "x-gateway-user": "hdr-user" }))
    // Responses: JSON with the body's `user`, and SSE
    await must("responses", responses(gw, a, MODEL, { user: "resp-user" }))
    await must("responses stream", responses(gw, a, MODEL, { stream: true }))
    // Messages: JSON with metadata.user_id, and SSE
    await must("messages", messages(gw, a, MODEL, { metadata: { user_id: "msg-user" } }))
    await must("messages stream", messages(gw, a, MODEL, { stream: true }))
    // Gemini: JSON (user by header), SSE, three candidates (three calls), two streamed candidates
    await must("gemini", gemini(gw, a, GEM, { headers: { "x-gateway-user": "hdr-user" } }))
    await must("gemini stream", gemini(gw, a, GEM, { stream: true }))
    await must("gemini 3 candidates", gemini(gw, a, GEM, { body: { generationConfig: { candidateCount: 3 } } }))
    await must("gemini 2 streamed candidates", gemini(gw, a, GEM, { stream: true, body: { generationConfig: { candidateCount: 2 } } }))
    // one failing upstream call
    upstream.script({ kind: "json", status: 500, body: { error: { message: "upstream exploded", type: "server_error" } } })
    await must("failing chat", chat(gw, a, MODEL), 502)
    // another app
    await must("beta chat", chat(gw, KEYS.beta, MODEL, { user: "beta-user" }))
  })

  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("records appear within the batch interval: one record per model call, per candidate, failures included", async () => {
    const all = await pollUntil(
      () => report(gw, WIDE()),
      (r) => r.totals.requests >= ALPHA_OK + ALPHA_ERRORS + BETA_OK,
      3000
    )
    expect(totalsOf(all.totals)).toEqual(expected(ALPHA_OK + BETA_OK, ALPHA_ERRORS))
    expect(all.app).toBeNull()
    expect(all.user).toBeNull()
    expect(all.from).toBe(dayFromToday(-1))
    expect(all.to).toBe(dayFromToday(1))
  })

  it("totals carry every token kind of the upstream usage and latency and TTFT percentiles", async () => {
    const r = await report(gw, WIDE())
    expect(r.totals.inputTokens).toBe((ALPHA_OK + BETA_OK) * 100)
    expect(r.totals.cacheReadTokens).toBe((ALPHA_OK + BETA_OK) * 30)
    expect(r.totals.cacheWriteTokens).toBe((ALPHA_OK + BETA_OK) * 7)
    expect(r.totals.reasoningTokens).toBe((ALPHA_OK + BETA_OK) * 5)
    expect(r.totals.outputTokens).toBe((ALPHA_OK + BETA_OK) * 20)
    expectPercentiles(r.totals.latencyMs)
    // streamed calls have a time to first token
    expectPercentiles(r.totals.ttftMs)
  })

  it("breaks totals down per day and model (the failure counted on the requested model) and per app", async () => {
    const r = await report(gw, WIDE())
    expect(r.days.length).toBeGreaterThanOrEqual(1)
    for (const d of r.days) {
      expect(d.day).toMatch(/^\d{4}-\d{2}-\d{2}$/)
      expect(d.day >= dayFromToday(-1) && d.day <= dayFromToday(1)).toBe(true)
      for (const m of d.models) expectPercentiles(m.latencyMs)
    }
    const models = new Set(r.days.flatMap((d) => d.models.map((m) => m.model)))
    expect([...models].sort()).toEqual([MODEL, GEM])
    // chat x2, responses x2, messages x2, the failure (alpha) and beta's chat
    expect(modelTotals(r, MODEL)).toEqual(expected(7, 1))
    // generateContent, a stream, three candidates, two streamed candidates
    expect(modelTotals(r, GEM)).toEqual(expected(7))
    expect(appTotals(r, "alpha")).toEqual(expected(ALPHA_OK, ALPHA_ERRORS))
    expect(appTotals(r, "beta")).toEqual(expected(BETA_OK))
    // each day's breakdowns add up to the totals
    expect(sum(r.days.flatMap((d) => d.models))).toEqual(totalsOf(r.totals))
    expect(sum(r.days.flatMap((d) => d.apps))).toEqual(totalsOf(r.totals))
  })

  it("lists hourly totals for a short range (and none past 7 days)", async () => {
    const r = await report(gw, WIDE())
    expect(r.hours).toBeDefined()
    const hours = r.hours ?? []
    for (const h of hours) expect(h.hour).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}$/)
    expect(hours.map((h) => h.hour)).toEqual([...hours.map((h) => h.hour)].sort())
    expect(sum(hours)).toEqual(totalsOf(r.totals))
    const long = await report(gw, `?from=${dayFromToday(-20)}&to=${dayFromToday(1)}`)
    expect(long.hours).toBeUndefined()
    expect(long.totals.requests).toBe(r.totals.requests)
  })

  it("top users: x-gateway-user (over the body), chat and Responses user, Messages metadata.user_id", async () => {
    const r = await report(gw, WIDE())
    expect(r.topUsers[0].user).toBe("hdr-user")
    expect(totalsOf(r.topUsers[0])).toEqual(expected(2))
    expect(r.topUsers.map((u) => u.user).sort()).toEqual(["beta-user", "chat-user", "hdr-user", "msg-user", "resp-user"])
    for (const u of r.topUsers.slice(1)) expect(totalsOf(u)).toEqual(expected(1))
  })

  it("filters by app and user (admin)", async () => {
    const beta = await report(gw, `${WIDE()}&app=beta`)
    expect(beta.app).toBe("beta")
    expect(totalsOf(beta.totals)).toEqual(expected(BETA_OK))
    expect(beta.topUsers.map((u) => u.user)).toEqual(["beta-user"])
    expect(beta.days.flatMap((d) => d.apps.map((a) => a.app))).toEqual(beta.days.map(() => "beta"))

    const hdr = await report(gw, `${WIDE()}&user=hdr-user`)
    expect(hdr.user).toBe("hdr-user")
    expect(totalsOf(hdr.totals)).toEqual(expected(2))
    // one chat stream, one Gemini call
    expect(modelTotals(hdr, MODEL)).toEqual(expected(1))
    expect(modelTotals(hdr, GEM)).toEqual(expected(1))

    const both = await report(gw, `${WIDE()}&app=alpha&user=msg-user`)
    expect(totalsOf(both.totals)).toEqual(expected(1))
    const none = await report(gw, `${WIDE()}&app=alpha&user=beta-user`)
    expect(totalsOf(none.totals)).toEqual(expected(0))
    expect(none.days).toEqual([])
    expect(none.topUsers).toEqual([])
    expect(none.totals.latencyMs).toEqual({ p50: null, p90: null, p99: null })
  })

  it("filters by from and to", async () => {
    const all = await report(gw, WIDE())
    const days = all.days.map((d) => d.day).sort()
    const first = days[0]
    const last = days[days.length - 1]
    const exact = await report(gw, `?from=${first}&to=${last}`)
    expect(totalsOf(exact.totals)).toEqual(totalsOf(all.totals))
    // before the first day (from defaults to 29 days before to)
    const before = await report(gw, `?to=${addDays(first, -1)}`)
    expect(before.to).toBe(addDays(first, -1))
    expect(before.from).toBe(addDays(first, -30))
    expect(before.totals.requests).toBe(0)
    const after = await report(gw, `?from=${addDays(last, 1)}&to=${addDays(last, 2)}`)
    expect(after.totals.requests).toBe(0)
    const old = await report(gw, "?from=2020-01-01&to=2020-12-31")
    expect(old.totals.requests).toBe(0)
    // the default range: the 30 days up to today
    const dflt = await report(gw, "")
    expect(dflt.to).toBe(dayFromToday(0))
    expect(dflt.from).toBe(addDays(dayFromToday(0), -29))
  })

  it("the admin reads every app; an app key reads its own app only (omitting app gives its own)", async () => {
    const admin = await report(gw, WIDE())
    expect(admin.days.flatMap((d) => d.apps.map((a) => a.app)).sort()).toEqual(expect.arrayContaining(["alpha", "beta"]))
    const adminAlpha = await report(gw, `${WIDE()}&app=alpha`)
    expect(totalsOf(adminAlpha.totals)).toEqual(expected(ALPHA_OK, ALPHA_ERRORS))

    const own = await report(gw, WIDE(), KEYS.alpha)
    expect(own.app).toBe("alpha")
    expect(totalsOf(own.totals)).toEqual(expected(ALPHA_OK, ALPHA_ERRORS))
    expect(new Set(own.days.flatMap((d) => d.apps.map((a) => a.app)))).toEqual(new Set(["alpha"]))
    expect(own.topUsers.map((u) => u.user)).not.toContain("beta-user")
    const named = await report(gw, `${WIDE()}&app=alpha`, KEYS.alpha)
    expect(totalsOf(named.totals)).toEqual(totalsOf(own.totals))

    const betaOwn = await report(gw, WIDE(), KEYS.beta)
    expect(betaOwn.app).toBe("beta")
    expect(totalsOf(betaOwn.totals)).toEqual(expected(BETA_OK))

    for (const [key, other] of [
      [KEYS.alpha, "beta"],
      [KEYS.beta, "alpha"]
    ] as const) {
      const target = `/gateway/usage?app=${other}`
      expectProblem(await get(gw, target, key), 403, "app_forbidden", { instance: target, param: "app", secrets: [key] })
    }
  })
})

describe("usage refusals as problem details", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(usageDocument("http://127.0.0.1:9/v1"))
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("invalid_api_key: no key, a wrong key, another scheme, a key in the query", async () => {
    expectProblem(await get(gw, "/gateway/usage"), 401, "invalid_api_key", { instance: "/gateway/usage" })
    const wrong = "sk-wrong-0123456789"
    expectProblem(await get(gw, "/gateway/usage?app=alpha", wrong), 401, "invalid_api_key", { instance: "/gateway/usage?app=alpha", secrets: [wrong] })
    expectProblem(await get(gw, "/gateway/usage", undefined, { authorization: `Basic ${KEYS.alpha}` }), 401, "invalid_api_key", {
      instance: "/gateway/usage",
      secrets: [KEYS.alpha]
    })
    expectProblem(await get(gw, `/gateway/usage?key=${KEYS.alpha}`), 401, "invalid_api_key", { instance: `/gateway/usage?key=${KEYS.alpha}` })
    // a model-route spelling of the key is not read here
    expectProblem(await get(gw, "/gateway/usage", undefined, { "x-api-key": KEYS.alpha }), 401, "invalid_api_key", { instance: "/gateway/usage" })
  })

  it("invalid_date names from or to for bad formats and dates that do not exist", async () => {
    const bad = [
      "2026-02-30",
      "2025-02-29",
      "2026-04-31",
      "2026-13-01",
      "2026-00-10",
      "2026-01-00",
      "2026-1-01",
      "2026-01-1",
      "20260101",
      "2026/01/01",
      "2026-01-01T00:00:00Z",
      "today",
      "%202026-01-01",
      "2026-01-01%20",
      "+2026-01-01",
      "02026-01-01"
    ]
    for (const value of bad) {
      for (const param of ["from", "to"] as const) {
        const other = param === "from" ? "to=2026-03-01" : "from=2026-01-01"
        const target = `/gateway/usage?${param}=${value}&${other}`
        expectProblem(await get(gw, target, ADMIN), 400, "invalid_date", { instance: target, param })
      }
    }
    // a real leap day is a date
    expect((await get(gw, "/gateway/usage?from=2024-02-29&to=2024-02-29", ADMIN)).status).toBe(200)
    // the app key gets the same answer
    const target = "/gateway/usage?to=2026-02-30"
    expectProblem(await get(gw, target, KEYS.alpha), 400, "invalid_date", { instance: target, param: "to" })
  })

  it("invalid_range when from is after to; range_too_long past 366 days (366 is fine)", async () => {
    for (const target of ["/gateway/usage?from=2026-03-02&to=2026-03-01", "/gateway/usage?from=2026-01-01&to=2025-12-31"]) {
      expectProblem(await get(gw, target, ADMIN), 400, "invalid_range", { instance: target })
    }
    // from in the future, to defaulting to today
    const future = `/gateway/usage?from=${dayFromToday(3)}`
    expectProblem(await get(gw, future, ADMIN), 400, "invalid_range", { instance: future })
    for (const target of [
      "/gateway/usage?from=2024-01-01&to=2025-01-01", // 367 days, leap year
      "/gateway/usage?from=2025-01-01&to=2026-01-02", // 367 days
      "/gateway/usage?from=2020-01-01&to=2026-01-01",
      "/gateway/usage?from=2020-01-01" // to defaults to today
    ]) {
      expectProblem(await get(gw, target, ADMIN), 400, "range_too_long", { instance: target })
    }
    for (const query of ["?from=2024-01-01&to=2024-12-31", "?from=2025-01-01&to=2026-01-01", "?from=2026-05-05&to=2026-05-05"]) {
      const r = await get(gw, `/gateway/usage${query}`, ADMIN)
      expect(r.status, `${query}: ${r.text}`).toBe(200)
    }
  })

  it("invalid_app for an app that has no key in the configuration", async () => {
    for (const app of ["gamma", "ALPHA", "alpha%20", "default", ""]) {
      const target = `/gateway/usage?app=${app}`
      expectProblem(await get(gw, target, ADMIN), 400, "invalid_app", { instance: target, param: "app" })
    }
  })

  it("invalid_user for a user filter outside 1 to 64 of A-Z a-z 0-9 . _ @ : -", async () => {
    for (const user of ["bad%20user", "a".repeat(65), "", "x%2Fy", "%C3%A9", "a+b", "<script>"]) {
      const target = `/gateway/usage?user=${user}`
      expectProblem(await get(gw, target, ADMIN), 400, "invalid_user", { instance: target, param: "user" })
    }
    for (const user of ["a".repeat(64), "A.b_c@d:e-9", "x"]) {
      const r = await get(gw, `/gateway/usage?user=${user}`, ADMIN)
      expect(r.status, r.text).toBe(200)
      expect((parse(r) as unknown as Report).user).toBe(user)
    }
  })

  it("method_not_allowed for other methods, not_found beside the path", async () => {
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const r = await call(gw, method, "/gateway/usage?app=alpha", { headers: { ...bearer(ADMIN), "content-type": "application/json" }, body: "{}" })
      expectProblem(r, 405, "method_not_allowed", { instance: "/gateway/usage?app=alpha", param: "any" })
      expect(r.headers.allow).toBe("GET, HEAD")
    }
    for (const target of ["/gateway/usage/", "/gateway/usage/alpha", "/gateway/usages", "/gateway/Usage"]) {
      expectProblem(await get(gw, target, ADMIN), 404, "not_found", { instance: target })
    }
    const head = await call(gw, "HEAD", "/gateway/usage", { headers: bearer(ADMIN) })
    expect(head.status).toBe(200)
    expect(head.text).toBe("")
  })
})

describe("where the user of a record comes from", () => {
  let upstream: FakeUpstream
  let gw: TestGateway
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
    gw = await startGateway(usageDocument(upstream.url))
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("a user outside the filter's format is not recorded (the call still is)", async () => {
    await must("bad header user", chat(gw, KEYS.beta, MODEL, {}, { "x-gateway-user": "not a user!" }))
    await must("long metadata user", messages(gw, KEYS.beta, MODEL, { metadata: { user_id: "u".repeat(65) } }))
    const r = await report(gw, `${WIDE()}&app=beta`)
    expect(r.totals.requests).toBe(2)
    expect(r.topUsers).toEqual([])
  })

  it("safety_identifier names the user on chat completions and on Responses (ARCHITECTURE: user, metadata.user_id, safety_identifier)", async () => {
    await must("chat", chat(gw, KEYS.alpha, MODEL, { safety_identifier: "chat-safe" }))
    await must("responses", responses(gw, KEYS.alpha, MODEL, { safety_identifier: "resp-safe" }))
    const r = await report(gw, `${WIDE()}&app=alpha`)
    expect(r.totals.requests).toBe(2)
    expect(r.topUsers.map((u) => u.user).sort()).toEqual(["chat-safe", "resp-safe"])
  })

  it("Claude Code's JSON metadata.user_id names the user by its account (else device), never failing the user format", async () => {
    const userId = JSON.stringify({ device_id: "dev-1234", account_uuid: "acc-5678", session_id: "sess-1" })
    await must("messages json user", messages(gw, KEYS.alpha, MODEL, { metadata: { user_id: userId } }))
    await must("messages json device", messages(gw, KEYS.alpha, MODEL, { metadata: { user_id: JSON.stringify({ device_id: "dev-1234", session_id: "sess-2" }) } }))
    const r = await report(gw, `${WIDE()}&app=alpha`)
    expect(r.topUsers.map((u) => u.user)).toEqual(expect.arrayContaining(["acc-5678", "dev-1234"]))
  })
})

// ---------------------------------------------------------------------------------------------
// The batch and the shutdown flush, read from the database itself (a report flushes first)
// ---------------------------------------------------------------------------------------------

interface Statement {
  get(...params: Array<unknown>): unknown
}
interface Sqlite {
  prepare(sql: string): Statement
  close(): void
}
const Database = createRequire(import.meta.url)(driverModule(Number(process.versions.napi))) as new (file: string, options: { readonly fileMustExist: boolean; readonly timeout: number }) => Sqlite

/** Usage rows in the database (its own connection: reading never flushes the gateway's batch). */
const rowsOf = (dataDir: string): number => {
  const db = new Database(path.join(dataDir, "gateway.db"), { fileMustExist: true, timeout: 2000 })
  try {
    return (db.prepare("SELECT COUNT(*) AS n FROM usage").get() as { n: number }).n
  } finally {
    db.close()
  }
}

describe("batched writes and the flush at shutdown", () => {
  let upstream: FakeUpstream
  const dirs: Array<string> = []
  const gateways: Array<TestGateway> = []
  const dataDir = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-usage-"))
    dirs.push(dir)
    return dir
  }
  const start = async (dir: string, extra: Json = {}) => {
    const gw = await startGateway(usageDocument(upstream.url, extra), { dataDir: dir })
    gateways.push(gw)
    return gw
  }

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
  })
  afterAll(async () => {
    for (const gw of gateways) await gw.close()
    await upstream?.close()
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
  })

  it("a record reaches the database within about a second, without anyone reading usage", async () => {
    const dir = dataDir()
    const gw = await start(dir)
    await must("chat", chat(gw, KEYS.alpha, MODEL))
    // the one-second flush interval is checked on TestClock in test/services/usage/Usage.test.ts; here a
    // generous backstop only (a busy machine may run the flush late)
    const t0 = Date.now()
    const rows = await pollUntil(async () => rowsOf(dir), (n) => n >= 1, 10_000, 20)
    expect(rows).toBe(1)
    expect(Date.now() - t0).toBeLessThan(10_000)
    await gw.close()
  })

  it("usage rows carry the client's session, agent and parent agent (Claude Code and Codex headers, Claude Code's JSON user_id)", async () => {
    const dir = dataDir()
    const gw = await start(dir)
    const userId = JSON.stringify({ device_id: "dev-1", account_uuid: "acc-1", session_id: "cc-sess" })
    await must("claude code main", messages(gw, KEYS.alpha, MODEL, { metadata: { user_id: userId } }, { "x-claude-code-session-id": "cc-sess" }))
    await must(
      "claude code subagent",
      messages(gw, KEYS.alpha, MODEL, { metadata: { user_id: userId }, stream: true }, { "x-claude-code-session-id": "cc-sess", "x-claude-code-agent-id": "agent-sub", "x-claude-code-parent-agent-id": "agent-main" })
    )
    await must("codex", responses(gw, KEYS.alpha, MODEL, {}, { "session-id": "codex-sess", "thread-id": "codex-thread" }))
    await must("older codex", chat(gw, KEYS.alpha, MODEL, {}, { conversation_id: "old-conv" }))
    await must("no session", chat(gw, KEYS.alpha, MODEL, {}, { "x-claude-code-session-id": "x".repeat(500) }))
    await must("beta, same session id", chat(gw, KEYS.beta, MODEL, {}, { "x-claude-code-session-id": "cc-sess" }))

    // one session's totals, its agents listed: the main agent (no agent id) and its subagent
    const session = await pollUntil(
      () => report(gw, `${WIDE()}&session=cc-sess`),
      (r) => r.totals.requests >= 3,
      10_000,
      20
    )
    expect(session.session).toBe("cc-sess")
    expect(totalsOf(session.totals)).toEqual(expected(3))
    expect(session.agents?.map(({ agent, parentAgent, requests }) => ({ agent, parentAgent, requests }))).toEqual([
      { agent: null, parentAgent: null, requests: 2 },
      { agent: "agent-sub", parentAgent: "agent-main", requests: 1 }
    ])
    // an app key reads only its own app's part of a session id
    const own = await report(gw, `${WIDE()}&session=cc-sess`, KEYS.beta)
    expect(own.totals.requests).toBe(1)
    expect(own.agents?.map(({ agent, parentAgent, ...totals }) => ({ agent, parentAgent, totals: totalsOf(totals) }))).toEqual([{ agent: null, parentAgent: null, totals: expected(1) }])
    expect((await report(gw, `${WIDE()}&session=codex-sess`, KEYS.beta)).totals.requests).toBe(0)
    // top sessions, most requests first
    const wide = await report(gw, WIDE(), KEYS.alpha)
    expect(wide.topSessions.map((t) => [t.session, t.requests])).toEqual([
      ["cc-sess", 2],
      ["codex-sess", 1],
      ["old-conv", 1]
    ])
    expect(wide.agents).toBeUndefined()
    // a session id no client could have sent is refused, naming the parameter
    for (const bad of ["has space", "x".repeat(129), ""]) {
      const target = `/gateway/usage?session=${encodeURIComponent(bad)}`
      expectProblem(await get(gw, target, ADMIN), 400, "invalid_session", { instance: target, param: "session" })
    }
    await gw.close()
    const db = new Database(path.join(dir, "gateway.db"), { fileMustExist: true, timeout: 2000 })
    try {
      const rows = (db.prepare(`SELECT protocol, "user", client_session, agent, parent_agent FROM usage ORDER BY id`) as unknown as { all(): Array<Record<string, unknown>> }).all()
      expect(rows).toEqual([
        { protocol: "messages", user: "acc-1", client_session: "cc-sess", agent: null, parent_agent: null },
        { protocol: "messages", user: "acc-1", client_session: "cc-sess", agent: "agent-sub", parent_agent: "agent-main" },
        { protocol: "openai", user: null, client_session: "codex-sess", agent: null, parent_agent: null },
        { protocol: "openai", user: null, client_session: "old-conv", agent: null, parent_agent: null },
        // an id over the bound is ignored, the call still recorded
        { protocol: "openai", user: null, client_session: null, agent: null, parent_agent: null },
        { protocol: "openai", user: null, client_session: "cc-sess", agent: null, parent_agent: null }
      ])
    } finally {
      db.close()
    }
  })

  it("records of the last second are written at a clean shutdown and survive a restart", async () => {
    const dir = dataDir()
    const gw = await start(dir)
    await must("chat", chat(gw, KEYS.alpha, MODEL, { user: "before" }))
    // a batch was just written: the next one is about a second away
    expect(await pollUntil(async () => rowsOf(dir), (n) => n >= 1, 3000, 5)).toBe(1)
    await must("chat stream", chat(gw, KEYS.alpha, MODEL, { stream: true, user: "last-second" }))
    await must("gemini", gemini(gw, KEYS.beta, GEM, { headers: { "x-gateway-user": "last-second" } }))
    // still in memory
    expect(rowsOf(dir)).toBe(1)
    await gw.close()
    expect(rowsOf(dir)).toBe(3)

    const again = await start(dir)
    const r = await report(again, WIDE())
    expect(totalsOf(r.totals)).toEqual(expected(3))
    expect(appTotals(r, "alpha")).toEqual(expected(2))
    expect(appTotals(r, "beta")).toEqual(expected(1))
    expect(r.topUsers.map((u) => [u.user, u.requests])).toEqual([
      ["last-second", 2],
      ["before", 1]
    ])
    // and it keeps counting after the restart
    await must("chat after restart", chat(again, KEYS.alpha, MODEL))
    const after = await report(again, WIDE())
    expect(totalsOf(after.totals)).toEqual(expected(4))
    await again.close()
  })

  it("usage.enabled false: /gateway/usage is not_found for everyone and nothing is recorded", async () => {
    const dir = dataDir()
    const gw = await start(dir, { usage: { enabled: false } })
    await must("chat", chat(gw, KEYS.alpha, MODEL))
    for (const key of [ADMIN, KEYS.alpha, undefined]) {
      const target = "/gateway/usage?app=alpha"
      expectProblem(await get(gw, target, key), 404, "not_found", { instance: target })
    }
    await sleep(1200)
    expect(rowsOf(dir)).toBe(0)
    await gw.close()
    expect(rowsOf(dir)).toBe(0)
  })
})
