/**
 * Accounting of the host tool loop (issue 25, "Accounting"): every model call of the loop is a
 * usage record with its own session id (those of `x-gateway-session`), admitted and settled under
 * the app's rate limits and budgets like any call; host tool calls are counted per app in
 * `/gateway/usage` (`hostTools`), which another app's key cannot read. The host tool is
 * server-everything's `echo`, over stdio.
 */
import { createRequire } from "node:module"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { driverModule } from "../../src/sql/SqliteClient.js"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import type { RawReply } from "../support/RawHttp.js"
import { ADMIN, bearer, chat, gemini, get, messages, parse, postJson, responses, sleep, type Json } from "../gateway/helpers.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const MODEL = "up/m"

const KEYS = {
  teamA: "sk-acct-team-a-0123456789",
  teamB: "sk-acct-team-b-0123456789",
  paced: "sk-acct-paced-0123456789"
} as const
const APPS = { teamA: "team-a", teamB: "team-b", paced: "paced" } as const

const hostTools = ["everything/echo"]

const echoCall = (id: string, message: string) => ({ id, name: "everything__echo", arguments: JSON.stringify({ message }) })

/** The events of an SSE body: `event` (absent for data-only frames) and the data parsed. */
const sseEvents = (body: string): ReadonlyArray<{ readonly event?: string; readonly data: Json }> =>
  body
    .split(/\r?\n\r?\n/)
    .map((block) => {
      const lines = block.split(/\r?\n/)
      const event = lines.find((l) => l.startsWith("event: "))?.slice(7)
      const data = lines.find((l) => l.startsWith("data: "))?.slice(6)
      return data === undefined || data === "[DONE]" ? undefined : { ...(event !== undefined ? { event } : {}), data: JSON.parse(data) as Json }
    })
    .filter((e) => e !== undefined)

/** A stream's text and its last event (data). */
interface Read {
  readonly text: string
  readonly last: Json
}

const lastOf = (events: ReadonlyArray<{ readonly data: Json }>): Json => events[events.length - 1].data

interface BudgetCase {
  readonly protocol: string
  readonly stream: boolean
  readonly app: string
  readonly key: string
  readonly send: (gw: TestGateway, key: string) => Promise<RawReply>
  /** the text of a stream and its last event */
  readonly read: (body: string) => Read
  /** checks the whole answer's body, or the stream's last event */
  readonly failure: (last: Json) => void
}

const chatRead = (body: string): Read => {
  const events = sseEvents(body)
  const text = events.map((e) => ((e.data.choices as Array<{ delta?: { content?: string } }> | undefined)?.[0]?.delta?.content ?? "")).join("")
  return { text, last: lastOf(events) }
}
const messagesRead = (body: string): Read => {
  const events = sseEvents(body)
  const text = events.map((e) => (e.event === "content_block_delta" ? ((e.data.delta as { text?: string }).text ?? "") : "")).join("")
  expect(events[events.length - 1].event).toBe("error")
  return { text, last: lastOf(events) }
}
const responsesRead = (body: string): Read => {
  const events = sseEvents(body)
  const text = events.map((e) => (e.event === "response.output_text.delta" ? (e.data.delta as string) : "")).join("")
  return { text, last: lastOf(events) }
}
const geminiRead = (body: string): Read => {
  const events = sseEvents(body)
  const text = events
    .map((e) => ((e.data.candidates as Array<{ content?: { parts?: Array<{ text?: string }> } }> | undefined)?.[0]?.content?.parts ?? []).map((p) => p.text ?? "").join(""))
    .join("")
  return { text, last: lastOf(events) }
}

const openAiFailure = (body: Json) => expect(body.error).toMatchObject({ type: "insufficient_quota", code: "insufficient_quota" })
const messagesFailure = (body: Json) => expect(body).toMatchObject({ type: "error", error: { type: "rate_limit_error" } })
const responsesStreamFailure = (last: Json) => expect(last).toMatchObject({ type: "response.failed", response: { status: "failed", error: { code: "insufficient_quota" } } })
const geminiFailure = (body: Json) => expect(body).toMatchObject({ error: { code: 429, status: "RESOURCE_EXHAUSTED" } })
const wholeOnly = (): Read => {
  throw new Error("a whole answer")
}

const budgetCase = (protocol: string, stream: boolean, send: BudgetCase["send"], read: BudgetCase["read"], failure: BudgetCase["failure"]): BudgetCase => {
  const app = `budget-${protocol}${stream ? "-stream" : ""}`
  return { protocol, stream, app, key: `sk-acct-${app}-0123456789`, send, read, failure }
}

