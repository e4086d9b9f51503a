import { describe, it, expect, afterAll } from "vitest"
import { Agent, fetch } from "undici"
import OpenAI from "openai"
import {
  auto,
  chatJson,
  chatSse,
  chunks,
  startFakeUpstream,
  type FakeUpstream,
} from "./FakeUpstream.js"

const agent = new Agent({ keepAliveTimeout: 30_000 })
const upstreams: FakeUpstream[] = []

afterAll(async () => {
  await Promise.all(upstreams.map((u) => u.close()))
  await agent.close()
})

async function start(): Promise<FakeUpstream> {
  const up = await startFakeUpstream()
  upstreams.push(up)
  return up
}

function post(up: FakeUpstream, body: unknown, init?: { signal?: AbortSignal; dispatcher?: Agent; headers?: Record<string, string> }) {
  return fetch(`${up.url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-test", ...init?.headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    dispatcher: init?.dispatcher ?? agent,
    signal: init?.signal,
  })
}

/** Parse an SSE body into its `data:` payloads (raw strings). */
function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((e) => e.length > 0)
    .flatMap((e) => e.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)))
}

async function waitFor(cond: () => boolean, ms = 2_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("waitFor timed out")
    await new Promise((r) => setTimeout(r, 10))
  }
}

type Obj = Record<string, unknown>
const obj = (v: unknown): Obj => v as Obj

describe("FakeUpstream default handler", () => {
  it("answers non-streaming chat completions and records the request", async () => {
    const up = await start()
    expect(up.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/)
    const res = await post(up, { model: "gpt-4o", messages: [{ role: "user", content: "hi" }] })
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("application/json")
    const body = obj(await res.json())
    expect(body).toMatchObject({
      object: "chat.completion",
      model: "gpt-4o",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello from upstream" }, finish_reason: "stop" }],
      usage: {
        prompt_tokens: 10,
        completion_tokens: 3,
        total_tokens: 13,
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
      },
    })
    expect(up.requests).toHaveLength(1)
    const r = up.requests[0]
    expect(r.method).toBe("POST")
    expect(r.path).toBe("/v1/chat/completions")
    expect(r.headers.authorization).toBe("Bearer sk-test")
    expect(r.body).toEqual({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }] })
  })

  it("streams in the OpenAI shape, with usage only when requested", async () => {
    const up = await start()
    const res = await post(up, { model: "m1", stream: true, stream_options: { include_usage: true }, messages: [] })
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("text/event-stream")
    const text = await res.text()
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true)
    const data = sseData(text)
    expect(data.at(-1)).toBe("[DONE]")
    const parsed = data.slice(0, -1).map((d) => obj(JSON.parse(d)))
    expect(parsed[0]).toMatchObject({ object: "chat.completion.chunk", model: "m1", choices: [{ delta: { role: "assistant" } }] })
    const content = parsed
      .map((c) => (c.choices as Obj[])[0])
      .filter((c) => c !== undefined)
      .map((c) => (obj(c.delta).content as string | undefined) ?? "")
      .join("")
    expect(content).toBe("Hello from upstream")
    expect(parsed.filter((c) => ((c.choices as Obj[])[0] ?? {}).delta !== undefined && obj(((c.choices as Obj[])[0] ?? {}).delta).content)).toHaveLength(3)
    expect(parsed.at(-2)).toMatchObject({ choices: [{ delta: {}, finish_reason: "stop" }] })
    expect(parsed.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 } })
    // all chunks share one id
    expect(new Set(parsed.map((c) => c.id)).size).toBe(1)

    const res2 = await post(up, { model: "m1", stream: true, messages: [] })
    const parsed2 = sseData(await res2.text())
    expect(parsed2.at(-1)).toBe("[DONE]")
    expect(obj(JSON.parse(parsed2.at(-2) ?? "{}"))).toMatchObject({ choices: [{ finish_reason: "stop" }] })
    expect(parsed2.some((d) => d.includes('"usage"'))).toBe(false)
  })

  it("404s unknown paths with an OpenAI error and 400s non-JSON chat bodies", async () => {
    const up = await start()
    const res = await fetch(`${up.url}/nope?x=1`, { dispatcher: agent })
    expect(res.status).toBe(404)
    const body = obj(await res.json())
    expect(body.error).toMatchObject({ type: "invalid_request_error" })
    expect(typeof obj(body.error).message).toBe("string")
    expect(up.requests[0]).toMatchObject({ method: "GET", path: "/v1/nope", url: "/v1/nope?x=1", body: undefined })

    const bad = await post(up, "{not json")
    expect(bad.status).toBe(400)
    await bad.arrayBuffer()
    expect(up.requests[1].body).toBe("{not json")

    const plain = await fetch(`${up.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: '{"a":1}',
      dispatcher: agent,
    })
    await plain.arrayBuffer()
    expect(up.requests[2].body).toBe('{"a":1}')
  })

  it("works with the official openai SDK (stream and non-stream)", async () => {
    const up = await start()
    const client = new OpenAI({ baseURL: up.url, apiKey: "sk-x", maxRetries: 0 })
    const c = await client.chat.completions.create({ model: "gpt-x", messages: [{ role: "user", content: "hi" }] })
    expect(c.choices[0].message.content).toBe("Hello from upstream")
    expect(c.usage?.total_tokens).toBe(13)

    up.script(
      auto({
        content: "calling",
        toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' }],
        usage: { prompt: 7, completion: 9, cached: 2, reasoning: 1 },
        includeUsage: true,
      }),
    )
    const stream = await client.chat.completions.create({
      model: "gpt-x",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    })
    let text = ""
    let args = ""
    let name = ""
    let finish: string | null = null
    let total = 0
    for await (const chunk of stream) {
      const choice = chunk.choices[0]
      if (choice) {
        text += choice.delta.content ?? ""
        for (const tc of choice.delta.tool_calls ?? []) {
          name += tc.function?.name ?? ""
          args += tc.function?.arguments ?? ""
        }
        if (choice.finish_reason) finish = choice.finish_reason
      }
      if (chunk.usage) total = chunk.usage.total_tokens
    }
    expect(text).toBe("calling")
    expect(name).toBe("get_weather")
    expect(JSON.parse(args)).toEqual({ city: "Paris", unit: "celsius" })
    expect(finish).toBe("tool_calls")
    expect(total).toBe(16)
    expect(obj(up.requests[1].body).stream).toBe(true)
  })
})

