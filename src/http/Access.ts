import { Option } from "effect"
import { Errors, type GatewayError } from "../domain/Errors.js"
import { isLoopbackHost, type KeyStore, type Principal } from "../services/keys/KeyStore.js"
import type { Family } from "./Envelopes.js"
import type { Headers } from "./Route.js"

/**
 * Who may ask what of this listener: the Host values that name it, the keys each family reads, and
 * the Origin rule of a keyless gateway (spec section 5). Pure parts of the edge.
 */

const bearer = (value: string | undefined): string | undefined => {
  if (value === undefined) return undefined
  const match = /^Bearer\s+(.+)$/i.exec(value.trim())
  return match === null ? undefined : match[1].trim()
}

/** The candidate keys a family reads, in the order they are tried (spec section 5). */
export const presentedKeys = (family: Family, headers: Headers, query: URLSearchParams): Array<string> => {
  const keys: Array<string> = []
  const push = (k: string | undefined | null) => {
    if (k !== undefined && k !== null && k !== "" && !keys.includes(k)) keys.push(k)
  }
  push(bearer(headers["authorization"]))
  if (family === "messages") push(headers["x-api-key"])
  if (family === "gemini") {
    push(headers["x-genai-api-key"])
    push(headers["x-goog-api-key"])
    push(query.get("key"))
  }
  return keys
}

const isWildcard = (host: string) => host === "0.0.0.0" || host === "::" || host === "[::]" || host === ""

/** The Host values that name this listener (DNS-rebinding protection); undefined on a wildcard listener. */
export const allowedHosts = (listenHost: string, port: number, extra: ReadonlyArray<string>): ReadonlySet<string> | undefined => {
  if (isWildcard(listenHost)) return undefined
  const names = new Set<string>([listenHost.includes(":") && !listenHost.startsWith("[") ? `[${listenHost}]` : listenHost])
  if (isLoopbackHost(listenHost)) for (const n of ["localhost", "127.0.0.1", "[::1]"]) names.add(n)
  const hosts = new Set<string>()
  for (const name of names) {
    hosts.add(`${name}:${port}`.toLowerCase())
    if (port === 80) hosts.add(name.toLowerCase())
  }
  for (const h of extra) hosts.add(h.toLowerCase())
  return hosts
}

/** An absolute-form request target (`http://host/path?q`) as its origin form (`/path?q`). */
export const absoluteToOrigin = (target: string): string => {
  if (target.startsWith("/")) return target
  const match = /^https?:\/\/[^/?#]*([^#]*)/i.exec(target)
  if (match === null) return target
  return match[1] === "" ? "/" : match[1].startsWith("/") ? match[1] : `/${match[1]}`
}

const sameOrigin = (origin: string, host: string | undefined): boolean => {
  if (host === undefined) return false
  const o = origin.toLowerCase()
  const h = host.toLowerCase()
  return o === `http://${h}` || o === `https://${h}`
}

export const noPrincipal: Principal = { app: "default", keyId: "none", source: "none" }

/**
 * What the edge settled about the caller before routing: the principal, whether any key was
 * presented, and the refusal when there is one. A refusal is kept rather than answered at once so
 * that the route decides what it needs: every key route answers it, a resumable upload chunk with
 * no key at all runs as nobody (its upload URL is the credential), and a path no route serves
 * answers it too (an unauthenticated caller learns nothing of the route table).
 */
export interface Caller {
  readonly principal: Principal
  readonly keyPresented: boolean
  readonly refused?: GatewayError
  /** the refusal is only that no key was presented */
  readonly keyMissing?: boolean
}

const refused = (keyPresented: boolean, error: GatewayError): Caller => ({ principal: noPrincipal, keyPresented, refused: error })

/** The caller of a request to a family's mount, without a database look-up; `lookup` when one is needed. */
export type Settled = Caller | { readonly lookup: ReadonlyArray<string> }

export const settleCaller = (keys: KeyStore["Type"], family: Family, headers: Headers, query: URLSearchParams): Settled => {
  if (family === "gateway") return { principal: noPrincipal, keyPresented: false }
  if (keys.keyless) {
    const origin = headers["origin"]
    if (origin !== undefined && !sameOrigin(origin, headers["host"])) {
      return refused(false, Errors.permission("cross_origin_forbidden", "Browser requests from another origin are refused on a gateway that needs no key"))
    }
    return { principal: noPrincipal, keyPresented: false }
  }
  const candidates = presentedKeys(family, headers, query)
  if (candidates.length === 0) return { ...refused(false, Errors.authentication("invalid_api_key", "Missing API key")), keyMissing: true }
  // Gemini reads the first key present; Messages tries x-api-key when the bearer is not a key
  const tried = family === "gemini" ? candidates.slice(0, 1) : candidates
  for (const key of tried) {
    const found = keys.authenticate(key)
    if (Option.isSome(found)) return { principal: found.value, keyPresented: true }
  }
  if (!keys.shared) return refused(true, Errors.authentication("invalid_api_key", "Invalid API key"))
  // perhaps a key made on another replica a moment ago: asked of the database's key changes
  return { lookup: tried }
}

/** The caller after the database's answer to a look-up. */
export const lookedUp = (found: Option.Option<Principal>): Caller =>
  Option.isSome(found) ? { principal: found.value, keyPresented: true } : refused(true, Errors.authentication("invalid_api_key", "Invalid API key"))
