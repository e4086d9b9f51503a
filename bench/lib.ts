/**
 * Shared pieces of the benchmark: starting the gateway as a child process, and load runs through
 * the load generator process (bench/loader.ts, autocannon) that report latency percentiles from
 * every response time.
 */
import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { loader, repoRoot, track } from "./procs.js"

export { repoRoot }

export interface LoadResult {
  readonly requests: number
  readonly errors: number
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
  readonly mean: number
}

/** Run a load for `seconds` (or `amount` requests) from the load generator process; latencies in ms. */
export const load = async (options: {
  readonly url: string
  readonly body?: unknown
  readonly connections: number
  readonly seconds?: number
  readonly amount?: number
}): Promise<LoadResult> => {
  const r = await (await loader()).load({
    url: options.url,
    method: options.body === undefined ? "GET" : "POST",
    headers: options.body === undefined ? {} : { "content-type": "application/json" },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    connections: options.connections,
    ...(options.amount !== undefined ? { amount: options.amount } : { seconds: options.seconds ?? 3 })
  })
  return { requests: r.ok, errors: r.errors, perSecond: r.perSecond, p50: r.p50, p99: r.p99, mean: r.mean }
}

export interface RunningGateway {
  readonly url: string
  readonly child: ChildProcess
  readonly stop: () => Promise<void>
}

/** Start `dist/main.js` with a YAML config in a fresh temp dir; resolves once it prints its address. */
export const startGateway = (yaml: (dataDir: string) => string): Promise<RunningGateway> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-bench-"))
  const configFile = path.join(dir, "gateway.yaml")
  fs.writeFileSync(configFile, yaml(path.join(dir, "data")))
  const child = track(spawn(process.execPath, [path.join(repoRoot, "dist/main.js"), "--config", configFile, "--port", "0"], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] }))
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill("SIGTERM")
      await new Promise<void>((r) => child.once("exit", () => r()))
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  return new Promise((resolve, reject) => {
    let out = ""
    const timer = setTimeout(() => reject(new Error(`gateway did not start: ${out}`)), 30_000)
    child.stderr?.on("data", (d: Buffer) => (out += d.toString()))
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString()
      const m = /listening on (http:\/\/\S+)/.exec(out)
      if (m) {
        clearTimeout(timer)
        child.stdout?.removeAllListeners("data")
        child.stdout?.resume()
        resolve({ url: m[1], child, stop })
      }
    })
    child.once("exit", (code) => reject(new Error(`gateway exited with ${code}: ${out}`)))
  })
}

export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? 0 : sorted[Math.floor(sorted.length / 2)]
}

/** POST JSON and return the parsed answer (throws on a non-2xx). */
export const post = async (url: string, body: unknown): Promise<Record<string, unknown>> => {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
  const text = await res.text()
  if (!res.ok) throw new Error(`${res.status}: ${text.slice(0, 200)}`)
  return JSON.parse(text) as Record<string, unknown>
}
