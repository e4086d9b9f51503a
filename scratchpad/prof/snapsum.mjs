import fs from "node:fs"
const s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const f = s.snapshot.meta.node_fields, types = s.snapshot.meta.node_types[0], n = f.length
const ti = f.indexOf("type"), ni = f.indexOf("name"), si = f.indexOf("self_size")
const byType = new Map(), byName = new Map(); let total = 0
for (let i = 0; i < s.nodes.length; i += n) {
  const t = types[s.nodes[i + ti]], name = s.strings[s.nodes[i + ni]], size = s.nodes[i + si]
  total += size
  byType.set(t, (byType.get(t) ?? 0) + size)
  const k = `${t}:${t === "string" || t === "concatenated string" ? "(str)" : name.slice(0, 60)}`
  byName.set(k, (byName.get(k) ?? 0) + size)
}
console.log(`total ${(total / 1048576).toFixed(1)} MB`)
for (const [k, v] of [...byType].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log(`${(v / 1048576).toFixed(2).padStart(7)} MB ${k}`)
console.log("--")
for (const [k, v] of [...byName].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`${(v / 1048576).toFixed(2).padStart(7)} MB ${k}`)
