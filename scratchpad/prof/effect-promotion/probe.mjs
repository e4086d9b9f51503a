import { spawn } from "node:child_process"
import autocannon from "autocannon"
const mode = process.argv[2]
const p = spawn(process.execPath, [...(process.env.FLAGS ?? "").split(" ").filter(Boolean), "--trace-gc-nvp", "server.mjs", ...process.argv.slice(2)], { stdio: ["ignore", "pipe", "inherit"] })
let out = ""; const url = await new Promise((res) => p.stdout.on("data", (d) => { out += d; const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d)); if (m) res(m[1]) }))
const run = (d) => new Promise((res) => autocannon({ url, method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }), connections: Number(process.env.CONNS ?? 1), duration: d }, (e, r) => res(r)))
await run(2); const mark = out.length; const r = await run(5); const log = out.slice(mark)
let sc = 0, pr = 0, al = 0; for (const l of log.split("\n")) { if (!/gc=s/.test(l)) continue; sc++; pr += Number(/promoted=(\d+)/.exec(l)[1]); al += Number(/allocated=(\d+)/.exec(l)?.[1] ?? 0) }
console.log(`${process.argv.slice(2).join(" ")}: ${r.requests.total} req, scavenges ${sc}, allocated ${(al / r.requests.total / 1024).toFixed(1)} KB/req, promoted ${(pr / r.requests.total / 1024).toFixed(2)} KB/req`)
p.kill()
