/**
 * npm run bench — measurements that are not timed inside `npm test`. Prints tables and writes
 * bench/results/<timestamp>.json. See bench/README.md.
 *
 *   (no flag)    the comparison (bench/contest.ts): the gateway on each protocol against a bare
 *                passthrough, a peer gateway and the upstream itself, then growth scenarios
 *   --quick      every phase shortened (the comparison in under 2 minutes)
 *   --existing   only the earlier scenarios (mock provider): responses chain, 8 MiB store,
 *                files, usage accounting
 *   --files      only the files scenario
 *   --all        the comparison, then the earlier scenarios
 *   --no-peer    leave the peer gateway out (no npm install)
 *   --soak       only the soak (bench/soak.ts): 10 minutes of mixed traffic with faults injected
 *   --soak-seconds N   the soak's length (implies --soak unless --all); --all runs it too
 *   --postgres   only the storage backends (bench/postgres.ts): SQLite, PostgreSQL, and two
 *                PostgreSQL replicas behind a round-robin proxy (starts its own PostgreSQL unless
 *                TEST_DATABASE_URL names one)
 *   --limits     only the cost of rate limits and budgets (bench/limits.ts): with and without, on
 *                SQLite, PostgreSQL and two PostgreSQL replicas, and the limit held under overload
 *   --routing    only the cost of routing (bench/routing.ts): CPU per request of a plain alias against
 *                a weighted alias over 2 targets, the same with conversation affinity, least-busy and
 *                lowest-latency, in alternated rounds (target: weighted <= 1.1x plain)
 *   --websocket  only a 20-turn conversation over one Responses WebSocket against the same over HTTP
 *   --host-tools only the cost of a host tool call (bench/hosttools.ts): a request whose model calls a
 *                host tool of a local fake MCP server once (two model calls + one host call) against the
 *                same request for an app without host tools (one model call), in alternated rounds:
 *                CPU and allocation per request, CPU per host call (target: <= 0.5x one model call's),
 *                added latency
 *   --host-tools-era 2025   the same with a fake MCP server that speaks only the 2025 revision (the
 *                default: the 2026-07-28 one)
 *   --gateway-node-flags "<flags>"   the comparison gains `gateway chat (flags)`: the chat-completions
 *                gateway run with these node flags (e.g. "--max-semi-space-size=32"), measured in the
 *                same interleaved rounds as the rest (an A/B of a V8 lever within one run)
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { contestSettings, runContest, type ContestReport } from "./contest.js"
import { filesScenario } from "./files.js"
import { usageScenario } from "./usage.js"
import { load, median, post, repoRoot, startGateway, type LoadResult } from "./lib.js"
import { closeLoader } from "./procs.js"
import { runLimitsBench, type LimitsBenchReport } from "./limits.js"
import { runPostgresBench, type PostgresBenchReport } from "./postgres.js"
import { routingSettings, runRoutingBench, type RoutingBenchReport } from "./routing.js"
import { hostToolsSettings, runHostToolsBench, type HostToolsBenchReport } from "./hosttools.js"
import { runWebSocketBench, type WebSocketBenchReport } from "./websocket.js"
import { runSoak, soakSettings, type SoakReport } from "./soak.js"

const argv = process.argv.slice(2)
const known = ["--quick", "--existing", "--files", "--all", "--no-peer", "--soak", "--soak-seconds", "--postgres", "--limits", "--routing", "--host-tools", "--host-tools-era", "--websocket", "--gateway-node-flags"]
/** `--soak-seconds N` (or `--soak-seconds=N`) */
let soakSeconds: number | undefined
/** `--host-tools-era 2025` (or `=2025`): the fake MCP server speaks only the 2025 revision */
let hostToolsEra: "2026" | "2025" | undefined
/** `--gateway-node-flags "<flags>"` (or `--gateway-node-flags=<flags>`): split on whitespace */
let gatewayNodeFlags: ReadonlyArray<string> | undefined
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  if (a === "--gateway-node-flags" || a.startsWith("--gateway-node-flags=")) {
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i]
    const flags = (value ?? "").split(/\s+/).filter((f) => f !== "")
    if (flags.length === 0 || flags.some((f) => !f.startsWith("-"))) {
      process.stderr.write(`--gateway-node-flags needs node flags, e.g. --gateway-node-flags "--max-semi-space-size=32" (got ${value})\n`)
      process.exit(2)
    }
    gatewayNodeFlags = flags
    continue
  }
  if (a === "--host-tools-era" || a.startsWith("--host-tools-era=")) {
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i]
    if (value !== "2026" && value !== "2025") {
      process.stderr.write(`--host-tools-era needs 2026 (the 2026-07-28 revision, the default) or 2025 (got ${value})\n`)
      process.exit(2)
    }
    hostToolsEra = value
    continue
  }
  if (a === "--soak-seconds" || a.startsWith("--soak-seconds=")) {
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i]
    soakSeconds = Number(value)
    if (!Number.isFinite(soakSeconds) || soakSeconds < 1) {
      process.stderr.write(`--soak-seconds needs a number of seconds (got ${value})\n`)
      process.exit(2)
    }
    continue
  }
  if (!known.includes(a)) {
    process.stderr.write(`unknown option ${a}; known: ${known.join(" ")}\n`)
    process.exit(2)
  }
}
const quick = argv.includes("--quick")
/** `--files`: only the files scenario */
const filesOnly = argv.includes("--files")
const existing = argv.includes("--existing") || argv.includes("--all") || filesOnly
/** `--soak` (or `--soak-seconds`): the soak, and the comparison only with `--all`; `--all`: the soak too, last */
const soak = argv.includes("--soak") || soakSeconds !== undefined || argv.includes("--all")
/** `--postgres`: only the storage backends */
const postgresOnly = argv.includes("--postgres")
/** `--limits`: only the cost of limits and budgets */
const limitsOnly = argv.includes("--limits")
/** `--routing`: only the cost of routing */
const routingOnly = argv.includes("--routing")
/** `--host-tools`: only the cost of a host tool call */
const hostToolsOnly = argv.includes("--host-tools") || hostToolsEra !== undefined
/** `--websocket`: a 20-turn conversation over one Responses WebSocket against the same over HTTP */
const websocketOnly = argv.includes("--websocket")
const comparison = !postgresOnly && !limitsOnly && !routingOnly && !hostToolsOnly && !websocketOnly && !filesOnly && !argv.includes("--existing") && (!soak || argv.includes("--all"))
const seconds = quick ? 2 : 4
const rounds = quick ? 1 : 3
const startedAt = new Date()
const log = (line: string) => process.stderr.write(`[bench +${((Date.now() - startedAt.getTime()) / 1000).toFixed(1)}s] ${line}\n`)

