/**
 * `npm run bench -- --limits` (issue 17): what rate limits, concurrency and budgets cost, in one
 * run with rounds alternated. Three cases — SQLite with one replica, PostgreSQL with one replica,
 * PostgreSQL with two behind the round-robin proxy of bench/postgres.ts — each as an A/B pair of
 * gateways whose configs differ only in the app's `limits`: every limit set (requests and tokens
 * per minute, concurrency, a USD budget per month, a token budget per day, the provider priced),
 * all too high ever to refuse, against none. Load: non-streamed chat completions at 64 connections
 * through the fake upstream, every answer checked whole. Figures: req/s, gateway CPU per request
 * (user + system from /proc), and on PostgreSQL the database's transactions per request
 * (`pg_stat_database`) and rows written to the quota tables per request (`pg_stat_user_tables`):
 * admission runs against this replica's leases, so neither may grow with the requests.
 *
 * Then the limit itself: two replicas with `requestsPerMinute: 600` get 10x that many requests
 * from 64 connections inside one minute window; at most 600 (+1 per replica: a call admitted on
 * a lease's last part) may be answered 200.
 *
 * Target: CPU per request with limits within 1.15x of without, each case.
 */
import Pg from "pg"
import { benchPostgres, cpuSeconds, median, roundRobin, startYamlGateway, type Log } from "./postgres.js"
import { loader, startBenchServer, type Server } from "./procs.js"
import type { LoadJob } from "./loader.js"
import { Effect } from "effect"
import type { TrafficLimits } from "../src/Config.js"
import type { CanonicalRequest } from "../src/domain/Canonical.js"
import { costOf } from "../src/domain/Cost.js"
import { rateLimitHeaders } from "../src/domain/Quota.js"
import { estimateTokens, messagesCalibration } from "../src/domain/TokenEstimate.js"
import { Log as GatewayLog } from "../src/services/ops/Log.js"
import { DEFAULT_OUTPUT_CAP, Quota } from "../src/services/quota/Quota.js"
import { memoryPool } from "../src/services/quota/QuotaPool.js"

const KEY = "sk-bench-limits-0123456789"
/** every limit, none ever reached by the load */
const HIGH = {
  requestsPerMinute: 100_000_000,
  tokensPerMinute: 1_000_000_000_000,
  concurrency: 1000,
  budgets: [
    { usd: 1_000_000_000, per: "month" },
    { tokens: 1_000_000_000_000, per: "day" }
  ]
}
/** the limit the overload is checked against, and how many times it is sent */
const REAL_RPM = 600
const OVERLOAD = 10
/** pending statistics of an idle PostgreSQL backend are flushed within 10 s (PGSTAT_IDLE_INTERVAL) */
const STATS_SETTLE_MS = 11_000
const TARGET = 1.15
/** seconds of load per side before the rounds (the JIT warms up over the first thousands of requests) */
const WARM_UP_S = 2
/** the overload starts with this much of its minute window left at least (it takes a few seconds) */
const WINDOW_MARGIN_MS = 30_000

const gatewayYaml = (o: { upstreamUrl: string; dataDir: string; limits?: object; databaseUrl?: string; replicaId?: string; publicHost?: string }) =>
  [
    `listen: { host: 127.0.0.1, port: 0${o.publicHost !== undefined ? `, hosts: [${JSON.stringify(o.publicHost)}]` : ""} }`,
    `dataDir: ${JSON.stringify(o.dataDir)}`,
    "accessLog: false",
    "providers:",
    `  up: { type: openai, baseUrl: ${JSON.stringify(`${o.upstreamUrl}/v1`)}, apiKey: sk-bench-upstream, price: { input: 2.5, output: 10 } }`,
    "keys:",
    `  - { key: ${KEY}, app: bench }`,
    "apps:",
    `  bench: ${o.limits !== undefined ? JSON.stringify({ limits: o.limits }) : "{}"}`,
    ...(o.databaseUrl !== undefined ? [`database: { url: ${JSON.stringify(o.databaseUrl)}, poolSize: 10 }`] : []),
    ...(o.replicaId !== undefined ? [`replicaId: ${o.replicaId}`] : [])
  ].join("\n") + "\n"

/** transactions of a database and rows written to its quota tables, as PostgreSQL's statistics have them */
const statsOf = async (url: string) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  return {
    read: async () => {
      const { rows } = await client.query<{ xacts: number; quota_rows: number }>(
        `SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())::float8 AS xacts,
           (SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables WHERE relname IN ('quota_counters', 'quota_leases'))::float8 AS quota_rows`
      )
      return { xacts: rows[0].xacts, quotaRows: rows[0].quota_rows }
    },
    stop: () => client.end()
  }
}
type Stats = Awaited<ReturnType<typeof statsOf>>

