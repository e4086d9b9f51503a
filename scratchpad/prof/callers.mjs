// node callers.mjs file.cpuprofile <functionName regex>: the call chains (our frames and node's) leading to it, by time
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8")); const re = new RegExp(process.argv[3])
const byId = new Map(p.nodes.map((n) => [n.id, n])); const parent = new Map()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const total = [...t.values()].reduce((a, b) => a + b, 0)
const incl = (id) => { const n = byId.get(id); return (t.get(id) ?? 0) + (n.children ?? []).reduce((s, c) => s + incl(c), 0) }
const chains = new Map()
for (const n of p.nodes) if (re.test(n.callFrame.functionName)) {
  const ch = []; let cur = parent.get(n.id)
  while (cur !== undefined && ch.length < 14) { const f = byId.get(cur).callFrame; ch.push(`${f.functionName || "anon"}@${f.url.split("/").slice(-2).join("/")}:${f.lineNumber}`); cur = parent.get(cur) }
  const k = ch.join(" < "); chains.set(k, (chains.get(k) ?? 0) + incl(n.id))
}
for (const [k, v] of [...chains].sort((a, b) => b[1] - a[1]).slice(0, 8)) console.log((v / total * 100).toFixed(2) + "%", k, "\n")
