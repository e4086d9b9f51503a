// node scratchpad/hosttools/fetchab.mjs <url/mcp> [callsPerSlice] [slices]: CPU per callTool of the SDK client with
// each fetch: node's global fetch, undici (npm) fetch, undici.request wrapped in a Response; slices alternated
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Agent, request, fetch as undiciFetch } from "undici"
import { Readable } from "node:stream"
import { heapMeter } from "../../bench/.build/heapmeter.js"
const [url, n = "1000", slices = "6"] = process.argv.slice(2)
const agent = new Agent({ keepAliveTimeout: 30_000 })
const requestFetch = async (input, init) => {
  const headers = {}
  new Headers(init?.headers).forEach((v, k) => { headers[k] = v })
  const res = await request(String(input), { method: init?.method ?? "GET", headers, body: init?.body ?? undefined, signal: init?.signal ?? undefined, dispatcher: agent })
  const out = new Headers()
  for (const [k, v] of Object.entries(res.headers)) { if (Array.isArray(v)) for (const x of v) out.append(k, x); else if (v !== undefined) out.set(k, v) }
  const type = out.get("content-type") ?? ""
  const nobody = res.statusCode === 204 || res.statusCode === 304 || init?.method === "HEAD"
  if (nobody) { await res.body.dump(); return new Response(null, { status: res.statusCode, headers: out }) }
  if (type.startsWith("text/event-stream")) return new Response(Readable.toWeb(res.body), { status: res.statusCode, headers: out })
  return new Response(await res.body.arrayBuffer(), { status: res.statusCode, headers: out })
}
const variants = { global: undefined, undiciFetch: (u, i) => undiciFetch(u, { ...i, dispatcher: agent }), request: requestFetch }
const clients = {}
for (const [name, f] of Object.entries(variants)) {
  const c = new Client({ name: "t", version: "1" }, { capabilities: {}, versionNegotiation: { mode: process.env.MODE ?? "auto" } })
  await c.connect(new StreamableHTTPClientTransport(new URL(url), f ? { fetch: f } : {}))
  await c.listTools()
  clients[name] = c
}
const run = async (c, calls) => {
  let i = 0
  const worker = async () => { while (i < calls) { i++; const r = await c.callTool({ name: "lookup", arguments: { query: "q" } }, { timeout: 30000, signal: new AbortController().signal }); if (!r.content?.[0]?.text) throw new Error("bad") } }
  await Promise.all(Array.from({ length: 16 }, worker))
}
for (const c of Object.values(clients)) await run(c, 1500)
const per = Object.fromEntries(Object.keys(clients).map((k) => [k, []]))
const kb = Object.fromEntries(Object.keys(clients).map((k) => [k, []]))
const meter = heapMeter()
for (let s = 0; s < Number(slices); s++) for (const [name, c] of Object.entries(clients)) { meter.start(); const c0 = process.cpuUsage(); await run(c, Number(n)); const u = process.cpuUsage(c0); const h = meter.stop(); per[name].push((u.user + u.system) / Number(n)); kb[name].push(h.allocatedBytes / Number(n) / 1024) }
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
for (const [k, xs] of Object.entries(per)) console.log(`${k.padEnd(12)} ${med(xs).toFixed(0)} µs/call  (${xs.map((x) => x.toFixed(0)).join(" ")})   ${med(kb[k]).toFixed(1)} KB/call`)
for (const c of Object.values(clients)) await c.close()
await agent.close()
