/** Probe: the SQLite pair of bench/limits.ts alone, more rounds: CPU µs/request from /proc, limits / none per back-to-back pair. */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { cpuSeconds, median, startYamlGateway } from "../../bench/postgres.js"
import { closeLoader, loader, startBenchServer } from "../../bench/procs.js"

const rounds = Number(process.argv[2] ?? 6)
const prof = process.argv[3] === "prof"
void fs, os, path, prof
const upstream = await startBenchServer("upstream", "upstream")
const limits = `{ limits: { requestsPerMinute: 100000000, tokensPerMinute: 1000000000000, concurrency: 1000, budgets: [{ usd: 1000000000, per: month }, { tokens: 1000000000000, per: day }] } }`
const yaml = (set: boolean) => (dataDir: string) =>
  [
    "listen: { host: 127.0.0.1, port: 0 }",
    `dataDir: ${JSON.stringify(dataDir)}`,
    "accessLog: false",
    "providers:",
    `  up: { type: openai, baseUrl: ${JSON.stringify(`${upstream.url}/v1`)}, apiKey: sk-x, price: { input: 2.5, output: 10 } }`,
    "keys:",
    "  - { key: sk-bench-limits-0123456789, app: bench }",
    "apps:",
    `  bench: ${set ? limits : "{}"}`
  ].join("\n") + "\n"
const none = await startYamlGateway("none", yaml(false))
const set = await startYamlGateway("set", yaml(true))
const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Say hello in one short sentence, please." }] })
const l = await loader()
const run = async (url: string, pid: number, seconds: number) => {
  const before = cpuSeconds(pid)
  const r = await l.load({ url: `${url}/v1/chat/completions`, method: "POST", headers: { authorization: "Bearer sk-bench-limits-0123456789", "content-type": "application/json" }, body, connections: 64, seconds })
  return { perSecond: r.perSecond, cpu: ((cpuSeconds(pid) - before) / r.ok) * 1e6, codes: r.statusCodes }
}
await run(none.url, none.pid, 2)
await run(set.url, set.pid, 2)
const ratios: Array<number> = []
for (let i = 0; i < rounds; i++) {
  const pair = i % 2 === 0 ? [none, set] : [set, none]
  const res = new Map<string, Awaited<ReturnType<typeof run>>>()
  for (const g of pair) res.set(g.name, await run(g.url, g.pid, 4))
  const a = res.get("none")!
  const b = res.get("set")!
  ratios.push(b.cpu / a.cpu)
  process.stdout.write(`round ${i}: none ${a.perSecond.toFixed(0)}/s ${a.cpu.toFixed(0)} µs; set ${b.perSecond.toFixed(0)}/s ${b.cpu.toFixed(0)} µs ${JSON.stringify(b.codes)}; ratio ${(b.cpu / a.cpu).toFixed(2)}\n`)
}
process.stdout.write(`median ratio ${median(ratios).toFixed(2)}\n`)
await closeLoader()
for (const s of [set, none, upstream]) await s.stop()
process.exit(0)
