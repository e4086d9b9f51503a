/**
 * `/mcp`: the gateway as an MCP server, asked by the official SDK's client
 * (`@modelcontextprotocol/client`, Streamable HTTP) in both of its negotiation modes: `legacy`
 * (the 2025 handshake today's CLIs speak, served statelessly) and `auto` (2026-07-28, sessionless).
 * The app's host tools come from real servers: `@modelcontextprotocol/server-everything` over stdio,
 * and a small server of the test's own over Streamable HTTP whose tool list the test changes.
 */
import { Client, StreamableHTTPClientTransport, type FetchLike, type Tool } from "@modelcontextprotocol/client"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { startMcpTestServer, textTool, type McpTestServer } from "./support/McpTestServer.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const KEY_A = "sk-mcp-team-a-0123456789"
const KEY_B = "sk-mcp-team-b-0123456789"
const KEY_NONE = "sk-mcp-no-tools-0123456789"
const KEY_SMALL = "sk-mcp-small-0123456789"
const KEY_BROKEN = "sk-mcp-broken-0123456789"
/** a tool server nobody listens for */
const DOWN_URL = "http://127.0.0.1:1/mcp"
const MODES = ["legacy", "auto"] as const
type Mode = (typeof MODES)[number]

describe("/mcp serves the calling key's app's host tools", () => {
  let upstream: FakeUpstream
  let changing: McpTestServer
  let gateway: TestGateway
  /** a second replica of the same config: its own connections to the same tool servers */
  let replica: TestGateway
  const clients: Array<Client> = []

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    changing = await startMcpTestServer([textTool("first", "one")])
    const document = {
      keys: [
        { key: KEY_A, app: "team-a" },
        { key: KEY_B, app: "team-b" },
        { key: KEY_NONE, app: "plain" },
        { key: KEY_SMALL, app: "small" },
        { key: KEY_BROKEN, app: "broken" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: {
        everything: { command: [process.execPath, everything, "stdio"] },
        changing: { url: changing.url },
        down: { url: DOWN_URL, readyTimeoutMs: 300 }
      },
      apps: {
        "team-a": { hostTools: ["everything/echo", "everything/get-sum", "everything/get-tiny-image"] },
        "team-b": { hostTools: ["changing/*"] },
        small: { hostTools: ["everything/echo"], maxHostToolResultBytes: 64 },
        broken: { hostTools: ["everything/echo", "down/*"] }
      },
      limits: { apps: { small: { maxBodyBytes: 2048 } } }
    }
    ;[gateway, replica] = await Promise.all([startGateway(document), startGateway(document)])
  }, 60_000)
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
    await replica?.close()
    await gateway?.close()
    await changing?.close()
    await upstream?.close()
  })

  const connect = async (key: string, mode: Mode, onToolsChanged?: (tools: ReadonlyArray<Tool>) => void, fetchVia?: FetchLike): Promise<Client> => {
    const client = new Client(
      { name: "mcp-test-client", version: "1.0.0" },
      {
        versionNegotiation: { mode },
        ...(onToolsChanged !== undefined ? { listChanged: { tools: { onChanged: (_error, tools) => tools !== null && tools !== undefined && onToolsChanged(tools) } } } : {})
      }
    )
    const transport = new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
      ...(fetchVia !== undefined ? { fetch: fetchVia } : {})
    })
    await client.connect(transport)
    clients.push(client)
    return client
  }

  const textOf = (content: ReadonlyArray<{ readonly type: string }>) => content.flatMap((c) => ("text" in c && typeof c.text === "string" ? [c.text] : []))

  for (const mode of MODES) {
    describe(`versionNegotiation ${mode}`, () => {
      it("negotiates the revision of its mode", async () => {
        const client = await connect(KEY_A, mode)
        expect(client.getNegotiatedProtocolVersion()).toBe(mode === "auto" ? "2026-07-28" : "2025-11-25")
        expect(client.getServerVersion()?.name).toBe("llm-gateway")
        // list changes can reach a 2026-07-28 client (on its listen stream); the stateless 2025 endpoint has no stream
        expect(client.getServerCapabilities()?.tools?.listChanged).toBe(mode === "auto")
      })

      it("lists the app's host tools with the names and schemas the model is offered", async () => {
        const client = await connect(KEY_A, mode)
        const listed = await client.listTools()
        expect(listed.tools.map((t) => t.name).sort()).toEqual(["everything__echo", "everything__get-sum", "everything__get-tiny-image"])

        upstream.script(chatJson({ content: "ok" }))
        const res = await fetch(`${gateway.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY_A}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "up/m", messages: [{ role: "user", content: "hi" }] })
        })
        expect(res.status).toBe(200)
        const offered = (upstream.requests.at(-1)?.body as { tools: ReadonlyArray<{ function: { name: string; description?: string; parameters: unknown } }> }).tools
        expect(listed.tools.map((t) => ({ name: t.name, description: t.description, parameters: t.inputSchema })).sort((a, b) => a.name.localeCompare(b.name))).toEqual(
          offered.map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters })).sort((a, b) => a.name.localeCompare(b.name))
        )
      })

      it("calls tools on their server and hands back the server's content", async () => {
        const client = await connect(KEY_A, mode)
        const echoed = await client.callTool({ name: "everything__echo", arguments: { message: `hello over ${mode}` } })
        expect(echoed.isError ?? false).toBe(false)
        expect(textOf(echoed.content)).toEqual([`Echo: hello over ${mode}`])
        const sum = await client.callTool({ name: "everything__get-sum", arguments: { a: 2, b: 40 } })
        expect(textOf(sum.content).join(" ")).toContain("42")
        const image = await client.callTool({ name: "everything__get-tiny-image", arguments: {} })
        const png = image.content.find((c) => c.type === "image")
        expect(png).toMatchObject({ type: "image", mimeType: "image/png" })
      })

      it("a tool the app is not offered is unknown, and an app without host tools lists none", async () => {
        const b = await connect(KEY_B, mode)
        expect((await b.listTools()).tools.map((t) => t.name)).not.toContain("everything__echo")
        await expect(b.callTool({ name: "everything__echo", arguments: { message: "x" } })).rejects.toThrow(/Unknown tool: everything__echo/)
        const plain = await connect(KEY_NONE, mode)
        expect((await plain.listTools()).tools).toEqual([])
      })

      it("any replica answers any request: a client whose requests alternate between two replicas", async () => {
        const served: Array<string> = []
        let turn = 0
        const alternate: FetchLike = (url, init) => {
          const origin = [gateway.url, replica.url][turn++ % 2]
          served.push(origin)
          return fetch(new URL(new URL(url).pathname, origin), init)
        }
        const client = await connect(KEY_A, mode, undefined, alternate)
        expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual(["everything__echo", "everything__get-sum", "everything__get-tiny-image"])
        for (const message of ["one", "two"]) {
          const echoed = await client.callTool({ name: "everything__echo", arguments: { message } })
          expect(textOf(echoed.content)).toEqual([`Echo: ${message}`])
        }
        expect(new Set(served)).toEqual(new Set([gateway.url, replica.url]))
      })

      it("a tool server that cannot list its tools: no partial list, an error naming the server (never its URL)", async () => {
        const client = await connect(KEY_BROKEN, mode)
        const failure = await client.listTools().then(
          () => undefined,
          (error: unknown) => (error instanceof Error ? error.message : String(error))
        )
        expect(failure).toMatch(/not ready: tool server down/)
        expect(failure).not.toContain("127.0.0.1:1")
      })

      it("cuts a result past the app's maxHostToolResultBytes with a note", async () => {
        const client = await connect(KEY_SMALL, mode)
        const result = await client.callTool({ name: "everything__echo", arguments: { message: "x".repeat(500) } })
        const texts = textOf(result.content)
        expect(texts.join("")).toContain("[result cut by the gateway")
        expect(Buffer.byteLength(texts[0], "utf8")).toBeLessThanOrEqual(64)
      })
    })
  }

  it("refuses a request without a key (401 in the OpenAI envelope) and an unknown key", async () => {
    const initialize = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "x", version: "1" } } }
    const refused: ReadonlyArray<Record<string, string>> = [{}, { authorization: "Bearer sk-not-a-key-0123456789" }]
    for (const headers of refused) {
      const res = await fetch(`${gateway.url}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
        body: JSON.stringify(initialize)
      })
      expect(res.status).toBe(401)
      expect(await res.json()).toMatchObject({ error: { type: "authentication_error", code: "invalid_api_key" } })
    }
    const client = new Client({ name: "no-key", version: "1" })
    await expect(client.connect(new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`)))).rejects.toThrow()
  })

  it("reads a body under the app's maxBodyBytes, as every route does (413 in the OpenAI envelope past it)", async () => {
    const call = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "everything__echo", arguments: { message: "x".repeat(4096) } } }
    const res = await fetch(`${gateway.url}/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY_SMALL}`, "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" },
      body: JSON.stringify(call)
    })
    expect(res.status).toBe(413)
    expect(await res.json()).toMatchObject({ error: { code: "request_body_too_large" } })
  })

  it("a GET (the 2025 server stream) is 405: the endpoint is stateless", async () => {
    const res = await fetch(`${gateway.url}/mcp`, { headers: { authorization: `Bearer ${KEY_A}`, accept: "text/event-stream" } })
    expect(res.status).toBe(405)
    expect(res.headers.get("allow")).toBe("POST")
  })

  it("counts the calls in the host tool metrics", async () => {
    const client = await connect(KEY_A, "legacy")
    await client.callTool({ name: "everything__echo", arguments: { message: "count me" } })
    const metrics = await (await fetch(`${gateway.url}/gateway/metrics`, { headers: { authorization: `Bearer ${KEY_A}` } })).text()
    expect(metrics).toMatch(/gateway_host_tool_calls_total\{[^}]*app="team-a"[^}]*tool="echo"[^}]*outcome="ok"[^}]*\} [1-9]/)
  })

  it("a list change on the upstream server reaches a 2026-07-28 client listening", async () => {
    const seen: Array<ReadonlyArray<string>> = []
    let changed: (() => void) | undefined
    const arrived = new Promise<void>((resolve) => (changed = resolve))
    const client = await connect(KEY_B, "auto", (tools) => {
      seen.push(tools.map((t) => t.name))
      if (tools.some((t) => t.name === "changing__second")) changed?.()
    })
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["changing__first"])
    expect(client.autoOpenedSubscription).toBeDefined()

    changing.setTools([textTool("first", "one"), textTool("second", "two")])
    await arrived
    expect(seen.at(-1)).toEqual(["changing__first", "changing__second"])
    const called = await client.callTool({ name: "changing__second", arguments: {} })
    expect(textOf(called.content)).toEqual(["two"])
  })
})
