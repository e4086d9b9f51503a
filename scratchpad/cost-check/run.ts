/**
 * Cost check: chat-completions throughput and latency through the gateway vs. a bare
 * node:http + undici passthrough vs. the instant upstream itself, with autocannon.
 *
 *   npm run build && node --import tsx scratchpad/cost-check/run.ts [--quick] [--gateway-cmd "<cmd>"]
 *
 * Every server runs in its own child process; autocannon runs in this (otherwise idle) process.
 * See README.md in this folder for how to read the output.
 */
import { fork, spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Agent, request } from "undici"

// ---------------------------------------------------------------------------------------------
// autocannon (CommonJS, no bundled types): the small part of its API used here
// ---------------------------------------------------------------------------------------------

interface AutocannonOptions {
  readonly url: string
  readonly method: "POST"
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly connections: number
  readonly pipelining: number
  readonly duration: number
  readonly timeout?: number
}

interface AutocannonResult {
  readonly duration: number
  readonly errors: number
  readonly timeouts: number
  readonly non2xx: number
  readonly "2xx": number
  readonly statusCodeStats: Readonly<Record<string, { readonly count: number }>>
  readonly requests: { readonly sent: number }
}

interface AutocannonTracker {
  on(event: "response", listener: (client: unknown, statusCode: number, resBytes: number, responseTime: number) => void): AutocannonTracker
}

type Autocannon = (opts: AutocannonOptions, cb: (err: Error | null, result: AutocannonResult) => void) => AutocannonTracker

const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon

// ---------------------------------------------------------------------------------------------
// settings
// ---------------------------------------------------------------------------------------------

const here = path.dirname(fileURLToPath(import.meta.url))
const repoRoot = path.resolve(here, "../..")
const argv = process.argv.slice(2)

const argValue = (name: string): string | undefined => {
  const i = argv.indexOf(name)
  if (i < 0) return undefined
  const v = argv[i + 1]
  if (v === undefined) {
    process.stderr.write(`${name} needs a value\n`)
    process.exit(2)
  }
  return v
}

const quick = argv.includes("--quick")
const gatewayCmd = argValue("--gateway-cmd")

const settings = {
  quick,
  connections: 64,
  pipelining: 1,
  warmupSeconds: quick ? 1 : 2,
  rounds: quick ? 1 : 3,
  roundSeconds: quick ? 3 : 5,
  c1Seconds: quick ? 3 : 5
}

const GATEWAY_MODEL = "up/gpt-test"
const DIRECT_MODEL = "gpt-test"
const API_KEY = "test-key-123"

const log = (msg: string): void => {
  process.stderr.write(`[cost-check] ${msg}\n`)
}

// ---------------------------------------------------------------------------------------------
// children: started in their own processes, all killed on exit whatever happens
// ---------------------------------------------------------------------------------------------

interface Child {
  readonly name: string
  readonly proc: ChildProcess
  /** spawned in its own process group (a shell command): kill the group */
  readonly group: boolean
  readonly out: { stdout: string; stderr: string }
  exit: string | undefined
}

const children: Child[] = []
const tempDirs: string[] = []

const alive = (c: Child): boolean => c.exit === undefined && c.proc.pid !== undefined

const signal = (c: Child, sig: NodeJS.Signals): void => {
  if (!alive(c) || c.proc.pid === undefined) return
  try {
    if (c.group) process.kill(-c.proc.pid, sig)
    else c.proc.kill(sig)
  } catch {
    // already gone
  }
}

const killAllSync = (): void => {
  for (const c of children) signal(c, "SIGKILL")
  for (const d of tempDirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true })
    } catch {
      // best effort
    }
  }
}

const stopAll = async (): Promise<void> => {
  const waits = children.filter(alive).map(
    (c) =>
      new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          signal(c, "SIGKILL")
          resolve()
        }, 2000)
        c.proc.once("exit", () => {
          clearTimeout(t)
          resolve()
        })
        signal(c, "SIGTERM")
      })
  )
  await Promise.all(waits)
  killAllSync()
}

