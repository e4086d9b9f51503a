// node scratchpad/hosttools/raw.mjs <url/mcp>: the SDK client's tools/call (custom fetch) against a raw JSON-RPC POST of the same
// bytes over undici.request + JSON.parse (the floor of any client), CPU µs per call @16, slices alternated
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Agent, request } from "undici"
const [url] = process.argv.slice(2)
const agent = new Agent({ keepAliveTimeout: 30_000 })
let captured
const requestFetch = async (input, init) => {
  const headers = {}; new Headers(init?.headers).forEach((v, k) => { headers[k] = v })
  if (typeof init?.body === "string" && init.body.includes('"tools/call"')) captured ??= { headers, body: init.body }
  const res = await request(String(input), { method: init?.method ?? "GET", headers, body: init?.body ?? undefined, signal: init?.signal ?? undefined, dispatcher: agent })
  const out = new Headers(); for (const [k, v] of Object.entries(res.headers)) { if (Array.isArray(v)) for (const x of v) out.append(k, x); else if (v !== undefined) out.set(k, v) }
  return new Response(await res.body.arrayBuffer(), { status: res.statusCode, headers: out })
}
const c = new Client({ name: "t", version: "1" }, { capabilities: {}, versionNegotiation: { mode: "auto" } })
await c.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: requestFetch }))
await c.listTools()
await c.callTool({ name: "lookup", arguments: { query: "q" } })
console.log(captured.body.slice(0, 400))
let id = 1000
const raw = async () => { const body = captured.body.replace(/"id":\d+/, `"id":${id++}`); const res = await request(url, { method: "POST", headers: captured.headers, body, dispatcher: agent, signal: new AbortController().signal }); const j = await res.body.json(); if (!j.result?.content) throw new Error(JSON.stringify(j)) }
const sdk = async () => { await c.callTool({ name: "lookup", arguments: { query: "q" } }, { timeout: 30000, signal: new AbortController().signal }) }
const run = async (f, n) => { let i = 0; await Promise.all(Array.from({ length: 16 }, async () => { while (i < n) { i++; await f() } })) }
await run(raw, 1000); await run(sdk, 1000)
const per = { sdk: [], raw: [] }
for (let s = 0; s < 6; s++) for (const [k, f] of [["sdk", sdk], ["raw", raw]]) { const c0 = process.cpuUsage(); await run(f, 1000); const u = process.cpuUsage(c0); per[k].push((u.user + u.system) / 1000) }
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
for (const [k, xs] of Object.entries(per)) console.log(`${k} ${med(xs).toFixed(0)} µs/call (${xs.map((x) => x.toFixed(0)).join(" ")})`)
await c.close(); await agent.close()
