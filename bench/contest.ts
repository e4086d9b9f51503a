/**
 * The comparison of `npm run bench` (issue 8): the gateway on each protocol against a bare Node
 * passthrough, the @effect/platform server doing the passthrough's steps (bench/floor.ts), a peer
 * gateway (Portkey) and the upstream itself, all in front of the same instant fake upstream, with
 * CPU and heap allocation per request at 64 connections (bench/costs.ts, issue 24); then how cost
 * grows with body size, conversation length, Responses chain depth and held-open streams. Every
 * server and the load generator run as separate processes; this process only orchestrates. See
 * bench/README.md for how to read the output.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { costRecorder, issueTargets, meterLaunch, type ContestantFigures } from "./costs.js"
import type { HoldOpen, HoldResult, LoadResult } from "./loader.js"
import { ensurePeer, peerHeaders, PEER_VERSION, startPeer } from "./peer.js"
import { loader, repoRoot, rssOf, sampleRss, startBenchServer, startServer, type Server } from "./procs.js"
import { buildRequest, conversation, filler, problemOf, type Message, type Protocol } from "./protocols.js"

const KiB = 1024
const MiB = 1024 * 1024

export interface ContestSettings {
  readonly quick: boolean
  readonly warmSeconds: number
  readonly rounds: number
  readonly seconds: number
  readonly growthRounds: number
  /** pairs (baseline, under test) per growth job: bodies of 10 KB, 1 MB, 16 MB */
  readonly bodyPairs: ReadonlyArray<number>
  /** conversations of 10, 100, 1000 messages */
  readonly conversationPairs: ReadonlyArray<number>
  /** chains 10 and 100 turns deep */
  readonly chainPairs: number
  readonly holdCount: number
  /** seconds the streams stay held after the first RSS reading (1 s after they are open) */
  readonly holdSeconds: number
  /** contestants measured with held-open streams (all when undefined) */
  readonly holdContestants: ReadonlyArray<string> | undefined
  /** measure the peer gateway (installing it when missing) */
  readonly peer: boolean
  /** node flags of a second chat-completions gateway, `gateway chat (flags)`, measured in the same rounds (an A/B of a V8 lever) */
  readonly gatewayNodeFlags?: ReadonlyArray<string>
}

/** the second chat-completions gateway, run with `gatewayNodeFlags` */
const FLAGS_VARIANT = "gateway chat (flags)"
/** the @effect/platform server doing the passthrough's steps (bench/floor.ts) */
const FLOOR_NAME = "platform floor"

export const contestSettings = (quick: boolean): ContestSettings =>
  quick
    ? {
        quick,
        warmSeconds: 0.3,
        rounds: 1,
        seconds: 1,
        growthRounds: 1,
        bodyPairs: [100, 10, 3],
        conversationPairs: [100, 50, 8],
        chainPairs: 100,
        holdCount: 1000,
        holdSeconds: 1,
        holdContestants: ["direct", "passthrough", "gateway chat", FLAGS_VARIANT],
        peer: true
      }
    : {
        quick,
        warmSeconds: 1,
        rounds: 5,
        seconds: 2,
        growthRounds: 3,
        bodyPairs: [300, 30, 5],
        conversationPairs: [300, 150, 30],
        chainPairs: 300,
        holdCount: 1000,
        holdSeconds: 4,
        holdContestants: undefined,
        peer: true
      }

// --- contestants ----------------------------------------------------------------------------------

type Role = "direct" | "passthrough" | "floor" | "peer" | "gateway"

interface Contestant {
  readonly name: string
  readonly role: Role
  readonly protocol: Protocol
  readonly store?: boolean
  readonly model: string
  readonly holdModel: string
  readonly headers: Readonly<Record<string, string>>
  readonly server: Server
  /** the heap meter's socket (bench/heapmeter.ts, preloaded into every Node contestant started here) */
  readonly meterSocket?: string
}

interface GatewayVariant {
  readonly name: string
  readonly protocol: Protocol
  readonly store?: boolean
  readonly nodeFlags?: ReadonlyArray<string>
}

const gatewayVariantsOf = (settings: ContestSettings): ReadonlyArray<GatewayVariant> => [
  { name: "gateway chat", protocol: "chat" },
  ...(settings.gatewayNodeFlags !== undefined && settings.gatewayNodeFlags.length > 0 ? [{ name: FLAGS_VARIANT, protocol: "chat" as const, nodeFlags: settings.gatewayNodeFlags }] : []),
  { name: "gateway responses", protocol: "responses", store: false },
  { name: "gateway responses store", protocol: "responses", store: true },
  { name: "gateway messages", protocol: "messages" },
  { name: "gateway gemini", protocol: "gemini" }
]

