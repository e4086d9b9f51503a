/**
 * Bytes allocated on the V8 heap over a window, in a contestant of the comparison (bench/contest.ts),
 * loaded as a preload: `node --import bench/.build/heapmeter.js <the contestant>` with
 * `BENCH_HEAPMETER=<unix socket path>` in its environment. The harness drives it through that socket,
 * never through the contestant's own HTTP port: one command a line, one JSON answer a line.
 *
 *   start   opens a window: a `v8.GCProfiler` starts, the used heap is read      -> {"ok":true}
 *   stop    closes it: the used heap is read, the profiler stops                 -> a HeapWindow
 *
 * Allocated bytes over the window = used heap at the end - used heap at the start + what every
 * garbage collection in between freed (its used heap before - after, from the profiler's per-GC
 * heap statistics). Only the main thread's heap: worker threads have heaps of their own, and the
 * backing stores of Buffers and ArrayBuffers live outside the V8 heap (not counted here).
 * Checked against known allocations by bench/heapmeter-selftest.ts.
 *
 * Without BENCH_HEAPMETER, or in a worker thread, importing this module does nothing but define
 * `heapMeter` (the self-test uses it directly too).
 */
import * as fs from "node:fs"
import * as net from "node:net"
import * as v8 from "node:v8"
import { isMainThread } from "node:worker_threads"

export interface HeapWindow {
  /** used heap at the end - at the start + freed by the GCs in between */
  readonly allocatedBytes: number
  readonly usedStartBytes: number
  readonly usedEndBytes: number
  /** sum over the GCs of used before - used after */
  readonly freedBytes: number
  readonly gcs: number
  readonly scavenges: number
  /** mark-sweep-compacts (full GCs) */
  readonly fullGcs: number
  /** the GCs' own time as the profiler reports it (`cost`, µs), in ms */
  readonly gcMs: number
  readonly seconds: number
}

export interface HeapMeter {
  readonly start: () => void
  /** undefined when no window is open */
  readonly stop: () => HeapWindow | undefined
}

export const heapMeter = (): HeapMeter => {
  let profiler: v8.GCProfiler | undefined
  let usedStart = 0
  let startedAt = 0
  return {
    start: () => {
      profiler?.stop()
      profiler = new v8.GCProfiler()
      profiler.start()
      // read after the profiler runs: a GC between the two would count as freed without having been
      // in the start figure (getHeapStatistics reads the figures before it allocates its result)
      usedStart = v8.getHeapStatistics().used_heap_size
      startedAt = performance.now()
    },
    stop: () => {
      if (profiler === undefined) return undefined
      // the end figure first, then the profiler's record (whose own allocation is after the window)
      const usedEnd = v8.getHeapStatistics().used_heap_size
      const seconds = (performance.now() - startedAt) / 1000
      const record = profiler.stop()
      profiler = undefined
      let freed = 0
      let scavenges = 0
      let fullGcs = 0
      let costUs = 0
      for (const gc of record.statistics) {
        freed += gc.beforeGC.heapStatistics.usedHeapSize - gc.afterGC.heapStatistics.usedHeapSize
        costUs += gc.cost
        if (gc.gcType === "Scavenge" || gc.gcType === "MinorMarkSweep" || gc.gcType === "MinorMarkCompact") scavenges++
        else if (gc.gcType === "MarkSweepCompact") fullGcs++
      }
      return {
        allocatedBytes: usedEnd - usedStart + freed,
        usedStartBytes: usedStart,
        usedEndBytes: usedEnd,
        freedBytes: freed,
        gcs: record.statistics.length,
        scavenges,
        fullGcs,
        gcMs: costUs / 1000,
        seconds
      }
    }
  }
}

const socketPath = process.env.BENCH_HEAPMETER
if (socketPath !== undefined && socketPath !== "" && isMainThread) {
  // not for the contestant's own child processes
  delete process.env.BENCH_HEAPMETER
  const meter = heapMeter()
  const answer = (command: string): unknown => {
    if (command === "start") {
      meter.start()
      return { ok: true }
    }
    if (command === "stop") return meter.stop() ?? { error: "no window open" }
    if (command === "ping") return { ok: true, pid: process.pid }
    return { error: `unknown command ${JSON.stringify(command)}` }
  }
  const server = net.createServer((socket) => {
    socket.unref()
    socket.setEncoding("utf8")
    let pending = ""
    socket.on("data", (data: string) => {
      pending += data
      for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n")) {
        const command = pending.slice(0, nl).trim()
        pending = pending.slice(nl + 1)
        socket.write(`${JSON.stringify(answer(command))}\n`)
      }
    })
    socket.on("error", () => undefined)
  })
  try {
    fs.unlinkSync(socketPath)
  } catch {
    // not there
  }
  server.on("error", (e) => process.stderr.write(`heapmeter: ${e.message}\n`))
  server.listen(socketPath)
  server.unref()
  process.on("exit", () => {
    try {
      fs.unlinkSync(socketPath)
    } catch {
      // gone already
    }
  })
}
