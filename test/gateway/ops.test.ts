import * as fs from "node:fs"
import parsePrometheus, { type PrometheusFamily } from "parse-prometheus-text-format"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { formBody, open, pngBytes } from "../files/uploadWire.js"
import { chatSseChunks, chunks, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import type { RawReply } from "../support/RawHttp.js"
import { ADMIN, bearer, call, chat, expectProblem, fullUsage, gemini, get, KEYS, messages, parse, pollUntil, responses, TOKENS, type Json } from "./helpers.js"

/**
 * `/gateway/metrics` (Prometheus text) and `/gateway/status` (spec 4.5, 5.4, 7.1; ARCHITECTURE
 * "Metrics"): the text parses; request, model-call, token and upstream-error counters; latency
 * and TTFT histograms; in-flight gauges; who may read them; the status page's version, uptime,
 * provider error rates, in-flight numbers and per-app stored responses and files.
 */

const MODEL = "up/fake-model"
const GEM = "up/gem-model"
const ODD = 'up/odd"na\\me\nx'
const BUCKETS = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "300", "+Inf"]
const VERSION = (JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version

const document = (upstreamUrl: string, extra: Json = {}): Json => ({
  providers: { up: { type: "openai", baseUrl: upstreamUrl, apiKey: "upstream-secret" } },
  adminKey: ADMIN,
  keys: [
    { key: KEYS.alpha, app: "alpha" },
    { key: KEYS.beta, app: "beta" }
  ],
  ...extra
})

// ---------------------------------------------------------------------------------------------
// Reading the exposition
// ---------------------------------------------------------------------------------------------

interface Scrape {
  readonly text: string
  readonly families: ReadonlyArray<PrometheusFamily>
}

/** Read the metrics with a key (null: with none). */
const scrape = async (gw: TestGateway, key: string | null = ADMIN): Promise<Scrape> => {
  const r = await get(gw, "/gateway/metrics", key ?? undefined)
  expect(r.status, r.text).toBe(200)
  expect(r.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8")
  return { text: r.text, families: parsePrometheus(r.text) }
}

const family = (s: Scrape, name: string): PrometheusFamily => {
  const found = s.families.find((f) => f.name === name)
  if (found === undefined) throw new Error(`no metric family ${name} in:\n${s.text}`)
  return found
}

const sameLabels = (a: Readonly<Record<string, string>> | undefined, b: Readonly<Record<string, string>>) => {
  const left = a ?? {}
  return Object.keys(left).length === Object.keys(b).length && Object.entries(b).every(([k, v]) => left[k] === v)
}

/** The value of the counter or gauge series with exactly these labels (0 when absent). */
const value = (s: Scrape, name: string, labels: Readonly<Record<string, string>> = {}): number => {
  const sample = family(s, name).metrics.find((m) => sameLabels(m.labels, labels))
  return sample === undefined ? 0 : Number(sample.value)
}

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** Sample lines read by hand (the package merges labelled histogram series into one). */
const samplesOf = (text: string): Array<Sample> =>
  text
    .split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"))
    .map((line) => {
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
      if (m === null) throw new Error(`not a sample line: ${line}`)
      const labels: Record<string, string> = {}
      for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c))
      }
      return { name: m[1], labels, value: Number(m[3]) }
    })

interface HistogramSeries {
  readonly labels: Readonly<Record<string, string>>
  readonly buckets: ReadonlyArray<readonly [string, number]>
  readonly count: number
  readonly sum: number
}

const withoutLe = (labels: Readonly<Record<string, string>>) => Object.fromEntries(Object.entries(labels).filter(([k]) => k !== "le"))

