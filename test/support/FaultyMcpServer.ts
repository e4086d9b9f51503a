/**
 * A fault-injecting MCP server for tests: Streamable HTTP on 127.0.0.1 at a port reserved up front
 * (so it can start later, to be "down at start", and stop and start again at the same URL), built
 * on the official SDKs, in either revision family:
 * - `"2025"` (default): `@modelcontextprotocol/sdk` 1.x, a low-level `Server` per session behind a
 *   sessionful `StreamableHTTPServerTransport` (what most servers speak); list changes go out on
 *   each session's GET stream;
 * - `"2026"`: `@modelcontextprotocol/server` 2.x `createMcpHandler`, sessionless 2026-07-28 only;
 *   list changes go out on `subscriptions/listen` streams.
 *
 * Its tools, controlled by their arguments:
 * - `slow` `{ ms }`: answers after `ms` (or when the call is cancelled);
 * - `fail` `{ mode: "isError" | "throw" }`: an `isError` result, or a JSON-RPC error;
 * - `huge` `{ bytes }`: a text result of exactly `bytes` ASCII bytes;
 * - `crash`: the server dies mid-call (every socket destroyed, the listener closed, the sessions
 *   forgotten as a dead process forgets them); `start()` brings it back;
 * - `echo` `{ text }`: answers `echo: <text>`;
 * - `secret`: answers `secretResult` (a value a test looks for where results must not go);
 * and the ones a test adds (`addTool`), which answer `<name> ran`. Adding or removing a tool tells
 * every connected client its list changed.
 */
import { createMcpHandler, Server as ModernServer, type McpHttpHandler, type Tool } from "@modelcontextprotocol/server"
import { Server as LegacyServer } from "@modelcontextprotocol/sdk/server/index.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { randomUUID } from "node:crypto"
import * as http from "node:http"
import * as net from "node:net"
import { Readable } from "node:stream"

export interface FaultyMcpServerOptions {
  /** listen at once (default); `false` only reserves the port: the server is down until `start()` */
  readonly listen?: boolean
  /** a header every request must carry (401 without it), as a server behind a token would */
  readonly requireHeader?: { readonly name: string; readonly value: string }
  /** the revision family it speaks (default "2025") */
  readonly revision?: "2025" | "2026"
  /** what the `secret` tool answers */
  readonly secretResult?: string
}

/** One HTTP request as the server received it. */
export interface ReceivedRequest {
  readonly method: string
  /** the request target, query included */
  readonly url: string
  readonly headers: http.IncomingHttpHeaders
}

export interface FaultyMcpServer {
  readonly port: number
  /** `http://127.0.0.1:PORT/mcp` */
  readonly url: string
  /** Listen on the reserved port (after a stop or a crash, or when created with `listen: false`). */
  readonly start: () => Promise<void>
  /** Stop as a dying process does: sockets destroyed, sessions forgotten. */
  readonly stop: () => Promise<void>
  readonly listening: () => boolean
  /** Add a tool (answering `<name> ran`) and tell every client its list changed. */
  readonly addTool: (name: string, description?: string) => void
  /** Remove a tool and tell every client its list changed. */
  readonly removeTool: (name: string) => void
  /** the tools listed now */
  readonly toolNames: () => ReadonlyArray<string>
  /** every tool call received, in order (arguments as sent) */
  readonly calls: Array<{ readonly tool: string; readonly arguments: Record<string, unknown> }>
  /** every HTTP request received, in order */
  readonly requests: Array<ReceivedRequest>
  /** Stop for good. */
  readonly close: () => Promise<void>
}

interface ToolResult {
  [key: string]: unknown
  content: Array<{ type: "text"; text: string }>
  isError?: boolean
}

const text = (value: string): ToolResult => ({ content: [{ type: "text", text: value }] })

const numberArg = (args: Record<string, unknown>, name: string, fallback: number) => {
  const value = args[name]
  return typeof value === "number" ? value : fallback
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener("abort", () => {
      clearTimeout(timer)
      resolve()
    })
  })

