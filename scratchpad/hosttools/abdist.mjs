// node scratchpad/hosttools/abdist.mjs <distX> <distY> [seconds] [rounds]: two gateway builds against one fake upstream and
// MCP server (bench/.build/hostupstream.js, mcpfake.js), jobs alternated (X B, X A, Y B, Y A, order flipped each round),
// @CONNS (32), amount-sized jobs; per build: CPU µs per request of A (host call) and B (none), A - 2B and (A - 2B) / B
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
const [dx, dy, secs = "2", roundsArg = "6"] = process.argv.slice(2)
const conns = Number(process.env.CONNS ?? 32)
const root = path.resolve(import.meta.dirname, "../..")
const procs = []
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"], ...opts }); procs.push(p)
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/hostupstream.js")])
const mcp = await start([path.join(root, "bench/.build/mcpfake.js")])
const dirs = []
const gateway = async (dist) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "htab-")); dirs.push(dir)
  fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\ntoolServers:\n  fake: { url: ${mcp.url}/mcp }\nkeys:\n  - { key: sk-bench-hosted-0123456789, app: hosted }\n  - { key: sk-bench-plain-0123456789, app: plain }\napps:\n  hosted: { hostTools: ["fake/*"] }\n  plain: {}\n`)
  return { dist, ...(await start([path.join(path.resolve(dist), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })) }
}
const gws = [await gateway(dx), await gateway(dy)]
const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Look up the weather in Paris and say it in one short sentence." }] })
const key = (side) => side === "A" ? "sk-bench-hosted-0123456789" : "sk-bench-plain-0123456789"
const run = (gw, side, amount) => new Promise((res) => autocannon({ url: gw.url + "/v1/chat/completions", method: "POST", headers: { authorization: `Bearer ${key(side)}`, "content-type": "application/json" }, body, connections: conns, amount }, (e, r) => res(r)))
const cpu = (pid) => { let ns = 0; for (const t of fs.readdirSync(`/proc/${pid}/task`)) { try { ns += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, "utf8").split(" ")[0]) } catch {} } return ns / 1000 }
const stats = async () => (await (await fetch(up.url + "/bench/stats")).json())
for (const gw of gws) for (let i = 0; i < 100; i++) { const r = await fetch(gw.url + "/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${key("A")}`, "content-type": "application/json" }, body }); await r.text(); if (r.status === 200) break; await new Promise((r) => setTimeout(r, 100)) }
const settle = async () => { let seen = -1, since = Date.now(); for (;;) { const n = (await stats()).requests; if (n !== seen) { seen = n; since = Date.now() } else if (Date.now() - since > 150) return; await new Promise((r) => setTimeout(r, 25)) } }
const rate = new Map()
const measure = async (gw, side, s) => {
  const k = gw.dist + side; const amount = Math.max(2 * conns, Math.round((rate.get(k) ?? 100) * s))
  const s0 = await stats(); const c0 = cpu(gw.p.pid); const t0 = performance.now()
  const r = await run(gw, side, amount); const wall = (performance.now() - t0) / 1000; await settle()
  const used = cpu(gw.p.pid) - c0; const s1 = await stats()
  const done = side === "A" ? s1.second - s0.second : s1.plain - s0.plain
  rate.set(k, done / wall)
  if (r.non2xx || r.errors || s1.bad !== s0.bad) console.log("PROBLEM", gw.dist, side, r.non2xx, r.errors, s1.lastBad)
  return used / done
}
for (const gw of gws) for (const side of ["B", "A", "B", "A"]) await measure(gw, side, 0.5)
const res = new Map(gws.map((g) => [g.dist, { A: [], B: [], host: [] }]))
for (let round = 0; round < Number(roundsArg); round++) {
  const order = round % 2 === 0 ? gws : [...gws].reverse()
  for (const gw of order) {
    const b1 = await measure(gw, "B", Number(secs)); const a = await measure(gw, "A", Number(secs)); const b2 = await measure(gw, "B", Number(secs))
    const b = (b1 + b2) / 2; const r = res.get(gw.dist); r.A.push(a); r.B.push(b1, b2); r.host.push((a - 2 * b) / b)
    console.log(`round ${round + 1} ${path.basename(gw.dist)}: A ${a.toFixed(0)} B ${b1.toFixed(0)}/${b2.toFixed(0)} (A-2B)/B ${((a - 2 * b) / b).toFixed(2)}`)
  }
}
const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }
for (const [d, r] of res) console.log(`${path.basename(d).padEnd(10)} A ${med(r.A).toFixed(0)} µs  B ${med(r.B).toFixed(0)} µs  A-2B ${(med(r.A) - 2 * med(r.B)).toFixed(0)} µs  (A-2B)/B median of rounds ${med(r.host).toFixed(2)}`)
for (const p of procs) p.removeAllListeners("exit"), p.kill("SIGTERM")
await new Promise((r) => setTimeout(r, 500)); for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
