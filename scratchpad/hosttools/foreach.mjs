// allocation of Effect.forEach([x], f, { concurrency: "unbounded" }) against f(x) directly, per call (an async f)
import { Effect } from "effect"
import { heapMeter } from "../../bench/.build/heapmeter.js"
const f = (x) => Effect.promise(() => Promise.resolve(x + 1))
const direct = Effect.map(f(1), (r) => [r])
const forked = Effect.forEach([1], f, { concurrency: "unbounded" })
const m = heapMeter()
const run = async (eff, n) => { for (let i = 0; i < n; i++) await Effect.runPromise(eff) }
for (const [name, eff] of [["direct", direct], ["forEach unbounded", forked], ["direct", direct], ["forEach unbounded", forked]]) {
  await run(eff, 5000); m.start(); const c0 = process.cpuUsage(); await run(eff, 20000); const u = process.cpuUsage(c0); const h = m.stop()
  console.log(`${name.padEnd(18)} ${(h.allocatedBytes / 20000 / 1024).toFixed(2)} KB, ${((u.user + u.system) / 20000).toFixed(1)} µs per run`)
}
