import { Context, Deferred, Duration, Effect, Exit, FiberId, Layer, Option, Queue, Redacted, Stream } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import type { GatewayConfig } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import type { TrafficLimits } from "../../Config.js"
import { infoOf, type KeyRow, KeyStoreUnavailable, type RuntimeKeyInfo, type RuntimeKeyPersistence, sqlPersistence } from "./KeyStoreSql.js"

export { KeyStoreUnavailable, type RuntimeKeyInfo, type RuntimeKeyPersistence, sqlPersistence } from "./KeyStoreSql.js"

/** Who is calling: the app a key belongs to, or the keyless loopback app `default`. */
export interface Principal {
  readonly app: string
  /** id of the key (never the key itself); "none" when no key was needed */
  readonly keyId: string
  readonly source: "config" | "runtime" | "none"
}

interface StoredKey {
  readonly digest: Buffer
  readonly principal: Principal
  /** epoch ms past which the key is refused (runtime keys with `expiresAt`) */
  readonly expiresAt?: number
}

const digest = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest()

/** True for addresses only this machine can reach. */
export const isLoopbackHost = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/** The one time a runtime key's secret is seen. */
export interface CreatedKey extends RuntimeKeyInfo {
  readonly key: string
}

const keyIdOf = (d: Buffer) => `key_${d.toString("hex", 0, 8)}`

/** `KeyStoreUnavailable` as the wire sees it: 503 `database_unavailable`, in the route's envelope. */
export const orDatabaseUnavailable = <A, E, R>(self: Effect.Effect<A, E | KeyStoreUnavailable, R>): Effect.Effect<A, Exclude<E, KeyStoreUnavailable> | GatewayError, R> =>
  Effect.catchIf(
    self,
    (e): e is KeyStoreUnavailable => e instanceof KeyStoreUnavailable,
    () => Effect.fail(Errors.databaseUnavailable("Runtime keys"))
  )

/** how often a replica reads key changes even without a notice: a lost notice or listen connection still ends a revoked key within 1 s */
export const POLL_EVERY = Duration.millis(400)
/** the least time between two reads of changes: what unknown keys can cost the database */
const MIN_GAP = Duration.millis(50)
/** a read of changes that takes longer counts as the database being lost */
const READ_WITHIN = Duration.seconds(2)
/** a listen connection that died says nothing: subscribe afresh this often (the poll covers the gap) */
const RESUBSCRIBE_EVERY = Duration.minutes(1)

/** How often the changes are read and the notices subscribed afresh (tests shorten or lengthen them). */
export interface Timings {
  readonly pollEvery?: Duration.DurationInput
  readonly resubscribeEvery?: Duration.DurationInput
}

/**
 * API keys: configured keys and runtime keys made through the admin routes. Keys are held only as
 * SHA-256 digests: a presented key is hashed, looked up by digest and compared in constant time,
 * so timing reveals neither its length nor a matching prefix. A revoked runtime key leaves the map
 * as soon as its revocation is stored, so it fails on its very next request.
 *
 * With several replicas on one database (PostgreSQL) the digests in memory are a cache of the
 * database: each replica reads the changes made since the last it read when another announces one
 * (`NOTIFY`) and every `POLL_EVERY` in any case, so a key revoked elsewhere fails here within 1 s
 * and this replica's `onRevoke` listeners hear of it. A key the cache does not know (perhaps made
 * on another replica a moment ago) waits for `lookup`, which reads the changes afresh.
 */
