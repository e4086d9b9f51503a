// node shares.mjs file.cpuprofile [requests] [B.cpuprofile B-requests]: where the gateway's busy time goes under host-tool load (A), by inclusive group; idle and startup left out
import fs from "node:fs"
const shares = (file) => {
const p = JSON.parse(fs.readFileSync(file, "utf8"))
const byId = new Map(p.nodes.map((n) => [n.id, n])); const parent = new Map()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const startup = (f) => /modules\/(esm|cjs)|compileSourceTextModule|wrapSafe/.test(f.url + f.functionName)
// first matching group by the innermost frame that decides: walk from leaf to root, the first frame that belongs to a group wins
const groups = [
  ["zod (MCP SDK's validation)", (f) => /\/zod\//.test(f.url)],
  ["MCP fetch: undici request + Response/Headers (McpFetch)", (f) => /McpFetch/.test(f.url)],
  ["MCP SDK client (own code)", (f) => /@modelcontextprotocol/.test(f.url)],
  ["host tools: Connection/ToolServers/HostTools/Loop", (f) => /services\/tools\//.test(f.url)],
  ["upstream HTTP (HttpUpstream, undici)", (f) => /HttpUpstream|node_modules\/undici\//.test(f.url)],
  ["providers (encode/decode)", (f) => /dist\/providers\//.test(f.url)],
  ["model runner / usage / sql", (f) => /ModelRunner|dist\/services\/(usage|quota|runner)|dist\/sql/.test(f.url)],
  ["protocols + http edge", (f) => /dist\/(protocols|http)\//.test(f.url)],
  ["web streams / fetch internals (node)", (f) => /webstreams|deps\/undici|abort_controller|js_transferable|event_target/.test(f.url)],
  ["effect runtime", (f) => /node_modules\/effect\//.test(f.url)],
]
const sums = new Map(); let total = 0; let gc = 0
for (const [id, dt] of t) {
  const n = byId.get(id); const fn = n.callFrame.functionName
  if (fn === "(idle)") continue
  const chain = []; let cur = id; while (cur !== undefined) { chain.push(byId.get(cur).callFrame); cur = parent.get(cur) }
  if (chain.some(startup)) continue
  total += dt
  if (fn === "(garbage collector)") { gc += dt; continue }
  const g = groups.find(([, m]) => chain.some(m))
  const k = g ? g[0] : "other (node net/http, timers, JSON, ...)"
  sums.set(k, (sums.get(k) ?? 0) + dt)
}
sums.set("garbage collector", gc)
return { total, sums }
}
const [fa, na, fb, nb] = process.argv.slice(2)
const a = shares(fa)
console.log(`busy ${(a.total / 1e6).toFixed(2)} s; groups by the first of these that appears anywhere on the stack (so "zod" wins over the SDK that called it)`)
if (fb === undefined) for (const [k, v] of [...a.sums].sort((x, y) => y[1] - x[1])) console.log(`${(100 * v / a.total).toFixed(1).padStart(5)}%  ${k}`)
else {
  // sampled µs per request of each, and A - 2B: where the host call's extra time goes
  const b = shares(fb)
  const keys = [...new Set([...a.sums.keys(), ...b.sums.keys()])]
  const per = (m, k, n) => (m.get(k) ?? 0) / Number(n)
  const rows = keys.map((k) => [k, per(a.sums, k, na), per(b.sums, k, nb)]).sort((x, y) => (y[1] - 2 * y[2]) - (x[1] - 2 * x[2]))
  console.log(`${"group".padEnd(58)} A µs/req  B µs/req  A - 2B`)
  for (const [k, x, y] of rows) console.log(`${k.padEnd(58)} ${x.toFixed(0).padStart(8)}  ${y.toFixed(0).padStart(8)}  ${(x - 2 * y).toFixed(0).padStart(6)}`)
  const ta = a.total / Number(na), tb = b.total / Number(nb)
  console.log(`${"total (sampled busy time)".padEnd(58)} ${ta.toFixed(0).padStart(8)}  ${tb.toFixed(0).padStart(8)}  ${(ta - 2 * tb).toFixed(0).padStart(6)}`)
}