interface Side {
  readonly limits: boolean
  readonly url: string
  readonly pids: ReadonlyArray<number>
  readonly stats?: Stats
}

interface Case {
  readonly name: string
  readonly none: Side
  readonly set: Side
}

export interface LimitsBenchReport {
  readonly rows: ReadonlyArray<{
    readonly case: string
    readonly limits: boolean
    readonly perSecond: number
    readonly cpuUsPerRequest: number
    /** PostgreSQL only: over the warm-up and the rounds, idle time between rounds included */
    readonly dbTransactionsPerRequest?: number
    readonly quotaRowsPerRequest?: number
    readonly answers: number
    readonly errors: number
  }>
  readonly rounds: ReadonlyArray<{
    readonly case: string
    readonly round: number
    readonly limits: boolean
    readonly perSecond: number
    readonly cpuUsPerRequest: number
    readonly errors: number
    readonly statusCodes: Record<string, number>
    readonly firstProblem?: string
  }>
  readonly targets: ReadonlyArray<{ readonly target: string; readonly value: number; readonly ofMedians: number; readonly met: boolean }>
  /** the limits' own CPU per call, measured in process (no load, no noise) */
  readonly work: { readonly cpuUs: number; readonly calls: number }
  /** the none case's CPU per request plus that work, over the none case's: the deterministic form of the target */
  readonly deterministic: ReadonlyArray<{ readonly target: string; readonly value: number; readonly met: boolean }>
  /** limits no load reaches must refuse nothing: the 429s each case's `limits` side answered (warm-up excluded) */
  readonly falseRefusals: ReadonlyArray<{ readonly case: string; readonly refused: number; readonly firstProblem?: string; readonly met: boolean }>
  readonly overload: {
    readonly limit: number
    readonly sent: number
    readonly connections: number
    readonly ok: number
    readonly refused: number
    readonly other: number
    readonly upstreamCalls: number
    readonly seconds: number
    readonly oneWindow: boolean
    readonly met: boolean
  }
  readonly table: string
}

