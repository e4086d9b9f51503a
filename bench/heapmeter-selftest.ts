/**
 * Self-check of the heap meter (bench/heapmeter.ts) against known allocations; run by hand, once
 * after changing the meter (not part of npm test nor of npm run bench):
 *
 *   node --import tsx bench/heapmeter-selftest.ts
 *
 * A child node process is started with the meter preloaded, exactly as the comparison starts a
 * contestant, and driven through the meter's socket (start / stop) while it allocates, on command
 * over IPC, a known number of objects of a known size: far more than the young generation holds, so
 * the figure rests on the bytes freed by many scavenges (and, with a ring of survivors, by full GCs).
 *
 * The size of one object is what one costs the heap, measured in a second child whose young
 * generation is made large (64 MB semi-spaces) so that a window of 10-16 MB of the same objects, made
 * by the same warmed-up loop and all kept alive, sees no GC at all: used heap after - before, over
 * the count. This includes what V8 itself adds to an object (an allocation memento while the code is
 * not optimized) and the page tails left free when a big object does not fit (for `new Array(1022)`
 * about 90 bytes on top of its 8224: a JSArray of 4 words and a FixedArray of 2 + 1022, 8-byte words
 * without pointer compression); by hand: `{ a, b, c, d }` is 7 words, 56 bytes.
 * The meter passes when every window is within 1% of count x size.
 */
import { spawn } from "node:child_process"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { meterClient, meterLaunch } from "./costs.js"
import { compileBench } from "./procs.js"

const child = `
import { heapMeter } from ${JSON.stringify(pathToFileURL(path.join(compileBench(), "heapmeter.js")).href)}
const body = JSON.stringify({ model: "gpt-bench", messages: [{ role: "user", content: "Say hello" }] })
const make = {
  array: () => new Array(1022),
  json: () => JSON.parse(body),
  object: (i) => ({ a: i, b: i + 1, c: "x", d: null })
}
let sink
const ring = new Array(200_000).fill(null)
/** n objects; with keep > 0 the last keep of them stay alive in the ring */
const loop = (kind, n, keep) => {
  const f = make[kind]
  if (keep > 0) for (let i = 0; i < n; i++) ring[i % keep] = f(i)
  else for (let i = 0; i < n; i++) sink = f(i)
  ring.fill(null)
}
/** bytes of one object: n made by the warm loop and kept, in a window without any GC (retried until one has none) */
const sizeOf = (kind, n) => {
  const m = heapMeter()
  for (let attempt = 0; attempt < 20; attempt++) {
    m.start()
    loop(kind, n, n)
    const w = m.stop()
    if (w.gcs === 0) return w.allocatedBytes / n
  }
  return NaN
}
process.on("message", (m) => {
  if (m.type === "size") return process.send({ size: sizeOf(m.kind, m.n) })
  loop(m.kind, m.n, m.keep)
  process.send({ done: true, sink: sink === undefined })
})
process.send({ ready: true })
`

/** a child with the meter preloaded, as the comparison starts a contestant; `flags` before the preload */
const startChild = async (flags: ReadonlyArray<string>) => {
  const launch = meterLaunch()
  const proc = spawn(process.execPath, [...flags, ...launch.nodeArgs, "--input-type=module", "-e", child], { env: { ...process.env, ...launch.env }, stdio: ["ignore", "inherit", "inherit", "ipc"] })
  const replies: Array<(m: Record<string, unknown>) => void> = []
  proc.on("message", (m: Record<string, unknown>) => replies.shift()?.(m))
  const next = () => new Promise<Record<string, unknown>>((resolve) => replies.push(resolve))
  const ask = (m: Record<string, unknown>) => {
    const r = next()
    proc.send(m)
    return r
  }
  await next()
  return { proc, ask, socket: launch.socket }
}

const main = async () => {
  // the measured child: default heap settings, driven through the meter's socket
  const measured = await startChild([])
  // the sizing child: young generation large enough for a window of 10-16 MB without a GC
  const sizer = await startChild(["--min-semi-space-size=64", "--max-semi-space-size=64"])
  const meter = meterClient(measured.socket)
  const window = async (what: () => Promise<unknown>) => {
    if (!(await meter.start())) throw new Error("the meter did not answer start")
    await what()
    const w = await meter.stop()
    if (w === undefined) throw new Error("the meter did not answer stop")
    return w
  }
  const cases = [
    { kind: "array", n: 60_000, keep: 0, sizeN: 2000, what: "new Array(1022), dropped at once (scavenges)" },
    { kind: "array", n: 60_000, keep: 4096, sizeN: 2000, what: "new Array(1022), the last 4096 kept (~33 MB live: promotion, full GCs)" },
    { kind: "json", n: 1_000_000, keep: 0, sizeN: 100_000, what: "JSON.parse of a 72-byte chat request" },
    { kind: "object", n: 3_000_000, keep: 1000, sizeN: 200_000, what: "{ a, b, c, d } literal (by hand 56 B), the last 1000 kept" }
  ]
  const lines: Array<string> = []
  let worst = 0
  for (const c of cases) {
    // the same loop warmed up in both children first (optimized code allocates no mementos)
    for (const who of [measured, sizer]) for (let i = 0; i < 3; i++) await who.ask({ type: "run", kind: c.kind, n: Math.min(c.n, 50_000), keep: c.keep })
    const size = Number((await sizer.ask({ type: "size", kind: c.kind, n: c.sizeN })).size)
    const w = await window(() => measured.ask({ type: "run", kind: c.kind, n: c.n, keep: c.keep }))
    const expected = c.n * size
    const error = (w.allocatedBytes - expected) / expected
    worst = Math.max(worst, Number.isFinite(error) ? Math.abs(error) : Number.POSITIVE_INFINITY)
    lines.push(
      `${c.what}: ${c.n} x ${size.toFixed(1)} B = ${(expected / 1048576).toFixed(1)} MiB expected; ` +
        `meter ${(w.allocatedBytes / 1048576).toFixed(1)} MiB (${(error * 100).toFixed(2)}%), ${w.gcs} GCs (${w.scavenges} scavenges, ${w.fullGcs} full), freed ${(w.freedBytes / 1048576).toFixed(1)} MiB`
    )
  }
  const idle = await window(() => new Promise((r) => setTimeout(r, 300)))
  lines.push(`idle 300 ms (the socket and IPC round trips only): ${(idle.allocatedBytes / 1024).toFixed(1)} KB, ${idle.gcs} GCs`)
  meter.close()
  measured.proc.kill()
  sizer.proc.kill()
  for (const l of lines) process.stdout.write(`${l}\n`)
  process.stdout.write(`${worst <= 0.01 ? "PASS" : "FAIL"}: largest error ${(worst * 100).toFixed(2)}% (bound 1%)\n`)
  process.exit(worst <= 0.01 ? 0 : 1)
}

await main()
