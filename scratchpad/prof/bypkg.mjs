import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const t = new Map(); let total = 0
for (let i = 0; i < p.samples.length; i++) { const n = byId.get(p.samples[i]); const u = n.callFrame.url; const k = u.includes("node_modules/") ? u.replace(/^.*node_modules\/(\.ab\/dist[AB]\/[^/]+|@[^/]+\/[^/]+|[^/]+).*$/, "$1") : u.replace(/^.*\/dist\/([^/]+).*$/, "dist/$1") || n.callFrame.functionName; const d = p.timeDeltas[i] ?? 0; t.set(k, (t.get(k) ?? 0) + d); total += d }
for (const [k, v] of [...t].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${(100 * v / total).toFixed(1).padStart(5)}% ${k}`)