/** A free port on 127.0.0.1, released again (the server listens on it later). */
const reservePort = () =>
  new Promise<number>((resolve, reject) => {
    const probe = net.createServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      probe.close(() => resolve(port))
    })
  })

const BUILT_IN: ReadonlyArray<Tool> = [
  { name: "slow", description: "Answers after ms milliseconds.", inputSchema: { type: "object", properties: { ms: { type: "number" } } } },
  { name: "fail", description: "Fails: an isError result, or a JSON-RPC error.", inputSchema: { type: "object", properties: { mode: { type: "string", enum: ["isError", "throw"] } } } },
  { name: "huge", description: "Answers bytes bytes of text.", inputSchema: { type: "object", properties: { bytes: { type: "number" } } } },
  { name: "crash", description: "The server dies during the call.", inputSchema: { type: "object", properties: {} } },
  { name: "echo", description: "Echoes its text.", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } },
  { name: "secret", description: "Answers a secret.", inputSchema: { type: "object", properties: {} } }
]

/** A web `Request` for a Node request (its body streamed), aborted when the client goes away. */
const toWebRequest = (req: http.IncomingMessage, origin: string, signal: AbortSignal): Request => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one)
  }
  const method = req.method ?? "GET"
  const hasBody = method !== "GET" && method !== "HEAD"
  // `duplex` is required for a streamed body and missing from the DOM typings of RequestInit
  const init: RequestInit & { duplex?: "half" } = { method, headers, signal, ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: "half" } : {}) }
  return new Request(new URL(req.url ?? "/", origin), init)
}

/** Write a web `Response` to a Node response, its body streamed until either side ends. */
const writeWebResponse = async (response: Response, res: http.ServerResponse) => {
  res.writeHead(response.status, Object.fromEntries(response.headers))
  if (response.body === null) return void res.end()
  res.flushHeaders()
  const reader = response.body.getReader()
  res.once("close", () => void reader.cancel().catch(() => undefined))
  for (;;) {
    const { done, value } = await reader.read()
    if (done || res.destroyed) break
    res.write(value)
  }
  res.end()
}