/** One app per case, each with a day's token budget that one round of 40 + 30 tokens spends. */
const BUDGET_CASES: ReadonlyArray<BudgetCase> = [
  budgetCase("chat", false, (gw, key) => chat(gw, key, MODEL), wholeOnly, openAiFailure),
  budgetCase("chat", true, (gw, key) => chat(gw, key, MODEL, { stream: true }), chatRead, openAiFailure),
  budgetCase("responses", false, (gw, key) => responses(gw, key, MODEL), wholeOnly, openAiFailure),
  budgetCase("responses", true, (gw, key) => responses(gw, key, MODEL, { stream: true }), responsesRead, responsesStreamFailure),
  budgetCase("messages", false, (gw, key) => messages(gw, key, MODEL), wholeOnly, messagesFailure),
  budgetCase("messages", true, (gw, key) => messages(gw, key, MODEL, { stream: true }), messagesRead, messagesFailure),
  budgetCase("gemini", false, (gw, key) => gemini(gw, key, MODEL), wholeOnly, geminiFailure),
  budgetCase("gemini", true, (gw, key) => gemini(gw, key, MODEL, { stream: true }), geminiRead, geminiFailure)
]

/** Start a minute window's test with at least `needMs` left in the window (request counters are per UTC minute). */
const freshWindow = async (needMs = 10_000) => {
  const left = 60_000 - (Date.now() % 60_000)
  if (left < needMs) await sleep(left + 50)
}

interface Statement {
  all(...params: Array<unknown>): Array<unknown>
}
interface Sqlite {
  prepare(sql: string): Statement
  close(): void
}
const Database = createRequire(import.meta.url)(driverModule(Number(process.versions.napi))) as new (file: string, options: { readonly fileMustExist: boolean; readonly readonly: boolean }) => Sqlite

interface UsageRow {
  readonly session_id: string
  readonly app: string
  readonly status: string
  readonly input_tokens: number
  readonly output_tokens: number
}

/** The usage rows of an app, read from the database itself (after a report, which flushes first). */
const usageRows = (dataDir: string, app: string): ReadonlyArray<UsageRow> => {
  const db = new Database(path.join(dataDir, "gateway.db"), { fileMustExist: true, readonly: true })
  try {
    return db.prepare("SELECT session_id, app, status, input_tokens, output_tokens FROM usage WHERE app = ? ORDER BY id").all(app) as ReadonlyArray<UsageRow>
  } finally {
    db.close()
  }
}

const report = async (gw: TestGateway, key: string, query = "") => {
  const r = await get(gw, `/gateway/usage${query}`, key)
  expect(r.status, r.text).toBe(200)
  return parse(r)
}

