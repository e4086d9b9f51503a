import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
import { buildRequest } from "/work/main/bench/.build/protocols.js"
const root = "/work/main"
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], ...opts })
  p.stderr.on("data", (d) => process.stdout.write(String(d)))
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "snap-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n`)
const gw = await start(["--require", new URL("./snap.cjs", import.meta.url).pathname, path.join(root, "dist/main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const spec = buildRequest("chat", { model: "up/m", stream: false, messages: [{ role: "user", text: "hi" }] })
const run = (d) => new Promise((res) => autocannon({ url: gw.url + spec.path, method: "POST", headers: spec.headers, body: spec.body, connections: Number(process.env.CONNS ?? 1), duration: d }, (e, r) => res(r)))
setTimeout(() => gw.p.kill("SIGUSR2"), 2500)
await run(5)
await new Promise((r) => setTimeout(r, 3000))
gw.p.kill("SIGINT"); up.p.kill(); setTimeout(() => { fs.rmSync(dir, { recursive: true, force: true }); process.exit(0) }, 500)
