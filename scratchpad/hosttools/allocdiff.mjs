// node allocdiff.mjs: per-request sampled allocation by function, A (/tmp/htalloc-A.heapprofile, 3000 requests) - 2 x B (6000)
import fs from "node:fs"
const load = (f, n) => { const p = JSON.parse(fs.readFileSync(f, "utf8")); const m = new Map(); const walk = (node, parentKey) => { const cf = node.callFrame; const k = `${cf.functionName || "(anon)"} ${cf.url.replace(/^.*\/(node_modules\/)?/, "")}:${cf.lineNumber + 1}` + (process.env.PARENT ? `  < ${parentKey}` : ""); m.set(k, (m.get(k) ?? 0) + node.selfSize / n); for (const c of node.children) walk(c, `${cf.functionName || "(anon)"} ${cf.url.replace(/^.*\//, "")}:${cf.lineNumber + 1}`) }; walk(p.head, ""); return m }
const a = load("/tmp/htalloc-A.heapprofile", Number(process.env.NA ?? 3000)); const b = load("/tmp/htalloc-B.heapprofile", Number(process.env.NB ?? 6000))
const keys = new Set([...a.keys(), ...b.keys()])
const rows = [...keys].map((k) => [k, (a.get(k) ?? 0) - 2 * (b.get(k) ?? 0), a.get(k) ?? 0, b.get(k) ?? 0]).sort((x, y) => y[1] - x[1])
let sum = 0; for (const r of rows) sum += r[1]
console.log(`A - 2B: ${(sum / 1024).toFixed(1)} KB/request`)
for (const [k, d, x, y] of rows.slice(0, Number(process.env.TOP ?? 40))) console.log(`${(d / 1024).toFixed(1).padStart(6)} KB  (A ${(x / 1024).toFixed(1)}, B ${(y / 1024).toFixed(1)})  ${k}`)
