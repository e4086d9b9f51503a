import type { Budget, TrafficLimits } from "../Config.js"

/**
 * Rate limits, concurrency and budgets as counters. Every limit that applies to a call is a
 * `Check`: a counter (a key naming the scope, the kind and the window or period), the limit, and
 * what the call reserves of it. A call is admitted while a counter's used plus reserved is below
 * its limit; when it ends the reservation is replaced by what it really took (`settled`).
 *
 * The `Ledger` is one replica's side of the counters. The shared figures live in a pool (the
 * database): a replica leases a slice of what remains of a counter and admits calls against its
 * lease, then writes back what they spent and gives back what it did not use. The sum of the
 * leases and the used never passes the limit, so the limit holds for every replica together; only
 * a call admitted while a lease had a little left (a token or budget reservation bigger than that
 * remainder) can overshoot, by at most that one call per replica.
 */

export const MINUTE_MS = 60_000
const DAY_MS = 86_400_000

export type Per = Budget["per"]

/** the periods of the minute last asked for (every call asks for the same few) */
const periods = new Map<string, { readonly start: number; readonly end: number }>()
let periodsMinute = -1

/** [start, end) of the UTC calendar period holding `now` (`total`: all time) */
export const periodOf = (per: Per, now: number): { readonly start: number; readonly end: number } => {
  const minute = Math.floor(now / MINUTE_MS)
  if (minute !== periodsMinute) {
    periods.clear()
    periodsMinute = minute
  }
  let found = periods.get(per)
  if (found === undefined) periods.set(per, (found = computePeriod(per, now)))
  return found
}

const computePeriod = (per: Per, now: number): { readonly start: number; readonly end: number } => {
  if (per === "total") return { start: 0, end: Number.POSITIVE_INFINITY }
  const d = new Date(now)
  const y = d.getUTCFullYear()
  const m = d.getUTCMonth()
  const day = d.getUTCDate()
  if (per === "day") return { start: Date.UTC(y, m, day), end: Date.UTC(y, m, day + 1) }
  if (per === "month") return { start: Date.UTC(y, m, 1), end: Date.UTC(y, m + 1, 1) }
  // ISO weeks: Monday to Sunday
  const start = Date.UTC(y, m, day - ((d.getUTCDay() + 6) % 7))
  return { start, end: start + 7 * DAY_MS }
}

/** What a counter counts. */
export type Kind = "requests" | "tokens" | "concurrency" | "usd" | "budgetTokens"

/** One limit that applies to a call, with what the call reserves of it. */
export interface Check {
  /** the counter: scope, kind, window or period */
  readonly key: string
  readonly kind: Kind
  /** who the limit belongs to, as the refusal names it: `app team-a`, `key key_0123` */
  readonly scope: string
  /** the limit as configured: `requestsPerMinute`, `budgets[1] (usd 100 per month)` */
  readonly name: string
  /** in the counter's unit: calls, tokens, nano-USD */
  readonly limit: number
  /** reserved while the call runs */
  readonly amount: number
  /** epoch ms at which the window or period ends (Infinity: a `total` budget, or concurrency) */
  readonly resetAt: number
}

/** What a finished call really took. */
export interface Taken {
  readonly tokens: number
  /** null: the model has no price */
  readonly usd: number | null
}

/** What a check's counter keeps once the call is over. */
export const settled = (kind: Kind, taken: Taken): number => {
  switch (kind) {
    case "requests":
      return 1
    case "concurrency":
      return 0
    case "tokens":
    case "budgetTokens":
      return taken.tokens
    case "usd":
      return nanoUsd(taken.usd ?? 0)
  }
}

/** USD are counted in whole nano-USD: every counter holds whole numbers, so sums are exact. */
export const NANO = 1e9
export const nanoUsd = (usd: number): number => Math.round(usd * NANO)

/** The least a check needs left to admit a call: its amount, and something in any case. */
const need = (check: Check): number => Math.max(check.amount, 1)

/** What a call estimates it takes before it runs. */
export interface Estimate {
  readonly tokens: number
  readonly usd: number
}