/** Every series of a histogram, with its buckets in the order written. */
const histogram = (s: Scrape, name: string): Array<HistogramSeries> => {
  expect(family(s, name).type).toBe("HISTOGRAM")
  const samples = samplesOf(s.text)
  const series = new Map<string, { labels: Record<string, string>; buckets: Array<readonly [string, number]> }>()
  for (const b of samples.filter((x) => x.name === `${name}_bucket`)) {
    const labels = withoutLe(b.labels)
    const key = JSON.stringify(labels)
    const entry = series.get(key) ?? { labels, buckets: [] }
    entry.buckets.push([b.labels.le, b.value])
    series.set(key, entry)
  }
  return [...series.values()].map(({ labels, buckets }) => {
    const count = samples.find((x) => x.name === `${name}_count` && sameLabels(x.labels, labels))
    const sum = samples.find((x) => x.name === `${name}_sum` && sameLabels(x.labels, labels))
    if (count === undefined || sum === undefined) throw new Error(`${name}${JSON.stringify(labels)} has no _count or _sum`)
    return { labels, buckets, count: count.value, sum: sum.value }
  })
}

/** Buckets in ascending `le`, ending with +Inf; counts never fall; +Inf equals the count. */
const expectWellFormed = (series: HistogramSeries, what: string) => {
  expect(series.buckets.map(([le]) => le), what).toEqual(BUCKETS)
  for (let i = 1; i < series.buckets.length; i++) expect(series.buckets[i][1], `${what} le=${series.buckets[i][0]}`).toBeGreaterThanOrEqual(series.buckets[i - 1][1])
  expect(series.buckets[series.buckets.length - 1][1], what).toBe(series.count)
  expect(series.sum, what).toBeGreaterThanOrEqual(0)
  expect(Number.isFinite(series.sum), what).toBe(true)
}

const seriesWith = (list: ReadonlyArray<HistogramSeries>, labels: Readonly<Record<string, string>>) => {
  const found = list.find((s) => sameLabels(s.labels, labels))
  if (found === undefined) throw new Error(`no histogram series ${JSON.stringify(labels)} among ${JSON.stringify(list.map((s) => s.labels))}`)
  return found
}

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

interface ProviderStatus {
  readonly name: string
  readonly type: string
  readonly recent: { readonly windowSeconds: number; readonly calls: number; readonly failures: number; readonly errorRate: number }
}
interface AppTally {
  readonly app: string
  readonly count: number
  readonly bytes: number
}
interface Status {
  readonly version: string
  readonly uptimeSeconds: number
  readonly providers: ReadonlyArray<ProviderStatus>
  readonly inFlight: { readonly requests: number; readonly modelRequests: number; readonly bodyBytes: number }
  readonly storedResponses: ReadonlyArray<AppTally>
  readonly files: ReadonlyArray<AppTally>
}

/** Read the status page with a key (null: with none). */
const status = async (gw: TestGateway, key: string | null = ADMIN): Promise<Status> => {
  const r = await get(gw, "/gateway/status", key ?? undefined)
  expect(r.status, r.text).toBe(200)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  return parse(r) as unknown as Status
}

const providerOf = (s: Status, name: string): ProviderStatus => {
  const found = s.providers.find((p) => p.name === name)
  if (found === undefined) throw new Error(`no provider ${name} in ${JSON.stringify(s.providers)}`)
  return found
}

const must = async (what: string, answer: Promise<RawReply>, code = 200): Promise<RawReply> => {
  const r = await answer
  if (r.status !== code) throw new Error(`${what}: expected ${code}, got ${r.status}: ${r.text.slice(0, 300)}`)
  return r
}

const failBeforeOutput = { kind: "json", status: 500, body: { error: { message: "upstream exploded", type: "server_error" } } } as const

// ---------------------------------------------------------------------------------------------

