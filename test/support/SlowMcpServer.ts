/**
 * A small MCP server for the host tool loop tests, over Streamable HTTP on 127.0.0.1 (stateless,
 * built with the official SDK 1.x), with a tool that proves calls overlap without reading a clock
 * (the slow tool of the stream tests is server-everything's `trigger-long-running-operation`):
 *
 * - `rendezvous {party}`: answers `met <party>` only once `parties` calls are in flight at the
 *   same time; a call left waiting `aloneAfterMs` answers an error result `alone <party>`. Calls
 *   run one after the other therefore say `alone`, calls run together say `met`.
 *
 * Usage:
 *   const mcp = await startSlowMcpServer()
 *   ... toolServers: { slow: { url: mcp.url } } ...
 *   await mcp.close()
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { z } from "zod"

export interface SlowMcpServer {
  /** `http://127.0.0.1:PORT/mcp` */
  readonly url: string
  /** the `party` of every `rendezvous` call received, in order */
  readonly parties: ReadonlyArray<string>
  readonly close: () => Promise<void>
}

export const startSlowMcpServer = async (options: { readonly parties?: number; readonly aloneAfterMs?: number } = {}): Promise<SlowMcpServer> => {
  const needed = options.parties ?? 2
  const aloneAfterMs = options.aloneAfterMs ?? 15_000
  const parties: Array<string> = []
  const timers = new Set<NodeJS.Timeout>()
  /** the calls waiting for the others: each resolves with whether the rendezvous happened */
  let waiting: Array<(met: boolean) => void> = []

  const later = (ms: number, run: () => void) => {
    const timer = setTimeout(() => {
      timers.delete(timer)
      run()
    }, ms)
    timers.add(timer)
  }

  const rendezvous = (party: string): Promise<boolean> =>
    new Promise<boolean>((resolve) => {
      parties.push(party)
      waiting.push(resolve)
      if (waiting.length >= needed) {
        const all = waiting
        waiting = []
        for (const done of all) done(true)
        return
      }
      later(aloneAfterMs, () => {
        if (!waiting.includes(resolve)) return
        waiting = waiting.filter((w) => w !== resolve)
        resolve(false)
      })
    })

  const serverFor = () => {
    const server = new McpServer({ name: "slow-test-server", version: "1.0.0" })
    server.registerTool(
      "rendezvous",
      { description: "Waits for another call of this tool to be running at the same time.", inputSchema: { party: z.string() } },
      async ({ party }) => {
        const met = await rendezvous(party)
        return met ? { content: [{ type: "text", text: `met ${party}` }] } : { content: [{ type: "text", text: `alone ${party}` }], isError: true }
      }
    )
    return server
  }

  const httpServer = http.createServer((req, res) => {
    if (req.url !== "/mcp") {
      res.writeHead(404).end()
      return
    }
    if (req.method !== "POST") {
      // stateless: no standalone notification stream, no sessions to delete
      res.writeHead(405, { allow: "POST" }).end()
      return
    }
    const server = serverFor()
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on("close", () => {
      void transport.close()
      void server.close()
    })
    server
      .connect(transport)
      .then(() => transport.handleRequest(req, res))
      .catch(() => {
        if (!res.headersSent) res.writeHead(500)
        res.end()
      })
  })
  await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve))
  const port = (httpServer.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    parties,
    close: async () => {
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      for (const done of waiting) done(false)
      waiting = []
      httpServer.closeAllConnections()
      await new Promise<void>((resolve) => httpServer.close(() => resolve()))
    }
  }
}
