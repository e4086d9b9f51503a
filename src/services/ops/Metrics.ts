import { Context, Layer } from "effect"
import type { TargetHealth, TargetState } from "../routing/Health.js"

/**
 * In-process metrics for `/gateway/metrics` (Prometheus text format) and `/gateway/status`:
 * counters and histograms updated synchronously on the request path (a map lookup and a few
 * additions), rendered only when scraped.
 */

const TARGET_STATES: ReadonlyArray<TargetState> = ["healthy", "cooled", "probing"]
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
/** window of the recent provider error rates on the status page */
const RECENT_MS = 5 * 60 * 1000

interface Histogram {
  readonly counts: Array<number>
  sum: number
  count: number
}

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')
const labelText = (labels: Readonly<Record<string, string>>) => {
  const entries = Object.entries(labels)
  return entries.length === 0 ? "" : `{${entries.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",")}}`
}

class Family<V> {
  readonly series = new Map<string, { readonly labels: Readonly<Record<string, string>>; value: V }>()
  constructor(private readonly init: () => V) {}
  at(labels: Readonly<Record<string, string>>): { readonly labels: Readonly<Record<string, string>>; value: V } {
    // a family's label names come in one order: the values alone identify a series (no text built per update)
    let key = ""
    for (const name in labels) key += `${labels[name]}\u0000`
    let entry = this.series.get(key)
    if (entry === undefined) {
      entry = { labels, value: this.init() }
      this.series.set(key, entry)
    }
    return entry
  }
}

const newHistogram = (): Histogram => ({ counts: BUCKETS.map(() => 0), sum: 0, count: 0 })
const observe = (h: Histogram, seconds: number) => {
  for (let i = 0; i < BUCKETS.length; i++) if (seconds <= BUCKETS[i]) h.counts[i]++
  h.sum += seconds
  h.count++
}

export interface ModelCallOutcome {
  readonly family: string
  readonly route: string
  readonly model: string
  readonly provider: string
  /** `ok` or the error code */
  readonly status: string
  readonly tokens: { readonly input: number; readonly output: number; readonly cacheRead: number; readonly cacheWrite: number; readonly reasoning: number }
  readonly latencyMs: number
  readonly ttftMs?: number
  /** the app that called; labels the cost counter */
  readonly app?: string
  /** USD, null when the model has no price */
  readonly costUsd?: number | null
}

/** One host tool call: the app, the server and tool, and how it ended (`ok`, `error`, `timeout`, `failed`). */
export interface HostToolCallOutcome {
  readonly app: string
  readonly server: string
  readonly tool: string
  readonly outcome: string
  readonly latencyMs: number
}

/** A tool server connection as the metrics show it. */
export interface ToolServerGauge {
  readonly server: string
  readonly app?: string
  readonly state: string
  readonly tools: number
}

export interface Gauges {
  readonly modelRequestsInFlight: number
  readonly bodyBytesInFlight: number
  readonly requestsInFlight: number
  /** each target called on this replica (a provider's model, or one key of it by index) */
  readonly targets?: ReadonlyArray<TargetHealth>
  /** each tool server connection of this replica */
  readonly toolServers?: ReadonlyArray<ToolServerGauge>
}

