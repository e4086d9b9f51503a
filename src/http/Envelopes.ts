import type { GatewayError, Overflow } from "../domain/Errors.js"

/**
 * The four error envelopes (spec section 7). Each renderer turns a GatewayError into the status
 * and body its family's clients expect; the route family, not the handler, picks the renderer.
 */

export type Family = "openai" | "messages" | "gemini" | "gateway"

export interface RenderedError {
  readonly status: number
  readonly contentType: string
  readonly body: string
}

/** OpenAI-shaped `type` for a status. */
const openAiType = (e: GatewayError): string => {
  if (e.kind === "overloaded" || e.status >= 500) return "server_error"
  if (e.kind === "authentication") return "authentication_error"
  if (e.kind === "permission") return "permission_error"
  // a spent budget is OpenAI's quota error: type and code `insufficient_quota`
  if (e.code === "insufficient_quota") return "insufficient_quota"
  if (e.kind === "rate_limited") return "rate_limit_error"
  return "invalid_request_error"
}

export const renderOpenAi = (e: GatewayError): RenderedError => {
  // provider overload is a 503 server_error with code provider_overloaded on this shape
  const status = e.kind === "overloaded" ? 503 : e.status
  return {
    status,
    contentType: "application/json",
    body: JSON.stringify({ error: { message: e.message, type: openAiType(e), param: e.param ?? null, code: e.code } })
  }
}

const messagesType = (status: number): string => {
  switch (status) {
    case 400:
    case 405:
    case 415:
      return "invalid_request_error"
    case 401:
      return "authentication_error"
    case 403:
      return "permission_error"
    case 404:
      return "not_found_error"
    case 413:
      return "request_too_large"
    case 429:
      return "rate_limit_error"
    case 504:
      return "timeout_error"
    case 529:
      return "overloaded_error"
    default:
      return "api_error"
  }
}

/** A context overflow in the words Claude Code matches to start its recovery (compaction). */
const messagesOverflow = (o: Overflow): string =>
  o.tokens !== undefined && o.maximum !== undefined ? `prompt is too long: ${o.tokens} tokens > ${o.maximum} maximum` : "prompt is too long"

export const renderMessages = (e: GatewayError): RenderedError => {
  const status = e.kind === "overloaded" ? 529 : e.status
  // the Messages error object has no code or param: the field is named in the message
  const message = e.overflow !== undefined ? messagesOverflow(e.overflow) : e.param !== undefined && !e.message.startsWith(e.param) && e.kind === "invalid_request" ? `${e.param}: ${e.message}` : e.message
  return {
    status,
    contentType: "application/json",
    body: JSON.stringify({ type: "error", error: { type: messagesType(status), message } })
  }
}

const geminiStatus = (status: number): string => {
  if (status === 401) return "UNAUTHENTICATED"
  if (status === 403) return "PERMISSION_DENIED"
  if (status === 404) return "NOT_FOUND"
  if (status === 429) return "RESOURCE_EXHAUSTED"
  if (status === 503) return "UNAVAILABLE"
  if (status === 504) return "DEADLINE_EXCEEDED"
  if (status >= 500) return "INTERNAL"
  return "INVALID_ARGUMENT"
}

/** A context overflow in the generate-content API's own form. */
const geminiOverflow = (o: Overflow): string =>
  o.tokens !== undefined && o.maximum !== undefined
    ? `The input token count (${o.tokens}) exceeds the maximum number of tokens allowed (${o.maximum}).`
    : o.maximum !== undefined
      ? `The input token count exceeds the maximum number of tokens allowed (${o.maximum}).`
      : "The input token count exceeds the maximum number of tokens allowed."

export const geminiErrorObject = (e: GatewayError): { readonly status: number; readonly error: Record<string, unknown> } => {
  const status = e.kind === "overloaded" ? 503 : e.status
  const error: Record<string, unknown> = { code: status, message: e.overflow !== undefined ? geminiOverflow(e.overflow) : e.message, status: geminiStatus(status) }
  if (e.param !== undefined && status === 400 && e.overflow === undefined) {
    error.details = [
      { "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [{ field: e.param, description: e.message }] }
    ]
  }
  return { status, error }
}

export const renderGemini = (e: GatewayError): RenderedError => {
  const { error, status } = geminiErrorObject(e)
  return { status, contentType: "application/json", body: JSON.stringify({ error }) }
}

const reasonPhrases: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  429: "Too Many Requests",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
  529: "Site Overloaded"
}

/** Codes of spec 7.1 that have an anchor in the error list. */
export const anchoredCodes: ReadonlySet<string> = new Set([
  "invalid_request_target", "invalid_host", "cross_origin_forbidden", "unsupported_media_type", "invalid_api_key",
  "admin_key_required", "not_found", "method_not_allowed", "invalid_date", "invalid_range", "range_too_long",
  "invalid_app", "invalid_user", "app_forbidden", "key_not_found", "config_key", "app_has_host_tools",
  "app_has_config_key", "not_ready", "body_read_timeout", "request_body_too_large", "server_busy",
  "body_budget_insufficient", "timeout", "database_unavailable", "invalid_expires_at", "rate_limit_exceeded",
  "insufficient_quota", "invalid_limits"
])

export const renderProblem = (e: GatewayError, instance: string, requestId: string): RenderedError => {
  const status = e.kind === "overloaded" ? 503 : e.status
  const body: Record<string, unknown> = {
    type: anchoredCodes.has(e.code) ? `/gateway/errors#${e.code}` : "about:blank",
    title: reasonPhrases[status] ?? "Error",
    status,
    detail: e.message,
    instance,
    code: e.code
  }
  if (e.param !== undefined) body.param = e.param
  body.requestId = requestId
  return { status, contentType: "application/problem+json", body: JSON.stringify(body) }
}

export const renderError = (family: Family, e: GatewayError, instance: string, requestId: string): RenderedError => {
  switch (family) {
    case "openai":
      return renderOpenAi(e)
    case "messages":
      return renderMessages(e)
    case "gemini":
      return renderGemini(e)
    case "gateway":
      return renderProblem(e, instance, requestId)
  }
}