export const startFaultyMcpServer = async (options: FaultyMcpServerOptions = {}): Promise<FaultyMcpServer> => {
  const port = await reservePort()
  const origin = `http://127.0.0.1:${port}`
  const revision = options.revision ?? "2025"
  const tools = new Map<string, Tool>(BUILT_IN.map((t) => [t.name, t]))
  const calls: FaultyMcpServer["calls"] = []
  const requests: Array<ReceivedRequest> = []
  const sockets = new Set<net.Socket>()
  let listener: http.Server | undefined
  let closed = false

  const runTool = async (name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<ToolResult> => {
    calls.push({ tool: name, arguments: args })
    switch (name) {
      case "slow": {
        const ms = numberArg(args, "ms", 1_000)
        await sleep(ms, signal)
        return text(`slept ${ms} ms`)
      }
      case "fail":
        // a plain throw in a tools/call handler is a JSON-RPC error (internal error)
        if (args.mode === "throw") throw new Error("the fail tool failed on purpose")
        return { content: [{ type: "text", text: "the fail tool reports an error" }], isError: true }
      case "huge":
        return text("x".repeat(numberArg(args, "bytes", 1024)))
      case "crash":
        void die()
        // never answers: the socket is gone
        return new Promise<ToolResult>(() => undefined)
      case "echo":
        return text(`echo: ${typeof args.text === "string" ? args.text : ""}`)
      case "secret":
        return text(options.secretResult ?? "the secret")
      default:
        if (tools.has(name)) return text(`${name} ran`)
        throw new Error(`no tool ${name}`)
    }
  }
  const listTools = () => ({ tools: [...tools.values()] })

  // --- 2025: a session (a Server and its transport) per client --------------------------------
  const sessions = new Map<string, { readonly server: LegacyServer; readonly transport: StreamableHTTPServerTransport }>()

  const newSession = () => {
    const server = new LegacyServer({ name: "faulty", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } })
    server.setRequestHandler(ListToolsRequestSchema, listTools)
    server.setRequestHandler(CallToolRequestSchema, (request, extra) => runTool(request.params.name, request.params.arguments ?? {}, extra.signal))
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => void sessions.set(id, { server, transport })
    })
    transport.onclose = () => {
      if (transport.sessionId !== undefined) sessions.delete(transport.sessionId)
    }
    return { server, transport }
  }

  const handleLegacy = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const sessionId = req.headers["mcp-session-id"]
    if (typeof sessionId === "string") {
      const session = sessions.get(sessionId)
      if (session === undefined) {
        res.writeHead(404, { "content-type": "application/json" })
        return void res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }))
      }
      return session.transport.handleRequest(req, res)
    }
    // no session: a new one (the transport refuses anything but `initialize` itself)
    const { server, transport } = newSession()
    await server.connect(transport)
    await transport.handleRequest(req, res)
    if (transport.sessionId === undefined) await server.close().catch(() => undefined)
  }

  // --- 2026: sessionless, a Server per request -------------------------------------------------
  const makeModern = (): McpHttpHandler =>
    createMcpHandler(
      () => {
        const server = new ModernServer({ name: "faulty", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } })
        server.setRequestHandler("tools/list", listTools)
        server.setRequestHandler("tools/call", (request, ctx) => runTool(request.params.name, request.params.arguments ?? {}, ctx.mcpReq.signal))
        return server
      },
      { legacy: "reject", keepAliveMs: 0 }
    )
  let modern: McpHttpHandler | undefined

  const handleModern = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    modern ??= makeModern()
    const gone = new AbortController()
    res.once("close", () => gone.abort())
    await writeWebResponse(await modern.fetch(toWebRequest(req, origin, gone.signal)), res)
  }

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers })
    if ((req.url ?? "").split("?")[0] !== "/mcp") return void res.writeHead(404).end()
    const required = options.requireHeader
    if (required !== undefined && req.headers[required.name.toLowerCase()] !== required.value) return void res.writeHead(401).end()
    return revision === "2025" ? handleLegacy(req, res) : handleModern(req, res)
  }

  async function die() {
    const was = listener
    listener = undefined
    for (const socket of sockets) socket.destroy()
    sockets.clear()
    const open = [...sessions.values()]
    sessions.clear()
    await Promise.all(open.map((s) => s.server.close().catch(() => undefined)))
    const handler = modern
    modern = undefined
    await handler?.close().catch(() => undefined)
    if (was !== undefined) await new Promise<void>((resolve) => was.close(() => resolve()))
  }

  const start = () =>
    new Promise<void>((resolve, reject) => {
      if (closed) return reject(new Error("the faulty MCP server is closed"))
      if (listener !== undefined) return resolve()
      const server = http.createServer((req, res) => {
        handle(req, res).catch(() => {
          if (!res.headersSent) res.writeHead(500)
          res.end()
        })
      })
      server.on("connection", (socket) => {
        sockets.add(socket)
        socket.once("close", () => sockets.delete(socket))
      })
      server.once("error", reject)
      server.listen(port, "127.0.0.1", () => {
        listener = server
        resolve()
      })
    })

  const changed = () => {
    for (const { server } of sessions.values()) void server.sendToolListChanged().catch(() => undefined)
    modern?.notify.toolsChanged()
  }

  if (options.listen !== false) await start()

  return {
    port,
    url: `${origin}/mcp`,
    start,
    stop: die,
    listening: () => listener !== undefined,
    addTool: (name, description) => {
      tools.set(name, { name, ...(description !== undefined ? { description } : {}), inputSchema: { type: "object", properties: {} } })
      changed()
    },
    removeTool: (name) => {
      tools.delete(name)
      changed()
    },
    toolNames: () => [...tools.keys()],
    calls,
    requests,
    close: async () => {
      closed = true
      await die()
    }
  }
}