describe("host tool loop: accounting", () => {
  let upstream: FakeUpstream
  let gw: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: KEYS.teamA, app: APPS.teamA },
        { key: KEYS.teamB, app: APPS.teamB },
        { key: KEYS.paced, app: APPS.paced },
        ...BUDGET_CASES.map((c) => ({ key: c.key, app: c.app }))
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] } },
      apps: {
        [APPS.teamA]: { hostTools },
        [APPS.paced]: { hostTools, limits: { requestsPerMinute: 3 } },
        ...Object.fromEntries(BUDGET_CASES.map((c) => [c.app, { hostTools, limits: { budgets: [{ tokens: 50, per: "day" }] } }]))
      }
    })
  }, 60_000)
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("a request with one host call makes two usage records, one per model call, each with its session id and tokens", async () => {
    upstream.script(
      chatJson({ toolCalls: [echoCall("c1", "ping")], usage: { prompt: 11, completion: 7 } }),
      chatJson({ content: "pong it said", usage: { prompt: 23, completion: 5 } })
    )
    const r = await chat(gw, KEYS.teamA, MODEL)
    expect(r.status, r.text).toBe(200)
    expect(r.headers["x-gateway-host-tool-calls"]).toBe("1")
    const sessions = String(r.headers["x-gateway-session"]).split(",")
    expect(sessions).toHaveLength(2)
    expect(new Set(sessions).size).toBe(2)
    const body = parse(r)
    expect(body.usage).toMatchObject({ prompt_tokens: 34, completion_tokens: 12 })

    // the report flushes the records first
    const own = await report(gw, KEYS.teamA)
    expect(own.app).toBe(APPS.teamA)
    expect(own.totals).toMatchObject({ requests: 2, errors: 0, inputTokens: 34, outputTokens: 12 })
    expect(own.hostTools).toEqual([{ app: APPS.teamA, server: "everything", tool: "echo", outcome: "ok", calls: 1, latencyMs: expect.any(Object) }])
    const latency = (own.hostTools as Array<Json>)[0].latencyMs as { total: number; avg: number }
    expect(latency.total).toBeGreaterThanOrEqual(0)
    expect(latency.avg).toBe(latency.total)

    const rows = usageRows(gw.dataDir, APPS.teamA)
    expect(rows.map((row) => row.session_id)).toEqual(sessions)
    expect(rows.map((row) => [row.status, row.input_tokens, row.output_tokens])).toEqual([
      ["ok", 11, 7],
      ["ok", 23, 5]
    ])
  })

  it("a streamed loop and a call with bad arguments are counted too, by outcome; the per-app figures are the app's own", async () => {
    upstream.script(
      chatSse({ content: "Echoing.", toolCalls: [echoCall("c2", "one"), { id: "c3", name: "everything__echo", arguments: "[1, 2]" }] }),
      chatSse({ content: "Done." })
    )
    const r = await postJson(gw, "/v1/chat/completions", { model: MODEL, stream: true, messages: [{ role: "user", content: "hi" }] }, bearer(KEYS.teamA))
    expect(r.status).toBe(200)
    // the text of both rounds; the bad call was an error result the model saw, not a failure
    expect(chatRead(r.text).text).toBe("Echoing.\n\nDone.")

    const own = await report(gw, KEYS.teamA, `?app=${APPS.teamA}`)
    expect(own.totals).toMatchObject({ requests: 4 })
    expect((own.hostTools as Array<Json>).map((h) => [h.app, h.server, h.tool, h.outcome, h.calls])).toEqual([
      [APPS.teamA, "everything", "echo", "error", 1],
      [APPS.teamA, "everything", "echo", "ok", 2]
    ])

    // another app's key cannot read it, and its own report holds none of it
    const forbidden = await get(gw, `/gateway/usage?app=${APPS.teamA}`, KEYS.teamB)
    expect(forbidden.status).toBe(403)
    expect(parse(forbidden)).toMatchObject({ code: "app_forbidden", param: "app" })
    const other = await report(gw, KEYS.teamB)
    expect(other.app).toBe(APPS.teamB)
    expect(other.hostTools).toEqual([])

    // the admin reads every app; a user filter leaves host tools out (they are counted per app only)
    const all = await report(gw, ADMIN)
    expect((all.hostTools as Array<Json>).filter((h) => h.app === APPS.teamA).map((h) => h.calls)).toEqual([1, 2])
    const byUser = await report(gw, ADMIN, "?user=someone")
    expect(byUser).not.toHaveProperty("hostTools")
  })

  describe("a token budget that the first round spends: the second model call is refused", () => {
    for (const c of BUDGET_CASES) {
      it(`${c.protocol}, ${c.stream ? "streamed: the text of round 1, then the failure event" : "whole: the protocol's 429"}`, async () => {
        const reply = c.stream ? chatSse : chatJson
        upstream.script(reply({ content: "Checking.", toolCalls: [echoCall("b1", "x")], usage: { prompt: 40, completion: 30 } }), reply({ content: "never sent" }))
        const before = upstream.requests.length
        const r = await c.send(gw, c.key)
        // the second model call never reached the upstream
        expect(upstream.requests.length - before).toBe(1)
        upstream.reset()
        if (c.stream) {
          expect(r.status).toBe(200)
          const { text, last } = c.read(r.text)
          expect(text).toBe("Checking.")
          c.failure(last)
        } else {
          expect(r.status, r.text).toBe(429)
          expect(r.headers["x-should-retry"]).toBe("false")
          expect(Number(r.headers["retry-after"])).toBeGreaterThan(0)
          c.failure(parse(r))
        }
        expect(r.text).toContain(`app ${c.app}: budgets[0] (tokens 50 per day) is spent`)
        expect(r.text).not.toContain("never sent")

        // both model calls are usage records (the refused one with its code), and the host call ran
        const own = await report(gw, c.key)
        expect(own.totals).toMatchObject({ requests: 2, errors: 1, inputTokens: 40, outputTokens: 30 })
        expect((own.hostTools as Array<Json>).map((h) => [h.tool, h.outcome, h.calls])).toEqual([["echo", "ok", 1]])
        expect(usageRows(gw.dataDir, c.app).map((row) => [row.status, row.input_tokens, row.output_tokens])).toEqual([
          ["ok", 40, 30],
          ["insufficient_quota", 0, 0]
        ])
      })
    }
  })

  it("requestsPerMinute counts each model call of the loop", async () => {
    await freshWindow()
    upstream.reset()
    upstream.script(chatJson({ toolCalls: [echoCall("p1", "x")] }), chatJson({ content: "fine" }))
    const first = await chat(gw, KEYS.paced, MODEL)
    expect(first.status, first.text).toBe(200)
    expect(first.headers["x-gateway-host-tool-calls"]).toBe("1")
    // two of the three calls of the minute taken by one request
    expect(first.headers["x-ratelimit-limit-requests"]).toBe("3")
    expect(first.headers["x-ratelimit-remaining-requests"]).toBe("1")
    expect(upstream.requests).toHaveLength(2)
    upstream.reset()

    // the third call runs, the fourth (this request's second round) is refused
    upstream.script(chatJson({ toolCalls: [echoCall("p2", "x")] }), chatJson({ content: "never sent" }))
    const second = await chat(gw, KEYS.paced, MODEL)
    expect(second.status).toBe(429)
    expect(parse(second).error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" })
    expect(second.text).toContain("app paced: requestsPerMinute")
    expect(upstream.requests).toHaveLength(1)
    upstream.reset()

    const third = await chat(gw, KEYS.paced, MODEL)
    expect(third.status).toBe(429)
    expect(upstream.requests).toHaveLength(0)

    const own = await report(gw, KEYS.paced)
    expect((own.hostTools as Array<Json>).map((h) => [h.tool, h.outcome, h.calls])).toEqual([["echo", "ok", 2]])
  })
})
