/**
 * The fake MCP server of `npm run bench -- --host-tools` (bench/hosttools.ts), run as its own
 * process: `node bench/.build/mcpfake.js` prints `listening on http://127.0.0.1:PORT` and serves
 * MCP over Streamable HTTP at `/mcp`, built with the official SDK (`@modelcontextprotocol/server`
 * 2.4, `createMcpHandler`: the 2026-07-28 revision, sessionless, and the stateless 2025 fallback).
 *
 * With `--era 2025`: `@modelcontextprotocol/sdk` 1.32's server transport instead, sessionful, the 2025
 * revision only (the gateway's client falls back to it), answering each POST as an SSE stream.
 *
 * One tool, `lookup` (`{ query: string }`), answered at once with a short text: a ~200-byte
 * "search result" naming the query. No output schema, no structured content: the plainest tool a
 * host call can reach, so what the bench measures is the gateway's path, not the tool's work.
 *
 * `GET /bench/stats` reports the `tools/call` requests served so far, every POST to /mcp, and the
 * requests served per era (`modern`: a per-request server instance of the 2026-07-28 path; `legacy`:
 * the 2025 path).
 */
import { randomUUID } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { createMcpHandler, McpServer } from "@modelcontextprotocol/server"
import { McpServer as McpServer1 } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { z } from "zod"
import { lookupText } from "./protocols.js"

/** `--era 2025`: the 2025 revision only, as most servers today */
const era2025 = process.argv.includes("--era") && process.argv[process.argv.indexOf("--era") + 1] === "2025"

let calls = 0
let posts = 0
const eras = { modern: 0, legacy: 0 }

const DESCRIPTION = "Look a short fact up. Answers with one paragraph of text."
const lookup = async ({ query }: { query: string }) => {
  calls++
  return { content: [{ type: "text" as const, text: lookupText(query) }] }
}

const factory = (ctx: { readonly era: "legacy" | "modern" }) => {
  eras[ctx.era]++
  const server = new McpServer({ name: "bench-fake", version: "1.0.0" })
  server.registerTool("lookup", { description: DESCRIPTION, inputSchema: z.object({ query: z.string().describe("what to look up") }) }, lookup)
  return server
}

const handler = createMcpHandler(factory, { keepAliveMs: 0 })

/**
 * The 2025 flavour: `@modelcontextprotocol/sdk` 1.32's Streamable HTTP server transport with
 * sessions (one McpServer per session, made at `initialize`), answering POSTs as SSE streams (its
 * default, as most servers do).
 */
const sessions = new Map<string, StreamableHTTPServerTransport>()
const session2025 = async () => {
  const server = new McpServer1({ name: "bench-fake", version: "1.0.0" })
  server.registerTool("lookup", { description: DESCRIPTION, inputSchema: { query: z.string().describe("what to look up") } }, lookup)
  const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => void sessions.set(id, transport)
  })
  transport.onclose = () => {
    if (transport.sessionId !== undefined) sessions.delete(transport.sessionId)
  }
  await server.connect(transport)
  return transport
}
const serve2025 = async (req: http.IncomingMessage, res: http.ServerResponse) => {
  const id = req.headers["mcp-session-id"]
  const transport = typeof id === "string" ? sessions.get(id) : await session2025()
  if (transport === undefined) {
    res.writeHead(404, { "content-type": "application/json" })
    return res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }))
  }
  eras.legacy++
  await transport.handleRequest(req, res)
}

const readBody = (req: http.IncomingMessage) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

const server = http.createServer((req, res) => {
  void (async () => {
    const pathname = (req.url ?? "/").split("?")[0]
    if (req.method === "GET" && pathname === "/bench/stats") {
      const body = JSON.stringify({ calls, posts, eras, era: era2025 ? "2025" : "2026-07-28" })
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
      return res.end(body)
    }
    if (pathname !== "/mcp") {
      res.writeHead(404)
      return res.end()
    }
    if (req.method === "POST") posts++
    if (era2025) return serve2025(req, res)
    const body = req.method === "POST" ? await readBody(req) : undefined
    const headers = new Headers()
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined) continue
      for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v)
    }
    const request = new Request(`http://${req.headers.host ?? "127.0.0.1"}${req.url ?? "/mcp"}`, {
      method: req.method ?? "GET",
      headers,
      ...(body !== undefined && body.length > 0 ? { body } : {})
    })
    const response = await handler.fetch(request)
    const out: Record<string, string> = {}
    response.headers.forEach((value, name) => (out[name] = value))
    res.writeHead(response.status, out)
    if (response.body === null) return res.end()
    // an SSE answer streams; a JSON one is one chunk
    const reader = response.body.getReader()
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      res.write(value)
    }
    res.end()
  })().catch((e: unknown) => {
    process.stderr.write(`mcpfake: ${e instanceof Error ? e.message : String(e)}\n`)
    if (!res.headersSent) res.writeHead(500)
    res.end()
  })
})
server.keepAliveTimeout = 120_000
server.headersTimeout = 130_000
server.requestTimeout = 0
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`))
const stop = () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
  setTimeout(() => process.exit(0), 500).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
