/**
 * The load generator, in its own process so its CPU never shares the orchestrator's event loop.
 * Forked by bench/lib.ts (`startLoader`), compiled to plain JS first (bench/build.ts), and driven
 * over IPC one job at a time:
 *
 * - `load`: autocannon (keep-alive) for `seconds` or `amount` requests; every answer is checked
 *   whole with `problemOf` (bench/protocols.ts) — a 200 with a cut or wrong body is a mismatch, and
 *   requests that were sent but never answered (more than the ones in flight at the end) are lost.
 *   Latencies are every answer's own response time in ms (sub-ms resolution).
 * - `hold`: `count` streams opened with node:http and held open; reports `hold-open` once each has
 *   received its first bytes (or `openTimeoutMs` passed), then on `finish-hold` waits for every
 *   stream to end and checks each whole.
 */
import * as http from "node:http"
import { createRequire } from "node:module"
import { problemOf, type CheckSpec } from "./protocols.js"

export interface LoadJob {
  readonly url: string
  readonly method: "POST" | "GET"
  readonly headers: Readonly<Record<string, string>>
  readonly body?: string
  /**
   * Instead of `body`: requests cycle through these bodies (with 1 connection, so answers come back
   * in the same order); `perBody` then has the latencies of each. Alternating a baseline with the
   * body under test request by request cancels the machine's drift out of their difference.
   * With more connections each connection cycles through them on its own, and there is no `perBody`
   * (an answer cannot be told apart by its body): a mix of requests, as bench/routing.ts sends.
   */
  readonly bodies?: ReadonlyArray<string>
  /** with `bodies`: headers of each body's requests, over `headers` (bench/hosttools.ts: one body, two keys) */
  readonly headersPerBody?: ReadonlyArray<Readonly<Record<string, string>>>
  /** with `bodies` and 1 connection: `perBody` also holds every answer's time, in order */
  readonly keepTimes?: boolean
  readonly connections: number
  readonly seconds?: number
  readonly amount?: number
  /**
   * Paced instead of as fast as the connections allow: `amount` requests (`body` only), one every
   * 1/rate s whatever the answers do (an open loop; at most `connections` in flight, the rest queue
   * in the client). Two request kinds paced alike load the server alike, however long each takes
   * (bench/hosttools.ts). Node's http client, not autocannon (whose rate limit sends each second's
   * share in a burst).
   */
  readonly rate?: number
  /** undefined: any 2xx answer counts */
  readonly check?: CheckSpec
}

export interface LoadResult {
  /** answers that were 2xx and passed the check */
  readonly ok: number
  readonly sent: number
  readonly non2xx: number
  readonly mismatches: number
  readonly socketErrors: number
  readonly timeouts: number
  readonly lost: number
  /** non2xx + mismatches + socket errors + timeouts + lost */
  readonly errors: number
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
  readonly mean: number
  readonly seconds: number
  readonly statusCodes: Record<string, number>
  readonly perBody?: ReadonlyArray<{ readonly n: number; readonly p50: number; readonly p90: number; readonly p99: number; readonly mean: number; readonly times?: ReadonlyArray<number> }>
  readonly firstProblem?: string
}

export interface HoldJob {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly count: number
  /** report `hold-open` at the latest this long after the start... */
  readonly openTimeoutMs: number
  /** ...or once no stream has opened for this long (streams queued inside a contestant) */
  readonly stallMs: number
  readonly check: CheckSpec
}

export interface HoldOpen {
  /** streams that received their first body bytes */
  readonly open: number
  readonly failed: number
  readonly seconds: number
}

export interface HoldResult {
  readonly whole: number
  readonly bad: number
  readonly firstProblem?: string
  readonly seconds: number
}

export type ToLoader = { readonly type: "load"; readonly id: number; readonly job: LoadJob } | { readonly type: "hold"; readonly id: number; readonly job: HoldJob } | { readonly type: "finish-hold"; readonly id: number }
export type FromLoader =
  | { readonly type: "ready" }
  | { readonly type: "result"; readonly id: number; readonly result: LoadResult }
  | { readonly type: "hold-open"; readonly id: number; readonly open: HoldOpen }
  | { readonly type: "hold-done"; readonly id: number; readonly result: HoldResult }
  | { readonly type: "failed"; readonly id: number; readonly message: string }

// ---------------------------------------------------------------------------------------------