export const runLimitsBench = async (options: { readonly seconds: number; readonly rounds: number }, log: Log): Promise<LimitsBenchReport> => {
  const started: Array<{ stop: () => Promise<void> }> = []
  try {
    const pg = await benchPostgres(log)
    started.push(pg)
    const upstream = await startBenchServer("upstream", "upstream")
    started.push(upstream)
    const gateway = async (name: string, limits: object | undefined, databaseUrl?: string, replicaId?: string, publicHost?: string) => {
      const server = await startYamlGateway(name, (dataDir) => gatewayYaml({ upstreamUrl: upstream.url, dataDir, ...(limits !== undefined ? { limits } : {}), databaseUrl, replicaId, publicHost }))
      started.push(server)
      return server
    }
    const stats = async (url: string) => {
      const s = await statsOf(url)
      started.push(s)
      return s
    }
    const oneReplica = async (name: string, limits: boolean, onPostgres: boolean): Promise<Side> => {
      if (!onPostgres) {
        const server = await gateway(name, limits ? HIGH : undefined)
        return { limits, url: server.url, pids: [server.pid] }
      }
      const db = await pg.database(limits ? "gw_bench_limits" : "gw_bench_none")
      const server = await gateway(name, limits ? HIGH : undefined, db.url, `${name}-1`)
      return { limits, url: server.url, pids: [server.pid], stats: await stats(db.url) }
    }
    /** two replicas on one database behind a round-robin proxy */
    const twoReplicas = async (name: string, limits: object | undefined): Promise<{ side: Side; replicas: ReadonlyArray<Server> }> => {
      const db = await pg.database(limits !== undefined ? "gw_bench_limits" : "gw_bench_none")
      const proxy = await roundRobin()
      started.push({ stop: proxy.close })
      const replicas = await Promise.all([1, 2].map((i) => gateway(`${name} ${i}`, limits, db.url, `${name}-${i}`, proxy.host)))
      proxy.route(replicas.map((r) => r.url))
      return { side: { limits: limits !== undefined, url: proxy.url, pids: replicas.map((r) => r.pid), stats: await stats(db.url) }, replicas }
    }
    const cases: ReadonlyArray<Case> = [
      { name: "SQLite, 1 replica", none: await oneReplica("sqlite-none", false, false), set: await oneReplica("sqlite-limits", true, false) },
      { name: "PostgreSQL, 1 replica", none: await oneReplica("pg-none", false, true), set: await oneReplica("pg-limits", true, true) },
      { name: "PostgreSQL, 2 replicas", none: (await twoReplicas("pg2-none", undefined)).side, set: (await twoReplicas("pg2-limits", HIGH)).side }
    ]
    const load = await loader()
    const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Say hello in one short sentence, please." }] })
    const job = (url: string, length: { readonly seconds: number } | { readonly amount: number }): LoadJob => ({
      url: `${url}/v1/chat/completions`,
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body,
      connections: 64,
      ...length,
      check: { protocol: "chat", stream: false }
    })

    // statistics from before the warm-up: what a backend has not flushed yet lands in a later reading
    const sides = cases.flatMap((c) => [c.none, c.set])
    const answers = new Map<Side, number>(sides.map((s) => [s, 0]))
    const first = new Map(await Promise.all(sides.filter((s) => s.stats !== undefined).map(async (s) => [s, await s.stats!.read()] as const)))
    for (const side of sides) {
      const r = await load.load(job(side.url, { seconds: WARM_UP_S }))
      answers.set(side, answers.get(side)! + r.ok + r.non2xx)
    }
    const rounds: Array<LimitsBenchReport["rounds"][number]> = []
    for (let round = 0; round < options.rounds; round++) {
      // each round starts with the next case; within a case the pair runs back to back, its order flipped every round
      for (let k = 0; k < cases.length; k++) {
        const c = cases[(k + round) % cases.length]
        for (const side of round % 2 === 0 ? [c.none, c.set] : [c.set, c.none]) {
          const before = side.pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0)
          const r = await load.load(job(side.url, { seconds: options.seconds }))
          const cpu = side.pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0) - before
          answers.set(side, answers.get(side)! + r.ok + r.non2xx)
          const cpuUs = r.ok > 0 ? (cpu / r.ok) * 1e6 : Number.NaN
          rounds.push({
            case: c.name,
            round,
            limits: side.limits,
            perSecond: r.perSecond,
            cpuUsPerRequest: cpuUs,
            errors: r.errors,
            statusCodes: r.statusCodes,
            ...(r.firstProblem !== undefined ? { firstProblem: r.firstProblem } : {})
          })
          log(`limits round ${round + 1}/${options.rounds} ${c.name} ${side.limits ? "limits" : "none  "}: ${r.perSecond.toFixed(0)}/s, ${cpuUs.toFixed(0)} µs CPU/req, errors ${r.errors}${r.firstProblem !== undefined ? ` (${r.firstProblem.slice(0, 120)})` : ""}`)
        }
      }
    }
    log(`limits: waiting ${STATS_SETTLE_MS / 1000} s for PostgreSQL's statistics`)
    await new Promise((r) => setTimeout(r, STATS_SETTLE_MS))
    const last = new Map(await Promise.all([...first.keys()].map(async (s) => [s, await s.stats!.read()] as const)))

    const rows = cases.flatMap((c) =>
      [c.none, c.set].map((side) => {
        const mine = rounds.filter((r) => r.case === c.name && r.limits === side.limits)
        const n = answers.get(side)!
        const from = first.get(side)
        const to = last.get(side)
        return {
          case: c.name,
          limits: side.limits,
          perSecond: median(mine.map((r) => r.perSecond)),
          cpuUsPerRequest: median(mine.map((r) => r.cpuUsPerRequest)),
          ...(from !== undefined && to !== undefined ? { dbTransactionsPerRequest: (to.xacts - from.xacts) / n, quotaRowsPerRequest: (to.quotaRows - from.quotaRows) / n } : {}),
          answers: n,
          errors: mine.reduce((sum, r) => sum + r.errors, 0)
        }
      })
    )
    const targets = cases.map((c) => {
      const of = (limits: boolean) => rows.find((r) => r.case === c.name && r.limits === limits)!.cpuUsPerRequest
      // the pair of each round ran back to back: their ratio is the least drift-prone figure (an even
      // number of rounds runs each order as often: on this machine the second of a pair can pay more)
      const paired = Array.from({ length: options.rounds }, (_, round) => {
        const pick = (limits: boolean) => rounds.find((r) => r.case === c.name && r.round === round && r.limits === limits)!.cpuUsPerRequest
        return pick(true) / pick(false)
      })
      const value = median(paired)
      return { target: `${c.name}: CPU/req, limits over none <= ${TARGET}x`, value, ofMedians: of(true) / of(false), met: value <= TARGET }
    })

    const falseRefusals = cases.map((c) => {
      const mine = rounds.filter((r) => r.case === c.name && r.limits)
      const refused = mine.reduce((sum, r) => sum + (r.statusCodes["429"] ?? 0), 0)
      const firstProblem = mine.find((r) => (r.statusCodes["429"] ?? 0) > 0)?.firstProblem
      return { case: c.name, refused, ...(firstProblem !== undefined ? { firstProblem } : {}), met: refused === 0 }
    })

    const overload = await overloadCheck(log, {
      twoReplicas: async () => twoReplicas("pg2-rpm", { ...HIGH, requestsPerMinute: REAL_RPM }),
      upstreamRequests: async () => ((await (await fetch(`${upstream.url}/bench/stats`)).json()) as { requests: number }).requests,
      job
    })
    log("limits: the limits' own work per call, in process")
    const work = await limitsWorkPerCall()
    const deterministic = cases.map((c) => {
      const none = rows.find((r) => r.case === c.name && !r.limits)!.cpuUsPerRequest
      const value = (none + work.cpuUs) / none
      return { target: `${c.name}: (CPU/req none + limits' work) / none <= ${TARGET}x`, value, met: value <= TARGET }
    })
    return { rows, rounds, targets, falseRefusals, overload, work, deterministic, table: table(rows, targets, falseRefusals, overload, options, work, deterministic) }
  } finally {
    for (const s of started.reverse()) await s.stop().catch(() => undefined)
  }
}