export class KeyStore extends Context.Tag("gateway/KeyStore")<
  KeyStore,
  {
    /** the principal for a presented key, if it is one (from memory: see `lookup` when `shared`) */
    readonly authenticate: (key: string) => Option.Option<Principal>
    /** other processes change keys too (PostgreSQL): a key `authenticate` does not know is worth a `lookup` */
    readonly shared: boolean
    /**
     * The principal of the first of `keys` that is a key, reading the database's changes afresh
     * when none is known here yet. Fails when the database does not answer; keys known here are
     * answered without it.
     */
    readonly lookup: (keys: ReadonlyArray<string>) => Effect.Effect<Option.Option<Principal>, KeyStoreUnavailable>
    /** whether the admin key was presented */
    readonly isAdmin: (key: string) => boolean
    /** whether an admin key is configured */
    readonly hasAdmin: boolean
    /** no keys configured on a loopback listener: requests need no credential */
    readonly keyless: boolean
    /** app names that hold a configured key */
    readonly configApps: ReadonlySet<string>
    /** every app that can make requests */
    readonly apps: () => ReadonlyArray<string>
    /** every app that can make requests or ever held a runtime key (revoked ones included) */
    readonly knownApps: () => ReadonlyArray<string>
    /** whether a key id is a live key (config or runtime) */
    readonly isLive: (keyId: string) => boolean
    /** whether a key id is a configured key's */
    readonly isConfigKey: (keyId: string) => boolean
    /** live runtime keys, as stored */
    readonly listRuntime: Effect.Effect<ReadonlyArray<RuntimeKeyInfo>, KeyStoreUnavailable>
    /** a new key of `app`, refused from `expiresAt` (epoch ms) on when given, bound by `limits` besides its app's */
    readonly createRuntime: (app: string, options?: { readonly expiresAt?: number; readonly limits?: TrafficLimits }) => Effect.Effect<CreatedKey, KeyStoreUnavailable>
    /** a live runtime key as stored (read afresh from the database when other processes change keys) */
    readonly getRuntime: (id: string) => Effect.Effect<Option.Option<RuntimeKeyInfo>, KeyStoreUnavailable>
    /** replace a live runtime key's expiry and limits (none: no such live key); every replica holds the change within 1 s */
    readonly updateRuntime: (
      id: string,
      change: { readonly expiresAt: number | undefined; readonly limits: TrafficLimits | undefined }
    ) => Effect.Effect<Option.Option<RuntimeKeyInfo>, KeyStoreUnavailable>
    /** a runtime key's own limits (from memory: every request reads it) */
    readonly limitsOf: (keyId: string) => TrafficLimits | undefined
    /** false when no live runtime key has that id */
    readonly revokeRuntime: (id: string) => Effect.Effect<boolean, KeyStoreUnavailable>
    /** called with the key id of every revoked key, on every replica (uploads started with it are dropped) */
    readonly onRevoke: (listener: (keyId: string) => void) => void
  }
