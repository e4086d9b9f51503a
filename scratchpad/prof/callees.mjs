// node callees.mjs file.cpuprofile <functionName regex> [url regex]: where the time under matching frames goes (self time of descendants by function)
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8")); const re = new RegExp(process.argv[3]); const ure = new RegExp(process.argv[4] ?? ".")
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const total = [...t.values()].reduce((a, b) => a + b, 0)
const acc = new Map()
const walk = (id) => { const n = byId.get(id); const f = n.callFrame; const k = `${f.functionName || "anon"}@${f.url.split("/").slice(-2).join("/")}:${f.lineNumber}`; acc.set(k, (acc.get(k) ?? 0) + (t.get(id) ?? 0)); for (const c of n.children ?? []) walk(c) }
for (const n of p.nodes) if (re.test(n.callFrame.functionName) && ure.test(n.callFrame.url)) walk(n.id)
let sum = 0; for (const v of acc.values()) sum += v
console.log("total under:", (sum / total * 100).toFixed(2) + "%")
for (const [k, v] of [...acc].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log((v / total * 100).toFixed(2).padStart(6) + "%", k)