/** The checks of one scope's limits for a call at `now`. */
export const checksOf = (scope: { readonly id: string; readonly label: string }, limits: TrafficLimits | undefined, estimate: () => Estimate, now: number): Array<Check> => {
  const checks: Array<Check> = []
  if (limits === undefined) return checks
  const window = Math.floor(now / MINUTE_MS)
  const windowEnd = (window + 1) * MINUTE_MS
  if (limits.concurrency !== undefined) {
    checks.push({ key: `${scope.id}|c`, kind: "concurrency", scope: scope.label, name: "concurrency", limit: limits.concurrency, amount: 1, resetAt: Number.POSITIVE_INFINITY })
  }
  if (limits.requestsPerMinute !== undefined) {
    checks.push({ key: `${scope.id}|r|${window}`, kind: "requests", scope: scope.label, name: "requestsPerMinute", limit: limits.requestsPerMinute, amount: 1, resetAt: windowEnd })
  }
  let estimated: Estimate | undefined
  const est = () => (estimated ??= estimate())
  if (limits.tokensPerMinute !== undefined) {
    checks.push({ key: `${scope.id}|t|${window}`, kind: "tokens", scope: scope.label, name: "tokensPerMinute", limit: limits.tokensPerMinute, amount: est().tokens, resetAt: windowEnd })
  }
  limits.budgets?.forEach((budget, i) => {
    const period = periodOf(budget.per, now)
    const usd = budget.usd !== undefined
    const name = `budgets[${i}] (${usd ? `usd ${budget.usd}` : `tokens ${budget.tokens}`} per ${budget.per})`
    checks.push({
      key: `${scope.id}|${usd ? "u" : "b"}|${budget.per}|${period.start}`,
      kind: usd ? "usd" : "budgetTokens",
      scope: scope.label,
      name,
      limit: usd ? nanoUsd(budget.usd as number) : (budget.tokens as number),
      amount: usd ? Math.ceil(est().usd * NANO) : est().tokens,
      resetAt: period.end
    })
  })
  return checks
}

/** One counter as this replica holds it. */
export interface Entry {
  readonly key: string
  readonly kind: Kind
  limit: number
  /** this replica's lease: what it may admit against (the pool holds the same figure) */
  granted: number
  /** reserved by this replica's calls in flight */
  inFlight: number
  /** spent by this replica's finished calls and not yet written to the pool */
  spent: number
  /** the pool's used plus the other replicas' leases, when last read (for `remaining`) */
  others: number
  /** epoch ms before which the pool is not asked again: it had nothing left */
  emptyUntil: number
  /** taken off the lease here (a lowered limit), still to be taken off in the pool */
  toReturn: number
  /** reserved by calls admitted since the last write: a busy lease keeps that much more */
  admitted: number
  /** epoch ms after which nobody needs the counter (its window or period is over) */
  readonly keepUntil: number
}

/** What is left of a counter for a check, as far as this replica knows (all replicas together). */
export const remaining = (entry: Entry): number => Math.max(0, entry.limit - entry.others - entry.spent - entry.inFlight)

/** A change to write to the pool for one counter: `used += spent`, `lease -= giveBack + fromLease`. */
export interface Write {
  readonly key: string
  readonly spent: number
  /** the lease beyond the calls in flight, returned */
  readonly giveBack: number
  /** the part of `spent` the lease held (the rest overshot it) */
  readonly fromLease: number
  readonly keepUntil: number
}

/** What `Ledger.reserve` did with one check. */
export type Step =
  | { readonly _tag: "reserved" }
  | { readonly _tag: "refused" }
  /** the lease is short: ask the pool for `want` more, then try again */
  | { readonly _tag: "take"; readonly want: number }

/** How long a counter the pool had nothing left of is not asked again (refusals meanwhile cost no query) */
export const EMPTY_FOR_MS = 250

/** Keep a counter this long after its window ends (a call admitted in it may still settle). */
const KEEP_AFTER_MS = 15 * MINUTE_MS

export class Ledger {
  readonly entries = new Map<string, Entry>()