interface AutocannonResult {
  readonly errors: number
  readonly timeouts: number
  readonly mismatches: number
  readonly non2xx: number
  readonly "2xx": number
  readonly duration: number
  readonly statusCodeStats: Readonly<Record<string, { readonly count: number }>>
  readonly requests: { readonly sent: number }
}
interface AutocannonTracker {
  on(event: "response", listener: (client: unknown, statusCode: number, resBytes: number, responseTime: number) => void): AutocannonTracker
}
type Autocannon = (opts: Record<string, unknown>, cb: (err: Error | null, result: AutocannonResult) => void) => AutocannonTracker

const send = (message: FromLoader) => process.send?.(message)
/** the longest a job may run past its `seconds` (all of it for an `amount` job) */
const AMOUNT_JOB_CAP_S = 180

const percentile = (sorted: Float64Array, p: number) => (sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))])

const runLoad = (autocannon: Autocannon, job: LoadJob): Promise<LoadResult> =>
  new Promise((resolve, reject) => {
    let times = new Float64Array(1 << 14)
    let n = 0
    // per-body latencies only with 1 connection: answers then come back in the order of the bodies
    const cycle = job.connections === 1 ? (job.bodies?.length ?? 1) : 1
    const perBody: Array<Array<number>> = Array.from({ length: cycle }, () => [])
    /** with keepTimes: every answer's time per body, in order (NaN for a non-2xx one, so the k-th of each body pair up) */
    const timesPerBody: Array<Array<number>> = Array.from({ length: cycle }, () => [])
    let answers = 0
    /** status of the answer being checked: autocannon reports it just before it checks the body */
    let status = 0
    let firstProblem: string | undefined
    const check = job.check
    const started = performance.now()
    let lastAnswer = started
    const tracker = autocannon(
      {
        url: job.url,
        method: job.method,
        headers: job.headers,
        ...(job.body !== undefined ? { body: job.body } : {}),
        ...(job.bodies !== undefined ? { requests: job.bodies.map((body, i) => ({ body, ...(job.headersPerBody?.[i] !== undefined ? { headers: job.headersPerBody[i] } : {}) })) } : {}),
        connections: job.connections,
        pipelining: 1,
        ...(job.amount !== undefined ? { amount: job.amount } : { duration: job.seconds ?? 1 }),
        timeout: 120,
        // autocannon notices the end of a run on its sampling tick: 100 ms instead of 1 s
        sampleInt: 100,
        ...(check !== undefined
          ? {
              verifyBody: (body: string) => {
                // a non-2xx answer is counted as such, not again as a wrong body; keep its text
                if (status < 200 || status >= 300) {
                  if (firstProblem === `status ${status}`) firstProblem = `status ${status}: ${body.slice(0, 300)}`
                  return true
                }
                const problem = problemOf(check, body)
                if (problem !== undefined && firstProblem === undefined) firstProblem = `${problem}: ${body.slice(0, 300)}`
                return problem === undefined
              }
            }
          : {})
      },
      (err, r) => {
        clearTimeout(cap)
        if (err) return reject(err)
        if (cappedAfter !== undefined && firstProblem === undefined) firstProblem = `the job was stopped after ${cappedAfter.toFixed(0)} s`
        const sorted = times.slice(0, n).sort()
        const answered = r["2xx"] + r.non2xx
        const lost = Math.max(0, r.requests.sent - answered - r.timeouts - job.connections) + (cappedAfter !== undefined && job.amount !== undefined ? Math.max(0, job.amount - answered) : 0)
        const ok = r["2xx"] - r.mismatches
        const seconds = Math.max(0.001, (lastAnswer - started) / 1000)
        const statusCodes: Record<string, number> = {}
        for (const [code, { count }] of Object.entries(r.statusCodeStats)) statusCodes[code] = count
        resolve({
          ok,
          sent: r.requests.sent,
          non2xx: r.non2xx,
          mismatches: r.mismatches,
          socketErrors: r.errors - r.timeouts,
          timeouts: r.timeouts,
          lost,
          errors: r.non2xx + r.mismatches + r.errors + lost,
          perSecond: ok / seconds,
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
          mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length),
          seconds,
          statusCodes,
          ...(cycle > 1
            ? {
                perBody: perBody.map((xs, k) => {
                  const s = Float64Array.from(xs).sort()
                  return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), mean: s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), ...(job.keepTimes === true ? { times: timesPerBody[k] } : {}) }
                })
              }
            : {}),
          ...(firstProblem !== undefined ? { firstProblem } : {})
        })
      }
    )
    // a job sized by `amount` against a contestant that stopped answering would never end
    let cappedAfter: number | undefined
    const cap = setTimeout(
      () => {
        cappedAfter = (performance.now() - started) / 1000
        ;(tracker as unknown as { stop: () => void }).stop()
      },
      ((job.seconds ?? 0) + AMOUNT_JOB_CAP_S) * 1000
    )
    tracker.on("response", (_client, code, _bytes, ms) => {
      lastAnswer = performance.now()
      const which = answers++ % cycle
      status = code
      if (cycle > 1 && job.keepTimes === true) timesPerBody[which].push(code >= 200 && code < 300 ? ms : Number.NaN)
      if (status < 200 || status >= 300) {
        if (firstProblem === undefined) firstProblem = `status ${status}`
        return
      }
      if (n === times.length) {
        const next = new Float64Array(times.length * 2)
        next.set(times)
        times = next
      }
      times[n++] = ms
      if (cycle > 1) perBody[which].push(ms)
    })
  })

