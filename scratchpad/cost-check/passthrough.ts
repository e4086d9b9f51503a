/**
 * The cheapest possible Node gateway, as the floor to compare the real gateway against:
 * read the body, JSON.parse + JSON.stringify it, forward it to the upstream over a keep-alive
 * undici Agent, answer with the upstream's status and body.
 *
 * Standalone: `node --import tsx scratchpad/cost-check/passthrough.ts <upstreamUrl> [--port N]`
 * prints `listening on http://HOST:PORT` when ready.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { pathToFileURL } from "node:url"
import { Agent, request } from "undici"
import { flag, serveStandalone, type RunningServer } from "./upstream.js"

export const startPassthrough = (upstreamUrl: string, port = 0, host = "127.0.0.1"): Promise<RunningServer> => {
  const target = `${upstreamUrl.replace(/\/+$/, "")}/v1/chat/completions`
  const agent = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 60_000 })

  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const chunks: Buffer[] = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      void (async () => {
        try {
          const body = JSON.stringify(JSON.parse(Buffer.concat(chunks).toString("utf8")))
          const upstream = await request(target, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: "Bearer test-key-123" },
            body,
            dispatcher: agent
          })
          const out = Buffer.from(await upstream.body.arrayBuffer())
          res.writeHead(upstream.statusCode, { "content-type": "application/json", "content-length": out.length })
          res.end(out)
        } catch (e) {
          const msg = JSON.stringify({ error: { message: String(e), type: "passthrough_error" } })
          res.writeHead(502, { "content-type": "application/json" })
          res.end(msg)
        }
      })()
    })
  }

  return new Promise((resolve, reject) => {
    const server = http.createServer(handler)
    server.keepAliveTimeout = 60_000
    server.once("error", reject)
    server.listen(port, host, () => {
      const { port: actual } = server.address() as AddressInfo
      resolve({
        url: `http://${host}:${actual}`,
        close: async () => {
          server.closeAllConnections()
          await new Promise<void>((done) => server.close(() => done()))
          await agent.close()
        }
      })
    })
  })
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const argv = process.argv.slice(2)
  const upstreamUrl = argv[0]
  if (upstreamUrl === undefined || !/^https?:\/\//.test(upstreamUrl)) {
    process.stderr.write("usage: passthrough.ts <upstreamUrl> [--port N] [--host H]\n")
    process.exit(2)
  }
  await serveStandalone(() => startPassthrough(upstreamUrl, Number(flag(argv, "--port") ?? 0), flag(argv, "--host") ?? "127.0.0.1"))
}
