/**
 * What a request costs each contestant of the comparison (bench/contest.ts), read around every
 * 64-connection job of its main scenarios (non-streamed and streamed):
 *
 * - CPU: the contestant process's CPU time from /proc just before the job and just after it (after
 *   the harness has waited for the upstream's request count to stop moving, so the calls still in
 *   flight when the load stopped are finished), divided by the upstream calls it made in that window.
 *   Nanoseconds from /proc/<pid>/task/<tid>/schedstat summed over its threads when every thread of the
 *   first reading is still there at the second; otherwise utime + stime of /proc/<pid>/stat (clock
 *   ticks of `getconf CLK_TCK`, which also holds the threads that ended).
 * - Allocation: bytes allocated on the V8 heap over the same window (bench/heapmeter.ts, preloaded
 *   into every Node contestant the harness starts, driven over a unix socket of its own), divided by
 *   the same calls.
 *
 * Then the targets of issue 24 from those figures, the RSS and the added latency of the same run.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import type { HeapWindow } from "./heapmeter.js"
import { compileBench } from "./procs.js"

const KiB = 1024
const MiB = 1024 * 1024

// --- CPU time of a process ----------------------------------------------------------------------------

let clockTicks: number | undefined
/** clock ticks per second of /proc/<pid>/stat's utime and stime */
export const clkTck = (): number =>
  (clockTicks ??= (() => {
    try {
      const n = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim())
      return n > 0 ? n : 100
    } catch {
      return 100
    }
  })())

export interface CpuReading {
  /** utime + stime of the whole process (ended threads included), ns, in clock-tick steps */
  readonly statNs: number
  /** per live thread: its run time in ns (schedstat's first field); undefined where not readable */
  readonly threads: ReadonlyMap<string, number> | undefined
}

export const readCpu = (pid: number): CpuReading | undefined => {
  let stat: string
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return undefined
  }
  // the fields after the command name: utime is the 12th (stat field 14), stime the 13th
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  const statNs = ((Number(fields[11]) + Number(fields[12])) / clkTck()) * 1e9
  let threads: Map<string, number> | undefined = new Map()
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        threads.set(tid, Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]))
      } catch {
        // a thread that ended while being listed: no reading of its own (it is in statNs)
      }
    }
    if ([...threads.values()].some((v) => !Number.isFinite(v))) threads = undefined
  } catch {
    threads = undefined
  }
  return { statNs, threads }
}

export type CpuSource = "schedstat" | "stat"

/** CPU ns between two readings of one process */
export const cpuBetween = (a: CpuReading, b: CpuReading): { readonly ns: number; readonly source: CpuSource } => {
  if (a.threads !== undefined && b.threads !== undefined && [...a.threads.keys()].every((tid) => b.threads!.has(tid))) {
    let ns = 0
    // threads born in the window count whole: they ran only inside it
    for (const [tid, v] of b.threads) ns += v - (a.threads.get(tid) ?? 0)
    return { ns, source: "schedstat" }
  }
  return { ns: b.statNs - a.statNs, source: "stat" }
}

// --- the heap meter's side channel --------------------------------------------------------------------

const sockets = new Set<string>()
process.on("exit", () => {
  for (const s of sockets) fs.rmSync(s, { force: true })
})
let launched = 0

/** node arguments and environment that preload the heap meter into a contestant, and its socket */
export const meterLaunch = (): { readonly nodeArgs: ReadonlyArray<string>; readonly env: Readonly<Record<string, string>>; readonly socket: string } => {
  const socket = path.join(os.tmpdir(), `bench-heap-${process.pid}-${++launched}.sock`)
  sockets.add(socket)
  return { nodeArgs: ["--import", path.join(compileBench(), "heapmeter.js")], env: { BENCH_HEAPMETER: socket }, socket }
}

export interface MeterClient {
  /** false when the meter did not answer */
  readonly start: () => Promise<boolean>
  readonly stop: () => Promise<HeapWindow | undefined>
  readonly close: () => void
}

/** a connection to a contestant's heap meter, opened on first use; a meter that does not answer within 5 s gives no figure */
export const meterClient = (socketPath: string): MeterClient => {
  let socket: net.Socket | undefined
  let pending = ""
  const waiting: Array<(line: string | undefined) => void> = []
  const fail = () => {
    socket = undefined
    for (const w of waiting.splice(0)) w(undefined)
  }
  const connect = () =>
    new Promise<net.Socket | undefined>((resolve) => {
      const s = net.createConnection(socketPath)
      s.setEncoding("utf8")
      s.once("connect", () => resolve(s))
      s.on("error", () => {
        resolve(undefined)
        fail()
      })
      s.on("close", fail)
      s.on("data", (data: string) => {
        pending += data
        for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n")) {
          const line = pending.slice(0, nl)
          pending = pending.slice(nl + 1)
          waiting.shift()?.(line)
        }
      })
    })
  const ask = async (command: string): Promise<Record<string, unknown> | undefined> => {
    socket ??= await connect()
    const s = socket
    if (s === undefined) return undefined
    const line = await new Promise<string | undefined>((resolve) => {
      const timer = setTimeout(() => {
        const i = waiting.indexOf(done)
        if (i >= 0) waiting.splice(i, 1)
        resolve(undefined)
      }, 5000)
      const done = (l: string | undefined) => {
        clearTimeout(timer)
        resolve(l)
      }
      waiting.push(done)
      s.write(`${command}\n`)
    })
    if (line === undefined) return undefined
    try {
      return JSON.parse(line) as Record<string, unknown>
    } catch {
      return undefined
    }
  }
  return {
    start: async () => (await ask("start"))?.ok === true,
    stop: async () => {
      const r = await ask("stop")
      return r !== undefined && typeof r.allocatedBytes === "number" ? (r as unknown as HeapWindow) : undefined
    },
    close: () => socket?.destroy()
  }
}

