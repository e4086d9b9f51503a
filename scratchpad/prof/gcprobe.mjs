import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
import { buildRequest } from "/work/main/bench/.build/protocols.js"
const root = "/work/main"
const [protocol = "chat", streamArg = "0"] = process.argv.slice(2)
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], ...opts })
  let out = ""; p.stdout.on("data", (d) => { out += d; const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1], out: () => out }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gc-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n  mk: { type: mock }\n${process.env.EXTRA ?? ""}`)
const flags = ["--trace-gc-nvp", ...(process.env.FLAGS ?? "").split(" ").filter(Boolean)]
const gw = process.env.PASS ? await start([...flags, path.join(root, "bench/.build/passthrough.js"), up.url]) : await start([...flags, path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const spec = buildRequest(protocol, { model: process.env.MODEL ?? "up/m", stream: streamArg === "1", messages: [{ role: "user", text: "hi" }] })
const run = (d) => new Promise((res) => autocannon({ url: gw.url + spec.path, method: "POST", headers: spec.headers, body: spec.body, connections: Number(process.env.CONNS ?? 64), duration: d }, (e, r) => res(r)))
await run(2)
const mark = gw.out().length
const r = await run(5)
const log = gw.out().slice(mark)
let scav = 0, mc = 0, promoted = 0, survived = 0, pause = 0
for (const line of log.split("\n")) {
  const kind = /gc=(\w+)/.exec(line)?.[1]; if (!kind) continue
  if (kind === "s") scav++; else mc++
  pause += Number(/pause=([\d.]+)/.exec(line)?.[1] ?? 0)
  promoted += Number(/promoted=(\d+)/.exec(line)?.[1] ?? 0); survived += Number(/semi_space_copied=(\d+)/.exec(line)?.[1] ?? 0)
}
console.log(`${r.requests.total} req (${r.requests.average.toFixed(0)}/s): scavenges ${scav}, mark-compacts ${mc}, promoted ${(promoted / 1048576).toFixed(1)} MB = ${(promoted / r.requests.total / 1024).toFixed(2)} KB/req, GC pauses ${(pause * 1000 / r.requests.total).toFixed(1)} µs/req`)
if (process.env.PER) console.log(log.split("\n").filter((l) => l.includes("gc=")).map((l) => `${/gc=(\w+)/.exec(l)[1]} ${(Number(/promoted=(\d+)/.exec(l)?.[1] ?? 0) / 1024).toFixed(0)}K surv ${(Number(/new_space_survived=(\d+)/.exec(l)?.[1] ?? 0) / 1024).toFixed(0)}K ${/fast_promote=\S+/.exec(l)?.[0] ?? ""} ${/reduce_memory=\S+/.exec(l)?.[0] ?? ""}`).join("; "))
gw.p.kill("SIGINT"); up.p.kill(); setTimeout(() => { fs.rmSync(dir, { recursive: true, force: true }); process.exit(0) }, 500)