process.on("exit", killAllSync)
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(sig, () => {
    log(`${sig}: stopping children`)
    killAllSync()
    process.exit(sig === "SIGINT" ? 130 : 143)
  })
}
process.on("uncaughtException", (e) => {
  log(`uncaught: ${e.stack ?? String(e)}`)
  killAllSync()
  process.exit(1)
})
process.on("unhandledRejection", (e) => {
  log(`unhandled rejection: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`)
  killAllSync()
  process.exit(1)
})

const TAIL = 8192
const keepTail = (prev: string, chunk: string): string => {
  const s = prev + chunk
  return s.length > TAIL ? s.slice(s.length - TAIL) : s
}

const LISTENING = /listening on (https?:\/\/[^\s"'<>]+)/

/** register a child, collect its output, resolve with the URL of its `listening on` line */
const awaitListening = (name: string, proc: ChildProcess, group: boolean, timeoutMs: number): Promise<string> => {
  const child: Child = { name, proc, group, out: { stdout: "", stderr: "" }, exit: undefined }
  children.push(child)
  return new Promise((resolve, reject) => {
    let done = false
    const finish = (err: Error | undefined, url?: string): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      if (err !== undefined) reject(err)
      else if (url !== undefined) resolve(url)
    }
    const scan = (stream: "stdout" | "stderr") => (chunk: Buffer) => {
      child.out[stream] = keepTail(child.out[stream], chunk.toString("utf8"))
      const m = LISTENING.exec(child.out[stream])
      if (m !== null && m[1] !== undefined) {
        const u = new URL(m[1])
        if (u.hostname === "0.0.0.0" || u.hostname === "[::]" || u.hostname === "::") u.hostname = "127.0.0.1"
        finish(undefined, u.origin)
      }
    }
    proc.stdout?.on("data", scan("stdout"))
    proc.stderr?.on("data", scan("stderr"))
    proc.once("error", (e) => finish(new Error(`${name}: could not start: ${e.message}`)))
    proc.once("exit", (code, sig) => {
      child.exit = sig !== null ? `signal ${sig}` : `code ${code}`
      finish(new Error(`${name} exited (${child.exit}) before listening${outputTail(child)}`))
    })
    const timer = setTimeout(
      () => finish(new Error(`${name} printed no "listening on http://..." line within ${timeoutMs / 1000} s${outputTail(child)}`)),
      timeoutMs
    )
  })
}

const outputTail = (c: Child): string => {
  const parts: string[] = []
  const last = (s: string): string => s.trimEnd().split("\n").slice(-15).join("\n    ")
  if (c.out.stdout.trim() !== "") parts.push(`  stdout:\n    ${last(c.out.stdout)}`)
  if (c.out.stderr.trim() !== "") parts.push(`  stderr:\n    ${last(c.out.stderr)}`)
  return parts.length > 0 ? `\n${parts.join("\n")}` : ""
}

const forkTs = (name: string, file: string, args: ReadonlyArray<string>): Promise<string> =>
  awaitListening(
    name,
    fork(path.join(here, file), [...args], {
      execArgv: ["--import", "tsx"],
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe", "ipc"]
    }),
    false,
    20_000
  )

// ---------------------------------------------------------------------------------------------
// the gateway: temp config, default or overridden command
// ---------------------------------------------------------------------------------------------

const writeGatewayConfig = (upstreamUrl: string): { dir: string; config: string } => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cost-check-"))
  tempDirs.push(dir)
  const dataDir = path.join(dir, "data")
  fs.mkdirSync(dataDir)
  const config = path.join(dir, "gateway.yaml")
  const q = (s: string): string => JSON.stringify(s)
  fs.writeFileSync(
    config,
    [
      "listen: { host: 127.0.0.1, port: 0 }",
      `dataDir: ${q(dataDir)}`,
      "accessLog: false",
      "providers:",
      `  up: { type: openai, baseUrl: ${q(`${upstreamUrl}/v1`)}, apiKey: ${q(API_KEY)} }`,
      ""
    ].join("\n")
  )
  return { dir, config }
}

