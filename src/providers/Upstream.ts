import { type Overflow, UpstreamError } from "../domain/Errors.js"
import { Effect } from "effect"
import type { TransportFailure, UpstreamResponse, WholeResponse } from "./HttpUpstream.js"
import { parseJsonText } from "../domain/JsonDepth.js"

/** What every HTTP provider reads the same way: retry hints, statuses, transport failures, JSON. */

export const overloadText = /overload/i

/** `Retry-After` in seconds (a number of seconds or an HTTP date). */
export const retryAfterOf = (response: Pick<UpstreamResponse, "headers">): number | undefined => {
  const value = response.headers["retry-after"]
  if (typeof value !== "string") return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return Math.ceil(seconds)
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000))
}

const count = (text: string | undefined): number | undefined => {
  if (text === undefined) return undefined
  const n = Number(text.replace(/,/g, ""))
  return Number.isSafeInteger(n) && n > 0 ? n : undefined
}

/**
 * The numbers of a context-overflow refusal in an upstream's error text, or undefined when the text
 * is not one: the Messages API's `prompt is too long: N tokens > M maximum`, chat completions' and
 * Responses' `context_length_exceeded` (`maximum context length is M tokens ... resulted in N
 * tokens`), generate-content's `The input token count (N) exceeds the maximum number of tokens
 * allowed (M)`. Only numbers are kept: the provider's text never reaches a client.
 */
export const overflowOf = (text: string): Overflow | undefined => {
  let m = /prompt is too long:\s*([\d,]+)\s*tokens\s*>\s*([\d,]+)\s*maximum/i.exec(text)
  if (m !== null) return withNumbers(count(m[1]), count(m[2]))
  if (/prompt is too long/i.test(text)) return {}
  m = /input token count(?: \()?\s*([\d,]+)\)?\s*exceeds the maximum number of tokens allowed(?: \()?\s*([\d,]+)?/i.exec(text)
  if (m !== null) return withNumbers(count(m[1]), count(m[2]))
  if (/context_length_exceeded|maximum context length|exceeds the context window|context window exceeded|exceeds the maximum number of tokens/i.test(text)) {
    const maximum = /maximum context length is\s*([\d,]+)/i.exec(text)
    const tokens = /(?:resulted in|you requested)\s*([\d,]+)\s*tokens/i.exec(text)
    return withNumbers(count(tokens?.[1]), count(maximum?.[1]))
  }
  return undefined
}

const withNumbers = (tokens: number | undefined, maximum: number | undefined): Overflow => ({
  ...(tokens !== undefined ? { tokens } : {}),
  ...(maximum !== undefined ? { maximum } : {})
})

/** Map an upstream HTTP status (and its body text, read only to spot overload) to a typed error. */
export const statusError = (provider: string, status: number, bodyText: string, retryAfter: number | undefined): UpstreamError => {
  const base = { provider, upstreamStatus: status, ...(retryAfter !== undefined ? { retryAfter } : {}) }
  if (status === 429) return new UpstreamError({ ...base, reason: overloadText.test(bodyText) ? "overloaded" : "rate_limited", message: "rate limited" })
  if (status === 529 || (status >= 500 && overloadText.test(bodyText))) return new UpstreamError({ ...base, reason: "overloaded", message: "overloaded" })
  if (status === 503) return new UpstreamError({ ...base, reason: "unavailable", message: "unavailable" })
  if (status === 408 || status === 504) return new UpstreamError({ ...base, reason: "timeout", message: "timeout" })
  if (status >= 500) return new UpstreamError({ ...base, reason: "server_error", message: "server error" })
  if (status === 401 || status === 403) return new UpstreamError({ ...base, reason: "auth", message: "credentials refused" })
  const overflow = status === 400 || status === 413 ? overflowOf(bodyText) : undefined
  if (overflow !== undefined) return new UpstreamError({ ...base, reason: "bad_request", message: "context window exceeded", overflow })
  return new UpstreamError({ ...base, reason: "bad_request", message: "request refused" })
}

/** A failure before an HTTP answer could be read; the message is the gateway's own. */
export const transportError = (provider: string) => (failure: TransportFailure) =>
  new UpstreamError({
    provider,
    reason: failure === "timeout" ? "timeout" : "connection",
    message: failure === "timeout" ? "no answer in time" : failure === "body" ? "the connection broke during the answer" : "the provider could not be reached"
  })

/** JSON text as a value, or undefined when it is not JSON. */
export const parseJson = (text: string): unknown => {
  try {
    return parseJsonText(text)
  } catch {
    return undefined
  }
}

/**
 * The body text of a non-streamed answer (`HttpUpstream.postWhole`): a transport failure as the
 * provider's error, an error status as `onStatus` reads it from the body.
 */
export const wholeText = (
  provider: string,
  whole: Effect.Effect<WholeResponse, TransportFailure>,
  onStatus: (status: number, headers: UpstreamResponse["headers"], text: string) => UpstreamError
): Effect.Effect<string, UpstreamError> =>
  Effect.flatMap(Effect.mapError(whole, transportError(provider)), (answer) =>
    answer.status >= 200 && answer.status < 300 ? Effect.succeed(answer.text) : Effect.fail(onStatus(answer.status, answer.headers, answer.text))
  )