  entry(check: Check): Entry {
    let entry = this.entries.get(check.key)
    if (entry === undefined) {
      entry = {
        key: check.key,
        kind: check.kind,
        limit: check.limit,
        granted: 0,
        inFlight: 0,
        spent: 0,
        others: 0,
        emptyUntil: 0,
        toReturn: 0,
        admitted: 0,
        keepUntil: check.resetAt === Number.POSITIVE_INFINITY ? Number.POSITIVE_INFINITY : check.resetAt + KEEP_AFTER_MS
      }
      this.entries.set(check.key, entry)
    }
    // a limit changed by the config or a PATCH takes effect at once (a raised one is asked for afresh)
    if (entry.limit !== check.limit) {
      if (check.limit > entry.limit) entry.emptyUntil = 0
      else {
        // a lowered limit: the lease keeps no more than the new limit leaves (the rest goes back with the next write)
        const keep = Math.max(entry.spent + entry.inFlight, check.limit - entry.others)
        if (entry.granted > keep) {
          entry.toReturn += entry.granted - keep
          entry.granted = keep
        }
      }
      entry.limit = check.limit
    }
    return entry
  }

  /**
   * Reserve a call's amount of one check, or say that it is refused or that the lease must grow
   * first. A call reserves its checks one after the other, each as soon as it passes, so what a
   * lease grew by for it is held while it waits for the next check (`unreserve` undoes them when
   * a later check refuses). A lease too short for the reservation still admits the call when the
   * pool has nothing more and the lease has something left: the window's used plus reserved is
   * below the limit.
   */
  reserve(check: Check, now: number): Step {
    const entry = this.entry(check)
    const usable = entry.granted - entry.spent - entry.inFlight
    if (usable < need(check)) {
      if (now >= entry.emptyUntil) return { _tag: "take", want: need(check) - usable }
      if (usable <= 0) return { _tag: "refused" }
    }
    entry.inFlight += check.amount
    entry.admitted += check.amount
    return { _tag: "reserved" }
  }

  /** Give back the reservations of checks whose call was not admitted after all. */
  unreserve(checks: ReadonlyArray<Check>): void {
    for (const check of checks) {
      const entry = this.entries.get(check.key)
      if (entry !== undefined) entry.inFlight -= check.amount
    }
  }

  /** The pool granted `grant` more of a counter, whose used plus other leases is `others`. */
  granted(check: Check, want: number, grant: number, others: number, now: number): void {
    const entry = this.entry(check)
    entry.granted += grant
    entry.others = others
    if (grant < want) entry.emptyUntil = now + EMPTY_FOR_MS
  }

  /** A call ended: its reservations are replaced by what it took. */
  settle(checks: ReadonlyArray<Check>, taken: Taken): void {
    for (const check of checks) {
      const entry = this.entries.get(check.key)
      if (entry === undefined) continue
      entry.inFlight -= check.amount
      entry.spent += settled(check.kind, taken)
    }
  }

  /**
   * The writes that bring the pool up to date: each counter's spending moves from its lease to its
   * used, and what the lease holds beyond the calls in flight goes back, less what a busy lease
   * keeps for the next interval (twice what it admitted in the last one; an idle lease keeps
   * nothing). The give-back is taken off the lease here at once (no call can be admitted against
   * it while the write is under way); `wrote` or `notWritten` finishes the change.
   */
  writes(now: number): Array<Write> {
    const writes: Array<Write> = []
    for (const entry of this.entries.values()) {
      if (entry.spent === 0 && entry.granted <= entry.inFlight && entry.toReturn === 0) {
        entry.admitted = 0
        if (entry.inFlight === 0 && entry.granted === 0 && now > entry.keepUntil) this.entries.delete(entry.key)
        continue
      }
      const spent = entry.spent
      const unused = Math.max(0, entry.granted - spent - entry.inFlight - 2 * entry.admitted)
      entry.admitted = 0
      entry.granted -= unused
      const giveBack = unused + entry.toReturn
      entry.toReturn = 0
      // what was spent beyond the lease (a call bigger than what was left) leaves it empty
      const fromLease = Math.min(spent, entry.granted)
      writes.push({ key: entry.key, spent, giveBack, fromLease, keepUntil: entry.keepUntil })
    }
    return writes
  }