>() {
  /**
   * The store over `persistence` (none: runtime keys live in memory only), starting from its
   * `rows`. The timings are for tests (defaults `POLL_EVERY`, `RESUBSCRIBE_EVERY`).
   */
  static readonly make = (
    config: GatewayConfig,
    persistence?: RuntimeKeyPersistence,
    rows: ReadonlyArray<KeyRow> = [],
    options: Timings = {}
  ) =>
    Effect.gen(function* () {
      const byDigest = new Map<string, StoredKey>()
      const configIds = new Set<string>()
      for (const entry of config.keys) {
        const d = digest(Redacted.value(entry.key))
        const id = keyIdOf(d)
        configIds.add(id)
        byDigest.set(d.toString("hex"), { digest: d, principal: { app: entry.app, keyId: id, source: "config" } })
      }
      const runtime = new Map<string, { readonly info: RuntimeKeyInfo; readonly digest: string }>()
      // apps whose runtime keys were revoked: their past usage stays reportable
      const formerApps = new Set<string>()
      // revoked keys this process has dropped (and told its listeners of), so that each is told once
      const gone = new Set<string>()
      const listeners: Array<(keyId: string) => void> = []

      /** Take in a key's stored state, from this process or another; idempotent. */
      const learn = (row: KeyRow) => {
        if (row.revoked_at === null) {
          // a change of a live key (expiry, limits) replaces what is held; a revoked one stays gone
          if (gone.has(row.id)) return
          const expiry = row.expires_at !== null ? { expiresAt: row.expires_at } : {}
          runtime.set(row.id, { info: infoOf(row), digest: row.digest })
          byDigest.set(row.digest, { digest: Buffer.from(row.digest, "hex"), principal: { app: row.app, keyId: row.id, source: "runtime" }, ...expiry })
          return
        }
        formerApps.add(row.app)
        if (gone.has(row.id)) return
        gone.add(row.id)
        const found = runtime.get(row.id)
        if (found !== undefined) {
          runtime.delete(row.id)
          byDigest.delete(found.digest)
        }
        for (const listener of listeners) listener(row.id)
      }
      // every change up to this number is taken in (only reads of the changes move it: a change made
      // here may have a number above one made elsewhere that this process has not read yet)
      let seen = 0
      for (const row of rows) {
        learn(row)
        if (row.version > seen) seen = row.version
      }

      const admin = config.adminKey === undefined ? undefined : digest(Redacted.value(config.adminKey))
      // no keys at all on a loopback listener: the first runtime key ends that
      const isKeyless = () => config.keys.length === 0 && isLoopbackHost(config.listen.host) && runtime.size === 0
      const configApps = new Set(config.keys.map((k) => k.app))

      const authenticate = (key: string): Option.Option<Principal> => {
        const d = digest(key)
        const found = byDigest.get(d.toString("hex"))
        if (found === undefined || !timingSafeEqual(found.digest, d)) return Option.none()
        // expiry is a time every replica holds with the key: refused everywhere at once
        return found.expiresAt !== undefined && found.expiresAt <= Date.now() ? Option.none() : Option.some(found.principal)
      }
      const fromMemory = (keys: ReadonlyArray<string>): Option.Option<Principal> => {
        for (const key of keys) {
          const found = authenticate(key)
          if (Option.isSome(found)) return found
        }
        return Option.none()
      }
      const apps = (): ReadonlyArray<string> => {
        if (isKeyless()) return ["default"]
        const names = new Set(configApps)
        for (const { info } of runtime.values()) names.add(info.app)
        return [...names]
      }

      const shared = persistence?.shared === true
      const fresh = shared && persistence !== undefined
        ? yield* follow(persistence, options, () => seen, (changed) => {
            for (const row of changed) {
              learn(row)
              if (row.version > seen) seen = row.version
            }
          })
        : Effect.void

      return KeyStore.of({
        authenticate,
        shared,
        lookup: (keys) => {
          const known = fromMemory(keys)
          return Option.isSome(known) || !shared ? Effect.succeed(known) : Effect.map(fresh, () => fromMemory(keys))
        },
        isAdmin: (key) => admin !== undefined && timingSafeEqual(admin, digest(key)),
        hasAdmin: admin !== undefined,
        get keyless() {
          return isKeyless()
        },
        configApps,
        apps,
        knownApps: () => [...new Set([...apps(), ...formerApps])],
        isLive: (keyId) => {
          if (configIds.has(keyId) || keyId === "none") return true
          const expiresAt = runtime.get(keyId)?.info.expiresAt
          return runtime.has(keyId) && (expiresAt === undefined || expiresAt > Date.now())
        },
        isConfigKey: (keyId) => configIds.has(keyId),
        listRuntime: persistence === undefined ? Effect.sync(() => [...runtime.values()].map((r) => r.info)) : persistence.listLive,
        createRuntime: (app, options = {}) =>
          Effect.gen(function* () {
            const secret = `sk-gw-${randomBytes(24).toString("hex")}`
            const d = digest(secret)
            const controls = options.limits !== undefined ? JSON.stringify(options.limits) : null
            const key = { id: keyIdOf(d), app, digest: d.toString("hex"), created_at: Date.now(), expires_at: options.expiresAt ?? null, controls }
            const row = persistence === undefined ? { ...key, revoked_at: null, version: 0 } : yield* persistence.insert(key)
            learn(row)
            return { ...infoOf(row), key: secret }
          }),
        getRuntime: (id) => Effect.map(fresh, () => Option.fromNullable(runtime.get(id)?.info)),
        updateRuntime: (id, change) =>
          Effect.gen(function* () {
            const stored = { expires_at: change.expiresAt ?? null, controls: change.limits !== undefined ? JSON.stringify(change.limits) : null }
            if (persistence === undefined) {
              const found = runtime.get(id)
              if (found === undefined) return Option.none()
              learn({ id, app: found.info.app, digest: found.digest, created_at: found.info.createdAt, revoked_at: null, version: 0, ...stored })
              return Option.some(runtime.get(id)!.info)
            }
            // stored first, then held: the other replicas read the same change
            const changed = yield* persistence.update(id, stored)
            if (Option.isNone(changed)) return Option.none()
            learn(changed.value)
            return Option.fromNullable(runtime.get(id)?.info)
          }),
        limitsOf: (keyId) => runtime.get(keyId)?.info.limits,
        revokeRuntime: (id) =>
          Effect.gen(function* () {
            const at = Date.now()
            if (persistence === undefined) {
              const found = runtime.get(id)
              if (found === undefined) return false
              learn({ id, app: found.info.app, digest: found.digest, created_at: found.info.createdAt, revoked_at: at, expires_at: found.info.expiresAt ?? null, version: 0, controls: null })
              return true
            }
            // stored first: a revocation the database did not take is not made here either (503, the key stays live everywhere)
            const revoked = yield* persistence.revoke(id, at)
            if (Option.isNone(revoked)) return false
            learn(revoked.value)
            return true
          }),
        onRevoke: (listener) => void listeners.push(listener)
      })
    })

  /** Configured keys only (tests of other services). */
  static readonly layer = (config: GatewayConfig) => Layer.scoped(KeyStore, KeyStore.make(config))

  /** Configured keys and runtime keys kept in the database (shared by every replica on PostgreSQL). */
  static readonly layerWithRuntime = (config: GatewayConfig) =>
    Layer.scoped(
      KeyStore,
      Effect.gen(function* () {
        const persistence = yield* sqlPersistence
        return yield* KeyStore.make(config, persistence, yield* persistence.loadAll)
      })
    )
}