describe("metrics after traffic", () => {
  let upstream: FakeUpstream
  let gw: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
    gw = await startGateway(document(upstream.url))
    const a = KEYS.alpha
    await must("chat", chat(gw, a, MODEL))
    await must("chat", chat(gw, a, MODEL))
    await must("chat stream", chat(gw, a, MODEL, { stream: true }))
    await must("messages", messages(gw, a, MODEL))
    await must("gemini", gemini(gw, a, GEM))
    await must("odd model name", chat(gw, KEYS.beta, ODD))
    // a failure after output began: the stream is cut by the upstream
    upstream.script({ kind: "resetAfter", chunks: [chunks.role(), chunks.text("partial")] })
    await must("cut stream", chat(gw, a, MODEL, { stream: true }))
    await must("unknown own path", get(gw, "/gateway/nope", ADMIN), 404)
  })

  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("the exposition parses: every family has HELP and TYPE, and no key or upstream secret is in it", async () => {
    const s = await scrape(gw)
    const names = s.families.map((f) => f.name)
    expect(names).toEqual(
      expect.arrayContaining([
        "gateway_requests_total",
        "gateway_request_duration_seconds",
        "gateway_model_requests_total",
        "gateway_tokens_total",
        "gateway_model_call_duration_seconds",
        "gateway_time_to_first_token_seconds",
        "gateway_upstream_errors_total",
        "gateway_requests_in_flight",
        "gateway_model_requests_in_flight",
        "gateway_body_bytes_in_flight"
      ])
    )
    expect(new Set(names).size).toBe(names.length)
    for (const f of s.families) {
      expect(f.help.length, f.name).toBeGreaterThan(0)
      expect(["COUNTER", "GAUGE", "HISTOGRAM"]).toContain(f.type)
      if (f.type === "COUNTER") expect(f.name).toMatch(/_total$/)
    }
    // every sample line reads back
    for (const sample of samplesOf(s.text)) expect(Number.isFinite(sample.value), sample.name).toBe(true)
    for (const secret of [ADMIN, KEYS.alpha, KEYS.beta, "upstream-secret", "hello"]) expect(s.text).not.toContain(secret)
  })

  it("counts HTTP requests by family, route and status", async () => {
    const s = await scrape(gw)
    const requests = "gateway_requests_total"
    // two chats, a stream, the odd model, the cut stream (its status was already 200)
    expect(value(s, requests, { family: "openai", route: "chat.completions", status: "200" })).toBe(5)
    expect(value(s, requests, { family: "messages", route: "messages.create", status: "200" })).toBe(1)
    expect(value(s, requests, { family: "gemini", route: "gemini.generate_content", status: "200" })).toBe(1)
    expect(value(s, requests, { family: "gateway", route: "unmatched", status: "404" })).toBe(1)
    // the scrape before this one
    expect(value(s, requests, { family: "gateway", route: "gateway.metrics", status: "200" })).toBeGreaterThanOrEqual(1)
    for (const m of family(s, requests).metrics) {
      expect(Object.keys(m.labels ?? {}).sort()).toEqual(["family", "route", "status"])
      expect(m.labels?.route).not.toMatch(/[/?]/)
    }
    const before = value(s, requests, { family: "gateway", route: "gateway.metrics", status: "403" })
    await must("app key", get(gw, "/gateway/metrics", KEYS.alpha), 403)
    const after = await scrape(gw)
    expect(value(after, requests, { family: "gateway", route: "gateway.metrics", status: "403" })).toBe(before + 1)
  })

  it("counts model calls by family, route, model and outcome, and tokens by model and kind", async () => {
    const s = await scrape(gw)
    const calls = "gateway_model_requests_total"
    expect(value(s, calls, { family: "openai", route: "chat.completions", model: MODEL, status: "ok" })).toBe(3)
    expect(value(s, calls, { family: "openai", route: "chat.completions", model: MODEL, status: "upstream_unreachable" })).toBe(1)
    expect(value(s, calls, { family: "messages", route: "messages.create", model: MODEL, status: "ok" })).toBe(1)
    expect(value(s, calls, { family: "gemini", route: "gemini.generate_content", model: GEM, status: "ok" })).toBe(1)
    // label values are escaped: the odd name reads back as sent
    expect(value(s, calls, { family: "openai", route: "chat.completions", model: ODD, status: "ok" })).toBe(1)

    const tokens = "gateway_tokens_total"
    // four successful calls of MODEL (the cut stream never got its usage)
    expect(value(s, tokens, { model: MODEL, kind: "input" })).toBe(4 * TOKENS.input)
    expect(value(s, tokens, { model: MODEL, kind: "output" })).toBe(4 * TOKENS.output)
    expect(value(s, tokens, { model: MODEL, kind: "cacheRead" })).toBe(4 * TOKENS.cacheRead)
    expect(value(s, tokens, { model: MODEL, kind: "cacheWrite" })).toBe(4 * TOKENS.cacheWrite)
    expect(value(s, tokens, { model: MODEL, kind: "reasoning" })).toBe(4 * TOKENS.reasoning)
    for (const kind of ["input", "output", "cacheRead", "cacheWrite", "reasoning"] as const) {
      const expected = { input: TOKENS.input, output: TOKENS.output, cacheRead: TOKENS.cacheRead, cacheWrite: TOKENS.cacheWrite, reasoning: TOKENS.reasoning }[kind]
      expect(value(s, tokens, { model: GEM, kind })).toBe(expected)
      expect(value(s, tokens, { model: ODD, kind })).toBe(expected)
    }
  })

  it("latency and TTFT histograms: buckets in order, never falling, +Inf equal to the count", async () => {
    const s = await scrape(gw)
    for (const name of ["gateway_request_duration_seconds", "gateway_model_call_duration_seconds", "gateway_time_to_first_token_seconds"]) {
      const list = histogram(s, name)
      expect(list.length, name).toBeGreaterThan(0)
      for (const series of list) expectWellFormed(series, `${name}${JSON.stringify(series.labels)}`)
    }
    expect(seriesWith(histogram(s, "gateway_request_duration_seconds"), { family: "openai", route: "chat.completions" }).count).toBe(5)
    // MODEL: three chats, a message, the cut stream
    expect(seriesWith(histogram(s, "gateway_model_call_duration_seconds"), { model: MODEL }).count).toBe(5)
    expect(seriesWith(histogram(s, "gateway_model_call_duration_seconds"), { model: GEM }).count).toBe(1)
    // streamed calls only: the stream and the cut stream
    const ttft = seriesWith(histogram(s, "gateway_time_to_first_token_seconds"), { model: MODEL })
    expect(ttft.count).toBe(2)
    expect(ttft.sum).toBeGreaterThan(0)
  })

  it("counts an upstream failure after output began by provider and kind", async () => {
    const s = await scrape(gw)
    expect(value(s, "gateway_upstream_errors_total", { provider: "up", kind: "upstream_unreachable" })).toBe(1)
    for (const m of family(s, "gateway_upstream_errors_total").metrics) expect(Object.keys(m.labels ?? {}).sort()).toEqual(["kind", "provider"])
  })

  it("in-flight gauges: requests, model calls and body bytes being read", async () => {
    const idle = await scrape(gw)
    // the scrape itself is being handled
    expect(value(idle, "gateway_requests_in_flight")).toBe(1)
    expect(value(idle, "gateway_model_requests_in_flight")).toBe(0)
    expect(value(idle, "gateway_body_bytes_in_flight")).toBe(0)

    // a slow stream holds a model slot
    const seen = upstream.requests.length
    upstream.script({ kind: "sse", chunks: chatSseChunks({ model: MODEL, content: "one two three four five six", split: "words" }), delayMs: 150 })
    const slow = chat(gw, KEYS.alpha, MODEL, { stream: true })
    await pollUntil(async () => upstream.requests.length, (n) => n > seen, 3000, 10)
    const busy = await scrape(gw)
    expect(value(busy, "gateway_model_requests_in_flight")).toBe(1)
    expect(value(busy, "gateway_requests_in_flight")).toBe(2)
    const during = await status(gw)
    expect(during.inFlight.modelRequests).toBe(1)
    expect(during.inFlight.requests).toBe(2)
    expect((await slow).status).toBe(200)
    const done = await pollUntil(() => scrape(gw), (x) => value(x, "gateway_model_requests_in_flight") === 0, 2000)
    expect(value(done, "gateway_model_requests_in_flight")).toBe(0)
    expect(value(done, "gateway_requests_in_flight")).toBe(1)

    // a body announced as 5000 bytes and never finished holds its reservation
    const pending = open(gw.port, "POST", "/v1/chat/completions", { ...bearer(KEYS.alpha), "content-type": "application/json", "content-length": 5000 })
    await pending.write(Buffer.from('{"model":'))
    const reading = await pollUntil(() => scrape(gw), (x) => value(x, "gateway_body_bytes_in_flight") === 5000, 2000)
    expect(value(reading, "gateway_body_bytes_in_flight")).toBe(5000)
    expect((await status(gw)).inFlight.bodyBytes).toBe(5000)
    pending.destroy()
    await pending.answer
    const released = await pollUntil(() => scrape(gw), (x) => value(x, "gateway_body_bytes_in_flight") === 0 && value(x, "gateway_requests_in_flight") === 1, 2000)
    expect(value(released, "gateway_body_bytes_in_flight")).toBe(0)
    expect(value(released, "gateway_requests_in_flight")).toBe(1)
  })
})

