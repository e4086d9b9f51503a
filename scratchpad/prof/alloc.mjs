// node scratchpad/prof/alloc.mjs <protocol> <stream 0|1> [secs]: sampled allocations (collected ones too) per request
// KEEP=promoted: only objects that survived the young generation; KEEP=live: only those alive at the end
// writes /tmp/alloc-<KEEP>.heapprofile and prints the summary (scratchpad/prof/heapsum.mjs)
import { spawn, execFileSync } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
const keep = process.env.KEEP ?? "all"
const out = `/tmp/alloc-${keep}.heapprofile`
import { buildRequest } from "../../bench/.build/protocols.js"
const [protocol = "chat", streamArg = "0", secs = "4"] = process.argv.slice(2)
const root = path.resolve(import.meta.dirname, "../..")
const start = (args, opts = {}) => new Promise((res, rej) => {
  const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], ...opts, env: { ...process.env, KEEP: keep, OUT: out } })
  p.stderr.on("data", (d) => { if (String(d).includes("MEM")) process.stdout.write(String(d)) })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alloc-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n`)
const gw = process.env.PASS ? await start(["--require", new URL("./heapsample.cjs", import.meta.url).pathname, path.join(root, `bench/.build/${process.env.PASS === "floor" ? "floor" : "passthrough"}.js`), up.url]) : await start(["--require", new URL("./heapsample.cjs", import.meta.url).pathname, path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
const spec = buildRequest(protocol, { model: "up/m", stream: streamArg === "1", messages: [{ role: "user", text: "hi" }] })
const run = (d) => new Promise((res) => autocannon({ url: gw.url + spec.path, method: "POST", headers: spec.headers, body: spec.body, connections: 64, duration: d }, (e, r) => res(r)))
await run(2)
gw.p.kill("SIGUSR2"); await new Promise((r) => setTimeout(r, 300))
const r = await run(Number(secs))
gw.p.kill("SIGUSR2"); await new Promise((r) => setTimeout(r, 1500))
console.log(`${r.requests.total} requests (${r.requests.average.toFixed(0)}/s), non2xx ${r.non2xx}`)
gw.p.removeAllListeners("exit"); up.p.removeAllListeners("exit")
await new Promise((r) => { gw.p.on("exit", r); gw.p.kill("SIGINT") }); up.p.kill()
fs.rmSync(dir, { recursive: true, force: true })
console.log(execFileSync(process.execPath, [new URL("./heapsum.mjs", import.meta.url).pathname, out, String(r.requests.total)]).toString())
