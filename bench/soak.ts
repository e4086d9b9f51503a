/**
 * The soak of `npm run bench -- --soak` (issue 9): mixed traffic on every protocol for 10 minutes
 * (`--soak-seconds N` for another length) against one gateway process whose upstream injects faults
 * at a known rate; every answer is checked; reports error rates (expected: an injected fault answered
 * as the protocol's error; unexpected: anything else), p50/p99, the gateway's RSS and open file
 * descriptors at the start (after a warm-up, idle) and at the end (after the load, idle). See
 * bench/README.md ("Soak").
 *
 * One file, three roles (the environment variable SOAK_ROLE picks one):
 * - the orchestrator (`runSoak`, imported by bench/run.ts): starts the others and the gateway,
 *   measures, prints;
 * - `upstream`: a chat-completions upstream whose model name picks the fault (below);
 * - `client`: the load generator, in its own process: workers that send the mix, each answer read
 *   whole and classified.
 * The two child roles run from bench/.build/soak.js (transpiled here, like bench/procs.ts does for
 * the comparison's children), with plain node. Only node builtins and ./protocols.js are imported at
 * the top: the orchestrator loads ./procs.js itself when it runs.
 */
import { fork, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { buildRequest, CHUNK_TEXTS, COMPLETION_TEXT, parseSse, problemOf, type Protocol } from "./protocols.js"

// ---------------------------------------------------------------------------------------------
// the mix
// ---------------------------------------------------------------------------------------------

/**
 * The upstream's behaviour per model name (after the `up/` provider prefix):
 * - `soak-ok`: the comparison's answer (COMPLETION_TEXT, or 20 chunks then `[DONE]`)
 * - `soak-500`: 500 with an OpenAI error body
 * - `soak-429`: 429 with `Retry-After: 1`
 * - `soak-reset`: non-stream: the socket destroyed before any answer; stream: 3 chunks, then the
 *   socket destroyed
 * - `soak-malformed`: non-stream: a 200 whose JSON is cut; stream: 3 chunks, a chunk that is not
 *   JSON, then the rest
 * - `soak-stall`: non-stream: no answer; stream: 3 chunks then silence — until the gateway gives
 *   up at its `requestTimeoutMs` and closes the connection
 * - `soak-slow`: a whole stream, one chunk every SLOW_TICK_MS (the client disconnects mid-way)
 */
export type Fault = "ok" | "500" | "429" | "reset" | "malformed" | "stall"
const FAULTS: ReadonlyArray<readonly [Fault, number]> = [
  ["ok", 0.835],
  ["500", 0.04],
  ["429", 0.04],
  ["reset", 0.04],
  ["malformed", 0.04],
  ["stall", 0.005]
]
const SLOW_TICK_MS = 50
/** the gateway's requestTimeoutMs: a stalled upstream call ends here */
const REQUEST_TIMEOUT_MS = 2000
/** the client gives up on an answer after this long (then it is an unexpected error) */
const CLIENT_TIMEOUT_MS = 30_000
/**
 * Uploads in flight at once. An app's saves run one at a time with at most 8 waiting; past that the
 * gateway answers 429 file_saves_busy by design (section 8), so the mix stays below it and any 429
 * on an upload is unexpected.
 */
const MAX_UPLOADS = 4

interface ModelRow {
  readonly kind: "model"
  readonly name: string
  readonly protocol: Protocol
  readonly stream: boolean
  readonly store?: boolean
}
type Row = ModelRow | { readonly kind: "disconnect"; readonly name: string } | { readonly kind: "files"; readonly name: string }

const modelRows: ReadonlyArray<ModelRow> = [
  { kind: "model", name: "chat", protocol: "chat", stream: false },
  { kind: "model", name: "chat stream", protocol: "chat", stream: true },
  { kind: "model", name: "responses", protocol: "responses", stream: false, store: false },
  { kind: "model", name: "responses stream", protocol: "responses", stream: true, store: false },
  { kind: "model", name: "responses store", protocol: "responses", stream: false, store: true },
  { kind: "model", name: "responses store stream", protocol: "responses", stream: true, store: true },
  { kind: "model", name: "messages", protocol: "messages", stream: false },
  { kind: "model", name: "messages stream", protocol: "messages", stream: true },
  { kind: "model", name: "gemini", protocol: "gemini", stream: false },
  { kind: "model", name: "gemini stream", protocol: "gemini", stream: true }
]
/** each model row weight 8 (80 in all), disconnects 5, uploads 3 */
const ROWS: ReadonlyArray<readonly [Row, number]> = [
  ...modelRows.map((r) => [r, 8] as const),
  [{ kind: "disconnect", name: "stream disconnect" }, 5],
  [{ kind: "files", name: "file upload+delete" }, 3]
]
const ROW_NAMES = ROWS.map(([r]) => r.name)

// ---------------------------------------------------------------------------------------------
// role: upstream
// ---------------------------------------------------------------------------------------------

const runUpstream = () => {
  let counter = 0
  const usage = { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18 }
  const stats = { requests: 0, byModel: {} as Record<string, number>, slowStarted: 0, slowFinished: 0, slowAborted: 0, stalledOpen: 0, connections: 0, openConnections: 0 }
  const stalled = new Set<http.ServerResponse>()
  const chunk = (base: { id: string; created: number; model: string }, delta: Record<string, unknown>, finish: string | null, withUsage = false) =>
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(withUsage ? { usage } : {}) })}\n\n`
  const chunks = (model: string) => {
    const base = { id: `chatcmpl-soak${(++counter).toString(36)}`, created: Math.floor(Date.now() / 1000), model }
    const out = [chunk(base, { role: "assistant", content: CHUNK_TEXTS[0] }, null)]
    for (let i = 1; i < CHUNK_TEXTS.length; i++) out.push(chunk(base, { content: CHUNK_TEXTS[i] }, null))
    out.push(chunk(base, {}, "stop", true))
    out.push("data: [DONE]\n\n")
    return out
  }
  const json = (res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...headers })
    res.end(body)
  }
  const sse = { "content-type": "text/event-stream", "cache-control": "no-cache" }
  const answer = (req: http.IncomingMessage, res: http.ServerResponse, model: string, stream: boolean) => {
    const fault = model.slice(model.lastIndexOf("/") + 1).replace(/^soak-/, "")
    switch (fault) {
      case "ok":
        if (!stream) {
          return json(
            res,
            200,
            JSON.stringify({ id: `chatcmpl-soak${(++counter).toString(36)}`, object: "chat.completion", created: Math.floor(Date.now() / 1000), model, choices: [{ index: 0, message: { role: "assistant", content: COMPLETION_TEXT, refusal: null }, logprobs: null, finish_reason: "stop" }], usage })
          )
        }
        res.writeHead(200, sse)
        return res.end(chunks(model).join(""))
      case "500":
        return json(res, 500, `{"error":{"message":"injected server error","type":"server_error","param":null,"code":null}}`)
      case "429":
        return json(res, 429, `{"error":{"message":"injected rate limit","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`, { "retry-after": "1" })
      case "reset":
        if (!stream) return req.socket.destroy()
        res.writeHead(200, sse)
        res.write(chunks(model).slice(0, 3).join(""))
        setTimeout(() => res.socket?.destroy(), 10)
        return
      case "malformed":
        if (!stream) return json(res, 200, `{"id":"chatcmpl-cut","object":"chat.completion","choices":[{"index":0,"message":{"role":"assis`)
        {
          const all = chunks(model)
          res.writeHead(200, sse)
          return res.end([...all.slice(0, 3), `data: {"choices":[{"index":0,"delta":{"content":"oops"\n\n`, ...all.slice(3)].join(""))
        }
      case "stall":
        // held until the gateway closes the connection at its deadline
        stalled.add(res)
        res.on("close", () => stalled.delete(res))
        if (stream) {
          res.writeHead(200, sse)
          res.write(chunks(model).slice(0, 3).join(""))
        }
        return
      case "slow": {
        stats.slowStarted++
        const all = chunks(model)
        res.writeHead(200, sse)
        let i = 0
        const timer = setInterval(() => {
          res.write(all[i++])
          if (i === all.length) {
            clearInterval(timer)
            stats.slowFinished++
            res.end()
          }
        }, SLOW_TICK_MS)
        res.write(all[i++])
        res.on("close", () => {
          if (i < all.length) {
            clearInterval(timer)
            stats.slowAborted++
          }
        })
        return
      }
      default:
        return json(res, 400, `{"error":{"message":"unknown soak model ${model}","type":"invalid_request_error"}}`)
    }
  }
  const server = http.createServer((req, res) => {
    const parts: Array<Buffer> = []
    req.on("data", (c: Buffer) => parts.push(c))
    req.on("end", () => {
      const pathname = (req.url ?? "/").split("?")[0]
      if (req.method === "GET" && pathname === "/soak/stats") return json(res, 200, JSON.stringify({ ...stats, stalledOpen: stalled.size }))
      if (req.method !== "POST" || pathname !== "/v1/chat/completions") return json(res, 404, `{"error":{"message":"not found","type":"invalid_request_error"}}`)
      let body: { model?: unknown; stream?: unknown }
      try {
        body = JSON.parse(Buffer.concat(parts).toString("utf8")) as typeof body
      } catch {
        return json(res, 400, `{"error":{"message":"body is not JSON","type":"invalid_request_error"}}`)
      }
      const model = typeof body.model === "string" ? body.model : ""
      stats.requests++
      stats.byModel[model] = (stats.byModel[model] ?? 0) + 1
      answer(req, res, model, body.stream === true)
    })
  })
  server.on("connection", (socket) => {
    stats.connections++
    stats.openConnections++
    socket.on("close", () => stats.openConnections--)
  })
  // idle keep-alive connections close after 5 s (undici, told `Keep-Alive: timeout=5`, closes its
  // own a little earlier; a hint of 1 s would make it close every connection after one answer): the
  // gateway's pool to this upstream drains when the load stops, so its descriptor count can settle
  server.keepAliveTimeout = 5000
  server.requestTimeout = 0
  server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`))
  const stop = () => {
    server.closeAllConnections()
    server.close(() => process.exit(0))
    setTimeout(() => process.exit(0), 500).unref()
  }
  process.once("SIGTERM", stop)
  process.once("SIGINT", stop)
}

// ---------------------------------------------------------------------------------------------
// role: client (the load generator)
// ---------------------------------------------------------------------------------------------

export interface ClientJob {
  readonly url: string
  readonly seconds: number
  readonly workers: number
  readonly seed: number
}

type Outcome = "ok" | "expected" | "unexpected"

/** what one row (or one row x fault) saw */
export interface Tally {
  requests: number
  ok: number
  expected: number
  unexpected: number
  statuses: Record<string, number>
  /** whole-answer times (ms) of the requests that were meant to succeed and did */
  times: Array<number>
  problems: Record<string, number>
}
const tally = (): Tally => ({ requests: 0, ok: 0, expected: 0, unexpected: 0, statuses: {}, times: [], problems: {} })

export interface ClientReport {
  readonly seconds: number
  readonly rows: Record<string, Tally>
  /** per model row and fault: `<row> | <fault>` */
  readonly faults: Record<string, Tally>
  readonly firstProblems: ReadonlyArray<string>
}

type J = Record<string, unknown>
const obj = (v: unknown): J | undefined => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as J) : undefined)
const parseJ = (s: string): J | undefined => {
  try {
    return obj(JSON.parse(s))
  } catch {
    return undefined
  }
}

/** an error body in the protocol's envelope (section 7), or the reason it is not */
const envelopeProblem = (protocol: Protocol, status: number, body: string): string | undefined => {
  const j = parseJ(body)
  if (j === undefined) return `status ${status}, body not JSON`
  switch (protocol) {
    case "chat":
    case "responses": {
      const e = obj(j.error)
      return typeof e?.message === "string" && typeof e.type === "string" ? undefined : `status ${status} without the OpenAI error envelope`
    }
    case "messages": {
      const e = obj(j.error)
      return j.type === "error" && typeof e?.type === "string" && typeof e.message === "string" ? undefined : `status ${status} without the Messages error envelope`
    }
    case "gemini": {
      const e = obj(j.error)
      return e?.code === status && typeof e.message === "string" && typeof e.status === "string" ? undefined : `status ${status} without the Gemini error envelope`
    }
  }
}

/** a 200 stream that failed after output: must end with the protocol's error event (section 6), whole */
const streamErrorProblem = (protocol: Protocol, body: string): string | undefined => {
  const events = parseSse(body)
  if (events === undefined || events.length === 0) return "stream cut without an error event"
  const last = events[events.length - 1]
  const data = parseJ(last.data)
  switch (protocol) {
    case "chat":
      if (events.some((e) => e.data === "[DONE]")) return "[DONE] after an injected fault"
      return typeof obj(data?.error)?.message === "string" ? undefined : "chat stream does not end with an error frame"
    case "responses":
      if (events.some((e) => e.event === "response.completed")) return "response.completed after an injected fault"
      return data?.type === "response.failed" && obj(data.response)?.status === "failed" ? undefined : "responses stream does not end with response.failed"
    case "messages":
      if (events.some((e) => e.event === "message_stop")) return "message_stop after an injected fault"
      return last.event === "error" && data?.type === "error" && typeof obj(data.error)?.type === "string" ? undefined : "messages stream does not end with an error event"
    case "gemini":
      return typeof obj(data?.error)?.message === "string" ? undefined : "gemini stream does not end with an error chunk"
  }
}

const classify = (row: ModelRow, fault: Fault, status: number, body: string): { readonly outcome: Outcome; readonly problem?: string } => {
  if (fault === "ok") {
    if (status !== 200) return { outcome: "unexpected", problem: `status ${status}: ${body.slice(0, 200)}` }
    const problem = problemOf({ protocol: row.protocol, stream: row.stream }, body)
    return problem === undefined ? { outcome: "ok" } : { outcome: "unexpected", problem: `${problem}: ${body.slice(0, 200)}` }
  }
  if (status >= 400) {
    const problem = envelopeProblem(row.protocol, status, body)
    return problem === undefined ? { outcome: "expected" } : { outcome: "unexpected", problem: `${problem}: ${body.slice(0, 200)}` }
  }
  if (status === 200 && row.stream) {
    const problem = streamErrorProblem(row.protocol, body)
    return problem === undefined ? { outcome: "expected" } : { outcome: "unexpected", problem: `${problem}: ${body.slice(-200)}` }
  }
  return { outcome: "unexpected", problem: `status ${status} for an injected ${fault}: ${body.slice(0, 200)}` }
}

/** mulberry32: the same seed, the same mix */
const rng = (seed: number) => () => {
  seed |= 0
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const pick = <A>(random: () => number, weighted: ReadonlyArray<readonly [A, number]>): A => {
  const total = weighted.reduce((n, [, w]) => n + w, 0)
  let x = random() * total
  for (const [a, w] of weighted) {
    if ((x -= w) < 0) return a
  }
  return weighted[weighted.length - 1][0]
}

interface Answer {
  readonly status: number
  readonly body: string
  readonly ms: number
}

const runClient = () => {
  const send = (m: unknown) => process.send?.(m)
  const run = async (job: ClientJob): Promise<ClientReport> => {
    const target = new URL(job.url)
    const agent = new http.Agent({ keepAlive: true, maxSockets: job.workers * 2 })
    const random = rng(job.seed)
    const rows: Record<string, Tally> = Object.fromEntries(ROW_NAMES.map((n) => [n, tally()]))
    const faults: Record<string, Tally> = {}
    const firstProblems: Array<string> = []
    const record = (t: Tally, outcome: Outcome, status: number, ms: number | undefined, problem: string | undefined) => {
      t.requests++
      t[outcome]++
      t.statuses[String(status)] = (t.statuses[String(status)] ?? 0) + 1
      if (outcome === "ok" && ms !== undefined) t.times.push(ms)
      if (problem !== undefined) {
        const key = problem.replace(/:.*$/s, "")
        t.problems[key] = (t.problems[key] ?? 0) + 1
      }
    }
    const problemSeen = (row: string, problem: string) => {
      if (firstProblems.length < 20) firstProblems.push(`${row}: ${problem}`)
    }

    /** one request read whole; status 0 when the connection failed or the client gave up */
    const request = (method: string, p: string, headers: Record<string, string>, body: Buffer | undefined, disconnect?: () => number): Promise<Answer> =>
      new Promise((resolve) => {
        const started = performance.now()
        let done = false
        const finish = (status: number, text: string) => {
          if (done) return
          done = true
          clearTimeout(timer)
          resolve({ status, body: text, ms: performance.now() - started })
        }
        const req = http.request(
          { host: target.hostname, port: target.port, method, path: p, headers: { ...headers, ...(body !== undefined ? { "content-length": String(body.length) } : {}) }, agent: disconnect === undefined ? agent : false },
          (res) => {
            let text = ""
            res.setEncoding("utf8")
            res.on("data", (d: string) => {
              if (text === "" && disconnect !== undefined) {
                setTimeout(() => {
                  req.destroy()
                  finish(res.statusCode ?? 0, `${text}\n[disconnected]`)
                }, disconnect())
              }
              text += d
            })
            res.on("end", () => finish(res.statusCode ?? 0, text))
            res.on("error", (e) => finish(0, `response error: ${e.message}; after ${text.slice(-200)}`))
            res.on("close", () => finish(0, `connection closed before the end; after ${text.slice(-200)}`))
          }
        )
        const timer = setTimeout(() => {
          req.destroy()
          finish(0, `no whole answer within ${CLIENT_TIMEOUT_MS} ms`)
        }, CLIENT_TIMEOUT_MS)
        req.on("error", (e) => finish(0, `request error: ${e.message}`))
        req.end(body)
      })

    const modelRequest = async (row: ModelRow) => {
      const fault = pick(random, FAULTS)
      const spec = buildRequest(row.protocol, { model: `up/soak-${fault}`, stream: row.stream, messages: [{ role: "user", text: "Say hello" }], ...(row.store !== undefined ? { store: row.store } : {}) })
      const a = await request("POST", spec.path, { ...spec.headers }, Buffer.from(spec.body))
      const { outcome, problem } = a.status === 0 ? { outcome: "unexpected" as const, problem: a.body } : classify(row, fault, a.status, a.body)
      record(rows[row.name], outcome, a.status, a.ms, problem)
      const key = `${row.name} | ${fault}`
      record((faults[key] ??= tally()), outcome, a.status, a.ms, problem)
      if (problem !== undefined) problemSeen(`${row.name} (${fault})`, problem)
    }

    const disconnect = async (name: string) => {
      const protocol = pick<Protocol>(random, [
        ["chat", 1],
        ["responses", 1],
        ["messages", 1],
        ["gemini", 1]
      ])
      const spec = buildRequest(protocol, { model: "up/soak-slow", stream: true, messages: [{ role: "user", text: "Say hello slowly" }] })
      const after = 100 + Math.floor(random() * 300)
      const a = await request("POST", spec.path, { ...spec.headers }, Buffer.from(spec.body), () => after)
      const fine = a.status === 200 && a.body.endsWith("[disconnected]")
      const problem = fine ? undefined : `${protocol}: status ${a.status}, ${a.body.slice(0, 200)}`
      record(rows[name], fine ? "ok" : "unexpected", a.status, undefined, problem)
      if (problem !== undefined) problemSeen(name, problem)
    }

    let uploads = 0
    /** uploads in flight: at most MAX_UPLOADS, below the app's save queue bound (1 saving + 8 waiting) */
    let uploading = 0
    const upload = async (name: string) => {
      uploading++
      try {
        await uploadOne(name)
      } finally {
        uploading--
      }
    }
    const uploadOne = async (name: string) => {
      const boundary = `----soak${(++uploads).toString(36)}${Math.floor(random() * 1e9).toString(36)}`
      const content = Buffer.from(`soak upload ${uploads}\n${"lorem ipsum dolor sit amet ".repeat(80)}`)
      const body = Buffer.concat([
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="soak-${uploads}.txt"\r\nContent-Type: text/plain\r\n\r\n`
        ),
        content,
        Buffer.from(`\r\n--${boundary}--\r\n`)
      ])
      const created = await request("POST", "/v1/files", { "content-type": `multipart/form-data; boundary=${boundary}` }, body)
      const file = parseJ(created.body)
      let problem: string | undefined
      let status = created.status
      if (created.status !== 200 || file?.object !== "file" || typeof file.id !== "string" || file.bytes !== content.length) problem = `upload: status ${created.status}, ${created.body.slice(0, 200)}`
      else {
        const gone = await request("DELETE", `/v1/files/${encodeURIComponent(file.id)}`, {}, undefined)
        status = gone.status
        const deleted = parseJ(gone.body)
        if (gone.status !== 200 || deleted?.deleted !== true || deleted.id !== file.id) problem = `delete: status ${gone.status}, ${gone.body.slice(0, 200)}`
      }
      record(rows[name], problem === undefined ? "ok" : "unexpected", status, created.ms, problem)
      if (problem !== undefined) problemSeen(name, problem)
    }

    const started = performance.now()
    const endAt = started + job.seconds * 1000
    const worker = async () => {
      while (performance.now() < endAt) {
        // a worker that draws an upload while MAX_UPLOADS are running sends a model request instead
        let row = pick(random, ROWS)
        while (row.kind === "files" && uploading >= MAX_UPLOADS) row = pick(random, ROWS)
        if (row.kind === "model") await modelRequest(row)
        else if (row.kind === "disconnect") await disconnect(row.name)
        else await upload(row.name)
      }
    }
    await Promise.all(Array.from({ length: job.workers }, worker))
    // the idle keep-alive connections close now: the gateway's descriptors can settle
    agent.destroy()
    return { seconds: (performance.now() - started) / 1000, rows, faults, firstProblems }
  }
  process.on("message", (m: { readonly type: "run"; readonly id: number; readonly job: ClientJob }) => {
    if (m.type !== "run") return
    run(m.job).then(
      (report) => send({ type: "done", id: m.id, report }),
      (e: unknown) => send({ type: "failed", id: m.id, message: e instanceof Error ? (e.stack ?? e.message) : String(e) })
    )
  })
  process.on("disconnect", () => process.exit(0))
  send({ type: "ready" })
}

