/**
 * Property tests of rate limits and budgets (issue 17): random schedules of admissions,
 * completions, failures and disconnects on one to three replicas sharing one pool of counters, on
 * a TestClock (the lease writes run when the clock moves). Whatever the schedule:
 * - requests per minute and concurrency never pass their limits, for all replicas together;
 * - a budget is overshot by at most one call per replica (a call admitted while a little was left);
 * - once every call has ended and the writes ran, nothing is reserved or leased, the counters hold
 *   exactly the sum of what the calls took, and an app that has not spent its budget is admitted.
 */
import { describe, expect, it } from "vitest"
import { Effect, Exit, Layer, Scope, TestClock, TestContext } from "effect"
import fc from "fast-check"
import type { TrafficLimits } from "../../../src/Config.js"
import { MINUTE_MS } from "../../../src/domain/Quota.js"
import { Log } from "../../../src/services/ops/Log.js"
import { Quota, type Reservation } from "../../../src/services/quota/Quota.js"
import { memoryPool } from "../../../src/services/quota/QuotaPool.js"

const RPM = 20
const CONCURRENCY = 4
const TOKEN_BUDGET = 5000
const USD_BUDGET = 0.05
/** USD per token of the schedule's calls */
const PRICE = 0.00001
const MAX_ESTIMATE = 400

type Op =
  | { readonly _tag: "admit"; readonly replica: number; readonly estimate: number }
  | { readonly _tag: "end"; readonly pick: number; readonly share: number; readonly how: "ok" | "failed" | "disconnected" }
  | { readonly _tag: "tick"; readonly ms: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ _tag: fc.constant("admit" as const), replica: fc.nat(2), estimate: fc.integer({ min: 1, max: MAX_ESTIMATE }) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      _tag: fc.constant("end" as const),
      pick: fc.nat(),
      share: fc.double({ min: 0, max: 1, noNaN: true }),
      how: fc.constantFrom("ok" as const, "failed" as const, "disconnected" as const)
    })
  },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("tick" as const), ms: fc.integer({ min: 1, max: 4000 }) }) }
)

const limits: TrafficLimits = {
  requestsPerMinute: RPM,
  concurrency: CONCURRENCY,
  budgets: [
    { tokens: TOKEN_BUDGET, per: "total" },
    { usd: USD_BUDGET, per: "total" }
  ]
}

interface Open {
  readonly replica: number
  readonly reservation: Reservation
  readonly estimate: number
}

const run = (replicas: number, ops: ReadonlyArray<Op>) =>
  Effect.gen(function* () {
    const pool = memoryPool()
    let current = limits
    const scope = yield* Scope.make()
    const quotas: Array<Quota["Type"]> = []
    for (let i = 0; i < replicas; i++) {
      quotas.push(yield* Quota.make(pool.forOwner(`r${i}`, 5000), () => current, () => undefined).pipe(Scope.extend(scope)))
    }
    const open: Array<Open> = []
    const admittedPerWindow = new Map<number, number>()
    let tokensTaken = 0
    let usdTaken = 0
    let usdNanos = 0
    let maxInFlight = 0

    for (const step of ops) {
      if (step._tag === "tick") {
        yield* TestClock.adjust(step.ms)
        continue
      }
      if (step._tag === "admit") {
        const quota = quotas[step.replica % replicas]
        const now = yield* TestClock.currentTimeMillis
        const estimate = { tokens: step.estimate, usd: step.estimate * PRICE }
        const exit = yield* Effect.exit(quota.admit("app", "none", () => estimate))
        if (Exit.isSuccess(exit)) {
          const window = Math.floor(now / MINUTE_MS)
          admittedPerWindow.set(window, (admittedPerWindow.get(window) ?? 0) + 1)
          open.push({ replica: step.replica % replicas, reservation: exit.value!, estimate: step.estimate })
          maxInFlight = Math.max(maxInFlight, open.length)
        } else {
          const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
          expect(error?.status).toBe(429)
          expect(["rate_limit_exceeded", "insufficient_quota"]).toContain(error?.code)
        }
        continue
      }
      if (open.length === 0) continue
      const [call] = open.splice(step.pick % open.length, 1)
      // a call takes at most what it reserved (its input estimate and output cap); a failure before output takes nothing
      const tokens = step.how === "failed" ? 0 : Math.round(call.estimate * step.share)
      tokensTaken += tokens
      usdTaken += tokens * PRICE
      usdNanos += Math.round(tokens * PRICE * 1e9)
      quotas[call.replica].settle(call.reservation, { tokens, usd: tokens * PRICE })
    }

    // every call ends; the writes run
    for (const call of open.splice(0)) quotas[call.replica].settle(call.reservation, { tokens: 0, usd: 0 })
    yield* TestClock.adjust(1000)
    yield* TestClock.adjust(1000)
    const now = yield* TestClock.currentTimeMillis

    for (const count of admittedPerWindow.values()) expect(count).toBeLessThanOrEqual(RPM)
    expect(maxInFlight).toBeLessThanOrEqual(CONCURRENCY)
    // a budget overshoots by at most one call per replica
    expect(tokensTaken).toBeLessThanOrEqual(TOKEN_BUDGET + replicas * MAX_ESTIMATE)
    expect(usdTaken).toBeLessThanOrEqual(USD_BUDGET + replicas * MAX_ESTIMATE * PRICE + 1e-9)

    // settled: nothing reserved or leased, the counters hold what the calls took
    for (const quota of quotas) expect(quota.held()).toEqual({ inFlight: 0, leased: 0 })
    const keys = pool.keys()
    for (const key of keys) expect(pool.leased(key, now)).toBe(0)
    const tokenKey = keys.find((k) => k.includes("|b|total|"))
    const usdKey = keys.find((k) => k.includes("|u|total|"))
    if (tokenKey !== undefined) expect(pool.used(tokenKey)).toBe(tokensTaken)
    if (usdKey !== undefined) expect(pool.used(usdKey)).toBe(usdNanos)

    // no phantom refusal: an app below its budgets is admitted on every replica (its budgets alone bind it now)
    current = { budgets: limits.budgets }
    if (tokensTaken < TOKEN_BUDGET && usdTaken < USD_BUDGET - 1e-9) {
      for (const quota of quotas) {
        const reservation = yield* quota.admit("app", "none", () => ({ tokens: 1, usd: PRICE }))
        quota.settle(reservation!, { tokens: 0, usd: 0 })
      }
    }
    yield* Scope.close(scope, Exit.void)
  })

const check = (replicas: number) =>
  fc.assert(
    fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 100 }), (ops) =>
      Effect.runPromise(run(replicas, ops).pipe(Effect.provide(Layer.merge(TestContext.TestContext, Log.layer(false)))))
    ),
    { numRuns: 60, seed: 17 + replicas }
  )

describe("limits and budgets under random schedules", () => {
  it("one replica", () => check(1), 60_000)
  it("two replicas sharing the counters", () => check(2), 60_000)
  it("three replicas sharing the counters", () => check(3), 60_000)
})