const gatewayConfig = (dataDir: string, upstreamUrl: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
# the held-open streams scenario keeps 1000 model calls in flight (the default allows 256)
concurrency: 4096
providers:
  up: { type: openai, baseUrl: ${JSON.stringify(`${upstreamUrl}/v1`)}, apiKey: sk-bench-upstream }
`

/** `node [flags] --import <heap meter> dist/main.js --config <yaml>` in a fresh temp dir, removed when it stops */
const startGatewayServer = (name: string, upstreamUrl: string, meter: ReturnType<typeof meterLaunch>, nodeFlags: ReadonlyArray<string> = []) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-contest-"))
  const config = path.join(dir, "gateway.yaml")
  fs.writeFileSync(config, gatewayConfig(path.join(dir, "data"), upstreamUrl))
  return startServer(name, process.execPath, [...nodeFlags, ...meter.nodeArgs, path.join(repoRoot, "dist/main.js"), "--config", config, "--port", "0"], {
    cwd: dir,
    env: { ...process.env, ...meter.env },
    onStop: () => fs.rmSync(dir, { recursive: true, force: true })
  }).catch((e: unknown) => {
    fs.rmSync(dir, { recursive: true, force: true })
    throw e
  })
}

// --- helpers ----------------------------------------------------------------------------------------

const median = (values: ReadonlyArray<number>) => {
  const s = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}
const nullIfNaN = (n: number) => (Number.isFinite(n) ? n : null)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const rotate = <A>(xs: ReadonlyArray<A>, by: number) => xs.map((_, i) => xs[(i + by) % xs.length])
const fmt = (n: number | undefined, digits = 0) => (n === undefined || !Number.isFinite(n) ? "-" : n.toFixed(digits))
/** about 3 significant digits */
const fmt3 = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? "-" : Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : Math.abs(n) >= 1 ? n.toFixed(2) : n.toFixed(3))

const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")
  return [line(head), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

interface UpstreamStats {
  readonly held: number
  readonly holding: boolean
  readonly requests: number
  readonly last: { readonly messages: number; readonly contentChars: number; readonly bodyBytes: number }
}

// --- the run ----------------------------------------------------------------------------------------

export interface ContestReport {
  readonly text: string
  readonly json: Record<string, unknown>
}

export const runContest = async (settings: ContestSettings, log: (line: string) => void): Promise<ContestReport> => {
  const servers: Array<Server> = []
  try {
    return await contest(settings, log, servers)
  } finally {
    // on an error too: stopped gateways remove their temp dirs (stopping twice is harmless)
    for (const s of servers) await s.stop().catch(() => undefined)
  }
}

const contest = async (settings: ContestSettings, log: (line: string) => void, servers: Array<Server>): Promise<ContestReport> => {
  const started = Date.now()
  const notes: Array<string> = []
  const note = (line: string) => {
    notes.push(line)
    log(`NOTE: ${line}`)
  }

  const upstream = await startBenchServer("upstream", "upstream")
  servers.push(upstream)
  /** the upstream the contestants started now point at (the held-streams phase gets a fresh one) */
  let active: Server = upstream
  const upstreamCall = async (method: "GET" | "POST", what: string) => {
    const res = await fetch(`${active.url}/bench/${what}`, { method })
    return (await res.json()) as UpstreamStats
  }
  log(`upstream ${upstream.url} (pid ${upstream.pid})`)
  const gen = await loader()

  const gatewayVariants = gatewayVariantsOf(settings)
  const makeGateway = async (v: GatewayVariant): Promise<Contestant> => {
    const meter = meterLaunch()
    const server = await startGatewayServer(v.name, active.url, meter, v.nodeFlags)
    return { name: v.name, role: "gateway", protocol: v.protocol, ...(v.store !== undefined ? { store: v.store } : {}), model: "up/gpt-bench", holdModel: "up/bench-hold", headers: {}, server, meterSocket: meter.socket }
  }
  const makeBench = async (name: string, role: "passthrough" | "floor", file: "passthrough" | "floor"): Promise<Contestant> => {
    const meter = meterLaunch()
    return { name, role, protocol: "chat", model: "gpt-bench", holdModel: "bench-hold", headers: {}, server: await startBenchServer(name, file, [active.url], meter), meterSocket: meter.socket }
  }
  const makePassthrough = () => makeBench("passthrough", "passthrough", "passthrough")
  const makeFloor = () => makeBench(FLOOR_NAME, "floor", "floor")
  const peerName = `portkey ${PEER_VERSION}`
  const makePeer = async (): Promise<Contestant> => {
    const meter = meterLaunch()
    return { name: peerName, role: "peer", protocol: "chat", model: "gpt-bench", holdModel: "bench-hold", headers: peerHeaders(active.url), server: await startPeer(meter), meterSocket: meter.socket }
  }

  // --- start everything (the peer is installed first when missing) ------------------------------
  let peerNote: string | undefined
  const peerReady = (settings.peer ? ensurePeer(log) : Promise.reject(new Error("left out (--no-peer)"))).then(
    (n) => {
      peerNote = n
      log(n)
      return true
    },
    (e: unknown) => {
      note(`peer gateway NOT MEASURED: ${e instanceof Error ? e.message : String(e)}`)
      return false
    }
  )
  const direct: Contestant = { name: "direct", role: "direct", protocol: "chat", model: "gpt-bench", holdModel: "bench-hold", headers: {}, server: upstream }
  const startedAll = await Promise.allSettled([makePassthrough(), makeFloor(), peerReady.then((ok) => (ok ? makePeer() : undefined)), ...gatewayVariants.map(makeGateway)])
  const candidates: Array<Contestant> = [direct]
  startedAll.forEach((s, i) => {
    if (s.status === "fulfilled") {
      if (s.value !== undefined) {
        candidates.push(s.value)
        servers.push(s.value.server)
      }
    } else {
      const what = i === 0 ? "passthrough" : i === 1 ? FLOOR_NAME : i === 2 ? "peer gateway" : gatewayVariants[i - 3].name
      if (i === 0) throw s.reason
      note(`${what} NOT MEASURED: it did not start: ${s.reason instanceof Error ? s.reason.message : String(s.reason)}`)
    }
  })

  const requestOf = (c: Contestant, o: { readonly stream: boolean; readonly messages: ReadonlyArray<Message>; readonly previousResponseId?: string; readonly hold?: boolean; readonly store?: boolean }) => {
    const spec = buildRequest(c.protocol, {
      model: o.hold ? c.holdModel : c.model,
      stream: o.stream,
      messages: o.messages,
      store: o.store ?? c.store ?? false,
      headers: c.headers,
      ...(o.previousResponseId !== undefined ? { previousResponseId: o.previousResponseId } : {})
    })
    return { url: `${c.server.url}${spec.path}`, headers: spec.headers, body: spec.body }
  }
  const hello: ReadonlyArray<Message> = [{ role: "user", text: "Say hello" }]

  // --- sanity: one whole answer, non-streamed and streamed, from each -------------------------
  const contestants: Array<Contestant> = []
  for (const c of candidates) {
    const problems: Array<string> = []
    for (const stream of [false, true]) {
      const r = requestOf(c, { stream, messages: hello })
      try {
        const res = await fetch(r.url, { method: "POST", headers: r.headers, body: r.body })
        const text = await res.text()
        const problem = res.status !== 200 ? `status ${res.status}` : problemOf({ protocol: c.protocol, stream }, text)
        if (problem !== undefined) problems.push(`${stream ? "stream" : "non-stream"}: ${problem}: ${text.slice(0, 300)}`)
      } catch (e) {
        problems.push(`${stream ? "stream" : "non-stream"}: ${e instanceof Error ? e.message : String(e)}`)
      }
    }
    if (problems.length === 0) contestants.push(c)
    else if (c.role === "direct" || c.role === "passthrough") throw new Error(`${c.name} fails its sanity request: ${problems.join("; ")}`)
    else {
      note(`${c.name} NOT MEASURED: sanity request failed: ${problems.join("; ")}`)
      await c.server.stop()
    }
  }
  log(`contestants: ${contestants.map((c) => `${c.name} (pid ${c.server.pid})`).join(", ")}`)

  /**
   * After a job with many connections a saturated contestant may still be working through its
   * backlog (calling the upstream for clients that are gone): wait until the upstream's request
   * count stops moving, so that work does not land in the next contestant's measurement.
   */
  let lateWork = 0
  const settle = async () => {
    const deadline = Date.now() + 15_000
    let seen = -1
    let since = Date.now()
    while (Date.now() < deadline) {
      const n = (await upstreamCall("GET", "stats")).requests
      if (n !== seen) {
        if (seen >= 0) lateWork += n - seen
        seen = n
        since = Date.now()
      } else if (Date.now() - since >= 150) return
      await sleep(25)
    }
    note("a contestant was still calling the upstream 15 s after a job ended")
  }
  /** every job's errors, with the first problem seen, per contestant */
  const errorsOf = new Map<string, number>()
  const problems: Array<string> = []
  const account = (c: Contestant, what: string, r: LoadResult) => {
    errorsOf.set(c.name, (errorsOf.get(c.name) ?? 0) + r.errors)
    if (r.errors > 0) {
      const line = `${c.name}, ${what}: ${r.errors} errors (non-2xx ${r.non2xx}, cut/wrong bodies ${r.mismatches}, socket ${r.socketErrors}, timeouts ${r.timeouts}, lost ${r.lost})${r.firstProblem !== undefined ? `; first: ${r.firstProblem.slice(0, 240)}` : ""}`
      problems.push(line)
      log(`ERRORS: ${line}`)
    }
  }
  /** a contestant whose process has exited: noted once, its jobs skipped */
  const gone = new Set<string>()
  const exited = (c: Contestant, what: string) => {
    const child = c.server.child
    if (child.exitCode === null && child.signalCode === null) return false
    if (!gone.has(c.name)) {
      gone.add(c.name)
      const line = `${c.name} exited (${child.exitCode ?? child.signalCode}) before ${what}; its remaining jobs are skipped. Its output ends: ${c.server.output().slice(-600)}`
      problems.push(line)
      errorsOf.set(c.name, (errorsOf.get(c.name) ?? 0) + 1)
      log(`ERRORS: ${line}`)
    }
    return true
  }
  const nothing: LoadResult = { ok: 0, sent: 0, non2xx: 0, mismatches: 0, socketErrors: 0, timeouts: 0, lost: 0, errors: 0, perSecond: Number.NaN, p50: Number.NaN, p99: Number.NaN, mean: Number.NaN, seconds: 0, statusCodes: {} }
  const run = async (c: Contestant, what: string, o: { readonly stream: boolean; readonly connections: number; readonly seconds?: number; readonly amount?: number; readonly messages?: ReadonlyArray<Message>; readonly previousResponseId?: string }) => {
    if (exited(c, what)) return nothing
    const r = requestOf(c, { stream: o.stream, messages: o.messages ?? hello, ...(o.previousResponseId !== undefined ? { previousResponseId: o.previousResponseId } : {}) })
    const result = await gen.load({
      url: r.url,
      method: "POST",
      headers: r.headers,
      body: r.body,
      connections: o.connections,
      ...(o.amount !== undefined ? { amount: o.amount } : { seconds: o.seconds ?? settings.seconds }),
      check: { protocol: c.protocol, stream: o.stream }
    })
    account(c, what, result)
    if (o.connections > 1) await settle()
    return result
  }

  // --- main scenarios: c=1 latency, c=64 throughput, c=64 whole streams ------------------------
  const scenarios = [
    { key: "c1", label: "non-stream, 1 connection", stream: false, connections: 1 },
    { key: "c64", label: "non-stream, 64 connections", stream: false, connections: 64 },
    { key: "s64", label: "stream, 64 connections", stream: true, connections: 64 }
  ] as const
  type Key = (typeof scenarios)[number]["key"]
  const main: Record<Key, Record<string, Array<LoadResult>>> = { c1: {}, c64: {}, s64: {} }
  for (const c of contestants) {
    log(`warm-up ${c.name}`)
    await run(c, "warm-up", { stream: false, connections: 64, seconds: settings.warmSeconds })
    await run(c, "warm-up", { stream: true, connections: 64, seconds: settings.warmSeconds })
  }
  // CPU and heap allocation per request around each 64-connection job (bench/costs.ts)
  const costs = costRecorder(async () => (await upstreamCall("GET", "stats")).requests)
  for (const s of scenarios) {
    for (let round = 0; round < settings.rounds; round++) {
      for (const c of rotate(contestants, round)) {
        const job = () => run(c, `${s.label}, round ${round + 1}`, { stream: s.stream, connections: s.connections })
        const r = s.key === "c1" ? await job() : await costs.around(s.key, { name: c.name, pid: c.server.pid, ...(c.meterSocket !== undefined ? { meterSocket: c.meterSocket } : {}) }, job)
        ;(main[s.key][c.name] ??= []).push(r)
        const cost = s.key === "c1" ? undefined : costs.samples[s.key][c.name]?.at(-1)
        log(
          `${s.key} round ${round + 1}/${settings.rounds} ${c.name.padEnd(24)} ${fmt(r.perSecond).padStart(6)}/s  p50 ${fmt3(r.p50)} ms  p99 ${fmt3(r.p99)} ms  errors ${r.errors}` +
            (cost !== undefined ? `  CPU ${fmt(cost.cpuUsPerCall ?? Number.NaN)} µs/req  alloc ${fmt3(cost.allocKbPerCall ?? Number.NaN)} KB/req (${cost.heap?.gcs ?? "-"} GCs)` : "")
        )
      }
    }
  }
  costs.close()
  const med = (key: Key, name: string, pick: (r: LoadResult) => number) => median((main[key][name] ?? []).map(pick))
  const rssAfter = new Map<string, number | undefined>(contestants.map((c) => [c.name, rssOf(c.server.pid)]))
  const loaderRss = rssOf(gen.pid)

  // --- growth ------------------------------------------------------------------------------------
  // Each point is a 1-connection job whose requests alternate a baseline (the tiny request, 1
  // message, a 1-turn chain) with the request under test, so drift of this noisy machine cancels
  // out of their difference; the cost per unit is (p50 under test - p50 of the baseline) / units more.
  interface Point {
    readonly base: number
    readonly test: number
  }
  const growthContestants = contestants.filter((c) => !(c.role === "gateway" && c.store === true))
  const forwarded: Array<string> = []
  /** after a c=1 job the upstream's last request is the job's: did the contestant forward it whole? */
  const checkForwarded = async (c: Contestant, what: string, expect: { readonly messages: number; readonly contentChars?: number }) => {
    const last = (await upstreamCall("GET", "stats")).last
    if (last.messages !== expect.messages || (expect.contentChars !== undefined && last.contentChars !== expect.contentChars)) {
      const line = `${c.name}, ${what}: the upstream got ${last.messages} messages / ${last.contentChars} characters, expected ${expect.messages} / ${expect.contentChars ?? "any"}`
      forwarded.push(line)
      log(`FORWARDING: ${line}`)
    }
  }
  interface Side {
    readonly messages: ReadonlyArray<Message>
    readonly previousResponseId?: string
    /** Responses: the measured requests are never stored (a stored one would evict the chains) */
    readonly store?: false
  }
  const pair = async (c: Contestant, what: string, base: Side, test: Side, pairs: number): Promise<Point> => {
    if (exited(c, what)) return { base: Number.NaN, test: Number.NaN }
    const b = requestOf(c, { stream: false, ...base })
    const t = requestOf(c, { stream: false, ...test })
    const r = await gen.load({ url: t.url, method: "POST", headers: t.headers, bodies: [b.body, t.body], connections: 1, amount: 2 * pairs, check: { protocol: c.protocol, stream: false } })
    account(c, what, r)
    const point = { base: r.perBody?.[0]?.p50 ?? Number.NaN, test: r.perBody?.[1]?.p50 ?? Number.NaN }
    log(`${what.padEnd(22)} ${c.name.padEnd(24)} p50 ${fmt3(point.test)} ms (baseline ${fmt3(point.base)} ms)  errors ${r.errors}`)
    return point
  }
  type Series = Record<string, Array<Array<Point>>>
  const push = (series: Series, name: string, i: number, p: Point) => ((series[name] ??= [])[i] ??= []).push(p)

  // --- body size: one user message of 10 KB, 1 MB, 16 MB against the tiny request -------------------
  const bodySizes = [
    { label: "10 KB", chars: 10 * KiB },
    { label: "1 MB", chars: MiB },
    { label: "16 MB", chars: 16 * MiB }
  ]
  const bodyMessages = bodySizes.map((s): ReadonlyArray<Message> => [{ role: "user", text: filler(s.chars) }])
  const bodies: Series = {}
  /** request bytes per contestant: [tiny, 10 KB, 1 MB, 16 MB] */
  const bodyBytes: Record<string, Array<number>> = {}
  for (const c of growthContestants) bodyBytes[c.name] = [hello, ...bodyMessages].map((messages) => Buffer.byteLength(requestOf(c, { stream: false, messages }).body))
  // first touches of big buffers (heap growth, page faults) are not the steady cost per byte: warm up
  for (const c of growthContestants) {
    for (const [i, size] of bodySizes.entries()) await pair(c, `warm-up body ${size.label}`, { messages: hello }, { messages: bodyMessages[i] }, i === 2 ? 1 : 3)
    await pair(c, "warm-up conversation", { messages: conversation(1) }, { messages: conversation(1000) }, 3)
  }
  for (let round = 0; round < settings.growthRounds; round++) {
    for (const c of rotate(growthContestants, round)) {
      for (const [i, size] of bodySizes.entries()) {
        push(bodies, c.name, i, await pair(c, `body ${size.label}`, { messages: hello }, { messages: bodyMessages[i] }, settings.bodyPairs[i]))
        if (round === 0) await checkForwarded(c, `body ${size.label}`, { messages: 1, contentChars: size.chars })
      }
    }
  }

  // --- conversation length: 10, 100, 1000 messages against 1 ------------------------------------------
  const lengths = [10, 100, 1000]
  const one = conversation(1)
  const conversations: Series = {}
  for (let round = 0; round < settings.growthRounds; round++) {
    for (const c of rotate(growthContestants, round)) {
      for (const [i, n] of lengths.entries()) {
        const messages = conversation(n)
        push(conversations, c.name, i, await pair(c, `conversation of ${n}`, { messages: one }, { messages }, settings.conversationPairs[i]))
        if (round === 0) await checkForwarded(c, `conversation of ${n}`, { messages: n, contentChars: messages.reduce((a, m) => a + m.text.length, 0) })
      }
    }
  }

  // --- Responses chains 10 and 100 turns deep against 1 (stored by the store: true gateway) ----------
  const depths = [10, 100]
  const chainer = contestants.find((c) => c.role === "gateway" && c.store === true)
  const chains: Series = {}
  if (chainer !== undefined) {
    const tails: Array<string> = []
    for (const depth of [1, ...depths]) {
      let previous: string | undefined
      for (let turn = 0; turn < depth; turn++) {
        const r = requestOf(chainer, { stream: false, store: true, messages: [{ role: "user", text: `turn ${turn} of ${depth}: what comes next?` }], ...(previous !== undefined ? { previousResponseId: previous } : {}) })
        const res = await fetch(r.url, { method: "POST", headers: r.headers, body: r.body })
        const answer = (await res.json()) as { id?: unknown }
        if (res.status !== 200 || typeof answer.id !== "string") throw new Error(`building a ${depth}-turn chain: ${res.status} ${JSON.stringify(answer).slice(0, 200)}`)
        previous = answer.id
      }
      tails.push(previous!)
    }
    const next: ReadonlyArray<Message> = [{ role: "user", text: "and now?" }]
    for (let round = 0; round < settings.growthRounds; round++) {
      for (const [i, depth] of depths.entries()) {
        push(
          chains,
          chainer.name,
          i,
          await pair(chainer, `chain of ${depth}`, { messages: next, previousResponseId: tails[0], store: false }, { messages: next, previousResponseId: tails[i + 1], store: false }, settings.chainPairs)
        )
        // the history: each earlier turn is a user and an assistant message, then the new input
        if (round === 0) await checkForwarded(chainer, `chain of ${depth}`, { messages: 2 * depth + 1 })
      }
    }
  } else note("no gateway with store: true: the Responses chains are not measured")

  // --- held-open slow streams, each contestant in a fresh process --------------------------------------
  interface Held {
    readonly before: number | undefined
    readonly during: number | undefined
    /** the highest RSS read from then until `holdSeconds` later, the streams still held */
    readonly peak: number | undefined
    readonly open: HoldOpen
    readonly upstreamHeld: number
    readonly result: HoldResult
    readonly perStream: number | undefined
    /** (peak - before) per stream */
    readonly peakPerStream: number | undefined
  }
  const held = new Map<string, Held>()
  const holdable = contestants.filter((c) => !(c.role === "gateway" && c.store === true) && (settings.holdContestants === undefined || settings.holdContestants.includes(c.name)))
  // a fresh upstream too, so direct's row (the upstream's own memory per stream) starts from a warm, not a bloated, heap
  if (holdable.length > 0) {
    active = await startBenchServer("upstream (held streams)", "upstream")
    servers.push(active)
  }
  for (const c of holdable) {
    let fresh: Contestant
    try {
      fresh =
        c.role === "direct"
          ? { ...c, server: active }
          : c.role === "passthrough"
            ? await makePassthrough()
            : c.role === "floor"
              ? await makeFloor()
              : c.role === "peer"
                ? await makePeer()
                : await makeGateway(gatewayVariants.find((v) => v.name === c.name)!)
    } catch (e) {
      note(`${c.name}: held-open streams NOT MEASURED: a fresh process did not start: ${e instanceof Error ? e.message : String(e)}`)
      continue
    }
    try {
      await run(fresh, "held streams warm-up", { stream: true, connections: 16, seconds: settings.warmSeconds })
      await sleep(500)
      const before = await sampleRss(fresh.server.pid)
      await upstreamCall("POST", "hold")
      const r = requestOf(fresh, { stream: true, messages: hello, hold: true })
      let during: number | undefined
      let peak: number | undefined
      let upstreamHeld = 0
      const { open, result } = await gen.hold(
        { url: r.url, headers: r.headers, body: r.body, count: settings.holdCount, openTimeoutMs: 30_000, stallMs: 2000, check: { protocol: fresh.protocol, stream: true, held: true } },
        async () => {
          await sleep(1000)
          during = await sampleRss(fresh.server.pid)
          upstreamHeld = (await upstreamCall("GET", "stats")).held
          peak = during
          for (let t = 0; t < settings.holdSeconds * 4; t++) {
            await sleep(250)
            const v = rssOf(fresh.server.pid)
            if (v !== undefined && (peak === undefined || v > peak)) peak = v
          }
          await upstreamCall("POST", "release")
        }
      )
      await upstreamCall("POST", "hold")
      const perStream = before !== undefined && during !== undefined && open.open > 0 ? (during - before) / open.open : undefined
      const peakPerStream = before !== undefined && peak !== undefined && open.open > 0 ? (peak - before) / open.open : undefined
      held.set(c.name, { before, during, peak, open, upstreamHeld, result, perStream, peakPerStream })
      log(
        `held streams ${c.name.padEnd(24)} ${open.open}/${settings.holdCount} streaming to the client (upstream held ${upstreamHeld}); RSS ${fmt((before ?? 0) / MiB, 1)} -> ${fmt((during ?? 0) / MiB, 1)} MiB = ${fmt3((perStream ?? Number.NaN) / KiB)} KB/stream, peak ${fmt((peak ?? 0) / MiB, 1)} MiB over ${settings.holdSeconds} s more; whole at the end ${result.whole}, bad ${result.bad}`
      )
      if (open.open < settings.holdCount) note(`${c.name}: only ${open.open} of ${settings.holdCount} held streams had started streaming (${upstreamHeld} were held at the upstream; the rest waited inside the contestant); memory per stream is divided by ${open.open}`)
      if (result.bad > 0) {
        const line = `${c.name}, held streams: ${result.bad} of ${settings.holdCount} did not end whole${result.firstProblem !== undefined ? `; first: ${result.firstProblem.slice(0, 240)}` : ""}`
        problems.push(line)
        errorsOf.set(c.name, (errorsOf.get(c.name) ?? 0) + result.bad)
      }
    } finally {
      if (fresh.role !== "direct") await fresh.server.stop()
    }
  }

  const rssEnd = new Map<string, number | undefined>(contestants.map((c) => [c.name, rssOf(c.server.pid)]))
  for (const s of servers) await s.stop()

  // =====================================================================================================
  // report
  // =====================================================================================================
  const names = contestants.map((c) => c.name)
  const byName = new Map(contestants.map((c) => [c.name, c]))
  const directC1 = { p50: med("c1", "direct", (r) => r.p50), p99: med("c1", "direct", (r) => r.p99) }
  const added = (name: string) => ({ p50: med("c1", name, (r) => r.p50) - directC1.p50, p99: med("c1", name, (r) => r.p99) - directC1.p99 })

  const out: Array<string> = []
  const cpus = os.cpus()
  out.push(
    `comparison${settings.quick ? " (quick)" : ""}: median of ${settings.rounds} round(s) of ${settings.seconds} s per scenario, contestants interleaved, ${settings.warmSeconds} s warm-up; ` +
      `node ${process.version}, ${cpus.length} CPU(s), load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`
  )
  out.push("")
  out.push(
    table(
      ["contestant", "c=1 p50 ms", "p99 ms", "+p50 ms", "+p99 ms", "req/s @64", "p50 ms @64", "streams/s @64", "CPU µs/req", "CPU µs/stream", "alloc KB/req", "alloc KB/stream", "RSS MiB", "RSS end MiB", "KB/held stream", "errors"],
      names.map((n) => {
        const a = added(n)
        const h = held.get(n)
        return [
          n === "direct" ? "direct (the upstream)" : n,
          fmt3(med("c1", n, (r) => r.p50)),
          fmt3(med("c1", n, (r) => r.p99)),
          n === "direct" ? "" : fmt3(a.p50),
          n === "direct" ? "" : fmt3(a.p99),
          fmt(med("c64", n, (r) => r.perSecond)),
          fmt3(med("c64", n, (r) => r.p50)),
          fmt(med("s64", n, (r) => r.perSecond)),
          fmt(costs.cpuUs("c64", n)),
          fmt(costs.cpuUs("s64", n)),
          fmt3(costs.allocKb("c64", n)),
          fmt3(costs.allocKb("s64", n)),
          fmt((rssAfter.get(n) ?? Number.NaN) / MiB, 1),
          fmt((rssEnd.get(n) ?? Number.NaN) / MiB, 1),
          h === undefined ? "" : fmt3((h.perStream ?? Number.NaN) / KiB),
          String(errorsOf.get(n) ?? 0)
        ]
      })
    )
  )
  out.push("")
  out.push("+p50/+p99: added latency over direct at 1 connection. RSS: VmRSS after the three scenarios above (direct: the upstream, which served every contestant); RSS end: after the growth scenarios too (16 MB bodies grow heaps).")
  out.push(
    "CPU µs/req, µs/stream: the process's CPU time (/proc) over each @64 job, per upstream call it made (direct: the upstream's own); alloc KB/req, KB/stream: bytes allocated on its V8 heap over the same window (a preload, bench/heapmeter.ts), per call; medians over the rounds."
  )
  out.push(`KB/held stream: RSS rise of a fresh process 1 s after ${settings.holdCount} slow streams are open, per stream streaming to the client. Errors: non-2xx, cut or wrong bodies, socket errors, timeouts, lost requests, over every job.`)

  // --- the targets of issue 24: CPU and allocation per request, RSS, added latency --------------------
  const figures: Array<ContestantFigures> = names
    .filter((n) => n !== "direct")
    .map((n) => ({
      name: n,
      role: byName.get(n)!.role,
      cpuUs: { c64: costs.cpuUs("c64", n), s64: costs.cpuUs("s64", n) },
      allocKb: { c64: costs.allocKb("c64", n), s64: costs.allocKb("s64", n) },
      rssBytes: rssAfter.get(n) ?? Number.NaN,
      addedP50Ms: added(n).p50
    }))
  const issue24 = issueTargets(
    figures,
    ["gateway chat", FLAGS_VARIANT].filter((n) => names.includes(n))
  )
  out.push("")
  out.push(issue24.text)
  if (settings.gatewayNodeFlags !== undefined && names.includes(FLAGS_VARIANT)) out.push(`${FLAGS_VARIANT}: the chat-completions gateway run as node ${settings.gatewayNodeFlags.join(" ")} dist/main.js, measured in the same rounds as the others.`)
  if (costs.statFallbacks() > 0) out.push(`note: ${costs.statFallbacks()} CPU window(s) lost a thread on the way and were read from utime + stime (clock ticks) instead of schedstat`)

  // --- targets ---------------------------------------------------------------------------------------
  interface Check {
    readonly target: string
    readonly value: (name: string) => number | undefined
    readonly met: (v: number) => boolean
    readonly show: (v: number) => string
    readonly only?: (c: Contestant) => boolean
  }
  const pass = "passthrough"
  const ratioTo = (key: Key, name: string, pick: (r: LoadResult) => number) => med(key, name, pick) / med(key, pass, pick)
  /** per point: median over rounds of the baseline p50, of the p50 under test, and of the cost per unit more */
  const summarize = (series: Series, name: string, units: (i: number) => number, baseUnits: number) =>
    (series[name] ?? []).map((points, i) => ({
      base: median(points.map((p) => p.base)),
      test: median(points.map((p) => p.test)),
      perUnit: median(points.map((p) => (p.test - p.base) / (units(i) - baseUnits))),
      ratio: median(points.map((p) => p.test / p.base))
    }))
  const bodyUnits = (name: string) => (i: number) => (bodyBytes[name]?.[i + 1] ?? Number.NaN) / KiB
  const bodySummary = (name: string) => summarize(bodies, name, bodyUnits(name), (bodyBytes[name]?.[0] ?? Number.NaN) / KiB)
  /**
   * A contestant's own cost per KB at 10 KB, 1 MB and 16 MB: its cost per KB less direct's (the
   * upstream and the load generator handle every byte too, and on this kind of machine their cost
   * per byte is not flat itself: large buffers miss the caches).
   */
  const ownPerKb = (name: string) => {
    const floor = bodySummary("direct")
    return bodySummary(name).map((p, i) => p.perUnit - (floor[i]?.perUnit ?? Number.NaN))
  }
  /** the largest cost per KB over the smallest */
  const spread = (per: ReadonlyArray<number>) => {
    if (per.length === 0 || per.some((m) => Number.isNaN(m))) return undefined
    if (per.some((m) => !(m > 0))) return Number.POSITIVE_INFINITY
    return Math.max(...per) / Math.min(...per)
  }
  const flatness = (name: string) => spread(ownPerKb(name))
  const rawFlatness = (name: string) => spread(bodySummary(name).map((p) => p.perUnit))
  const chainSummary = chainer !== undefined ? summarize(chains, chainer.name, (i) => depths[i], 1) : []
  const chainRatio = chainSummary[1]?.ratio ?? Number.NaN
  const checks: ReadonlyArray<Check> = [
    { target: "non-stream req/s @64 >= 0.5x", value: (n) => ratioTo("c64", n, (r) => r.perSecond), met: (v) => v >= 0.5, show: (v) => `${v.toFixed(2)}x` },
    { target: "added p50 @c=1 <= 2x the passthrough's", value: (n) => added(n).p50 / added(pass).p50, met: (v) => v <= 2, show: (v) => `${v.toFixed(2)}x` },
    { target: "whole streams/s @64 >= 0.5x", value: (n) => ratioTo("s64", n, (r) => r.perSecond), met: (v) => v >= 0.5, show: (v) => `${v.toFixed(2)}x` },
    { target: "RSS after the run <= 1.5x", value: (n) => (rssAfter.get(n) ?? Number.NaN) / (rssAfter.get(pass) ?? Number.NaN), met: (v) => v <= 1.5, show: (v) => `${v.toFixed(2)}x` },
    { target: "memory per held-open stream < 100 KB", value: (n) => (held.get(n)?.perStream ?? Number.NaN) / KiB, met: (v) => v < 100, show: (v) => `${v.toFixed(1)} KB` },
    {
      target: "own cost per body byte flat 10 KB..16 MB (max/min <= 2)",
      value: (n) => flatness(n),
      met: (v) => v <= 2,
      show: (v) => (Number.isFinite(v) ? `${v.toFixed(2)}x` : "<=0 (noise)")
    },
    { target: "100-turn chain <= 2x a 1-turn chain", value: () => chainRatio, met: (v) => v <= 2, show: (v) => `${v.toFixed(2)}x`, only: (c) => c.role === "gateway" && c.store === true }
  ]
  const gatewayNames = names.filter((n) => byName.get(n)?.role === "gateway")
  const peer = names.find((n) => byName.get(n)?.role === "peer")
  const targetResults: Array<{ target: string; contestant: string; value: number | null; met: boolean | null }> = []
  out.push("")
  out.push("targets: the gateway over the bare passthrough, same run (met / MISSED); the peer's ratio for comparison, no target")
  out.push("")
  out.push(
    table(
      ["target", ...gatewayNames.map((n) => n.replace(/^gateway /, "")), ...(peer !== undefined ? [`${peer} (info)`] : [])],
      checks.map((ch) => [
        ch.target,
        ...gatewayNames.map((n) => {
          const c = byName.get(n)!
          if (ch.only !== undefined && !ch.only(c)) return ""
          const v = ch.value(n)
          if (v === undefined || Number.isNaN(v)) {
            targetResults.push({ target: ch.target, contestant: n, value: null, met: null })
            return "n/a"
          }
          const met = ch.met(v)
          targetResults.push({ target: ch.target, contestant: n, value: Number.isFinite(v) ? v : null, met })
          return `${ch.show(v)} ${met ? "met" : "MISSED"}`
        }),
        ...(peer !== undefined
          ? [
              (() => {
                if (ch.only !== undefined) return ""
                const v = ch.value(peer)
                return v === undefined || Number.isNaN(v) ? "n/a" : ch.show(v)
              })()
            ]
          : [])
      ])
    )
  )
  out.push("")
  out.push(
    "store: the responses store column stores every answer (store: true: a SQLite row holding the record, group-committed with one WAL fsync per group); it is left out of the growth and held-stream scenarios, and carries the chain target."
  )
  out.push(
    "own cost per body byte: (p50 at a size - p50 of the tiny request alternated with it) / KB more, less the same for direct, at 10 KB, 1 MB and 16 MB; the target is the largest over the smallest " +
      `(for reference: the passthrough's ${fmt(flatness(pass), 2)}x; without taking direct's off, direct ${fmt(rawFlatness("direct"), 2)}x, passthrough ${fmt(rawFlatness(pass), 2)}x).`
  )

  // --- growth tables ---------------------------------------------------------------------------------
  const growthTable = (
    title: string,
    baseLabel: string,
    labels: ReadonlyArray<string>,
    rows: ReadonlyArray<readonly [string, ReturnType<typeof summarize>]>,
    unit: string,
    scale: number,
    extra?: { readonly head: ReadonlyArray<string>; readonly cells: (name: string) => ReadonlyArray<string> }
  ) => {
    out.push("")
    out.push(title)
    out.push("")
    out.push(
      table(
        ["contestant", `${baseLabel} ms`, ...labels.map((l) => `${l} ms (${unit})`), ...(extra?.head ?? [])],
        // the baseline column: from the first (smallest) point, whose baseline requests follow small ones
        rows.map(([name, points]) => [name, fmt3(points[0]?.base), ...points.map((p) => `${fmt3(p.test)} (${fmt3(p.perUnit * scale)})`), ...(extra?.cells(name) ?? [])])
      )
    )
  }
  growthTable(
    "request body size: p50 ms at 1 connection; in brackets µs per KB of body more than the tiny request (flat = linear); own: the same less direct's",
    "tiny",
    bodySizes.map((s) => s.label),
    growthContestants.filter((c) => bodies[c.name] !== undefined).map((c) => [c.name, bodySummary(c.name)] as const),
    "µs/KB",
    1000,
    {
      head: ["own µs/KB 10 KB / 1 MB / 16 MB", "own max/min"],
      cells: (name) =>
        name === "direct"
          ? ["", ""]
          : [
              ownPerKb(name)
                .map((v) => fmt3(v * 1000))
                .join(" / "),
              (() => {
                const f = flatness(name)
                return f === undefined ? "-" : Number.isFinite(f) ? `${f.toFixed(2)}x` : "<=0 (noise)"
              })()
            ]
    }
  )
  growthTable(
    "conversation length: p50 ms at 1 connection; in brackets µs per message (~100 characters each) more than 1",
    "1 msg",
    lengths.map((n) => `${n} msgs`),
    growthContestants.filter((c) => conversations[c.name] !== undefined).map((c) => [c.name, summarize(conversations, c.name, (i) => lengths[i], 1)] as const),
    "µs/msg",
    1000
  )
  if (chainer !== undefined) {
    growthTable(
      "Responses chains (previous_response_id; the measured request has store: false): p50 ms at 1 connection; in brackets µs per turn more than 1",
      "1 turn",
      depths.map((d) => `${d} turns`),
      [[chainer.name, chainSummary] as const],
      "µs/turn",
      1000
    )
    out.push(`100-turn / 1-turn p50: ${fmt(chainRatio, 2)}x`)
  }
  if (held.size > 0) {
    out.push("")
    out.push(
      `held-open streams: ${settings.holdCount} slow streams (the upstream sends a chunk every 500 ms until released), each contestant in a fresh process; ` +
        `RSS before, 1 s after they are open (KB/stream: the rise per stream, the target) and its peak over ${settings.holdSeconds} s more, read every 250 ms (peak KB/stream)`
    )
    out.push("")
    out.push(
      table(
        ["contestant", "streaming", "held upstream", "RSS before MiB", "RSS open MiB", "KB/stream", `peak +${settings.holdSeconds} s MiB`, "peak KB/stream", "whole at end", "bad"],
        [...held.entries()].map(([n, h]) => [
          n === "direct" ? "direct (the upstream)" : n,
          String(h.open.open),
          String(h.upstreamHeld),
          fmt((h.before ?? Number.NaN) / MiB, 1),
          fmt((h.during ?? Number.NaN) / MiB, 1),
          fmt3((h.perStream ?? Number.NaN) / KiB),
          fmt((h.peak ?? Number.NaN) / MiB, 1),
          fmt3((h.peakPerStream ?? Number.NaN) / KiB),
          String(h.result.whole),
          String(h.result.bad)
        ])
      )
    )
  }
  if (peerNote !== undefined) notes.unshift(`peer: ${peerNote}`)
  const warnings = [...problems, ...forwarded]
  if (warnings.length > 0) {
    out.push("")
    out.push(`WARNINGS (${warnings.length}): figures of a job with errors are not to be trusted`)
    for (const w of warnings.slice(0, 20)) out.push(`  - ${w}`)
    if (warnings.length > 20) out.push(`  ... and ${warnings.length - 20} more (all in the JSON)`)
  }
  if (notes.length > 0) {
    out.push("")
    for (const n of notes) out.push(`note: ${n}`)
  }
  if (lateWork > 0) out.push(`note: ${lateWork} upstream calls arrived after the end of a job (backlog of a saturated contestant; waited for before the next job)`)
  if (loaderRss !== undefined) out.push(`note: the load generator (pid ${gen.pid}) had ${fmt(loaderRss / MiB, 1)} MiB RSS after the main scenarios`)
  out.push(`comparison took ${((Date.now() - started) / 1000).toFixed(0)} s`)

  const summary = Object.fromEntries(
    names.map((n) => [
      n,
      {
        c1: { p50: med("c1", n, (r) => r.p50), p99: med("c1", n, (r) => r.p99), addedP50: n === "direct" ? null : added(n).p50, addedP99: n === "direct" ? null : added(n).p99 },
        c64: { perSecond: med("c64", n, (r) => r.perSecond), p50: med("c64", n, (r) => r.p50), p99: med("c64", n, (r) => r.p99) },
        s64: { perSecond: med("s64", n, (r) => r.perSecond), p50: med("s64", n, (r) => r.p50), p99: med("s64", n, (r) => r.p99) },
        cpuUsPerRequest: { c64: nullIfNaN(costs.cpuUs("c64", n)), s64: nullIfNaN(costs.cpuUs("s64", n)) },
        allocKbPerRequest: { c64: nullIfNaN(costs.allocKb("c64", n)), s64: nullIfNaN(costs.allocKb("s64", n)) },
        gcMsPer1000Requests: { c64: nullIfNaN(costs.gcMsPerK("c64", n)), s64: nullIfNaN(costs.gcMsPerK("s64", n)) },
        rssAfterBytes: rssAfter.get(n) ?? null,
        rssEndBytes: rssEnd.get(n) ?? null,
        errors: errorsOf.get(n) ?? 0
      }
    ])
  )
  return {
    text: out.join("\n"),
    json: {
      settings,
      environment: { node: process.version, cpus: cpus.length, cpuModel: cpus[0]?.model.trim() ?? null, loadavgAtEnd: os.loadavg(), platform: `${os.platform()} ${os.release()}` },
      contestants: contestants.map((c) => ({ name: c.name, role: c.role, protocol: c.protocol, store: c.store ?? null, model: c.model, pid: c.server.pid })),
      summary,
      targets: targetResults,
      issue24Targets: issue24.results,
      gatewayNodeFlags: settings.gatewayNodeFlags ?? null,
      costs: {
        note: "per 64-connection job of the main scenarios: upstream calls in the window, answers, CPU µs of the contestant's process (schedstat summed over threads, or utime+stime) and its V8 heap window (bench/heapmeter.ts); one sample per round",
        samples: costs.samples
      },
      main,
      growth: {
        note: "each point: p50 ms of the baseline (tiny request / 1 message / 1-turn chain) and of the request under test, alternated in one job; one point per round",
        bodies: { sizes: bodySizes.map((s) => s.label), requestBytes: bodyBytes, points: bodies, ownFlatness: Object.fromEntries(growthContestants.map((c) => [c.name, flatness(c.name) ?? null])), rawFlatness: Object.fromEntries(growthContestants.map((c) => [c.name, rawFlatness(c.name) ?? null])) },
        conversations: { lengths, points: conversations },
        chains: { depths, contestant: chainer?.name ?? null, points: chains, ratio100to1: chainRatio },
        held: Object.fromEntries(held)
      },
      warnings,
      notes,
      seconds: (Date.now() - started) / 1000
    }
  }
}