if (process.env.SOAK_ROLE === "upstream") runUpstream()
else if (process.env.SOAK_ROLE === "client") runClient()

// ---------------------------------------------------------------------------------------------
// the orchestrator
// ---------------------------------------------------------------------------------------------

export interface SoakSettings {
  /** seconds of measured load (the issue: 10 minutes) */
  readonly seconds: number
  readonly warmSeconds: number
  readonly workers: number
  readonly seed: number
}

export const soakSettings = (seconds: number | undefined): SoakSettings => {
  const s = seconds ?? 600
  return { seconds: s, warmSeconds: Math.max(10, Math.min(30, Math.round(s / 10))), workers: 32, seed: 9 }
}

export interface SoakReport {
  readonly text: string
  readonly json: Record<string, unknown>
  /** a missed target or an unexpected error */
  readonly failed: boolean
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const MiB = 1024 * 1024

const TCP_STATES: Record<string, string> = { "01": "", "02": " SYN_SENT", "04": " FIN_WAIT1", "05": " FIN_WAIT2", "06": " TIME_WAIT", "07": " CLOSE", "08": " CLOSE_WAIT", "09": " LAST_ACK", "0B": " CLOSING" }
/** TCP sockets of this machine by inode: ports and state, from /proc/net/tcp{,6} */
const tcpSockets = () => {
  const out = new Map<string, { readonly local: number; readonly remote: number; readonly listen: boolean; readonly state: string }>()
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = ""
    try {
      text = fs.readFileSync(file, "utf8")
    } catch {
      continue
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f.length < 10) continue
      const port = (a: string) => parseInt(a.slice(a.lastIndexOf(":") + 1), 16)
      out.set(f[9], { local: port(f[1]), remote: port(f[2]), listen: f[3] === "0A", state: TCP_STATES[f[3]] ?? f[3] })
    }
  }
  return out
}

