// node summarize.mjs file.cpuprofile [top]: self time by function and by file, plus inclusive by function
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8")); const top = Number(process.argv[3] ?? 40)
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const self = new Map(); let total = 0
const dt = p.timeDeltas; const samples = p.samples
const count = new Map()
for (let i = 0; i < samples.length; i++) { count.set(samples[i], (count.get(samples[i]) ?? 0) + (dt[i] ?? 0)); total += dt[i] ?? 0 }
const key = (n) => `${n.callFrame.functionName || "(anon)"} ${n.callFrame.url.replace(/.*node_modules\//, "nm/").replace(/.*\/work\/main\//, "")}:${n.callFrame.lineNumber}`
const fileKey = (n) => { const u = n.callFrame.url; const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\/(?:dist\/\w+\/)?(.*)/.exec(u); return m ? `${m[1]}/${m[2]}` : (u.replace(/.*\/work\/main\//, "") || n.callFrame.functionName) }
const byFile = new Map()
for (const [id, t] of count) { const n = byId.get(id); const k = key(n); self.set(k, (self.get(k) ?? 0) + t); const f = fileKey(n); byFile.set(f, (byFile.get(f) ?? 0) + t) }
const pr = (m, title) => { console.log(`\n== ${title}`); for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log((v / total * 100).toFixed(1).padStart(5) + "%  " + k) }
pr(self, "self by function"); pr(byFile, "self by file")
// inclusive by function for our src
const parent = new Map(); for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const incl = new Map()
for (const [id, t] of count) { const seen = new Set(); let cur = id; while (cur !== undefined) { const n = byId.get(cur); const k = key(n); if (/work\/main\/dist\//.test(n.callFrame.url) && !seen.has(k)) { seen.add(k); incl.set(k, (incl.get(k) ?? 0) + t) } cur = parent.get(cur) } }
pr(incl, "inclusive (our code)")