const config = (dataDir: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
providers:
  mock: { type: mock }
`

interface Row {
  readonly scenario: string
  readonly measure: string
  readonly value: number
  readonly unit: string
}

const rows: Array<Row> = []
const note = (scenario: string, measure: string, value: number, unit: string) => {
  rows.push({ scenario, measure, value: Math.round(value * 1000) / 1000, unit })
  process.stderr.write(`[bench] ${scenario}: ${measure} = ${value.toFixed(3)} ${unit}\n`)
}

const existingScenarios = async () => {
  const gateway = filesOnly ? undefined : await startGateway(config)
  const responses = `${gateway?.url}/v1/responses`
  if (gateway !== undefined) try {
    // --- Responses chains: chaining from a response 100 turns deep vs 1 turn deep ---------------
    const chain = async (depth: number) => {
      let previous: string | undefined
      for (let turn = 0; turn < depth; turn++) {
        const answer = await post(responses, { model: "mock/echo", input: `turn ${turn}: what comes next?`, ...(previous ? { previous_response_id: previous } : {}) })
        previous = String(answer.id)
      }
      return previous!
    }
    const shallow = await chain(1)
    const deep = await chain(100)
    const chainRuns: Record<"1" | "100", Array<LoadResult>> = { "1": [], "100": [] }
    for (let round = 0; round < rounds; round++) {
      for (const [depth, id] of [["1", shallow], ["100", deep]] as const) {
        chainRuns[depth].push(
          await load({ url: responses, connections: 1, seconds, body: { model: "mock/echo", previous_response_id: id, input: "and now?", store: false } })
        )
      }
    }
    const p50 = (depth: "1" | "100") => median(chainRuns[depth].map((r) => r.p50))
    note("responses chain", "p50 latency, chaining from 1 turn", p50("1"), "ms")
    note("responses chain", "p50 latency, chaining from 100 turns", p50("100"), "ms")
    note("responses chain", "100-turn / 1-turn (target <= 2)", p50("100") / p50("1"), "x")

    // --- An 8 MiB stored response does not block concurrent small requests ---------------------
    // Each writer request is small but chains from a 7.4 MiB history, so the gateway reads one
    // ~7.4 MiB stored record and writes a new ~7.5 MiB one: the storage path, without a big body.
    // A second variant sends the 7.5 MiB as the request body itself (body parsing included).
    const small = { model: "mock/echo", input: "small request", store: false }
    const history = String((await post(responses, { model: "mock/echo", input: `::text ok\n${"x".repeat(7.4 * 1024 * 1024)}` })).id)
    const viaHistory = { model: "mock/echo", previous_response_id: history, input: "::text stored", store: true }
    const viaBody = { model: "mock/echo", input: `::text stored\n${"x".repeat(7.5 * 1024 * 1024)}`, store: true }
    // the writer chains from its newest record: the per-app cap (128 MiB) evicts the oldest ones
    const measureWhile = async (writerBody: Record<string, unknown>) => {
      const alone: Array<LoadResult> = []
      const during: Array<LoadResult> = []
      let written = 0
      let body = writerBody
      for (let round = 0; round < rounds; round++) {
        alone.push(await load({ url: responses, connections: 4, seconds, body: small }))
        let running = true
        const writer = (async () => {
          while (running) {
            const answer = await post(responses, body)
            if (body.previous_response_id !== undefined) body = { ...body, previous_response_id: answer.id }
            written++
          }
        })()
        during.push(await load({ url: responses, connections: 4, seconds, body: small }))
        running = false
        await writer
      }
      return { alone: median(alone.map((r) => r.p99)), during: median(during.map((r) => r.p99)), written }
    }
    const stored = await measureWhile(viaHistory)
    note("8 MiB store", "small requests p99, alone", stored.alone, "ms")
    note("8 MiB store", "small requests p99, while 7.5 MiB records are stored", stored.during, "ms")
    note("8 MiB store", "7.5 MiB records stored during the run", stored.written, "count")
    note("8 MiB store", "while storing / alone p99 (target <= 2)", stored.during / stored.alone, "x")
    const bodies = await measureWhile(viaBody)
    note("8 MiB bodies", "small requests p99, while 7.5 MiB request bodies arrive", bodies.during, "ms")
    note("8 MiB bodies", "while / alone p99 (JSON.parse of each body included)", bodies.during / bodies.alone, "x")
  } finally {
    await gateway.stop()
  }

  // --- Files: a 32 MiB upload against a bare server; RSS while 8 x 32 MiB arrive at once ----------
  await filesScenario({ rounds, note })

  // --- Usage accounting: throughput with and without recording ---------------------------------
  if (!filesOnly) await usageScenario({ rounds, seconds, note })
}

let report: ContestReport | undefined
let soakReport: SoakReport | undefined
let postgresReport: PostgresBenchReport | undefined
let limitsReport: LimitsBenchReport | undefined
let routingReport: RoutingBenchReport | undefined
let hostToolsReport: HostToolsBenchReport | undefined
let websocketReport: WebSocketBenchReport | undefined
try {
  if (postgresOnly) postgresReport = await runPostgresBench({ seconds: quick ? 2 : 4, rounds: quick ? 1 : 3 }, log)
  if (limitsOnly) limitsReport = await runLimitsBench({ seconds: quick ? 2 : 4, rounds: quick ? 2 : 10 }, log)
  if (routingOnly) routingReport = await runRoutingBench(routingSettings(quick), log)
  if (hostToolsOnly) hostToolsReport = await runHostToolsBench(hostToolsSettings(quick, hostToolsEra), log)
  if (websocketOnly) websocketReport = await runWebSocketBench({ rounds: quick ? 3 : 10 }, log)
  if (comparison) report = await runContest({ ...contestSettings(quick), peer: !argv.includes("--no-peer"), ...(gatewayNodeFlags !== undefined ? { gatewayNodeFlags } : {}) }, log)
  if (existing) await existingScenarios()
  // a quick run has a 1-minute soak unless told otherwise
  if (soak) soakReport = await runSoak(soakSettings(soakSeconds ?? (quick ? 60 : undefined)), log)
} finally {
  await closeLoader()
}

if (report !== undefined) process.stdout.write(`\n${report.text}\n`)

if (rows.length > 0) {
  const width = Math.max(...rows.map((r) => `${r.scenario}  ${r.measure}`.length))
  process.stdout.write(`\nearlier scenarios (mock provider)${quick ? " (quick)" : ""} — median of ${rounds} round(s) of ${seconds} s\n\n`)
  for (const r of rows) process.stdout.write(`${`${r.scenario}  ${r.measure}`.padEnd(width)}  ${String(r.value).padStart(10)} ${r.unit}\n`)
}
if (soakReport !== undefined) process.stdout.write(`\n${soakReport.text}\n`)
if (postgresReport !== undefined) process.stdout.write(`\nstorage backends${quick ? " (quick)" : ""}\n\n${postgresReport.table}\n`)
if (limitsReport !== undefined) process.stdout.write(`\nrate limits and budgets${quick ? " (quick)" : ""}\n\n${limitsReport.table}\n`)
if (routingReport !== undefined) process.stdout.write(`\nrouting: CPU per request of routed aliases against a plain one${quick ? " (quick)" : ""}\n\n${routingReport.table}\n`)
if (hostToolsReport !== undefined) process.stdout.write(`\nhost tools: a request with one host call against the same request without host tools${quick ? " (quick)" : ""}\n\n${hostToolsReport.table}\n`)
if (websocketReport !== undefined) process.stdout.write(`\nResponses over WebSocket against HTTP${quick ? " (quick)" : ""}\n\n${websocketReport.table}\n`)
const out = path.join(repoRoot, "bench/results")
fs.mkdirSync(out, { recursive: true })
const file = path.join(out, `${startedAt.toISOString().replace(/[:.]/g, "-")}.json`)
fs.writeFileSync(file, JSON.stringify({ quick, argv, startedAt: startedAt.toISOString(), node: process.version, comparison: report?.json ?? null, existing: existing ? { rounds, seconds, rows } : null, soak: soakReport?.json ?? null, postgres: postgresReport ? { rows: postgresReport.rows, targets: postgresReport.targets } : null, limits: limitsReport ? { rows: limitsReport.rows, targets: limitsReport.targets, falseRefusals: limitsReport.falseRefusals, overload: limitsReport.overload, work: limitsReport.work, deterministic: limitsReport.deterministic, rounds: limitsReport.rounds } : null, routing: routingReport ? { settings: routingReport.settings, rows: routingReport.rows, targets: routingReport.targets, work: routingReport.work, deterministic: routingReport.deterministic, rounds: routingReport.rounds } : null, hostTools: hostToolsReport ? (({ table: _table, ...rest }) => rest)(hostToolsReport) : null, websocket: websocketReport ? { rounds: websocketReport.rounds, rows: websocketReport.rows } : null }, null, 2))
process.stdout.write(`\nwrote ${path.relative(repoRoot, file)}\n`)
process.exit(0)
