/**
 * `npm run bench -- --host-tools` (issue 25): what one host tool call costs the gateway, against
 * the same request for an app without host tools, in one run with rounds alternated.
 *
 * Processes: a fake upstream (bench/hostupstream.ts: a request offering `<server>__lookup` is
 * answered with a call of it, a request ending with its tool result is answered with text, any other
 * request with the same text), a fake MCP server (bench/mcpfake.ts: the official SDK's
 * `createMcpHandler` over Streamable HTTP on 127.0.0.1, one tool `lookup` answered at once) and one
 * gateway (heap meter preloaded) with two apps:
 *
 * - `hosted` (`hostTools: ["fake/*"]`): contestant A. Its request makes two model calls and one host
 *   call: the model calls `fake__lookup`, the gateway calls the MCP server, hands the result back,
 *   the model answers text.
 * - `plain` (no host tools): contestant B. The same request body, one model call.
 *
 * One process for both, as bench/routing.ts does: two gateways loaded alike differ by up to ~10% in
 * CPU per request. The request is the same body; only the key (so the app) differs.
 *
 * Figures: the gateway's CPU per request of each (schedstat time of its threads from /proc, less its
 * idle CPU over the window, per request it finished, counted by the upstream), allocation per request
 * (the heap meter, less the idle allocation), and from those the host call's own cost. A warm-up
 * finds A's rate as fast as 32 connections go; the rounds then send both sides paced at 0.7 of it
 * (the gateway loaded alike, whatever A waits for), B, A, B, A, ..., B: each A job is compared with
 * the mean of the B jobs just before and after it (the machine's drift cancels to first order). Then
 * latency at one connection, A and B alternating request by request, and the MCP client's CPU per
 * call in this process (a figure the machine's load moves much less). See bench/README.md.
 *
 * Target (issue 25): the gateway's CPU per host call at most 0.5x one model call's CPU.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { cpuBetween, meterClient, meterLaunch, readCpu } from "./costs.js"
import type { HeapWindow } from "./heapmeter.js"
import type { LoadJob, LoadResult } from "./loader.js"
import { loader, repoRoot, startBenchServer, startServer, type Server } from "./procs.js"
import { LOOKUP_QUERY, lookupText } from "./protocols.js"
import type { Log } from "./postgres.js"
import { Connection } from "../src/services/tools/Connection.js"
import { resultContent } from "../src/services/tools/HostTools.js"
import type { ToolServerConfig } from "../src/Config.js"

const KEY_A = "sk-bench-hosted-0123456789"
const KEY_B = "sk-bench-plain-0123456789"
const MODEL = "up/gpt-bench"
/** the issue's bound: a host call's CPU over one model call's */
export const TARGET = 0.5
/** the measured rounds send both sides at this share of A's own rate (A as fast as 32 connections go) */
const PACE_SHARE = 0.7

export interface HostToolsSettings {
  /** seconds per measured job */
  readonly seconds: number
  /** A jobs (one per round; B jobs: rounds + 1) */
  readonly rounds: number
  readonly warmSeconds: number
  readonly connections: number
  /** A/B pairs of the 1-connection latency job */
  readonly latencyPairs: number
  /** MCP calls of the in-process measurement */
  readonly clientCalls: number
  /** the fake MCP server: the current revision (server 2.4, sessionless) or the 2025 one (sdk 1.32, sessions, SSE answers) */
  readonly era: "2026" | "2025"
}

export const hostToolsSettings = (quick: boolean, era: "2026" | "2025" = "2026"): HostToolsSettings =>
  quick
    ? { seconds: 1, rounds: 2, warmSeconds: 0.5, connections: 32, latencyPairs: 300, clientCalls: 1000, era }
    : { seconds: 1.5, rounds: 10, warmSeconds: 1.5, connections: 32, latencyPairs: 1500, clientCalls: 6000, era }

type Side = "A" | "B"

interface Job {
  readonly side: Side
  readonly round: number
  /** requests the gateway finished in the window (the upstream's last call of each) */
  readonly requests: number
  readonly answers: number
  readonly errors: number
  readonly perSecond: number
  readonly cpuUs: number | null
  readonly cpuUsPerRequest: number | null
  /** the same less the gateway's idle CPU over the window (its timers, with no request), per request */
  readonly cpuUsPerRequestLessIdle: number | null
  /** the gateway's CPU time over the window's wall time (1 = one core busy throughout) */
  readonly busy: number | null
  /** the fake MCP server's CPU per tools/call in the window (A jobs) */
  readonly mcpCpuUsPerCall: number | null
  readonly allocKbPerRequest: number | null
  readonly heap: HeapWindow | null
  readonly firstProblem?: string
}

