import fs from "node:fs"
const s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const f = s.snapshot.meta.node_fields, types = s.snapshot.meta.node_types[0], n = f.length
const ti = f.indexOf("type"), ni = f.indexOf("name"), si = f.indexOf("self_size")
const out = []
for (let i = 0; i < s.nodes.length; i += n) if (types[s.nodes[i + ti]] === "string" && s.nodes[i + si] > 20000) out.push([s.nodes[i + si], s.strings[s.nodes[i + ni]]])
out.sort((a, b) => b[0] - a[0])
let sum = 0; for (const [sz] of out) sum += sz
console.log(`${out.length} strings > 20 KB, ${(sum / 1048576).toFixed(2)} MB`)
for (const [sz, str] of out.slice(0, 40)) console.log(`${(sz / 1024).toFixed(0).padStart(6)} KB ${JSON.stringify(str.slice(0, 100))}`)