// --- per job -----------------------------------------------------------------------------------------

export type CostKey = "c64" | "s64"

export interface CostSample {
  /** upstream calls the contestant made in the window: the requests it handled */
  readonly calls: number
  /** answers the load generator counted right */
  readonly answers: number
  readonly cpuUs: number | null
  readonly cpuSource: CpuSource | null
  /** utime + stime over the same window (clock-tick steps): a check on cpuUs */
  readonly cpuUsStat: number | null
  readonly cpuUsPerCall: number | null
  readonly heap: HeapWindow | null
  readonly allocKbPerCall: number | null
}

export interface Measured {
  readonly name: string
  readonly pid: number
  /** the heap meter's socket (Node contestants started with the preload) */
  readonly meterSocket?: string
}

const median = (values: ReadonlyArray<number | null>) => {
  const s = values.filter((v): v is number => v !== null && Number.isFinite(v)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}

/** `upstreamCalls`: the upstream's request count so far */
export const costRecorder = (upstreamCalls: () => Promise<number>) => {
  const samples: Record<CostKey, Record<string, Array<CostSample>>> = { c64: {}, s64: {} }
  const clients = new Map<string, MeterClient>()
  const clientOf = (socket: string) => {
    let c = clients.get(socket)
    if (c === undefined) clients.set(socket, (c = meterClient(socket)))
    return c
  }
  /** run `job` (the load and the wait for the upstream to settle) inside a measured window */
  const around = async <R extends { readonly ok: number }>(key: CostKey, who: Measured, job: () => Promise<R>): Promise<R> => {
    const meter = who.meterSocket !== undefined ? clientOf(who.meterSocket) : undefined
    const metering = meter !== undefined && (await meter.start())
    const calls0 = await upstreamCalls()
    const cpu0 = readCpu(who.pid)
    const r = await job()
    const cpu1 = readCpu(who.pid)
    const calls1 = await upstreamCalls()
    const heap = metering ? await meter.stop() : undefined
    const calls = calls1 - calls0
    const cpu = cpu0 !== undefined && cpu1 !== undefined ? cpuBetween(cpu0, cpu1) : undefined
    const cpuUs = cpu !== undefined ? cpu.ns / 1000 : null
    ;(samples[key][who.name] ??= []).push({
      calls,
      answers: r.ok,
      cpuUs,
      cpuSource: cpu?.source ?? null,
      cpuUsStat: cpu0 !== undefined && cpu1 !== undefined ? (cpu1.statNs - cpu0.statNs) / 1000 : null,
      cpuUsPerCall: cpuUs !== null && calls > 0 ? cpuUs / calls : null,
      heap: heap ?? null,
      allocKbPerCall: heap !== undefined && calls > 0 ? heap.allocatedBytes / calls / KiB : null
    })
    return r
  }
  /** median over the rounds: CPU µs or allocated KB per request (per stream for s64) */
  const cpuUs = (key: CostKey, name: string) => median((samples[key][name] ?? []).map((s) => s.cpuUsPerCall))
  const allocKb = (key: CostKey, name: string) => median((samples[key][name] ?? []).map((s) => s.allocKbPerCall))
  /** GC time (ms) per 1000 requests, median over the rounds */
  const gcMsPerK = (key: CostKey, name: string) => median((samples[key][name] ?? []).map((s) => (s.heap !== null && s.calls > 0 ? (s.heap.gcMs / s.calls) * 1000 : null)))
  const close = () => {
    for (const c of clients.values()) c.close()
    clients.clear()
  }
  /** how many windows fell back to utime + stime */
  const statFallbacks = () => Object.values(samples).reduce((n, byName) => n + Object.values(byName).reduce((m, xs) => m + xs.filter((s) => s.cpuSource === "stat").length, 0), 0)
  return { around, samples, cpuUs, allocKb, gcMsPerK, close, statFallbacks }
}
export type CostRecorder = ReturnType<typeof costRecorder>

// --- the targets of issue 24 ---------------------------------------------------------------------------

export interface ContestantFigures {
  readonly name: string
  readonly role: string
  readonly cpuUs: Readonly<Record<CostKey, number>>
  readonly allocKb: Readonly<Record<CostKey, number>>
  readonly rssBytes: number
  readonly addedP50Ms: number
}

interface Target {
  readonly target: string
  readonly bound: string
  readonly value: (f: ContestantFigures) => number
  readonly met: (v: number) => boolean
  readonly show: (v: number, f: ContestantFigures) => string
}

export interface TargetResult {
  readonly target: string
  readonly bound: string
  readonly contestant: string
  readonly value: number | null
  /** null: not judged (a reference column) or no figure */
  readonly met: boolean | null
}

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toFixed(digits) : "-")