const startGateway = async (upstreamUrl: string): Promise<{ url: string } | { skipped: string }> => {
  const mainJs = path.join(repoRoot, "dist", "main.js")
  if (gatewayCmd === undefined && !fs.existsSync(mainJs)) {
    return { skipped: `${path.relative(repoRoot, mainJs)} does not exist (run \`npm run build\` first, or pass --gateway-cmd "<cmd>")` }
  }
  const { config } = writeGatewayConfig(upstreamUrl)
  const env = { ...process.env, COST_CHECK_CONFIG: config, COST_CHECK_UPSTREAM: upstreamUrl }
  const proc =
    gatewayCmd === undefined
      ? spawn(process.execPath, [mainJs, "--config", config, "--port", "0"], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"], detached: true })
      : spawn(gatewayCmd.replaceAll("{config}", config).replaceAll("{upstream}", upstreamUrl), {
          cwd: repoRoot,
          env,
          shell: true,
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
  try {
    return { url: await awaitListening("gateway", proc, true, 30_000) }
  } catch (e) {
    return { skipped: e instanceof Error ? e.message : String(e) }
  }
}

// ---------------------------------------------------------------------------------------------
// measuring
// ---------------------------------------------------------------------------------------------

interface Contestant {
  readonly name: "direct" | "passthrough" | "gateway"
  readonly url: string
  readonly model: string
}

const bodyFor = (c: Contestant): string => JSON.stringify({ model: c.model, messages: [{ role: "user", content: "Say hello" }] })
const endpoint = (c: Contestant): string => `${c.url}/v1/chat/completions`

/** one request, checked: 200, JSON, a chat.completion with an assistant message */
const sanityCheck = async (c: Contestant): Promise<string | undefined> => {
  const agent = new Agent()
  try {
    const res = await request(endpoint(c), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: bodyFor(c),
      dispatcher: agent,
      headersTimeout: 10_000,
      bodyTimeout: 10_000
    })
    const text = await res.body.text()
    if (res.statusCode !== 200) return `status ${res.statusCode}: ${text.slice(0, 500)}`
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      return `not JSON: ${text.slice(0, 500)}`
    }
    const ok =
      typeof parsed === "object" &&
      parsed !== null &&
      "object" in parsed &&
      parsed.object === "chat.completion" &&
      "choices" in parsed &&
      Array.isArray(parsed.choices) &&
      parsed.choices.length > 0
    return ok ? undefined : `not a chat.completion: ${text.slice(0, 500)}`
  } catch (e) {
    return `request failed: ${e instanceof Error ? e.message : String(e)}`
  } finally {
    await agent.close()
  }
}

/** growable list of float latencies (ms); autocannon's own histogram only has 1 ms resolution */
class Samples {
  private buf = new Float64Array(1 << 16)
  private n = 0
  push(v: number): void {
    if (this.n === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2)
      next.set(this.buf)
      this.buf = next
    }
    this.buf[this.n++] = v
  }
  sorted(): Float64Array {
    return this.buf.slice(0, this.n).sort()
  }
}

/** nearest-rank percentile of a sorted array */
const percentile = (sorted: Float64Array, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[i] ?? Number.NaN
}

interface RunResult {
  readonly contestant: Contestant["name"]
  readonly connections: number
  readonly seconds: number
  readonly ok: number
  readonly reqPerSec: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly non2xx: number
  readonly socketErrors: number
  readonly timeouts: number
  readonly errors: number
  readonly statusCodes: Record<string, number>
}

const runLoad = (c: Contestant, connections: number, seconds: number): Promise<RunResult> =>
  new Promise((resolve, reject) => {
    const samples = new Samples()
    const tracker = autocannon(
      {
        url: endpoint(c),
        method: "POST",
        headers: { "content-type": "application/json" },
        body: bodyFor(c),
        connections,
        pipelining: settings.pipelining,
        duration: seconds,
        timeout: 10
      },
      (err, r) => {
        if (err !== null) {
          reject(err)
          return
        }
        const sorted = samples.sorted()
        const statusCodes: Record<string, number> = {}
        for (const [code, { count }] of Object.entries(r.statusCodeStats)) statusCodes[code] = count
        resolve({
          contestant: c.name,
          connections,
          seconds: r.duration,
          ok: r["2xx"],
          reqPerSec: r.duration > 0 ? r["2xx"] / r.duration : 0,
          p50Ms: percentile(sorted, 50),
          p99Ms: percentile(sorted, 99),
          non2xx: r.non2xx,
          socketErrors: r.errors,
          timeouts: r.timeouts,
          errors: r.non2xx + r.errors,
          statusCodes
        })
      }
    )
    tracker.on("response", (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) samples.push(responseTime)
    })
  })

