import { Clock, Context, Effect, Layer } from "effect"
import type { UpstreamError } from "../domain/Errors.js"
import { targetName, type ProviderTarget } from "../providers/Provider.js"

/**
 * The health of each target (a provider's model, or one key of it), learned by this replica from
 * its own calls. A target that fails retryably (refused or reset connection, 5xx, overload, 429,
 * timeout) is cooled down: for the upstream's `Retry-After` when it sends one, otherwise once it
 * has failed `FAILURES` times within `WINDOW_MS`, for a backoff that doubles with each cooldown in
 * a row (from `FIRST_BACKOFF_MS` to `MAX_BACKOFF_MS`). When the cooldown ends one call probes the
 * target (half-open) while the others keep away from it; a success closes it again, a failure
 * cools it down anew.
 */

export const FAILURES = 3
export const WINDOW_MS = 10_000
export const FIRST_BACKOFF_MS = 1_000
export const MAX_BACKOFF_MS = 60_000

/** records kept at most (a client may name any model of a provider): the oldest go first */
export const MAX_RECORDS = 10_000

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
}

export interface TargetHealth {
  readonly target: string
  readonly state: TargetState
  /** epoch ms the cooldown ends (cooled only) */
  readonly cooledUntil?: number
}

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
    /** a call is about to use `target` (a target out of its cooldown becomes probing) */
    readonly take: (target: ProviderTarget) => void
    /** the target answered (its first events arrived) */
    readonly succeeded: (target: ProviderTarget) => void
    /** the target failed before any output; only retryable failures count */
    readonly failed: (target: ProviderTarget, error: UpstreamError) => Effect.Effect<void>
    /** the call on `target` ended without an answer or a failure (cancelled): a probe is free again */
    readonly released: (target: ProviderTarget) => void
    /** every target seen, with its state now */
    readonly states: Effect.Effect<ReadonlyArray<TargetHealth>>
  }
>() {
  static readonly make = Effect.sync(() => {
    const records = new Map<string, Record>()
    const recordOf = (name: string): Record => {
      let found = records.get(name)
      if (found === undefined) {
        if (records.size >= MAX_RECORDS) records.delete(records.keys().next().value as string)
        records.set(name, (found = { failures: [], cooledUntil: 0, backoffMs: FIRST_BACKOFF_MS, probing: false }))
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
      const record = records.get(targetName(target))
      // out of its cooldown: this call is the probe
      if (record !== undefined && record.cooledUntil > 0) {
        record.cooledUntil = 0
        record.probing = true
      }
    }

    const succeeded = (target: ProviderTarget) => {
      const record = records.get(targetName(target))
      if (record === undefined) return
      record.failures = []
      record.cooledUntil = 0
      record.backoffMs = FIRST_BACKOFF_MS
      record.probing = false
    }

    const failed = (target: ProviderTarget, error: UpstreamError) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (!error.retryable) return
        const record = recordOf(targetName(target))
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
      const record = records.get(targetName(target))
      if (record !== undefined && record.probing) {
        // the probe did not finish: the next call probes
        record.probing = false
        record.cooledUntil = 1
      }
    }

    const states = Effect.map(Clock.currentTimeMillis, (now) =>
      [...records].map(([target, r]): TargetHealth =>
        r.probing ? { target, state: "probing" } : r.cooledUntil > now ? { target, state: "cooled", cooledUntil: r.cooledUntil } : { target, state: "healthy" }
      )
    )

    return Health.of({ order, take, succeeded, failed, released, states })
  })

  static readonly layer = Layer.effect(Health, Health.make)
}