  /** The writes reached the pool. */
  wrote(writes: ReadonlyArray<Write>): void {
    for (const write of writes) {
      const entry = this.entries.get(write.key)
      if (entry === undefined) continue
      entry.granted -= write.fromLease
      entry.spent -= write.spent
      entry.others += write.spent
    }
  }

  /** The writes did not reach the pool: what was to go back stays to go back (the spending waits for the next write). */
  notWritten(writes: ReadonlyArray<Write>): void {
    for (const write of writes) {
      const entry = this.entries.get(write.key)
      if (entry === undefined) continue
      entry.toReturn += write.giveBack
    }
  }
}

/** The limits a call is bound by: its app's and its key's (each counted on its own: the tighter refuses first). */
export const allChecks = (
  app: { readonly name: string; readonly limits: TrafficLimits | undefined },
  key: { readonly id: string; readonly limits: TrafficLimits | undefined } | undefined,
  estimate: () => Estimate,
  now: number
): Array<Check> => {
  const checks = checksOf({ id: `a:${app.name}`, label: `app ${app.name}` }, app.limits, estimate, now)
  if (key !== undefined && key.limits !== undefined) checks.push(...checksOf({ id: `k:${key.id}`, label: `key ${key.id}` }, key.limits, estimate, now))
  return checks
}

/** A duration as OpenAI writes its reset headers: `120ms`, `1s`, `59.5s`, `6m0s`, `1h2m3s`. */
export const resetDuration = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`
  const hours = Math.floor(ms / 3_600_000)
  const minutes = Math.floor((ms % 3_600_000) / 60_000)
  const seconds = Math.round((ms % 60_000) / 10) / 100
  const s = `${seconds}s`
  if (hours > 0) return `${hours}h${minutes}m${s}`
  if (minutes > 0) return `${minutes}m${s}`
  return s
}

/** One rate limit as the answer's headers show it. */
export interface LimitState {
  readonly limit: number
  readonly remaining: number
  /** epoch ms when the window ends */
  readonly resetAt: number
}

/** The request and token rate limits that bind a call (the tighter of its app's and its key's). */
export interface RateLimitView {
  readonly requests?: LimitState
  readonly tokens?: LimitState
}

/** The view of the rate-limit checks among `checks`, after the call's own reservation. */
export const viewOf = (ledger: Ledger, checks: ReadonlyArray<Check>): RateLimitView | undefined => {
  let requests: LimitState | undefined
  let tokens: LimitState | undefined
  for (const check of checks) {
    if (check.kind !== "requests" && check.kind !== "tokens") continue
    const entry = ledger.entries.get(check.key)
    if (entry === undefined) continue
    const state = { limit: check.limit, remaining: Math.floor(remaining(entry)), resetAt: check.resetAt }
    if (check.kind === "requests") {
      if (requests === undefined || state.remaining < requests.remaining) requests = state
    } else if (tokens === undefined || state.remaining < tokens.remaining) tokens = state
  }
  return requests === undefined && tokens === undefined ? undefined : { ...(requests !== undefined ? { requests } : {}), ...(tokens !== undefined ? { tokens } : {}) }
}

/**
 * The headers clients read: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (the reset a
 * duration as OpenAI writes it), and on Messages routes also
 * `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (the reset an RFC 3339 time).
 */
export const rateLimitHeaders = (view: RateLimitView, messages: boolean, now: number, into: Record<string, string> = {}): Record<string, string> => {
  for (const kind of ["requests", "tokens"] as const) {
    const state = view[kind]
    if (state === undefined) continue
    into[`x-ratelimit-limit-${kind}`] = String(state.limit)
    into[`x-ratelimit-remaining-${kind}`] = String(state.remaining)
    into[`x-ratelimit-reset-${kind}`] = resetDuration(state.resetAt - now)
    if (messages) {
      into[`anthropic-ratelimit-${kind}-limit`] = String(state.limit)
      into[`anthropic-ratelimit-${kind}-remaining`] = String(state.remaining)
      into[`anthropic-ratelimit-${kind}-reset`] = new Date(state.resetAt).toISOString().replace(/\.\d{3}Z$/, "Z")
    }
  }
  return into
}