const median = (xs: ReadonlyArray<number>): number => {
  if (xs.length === 0) return Number.NaN
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? (s[mid] ?? Number.NaN) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2
}

// ---------------------------------------------------------------------------------------------
// output
// ---------------------------------------------------------------------------------------------

const fmt = (n: number | undefined, digits = 0): string => (n === undefined || Number.isNaN(n) ? "-" : n.toFixed(digits))

const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>): string =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join("  ")
  return [line(head), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

const main = async (): Promise<void> => {
  const startedAt = new Date()
  const cpus = os.cpus()
  log(`${settings.quick ? "quick" : "full"} run: ${settings.rounds} round(s) of ${settings.roundSeconds} s at ${settings.connections} connections, ${settings.warmupSeconds} s warm-up; ${cpus.length} CPUs`)
  if (cpus.length < 4) {
    log(`note: only ${cpus.length} CPUs for load generator + upstream + passthrough/gateway: absolute numbers are CPU-bound, compare ratios`)
  }

  const upstreamUrl = await forkTs("upstream", "upstream.ts", [])
  log(`upstream    ${upstreamUrl}`)
  const passthroughUrl = await forkTs("passthrough", "passthrough.ts", [upstreamUrl])
  log(`passthrough ${passthroughUrl}`)

  const skipped: Record<string, string> = {}
  const contestants: Contestant[] = [
    { name: "direct", url: upstreamUrl, model: DIRECT_MODEL },
    { name: "passthrough", url: passthroughUrl, model: DIRECT_MODEL }
  ]
  const gw = await startGateway(upstreamUrl)
  if ("url" in gw) {
    log(`gateway     ${gw.url}`)
    contestants.push({ name: "gateway", url: gw.url, model: GATEWAY_MODEL })
  } else {
    skipped.gateway = gw.skipped
    log(`GATEWAY NOT MEASURED: ${gw.skipped}`)
  }

  const measured: Contestant[] = []
  for (const c of contestants) {
    const problem = await sanityCheck(c)
    if (problem === undefined) measured.push(c)
    else {
      skipped[c.name] = `sanity request failed: ${problem}`
      log(`${c.name.toUpperCase()} NOT MEASURED: sanity request failed: ${problem}`)
    }
  }
  if (measured.length === 0) throw new Error("no contestant answered the sanity request")

  for (const c of measured) {
    log(`warm-up ${c.name} (${settings.warmupSeconds} s)`)
    await runLoad(c, settings.connections, settings.warmupSeconds)
  }

  const rounds: Record<string, RunResult[]> = Object.fromEntries(measured.map((c) => [c.name, []]))
  for (let r = 0; r < settings.rounds; r++) {
    // rotate the order each round so no contestant always runs right after the same neighbour
    const order = measured.map((_, i) => measured[(i + r) % measured.length]).filter((c): c is Contestant => c !== undefined)
    for (const c of order) {
      const res = await runLoad(c, settings.connections, settings.roundSeconds)
      rounds[c.name]?.push(res)
      log(`round ${r + 1}/${settings.rounds} ${c.name.padEnd(11)} ${fmt(res.reqPerSec)} req/s  p50 ${fmt(res.p50Ms, 2)} ms  p99 ${fmt(res.p99Ms, 2)} ms  errors ${res.errors}`)
    }
  }

  const c1: Record<string, RunResult> = {}
  for (const c of measured) {
    const res = await runLoad(c, 1, settings.c1Seconds)
    c1[c.name] = res
    log(`c=1 ${c.name.padEnd(11)} p50 ${fmt(res.p50Ms * 1000)} µs  ${fmt(res.reqPerSec)} req/s  errors ${res.errors}`)
  }

  const crashed = children.filter((c) => c.exit !== undefined).map((c) => `${c.name} exited during the run (${c.exit})${outputTail(c)}`)

  interface Summary {
    readonly rounds: number
    readonly medianReqPerSec: number
    readonly medianP50Ms: number
    readonly medianP99Ms: number
    readonly errors: number
    readonly c1P50Ms: number | undefined
    readonly c1AddedP50OverDirectMs: number | undefined
    readonly c1Errors: number | undefined
  }
  const directC1 = c1.direct?.p50Ms
  const summary: Record<string, Summary> = {}
  for (const c of measured) {
    const rs = rounds[c.name] ?? []
    const one = c1[c.name]
    summary[c.name] = {
      rounds: rs.length,
      medianReqPerSec: median(rs.map((x) => x.reqPerSec)),
      medianP50Ms: median(rs.map((x) => x.p50Ms)),
      medianP99Ms: median(rs.map((x) => x.p99Ms)),
      errors: rs.reduce((a, x) => a + x.errors, 0),
      c1P50Ms: one?.p50Ms,
      c1AddedP50OverDirectMs: one !== undefined && directC1 !== undefined ? one.p50Ms - directC1 : undefined,
      c1Errors: one?.errors
    }
  }
  const ratio = (a: string, b: string): number | undefined => {
    const x = summary[a]?.medianReqPerSec
    const y = summary[b]?.medianReqPerSec
    return x !== undefined && y !== undefined && y > 0 ? x / y : undefined
  }
  const ratios = {
    gatewayOverPassthrough: ratio("gateway", "passthrough"),
    passthroughOverDirect: ratio("passthrough", "direct"),
    gatewayOverDirect: ratio("gateway", "direct")
  }

  // ---- print
  const names: ReadonlyArray<Contestant["name"]> = ["direct", "passthrough", "gateway"]
  const rows = names.map((n) => {
    const s = summary[n]
    if (s === undefined) return [n, "not measured", "", "", "", "", ""]
    return [
      n,
      fmt(s.medianReqPerSec),
      fmt(s.medianP50Ms, 2),
      fmt(s.medianP99Ms, 2),
      String(s.errors),
      fmt(s.c1P50Ms === undefined ? undefined : s.c1P50Ms * 1000),
      n === "direct" ? "" : fmt(s.c1AddedP50OverDirectMs === undefined ? undefined : s.c1AddedP50OverDirectMs * 1000)
    ]
  })
  const out: string[] = []
  out.push("")
  out.push(
    `cost check — ${settings.connections} connections, pipelining ${settings.pipelining}, median of ${settings.rounds} × ${settings.roundSeconds} s` +
      ` (c=1: ${settings.c1Seconds} s); node ${process.version}, ${cpus.length} × ${cpus[0]?.model.trim() ?? "?"}`
  )
  out.push("")
  out.push(table(["contestant", "req/s", "p50 ms", "p99 ms", "errors", "c=1 p50 µs", "c=1 +p50 µs vs direct"], rows))
  out.push("")
  const r = (x: number | undefined): string => (x === undefined ? "n/a" : `${x.toFixed(3)}  (${((x - 1) * 100).toFixed(1)}%)`)
  out.push(`gateway / passthrough  req/s: ${r(ratios.gatewayOverPassthrough)}`)
  out.push(`passthrough / direct   req/s: ${r(ratios.passthroughOverDirect)}`)
  out.push(`gateway / direct       req/s: ${r(ratios.gatewayOverDirect)}`)
  for (const [n, why] of Object.entries(skipped)) out.push(`\n${n} NOT MEASURED: ${why}`)
  for (const line of crashed) out.push(`\nWARNING: ${line}`)
  process.stdout.write(`${out.join("\n")}\n`)

  // ---- JSON
  const file = path.join(here, `results-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`)
  const json = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    settings: { ...settings, gatewayCmd: gatewayCmd ?? null, gatewayModel: GATEWAY_MODEL, directModel: DIRECT_MODEL },
    environment: {
      node: process.version,
      platform: `${os.platform()} ${os.release()}`,
      cpus: cpus.length,
      cpuModel: cpus[0]?.model.trim() ?? null,
      loadavg: os.loadavg()
    },
    latencyNote: "latencies in ms, computed from every 2xx response time autocannon reports (sub-ms resolution); p50/p99 of the load runs are medians over rounds",
    summary,
    ratios,
    skipped,
    crashed,
    rounds,
    concurrency1: c1
  }
  fs.writeFileSync(file, `${JSON.stringify(json, null, 2)}\n`)
  process.stdout.write(`\nwrote ${path.relative(process.cwd(), file)}\n`)
}

try {
  await main()
  await stopAll()
  process.exit(0)
} catch (e) {
  log(`failed: ${e instanceof Error ? e.message : String(e)}`)
  await stopAll()
  process.exit(1)
}
