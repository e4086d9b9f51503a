// node scratchpad/prof/holdburst.mjs <protocol> [rounds] [count]: bursts of `count` held streams opened at once
// (new connections, as the bench's held-stream scenario), counting streams that fail; PASS=1 the passthrough
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"; import http from "node:http"
import { buildRequest } from "../../bench/.build/protocols.js"
const [protocol = "gemini", rounds = "3", count = "1000"] = process.argv.slice(2)
const root = path.resolve(import.meta.dirname, "../..")
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"], ...opts })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "hold-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n`)
const gw = process.env.PASS ? await start([path.join(root, "bench/.build/passthrough.js"), up.url]) : await start([path.join(root, "dist/main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const call = (method, p) => fetch(up.url + p, { method }).then((r) => r.text())
const spec = buildRequest(protocol, { model: "up/bench-hold", stream: true, hold: true, messages: [{ role: "user", text: "hi" }] })
for (let round = 0; round < Number(rounds); round++) {
  await call("POST", "/bench/hold")
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity })
  let open = 0; const errors = new Map()
  const done = []
  for (let i = 0; i < Number(count); i++) done.push(new Promise((resolve) => {
    const u = new URL(gw.url + spec.path)
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method: "POST", headers: { ...spec.headers, "content-length": Buffer.byteLength(spec.body) }, agent }, (res) => {
      let first = true
      res.on("data", () => { if (first) { first = false; open++ } })
      res.on("end", () => resolve())
      res.on("error", (e) => { errors.set(e.message, (errors.get(e.message) ?? 0) + 1); resolve() })
    })
    req.on("error", (e) => { errors.set(e.message, (errors.get(e.message) ?? 0) + 1); resolve() })
    req.end(spec.body)
  }))
  const t0 = Date.now()
  while (open + [...errors.values()].reduce((a, b) => a + b, 0) < Number(count) && Date.now() - t0 < 15000) await new Promise((r) => setTimeout(r, 100))
  console.log(`round ${round}: ${open} open in ${Date.now() - t0} ms, errors ${JSON.stringify(Object.fromEntries(errors))}`)
  await call("POST", "/bench/release")
  await Promise.all(done)
  agent.destroy()
}
gw.p.removeAllListeners("exit"); up.p.removeAllListeners("exit"); gw.p.kill("SIGINT"); up.p.kill()
setTimeout(() => { fs.rmSync(dir, { recursive: true, force: true }); process.exit(0) }, 500)
