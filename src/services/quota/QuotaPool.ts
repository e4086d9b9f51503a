import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Data, Effect, Option, Schema } from "effect"
import type { Write } from "../../domain/Quota.js"
import { Backend } from "../../sql/Database.js"

/**
 * The shared side of the rate-limit and budget counters (migration 0017), the same SQL on SQLite
 * and PostgreSQL: `quota_counters` holds each counter's settled use, `quota_leases` the slice of
 * what remains that each replica (lease owner) holds. A lease is renewed by its owner with every
 * write and forgotten `leaseTtlMs` after the last renewal: what a replica that died held comes
 * free by then, and meanwhile only its own slice is held.
 */

/** The counters could not be read or written (database lost). */
export class QuotaUnavailable extends Data.TaggedError("QuotaUnavailable")<{ readonly cause: unknown }> {}

export interface TakeRequest {
  readonly key: string
  readonly limit: number
  /** what the caller needs at least (granted when what remains allows) */
  readonly want: number
  /** epoch ms after which the counter can be forgotten (Infinity: never) */
  readonly keepUntil: number
  readonly now: number
}

export interface Counter {
  /** settled use of every replica (written) */
  readonly used: number
  /** leases of the other replicas, live */
  readonly leasedByOthers: number
}

export interface QuotaPool {
  /**
   * Grow this owner's lease of a counter by what remains of it (the limit less the used and every
   * live lease): `want` at least when that much remains, else all that remains; more (a share of
   * what remains, split among the owners) so that busy replicas ask rarely. Answers the grant and
   * the counter's used plus the other owners' leases after it.
   */
  readonly take: (request: TakeRequest) => Effect.Effect<{ readonly grant: number; readonly others: number }, QuotaUnavailable>
  /** write spending and give-backs, and renew every lease of this owner */
  readonly write: (writes: ReadonlyArray<Write>, now: number) => Effect.Effect<void, QuotaUnavailable>
  /** the counters as the pool has them */
  readonly read: (keys: ReadonlyArray<string>, now: number) => Effect.Effect<ReadonlyMap<string, Counter>, QuotaUnavailable>
}

const Locked = Schema.Struct({ used: Schema.Number, others: Schema.Number, mine: Schema.Number, owners: Schema.Number })
const Read = Schema.Struct({ key: Schema.String, used: Schema.Number, others: Schema.Number })

/**
 * What a take grants of a counter with `free` left: `want` at least when that much is left, else
 * all of it; more when much is left (half of it, split among the owners holding leases), so that a
 * busy replica comes back rarely. Whole units.
 */
export const grantOf = (free: number, want: number, owners: number): number =>
  free <= 0 ? 0 : Math.floor(Math.min(free, Math.max(want, Math.ceil(free / (2 * (owners + 1))))))

/** forgotten counters and leases are deleted this often (by whichever replica writes) */
const CLEAN_EVERY_MS = 60_000

/** keep_until of a counter that never ends (`total` budgets, concurrency) */
const NEVER = Number.MAX_SAFE_INTEGER

/**
 * The pool in the gateway's database for lease owner `owner`. `earlierLives` says which leases are
 * of this process's earlier lives and are dropped at start: every lease on SQLite (one process owns
 * the file), the leases of the same `replicaId` on PostgreSQL (without one they run out after
 * `leaseTtlMs`).
 */