/**
 * The gateway's open descriptors, by kind (file, pipe, anon_inode; sockets split into the listening
 * one, connections from clients, connections to the upstream, other TCP, and non-TCP such as unix)
 */
const fdsOf = (pid: number, ports?: { readonly gateway: number; readonly upstream: number }): { readonly total: number; readonly byKind: Record<string, number> } | undefined => {
  try {
    const names = fs.readdirSync(`/proc/${pid}/fd`)
    const byKind: Record<string, number> = {}
    const tcp = ports === undefined ? undefined : tcpSockets()
    for (const n of names) {
      let kind = "gone"
      try {
        const link = fs.readlinkSync(`/proc/${pid}/fd/${n}`)
        const m = /^([a-z_]+):\[?([^\]]*)/.exec(link)
        kind = m !== null ? m[1] : "file"
        if (kind === "socket" && tcp !== undefined && ports !== undefined) {
          const t = tcp.get(m![2])
          kind = t === undefined ? "socket non-tcp" : t.listen ? "socket listen" : t.local === ports.gateway ? `socket from client${t.state}` : t.remote === ports.upstream ? `socket to upstream${t.state}` : `socket tcp other${t.state}`
        }
      } catch {
        // closed while listing
      }
      byKind[kind] = (byKind[kind] ?? 0) + 1
    }
    return { total: names.length, byKind }
  } catch {
    return undefined
  }
}

