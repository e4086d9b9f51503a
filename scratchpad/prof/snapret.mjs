import fs from "node:fs"
const s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const target = process.argv[3] ?? "Promise"
const f = s.snapshot.meta.node_fields, types = s.snapshot.meta.node_types[0], n = f.length
const ef = s.snapshot.meta.edge_fields, etypes = s.snapshot.meta.edge_types[0], en = ef.length
const ti = f.indexOf("type"), ni = f.indexOf("name"), eci = f.indexOf("edge_count")
const eti = ef.indexOf("type"), eni = ef.indexOf("name_or_index"), eto = ef.indexOf("to_node")
const N = s.nodes.length / n
const firstEdge = new Uint32Array(N + 1)
for (let i = 0, e = 0; i < N; i++) { firstEdge[i] = e; e += s.nodes[i * n + eci] * en }
const rev = Array.from({ length: N }, () => [])
for (let i = 0; i < N; i++) for (let e = firstEdge[i]; e < firstEdge[i] + s.nodes[i * n + eci] * en; e += en) {
  const to = s.edges[e + eto] / n; const et = etypes[s.edges[e + eti]]
  if (et === "weak") continue
  const name = et === "element" || et === "hidden" ? `[${s.edges[e + eni]}]` : s.strings[s.edges[e + eni]]
  rev[to].push([i, name, et])
}
const label = (i) => `${types[s.nodes[i * n + ti]]}:${s.strings[s.nodes[i * n + ni]].slice(0, 50)}`
const hits = []; for (let i = 0; i < N; i++) if (types[s.nodes[i * n + ti]] === "object" && s.strings[s.nodes[i * n + ni]] === target) hits.push(i)
console.log(`${hits.length} ${target}`)
// group by retainer chain signature (3 levels)
const sig = new Map()
for (const h of hits) {
  let chain = []; let cur = h
  for (let d = 0; d < 6; d++) { const r = rev[cur].find(([from]) => types[s.nodes[from * n + ti]] !== "hidden" || d > 0) ?? rev[cur][0]; if (!r) break; chain.push(`${r[1]}<-${label(r[0])}`); cur = r[0] }
  const k = chain.join(" | ")
  sig.set(k, (sig.get(k) ?? 0) + 1)
}
for (const [k, v] of [...sig].sort((a, b) => b[1] - a[1]).slice(0, 8)) console.log(v, k)