export const makeQuotaPool = (options: {
  readonly owner: string
  readonly earlierLives: "all" | "none" | { readonly prefix: string }
  readonly leaseTtlMs: number
}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const backend = yield* Backend
    const postgres = backend.kind === "postgres"
    const { owner } = options
    const unavailable = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, QuotaUnavailable, R> =>
      Effect.mapError(self, (cause) => new QuotaUnavailable({ cause }))
    // `withTransaction` dies when its COMMIT fails (the connection lost): that too is the database lost
    const inTransaction = <A, E, R>(change: Effect.Effect<A, E, R>): Effect.Effect<A, QuotaUnavailable, R> =>
      unavailable(sql.withTransaction(change)).pipe(
        Effect.catchSomeDefect((defect) => (defect instanceof SqlError ? Option.some(Effect.fail(new QuotaUnavailable({ cause: defect }))) : Option.none()))
      )

    const ensure = SqlSchema.void({
      Request: Schema.Struct({ key: Schema.String, keep_until: Schema.Number }),
      execute: (row) => sql`INSERT INTO quota_counters (key, used, keep_until) VALUES (${row.key}, 0, ${row.keep_until}) ON CONFLICT (key) DO NOTHING`
    })
    // the counter row is locked until the commit (PostgreSQL; SQLite runs one transaction at a time).
    // The sums are read by a statement of their own, after the lock: a statement that waited for
    // the lock would read the leases as they were before the transaction it waited for
    const lockRow = SqlSchema.void({ Request: Schema.String, execute: (key) => sql`SELECT used FROM quota_counters WHERE key = ${key} FOR UPDATE` })
    const sums = SqlSchema.single({
      Request: Schema.Struct({ key: Schema.String, now: Schema.Number }),
      Result: Locked,
      execute: ({ key, now }) =>
        sql`SELECT c.used AS used,
            (SELECT COALESCE(SUM(l.amount), 0) FROM quota_leases l WHERE l.key = c.key AND l.replica <> ${owner} AND l.expires_at > ${now}) AS others,
            (SELECT COALESCE(SUM(l.amount), 0) FROM quota_leases l WHERE l.key = c.key AND l.replica = ${owner}) AS mine,
            (SELECT COUNT(*) FROM quota_leases l WHERE l.key = c.key AND l.replica <> ${owner} AND l.expires_at > ${now} AND l.amount > 0) AS owners
          FROM quota_counters c WHERE c.key = ${key}`
    })
    const grow = SqlSchema.void({
      Request: Schema.Struct({ replica: Schema.String, key: Schema.String, amount: Schema.Number, expires_at: Schema.Number }),
      execute: (row) =>
        sql`INSERT INTO quota_leases ${sql.insert(row)} ON CONFLICT (replica, key) DO UPDATE SET amount = quota_leases.amount + excluded.amount, expires_at = excluded.expires_at`
    })
    const addUsed = SqlSchema.void({
      Request: Schema.Struct({ key: Schema.String, used: Schema.Number, keep_until: Schema.Number }),
      execute: (row) =>
        sql`INSERT INTO quota_counters (key, used, keep_until) VALUES (${row.key}, ${row.used}, ${row.keep_until}) ON CONFLICT (key) DO UPDATE SET used = quota_counters.used + excluded.used`
    })
    const shrink = SqlSchema.void({
      Request: Schema.Struct({ key: Schema.String, by: Schema.Number }),
      execute: ({ by, key }) => sql`UPDATE quota_leases SET amount = CASE WHEN amount > ${by} THEN amount - ${by} ELSE 0 END WHERE replica = ${owner} AND key = ${key}`
    })
    const renew = SqlSchema.void({
      Request: Schema.Number,
      execute: (expiresAt) => sql`UPDATE quota_leases SET expires_at = ${expiresAt} WHERE replica = ${owner}`
    })
    const dropEmpty = SqlSchema.void({ Request: Schema.Void, execute: () => sql`DELETE FROM quota_leases WHERE replica = ${owner} AND amount <= 0` })
    const forget = SqlSchema.void({
      Request: Schema.Number,
      execute: (now) => sql`DELETE FROM quota_counters WHERE keep_until < ${now}`.pipe(Effect.zipRight(sql`DELETE FROM quota_leases WHERE expires_at < ${now - 60 * 60_000}`))
    })
    const readMany = SqlSchema.findAll({
      Request: Schema.Struct({ keys: Schema.Array(Schema.String), now: Schema.Number }),
      Result: Read,
      execute: ({ keys, now }) =>
        sql`SELECT c.key AS key, c.used AS used,
            (SELECT COALESCE(SUM(l.amount), 0) FROM quota_leases l WHERE l.key = c.key AND l.replica <> ${owner} AND l.expires_at > ${now}) AS others
          FROM quota_counters c WHERE ${sql.in("c.key", keys)}`
    })

    // the leases of this process's earlier lives are nobody's now
    // (a failure is no reason not to start: those leases run out by themselves)
    const lives = options.earlierLives
    if (lives === "all") yield* Effect.ignore(sql`DELETE FROM quota_leases`)
    else if (lives !== "none") yield* Effect.ignore(sql`DELETE FROM quota_leases WHERE substr(replica, 1, ${lives.prefix.length}) = ${lives.prefix}`)

    let cleanedAt = 0
    const keepOf = (ms: number) => (Number.isFinite(ms) ? ms : NEVER)

    const pool: QuotaPool = {
      take: (request) =>
        inTransaction(
          Effect.gen(function* () {
            yield* ensure({ key: request.key, keep_until: keepOf(request.keepUntil) })
            if (postgres) yield* lockRow(request.key)
            const row = yield* sums({ key: request.key, now: request.now })
            const grant = grantOf(request.limit - row.used - row.others - row.mine, request.want, row.owners)
            if (grant > 0) yield* grow({ replica: owner, key: request.key, amount: grant, expires_at: request.now + options.leaseTtlMs })
            return { grant, others: row.used + row.others }
          })
        ),
      write: (writes, now) =>
        inTransaction(
          Effect.gen(function* () {
            for (const write of writes) {
              if (write.spent !== 0) yield* addUsed({ key: write.key, used: write.spent, keep_until: keepOf(write.keepUntil) })
              const by = write.giveBack + write.fromLease
              if (by > 0) yield* shrink({ key: write.key, by })
            }
            yield* renew(now + options.leaseTtlMs)
            if (now - cleanedAt >= CLEAN_EVERY_MS) {
              cleanedAt = now
              yield* dropEmpty(undefined)
              yield* forget(now)
            }
          })
        ),
      read: (keys, now) =>
        keys.length === 0
          ? Effect.succeed(new Map())
          : unavailable(Effect.map(readMany({ keys, now }), (rows) => new Map(rows.map((r) => [r.key, { used: r.used, leasedByOthers: r.others }]))))
    }
    return pool
  })