/**
 * Keep reading the key changes of `persistence` (for as long as the scope lasts): on each notice,
 * every `POLL_EVERY`, and when a caller asks. Answers the ask: an effect that ends once a read that
 * started after it was called has been taken in.
 *
 * Bound on unknown keys: a miss does not query by key, it waits for the next read of the changes,
 * one cheap indexed query shared by every miss that arrived before it started. Reads run one at a
 * time and at least `MIN_GAP` apart, so any number of bad keys costs the database at most 20 small
 * queries a second per replica, and a new key waits at most `MIN_GAP` and one query. While the
 * database does not answer, a miss fails at once (503) rather than wait.
 */
const follow = (persistence: RuntimeKeyPersistence, timings: Timings, seen: () => number, take: (rows: ReadonlyArray<KeyRow>) => void) =>
  Effect.gen(function* () {
    const wake = yield* Queue.sliding<void>(1)
    let next: Deferred.Deferred<void, KeyStoreUnavailable> | undefined
    let answering = true
    const read = Effect.suspend(() => persistence.changedSince(seen())).pipe(
      Effect.timeoutFail({ duration: READ_WITHIN, onTimeout: () => new KeyStoreUnavailable({ cause: "no answer within 2 s" }) }),
      Effect.map(take)
    )
    const cycle = Effect.gen(function* () {
      yield* Effect.timeoutOption(Queue.take(wake), timings.pollEvery ?? POLL_EVERY)
      const waiting = next
      next = undefined
      const exit = yield* Effect.exit(read)
      answering = Exit.isSuccess(exit)
      if (waiting !== undefined) yield* Deferred.done(waiting, exit)
      yield* Effect.sleep(MIN_GAP)
    })
    yield* Effect.forkScoped(Effect.forever(cycle))

    if (Option.isSome(persistence.notices)) {
      const wakeUp = Queue.offer(wake, undefined)
      const subscription = persistence.notices.value.pipe(
        Stream.interruptAfter(timings.resubscribeEvery ?? RESUBSCRIBE_EVERY),
        Stream.runForEach(() => wakeUp),
        // between two subscriptions nobody listens: read what changed meanwhile
        Effect.zipRight(wakeUp),
        // a subscription that failed (the database lost): a pause before the next; the poll keeps the bound meanwhile
        Effect.catchAllCause(() => Effect.zipRight(wakeUp, Effect.sleep(Duration.seconds(1))))
      )
      yield* Effect.forkScoped(Effect.forever(subscription))
    }

    return Effect.suspend((): Effect.Effect<void, KeyStoreUnavailable> => {
      if (!answering) return Effect.fail(new KeyStoreUnavailable({ cause: "the database did not answer the last read of key changes" }))
      if (next === undefined) {
        next = Deferred.unsafeMake<void, KeyStoreUnavailable>(FiberId.none)
        Queue.unsafeOffer(wake, undefined)
      }
      return Deferred.await(next)
    })
  })
