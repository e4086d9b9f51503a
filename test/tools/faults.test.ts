/**
 * Host tools when tool servers misbehave (issue 25, "Ready or not" and "What the model gets
 * back"), against a real gateway, a fake OpenAI upstream scripted to call the host tools, and our
 * fault-injecting MCP server (test/support/FaultyMcpServer.ts) over Streamable HTTP:
 * - a server down at start: 503 `not_ready` in each protocol's envelope with Retry-After, naming the
 *   server and never its URL; served once the server is up, with no gateway restart;
 * - a server dying mid-call, a call past `timeoutMs`, a failing tool: error results the model sees,
 *   and the answer goes on (200);
 * - a 10 MiB result: cut to `maxHostToolResultBytes` with a note, as the upstream receives it;
 * - `notifications/tools/list_changed`: the next request is offered the new list, also after the
 *   server restarted (a new session, whose changes are heard again);
 * - `/readyz`, `/gateway/status` and `/gateway/metrics` show each server's state and tool count,
 *   never its URL or headers.
 */
import { until } from "../files/uploadWire.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startFaultyMcpServer, type FaultyMcpServer } from "../support/FaultyMcpServer.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-team-0123456789"
const LATE_KEY = "sk-late-0123456789"
const CRASH_KEY = "sk-crash-0123456789"
const ADMIN = "admin-key-0123456789"
const HEADER_SECRET = "Bearer tool-header-secret-5f1e"
const QUERY_SECRET = "query-secret-77ab"


/** Poll until `check` holds (a generous bound: a failure names what never came). */
const eventually = (what: string, check: () => boolean | Promise<boolean>, ms = 15_000) => until(what, check, ms)

interface ChatMessage {
  readonly role: string
  readonly content?: unknown
  readonly tool_call_id?: string
}
interface ChatBody {
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
}

/** The text of the tool message answering `callId` in a chat request the upstream received. */
const toolResultText = (body: unknown, callId: string): string => {
  const message = (body as ChatBody).messages.find((m) => m.role === "tool" && m.tool_call_id === callId)
  if (message === undefined) throw new Error(`no tool message for ${callId} in ${JSON.stringify(body).slice(0, 500)}`)
  const content = message.content
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((p: { text?: string }) => p.text ?? "").join("")
  return JSON.stringify(content)
}

const toolNames = (body: unknown): ReadonlyArray<string> => ((body as ChatBody).tools ?? []).map((t) => t.function.name)

interface ServerStatus {
  readonly server: string
  readonly app?: string
  readonly state: string
  readonly tools: number
  readonly reason?: string
}

