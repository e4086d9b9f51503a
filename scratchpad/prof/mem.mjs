// node scratchpad/prof/mem.mjs <protocol> [secs]: the bench's three main scenarios (c=1, c=64, c=64 stream)
// against one gateway (PASS=1: the passthrough), then its VmRSS and (gateway) V8 heap spaces via SIGUSR2
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
import { buildRequest } from "../../bench/.build/protocols.js"
const [protocol = "chat", secs = "5"] = process.argv.slice(2)
const root = path.resolve(import.meta.dirname, "../..")
const flags = (process.env.FLAGS ?? "").split(" ").filter(Boolean)
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], ...opts })
  p.stderr.on("data", (d) => { if (String(d).includes("MEM")) process.stdout.write(String(d)) })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mem-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n`)
const gw = process.env.PASS ? await start([...flags, "--require", new URL("./memdump.cjs", import.meta.url).pathname, path.join(root, "bench/.build/passthrough.js"), up.url]) : await start([...flags, "--require", new URL("./memdump.cjs", import.meta.url).pathname, path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const rss = () => (Number(fs.readFileSync(`/proc/${gw.p.pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]) / 1024).toFixed(1)
const run = (stream, connections) => { const spec = buildRequest(protocol, { model: "up/m", stream, messages: [{ role: "user", text: "hi" }] }); return new Promise((res) => autocannon({ url: gw.url + spec.path, method: "POST", headers: spec.headers, body: spec.body, connections, duration: Number(secs) }, (e, r) => res(r))) }
console.log(`idle RSS ${rss()}`)
gw.p.kill("SIGUSR2"); await new Promise((r) => setTimeout(r, 200))
const a = await run(false, 1); console.log(`c=1 ${a.requests.average.toFixed(0)} req/s RSS ${rss()}`)
const b = await run(false, 64); console.log(`c=64 ${b.requests.average.toFixed(0)} req/s RSS ${rss()}`)
const c = await run(true, 64); console.log(`c=64 stream ${c.requests.average.toFixed(0)}/s RSS ${rss()}`)
if (process.env.MAPS) { const { execSync } = await import("node:child_process"); console.log(execSync(`${new URL("./maps.sh", import.meta.url).pathname} ${gw.p.pid}`).toString()) }
gw.p.kill("SIGUSR2"); await new Promise((r) => setTimeout(r, 300)); gw.p.kill(process.env.GCSIG ?? "SIGUSR2"); await new Promise((r) => setTimeout(r, 500))
gw.p.removeAllListeners("exit"); up.p.removeAllListeners("exit")
await new Promise((r) => { gw.p.on("exit", r); gw.p.kill("SIGINT") }); up.p.kill()
fs.rmSync(dir, { recursive: true, force: true })