describe("an upstream failure before any output", () => {
  let upstream: FakeUpstream
  let gw: TestGateway
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
    gw = await startGateway(document(upstream.url))
    await must("chat", chat(gw, KEYS.alpha, MODEL))
    upstream.script(failBeforeOutput, failBeforeOutput)
    await must("failing chat", chat(gw, KEYS.alpha, MODEL), 502)
    await must("failing gemini", gemini(gw, KEYS.alpha, GEM), 502)
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("is a model call with the error code as its outcome", async () => {
    const s = await scrape(gw)
    expect(value(s, "gateway_requests_total", { family: "openai", route: "chat.completions", status: "502" })).toBe(1)
    expect(value(s, "gateway_requests_total", { family: "gemini", route: "gemini.generate_content", status: "502" })).toBe(1)
    expect(value(s, "gateway_model_requests_total", { family: "openai", route: "chat.completions", model: MODEL, status: "upstream_error" })).toBe(1)
    expect(value(s, "gateway_model_requests_total", { family: "gemini", route: "gemini.generate_content", model: GEM, status: "upstream_error" })).toBe(1)
    expect(seriesWith(histogram(s, "gateway_model_call_duration_seconds"), { model: MODEL }).count).toBe(2)
  })

  it("counts as an upstream error of its provider on /gateway/metrics", async () => {
    const s = await scrape(gw)
    expect(value(s, "gateway_upstream_errors_total", { provider: "up", kind: "upstream_error" })).toBe(2)
  })

  it("counts in the provider's recent error rate on /gateway/status", async () => {
    const up = providerOf(await status(gw), "up")
    expect(up.recent).toEqual({ windowSeconds: 300, calls: 3, failures: 2, errorRate: 0.6667 })
  })
})