/**
 * The pool in this process's memory, with the same rules as the database's: for a gateway whose
 * counters need not outlive it (tests of other services), and for checking the ledger against
 * several owners sharing one pool (the property tests).
 */
export const memoryPool = () => {
  const used = new Map<string, number>()
  const leases = new Map<string, Map<string, { amount: number; expiresAt: number }>>()
  const leasesOf = (key: string) => {
    let found = leases.get(key)
    if (found === undefined) leases.set(key, (found = new Map()))
    return found
  }
  const forOwner = (owner: string, leaseTtlMs: number): QuotaPool => ({
    take: (request) =>
      Effect.sync(() => {
        let others = 0
        let owners = 0
        let mine = 0
        for (const [who, lease] of leasesOf(request.key)) {
          if (who === owner) mine += lease.amount
          else if (lease.expiresAt > request.now) {
            others += lease.amount
            if (lease.amount > 0) owners++
          }
        }
        const u = used.get(request.key) ?? 0
        const grant = grantOf(request.limit - u - others - mine, request.want, owners)
        if (grant > 0) leasesOf(request.key).set(owner, { amount: mine + grant, expiresAt: request.now + leaseTtlMs })
        return { grant, others: u + others }
      }),
    write: (writes, now) =>
      Effect.sync(() => {
        for (const write of writes) {
          used.set(write.key, (used.get(write.key) ?? 0) + write.spent)
          const lease = leasesOf(write.key).get(owner)
          if (lease !== undefined) lease.amount = Math.max(0, lease.amount - write.giveBack - write.fromLease)
        }
        for (const byOwner of leases.values()) {
          const lease = byOwner.get(owner)
          if (lease !== undefined) lease.expiresAt = now + leaseTtlMs
        }
      }),
    read: (keys, now) =>
      Effect.sync(() => {
        const out = new Map<string, Counter>()
        for (const key of keys) {
          let leasedByOthers = 0
          for (const [who, lease] of leasesOf(key)) if (who !== owner && lease.expiresAt > now) leasedByOthers += lease.amount
          if (used.has(key) || leasedByOthers > 0) out.set(key, { used: used.get(key) ?? 0, leasedByOthers })
        }
        return out
      })
  })
  return {
    forOwner,
    /** every counter's used, and the live leases' sum (what the property tests check) */
    used: (key: string) => used.get(key) ?? 0,
    leased: (key: string, now: number) => {
      let sum = 0
      for (const lease of leasesOf(key).values()) if (lease.expiresAt > now) sum += lease.amount
      return sum
    },
    keys: () => [...new Set([...used.keys(), ...leases.keys()])]
  }
}
