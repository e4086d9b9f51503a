import { Cause, Clock, Effect, type Scope } from "effect"
import type { Log } from "../../services/ops/Log.js"

/**
 * What the stores of per-app records (stored responses, files) share: in-memory counts and bytes
 * per app, so saves run no COUNT or SUM, and a retention sweep forked from request handling at
 * most once a minute.
 */

export interface Tally {
  readonly count: number
  readonly bytes: number
}

export const makeTallies = () => {
  const tallies = new Map<string, Tally>()
  const of = (app: string): Tally => tallies.get(app) ?? { count: 0, bytes: 0 }
  return {
    of,
    adjust: (app: string, count: number, bytes: number) => {
      const tally = of(app)
      const next = { count: tally.count + count, bytes: tally.bytes + bytes }
      if (next.count <= 0) tallies.delete(app)
      else tallies.set(app, next)
    },
    set: (app: string, tally: Tally) => void tallies.set(app, tally),
    /** every app's tally, by app name */
    all: () => [...tallies].map(([app, tally]) => ({ app, ...tally })).sort((a, b) => (a.app < b.app ? -1 : a.app > b.app ? 1 : 0))
  }
}

/**
 * A sweep run from request handling: `maybe` forks `sweep` into `scope` when none ran in the last
 * `everyMs` and none is running; the caller never waits for it. A failure is logged as `event`.
 */
export const throttledSweep = (options: {
  readonly sweep: Effect.Effect<unknown, unknown>
  readonly everyMs: number
  readonly scope: Scope.Scope
  readonly log: Log["Type"]
  readonly event: string
}) => {
  let last = Number.NEGATIVE_INFINITY
  let running = false
  return {
    /** count the start as a sweep (the store sweeps once while it starts) */
    started: Effect.map(Clock.currentTimeMillis, (now) => void (last = now)),
    maybe: Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      if (running || now - last < options.everyMs) return
      last = now
      running = true
      yield* options.sweep.pipe(
        Effect.catchAllCause((cause) => Effect.sync(() => options.log.error(options.event, { reason: Cause.isDie(cause) ? "defect" : "database" }))),
        Effect.ensuring(Effect.sync(() => void (running = false))),
        Effect.interruptible,
        Effect.forkIn(options.scope)
      )
    })
  }
}
