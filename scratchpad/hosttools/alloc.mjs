// node scratchpad/hosttools/alloc.mjs <A|B> [amount]: sampled allocations per request of the --host-tools setup (A: host call, B: none)
// by module, and under frames of interest (inclusive); DIST= another build
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
const [side = "A", amountArg = "3000"] = process.argv.slice(2)
const out = `/tmp/htalloc-${side}.heapprofile`
const root = path.resolve(import.meta.dirname, "../..")
const procs = []
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], ...opts, env: { ...process.env, KEEP: "all", OUT: out } }); procs.push(p)
  p.stderr.on("data", (d) => { if (String(d).includes("MEM")) process.stdout.write(String(d)) })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/hostupstream.js")])
const mcp = await start([path.join(root, "bench/.build/mcpfake.js"), "--era", process.env.ERA ?? "2026"])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "htalloc-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\ntoolServers:\n  fake: { url: ${mcp.url}/mcp }\nkeys:\n  - { key: sk-bench-hosted-0123456789, app: hosted }\n  - { key: sk-bench-plain-0123456789, app: plain }\napps:\n  hosted: { hostTools: ["fake/*"] }\n  plain: {}\n`)
const gw = await start(["--require", path.join(root, "scratchpad/prof/heapsample.cjs"), path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Look up the weather in Paris and say it in one short sentence." }] })
const key = side === "A" ? "sk-bench-hosted-0123456789" : "sk-bench-plain-0123456789"
for (let i = 0; i < 100; i++) { const r = await fetch(gw.url + "/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body }); await r.text(); if (r.status === 200) break; await new Promise((r) => setTimeout(r, 100)) }
const run = (amount) => new Promise((res) => autocannon({ url: gw.url + "/v1/chat/completions", method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body, connections: 32, amount }, (e, r) => res(r)))
await run(1500)
gw.p.kill("SIGUSR2"); await new Promise((r) => setTimeout(r, 300))
const r = await run(Number(amountArg))
await new Promise((r) => setTimeout(r, 300))
fs.rmSync(out, { force: true }); gw.p.kill("SIGUSR2")
for (let i = 0; i < 300 && !fs.existsSync(out); i++) await new Promise((r) => setTimeout(r, 100))
await new Promise((r) => setTimeout(r, 500))
console.log(`${side}: ${r.requests.total} requests, non2xx ${r.non2xx}`)
for (const p of procs) p.removeAllListeners("exit"), p.kill("SIGTERM")
await new Promise((r) => setTimeout(r, 500)); fs.rmSync(dir, { recursive: true, force: true })
// summary: by module (self) and inclusive under frames of interest
const prof = JSON.parse(fs.readFileSync(out, "utf8")); const n = Number(amountArg)
const byMod = new Map(); const incl = new Map(); let total = 0
const modOf = (u) => u.includes("node_modules/") ? u.replace(/^.*node_modules\/(@[^/]+\/[^/]+|[^/]+).*$/, "$1") : u.replace(/^.*\/dist[^/]*\//, "dist/").replace(/^node:.*/, "node:").replace(/^$/, "(native)")
const interest = [["MCP SDK", (f) => /@modelcontextprotocol/.test(f.url)], ["McpFetch", (f) => /McpFetch/.test(f.url)], ["Connection", (f) => /tools\/Connection/.test(f.url)], ["HostTools", (f) => /tools\/HostTools/.test(f.url)], ["Loop", (f) => /tools\/Loop/.test(f.url)], ["ModelRunner", (f) => /ModelRunner/.test(f.url)], ["HttpUpstream", (f) => /HttpUpstream/.test(f.url)], ["usage/sql", (f) => /dist[^/]*\/(sql|services\/usage)/.test(f.url)], ["protocols", (f) => /dist[^/]*\/protocols/.test(f.url)], ["http", (f) => /dist[^/]*\/http\//.test(f.url)]]
const walk = (node, chain) => {
  const c = [...chain, node.callFrame]; total += node.selfSize
  const m = modOf(node.callFrame.url); byMod.set(m, (byMod.get(m) ?? 0) + node.selfSize)
  for (const [name, test] of interest) if (c.some(test)) incl.set(name, (incl.get(name) ?? 0) + node.selfSize)
  for (const ch of node.children) walk(ch, c)
}
walk(prof.head, [])
console.log(`sampled ${(total / n / 1024).toFixed(1)} KB/request`)
for (const [k, v] of [...byMod].sort((a, b) => b[1] - a[1]).slice(0, 14)) console.log(`  ${(v / n / 1024).toFixed(1).padStart(6)} KB  ${k}`)
console.log("inclusive:"); for (const [k] of interest) console.log(`  ${((incl.get(k) ?? 0) / n / 1024).toFixed(1).padStart(6)} KB  ${k}`)