// --- paced load ------------------------------------------------------------------------------

const runPaced = (job: LoadJob & { readonly rate: number }): Promise<LoadResult> =>
  new Promise((resolve) => {
    const target = new URL(job.url)
    const agent = new http.Agent({ keepAlive: true, maxSockets: job.connections })
    const body = Buffer.from(job.body ?? "")
    const amount = job.amount ?? Math.max(1, Math.round(job.rate * (job.seconds ?? 1)))
    const times: Array<number> = []
    const statusCodes: Record<string, number> = {}
    let sent = 0
    let ended = 0
    let ok = 0
    let non2xx = 0
    let mismatches = 0
    let socketErrors = 0
    let firstProblem: string | undefined
    const started = performance.now()
    let lastAnswer = started
    let timer: NodeJS.Timeout | undefined
    const finish = () => {
      clearTimeout(timer)
      clearTimeout(cap)
      agent.destroy()
      const sorted = Float64Array.from(times).sort()
      const seconds = Math.max(0.001, (lastAnswer - started) / 1000)
      const lost = amount - ended
      resolve({
        ok,
        sent,
        non2xx,
        mismatches,
        socketErrors,
        timeouts: 0,
        lost,
        errors: non2xx + mismatches + socketErrors + lost,
        perSecond: ok / seconds,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length),
        seconds,
        statusCodes,
        ...(firstProblem !== undefined ? { firstProblem } : {})
      })
    }
    const cap = setTimeout(() => {
      if (firstProblem === undefined) firstProblem = `${amount - ended} requests unanswered ${AMOUNT_JOB_CAP_S} s after the last was due`
      finish()
    }, (amount / job.rate + AMOUNT_JOB_CAP_S) * 1000)
    const one = () => {
      sent++
      const t0 = performance.now()
      let counted = false
      const done = () => {
        if (counted) return false
        counted = true
        ended++
        lastAnswer = performance.now()
        return true
      }
      const after = () => {
        if (ended === amount) finish()
      }
      const req = http.request(
        { host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, method: job.method, headers: { ...job.headers, "content-length": String(body.length) }, agent },
        (res) => {
          res.setEncoding("utf8")
          let text = ""
          res.on("data", (d: string) => (text += d))
          res.on("end", () => {
            if (!done()) return
            const code = res.statusCode ?? 0
            statusCodes[code] = (statusCodes[code] ?? 0) + 1
            if (code < 200 || code >= 300) {
              non2xx++
              if (firstProblem === undefined) firstProblem = `status ${code}: ${text.slice(0, 300)}`
            } else {
              const problem = job.check !== undefined ? problemOf(job.check, text) : undefined
              if (problem !== undefined) {
                mismatches++
                if (firstProblem === undefined) firstProblem = `${problem}: ${text.slice(0, 300)}`
              } else {
                ok++
                times.push(performance.now() - t0)
              }
            }
            after()
          })
          res.on("error", (e) => {
            if (!done()) return
            socketErrors++
            if (firstProblem === undefined) firstProblem = `response error: ${e.message}`
            after()
          })
        }
      )
      req.on("error", (e) => {
        if (!done()) return
        socketErrors++
        if (firstProblem === undefined) firstProblem = `request error: ${e.message}`
        after()
      })
      req.end(body)
    }
    // every request is due at started + k / rate: send those due, sleep until the next
    const tick = () => {
      const due = Math.min(amount, Math.floor(((performance.now() - started) * job.rate) / 1000) + 1)
      while (sent < due) one()
      if (sent < amount) timer = setTimeout(tick, Math.max(0, (sent * 1000) / job.rate - (performance.now() - started)))
    }
    tick()
  })

