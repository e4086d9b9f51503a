// node clientshares.mjs file.cpuprofile calls: the SDK client's tools/call (scratchpad/hosttools/one.mjs) by group, µs per call; idle and startup left out
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8")); const n = Number(process.argv[3])
const byId = new Map(p.nodes.map((x) => [x.id, x])); const parent = new Map()
for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id)
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const startup = (f) => /modules\/(esm|cjs)|compileSourceTextModule|wrapSafe/.test(f.url + f.functionName)
const groups = [
  ["zod: the SDK validating each message and result", (f) => /\/zod\//.test(f.url)],
  ["web Response/Headers/streams (node's undici, webstreams)", (f) => /deps\/undici|webstreams/.test(f.url)],
  ["AbortSignal.any, AbortController, EventTarget", (f) => /abort_controller|js_transferable|event_target/.test(f.url)],
  ["undici request (HTTP/1.1 client)", (f) => /node_modules\/undici\//.test(f.url)],
  ["the SDK's own code (Client, Protocol, transport)", (f) => /@modelcontextprotocol/.test(f.url)],
  ["the fetch adapter (McpFetch equivalent)", (f) => /one\.mjs/.test(f.url)],
]
let total = 0; const sums = new Map()
for (const [id, dt] of t) {
  const x = byId.get(id); const fn = x.callFrame.functionName
  if (fn === "(idle)") continue
  const chain = []; let cur = id; while (cur !== undefined) { chain.push(byId.get(cur).callFrame); cur = parent.get(cur) }
  if (chain.some(startup)) continue
  total += dt
  const g = fn === "(garbage collector)" ? ["garbage collector"] : groups.find(([, m]) => chain.some(m))
  const k = g ? g[0] : "other (node net, JSON, microtasks, timers)"
  sums.set(k, (sums.get(k) ?? 0) + dt)
}
console.log(`sampled busy ${(total / n).toFixed(0)} µs per call (the first group found on the stack wins)`)
for (const [k, v] of [...sums].sort((a, b) => b[1] - a[1])) console.log(`${(v / n).toFixed(0).padStart(5)} µs  ${(100 * v / total).toFixed(0).padStart(3)}%  ${k}`)