/**
 * The limits' own work per call, in this process and without the noise of a loaded machine: the
 * input estimate of the bench's request, admission against every limit of HIGH (five counters,
 * leases in memory), the rate-limit headers and the settlement, as the model runner and the
 * answer writer do them. CPU per call from process.cpuUsage over many calls.
 */
export const limitsWorkPerCall = async (calls = 200_000): Promise<{ readonly cpuUs: number; readonly calls: number }> => {
  const request: CanonicalRequest = {
    system: [],
    messages: [{ role: "user", parts: [{ type: "text", text: "Say hello in one short sentence, please." }] }],
    tools: [],
    toolChoice: { type: "auto" },
    sampling: {},
    parallelToolCalls: true,
    stream: false
  }
  const limits = HIGH as TrafficLimits
  const price = { input: 1, output: 2 }
  const program = Effect.gen(function* () {
    const quota = yield* Quota.make(memoryPool().forOwner("bench", 5000), () => limits, () => undefined)
    const one = Effect.gen(function* () {
      const reservation = yield* quota.admit("bench", "none", () => {
        const input = estimateTokens(request, messagesCalibration)
        return { tokens: input + DEFAULT_OUTPUT_CAP, usd: costOf(price, { inputTokens: input, outputTokens: DEFAULT_OUTPUT_CAP, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 }) ?? 0 }
      })
      if (reservation?.view !== undefined) rateLimitHeaders(reservation.view, false, Date.now(), {})
      quota.settle(reservation!, { tokens: 20, usd: 0.00002 })
    })
    for (let i = 0; i < 20_000; i++) yield* one
    const before = process.cpuUsage()
    for (let i = 0; i < calls; i++) yield* one
    const used = process.cpuUsage(before)
    return { cpuUs: (used.user + used.system) / calls, calls }
  })
  return Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(GatewayLog.layer(false))))
}

/** 10x the limit from 64 connections inside one minute window, over two replicas: how many were admitted */
const overloadCheck = async (
  log: Log,
  o: {
    readonly twoReplicas: () => Promise<{ side: Side }>
    readonly upstreamRequests: () => Promise<number>
    readonly job: (url: string, length: { readonly amount: number }) => LoadJob
  }
): Promise<LimitsBenchReport["overload"]> => {
  const { side } = await o.twoReplicas()
  const sent = REAL_RPM * OVERLOAD
  const left = 60_000 - (Date.now() % 60_000)
  if (left < WINDOW_MARGIN_MS) {
    log(`limits overload: waiting ${(left / 1000).toFixed(1)} s for the next minute window`)
    await new Promise((r) => setTimeout(r, left + 100))
  }
  const window = Math.floor(Date.now() / 60_000)
  const upstreamBefore = await o.upstreamRequests()
  const job = o.job(side.url, { amount: sent })
  const r = await (await loader()).load(job)
  const oneWindow = Math.floor(Date.now() / 60_000) === window
  const upstreamCalls = (await o.upstreamRequests()) - upstreamBefore
  const ok = r.statusCodes["200"] ?? 0
  const refused = r.statusCodes["429"] ?? 0
  const other = Object.entries(r.statusCodes).reduce((sum, [code, n]) => (code === "200" || code === "429" ? sum : sum + n), 0) + r.socketErrors + r.timeouts + r.lost
  const met = oneWindow && ok <= REAL_RPM + 2 && upstreamCalls <= REAL_RPM + 2 && other === 0
  log(`limits overload: ${sent} requests in ${r.seconds.toFixed(1)} s: ${ok} x 200, ${refused} x 429, ${other} other; upstream calls ${upstreamCalls}${oneWindow ? "" : "; the burst crossed a window boundary"}`)
  return { limit: REAL_RPM, sent, connections: job.connections, ok, refused, other, upstreamCalls, seconds: r.seconds, oneWindow, met }
}