interface McpStats {
  readonly calls: number
  readonly posts: number
  /** requests served by the 2026-07-28 path (`modern`) and the 2025 one (`legacy`) */
  readonly eras: { readonly modern: number; readonly legacy: number }
  readonly era: string
}

interface UpstreamStats {
  readonly requests: number
  readonly first: number
  readonly second: number
  readonly plain: number
  readonly bad: number
  readonly lastBad: string
}

export interface HostToolsBenchReport {
  readonly settings: HostToolsSettings
  readonly jobs: ReadonlyArray<Job>
  /** both sides' rate in the measured rounds (requests/s, paced) */
  readonly pace: number
  /** each side's rate in the warm-up, as fast as the connections allow */
  readonly freeRate: { readonly A: number; readonly B: number }
  /** the gateway's CPU and V8 allocation with no request, per second */
  readonly idleUsPerSecond: number
  readonly idleKbPerSecond: number
  /** for reference: the warm-up's last A and B jobs, each as fast as the connections allow (CPU µs per request less idle, busy share, (A - 2B) / B) */
  readonly asFastAsTheyGo: { readonly A: number; readonly B: number; readonly busyA: number; readonly busyB: number; readonly ofModelCall: number }
  /** medians over the jobs, less the idle CPU over each window */
  readonly cpuUsPerRequest: { readonly A: number; readonly B: number }
  /** the same with the idle CPU left in */
  readonly cpuUsPerRequestRaw: { readonly A: number; readonly B: number }
  readonly allocKbPerRequest: { readonly A: number; readonly B: number }
  readonly perSecond: { readonly A: number; readonly B: number }
  readonly busy: { readonly A: number; readonly B: number }
  /** the fake MCP server's own CPU per call (its process, A jobs), median */
  readonly mcpServerCpuUsPerCall: number
  /** per A job against the mean of its two B neighbours, medians over the rounds (and quartiles) */
  readonly hostCall: {
    /** A - 2B: the host call, the loop and the second model call's extra over a whole request (the issue's figure) */
    readonly cpuUs: number
    readonly cpuUsQuartiles: readonly [number, number]
    /** (A - 2B) / B, median over the rounds */
    readonly ofModelCall: number
    /** the same from the medians of A and B */
    readonly ofModelCallOfMedians: number
    readonly ofModelCallQuartiles: readonly [number, number]
    /** A - B: the host call and the whole second model call (an upper bound) */
    readonly upperCpuUs: number
    readonly allocKb: number
    /** allocation per host call over B's allocation per request */
    readonly allocOfModelCall: number
  }
  /** suspect: A - 2B came out negative (per-wakeup costs dominate at the rounds' rate: a machine too busy for the figure) */
  readonly target: { readonly target: string; readonly value: number; readonly met: boolean; readonly suspect: boolean }
  readonly latency: {
    readonly pairs: number
    readonly A: { readonly p50: number; readonly p90: number }
    readonly B: { readonly p50: number; readonly p90: number }
    /** per pair (the A request and the B request right after it): A - B and A - 2B, ms */
    readonly aMinusB: { readonly p50: number; readonly p90: number }
    readonly aMinus2B: { readonly p50: number; readonly p90: number }
    readonly errors: number
  }
  /** the SDK client's call (Connection.call + resultContent) in this process: CPU µs per call */
  readonly client: { readonly calls: number; readonly concurrency: number; readonly cpuUsPerCall: number; readonly slices: ReadonlyArray<number> }
  /** what the servers saw: every A request made two model calls and one MCP call, every B one model call */
  readonly checks: { readonly upstream: UpstreamStats; readonly mcp: McpStats; readonly problems: ReadonlyArray<string> }
  readonly table: string
}

// --- helpers --------------------------------------------------------------------------------------

const median = (values: ReadonlyArray<number | null>) => {
  const s = values.filter((v): v is number => v !== null && Number.isFinite(v)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}
/** the value at quantile q (linear between ranks) */
const quantile = (values: ReadonlyArray<number>, q: number) => {
  const s = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const i = q * (s.length - 1)
  const lo = Math.floor(i)
  return s[lo] + (s[Math.min(lo + 1, s.length - 1)] - s[lo]) * (i - lo)
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toFixed(digits) : "-")

const gatewayYaml = (dataDir: string, upstreamUrl: string, mcpUrl: string) =>
  [
    "listen: { host: 127.0.0.1, port: 0 }",
    `dataDir: ${JSON.stringify(dataDir)}`,
    "accessLog: false",
    "providers:",
    `  up: { type: openai, baseUrl: ${JSON.stringify(`${upstreamUrl}/v1`)}, apiKey: sk-bench-upstream }`,
    "toolServers:",
    `  fake: { url: ${JSON.stringify(`${mcpUrl}/mcp`)} }`,
    "keys:",
    `  - { key: ${KEY_A}, app: hosted }`,
    `  - { key: ${KEY_B}, app: plain }`,
    "apps:",
    '  hosted: { hostTools: ["fake/*"] }',
    "  plain: {}"
  ].join("\n") + "\n"

/** the one request of both sides: only the key differs */
const BODY = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `Look up the ${LOOKUP_QUERY} and say it in one short sentence.` }] })
const headersOf = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" })

