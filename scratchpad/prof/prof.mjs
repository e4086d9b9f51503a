// node scratchpad/prof/prof.mjs <protocol> <stream:0|1> [seconds] [--prof]
// starts bench/.build/upstream.js and dist/main.js, loads with autocannon @64, prints req/s; --prof writes a cpu profile and summary
import { spawn } from "node:child_process"
import fs from "node:fs"; import os from "node:os"; import path from "node:path"
import autocannon from "autocannon"
import { buildRequest } from "../../bench/.build/protocols.js"
const [protocol = "chat", streamArg = "0", secs = "6"] = process.argv.slice(2)
const prof = process.argv.includes("--prof")
const store = process.argv.includes("--store")
const conns = Number(process.env.CONNS ?? 64)
const root = path.resolve(import.meta.dirname, "../..")
const start = (args, opts = {}, exe = process.execPath) => new Promise((res, rej) => {
  const p = spawn(exe, args, { stdio: ["ignore", "pipe", "inherit"], ...opts })
  p.stdout.on("data", (d) => { const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res({ p, url: m[1] }) })
  p.on("exit", (c) => rej(new Error("exit " + c)))
})
const up = await start([path.join(root, "bench/.build/upstream.js")])
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "prof-"))
fs.writeFileSync(path.join(dir, "g.yaml"), `listen: { host: 127.0.0.1, port: 0 }\ndataDir: ${dir}/data\naccessLog: false\nconcurrency: 4096\nproviders:\n  up: { type: openai, baseUrl: ${up.url}/v1, apiKey: sk-x }\n  mk: { type: mock }\n`)
const gw = process.env.PASS ? await start([...(prof ? ["--cpu-prof", "--cpu-prof-dir", dir] : []), path.join(root, `bench/.build/${process.env.PASS === "floor" ? "floor" : "passthrough"}.js`), up.url], { cwd: dir }) : await start([...(process.env.FLAGS ? process.env.FLAGS.split(" ") : []), ...(prof ? ["--cpu-prof", "--cpu-prof-dir", dir] : []), path.join(process.env.DIST ?? path.join(root, "dist"), "main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir }, process.env.WRAP ?? process.execPath)
const spec = buildRequest(protocol, { model: process.env.MODEL ?? "up/m", stream: streamArg === "1", store, messages: [{ role: "user", text: "hi" }] })
const run = (d) => new Promise((res) => autocannon({ url: gw.url + spec.path, method: "POST", headers: spec.headers, body: spec.body, connections: conns, duration: d }, (e, r) => res(r)))
const cpu = () => { const f = fs.readFileSync(`/proc/${gw.p.pid}/stat`, "utf8").split(") ")[1].split(" "); return (Number(f[11]) + Number(f[12])) * 10 }
await run(1)
const c0 = cpu()
const r = await run(Number(secs))
const used = cpu() - c0
console.log(`${protocol} stream=${streamArg} store=${store}: ${r.requests.average.toFixed(0)} req/s, p50 ${r.latency.p50} ms, non2xx ${r.non2xx}, errors ${r.errors}, gateway CPU ${(used * 1000 / r.requests.total).toFixed(0)} µs/req`)
const rss = fs.readFileSync(`/proc/${gw.p.pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]
console.log(`gateway RSS ${(rss / 1024).toFixed(1)} MiB`)
gw.p.removeAllListeners("exit"); up.p.removeAllListeners("exit")
await new Promise((r) => { gw.p.on("exit", r); gw.p.kill("SIGINT") })
up.p.kill()
if (prof) {
  const f = fs.readdirSync(dir).find((n) => n.endsWith(".cpuprofile"))
  fs.copyFileSync(path.join(dir, f), "/tmp/last.cpuprofile")
  console.log("profile /tmp/last.cpuprofile")
}
fs.rmSync(dir, { recursive: true, force: true })
