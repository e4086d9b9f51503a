// node top.mjs file.cpuprofile [n] [filter regex on url]: inclusive time by function (idle and startup left out), top n
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8")); const top = Number(process.argv[3] ?? 40); const ure = new RegExp(process.argv[4] ?? ".")
const byId = new Map(p.nodes.map((n) => [n.id, n])); const parent = new Map()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const startup = (f) => /modules\/(esm|cjs)|compileSourceTextModule|wrapSafe/.test(f.url + f.functionName)
const key = (f) => `${f.functionName || "(anon)"} ${f.url.replace(/.*node_modules\//, "nm/").replace(/.*\/(dist|distNew|distOld)\//, "$1/")}:${f.lineNumber}`
let total = 0; const incl = new Map()
for (const [id, dt] of t) {
  const n = byId.get(id); if (n.callFrame.functionName === "(idle)") continue
  const chain = []; let cur = id; while (cur !== undefined) { chain.push(byId.get(cur).callFrame); cur = parent.get(cur) }
  if (chain.some(startup)) continue
  total += dt
  const seen = new Set(); for (const f of chain) { if (!ure.test(f.url)) continue; const k = key(f); if (!seen.has(k)) { seen.add(k); incl.set(k, (incl.get(k) ?? 0) + dt) } }
}
console.log(`busy ${(total / 1e6).toFixed(2)} s`)
for (const [k, v] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(100 * v / total).toFixed(1).padStart(5)}%  ${k}`)
