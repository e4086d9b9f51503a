// node categories.mjs file.cpuprofile: main-thread self time by category (startup module loading left out of the total)
import fs from "node:fs"
const p = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const t = new Map(); for (let i = 0; i < p.samples.length; i++) t.set(p.samples[i], (t.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const cat = (n) => {
  const f = n.callFrame, u = f.url, name = f.functionName
  if (name === "(garbage collector)") return "garbage collection"
  if (name === "(idle)") return "idle"
  if (/modules\/(esm|cjs)|compileSourceTextModule|internalModuleStat|readFileUtf8|wrapSafe/.test(u + name)) return "startup (module loading)"
  if (u === "" && /^(writev|writeBuffer|writeUtf8String|read|close|openFileHandle|fsync|rename|unlink)$/.test(name)) return "syscalls (socket writes, files)"
  if (/node_modules\/effect\//.test(u)) return "Effect runtime"
  if (/node_modules\/undici\//.test(u)) return "undici (upstream HTTP client)"
  if (/node_modules\//.test(u)) return "other libraries"
  if (/\/work\/main\/dist\//.test(u)) return "gateway code"
  if (/^node:/.test(u)) return "Node internals (http, streams, events, timers)"
  return "other (program, native)"
}
const acc = new Map(); let total = 0
for (const [id, v] of t) { const c = cat(byId.get(id)); if (c.startsWith("startup")) continue; acc.set(c, (acc.get(c) ?? 0) + v); total += v }
for (const [k, v] of [...acc].sort((a, b) => b[1] - a[1])) console.log((v / total * 100).toFixed(1).padStart(5) + "%  " + k)