describe("FakeUpstream scripted replies", () => {
  it("json and text replies with any status and custom headers, then falls back to the handler", async () => {
    const up = await start()
    up.script(
      { kind: "json", status: 429, body: { error: { message: "slow down", type: "rate_limit" } }, headers: { "retry-after": "1" } },
      { kind: "text", status: 502, body: "bad gateway" },
      chatJson({ content: null, toolCalls: [{ id: "c1", name: "f", arguments: "{}" }], model: "mm" }),
    )
    expect(up.pending()).toBe(3)
    const r1 = await post(up, { model: "a", messages: [] })
    expect(r1.status).toBe(429)
    expect(r1.headers.get("retry-after")).toBe("1")
    expect(await r1.json()).toEqual({ error: { message: "slow down", type: "rate_limit" } })

    const r2 = await post(up, { model: "a", messages: [] })
    expect(r2.status).toBe(502)
    expect(r2.headers.get("content-type")).toContain("text/plain")
    expect(await r2.text()).toBe("bad gateway")

    const r3 = await post(up, { model: "a", messages: [] })
    expect(await r3.json()).toMatchObject({
      model: "mm",
      choices: [{ message: { content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }, finish_reason: "tool_calls" }],
    })

    const r4 = await post(up, { model: "back-to-default", messages: [] })
    expect(await r4.json()).toMatchObject({ model: "back-to-default" })
    expect(up.pending()).toBe(0)
    expect(up.requests).toHaveLength(4)
  })

  it("sse reply: raw strings, JSON chunks, done flag and delays", async () => {
    const up = await start()
    up.script(
      { kind: "sse", chunks: [": keep-alive\n\n", chunks.text("a"), "data: {broken\n\n", chunks.finish("stop")] },
      { kind: "sse", chunks: [chunks.text("x")], done: false, delayMs: 30, headers: { "x-custom": "yes" } },
    )
    const t1 = await (await post(up, { stream: true })).text()
    expect(t1.startsWith(": keep-alive\n\n")).toBe(true)
    expect(t1).toContain("data: {broken\n\n")
    const d1 = sseData(t1)
    expect(d1).toHaveLength(4)
    expect(obj(JSON.parse(d1[0]))).toMatchObject({ object: "chat.completion.chunk", choices: [{ delta: { content: "a" } }] })
    expect(d1[3]).toBe("[DONE]")

    const started = Date.now()
    const r2 = await post(up, { stream: true })
    expect(r2.headers.get("x-custom")).toBe("yes")
    const t2 = await r2.text()
    expect(Date.now() - started).toBeGreaterThanOrEqual(25)
    expect(t2).not.toContain("[DONE]")
    expect(sseData(t2)).toHaveLength(1)
  })

  it("chatSse streams reasoning, split content and tool calls like OpenAI", async () => {
    const up = await start()
    up.script(
      chatSse({
        reasoning: "think",
        content: "abcdefghij",
        split: 4,
        toolCalls: [
          { id: "call_a", name: "f", arguments: '{"q":"0123456789"}' },
          { id: "call_b", name: "g", arguments: "{}" },
        ],
        model: "mx",
      }),
    )
    const data = sseData(await (await post(up, { stream: true })).text())
    expect(data.at(-1)).toBe("[DONE]")
    const parsed = data.slice(0, -1).map((d) => obj(JSON.parse(d)))
    const deltas = parsed.map((c) => obj(((c.choices as Obj[])[0] ?? {}).delta ?? {}))
    expect(deltas[0]).toMatchObject({ role: "assistant" })
    expect(deltas.map((d) => d.reasoning_content ?? "").join("")).toBe("think")
    expect(deltas.filter((d) => typeof d.content === "string" && d.content !== "").map((d) => d.content)).toEqual(["abcd", "efgh", "ij"])
    const tc = deltas.flatMap((d) => (d.tool_calls as Obj[] | undefined) ?? [])
    expect(tc[0]).toEqual({ index: 0, id: "call_a", type: "function", function: { name: "f", arguments: "" } })
    const argsA = tc.filter((t) => t.index === 0).map((t) => obj(t.function).arguments).join("")
    expect(argsA).toBe('{"q":"0123456789"}')
    expect(tc.filter((t) => t.index === 0 && t.id === undefined).every((t) => String(obj(t.function).arguments).length <= 8)).toBe(true)
    expect(tc.find((t) => t.index === 1)).toMatchObject({ id: "call_b", function: { name: "g" } })
    expect(parsed.at(-2)).toMatchObject({ choices: [{ finish_reason: "tool_calls" }] })
    expect(parsed.at(-1)).toMatchObject({ choices: [], usage: { total_tokens: 13 }, model: "mx" })
  })

  it("reset destroys the socket before any byte", async () => {
    const up = await start()
    up.script({ kind: "reset" })
    await expect(post(up, { model: "a" })).rejects.toThrow()
    expect(up.requests).toHaveLength(1)
    // the server keeps working afterwards
    const ok = await post(up, { model: "a" })
    expect(ok.status).toBe(200)
    await ok.arrayBuffer()
  })

  it("resetAfter sends headers and chunks, then the body errors", async () => {
    const up = await start()
    up.script({ kind: "resetAfter", chunks: [chunks.text("partial")] })
    const res = await post(up, { stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("text/event-stream")
    const body = res.body
    expect(body).not.toBeNull()
    const reader = body!.getReader()
    const dec = new TextDecoder()
    let got = ""
    let error: unknown
    try {
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        got += dec.decode(value)
      }
    } catch (e) {
      error = e
    }
    expect(error).toBeDefined()
    expect(got).toContain('"content":"partial"')
    expect(got).not.toContain("[DONE]")
  })

  it("stall never answers; client timeout fires; close() is quick with stalled requests", async () => {
    const up = await startFakeUpstream()
    up.script({ kind: "stall", ms: 60_000 }, { kind: "stall", ms: 60_000 })
    await expect(post(up, { a: 1 }, { signal: AbortSignal.timeout(100) })).rejects.toThrow()
    // settled at once so its rejection during close() is never an unhandled one
    const pending = post(up, { a: 2 }).then(() => "answered", () => "rejected")
    await waitFor(() => up.requests.length === 2)
    expect(up.openConnections()).toBeGreaterThan(0)
    const t0 = Date.now()
    await up.close()
    // generous backstop: the stalls last a minute, so a close that waited for them would take that
    expect(Date.now() - t0).toBeLessThan(10_000)
    expect(await pending).toBe("rejected")
    expect(up.openConnections()).toBe(0)
    await up.close() // idempotent
  })

  it("stall ends by destroying the socket after ms", async () => {
    const up = await start()
    up.script({ kind: "stall", ms: 50 })
    const t0 = Date.now()
    await expect(post(up, {})).rejects.toThrow()
    expect(Date.now() - t0).toBeGreaterThanOrEqual(40)
  })

  it("onRequest replaces the default handler and handler errors become 500s", async () => {
    const up = await start()
    up.onRequest((req, index) => ({ kind: "json", body: { path: req.path, index } }))
    const r1 = await fetch(`${up.url}/models`, { dispatcher: agent })
    expect(await r1.json()).toEqual({ path: "/v1/models", index: 0 })
    up.onRequest(() => {
      throw new Error("boom")
    })
    const r2 = await post(up, {})
    expect(r2.status).toBe(500)
    expect(obj(await r2.json()).error).toMatchObject({ message: expect.stringContaining("boom") })
    // a scripted handler function is used once
    up.script(async (req) => ({ kind: "text", body: `got ${req.method}` }))
    expect(await (await post(up, {})).text()).toBe("got POST")
    up.reset()
    expect(up.requests).toHaveLength(0)
    const r4 = await post(up, { model: "z" })
    expect(await r4.json()).toMatchObject({ model: "z" })
  })
})

describe("FakeUpstream connections", () => {
  it("reuses keep-alive sockets and returns to 0 when the client agent closes", async () => {
    const up = await start()
    const own = new Agent({ keepAliveTimeout: 30_000 })
    for (let i = 0; i < 3; i++) {
      const r = await post(up, { model: "k" }, { dispatcher: own })
      await r.arrayBuffer()
      // undici hands the socket back to its pool a tick after the body completes
      await new Promise((r) => setTimeout(r, 20))
    }
    expect(up.openConnections()).toBe(1)
    expect(new Set(up.requests.map((r) => r.remotePort)).size).toBe(1)
    expect(up.requests.every((r) => r.headers.connection !== "close")).toBe(true)
    await own.close()
    await waitFor(() => up.openConnections() === 0)
  })

  it("garbage on the wire does not crash the server", async () => {
    const up = await start()
    const net = await import("node:net")
    await new Promise<void>((resolve) => {
      const s = net.connect(up.port, "127.0.0.1", () => s.write("NOT HTTP AT ALL\r\n\r\n"))
      s.on("data", () => {})
      s.on("error", () => resolve())
      s.on("close", () => resolve())
    })
    const ok = await post(up, { model: "still-alive" })
    expect(await ok.json()).toMatchObject({ model: "still-alive" })
  })
})