// --- the run --------------------------------------------------------------------------------------

export const runHostToolsBench = async (settings: HostToolsSettings, log: Log): Promise<HostToolsBenchReport> => {
  const started: Array<Server> = []
  const meter = meterLaunch()
  const meterConn = meterClient(meter.socket)
  try {
    const upstream = await startBenchServer("host-tools upstream", "hostupstream")
    started.push(upstream)
    const mcp = await startBenchServer("fake MCP server", "mcpfake", ["--era", settings.era])
    started.push(mcp)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-bench-host-"))
    const config = path.join(dir, "gateway.yaml")
    fs.writeFileSync(config, gatewayYaml(path.join(dir, "data"), upstream.url, mcp.url))
    const gateway = await startServer("gateway", process.execPath, [...meter.nodeArgs, path.join(repoRoot, "dist/main.js"), "--config", config, "--port", "0"], {
      cwd: dir,
      env: { ...process.env, ...meter.env },
      onStop: () => fs.rmSync(dir, { recursive: true, force: true })
    }).catch((e: unknown) => {
      fs.rmSync(dir, { recursive: true, force: true })
      throw e
    })
    started.push(gateway)
    const upstreamStats = async () => (await (await fetch(`${upstream.url}/bench/stats`)).json()) as UpstreamStats
    const mcpStats = async () => (await (await fetch(`${mcp.url}/bench/stats`)).json()) as McpStats
    const mcpCalls = async () => (await mcpStats()).calls
    const problems: Array<string> = []

    // --- one request of each, checked: what the client sees and what reached the servers ----------
    const one = async (key: string) => {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: headersOf(key), body: BODY })
      return { status: res.status, hostCalls: res.headers.get("x-gateway-host-tool-calls"), sessions: res.headers.get("x-gateway-session"), body: await res.text() }
    }
    // the gateway connects to the MCP server at start: until it has the tool list, 503 not_ready
    let first = await one(KEY_A)
    for (let i = 0; first.status === 503 && i < 100; i++) {
      await sleep(100)
      first = await one(KEY_A)
    }
    const s0 = await upstreamStats()
    const m0 = await mcpCalls()
    const a = await one(KEY_A)
    const s1 = await upstreamStats()
    const m1 = await mcpCalls()
    const b = await one(KEY_B)
    const s2 = await upstreamStats()
    const m2 = await mcpCalls()
    const expect = (ok: boolean, what: string) => void (ok || problems.push(what))
    expect(a.status === 200 && JSON.parse(a.body).choices?.[0]?.message?.content !== undefined, `A: status ${a.status}: ${a.body.slice(0, 200)}`)
    expect(a.hostCalls === "1", `A: x-gateway-host-tool-calls is ${a.hostCalls}, not 1`)
    expect((a.sessions ?? "").split(",").length === 2, `A: x-gateway-session lists ${a.sessions}, not two model calls`)
    expect(s1.first - s0.first === 1 && s1.second - s0.second === 1 && s1.plain === s0.plain && s1.bad === s0.bad, `A: the upstream saw ${JSON.stringify({ first: s1.first - s0.first, second: s1.second - s0.second, plain: s1.plain - s0.plain, bad: s1.bad - s0.bad, lastBad: s1.lastBad })}`)
    expect(m1 - m0 === 1, `A: the MCP server answered ${m1 - m0} tools/call, not 1`)
    expect(b.status === 200, `B: status ${b.status}: ${b.body.slice(0, 200)}`)
    expect(b.hostCalls === null || b.hostCalls === "0", `B: x-gateway-host-tool-calls is ${b.hostCalls}`)
    expect(s2.plain - s1.plain === 1 && s2.first === s1.first && s2.second === s1.second, "B: the upstream did not see exactly one plain call")
    expect(m2 === m1, "B: the MCP server was called")
    for (const p of problems) log(`host-tools: CHECK FAILED ${p}`)
    log(`host-tools: gateway pid ${gateway.pid}, one request each checked (A: 2 model calls + 1 tools/call, B: 1 model call)${problems.length > 0 ? `: ${problems.length} problem(s)` : ""}`)

    // --- CPU and allocation per request, rounds alternated -----------------------------------------
    const gen = await loader()
    /**
     * A job of `amount` requests, not of a duration: a timed job's requests still in flight when it
     * stops are dropped by the client, and the gateway then abandons an A request after its first
     * model call or its host call, work in the window of no request it finished. With an amount,
     * every request sent is answered. `paced`: sent at that rate (an open loop); else as fast as the
     * connections allow (the warm-up, which finds A's rate).
     */
    const job = (side: Side, amount: number, paced?: number): LoadJob => ({
      url: `${gateway.url}/v1/chat/completions`,
      method: "POST",
      headers: headersOf(side === "A" ? KEY_A : KEY_B),
      body: BODY,
      connections: settings.connections,
      amount,
      ...(paced !== undefined ? { rate: paced } : {}),
      check: { protocol: "chat", stream: false }
    })
    /** each side's last rate as fast as it goes */
    const rate: Record<Side, number> = { A: 100, B: 200 }
    /** wait until the upstream's and the MCP server's request counts have not moved for 150 ms */
    const settle = async () => {
      const deadline = Date.now() + 15_000
      let seen = -1
      let since = Date.now()
      while (Date.now() < deadline) {
        const n = (await upstreamStats()).requests + (await mcpCalls())
        if (n !== seen) {
          seen = n
          since = Date.now()
        } else if (Date.now() - since >= 150) return
        await sleep(25)
      }
      problems.push("the gateway was still calling the upstream 15 s after a job ended")
    }
    /** `paced`: requests per second for both sides alike; else as fast as the connections allow */
    const measure = async (side: Side, round: number, seconds: number, paced?: number): Promise<Job> => {
      const metering = await meterConn.start()
      const before = await upstreamStats()
      const mcpBefore = await mcpCalls()
      const mcpCpu0 = readCpu(mcp.pid)
      const cpu0 = readCpu(gateway.pid)
      const t0 = performance.now()
      const r: LoadResult = await gen.load(
        paced !== undefined ? job(side, Math.max(10, Math.round(paced * seconds)), paced) : job(side, Math.max(settings.connections * 2, Math.round(rate[side] * seconds)))
      )
      if (paced === undefined && r.ok > 0 && r.seconds > 0) rate[side] = r.ok / r.seconds
      await settle()
      const cpu1 = readCpu(gateway.pid)
      const wall = (performance.now() - t0) / 1000
      const mcpCpu1 = readCpu(mcp.pid)
      const after = await upstreamStats()
      const mcpAfter = await mcpCalls()
      const heap = metering ? await meterConn.stop() : undefined
      // a request is finished when its last upstream call is: the second of an A request, the only one of a B
      const requests = side === "A" ? after.second - before.second : after.plain - before.plain
      if (side === "A" && (after.first - before.first !== requests || mcpAfter - mcpBefore !== requests || after.plain !== before.plain)) {
        problems.push(`round ${round} A: ${after.first - before.first} first calls, ${requests} second calls, ${mcpAfter - mcpBefore} MCP calls, ${after.plain - before.plain} plain calls`)
      }
      if (side === "B" && (after.first !== before.first || after.second !== before.second || mcpAfter !== mcpBefore)) problems.push(`round ${round} B: host-tool calls in a B job`)
      if (after.bad !== before.bad) problems.push(`round ${round} ${side}: ${after.bad - before.bad} second calls without the tool exchange (${after.lastBad})`)
      const cpu = cpu0 !== undefined && cpu1 !== undefined ? cpuBetween(cpu0, cpu1) : undefined
      const cpuUs = cpu !== undefined ? cpu.ns / 1000 : null
      const mcpCpu = mcpCpu0 !== undefined && mcpCpu1 !== undefined ? cpuBetween(mcpCpu0, mcpCpu1).ns / 1000 : undefined
      return {
        side,
        round,
        requests,
        answers: r.ok,
        errors: r.errors,
        perSecond: r.perSecond,
        cpuUs,
        cpuUsPerRequest: cpuUs !== null && requests > 0 ? cpuUs / requests : null,
        cpuUsPerRequestLessIdle: cpuUs !== null && requests > 0 ? (cpuUs - idleUsPerSecond * wall) / requests : null,
        busy: cpuUs !== null ? cpuUs / 1e6 / wall : null,
        mcpCpuUsPerCall: side === "A" && mcpCpu !== undefined && mcpAfter > mcpBefore ? mcpCpu / (mcpAfter - mcpBefore) : null,
        allocKbPerRequest: heap !== undefined && requests > 0 ? (heap.allocatedBytes / 1024 - idleKbPerSecond * wall) / requests : null,
        heap: heap ?? null,
        ...(r.firstProblem !== undefined ? { firstProblem: r.firstProblem } : {})
      }
    }
    let idleUsPerSecond = 0
    let idleKbPerSecond = 0
    const warm: Array<Job> = []
    for (let k = 0; k < 2; k++) for (const side of ["B", "A"] as const) warm.push(await measure(side, -1, settings.warmSeconds))
    // the gateway's own CPU and allocation with no request: timers, usage flushes, the MCP session; taken off every window
    {
      await sleep(300)
      const metering = await meterConn.start()
      const c0 = readCpu(gateway.pid)
      const t0 = performance.now()
      await sleep(1000)
      const c1 = readCpu(gateway.pid)
      const seconds = (performance.now() - t0) / 1000
      const heap = metering ? await meterConn.stop() : undefined
      if (c0 !== undefined && c1 !== undefined) idleUsPerSecond = cpuBetween(c0, c1).ns / 1000 / seconds
      if (heap !== undefined) idleKbPerSecond = heap.allocatedBytes / 1024 / seconds
    }
    // both sides at one rate, under A's own: the gateway is loaded alike by both, whatever A waits for
    const pace = Math.max(10, Math.round(PACE_SHARE * rate.A))
    log(
      `host-tools: warmed up (2 x ${settings.warmSeconds} s per side, ${settings.connections} connections): A ${fmt(rate.A)}/s, B ${fmt(rate.B)}/s as fast as they go; idle ${fmt(idleUsPerSecond)} µs CPU/s; rounds paced at ${pace}/s`
    )
    const jobs: Array<Job> = []
    const sequence: Array<Side> = ["B", ...Array.from({ length: settings.rounds }, () => ["A", "B"] as const).flat()]
    for (let k = 0; k < sequence.length; k++) {
      const round = Math.floor(k / 2)
      const j = await measure(sequence[k], round, settings.seconds, pace)
      jobs.push(j)
      log(
        `host-tools round ${round + 1}/${settings.rounds} ${j.side}: ${fmt(j.perSecond)}/s, ${fmt(j.cpuUsPerRequest ?? Number.NaN)} µs CPU/req (${fmt(j.cpuUsPerRequestLessIdle ?? Number.NaN)} less idle), busy ${fmt(100 * (j.busy ?? Number.NaN))}%, ${fmt(j.allocKbPerRequest ?? Number.NaN, 1)} KB/req, errors ${j.errors}${j.firstProblem !== undefined ? ` (${j.firstProblem.slice(0, 120)})` : ""}`
      )
    }
    const perRound = jobs.flatMap((j, k) => {
      if (j.side !== "A" || j.cpuUsPerRequestLessIdle === null) return []
      const a = j.cpuUsPerRequestLessIdle
      const bs = [jobs[k - 1]?.cpuUsPerRequestLessIdle, jobs[k + 1]?.cpuUsPerRequestLessIdle].filter((v): v is number => typeof v === "number")
      const bAllocs = [jobs[k - 1]?.allocKbPerRequest, jobs[k + 1]?.allocKbPerRequest].filter((v): v is number => typeof v === "number")
      if (bs.length === 0) return []
      const b = bs.reduce((x, y) => x + y, 0) / bs.length
      const bAlloc = bAllocs.length > 0 ? bAllocs.reduce((x, y) => x + y, 0) / bAllocs.length : Number.NaN
      return [{ a, b, host: a - 2 * b, upper: a - b, alloc: (j.allocKbPerRequest ?? Number.NaN) - 2 * bAlloc, bAlloc }]
    })
    const of = (side: Side, pick: (j: Job) => number | null) => median(jobs.filter((j) => j.side === side).map(pick))
    const cpuA = of("A", (j) => j.cpuUsPerRequestLessIdle)
    const cpuB = of("B", (j) => j.cpuUsPerRequestLessIdle)
    const ratios = perRound.map((r) => r.host / r.b)
    const hostCall = {
      cpuUs: median(perRound.map((r) => r.host)),
      cpuUsQuartiles: [quantile(perRound.map((r) => r.host), 0.25), quantile(perRound.map((r) => r.host), 0.75)] as const,
      ofModelCall: median(ratios),
      ofModelCallQuartiles: [quantile(ratios, 0.25), quantile(ratios, 0.75)] as const,
      ofModelCallOfMedians: (cpuA - 2 * cpuB) / cpuB,
      upperCpuUs: median(perRound.map((r) => r.upper)),
      allocKb: median(perRound.map((r) => r.alloc)),
      allocOfModelCall: median(perRound.map((r) => r.alloc / r.bAlloc))
    }

    // --- latency at 1 connection, A and B alternating request by request ----------------------------
    log(`host-tools: latency, ${settings.latencyPairs} A/B pairs at 1 connection`)
    const lat = await gen.load({
      url: `${gateway.url}/v1/chat/completions`,
      method: "POST",
      headers: {},
      bodies: [BODY, BODY],
      headersPerBody: [headersOf(KEY_A), headersOf(KEY_B)],
      keepTimes: true,
      connections: 1,
      amount: settings.latencyPairs * 2,
      check: { protocol: "chat", stream: false }
    })
    await settle()
    const ta = lat.perBody?.[0]?.times ?? []
    const tb = lat.perBody?.[1]?.times ?? []
    const pairs = Array.from({ length: Math.min(ta.length, tb.length) }, (_, i) => ({ a: ta[i], b: tb[i] })).filter((p) => Number.isFinite(p.a) && Number.isFinite(p.b))
    const latency = {
      pairs: pairs.length,
      A: { p50: quantile(pairs.map((p) => p.a), 0.5), p90: quantile(pairs.map((p) => p.a), 0.9) },
      B: { p50: quantile(pairs.map((p) => p.b), 0.5), p90: quantile(pairs.map((p) => p.b), 0.9) },
      aMinusB: { p50: quantile(pairs.map((p) => p.a - p.b), 0.5), p90: quantile(pairs.map((p) => p.a - p.b), 0.9) },
      aMinus2B: { p50: quantile(pairs.map((p) => p.a - 2 * p.b), 0.5), p90: quantile(pairs.map((p) => p.a - 2 * p.b), 0.9) },
      errors: lat.errors
    }
    if (lat.errors > 0) problems.push(`latency job: ${lat.errors} errors (${lat.firstProblem ?? ""})`)

    const upstreamEnd = await upstreamStats()
    const mcpEnd = await mcpStats()
    if (settings.era === "2026" && mcpEnd.eras.legacy > 0) problems.push(`the gateway spoke the 2025 revision to the 2026-07-28 server (${mcpEnd.eras.legacy} requests)`)

    // --- the MCP client's call in this process ------------------------------------------------------
    log(`host-tools: the MCP client's CPU per call in process, ${settings.clientCalls} calls`)
    const client = await clientCost(`${mcp.url}/mcp`, settings.clientCalls)

    if (upstreamEnd.bad > 0) problems.push(`the upstream saw ${upstreamEnd.bad} second calls without the tool exchange (${upstreamEnd.lastBad})`)
    const target = { target: `CPU per host call <= ${TARGET}x one model call's: (A - 2B) / B`, value: hostCall.ofModelCall, met: hostCall.ofModelCall <= TARGET, suspect: hostCall.ofModelCall < 0 }
    const report = {
      settings,
      jobs,
      pace,
      freeRate: { A: rate.A, B: rate.B },
      idleUsPerSecond,
      idleKbPerSecond,
      asFastAsTheyGo: (() => {
        // the warm-up's second pair, each side as fast as 32 connections go: regimes differ (see the table)
        const a = warm[3]?.cpuUsPerRequestLessIdle ?? Number.NaN
        const b = warm[2]?.cpuUsPerRequestLessIdle ?? Number.NaN
        return { A: a, B: b, busyA: warm[3]?.busy ?? Number.NaN, busyB: warm[2]?.busy ?? Number.NaN, ofModelCall: (a - 2 * b) / b }
      })(),
      cpuUsPerRequest: { A: cpuA, B: cpuB },
      cpuUsPerRequestRaw: { A: of("A", (j) => j.cpuUsPerRequest), B: of("B", (j) => j.cpuUsPerRequest) },
      allocKbPerRequest: { A: of("A", (j) => j.allocKbPerRequest), B: of("B", (j) => j.allocKbPerRequest) },
      perSecond: { A: of("A", (j) => j.perSecond), B: of("B", (j) => j.perSecond) },
      busy: { A: of("A", (j) => j.busy), B: of("B", (j) => j.busy) },
      mcpServerCpuUsPerCall: of("A", (j) => j.mcpCpuUsPerCall),
      hostCall,
      target,
      latency,
      client,
      checks: { upstream: upstreamEnd, mcp: mcpEnd, problems }
    }
    return { ...report, table: table(report) }
  } finally {
    meterConn.close()
    for (const s of started.reverse()) await s.stop().catch(() => undefined)
  }
}

