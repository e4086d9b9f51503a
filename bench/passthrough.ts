/**
 * The bare passthrough contestant: the cheapest possible Node gateway. `node:http` reads the body,
 * `JSON.parse` + `JSON.stringify` it, forwards it over an undici keep-alive pool and streams the
 * upstream's status, content type and body back as they come (so SSE passes through chunk by chunk).
 *
 * `node --import tsx bench/passthrough.ts <upstreamUrl>` prints `listening on http://127.0.0.1:PORT`.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { Agent, request } from "undici"

const upstream = `${(process.argv[2] ?? "").replace(/\/+$/, "")}/v1/chat/completions`
const agent = new Agent({ keepAliveTimeout: 60_000, keepAliveMaxTimeout: 120_000, headersTimeout: 0, bodyTimeout: 0 })

const server = http.createServer((req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", async () => {
    try {
      const body = JSON.stringify(JSON.parse(Buffer.concat(chunks).toString("utf8")))
      const up = await request(upstream, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer sk-bench" }, body, dispatcher: agent })
      const type = up.headers["content-type"]
      res.writeHead(up.statusCode, typeof type === "string" ? { "content-type": type } : {})
      for await (const chunk of up.body) res.write(chunk)
      res.end()
    } catch (e) {
      if (res.headersSent) res.destroy()
      else {
        res.writeHead(502, { "content-type": "application/json" })
        res.end(JSON.stringify({ error: { message: String(e), type: "passthrough_error" } }))
      }
    }
  })
})
server.keepAliveTimeout = 120_000
server.headersTimeout = 130_000
server.requestTimeout = 0
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`))
process.once("SIGTERM", () => process.exit(0))
