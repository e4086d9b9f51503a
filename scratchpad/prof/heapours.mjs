// attribute every sampled allocation to the innermost frame of our own code (dist/) above it
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2] ?? "/tmp/alloc.heapprofile", "utf8"))
const req = Number(process.argv[3] ?? 1)
const by = new Map(); let total = 0
const walk = (n, ours) => {
  const cf = n.callFrame
  const here = cf.url.includes("/dist/") && !cf.url.includes("node_modules") ? `${cf.functionName || "(anon)"} ${cf.url.replace(/^.*\/dist\//, "")}:${cf.lineNumber + 1}` : ours
  total += n.selfSize
  const k = here ?? "(outside our code)"
  by.set(k, (by.get(k) ?? 0) + n.selfSize)
  for (const c of n.children) walk(c, here)
}
walk(p.head, undefined)
for (const [k, v] of [...by].sort((a, b) => b[1] - a[1]).slice(0, Number(process.argv[4] ?? 40))) console.log(`${(100 * v / total).toFixed(1).padStart(5)}% ${(v / req / 1024).toFixed(2).padStart(6)} KB/req ${k}`)
