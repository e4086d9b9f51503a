/**
 * Host tools and secrets (issue 25, "Security"): the built gateway as a child process with its
 * access log on runs host calls over Streamable HTTP (a server behind a header token and a URL
 * query token) and over stdio (a process given a secret in its environment, which logs every
 * call's arguments on stderr), a failing call, and a request refused because a server is down.
 * Its whole output (stdout and stderr, shutdown included) holds none of the header, the query,
 * the environment secret, the tool arguments or the results, nor the servers' address or command;
 * nor do `/gateway/status`, `/readyz` and `/gateway/metrics`.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { exited, childGateways, type Child } from "../support/ChildGateway.js"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startFaultyMcpServer, type FaultyMcpServer } from "../support/FaultyMcpServer.js"
import { within } from "../files/uploadWire.js"

const KEY = "sk-logs-team-0123456789"
const DOWN_KEY = "sk-logs-down-0123456789"
const ADMIN = "admin-key-logs-0123456789"
const HEADER_SECRET = "Bearer header-secret-9c1d"
const QUERY_SECRET = "query-secret-4e2a"
const ENV_SECRET = "env-secret-77f0"
const ARG_SECRET = "argument-secret-1b3c"
const STDIO_ARG_SECRET = "stdio-argument-secret-8d8d"
const RESULT_SECRET = "result-secret-6a6a"
const stdioScript = path.resolve("test/support/faulty-mcp-stdio.mjs")

const gateways = childGateways()

describe("host tools: nothing secret in the gateway's output", () => {
  let upstream: FakeUpstream
  let faulty: FaultyMcpServer
  let down: FaultyMcpServer
  let child: Child
  let origin: string

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    faulty = await startFaultyMcpServer({ requireHeader: { name: "authorization", value: HEADER_SECRET }, secretResult: RESULT_SECRET })
    down = await startFaultyMcpServer({ listen: false })
    const { cwd, configFile } = gateways.workspace("gw-tool-logs-", [])
    const config = {
      listen: { host: "127.0.0.1" },
      dataDir: path.join(cwd, "data"),
      accessLog: true,
      adminKey: ADMIN,
      keys: [
        { key: KEY, app: "team" },
        { key: DOWN_KEY, app: "down-app" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: {
        web: { url: `${faulty.url}?token=${QUERY_SECRET}`, headers: { authorization: HEADER_SECRET } },
        local: { command: [process.execPath, stdioScript], env: { SERVICE_TOKEN: ENV_SECRET } },
        gone: { url: `${down.url}?token=${QUERY_SECRET}`, headers: { authorization: HEADER_SECRET }, readyTimeoutMs: 200 }
      },
      apps: { team: { hostTools: ["web/*", "local/echo"] }, "down-app": { hostTools: ["gone/*"] } }
    }
    // JSON is YAML
    fs.writeFileSync(configFile, JSON.stringify(config, null, 2))
    child = await gateways.start(cwd, configFile)
    origin = `http://127.0.0.1:${child.port}`
  }, 60_000)
  afterAll(async () => {
    await gateways.cleanup()
    await Promise.all([upstream?.close(), faulty?.close(), down?.close()])
  })

  const chat = (key: string, body: Record<string, unknown> = {}) =>
    fetch(`${origin}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "up/m", messages: [{ role: "user", content: "go" }], ...body })
    })

  it("runs host calls, a failing one and a refused request, and logs none of their secrets", async () => {
    const calls = [
      { id: "c1", name: "web__echo", arguments: JSON.stringify({ text: ARG_SECRET }) },
      { id: "c2", name: "web__secret", arguments: "{}" },
      { id: "c3", name: "local__echo", arguments: JSON.stringify({ text: STDIO_ARG_SECRET }) }
    ]
    upstream.script(chatJson({ toolCalls: calls }), chatJson({ content: "done" }))
    const whole = await chat(KEY)
    expect(whole.status).toBe(200)
    expect(whole.headers.get("x-gateway-host-tool-calls")).toBe("3")
    await whole.text()
    // the calls carried their arguments and the results reached the model: the secrets were there to leak
    const second = JSON.stringify(upstream.requests.at(-1)?.body)
    for (const secret of [ARG_SECRET, RESULT_SECRET, STDIO_ARG_SECRET]) expect(second).toContain(secret)
    expect(faulty.calls.map((c) => c.arguments.text)).toContain(ARG_SECRET)
    expect(faulty.requests.some((r) => r.url.includes(QUERY_SECRET) && r.headers.authorization === HEADER_SECRET)).toBe(true)

    // streamed, with a call the server refuses
    upstream.script(chatSse({ toolCalls: [{ id: "c4", name: "web__fail", arguments: JSON.stringify({ mode: "throw", note: ARG_SECRET }) }] }), chatSse({ content: "after the failure" }))
    const streamed = await chat(KEY, { stream: true })
    expect(streamed.status).toBe(200)
    const events = await streamed.text()
    expect(events).toContain('"finish_reason":"stop"')
    expect(events).toContain("data: [DONE]")
    expect(JSON.stringify(upstream.requests.at(-1)?.body)).toContain("The tool call failed")

    const refused = await chat(DOWN_KEY)
    const refusedText = await refused.text()
    expect(refused.status).toBe(503)
    expect(refusedText).toContain("tool server gone")

    const pages: Array<string> = [refusedText]
    for (const page of ["/gateway/status", "/readyz", "/gateway/metrics"]) {
      const res = await fetch(`${origin}${page}`, { headers: { authorization: `Bearer ${ADMIN}` } })
      expect(res.status, page).toBe(200)
      pages.push(await res.text())
    }
    expect(pages[1]).toContain('"server":"local"')

    child.child.kill("SIGTERM")
    await within(15_000, "the gateway to exit", exited(child.child))
    const output = child.output()
    // the access log was on: one line per request
    expect(output.split("\n").filter((l) => l.includes('"event":"request"')).length).toBeGreaterThanOrEqual(6)
    const never = [
      HEADER_SECRET,
      "header-secret",
      QUERY_SECRET,
      ENV_SECRET,
      ARG_SECRET,
      STDIO_ARG_SECRET,
      RESULT_SECRET,
      "echo:",
      `:${faulty.port}`,
      `:${down.port}`,
      "/mcp",
      "faulty-mcp-stdio",
      "SERVICE_TOKEN"
    ]
    for (const secret of never) expect(output, `the output holds ${secret}`).not.toContain(secret)
    for (const page of pages) for (const secret of never) expect(page, `a page holds ${secret}`).not.toContain(secret)
  }, 60_000)
})