/**
 * The gateway's MCP client (src/services/tools/Connection.ts: the SDK's `Client` over its Streamable
 * HTTP transport) calling the fake server, 16 calls in flight, and the result turned into what the
 * model gets (`resultContent`): CPU µs per call of this process (process.cpuUsage), median of 6
 * slices after a warm-up. The tsx loader in this process compiles once; the code that runs is the
 * same JavaScript.
 */
const clientCost = async (url: string, calls: number, concurrency = 16) => {
  const server: ToolServerConfig = { url, perApp: false, timeoutMs: 30_000, readyTimeoutMs: 10_000 }
  const connection = new Connection("fake", server, undefined, () => undefined)
  try {
    connection.start()
    const tools = await connection.ready(10_000)
    if (tools === undefined) throw new Error("the fake MCP server did not list its tools")
    const run = async (n: number) => {
      let next = 0
      let bad = 0
      const worker = async () => {
        while (next < n) {
          next++
          const outcome = await connection.call("lookup", { query: LOOKUP_QUERY }, new AbortController().signal)
          if (outcome._tag !== "Result") bad++
          else {
            const parts = resultContent(outcome.result, 256 * 1024)
            if (parts[0]?.type !== "text" || parts[0].text !== lookupText(LOOKUP_QUERY)) bad++
          }
        }
      }
      await Promise.all(Array.from({ length: concurrency }, worker))
      if (bad > 0) throw new Error(`${bad} of ${n} MCP calls failed`)
    }
    await run(Math.min(1000, calls))
    const slices: Array<number> = []
    const per = Math.ceil(calls / 6)
    for (let k = 0; k < 6; k++) {
      const before = process.cpuUsage()
      await run(per)
      const used = process.cpuUsage(before)
      slices.push((used.user + used.system) / per)
    }
    return { calls: per * 6, concurrency, cpuUsPerCall: median(slices), slices }
  } finally {
    await connection.close()
  }
}