const table = (
  rows: LimitsBenchReport["rows"],
  targets: LimitsBenchReport["targets"],
  falseRefusals: LimitsBenchReport["falseRefusals"],
  overload: LimitsBenchReport["overload"], options: { readonly seconds: number; readonly rounds: number },
  work: LimitsBenchReport["work"],
  deterministic: LimitsBenchReport["deterministic"]) => {
  const pad = (s: string, n: number, left = false) => (left ? s.padStart(n) : s.padEnd(n))
  const num = (v: number | undefined, digits: number) => (v === undefined ? "-" : v.toFixed(digits))
  return [
    `${pad("case", 24)}  ${pad("limits", 6)}  ${pad("req/s", 7, true)}  ${pad("CPU µs/req", 10, true)}  ${pad("DB xact/req", 11, true)}  ${pad("quota rows/req", 14, true)}  ${pad("errors", 6, true)}`,
    `${"-".repeat(24)}  ${"-".repeat(6)}  ${"-".repeat(7)}  ${"-".repeat(10)}  ${"-".repeat(11)}  ${"-".repeat(14)}  ${"-".repeat(6)}`,
    ...rows.map(
      (r) =>
        `${pad(r.case, 24)}  ${pad(r.limits ? "set" : "none", 6)}  ${pad(r.perSecond.toFixed(0), 7, true)}  ${pad(r.cpuUsPerRequest.toFixed(0), 10, true)}  ${pad(num(r.dbTransactionsPerRequest, 4), 11, true)}  ${pad(num(r.quotaRowsPerRequest, 4), 14, true)}  ${pad(String(r.errors), 6, true)}`
    ),
    "",
    ...targets.map((t) => `${pad(t.target, 56)}  ${pad(t.value.toFixed(2) + "x", 6, true)}  ${t.met ? "met" : "MISSED"}   (ratio of the medians ${t.ofMedians.toFixed(2)}x)`),
    `limits' own work per call (estimate, admission on 5 counters, headers, settlement; in process, ${work.calls} calls): ${work.cpuUs.toFixed(2)} µs CPU`,
    ...deterministic.map((t) => `${pad(t.target, 56)}  ${pad(t.value.toFixed(3) + "x", 6, true)}  ${t.met ? "met" : "MISSED"}`),
    ...falseRefusals.flatMap((f) => [
      `${pad(`${f.case}: 429s with limits never reached = 0`, 56)}  ${pad(String(f.refused), 6, true)}  ${f.met ? "met" : "MISSED"}`,
      ...(f.firstProblem !== undefined ? [`  first: ${f.firstProblem.slice(0, 160)}`] : [])
    ]),
    `${pad(`2 replicas, requestsPerMinute ${overload.limit}: admitted <= ${overload.limit + 2}`, 56)}  ${pad(String(overload.ok), 6, true)}  ${overload.met ? "met" : "MISSED"}`,
    `  ${overload.sent} requests (${OVERLOAD}x) from ${overload.connections} connections in ${overload.seconds.toFixed(1)} s${overload.oneWindow ? ", one minute window" : ", CROSSED a window boundary"}: ${overload.ok} x 200, ${overload.refused} x 429, ${overload.other} other; upstream calls ${overload.upstreamCalls}`,
    "",
    `chat completions at 64 connections; median of ${options.rounds} alternated round(s) of ${options.seconds} s; CPU: the gateway processes' user+system time from /proc over the load, per answer;`,
    "the target's ratio is the median of each round's back-to-back pair (limits / none); DB xact/req: the database's committed + rolled-back transactions",
    "(pg_stat_database) over the warm-up and every round, idle time between rounds included; quota rows/req: rows inserted, updated or deleted in",
    "quota_counters and quota_leases (pg_stat_user_tables); 2 replicas: connection-level round robin"
  ].join("\n")
}
