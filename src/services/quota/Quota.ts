import { Clock, Context, Deferred, Duration, Effect, FiberId, Layer, Schedule } from "effect"
import * as os from "node:os"
import { randomBytes } from "node:crypto"
import { Settings, type TrafficLimits } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { allChecks, type Check, type Estimate, Ledger, NANO, type RateLimitView, type Step, type Taken, viewOf } from "../../domain/Quota.js"
import { KeyStore } from "../keys/KeyStore.js"
import { Log } from "../ops/Log.js"
import { makeQuotaPool, memoryPool, type QuotaPool, type QuotaUnavailable } from "./QuotaPool.js"

/**
 * Rate limits, concurrency and budgets of apps and runtime keys (src/domain/Quota.ts), for the
 * model runner: `admit` before a model call reserves what the call may take against every limit
 * that binds it, `settle` when the call ends (however it ends) replaces the reservation with what
 * it took. Admission asks the database only when this replica's lease of a counter runs short;
 * a background write every `WRITE_EVERY` moves the spending into the shared counters, gives back
 * what the leases hold beyond the calls in flight, and renews them.
 */

/** what one admitted call holds until it settles */
export interface Reservation {
  readonly checks: ReadonlyArray<Check>
  /** the rate limits as the answer's headers show them (none when no rate limit applies) */
  readonly view: RateLimitView | undefined
}

/** A budget's spending as the admin routes show it. */
export interface BudgetSpend {
  readonly usd?: number
  readonly tokens?: number
  readonly per: "day" | "week" | "month" | "total"
  readonly limit: number
  readonly used: number
  readonly reserved: number
  /** epoch ms; absent for `total` */
  readonly periodEnd?: number
}

/** how often spending is written and leases given back and renewed */
export const WRITE_EVERY = Duration.millis(500)
/** a lease not renewed for this long is forgotten (at most `requestTimeoutMs`) */
export const LEASE_TTL_MS = 5_000
/** a call's output cap when its request names none (for the token reservation) */
export const DEFAULT_OUTPUT_CAP = 4096
/** grows of one lease in a row before a call that keeps losing the race for it is refused */
const MAX_ROUNDS = 16

export class Quota extends Context.Tag("gateway/Quota")<
  Quota,
  {
    /** whether any limit binds calls of this app and key (no estimate is made otherwise) */
    readonly applies: (app: string, keyId: string) => boolean
    /** reserve a call against its app's and key's limits, or refuse it (429) */
    readonly admit: (app: string, keyId: string, estimate: () => Estimate) => Effect.Effect<Reservation | undefined, GatewayError>
    /** the call ended: it took this */
    readonly settle: (reservation: Reservation, taken: Taken) => void
    /** each budget of an app or a runtime key, with its spending now */
    readonly budgets: (scope: { readonly app: string } | { readonly keyId: string; readonly limits: TrafficLimits | undefined }) => Effect.Effect<ReadonlyArray<BudgetSpend>, GatewayError>
    /** the calls in flight and what is reserved, for tests and the status page */
    readonly held: () => { readonly inFlight: number; readonly leased: number }
  }
