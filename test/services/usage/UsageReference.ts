import { dayOf, type Percentiles, type Totals, type UsageFilter, type UsageRecord, type UsageReport } from "../../../src/services/usage/Usage.js"

/**
 * The usage report's definition, computed in memory over every record (as the gateway did before
 * reports were aggregated in SQL): the SQL reports of every backend must say exactly this.
 * Groups are listed in the order they first occur in time; percentiles are nearest-rank (the value
 * at rank ceil(q * n) of the sorted values) rounded to two decimals.
 */

type MutableTotals = { -readonly [K in keyof Totals]: number }
type ShownTotals = Omit<MutableTotals, "costUsd"> & { costUsd: number | null }

const zero = (): MutableTotals => ({ requests: 0, errors: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0, unpricedCalls: 0 })

/** cost totals to the micro-dollar, as reported; null when every call of the group is unpriced */
const shown = (t: MutableTotals): ShownTotals => ({ ...t, costUsd: t.requests > 0 && t.unpricedCalls === t.requests ? null : Math.round(t.costUsd * 1e6) / 1e6 })

const percentiles = (values: Array<number>): Percentiles => {
  if (values.length === 0) return { p50: null, p90: null, p99: null }
  values.sort((a, b) => a - b)
  const at = (q: number) => Math.round(values[Math.min(values.length - 1, Math.ceil(q * values.length) - 1)] * 100) / 100
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99) }
}

const entry = <K, V>(map: Map<K, V>, key: K, make: () => V): V => {
  let value = map.get(key)
  if (value === undefined) map.set(key, (value = make()))
  return value
}

export const referenceReport = (records: ReadonlyArray<UsageRecord>, filter: UsageFilter): UsageReport => {
  const rows = records
    .filter((r) => dayOf(r.time) >= filter.from && dayOf(r.time) <= filter.to)
    .filter((r) => filter.app === undefined || r.app === filter.app)
    .filter((r) => filter.user === undefined || r.user === filter.user)
    .filter((r) => filter.session === undefined || r.clientSession === filter.session)
    .sort((a, b) => a.time - b.time)
  const totals = zero()
  const latencies: Array<number> = []
  const ttfts: Array<number> = []
  const days = new Map<string, Map<string, { totals: MutableTotals; latencies: Array<number> }>>()
  const dayApps = new Map<string, Map<string, MutableTotals>>()
  const dayKeys = new Map<string, Map<string, MutableTotals>>()
  const users = new Map<string, MutableTotals>()
  const sessions = new Map<string, MutableTotals>()
  const agents = new Map<string, { agent: string | null; parentAgent: string | null; totals: MutableTotals }>()
  const hourly = (Date.parse(filter.to) - Date.parse(filter.from)) / 86_400_000 < 7 ? new Map<string, MutableTotals>() : undefined
  const add = (t: MutableTotals, r: UsageRecord) => {
    t.requests++
    if (r.status !== "ok") t.errors++
    t.inputTokens += r.usage.inputTokens
    t.outputTokens += r.usage.outputTokens
    t.cacheReadTokens += r.usage.cacheReadTokens
    t.cacheWriteTokens += r.usage.cacheWriteTokens
    t.reasoningTokens += r.usage.reasoningTokens
    if (r.costUsd === undefined || r.costUsd === null) t.unpricedCalls++
    else t.costUsd += r.costUsd
  }
  for (const r of rows) {
    const day = dayOf(r.time)
    add(totals, r)
    latencies.push(r.latencyMs)
    if (r.ttftMs !== undefined) ttfts.push(r.ttftMs)
    const model = entry(entry(days, day, () => new Map()), r.model ?? r.requestedModel, () => ({ totals: zero(), latencies: [] }))
    add(model.totals, r)
    model.latencies.push(r.latencyMs)
    add(entry(entry(dayApps, day, () => new Map()), r.app, zero), r)
    add(entry(entry(dayKeys, day, () => new Map()), r.keyId, zero), r)
    if (hourly !== undefined) add(entry(hourly, new Date(r.time).toISOString().slice(0, 13), zero), r)
    if (r.user !== undefined) add(entry(users, r.user, zero), r)
    if (r.clientSession !== undefined) add(entry(sessions, r.clientSession, zero), r)
    add(entry(agents, `${r.agent ?? ""}\u0000${r.parentAgent ?? ""}`, () => ({ agent: r.agent ?? null, parentAgent: r.parentAgent ?? null, totals: zero() })).totals, r)
  }
  return {
    from: filter.from,
    to: filter.to,
    app: filter.app ?? null,
    user: filter.user ?? null,
    session: filter.session ?? null,
    totals: { ...shown(totals), latencyMs: percentiles(latencies), ttftMs: percentiles(ttfts) },
    days: [...days].map(([day, byModel]) => ({
      day,
      models: [...byModel].map(([model, e]) => ({ model, ...shown(e.totals), latencyMs: percentiles(e.latencies) })),
      apps: [...(dayApps.get(day) ?? new Map<string, MutableTotals>())].map(([app, t]) => ({ app, ...shown(t) })),
      keys: [...(dayKeys.get(day) ?? new Map<string, MutableTotals>())].map(([keyId, t]) => ({ keyId, ...shown(t) }))
    })),
    ...(hourly !== undefined ? { hours: [...hourly].sort((a, b) => a[0].localeCompare(b[0])).map(([hour, t]) => ({ hour, ...shown(t) })) } : {}),
    topUsers: [...users]
      .sort((a, b) => b[1].requests - a[1].requests)
      .slice(0, 20)
      .map(([user, t]) => ({ user, ...shown(t) })),
    topSessions: [...sessions]
      .sort((a, b) => b[1].requests - a[1].requests)
      .slice(0, 20)
      .map(([session, t]) => ({ session, ...shown(t) })),
    ...(filter.session !== undefined ? { agents: [...agents.values()].map((a) => ({ agent: a.agent, parentAgent: a.parentAgent, ...shown(a.totals) })) } : {}),
    // no host tool calls among these records; a report by user or session has none
    ...(filter.user === undefined && filter.session === undefined ? { hostTools: [] } : {})
  }
}

