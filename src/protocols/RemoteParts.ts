import { Effect } from "effect"
import { Settings } from "../Config.js"
import type { UserPart } from "../domain/Canonical.js"
import { RemoteFiles } from "../services/files/RemoteFiles.js"

/**
 * Files named by URL in a request (Responses `input_file.file_url`, Gemini `fileData.fileUri`),
 * fetched by the gateway under the `remoteFiles` rules (private addresses refused at connect time,
 * size cap, timeout) before the conversation is built, and delivered as model parts.
 */

/** A file named by URL: the part it became, or why it could not be used (the caller names the field). */
export type RemotePart = { readonly _tag: "fetched"; readonly part: UserPart } | { readonly _tag: "failed"; readonly why: string }

/** The image type of a file from its first bytes (PNG, JPEG, GIF, WebP), whatever the server declared. */
export const imageTypeOf = (bytes: Uint8Array): string | undefined => {
  if (bytes.length >= 8 && bytes[0] === 0x89 && bytes[1] === 0x50 && bytes[2] === 0x4e && bytes[3] === 0x47) return "image/png"
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "image/jpeg"
  if (bytes.length >= 6 && bytes[0] === 0x47 && bytes[1] === 0x49 && bytes[2] === 0x46 && bytes[3] === 0x38) return "image/gif"
  if (bytes.length >= 12 && Buffer.from(bytes.subarray(0, 4)).toString("latin1") === "RIFF" && Buffer.from(bytes.subarray(8, 12)).toString("latin1") === "WEBP") return "image/webp"
  return undefined
}

/**
 * A fetcher of remote parts: a PDF becomes a file part, UTF-8 text (declared text or JSON) a text
 * part, and, when `images` is set, a PNG/JPEG/GIF/WebP image an image part (as a data URL, so the
 * provider never fetches a caller-given URL itself).
 */
export const makeRemoteParts = Effect.gen(function* () {
  const config = yield* Settings
  const remoteFiles = yield* RemoteFiles
  return (url: string, options: { readonly images: boolean }): Effect.Effect<RemotePart> => {
    if (!config.remoteFiles.enabled) return Effect.succeed({ _tag: "failed", why: "fetching files by URL is switched off on this gateway" })
    return remoteFiles.fetch(url).pipe(
      Effect.map((file): RemotePart => {
        if (file.bytes.subarray(0, 5).toString("latin1") === "%PDF-") {
          return { _tag: "fetched", part: { type: "file", mediaType: "application/pdf", data: `data:application/pdf;base64,${file.bytes.toString("base64")}` } }
        }
        const image = options.images ? imageTypeOf(file.bytes) : undefined
        if (image !== undefined) return { _tag: "fetched", part: { type: "image", url: `data:${image};base64,${file.bytes.toString("base64")}`, mediaType: image } }
        const textual = file.mediaType.startsWith("text/") || file.mediaType === "application/json"
        const text = file.bytes.toString("utf8")
        if (textual && !text.includes("\u0000") && !text.includes("\uFFFD")) return { _tag: "fetched", part: { type: "text", text } }
        return { _tag: "failed", why: options.images ? "the file is not a PNG, JPEG, GIF or WebP image, a PDF or UTF-8 text" : "the file is neither a PDF nor UTF-8 text" }
      }),
      Effect.catchAll((failure) =>
        Effect.succeed<RemotePart>({
          _tag: "failed",
          why: {
            not_allowed: "the URL's address is not allowed (loopback and private networks are refused)",
            unreachable: "the file could not be fetched",
            status: "the file's server did not answer 2xx",
            too_large: `the file is larger than ${config.remoteFiles.maxBytes} bytes`,
            timeout: "the file's server did not answer in time"
          }[failure]
        })
      )
    )
  }
})

/**
 * Fetch every remote URL of a request, four at a time, as a map from URL to part. Most requests
 * have none: then no fibers are forked (a concurrent forEach forks even for an empty list).
 */
export const fetchEach = <E, R>(
  urls: ReadonlyArray<string>,
  fetch: (url: string) => Effect.Effect<RemotePart, E, R>
): Effect.Effect<ReadonlyMap<string, RemotePart>, E, R> =>
  urls.length === 0
    ? Effect.succeed(new Map())
    : Effect.map(Effect.forEach(urls, (url) => Effect.map(fetch(url), (part) => [url, part] as const), { concurrency: 4 }), (pairs) => new Map(pairs))
