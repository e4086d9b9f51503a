import { Clock, Context, Effect, Layer } from "effect"
import type { UpstreamError } from "../../domain/Errors.js"
import { targetName, type ProviderTarget } from "../../providers/Provider.js"

/**
 * The health of each target (a provider's model, or one key of it), learned by this replica from
 * its own calls. A target that fails retryably (refused or reset connection, 5xx, overload, 429,
 * timeout) is cooled down: for the upstream's `Retry-After` when it sends one, otherwise once it
 * has failed `FAILURES` times within `WINDOW_MS`, for a backoff that doubles with each cooldown in
 * a row (from `FIRST_BACKOFF_MS` to `MAX_BACKOFF_MS`). When the cooldown ends one call probes the
 * target (half-open) while the others keep away from it; a success closes it again, a failure
 * cools it down anew. Beside its state each target has the figures strategies and the status page
 * read: calls in flight, and moving averages of time to first event, latency and error rate.
 */

export const FAILURES = 3
export const WINDOW_MS = 10_000
export const FIRST_BACKOFF_MS = 1_000
export const MAX_BACKOFF_MS = 60_000

/** records kept at most (a client may name any model of a provider): the oldest go first */
export const MAX_RECORDS = 10_000

/** weight of the newest call in the moving averages of time to first event and latency */
export const LATENCY_ALPHA = 0.5
/** weight of the newest call in the moving error rate (about the last twenty calls) */
export const ERROR_ALPHA = 0.1

export type TargetState = "healthy" | "cooled" | "probing"

interface Record {
  /** times of the retryable failures within the window */
  failures: Array<number>
  /** epoch ms until which the target rests (0: not cooled) */
  cooledUntil: number
  /** the next cooldown without Retry-After */
  backoffMs: number
  /** a call is probing the target after its cooldown */
  probing: boolean
  /** calls on the target now: from the attempt until the answer ends or the attempt fails */
  inFlight: number
  /** moving average of the time to the first event, ms (undefined until one answered) */
  ttftMs: number | undefined
  /** moving average of a whole call, ms */
  latencyMs: number | undefined
  /** moving share of attempts that failed retryably */
  errorRate: number
}

/** What a strategy reads of a target. */
export interface TargetLoad {
  readonly inFlight: number
  readonly ttftMs: number | undefined
  readonly errorRate: number
}

const idle: TargetLoad = { inFlight: 0, ttftMs: undefined, errorRate: 0 }

export interface TargetHealth {
  readonly target: string
  readonly state: TargetState
  /** epoch ms the cooldown ends (cooled only) */
  readonly cooledUntil?: number
  readonly inFlight: number
  readonly errorRate: number
  readonly ttftMs?: number
  readonly latencyMs?: number
}

const average = (previous: number | undefined, sample: number, alpha: number) => (previous === undefined ? sample : previous + alpha * (sample - previous))

export class Health extends Context.Tag("gateway/Health")<
  Health,
  {
    /**
     * The order to try `targets` in: the healthy ones as given, then (while a cooled target's
     * cooldown runs) the cooled ones, the one whose cooldown ends first first. A target whose
     * cooldown has ended and that no call is probing is healthy again for one call: that call is
     * its probe (`take` marks it).
     */
    readonly order: (targets: ReadonlyArray<ProviderTarget>) => Effect.Effect<ReadonlyArray<ProviderTarget>>
    /** a call is about to use `target` (a target out of its cooldown becomes probing); it is in flight until `done`, `failed` or `released` */
    readonly take: (target: ProviderTarget) => void
    /** the target answered: its first events arrived after `ttftMs` */
    readonly succeeded: (target: ProviderTarget, ttftMs: number) => void
    /** the answer of a call that `succeeded` ended (or its caller left) after `latencyMs` */
    readonly done: (target: ProviderTarget, latencyMs: number) => void
    /** the target failed before any output; only retryable failures count against it */
    readonly failed: (target: ProviderTarget, error: UpstreamError) => Effect.Effect<void>
    /** the call on `target` ended without an answer or a failure (cancelled): a probe is free again */
    readonly released: (target: ProviderTarget) => void
    /** calls in flight and time to first event of a target, by its name */
    readonly load: (name: string) => TargetLoad
    /** every target called on this replica, with its state and figures now */
    readonly states: Effect.Effect<ReadonlyArray<TargetHealth>>
  }
