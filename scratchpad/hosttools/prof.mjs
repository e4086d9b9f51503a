// node scratchpad/hosttools/prof.mjs <A|B|AB> [seconds] [--prof]: the --host-tools setup (bench/.build/hostupstream.js,
// mcpfake.js; build them with `npm run bench -- --host-tools --quick` once) and a gateway from dist/ (DIST= another);
// autocannon @CONNS (32) with the hosted key (A) or the plain one (B), or alternating jobs (AB, ROUNDS=);
// prints the gateway's CPU µs per finished request (schedstat of its threads); --prof writes /tmp/ht.cpuprofile
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
const [which = "A", secs = "5"] = process.argv.slice(2)
const prof = process.argv.includes("--prof")
const conns = Number(process.env.CONNS ?? 32)
const root = path.resolve(import.meta.dirname, "../..")
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"], ...opts })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/hostupstream.js")])
const mcp = await start([path.join(root, "bench/.build/mcpfake.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "htprof-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\ntoolServers:\n  fake: { url: ${mcp.url}/mcp }\nkeys:\n  - { key: sk-bench-hosted-0123456789, app: hosted }\n  - { key: sk-bench-plain-0123456789, app: plain }\napps:\n  hosted: { hostTools: ["fake/*"] }\n  plain: {}\n`)
const gw = await start([...(process.env.FLAGS ? process.env.FLAGS.split(" ") : []), ...(prof ? ["--cpu-prof", "--cpu-prof-dir", dir, "--cpu-prof-interval", "200"] : []), path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Look up the weather in Paris and say it in one short sentence." }] })
const key = (side) => side === "A" ? "sk-bench-hosted-0123456789" : "sk-bench-plain-0123456789"
const run = (side, d) => new Promise((res) => autocannon({ url: gw.url + "/v1/chat/completions", method: "POST", headers: { authorization: `Bearer ${key(side)}`, "content-type": "application/json" }, body, connections: conns, duration: d }, (e, r) => res(r)))
const cpu = () => { let ns = 0; for (const t of fs.readdirSync(`/proc/${gw.p.pid}/task`)) { try { ns += Number(fs.readFileSync(`/proc/${gw.p.pid}/task/${t}/schedstat`, "utf8").split(" ")[0]) } catch {} } return ns / 1000 }
const stats = async () => (await (await fetch(up.url + "/bench/stats")).json())
for (let i = 0; i < 50; i++) { const r = await fetch(gw.url + "/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${key("A")}`, "content-type": "application/json" }, body }); await r.text(); if (r.status === 200) break; await new Promise((r) => setTimeout(r, 100)) }
const settle = async () => { let seen = -1, since = Date.now(); for (;;) { const n = (await stats()).requests; if (n !== seen) { seen = n; since = Date.now() } else if (Date.now() - since > 300) return; await new Promise((r) => setTimeout(r, 25)) } }
const measure = async (side, d) => {
  const s0 = await stats(); const c0 = cpu()
  const r = await run(side, d); await settle()
  const used = cpu() - c0; const s1 = await stats()
  const done = side === "A" ? s1.second - s0.second : s1.plain - s0.plain
  return { side, rps: r.requests.average, cpu: used / done, done, first: s1.first - s0.first, non2xx: r.non2xx, errors: r.errors }
}
await measure(which === "B" ? "B" : "A", 1)
if (which === "AB") await measure("B", 1)
const sides = which === "AB" ? Array.from({ length: Number(process.env.ROUNDS ?? 4) }, () => ["B", "A"]).flat().concat(["B"]) : [which]
const out = []
for (const s of sides) { const m = await measure(s, Number(secs)); out.push(m); console.log(`${m.side}: ${m.rps.toFixed(0)} req/s, ${m.cpu.toFixed(0)} µs CPU/req (${m.done} done, ${m.first} first calls), non2xx ${m.non2xx}, errors ${m.errors}`) }
if (which === "AB") { const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]; const a = med(out.filter((m) => m.side === "A").map((m) => m.cpu)); const b = med(out.filter((m) => m.side === "B").map((m) => m.cpu)); console.log(`median A ${a.toFixed(0)} B ${b.toFixed(0)} A-2B ${(a - 2 * b).toFixed(0)} (${((a - 2 * b) / b).toFixed(2)}x B)`) }
gw.p.removeAllListeners("exit"); up.p.removeAllListeners("exit"); mcp.p.removeAllListeners("exit")
await new Promise((r) => { gw.p.on("exit", r); gw.p.kill("SIGINT") })
up.p.kill(); mcp.p.kill()
if (prof) { const f = fs.readdirSync(dir).find((n) => n.endsWith(".cpuprofile")); fs.copyFileSync(path.join(dir, f), "/tmp/ht.cpuprofile"); console.log("profile /tmp/ht.cpuprofile") }
fs.rmSync(dir, { recursive: true, force: true })