const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")
  return [line(head), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

/**
 * The block under the comparison's table: each target of issue 24 with the bound, the judged
 * contestants' values (the gateway's chat completions, and its A/B twin with other node flags)
 * marked ok / MISSED, and every other contestant's value for reference.
 */
export const issueTargets = (all: ReadonlyArray<ContestantFigures>, judged: ReadonlyArray<string>): { readonly text: string; readonly results: ReadonlyArray<TargetResult> } => {
  const pass = all.find((f) => f.role === "passthrough")
  const peer = all.find((f) => f.role === "peer")
  const ratio = (a: number, b: number | undefined) => (b !== undefined && b > 0 ? a / b : Number.NaN)
  const x = (v: number) => `${fmt(v, 2)}x`
  const targets: ReadonlyArray<Target> = [
    { target: "allocation per non-streamed request", bound: "<= 50 KB", value: (f) => f.allocKb.c64, met: (v) => v <= 50, show: (v) => `${fmt(v, 1)} KB` },
    { target: "allocation per 20-chunk stream", bound: "<= 100 KB", value: (f) => f.allocKb.s64, met: (v) => v <= 100, show: (v) => `${fmt(v, 1)} KB` },
    { target: "CPU per request, non-stream @64", bound: "<= 2x passthrough", value: (f) => ratio(f.cpuUs.c64, pass?.cpuUs.c64), met: (v) => v <= 2, show: (v, f) => `${fmt(f.cpuUs.c64)} µs ${x(v)}` },
    { target: "CPU per stream @64", bound: "<= 2x passthrough", value: (f) => ratio(f.cpuUs.s64, pass?.cpuUs.s64), met: (v) => v <= 2, show: (v, f) => `${fmt(f.cpuUs.s64)} µs ${x(v)}` },
    { target: "RSS after the main scenarios", bound: "<= 1.5x passthrough", value: (f) => ratio(f.rssBytes, pass?.rssBytes), met: (v) => v <= 1.5, show: (v, f) => `${fmt(f.rssBytes / MiB)} MiB ${x(v)}` },
    { target: "RSS after the main scenarios", bound: "< portkey", value: (f) => ratio(f.rssBytes, peer?.rssBytes), met: (v) => v < 1, show: (v, f) => `${fmt(f.rssBytes / MiB)} MiB ${x(v)}` },
    { target: "added p50 @c=1", bound: "<= 2x passthrough", value: (f) => ratio(f.addedP50Ms, pass?.addedP50Ms), met: (v) => v <= 2, show: (v, f) => `${fmt(f.addedP50Ms * 1000)} µs ${x(v)}` }
  ]
  const judgedFigures = judged.map((n) => all.find((f) => f.name === n)).filter((f): f is ContestantFigures => f !== undefined)
  const reference = all.filter((f) => !judged.includes(f.name))
  const results: Array<TargetResult> = []
  const rows = targets.map((t) => [
    t.target,
    t.bound,
    ...judgedFigures.map((f) => {
      const v = t.value(f)
      const met = Number.isFinite(v) ? t.met(v) : null
      results.push({ target: t.target, bound: t.bound, contestant: f.name, value: Number.isFinite(v) ? v : null, met })
      return met === null ? "n/a" : `${t.show(v, f)} ${met ? "ok" : "MISSED"}`
    }),
    ...reference.map((f) => {
      const v = t.value(f)
      results.push({ target: t.target, bound: t.bound, contestant: f.name, value: Number.isFinite(v) ? v : null, met: null })
      return Number.isFinite(v) ? t.show(v, f) : "n/a"
    })
  ])
  const text = [
    `targets (issue 24): ${judgedFigures.map((f) => f.name).join(" and ") || "no gateway chat"} judged against the passthrough${peer !== undefined ? ` and ${peer.name}` : ""} of this run (ok / MISSED); the other contestants' values for reference`,
    "",
    table(["target", "bound", ...judgedFigures.map((f) => f.name), ...reference.map((f) => `${f.name} (ref)`)], rows),
    "",
    "allocation: bytes allocated on the V8 heap of the contestant's main thread per request (per whole stream) @64; CPU: process CPU per request @64, and its ratio to the passthrough's;",
    "RSS: the `RSS MiB` column, and its ratio to the passthrough's / the peer's; added p50: c=1 p50 less direct's, and its ratio to the passthrough's."
  ].join("\n")
  return { text, results }
}
