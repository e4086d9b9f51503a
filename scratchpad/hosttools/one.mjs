// node scratchpad/hosttools/one.mjs <url/mcp> <global|request> [calls]: one client, 16 in flight, for a profile
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Agent, request } from "undici"
import { Readable } from "node:stream"
const [url, which = "request", n = "6000"] = process.argv.slice(2)
const agent = new Agent({ keepAliveTimeout: 30_000 })
const requestFetch = async (input, init) => {
  const headers = {}
  new Headers(init?.headers).forEach((v, k) => { headers[k] = v })
  const res = await request(String(input), { method: init?.method ?? "GET", headers, body: init?.body ?? undefined, signal: init?.signal ?? undefined, dispatcher: agent })
  const out = new Headers()
  for (const [k, v] of Object.entries(res.headers)) { if (Array.isArray(v)) for (const x of v) out.append(k, x); else if (v !== undefined) out.set(k, v) }
  const type = out.get("content-type") ?? ""
  if (res.statusCode === 204 || res.statusCode === 304) { await res.body.dump(); return new Response(null, { status: res.statusCode, headers: out }) }
  if (type.startsWith("text/event-stream")) return new Response(Readable.toWeb(res.body), { status: res.statusCode, headers: out })
  return new Response(await res.body.arrayBuffer(), { status: res.statusCode, headers: out })
}
const c = new Client({ name: "t", version: "1" }, { capabilities: {}, versionNegotiation: { mode: process.env.MODE ?? "auto" } })
await c.connect(new StreamableHTTPClientTransport(new URL(url), which === "request" ? { fetch: requestFetch } : {}))
await c.listTools()
const run = async (calls) => { let i = 0; const worker = async () => { while (i < calls) { i++; await c.callTool({ name: "lookup", arguments: { query: "q" } }, { timeout: 30000, signal: new AbortController().signal }) } }; await Promise.all(Array.from({ length: 16 }, worker)) }
await run(2000)
const c0 = process.cpuUsage(); await run(Number(n)); const u = process.cpuUsage(c0)
console.log(`${which}: ${((u.user + u.system) / Number(n)).toFixed(0)} µs/call`)
await c.close(); await agent.close()