describe("status page", () => {
  let upstream: FakeUpstream
  let gw: TestGateway
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    upstream.onRequest(fullUsage())
    gw = await startGateway(document(upstream.url, { providers: { up: { type: "openai", baseUrl: upstream.url }, spare: { type: "mock" } } }))
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  it("version, uptime, every provider with its recent calls, in-flight numbers", async () => {
    const s = await status(gw)
    expect(s.version).toBe(VERSION)
    expect(Number.isInteger(s.uptimeSeconds)).toBe(true)
    expect(s.uptimeSeconds).toBeGreaterThanOrEqual(0)
    expect(s.providers.map((p) => [p.name, p.type]).sort()).toEqual([
      ["spare", "mock"],
      ["up", "openai"]
    ])
    for (const p of s.providers) expect(p.recent).toEqual({ windowSeconds: 300, calls: 0, failures: 0, errorRate: 0 })
    expect(s.inFlight).toEqual({ requests: 1, modelRequests: 0, bodyBytes: 0 })
    expect(s.storedResponses).toEqual([])
    expect(s.files).toEqual([])
    for (const secret of [ADMIN, KEYS.alpha, "upstream-secret"]) expect(JSON.stringify(s)).not.toContain(secret)
  })

  it("a provider's recent error rate after a failed streamed call", async () => {
    await must("chat", chat(gw, KEYS.alpha, MODEL))
    await must("stream", chat(gw, KEYS.alpha, MODEL, { stream: true }))
    await must("spare", chat(gw, KEYS.alpha, "spare/echo"))
    upstream.script({ kind: "resetAfter", chunks: [chunks.role(), chunks.text("partial")] })
    await must("cut stream", chat(gw, KEYS.alpha, MODEL, { stream: true }))
    const s = await status(gw)
    expect(providerOf(s, "up").recent).toEqual({ windowSeconds: 300, calls: 3, failures: 1, errorRate: 0.3333 })
    expect(providerOf(s, "spare").recent).toEqual({ windowSeconds: 300, calls: 1, failures: 0, errorRate: 0 })
  })

  it("stored responses and files per app", async () => {
    for (const key of [KEYS.alpha, KEYS.alpha, KEYS.beta]) await must("store a response", responses(gw, key, MODEL))
    await must("not stored", responses(gw, KEYS.beta, MODEL, { store: false }))
    const sizes = { alpha: [300], beta: [200, 400] }
    for (const [app, list] of Object.entries(sizes)) {
      for (const size of list) {
        const form = formBody({ data: pngBytes(size), filename: "pic.png", type: "image/png" })
        const key = app === "alpha" ? KEYS.alpha : KEYS.beta
        await must("upload", call(gw, "POST", "/v1/files", { headers: { ...bearer(key), "content-type": form.contentType }, body: form.body }))
      }
    }
    const s = await status(gw)
    const stored = [...s.storedResponses].sort((a, b) => a.app.localeCompare(b.app))
    expect(stored.map((r) => [r.app, r.count])).toEqual([
      ["alpha", 2],
      ["beta", 1]
    ])
    for (const r of stored) expect(r.bytes).toBeGreaterThan(0)
    const files = [...s.files].sort((a, b) => a.app.localeCompare(b.app))
    expect(files).toEqual([
      { app: "alpha", count: 1, bytes: 300 },
      { app: "beta", count: 2, bytes: 600 }
    ])
  })
})