const makeMetrics = () => {
  const requests = new Family(() => 0)
  const requestSeconds = new Family(newHistogram)
  const modelRequests = new Family(() => 0)
  const tokens = new Family(() => 0)
  const modelSeconds = new Family(newHistogram)
  const ttftSeconds = new Family(newHistogram)
  const upstreamErrors = new Family(() => 0)
  const cost = new Family(() => 0)
  const hostToolCalls = new Family(() => 0)
  const hostToolSeconds = new Family(newHistogram)
  // per provider, calls and failures in one-second buckets over the window: constant work per call
  const buckets = RECENT_MS / 1000
  const recent = new Map<string, { readonly second: Array<number>; readonly calls: Array<number>; readonly failures: Array<number> }>()
  let inFlight = 0
  const usageDropped = new Family(() => 0)
  // both series from the start, at 0: an alert can watch them before anything is dropped
  for (const reason of ["buffer_full", "refused"]) usageDropped.at({ reason })

  const remember = (provider: string, failed: boolean) => {
    const second = Math.floor(Date.now() / 1000)
    let ring = recent.get(provider)
    if (ring === undefined) recent.set(provider, (ring = { second: new Array(buckets).fill(-1), calls: new Array(buckets).fill(0), failures: new Array(buckets).fill(0) }))
    const i = second % buckets
    if (ring.second[i] !== second) {
      ring.second[i] = second
      ring.calls[i] = 0
      ring.failures[i] = 0
    }
    ring.calls[i]++
    if (failed) ring.failures[i]++
  }

  return {
    requestStarted: () => void inFlight++,
    requestFinished: (family: string, route: string, status: number, seconds: number) => {
      inFlight = Math.max(0, inFlight - 1)
      requests.at({ family, route, status: String(status) }).value++
      observe(requestSeconds.at({ family, route }).value, seconds)
    },
    modelCall: (o: ModelCallOutcome) => {
      modelRequests.at({ family: o.family, route: o.route, model: o.model, status: o.status }).value++
      for (const [kind, n] of Object.entries(o.tokens)) if (n > 0) tokens.at({ model: o.model, kind }).value += n
      observe(modelSeconds.at({ model: o.model }).value, o.latencyMs / 1000)
      if (o.ttftMs !== undefined) observe(ttftSeconds.at({ model: o.model }).value, o.ttftMs / 1000)
      const failed = o.status !== "ok" && o.status !== "cancelled"
      if (failed && o.provider !== "") upstreamErrors.at({ provider: o.provider, kind: o.status }).value++
      if (o.provider !== "") remember(o.provider, failed)
      if (o.costUsd !== undefined && o.costUsd !== null && o.costUsd > 0 && o.app !== undefined) cost.at({ app: o.app, model: o.model }).value += o.costUsd
    },
    hostToolCall: (o: HostToolCallOutcome) => {
      hostToolCalls.at({ app: o.app, server: o.server, tool: o.tool, outcome: o.outcome }).value++
      observe(hostToolSeconds.at({ server: o.server, tool: o.tool }).value, o.latencyMs / 1000)
    },
    /** host tool calls so far on this replica, by app */
    hostToolCallsOf: (app: string): number => {
      let n = 0
      for (const s of hostToolCalls.series.values()) if (s.labels.app === app) n += s.value
      return n
    },
    /** recent calls and failures per provider (last five minutes) */
    recentProviders: () => {
      const oldest = Math.floor((Date.now() - RECENT_MS) / 1000)
      return [...recent].map(([provider, ring]) => {
        let calls = 0
        let failures = 0
        for (let i = 0; i < buckets; i++) {
          if (ring.second[i] <= oldest) continue
          calls += ring.calls[i]
          failures += ring.failures[i]
        }
        return { provider, calls, failures, errorRate: calls === 0 ? 0 : Math.round((failures / calls) * 10000) / 10000 }
      })
    },
    requestsInFlight: () => inFlight,
    /**
     * usage records not kept: `buffer_full` while the database was not answering, `refused` when
     * the database answered but would not store the record
     */
    usageRecordsDropped: (reason: "buffer_full" | "refused", n: number) => void (usageDropped.at({ reason }).value += n),
    /** the Prometheus text exposition (version 0.0.4) */
    render: (gauges: Gauges): string => {
      const out: Array<string> = []
      const counter = (name: string, help: string, family: Family<number>) => {
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`)
        for (const s of family.series.values()) out.push(`${name}${labelText(s.labels)} ${s.value}`)
      }
      const histogram = (name: string, help: string, family: Family<Histogram>) => {
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`)
        for (const s of family.series.values()) {
          BUCKETS.forEach((le, i) => out.push(`${name}_bucket${labelText({ ...s.labels, le: String(le) })} ${s.value.counts[i]}`))
          out.push(`${name}_bucket${labelText({ ...s.labels, le: "+Inf" })} ${s.value.count}`)
          out.push(`${name}_sum${labelText(s.labels)} ${s.value.sum}`)
          out.push(`${name}_count${labelText(s.labels)} ${s.value.count}`)
        }
      }
      const gauge = (name: string, help: string, value: number) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`)
      counter("gateway_requests_total", "HTTP requests answered, by protocol family, route and status.", requests)
      histogram("gateway_request_duration_seconds", "Time to answer an HTTP request, by family and route.", requestSeconds)
      counter("gateway_model_requests_total", "Model calls, by family, route, model and outcome (ok or the error code).", modelRequests)
      counter("gateway_tokens_total", "Tokens of model calls, by model and kind (input, output, cacheRead, cacheWrite, reasoning).", tokens)
      histogram("gateway_model_call_duration_seconds", "Duration of model calls, by model.", modelSeconds)
      histogram("gateway_time_to_first_token_seconds", "Time to the first model event of streamed calls, by model.", ttftSeconds)
      counter("gateway_upstream_errors_total", "Failed model calls, by provider and error kind.", upstreamErrors)
      counter("gateway_cost_usd_total", "What model calls cost in USD (priced models only), by app and model.", cost)
      counter(
        "gateway_usage_records_dropped_total",
        "Usage records not written, by reason: buffer_full (the database was not answering and the buffer was full) or refused (the database would not store the record).",
        usageDropped
      )
      counter("gateway_host_tool_calls_total", "Host tool calls the gateway ran, by app, tool server, tool and outcome (ok, error, timeout, failed).", hostToolCalls)
      histogram("gateway_host_tool_call_duration_seconds", "Duration of host tool calls, by tool server and tool.", hostToolSeconds)
      const servers = gauges.toolServers ?? []
      out.push("# HELP gateway_tool_server_ready Each tool server connection of this replica: 1 when it has its tool list, 0 otherwise.", "# TYPE gateway_tool_server_ready gauge")
      for (const s of servers) out.push(`gateway_tool_server_ready${labelText({ server: s.server, ...(s.app !== undefined ? { app: s.app } : {}) })} ${s.state === "ready" ? 1 : 0}`)
      out.push("# HELP gateway_tool_server_tools Tools each tool server connection lists.", "# TYPE gateway_tool_server_tools gauge")
      for (const s of servers) out.push(`gateway_tool_server_tools${labelText({ server: s.server, ...(s.app !== undefined ? { app: s.app } : {}) })} ${s.tools}`)
      gauge("gateway_requests_in_flight", "HTTP requests being handled.", gauges.requestsInFlight)
      gauge("gateway_model_requests_in_flight", "Model calls holding a concurrency slot.", gauges.modelRequestsInFlight)
      gauge("gateway_body_bytes_in_flight", "Request body bytes being read.", gauges.bodyBytesInFlight)
      const targets = gauges.targets ?? []
      const perTarget = (name: string, help: string, lines: (t: TargetHealth) => ReadonlyArray<string>) => {
        out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`)
        for (const t of targets) out.push(...lines(t))
      }
      const series = (name: string, t: TargetHealth, value: number | undefined, labels: Readonly<Record<string, string>> = {}) =>
        value === undefined ? [] : [`${name}${labelText({ target: t.target, ...labels })} ${value}`]
      perTarget("gateway_target_state", "Health of each target on this replica: 1 for its state (healthy, cooled, probing), 0 for the others.", (t) =>
        TARGET_STATES.flatMap((state) => series("gateway_target_state", t, t.state === state ? 1 : 0, { state }))
      )
      perTarget("gateway_target_in_flight", "Calls on each target now (from the attempt to the end of the answer).", (t) => series("gateway_target_in_flight", t, t.inFlight))
      perTarget("gateway_target_error_rate", "Moving share of each target's attempts that failed retryably (about the last twenty).", (t) =>
        series("gateway_target_error_rate", t, t.errorRate)
      )
      perTarget("gateway_target_ttft_seconds", "Moving average of each target's time to its first event.", (t) =>
        series("gateway_target_ttft_seconds", t, t.ttftMs === undefined ? undefined : t.ttftMs / 1000)
      )
      perTarget("gateway_target_latency_seconds", "Moving average of each target's whole call.", (t) =>
        series("gateway_target_latency_seconds", t, t.latencyMs === undefined ? undefined : t.latencyMs / 1000)
      )
      return `${out.join("\n")}\n`
    }
  }
}

export class Metrics extends Context.Tag("gateway/Metrics")<Metrics, ReturnType<typeof makeMetrics>>() {
  static readonly layer = Layer.sync(Metrics, makeMetrics)
}