/**
 * Wait for the descriptor count to settle: polled every 250 ms; settled when it has not moved for
 * `quietMs` (or, with `target`, as soon as it is back at the target and stays there 1 s); at most
 * `maxMs`.
 */
const settleFds = async (pid: number, quietMs: number, maxMs: number, target?: number) => {
  const started = Date.now()
  let last = fdsOf(pid)?.total
  let since = Date.now()
  for (;;) {
    await sleep(250)
    const now = fdsOf(pid)?.total
    if (now !== last) {
      last = now
      since = Date.now()
    }
    const still = Date.now() - since
    if ((target !== undefined && now === target && still >= 1000) || still >= quietMs || Date.now() - started >= maxMs) {
      return { fds: fdsOf(pid), seconds: (Date.now() - started) / 1000 }
    }
  }
}

const percentile = (sorted: ReadonlyArray<number>, p: number) => (sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))])
const fmt = (n: number | undefined, digits = 0) => (n === undefined || !Number.isFinite(n) ? "-" : n.toFixed(digits))
const pct = (part: number, whole: number) => (whole === 0 ? "-" : `${((100 * part) / whole).toFixed(2)}%`)
const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")
  return [line(head), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

const gatewayYaml = (dataDir: string, upstreamUrl: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
# a stalled upstream call ends here (504, or an error event once streaming)
requestTimeoutMs: ${REQUEST_TIMEOUT_MS}
providers:
  up: { type: openai, baseUrl: ${JSON.stringify(`${upstreamUrl}/v1`)}, apiKey: sk-soak-upstream }
`

interface ClientHandle {
  readonly run: (job: ClientJob) => Promise<ClientReport>
  readonly close: () => Promise<void>
}

export const runSoak = async (settings: SoakSettings, log: (line: string) => void): Promise<SoakReport> => {
  const procs = await import("./procs.js")
  const ts = (await import("typescript")).default
  // the children run bench/.build/soak.js (protocols.js beside it comes from compileBench)
  const buildDir = procs.compileBench()
  {
    const source = fs.readFileSync(path.join(procs.repoRoot, "bench/soak.ts"), "utf8")
    const out = ts.transpileModule(source, { fileName: "soak.ts", compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } })
    const target = path.join(buildDir, "soak.js")
    const temp = `${target}.${process.pid}.tmp`
    fs.writeFileSync(temp, out.outputText)
    fs.renameSync(temp, target)
  }
  const script = path.join(buildDir, "soak.js")
  const stops: Array<() => Promise<void>> = []
  try {
    const upstream = await procs.startServer("soak upstream", process.execPath, [script], { env: { ...process.env, SOAK_ROLE: "upstream" } })
    stops.push(upstream.stop)
    log(`soak upstream ${upstream.url} (pid ${upstream.pid})`)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-soak-"))
    stops.push(async () => fs.rmSync(dir, { recursive: true, force: true }))
    fs.writeFileSync(path.join(dir, "gateway.yaml"), gatewayYaml(path.join(dir, "data"), upstream.url))
    const gateway = await procs.startServer("gateway", process.execPath, [path.join(procs.repoRoot, "dist/main.js"), "--config", path.join(dir, "gateway.yaml"), "--port", "0"], { cwd: dir })
    stops.unshift(gateway.stop)
    log(`gateway ${gateway.url} (pid ${gateway.pid})`)
    const client = await startClient(script, procs.track, procs.stopChild)
    stops.unshift(client.close)
    const upstreamStats = async () => (await (await fetch(`${upstream.url}/soak/stats`)).json()) as Record<string, unknown> & { readonly slowStarted: number; readonly slowFinished: number; readonly slowAborted: number; readonly stalledOpen: number; readonly openConnections: number }

    // warm-up: the same mix, not counted; then idle until the descriptors settle
    log(`warm-up: ${settings.warmSeconds} s of the mix (${settings.workers} workers)`)
    const warm = await client.run({ url: gateway.url, seconds: settings.warmSeconds, workers: settings.workers, seed: settings.seed + 1 })
    const warmUnexpected = Object.values(warm.rows).reduce((n, t) => n + t.unexpected, 0)
    const startSettle = await settleFds(gateway.pid, 5000, 30_000)
    const ports = { gateway: Number(new URL(gateway.url).port), upstream: Number(new URL(upstream.url).port) }
    const rssStart = await procs.sampleRss(gateway.pid, 5, 100)
    const fdStart = fdsOf(gateway.pid, ports)
    const upStart = await upstreamStats()
    log(`start (idle ${startSettle.seconds.toFixed(1)} s after the warm-up): RSS ${fmt((rssStart ?? NaN) / MiB, 1)} MiB, ${fdStart?.total ?? "-"} fds ${JSON.stringify(fdStart?.byKind ?? {})}`)

    // the soak: RSS and descriptors sampled every 5 s while it runs
    log(`soak: ${settings.seconds} s of mixed traffic with faults`)
    const timeline: Array<{ readonly s: number; readonly rssMiB: number | undefined; readonly fds: number | undefined }> = []
    const t0 = Date.now()
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        await sleep(5000)
        if (!sampling) break
        const rss = procs.rssOf(gateway.pid)
        timeline.push({ s: Math.round((Date.now() - t0) / 1000), rssMiB: rss === undefined ? undefined : Math.round((rss / MiB) * 10) / 10, fds: fdsOf(gateway.pid)?.total })
        if (timeline.length % 12 === 0) log(`  +${timeline[timeline.length - 1].s} s: RSS ${timeline[timeline.length - 1].rssMiB} MiB, ${timeline[timeline.length - 1].fds} fds`)
      }
    })()
    const report = await client.run({ url: gateway.url, seconds: settings.seconds, workers: settings.workers, seed: settings.seed })
    sampling = false
    await sampler

    // the end: the client closed its connections; idle until the descriptors are back (or still)
    // the same rule as the start, so both RSS readings are of a process idle as long
    const endSettle = await settleFds(gateway.pid, 5000, 30_000)
    const rssEnd = await procs.sampleRss(gateway.pid, 5, 100)
    const fdEnd = fdsOf(gateway.pid, ports)
    const upEnd = await upstreamStats()
    // the soak's own calls: the warm-up's are left out
    const up = { ...upEnd, slowStarted: upEnd.slowStarted - upStart.slowStarted, slowFinished: upEnd.slowFinished - upStart.slowFinished, slowAborted: upEnd.slowAborted - upStart.slowAborted, requests: Number(upEnd.requests) - Number(upStart.requests), connections: Number(upEnd.connections) - Number(upStart.connections) }
    const alive = gateway.child.exitCode === null && gateway.child.signalCode === null
    log(`end (idle ${endSettle.seconds.toFixed(1)} s after the load): RSS ${fmt((rssEnd ?? NaN) / MiB, 1)} MiB, ${fdEnd?.total ?? "-"} fds ${JSON.stringify(fdEnd?.byKind ?? {})}`)

    return summarize(settings, { report, warmUnexpected, rssStart, rssEnd, fdStart, fdEnd, startSettle: startSettle.seconds, endSettle: endSettle.seconds, timeline, up, alive })
  } finally {
    for (const stop of stops) await stop().catch(() => undefined)
  }
}

const startClient = async (script: string, track: (c: ChildProcess) => ChildProcess, stopChild: (c: ChildProcess, ms?: number) => Promise<void>): Promise<ClientHandle> => {
  const child = track(fork(script, [], { execArgv: [], env: { ...process.env, SOAK_ROLE: "client" }, stdio: ["ignore", "inherit", "inherit", "ipc"] }))
  const waiting = new Map<number, { resolve: (r: ClientReport) => void; reject: (e: Error) => void }>()
  let ready!: () => void
  const isReady = new Promise<void>((r) => (ready = r))
  child.on("message", (m: { type: "ready" } | { type: "done"; id: number; report: ClientReport } | { type: "failed"; id: number; message: string }) => {
    if (m.type === "ready") return ready()
    const w = waiting.get(m.id)
    waiting.delete(m.id)
    if (m.type === "done") w?.resolve(m.report)
    else w?.reject(new Error(`soak client: ${m.message}`))
  })
  child.once("exit", (code) => {
    for (const w of waiting.values()) w.reject(new Error(`the soak client exited with ${code}`))
    waiting.clear()
  })
  await isReady
  let next = 1
  return {
    run: (job) =>
      new Promise((resolve, reject) => {
        const id = next++
        waiting.set(id, { resolve, reject })
        child.send({ type: "run", id, job })
      }),
    close: async () => {
      if (child.connected) child.disconnect()
      await stopChild(child, 1000)
    }
  }
}

const summarize = (
  settings: SoakSettings,
  m: {
    readonly report: ClientReport
    readonly warmUnexpected: number
    readonly rssStart: number | undefined
    readonly rssEnd: number | undefined
    readonly fdStart: ReturnType<typeof fdsOf>
    readonly fdEnd: ReturnType<typeof fdsOf>
    readonly startSettle: number
    readonly endSettle: number
    readonly timeline: ReadonlyArray<{ readonly s: number; readonly rssMiB: number | undefined; readonly fds: number | undefined }>
    readonly up: Record<string, unknown> & { readonly slowStarted: number; readonly slowFinished: number; readonly slowAborted: number; readonly stalledOpen: number; readonly openConnections: number }
    readonly alive: boolean
  }
): SoakReport => {
  const { report } = m
  const summary = (t: Tally) => {
    const sorted = [...t.times].sort((a, b) => a - b)
    return { requests: t.requests, ok: t.ok, expected: t.expected, unexpected: t.unexpected, statuses: t.statuses, problems: t.problems, p50: percentile(sorted, 50), p99: percentile(sorted, 99) }
  }
  const rows = Object.entries(report.rows).map(([name, t]) => ({ name, ...summary(t) }))
  const all = rows.reduce((a, r) => ({ requests: a.requests + r.requests, ok: a.ok + r.ok, expected: a.expected + r.expected, unexpected: a.unexpected + r.unexpected }), { requests: 0, ok: 0, expected: 0, unexpected: 0 })
  const allTimes = Object.values(report.rows)
    .flatMap((t) => t.times)
    .sort((a, b) => a - b)
  const faultNames = FAULTS.map(([f]) => f)
  const byFault = faultNames.map((f) => {
    const ts = Object.entries(report.faults).filter(([k]) => k.endsWith(`| ${f}`))
    const statuses: Record<string, number> = {}
    for (const [, t] of ts) for (const [s, n] of Object.entries(t.statuses)) statuses[s] = (statuses[s] ?? 0) + n
    return { fault: f, requests: ts.reduce((n, [, t]) => n + t.requests, 0), ok: ts.reduce((n, [, t]) => n + t.ok, 0), expected: ts.reduce((n, [, t]) => n + t.expected, 0), unexpected: ts.reduce((n, [, t]) => n + t.unexpected, 0), statuses }
  })
  const growth = m.rssStart !== undefined && m.rssEnd !== undefined ? (100 * (m.rssEnd - m.rssStart)) / m.rssStart : undefined
  const rssMet = growth !== undefined && growth <= 10
  const fdMet = m.fdStart !== undefined && m.fdEnd !== undefined && m.fdStart.total === m.fdEnd.total
  const disconnects = report.rows["stream disconnect"]
  const abortsMet = m.up.slowFinished === 0 && m.up.slowAborted === m.up.slowStarted
  const mark = (met: boolean) => (met ? "met" : "MISSED")

  const lines: Array<string> = []
  lines.push(
    `soak — ${fmt(report.seconds)} s of mixed traffic after a ${settings.warmSeconds} s warm-up, ${settings.workers} concurrent clients, one gateway process; upstream faults on ${(100 * (1 - FAULTS[0][1])).toFixed(1)}% of model calls (500, 429 + Retry-After, reset, malformed, stall past requestTimeoutMs ${REQUEST_TIMEOUT_MS} ms)`
  )
  lines.push("")
  lines.push(
    table(
      ["kind", "requests", "req/s", "ok", "expected err", "unexpected", "expected %", "unexpected %", "p50 ms", "p99 ms"],
      [
        ...rows.map((r) => [r.name, String(r.requests), fmt(r.requests / report.seconds, 1), String(r.ok), String(r.expected), String(r.unexpected), pct(r.expected, r.requests), pct(r.unexpected, r.requests), r.name === "stream disconnect" ? "-" : fmt(r.p50, 1), r.name === "stream disconnect" ? "-" : fmt(r.p99, 1)]),
        ["all", String(all.requests), fmt(all.requests / report.seconds, 1), String(all.ok), String(all.expected), String(all.unexpected), pct(all.expected, all.requests), pct(all.unexpected, all.requests), fmt(percentile(allTimes, 50), 1), fmt(percentile(allTimes, 99), 1)]
      ]
    )
  )
  lines.push("")
  lines.push("p50/p99: whole-answer time of the requests meant to succeed (fault-free model calls; uploads: the upload). expected err: an injected fault answered")
  lines.push("as the protocol's error (HTTP error in its envelope, or once streaming the protocol's error event, whole); anything else is unexpected.")
  lines.push("")
  lines.push(
    table(
      ["injected fault", "requests", "answered as error", "unexpected", "statuses seen"],
      byFault.map((f) => [f.fault, String(f.requests), f.fault === "ok" ? "-" : String(f.expected), String(f.unexpected), Object.entries(f.statuses).map(([s, n]) => `${s}:${n}`).join(" ")])
    )
  )
  lines.push("")
  lines.push(
    table(
      ["gateway process", "start", "end", "change", "target", ""],
      [
        ["RSS MiB", fmt((m.rssStart ?? NaN) / MiB, 1), fmt((m.rssEnd ?? NaN) / MiB, 1), growth === undefined ? "-" : `${growth >= 0 ? "+" : ""}${growth.toFixed(1)}%`, "<= +10%", mark(rssMet)],
        ["open fds", String(m.fdStart?.total ?? "-"), String(m.fdEnd?.total ?? "-"), m.fdStart !== undefined && m.fdEnd !== undefined ? String(m.fdEnd.total - m.fdStart.total) : "-", "end = start", mark(fdMet)],
        ["unexpected errors", "", String(all.unexpected), "", "0", mark(all.unexpected === 0)],
        ["upstream calls aborted on client disconnect", "", `${m.up.slowAborted}/${m.up.slowStarted}`, "", "all", mark(abortsMet)]
      ]
    )
  )
  lines.push("")
  lines.push(
    `start: after the warm-up, idle ${m.startSettle.toFixed(1)} s until the fd count held still 5 s; end: after the load, idle ${m.endSettle.toFixed(1)} s by the same rule (still 5 s, at most 30 s). The client closes its keep-alive connections when its load ends; idle connections to the upstream close after at most 5 s, so the gateway's pool drains. fds by kind at start ${JSON.stringify(m.fdStart?.byKind ?? {})}, at end ${JSON.stringify(m.fdEnd?.byKind ?? {})}.`
  )
  const firstLoaded = m.timeline[0]?.rssMiB
  const lastLoaded = m.timeline[m.timeline.length - 1]?.rssMiB
  if (firstLoaded !== undefined && lastLoaded !== undefined) {
    lines.push(`RSS under load (informational): ${firstLoaded} MiB 5 s into the soak, ${lastLoaded} MiB at its last reading (${lastLoaded >= firstLoaded ? "+" : ""}${((100 * (lastLoaded - firstLoaded)) / firstLoaded).toFixed(1)}%).`)
  }
  lines.push(`RSS during the soak (every 5 s): min ${fmt(Math.min(...m.timeline.map((t) => t.rssMiB ?? Infinity)), 1)} MiB, max ${fmt(Math.max(...m.timeline.map((t) => t.rssMiB ?? -Infinity)), 1)} MiB; fds max ${fmt(Math.max(...m.timeline.map((t) => t.fds ?? -Infinity)))}.`)
  if (disconnects !== undefined) lines.push(`stream disconnects: ${disconnects.requests} streams dropped by the client 100-400 ms after their first bytes; upstream calls of those streams finished anyway: ${m.up.slowFinished}.`)
  if (m.warmUnexpected > 0) lines.push(`WARNING: ${m.warmUnexpected} unexpected errors during the warm-up`)
  if (!m.alive) lines.push("WARNING: the gateway process exited during the soak")
  if (report.firstProblems.length > 0) {
    lines.push("first unexpected answers:")
    for (const p of report.firstProblems) lines.push(`  ${p}`)
  }
  const failed = !rssMet || !fdMet || all.unexpected > 0 || !abortsMet || !m.alive
  return {
    text: lines.join("\n"),
    failed,
    json: {
      settings: { ...settings, requestTimeoutMs: REQUEST_TIMEOUT_MS, faults: Object.fromEntries(FAULTS), rowWeights: Object.fromEntries(ROWS.map(([r, w]) => [r.name, w])) },
      seconds: report.seconds,
      rows,
      all: { ...all, p50: percentile(allTimes, 50), p99: percentile(allTimes, 99) },
      byFault,
      byRowAndFault: Object.fromEntries(Object.entries(report.faults).map(([k, t]) => [k, summary(t)])),
      memory: { rssStartBytes: m.rssStart, rssEndBytes: m.rssEnd, growthPercent: growth, target: "<= 10%", met: rssMet },
      fds: { start: m.fdStart, end: m.fdEnd, met: fdMet, startSettleSeconds: m.startSettle, endSettleSeconds: m.endSettle },
      disconnects: { client: disconnects?.requests ?? 0, upstream: { started: m.up.slowStarted, aborted: m.up.slowAborted, finished: m.up.slowFinished }, met: abortsMet },
      upstream: m.up,
      timeline: m.timeline,
      warmUnexpected: m.warmUnexpected,
      gatewayAlive: m.alive,
      firstProblems: report.firstProblems
    }
  }
}