>() {
  static readonly make = Effect.sync(() => {
    const records = new Map<string, Record>()
    const recordOf = (name: string): Record => {
      let found = records.get(name)
      if (found === undefined) {
        if (records.size >= MAX_RECORDS) records.delete(records.keys().next().value as string)
        records.set(name, (found = { failures: [], cooledUntil: 0, backoffMs: FIRST_BACKOFF_MS, probing: false, inFlight: 0, ttftMs: undefined, latencyMs: undefined, errorRate: 0 }))
      }
      return found
    }

    const order = (targets: ReadonlyArray<ProviderTarget>) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        // nothing cooled (nearly always): the targets as given
        let cooled: Array<{ readonly target: ProviderTarget; readonly until: number }> | undefined
        for (const target of targets) {
          const record = records.get(targetName(target))
          if (record === undefined) continue
          if (record.cooledUntil > now || record.probing) (cooled ??= []).push({ target, until: record.probing ? Number.MAX_SAFE_INTEGER : record.cooledUntil })
        }
        if (cooled === undefined) return targets
        const resting = new Set(cooled.map((c) => c.target))
        cooled.sort((a, b) => a.until - b.until)
        return [...targets.filter((t) => !resting.has(t)), ...cooled.map((c) => c.target)]
      })

    const take = (target: ProviderTarget) => {
      const record = recordOf(targetName(target))
      record.inFlight++
      // out of its cooldown: this call is the probe
      if (record.cooledUntil > 0) {
        record.cooledUntil = 0
        record.probing = true
      }
    }

    /** one call fewer in flight (a record evicted meanwhile is not made again) */
    const leave = (name: string): Record | undefined => {
      const record = records.get(name)
      if (record !== undefined && record.inFlight > 0) record.inFlight--
      return record
    }

    const succeeded = (target: ProviderTarget, ttftMs: number) => {
      const record = records.get(targetName(target))
      if (record === undefined) return
      record.ttftMs = average(record.ttftMs, ttftMs, LATENCY_ALPHA)
      record.errorRate = average(record.errorRate, 0, ERROR_ALPHA)
      if (record.failures.length === 0 && record.cooledUntil === 0 && !record.probing) return
      record.failures = []
      record.cooledUntil = 0
      record.backoffMs = FIRST_BACKOFF_MS
      record.probing = false
    }

    const done = (target: ProviderTarget, latencyMs: number) => {
      const record = leave(targetName(target))
      if (record !== undefined) record.latencyMs = average(record.latencyMs, latencyMs, LATENCY_ALPHA)
    }

    const load = (name: string): TargetLoad => records.get(name) ?? idle

    const failed = (target: ProviderTarget, error: UpstreamError) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const name = targetName(target)
        leave(name)
        if (!error.retryable) return
        const record = recordOf(name)
        record.errorRate = average(record.errorRate, 1, ERROR_ALPHA)
        const wasProbing = record.probing
        record.probing = false
        if (error.retryAfter !== undefined && error.retryAfter > 0) {
          record.cooledUntil = now + error.retryAfter * 1000
          record.failures = []
          return
        }
        record.failures = record.failures.filter((t) => now - t < WINDOW_MS)
        record.failures.push(now)
        // a failed probe cools the target again at once, for longer
        if (wasProbing || record.failures.length >= FAILURES) {
          record.cooledUntil = now + record.backoffMs
          record.backoffMs = Math.min(record.backoffMs * 2, MAX_BACKOFF_MS)
          record.failures = []
        }
      })

    const released = (target: ProviderTarget) => {
      const record = leave(targetName(target))
      if (record !== undefined && record.probing) {
        // the probe did not finish: the next call probes
        record.probing = false
        record.cooledUntil = 1
      }
    }

    const states = Effect.map(Clock.currentTimeMillis, (now) =>
      [...records].map(
        ([target, r]): TargetHealth => ({
          target,
          ...(r.probing ? { state: "probing" } : r.cooledUntil > now ? { state: "cooled", cooledUntil: r.cooledUntil } : { state: "healthy" }),
          inFlight: r.inFlight,
          errorRate: Math.round(r.errorRate * 10_000) / 10_000,
          ...(r.ttftMs !== undefined ? { ttftMs: Math.round(r.ttftMs * 100) / 100 } : {}),
          ...(r.latencyMs !== undefined ? { latencyMs: Math.round(r.latencyMs * 100) / 100 } : {})
        })
      )
    )

    return Health.of({ order, take, succeeded, done, failed, released, load, states })
  })

  static readonly layer = Layer.effect(Health, Health.make)
}