>() {
  /** The service over `pool` (the database's in the app). */
  static readonly make = (pool: QuotaPool, appLimits: (app: string) => TrafficLimits | undefined, keyLimits: (keyId: string) => TrafficLimits | undefined) =>
    Effect.gen(function* () {
      const ledger = new Ledger()
      const log = yield* Log
      const taking = new Map<string, Deferred.Deferred<void, QuotaUnavailable>>()
      const unavailable = () => Errors.databaseUnavailable("Rate limits and budgets")

      const refusal = (check: Check, view: RateLimitView | undefined, now: number): GatewayError => {
        const budget = check.kind === "usd" || check.kind === "budgetTokens"
        const seconds = check.kind === "concurrency" ? 1 : Number.isFinite(check.resetAt) ? Math.max(1, Math.ceil((check.resetAt - now) / 1000)) : undefined
        const options = {
          ...(seconds !== undefined ? { retryAfter: seconds } : {}),
          ...(view !== undefined ? { rateLimit: view } : {}),
          ...(budget ? { shouldRetry: false } : {})
        }
        if (budget) {
          const reset = Number.isFinite(check.resetAt) ? `; it renews at ${new Date(check.resetAt).toISOString()}` : "; it does not renew"
          return Errors.rateLimited("insufficient_quota", `${check.scope}: ${check.name} is spent${reset}`, options)
        }
        const what = check.kind === "concurrency" ? `${check.limit} calls are in flight` : `the limit of ${check.limit} is reached`
        return Errors.rateLimited("rate_limit_exceeded", `${check.scope}: ${check.name}: ${what}; retry after ${seconds ?? 1} s`, options)
      }

      /** Grow this replica's lease of a counter: one ask at a time per counter, shared by whoever waits. */
      const grow = (check: Check, want: number, now: number): Effect.Effect<void, QuotaUnavailable> => {
        const pending = taking.get(check.key)
        if (pending !== undefined) return Deferred.await(pending)
        const done = Deferred.unsafeMake<void, QuotaUnavailable>(FiberId.none)
        taking.set(check.key, done)
        const entry = ledger.entry(check)
        // what the pool granted is recorded here whatever happens to the caller
        return Effect.uninterruptible(
          pool.take({ key: check.key, limit: check.limit, want, keepUntil: entry.keepUntil, now }).pipe(
            Effect.tap(({ grant, others }) => Effect.sync(() => ledger.granted(check, want, grant, others, now))),
            Effect.asVoid,
            Effect.onExit((exit) => Effect.zipRight(Effect.sync(() => taking.delete(check.key)), Deferred.done(done, exit)))
          )
        )
      }

      /**
       * Reserve the checks from `from` on, one after the other, in memory while the leases hold
       * (what is reserved so far is counted in `held`): all reserved (-1), or the first check
       * that is refused or whose lease is short.
       */
      const reserveHeld = (checks: ReadonlyArray<Check>, from: number, held: { count: number }, now: number): { readonly at: number; readonly step?: Step } => {
        for (let i = from; i < checks.length; i++) {
          const step = ledger.reserve(checks[i], now)
          if (step._tag !== "reserved") return { at: i, step }
          held.count = i + 1
        }
        return { at: -1 }
      }

      /** Grow the short lease of check `at`, then go on reserving from it (`round`: grows of it in a row). */
      const reserveRest = (checks: ReadonlyArray<Check>, at: number, want: number, round: number, held: { count: number }, now: number): Effect.Effect<void, GatewayError> =>
        Effect.zipRight(
          Effect.mapError(grow(checks[at], want, now), unavailable),
          Effect.flatMap(Clock.currentTimeMillis, (later) => {
            const next = reserveHeld(checks, at, held, later)
            if (next.at === -1) return Effect.void
            const again = next.at === at ? round + 1 : 0
            if (next.step?._tag !== "take" || again >= MAX_ROUNDS) return Effect.fail(refusal(checks[next.at], viewOf(ledger, checks), later))
            return reserveRest(checks, next.at, next.step.want, again, held, later)
          })
        )

      /**
       * Reserve every check or none: a refusal, a failure or an interruption gives back what was
       * reserved. While the leases hold (nearly every call) this is one pass in memory.
       */
      const admitChecks = (checks: ReadonlyArray<Check>, now: number): Effect.Effect<Reservation, GatewayError> => {
        const held = { count: 0 }
        const first = reserveHeld(checks, 0, held, now)
        if (first.at === -1) return Effect.succeed({ checks, view: viewOf(ledger, checks) })
        if (first.step?._tag !== "take") {
          ledger.unreserve(checks.slice(0, held.count))
          return Effect.fail(refusal(checks[first.at], viewOf(ledger, checks), now))
        }
        return reserveRest(checks, first.at, first.step.want, 0, held, now).pipe(
          Effect.onExit((exit) => (exit._tag === "Success" ? Effect.void : Effect.sync(() => ledger.unreserve(checks.slice(0, held.count))))),
          Effect.map(() => ({ checks, view: viewOf(ledger, checks) }))
        )
      }

      const applies = (app: string, keyId: string) => appLimits(app) !== undefined || keyLimits(keyId) !== undefined

      const admit = (app: string, keyId: string, estimate: () => Estimate) =>
        Effect.flatMap(Clock.currentTimeMillis, (now): Effect.Effect<Reservation | undefined, GatewayError> => {
          const ofApp = appLimits(app)
          const ofKey = keyLimits(keyId)
          if (ofApp === undefined && ofKey === undefined) return Effect.succeed(undefined)
          const checks = allChecks({ name: app, limits: ofApp }, ofKey !== undefined ? { id: keyId, limits: ofKey } : undefined, estimate, now)
          return checks.length === 0 ? Effect.succeed(undefined) : admitChecks(checks, now)
        })

      // spending written, leases given back and renewed; a failed write is tried again next time
      let failing = false
      const write = Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const writes = ledger.writes(now)
        let leased = false
        for (const entry of ledger.entries.values()) if (entry.granted > 0) leased = true
        if (writes.length === 0 && !leased) return
        const exit = yield* Effect.exit(pool.write(writes, now))
        if (exit._tag === "Success") {
          ledger.wrote(writes)
          failing = false
        } else {
          ledger.notWritten(writes)
          if (!failing) log.error("quota.write_failed", { reason: "database" })
          failing = true
        }
      })
      yield* Effect.forkScoped(Effect.repeat(write, Schedule.spaced(WRITE_EVERY)))
      // what this replica spent reaches the counters before it stops
      yield* Effect.addFinalizer(() => Effect.ignore(write))

      const budgets = (scope: { readonly app: string } | { readonly keyId: string; readonly limits: TrafficLimits | undefined }) =>
        Effect.gen(function* () {
          const now = yield* Clock.currentTimeMillis
          const limits = "app" in scope ? appLimits(scope.app) : scope.limits
          const checks = allChecks(
            "app" in scope ? { name: scope.app, limits } : { name: "", limits: undefined },
            "app" in scope ? undefined : { id: scope.keyId, limits },
            () => ({ tokens: 0, usd: 0 }),
            now
          ).filter((c) => c.kind === "usd" || c.kind === "budgetTokens")
          const counters = yield* Effect.mapError(pool.read(checks.map((c) => c.key), now), unavailable)
          return checks.map((check, i): BudgetSpend => {
            const budget = limits?.budgets?.[i]
            const entry = ledger.entries.get(check.key)
            const counter = counters.get(check.key)
            const unit = check.kind === "usd" ? NANO : 1
            const limit = check.limit / unit
            return {
              ...(check.kind === "usd" ? { usd: limit } : { tokens: limit }),
              per: budget?.per ?? "total",
              limit,
              used: round6(((counter?.used ?? 0) + (entry?.spent ?? 0)) / unit),
              reserved: round6(((entry?.inFlight ?? 0) + (counter?.leasedByOthers ?? 0)) / unit),
              ...(Number.isFinite(check.resetAt) ? { periodEnd: check.resetAt } : {})
            }
          })
        })

      return Quota.of({
        applies,
        admit,
        settle: (reservation, taken) => ledger.settle(reservation.checks, taken),
        budgets,
        held: () => {
          let inFlight = 0
          let leased = 0
          for (const entry of ledger.entries.values()) {
            inFlight += entry.inFlight
            leased += entry.granted
          }
          return { inFlight, leased }
        }
      })
    })

  /** The service with its counters in memory (tests of other services): the app's limits from `config`, the keys' from the KeyStore. */
  static readonly layerInMemory = Layer.scoped(
    Quota,
    Effect.gen(function* () {
      const config = yield* Settings
      const keys = yield* KeyStore
      return yield* Quota.make(memoryPool().forOwner("memory", LEASE_TTL_MS), (app) => config.apps[app]?.limits, keys.limitsOf)
    })
  )

  /** The service over the gateway's database: leases owned by this process, renewed while it lives. */
  static readonly layer = Layer.scoped(
    Quota,
    Effect.gen(function* () {
      const config = yield* Settings
      const keys = yield* KeyStore
      const replica = config.replicaId ?? os.hostname()
      const owner = `${replica}#${process.pid}-${randomBytes(4).toString("hex")}`
      // SQLite: this process owns the file, every lease is of an earlier life; PostgreSQL: those of the same replicaId
      const earlierLives = config.database.url === undefined ? ("all" as const) : config.replicaId !== undefined ? { prefix: `${config.replicaId}#` } : ("none" as const)
      const pool = yield* makeQuotaPool({ owner, earlierLives, leaseTtlMs: Math.min(LEASE_TTL_MS, config.requestTimeoutMs) })
      return yield* Quota.make(pool, (app) => config.apps[app]?.limits, keys.limitsOf)
    })
  )
}

const round6 = (n: number) => Math.round(n * 1e6) / 1e6
