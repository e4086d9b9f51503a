import { Schema } from "effect"

/**
 * The gateway's one error union. Every refusal and failure that can reach the wire is one of these;
 * exactly one renderer per envelope (src/http/Envelopes.ts) turns them into bytes.
 */

/** What kind of failure this is; each envelope maps a kind to its own type and status names. */
export const ErrorKind = Schema.Literal(
  "invalid_request", // 400
  "authentication", // 401
  "permission", // 403
  "not_found", // 404
  "method_not_allowed", // 405
  "request_timeout", // 408
  "payload_too_large", // 413
  "unsupported_media_type", // 415
  "rate_limited", // 429
  "internal", // 500
  "upstream", // 502 (or the upstream's 503)
  "unavailable", // 503
  "overloaded", // provider overload: 529 Messages, 503 elsewhere
  "timeout" // 504
)
export type ErrorKind = typeof ErrorKind.Type

/** The numbers of a context overflow, when the upstream gave them: the prompt's tokens and the model's maximum. */
export const Overflow = Schema.Struct({ tokens: Schema.optional(Schema.Number), maximum: Schema.optional(Schema.Number) })
export type Overflow = typeof Overflow.Type

/** A refusal or failure with an HTTP status, a machine code, the field concerned and a safe message. */
export class GatewayError extends Schema.TaggedError<GatewayError>()("GatewayError", {
  kind: ErrorKind,
  status: Schema.Number,
  code: Schema.String,
  message: Schema.String,
  param: Schema.optional(Schema.String),
  /** seconds, sent as Retry-After */
  retryAfter: Schema.optional(Schema.Number),
  /** the connection should be closed after answering (unread body) */
  closeConnection: Schema.optional(Schema.Boolean),
  /** methods the path allows (a 405's `Allow` header) */
  allow: Schema.optional(Schema.String),
  /** a refusal by a rate limit or budget: the limits as the rate-limit headers show them */
  rateLimit: Schema.optional(
    Schema.Struct({
      requests: Schema.optional(Schema.Struct({ limit: Schema.Number, remaining: Schema.Number, resetAt: Schema.Number })),
      tokens: Schema.optional(Schema.Struct({ limit: Schema.Number, remaining: Schema.Number, resetAt: Schema.Number }))
    })
  ),
  /** false: retrying will not help before `Retry-After` (a spent budget): sent as `x-should-retry`, which the official SDKs obey */
  shouldRetry: Schema.optional(Schema.Boolean),
  /** a context overflow (code `context_length_exceeded`): each envelope words it as its clients match it */
  overflow: Schema.optional(Overflow)
}) {}

/** A failure of the upstream provider. `retryable` failures before any output fall back to the next alias target. */
export class UpstreamError extends Schema.TaggedError<UpstreamError>()("UpstreamError", {
  reason: Schema.Literal("rate_limited", "overloaded", "unavailable", "server_error", "bad_request", "auth", "connection", "timeout", "bad_response"),
  /** status the upstream answered, when it answered */
  upstreamStatus: Schema.optional(Schema.Number),
  retryAfter: Schema.optional(Schema.Number),
  provider: Schema.String,
  /** safe message: never the provider's own text */
  message: Schema.String,
  /** a `bad_request` that is the upstream's context overflow (its numbers parsed, never its text) */
  overflow: Schema.optional(Overflow)
}) {
  get retryable(): boolean {
    return this.reason !== "bad_request" && this.reason !== "auth"
  }
}

export type AnyGatewayError = GatewayError | UpstreamError

const make = (kind: ErrorKind, status: number) =>
  (code: string, message: string, options?: { readonly param?: string; readonly retryAfter?: number; readonly closeConnection?: boolean; readonly allow?: string }) =>
    new GatewayError({ kind, status, code, message, ...options })

/** Constructors by kind. */
export const Errors = {
  invalidRequest: make("invalid_request", 400),
  authentication: make("authentication", 401),
  permission: make("permission", 403),
  notFound: make("not_found", 404),
  methodNotAllowed: make("method_not_allowed", 405),
  requestTimeout: make("request_timeout", 408),
  payloadTooLarge: make("payload_too_large", 413),
  unsupportedMediaType: make("unsupported_media_type", 415),
  rateLimited: make("rate_limited", 429),
  internal: make("internal", 500),
  upstream: make("upstream", 502),
  unavailable: make("unavailable", 503),
  timeout: make("timeout", 504),
  /** 503 `database_unavailable`: the shared database is not answering (`what` says which part of the gateway waits on it) */
  databaseUnavailable: (what: string, retryAfter = 1) =>
    new GatewayError({ kind: "unavailable", status: 503, code: "database_unavailable", message: `${what}: the gateway's database is not answering; retry shortly`, retryAfter })
} as const

/**
 * A prompt past the model's context window, as the gateway words it (the envelopes reword it for
 * their clients: Messages `prompt is too long: N tokens > M maximum`, Gemini's token-count form).
 */
export const contextOverflow = (overflow: Overflow): GatewayError =>
  new GatewayError({
    kind: "invalid_request",
    status: 400,
    code: "context_length_exceeded",
    message:
      overflow.maximum !== undefined && overflow.tokens !== undefined
        ? `This model's maximum context length is ${overflow.maximum} tokens. However, your messages resulted in ${overflow.tokens} tokens. Please reduce the length of the messages.`
        : overflow.maximum !== undefined
          ? `This model's maximum context length is ${overflow.maximum} tokens. Please reduce the length of the messages.`
          : "The input exceeds the context window of this model. Please reduce the length of the messages.",
    param: "messages",
    overflow
  })

/** The status and kind an upstream failure is answered with. */
export const upstreamToGateway = (e: UpstreamError): GatewayError => {
  const options = e.retryAfter !== undefined ? { retryAfter: e.retryAfter } : undefined
  switch (e.reason) {
    case "rate_limited":
      return Errors.rateLimited("rate_limit_exceeded", `provider ${e.provider} is rate limiting requests`, options)
    case "overloaded":
      return new GatewayError({ kind: "overloaded", status: 529, code: "provider_overloaded", message: `provider ${e.provider} is overloaded`, ...options })
    case "unavailable":
      return new GatewayError({ kind: "upstream", status: 503, code: "provider_unavailable", message: `provider ${e.provider} is unavailable`, ...options })
    case "timeout":
      return Errors.timeout("timeout", `provider ${e.provider} did not answer in time`)
    case "bad_request":
      if (e.overflow !== undefined) return contextOverflow(e.overflow)
      return Errors.invalidRequest("upstream_bad_request", `provider ${e.provider} refused the request${e.upstreamStatus ? ` (status ${e.upstreamStatus})` : ""}`)
    case "auth":
      return Errors.upstream("upstream_auth_failed", `provider ${e.provider} refused the gateway's credentials`)
    case "connection":
      return Errors.upstream("upstream_unreachable", `provider ${e.provider} could not be reached`)
    case "server_error":
      return Errors.upstream("upstream_error", `provider ${e.provider} failed${e.upstreamStatus ? ` (status ${e.upstreamStatus})` : ""}`)
    case "bad_response":
      return Errors.upstream("upstream_bad_response", `provider ${e.provider} sent a response the gateway could not read`)
  }
}

export const toGatewayError = (e: AnyGatewayError): GatewayError => (e._tag === "GatewayError" ? e : upstreamToGateway(e))
