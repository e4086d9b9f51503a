/** Data URLs as the native upstreams take them: a media type and a base64 payload. */

export interface DataUrl {
  readonly mediaType: string
  /** base64 payload */
  readonly data: string
}

/** Split a `data:` URL into its media type and base64 payload (non-base64 payloads are encoded). */
export const parseDataUrl = (url: string): DataUrl | undefined => {
  const match = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/s.exec(url)
  if (match === null) return undefined
  const mediaType = match[1] || "text/plain"
  const isBase64 = match[2].split(";").some((p) => p.toLowerCase() === "base64")
  if (isBase64) return { mediaType, data: match[3] }
  let decoded: string
  try {
    decoded = decodeURIComponent(match[3])
  } catch {
    decoded = match[3]
  }
  return { mediaType, data: Buffer.from(decoded, "utf8").toString("base64") }
}
