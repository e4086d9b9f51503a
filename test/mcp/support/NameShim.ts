/**
 * A loopback proxy in front of the gateway's `/mcp` that only renames tools: the conformance
 * suite calls its tools by fixed names (`test_simple_text`), and the gateway serves a server's tool
 * as `<server>__<tool>`. The shim adds the prefix to the name of a `tools/call` and takes it off
 * the names `tools/list` answers; every other byte (headers, statuses, content, progress
 * notifications, SSE framing) passes as it is.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

export interface NameShim {
  /** `http://127.0.0.1:PORT/mcp` */
  readonly url: string
  readonly close: () => Promise<void>
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** Apply `rewrite` to one JSON-RPC message or each of a batch; text that is not JSON stays as it is. */
const rewriteJson = (text: string, rewrite: (message: Record<string, unknown>) => void): string => {
  const value = parse(text)
  if (value === undefined) return text
  for (const message of Array.isArray(value) ? value : [value]) if (isRecord(message)) rewrite(message)
  return JSON.stringify(value)
}

export const startNameShim = async (target: string, prefix: string): Promise<NameShim> => {
  const toGateway = (message: Record<string, unknown>) => {
    if (message.method === "tools/call" && isRecord(message.params) && typeof message.params.name === "string") message.params.name = `${prefix}${message.params.name}`
  }
  const toClient = (message: Record<string, unknown>) => {
    const tools = isRecord(message.result) ? message.result.tools : undefined
    if (!Array.isArray(tools)) return
    for (const tool of tools) if (isRecord(tool) && typeof tool.name === "string" && tool.name.startsWith(prefix)) tool.name = tool.name.slice(prefix.length)
  }
  /** SSE: each `data:` line is one JSON-RPC message. */
  const rewriteSseLine = (line: string) => (line.startsWith("data: ") ? `data: ${rewriteJson(line.slice(6), toClient)}` : line)

  const server = http.createServer(async (req, res) => {
    const aborter = new AbortController()
    res.on("close", () => aborter.abort())
    try {
      const chunks: Array<Buffer> = []
      for await (const chunk of req) chunks.push(chunk as Buffer)
      const headers = new Headers()
      for (const [name, value] of Object.entries(req.headers)) if (typeof value === "string" && !["host", "content-length", "connection"].includes(name)) headers.set(name, value)
      const body = chunks.length === 0 ? undefined : rewriteJson(Buffer.concat(chunks).toString("utf8"), toGateway)
      const response = await fetch(target, { method: req.method ?? "GET", headers, ...(body !== undefined ? { body } : {}), signal: aborter.signal })
      const outHeaders = Object.fromEntries([...response.headers].filter(([name]) => name !== "content-length" && name !== "content-encoding" && name !== "transfer-encoding"))
      res.writeHead(response.status, outHeaders)
      if (response.body === null) return void res.end()
      if ((response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
        res.flushHeaders()
        const decoder = new TextDecoder()
        let pending = ""
        for await (const chunk of response.body) {
          pending += decoder.decode(chunk, { stream: true })
          const lines = pending.split("\n")
          pending = lines.pop() ?? ""
          if (lines.length > 0) res.write(lines.map(rewriteSseLine).join("\n") + "\n")
        }
        res.end(pending)
      } else {
        res.end(rewriteJson(await response.text(), toClient))
      }
    } catch {
      if (!res.headersSent) res.writeHead(502)
      res.end()
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
