import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2] ?? "/tmp/alloc.heapprofile", "utf8"))
const self = new Map(); let total = 0
const byFile = new Map()
const walk = (n, stack) => {
  const cf = n.callFrame
  const key = `${cf.functionName || "(anon)"} ${cf.url.replace(/^.*\/(node_modules\/)?/, "")}:${cf.lineNumber + 1}`
  const size = n.selfSize
  total += size
  self.set(key, (self.get(key) ?? 0) + size)
  const file = cf.url.includes("node_modules/") ? cf.url.replace(/^.*node_modules\/(@[^/]+\/[^/]+|[^/]+).*$/, "$1") : cf.url.replace(/^.*\/dist\//, "dist/").replace(/^node:.*/, "node:").replace(/^$/, "(native)")
  byFile.set(file, (byFile.get(file) ?? 0) + size)
  for (const c of n.children) walk(c, stack)
}
walk(p.head, [])
const req = Number(process.argv[3] ?? 0)
console.log(`total sampled ${(total / 1048576).toFixed(1)} MB${req ? `, ${(total / req / 1024).toFixed(1)} KB/request` : ""}`)
console.log("-- by module"); for (const [k, v] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${(100 * v / total).toFixed(1).padStart(5)}% ${k}`)
console.log("-- by function"); for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 45)) console.log(`${(100 * v / total).toFixed(1).padStart(5)}% ${k}`)