// --- held streams ------------------------------------------------------------------------------

const holds = new Map<number, () => void>()

const runHold = (id: number, job: HoldJob) => {
  const started = performance.now()
  const target = new URL(job.url)
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity })
  let open = 0
  let failed = 0
  let ended = 0
  let whole = 0
  let firstProblem: string | undefined
  let reported = false
  let finishing = false
  const bad = (why: string) => {
    if (firstProblem === undefined) firstProblem = why
  }
  const reportOpen = () => {
    if (reported) return
    reported = true
    clearTimeout(openTimer)
    clearInterval(stall)
    send({ type: "hold-open", id, open: { open, failed, seconds: (performance.now() - started) / 1000 } })
  }
  const maybeDone = () => {
    if (!reported && open + failed >= job.count) reportOpen()
    if (finishing && ended + failed >= job.count) finish()
  }
  const openTimer = setTimeout(reportOpen, job.openTimeoutMs)
  let lastOpen = { count: -1, at: performance.now() }
  const stall = setInterval(() => {
    if (reported) return clearInterval(stall)
    if (open + failed !== lastOpen.count) lastOpen = { count: open + failed, at: performance.now() }
    else if (performance.now() - lastOpen.at >= job.stallMs) {
      clearInterval(stall)
      reportOpen()
    }
  }, 100)
  let doneTimer: NodeJS.Timeout | undefined
  const finish = () => {
    if (doneTimer !== undefined) clearTimeout(doneTimer)
    holds.delete(id)
    agent.destroy()
    send({ type: "hold-done", id, result: { whole, bad: job.count - whole, ...(firstProblem !== undefined ? { firstProblem } : {}), seconds: (performance.now() - started) / 1000 } })
  }
  holds.set(id, () => {
    finishing = true
    doneTimer = setTimeout(() => {
      bad(`${job.count - ended - failed} streams had not ended 60 s after the release`)
      finish()
    }, 60_000)
    maybeDone()
  })
  const body = Buffer.from(job.body)
  const openOne = () => {
    let first = true
    let text = ""
    let counted = false
    const fail = (why: string) => {
      if (counted) return
      counted = true
      if (!first) ended++
      else failed++
      bad(why)
      maybeDone()
    }
    const req = http.request(
      { host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, method: "POST", headers: { ...job.headers, "content-length": String(body.length) }, agent },
      (res) => {
        res.setEncoding("utf8")
        res.on("data", (d: string) => {
          if (first) {
            first = false
            open++
            maybeDone()
          }
          text += d
        })
        res.on("end", () => {
          if (counted) return
          if (first) return fail(`status ${res.statusCode} with no body`)
          counted = true
          ended++
          const problem = res.statusCode === 200 ? problemOf(job.check, text) : `status ${res.statusCode}`
          if (problem === undefined) whole++
          else bad(`${problem}: ${text.slice(0, 300)}`)
          maybeDone()
        })
        res.on("error", (e) => fail(`response error: ${e.message}`))
        res.on("close", () => fail("connection closed before the end of the stream"))
      }
    )
    req.on("error", (e) => fail(`request error: ${e.message}`))
    req.end(body)
  }
  // open in batches so the server's accept backlog never overflows
  let opened = 0
  const batch = () => {
    for (let i = 0; i < 50 && opened < job.count; i++, opened++) openOne()
    if (opened < job.count) setTimeout(batch, 10)
  }
  batch()
}

// ---------------------------------------------------------------------------------------------

const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon
process.on("message", (message: ToLoader) => {
  if (message.type === "load") {
    const job = message.job
    ;(job.rate !== undefined ? runPaced({ ...job, rate: job.rate }) : runLoad(autocannon, job)).then(
      (result) => send({ type: "result", id: message.id, result }),
      (e: unknown) => send({ type: "failed", id: message.id, message: e instanceof Error ? e.message : String(e) })
    )
  } else if (message.type === "hold") runHold(message.id, message.job)
  else holds.get(message.id)?.()
})
process.on("disconnect", () => process.exit(0))
send({ type: "ready" })
