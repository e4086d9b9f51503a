/**
 * A small MCP server over Streamable HTTP on loopback, for tests: the SDK's own `createMcpHandler`
 * (2026-07-28 with the stateless 2025 fallback) serving a tool set the test can replace, which
 * announces `notifications/tools/list_changed` to every listening client (the gateway's connection
 * to it listens: it negotiates 2026-07-28 and subscribes).
 */
import { createMcpHandler, Server, type CallToolResult, type Tool } from "@modelcontextprotocol/server"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** What a tool may do while it runs: report progress to a caller that asked for it. */
export interface ToolRun {
  readonly progress: (progress: number, total: number) => Promise<void>
}

export interface TestTool {
  readonly tool: Tool
  readonly run: (args: Record<string, unknown>, run: ToolRun) => CallToolResult | Promise<CallToolResult>
}

export interface McpTestServer {
  /** `http://127.0.0.1:PORT/mcp` */
  readonly url: string
  /** Replace the tools and announce the change. */
  readonly setTools: (tools: ReadonlyArray<TestTool>) => void
  readonly close: () => Promise<void>
}

/** A Node request's body and headers as a web Request. */
const toWeb = async (req: http.IncomingMessage, origin: string, signal: AbortSignal): Promise<Request> => {
  const chunks: Array<Buffer> = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  const headers = new Headers()
  for (const [name, value] of Object.entries(req.headers)) if (typeof value === "string" && name !== "host" && name !== "content-length" && name !== "connection") headers.set(name, value)
  const body = chunks.length === 0 ? undefined : Buffer.concat(chunks)
  return new Request(`${origin}${req.url ?? "/"}`, { method: req.method ?? "GET", headers, ...(body !== undefined && req.method !== "GET" ? { body } : {}), signal })
}

/** A web Response written to a Node response, its body streamed as it comes. */
const fromWeb = async (response: Response, res: http.ServerResponse): Promise<void> => {
  res.writeHead(response.status, Object.fromEntries(response.headers))
  if (response.body === null) return void res.end()
  res.flushHeaders()
  const reader = response.body.getReader()
  res.on("close", () => void reader.cancel().catch(() => undefined))
  for (;;) {
    const { done, value } = await reader.read().catch(() => ({ done: true as const, value: undefined }))
    if (done) break
    res.write(value)
  }
  res.end()
}

export const startMcpTestServer = async (initial: ReadonlyArray<TestTool>): Promise<McpTestServer> => {
  let tools = initial
  const factory = () => {
    const server = new Server({ name: "test-tools", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } })
    server.setRequestHandler("tools/list", () => ({ tools: tools.map((t) => t.tool) }))
    server.setRequestHandler("tools/call", async (request, ctx) => {
      const found = tools.find((t) => t.tool.name === request.params.name)
      if (found === undefined) return { content: [{ type: "text", text: `no tool ${request.params.name}` }], isError: true }
      const progressToken = ctx.mcpReq._meta?.progressToken
      const progress = (value: number, total: number) =>
        progressToken === undefined ? Promise.resolve() : ctx.mcpReq.notify({ method: "notifications/progress", params: { progressToken, progress: value, total } })
      return found.run(request.params.arguments ?? {}, { progress })
    })
    return server
  }
  const handler = createMcpHandler(factory, { keepAliveMs: 0 })
  const server = http.createServer((req, res) => {
    const aborter = new AbortController()
    res.on("close", () => aborter.abort())
    void toWeb(req, origin, aborter.signal)
      .then((request) => handler.fetch(request))
      .then((response) => fromWeb(response, res))
      .catch(() => {
        if (!res.headersSent) res.writeHead(500)
        res.end()
      })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    url: `${origin}/mcp`,
    setTools: (next) => {
      tools = next
      handler.notify.toolsChanged()
    },
    close: async () => {
      await handler.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

/** A tool that answers with a fixed text. */
export const textTool = (name: string, text: string, description = `Answers ${JSON.stringify(text)}`): TestTool => ({
  tool: { name, description, inputSchema: { type: "object", properties: {} } },
  run: () => ({ content: [{ type: "text", text }] })
})
