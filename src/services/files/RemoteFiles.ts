import { Context, Effect, Layer } from "effect"
import type { LookupAddress } from "node:dns"
import * as dns from "node:dns"
import * as net from "node:net"
import { Agent, request } from "undici"
import { Settings } from "../../Config.js"

/** A file fetched from a caller-given URL. */
export interface RemoteFile {
  readonly mediaType: string
  readonly bytes: Buffer
}

/** Why a remote file could not be used; the caller names the field. */
export type RemoteFileFailure = "not_allowed" | "unreachable" | "status" | "too_large" | "timeout"

/** Loopback, private, link-local, unique-local and unspecified addresses (SSRF targets). */
export const isPrivateAddress = (address: string): boolean => {
  if (net.isIPv4(address)) {
    const [a, b] = address.split(".").map(Number)
    return a === 0 || a === 10 || a === 127 || (a === 100 && b >= 64 && b <= 127) || (a === 169 && b === 254) || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)
  }
  const v6 = address.toLowerCase()
  if (v6.startsWith("::ffff:")) return isPrivateAddress(v6.slice(7))
  return v6 === "::" || v6 === "::1" || v6.startsWith("fc") || v6.startsWith("fd") || v6.startsWith("fe80")
}

class Refused extends Error {
  readonly code = "GATEWAY_ADDRESS_REFUSED"
}

/**
 * Fetches files named by URL in requests (Responses `input_file.file_url`). Private and loopback
 * addresses are refused at connect time (after DNS, so a name that resolves inside is refused
 * too) unless `remoteFiles.allowPrivateNetworks`; bodies are capped and timed out.
 */
export class RemoteFiles extends Context.Tag("gateway/RemoteFiles")<
  RemoteFiles,
  { readonly fetch: (url: string) => Effect.Effect<RemoteFile, RemoteFileFailure> }
>() {
  static readonly layer = Layer.scoped(
    RemoteFiles,
    Effect.gen(function* () {
      const options = (yield* Settings).remoteFiles
      const lookup = (hostname: string, opts: dns.LookupOptions, callback: (error: Error | null, address: string | Array<LookupAddress>, family?: number) => void) =>
        dns.lookup(hostname, { ...opts, all: true }, (error, addresses) => {
          if (error) return callback(error, "")
          const usable = options.allowPrivateNetworks ? addresses : addresses.filter((a) => !isPrivateAddress(a.address))
          if (usable.length === 0) return callback(new Refused("address refused"), "")
          return opts.all === true ? callback(null, usable) : callback(null, usable[0].address, usable[0].family)
        })
      const agent = yield* Effect.acquireRelease(
        Effect.sync(() => new Agent({ connect: { lookup }, headersTimeout: options.timeoutMs, bodyTimeout: options.timeoutMs })),
        (a) => Effect.promise(() => a.destroy())
      )
      const fetchFile = (url: string): Effect.Effect<RemoteFile, RemoteFileFailure> =>
        Effect.tryPromise({
          try: async (signal) => {
            const target = new URL(url)
            if (target.protocol !== "http:" && target.protocol !== "https:") throw new Refused("scheme")
            const host = target.hostname.replace(/^\[|\]$/g, "")
            if (net.isIP(host) !== 0 && !options.allowPrivateNetworks && isPrivateAddress(host)) throw new Refused("address")
            const response = await request(target, { method: "GET", dispatcher: agent, signal: AbortSignal.any([signal, AbortSignal.timeout(options.timeoutMs)]) })
            if (response.statusCode < 200 || response.statusCode >= 300) {
              await response.body.dump()
              throw Object.assign(new Error("status"), { code: "GATEWAY_STATUS" })
            }
            const chunks: Array<Buffer> = []
            let size = 0
            for await (const chunk of response.body) {
              size += (chunk as Buffer).length
              if (size > options.maxBytes) {
                response.body.destroy()
                throw Object.assign(new Error("too large"), { code: "GATEWAY_TOO_LARGE" })
              }
              chunks.push(chunk as Buffer)
            }
            const type = response.headers["content-type"]
            return { mediaType: (typeof type === "string" ? type.split(";")[0].trim().toLowerCase() : "") || "application/octet-stream", bytes: Buffer.concat(chunks, size) }
          },
          catch: (error): RemoteFileFailure => {
            const code = typeof error === "object" && error !== null && "code" in error ? String((error as { code: unknown }).code) : ""
            const cause = typeof error === "object" && error !== null && "cause" in error ? (error as { cause: unknown }).cause : undefined
            if (error instanceof Refused || cause instanceof Refused) return "not_allowed"
            if (code === "GATEWAY_STATUS") return "status"
            if (code === "GATEWAY_TOO_LARGE") return "too_large"
            if (error instanceof Error && error.name === "TimeoutError") return "timeout"
            if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return "timeout"
            return "unreachable"
          }
        })
      return RemoteFiles.of({ fetch: fetchFile })
    })
  )
}