// the same faults on a server of the 2025 revisions (sessions) and of the 2026-07-28 one (sessionless)
describe.each(["2025", "2026"] as const)("host tools: faults of a %s tool server", (revision) => {
  let upstream: FakeUpstream
  let faulty: FaultyMcpServer
  let late: FaultyMcpServer
  let crashy: FaultyMcpServer
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    faulty = await startFaultyMcpServer({ revision, requireHeader: { name: "authorization", value: HEADER_SECRET } })
    late = await startFaultyMcpServer({ revision, listen: false })
    crashy = await startFaultyMcpServer({ revision })
    gateway = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: KEY, app: "team" },
        { key: LATE_KEY, app: "late-app" },
        { key: CRASH_KEY, app: "crash-app" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: {
        faulty: { url: `${faulty.url}?token=${QUERY_SECRET}`, headers: { authorization: HEADER_SECRET } },
        // the same server with a short per-call bound
        timed: { url: faulty.url, headers: { authorization: HEADER_SECRET }, timeoutMs: 300 },
        late: { url: `${late.url}?token=${QUERY_SECRET}`, readyTimeoutMs: 300 },
        crashy: { url: crashy.url, readyTimeoutMs: 300 }
      },
      apps: {
        team: { hostTools: ["faulty/*", "timed/slow"] },
        "late-app": { hostTools: ["late/echo"] },
        "crash-app": { hostTools: ["crashy/*"] }
      }
    })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
    await Promise.all([upstream?.close(), faulty?.close(), late?.close(), crashy?.close()])
  })

  const chat = (key: string, body: Record<string, unknown> = {}) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "up/m", messages: [{ role: "user", content: "go" }], ...body })
    })

  const adminGet = (path: string) => fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })

  const statusOf = async (server: string): Promise<ServerStatus | undefined> => {
    const body = (await (await adminGet("/gateway/status")).json()) as { toolServers: ReadonlyArray<ServerStatus> }
    return body.toolServers.find((s) => s.server === server)
  }

  /** One host call of `name` with `args`, then the model's answer: the client's answer and what the upstream got back. */
  const callOnce = async (key: string, name: string, args: Record<string, unknown>, callId: string) => {
    const before = upstream.requests.length
    upstream.script(chatJson({ toolCalls: [{ id: callId, name, arguments: JSON.stringify(args) }] }), chatJson({ content: "carried on" }))
    const res = await chat(key)
    const body = (await res.json()) as { choices?: ReadonlyArray<{ message: { content: string } }> }
    const second = upstream.requests[before + 1]
    return { res, body, second, result: second === undefined ? "" : toolResultText(second.body, callId) }
  }

  it("a server down at start: 503 not_ready in every protocol's envelope, naming the server, never its URL; served once it is up", async () => {
    const requests: ReadonlyArray<readonly [string, () => Promise<Response>, (body: unknown) => string]> = [
      ["chat", () => chat(LATE_KEY), (b) => (b as { error: { code: string; message: string } }).error.code + " " + (b as { error: { message: string } }).error.message],
      [
        "responses",
        () =>
          fetch(`${gateway.url}/v1/responses`, {
            method: "POST",
            headers: { authorization: `Bearer ${LATE_KEY}`, "content-type": "application/json" },
            body: JSON.stringify({ model: "up/m", input: "go" })
          }),
        (b) => (b as { error: { code: string } }).error.code + " " + (b as { error: { message: string } }).error.message
      ],
      [
        "messages",
        () =>
          fetch(`${gateway.url}/v1/messages`, {
            method: "POST",
            headers: { "x-api-key": LATE_KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" },
            body: JSON.stringify({ model: "up/m", max_tokens: 50, messages: [{ role: "user", content: "go" }] })
          }),
        (b) => {
          const body = b as { type: string; error: { type: string; message: string } }
          expect(body.type).toBe("error")
          return body.error.type + " " + body.error.message
        }
      ],
      [
        "gemini",
        () =>
          fetch(`${gateway.url}/v1beta/models/up/m:generateContent`, {
            method: "POST",
            headers: { "x-goog-api-key": LATE_KEY, "content-type": "application/json" },
            body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "go" }] }] })
          }),
        (b) => {
          const body = b as { error: { code: number; status: string; message: string } }
          expect(body.error.code).toBe(503)
          return body.error.status + " " + body.error.message
        }
      ]
    ]
    const before = upstream.requests.length
    for (const [protocol, send, describeError] of requests) {
      const res = await send()
      const text = await res.text()
      expect(res.status, `${protocol}: ${text}`).toBe(503)
      expect(res.headers.get("retry-after"), protocol).toBe("5")
      const said = describeError(JSON.parse(text))
      expect(said, protocol).toMatch(/tool server late\b/)
      if (protocol === "chat" || protocol === "responses") expect(said).toMatch(/^not_ready /)
      for (const secret of [String(late.port), QUERY_SECRET, "127.0.0.1", "/mcp"]) expect(text, protocol).not.toContain(secret)
    }
    // nothing reached the model with a partial tool set
    expect(upstream.requests.length).toBe(before)
    expect(await statusOf("late")).toMatchObject({ state: "down", tools: 0, reason: "cannot connect (ECONNREFUSED)" })

    await late.start()
    upstream.script(chatJson({ content: "served" }))
    let res = await chat(LATE_KEY)
    // the gateway reconnects on its own backoff (a request brings it forward at most once a second)
    await eventually("the late server to be used", async () => {
      if (res.status === 200) return true
      expect(res.status).toBe(503)
      await res.body?.cancel()
      res = await chat(LATE_KEY)
      return res.status === 200
    })
    expect(((await res.json()) as { choices: ReadonlyArray<{ message: { content: string } }> }).choices[0].message.content).toBe("served")
    expect(toolNames(upstream.requests.at(-1)?.body)).toEqual(["late__echo"])
    expect(await statusOf("late")).toMatchObject({ state: "ready", tools: late.toolNames().length })
  })

  it("a tool call past timeoutMs is an error result naming the timeout; the answer goes on", async () => {
    const { res, body, result } = await callOnce(KEY, "timed__slow", { ms: 5_000 }, "call-timeout")
    expect(res.status).toBe(200)
    expect(body.choices?.[0].message.content).toBe("carried on")
    expect(result).toMatch(/did not answer within 300 ms/)
    expect(res.headers.get("x-gateway-host-tool-calls")).toBe("1")
  })

  it("an isError result and a JSON-RPC error are error results the model sees", async () => {
    const isError = await callOnce(KEY, "faulty__fail", { mode: "isError" }, "call-iserror")
    expect(isError.res.status).toBe(200)
    expect(isError.result).toContain("the fail tool reports an error")
    const thrown = await callOnce(KEY, "faulty__fail", { mode: "throw" }, "call-throw")
    expect(thrown.res.status).toBe(200)
    expect(thrown.body.choices?.[0].message.content).toBe("carried on")
    expect(thrown.result).toMatch(/The tool call failed/)
  })

  it("a 10 MiB result reaches the upstream cut to maxHostToolResultBytes (256 KiB) with a note", async () => {
    const { res, result } = await callOnce(KEY, "faulty__huge", { bytes: 10 * 1024 * 1024 }, "call-huge")
    expect(res.status).toBe(200)
    const kept = /^x+/.exec(result)?.[0] ?? ""
    expect(kept.length).toBe(256 * 1024)
    const note = result.slice(kept.length)
    expect(note).toMatch(/result cut by the gateway: 10485760 bytes, over its limit of 262144 bytes/)
    expect(note.length).toBeLessThan(300)
  }, 60_000)

  it("tools/list_changed: the next request is offered the new tool, and no longer a removed one", async () => {
    const offered = async () => {
      upstream.script(chatJson({ content: "listed" }))
      const res = await chat(KEY)
      expect(res.status).toBe(200)
      await res.text()
      return toolNames(upstream.requests.at(-1)?.body)
    }
    const first = await offered()
    expect(first).toContain("faulty__echo")
    expect(first).not.toContain("faulty__fresh")
    const count = (await statusOf("faulty"))!.tools

    faulty.addTool("fresh", "A tool added while the gateway runs.")
    await eventually("the gateway to see the added tool", async () => (await statusOf("faulty"))?.tools === count + 1)
    const added = await offered()
    expect(added).toContain("faulty__fresh")

    faulty.removeTool("fresh")
    faulty.removeTool("echo")
    await eventually("the gateway to see the removed tools", async () => (await statusOf("faulty"))?.tools === count - 1)
    const removed = await offered()
    expect(removed).not.toContain("faulty__fresh")
    expect(removed).not.toContain("faulty__echo")
    expect(removed).toContain("faulty__slow")
    faulty.addTool("echo")
    // every session of the server is told: `timed` is a second session with the same server
    await eventually("both sessions to see echo again", async () => (await statusOf("faulty"))?.tools === count && (await statusOf("timed"))?.tools === count)
  })

  it("/readyz, /gateway/status and /gateway/metrics show each server's state and tool count, never its URL or headers", async () => {
    const ready = await fetch(`${gateway.url}/readyz`)
    const readyText = await ready.text()
    // a tool server does not take the replica out of rotation
    expect(ready.status).toBe(200)
    const readyBody = JSON.parse(readyText) as { ready: boolean; toolServers: ReadonlyArray<ServerStatus> }
    expect(readyBody.ready).toBe(true)
    expect(readyBody.toolServers.map((s) => s.server).sort()).toEqual(["crashy", "faulty", "late", "timed"])
    expect(readyBody.toolServers.find((s) => s.server === "faulty")).toMatchObject({ state: "ready" })

    const status = await adminGet("/gateway/status")
    const statusText = await status.text()
    expect(status.status).toBe(200)
    const servers = (JSON.parse(statusText) as { toolServers: ReadonlyArray<ServerStatus> }).toolServers
    const faultyTools = servers.find((s) => s.server === "faulty")!.tools
    expect(faultyTools).toBe(faulty.toolNames().length)
    expect(servers.find((s) => s.server === "timed")).toMatchObject({ state: "ready", tools: faultyTools })

    const metrics = await adminGet("/gateway/metrics")
    const metricsText = await metrics.text()
    expect(metricsText).toContain('gateway_tool_server_ready{server="faulty"} 1')
    expect(metricsText).toContain(`gateway_tool_server_tools{server="faulty"} ${faultyTools}`)

    for (const text of [readyText, statusText, metricsText]) {
      for (const secret of [QUERY_SECRET, HEADER_SECRET, "tool-header-secret", `:${faulty.port}`, `:${late.port}`, `:${crashy.port}`, "/mcp"]) expect(text).not.toContain(secret)
    }
  })

  it("a server dying mid-call: an error result, the answer goes on; 503 while it is down; served again once it is back", async () => {
    const { res, body, result } = await callOnce(CRASH_KEY, "crashy__crash", {}, "call-crash")
    expect(res.status).toBe(200)
    expect(body.choices?.[0].message.content).toBe("carried on")
    expect(result).toMatch(/The tool call failed/)
    expect(crashy.listening()).toBe(false)

    // the gateway notices the server is gone: its status, then a request of an app using it
    await eventually("the crashed server to show down", async () => (await statusOf("crashy"))?.state === "down")
    const refused = await chat(CRASH_KEY)
    expect(refused.status).toBe(503)
    expect(((await refused.json()) as { error: { message: string } }).error.message).toMatch(/tool server crashy/)

    await crashy.start()
    let last = 0
    await eventually("the restarted server to be used", async () => {
      upstream.script(chatJson({ toolCalls: [{ id: "call-after", name: "crashy__echo", arguments: JSON.stringify({ text: "back" }) }] }), chatJson({ content: "again" }))
      const again = await chat(CRASH_KEY)
      last = again.status
      await again.text()
      if (again.status !== 200) upstream.reset()
      return again.status === 200
    })
    expect(last).toBe(200)
    expect(toolResultText(upstream.requests.at(-1)?.body, "call-after")).toBe("echo: back")
  })

  it("a server restarted between requests: the gateway opens a new session and hears its list changes again", async () => {
    const before = (await statusOf("crashy"))!.tools
    await crashy.stop()
    await crashy.start()
    crashy.addTool("after_restart")
    await eventually("the gateway to list the tool added after the restart", async () => (await statusOf("crashy"))?.tools === before + 1)
    upstream.script(chatJson({ content: "listed" }))
    const res = await chat(CRASH_KEY)
    expect(res.status).toBe(200)
    await res.text()
    expect(toolNames(upstream.requests.at(-1)?.body)).toContain("crashy__after_restart")
  })

  it("the tool server got the configured header and query (the secrets are used, not just kept)", () => {
    const seen = faulty.requests.filter((r) => r.url.includes(QUERY_SECRET))
    expect(seen.length).toBeGreaterThan(0)
    expect(faulty.requests.every((r) => r.headers.authorization === HEADER_SECRET)).toBe(true)
  })
})
