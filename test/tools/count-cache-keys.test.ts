/**
 * Host tools in counts (spec 4.2: count_tokens counts the app's `hostTools` schemas, none for
 * `tool_choice` none, with a request's side effects), the 1-hour cache rule (host tools are tools
 * that reach the model), and runtime keys for an app with host tools (`app_has_host_tools`, 5.5).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { messageJson, startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const TOOLS_KEY = "sk-tools-app-0123456789"
const PLAIN_KEY = "sk-plain-app-0123456789"
const BROKEN_KEY = "sk-broken-app-0123456789"
const ADMIN = "admin-key-0123456789"

describe("host tools: counts, the 1h cache rule, runtime keys", () => {
  let upstream: FakeMessagesUpstream
  let gateway: TestGateway
  beforeAll(async () => {
    upstream = await startFakeMessagesUpstream()
    gateway = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: TOOLS_KEY, app: "tools" },
        { key: PLAIN_KEY, app: "plain" },
        { key: BROKEN_KEY, app: "broken" }
      ],
      providers: { up: { type: "anthropic", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: {
        everything: { command: [process.execPath, everything, "stdio"] },
        down: { command: [process.execPath, "-e", "process.exit(3)"], readyTimeoutMs: 300 }
      },
      apps: {
        tools: { hostTools: ["everything/echo", "everything/get-sum"] },
        broken: { hostTools: ["down/*"] },
        // no key in the config: its runtime keys are what 5.5 refuses
        keyless: { hostTools: ["everything/echo"] }
      },
      agents: { narrow: { model: "up/claude", prompt: "Be brief.", hostTools: ["everything/echo"] } }
    })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  const post = (route: string, key: string, body: unknown) =>
    fetch(`${gateway.url}${route}`, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body: JSON.stringify(body) })
  const count = async (key: string, body: Record<string, unknown>) => {
    const res = await post("/v1/messages/count_tokens", key, { model: "up/claude", messages: [{ role: "user", content: "Add two and three." }], ...body })
    expect(res.status).toBe(200)
    return ((await res.json()) as { input_tokens: number }).input_tokens
  }

  it("Messages count_tokens grows by the host tool schemas, none for tool_choice none, fewer for an agent granting a subset", async () => {
    const withHost = await count(TOOLS_KEY, {})
    const without = await count(PLAIN_KEY, {})
    expect(withHost).toBeGreaterThan(without)
    expect(await count(TOOLS_KEY, { tools: [{ name: "t", input_schema: { type: "object" } }], tool_choice: { type: "none" } })).toBe(
      await count(PLAIN_KEY, { tools: [{ name: "t", input_schema: { type: "object" } }], tool_choice: { type: "none" } })
    )
    const agent = await count(TOOLS_KEY, { model: "agent/narrow" })
    const agentPlain = await count(PLAIN_KEY, { model: "agent/narrow" })
    expect(agent).toBeGreaterThan(agentPlain)
    // the agent grants one of the app's two host tools
    expect(agent - agentPlain).toBeLessThan(withHost - without)
    // the app directory exists after the count (a request's side effect)
    expect(fs.statSync(path.join(gateway.dataDir, "apps", "tools")).isDirectory()).toBe(true)
    expect(fs.existsSync(path.join(gateway.dataDir, "apps", "plain"))).toBe(false)
  })

  it("Gemini countTokens counts them too", async () => {
    const gcount = async (key: string) => {
      const res = await fetch(`${gateway.url}/v1beta/models/up/claude:countTokens`, {
        method: "POST",
        headers: { "x-goog-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Add two and three." }] }] })
      })
      expect(res.status).toBe(200)
      return ((await res.json()) as { totalTokens: number }).totalTokens
    }
    expect(await gcount(TOOLS_KEY)).toBeGreaterThan(await gcount(PLAIN_KEY))
  })

  it("a count names a clash and a host tool not offered, in the Messages envelope", async () => {
    const clash = await post("/v1/messages/count_tokens", TOOLS_KEY, {
      model: "up/claude",
      messages: [{ role: "user", content: "x" }],
      tools: [{ name: "everything__echo", input_schema: { type: "object" } }]
    })
    expect(clash.status).toBe(400)
    const body = (await clash.json()) as { type: string; error: { type: string; message: string } }
    expect(body.type).toBe("error")
    expect(body.error.type).toBe("invalid_request_error")
    expect(body.error.message).toContain("everything__echo")
    const notGranted = await post("/v1/messages/count_tokens", TOOLS_KEY, {
      model: "agent/narrow",
      messages: [{ role: "user", content: "x" }],
      tools: [{ name: "mine", input_schema: { type: "object" } }],
      tool_choice: { type: "tool", name: "everything__get-sum" }
    })
    expect(notGranted.status).toBe(400)
    expect(((await notGranted.json()) as { error: { message: string } }).error.message).toContain("everything__get-sum")
  })

  it("a count for an app whose tool server cannot start is 503 not_ready naming the server, with Retry-After", async () => {
    const res = await post("/v1/messages/count_tokens", BROKEN_KEY, { model: "up/claude", messages: [{ role: "user", content: "x" }] })
    expect(res.status).toBe(503)
    expect(res.headers.get("retry-after")).toBe("5")
    const body = (await res.json()) as { type: string; error: { type: string; message: string } }
    expect(body.type).toBe("error")
    expect(body.error.message).toContain("tool server down")
    expect(JSON.stringify(body)).not.toContain("process.exit")
  })

  it("the 1h cache rule: with host tools offered, a caller 1h block is sent as 5 minutes; with tool_choice none it keeps 1h", async () => {
    const body = (toolChoice?: unknown) => ({
      model: "up/claude",
      max_tokens: 50,
      system: [{ type: "text", text: "Long policy.", cache_control: { type: "ephemeral", ttl: "1h" } }],
      messages: [{ role: "user", content: "hi" }],
      ...(toolChoice !== undefined ? { tools: [{ name: "mine", input_schema: { type: "object" } }], tool_choice: toolChoice } : {})
    })
    const ttls = (sent: unknown) => JSON.stringify(sent).match(/"ttl":"(1h|5m)"/g) ?? []
    upstream.script(messageJson({ blocks: [{ type: "text", text: "ok" }] }))
    expect((await post("/v1/messages", PLAIN_KEY, body())).status).toBe(200)
    expect(ttls(upstream.requests.at(-1)?.body)).toContain('"ttl":"1h"')
    upstream.script(messageJson({ blocks: [{ type: "text", text: "ok" }] }))
    expect((await post("/v1/messages", TOOLS_KEY, body())).status).toBe(200)
    const sent = upstream.requests.at(-1)?.body as { tools: Array<{ name: string; cache_control?: unknown }> }
    expect(sent.tools.map((t) => t.name)).toEqual(["everything__echo", "everything__get-sum"])
    expect(ttls(sent)).not.toContain('"ttl":"1h"')
    // the gateway's last-tool breakpoint sits on the last tool that reaches the model: a host tool
    expect(sent.tools.at(-1)?.cache_control).toBeDefined()
    upstream.script(messageJson({ blocks: [{ type: "text", text: "ok" }] }))
    expect((await post("/v1/messages", TOOLS_KEY, body({ type: "none" }))).status).toBe(200)
    const none = upstream.requests.at(-1)?.body as { tools?: Array<{ name: string }> }
    expect((none.tools ?? []).map((t) => t.name)).not.toContain("everything__echo")
    expect(ttls(none)).toContain('"ttl":"1h"')
  })

  it("a runtime key for an app with host tools is refused with app_has_host_tools", async () => {
    const res = await fetch(`${gateway.url}/gateway/admin/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ app: "keyless" })
    })
    expect(res.status).toBe(409)
    const problem = (await res.json()) as { code: string; detail: string }
    expect(problem.code).toBe("app_has_host_tools")
    expect(problem.detail).toContain("keyless")
    const ok = await fetch(`${gateway.url}/gateway/admin/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ app: "other" })
    })
    expect(ok.status).toBe(201)
  })
})
