import { Context, Layer, Option, Redacted } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import type { GatewayConfig } from "../Config.js"

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
}

const digest = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest()

/** True for addresses only this machine can reach. */
export const isLoopbackHost = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/**
 * API keys. Keys are held only as SHA-256 digests: a presented key is hashed, looked up by digest
 * and compared in constant time, so timing reveals neither its length nor a matching prefix.
 */
export class KeyStore extends Context.Tag("gateway/KeyStore")<
  KeyStore,
  {
    /** the principal for a presented key, if it is one */
    readonly authenticate: (key: string) => Option.Option<Principal>
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
  }
>() {
  static readonly make = (config: GatewayConfig) => {
    const byDigest = new Map<string, StoredKey>()
    for (const entry of config.keys) {
      const d = digest(Redacted.value(entry.key))
      byDigest.set(d.toString("hex"), { digest: d, principal: { app: entry.app, keyId: `key_${d.toString("hex", 0, 8)}`, source: "config" } })
    }
    const admin = config.adminKey === undefined ? undefined : digest(Redacted.value(config.adminKey))
    const keyless = config.keys.length === 0 && isLoopbackHost(config.listen.host)
    const configApps = new Set(config.keys.map((k) => k.app))
    const appList: ReadonlyArray<string> = keyless ? ["default"] : [...configApps]

    const authenticate = (key: string): Option.Option<Principal> => {
      const d = digest(key)
      const found = byDigest.get(d.toString("hex"))
      return found !== undefined && timingSafeEqual(found.digest, d) ? Option.some(found.principal) : Option.none()
    }

    return KeyStore.of({
      authenticate,
      isAdmin: (key) => admin !== undefined && timingSafeEqual(admin, digest(key)),
      hasAdmin: admin !== undefined,
      keyless,
      configApps,
      apps: () => appList
    })
  }

  static readonly layer = (config: GatewayConfig) => Layer.sync(KeyStore, () => KeyStore.make(config))
}