/** A small deterministic generator (mulberry32). */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/**
 * 700 records over 2026-02-26 and 2026-03-01 to 03: three apps, four models (failed calls with no
 * model, counted on the alias), 25 users (more than the top 20) and calls without one, latencies
 * with ties and fractions, TTFT on some calls; distinct times, recorded out of time order.
 */
export const sampleRecords = (): ReadonlyArray<UsageRecord> => {
  const next = random(16)
  const pick = <A>(values: ReadonlyArray<A>): A => values[Math.floor(next() * values.length)]
  const start = Date.parse("2026-03-01T00:00:00Z")
  const records: Array<UsageRecord> = []
  // sessions and agents from a generator of their own: the other fields are as before they existed
  const side = random(26)
  for (let i = 0; i < 700; i++) {
    const time = i < 40 ? Date.parse("2026-02-26T10:00:00Z") + i * 60_000 : start + (i - 40) * 392_711 + Math.floor(next() * 1000)
    const failed = next() < 0.1
    const requestedModel = pick(["p/m1", "p/m2", "alias/fast", "p/m3"])
    const user = next() < 0.15 ? undefined : `user-${Math.floor(25 * next() ** 2)}`
    records.push({
      time,
      app: pick(["team-a", "team-a", "team-b", "team-c"]),
      ...(user !== undefined ? { user } : {}),
      keyId: pick(["key_1", "key_2"]),
      protocol: pick(["openai", "anthropic"]),
      route: "chat",
      requestedModel,
      ...(failed && next() < 0.5 ? {} : { model: requestedModel === "alias/fast" ? "p/m1" : requestedModel, provider: "p" }),
      status: failed ? pick(["upstream_error", "timeout"]) : "ok",
      // p/m1 and p/m2 have prices (whole micro-dollars); p/m3 and calls that never reached a model have none
      costUsd: requestedModel === "p/m1" || requestedModel === "p/m2" || requestedModel === "alias/fast" ? Math.floor(next() * 50_000) / 1e6 : null,
      usage: {
        inputTokens: Math.floor(next() * 5000),
        outputTokens: Math.floor(next() * 800),
        cacheReadTokens: Math.floor(next() * 300),
        cacheWriteTokens: Math.floor(next() * 50),
        reasoningTokens: Math.floor(next() * 100)
      },
      latencyMs: next() < 0.2 ? 250 : Math.round(next() * 5_000_000) / 1000,
      ...(next() < 0.6 ? { ttftMs: Math.round(next() * 900_000) / 1000 + 0.005 } : {}),
      // 30 sessions (more than the top 20), some calls without one; a session's subagents name their parent
      ...(side() < 0.2 ? {} : { clientSession: `session-${Math.floor(30 * side() ** 2)}` }),
      ...(side() < 0.7 ? {} : { agent: `agent-${Math.floor(3 * side())}`, parentAgent: "main" })
    })
  }
  // recorded in the order calls finish, not the order they started
  for (let i = records.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[records[i], records[j]] = [records[j], records[i]]
  }
  return records
}