const table = (r: Omit<HostToolsBenchReport, "table">) => {
  const pad = (s: string, n: number, left = false) => (left ? s.padStart(n) : s.padEnd(n))
  const widths = [54, 7, 11, 9, 7, 9, 7]
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => pad(c, widths[i], i >= 1)).join("  ")
  const errorsOf = (side: Side) => r.jobs.filter((j) => j.side === side).reduce((n, j) => n + j.errors, 0)
  const s = r.settings
  const row = (label: string, value: string, note = "") => `  ${pad(label, 64)} ${pad(value, 10, true)}   ${note}`
  const era = s.era === "2025" ? "the 2025 revision (sdk 1.32 server, sessions, SSE answers)" : "the 2026-07-28 revision (server 2.4, sessionless)"
  return [
    line(["contestant", "req/s", "CPU µs/req", "with idle", "busy %", "KB/req", "errors"]),
    line(widths.map((w) => "-".repeat(w))),
    line(["A: app with host tools (2 model calls + 1 host call)", fmt(r.perSecond.A), fmt(r.cpuUsPerRequest.A), fmt(r.cpuUsPerRequestRaw.A), fmt(100 * r.busy.A), fmt(r.allocKbPerRequest.A, 1), String(errorsOf("A"))]),
    line(["B: app without host tools (1 model call)", fmt(r.perSecond.B), fmt(r.cpuUsPerRequest.B), fmt(r.cpuUsPerRequestRaw.B), fmt(100 * r.busy.B), fmt(r.allocKbPerRequest.B, 1), String(errorsOf("B"))]),
    line(["A / B", "", fmt(r.cpuUsPerRequest.A / r.cpuUsPerRequest.B, 2) + "x", "", "", fmt(r.allocKbPerRequest.A / r.allocKbPerRequest.B, 2) + "x", ""]),
    "",
    "the host call: each A job against the mean of the B jobs just before and after it, median over the rounds [quartiles]",
    row("CPU per host call, A - 2B", `${fmt(r.hostCall.cpuUs)} µs`, `[${fmt(r.hostCall.cpuUsQuartiles[0])} .. ${fmt(r.hostCall.cpuUsQuartiles[1])}]`),
    row("  over one model call's CPU, (A - 2B) / B", `${fmt(r.hostCall.ofModelCall, 2)}x`, `[${fmt(r.hostCall.ofModelCallQuartiles[0], 2)} .. ${fmt(r.hostCall.ofModelCallQuartiles[1], 2)}]   of the medians: ${fmt(r.hostCall.ofModelCallOfMedians, 2)}x`),
    row("upper bound, A - B (the host call and the whole 2nd model call)", `${fmt(r.hostCall.upperCpuUs)} µs`),
    row("allocation per host call, A - 2B (deterministic)", `${fmt(r.hostCall.allocKb, 1)} KB`, `${fmt(r.hostCall.allocOfModelCall, 2)}x B's`),
    row(`the MCP client's call alone, in process (${r.client.calls} calls @${r.client.concurrency})`, `${fmt(r.client.cpuUsPerCall)} µs`, "CPU of the SDK client + resultContent in the bench process; no request around it"),
    row("the fake MCP server's own CPU per call (its process)", `${fmt(r.mcpServerCpuUsPerCall)} µs`, "not the gateway's; in the latency below"),
    row(
      "reference, each side as fast as it goes (warm-up): (A - 2B) / B",
      `${fmt(r.asFastAsTheyGo.ofModelCall, 2)}x`,
      `A ${fmt(r.asFastAsTheyGo.A)} µs at ${fmt(100 * r.asFastAsTheyGo.busyA)}% busy, B ${fmt(r.asFastAsTheyGo.B)} µs at ${fmt(100 * r.asFastAsTheyGo.busyB)}% busy: unlike loads, one job each`
    ),
    "",
    `target (issue 25): CPU per host call <= ${TARGET}x one model call's, (A - 2B) / B:   ${fmt(r.target.value, 2)}x   ${r.target.met ? "met" : "MISSED"}${r.target.suspect ? " (suspect)" : ""}`,
    ...(r.target.suspect
      ? [
          `(suspect: a negative A - 2B. At ${r.pace}/s each request's CPU here is mostly the cost of waking up per exchange (B ${fmt(r.cpuUsPerRequest.B)} µs per request), and the machine was too busy`,
          " for the figure: read the reference row, the allocation and the in-process call, or run again on a quieter machine)"
        ]
      : []),
    "",
    `latency at 1 connection, ${r.latency.pairs} pairs (an A request, then a B request), ms:    p50       p90`,
    row("A", `${fmt(r.latency.A.p50, 3)}`, pad(fmt(r.latency.A.p90, 3), 9, true)),
    row("B", `${fmt(r.latency.B.p50, 3)}`, pad(fmt(r.latency.B.p90, 3), 9, true)),
    row("added by the host call, A - B (per pair)", `${fmt(r.latency.aMinusB.p50, 3)}`, pad(fmt(r.latency.aMinusB.p90, 3), 9, true)),
    row("A - 2B (per pair)", `${fmt(r.latency.aMinus2B.p50, 3)}`, pad(fmt(r.latency.aMinus2B.p90, 3), 9, true)),
    "",
    ...(s.rounds < 4 ? [`(${s.rounds} round(s): the harness works, but figures from so few jobs swing by 10-30% on a busy machine; not figures to quote)`] : []),

    ...(r.checks.problems.length > 0 ? ["WARNINGS", ...r.checks.problems.map((p) => `  ${p}`), ""] : []),
    `one gateway, two apps (hosted: hostTools ["fake/*"]; plain: none), one chat-completions body, non-streamed, at most ${s.connections} connections. Warm-up: 2 x ${s.warmSeconds} s per side as fast as`,
    `they go (A ${fmt(r.freeRate.A)}/s, B ${fmt(r.freeRate.B)}/s); then ${s.rounds} rounds B, A, B, ..., every job ${fmt(r.pace * s.seconds)} requests paced at ${r.pace}/s (${PACE_SHARE} of A's rate) for both sides: the gateway is loaded alike,`,
    "whatever A waits for (CPU per request depends on how loaded the process is). The fake MCP server: the official SDK over Streamable HTTP on",
    `127.0.0.1, ${era}, one tool answered at once. CPU: the gateway process's threads (schedstat from /proc) over the job and until the upstream and the MCP server have`,
    `had no call for 150 ms, less its idle CPU over that time (${fmt(r.idleUsPerSecond)} µs/s, measured with no request), per request finished; 'with idle': not taken off; busy: its CPU over the`,
    `window's wall time; KB/req: V8 heap allocated in the same window (heap meter), less its idle allocation (${fmt(r.idleKbPerSecond, 1)} KB/s).`,
    "A makes 2 model calls + 1 host call and B 1 model call: A - 2B is the host call with the loop,",
    "less one request's edge work (parse, auth, answer) that the second model call does not repeat (a lower bound); A - B counts the whole second model call too (an upper bound).",
    `every answer checked whole; the upstream checks that each second call carries the call and the MCP result paired by id. upstream calls first/second/plain ${r.checks.upstream.first}/${r.checks.upstream.second}/${r.checks.upstream.plain}, bad ${r.checks.upstream.bad}; MCP tools/call ${r.checks.mcp.calls} (requests by era: 2026-07-28 ${r.checks.mcp.eras.modern}, 2025 ${r.checks.mcp.eras.legacy}).`
  ].join("\n")
}
