/** Probe: CPU profiles of one SQLite gateway with every limit set and one without, under the same load; prints self time by source file. */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { closeLoader, loader, repoRoot, startBenchServer, startServer } from "../../bench/procs.js"

const out = fs.mkdtempSync(path.join(os.tmpdir(), "limits-prof-"))
const upstream = await startBenchServer("upstream", "upstream")
const limits = `{ limits: { requestsPerMinute: 100000000, tokensPerMinute: 1000000000000, concurrency: 1000, budgets: [{ usd: 1000000000, per: month }, { tokens: 1000000000000, per: day }] } }`
const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Say hello in one short sentence, please." }] })
const l = await loader()
for (const side of ["none", "set"]) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-prof-"))
  fs.writeFileSync(
    path.join(dir, "g.yaml"),
    [
      "listen: { host: 127.0.0.1, port: 0 }",
      `dataDir: ${JSON.stringify(path.join(dir, "data"))}`,
      "accessLog: false",
      "providers:",
      `  up: { type: openai, baseUrl: ${JSON.stringify(`${upstream.url}/v1`)}, apiKey: sk-x, price: { input: 2.5, output: 10 } }`,
      "keys:",
      "  - { key: sk-bench-limits-0123456789, app: bench }",
      "apps:",
      `  bench: ${side === "set" ? limits : "{}"}`
    ].join("\n") + "\n"
  )
  const gw = await startServer(side, process.execPath, ["--cpu-prof", "--cpu-prof-dir", path.join(out, side), path.join(repoRoot, "dist/main.js"), "--config", path.join(dir, "g.yaml"), "--port", "0"], { cwd: dir })
  const job = { url: `${gw.url}/v1/chat/completions`, method: "POST" as const, headers: { authorization: "Bearer sk-bench-limits-0123456789", "content-type": "application/json" }, body, connections: 64 }
  await l.load({ ...job, seconds: 3 })
  const r = await l.load({ ...job, seconds: 8 })
  process.stderr.write(`${side}: ${r.perSecond.toFixed(0)}/s ${JSON.stringify(r.statusCodes)}\n`)
  await gw.stop()
}
await closeLoader()
await upstream.stop()

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: Array<number> }
for (const side of ["none", "set"]) {
  const file = fs.readdirSync(path.join(out, side))[0]
  const prof = JSON.parse(fs.readFileSync(path.join(out, side, file), "utf8")) as { nodes: Array<Node>; samples: Array<number>; timeDeltas: Array<number> }
  const byId = new Map(prof.nodes.map((n) => [n.id, n]))
  const self = new Map<number, number>()
  prof.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0)))
  const byFile = new Map<string, number>()
  const byFn = new Map<string, number>()
  let total = 0
  for (const [id, us] of self) {
    const n = byId.get(id)!
    const f = n.callFrame.url.replace(/^file:\/\/.*?\/(dist|node_modules)\//, "$1/") || `(${n.callFrame.functionName})`
    if (n.callFrame.functionName === "(idle)") continue
    total += us
    byFile.set(f, (byFile.get(f) ?? 0) + us)
    const fn = `${n.callFrame.functionName || "(anon)"} ${f}:${n.callFrame.lineNumber}`
    byFn.set(fn, (byFn.get(fn) ?? 0) + us)
  }
  process.stdout.write(`\n== ${side}: busy ${(total / 1e6).toFixed(2)} s\n`)
  for (const [f, us] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, 15)) process.stdout.write(`${(us / 1e3).toFixed(0).padStart(7)} ms  ${f}\n`)
  process.stdout.write("-- functions\n")
  for (const [f, us] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, 25)) process.stdout.write(`${(us / 1e3).toFixed(0).padStart(7)} ms  ${f}\n`)
}
process.exit(0)