describe("who reads metrics and status", () => {
  let upstream: FakeUpstream
  const gateways: Array<TestGateway> = []
  const start = async (doc: Json) => {
    const gw = await startGateway(doc)
    gateways.push(gw)
    return gw
  }
  beforeAll(async () => {
    upstream = await startFakeUpstream()
  })
  afterAll(async () => {
    for (const gw of gateways) await gw.close()
    await upstream?.close()
  })

  it("with adminKey set: only the admin key; an app key is admin_key_required, none or a wrong key invalid_api_key", async () => {
    const gw = await start(document(upstream.url))
    await scrape(gw, ADMIN)
    await status(gw, ADMIN)
    const wrong = "sk-wrong-0123456789"
    for (const route of ["/gateway/metrics", "/gateway/status"]) {
      expectProblem(await get(gw, route, KEYS.alpha), 403, "admin_key_required", { instance: route, secrets: [KEYS.alpha] })
      expectProblem(await get(gw, route, KEYS.beta), 403, "admin_key_required", { instance: route, secrets: [KEYS.beta] })
      expectProblem(await get(gw, route), 401, "invalid_api_key", { instance: route })
      expectProblem(await get(gw, route, wrong), 401, "invalid_api_key", { instance: route, secrets: [wrong] })
      expectProblem(await get(gw, `${route}?x=1`, undefined, { authorization: `Basic ${ADMIN}` }), 401, "invalid_api_key", { instance: `${route}?x=1`, secrets: [ADMIN] })
      expectProblem(await get(gw, route, undefined, { "x-api-key": ADMIN }), 401, "invalid_api_key", { instance: route, secrets: [ADMIN] })
    }
    // a runtime key is an app key too
    const created = await call(gw, "POST", "/gateway/admin/keys", { headers: { ...bearer(ADMIN), "content-type": "application/json" }, body: JSON.stringify({ app: "team-ops" }) })
    expect(created.status, created.text).toBe(201)
    const runtime = parse(created).key as string
    expectProblem(await get(gw, "/gateway/metrics", runtime), 403, "admin_key_required", { instance: "/gateway/metrics", secrets: [runtime] })
    // HEAD answers like GET without a body
    const head = await call(gw, "HEAD", "/gateway/metrics", { headers: bearer(ADMIN) })
    expect(head.status).toBe(200)
    expect(head.text).toBe("")
  })

  it("without adminKey: any app key reads metrics; status needs an admin key", async () => {
    const { adminKey: _, ...withoutAdmin } = document(upstream.url)
    const gw = await start(withoutAdmin)
    await scrape(gw, KEYS.alpha)
    expectProblem(await get(gw, "/gateway/metrics"), 401, "invalid_api_key", { instance: "/gateway/metrics" })
    expectProblem(await get(gw, "/gateway/status", KEYS.alpha), 403, "admin_key_required", { instance: "/gateway/status" })
  })

  it("a keyless loopback gateway serves both without a key", async () => {
    const gw = await start({ providers: { mock: { type: "mock" } } })
    await scrape(gw, null)
    const s = await status(gw, null)
    expect(s.version).toBe(VERSION)
  })

  it("a keyless gateway refuses a cross-site browser Origin on its own routes (cross_origin_forbidden), not a same-origin one", async () => {
    const gw = await start({ providers: { mock: { type: "mock" } } })
    for (const route of ["/gateway/metrics", "/gateway/status", "/gateway/usage", "/gateway/admin/keys"]) {
      expect((await get(gw, route, undefined, { origin: `http://127.0.0.1:${gw.port}` })).status, route).toBe(200)
      expectProblem(await get(gw, route, undefined, { origin: "http://evil.example" }), 403, "cross_origin_forbidden", { instance: route })
      expectProblem(await get(gw, route, undefined, { origin: "null" }), 403, "cross_origin_forbidden", { instance: route })
    }
    // no key is made from another site (it would also end keyless use)
    const r = await call(gw, "POST", "/gateway/admin/keys", { headers: { origin: "https://evil.example", "content-type": "application/json" }, body: JSON.stringify({ app: "team-evil" }) })
    expectProblem(r, 403, "cross_origin_forbidden", { instance: "/gateway/admin/keys" })
    const listed = await get(gw, "/gateway/admin/keys")
    expect(listed.status).toBe(200)
    expect(parse(listed).data).toEqual([])
  })

  it("method_not_allowed and not_found next to them", async () => {
    const gw = await start(document(upstream.url))
    for (const route of ["/gateway/metrics", "/gateway/status"]) {
      for (const method of ["POST", "PUT", "DELETE"]) {
        const r = await call(gw, method, route, { headers: bearer(ADMIN) })
        expectProblem(r, 405, "method_not_allowed", { instance: route, param: "any" })
        expect(r.headers.allow).toBe("GET, HEAD")
      }
    }
    for (const target of ["/gateway/nope", "/gateway/metrics/x", "/gateway/status.json", "/gateway", "/gateway/", "/metrics", "/v1/usage", "/v1/status", "/gateway/nope?a=%20b&c"]) {
      // /v1 paths check an app key first
      const r = await get(gw, target, target.startsWith("/v1/") ? KEYS.alpha : ADMIN)
      expect(r.status, target).toBe(404)
      if (target.startsWith("/gateway") || target === "/metrics") expectProblem(r, 404, "not_found", { instance: target })
    }
  })
})

describe("the error code page", () => {
  it("every code a problem-details type can point at has its anchor and a description", async () => {
    const { anchoredCodes } = await import("../../src/http/Envelopes.js")
    const { errorDescriptions } = await import("../../src/protocols/gateway/ErrorsPage.js")
    const gw = await startGateway({ providers: { mock: { type: "mock", models: { echo: {} } } } })
    try {
      const page = await (await fetch(`${gw.url}/gateway/errors`)).text()
      for (const code of anchoredCodes) {
        expect(page).toContain(`id="${code}"`)
        expect(errorDescriptions[code]?.length ?? 0).toBeGreaterThan(10)
      }
    } finally {
      await gw.close()
    }
  })
})
